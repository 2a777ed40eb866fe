//! `svcctl`: what operators and developers run around the functions.
//!
//! ```text
//! svcctl generate                            write the template's HTTP events and the watch
//!                                             router from the route table (shared/domain/src/api.rs)
//! svcctl create-table                         create the table (from store::schema) if missing
//! svcctl create-queue [--name N]              create the webhook delivery queue (SQS FIFO, with
//!                                             its dead-letter queue; default name: the table's)
//!                                             if missing; prints its URL
//! svcctl create-key --owner 0x… [--name N] [--expires-at RFC3339] [--scopes S,…]
//!                   [--policy JSON]           issue an API key; printed once
//! svcctl list-keys --owner 0x…                the owner's keys with their usage (never the
//!                                             key or its hash)
//! svcctl revoke-key --owner 0x… --id key_…    revoke a key (idempotent)
//! svcctl payments --state credited           payments in a state (`OrderState`), most recently
//!                                             changed first
//! svcctl payment --id <payment key>           one payment and its order, whole
//! svcctl refund --id <payment key> --note N   mark a credit refunded (N: the refund's transaction
//!                                             hash, or a note)
//! svcctl reconcile                            one reconciler pass (what the scheduled function
//!                                             does every minute)
//! svcctl leases [--within SECONDS]            paid servers whose lease ends within SECONDS
//!                                             (default a day), and those in their grace period
//! svcctl provision --api … --key svc_… --project N --plan P --region R [--hostname H] [--v1]
//!                 [--payment-file F]          provision; a paid plan is paid with x402, signed
//!                                             with the wallet key in PRIVATE_KEY; with
//!                                             --payment-file the payment header is saved there,
//!                                             or sent again if the file exists (a replay, or a
//!                                             credit's redemption with a corrected request)
//! svcctl sign-in --api http://127.0.0.1:9000 [--chain-id 8453]
//! svcctl approve --api http://127.0.0.1:9000 --approval apr_… [--chain-id 8453]
//!                                             Sign-In with Ethereum as the wallet whose private
//!                                             key is in PRIVATE_KEY; prints the session token
//! ```
//!
//! The table comes from `TABLE_NAME`; DynamoDB from the AWS SDK's environment
//! (`AWS_ENDPOINT_URL_DYNAMODB` for the local stack). Output is JSON on stdout.

use domain::x402::PaymentKey;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use serde_json::json;

use domain::identity::keys;
use domain::page::PageRequest;
use domain::store::payments::OrderState;
use domain::store::sandboxes::LeaseState;
use domain::store::{Store, schema};
use domain::{ApiError, validate};

/// `--scopes`' help: the scope names and what a key gets without them, from `policy::Scope`.
fn scopes_help() -> String {
    let names = |scopes: &[domain::policy::Scope]| {
        scopes
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join(",")
    };
    format!(
        "What the key may do, comma-separated ({}); {} when left out.",
        names(&domain::policy::Scope::ALL),
        names(&domain::policy::Scope::DEFAULT)
    )
}

/// `--state`'s help: every state of a payment's order, from `OrderState`.
fn states_help() -> String {
    let names: Vec<&str> = OrderState::ALL.iter().map(|s| s.as_str()).collect();
    format!("The state: {}.", names.join(", "))
}

