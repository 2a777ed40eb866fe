//! Every route of the API, written once (issue 31, point 1): one row per operation with the
//! function that serves it, its method and path (API Gateway's pattern: literal and `{name}`
//! segments), who may call it and the scope a key needs, and what the OpenAPI document says of
//! it (body, query, answers, errors, paid, summary, operation id). A row a handler answers is
//! also a typed static (`GET_AGENT: Row<One<Agent>>`, [`answers`]): its body's and its
//! answer's types.
//!
//! Everything else follows from this table:
//! - each function's router binds operation ids to its route variants and admits the caller
//!   by the row (`faces::router::admit`: `who`, then `scope`), before the handler runs;
//! - the handler answers through its typed row (`faces::http::answer`): the row's status, and a
//!   body of the row's type or it does not compile; every status a row may answer is
//!   [`Operation::statuses`], to which a test holds every row's answers;
//! - the MCP tools name their operation, whose scope, payment, arguments (the path's id, the
//!   query's [`Param`]s by their [`Kind`], the body's fields), description ([`Operation::about`])
//!   and (where the result is the row's body) output schema they take;
//! - `faces::openapi::document` iterates it, its schemas from the rows' types;
//! - `svcctl generate` writes the template's `Events:`, the `cargo lambda watch` router of
//!   `Cargo.toml` and the example events from it ([`generated`]; the template's DynamoDB
//!   statements from the functions' grants, [`access`]), and a test fails when a written file
//!   is not what it would write now;
//! - tests hold `docs/api.md` and the console's calls to it.
//!
//! Adding an endpoint is one row here (typed by its answer), one binding and match arm in its
//! function, and one domain verb; then `svcctl generate`.

pub mod access;
pub mod answers;
pub mod generated;
pub mod params;
pub mod paths;

use lambda_http::http::Method;
use utoipa::openapi::{RefOr, Schema};

pub use answers::{Answer, List, Nothing, Object, One, PageOf, RequestBody, Row, Schemas, Success};
pub use params::{Kind, Param};

use crate::policy::Scope;

/// A Lambda function of the API: one binary of `functions/`, one resource of `template.yaml`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Function {
    /// `functions/status`.
    Status,
    /// `functions/docs`: the OpenAPI document.
    Docs,
    /// `functions/console`: the web console's page and files.
    Console,
    /// `functions/auth`: Sign-In with Ethereum.
    Auth,
    /// `functions/keys`: API keys and agents.
    Keys,
    /// `functions/discovery`: the provider's catalogue and quotes.
    Discovery,
    /// `functions/servers`: listing, provisioning, renewals and resizes (the paid path).
    Servers,
    /// `functions/actions`: power actions and deletion.
    Actions,
    /// `functions/sandboxes`.
    Sandboxes,
    /// `functions/payments`.
    Payments,
    /// `functions/notifications`: events and webhooks.
    Notifications,
    /// `functions/mcp`.
    Mcp,
}

impl Function {
    /// Every function that serves HTTP routes.
    pub const ALL: [Function; 12] = [
        Function::Status,
        Function::Docs,
        Function::Console,
        Function::Auth,
        Function::Keys,
        Function::Discovery,
        Function::Servers,
        Function::Actions,
        Function::Sandboxes,
        Function::Payments,
        Function::Notifications,
        Function::Mcp,
    ];

    /// The binary's (and the package's) name, e.g. `keys`.
    pub fn name(self) -> &'static str {
        match self {
            Function::Status => "status",
            Function::Docs => "docs",
            Function::Console => "console",
            Function::Auth => "auth",
            Function::Keys => "keys",
            Function::Discovery => "discovery",
            Function::Servers => "servers",
            Function::Actions => "actions",
            Function::Sandboxes => "sandboxes",
            Function::Payments => "payments",
            Function::Notifications => "notifications",
            Function::Mcp => "mcp",
        }
    }
}

/// Who may call an operation. A credential presented is a credential checked (issue 63,
/// point 9): every row but [`Who::Anyone`]'s authenticates what a request carries and refuses
/// a bad one (401), an open row's [`Who::AnyoneChecked`] included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Who {
    /// Anyone, and no credential is read: the rows where a credential is obtained (sign-in,
    /// OAuth's endpoints and metadata), so that a stale one never keeps its holder from getting
    /// a new one; the CORS preflights (a browser sends none); `GET /mcp`'s 405; and the rows of
    /// the functions that hold no store (status, the documents, the console), whose answers
    /// are the same for every caller.
    Anyone,
    /// Anyone without a credential; with one (an API key, a bearer — a session token, a key or
    /// an OAuth access token standing for its key — or the session cookie) the caller it
    /// proves, or 401 for a bad one, as on every other row.
    AnyoneChecked,
    /// An API key or a session.
    KeyOrSession,
    /// A signed-in human only.
    Session,
    /// An API key only (provisioning): a session is refused, 403 naming what the route needs.
    Key,
    /// An API key alone, its credential read as nothing else (the MCP endpoint, whose clients
    /// present a bearer): anything but a valid key is 401.
    KeyAlone,
}

impl Who {
    /// Whether anyone may call the row without a credential ([`Who::Anyone`],
    /// [`Who::AnyoneChecked`]): the open routes' throttle is its (`OpenRouteThrottle*`).
    pub const fn open(self) -> bool {
        matches!(self, Who::Anyone | Who::AnyoneChecked)
    }
}

