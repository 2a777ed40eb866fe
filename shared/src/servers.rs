//! Servers (design brief §2 and §3, Ownership): provisioning, the caller's servers, actions and
//! delete. A server belongs to whoever provisioned it through this service; that record —
//! [`crate::store::sandboxes::ServerOwnership`], read strongly consistent — is the only thing
//! that authorises an action, a delete or a listing.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use crate::auth::Principal;
use crate::error::ApiError;
use crate::pricing::Quote;
use crate::state::AppState;
use crate::store::StoreError;
use crate::store::sandboxes::{SandboxRecord, ServerOwnership};
use crate::upstream::{CreateServer, ServerAction, ServerView, UpstreamError};
use crate::{discovery, ids, validate};

/// Tag the service puts on every server it provisions: the sandbox id (lets operators reconcile
/// a create whose answer was lost).
pub const SANDBOX_TAG: &str = "svc-sandbox";
/// Tag the service puts on every server it provisions: the owner's address.
pub const OWNER_TAG: &str = "svc-owner";

/// The body of `POST /api/cloud/servers/{projectId}`.
///
/// `plan` and `region` (slugs) are required; `image` (slug), `hostname` (RFC 1123),
/// `ssh_keys` (provider key ids, numbers or numeric strings), `user_data` (standard base64) and
/// `tags` (string → string, keys not starting with `svc-`) are optional. Unknown fields are
/// refused.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProvisionRequest {
    /// Plan slug.
    pub plan: String,
    /// Region slug.
    pub region: String,
    /// Image slug.
    #[serde(default)]
    pub image: Option<String>,
    /// Hostname.
    #[serde(default)]
    pub hostname: Option<String>,
    /// SSH key ids.
    #[serde(default)]
    pub ssh_keys: Vec<Value>,
    /// Base64 user data.
    #[serde(default)]
    pub user_data: Option<String>,
    /// Tags.
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
}

/// A validated provisioning request, ready for the provider (without the service's tags).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ValidProvisionRequest {
    /// Plan slug.
    pub plan: String,
    /// Region slug.
    pub region: String,
    /// Image slug.
    pub image: Option<String>,
    /// Hostname.
    pub hostname: Option<String>,
    /// SSH key ids.
    pub ssh_keys: Vec<u64>,
    /// Base64 user data.
    pub user_data: Option<String>,
    /// Caller's tags.
    pub tags: BTreeMap<String, String>,
}

impl ProvisionRequest {
    /// Checks every field's shape (400 naming the field); no upstream call.
    pub fn validate(self) -> Result<ValidProvisionRequest, ApiError> {
        validate::slug("plan", &self.plan)?;
        validate::slug("region", &self.region)?;
        if let Some(image) = &self.image {
            validate::slug("image", image)?;
        }
        if let Some(hostname) = &self.hostname {
            validate::hostname("hostname", hostname)?;
        }
        if let Some(user_data) = &self.user_data {
            validate::user_data("user_data", user_data)?;
        }
        validate::tags("tags", &self.tags)?;
        Ok(ValidProvisionRequest {
            ssh_keys: validate::ssh_keys("ssh_keys", &self.ssh_keys)?,
            plan: self.plan,
            region: self.region,
            image: self.image,
            hostname: self.hostname,
            user_data: self.user_data,
            tags: self.tags,
        })
    }
}

/// What a successful provisioning returns.
#[derive(Debug, Clone)]
pub struct Provisioned {
    /// The provider's server object.
    pub server: Value,
    /// The sandbox recorded for it.
    pub sandbox_id: String,
    /// The facilitator's settle response, for a paid plan.
    pub settlement: Option<crate::x402::SettleResponse>,
}

/// Checks that `plan` exists and is in stock in `region`, and prices it.
///
/// Errors: 400 (`plan`) unknown plan; 400 (`region`) no stock there; 503 when the plan cannot
/// be priced (no price, or a currency without a configured rate) — never treated as free.
pub async fn quote(state: &AppState, request: &ValidProvisionRequest) -> Result<Quote, ApiError> {
    let (plan, cost) = discovery::find_plan(state, &request.plan)
        .await?
        .ok_or_else(|| {
            ApiError::invalid(
                "plan",
                format!("unknown plan `{}`; see GET /api/cloud/plans", request.plan),
            )
        })?;
    if !plan.in_stock(&request.region) {
        return Err(ApiError::invalid(
            "region",
            format!(
                "plan `{}` is not in stock in region `{}`; see available_regions in GET /api/cloud/plans",
                request.plan, request.region
            ),
        ));
    }
    let cost = cost.map_err(|why| {
        ApiError::Unavailable(format!("plan `{}` cannot be priced: {why}", request.plan))
    })?;
    Ok(Quote::new(&request.plan, cost))
}

