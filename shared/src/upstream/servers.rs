//! Servers: list, get, create, actions, delete (`reference/upstream-cherry-api.md` §7–8).

use std::collections::BTreeMap;

use reqwest::Method;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Client, UpstreamError};

/// The body of `POST /projects/{id}/servers` (§7.2). Optional fields are left out when unset.
#[derive(Debug, Clone, Serialize)]
pub struct CreateServer {
    /// Plan slug.
    pub plan: String,
    /// Region slug.
    pub region: String,
    /// Image slug; the provider picks a default when absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Hostname; the provider generates one when absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// SSH key ids of the provider account.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ssh_keys: Vec<u64>,
    /// Base64 cloud-init or shell script.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user_data: Option<String>,
    /// String tags.
    pub tags: BTreeMap<String, String>,
    /// Always `false`: on-demand servers only.
    pub spot_market: bool,
    /// Billing cycle slug, `hourly`.
    pub cycle: String,
}

/// One action of `POST /servers/{id}/actions` (§8), in the hyphenated spelling the provider's
/// documentation and Python SDK use.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum ServerAction {
    /// Reboot.
    Reboot,
    /// Power on.
    PowerOn,
    /// Power off.
    PowerOff,
    /// Reinstall the OS (destroys data).
    Rebuild {
        /// Image slug.
        image: String,
        /// Hostname.
        hostname: String,
        /// Root password (provider's password rules).
        password: String,
        /// SSH key ids.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        ssh_keys: Vec<u64>,
        /// Base64 user data.
        #[serde(skip_serializing_if = "Option::is_none")]
        user_data: Option<String>,
    },
    /// Boot the rescue system (bare metal only) with this password.
    EnterRescueMode {
        /// Rescue password (provider's password rules).
        password: String,
    },
    /// Leave the rescue system.
    ExitRescueMode,
}

/// The fields of a provider server object that the service reads; the object itself is passed
/// on whole.
#[derive(Debug, Clone, Deserialize)]
pub struct ServerView {
    /// Server id.
    pub id: u64,
    /// Hostname.
    #[serde(default)]
    pub hostname: Option<String>,
    /// Deployment status: `deploying`, `deployed`, `rescue mode`, `failed deployment`, …
    #[serde(default)]
    pub status: Option<String>,
    /// Coarse lifecycle state: `pending`, `provisioning`, `active`, `terminating`, …
    #[serde(default)]
    pub state: Option<String>,
}

impl ServerView {
    /// Reads the fields of a server object; a decode error when `id` is missing.
    pub fn of(server: &Value) -> Result<Self, UpstreamError> {
        serde_json::from_value(server.clone()).map_err(|e| UpstreamError::Decode(e.to_string()))
    }
}

impl Client {
    /// `GET /projects/{project}/servers`: every server of the project (all owners).
    pub async fn servers(&self, project: u64) -> Result<Vec<Value>, UpstreamError> {
        self.get(&format!("/projects/{project}/servers")).await
    }

    /// One `GET /projects/{project}/servers`, not retried (the caller keeps to its deadline),
    /// and the server whose tag `tag` equals `value`, if any: how a create whose answer was lost
    /// is found again (`reference/upstream-cherry-api.md` §1, "a lost create response").
    pub async fn find_tagged(
        &self,
        project: u64,
        tag: &str,
        value: &str,
    ) -> Result<Option<Value>, UpstreamError> {
        let servers: Vec<Value> = super::decode(
            self.send(Method::GET, &format!("/projects/{project}/servers"), None)
                .await?,
        )?;
        Ok(servers
            .into_iter()
            .find(|s| s["tags"][tag].as_str() == Some(value)))
    }

    /// `GET /servers/{id}?fields=power`: `on` or `off` (the full object does not say; reference
    /// §7.5).
    pub async fn power(&self, id: u64) -> Result<String, UpstreamError> {
        let answer: Value = self.get(&format!("/servers/{id}?fields=power")).await?;
        answer["power"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| UpstreamError::Decode(format!("server {id}: no `power` field")))
    }

    /// `GET /servers/{id}`: one server (404 when unknown or removed).
    pub async fn server(&self, id: u64) -> Result<Value, UpstreamError> {
        self.get(&format!("/servers/{id}")).await
    }

    /// `POST /projects/{project}/servers`: provisions a server. Sent once, never retried: on a
    /// timeout the server may still have been created.
    pub async fn create_server(
        &self,
        project: u64,
        body: &CreateServer,
    ) -> Result<Value, UpstreamError> {
        let body = serde_json::to_value(body).map_err(|e| UpstreamError::Decode(e.to_string()))?;
        self.send(
            Method::POST,
            &format!("/projects/{project}/servers"),
            Some(&body),
        )
        .await
    }

    /// `POST /servers/{id}/actions`: runs an action; answers the server object. Sent once.
    pub async fn server_action(
        &self,
        id: u64,
        action: &ServerAction,
    ) -> Result<Value, UpstreamError> {
        let body =
            serde_json::to_value(action).map_err(|e| UpstreamError::Decode(e.to_string()))?;
        self.send(Method::POST, &format!("/servers/{id}/actions"), Some(&body))
            .await
    }

    /// `DELETE /servers/{id}`: terminates a server (204). Sent once.
    pub async fn delete_server(&self, id: u64) -> Result<(), UpstreamError> {
        self.send(Method::DELETE, &format!("/servers/{id}"), None)
            .await
            .map(|_| ())
    }
}