/// One operation of the API.
#[derive(Debug, Clone)]
pub struct Operation {
    /// The function that serves it.
    pub function: Function,
    /// Its method.
    pub method: Method,
    /// Its path pattern (`{name}` segments).
    pub path: &'static str,
    /// The OpenAPI operation id, unique; the template's event is its PascalCase form.
    pub id: &'static str,
    /// One line for the document.
    pub summary: &'static str,
    /// Who may call it: the router authenticates the caller by this before the handler runs
    /// (`faces::router::admit`).
    pub who: Who,
    /// The scope an API key needs for it, checked by the router after [`Operation::who`]
    /// (a session has every scope); `None`: the route needs none of its own (a paid request's
    /// `pay` and an MCP tool's scope are checked by the domain).
    pub scope: Option<Scope>,
    /// The request body's type, if any.
    pub body: Option<RequestBody>,
    /// Query parameters, each with the values it takes.
    pub query: &'static [Param],
    /// What the operation does, at more length than [`Operation::summary`]: the document's
    /// description, and the MCP tool's that calls it (`None`: the summary says it all).
    pub about: Option<&'static str>,
    /// The success status and its description.
    pub ok: (&'static str, &'static str),
    /// Another success, of the same shape, and its description (e.g. 200 for a creation that
    /// found what it would create already there).
    pub also_ok: Option<(&'static str, &'static str)>,
    /// The error statuses (problem documents).
    pub errors: &'static [&'static str],
    /// Takes an x402 payment.
    pub paid: bool,
    /// The success body's schema, and the named schemas it refers to; `None`: no body. A
    /// typed row ([`Row`]) takes it from its answer's type; the others answer an object.
    pub answer: fn(&mut Schemas) -> Option<RefOr<Schema>>,
    /// In the OpenAPI document (the console's page and files are not the API).
    pub documented: bool,
    /// The prefix of the path's `{id}` when it is one of the service's ids (`key_`, `agt_`,
    /// `sbx_`, then 32 hex digits); `None`: the provider's numeric ids.
    pub id_prefix: Option<&'static str>,
}

/// A count of paid periods.
const PERIODS: Kind = Kind::Whole {
    min: 1,
    max: MAX_RENEWAL_PERIODS as u64,
};

/// The form of the provider's numeric ids (servers, projects, teams) as a string.
pub const PROVIDER_ID: &str = "^[1-9][0-9]{0,14}$";

/// A page's query parameters.
pub const PAGE: &[Param] = &[
    LIMIT,
    Param::new("cursor", "the previous page's nextCursor", Kind::Text),
];

/// A page's size.
const LIMIT: Param = Param::new(
    "limit",
    "page size (default 50)",
    Kind::Whole { min: 1, max: 100 },
)
.example("20");

/// A long poll's hold, in seconds: the one limit of every wait, over HTTP and MCP.
const TIMEOUT: Param = Param::new(
    "timeout",
    "seconds to hold while waiting (default and at most 20)",
    Kind::Whole {
        min: 0,
        max: crate::servers::stages::MAX_WAIT_SECONDS,
    },
)
.example("1");

fn stage_names() -> Vec<&'static str> {
    crate::servers::stages::Stage::ALL
        .iter()
        .map(|s| s.as_str())
        .collect()
}

fn event_type_names() -> Vec<&'static str> {
    crate::store::events::EventType::ALL
        .iter()
        .map(|t| t.as_str())
        .collect()
}

/// The errors of an operation that reads the provider.
const CLOUD_ERRORS: &[&str] = &["400", "401", "403", "404", "429", "502", "503", "504"];
/// The errors of an operation on one webhook endpoint.
const WEBHOOK_ERRORS: &[&str] = &["400", "401", "403", "404"];
/// The errors of a page of the caller's records.
const PAGE_ERRORS: &[&str] = &["400", "401", "403"];

/// An operation with no body, query or payment, shaped as an object.
#[allow(clippy::too_many_arguments)]
const fn op(
    function: Function,
    method: Method,
    path: &'static str,
    id: &'static str,
    summary: &'static str,
    who: Who,
    ok: (&'static str, &'static str),
    errors: &'static [&'static str],
) -> Operation {
    Operation {
        function,
        method,
        path,
        id,
        summary,
        who,
        scope: None,
        body: None,
        query: &[],
        about: None,
        ok,
        also_ok: None,
        errors,
        paid: false,
        answer: <Object as Answer>::schema,
        documented: true,
        id_prefix: None,
    }
}

/// The CORS preflight of a path the web app calls (answered by `faces::http::serve_cors`).
const fn preflight(function: Function, path: &'static str, id: &'static str) -> Operation {
    let mut row = op(
        function,
        Method::OPTIONS,
        path,
        id,
        "CORS preflight for the web app's origin",
        Who::Anyone,
        ("204", "allowed"),
        &["403"],
    );
    row.answer = <Nothing as Answer>::schema;
    row
}

/// The CORS preflight of an OAuth endpoint (any origin: `faces::oauth::serve`), undocumented.
const fn open_preflight(path: &'static str, id: &'static str) -> Operation {
    preflight(Function::Keys, path, id).undocumented()
}

impl Operation {
    /// The form of the path's id: the service's prefixed ids (`key_`, `agt_`, `sbx_` + 32 hex)
    /// where the row names the prefix ([`Operation::id_prefix`]), else the provider's numeric ids
    /// ([`PROVIDER_ID`]: servers, projects, teams).
    pub fn id_pattern(&self) -> String {
        match self.id_prefix {
            Some(prefix) => format!("^{prefix}[0-9a-f]{{32}}$"),
            None => PROVIDER_ID.to_owned(),
        }
    }

