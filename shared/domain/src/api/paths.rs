//! The paths of the routes the domain names in its own answers (a paid request's route, a
//! lease's `renew`), written once: their rows in [`super::OPERATIONS`] take their paths from
//! here. A layer below the rules, so that the rules may link to them while the route table,
//! which names the rules' types, sits above.

/// `provisionServer`'s path: `{id}` is the project.
pub const PROVISION_SERVER: &str = "/api/cloud/servers/{id}";

/// `renewServer`'s path: `{id}` is the server.
pub const RENEW_SERVER: &str = "/api/cloud/servers/{id}/renewals";

/// `resizeServer`'s path: `{id}` is the server.
pub const RESIZE_SERVER: &str = "/api/cloud/servers/{id}/resizes";

/// `pattern` with its `{name}` segment replaced by `value` (`fill(RENEW_SERVER, "7")` →
/// `/api/cloud/servers/7/renewals`).
pub fn fill(pattern: &str, value: &str) -> String {
    pattern
        .split('/')
        .map(|segment| {
            if segment.starts_with('{') {
                value
            } else {
                segment
            }
        })
        .collect::<Vec<_>>()
        .join("/")
}
