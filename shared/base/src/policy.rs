//! What a key may do and spend, as values: its [`Scope`]s and its spending [`Policy`] (the
//! rules that apply them are `domain::keys`'s; the store keeps them on the key's record).
//!
//! Scopes: `read` (every read: discovery, quotes, servers, sandboxes, payments, agents),
//! `provision` (create a server), `act` (server actions, sandbox records), `delete` (delete a
//! server), `renew` (buy more paid time), `pay` (any request that is paid) and `webhooks`
//! (registering endpoints, which receive every event of the owner). A key is issued with the
//! [`Scope::DEFAULT`] ones (all but `webhooks`) unless its owner names others: `webhooks` is
//! never granted implicitly, so keys issued before it existed do not have it. A session (the
//! owner) has all of them.

use crate::money::Usdc;
use serde::Serialize;

/// What a key may do (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Every read.
    Read,
    /// Creating a server.
    Provision,
    /// Server actions, sandbox records and registering agents.
    Act,
    /// Deleting a server.
    Delete,
    /// Buying more paid time.
    Renew,
    /// Any paid request.
    Pay,
    /// Registering and managing webhook endpoints (`/api/webhooks`).
    Webhooks,
}

impl Scope {
    /// What a key has unless its owner names its scopes: every scope but
    /// [`Scope::Webhooks`] (an endpoint receives every event of the owner, so it is asked for
    /// by name).
    pub const DEFAULT: [Scope; 6] = [
        Scope::Read,
        Scope::Provision,
        Scope::Act,
        Scope::Delete,
        Scope::Renew,
        Scope::Pay,
    ];

    /// Every scope (a session's).
    pub const ALL: [Scope; 7] = [
        Scope::Read,
        Scope::Provision,
        Scope::Act,
        Scope::Delete,
        Scope::Renew,
        Scope::Pay,
        Scope::Webhooks,
    ];

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Provision => "provision",
            Scope::Act => "act",
            Scope::Delete => "delete",
            Scope::Renew => "renew",
            Scope::Pay => "pay",
            Scope::Webhooks => "webhooks",
        }
    }

    /// The scope named `name`, if any.
    pub fn parse(name: &str) -> Option<Scope> {
        Scope::ALL.into_iter().find(|s| s.as_str() == name)
    }
}

/// A key's policy (optional; every field optional): what the key may provision and spend,
/// checked before any 402 (`domain::ratelimit::spend::check_policy`). Amounts are USD
/// (0 < x ≤ 1,000,000, at most six decimals, read exactly as written):
/// `maxPricePerServer` bounds the price of one paid period of a server (a new server's first, each
/// period a renewal buys);
/// `dailySpendLimit` and `monthlySpendLimit` bound what the key's payments add up to per UTC
/// day and UTC month (new servers and renewals). `allowedPlans` and `allowedRegions` are provider
/// slugs (1 to 50 each); `maxActiveServers` (1 to 1000) bounds the servers the key provisioned
/// that exist or are being provisioned.
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Policy {
    /// The most one new server may cost, USD.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0.000001, maximum = 1000000)]
    #[schema(value_type = Option<f64>)]
    pub max_price_per_server: Option<Usdc>,
    /// The most the key may spend per UTC day, USD.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0.000001, maximum = 1000000)]
    #[schema(value_type = Option<f64>)]
    pub daily_spend_limit: Option<Usdc>,
    /// The most the key may spend per UTC month, USD.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0.000001, maximum = 1000000)]
    #[schema(value_type = Option<f64>)]
    pub monthly_spend_limit: Option<Usdc>,
    /// The plans the key may provision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_plans: Option<Vec<String>>,
    /// The regions the key may provision in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_regions: Option<Vec<String>>,
    /// The most servers the key may hold at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 1000)]
    pub max_active_servers: Option<u32>,
}
