//! `svcctl`: what operators and developers run around the functions.
//!
//! ```text
//! svcctl create-table                         create the table (from store::schema) if missing
//! svcctl create-key --owner 0x… [--name N] [--expires-at RFC3339]
//!                                             issue an API key; printed once
//! svcctl list-keys --owner 0x…                the owner's keys (never the key or its hash)
//! svcctl revoke-key --owner 0x… --id key_…    revoke a key (idempotent)
//! ```
//!
//! The table comes from `TABLE_NAME`; DynamoDB from the AWS SDK's environment
//! (`AWS_ENDPOINT_URL_DYNAMODB` for the local stack). Output is JSON on stdout.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use serde_json::json;
use shared::auth::{address, api_key};
use shared::store::{Store, schema};
use shared::{ApiError, ids};

#[derive(Parser)]
#[command(name = "svcctl", about = "Operator commands for the cloud API")]
struct Cli {
    /// The DynamoDB table.
    #[arg(long, env = "TABLE_NAME")]
    table: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Create the table from the schema the template declares, if it does not exist.
    CreateTable,
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
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let store = Store::connect(&cli.table).await;
    match run(&store, cli.command).await {
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

async fn run(store: &Store, command: Command) -> Result<serde_json::Value, ApiError> {
    match command {
        Command::CreateTable => {
            let created = schema::create_table(store.client(), store.table()).await?;
            Ok(json!({ "table": store.table(), "created": created }))
        }
        Command::CreateKey {
            owner,
            name,
            expires_at,
        } => {
            let owner = address::parse("owner", &owner)?;
            if let Some(at) = &expires_at
                && shared::time::parse_rfc3339(at).is_none()
            {
                return Err(ApiError::invalid("expires-at", "must be an RFC 3339 time"));
            }
            let (key, record) = api_key::issue(store, &owner, &name, expires_at).await?;
            Ok(json!({
                "id": record.id,
                "owner": record.owner,
                "name": record.name,
                "prefix": record.prefix,
                "createdAt": record.created_at,
                "expiresAt": record.expires_at,
                "key": key.expose(),
                "note": "store this key now: it is shown once and cannot be recovered",
            }))
        }
        Command::ListKeys { owner } => {
            let owner = address::parse("owner", &owner)?;
            let now = shared::time::now();
            let mut keys = Vec::new();
            let mut cursor: Option<String> = None;
            loop {
                let page = store.api_keys_of(&owner, 100, cursor.as_deref()).await?;
                keys.extend(page.items.iter().map(|k| api_key::KeyView::of(k, now)));
                match page.next_cursor {
                    Some(next) => cursor = Some(next),
                    None => break,
                }
            }
            Ok(json!({ "owner": owner, "keys": keys }))
        }
        Command::RevokeKey { owner, id } => {
            let owner = address::parse("owner", &owner)?;
            ids::parse(ids::API_KEY, "id", &id)?;
            let at = shared::time::now_rfc3339();
            match store.revoke_api_key(&owner, &id, &at).await? {
                Some(record) => Ok(json!({ "id": record.id, "revokedAt": record.revoked_at })),
                None => Err(ApiError::NotFound(format!("{owner} has no key {id}"))),
            }
        }
    }
}
