//! The SDK floor of cold start (`make bench`): the hello-world function of `floor-hello` plus
//! what any function of a DynamoDB-backed service builds at cold start —
//! `aws_config::load_from_env` and a DynamoDB client — and nothing else. Each of the service's
//! functions is held to at most this floor's init time. Built by the benchmark, never deployed.

use lambda_http::lambda_runtime::{self, Error, LambdaEvent, service_fn};
use serde_json::{Value, json};

#[tokio::main]
async fn main() -> Result<(), Error> {
    let sdk = aws_config::load_from_env().await;
    let client: &'static aws_sdk_dynamodb::Client =
        Box::leak(Box::new(aws_sdk_dynamodb::Client::new(&sdk)));
    lambda_runtime::run(service_fn(move |_event: LambdaEvent<Value>| async move {
        let _kept = client;
        Ok::<_, Error>(json!({"statusCode": 200, "body": "hello"}))
    }))
    .await
}
