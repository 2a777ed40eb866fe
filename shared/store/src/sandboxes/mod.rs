//! Sandboxes (server metadata records) and server ownership (design brief §3, Ownership).
//!
//! - Ownership: `pk = SERVER#<server id>`, `sk = OWNER`: who provisioned a server through this
//!   service. Written once, conditionally, at provisioning; the only thing that authorises
//!   actions, delete and listing. Read strongly consistent.
//! - Sandbox: `pk = SANDBOX#<id>`, `sk = SANDBOX`; GSI1 `gsi1pk = OWNER#<address>`,
//!   `gsi1sk = SANDBOX#<createdAt>#<id>` for the owner's listing.

use crate::address::Owner;
use crate::partitions::Partition;
use std::collections::HashMap;

use aws_sdk_dynamodb::types::{
    AttributeValue, ConditionCheck, PutRequest, TransactWriteItem, WriteRequest,
};

use super::keys::owner_partition;
use super::{Item, Page, Store, StoreError, from_item, put_new, s, schema, to_item};

const OWNERSHIP_SK: &str = "OWNER";
const SANDBOX_SK: &str = "SANDBOX";

mod records;
pub use records::*;

/// The parts of one sandbox update, written alone (UpdateItem) or in a transaction.
#[derive(Default)]
struct Update {
    key: Item,
    expression: String,
    condition: String,
    names: HashMap<String, String>,
    values: Item,
}

impl Update {
    fn name(&mut self, placeholder: &str, attribute: &str) {
        self.names
            .insert(placeholder.to_owned(), attribute.to_owned());
    }
    fn value(&mut self, placeholder: &str, value: AttributeValue) {
        self.values.insert(placeholder.to_owned(), value);
    }
}

/// GSI2 keys of a lease due at `due` (epoch seconds): `LEASE`, `LEASE#<due, 12 digits>#<id>`.
fn lease_keys(sandbox_id: &str, due: i64) -> (String, String) {
    (
        Partition::Leases.prefix().into(),
        format!("LEASE#{:012}#{sandbox_id}", due.max(0)),
    )
}

/// GSI3 keys of a server the refresher is due to read at `due` (epoch seconds): `WATCH`,
/// `<due, 12 digits>#<id>`.
fn watch_keys(sandbox_id: &str, due: i64) -> (String, String) {
    (
        Partition::Watches.prefix().into(),
        format!("{:012}#{sandbox_id}", due.max(0)),
    )
}

fn ownership_key(server_id: u64) -> String {
    Partition::Server.key(server_id)
}

fn sandbox_key(id: &str) -> String {
    Partition::Sandbox.key(id)
}

/// The item of a new sandbox; one that names a watched server — or is the intent of a free
/// server's create (a watch, no server, no payment) — is due to the refresher at once.
pub(crate) fn sandbox_item(sandbox: &SandboxRecord) -> Result<Item, StoreError> {
    let mut keys = vec![
        (schema::PK, sandbox_key(&sandbox.id)),
        (schema::SK, SANDBOX_SK.to_owned()),
        (schema::GSI1_PK, owner_partition(&sandbox.owner)),
        (
            schema::GSI1_SK,
            format!("SANDBOX#{}#{}", sandbox.created_at, sandbox.id),
        ),
    ];
    if sandbox.watch.is_some() && (sandbox.server_id.is_some() || sandbox.payment.is_none()) {
        let (pk, sk) = watch_keys(&sandbox.id, 0);
        keys.extend([(schema::GSI3_PK, pk), (schema::GSI3_SK, sk)]);
    }
    to_item(sandbox, &keys)
}

/// GSI1 sort key of a server's ownership: the owner's servers by project, then id.
fn ownership_gsi1_sk(project: u64, server_id: u64) -> String {
    format!("SERVER#{project}#{server_id:020}")
}

/// The ownership item; in GSI1 under its owner ([`ownership_gsi1_sk`]), so listing an owner's
/// servers of a project reads only server-bearing records.
pub(crate) fn ownership_item(ownership: &ServerOwnership) -> Result<Item, StoreError> {
    to_item(
        ownership,
        &[
            (schema::PK, ownership_key(ownership.server_id)),
            (schema::SK, OWNERSHIP_SK.to_owned()),
            (schema::GSI1_PK, owner_partition(&ownership.owner)),
            (
                schema::GSI1_SK,
                ownership_gsi1_sk(ownership.project_id, ownership.server_id),
            ),
        ],
    )
}

