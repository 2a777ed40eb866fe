//! What lets an agent, or the tools it uses, find what the API sells and how to buy it without a
//! key (issue 47, point 1). Each document is made from the route table
//! ([`domain::api::OPERATIONS`]: which rows are paid, their bodies' and answers' types), the
//! offer's terms (the payments configuration) and the OpenAPI document, never written by hand:
//!
//! - the `bazaar` extension of every 402 (x402 v2, `specs/extensions/bazaar.md`): how to call
//!   the paid route — method, a JSON body example, its path parameters, the API key header — and
//!   a self-contained JSON Schema (draft 2020-12) of that and of the answer, for a facilitator
//!   that catalogues ([`bazaar_http`], [`bazaar_mcp`]);
//! - the OpenAPI document with `x-payment-info` on each paid operation, `x-discovery` and
//!   `x-service-info` ([`discoverable`]), served at the root too (`GET /openapi.json`, where x402
//!   indexers look first: x402scan's `docs/DISCOVERY.md`);
//! - `GET /.well-known/x402` ([`well_known`]) in x402scan's shape, `{version: 1, resources,
//!   instructions}`: of the three shapes in circulation it is the one an indexer reads today
//!   (the foundation's `discovery.md` and `/.well-known/x402.json` are open drafts, unmerged);
//! - `GET /llms.txt` ([`llms_txt`]): what the service sells, how an agent gets a key, pays,
//!   waits and connects over MCP.
//!
//! Provisioning still needs an API key (a stranger's request is 401 before any offer): what is
//! discoverable is what is sold, its terms, and how to get a credential.

use domain::api::{OPERATIONS, Operation, RequestBody, Schemas};
use domain::config::Config;
use domain::identity::auth::api_key;
use lambda_http::http::Method;
use serde_json::{Map, Value, json};

/// The draft of JSON Schema a `bazaar` schema declares (the extension requires 2020-12).
pub const JSON_SCHEMA: &str = "https://json-schema.org/draft/2020-12/schema";

// The header that carries an API key, as the documents spell it.
use domain::identity::auth::api_key::HEADER_NAME as API_KEY_HEADER;

/// What the `bazaar` info puts in the API key header: what goes there, not a key.
fn api_key_placeholder() -> String {
    format!(
        "{}: a key its owner issues in the console",
        api_key::shape()
    )
}

/// The paid operations, in the table's order.
pub fn paid() -> impl Iterator<Item = &'static Operation> {
    OPERATIONS.iter().copied().filter(|op| op.paid)
}