/// Provisions `request` for `principal` in `project`: checks plan, stock and price; a free plan
/// is created at once; a paid one (monthly cost above 0) goes through x402
/// ([`crate::payments::pay_and_provision`]) with the request's `payment`, `resource` being the
/// request URL.
///
/// Errors: those of [`quote`]; 402 for a paid plan without an acceptable payment; those of
/// [`create`] and of the payment flow.
pub async fn provision(
    state: &AppState,
    principal: &Principal,
    project: u64,
    request: ValidProvisionRequest,
    resource: &str,
    payment: Option<crate::payments::PaymentHeader>,
) -> Result<Provisioned, ApiError> {
    state.upstream()?;
    let quote = quote(state, &request).await?;
    if quote.monthly_cost_usd.is_zero() {
        return create(state, principal, project, &request).await;
    }
    crate::payments::pay_and_provision(state, principal, project, request, quote, resource, payment)
        .await
}

/// Creates the server (once, never retried) and records its ownership and sandbox in one
/// transaction. No price check: callers decide that the server is free or paid for.
///
/// Errors: the provider's errors (400/404/502/504); 500 when the server was created but could
/// not be recorded (logged with its id).
pub async fn create(
    state: &AppState,
    principal: &Principal,
    project: u64,
    request: &ValidProvisionRequest,
) -> Result<Provisioned, ApiError> {
    let upstream = state.upstream()?;
    let sandbox_id = ids::new(ids::SANDBOX);
    let mut tags = request.tags.clone();
    tags.insert(SANDBOX_TAG.into(), sandbox_id.clone());
    tags.insert(OWNER_TAG.into(), principal.owner.clone());
    let body = CreateServer {
        plan: request.plan.clone(),
        region: request.region.clone(),
        image: request.image.clone(),
        hostname: request.hostname.clone(),
        ssh_keys: request.ssh_keys.clone(),
        user_data: request.user_data.clone(),
        tags,
        spot_market: false,
        cycle: "hourly".into(),
    };
    let server = upstream.create_server(project, &body).await?;
    let view = ServerView::of(&server)?;
    let now = crate::time::now_rfc3339();
    let sandbox = SandboxRecord {
        id: sandbox_id,
        owner: principal.owner.clone(),
        server_id: Some(view.id),
        project_id: Some(project),
        plan: Some(request.plan.clone()),
        region: Some(request.region.clone()),
        hostname: view.hostname.clone().or(request.hostname.clone()),
        name: None,
        metadata: BTreeMap::new(),
        status: status_of(&view),
        created_at: now.clone(),
        updated_at: now.clone(),
    };
    let ownership = ServerOwnership {
        server_id: view.id,
        owner: principal.owner.clone(),
        sandbox_id: sandbox.id.clone(),
        project_id: project,
        created_at: now,
    };
    if let Err(err) = state.store.record_server(&ownership, &sandbox).await {
        tracing::error!(
            server_id = view.id,
            sandbox_id = sandbox.id,
            owner = principal.owner,
            error = %err,
            "server created but its ownership could not be recorded"
        );
        return Err(err.into());
    }
    Ok(Provisioned {
        server,
        sandbox_id: sandbox.id,
        settlement: None,
    })
}

/// The provider's status of a server (`status`, else `state`, else `unknown`).
pub fn status_of(view: &ServerView) -> String {
    view.status
        .clone()
        .or_else(|| view.state.clone())
        .unwrap_or_else(|| "unknown".into())
}

/// The servers of `project` that `principal` owns (the provider's objects, in its order).
pub async fn list(
    state: &AppState,
    principal: &Principal,
    project: u64,
) -> Result<Vec<Value>, ApiError> {
    let servers = state.upstream()?.servers(project).await?;
    let ids: Vec<u64> = servers
        .iter()
        .filter_map(|s| s.get("id").and_then(Value::as_u64))
        .collect();
    let owned = state.store.owned_server_ids(&principal.owner, &ids).await?;
    Ok(servers
        .into_iter()
        .filter(|s| {
            s.get("id")
                .and_then(Value::as_u64)
                .is_some_and(|id| owned.contains(&id))
        })
        .collect())
}

/// The ownership record of `server`, if `principal` owns it.
///
/// Errors: 403 when the server was not provisioned here by this owner (another owner's, or
/// never provisioned through the service).
pub async fn authorize(
    state: &AppState,
    principal: &Principal,
    server: u64,
) -> Result<ServerOwnership, ApiError> {
    match state.store.server_ownership(server).await? {
        Some(ownership) if ownership.owner == principal.owner => Ok(ownership),
        _ => Err(ApiError::Forbidden(format!(
            "server {server} does not belong to the caller"
        ))),
    }
}

