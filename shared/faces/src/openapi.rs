//! The OpenAPI 3.1 document of the API (`GET /api/openapi.json`), built with `utoipa` from the
//! route table ([`domain::api::OPERATIONS`]) and the code's own request types (their schemas are
//! derived from the structs the handlers decode, so the two cannot drift). A snapshot test
//! (`insta`) shows every change of the document in review.
//!
//! Every operation lists its credentials (API key header, bearer token, session cookie), its
//! success answer, and its errors as RFC 9457 problem documents; paid routes add the x402
//! headers (`PAYMENT-SIGNATURE` / `X-PAYMENT` in, `PAYMENT-REQUIRED` on the 402 with the v1
//! body, `PAYMENT-RESPONSE` / `X-PAYMENT-RESPONSE` out).

use utoipa::openapi::path::{
    HttpMethod, OperationBuilder, ParameterBuilder, ParameterIn, PathItem, PathsBuilder,
};
use utoipa::openapi::request_body::RequestBodyBuilder;
use utoipa::openapi::response::{ResponseBuilder, ResponsesBuilder};
use utoipa::openapi::schema::SchemaType;
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{
    ArrayBuilder, ComponentsBuilder, ContentBuilder, HeaderBuilder, InfoBuilder, ObjectBuilder,
    OpenApi, OpenApiBuilder, Ref, Required, SecurityRequirement, Type,
};

use domain::api::{Operation, Shape, Who};

fn problem_response(status: &str) -> utoipa::openapi::Response {
    let description = match status {
        "400" => "bad input; `field` names it",
        "401" => "missing or invalid credentials",
        "402" => "payment required or not accepted (x402)",
        "403" => "not the owner, not allowed, or a key without the scope (insufficient-scope)",
        "404" => "unknown",
        "409" => {
            "conflict (a payment used elsewhere, a credit, a lease that ended, a per-owner cap reached)"
        }
        "410" => "gone",
        "413" => "the request body is too large",
        "415" => "the body is not sent as application/json",
        "429" => "rate limited (this API's limits, or the provider's); Retry-After",
        "502" => "the provider failed",
        "503" => {
            "not configured, unpriceable, or busy (the store or the payment): retry after \
             Retry-After"
        }
        "504" => "the provider did not answer in time",
        _ => "error",
    };
    if status == "402" {
        return ResponseBuilder::new()
            .description(description)
            .header(
                "PAYMENT-REQUIRED",
                HeaderBuilder::new()
                    .description(Some("x402 v2 PaymentRequired, base64 JSON"))
                    .build(),
            )
            .content(
                "application/json",
                ContentBuilder::new()
                    .schema(Some(Ref::from_schema_name("PaymentRequiredV1")))
                    .build(),
            )
            .build();
    }
    let mut response = ResponseBuilder::new().description(description);
    if status == "429" || status == "503" {
        response = response.header(
            "Retry-After",
            HeaderBuilder::new()
                .description(Some("seconds to wait"))
                .build(),
        );
    }
    if status == "429" {
        for (name, description) in [
            (
                "RateLimit-Policy",
                "the limit hit: \"<name>\";q=<quota>;w=<window seconds>",
            ),
            ("RateLimit", "\"<name>\";r=<remaining>;t=<seconds to reset>"),
        ] {
            response = response.header(
                name,
                HeaderBuilder::new().description(Some(description)).build(),
            );
        }
    }
    response
        .content(
            crate::http::PROBLEM_JSON,
            ContentBuilder::new()
                .schema(Some(Ref::from_schema_name("Problem")))
                .build(),
        )
        .build()
}

/// An example value of a query parameter, where one helps a reader (and a conformance run reach
/// the success answer).
fn query_example(name: &str) -> Option<&'static str> {
    Some(match name {
        "plan" => "B1-1-1gb-20s-shared",
        "region" => "LT-Siauliai",
        "image" => "ubuntu_24_04_64bit",
        "periods" => "1",
        "limit" => "20",
        "waitFor" => "ready,failed",
        "timeout" => "1",
        _ => return None,
    })
}

/// The form of a route's path id: the service's prefixed ids (`key_`, `agt_`, `sbx_` + 32 hex)
/// where the table names the prefix, else the provider's numeric ids (servers, projects, teams).
fn id_pattern(route: &Operation) -> String {
    match route.id_prefix {
        Some(prefix) => format!("^{prefix}[0-9a-f]{{32}}$"),
        None => "^[1-9][0-9]{0,14}$".to_owned(),
    }
}

