//! Secrets a function reads when it first needs them, not at cold start (the cold-start issue,
//! point 1): the provider's token (`UPSTREAM_TOKEN_PARAM`) and Coinbase CDP's key secret
//! (`CDP_API_KEY_SECRET_PARAM`) live in SSM Parameter Store (SecureString) in AWS and are read
//! once per warm instance on the first call that uses them — a function that never calls the
//! provider or the facilitator never builds an SSM client.

use std::sync::Arc;

use tokio::sync::OnceCell;

/// A secret string (the upstream token) whose `Debug` and `Display` never show the value.
#[derive(Clone)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }
    /// The value itself, for the one place that must send it (the `Authorization` header).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// Where a [`LazySecret`] comes from.
enum Source {
    /// Known at cold start (an environment variable: local development, tests).
    Known(Secret),
    /// An SSM parameter, read with decryption on first use with the function's AWS
    /// configuration.
    Parameter {
        name: String,
        sdk: Box<aws_config::SdkConfig>,
    },
}

/// A secret read on first use and kept for the life of the instance; cheap to clone (shared).
#[derive(Clone)]
pub struct LazySecret(Arc<(Source, OnceCell<Option<Secret>>)>);

impl std::fmt::Debug for LazySecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0.0 {
            Source::Known(_) => f.write_str("LazySecret(known, ***)"),
            Source::Parameter { name, .. } => write!(f, "LazySecret(parameter {name})"),
        }
    }
}

impl From<Secret> for LazySecret {
    fn from(secret: Secret) -> Self {
        LazySecret(Arc::new((Source::Known(secret), OnceCell::new())))
    }
}

impl LazySecret {
    /// The SecureString parameter `name`, read with `sdk`'s region and credentials when first
    /// asked for.
    pub fn parameter(name: &str, sdk: &aws_config::SdkConfig) -> Self {
        let source = Source::Parameter {
            name: name.to_owned(),
            sdk: Box::new(sdk.clone()),
        };
        LazySecret(Arc::new((source, OnceCell::new())))
    }

    /// The secret: known, or read now (once; concurrent callers wait for the one read).
    /// `None` (logged) when the parameter is missing, empty or cannot be read; a later call
    /// does not read again (the instance keeps its answer, as it kept a cold start's).
    pub async fn get(&self) -> Option<&Secret> {
        let (source, cell) = &*self.0;
        match source {
            Source::Known(secret) => Some(secret),
            // Boxed: the SDK's request future is large, and every provider call awaits this.
            Source::Parameter { name, sdk } => cell
                .get_or_init(|| Box::pin(read_parameter(name, sdk)))
                .await
                .as_ref(),
        }
    }
}

/// Reads an SSM parameter with decryption; `None` (logged) when it is missing, empty or cannot be
/// read.
async fn read_parameter(name: &str, sdk: &aws_config::SdkConfig) -> Option<Secret> {
    match get_parameter(name, sdk).await {
        Ok(value) => Some(value)
            .filter(|v| !v.trim().is_empty())
            .map(|v| Secret::new(v.trim())),
        Err(error) => {
            tracing::error!(
                parameter = name,
                %error,
                "cannot read a secret parameter; the feature that needs it stays off"
            );
            None
        }
    }
}

/// The longest one SSM call may take.
const SSM_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// SSM's `GetParameter` with `WithDecryption`: the parameter's value.
///
/// Errors: as [`ssm`]'s, and an answer without `Parameter.Value`.
async fn get_parameter(name: &str, sdk: &aws_config::SdkConfig) -> Result<String, String> {
    let body = serde_json::json!({ "Name": name, "WithDecryption": true });
    let answer = ssm("GetParameter", &body, sdk).await?;
    answer["Parameter"]["Value"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| format!("SSM answered no Parameter.Value: {answer}"))
}

/// One call of SSM's API (`action`: `GetParameter`, `PutParameter`, …; `body`: its request's
/// JSON, <https://docs.aws.amazon.com/systems-manager/latest/APIReference/>): its answer's JSON.
///
/// SSM's JSON 1.1 protocol (`POST /`, `X-Amz-Target: AmazonSSM.<action>`), signed with SigV4 by
/// the SDK's own signer (`aws-sigv4`) with the credentials and region of `sdk`, sent by the
/// outbound client ([`crate::outbound::client`]) within 5 s. Secrets make one call per warm
/// instance; the SSM SDK crate took 108 s of a cold build's CPU for it. The endpoint is
/// `sdk`'s (`AWS_ENDPOINT_URL`), else `https://ssm.<region>.amazonaws.com` (the `aws`
/// partition's).
///
/// Errors: no region or credentials, the call failed or timed out, or SSM's own error: its
/// status, `__type` and message (`ParameterNotFound`, `AccessDeniedException`, …).
pub async fn ssm(
    action: &str,
    body: &serde_json::Value,
    sdk: &aws_config::SdkConfig,
) -> Result<serde_json::Value, String> {
    use aws_credential_types::provider::ProvideCredentials;
    use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
    let region = sdk.region().ok_or("no AWS region")?.to_string();
    let credentials = sdk
        .credentials_provider()
        .ok_or("no AWS credentials provider")?
        .provide_credentials()
        .await
        .map_err(|e| format!("no AWS credentials: {e}"))?;
    let endpoint = sdk.endpoint_url().map_or_else(
        || format!("https://ssm.{region}.amazonaws.com"),
        str::to_owned,
    );
    let url = format!("{}/", endpoint.trim_end_matches('/'));
    let body = serde_json::to_vec(body).map_err(|e| e.to_string())?;
    let target = format!("AmazonSSM.{action}");
    let headers = [
        ("content-type", "application/x-amz-json-1.1"),
        ("x-amz-target", target.as_str()),
    ];
    let identity = credentials.into();
    let params = aws_sigv4::sign::v4::SigningParams::builder()
        .identity(&identity)
        .region(&region)
        .name("ssm")
        .time(std::time::SystemTime::now())
        .settings(SigningSettings::default())
        .build()
        .map_err(|e| e.to_string())?
        .into();
    let signable = SignableRequest::new(
        "POST",
        &url,
        headers.into_iter(),
        SignableBody::Bytes(&body),
    )
    .map_err(|e| e.to_string())?;
    let (instructions, _) = sign(signable, &params)
        .map_err(|e| e.to_string())?
        .into_parts();
    let mut request = crate::outbound::client()?.post(&url).timeout(SSM_TIMEOUT);
    for (header, value) in headers.into_iter().chain(instructions.headers()) {
        request = request.header(header, value);
    }
    let answer = crate::outbound::send(request.body(body))
        .await
        .map_err(|e| e.to_string())?;
    let status = answer.status();
    let json: serde_json::Value = answer.json().await.map_err(|e| e.to_string())?;
    if status.is_success() {
        return Ok(json);
    }
    Err(format!(
        "SSM answered {status}: {} {}",
        json["__type"].as_str().unwrap_or("(no type)"),
        json["message"]
            .as_str()
            .or(json["Message"].as_str())
            .unwrap_or("")
    ))
}
