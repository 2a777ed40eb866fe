//! Discovery (design brief §2): plans, regions, images, teams and projects, passed through from
//! the provider and cached for `DISCOVERY_CACHE_SECONDS` in the warm function. Plans gain
//! `monthlyCost`: the price of one paid period (`PAID_PERIOD_SECONDS`, default 730 h) in USD on
//! the hourly cycle, as the 402 asks it for the plan's default image (see [`crate::pricing`];
//! `null` when the plan cannot be priced).

use rust_decimal::prelude::ToPrimitive;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::error::ApiError;
use crate::pricing::{self, PricingError};
use crate::state::AppState;
use crate::validate;

/// Stock of a plan in one region (an element of `available_regions`).
#[derive(Debug, Clone, Deserialize)]
pub struct RegionStock {
    /// Region slug.
    #[serde(default)]
    pub slug: Option<String>,
    /// On-demand units in stock.
    #[serde(default)]
    pub stock_qty: i64,
}

/// The fields of a plan the service reads.
#[derive(Debug, Clone, Deserialize)]
pub struct PlanView {
    /// Plan slug.
    pub slug: String,
    /// Prices by unit.
    #[serde(default)]
    pub pricing: Vec<pricing::PriceEntry>,
    /// Regions with stock.
    #[serde(default)]
    pub available_regions: Vec<RegionStock>,
    /// `vps`, `baremetal`, … (how long it takes to deploy).
    #[serde(default, rename = "type")]
    pub plan_type: Option<String>,
}

impl PlanView {
    /// Whether the plan has on-demand stock in region `region` (`stock_qty > 0`).
    pub fn in_stock(&self, region: &str) -> bool {
        self.available_regions
            .iter()
            .any(|r| r.slug.as_deref() == Some(region) && r.stock_qty > 0)
    }
}

/// A listing of the provider's, as the discovery cache gives it (`crate::cache`).
#[derive(Debug, Clone, PartialEq)]
pub struct Listing {
    /// The provider's objects.
    pub items: Vec<Value>,
    /// Whole seconds since the provider gave them, when it failed since and they are its last
    /// answer standing in (answered as `Age`); `None`: fresh.
    pub age: Option<u64>,
}

/// The listing under `key`, from the cache or `load`.
async fn read(
    state: &AppState,
    key: &str,
    load: impl Future<Output = Result<Vec<Value>, crate::upstream::UpstreamError>>,
) -> Result<Listing, ApiError> {
    let cached = state
        .discovery_cache
        .get_or_load(key, || async { load.await.map(Value::Array) })
        .await?;
    Ok(Listing {
        items: match cached.value {
            Value::Array(items) => items,
            _ => Vec::new(),
        },
        age: cached.stale.map(|age| age.as_secs()),
    })
}

async fn cached(
    state: &AppState,
    key: &str,
    load: impl Future<Output = Result<Vec<Value>, crate::upstream::UpstreamError>>,
) -> Result<Vec<Value>, ApiError> {
    Ok(read(state, key, load).await?.items)
}

/// The provider's plans, its read retried when `retried` (else one attempt).
async fn raw_plans(state: &AppState, retried: bool) -> Result<Listing, ApiError> {
    let upstream = state.upstream()?;
    read(state, "plans", upstream.plans_tried(retried)).await
}

/// The price of one paid period of a plan object (its own part, USD), or why it has none.
pub fn plan_cost(state: &AppState, plan: &Value) -> Result<rust_decimal::Decimal, PricingError> {
    let entries = pricing::Pricing::of(plan)
        .map(|p| p.entries().to_vec())
        .unwrap_or_default();
    let hours = pricing::hours(state.config.payments.period.as_secs());
    pricing::period_price(&entries, None, hours, &state.config.pricing).map(|p| p.usd)
}

/// `GET /api/cloud/plans`: every plan, each with `monthlyCost` (USD number or `null`), read
/// for `caller`: an anonymous read (`None`: anyone may list them) asks the provider once, a
/// caller's is retried as reads are (issue 63, point 6). While the provider fails, its last
/// answer stands in, with its age (`crate::cache`).
///
/// Errors: 503 without a provider; the provider's (502, 504, 429) with no last answer.
pub async fn plans(
    state: &AppState,
    caller: Option<&crate::identity::auth::Principal>,
) -> Result<Listing, ApiError> {
    let listing = raw_plans(state, caller.is_some()).await?;
    let items = listing
        .items
        .into_iter()
        .map(|mut plan| {
            let cost = plan_cost(state, &plan)
                .ok()
                .and_then(|cost| cost.to_f64())
                .and_then(serde_json::Number::from_f64)
                .map_or(Value::Null, Value::Number);
            if let Value::Object(fields) = &mut plan {
                fields.insert("monthlyCost".into(), cost);
            }
            plan
        })
        .collect();
    Ok(Listing { items, ..listing })
}

