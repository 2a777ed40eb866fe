//! Every environment variable the library reads, one row each ([`VARIABLES`]), and the table
//! of `docs/configuration.md` rendered from them ([`table`]).

/// One row of the configuration: an environment variable, or a pair set together (a rate and
/// its burst), with what it sets and its default.
#[derive(Debug, Clone, Copy)]
pub struct Variable {
    /// The variable's names.
    pub names: &'static [&'static str],
    /// What it sets, with its unit.
    pub meaning: &'static str,
    /// For each name, the value that does what leaving it unset does (a test holds the parser
    /// to it); empty when no value says it (required, none, derived from another variable).
    pub default: &'static [&'static str],
    /// What is said of the default after those values, or instead of them.
    pub note: &'static str,
}

/// A row with a literal default per name.
const fn row(
    names: &'static [&'static str],
    meaning: &'static str,
    default: &'static [&'static str],
    note: &'static str,
) -> Variable {
    Variable {
        names,
        meaning,
        default,
        note,
    }
}

/// Every environment variable the library reads, in the order `docs/configuration.md` lists
/// them.
pub const VARIABLES: &[Variable] = &[
    row(&["TABLE_NAME"], "the DynamoDB table", &[], "required"),
    row(
        &["UPSTREAM_URL"],
        "the provider's API base, up to and including `/v1`",
        &["https://api.cherryservers.com/v1"],
        "",
    ),
    row(
        &["UPSTREAM_TOKEN"],
        "the provider's API token itself (local use: `make dev`, tests)",
        &[],
        "—",
    ),
    row(
        &["UPSTREAM_TOKEN_PARAM"],
        "name of the SSM parameter (SecureString) holding the provider's token, in AWS; set, with \
         read access to it, only on the functions that call the provider (status, discovery, \
         servers, actions, mcp, reconciler); read on the first provider call of a warm instance, \
         never at cold start (`status` only names it)",
        &[],
        "—",
    ),
    row(
        &["UPSTREAM_TEAM_ID"],
        "the team whose billing prices plans (`/teams/{id}/plans`); else `/plans`",
        &[],
        "—",
    ),
    row(
        &["UPSTREAM_TIMEOUT_SECONDS"],
        "per-request timeout to the provider, seconds (decimals allowed; a value outside 0–60 is \
         the default)",
        &["8"],
        "",
    ),
    row(
        &["UPSTREAM_MAX_RETRIES"],
        "retries of a read on 408/429/5xx and timeouts, with exponential backoff and jitter, \
         honouring `Retry-After` (creates are never retried)",
        &["2"],
        "",
    ),
    row(
        &["UPSTREAM_RETRY_BASE_MS"],
        "first backoff delay, doubled per retry, milliseconds",
        &["250"],
        "",
    ),
    row(
        &["UPSTREAM_MAX_RPS"],
        "most requests per second the refresher (the reconciler's client) sends the provider \
         (0.1–1000)",
        &["3"],
        "",
    ),
    row(
        &["CURRENCY_RATES"],
        "USD per unit of each billing currency, e.g. `EUR=1.16,GBP=1.33`",
        &["USD=1"],
        "only",
    ),
    row(
        &["PRICE_MARKUP_PERCENT"],
        "markup added to the provider's price, percent",
        &["0"],
        "",
    ),
    row(
        &["DISCOVERY_CACHE_SECONDS"],
        "how long a warm function reuses discovery data, seconds",
        &["60"],
        "",
    ),
    row(
        &["MAX_BODY_BYTES"],
        "largest accepted request body, bytes (413 above)",
        &["65536"],
        "",
    ),
    row(
        &["RATE_LIMIT_PER_SECOND", "RATE_LIMIT_BURST"],
        "per API key or session: sustained requests per second, and requests per window of \
         `burst / rate` s (a rate of 0 turns it off)",
        &["10", "50"],
        "",
    ),
    row(
        &["SIGN_IN_RATE_PER_SECOND", "SIGN_IN_RATE_BURST"],
        "per source address on `GET /api/auth/nonce` and `POST /api/auth/verify`",
        &["1", "20"],
        "",
    ),
    row(
        &[
            "OAUTH_REGISTRATIONS_PER_SECOND",
            "OAUTH_REGISTRATIONS_BURST",
        ],
        "OAuth client registrations (`POST /oauth/register`) of every caller together, beside \
         each source address's `oauth` limit (the sign-in rate): 429 `registrations` above",
        &["5", "300"],
        "",
    ),
    row(
        &["OAUTH_REDIRECT_SCHEMES"],
        "private-use schemes an OAuth client's redirect URI may have besides `https` and `http` \
         to this computer, as the clients register them: `scheme` (any URI of it) or \
         `scheme://host` (that host only), comma-separated; `none` for none",
        &["cursor://anysphere.cursor-mcp"],
        "(Cursor's)",
    ),
    row(
        &["OWNER_RATE_PER_SECOND", "OWNER_RATE_BURST"],
        "per owner (wallet), over all its keys and sessions",
        &["20", "100"],
        "",
    ),
    row(
        &["ADDRESS_RATE_PER_SECOND", "ADDRESS_RATE_BURST"],
        "per source address, every authenticated route, failed or not",
        &["40", "200"],
        "",
    ),
    row(
        &["FAILED_AUTH_PER_SECOND", "FAILED_AUTH_BURST"],
        "failed authentications per source address; over it the address is refused until the \
         window ends",
        &["0.2", "12"],
        "",
    ),
    row(
        &["PROVIDER_WRITES_PER_SECOND", "PROVIDER_WRITES_BURST"],
        "writes at the provider one owner causes beside a paid create: the SSH keys a rebuild \
         registers (an SSH key is registered only when a paid server or a rebuild uses it; 429 \
         `provider-writes` above)",
        &["0.02", "20"],
        "",
    ),
    row(
        &["MAX_WAITS_PER_OWNER", "MAX_WAITS"],
        "long polls (`waitFor`, `wait_for_sandbox`, an approval's) one owner, and every owner \
         together, may hold at once (429 `waits` / `waits-pool` above); an owner's at most a \
         third of the pool's",
        &["4", "60"],
        "",
    ),
    row(
        &["MAX_SLOW_DELIVERIES_PER_OWNER"],
        "webhook delivery attempts of one owner that may wait past a second for their endpoints \
         at once; a slower one is given up and retried (at most a third of the template's \
         `DeliveriesConcurrency`)",
        &["2"],
        "",
    ),
    row(
        &["MAX_WEBHOOK_TESTS_PER_OWNER"],
        "webhook test events one owner may have queued and not yet tried (429 `webhook-tests` \
         above)",
        &["5"],
        "",
    ),
    row(
        &["MAX_PAID_IN_FLIGHT_PER_OWNER", "MAX_PAID_IN_FLIGHT"],
        "paid requests with a new payment one owner (and one payer, whatever owners it pays \
         for), and every owner together, may have in flight at once, from the payment's \
         checks on chain to the order's end (429 `paid` / `paid-pool` above; nothing claimed \
         or charged); an owner's at most a third of the pool's (`docs/capacity.md`)",
        &["3", "9"],
        "",
    ),
    row(
        &[
            "MAX_SIGN_INS_IN_FLIGHT_PER_ADDRESS",
            "MAX_SIGN_INS_IN_FLIGHT",
        ],
        "sign-ins and approvals whose signature is being checked on chain (a smart wallet's) at \
         once, from one source address and from everyone (429 `sign-in` / `sign-in-pool` \
         above); an address's at most a third of the pool's",
        &["4", "12"],
        "",
    ),
    row(
        &["MAX_KEYS_PER_OWNER"],
        "unrevoked API keys one owner may hold (409 above)",
        &["50"],
        "",
    ),
    row(
        &["MAX_SANDBOXES_PER_OWNER"],
        "metadata sandboxes (`POST /api/sandboxes`) one owner may create (409 above)",
        &["500"],
        "",
    ),
    row(
        &["MAX_WEBHOOKS_PER_OWNER"],
        "webhook endpoints one owner may register (409 above)",
        &["10"],
        "",
    ),
    row(
        &["MAX_SSH_KEYS_PER_OWNER"],
        "SSH keys one owner may add (409 above)",
        &["50"],
        "",
    ),
    row(
        &["DELIVERY_QUEUE_URL"],
        "the SQS FIFO queue of webhook deliveries (the template's; `make dev` makes one in moto)",
        &[],
        "(webhooks not delivered)",
    ),
    row(
        &["EDGE_ORIGIN_SECRET", "EDGE_ORIGIN_SECRET_PREVIOUS"],
        "behind the template's CloudFront and WAF (`EdgeProtection`): the secret CloudFront \
         sends as `X-Origin-Verify` (at least 32 characters), and while it is rotated the one \
         it replaces; a request with neither is refused (403), and the caller's address is \
         `CloudFront-Viewer-Address`",
        &[],
        "(no edge)",
    ),
    row(
        &["WEBHOOK_LOCAL_RECEIVER"],
        "`1`: a webhook endpoint may be `http://127.0.0.1:<port>` (local stacks and tests only: \
         refused at cold start in Lambda)",
        &["0"],
        "(off)",
    ),
    row(
        &["SIWE_DOMAINS"],
        "domains (`host[:port]`) a sign-in message may name",
        &[],
        "none: sign-in refused",
    ),
    row(
        &["SIWE_URI_PREFIXES"],
        "origins the message's `URI` must equal or continue with `/`",
        &[],
        "`https://<domain>` of each domain",
    ),
    row(
        &["SIWE_CHAIN_IDS"],
        "chain ids a sign-in message may name",
        &["8453"],
        "",
    ),
    row(
        &["SESSION_TTL_SECONDS"],
        "absolute lifetime of a session, seconds",
        &["604800"],
        "(7 days)",
    ),
    row(
        &["SESSION_IDLE_SECONDS"],
        "a session unused this long ends, seconds",
        &["86400"],
        "(1 day)",
    ),
    row(
        &["WEB_ORIGIN"],
        "the web app's exact origin, one `https://host[:port]` (`http://` only for `localhost` \
         or `127.0.0.1`; anything else, `null` or `*` included, stops the function at cold \
         start): CORS (with credentials) on the auth, keys and notifications routes, and besides \
         the service's own the only origin a session cookie may write from",
        &[],
        "none",
    ),
    row(
        &["X402_NETWORK"],
        "`base` or `base-sepolia`: where payments are made",
        &["base-sepolia"],
        "(the template's default: `base`)",
    ),
    row(
        &["X402_PAY_TO"],
        "the treasury address paid plans are paid to",
        &[],
        "none: paid plans answer 503",
    ),
    row(
        &["X402_MAX_TIMEOUT_SECONDS"],
        "the offer's `maxTimeoutSeconds`",
        &["120"],
        "",
    ),
    row(
        &["X402_WAIT_SECONDS"],
        "how long a request whose payment another attempt holds waits for its outcome before \
         answering 202 (0–25)",
        &["5"],
        "",
    ),
    row(
        &["FACILITATOR_URL"],
        "the facilitator's base URL",
        &["https://x402.org/facilitator"],
        "(Base Sepolia), CDP's `https://api.cdp.coinbase.com/platform/v2/x402` (Base)",
    ),
    row(
        &["FACILITATOR_AUTH_HEADER"],
        "a static `Name: value` header sent to the facilitator (when no CDP key is set)",
        &[],
        "—",
    ),
    row(
        &["CDP_API_KEY_ID", "CDP_API_KEY_SECRET"],
        "a Coinbase CDP API key: a per-request ES256/EdDSA JWT to the facilitator instead",
        &[],
        "—",
    ),
    row(
        &["CDP_API_KEY_SECRET_PARAM"],
        "SSM parameter (SecureString) holding `CDP_API_KEY_SECRET`, with `CDP_API_KEY_ID`; read on \
         the first facilitator call of a warm instance, never at cold start",
        &[],
        "—",
    ),
    row(
        &["FACILITATOR_TIMEOUT_SECONDS"],
        "per-request timeout to the facilitator, seconds (0.1–25)",
        &["5"],
        "",
    ),
    row(
        &["X402_SETTLEMENT_SENDER"],
        "the address the facilitator settles from (its signer, as `/supported` names it): a \
         smart wallet's payment is checked before anything of it is recorded by simulating \
         the settlement's `transferWithAuthorization` sent from it",
        &[super::SETTLEMENT_SENDER],
        "(an address with no code)",
    ),
    row(
        &["PAID_REFUSAL_COOLDOWN_SECONDS"],
        "how long an owner, and a payer, whose payment passed the checks on chain and was then \
         refused by the facilitator may not start another paid request (429 `paid-refused`; \
         0: never)",
        &["600"],
        "",
    ),
    row(
        &["RPC_URL"],
        "a JSON-RPC node of the payment network: the chain's word on every settlement (receipts, \
         USDC's `AuthorizationUsed` and `Transfer` logs, `authorizationState`) and on smart \
         wallets' sign-in signatures (ERC-1271, ERC-6492); its chain (`eth_chainId`, asked on \
         first use) must be `X402_NETWORK`'s, else every call to it fails naming both",
        &["https://sepolia.base.org"],
        "(Base Sepolia), `https://mainnet.base.org` (Base)",
    ),
    row(
        &["RPC_TIMEOUT_SECONDS"],
        "per-request timeout to that node, seconds (0.1–20)",
        &["3"],
        "",
    ),
    row(
        &["PAID_PERIOD_SECONDS"],
        "one paid period of a server (the price covers the provider's hourly billing for it)",
        &["2628000"],
        "(730 h)",
    ),
    row(
        &["EXPIRY_GRACE_SECONDS"],
        "after its paid time a server is powered off; this long later it is deleted",
        &["259200"],
        "(72 h)",
    ),
    row(
        &["MAX_PAID_AHEAD_SECONDS"],
        "how far ahead of now a renewal may take a server's `paidUntil` (400 naming `periods` \
         beyond)",
        &["31536000"],
        "(365 days)",
    ),
    row(
        &["ORDER_LEASE_SECONDS"],
        "how long an attempt holds an in-flight order, more than a function runs (1–3600)",
        &["60"],
        "",
    ),
    row(
        &["ORDER_DEADLINE_SECONDS"],
        "a paid order that got no create out this long after its claim becomes a credit \
         (1–86400)",
        &["300"],
        "",
    ),
    row(
        &["ORDER_CREATE_ATTEMPTS"],
        "creates sent for one order before it becomes a credit (1–10)",
        &["3"],
        "",
    ),
    row(
        &["CREATE_SETTLE_SECONDS"],
        "after a create whose answer was unclear, how long the order searches for it (on \
         reconciler passes) before another create or a credit, counted from the end of the \
         lease of the attempt that announced it (`ORDER_LEASE_SECONDS`; 0–86400)",
        &["300"],
        "",
    ),
    row(
        &["SWEEP_SECONDS"],
        "how often each project is swept for this deployment's servers that no record owns \
         (deleted, reported); `0` turns it off",
        &["600"],
        "",
    ),
    row(
        &["REQUEST_BUDGET_SECONDS"],
        "the time a request has when its invocation names no deadline, as under `cargo lambda \
         watch`, in tests and tools (1–900)",
        &["28"],
        "",
    ),
    row(
        &["REFRESH_STABLE_SECONDS"],
        "a server in no transition is read from the provider at most this often, seconds",
        &["600"],
        "",
    ),
    row(
        &["DEPLOY_ETA_VPS_SECONDS", "DEPLOY_ETA_BAREMETAL_SECONDS"],
        "the usual time to `ready` (`etaAt`): VPS, bare metal",
        &["300", "1200"],
        "",
    ),
    row(
        &[
            "DEPLOY_DEADLINE_VPS_SECONDS",
            "DEPLOY_DEADLINE_BAREMETAL_SECONDS",
        ],
        "a new server not `ready` this long after its order is deleted, and a paid one becomes a \
         credit (`deadlineAt`): VPS, bare metal",
        &["1800", "5400"],
        "",
    ),
    row(
        &["SSH_PROBE_TIMEOUT_SECONDS"],
        "the readiness check's TCP connect and SSH key exchange timeout, seconds (at least 0.1)",
        &["3"],
        "",
    ),
    row(
        &["SSH_PROBE_TARGET"],
        "`host:port` the readiness check dials instead of `<IPv4>:<SSH_PORT>` (local stacks and \
         tests only)",
        &[],
        "—",
    ),
    row(
        &["SSH_PORT"],
        "the port servers' SSH listens on: dialed by the readiness check, answered as \
         `access.sshPort` (a local stack's simulated servers: another port)",
        &["22"],
        "",
    ),
    row(
        &["PUBLIC_BASE_URL"],
        "the API's public base URL, for the offer's `resource`",
        &[],
        "`https://<Host>`",
    ),
    row(
        &["METRICS_NAMESPACE"],
        "CloudWatch namespace of the embedded-format metrics (read by `domain::metrics`)",
        &["CloudApi"],
        "",
    ),
];

/// The markdown table of [`VARIABLES`]: what `docs/configuration.md` shows between
/// `<!-- config:begin -->` and `<!-- config:end -->`.
pub fn table() -> String {
    let code = |values: &[&str]| {
        values
            .iter()
            .map(|v| format!("`{v}`"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut out = String::from("| variable | meaning | default |\n|---|---|---|\n");
    for variable in VARIABLES {
        let default = match (variable.default.is_empty(), variable.note.is_empty()) {
            (true, true) => "—".to_owned(),
            (true, false) => variable.note.to_owned(),
            (false, true) => code(variable.default),
            (false, false) => format!("{} {}", code(variable.default), variable.note),
        };
        out.push_str(&format!(
            "| {} | {} | {default} |\n",
            code(variable.names),
            variable.meaning
        ));
    }
    out
}
