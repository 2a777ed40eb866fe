//! What each function may do to the table, written once (issue 45, point 4): its grants, each
//! a set of DynamoDB actions on the table or an index for the items under some partitions
//! ([`crate::store::partitions::Partition`]). `svcctl generate` writes every function's
//! DynamoDB statements in `template.yaml` from these ([`statements`]; their `dynamodb:LeadingKeys`
//! are the partitions' patterns), and the end-to-end tests hold what the handlers do to the
//! template (`tests/tests/e2e/iam.rs`: a call outside the grants fails where AWS would refuse
//! it).
//!
//! IAM's rules (AWS, "Using IAM policy conditions for fine-grained access control"):
//! `TransactWriteItems` is authorized per item as its `PutItem`, `UpdateItem`, `DeleteItem` or
//! `ConditionCheckItem`; a query of an index needs the index's ARN, its leading key the index's
//! partition value.

use crate::store::partitions::Partition::{self, *};
use crate::store::webhooks::TARGET_ATTRIBUTES;

/// A DynamoDB action a grant allows (IAM's name without `dynamodb:`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// `GetItem` (a `TransactGetItems` item too).
    GetItem,
    /// `BatchGetItem`.
    BatchGetItem,
    /// `PutItem` (a transaction's put too).
    PutItem,
    /// `UpdateItem` (a transaction's update too).
    UpdateItem,
    /// `DeleteItem` (a transaction's delete too).
    DeleteItem,
    /// `ConditionCheckItem` (a transaction's condition check).
    ConditionCheckItem,
    /// `Query`.
    Query,
}

impl Action {
    /// IAM's name of the action.
    pub fn name(self) -> &'static str {
        match self {
            Action::GetItem => "GetItem",
            Action::BatchGetItem => "BatchGetItem",
            Action::PutItem => "PutItem",
            Action::UpdateItem => "UpdateItem",
            Action::DeleteItem => "DeleteItem",
            Action::ConditionCheckItem => "ConditionCheckItem",
            Action::Query => "Query",
        }
    }
}

/// Where a grant applies: the table, or queries of indexes (by name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum On {
    /// The table itself.
    Table,
    /// These indexes (`gsi1` …).
    Index(&'static [&'static str]),
}

/// Which items of a partition a grant reaches: all of them, or those under one of its
/// sub-prefixes (`INFLIGHT#sign-in#…`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lead {
    /// Every item of the partition.
    All(Partition),
    /// The items under `<prefix><name>#`.
    Under(Partition, &'static str),
}

impl Lead {
    /// The `dynamodb:LeadingKeys` pattern.
    pub fn pattern(self) -> String {
        match self {
            Lead::All(partition) => partition.leading_keys(None),
            Lead::Under(partition, name) => partition.leading_keys(Some(name)),
        }
    }
}

/// One grant: a statement of the function's policy.
#[derive(Debug, Clone, Copy)]
pub struct Grant {
    /// Why the function needs it (the statement's comment); empty when it says itself.
    pub why: &'static str,
    /// The actions.
    pub actions: &'static [Action],
    /// The table or the indexes.
    pub on: On,
    /// The items, by their leading keys.
    pub keys: &'static [Lead],
    /// The only attributes a query may read (`dynamodb:Attributes`); empty: any.
    pub attributes: &'static [&'static str],
}

/// A grant of `actions` on `on` for the items of `keys`.
const fn grant(
    why: &'static str,
    actions: &'static [Action],
    on: On,
    keys: &'static [Lead],
) -> Grant {
    Grant {
        why,
        actions,
        on,
        keys,
        attributes: &[],
    }
}

impl Grant {
    /// The grant, reading only `attributes`.
    const fn only(mut self, attributes: &'static [&'static str]) -> Grant {
        self.attributes = attributes;
        self
    }
}

use Action::*;
use Lead::{All, Under};
use On::{Index, Table};

/// Events are written beside the change they describe, never changed after.
const EVENTS: Grant = grant(
    "Events are written beside the change they describe, never changed after.",
    &[PutItem],
    Table,
    &[All(Events)],
);

/// An owner's records listed from `gsi1` (keys, agents, payments, servers, sandboxes, …).
const OWNER_LISTINGS: Grant = grant("", &[Query], Index(&["gsi1"]), &[All(Owner)]);

/// Whether the API key that added an SSH key still stands.
const SSH_KEYS_KEY: Grant = grant(
    "Whether the API key that added an SSH key still stands (a revoked key's SSH keys are \
     disabled).",
    &[GetItem],
    Table,
    &[All(KeyId), All(ApiKey)],
);