/// The plan `slug` (its typed view), if the provider offers it.
pub async fn find_plan(state: &AppState, slug: &str) -> Result<Option<PlanView>, ApiError> {
    for plan in raw_plans(state, true).await?.items {
        if plan.get("slug").and_then(Value::as_str) == Some(slug) {
            let view: PlanView = serde_json::from_value(plan)
                .map_err(|e| crate::upstream::UpstreamError::Decode(format!("plan {slug}: {e}")))?;
            return Ok(Some(view));
        }
    }
    Ok(None)
}

/// `GET /api/cloud/regions`.
pub async fn regions(state: &AppState) -> Result<Vec<Value>, ApiError> {
    let upstream = state.upstream()?;
    cached(state, "regions", upstream.regions()).await
}

/// `GET /api/cloud/images[?plan=slug]`: the images of one plan (from the provider), or without
/// `plan` every image any plan offers (from the plans' `softwares`, unique by slug). A slug is
/// first looked up in the plans (cached): one the catalogue does not list is a 404 without a
/// call, so made-up slugs never reach the provider and the cache holds one entry per real plan
/// at most (issue 34, point 5).
///
/// Errors: 400 (`plan`) for a malformed slug; 404 when the catalogue (or the provider) does
/// not know the plan.
pub async fn images(state: &AppState, plan: Option<&str>) -> Result<Vec<Value>, ApiError> {
    let upstream = state.upstream()?;
    if let Some(plan) = plan {
        validate::slug("plan", plan)?;
        if find_plan(state, plan).await?.is_none() {
            return Err(ApiError::NotFound(format!("plan {plan} is not offered")));
        }
        return cached(state, &format!("images:{plan}"), upstream.plan_images(plan)).await;
    }
    let mut seen = std::collections::BTreeMap::<String, Value>::new();
    for plan in raw_plans(state, true).await?.items {
        let softwares = plan.get("softwares").and_then(Value::as_array);
        for image in softwares
            .into_iter()
            .flatten()
            .filter_map(|s| s.get("image"))
        {
            if let Some(slug) = image.get("slug").and_then(Value::as_str) {
                seen.entry(slug.to_owned()).or_insert_with(|| {
                    let mut fields = Map::new();
                    fields.insert("slug".into(), Value::from(slug));
                    if let Some(name) = image.get("name") {
                        fields.insert("name".into(), name.clone());
                    }
                    Value::Object(fields)
                });
            }
        }
    }
    Ok(seen.into_values().collect())
}

/// `GET /api/cloud/teams`: each team's `id` and `name` only. The provider's team object also
/// carries the operator's billing details (company, address, VAT number, remaining credit),
/// which are nobody else's business.
pub async fn teams(state: &AppState) -> Result<Vec<Value>, ApiError> {
    let upstream = state.upstream()?;
    let teams = cached(state, "teams", upstream.teams()).await?;
    Ok(teams
        .into_iter()
        .map(|team| serde_json::json!({"id": team.get("id"), "name": team.get("name")}))
        .collect())
}

/// `GET /api/cloud/projects/{teamId}`: each project's `id` and `name` only (the provider's
/// object also carries its BGP and billing details). A team other than the configured one
/// (`UPSTREAM_TEAM_ID`), or, with none configured, not among the account's teams, is refused
/// here without asking the provider.
///
/// Errors: 404 for such a team; the provider's.
pub async fn projects(state: &AppState, team: u64) -> Result<Vec<Value>, ApiError> {
    let upstream = state.upstream()?;
    let known = match state.config.upstream.team_id {
        Some(configured) => configured == team,
        None => teams(state)
            .await?
            .iter()
            .any(|t| t.get("id").and_then(Value::as_u64) == Some(team)),
    };
    if !known {
        return Err(ApiError::NotFound(format!("no team {team}")));
    }
    let projects = cached(state, &format!("projects:{team}"), upstream.projects(team)).await?;
    Ok(projects
        .into_iter()
        .map(|project| serde_json::json!({"id": project.get("id"), "name": project.get("name")}))
        .collect())
}

/// Whether `project` is a project of the configured team (`UPSTREAM_TEAM_ID`), or of any team
/// of the account when none is configured (cached like the other discovery data).
pub async fn project_exists(state: &AppState, project: u64) -> Result<bool, ApiError> {
    let teams: Vec<u64> = match state.config.upstream.team_id {
        Some(team) => vec![team],
        None => teams(state)
            .await?
            .iter()
            .filter_map(|t| t.get("id").and_then(Value::as_u64))
            .collect(),
    };
    for team in teams {
        let found = projects(state, team)
            .await?
            .iter()
            .any(|p| p.get("id").and_then(Value::as_u64) == Some(project));
        if found {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Image `image` (slug) as the provider offers it with plan `plan` (with its own `pricing` when
/// it is licensed), or `None` when the plan does not offer it.
pub async fn plan_image(
    state: &AppState,
    plan: &str,
    image: &str,
) -> Result<Option<Value>, ApiError> {
    Ok(images(state, Some(plan))
        .await?
        .into_iter()
        .find(|i| i.get("slug").and_then(Value::as_str) == Some(image)))
}