impl Store {
    /// Writes servers' ownership and sandbox records in bulk, unconditionally (BatchWriteItem,
    /// 25 items a call, unprocessed items retried): for imports and benchmarks only — requests
    /// use [`Store::record_server`], which refuses a server that already has an owner.
    ///
    /// Errors: the store's; unprocessed items after 10 rounds.
    pub async fn import_servers(
        &self,
        servers: &[(ServerOwnership, SandboxRecord)],
    ) -> Result<(), StoreError> {
        let mut items = Vec::with_capacity(servers.len() * 2);
        for (ownership, sandbox) in servers {
            items.push(ownership_item(ownership)?);
            items.push(sandbox_item(sandbox)?);
        }
        for chunk in items.chunks(25) {
            let mut requests: Vec<WriteRequest> = chunk
                .iter()
                .map(|item| {
                    PutRequest::builder()
                        .set_item(Some(item.clone()))
                        .build()
                        .map(|put| WriteRequest::builder().put_request(put).build())
                        .map_err(|e| StoreError::Backend(e.to_string()))
                })
                .collect::<Result<_, _>>()?;
            for _ in 0..10 {
                if requests.is_empty() {
                    break;
                }
                let out = self
                    .client
                    .batch_write_item()
                    .request_items(&self.table, requests)
                    .send()
                    .await
                    .map_err(StoreError::from_sdk)?;
                requests = out
                    .unprocessed_items
                    .and_then(|mut u| u.remove(&self.table))
                    .unwrap_or_default();
            }
            if !requests.is_empty() {
                return Err(StoreError::Backend(
                    "batch writes kept being throttled".into(),
                ));
            }
        }
        Ok(())
    }

    /// Records a newly provisioned server: its ownership and its sandbox, in one transaction.
    /// Fails with [`StoreError::ConditionFailed`] if the server already has an owner.
    pub async fn record_server(
        &self,
        ownership: &ServerOwnership,
        sandbox: &SandboxRecord,
    ) -> Result<(), StoreError> {
        let ownership_item = ownership_item(ownership)?;
        self.client
            .transact_write_items()
            .transact_items(put_new(&self.table, ownership_item)?)
            .transact_items(put_new(&self.table, sandbox_item(sandbox)?)?)
            .send()
            .await
            .map_err(StoreError::from_sdk)?;
        Ok(())
    }

    /// Records server `ownership` for the sandbox it names and applies `change` to that sandbox
    /// (its server, status and watch), in one transaction: how a free server's intent becomes
    /// its server. `false` when the server already has an owner or the sandbox moved (another
    /// adopter won).
    ///
    /// Errors: the store's.
    pub async fn adopt_server(
        &self,
        ownership: &ServerOwnership,
        change: &SandboxStatus,
        at: crate::time::Timestamp,
    ) -> Result<bool, StoreError> {
        let mut items = vec![put_new(&self.table, ownership_item(ownership)?)?];
        items.extend(self.sandbox_change_items(change, at)?);
        self.write_all(items).await
    }

    /// Who owns server `server_id` (strongly consistent), if it was provisioned here.
    pub async fn server_ownership(
        &self,
        server_id: u64,
    ) -> Result<Option<ServerOwnership>, StoreError> {
        self.get(ownership_key(server_id), OWNERSHIP_SK).await
    }