/// Every function's grants on the table, by the function's binary name.
pub static ACCESS: &[(&str, &[Grant])] = &[
    ("auth", &[
        grant(
            "",
            &[GetItem, PutItem, UpdateItem, DeleteItem],
            Table,
            &[All(Nonce), All(Session), All(ApiKey), All(Rate)],
        ),
        grant(
            "A sign-in checked on chain holds one of its source address's slots.",
            &[PutItem, DeleteItem],
            Table,
            &[Under(InFlight, "sign-in")],
        ),
    ]),
    ("keys", &[
        EVENTS,
        grant(
            "",
            &[GetItem, BatchGetItem, PutItem, UpdateItem, Query],
            Table,
            &[
                All(Session),
                All(ApiKey),
                All(KeyId),
                All(Agent),
                All(KeyUse),
                All(Sandbox),
                All(Allot),
                All(Rate),
            ],
        ),
        OWNER_LISTINGS,
        grant(
            "The caller's SSH keys: added (registered with the provider), listed, deleted.",
            &[GetItem, PutItem, UpdateItem, DeleteItem, Query],
            Table,
            &[All(SshKeys), All(SshRetire), All(Allot)],
        ),
        grant(
            "Approvals: read, long-polled (one of the owner's waits), granted with a signed \
             message (its nonce used up; a smart wallet's checked on chain, holding a slot of the \
             caller's address) or declined.",
            &[GetItem, PutItem, UpdateItem],
            Table,
            &[All(Approval)],
        ),
        grant(
            "",
            &[GetItem, PutItem, UpdateItem, DeleteItem],
            Table,
            &[All(Nonce), All(Wait), Under(InFlight, "sign-in")],
        ),
        grant(
            "MCP's authorization server: clients registered, codes given at a consent and taken \
             once, tokens issued, rotated and read (a grant is an API key, issued and revoked as \
             the keys' routes do).",
            &[GetItem, PutItem, UpdateItem],
            Table,
            &[All(OAuthClient), All(OAuthCode), All(OAuthToken)],
        ),
    ]),
    ("discovery", &[
        grant(
            "",
            &[GetItem, UpdateItem],
            Table,
            &[All(Session), All(ApiKey), All(Sandbox), All(Server), All(Rate)],
        ),
        grant(
            "An OAuth access token presented on the open plans listing is read, then its API \
             key as any key.",
            &[GetItem],
            Table,
            &[All(OAuthToken)],
        ),
    ]),
    ("servers", &[
        EVENTS,
        grant(
            "",
            &[GetItem, BatchGetItem, PutItem, UpdateItem],
            Table,
            &[
                All(Session),
                All(ApiKey),
                All(Payment),
                All(Sandbox),
                All(Server),
                All(KeyUse),
                All(Rate),
            ],
        ),
        OWNER_LISTINGS,
        grant(
            "The caller's SSH keys: a raw key on a provisioning is added (registered with the \
             provider).",
            &[GetItem, PutItem, UpdateItem, DeleteItem, Query],
            Table,
            &[All(SshKeys), All(SshRetire), All(Allot)],
        ),
        SSH_KEYS_KEY,
        grant(
            "A paid request with a new payment holds one of its payer's slots, one of its \
             owner's and one of everyone's, unless its owner or payer is kept off the pool \
             (a refused payment's cooldown, written by the order's refusal).",
            &[GetItem, BatchGetItem, PutItem, DeleteItem],
            Table,
            &[Under(InFlight, "paid")],
        ),
        grant(
            "Approvals: a key's request its policy refused is asked of its owner (its key and \
             agents named), found again, used with its claim.",
            &[GetItem, BatchGetItem, PutItem, UpdateItem, Query],
            Table,
            &[All(Approval), All(KeyApprovals), All(ApiKey), All(Agent)],
        ),
    ]),
    ("actions", &[
        EVENTS,
        grant(
            "",
            &[GetItem, UpdateItem],
            Table,
            &[All(Session), All(ApiKey), All(Sandbox), All(Server), All(Rate)],
        ),
        grant(
            "The caller's SSH keys: a raw key on a rebuild is added (registered with the \
             provider).",
            &[GetItem, PutItem, UpdateItem, DeleteItem, Query],
            Table,
            &[All(SshKeys), All(SshRetire), All(Allot)],
        ),
        SSH_KEYS_KEY,
    ]),
    ("sandboxes", &[
        grant(
            "",
            &[GetItem, PutItem, UpdateItem, ConditionCheckItem, DeleteItem],
            Table,
            &[
                All(Session),
                All(ApiKey),
                All(Sandbox),
                All(Server),
                All(Wait),
                All(Allot),
                All(Rate),
            ],
        ),
        OWNER_LISTINGS,
    ]),
    ("payments", &[
        grant(
            "",
            &[GetItem, UpdateItem],
            Table,
            &[All(Session), All(ApiKey), All(Rate)],
        ),
        grant(
            "A listed credit's payment and remainders (linked from the caller's own orders), whose \
             undelivered servers decide whether it is redeemable.",
            &[GetItem],
            Table,
            &[All(Payment)],
        ),
        OWNER_LISTINGS,
    ]),
    ("notifications", &[
        grant(
            "",
            &[GetItem, UpdateItem],
            Table,
            &[All(Session), All(ApiKey), All(Rate), All(Allot)],
        ),
        grant(
            "",
            &[Query],
            Table,
            &[All(Feed), All(Events), All(Webhooks), All(Deliveries)],
        ),
        grant(
            "Endpoints (registered, rotated, deleted) and a test event's delivery.",
            &[GetItem, PutItem, UpdateItem, DeleteItem],
            Table,
            &[All(Webhooks), All(Deliveries)],
        ),
        grant(
            "",
            &[Query],
            Index(&["gsi1"]),
            &[All(Deliveries)],
        ),
        grant(
            "",
            &[PutItem, DeleteItem],
            Table,
            &[Under(InFlight, "webhook-tests")],
        ),
        grant(
            "",
            &[GetItem],
            Table,
            &[All(KeyId)],
        ),
    ]),
    ("mcp", &[
        EVENTS,
        grant(
            "Nothing is deleted but the slots a request holds and gives back.",
            &[GetItem, BatchGetItem, PutItem, UpdateItem],
            Table,
            &[All(ApiKey), All(Payment), All(Sandbox), All(Server), All(KeyUse), All(Rate)],
        ),
        grant(
            "A long poll, and a paid request with a new payment, hold one of its owner's slots and \
             one of everyone's (a paid one its payer's too, unless its owner or payer is kept off \
             the pool: a refused payment's cooldown, written by the order's refusal).",
            &[GetItem, BatchGetItem, PutItem, DeleteItem],
            Table,
            &[All(Wait), Under(InFlight, "paid")],
        ),
        OWNER_LISTINGS,
        grant(
            "list_events: an owner's feed, one subject's events.",
            &[Query],
            Table,
            &[All(Feed), All(Events)],
        ),
        grant(
            "The caller's SSH keys: a raw key on a provisioning or a rebuild is added; the SSH key \
             tools.",
            &[GetItem, PutItem, UpdateItem, DeleteItem, Query],
            Table,
            &[All(SshKeys), All(SshRetire), All(Allot)],
        ),
        SSH_KEYS_KEY,
        grant(
            "Approvals: a key's request its policy refused is asked of its owner (its key and \
             agents named), found again, used with its claim; the client's capabilities at its \
             initialize (URL-mode elicitation) are remembered.",
            &[GetItem, BatchGetItem, PutItem, UpdateItem, Query],
            Table,
            &[All(Approval), All(KeyApprovals), All(ApiKey), All(Agent), All(McpClient)],
        ),
        grant(
            "An OAuth access token is read, then its API key as any key.",
            &[GetItem],
            Table,
            &[All(OAuthToken)],
        ),
        grant(
            "MCP tasks: a key's, created, read, ended and listed in its own partition.",
            &[GetItem, PutItem, Query],
            Table,
            &[All(McpTasks)],
        ),
    ]),
    ("reconciler", &[
        EVENTS,
        grant(
            "",
            &[GetItem, BatchGetItem, PutItem, UpdateItem],
            Table,
            &[All(Payment), All(Sandbox), All(Server), All(KeyUse), All(Sweep)],
        ),
        grant(
            "",
            &[Query],
            Index(&["gsi2", "gsi3"]),
            &[
                All(PaymentState),
                All(Leases),
                All(Watches),
                All(Transfers),
                All(Retirements),
            ],
        ),
        grant(
            "An order the facilitator refused keeps its owner and payer off the paid pool.",
            &[PutItem],
            Table,
            &[Under(InFlight, "paid")],
        ),
        grant(
            "Deleted SSH keys whose provider copy is removed.",
            &[GetItem, BatchGetItem, PutItem, DeleteItem],
            Table,
            &[All(SshRetire)],
        ),
        grant(
            "An order's SSH keys, registered with the provider as its create is sent.",
            &[GetItem, UpdateItem, Query],
            Table,
            &[All(SshKeys)],
        ),
    ]),
    ("events", &[
        grant(
            "Each event's place in its owner's feed: the head, the copy there, the mark on the \
             event (one transaction).",
            &[GetItem, PutItem, UpdateItem],
            Table,
            &[All(Feed), All(Events)],
        ),
        grant(
            "The owner's endpoints (and whether the key that registered one still stands), and one \
             delivery record per endpoint. Never their signing secrets: only these attributes \
             (store::webhooks::TARGET_ATTRIBUTES).",
            &[Query],
            Table,
            &[All(Webhooks)],
        )
        .only(&TARGET_ATTRIBUTES),
        grant(
            "",
            &[GetItem],
            Table,
            &[All(KeyId), All(ApiKey)],
        ),
        grant(
            "",
            &[PutItem],
            Table,
            &[All(Deliveries)],
        ),
    ]),
    ("deliveries", &[
        grant(
            "A delivery: read, claimed, its outcome written; the endpoint's state.",
            &[GetItem, BatchGetItem, PutItem, UpdateItem],
            Table,
            &[All(Deliveries), All(Webhooks)],
        ),
        grant(
            "Whether the key that registered the endpoint still stands; a test's slot given back.",
            &[GetItem],
            Table,
            &[All(KeyId), All(ApiKey)],
        ),
        grant(
            "",
            &[DeleteItem],
            Table,
            &[Under(InFlight, "webhook-tests")],
        ),
        grant(
            "The one attempt at a time that probes a failing endpoint; an owner's share of slow \
             attempts.",
            &[PutItem, DeleteItem],
            Table,
            &[Under(InFlight, "probe"), Under(InFlight, "slow-deliveries")],
        ),
        grant(
            "An endpoint's deliveries waiting for a retry, woken when it answers again.",
            &[Query],
            Index(&["gsi2"]),
            &[All(Waiting)],
        ),
        grant(
            "A dead-lettered delivery's `webhook.delivery_failed`, written with it.",
            &[PutItem],
            Table,
            &[Under(Events, "delivery")],
        ),
    ]),];

