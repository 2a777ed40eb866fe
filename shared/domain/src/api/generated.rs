//! The files written from the route table ([`super::OPERATIONS`]) and the functions' grants on
//! the table ([`super::access`]) by `svcctl generate`: each function's HTTP events, its DynamoDB
//! statements and the API's per-route throttles in `template.yaml`, and the `cargo lambda
//! watch` router in `Cargo.toml`. Each sits between two marker lines naming it; what lies
//! outside the markers is the file's own. `server.json` (the MCP Registry's description of the
//! MCP endpoint) is written whole. The example events (`events/**`) are written by the e2e
//! harness from the same table (`EXAMPLES_WRITE=1`), since it builds them.

use std::collections::BTreeMap;

use super::{Function, OPERATIONS, Operation};

/// Errors: a file lacks a marker of a section it should hold.
#[derive(Debug, thiserror::Error)]
#[error("{file}: no `{marker}` line: add the markers where the section goes")]
pub struct MissingMarker {
    /// The file.
    pub file: &'static str,
    /// The marker line looked for (trimmed).
    pub marker: String,
}

/// The first line of `function`'s generated events in `template.yaml`.
fn template_begin(function: Function) -> String {
    format!(
        "# The routes of `{}`: written by `svcctl generate` from shared/domain/src/api.rs.",
        function.name()
    )
}

/// The last line of `function`'s generated events in `template.yaml`.
fn template_end(function: Function) -> String {
    format!("# End of the routes of `{}`.", function.name())
}

/// The first line of the API's per-route throttles in `template.yaml`.
const THROTTLES_BEGIN: &str =
    "# The routes' own throttles: written by `svcctl generate` from shared/domain/src/api.rs.";
/// The last line of them.
const THROTTLES_END: &str = "# End of the routes' own throttles.";

/// The API's `RouteSettings`, indented for the `Api` resource's properties: every paid route
/// (`.paid()`) its own bucket of `PaidRouteThrottle*`, every route anyone may call without a
/// credential (`Who::open`, the CORS preflights included) one of `OpenRouteThrottle*`;
/// every other route keeps the default's (`ApiThrottle*`).
fn route_throttles() -> String {
    let mut out = format!(
        "        {THROTTLES_BEGIN}
"
    );
    for op in OPERATIONS {
        let params = if op.paid {
            "PaidRouteThrottle"
        } else if op.who.open() {
            "OpenRouteThrottle"
        } else {
            continue;
        };
        out.push_str(&format!(
            "        \"{} {}\":\n          ThrottlingRateLimit: !Ref {params}Rate\n          \
             ThrottlingBurstLimit: !Ref {params}Burst\n",
            op.method, op.path
        ));
    }
    out.push_str(&format!("        {THROTTLES_END}\n"));
    out
}

/// The line that opens the watch router's entries in `Cargo.toml`.
const ROUTER_BEGIN: &str =
    "# The routes: written by `svcctl generate` from shared/domain/src/api.rs.";
/// The line that closes them.
const ROUTER_END: &str = "# End of the routes.";

/// `id` in PascalCase: the template's name of the operation's event (`generateKey` →
/// `GenerateKey`).
fn event_name(id: &str) -> String {
    let mut chars = id.chars();
    chars
        .next()
        .map(|first| first.to_ascii_uppercase().to_string() + chars.as_str())
        .unwrap_or_default()
}

/// A path as YAML: quoted when it has a `{name}` segment (a flow mapping's braces).
fn yaml_path(path: &str) -> String {
    if path.contains(['{', '}']) {
        format!("\"{path}\"")
    } else {
        path.to_owned()
    }
}

/// `function`'s HTTP events, indented for a function's `Events:`, between its markers.
fn template_events(function: Function) -> String {
    let mut out = format!("        {}\n", template_begin(function));
    for op in super::of(function) {
        out.push_str(&format!(
            "        {}:\n          Type: HttpApi\n          Properties: {{ApiId: !Ref Api, \
             Path: {}, Method: {}}}\n",
            event_name(op.id),
            yaml_path(op.path),
            op.method
        ));
    }
    out.push_str(&format!("        {}\n", template_end(function)));
    out
}

/// `text` with the lines from the one that trims to `begin` through the one that trims to
/// `end` replaced by `section` (which holds both markers).
fn replace_section(
    file: &'static str,
    text: &str,
    begin: &str,
    end: &str,
    section: &str,
) -> Result<String, MissingMarker> {
    let missing = |marker: &str| MissingMarker {
        file,
        marker: marker.to_owned(),
    };
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let first = lines
        .iter()
        .position(|l| l.trim() == begin)
        .ok_or_else(|| missing(begin))?;
    let last = first
        + lines[first..]
            .iter()
            .position(|l| l.trim() == end)
            .ok_or_else(|| missing(end))?;
    Ok(lines[..first].concat() + section + &lines[last + 1..].concat())
}

/// `template.yaml` (its text) with every function's HTTP events written from the table.
///
/// Errors: a function's markers are missing.
pub fn template(text: &str) -> Result<String, MissingMarker> {
    let text = replace_section(
        "template.yaml",
        text,
        THROTTLES_BEGIN,
        THROTTLES_END,
        &route_throttles(),
    )?;
    let text = Function::ALL.into_iter().try_fold(text, |text, function| {
        replace_section(
            "template.yaml",
            &text,
            &template_begin(function),
            &template_end(function),
            &template_events(function),
        )
    })?;
    super::access::ACCESS
        .iter()
        .try_fold(text, |text, (function, _)| {
            replace_section(
                "template.yaml",
                &text,
                &super::access::begin(function),
                &super::access::end(function),
                &super::access::statements(function),
            )
        })
}

