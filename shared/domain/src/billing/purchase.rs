//! What can be bought, and its price: a new server (its request, validated field by field and
//! checked against what the provider would refuse), more paid time for a server (a renewal), or
//! a bigger plan for the paid time a server has left (a resize: its checks and price are the
//! resize module's).
//! Pricing a purchase has no side effect; it is the price a 402 offers and a credit is held to.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use crate::api::paths;
use crate::error::ApiError;
use crate::identity::auth::Principal;
use crate::identity::ssh_keys::{self, KeyRef};
use crate::pricing::{Pricing, Quote};
use crate::servers::discovery;
use crate::state::AppState;
use crate::store::payments::OrderKind;
use crate::store::sandboxes::PlanClass;
use crate::validate;

/// What a paid request buys.
#[derive(Debug, Clone, Copy)]
pub enum Purchase<'a> {
    /// A new server in `project`.
    NewServer {
        /// The provider project.
        project: u64,
        /// The validated request.
        request: &'a ValidProvisionRequest,
    },
    /// More paid time for a server of the caller's.
    Renewal {
        /// The server.
        server: u64,
        /// Its sandbox.
        sandbox_id: &'a str,
        /// Its project.
        project: u64,
        /// Periods to add, 1 to [`MAX_RENEWAL_PERIODS`].
        periods: u32,
        /// The plan (slug) its periods are priced on: the server's as priced.
        plan: Option<&'a str>,
        /// Its price, as [`renewal_price`] made it for this request; `None` for a renewal the
        /// ledger knows (priced again only if its order asks).
        priced: Option<&'a Priced>,
    },
    /// A server of the caller's moved to a bigger plan, its paid time unchanged (the resize
    /// module's rules).
    Resize {
        /// What it is bound to: the server, the plans, the paid time it pays for.
        resize: &'a Resize,
        /// Its price, as the resize module bound it; `None` for a resize the
        /// ledger knows (its order answers: nothing is priced again).
        priced: Option<&'a Priced>,
        /// Its sandbox.
        sandbox_id: &'a str,
        /// Its project.
        project: u64,
    },
}

impl Purchase<'_> {
    /// What its order buys.
    pub fn kind(&self) -> OrderKind {
        match self {
            Purchase::NewServer { .. } => OrderKind::Provision,
            Purchase::Renewal { .. } => OrderKind::Renewal,
            Purchase::Resize { .. } => OrderKind::Resize,
        }
    }

    /// The provider project it is in.
    pub fn project(&self) -> u64 {
        match self {
            Purchase::NewServer { project, .. }
            | Purchase::Renewal { project, .. }
            | Purchase::Resize { project, .. } => *project,
        }
    }

    /// The request as stored on its order and fingerprinted (JSON).
    ///
    /// Errors: 500 when it cannot be serialised.
    pub fn request_json(&self) -> Result<String, ApiError> {
        let json = match self {
            Purchase::NewServer { request, .. } => serde_json::to_string(request),
            Purchase::Renewal {
                server,
                periods,
                plan,
                ..
            } => serde_json::to_string(&Renewal {
                server_id: *server,
                periods: *periods,
                plan: plan.map(str::to_owned),
            }),
            Purchase::Resize { resize, .. } => serde_json::to_string(resize),
        };
        json.map_err(|e| ApiError::Internal(format!("cannot serialise the request: {e}")))
    }

    /// The route it is asked on: method and path, e.g. `POST /api/cloud/servers/123`.
    pub fn route(&self) -> String {
        match self {
            Purchase::NewServer { project, .. } => format!(
                "POST {}",
                paths::fill(paths::PROVISION_SERVER, &project.to_string())
            ),
            Purchase::Renewal { server, .. } => format!(
                "POST {}",
                paths::fill(paths::RENEW_SERVER, &server.to_string())
            ),
            Purchase::Resize { resize, .. } => format!(
                "POST {}",
                paths::fill(paths::RESIZE_SERVER, &resize.server_id.to_string())
            ),
        }
    }

    /// Its price now, refusing what the provider would refuse (no key policy: [`Priced::check`]).
    ///
    /// Errors: those of [`check`] and [`renewal_price`]; 409 for a resize bound without its
    /// price.
    pub async fn priced(&self, state: &AppState) -> Result<Priced, ApiError> {
        match self {
            Purchase::NewServer { project, request } => Ok(Priced {
                quote: check(state, Some(*project), request).await?,
                region: request.region.clone(),
            }),
            Purchase::Renewal {
                priced: Some(priced),
                ..
            } => Ok((*priced).clone()),
            Purchase::Renewal {
                server,
                sandbox_id,
                periods,
                ..
            } => renewal_price(state, *server, sandbox_id, *periods).await,
            Purchase::Resize { priced, resize, .. } => priced.cloned().ok_or_else(|| {
                ApiError::Conflict(format!(
                    "the resize of server {} is no longer offered as it was; ask again without \
                    the payment",
                    resize.server_id
                ))
            }),
        }
    }

    /// Its price now, held to `principal`'s key policy (plans, regions, price per server),
    /// refusing what the provider would refuse — all before any 402.
    ///
    /// Errors: those of [`Purchase::priced`]; 403 `policy-violation`.
    pub async fn quote(&self, state: &AppState, principal: &Principal) -> Result<Quote, ApiError> {
        let priced = self.priced(state).await?;
        priced.check(principal)?;
        Ok(priced.quote)
    }
}