/// `function`'s grants (none for a function that does not touch the table).
pub fn of(function: &str) -> &'static [Grant] {
    ACCESS
        .iter()
        .find(|(name, _)| *name == function)
        .map_or(&[], |(_, grants)| grants)
}

/// `text` as YAML comment lines at `indent`, wrapped within 100 columns.
fn comment(indent: &str, text: &str) -> String {
    let mut out = String::new();
    let mut line = format!("{indent}#");
    for word in text.split_whitespace() {
        if line.len() + 1 + word.len() > 100 {
            out.push_str(&line);
            out.push('\n');
            line = format!("{indent}#");
        }
        line.push(' ');
        line.push_str(word);
    }
    out.push_str(&line);
    out.push('\n');
    out
}

/// One grant as a statement of a policy's `Statement:` list.
fn statement(grant: &Grant) -> String {
    let mut out = String::new();
    if !grant.why.is_empty() {
        out.push_str(&comment("            ", grant.why));
    }
    let actions: Vec<String> = grant
        .actions
        .iter()
        .map(|a| format!("dynamodb:{}", a.name()))
        .collect();
    out.push_str("            - Effect: Allow\n");
    out.push_str(&format!("              Action: [{}]\n", actions.join(", ")));
    match grant.on {
        On::Table => out.push_str("              Resource: !GetAtt Table.Arn\n"),
        On::Index([index]) => out.push_str(&format!(
            "              Resource: !Sub \"${{Table.Arn}}/index/{index}\"\n"
        )),
        On::Index(indexes) => {
            out.push_str("              Resource:\n");
            for index in indexes {
                out.push_str(&format!(
                    "                - !Sub \"${{Table.Arn}}/index/{index}\"\n"
                ));
            }
        }
    }
    let keys: Vec<String> = grant
        .keys
        .iter()
        .map(|k| format!("\"{}\"", k.pattern()))
        .collect();
    out.push_str("              Condition:\n                ForAllValues:StringLike:\n");
    out.push_str(&format!(
        "                  dynamodb:LeadingKeys: [{}]\n",
        keys.join(", ")
    ));
    if !grant.attributes.is_empty() {
        out.push_str(&format!(
            "                ForAllValues:StringEquals:\n                  \
             dynamodb:Attributes: [{}]\n                StringEqualsIfExists:\n                  \
             dynamodb:Select: SPECIFIC_ATTRIBUTES\n",
            grant.attributes.join(", ")
        ));
    }
    out
}

/// The first line of `function`'s generated statements in `template.yaml`.
pub fn begin(function: &str) -> String {
    format!(
        "# The table's statements of `{function}`: written by `svcctl generate` from \
         shared/domain/src/api/access.rs."
    )
}

/// The last line of them.
pub fn end(function: &str) -> String {
    format!("# End of the table's statements of `{function}`.")
}

/// `function`'s DynamoDB statements as one policy of its `Policies:` list, between its markers.
pub fn statements(function: &str) -> String {
    let mut out = format!("        {}\n", begin(function));
    let grants = of(function);
    if !grants.is_empty() {
        out.push_str("        - Statement:\n");
        for grant in grants {
            out.push_str(&statement(grant));
        }
    }
    out.push_str(&format!("        {}\n", end(function)));
    out
}