    /// The update that writes `change` at `at`: key, expressions, names and values.
    fn sandbox_change(
        &self,
        change: &SandboxStatus,
        at: crate::time::Timestamp,
    ) -> Result<Update, StoreError> {
        let mut u = Update {
            key: HashMap::from([
                (schema::PK.to_owned(), s(sandbox_key(&change.sandbox_id))),
                (schema::SK.to_owned(), s(SANDBOX_SK)),
            ]),
            ..Update::default()
        };
        let mut c = Clauses {
            sets: vec![
                "#status = :status".to_owned(),
                "#updatedAt = :at".to_owned(),
            ],
            removes: vec![],
            condition: "attribute_exists(#pk)".to_owned(),
        };
        u.name("#pk", schema::PK);
        u.name("#status", "status");
        u.name("#updatedAt", "updatedAt");
        u.value(":status", s(change.status.as_str()));
        u.value(":at", s(at));
        if let Some(server_id) = change.server_id {
            c.sets.push("#serverId = :serverId".into());
            u.name("#serverId", "serverId");
            u.value(":serverId", number(server_id));
        }
        if let Some(project_id) = change.project_id {
            c.sets.push("#projectId = :projectId".into());
            u.name("#projectId", "projectId");
            u.value(":projectId", number(project_id));
        }
        if let Some(hostname) = &change.hostname {
            c.sets.push("#hostname = :hostname".into());
            u.name("#hostname", "hostname");
            u.value(":hostname", s(hostname));
        }
        if let Some(plan) = &change.plan {
            c.sets.push("#plan = :plan".into());
            u.name("#plan", "plan");
            u.value(":plan", s(plan));
        }
        if let Some(resizing) = &change.resizing {
            resizing_clauses(&mut u, &mut c, resizing);
        }
        if let Some(keys) = &change.authorized_keys {
            c.sets.push("#authorizedKeys = :authorizedKeys".into());
            u.name("#authorizedKeys", "authorizedKeys");
            u.value(
                ":authorizedKeys",
                serde_dynamo::to_attribute_value(keys)
                    .map_err(|e| StoreError::Corrupt(e.to_string()))?,
            );
        }
        if let Some(lease) = &change.lease {
            lease_clauses(&mut u, &mut c, &change.sandbox_id, lease)?;
        }
        if let Some(watch) = &change.watch {
            watch_clauses(&mut u, &mut c, &change.sandbox_id, watch, change.unwatch)?;
        }
        if let Some(outbox) = change.outbox.as_ref().filter(|o| !o.events().is_empty()) {
            c.sets.push("#eventSeq = :eventSeq".into());
            c.condition
                .push_str(" AND (attribute_not_exists(#eventSeq) OR #eventSeq = :eventRead)");
            u.name("#eventSeq", "eventSeq");
            u.value(":eventSeq", number(outbox.seq()));
            u.value(":eventRead", number(outbox.read_seq()));
        }
        u.expression = format!("SET {}", c.sets.join(", "));
        if !c.removes.is_empty() {
            u.expression
                .push_str(&format!(" REMOVE {}", c.removes.join(", ")));
        }
        u.condition = c.condition;
        Ok(u)
    }

    /// The items of a transaction that writes `change` at `at`: its update, then its events.
    pub(crate) fn sandbox_change_items(
        &self,
        change: &SandboxStatus,
        at: crate::time::Timestamp,
    ) -> Result<Vec<TransactWriteItem>, StoreError> {
        let mut items = vec![self.sandbox_change_item(change, at)?];
        if let Some(outbox) = &change.outbox {
            items.extend(outbox.puts(&self.table)?);
        }
        Ok(items)
    }

    /// The update of a transaction that writes `change` at `at` (its events aside).
    fn sandbox_change_item(
        &self,
        change: &SandboxStatus,
        at: crate::time::Timestamp,
    ) -> Result<TransactWriteItem, StoreError> {
        let u = self.sandbox_change(change, at)?;
        let update = aws_sdk_dynamodb::types::Update::builder()
            .table_name(&self.table)
            .set_key(Some(u.key))
            .update_expression(u.expression)
            .condition_expression(u.condition)
            .set_expression_attribute_names(Some(u.names))
            .set_expression_attribute_values(Some(u.values))
            .build()
            .map_err(|e| StoreError::Backend(e.to_string()))?;
        Ok(TransactWriteItem::builder().update(update).build())
    }

