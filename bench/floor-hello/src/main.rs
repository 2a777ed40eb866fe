//! The floor of cold start (`make bench`): a Lambda function that answers every event with a
//! fixed API Gateway response, on the same runtime crate and release profile as the service's
//! functions. Built by the benchmark beside them, never deployed.

use lambda_http::lambda_runtime::{self, Error, LambdaEvent, service_fn};
use serde_json::{Value, json};

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::run(service_fn(|_event: LambdaEvent<Value>| async {
        Ok::<_, Error>(json!({"statusCode": 200, "body": "hello"}))
    }))
    .await
}
