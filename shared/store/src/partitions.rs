//! Every partition of the table, written once (issue 45, point 4): the prefix of each kind of
//! item's partition key (`pk`) and of each index's partition value (`gsi1pk`, `gsi2pk`,
//! `gsi3pk`). The store's modules build every partition key from these; the template's IAM
//! conditions on `dynamodb:LeadingKeys` are generated from them (`svcctl generate`, from the
//! functions' grants in `infra/src/access.rs`); `docs/storage.md`'s items table is held to them
//! by a test (`template::every_partition_is_in_the_storage_doc_and_only_those`).

use std::fmt::Display;

/// A partition of the table or of an index: a prefix followed by the item's own id (`APIKEY#…`),
/// or one fixed value that a pass reads whole (`LEASE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Partition {
    /// An API key, by the SHA-256 of the key (`crate::keys`); also its agents' links.
    ApiKey,
    /// A key id's pointer to its key's hash.
    KeyId,
    /// An owner's records on `gsi1` (keys, agents, payments, servers, sandboxes, approvals,
    /// SSH keys), by the owner's address.
    Owner,
    /// An agent (`crate::agents`).
    Agent,
    /// A sign-in nonce (`crate::sessions`).
    Nonce,
    /// A session, by the SHA-256 of its token.
    Session,
    /// A payment and its order (`crate::payments`), by the payment's key.
    Payment,
    /// Payments on `gsi2` by state (`PAYSTATE#<state>`).
    PaymentState,
    /// A server's ownership (`crate::sandboxes`), by the provider's server id.
    Server,
    /// A sandbox (`crate::sandboxes`).
    Sandbox,
    /// Paid servers on `gsi2` whose lease step is due: one fixed partition.
    Leases,
    /// Servers on `gsi3` the refresher is due to read: one fixed partition.
    Watches,
    /// Paid orders on `gsi3` whose transfer is followed until the chain calls it final
    /// (`crate::payments`): one fixed partition.
    Transfers,
    /// An owner's counts (`crate::caps`).
    Allot,
    /// An owner's long-poll slots (`crate::caps`).
    Wait,
    /// An in-flight pool's slots (`crate::caps::Pool`): `INFLIGHT#<pool>#<subject>`.
    InFlight,
    /// A key's spend and servers (`crate::usage`).
    KeyUse,
    /// An approval (`crate::approvals`).
    Approval,
    /// A key's latest approval of each request.
    KeyApprovals,
    /// A key's MCP client at its last `initialize`.
    McpClient,
    /// A key's MCP tasks (`crate::tasks`).
    McpTasks,
    /// A rate-limit window: `RATE#<policy>#<subject>`.
    Rate,
    /// An OAuth client's registration (`crate::oauth`), by its client id.
    OAuthClient,
    /// An OAuth authorization code, by its SHA-256.
    OAuthCode,
    /// An OAuth access or refresh token, by its SHA-256.
    OAuthToken,
    /// A project's last sweep.
    Sweep,
    /// A subject's events (`crate::events`): `EVENTS#<kind>#<subject id>`.
    Events,
    /// An owner's feed (`crate::events`).
    Feed,
    /// An owner's SSH keys (`crate::ssh_keys`).
    SshKeys,
    /// A deleted SSH key's provider copy to remove, by its label.
    SshRetire,
    /// SSH keys' provider copies on `gsi2` due to be removed: one fixed partition.
    Retirements,
    /// An owner's webhook endpoints (`crate::webhooks`).
    Webhooks,
    /// An endpoint's deliveries (`crate::webhooks`), on the table and on `gsi1`.
    Deliveries,
    /// An endpoint's deliveries waiting for a retry, on `gsi2`.
    Waiting,
}

impl Partition {
    /// Every partition, in the order `docs/storage.md` names them.
    pub const ALL: [Partition; 34] = [
        Partition::ApiKey,
        Partition::KeyId,
        Partition::Owner,
        Partition::Agent,
        Partition::Nonce,
        Partition::Session,
        Partition::Payment,
        Partition::PaymentState,
        Partition::Server,
        Partition::Sandbox,
        Partition::Leases,
        Partition::Watches,
        Partition::Transfers,
        Partition::Allot,
        Partition::Wait,
        Partition::InFlight,
        Partition::KeyUse,
        Partition::Approval,
        Partition::KeyApprovals,
        Partition::McpClient,
        Partition::McpTasks,
        Partition::Rate,
        Partition::OAuthClient,
        Partition::OAuthCode,
        Partition::OAuthToken,
        Partition::Sweep,
        Partition::Events,
        Partition::Feed,
        Partition::SshKeys,
        Partition::SshRetire,
        Partition::Retirements,
        Partition::Webhooks,
        Partition::Deliveries,
        Partition::Waiting,
    ];