    const fn body<T: utoipa::ToSchema>(mut self) -> Self {
        self.body = Some(RequestBody::of::<T>());
        self
    }
    const fn query(mut self, query: &'static [Param]) -> Self {
        self.query = query;
        self
    }
    const fn about(mut self, about: &'static str) -> Self {
        self.about = Some(about);
        self
    }
    const fn paid(mut self) -> Self {
        self.paid = true;
        self
    }
    const fn undocumented(mut self) -> Self {
        self.documented = false;
        self
    }
    const fn also_ok(mut self, status: &'static str, description: &'static str) -> Self {
        self.also_ok = Some((status, description));
        self
    }
    const fn scope(mut self, scope: Scope) -> Self {
        self.scope = Some(scope);
        self
    }
    const fn ids(mut self, prefix: &'static str) -> Self {
        self.id_prefix = Some(prefix);
        self
    }
}

use crate::ids::{AGENT, API_KEY, APPROVAL, OAUTH_CLIENT, SANDBOX, SSH_KEY, WEBHOOK};
use Function::{Actions, Auth, Console, Discovery, Docs, Keys, Mcp, Notifications, Payments};
use Function::{Sandboxes, Servers, Status};
use Scope::{Act, Delete, Provision, Read, Renew, Webhooks};
use Who::{Anyone, AnyoneChecked, Key, KeyAlone, KeyOrSession, Session};

use crate::billing::payments::PaymentView;
use crate::billing::purchase::{
    MAX_RENEWAL_PERIODS, ProvisionRequest, RenewalRequest, ResizeRequest,
};
use crate::identity::agents::{Agent, NewAgent};
use crate::identity::approvals::{ApprovalView, GrantRequest};
use crate::identity::auth::session::SessionView;
use crate::identity::auth::siwe::VerifyRequest;
use crate::identity::keys::{GenerateKeyRequest, IssuedKey, KeyChange, KeyView};
use crate::identity::oauth::clients::{ClientView, Registered, Registration};
use crate::identity::oauth::grants::{Consent, Consented, Tokens};
use crate::identity::ssh_keys::{NewSshKey, SshKey};
use crate::notifications::events::Event;
use crate::notifications::webhooks::{Delivery, Endpoint, NewEndpoint, WithSecret};
use crate::servers::sandboxes::{NewSandbox, Sandbox, SandboxView};
use crate::servers::{ActionRequest, QuoteAnswer};
use answers::JsonRpcMessage;

/// The table: each row an [`Operation`]; a row a handler answers is also a typed static,
/// `pub NAME: Answer = row`, named after its id (`getAgent`: `GET_AGENT`), whose form of answer
/// the handler must give (`faces::http::answer`).
macro_rules! operations {
    ($( $(pub $name:ident: $answer:ty =)? $row:expr ),* $(,)?) => {
        $( operations!(@typed $($name: $answer)? ; $row); )*

        /// Every operation, in the document's order.
        pub static OPERATIONS: &[&Operation] = &[ $( operations!(@row $($name)? ; $row) ),* ];
    };
    (@typed $name:ident: $answer:ty ; $row:expr) => {
        #[doc = concat!("The typed row `", stringify!($name), "` of [`OPERATIONS`].")]
        pub static $name: Row<$answer> = Row::new($row);
    };
    (@typed ; $row:expr) => {};
    (@row $name:ident ; $row:expr) => { &$name.op };
    (@row ; $row:expr) => { &$row };
}