/// What the MCP transport (`rmcp`'s Streamable HTTP service) answers besides a JSON-RPC
/// response: 202 for a notification, and plain-text refusals of what is not a valid MCP
/// message over HTTP.
fn mcp_transport_responses(responses: ResponsesBuilder) -> ResponsesBuilder {
    let text = |description: &str| {
        ResponseBuilder::new()
            .description(description)
            .content(
                "text/plain",
                ContentBuilder::new()
                    .schema(Some(ObjectBuilder::new().schema_type(Type::String)))
                    .build(),
            )
            .build()
    };
    responses
        .response(
            "202",
            ResponseBuilder::new()
                .description("a notification or response accepted")
                .build(),
        )
        .response(
            "400",
            text("not a JSON-RPC message, or a bad protocol version"),
        )
        .response(
            "406",
            text("`Accept` lacks application/json and text/event-stream"),
        )
        .response("415", text("`Content-Type` is not application/json"))
        .response("422", text("a JSON-RPC message MCP does not know"))
}

/// The document.
pub fn document() -> OpenApi {
    let mut paths = PathsBuilder::new();
    for route in domain::api::OPERATIONS.iter().filter(|op| op.documented) {
        let op = operation(route);
        paths = paths.path(route.path, PathItem::new(http_method(&route.method), op));
    }
    OpenApiBuilder::new()
        .info(
            InfoBuilder::new()
                .title("Cloud API for agents")
                .version(env!("CARGO_PKG_VERSION"))
                .description(Some(
                    "Servers for AI agents, paid per server in USDC on Base with x402.",
                ))
                .build(),
        )
        .paths(paths.build())
        .components(Some(components()))
        .build()
}

/// `method` in utoipa's terms (the table's methods are these seven).
fn http_method(method: &lambda_http::http::Method) -> HttpMethod {
    match method.as_str() {
        "POST" => HttpMethod::Post,
        "PUT" => HttpMethod::Put,
        "PATCH" => HttpMethod::Patch,
        "DELETE" => HttpMethod::Delete,
        "HEAD" => HttpMethod::Head,
        "OPTIONS" => HttpMethod::Options,
        _ => HttpMethod::Get,
    }
}

/// One route's operation: its parameters, body, responses and security.
fn operation(route: &Operation) -> OperationBuilder {
    let mut op = OperationBuilder::new()
        .operation_id(Some(route.id))
        .summary(Some(route.summary));
    if let Some(scope) = route.scope {
        op = op.description(Some(format!(
            "An API key needs the `{}` scope (a session has every scope).",
            scope.as_str()
        )));
    }
    op = parameters(op, route);
    if let Some(body) = route.body {
        op = op.request_body(Some(
            RequestBodyBuilder::new()
                .required(Some(Required::True))
                .content(
                    "application/json",
                    ContentBuilder::new()
                        .schema(Some(Ref::from_schema_name(body)))
                        .build(),
                )
                .build(),
        ));
    }
    op = op.responses(responses(route));
    match route.who {
        Who::Anyone => op,
        Who::Key | Who::KeyAlone => {
            op.security(SecurityRequirement::new("apiKey", [] as [&str; 0]))
        }
        Who::Session => op
            .security(SecurityRequirement::new("bearer", [] as [&str; 0]))
            .security(SecurityRequirement::new("sessionCookie", [] as [&str; 0])),
        Who::KeyOrSession => op
            .security(SecurityRequirement::new("apiKey", [] as [&str; 0]))
            .security(SecurityRequirement::new("bearer", [] as [&str; 0]))
            .security(SecurityRequirement::new("sessionCookie", [] as [&str; 0])),
    }
}

/// A route's path, query and (paid) payment header parameters.
fn parameters(mut op: OperationBuilder, route: &Operation) -> OperationBuilder {
    for name in ["id", "teamId"] {
        if route.path.contains(&format!("{{{name}}}")) {
            op = op.parameter(
                ParameterBuilder::new()
                    .name(name)
                    .parameter_in(ParameterIn::Path)
                    .required(Required::True)
                    .schema(Some(
                        ObjectBuilder::new()
                            .schema_type(Type::String)
                            .pattern(Some(id_pattern(route))),
                    )),
            );
        }
    }
    for (name, description) in route.query {
        op = op.parameter(
            ParameterBuilder::new()
                .name(*name)
                .parameter_in(ParameterIn::Query)
                .required(Required::False)
                .description(Some(*description))
                .example(query_example(name).map(serde_json::Value::from))
                .schema(Some(ObjectBuilder::new().schema_type(Type::String))),
        );
    }
    if route.paid {
        for (name, description) in [
            ("PAYMENT-SIGNATURE", "x402 v2 PaymentPayload, base64 JSON"),
            ("X-PAYMENT", "x402 v1 payment payload, base64 JSON"),
        ] {
            op = op.parameter(
                ParameterBuilder::new()
                    .name(name)
                    .parameter_in(ParameterIn::Header)
                    .required(Required::False)
                    .description(Some(description))
                    .schema(Some(ObjectBuilder::new().schema_type(Type::String))),
            );
        }
    }
    op
}