/// The paid operation that serves `url` (a paid request's x402 `resource`: its scheme and host
/// are read past), and the path's `{name}` segments; `None` when no paid route serves it.
pub fn paid_route(url: &str) -> Option<(&'static Operation, Vec<(&'static str, String)>)> {
    let path = match url.split_once("://") {
        Some((_, rest)) => rest.find('/').map_or("/", |at| &rest[at..]),
        None => url,
    };
    let path = path.split(['?', '#']).next().unwrap_or(path);
    let table: Vec<(&'static str, ())> = paid().map(|op| (op.id, ())).collect();
    let matched = crate::router::route(&table, &Method::POST, path).ok()?;
    Some((matched.operation(), matched.params().to_vec()))
}

/// The example of request body `body`: its type's schema's first `examples` entry (`{}` when
/// it has none).
pub fn body_example(body: RequestBody) -> Value {
    let mut defs = Schemas::new();
    body.schemas(&mut defs);
    let name = body.name();
    let own = defs.iter().find(|(each, _)| *each == name);
    own.and_then(|(_, schema)| serde_json::to_value(schema).ok())
        .and_then(|schema| schema["examples"].get(0).cloned())
        .unwrap_or_else(|| json!({}))
}

/// The schema of an answer's `output` in a `bazaar` schema: its `type`, and its `example`
/// shaped as `answer` (a schema of the row's answer).
fn output_schema(answer: Value) -> Value {
    json!({
        "type": "object",
        "properties": {"type": {"type": "string"}, "example": answer},
        "required": ["type"],
    })
}

/// The `bazaar` extension (`{info, schema, routeTemplate}`) of a 402 for `resource`, the URL
/// of a request to a paid route: `info.input` is `{type: "http", method, bodyType: "json",
/// body, pathParams, headers}` — the body the row's request type's example, the path's
/// parameters this request's, the API key header what goes in it — and `info.output`
/// `{type: "json"}`; `schema` validates `info` (the body's schema and the answer's are the
/// document's, under `$defs`); `routeTemplate` is the row's path with `:name` parameters.
/// `None` when no paid route serves `resource`.
pub fn bazaar_http(resource: &str) -> Option<Value> {
    let (op, params) = paid_route(resource)?;
    let body = op.body?;
    let mut defs = Schemas::new();
    body.schemas(&mut defs);
    let name = body.name();
    let answer = (op.answer)(&mut defs)
        .and_then(|schema| serde_json::to_value(schema).ok())
        .unwrap_or_else(|| json!({}));
    let pattern = op.id_pattern();
    let param_schemas: Map<String, Value> = params
        .iter()
        .map(|(name, _)| {
            (
                (*name).to_owned(),
                json!({"type": "string", "pattern": pattern}),
            )
        })
        .collect();
    let path_params: Map<String, Value> = params
        .iter()
        .map(|(name, value)| ((*name).to_owned(), Value::from(value.as_str())))
        .collect();
    let names: Vec<&str> = params.iter().map(|(name, _)| *name).collect();
    let method = op.method.as_str();
    let mut schema = json!({
        "$schema": JSON_SCHEMA,
        "type": "object",
        "properties": {
            "input": {
                "type": "object",
                "properties": {
                    "type": {"type": "string", "const": "http"},
                    "method": {"type": "string", "enum": [method]},
                    "bodyType": {"type": "string", "enum": ["json"]},
                    "body": {"$ref": format!("#/components/schemas/{name}")},
                    "pathParams": {
                        "type": "object",
                        "properties": param_schemas,
                        "required": names,
                        "additionalProperties": false,
                    },
                    "headers": {"type": "object", "additionalProperties": {"type": "string"}},
                },
                "required": ["type", "method", "bodyType", "body"],
                "additionalProperties": false,
            },
            "output": output_schema(answer),
        },
        "required": ["input"],
    });
    domain::api::answers::with_defs(&mut schema, defs);
    Some(json!({
        "info": {
            "input": {
                "type": "http",
                "method": method,
                "bodyType": "json",
                "body": body_example(body),
                "pathParams": path_params,
                "headers": {API_KEY_HEADER: api_key_placeholder()},
            },
            "output": {"type": "json"},
        },
        "schema": schema,
        "routeTemplate": route_template(op.path),
    }))
}

/// The `bazaar` extension of a 402 answered to MCP tool `tool` (`tools/call`): `info.input` is
/// `{type: "mcp", toolName, description, transport: "streamable-http", inputSchema, example}`
/// — `input_schema` the tool's own (as `tools/list` gives it), `example` its arguments — and
/// `info.output` `{type: "json"}`; `schema` validates `info`.
pub fn bazaar_mcp(tool: &str, description: &str, input_schema: &Value, example: &Value) -> Value {
    json!({
        "info": {
            "input": {
                "type": "mcp",
                "toolName": tool,
                "description": description,
                "transport": "streamable-http",
                "inputSchema": input_schema,
                "example": example,
            },
            "output": {"type": "json"},
        },
        "schema": {
            "$schema": JSON_SCHEMA,
            "type": "object",
            "properties": {
                "input": {
                    "type": "object",
                    "properties": {
                        "type": {"type": "string", "const": "mcp"},
                        "toolName": {"type": "string", "const": tool},
                        "description": {"type": "string"},
                        "transport": {"type": "string", "enum": ["streamable-http", "sse"]},
                        "inputSchema": {"type": "object"},
                        "example": {"type": "object"},
                    },
                    "required": ["type", "toolName", "inputSchema"],
                    "additionalProperties": false,
                },
                "output": output_schema(json!({"type": "object"})),
            },
            "required": ["input"],
        },
    })
}

/// `path` as a `bazaar` `routeTemplate`: `{name}` segments as `:name`
/// (`/api/cloud/servers/{id}` → `/api/cloud/servers/:id`).
pub fn route_template(path: &str) -> String {
    path.split('/')
        .map(
            |segment| match segment.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
                Some(name) => format!(":{name}"),
                None => segment.to_owned(),
            },
        )
        .collect::<Vec<_>>()
        .join("/")
}

