//! Discovery reads: plans, regions, images, teams, projects. Each answer is the provider's bare
//! JSON array, passed on unchanged (`reference/upstream-cherry-api.md` §3–6).

use serde_json::Value;

use super::{Client, UpstreamError};

impl Client {
    /// `GET /plans`, or `GET /teams/{team}/plans` when a team is configured (prices for that
    /// team's billing currency).
    pub async fn plans(&self) -> Result<Vec<Value>, UpstreamError> {
        match self.team_id {
            Some(team) => self.get(&format!("/teams/{team}/plans")).await,
            None => self.get("/plans").await,
        }
    }

    /// `GET /regions`.
    pub async fn regions(&self) -> Result<Vec<Value>, UpstreamError> {
        self.get("/regions").await
    }

    /// `GET /plans/{plan}/images`: the images (OS) offered with a plan. `plan` must be a slug
    /// checked by `shared::validate::slug`.
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
}