/// A purchase's price, and the region its server is in.
#[derive(Debug, Clone)]
pub struct Priced {
    /// The price (its plan and image).
    pub quote: Quote,
    /// Region slug.
    pub region: String,
}

impl Priced {
    /// Holds it to `principal`'s key policy: plan, region, price of one period.
    ///
    /// Errors: 403 `policy-violation`.
    pub fn check(&self, principal: &Principal) -> Result<(), ApiError> {
        crate::ratelimit::spend::check_policy(
            principal,
            &self.quote.plan,
            &self.region,
            &self.quote,
        )
    }
}

/// The body of `POST /api/cloud/servers/{projectId}`.
///
/// `plan` and `region` (slugs) are required; `image` (slug), `hostname` (RFC 1123),
/// `sshKeys` (the caller's keys: `ssh_…` ids, public key lines, or the provider's ids of its
/// keys; `ssh_keys` is its alias), `user_data` (standard base64) and `tags` (string → string,
/// keys not starting with `svc-`) are optional. Unknown fields are refused.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"plan": "B1-1-1gb-20s-shared", "region": "LT-Siauliai",
    "hostname": "agent-1"})))]
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
    /// The keys to put on the server (at most 20), each one of the caller's: its id
    /// (`ssh_…`), a public key line (`ssh-ed25519 AAAA… name`, added to the caller's keys), or
    /// the provider's id of one of its keys.
    #[serde(default, rename = "sshKeys")]
    #[schema(value_type = Option<Vec<String>>)]
    pub ssh_keys: Option<Vec<Value>>,
    /// The alias of `sshKeys` (the provider's name for it), for the caller's keys only.
    #[serde(default, rename = "ssh_keys")]
    #[schema(value_type = Option<Vec<String>>)]
    pub ssh_keys_alias: Option<Vec<Value>>,
    /// Base64 user data.
    #[serde(default)]
    pub user_data: Option<String>,
    /// Tags.
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
}

/// A validated provisioning request, ready for the provider (without the service's tags).
#[derive(Debug, Clone, PartialEq, serde::Serialize, Deserialize)]
pub struct ValidProvisionRequest {
    /// Plan slug.
    pub plan: String,
    /// Region slug.
    pub region: String,
    /// Image slug.
    pub image: Option<String>,
    /// Hostname.
    pub hostname: Option<String>,
    /// The provider's ids of the caller's keys to put on the server: empty until the create
    /// registers [`Self::authorized_keys`] with the provider (orders stored before keys were
    /// registered at create time carry them).
    pub ssh_keys: Vec<u64>,
    /// The caller's keys to put on the server (`access.authorizedKeys`), registered with the
    /// provider only when the paid create is sent.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub authorized_keys: Vec<crate::store::ssh_keys::AuthorizedKey>,
    /// The keys as the request named them, until [`ValidProvisionRequest::resolve`] turns them
    /// into `ssh_keys` (never stored).
    #[serde(skip)]
    pub key_refs: (String, Vec<KeyRef>),
    /// Base64 user data.
    pub user_data: Option<String>,
    /// Caller's tags.
    pub tags: BTreeMap<String, String>,
}

impl ValidProvisionRequest {
    /// The request with its keys resolved ([`ssh_keys::resolve`]): `authorized_keys` the
    /// caller's keys it names. Made before any 402 or charge, and writes nothing at the
    /// provider (the create registers them).
    ///
    /// Errors: those of [`ssh_keys::resolve`] (400 naming `sshKeys[i]` for a key that is not
    /// the caller's, or is disabled).
    pub async fn resolve(
        mut self,
        state: &AppState,
        principal: &Principal,
    ) -> Result<ValidProvisionRequest, ApiError> {
        let (field, refs) = std::mem::take(&mut self.key_refs);
        self.authorized_keys = ssh_keys::resolve(state, principal, &field, &refs).await?;
        Ok(self)
    }
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
        let key_refs = ssh_keys::named(self.ssh_keys, self.ssh_keys_alias)?;
        Ok(ValidProvisionRequest {
            ssh_keys: Vec::new(),
            authorized_keys: Vec::new(),
            key_refs,
            plan: self.plan,
            region: self.region,
            image: self.image,
            hostname: self.hostname,
            user_data: self.user_data,
            tags: self.tags,
        })
    }
}