    /// Writes `change` at `at` (its `updatedAt`) on its own (one conditional UpdateItem, or with
    /// its events one transaction); `false` when its condition failed (no such sandbox, or the
    /// lease, the watch or the events moved since it was read).
    pub async fn change_sandbox(
        &self,
        change: &SandboxStatus,
        at: crate::time::Timestamp,
    ) -> Result<bool, StoreError> {
        if change
            .outbox
            .as_ref()
            .is_some_and(|o| !o.events().is_empty())
        {
            return self.write_all(self.sandbox_change_items(change, at)?).await;
        }
        let u = self.sandbox_change(change, at)?;
        let written = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(u.key))
            .update_expression(u.expression)
            .condition_expression(u.condition)
            .set_expression_attribute_names(Some(u.names))
            .set_expression_attribute_values(Some(u.values))
            .send()
            .await
            .map_err(StoreError::from_sdk);
        super::applied(written)
    }

    /// Up to `limit` sandboxes whose lease is due at `now` (epoch seconds) or before, earliest
    /// first (GSI2, keys only, eventually consistent: a lease written a moment ago may show a
    /// moment late; the records themselves are read strongly consistent).
    pub async fn leases_due(&self, now: i64, limit: i32) -> Result<Vec<SandboxRecord>, StoreError> {
        self.due_in_gsi2(Partition::Leases.prefix(), now, limit)
            .await?
            .into_iter()
            .map(from_item)
            .collect()
    }

    /// Up to `limit` sandboxes whose server the refresher is due to read at `now` (epoch
    /// seconds) or before, earliest first (GSI3, keys only, eventually consistent; the records
    /// themselves are read strongly consistent).
    pub async fn watches_due(
        &self,
        now: i64,
        limit: i32,
    ) -> Result<Vec<SandboxRecord>, StoreError> {
        self.due_in_gsi3(Partition::Watches.prefix(), now, limit)
            .await?
            .into_iter()
            .map(from_item)
            .collect()
    }

    /// Stores a new sandbox, counting it against the owner's `cap` of metadata sandboxes when
    /// there is one (`crate::caps`: [`StoreError::CapReached`] at the cap). When it names
    /// a server, the same transaction checks that the server's recorded owner is the sandbox's
    /// owner; [`StoreError::ConditionFailed`] when not (or when the server was never provisioned
    /// here).
    pub async fn put_sandbox(
        &self,
        sandbox: &SandboxRecord,
        cap: Option<u32>,
    ) -> Result<(), StoreError> {
        use super::caps::{self, Counter};
        let mut tx = self.client.transact_write_items();
        if let Some(cap) = cap {
            tx = tx.transact_items(caps::allot(
                &self.table,
                &sandbox.owner,
                Counter::Sandboxes,
                cap,
            )?);
        }
        if let Some(server_id) = sandbox.server_id {
            tx = tx.transact_items(
                TransactWriteItem::builder()
                    .condition_check(
                        ConditionCheck::builder()
                            .table_name(&self.table)
                            .key(schema::PK, s(ownership_key(server_id)))
                            .key(schema::SK, s(OWNERSHIP_SK))
                            .condition_expression("#owner = :owner")
                            .expression_attribute_names("#owner", "owner")
                            .expression_attribute_values(":owner", s(sandbox.owner.as_str()))
                            .build()
                            .map_err(|e| StoreError::Backend(e.to_string()))?,
                    )
                    .build(),
            );
        }
        tx.transact_items(put_new(&self.table, sandbox_item(sandbox)?)?)
            .send()
            .await
            .map_err(|err| match cap {
                Some(_) => caps::cap_failed(err, 0, Counter::Sandboxes),
                None => StoreError::from_sdk(err),
            })?;
        Ok(())
    }

    /// The sandbox `id` (strongly consistent), whoever owns it.
    pub async fn sandbox(&self, id: &str) -> Result<Option<SandboxRecord>, StoreError> {
        self.get(sandbox_key(id), SANDBOX_SK).await
    }

    /// The sandboxes of `ids` that exist (strongly consistent batch reads), whoever owns them.
    ///
    /// Errors: the store fails.
    pub async fn sandboxes(&self, ids: &[&str]) -> Result<Vec<SandboxRecord>, StoreError> {
        let keys = ids
            .iter()
            .map(|id| (sandbox_key(id), SANDBOX_SK.to_owned()))
            .collect();
        self.batch_get(keys)
            .await?
            .into_iter()
            .map(from_item)
            .collect()
    }

    /// Every server `owner` was recorded as owning in `project` (GSI1, eventually consistent;
    /// all pages), by server id.
    ///
    /// Errors: the store fails.
    pub async fn servers_of(
        &self,
        owner: &Owner,
        project: u64,
    ) -> Result<Vec<ServerOwnership>, StoreError> {
        let prefix = format!("SERVER#{project}#");
        let mut owned = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let page = self
                .query_index(
                    super::Index::Gsi1,
                    &owner_partition(owner),
                    &prefix,
                    100,
                    cursor.as_deref(),
                    true,
                )
                .await?;
            owned.extend(page.items);
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => return Ok(owned),
            }
        }
    }

    /// Puts every server ownership written before ownerships were indexed by owner into GSI1
    /// (an upgrade step, `svcctl index-servers`; a scan of the table). Returns how many it
    /// indexed.
    ///
    /// Errors: the store fails.
    pub async fn index_server_ownerships(&self) -> Result<usize, StoreError> {
        let mut indexed = 0;
        let mut start = None;
        loop {
            let page = self
                .client
                .scan()
                .table_name(&self.table)
                .filter_expression(
                    "begins_with(#pk, :server) AND #sk = :owner AND attribute_not_exists(#gsi1pk)",
                )
                .expression_attribute_names("#pk", schema::PK)
                .expression_attribute_names("#sk", schema::SK)
                .expression_attribute_names("#gsi1pk", schema::GSI1_PK)
                .expression_attribute_values(":server", s("SERVER#"))
                .expression_attribute_values(":owner", s(OWNERSHIP_SK))
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(StoreError::from_sdk)?;
            for item in page.items() {
                let ownership: ServerOwnership = from_item(item.clone())?;
                self.client
                    .put_item()
                    .table_name(&self.table)
                    .set_item(Some(ownership_item(&ownership)?))
                    .send()
                    .await
                    .map_err(StoreError::from_sdk)?;
                indexed += 1;
            }
            start = page.last_evaluated_key().cloned();
            if start.is_none() {
                return Ok(indexed);
            }
        }
    }

    /// One page of an owner's sandboxes, newest first (GSI1, eventually consistent).
    pub async fn sandboxes_of(
        &self,
        owner: &Owner,
        limit: i32,
        cursor: Option<&str>,
    ) -> Result<Page<SandboxRecord>, StoreError> {
        self.query_gsi1(&owner_partition(owner), "SANDBOX#", limit, cursor)
            .await
    }
}
/// The clauses of an update expression being built: `SET`s, `REMOVE`s and the condition.
struct Clauses {
    sets: Vec<String>,
    removes: Vec<&'static str>,
    condition: String,
}

