//! Servers: list, get, create, actions, delete (`reference/upstream-cherry-api.md` §7–8).

use std::collections::BTreeMap;

use reqwest::Method;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Client, UpstreamError};
use base::deadline::Deadline;

/// Servers asked for per page of a listing.
const PAGE: usize = 100;

/// Times a listing that moved while it was read is read again ([`Client::servers_all`]).
pub const LISTINGS: usize = 3;

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
    /// Move a cloud VPS to another plan (`reference/upstream-cherry-api.md` §8: the Go client's
    /// "Upgrade virtual server plan"; the Python SDK has no model of it).
    Upgrade {
        /// Plan slug.
        plan: String,
    },
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

    /// The provider's status (`status`, else `state`, else `unknown`).
    pub fn status_or_state(&self) -> String {
        self.status
            .clone()
            .or_else(|| self.state.clone())
            .unwrap_or_else(|| "unknown".into())
    }
}

/// A server object without `password` fields (initial and BMC credentials): never stored.
pub fn without_credentials(mut server: Value) -> Value {
    fn strip(value: &mut Value) {
        match value {
            Value::Object(fields) => {
                fields.remove("password");
                fields.values_mut().for_each(strip);
            }
            Value::Array(items) => items.iter_mut().for_each(strip),
            _ => {}
        }
    }
    strip(&mut server);
    server
}

impl Client {
    /// Every server of `project` (all owners), every page of `GET
    /// /projects/{project}/servers?limit=…&offset=…` (reference §1: `limit`, `offset`,
    /// `X-Total-Count`) until a page comes back empty, brings no server not seen yet (a provider
    /// that ignores `offset`), or the total is reached; each page retried as a read when
    /// `retried` (else sent once), and none started unless `until` (when given) leaves time for
    /// it. Offset paging skips or repeats servers when the listing shifts between pages (a
    /// server created or deleted meanwhile): servers are kept once by id, and a listing whose
    /// total moved while it was read is read again, up to [`LISTINGS`] times.
    ///
    /// Errors: any page's failure; a listing that kept moving, or ran out of `until`
    /// ([`UpstreamError::Timeout`]) — a listing is whole or an error, never a prefix.
    pub async fn servers_all(
        &self,
        project: u64,
        retried: bool,
        until: Option<&Deadline>,
    ) -> Result<Vec<Value>, UpstreamError> {
        for _ in 0..LISTINGS {
            let (servers, stable) = self.listing(project, retried, until).await?;
            if stable {
                return Ok(servers);
            }
            tracing::warn!(
                project,
                "the listing moved while it was read; reading it again"
            );
        }
        Err(UpstreamError::Decode(format!(
            "the servers of project {project} kept changing while they were listed"
        )))
    }

    /// One read of every page (see [`Client::servers_all`]): the servers, and whether the
    /// listing's total stayed the same from its first page to its last.
    async fn listing(
        &self,
        project: u64,
        retried: bool,
        until: Option<&Deadline>,
    ) -> Result<(Vec<Value>, bool), UpstreamError> {
        let mut servers: Vec<Value> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        let mut offset = 0;
        let mut first_total = None;
        loop {
            if until.is_some_and(|until| !until.allows(self.timeout)) {
                return Err(UpstreamError::Timeout);
            }
            let path = format!("/projects/{project}/servers?limit={PAGE}&offset={offset}");
            let (page, total) = self.get_page(&path, retried).await?;
            let page: Vec<Value> = super::decode(page)?;
            let first_total = *first_total.get_or_insert(total);
            let read = page.len();
            let before = servers.len();
            servers.extend(
                page.into_iter()
                    .filter(|server| seen.insert(server["id"].to_string())),
            );
            offset += read;
            // A provider that ignores `limit` answered everything; one that ignores `offset`
            // answers a page already seen.
            let done = read == 0 || read > PAGE || servers.len() == before;
            if done || total.is_some_and(|t| offset as u64 >= t) {
                return Ok((servers, total == first_total));
            }
        }
    }

    /// `GET /projects/{project}/servers`, every page: every server of the project (all owners).
    pub async fn servers(&self, project: u64) -> Result<Vec<Value>, UpstreamError> {
        self.servers_all(project, true, None).await
    }

    /// The server of `project` whose tag `tag` equals `value`, if any, searched in every page
    /// of the listing, each sent once and none started unless `until` leaves time for it: how a
    /// create whose answer was lost is found again (`reference/upstream-cherry-api.md` §1, "a
    /// lost create response").
    pub async fn find_tagged(
        &self,
        project: u64,
        (tag, value): (&str, &str),
        until: Option<&Deadline>,
    ) -> Result<Option<Value>, UpstreamError> {
        Ok(self
            .servers_all(project, false, until)
            .await?
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
