//! Who the caller is and what it may do: sign-in and sessions (`auth`), API keys with their
//! scopes (`keys`; what a key may spend is `crate::ratelimit::spend`), the agents acting with
//! them (`agents`), their SSH keys (`ssh_keys`), and the owner's approvals of what a key's
//! policy refused (`approvals`).

pub mod agents;
pub mod approvals;
pub mod auth;
pub mod keys;
pub mod oauth;
pub mod ssh_keys;
