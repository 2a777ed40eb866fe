//! Secrets read from SSM Parameter Store (SecureString) as a function reads them in AWS
//! (`domain::secrets`: one signed `GetParameter`), against moto's SSM on the tests' moto server.

use domain::secrets::{LazySecret, Secret, ssm};
use serde_json::json;

/// The SDK's configuration from the environment, every service at the tests' moto.
async fn sdk() -> aws_config::SdkConfig {
    let moto = std::env::var("AWS_ENDPOINT_URL_DYNAMODB").expect("make test starts moto");
    aws_config::defaults(aws_config::BehaviorVersion::latest())
        .endpoint_url(moto)
        .load()
        .await
}

async fn put(sdk: &aws_config::SdkConfig, name: &str, value: &str) {
    let body = json!({ "Name": name, "Value": value, "Type": "SecureString", "Overwrite": true });
    ssm("PutParameter", &body, sdk).await.unwrap();
}

#[tokio::test]
async fn a_secret_parameter_is_read_decrypted_once_per_instance() {
    let sdk = sdk().await;
    let name = format!("/cloud-api/test/{}/token", std::process::id());
    put(&sdk, &name, " upstream-token \n").await;
    let secret = LazySecret::parameter(&name, &sdk);
    assert_eq!(
        secret.get().await.map(Secret::expose),
        Some("upstream-token")
    );
    // The instance keeps what it read: a rotation is seen by the next instance.
    put(&sdk, &name, "rotated").await;
    assert_eq!(
        secret.get().await.map(Secret::expose),
        Some("upstream-token")
    );
    let fresh = LazySecret::parameter(&name, &sdk);
    assert_eq!(fresh.get().await.map(Secret::expose), Some("rotated"));
}

#[tokio::test]
async fn a_missing_or_empty_parameter_leaves_the_secret_unset_and_names_why() {
    let sdk = sdk().await;
    let missing = format!("/cloud-api/test/{}/missing", std::process::id());
    assert!(LazySecret::parameter(&missing, &sdk).get().await.is_none());
    let error = ssm("GetParameter", &json!({ "Name": missing }), &sdk)
        .await
        .unwrap_err();
    assert!(
        error.contains("400") && error.contains("ParameterNotFound"),
        "{error}"
    );
    let empty = format!("/cloud-api/test/{}/empty", std::process::id());
    put(&sdk, &empty, " ").await;
    assert!(LazySecret::parameter(&empty, &sdk).get().await.is_none());
}