/// The checks the provider would otherwise fail deterministically, all made before any 402 or
/// settlement (point 2 of the durable-orders issue), and the price: the plan exists and is in
/// stock in the region, the project exists in the configured team, the image is offered with
/// the plan (the SSH keys are the caller's: [`ValidProvisionRequest::resolve`]).
///
/// Errors: 400 naming the field (`plan`, `region`, `projectId`, `image`); 503
/// when the plan cannot be priced (never treated as free); the provider's errors.
pub async fn check(
    state: &AppState,
    project: Option<u64>,
    request: &ValidProvisionRequest,
) -> Result<Quote, ApiError> {
    let plan = discovery::find_plan(state, &request.plan)
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
                "plan `{}` is not in stock in region `{}`; see available_regions in GET \
                /api/cloud/plans",
                request.plan, request.region
            ),
        ));
    }
    if let Some(project) = project
        && !discovery::project_exists(state, project).await?
    {
        return Err(ApiError::invalid(
            "projectId",
            format!(
                "project {project} is not a project of this service's team; see GET \
                /api/cloud/projects/{{teamId}}"
            ),
        ));
    }
    let image_pricing = match &request.image {
        None => None,
        Some(image) => {
            let offered = discovery::plan_image(state, &request.plan, image)
                .await?
                .ok_or_else(|| {
                    ApiError::invalid(
                        "image",
                        format!(
                            "image `{image}` is not offered with plan `{}`; see GET \
                            /api/cloud/images?plan={}",
                            request.plan, request.plan
                        ),
                    )
                })?;
            Pricing::of(&offered)
        }
    };
    let period = one_period(state, &request.plan, &plan.pricing, image_pricing.as_ref())?;
    Ok(Quote {
        class: PlanClass::of_type(plan.plan_type.as_deref()),
        ..Quote::new(&request.plan, request.image.as_deref(), 1, period)
    })
}

/// The body of `POST /api/cloud/servers/{serverId}/renewals`: `periods`, 1 to
/// [`MAX_RENEWAL_PERIODS`] paid periods (`PAID_PERIOD_SECONDS` each).
#[derive(Debug, Clone, PartialEq, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"periods": 1})))]
pub struct RenewalRequest {
    /// Periods to add.
    pub periods: u32,
}

/// The body of `POST /api/cloud/servers/{serverId}/resizes`: `plan`, the slug of the plan to move
/// to (a cloud VPS plan dearer than the server's, in stock in its region).
#[derive(Debug, Clone, PartialEq, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"plan": "B1-2-2gb-40s-shared"})))]
pub struct ResizeRequest {
    /// Plan slug to move to.
    pub plan: String,
}

/// What a resize order is bound to (its request, as stored and fingerprinted): the server, the
/// plan it moves to and from, and the end of the paid time the difference is paid until (unix
/// seconds).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Resize {
    /// The server.
    pub server_id: u64,
    /// Plan slug it moves to.
    pub plan: String,
    /// Plan slug it moves from.
    pub from: String,
    /// Its `paidUntil` when priced, unix seconds.
    pub paid_until: i64,
    /// One period of the plan it moves to (with the server's image) as priced, USDC atomic
    /// units, decimal: what a reversal takes back is what the amount bought at this price
    /// ([`crate::billing::resize::taken_back_seconds`]). Orders bound before it was recorded
    /// name none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub period_amount: Option<String>,
}

/// What a renewal order is bound to (its request, as stored and fingerprinted).
#[derive(Debug, Clone, PartialEq, serde::Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Renewal {
    /// The server.
    pub server_id: u64,
    /// Periods to add.
    pub periods: u32,
    /// The plan its periods were priced on (renewals ordered before a resize existed name none):
    /// the lease is extended only while the server is still on it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<String>,
}

/// The most periods one renewal buys.
pub const MAX_RENEWAL_PERIODS: u32 = 12;