/// The body of `POST /api/cloud/servers/{serverId}/actions`: `type` and the fields that type
/// takes (see [`parse_action`]).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActionRequest {
    /// `reboot`, `power-on`, `power-off`, `rebuild`, `enter-rescue-mode` or `exit-rescue-mode`.
    #[serde(rename = "type")]
    pub kind: String,
    /// `rebuild`: image slug (required).
    #[serde(default)]
    pub image: Option<String>,
    /// `rebuild`: hostname (required).
    #[serde(default)]
    pub hostname: Option<String>,
    /// `rebuild`, `enter-rescue-mode`: password (required; the provider's password rules).
    #[serde(default)]
    pub password: Option<String>,
    /// `rebuild`: SSH key ids (optional).
    #[serde(default)]
    pub ssh_keys: Option<Vec<Value>>,
    /// `rebuild`: base64 user data (optional).
    #[serde(default)]
    pub user_data: Option<String>,
}

/// The action types the API accepts.
pub const ACTION_TYPES: [&str; 6] = [
    "reboot",
    "power-on",
    "power-off",
    "rebuild",
    "enter-rescue-mode",
    "exit-rescue-mode",
];

/// Turns an action request into the provider's action, checking that each type gets exactly
/// the fields it takes: `rebuild` needs `image`, `hostname`, `password` and may have `ssh_keys`,
/// `user_data`; `enter-rescue-mode` needs `password`; the others take nothing.
///
/// Errors: 400 naming `type` (unknown type) or the missing, malformed or unexpected field.
pub fn parse_action(request: ActionRequest) -> Result<ServerAction, ApiError> {
    let ActionRequest {
        kind,
        image,
        hostname,
        password,
        ssh_keys,
        user_data,
    } = request;
    let given = [
        ("image", image.is_some()),
        ("hostname", hostname.is_some()),
        ("password", password.is_some()),
        ("ssh_keys", ssh_keys.is_some()),
        ("user_data", user_data.is_some()),
    ];
    let allowed: &[&str] = match kind.as_str() {
        "rebuild" => &["image", "hostname", "password", "ssh_keys", "user_data"],
        "enter-rescue-mode" => &["password"],
        "reboot" | "power-on" | "power-off" | "exit-rescue-mode" => &[],
        _ => {
            return Err(ApiError::invalid(
                "type",
                format!("must be one of {}", ACTION_TYPES.join(", ")),
            ));
        }
    };
    if let Some((field, _)) = given
        .iter()
        .find(|(field, present)| *present && !allowed.contains(field))
    {
        return Err(ApiError::invalid(
            *field,
            format!("is not a field of action `{kind}`"),
        ));
    }
    let required = |field: &str, value: Option<String>| {
        value.ok_or_else(|| ApiError::invalid(field, format!("is required for action `{kind}`")))
    };
    Ok(match kind.as_str() {
        "reboot" => ServerAction::Reboot,
        "power-on" => ServerAction::PowerOn,
        "power-off" => ServerAction::PowerOff,
        "exit-rescue-mode" => ServerAction::ExitRescueMode,
        "enter-rescue-mode" => {
            let password = required("password", password)?;
            validate::password("password", &password)?;
            ServerAction::EnterRescueMode { password }
        }
        _ => {
            let image = required("image", image)?;
            validate::slug("image", &image)?;
            let hostname = required("hostname", hostname)?;
            validate::hostname("hostname", &hostname)?;
            let password = required("password", password)?;
            validate::password("password", &password)?;
            if let Some(user_data) = &user_data {
                validate::user_data("user_data", user_data)?;
            }
            ServerAction::Rebuild {
                image,
                hostname,
                password,
                ssh_keys: validate::ssh_keys("ssh_keys", &ssh_keys.unwrap_or_default())?,
                user_data,
            }
        }
    })
}

/// Runs `action` on `server` for its owner; returns the provider's server object and records
/// the status it reports on the sandbox.
///
/// Errors: 403 not the owner; the provider's errors (e.g. 400 rescue mode on a VPS).
pub async fn act(
    state: &AppState,
    principal: &Principal,
    server: u64,
    action: &ServerAction,
) -> Result<Value, ApiError> {
    let upstream = state.upstream()?;
    let ownership = authorize(state, principal, server).await?;
    let result = upstream.server_action(server, action).await?;
    if let Ok(view) = ServerView::of(&result) {
        let hostname = match action {
            ServerAction::Rebuild { hostname, .. } => Some(hostname.as_str()),
            _ => None,
        };
        let at = crate::time::now_rfc3339();
        if let Err(err) = state
            .store
            .update_sandbox_status(&ownership.sandbox_id, &status_of(&view), hostname, &at)
            .await
        {
            tracing::warn!(server, error = %err, "could not record the sandbox status");
        }
    }
    Ok(result)
}