/// The terms of every paid operation, as x402 indexers read them from the OpenAPI document
/// (`x-payment-info`): the protocol, the price mode — `quote`: each request's price is its
/// plan's and periods', given by its 402 and by `getQuote` — the scheme, the network
/// (CAIP-2), the asset (USDC) and, when payments are configured, the recipient.
pub fn payment_info(config: &Config) -> Value {
    let payments = &config.payments;
    let mut info = json!({
        "protocols": ["x402"],
        "pricingMode": "quote",
        "scheme": domain::x402::SCHEME,
        "network": payments.network.caip2(),
        "asset": payments.network.usdc(),
    });
    if let Some(pay_to) = &payments.pay_to {
        info["payTo"] = pay_to.as_str().into();
    }
    info
}

/// The OpenAPI `document` (JSON) as discovery serves it on `base` (the API's public base URL):
/// each paid operation with `x-payment-info` ([`payment_info`]), and at the top `servers`,
/// `x-discovery` (`llmsTxtUrl`) and `x-service-info` (`categories`, `docs.llms`).
pub fn discoverable(mut document: Value, config: &Config, base: &str) -> Value {
    let info = payment_info(config);
    for op in paid() {
        let method = op.method.as_str().to_ascii_lowercase();
        if let Some(operation) = document["paths"][op.path].get_mut(&method) {
            operation["x-payment-info"] = info.clone();
        }
    }
    let llms = format!("{base}{}", domain::api::GET_LLMS_TXT.op.path);
    document["servers"] = json!([{"url": base}]);
    document["x-discovery"] = json!({"llmsTxtUrl": llms});
    document["x-service-info"] = json!({"categories": ["compute"], "docs": {"llms": llms}});
    document
}

/// `GET /.well-known/x402` on `base`: x402scan's fan-out shape, `{version: 1, resources,
/// instructions}` — each paid route's URL (its path parameters left as `{name}`: a project's
/// or a server's id, which the caller chooses) and how to get past the key.
pub fn well_known(base: &str) -> Value {
    let resources: Vec<String> = paid().map(|op| format!("{base}{}", op.path)).collect();
    json!({
        "version": 1,
        "resources": resources,
        "instructions": format!(
            "Servers (VPS and bare metal) for agents, paid per server in USDC with x402. Paid \
             routes need an API key (header {API_KEY_HEADER}) that a human issues in the \
             console at {base}/ after signing in with an Ethereum wallet. How to buy, wait and \
             connect: {base}{llms}; the API: {base}{document}; MCP: {base}{mcp}.",
            llms = domain::api::GET_LLMS_TXT.op.path,
            document = domain::api::GET_ROOT_OPEN_API.op.path,
            mcp = domain::api::MCP.op.path,
        ),
    })
}