/// What `periods` more of `server` (its sandbox `sandbox_id`) cost: its plan's and its
/// deployed image's hourly prices on the hourly cycle, now — the price a new server would pay,
/// from the stored server and order and the cached catalogue (no provider read) —
/// held to `principal`'s key policy (the server's plan and region, the price of one period) and
/// to `MAX_PAID_AHEAD_SECONDS`.
///
/// Errors: 410 when the server is gone (deleted by its owner or by its lease, or found gone by
/// the refresher); 409 for a free server (no lease to renew) or one still on its first
/// deployment (its deadline may yet delete it, and credits only what provisioned it); 400 (`periods`) when its paid time
/// would reach further ahead than allowed; 403 `policy-violation`; 503 when it cannot be
/// priced.
pub async fn renewal_quote(
    state: &AppState,
    principal: &Principal,
    server: u64,
    sandbox_id: &str,
    periods: u32,
) -> Result<Quote, ApiError> {
    let priced = renewal_price(state, server, sandbox_id, periods).await?;
    priced.check(principal)?;
    Ok(priced.quote)
}

/// [`renewal_quote`] without the key policy: the price and the server's region.
///
/// Errors: those of [`renewal_quote`] but 403.
pub async fn renewal_price(
    state: &AppState,
    server: u64,
    sandbox_id: &str,
    periods: u32,
) -> Result<Priced, ApiError> {
    let gone = || ApiError::Gone(format!("server {server} was deleted; nothing to renew"));
    let record = state.store.sandbox(sandbox_id).await?.ok_or_else(gone)?;
    let Some(lease) = &record.lease else {
        return Err(ApiError::Conflict(format!(
            "server {server} is free: it has no paid time to renew"
        )));
    };
    // A first deployment's deadline deletes the server and credits its provisioning payment
    // only: paid time bought before the server was delivered would be lost with it.
    if record.watch.as_ref().is_some_and(|w| w.first) {
        return Err(ApiError::Conflict(format!(
            "server {server} is still on its first deployment (not ready yet): renew it once it \
            is ready (GET /api/sandboxes/{sandbox_id} says when)"
        )));
    }
    let now = state.clock.now();
    let (renewed, _) =
        crate::servers::leases::renewed(state, lease, periods, now).ok_or_else(gone)?;
    let ahead = state.config.payments.paid_ahead.as_secs() as i64;
    let until = renewed.paid_until.unix();
    if until - now > ahead {
        return Err(ApiError::invalid(
            "periods",
            format!(
                "{periods} period(s) would pay server {server} until {}, more than {ahead} s \
                ahead (MAX_PAID_AHEAD_SECONDS); renew fewer periods, or later",
                renewed.paid_until
            ),
        ));
    }
    // Priced from what is stored — the provider's object as the refresher last read it, the
    // order's request — and the cached catalogue: a renewal costs the provider no request.
    let on = Stored::of(state, server, &record).await?;
    let plan = discovery::find_plan(state, &on.plan)
        .await?
        .ok_or_else(|| ApiError::Unavailable(format!("plan `{}` is no longer offered", on.plan)))?;
    let image = on.image.as_deref();
    let period = period_with_image(state, &on.plan, &plan.pricing, image).await?;
    let quote = Quote::new(&on.plan, image, periods, period);
    Ok(Priced {
        quote,
        region: on.region,
    })
}

/// What a stored server is: its plan, image and region (slugs), from its record, the provider's
/// object as the refresher last read it and its order's request — no provider read.
#[derive(Debug, Clone)]
pub struct Stored {
    /// Plan slug.
    pub plan: String,
    /// Image slug, when known.
    pub image: Option<String>,
    /// Region slug (empty when unknown).
    pub region: String,
}

impl Stored {
    /// What `record` (of `server`) says.
    ///
    /// Errors: 503 when it names no plan; the store's.
    pub async fn of(
        state: &AppState,
        server: u64,
        record: &crate::store::sandboxes::SandboxRecord,
    ) -> Result<Stored, ApiError> {
        let object: Value = record
            .watch
            .as_ref()
            .and_then(|w| w.server.as_deref())
            .and_then(|s| serde_json::from_str(s).ok())
            .unwrap_or_default();
        let plan = record
            .plan
            .clone()
            .or_else(|| object["plan"]["slug"].as_str().map(str::to_owned))
            .ok_or_else(|| ApiError::Unavailable(format!("server {server} names no plan")))?;
        let image = match object["deployed_image"]["slug"].as_str() {
            Some(image) => Some(image.to_owned()),
            None => ordered_image(state, record).await?,
        };
        let region = record
            .region
            .clone()
            .or_else(|| object["region"]["slug"].as_str().map(str::to_owned))
            .unwrap_or_default();
        Ok(Stored {
            plan,
            image,
            region,
        })
    }
}