/// Terminates `server` for its owner and marks its sandbox `terminating`. A server the provider
/// no longer knows (404) counts as already deleted.
///
/// Errors: 403 not the owner; the provider's other errors.
pub async fn delete(state: &AppState, principal: &Principal, server: u64) -> Result<(), ApiError> {
    let upstream = state.upstream()?;
    let ownership = authorize(state, principal, server).await?;
    let status = match upstream.delete_server(server).await {
        Ok(()) => "terminating",
        Err(UpstreamError::Status { status: 404, .. }) => "terminated",
        Err(err) => return Err(err.into()),
    };
    let at = crate::time::now_rfc3339();
    match state
        .store
        .update_sandbox_status(&ownership.sandbox_id, status, None, &at)
        .await
    {
        Ok(_) => Ok(()),
        Err(StoreError::ConditionFailed) => Ok(()),
        Err(err) => Err(err.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn action(body: Value) -> Result<ServerAction, ApiError> {
        parse_action(serde_json::from_value(body).unwrap())
    }
    fn field(err: ApiError) -> String {
        match err {
            ApiError::Invalid { field, .. } => field,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn simple_actions() {
        assert_eq!(
            action(json!({"type": "reboot"})).unwrap(),
            ServerAction::Reboot
        );
        assert_eq!(
            action(json!({"type": "power-off"})).unwrap(),
            ServerAction::PowerOff
        );
        assert_eq!(
            action(json!({"type": "power-on"})).unwrap(),
            ServerAction::PowerOn
        );
        assert_eq!(
            action(json!({"type": "exit-rescue-mode"})).unwrap(),
            ServerAction::ExitRescueMode
        );
    }

    #[test]
    fn action_fields_are_checked_per_type() {
        assert_eq!(
            field(action(json!({"type": "explode"})).unwrap_err()),
            "type"
        );
        assert_eq!(
            field(action(json!({"type": "reboot", "password": "x"})).unwrap_err()),
            "password"
        );
        assert_eq!(
            field(action(json!({"type": "enter-rescue-mode"})).unwrap_err()),
            "password"
        );
        assert_eq!(
            field(action(json!({"type": "enter-rescue-mode", "password": "weak"})).unwrap_err()),
            "password"
        );
        assert_eq!(
            field(
                action(json!({"type": "rebuild", "hostname": "a", "password": "nW7xKp2LmQ9z"}))
                    .unwrap_err()
            ),
            "image"
        );
        assert_eq!(
            field(action(json!({"type": "rebuild", "image": "debian_12_64bit", "hostname": "a", "password": "nW7xKp2LmQ9z", "ssh_keys": ["x"]})).unwrap_err()),
            "ssh_keys[0]"
        );
        let rebuild = action(json!({
            "type": "rebuild", "image": "debian_12_64bit", "hostname": "runner-01",
            "password": "nW7xKp2LmQ9z", "ssh_keys": [9845], "user_data": "I2Nsb3VkLWNvbmZpZwo="
        }))
        .unwrap();
        assert_eq!(
            serde_json::to_value(rebuild).unwrap(),
            json!({"type": "rebuild", "image": "debian_12_64bit", "hostname": "runner-01",
                   "password": "nW7xKp2LmQ9z", "ssh_keys": [9845], "user_data": "I2Nsb3VkLWNvbmZpZwo="})
        );
    }

    #[test]
    fn provision_request_validation_names_fields() {
        let req = |body: Value| {
            serde_json::from_value::<ProvisionRequest>(body)
                .unwrap()
                .validate()
        };
        assert!(req(json!({"plan": "p1", "region": "LT-Siauliai"})).is_ok());
        assert_eq!(
            field(req(json!({"plan": "../x", "region": "r"})).unwrap_err()),
            "plan"
        );
        assert_eq!(
            field(req(json!({"plan": "p", "region": "r", "hostname": "-x"})).unwrap_err()),
            "hostname"
        );
        assert_eq!(
            field(req(json!({"plan": "p", "region": "r", "user_data": "%%"})).unwrap_err()),
            "user_data"
        );
        assert_eq!(
            field(
                req(json!({"plan": "p", "region": "r", "tags": {"svc-owner": "me"}})).unwrap_err()
            ),
            "tags.svc-owner"
        );
        assert_eq!(
            field(req(json!({"plan": "p", "region": "r", "ssh_keys": [0]})).unwrap_err()),
            "ssh_keys[0]"
        );
    }
}