/// The watch router's entry for one path: its function's name when one function serves every
/// method there (unknown methods then reach the function, which answers 405), else each
/// method's function.
fn router_entry(path: &str, ops: &[&Operation]) -> String {
    let first = ops[0].function;
    if ops.iter().all(|op| op.function == first) {
        return format!("\"{path}\" = \"{}\"\n", first.name());
    }
    let methods: Vec<String> = ops
        .iter()
        .map(|op| {
            format!(
                "{{ method = \"{}\", function = \"{}\" }}",
                op.method,
                op.function.name()
            )
        })
        .collect();
    format!("\"{path}\" = [{}]\n", methods.join(", "))
}

/// `Cargo.toml` (its text) with the `cargo lambda watch` router written from the table: one
/// entry per path, in the table's order.
///
/// Errors: the router's markers are missing.
pub fn cargo_toml(text: &str) -> Result<String, MissingMarker> {
    let mut order: Vec<&str> = Vec::new();
    let mut by_path: BTreeMap<&str, Vec<&Operation>> = BTreeMap::new();
    for op in OPERATIONS {
        if !by_path.contains_key(op.path) {
            order.push(op.path);
        }
        by_path.entry(op.path).or_default().push(op);
    }
    let mut section = format!("{ROUTER_BEGIN}\n");
    for path in order {
        section.push_str(&router_entry(path, &by_path[path]));
    }
    section.push_str(ROUTER_END);
    section.push('\n');
    replace_section("Cargo.toml", text, ROUTER_BEGIN, ROUTER_END, &section)
}

/// The name `server.json` gives the MCP server in the MCP Registry (reverse DNS of a namespace
/// its publisher proves: an operator who publishes a deployment writes theirs here).
pub const MCP_SERVER_NAME: &str = "io.github.cloud-api-for-agents/cloud-api";

/// The MCP Registry's `server.json` (schema 2025-12-11, `remotes`: modelcontextprotocol/registry
/// `docs/modelcontextprotocol-io/remote-servers.mdx`): the MCP endpoint of a deployment over
/// Streamable HTTP, its host a variable (each operator's own) and the API key header it needs.
/// The whole file (`_text`, the file as it is, is replaced).
///
/// Errors: none; the signature is that of the other written files.
pub fn server_json(_text: &str) -> Result<String, MissingMarker> {
    use crate::identity::auth::api_key::{HEADER_NAME, shape};
    let mcp = super::MCP.op.path;
    let document = serde_json::json!({
        "$schema": "https://static.modelcontextprotocol.io/schemas/2025-12-11/server.schema.json",
        "name": MCP_SERVER_NAME,
        "title": "Cloud API for agents",
        "description": "Real servers for AI agents, paid per server in USDC on Base with x402",
        "version": env!("CARGO_PKG_VERSION"),
        "remotes": [{
            "type": "streamable-http",
            "url": format!("https://{{host}}{mcp}"),
            "variables": {"host": {
                "description": "The deployment's host name (its PUBLIC_BASE_URL without https://)",
                "isRequired": true,
            }},
            "headers": [{
                "name": HEADER_NAME,
                "description": format!("An API key ({}) its owner issued in the console", shape()),
                "isRequired": true,
                "isSecret": true,
            }],
        }],
    });
    let text = serde_json::to_string_pretty(&document).unwrap_or_default();
    Ok(text + "\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_section_is_replaced_between_its_markers_and_the_rest_kept() {
        let text = "a\n  # begin\n  old\n  # end\nb\n";
        let got = replace_section("f", text, "# begin", "# end", "  # begin\n  new\n  # end\n");
        assert_eq!(got.unwrap(), "a\n  # begin\n  new\n  # end\nb\n");
        let missing = replace_section("f", "a\n", "# begin", "# end", "");
        assert_eq!(missing.unwrap_err().marker, "# begin");
    }

    #[test]
    fn events_are_named_by_their_operation_and_paths_with_segments_quoted() {
        assert_eq!(event_name("generateKey"), "GenerateKey");
        assert_eq!(yaml_path("/api/keys"), "/api/keys");
        assert_eq!(yaml_path("/api/keys/{id}"), "\"/api/keys/{id}\"");
        let events = template_events(Function::Payments);
        assert!(events.contains(
            "        ListPayments:\n          Type: HttpApi\n          Properties: {ApiId: !Ref \
             Api, Path: /api/payments, Method: GET}\n"
        ));
    }

    #[test]
    fn a_path_of_several_functions_names_each_method() {
        let text = format!("[x]\n{ROUTER_BEGIN}\nold\n{ROUTER_END}\n");
        let router = cargo_toml(&text).unwrap();
        assert!(router.contains("\"/api/keys\" = \"keys\"\n"), "{router}");
        assert!(router.contains(
            "\"/api/cloud/servers/{id}\" = [{ method = \"GET\", function = \"servers\" }, \
             { method = \"POST\", function = \"servers\" }, { method = \"DELETE\", function = \
             \"actions\" }]\n"
        ));
    }
}