    /// The partition key's prefix, `APIKEY#`, or the fixed value, `LEASE`.
    pub const fn prefix(self) -> &'static str {
        match self {
            Partition::ApiKey => "APIKEY#",
            Partition::KeyId => "KEYID#",
            Partition::Owner => "OWNER#",
            Partition::Agent => "AGENT#",
            Partition::Nonce => "NONCE#",
            Partition::Session => "SESSION#",
            Partition::Payment => "PAYMENT#",
            Partition::PaymentState => "PAYSTATE#",
            Partition::Server => "SERVER#",
            Partition::Sandbox => "SANDBOX#",
            Partition::Leases => "LEASE",
            Partition::Watches => "WATCH",
            Partition::Transfers => "TRANSFER",
            Partition::Allot => "ALLOT#",
            Partition::Wait => "WAIT#",
            Partition::InFlight => "INFLIGHT#",
            Partition::KeyUse => "KEYUSE#",
            Partition::Approval => "APPROVAL#",
            Partition::KeyApprovals => "KEYAPPROVALS#",
            Partition::McpClient => "MCPCLIENT#",
            Partition::McpTasks => "MCPTASKS#",
            Partition::Rate => "RATE#",
            Partition::OAuthClient => "OAUTHCLIENT#",
            Partition::OAuthCode => "OAUTHCODE#",
            Partition::OAuthToken => "OAUTHTOKEN#",
            Partition::Sweep => "SWEEP#",
            Partition::Events => "EVENTS#",
            Partition::Feed => "FEED#",
            Partition::SshKeys => "SSHKEYS#",
            Partition::SshRetire => "SSHRETIRE#",
            Partition::Retirements => "SSHRETIRE",
            Partition::Webhooks => "WEBHOOKS#",
            Partition::Deliveries => "DELIVERIES#",
            Partition::Waiting => "WAITING#",
        }
    }

    /// Whether the partition is one fixed value (no id follows it).
    pub const fn is_fixed(self) -> bool {
        matches!(
            self,
            Partition::Leases | Partition::Watches | Partition::Transfers | Partition::Retirements
        )
    }

    /// The partition key of the item `id` names: the prefix and the id (`APIKEY#<hash>`).
    pub fn key(self, id: impl Display) -> String {
        format!("{}{id}", self.prefix())
    }

    /// The IAM `dynamodb:LeadingKeys` pattern of every key of this partition (`APIKEY#*`),
    /// or of those under `under` (`INFLIGHT#sign-in#*`); a fixed partition is itself.
    pub fn leading_keys(self, under: Option<&str>) -> String {
        match (self.is_fixed(), under) {
            (true, _) => self.prefix().to_owned(),
            (false, None) => format!("{}*", self.prefix()),
            (false, Some(under)) => format!("{}{under}#*", self.prefix()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_partition_is_listed_once_and_no_prefix_starts_another() {
        let mut prefixes: Vec<&str> = Partition::ALL.iter().map(|p| p.prefix()).collect();
        prefixes.sort_unstable();
        prefixes.dedup();
        assert_eq!(prefixes.len(), Partition::ALL.len());
        for a in Partition::ALL.iter().filter(|p| !p.is_fixed()) {
            for b in Partition::ALL.iter().filter(|b| *b != a && !b.is_fixed()) {
                assert!(!b.prefix().starts_with(a.prefix()), "{a:?} starts {b:?}");
            }
        }
    }

    #[test]
    fn leading_keys_are_iam_patterns() {
        assert_eq!(Partition::ApiKey.leading_keys(None), "APIKEY#*");
        assert_eq!(
            Partition::InFlight.leading_keys(Some("sign-in")),
            "INFLIGHT#sign-in#*"
        );
        assert_eq!(Partition::Leases.leading_keys(None), "LEASE");
        assert_eq!(Partition::Sandbox.key("sbx_1"), "SANDBOX#sbx_1");
    }
}