operations! {
    // The service's own: status, this document, the console, the MCP endpoint.
    pub GET_STATUS: Object =
        op(Status, Method::GET, "/api/cloud/status", "getStatus",
            "Whether the provider is configured", Anyone, ("200", "`{configured}`"), &[]),
    pub GET_OPEN_API: Object =
        op(Docs, Method::GET, "/api/openapi.json", "getOpenApi", "This document", Anyone,
            ("200", "OpenAPI 3.1"), &[]),
    // What lets agents find what is sold (`faces::discovery`): the document at the root, where
    // x402 indexers look first; the paid routes for an indexer; a guide for agents (text).
    pub GET_ROOT_OPEN_API: Object =
        op(Docs, Method::GET, "/openapi.json", "getRootOpenApi",
            "This document, at the root (where x402 indexers look)", Anyone,
            ("200", "OpenAPI 3.1"), &[]),
    pub GET_X402_DISCOVERY: Object =
        op(Docs, Method::GET, "/.well-known/x402", "getX402Discovery",
            "The paid routes, for x402 indexers", Anyone,
            ("200", "`{version: 1, resources, instructions}` (x402scan's shape)"), &[]),
    pub GET_LLMS_TXT: Object =
        op(Docs, Method::GET, "/llms.txt", "getLlmsTxt",
            "What is sold and how an agent buys it (text/plain)", Anyone, ("200", "text"), &[])
            .undocumented(),
    op(Console, Method::GET, "/", "consolePage", "The console's page", Anyone,
        ("200", "HTML"), &[]).undocumented(),
    op(Console, Method::HEAD, "/", "consolePageHead", "The console's page", Anyone,
        ("200", "HTML"), &[]).undocumented(),
    op(Console, Method::GET, "/console/{file}", "consoleFile", "A console file", Anyone,
        ("200", "the file"), &["404"]).undocumented(),
    op(Console, Method::HEAD, "/console/{file}", "consoleFileHead", "A console file", Anyone,
        ("200", "the file"), &["404"]).undocumented(),
    pub MCP: Object =
    op(Mcp, Method::POST, "/mcp", "mcp",
        "The Model Context Protocol: one JSON-RPC message (Streamable HTTP, stateless, JSON \
         answers); tools list_plans … delete_ssh_key, x402 payments in `_meta[\"x402/payment\"]` \
         (provision_server, renew_server, resize_server)",
        KeyAlone, ("200", "the JSON-RPC response"), &["401", "413"]).body::<JsonRpcMessage>(),
    op(Mcp, Method::GET, "/mcp", "mcpStream",
        "No server-sent event stream: the transport is stateless (MCP Streamable HTTP: 405)",
        Anyone, ("405", "no stream; send each JSON-RPC message with POST"), &[]),
    // Sign-in with Ethereum and the session.
    pub GET_NONCE: Object =
        op(Auth, Method::GET, "/api/auth/nonce", "getNonce", "A single-use sign-in nonce", Anyone,
            ("200", "`{nonce, expiresAt}`"), &[]),
    preflight(Auth, "/api/auth/nonce", "preflightNonce"),
    pub VERIFY_SIGN_IN: Object =
        op(Auth, Method::POST, "/api/auth/verify", "verifySignIn",
            "Sign in with Ethereum (EIP-4361): a session", Anyone,
            ("200", "`{address, expiresAt}` and the HttpOnly session cookie for a page (a request \
              with `Origin`); `{address, token, expiresAt}` without `Origin`"),
            &["400", "401", "415", "503"]).body::<VerifyRequest>(),
    preflight(Auth, "/api/auth/verify", "preflightVerify"),
    pub LOGOUT: Nothing =
        op(Auth, Method::POST, "/api/auth/logout", "logout", "End the session", Session,
            ("204", "ended"), &["401", "403"]),
    preflight(Auth, "/api/auth/logout", "preflightLogout"),
    pub GET_ME: One<SessionView> =
        op(Auth, Method::GET, "/api/auth/me", "getMe", "Who is signed in", Session,
            ("200", "`{address, createdAt, expiresAt}`"), &["401", "403"]),
    preflight(Auth, "/api/auth/me", "preflightMe"),
    // MCP's authorization (`crate::identity::oauth`): the OAuth endpoints, out of this document
    // (OAuth's own forms and errors; CORS for any origin), then the console's consent.
    pub GET_PROTECTED_RESOURCE: Object =
        op(Keys, Method::GET, "/.well-known/oauth-protected-resource/mcp", "getProtectedResource",
            "The MCP endpoint's protected-resource metadata (RFC 9728)", Anyone,
            ("200", "RFC 9728 metadata"), &[]).undocumented(),
    open_preflight("/.well-known/oauth-protected-resource/mcp", "preflightProtectedResource"),
    pub GET_PROTECTED_RESOURCE_ROOT: Object =
        op(Keys, Method::GET, "/.well-known/oauth-protected-resource",
            "getProtectedResourceRoot",
            "The MCP endpoint's protected-resource metadata, at the root (RFC 9728)", Anyone,
            ("200", "RFC 9728 metadata"), &[]).undocumented(),
    open_preflight("/.well-known/oauth-protected-resource", "preflightProtectedResourceRoot"),
    pub GET_AUTHORIZATION_SERVER: Object =
        op(Keys, Method::GET, "/.well-known/oauth-authorization-server", "getAuthorizationServer",
            "The authorization server's metadata (RFC 8414)", Anyone,
            ("200", "RFC 8414 metadata"), &[]).undocumented(),
    open_preflight("/.well-known/oauth-authorization-server", "preflightAuthorizationServer"),
    pub REGISTER_CLIENT: One<Registered> =
        op(Keys, Method::POST, "/oauth/register", "registerClient",
            "Register a public OAuth client (RFC 7591)", Anyone,
            ("201", "the client's id and metadata"), &["400", "413", "429"])
            .body::<Registration>().undocumented(),
    open_preflight("/oauth/register", "preflightRegisterClient"),
    op(Keys, Method::GET, "/oauth/authorize", "authorize",
        "An authorization request (code, PKCE S256): to the console's consent page", Anyone,
        ("302", "to the consent page, or back to the client with an error"), &["400", "429"])
        .undocumented(),
    pub TOKEN: One<Tokens> =
        op(Keys, Method::POST, "/oauth/token", "token",
            "A code or a refresh token for an access token and a new refresh token", Anyone,
            ("200", "the tokens"), &["400", "413", "429"]).undocumented(),
    open_preflight("/oauth/token", "preflightToken"),
    pub REVOKE_TOKEN: Nothing =
        op(Keys, Method::POST, "/oauth/revoke", "revokeToken",
            "Revoke a token and its grant (RFC 7009)", Anyone,
            ("200", "revoked, or not a token this server knows"), &["400", "413", "429"])
            .undocumented(),
    open_preflight("/oauth/revoke", "preflightRevokeToken"),
    pub GET_OAUTH_CLIENT: One<ClientView> =
        op(Keys, Method::GET, "/api/oauth/clients/{id}", "getOAuthClient",
            "An OAuth client asking for a grant, as the consent page shows it", Session,
            ("200", "the client"), &["400", "401", "403", "404"]).ids(OAUTH_CLIENT),
    preflight(Keys, "/api/oauth/clients/{id}", "preflightOAuthClient"),
    pub CONSENT_OAUTH: One<Consented> =
        op(Keys, Method::POST, "/api/oauth/consent", "consentOAuth",
            "Approve (a new API key, the scopes and policy chosen) or deny an OAuth request",
            Session, ("200", "where the browser goes: the client's redirect URI, code or refusal"),
            &["400", "401", "403", "409"]).body::<Consent>(),
    preflight(Keys, "/api/oauth/consent", "preflightConsentOAuth"),
    // A signed-in human's API keys.
    pub GENERATE_KEY: One<IssuedKey> =
        op(Keys, Method::POST, "/api/keys/generate", "generateKey", "A new API key, shown once",
            Session, ("201", "the key"), &["400", "401", "403", "409"])
            .body::<GenerateKeyRequest>(),
    preflight(Keys, "/api/keys/generate", "preflightGenerateKey"),
    pub LIST_KEYS: PageOf<KeyView> =
        op(Keys, Method::GET, "/api/keys", "listKeys", "The caller's keys", Session,
            ("200", "`{items, nextCursor}`"), PAGE_ERRORS)
            .query(PAGE),
    preflight(Keys, "/api/keys", "preflightKeys"),
    pub REVOKE_KEY: One<KeyView> =
        op(Keys, Method::DELETE, "/api/keys/{id}", "revokeKey",
            "Revoke a key and deactivate its agents (idempotent)", Session,
            ("200", "the revoked key"), &["400", "401", "403", "404"]).ids(API_KEY),
    pub CHANGE_KEY: One<KeyView> =
        op(Keys, Method::PATCH, "/api/keys/{id}", "changeKey",
            "Replace a key's policy (null: none)",
            Session, ("200", "the key"), &["400", "401", "403", "404", "409"])
            .body::<KeyChange>().ids(API_KEY),
    preflight(Keys, "/api/keys/{id}", "preflightKey").ids(API_KEY),
    // Agents, registered by their keys.
    pub REGISTER_AGENT: One<Agent> =
        op(Keys, Method::POST, "/api/agents", "registerAgent", "Register an agent under a key",
            KeyOrSession, ("201", "the agent"), &["400", "401", "403", "404", "409"])
            .body::<NewAgent>()
            .scope(Act),
    pub LIST_AGENTS: PageOf<Agent> =
        op(Keys, Method::GET, "/api/agents", "listAgents", "The caller's agents", KeyOrSession,
            ("200", "`{items, nextCursor}`"), PAGE_ERRORS)
            .query(PAGE)
            .scope(Read),
    preflight(Keys, "/api/agents", "preflightAgents"),
    pub GET_AGENT: One<Agent> =
        op(Keys, Method::GET, "/api/agents/{id}", "getAgent", "One agent", KeyOrSession,
            ("200", "the agent"), &["400", "401", "403", "404"]).ids(AGENT)
            .scope(Read),
    preflight(Keys, "/api/agents/{id}", "preflightAgent").ids(AGENT),
    // Approvals: a key's paid request over its policy, for its owner to grant or decline.
    pub LIST_APPROVALS: PageOf<ApprovalView> =
        op(Keys, Method::GET, "/api/approvals", "listApprovals",
            "The owner's approvals, newest first",
            Session, ("200", "`{items, nextCursor}`"), PAGE_ERRORS)
            .query(PAGE),
    preflight(Keys, "/api/approvals", "preflightApprovals"),
    pub GET_APPROVAL: One<ApprovalView> =
        op(Keys, Method::GET, "/api/approvals/{id}", "getApproval",
            "One approval, for its owner or the key that asked; long-polls while pending with \
             timeout",
            KeyOrSession, ("200", "the approval"), &["400", "401", "403", "404", "429"])
            .query(&[TIMEOUT]).ids(APPROVAL)
            .about("One approval (pending, granted, declined or expired), for its owner or the \
                    key that asked: held while it is pending, up to `timeout` seconds. Granted: \
                    make the refused request again, with the same arguments (once).")
            .scope(Read),
    preflight(Keys, "/api/approvals/{id}", "preflightApproval").ids(APPROVAL),
    pub GRANT_APPROVAL: One<ApprovalView> =
        op(Keys, Method::POST, "/api/approvals/{id}/grant", "grantApproval",
            "Grant it: an EIP-4361 message naming it, signed by the owner's wallet", Session,
            ("200", "the approval, granted"), &["400", "401", "403", "404", "409", "429", "503"])
            .body::<GrantRequest>().ids(APPROVAL),
    preflight(Keys, "/api/approvals/{id}/grant", "preflightGrantApproval").ids(APPROVAL),
    pub DECLINE_APPROVAL: One<ApprovalView> =
        op(Keys, Method::POST, "/api/approvals/{id}/decline", "declineApproval", "Decline it",
            Session, ("200", "the approval, declined"), &["400", "401", "403", "404", "409"])
            .ids(APPROVAL),
    preflight(Keys, "/api/approvals/{id}/decline", "preflightDeclineApproval").ids(APPROVAL),
    // An owner's SSH keys, put on its servers.
    pub ADD_SSH_KEY: One<SshKey> =
        op(Keys, Method::POST, "/api/ssh-keys", "addSshKey",
            concat!("Add an SSH public key (the provider gets it when a paid server or a rebuild ",
                "uses it); the same key again: 200 with it"),
            KeyOrSession, ("201", "the key"), &["400", "401", "403", "409", "503"])
            .body::<NewSshKey>()
            .also_ok("200", "the key as it was: the caller had added it already")
            .about("Add an SSH public key (one OpenSSH line, e.g. the contents of \
                    ~/.ssh/id_ed25519.pub: ssh-ed25519, ecdsa-sha2-nistp256/384/521, ssh-rsa of \
                    2048 bits or more, sk-ssh-ed25519@openssh.com) to your keys; its id (ssh_…) \
                    goes in `sshKeys` of a provisioning or a rebuild, and the provider gets the \
                    key then. The same key again answers the key as it was.")
            .scope(Act),
    pub LIST_SSH_KEYS: PageOf<SshKey> =
        op(Keys, Method::GET, "/api/ssh-keys", "listSshKeys", "The caller's SSH keys, newest first",
            KeyOrSession, ("200", "`{items, nextCursor}`"), PAGE_ERRORS)
            .query(PAGE)
            .about("Your SSH keys (id, name, fingerprint), newest first.")
            .scope(Read),
    preflight(Keys, "/api/ssh-keys", "preflightSshKeys"),
    pub GET_SSH_KEY: One<SshKey> =
        op(Keys, Method::GET, "/api/ssh-keys/{id}", "getSshKey", "One SSH key", KeyOrSession,
            ("200", "the key"), &["400", "401", "403", "404"]).ids(SSH_KEY)
            .scope(Read),
    pub DELETE_SSH_KEY: Nothing =
        op(Keys, Method::DELETE, "/api/ssh-keys/{id}", "deleteSshKey",
            "Delete an SSH key (servers made with it keep it)", KeyOrSession, ("204", "deleted"),
            &["400", "401", "403", "404", "503"]).ids(SSH_KEY)
            .about("Delete one of your SSH keys: it can no longer be put on a server (servers \
                    made with it keep it).")
            .scope(Act),
    preflight(Keys, "/api/ssh-keys/{id}", "preflightSshKey").ids(SSH_KEY),
    // The provider's catalogue, and quotes.
    pub LIST_PLANS: List =
        // Anyone's, with no scope (a key without `read` lists them too, over MCP as well):
        // what is sold and its price, found without a key (issue 47); a key or session
        // presented is checked (issue 63, point 9). A stranger's flood costs the provider one
        // call per warm instance and cache window (`DISCOVERY_CACHE_SECONDS`), an anonymous
        // read asks it once, a failure is kept a few seconds and the last good read stands in
        // for it (`crate::cache`), and the open routes' throttle and the discovery function's
        // reserved concurrency bound the rest (issue 63, point 6).
        op(Discovery, Method::GET, "/api/cloud/plans", "listPlans",
            "Plans, each with monthlyCost (USD)", AnyoneChecked,
            ("200", "the provider's plans"), CLOUD_ERRORS)
            .about("The provider's plans (VPS and bare metal), each with monthlyCost in USD (0 \
                    for a free plan) and its regions."),
    pub GET_QUOTE: One<QuoteAnswer> =
        op(Discovery, Method::GET, "/api/cloud/quote", "getQuote",
            "The exact offer a provisioning, renewal or resize would carry", KeyOrSession,
            ("200", "`{amount, amountUsd, free, network, asset, payTo, price, validUntil, …}`"),
            CLOUD_ERRORS)
            .query(&[
                Param::new("plan", "plan slug (a new server, or with serverId a resize)",
                    Kind::Text)
                    .example("B1-1-1gb-20s-shared"),
                Param::new("region", "region slug (a new server)", Kind::Text)
                    .example("LT-Siauliai"),
                Param::new("image", "image slug (a new server)", Kind::Text)
                    .example("ubuntu_24_04_64bit"),
                Param::new("projectId", "project id (a new server)", Kind::ProviderId),
                Param::new("periods", "paid periods (default 1)", PERIODS).example("1"),
                Param::new("serverId", "your server to renew or resize", Kind::ProviderId),
            ])
            .about("The exact offer a provisioning (plan, region, image), a renewal \
                    (serverId) or a resize (serverId, plan) would carry: amount in USDC atomic \
                    units (a string), amountUsd, network, asset, payTo, the price's parts, \
                    validUntil. No side effects.")
            .scope(Read),
    pub LIST_REGIONS: List =
        op(Discovery, Method::GET, "/api/cloud/regions", "listRegions", "Regions", KeyOrSession,
            ("200", "the provider's regions"), CLOUD_ERRORS)
            .about("The provider's regions (slug, name, location).")
            .scope(Read),
    pub LIST_IMAGES: List =
        op(Discovery, Method::GET, "/api/cloud/images", "listImages", "Images", KeyOrSession,
            ("200", "images"), CLOUD_ERRORS)
            .query(&[Param::new("plan", "plan slug: that plan's images", Kind::Text)
                .example("B1-1-1gb-20s-shared")])
            .about("Operating system images; with `plan`, the images that plan can run.")
            .scope(Read),
    pub LIST_TEAMS: List =
        op(Discovery, Method::GET, "/api/cloud/teams", "listTeams", "Teams", KeyOrSession,
            ("200", "teams"), CLOUD_ERRORS)
            .scope(Read),
    pub LIST_PROJECTS: List =
        op(Discovery, Method::GET, "/api/cloud/projects/{teamId}", "listProjects",
            "A team's projects", KeyOrSession, ("200", "projects"), CLOUD_ERRORS)
            .scope(Read),
    // Servers: listing, provisioning (paid), renewals, resizes, actions, deletion.
    pub LIST_SERVERS: List =
        op(Servers, Method::GET, "/api/cloud/servers/{id}", "listServers",
            "The caller's servers in project `id`, from the store", KeyOrSession,
            ("200", "server objects with sandboxId, stage, statusAt, lease"),
            &["400", "401", "403", "503"])
            .scope(Read),
    pub PROVISION_SERVER: Object =
        op(Servers, Method::POST, paths::PROVISION_SERVER, "provisionServer",
            "Provision a server in project `id` (x402 for paid plans)", Key,
            ("201", "the server with sandboxId and stage"),
            &["400", "401", "402", "403", "409", "429", "502", "503", "504"])
            .body::<ProvisionRequest>().paid()
            .scope(Provision),
    pub DELETE_SERVER: Nothing =
        op(Actions, Method::DELETE, "/api/cloud/servers/{id}", "deleteServer",
            "Delete server `id`", KeyOrSession, ("204", "deleted"),
            &["400", "401", "403", "409", "502", "503", "504"])
            .about("Terminate your server (its data is lost; paid time left is not refunded).")
            .scope(Delete),
    pub SERVER_ACTION: Object =
        op(Actions, Method::POST, "/api/cloud/servers/{id}/actions", "serverAction",
            "Power, reboot, rebuild or rescue server `id`", KeyOrSession,
            ("202", "the server and the transition started"),
            &["400", "401", "403", "409", "429", "502", "503", "504"]).body::<ActionRequest>()
            .about("Power on or off, reboot, rebuild (wipes the disk) or enter/exit rescue mode \
                    on your server: the server and the transition started.")
            .scope(Act),
    pub RENEW_SERVER: Object =
        op(Servers, Method::POST, paths::RENEW_SERVER, "renewServer",
            "Buy more paid time (x402)", KeyOrSession,
            ("201", "`{serverId, periods, amount, paidUntil, graceEndsAt}`"),
            &["400", "401", "402", "403", "409", "410", "503"])
            .body::<RenewalRequest>().paid()
            .scope(Renew),
    pub RESIZE_SERVER: Object =
        op(Servers, Method::POST, paths::RESIZE_SERVER, "resizeServer",
            "Move a server to a bigger plan, its paid time kept (x402)", KeyOrSession,
            ("201", "`{serverId, plan, from, amount, paidUntil}`"),
            &["400", "401", "402", "403", "409", "410", "503"])
            .body::<ResizeRequest>().paid()
            .about("Move your paid cloud VPS to a dearer VPS plan in stock in its region (the \
                    provider's upgrade, which reboots it); you pay the difference of the two \
                    plans for the paid time left, paidUntil unchanged. Downgrades are refused. \
                    GET /api/cloud/quote?serverId=…&plan=… says the price.")
            .scope(Provision),
    // The caller's sandboxes and payments.
    pub LIST_SANDBOXES: PageOf<SandboxView> =
        op(Sandboxes, Method::GET, "/api/sandboxes", "listSandboxes",
            "The caller's sandboxes, newest first", KeyOrSession, ("200", "`{items, nextCursor}`"),
            PAGE_ERRORS).query(PAGE)
            .about("Your sandboxes (servers and their metadata), newest first.")
            .scope(Read),
    pub CREATE_SANDBOX: One<Sandbox> =
        op(Sandboxes, Method::POST, "/api/sandboxes", "createSandbox", "A metadata record",
            KeyOrSession, ("201", "the sandbox"), &["400", "401", "403", "409"])
            .body::<NewSandbox>()
            .scope(Act),
    pub GET_SANDBOX: One<SandboxView> =
        op(Sandboxes, Method::GET, "/api/sandboxes/{id}", "getSandbox",
            "One sandbox with its stage; long-polls with waitFor", KeyOrSession,
            ("200", "the sandbox (with `reached` when waiting)"), &["400", "401", "403", "404"])
            .query(&[
                Param::new("waitFor", "stages to wait for", Kind::Names(stage_names))
                    .example("ready,failed"),
                TIMEOUT,
            ]).ids(SANDBOX)
            .about("One sandbox: its server, stage (ordered, deploying, network-ready, ready, \
                    failed, terminated), times, SSH host keys, lease. With `waitFor`, held until \
                    it reaches one of those stages or `timeout` seconds pass; `reached` says \
                    which.")
            .scope(Read),
    pub LIST_PAYMENTS: PageOf<PaymentView> =
        op(Payments, Method::GET, "/api/payments", "listPayments",
            "The caller's payments and credits", KeyOrSession, ("200", "`{items, nextCursor}`"),
            PAGE_ERRORS).query(PAGE)
            .about("Your payments and credits (a credit is redeemed by provisioning again with \
                    the same payment).")
            .scope(Read),
    // The caller's events.
    pub LIST_EVENTS: PageOf<Event> =
        op(Notifications, Method::GET, "/api/events", "listEvents",
            "The caller's events, oldest first: servers, leases, payments, keys", KeyOrSession,
            ("200", "`{items, nextCursor}`"), PAGE_ERRORS)
            .query(&[
                LIMIT,
                Param::new("after",
                    "the previous page's nextCursor (it resumes after the last event seen)",
                    Kind::Text),
                Param::new("types", "only these event types", Kind::Names(event_type_names)),
                Param::new("subject",
                    "only this subject's events: sbx_…, key_…, apr_…, dlv_… or a payment key",
                    Kind::Text),
            ])
            .about("What happened to your servers, leases, payments and keys, oldest first: \
                    server.ready (with SSH host keys), lease.expiring (24 h and 1 h before \
                    paidUntil, with the renewal route), lease.expired, server.deleted, \
                    payment.settled, … Keep nextCursor and pass it as `after` to get what is \
                    new.")
            .scope(Read),
    // Webhook endpoints and their deliveries.
    pub REGISTER_WEBHOOK: One<WithSecret> =
        op(Notifications, Method::POST, "/api/webhooks", "registerWebhook",
            "Register a webhook endpoint (https, a public address); its secret, shown once",
            KeyOrSession, ("201", "the endpoint and its whsec_ secret"),
            &["400", "401", "403", "409"])
            .body::<NewEndpoint>()
            .scope(Webhooks),
    pub LIST_WEBHOOKS: PageOf<Endpoint> =
        op(Notifications, Method::GET, "/api/webhooks", "listWebhooks",
            "The caller's webhook endpoints (never their secrets)", KeyOrSession,
            ("200", "`{items, nextCursor}`"), &["401", "403"])
            .scope(Webhooks),
    preflight(Notifications, "/api/webhooks", "preflightWebhooks"),
    pub GET_WEBHOOK: One<Endpoint> =
        op(Notifications, Method::GET, "/api/webhooks/{id}", "getWebhook",
            "A webhook endpoint: enabled, or disabled and why", KeyOrSession,
            ("200", "the endpoint"), WEBHOOK_ERRORS).ids(WEBHOOK)
            .scope(Webhooks),
    pub DELETE_WEBHOOK: Nothing =
        op(Notifications, Method::DELETE, "/api/webhooks/{id}", "deleteWebhook",
            "Delete a webhook endpoint", KeyOrSession, ("204", "deleted"), WEBHOOK_ERRORS)
            .ids(WEBHOOK)
            .scope(Webhooks),
    preflight(Notifications, "/api/webhooks/{id}", "preflightWebhook"),
    pub ROTATE_WEBHOOK_SECRET: One<WithSecret> =
        op(Notifications, Method::POST, "/api/webhooks/{id}/rotate", "rotateWebhookSecret",
            "A new secret; the old one signs beside it for 24 h", KeyOrSession,
            ("200", "the endpoint and its new whsec_ secret"), WEBHOOK_ERRORS).ids(WEBHOOK)
            .scope(Webhooks),
    preflight(Notifications, "/api/webhooks/{id}/rotate", "preflightRotateWebhook"),
    pub TEST_WEBHOOK: One<Delivery> =
        op(Notifications, Method::POST, "/api/webhooks/{id}/test", "testWebhook",
            "Queue a webhook.test event (tried once); its delivery, pending", KeyOrSession,
            ("202", "the delivery, pending: its outcome is in the endpoint's deliveries"),
            &["400", "401", "403", "404", "429", "503"])
            .ids(WEBHOOK)
            .scope(Webhooks),
    preflight(Notifications, "/api/webhooks/{id}/test", "preflightTestWebhook"),
    pub LIST_WEBHOOK_DELIVERIES: PageOf<Delivery> =
        op(Notifications, Method::GET, "/api/webhooks/{id}/deliveries", "listWebhookDeliveries",
            "An endpoint's deliveries, newest first: status, attempts, last error, next try",
            KeyOrSession, ("200", "`{items, nextCursor}`"), WEBHOOK_ERRORS)
            .query(PAGE).ids(WEBHOOK)
            .scope(Webhooks),
    preflight(Notifications, "/api/webhooks/{id}/deliveries", "preflightWebhookDeliveries"),
}