/// Refuses a rebuild of `record`'s server (`server`) to `image` when the provider would bill a
/// license the server's paid time was not paid for: an image with its own price (a licensed OS,
/// billed by the hour to the operator) is taken only by a paid server, and only when it is the
/// image its paid time is priced on ([`Stored`]: the image deployed, or the one ordered); an
/// image without a price always is. Read from the record and the cached catalogue: nothing is
/// sent to the provider.
///
/// Errors: 400 naming `image` when the server's plan does not offer it; 409 for a server of
/// which no record says the plan, or a licensed image the lease was not paid for (saying what to
/// do instead); 503 from the catalogue.
///
/// Boxed where it is made: the actions handler's future, whose type it would deepen past what
/// the compiler checks, never holds its future.
pub fn rebuild_image<'a>(
    state: &'a AppState,
    server: u64,
    record: Option<&'a crate::store::sandboxes::SandboxRecord>,
    image: &'a str,
) -> futures::future::BoxFuture<'a, Result<(), ApiError>> {
    Box::pin(image_paid_for(state, server, record, image))
}

async fn image_paid_for(
    state: &AppState,
    server: u64,
    record: Option<&crate::store::sandboxes::SandboxRecord>,
    image: &str,
) -> Result<(), ApiError> {
    let Some(record) = record else {
        return Err(ApiError::Conflict(format!(
            "server {server} has no record of its plan here: it cannot be rebuilt through this \
            service"
        )));
    };
    let on = Stored::of(state, server, record).await?;
    let offered = discovery::plan_image(state, &on.plan, image)
        .await?
        .ok_or_else(|| {
            ApiError::invalid(
                "image",
                format!(
                    "image `{image}` is not offered with the server's plan `{}`; see GET \
                    /api/cloud/images?plan={}",
                    on.plan, on.plan
                ),
            )
        })?;
    let free = Pricing::of(&offered)
        .is_none_or(|p| crate::pricing::costs_nothing(p.entries(), &state.config.pricing));
    if free || (record.lease.is_some() && on.image.as_deref() == Some(image)) {
        return Ok(());
    }
    let paid_for = match (&record.lease, on.image.as_deref()) {
        (None, _) => format!("server {server} is free"),
        (Some(_), Some(paid)) => format!("the paid time of server {server} was paid for `{paid}`"),
        (Some(_), None) => format!("the paid time of server {server} was not paid for it"),
    };
    Err(ApiError::Conflict(format!(
        "image `{image}` has its own price (a licensed OS, billed by the hour) and {paid_for}: \
        rebuild to an image without a price (GET /api/cloud/images?plan={} lists the plan's \
        images and their prices), or provision a new server with `{image}` (its price includes \
        the image's)",
        on.plan
    )))
}

/// One period of plan `slug` (priced `plan`) with `image`'s own price when the plan offers it
/// priced.
///
/// Errors: 503 when it cannot be priced; the catalogue's.
pub async fn period_with_image(
    state: &AppState,
    slug: &str,
    plan: &[crate::pricing::PriceEntry],
    image: Option<&str>,
) -> Result<crate::pricing::PeriodPrice, ApiError> {
    let image_pricing = match image {
        Some(image) => discovery::plan_image(state, slug, image)
            .await?
            .and_then(|i| Pricing::of(&i)),
        None => None,
    };
    one_period(state, slug, plan, image_pricing.as_ref())
}

/// The image the order of `record` asked for, if any (its stored request).
///
/// Errors: the store's.
async fn ordered_image(
    state: &AppState,
    record: &crate::store::sandboxes::SandboxRecord,
) -> Result<Option<String>, ApiError> {
    let Some(payment) = &record.payment else {
        return Ok(None);
    };
    Ok(state
        .store
        .order(payment)
        .await?
        .and_then(|order| serde_json::from_str::<ValidProvisionRequest>(&order.request).ok())
        .and_then(|request| request.image))
}

/// The price of one paid period (`PAID_PERIOD_SECONDS`) of plan `slug` priced `plan`, with its
/// image's own price when licensed, on the configured rates and markup.
///
/// Errors: 503 when it cannot be priced (never treated as free).
fn one_period(
    state: &AppState,
    slug: &str,
    plan: &[crate::pricing::PriceEntry],
    image: Option<&Pricing>,
) -> Result<crate::pricing::PeriodPrice, ApiError> {
    let hours = crate::pricing::hours(state.config.payments.period.as_secs());
    crate::pricing::period_price(
        plan,
        image.map(Pricing::entries),
        hours,
        &state.config.pricing,
    )
    .map_err(|why| ApiError::Unavailable(format!("plan `{slug}` cannot be priced: {why}")))
}