/// A route's success answer: its body by shape (a problem document for a route whose one
/// answer is a refusal), and the payment response header of a paid route.
fn ok_response(route: &Operation, description: &str) -> utoipa::openapi::Response {
    let mut ok = ResponseBuilder::new().description(description);
    // A route whose one answer is a refusal (GET /mcp: 405) answers a problem document.
    if route.ok.0.starts_with('4') {
        ok = ok.content(
            "application/problem+json",
            ContentBuilder::new()
                .schema(Some(Ref::from_schema_name("Problem")))
                .build(),
        );
    } else if route.ok.0 != "204" {
        let object = || ObjectBuilder::new().schema_type(Type::Object);
        let page = |items: utoipa::openapi::RefOr<utoipa::openapi::Schema>| {
            object()
                .property("items", ArrayBuilder::new().items(items))
                .property(
                    "nextCursor",
                    ObjectBuilder::new()
                        .schema_type(SchemaType::from_iter([Type::String, Type::Null])),
                )
                .required("items")
                .into()
        };
        let schema: utoipa::openapi::RefOr<utoipa::openapi::Schema> = match route.shape {
            Shape::Object => object().into(),
            Shape::Array => ArrayBuilder::new().items(object()).into(),
            Shape::Page => page(object().into()),
            Shape::Named(name) => Ref::from_schema_name(name).into(),
            Shape::PageOf(name) => page(Ref::from_schema_name(name).into()),
        };
        ok = ok.content(
            "application/json",
            ContentBuilder::new().schema(Some(schema)).build(),
        );
    }
    if route.paid {
        ok = ok.header(
            "PAYMENT-RESPONSE",
            HeaderBuilder::new()
                .description(Some(
                    "x402 settlement, base64 JSON (also X-PAYMENT-RESPONSE)",
                ))
                .build(),
        );
    }
    ok.build()
}

/// Every answer of a route: success, the paid route's 202, the MCP transport's, and the problem
/// documents of its errors (429 and 503 — the store busy — on every rate-limited route, which
/// reads the store; 415 on every route with a body).
fn responses(route: &Operation) -> utoipa::openapi::Responses {
    let mut responses =
        ResponsesBuilder::new().response(route.ok.0, ok_response(route, route.ok.1));
    if let Some((status, description)) = route.also_ok {
        responses = responses.response(status, ok_response(route, description));
    }
    if route.paid {
        responses = responses.response(
            "202",
            ResponseBuilder::new()
                .description("the paid order continues in the background; poll Location")
                .build(),
        );
    }
    if route.function == domain::api::Function::Mcp {
        responses = mcp_transport_responses(responses);
    }
    // Every authenticated route, and the sign-in routes, are rate limited.
    let mut statuses = route.errors.to_vec();
    let limited = route.who != Who::Anyone || matches!(route.id, "getNonce" | "verifySignIn");
    if limited && route.method != lambda_http::http::Method::OPTIONS {
        for status in ["429", "503"] {
            if !statuses.contains(&status) {
                statuses.push(status);
            }
        }
    }
    // Every write's body is JSON (`crate::http::serve`).
    if route.body.is_some() && !statuses.contains(&"415") {
        statuses.push("415");
    }
    for status in statuses {
        responses = responses.response(status, problem_response(status));
    }
    responses.build()
}