/// The operation whose id is `id`.
pub fn operation(id: &str) -> Option<&'static Operation> {
    OPERATIONS.iter().copied().find(|op| op.id == id)
}

/// The operations `function` serves.
pub fn of(function: Function) -> impl Iterator<Item = &'static Operation> {
    OPERATIONS
        .iter()
        .copied()
        .filter(move |op| op.function == function)
}

/// The path of operation `id` with its `{name}` segment replaced by `value`: a `Location`
/// (`link("getAgent", "agt_1")` → `/api/agents/agt_1`). An id the table does not know gives
/// `/`.
pub fn link(id: &str, value: &str) -> String {
    match operation(id) {
        Some(operation) => paths::fill(operation.path, value),
        None => "/".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn ids_are_unique_and_each_method_and_path_is_one_operation() {
        let ids: BTreeSet<&str> = OPERATIONS.iter().map(|op| op.id).collect();
        assert_eq!(ids.len(), OPERATIONS.len());
        let routes: BTreeSet<(&str, &str)> = OPERATIONS
            .iter()
            .map(|op| (op.method.as_str(), op.path))
            .collect();
        assert_eq!(routes.len(), OPERATIONS.len());
        // One function per path and method, and every function serves something.
        for function in Function::ALL {
            assert!(of(function).next().is_some(), "{function:?}");
        }
    }

    /// The long polls' rows say the one limit every wait has, over HTTP and MCP.
    #[test]
    fn the_waits_rows_name_the_one_wait_limit() {
        let most = crate::servers::stages::MAX_WAIT_SECONDS;
        for id in ["getSandbox", "getApproval"] {
            let op = operation(id).unwrap();
            assert!(
                op.query.iter().any(|param| param.name == "timeout"
                    && matches!(param.kind, Kind::Whole { max, .. } if max == most)
                    && param.about.contains(&most.to_string())),
                "{id}"
            );
        }
    }

    #[test]
    fn a_link_fills_the_paths_segment() {
        assert_eq!(link("getAgent", "agt_1"), "/api/agents/agt_1");
        assert_eq!(link("listKeys", "x"), "/api/keys");
        assert_eq!(link("noSuchOperation", "x"), "/");
    }
}