#[derive(Parser)]
#[command(name = "svcctl", about = "Operator commands for the cloud API")]
struct Cli {
    /// The DynamoDB table (commands that use the store).
    #[arg(long, env = "TABLE_NAME")]
    table: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Write what is made from the route table (shared/domain/src/api.rs): the HTTP events of
    /// template.yaml and the `cargo lambda watch` router of Cargo.toml.
    Generate,
    /// Create the table from the schema the template declares, if it does not exist.
    CreateTable,
    /// Upgrade step: index server ownerships written before they were listed by owner (a scan;
    /// run once after deploying this version over an older table).
    IndexServers,
    /// Issue an API key for a wallet address; the key is printed once and never again.
    CreateKey {
        /// Owner's wallet address (0x + 40 hex).
        #[arg(long)]
        owner: String,
        /// A name for the key.
        #[arg(long, default_value = "operator-issued")]
        name: String,
        /// When the key stops working (RFC 3339).
        #[arg(long)]
        expires_at: Option<String>,
        /// What the key may do, comma-separated.
        #[arg(long, long_help = scopes_help())]
        scopes: Option<String>,
        /// The key's policy, as `POST /api/keys/generate` takes it, e.g.
        /// `{"dailySpendLimit": 50, "maxActiveServers": 3}`; none when left out.
        #[arg(long)]
        policy: Option<String>,
    },
    /// List a wallet address's keys.
    ListKeys {
        /// Owner's wallet address.
        #[arg(long)]
        owner: String,
    },
    /// Revoke one of a wallet address's keys.
    RevokeKey {
        /// Owner's wallet address.
        #[arg(long)]
        owner: String,
        /// The key record id (`key_…`, from list-keys).
        #[arg(long)]
        id: String,
    },
    /// List payments in a state (for reconciliation).
    Payments {
        /// The state.
        #[arg(long, long_help = states_help())]
        state: String,
    },
    /// Show one payment and its order.
    Payment {
        /// The payment key (`eip155:…/<asset>/<payer>/<nonce>`), as `payments` lists it.
        #[arg(long, value_parser = payment_key)]
        id: PaymentKey,
    },
    /// Refund a credit, in two steps: without `--note`, lock it (`refunding`: no longer
    /// redeemable) and print what to pay whom; then pay it back out of band; then, with
    /// `--note`, record the payout (`refunded`).
    Refund {
        /// The payment key.
        #[arg(long, value_parser = payment_key)]
        id: PaymentKey,
        /// The payout's transaction hash, or a note (records a locked credit refunded).
        #[arg(long)]
        note: Option<String>,
    },
    /// Run one reconciler pass: drive every paid order past its lease to a final state, and
    /// every paid server's lease that is due.
    Reconcile,
    /// Feed the table's stream to the `events` function's handler, as AWS's event source
    /// mapping does (make dev): every `--every` milliseconds, the new event items are queued for
    /// their owners' webhook endpoints and sent. Runs until stopped; prints each pass that
    /// handled events.
    Stream {
        /// Milliseconds between reads of the stream.
        #[arg(long, default_value_t = 500)]
        every: u64,
    },
    /// Create the webhook delivery queue (SQS FIFO) and its dead-letter queue if missing, as
    /// the template makes them (make dev: moto's SQS); prints its URL.
    CreateQueue {
        /// The queue's name (`.fifo` added); default: the table's.
        #[arg(long)]
        name: Option<String>,
    },
    /// Feed the webhook delivery queue to the `deliveries` function's handler, as AWS's event
    /// source mapping does (make dev): every `--every` milliseconds, what is visible is sent.
    /// Runs until stopped; prints each pass that handled messages.
    Deliver {
        /// Milliseconds between receives.
        #[arg(long, default_value_t = 500)]
        every: u64,
    },
    /// Paid servers whose lease ends within `--within` seconds, and those in their grace
    /// period (powered off, deleted at `graceEndsAt` unless renewed).
    Leases {
        /// Seconds from now.
        #[arg(long, default_value_t = 86_400)]
        within: i64,
    },
    /// Provision a server through the API as an agent; pays a paid plan with x402, signing the
    /// EIP-3009 authorization with the wallet whose private key (hex) is in PRIVATE_KEY.
    Provision {
        /// The API's base URL.
        #[arg(long, default_value = "http://127.0.0.1:9000")]
        api: String,
        /// The agent's API key (or API_KEY).
        #[arg(long, env = "API_KEY")]
        key: String,
        /// Provider project id.
        #[arg(long)]
        project: u64,
        /// Plan slug.
        #[arg(long)]
        plan: String,
        /// Region slug.
        #[arg(long)]
        region: String,
        /// Hostname.
        #[arg(long)]
        hostname: Option<String>,
        /// Image slug.
        #[arg(long)]
        image: Option<String>,
        /// An OpenSSH public key file (e.g. `~/.ssh/id_ed25519.pub`) to put on the server
        /// (`sshKeys`); may be given again.
        #[arg(long)]
        ssh_key: Vec<std::path::PathBuf>,
        /// Pay with x402 v1 (`X-PAYMENT`) instead of v2 (`PAYMENT-SIGNATURE`).
        #[arg(long)]
        v1: bool,
        /// Save the payment header here, or send the one saved here again.
        #[arg(long)]
        payment_file: Option<std::path::PathBuf>,
    },
    /// Renew a paid server (more paid periods) through the API as its owner; pays the 402 with
    /// x402, signed with the wallet whose private key (hex) is in PRIVATE_KEY.
    Renew {
        /// The API's base URL.
        #[arg(long, default_value = "http://127.0.0.1:9000")]
        api: String,
        /// The owner's API key (or API_KEY).
        #[arg(long, env = "API_KEY")]
        key: String,
        /// The server id.
        #[arg(long)]
        server: u64,
        /// Periods to add (1-12).
        #[arg(long, default_value_t = 1)]
        periods: u32,
        /// Save the payment header here, or send the one saved here again.
        #[arg(long)]
        payment_file: Option<std::path::PathBuf>,
    },
    /// Sign in to the API with the wallet whose private key (hex) is in PRIVATE_KEY: fetch a
    /// nonce, sign an EIP-4361 message for the API's origin (EIP-191), verify it.
    SignIn {
        /// The API's base URL; its `host[:port]` is the message's domain and its origin the URI.
        #[arg(long, default_value = "http://127.0.0.1:9000")]
        api: String,
        /// The chain id to sign in on (8453 Base, 84532 Base Sepolia).
        #[arg(long, default_value_t = 8453)]
        chain_id: u64,
    },
    /// Grant an approval as its owner: the wallet whose private key (hex) is in PRIVATE_KEY
    /// signs an EIP-4361 message naming it (`Resources: - urn:approval:<id>`), sent with the
    /// owner's session token in SESSION.
    Approve {
        /// The API's base URL (as for sign-in).
        #[arg(long, default_value = "http://127.0.0.1:9000")]
        api: String,
        /// The approval (`apr_…`).
        #[arg(long)]
        approval: String,
        /// The chain id of the message (8453 Base, 84532 Base Sepolia).
        #[arg(long, default_value_t = 8453)]
        chain_id: u64,
    },
}

