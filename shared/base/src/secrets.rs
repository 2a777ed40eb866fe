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
    let ssm = aws_sdk_ssm::Client::new(sdk);
    match ssm
        .get_parameter()
        .name(name)
        .with_decryption(true)
        .send()
        .await
    {
        Ok(out) => out
            .parameter
            .and_then(|p| p.value)
            .filter(|v| !v.trim().is_empty())
            .map(|v| Secret::new(v.trim())),
        Err(err) => {
            tracing::error!(
                parameter = name,
                error = %aws_sdk_ssm::error::DisplayErrorContext(&err),
                "cannot read a secret parameter; the feature that needs it stays off"
            );
            None
        }
    }
}
