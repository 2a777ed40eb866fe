//! Discovery reads: plans, regions, images, teams, projects, SSH keys (and the account's SSH
//! keys added and removed). Each answer is the provider's bare
//! JSON array, passed on unchanged (`reference/upstream-cherry-api.md` §3–6).

use serde_json::Value;

use super::{Client, UpstreamError};

impl Client {
    /// `GET /plans`, or `GET /teams/{team}/plans` when a team is configured (prices for that
    /// team's billing currency).
    pub async fn plans(&self) -> Result<Vec<Value>, UpstreamError> {
        self.plans_tried(true).await
    }

    /// [`Client::plans`], retried as a read when `retried`, else sent once (an anonymous read of
    /// the open plans listing: a stranger's request never waits out, nor multiplies, a failing
    /// provider's answers).
    pub async fn plans_tried(&self, retried: bool) -> Result<Vec<Value>, UpstreamError> {
        let path = match self.team_id {
            Some(team) => format!("/teams/{team}/plans"),
            None => "/plans".to_owned(),
        };
        self.get_tried(&path, retried).await
    }

    /// `GET /regions`.
    pub async fn regions(&self) -> Result<Vec<Value>, UpstreamError> {
        self.get("/regions").await
    }

    /// `GET /plans/{plan}/images`: the images (OS) offered with a plan. `plan` must be a slug
    /// checked by `domain::validate::slug`.
    pub async fn plan_images(&self, plan: &str) -> Result<Vec<Value>, UpstreamError> {
        self.get(&format!("/plans/{plan}/images")).await
    }

    /// `GET /teams`.
    pub async fn teams(&self) -> Result<Vec<Value>, UpstreamError> {
        self.get("/teams").await
    }

    /// `GET /teams/{team}/projects`.
    pub async fn projects(&self, team: u64) -> Result<Vec<Value>, UpstreamError> {
        self.get(&format!("/teams/{team}/projects")).await
    }

    /// `GET /ssh-keys`: the account's SSH keys (`{id, label, key, fingerprint, …}`).
    pub async fn ssh_keys(&self) -> Result<Vec<Value>, UpstreamError> {
        self.get("/ssh-keys").await
    }

    /// `POST /ssh-keys {label, key}`: adds a public key (OpenSSH text) to the account; answers
    /// the provider's id of it (201 `{id, label, key, fingerprint, …}`). Sent once: on a lost
    /// answer the key may have been added (find it by its label with [`Client::ssh_keys`]).
    ///
    /// Errors: the provider's (400/422 for a key it refuses); [`UpstreamError::Decode`] for an
    /// answer without a numeric `id`.
    pub async fn add_ssh_key(&self, label: &str, key: &str) -> Result<u64, UpstreamError> {
        let body = serde_json::json!({"label": label, "key": key});
        let added = self
            .send(reqwest::Method::POST, "/ssh-keys", Some(&body))
            .await?;
        added["id"]
            .as_u64()
            .ok_or_else(|| UpstreamError::Decode("POST /ssh-keys: no numeric id".into()))
    }

    /// `DELETE /ssh-keys/{id}` (204): removes a key from the account; servers made with it keep
    /// it. Sent once.
    pub async fn delete_ssh_key(&self, id: u64) -> Result<(), UpstreamError> {
        self.send(reqwest::Method::DELETE, &format!("/ssh-keys/{id}"), None)
            .await
            .map(|_| ())
    }
}