/// The body of `svcctl provision`: `sshKeys` are the public key files' lines.
///
/// Errors: a key file that cannot be read.
fn provision_body(
    plan: &str,
    region: &str,
    hostname: Option<String>,
    image: Option<String>,
    ssh_keys: &[std::path::PathBuf],
) -> Result<serde_json::Value, String> {
    let mut body = json!({"plan": plan, "region": region});
    if let Some(hostname) = hostname {
        body["hostname"] = json!(hostname);
    }
    if let Some(image) = image {
        body["image"] = json!(image);
    }
    if !ssh_keys.is_empty() {
        let keys = ssh_keys
            .iter()
            .map(|path| {
                std::fs::read_to_string(path)
                    .map(|text| text.trim().to_owned())
                    .map_err(|e| format!("{}: {e}", path.display()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        body["sshKeys"] = json!(keys);
    }
    Ok(body)
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::SignIn { api, chain_id } => sign_in(&api, chain_id).await,
        Command::Approve {
            api,
            approval,
            chain_id,
        } => approve(&api, &approval, chain_id).await,
        Command::Provision {
            api,
            key,
            project,
            plan,
            region,
            hostname,
            image,
            ssh_key,
            v1,
            payment_file,
        } => match provision_body(&plan, &region, hostname, image, &ssh_key) {
            Ok(body) => {
                paid_post(
                    &api,
                    &key,
                    &domain::api::link("provisionServer", &project.to_string()),
                    body,
                    if v1 { 1 } else { 2 },
                    payment_file.as_deref(),
                )
                .await
            }
            Err(err) => Err(err),
        },
        Command::Renew {
            api,
            key,
            server,
            periods,
            payment_file,
        } => {
            paid_post(
                &api,
                &key,
                &domain::api::link("renewServer", &server.to_string()),
                json!({ "periods": periods }),
                2,
                payment_file.as_deref(),
            )
            .await
        }
        Command::Reconcile | Command::Refund { .. } => service_command(cli.command).await,
        Command::Stream { every } => stream(every).await,
        Command::Deliver { every } => deliver(every).await,
        Command::CreateQueue { name } => match name.or(cli.table) {
            Some(name) => create_queue(&name).await,
            None => Err("--name (or TABLE_NAME) is required".to_owned()),
        },
        Command::Generate => generate(),
        command => match cli.table {
            Some(table) => run(&Store::connect(&table).await, command).await,
            None => Err("TABLE_NAME (or --table) is required".to_owned()),
        },
    };
    match result {
        Ok(output) => {
            println!(
                "{}",
                serde_json::to_string_pretty(&output).unwrap_or_default()
            );
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("svcctl: {err}");
            ExitCode::FAILURE
        }
    }
}

async fn run(store: &Store, command: Command) -> Result<serde_json::Value, String> {
    store_command(store, command)
        .await
        .map_err(|e| e.to_string())
}

/// Commands that run the service's own logic: the state built as a function builds it, from the
/// environment (`make dev`'s `.dev/env`, or AWS).
async fn service_command(command: Command) -> Result<serde_json::Value, String> {
    let state = domain::AppState::from_env()
        .await
        .map_err(|e| e.to_string())?
        .paced();
    let result = match command {
        Command::Reconcile => {
            let deadline = domain::deadline::Deadline::after(std::time::Duration::from_secs(120));
            domain::reconciler::pass(&state, &deadline)
                .await
                .map(|report| serde_json::to_value(report).unwrap_or_default())
        }
        Command::Refund { id, note: None } => {
            domain::billing::order::ledger::lock_refund(&state, &id)
                .await
                .map(|lock| {
                    json!({"locked": domain::billing::payments::PaymentView::of(&lock.order),
                        "alreadyLocked": lock.already, "next": lock.next()})
                })
        }
        Command::Refund {
            id,
            note: Some(note),
        } => domain::billing::order::ledger::refund(&state, &id, &note)
            .await
            .map(|order| json!(domain::billing::payments::PaymentView::of(&order))),
        _ => Err(ApiError::Internal("not a service command".into())),
    };
    result.map_err(|e| e.to_string())
}

/// `svcctl generate`: rewrites the files made from the route table, in the workspace this
/// binary was built from; prints which changed.
fn generate() -> Result<serde_json::Value, String> {
    use domain::api::generated;
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut changed = Vec::new();
    for (file, write) in [
        ("template.yaml", generated::template as fn(&str) -> _),
        ("Cargo.toml", generated::cargo_toml),
        ("server.json", generated::server_json),
    ] {
        let path = root.join(file);
        let text = std::fs::read_to_string(&path).map_err(|e| format!("{file}: {e}"))?;
        let new = write(&text).map_err(|e| e.to_string())?;
        if new != text {
            std::fs::write(&path, new).map_err(|e| format!("{file}: {e}"))?;
            changed.push(file);
        }
    }
    Ok(json!({ "changed": changed }))
}

/// `svcctl stream`: the local event source mapping of the `events` function (see
/// `events::local`), until stopped.
async fn stream(every: u64) -> Result<serde_json::Value, String> {
    // The handler's own log (deliveries, unreadable records), as the function writes it.
    lambda_http::tracing::init_default_subscriber();
    let state = domain::AppState::from_env()
        .await
        .map_err(|e| e.to_string())?;
    let mut feed = events::local::Feed::connect(&state.config.table_name).await?;
    loop {
        match feed.pass(&state).await {
            Ok(report) if report.events > 0 => println!("{report:?}"),
            Ok(_) => {}
            Err(err) => eprintln!("svcctl stream: {err}"),
        }
        tokio::time::sleep(std::time::Duration::from_millis(every)).await;
    }
}

/// `svcctl deliver`: the local event source mapping of the `deliveries` function (see
/// `deliveries::local`), until stopped.
async fn deliver(every: u64) -> Result<serde_json::Value, String> {
    lambda_http::tracing::init_default_subscriber();
    let state = domain::AppState::from_env()
        .await
        .map_err(|e| e.to_string())?;
    let url = state
        .config
        .delivery_queue_url
        .clone()
        .ok_or("DELIVERY_QUEUE_URL is required")?;
    let consumer = deliveries::local::Consumer::connect(&url).await;
    // What the queue gave up on, as the dead-letter queue's mapping hands it over in AWS.
    let dead_letters = domain::store::queue::dead_letter_url(&url);
    let dead_letters = deliveries::local::Consumer::connect(&dead_letters).await;
    loop {
        for consumer in [&consumer, &dead_letters] {
            match consumer.pass(&state).await {
                Ok(report) if report.messages > 0 => println!("{report:?}"),
                Ok(_) => {}
                Err(err) => eprintln!("svcctl deliver: {err}"),
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(every)).await;
    }
}

/// `svcctl create-queue`: the delivery queue named `name`, made if missing.
async fn create_queue(name: &str) -> Result<serde_json::Value, String> {
    let sdk = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let queue = domain::store::queue::DeliveryQueue::create(aws_sdk_sqs::Client::new(&sdk), name)
        .await
        .map_err(|e| e.to_string())?;
    Ok(json!({ "url": queue.url() }))
}

async fn store_command(store: &Store, command: Command) -> Result<serde_json::Value, ApiError> {
    match command {
        Command::SignIn { .. }
        | Command::Approve { .. }
        | Command::Provision { .. }
        | Command::Renew { .. }
        | Command::Reconcile
        | Command::Stream { .. }
        | Command::Deliver { .. }
        | Command::CreateQueue { .. }
        | Command::Generate
        | Command::Refund { .. } => Err(ApiError::Internal("this command needs no store".into())),
        Command::Leases { within } => {
            let now = domain::time::now().unix_timestamp();
            let due = domain::servers::leases::due(store, now + within.max(0)).await?;
            let view = |s: &domain::store::sandboxes::SandboxRecord| {
                let lease = s.lease.as_ref();
                json!({
                    "sandboxId": s.id, "serverId": s.server_id, "owner": s.owner,
                    "state": lease.map(|l| l.state.as_str()),
                    "paidUntil": lease.map(|l| &l.paid_until),
                    "graceEndsAt": lease.map(|l| &l.grace_ends_at),
                    "failures": lease.map(|l| l.failures),
                })
            };
            let in_state = |states: &[LeaseState]| -> Vec<serde_json::Value> {
                due.iter()
                    .filter(|s| s.lease.as_ref().is_some_and(|l| states.contains(&l.state)))
                    .map(view)
                    .collect()
            };
            Ok(json!({
                "within": within,
                "ending": in_state(&[LeaseState::Active, LeaseState::Expiring]),
                "inGrace": in_state(&[LeaseState::Expired, LeaseState::Terminating]),
            }))
        }
        Command::Payment { id } => {
            let order = domain::billing::payments::by_key(store, &id).await?;
            let payment = domain::billing::payments::PaymentView::of(&order);
            Ok(json!({ "payment": payment, "order": order }))
        }
        Command::Payments { state } => {
            let names: Vec<&str> = OrderState::ALL.iter().map(|s| s.as_str()).collect();
            let state = OrderState::parse(&state).ok_or_else(|| {
                ApiError::invalid("state", format!("one of {}", names.join(", ")))
            })?;
            let payments = domain::billing::payments::in_state(store, state).await?;
            Ok(json!({ "state": state, "count": payments.len(), "payments": payments }))
        }
        Command::CreateTable => {
            let created = schema::create_table(store.client(), store.table()).await?;
            Ok(json!({ "table": store.table(), "created": created }))
        }
        Command::IndexServers => {
            let indexed = domain::servers::ownership::index_all(store).await?;
            Ok(json!({ "table": store.table(), "indexed": indexed }))
        }
        Command::CreateKey {
            owner,
            name,
            expires_at,
            scopes,
            policy,
        } => {
            let owner = validate::address("owner", &owner)?;
            let scopes = scopes.map(|s| s.split(',').map(|s| s.trim().to_owned()).collect());
            let policy = policy
                .map(|p| serde_json::from_str(&p))
                .transpose()
                .map_err(|e| ApiError::invalid("policy", e.to_string()))?;
            let request = keys::GenerateKeyRequest {
                name,
                expires_at,
                scopes,
                policy,
            };
            // An operator is not held to the per-owner cap.
            let issued =
                keys::generate(store, &owner, request, u32::MAX, domain::time::now()).await?;
            let mut answer =
                serde_json::to_value(&issued).map_err(|e| ApiError::Internal(e.to_string()))?;
            answer["owner"] = owner.to_string().into();
            answer["note"] = "store this key now: it is shown once and cannot be recovered".into();
            Ok(answer)
        }
        Command::ListKeys { owner } => {
            let owner = validate::address("owner", &owner)?;
            let mut all = Vec::new();
            let mut cursor: Option<String> = None;
            loop {
                let page = keys::list(
                    store,
                    &owner,
                    &PageRequest::largest(cursor.take()),
                    domain::time::now(),
                )
                .await?;
                all.extend(page.items);
                match page.next_cursor {
                    Some(next) => cursor = Some(next),
                    None => break,
                }
            }
            Ok(json!({ "owner": owner, "keys": all }))
        }
        Command::RevokeKey { owner, id } => {
            let owner = validate::address("owner", &owner)?;
            let key = keys::revoke(store, &owner, &id, domain::time::now()).await?;
            Ok(json!({ "id": key.id, "revokedAt": key.revoked_at }))
        }
    }
}

/// Signs in as the wallet in `PRIVATE_KEY` (see [`Command::SignIn`]).
async fn sign_in(api: &str, chain_id: u64) -> Result<serde_json::Value, String> {
    let api = api.trim_end_matches('/');
    let body = signed(api, chain_id, "Sign in to the cloud API.", vec![]).await?;
    let verify = domain::api::link("verifySignIn", "");
    post(&format!("{api}{verify}"), None, body, "sign-in").await
}

/// Grants approval `id` as the wallet in `PRIVATE_KEY` with the session in `SESSION` (see
/// [`Command::Approve`]).
async fn approve(api: &str, id: &str, chain_id: u64) -> Result<serde_json::Value, String> {
    let session = std::env::var("SESSION").map_err(|_| "set SESSION to the owner's session")?;
    let api = api.trim_end_matches('/');
    let resource = format!("urn:approval:{id}");
    let statement = "Approve my agent's request.";
    let body = signed(api, chain_id, statement, vec![resource]).await?;
    let url = format!("{api}{}", domain::api::link("grantApproval", id));
    post(&url, Some(&session), body, "the grant").await
}

/// POSTs `body` to `url` (with `session` as its bearer): the answer, or why it was refused.
async fn post(
    url: &str,
    session: Option<&str>,
    body: serde_json::Value,
    what: &str,
) -> Result<serde_json::Value, String> {
    let mut request = reqwest::Client::new().post(url).json(&body);
    if let Some(session) = session {
        request = request.bearer_auth(session);
    }
    let response = request.send().await.map_err(|e| e.to_string())?;
    let status = response.status();
    let body: serde_json::Value = response.json().await.map_err(|e| e.to_string())?;
    if status.is_success() {
        Ok(body)
    } else {
        Err(format!("{what} refused ({status}): {body}"))
    }
}

/// `{message, signature}`: an EIP-4361 message for the API at `api` (its host the domain, its
/// origin the URI) on `chain_id`, with a nonce of the API's, `statement` and `resources`,
/// signed (EIP-191) by the wallet in `PRIVATE_KEY`.
async fn signed(
    api: &str,
    chain_id: u64,
    statement: &str,
    resources: Vec<String>,
) -> Result<serde_json::Value, String> {
    use alloy_signer::SignerSync;
    let key = std::env::var("PRIVATE_KEY")
        .map_err(|_| "set PRIVATE_KEY to the wallet's private key (hex)")?;
    let signer: alloy_signer_local::PrivateKeySigner = key
        .trim()
        .parse()
        .map_err(|e| format!("PRIVATE_KEY: {e}"))?;
    let base: reqwest::Url = api.parse().map_err(|e| format!("--api: {e}"))?;
    let domain = match (base.host_str(), base.port()) {
        (Some(host), Some(port)) => format!("{host}:{port}"),
        (Some(host), None) => host.to_owned(),
        _ => return Err("--api needs a host".into()),
    };
    let http = reqwest::Client::new();
    let nonce: serde_json::Value = http
        .get(format!("{api}{}", domain::api::link("getNonce", "")))
        .send()
        .await
        .map_err(|e| e.to_string())?
        .json()
        .await
        .map_err(|e| e.to_string())?;
    let nonce = nonce["nonce"]
        .as_str()
        .ok_or(format!("no nonce in {nonce}"))?;
    let message = siwe::Message {
        domain: domain
            .parse()
            .map_err(|e| format!("domain {domain}: {e}"))?,
        address: signer.address().into_array(),
        statement: Some(statement.into()),
        uri: base
            .origin()
            .ascii_serialization()
            .parse()
            .map_err(|e| format!("uri: {e}"))?,
        version: siwe::Version::V1,
        chain_id,
        nonce: nonce.to_owned(),
        issued_at: time::OffsetDateTime::now_utc().into(),
        expiration_time: None,
        not_before: None,
        request_id: None,
        resources: resources
            .iter()
            .map(|r| r.parse().map_err(|e| format!("resource {r}: {e}")))
            .collect::<Result<_, _>>()?,
    }
    .to_string();
    let signature = signer
        .sign_message_sync(message.as_bytes())
        .map_err(|e| e.to_string())?;
    Ok(json!({
        "message": message,
        "signature": format!("0x{}", hex::encode(signature.as_bytes())),
    }))
}

fn private_key_signer() -> Result<alloy_signer_local::PrivateKeySigner, String> {
    let key = std::env::var("PRIVATE_KEY")
        .map_err(|_| "set PRIVATE_KEY to the wallet's private key (hex)")?;
    key.trim().parse().map_err(|e| format!("PRIVATE_KEY: {e}"))
}

/// POSTs `body` to `path` of the API as an agent; pays a 402 with x402 (see
/// [`Command::Provision`], [`Command::Renew`]).
async fn paid_post(
    api: &str,
    key: &str,
    path: &str,
    body: serde_json::Value,
    version: u8,
    payment_file: Option<&std::path::Path>,
) -> Result<serde_json::Value, String> {
    use base64::Engine;
    let url = format!("{}{path}", api.trim_end_matches('/'));
    let http = reqwest::Client::new();
    let saved = payment_file
        .filter(|f| f.exists())
        .map(std::fs::read_to_string)
        .transpose()
        .map_err(|e| format!("--payment-file: {e}"))?;
    let (header, value, offer) = match saved {
        // A payment sent before: the same header again.
        Some(saved) => {
            let (name, value) = saved
                .trim()
                .split_once('\n')
                .ok_or("--payment-file: not a saved payment")?;
            let header = if name == domain::x402::X_PAYMENT {
                domain::x402::X_PAYMENT
            } else {
                domain::x402::PAYMENT_SIGNATURE
            };
            (header, value.to_owned(), None)
        }
        None => {
            let first = http
                .post(&url)
                .header("x-api-key", key)
                .json(&body)
                .send()
                .await
                .map_err(|e| e.to_string())?;
            if first.status() != reqwest::StatusCode::PAYMENT_REQUIRED {
                let status = first.status();
                let answer: serde_json::Value = first.json().await.map_err(|e| e.to_string())?;
                return if status.is_success() {
                    Ok(json!({"paid": false, "status": status.as_u16(), "server": answer}))
                } else {
                    Err(format!("{status}: {answer}"))
                };
            }
            let required = first
                .headers()
                .get(domain::x402::PAYMENT_REQUIRED)
                .and_then(|v| v.to_str().ok())
                .ok_or("a 402 without PAYMENT-REQUIRED")?
                .to_owned();
            let required: domain::x402::PaymentRequired = serde_json::from_slice(
                &base64::engine::general_purpose::STANDARD
                    .decode(required)
                    .map_err(|e| e.to_string())?,
            )
            .map_err(|e| e.to_string())?;
            let (header, value) = sign_payment(&required, version)?;
            if let Some(file) = payment_file {
                std::fs::write(file, format!("{header}\n{value}\n"))
                    .map_err(|e| format!("--payment-file: {e}"))?;
            }
            (header, value, Some(required.accepts[0].clone()))
        }
    };
    let paid = http
        .post(&url)
        .header("x-api-key", key)
        .header(header, &value)
        .json(&body)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let status = paid.status();
    let settlement = paid
        .headers()
        .get(domain::x402::PAYMENT_RESPONSE)
        .or_else(|| paid.headers().get(domain::x402::X_PAYMENT_RESPONSE))
        .and_then(|v| {
            base64::engine::general_purpose::STANDARD
                .decode(v.as_bytes())
                .ok()
        })
        .and_then(|bytes| serde_json::from_slice::<serde_json::Value>(&bytes).ok());
    let answer: serde_json::Value = paid.json().await.map_err(|e| e.to_string())?;
    if !status.is_success() {
        return Err(format!(
            "{status}: {answer}{}",
            settlement
                .map(|s| format!("\n(payment response: {s})"))
                .unwrap_or_default()
        ));
    }
    Ok(json!({
        "paid": true,
        "status": status.as_u16(),
        "amount": offer.as_ref().map(|o| o.amount.clone()),
        "network": offer.as_ref().map(|o| o.network.clone()),
        "settlement": settlement,
        "server": answer,
    }))
}

/// Signs the first offer of `required` with the wallet in `PRIVATE_KEY`: the header to send.
fn sign_payment(
    required: &domain::x402::PaymentRequired,
    version: u8,
) -> Result<(&'static str, String), String> {
    use alloy_signer::SignerSync;
    let signer = private_key_signer()?;
    let mut nonce = [0u8; 32];
    nonce.copy_from_slice(&hex::decode(domain::ids::random_hex(32)).map_err(|e| e.to_string())?);
    let now = time::OffsetDateTime::now_utc().unix_timestamp() as u64;
    let draft = domain::x402::client::Draft::new(version, required, signer.address(), now, nonce)?;
    let signature = signer
        .sign_hash_sync(&draft.signing_hash())
        .map_err(|e| e.to_string())?;
    Ok((draft.header_name(), draft.header(&signature.as_bytes())))
}

/// `--id` as a payment key, checked before any call.
fn payment_key(value: &str) -> Result<PaymentKey, String> {
    PaymentKey::parse(value.trim())
        .ok_or_else(|| "must be a payment key: <network>/<asset>/<payer>/<nonce>[#<n>]".into())
}

#[cfg(test)]
mod tests {
    /// The operations svcctl calls are rows of the route table (`api::link` answers `/` for an
    /// id it does not know).
    #[test]
    fn the_routes_svcctl_calls_are_the_tables() {
        use domain::api::link;
        assert_eq!(link("provisionServer", "7"), "/api/cloud/servers/7");
        assert_eq!(link("renewServer", "9"), "/api/cloud/servers/9/renewals");
        assert_eq!(link("verifySignIn", ""), "/api/auth/verify");
        assert_eq!(link("getNonce", ""), "/api/auth/nonce");
        assert_eq!(link("grantApproval", "apr_1"), "/api/approvals/apr_1/grant");
    }
}