/// `GET /llms.txt` on `base` (`llmstxt.org`'s form: a title, a summary, sections): what the
/// service sells and on what terms (`config`'s network and asset), how an agent gets a key,
/// finds a plan and its price, pays with x402, waits for its server and connects over MCP —
/// every path from its row of the route table, and the paid routes from the paid rows.
pub fn llms_txt(config: &Config, base: &str) -> String {
    use domain::api::{
        GET_QUOTE, GET_SANDBOX, LIST_IMAGES, LIST_PLANS, LIST_PROJECTS, LIST_REGIONS, LIST_TEAMS,
        RENEW_SERVER,
    };
    let network = config.payments.network;
    let url = |op: &Operation| format!("{} {base}{}", op.method.as_str(), op.path);
    let mut paid_routes = String::new();
    for op in paid() {
        paid_routes.push_str(&format!("- `{}`: {}\n", url(op), op.summary));
    }
    let mcp = domain::api::MCP.op.path;
    let key_shape = api_key::shape();
    format!(
        "# Cloud API for agents\n\n\
         > Real servers (VPS and bare metal at Cherry Servers) for AI agents, paid per server in \
         USDC on {network} ({caip2}) with x402: a key its owner issues, and a signed transfer per \
         server.\n\n\
         ## Get a key\n\n\
         A human signs in to the console ({base}/) with an Ethereum wallet (Sign-In with \
         Ethereum) and issues an API key ({key_shape}) with the scopes and the spend \
         policy the agent gets. The agent sends it as `{API_KEY_HEADER}` (or \
         `Authorization: Bearer`). Revoking the key stops the agent.\n\n\
         ## Find a plan and its price\n\n\
         - `{plans}` (no key needed): plans with `monthlyCost` in USD and their regions.\n\
         - With the key: `{regions}`; `{images}`; `{teams}`, then `{projects}`: the project to \
         provision into; `{quote}?plan=…&region=…`: the exact offer a purchase would carry.\n\n\
         ## Pay (x402)\n\n\
         Send the request without payment: the 402 carries `PAYMENT-REQUIRED` (x402 v2; v1 in \
         the body) with the amount in USDC atomic units, `payTo`, the asset ({asset}) and \
         `maxTimeoutSeconds`. Sign an EIP-3009 `transferWithAuthorization` for exactly that \
         (from a wallet or a smart wallet) and send the same request again with \
         `PAYMENT-SIGNATURE` (or `X-PAYMENT`); the answer's `PAYMENT-RESPONSE` names the \
         transfer. The same payment sent again makes no second server.\n\n\
         Paid routes:\n\n{paid_routes}\n\
         ## Wait and connect\n\n\
         A purchase answers 201 with the server and its `sandboxId` (202 while the order \
         completes: send the same request again). `{sandbox}?waitFor=ready&timeout=20` (`id` the \
         `sandboxId`) holds until the server is ready; it takes the SSH keys the request named. \
         `{renew}` buys more paid time before `paidUntil`.\n\n\
         ## MCP\n\n\
         `{base}{mcp}`: Streamable HTTP, stateless; the same key, as `{API_KEY_HEADER}` or a \
         bearer. `provision_server`, `renew_server` and `resize_server` take the x402 payment \
         in `_meta[\"x402/payment\"]`. An MCP client without a key connects with OAuth 2.1 \
         (authorization code, PKCE S256, dynamic registration): the 401 names \
         `{base}{resource_metadata}`, and the human consents in the console, choosing the \
         scopes and the spend policy of the key the grant becomes.\n\n\
         ## Docs\n\n\
         - [OpenAPI]({base}{document}): every route, its errors, `x-payment-info` on the paid \
         ones.\n\
         - [x402 discovery]({base}{well_known})\n",
        document = domain::api::GET_ROOT_OPEN_API.op.path,
        well_known = domain::api::GET_X402_DISCOVERY.op.path,
        resource_metadata = domain::api::GET_PROTECTED_RESOURCE.op.path,
        network = network.v1_name(),
        caip2 = network.caip2(),
        asset = network.usdc(),
        plans = url(&LIST_PLANS.op),
        regions = url(&LIST_REGIONS.op),
        images = url(&LIST_IMAGES.op),
        teams = url(&LIST_TEAMS.op),
        projects = url(&LIST_PROJECTS.op),
        quote = url(&GET_QUOTE.op),
        sandbox = url(&GET_SANDBOX.op),
        renew = url(&RENEW_SERVER.op),
    )
}
