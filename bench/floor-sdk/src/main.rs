//! The SDK floor of cold start (`make bench`): the hello-world function of `floor-hello` plus
//! what any function of a DynamoDB-backed service builds at cold start —
//! the SDK's configuration from the environment and a DynamoDB client — and nothing else. Each of
//! the service's functions is held to at most this floor's init time. Built by the benchmark,
//! never deployed. Its HTTP client is the one the SDK's `default-https-client` feature makes
//! (hyper, rustls, the system's roots), with ring's cryptography as the service's: no crate of
//! the workspace builds aws-lc (see the workspace's Cargo.toml).

use lambda_http::lambda_runtime::{self, Error, LambdaEvent, service_fn};
use serde_json::{Value, json};

#[tokio::main]
async fn main() -> Result<(), Error> {
    use aws_smithy_http_client::tls::{Provider, rustls_provider::CryptoMode};
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(Provider::Rustls(CryptoMode::Ring))
        .build_https();
    let sdk = aws_config::from_env().http_client(http).load().await;
    let client: &'static aws_sdk_dynamodb::Client =
        Box::leak(Box::new(aws_sdk_dynamodb::Client::new(&sdk)));
    lambda_runtime::run(service_fn(move |_event: LambdaEvent<Value>| async move {
        let _kept = client;
        Ok::<_, Error>(json!({"statusCode": 200, "body": "hello"}))
    }))
    .await
}