fn number(v: u64) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

/// A sandbox change's resize: taken (when no other order holds it) or released (by its holder).
fn resizing_clauses(u: &mut Update, c: &mut Clauses, resizing: &Resizing) {
    let order = match resizing {
        Resizing::Take(order) => {
            c.sets.push("#resizing = :resizing".into());
            c.condition
                .push_str(" AND (attribute_not_exists(#resizing) OR #resizing = :resizing)");
            order
        }
        Resizing::Release(order) => {
            c.removes.push("#resizing");
            c.condition.push_str(" AND #resizing = :resizing");
            order
        }
    };
    u.name("#resizing", "resizing");
    u.value(":resizing", s(order));
}

/// A sandbox change's lease: the lease, its GSI2 keys (due, or removed) and, when it was read,
/// the condition that its `seq` is still the one read.
fn lease_clauses(
    u: &mut Update,
    c: &mut Clauses,
    sandbox_id: &str,
    lease: &LeaseChange,
) -> Result<(), StoreError> {
    let value = serde_dynamo::to_attribute_value(&lease.lease)
        .map_err(|e| StoreError::Corrupt(e.to_string()))?;
    c.sets.push("#lease = :lease".into());
    u.name("#lease", "lease");
    u.value(":lease", value);
    u.name("#gpk", schema::GSI2_PK);
    u.name("#gsk", schema::GSI2_SK);
    match lease.due {
        Some(due) => {
            let (gpk, gsk) = lease_keys(sandbox_id, due);
            c.sets.push("#gpk = :gpk".into());
            c.sets.push("#gsk = :gsk".into());
            u.value(":gpk", s(gpk));
            u.value(":gsk", s(gsk));
        }
        None => c.removes.extend(["#gpk", "#gsk"]),
    }
    if let Some(seq) = lease.read_seq {
        c.condition.push_str(" AND #lease.#seq = :leaseSeq");
        u.name("#seq", "seq");
        u.value(":leaseSeq", number(seq));
    }
    Ok(())
}

/// A sandbox change's watch: the watch, its GSI3 keys (due; removed when `unwatch`) and, when
/// it was read, the condition that its `seq` is still the one read.
fn watch_clauses(
    u: &mut Update,
    c: &mut Clauses,
    sandbox_id: &str,
    watch: &WatchChange,
    unwatch: bool,
) -> Result<(), StoreError> {
    let value = serde_dynamo::to_attribute_value(&watch.watch)
        .map_err(|e| StoreError::Corrupt(e.to_string()))?;
    c.sets.push("#watch = :watch".into());
    u.name("#watch", "watch");
    u.value(":watch", value);
    if watch.due.is_some() || unwatch {
        u.name("#wpk", schema::GSI3_PK);
        u.name("#wsk", schema::GSI3_SK);
    }
    if let Some(due) = watch.due {
        let (pk, sk) = watch_keys(sandbox_id, due);
        c.sets.push("#wpk = :wpk".into());
        c.sets.push("#wsk = :wsk".into());
        u.value(":wpk", s(pk));
        u.value(":wsk", s(sk));
    } else if unwatch {
        c.removes.extend(["#wpk", "#wsk"]);
    }
    if let Some(seq) = watch.read_seq {
        c.condition.push_str(" AND #watch.#wseq = :watchSeq");
        u.name("#wseq", "seq");
        u.value(":watchSeq", number(seq));
    }
    Ok(())
}