/// The document's components: the schemas the handlers' types derive, and the security
/// schemes.
fn components() -> utoipa::openapi::Components {
    let builder = ComponentsBuilder::new()
        .schema_from::<domain::billing::purchase::ProvisionRequest>()
        .schema_from::<domain::servers::ActionRequest>()
        .schema_from::<domain::billing::purchase::RenewalRequest>()
        .schema_from::<domain::servers::sandboxes::NewSandbox>()
        .schema_from::<domain::identity::agents::NewAgent>()
        .schema_from::<domain::identity::auth::siwe::VerifyRequest>()
        .schema_from::<domain::identity::keys::GenerateKeyRequest>()
        .schema_from::<crate::http::Problem>()
        .schema_from::<domain::servers::QuoteAnswer>()
        .schema_from::<domain::billing::payments::PaymentView>()
        .schema_from::<domain::notifications::events::Event>()
        .schema_from::<domain::store::events::Subject>()
        .schema_from::<domain::store::events::SubjectKind>()
        .schema_from::<domain::notifications::webhooks::NewEndpoint>()
        .schema_from::<domain::notifications::webhooks::Endpoint>()
        .schema_from::<domain::notifications::webhooks::WithSecret>()
        .schema_from::<domain::store::webhooks::Disabled>()
        .schema_from::<domain::notifications::webhooks::Delivery>()
        .schema_from::<domain::store::webhooks::DeliveryStatus>()
        .schema_from::<domain::servers::sandboxes::SandboxView>()
        .schema_from::<domain::servers::sandboxes::Sandbox>()
        .schema_from::<domain::identity::keys::KeyView>()
        .schema_from::<domain::identity::keys::IssuedKey>()
        .schema_from::<domain::policy::Scope>()
        .schema_from::<domain::policy::Policy>()
        .schema_from::<domain::identity::keys::KeyUsage>()
        .schema_from::<domain::identity::keys::KeyChange>()
        .schema_from::<domain::identity::agents::Agent>()
        .schema_from::<domain::identity::approvals::ApprovalView>()
        .schema_from::<domain::store::approvals::ApprovalOffer>()
        .schema_from::<domain::store::approvals::Status>()
        .schema_from::<domain::identity::approvals::GrantRequest>()
        .schema_from::<domain::store::approvals::ApprovalRequest>()
        .schema_from::<domain::store::approvals::Refusal>()
        .schema_from::<domain::identity::ssh_keys::NewSshKey>()
        .schema_from::<domain::identity::ssh_keys::SshKey>()
        .schema_from::<domain::store::ssh_keys::AuthorizedKey>()
        .schema_from::<domain::store::payments::OrderState>()
        .schema_from::<domain::pricing::Quote>()
        .schema_from::<domain::pricing::PeriodPrice>()
        .schema_from::<domain::pricing::Part>()
        .schema_from::<domain::store::sandboxes::Lease>()
        .schema_from::<domain::store::sandboxes::LeaseState>()
        .schema_from::<domain::store::sandboxes::HostKey>()
        .schema_from::<domain::servers::stages::Stage>()
        .schema_from::<domain::servers::stages::Access>()
        .schema_from::<domain::servers::stages::Progress>()
        .schema_from::<domain::time::Timestamp>()
        .schema_from::<domain::time::EventTime>()
        .schema_from::<domain::address::Checksummed>();
    hand_built_schemas(builder)
        .security_scheme(
            "apiKey",
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::new("X-API-Key"))),
        )
        .security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some("an API key (svc_…) or a session token"))
                    .build(),
            ),
        )
        .security_scheme(
            "sessionCookie",
            SecurityScheme::ApiKey(ApiKey::Cookie(ApiKeyValue::new("__Host-session"))),
        )
        .build()
}

/// An x402 v1 402 body as the service answers it: one `exact` offer on Base Sepolia whose
/// `extra` names the token's EIP-712 domain and the `upfront` payment flow.
fn payment_required_example() -> serde_json::Value {
    let offer = domain::x402::Offer {
        network: domain::x402::Network::BaseSepolia,
        pay_to: "0x209693Bc6afc0C5328bA36FaF03C514EF312287C".into(),
        amount: 8_468_000,
        max_timeout_seconds: 120,
        resource: "https://api.example.com/api/cloud/servers/254871".into(),
        description: "One paid period of a server".into(),
    };
    serde_json::to_value(offer.payment_required_v1("PAYMENT-SIGNATURE header is required"))
        .unwrap_or_default()
}

/// The schemas no handler type derives: an MCP message, the x402 v1 body.
fn hand_built_schemas(builder: ComponentsBuilder) -> ComponentsBuilder {
    builder
        .schema(
            "JsonRpcMessage",
            ObjectBuilder::new()
                .schema_type(Type::Object)
                .description(Some(
                    "a JSON-RPC 2.0 request or notification of the Model Context Protocol \
                 (initialize, tools/list, tools/call, …)",
                ))
                .property("jsonrpc", ObjectBuilder::new().schema_type(Type::String))
                .property("method", ObjectBuilder::new().schema_type(Type::String))
                .property("params", ObjectBuilder::new().schema_type(Type::Object))
                .required("jsonrpc")
                .required("method"),
        )
        .schema(
            "PaymentRequiredV1",
            ObjectBuilder::new()
                .schema_type(Type::Object)
                .description(Some(
                    "x402 v1 body: x402Version, error, accepts, price, requestId",
                ))
                .property(
                    "x402Version",
                    ObjectBuilder::new().schema_type(Type::Integer),
                )
                .property("error", ObjectBuilder::new().schema_type(Type::String))
                .property("accepts", ObjectBuilder::new().schema_type(Type::Array))
                .required("x402Version")
                .required("accepts")
                .examples([payment_required_example()]),
        )
}
