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
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{
    AllOfBuilder, ComponentsBuilder, ContentBuilder, HeaderBuilder, InfoBuilder, ObjectBuilder,
    OpenApi, OpenApiBuilder, Ref, Required, SecurityRequirement, Type,
};

use domain::api::{Kind, Operation, Param, Schemas, Who};

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

/// A query parameter's schema as the query spells it: a string of its form, or (a list of
/// names) an array of them, comma-separated (`form` style, not exploded).
fn query_schema(param: &Param) -> ObjectBuilder {
    let text = ObjectBuilder::new().schema_type(Type::String);
    match param.kind {
        Kind::Text => text,
        Kind::Whole { min, max } => ObjectBuilder::new()
            .schema_type(Type::Integer)
            .minimum(Some(min as f64))
            .maximum(Some(max as f64)),
        Kind::ProviderId => text.pattern(Some(domain::api::PROVIDER_ID)),
        Kind::Names(names) => text.pattern(Some(format!("^({0})(,({0}))*$", names().join("|")))),
    }
}

/// What the MCP transport answers besides a JSON-RPC response
/// ([`domain::api::answers::MCP_TRANSPORT`]): plain text, or nothing for its 202.
fn mcp_transport_responses(mut responses: ResponsesBuilder) -> ResponsesBuilder {
    for (status, description) in domain::api::answers::MCP_TRANSPORT {
        let mut response = ResponseBuilder::new().description(*description);
        if *status != "202" {
            response = response.content(
                "text/plain",
                ContentBuilder::new()
                    .schema(Some(ObjectBuilder::new().schema_type(Type::String)))
                    .build(),
            );
        }
        responses = responses.response(*status, response.build());
    }
    responses
}

/// The document.
pub fn document() -> OpenApi {
    let mut paths = PathsBuilder::new();
    for route in domain::api::OPERATIONS.iter().filter(|op| op.documented) {
        let op = operation(route);
        paths = paths.path(route.path, PathItem::new(http_method(&route.method), op));
    }
    let mut schemas = Schemas::new();
    let webhooks = webhooks(&mut schemas);
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
        .webhooks(Some(webhooks))
        .components(Some(components(schemas)))
        .build()
}

/// The events the service sends to an owner's webhook endpoints (OpenAPI 3.1 `webhooks`), one
/// per type (`EventType::ALL`): the [`Event`](domain::notifications::events::Event) whose `type`
/// is that type and whose `data` is that type's schema (`EventType::data_schema`), signed by the
/// Standard Webhooks spec. Their schemas are pushed onto `components`.
fn webhooks(components: &mut Schemas) -> utoipa::openapi::Paths {
    let mut paths = PathsBuilder::new();
    for kind in domain::store::events::EventType::ALL {
        let name = kind.as_str();
        let event = AllOfBuilder::new()
            .item(Ref::from_schema_name("Event"))
            .item(
                ObjectBuilder::new()
                    .property(
                        "type",
                        ObjectBuilder::new()
                            .schema_type(Type::String)
                            .enum_values(Some([name])),
                    )
                    .property("data", kind.data_schema(components)),
            );
        let mut op = OperationBuilder::new()
            .operation_id(Some(format!("event:{name}")))
            .summary(Some(format!(
                "`{name}`, about a {}",
                kind.subject().as_str()
            )))
            .request_body(Some(
                RequestBodyBuilder::new()
                    .required(Some(Required::True))
                    .content(
                        "application/json",
                        ContentBuilder::new().schema(Some(event)).build(),
                    )
                    .build(),
            ))
            .response(
                "2XX",
                ResponseBuilder::new()
                    .description("received; anything else is tried again later")
                    .build(),
            );
        for (header, description) in [
            (
                "webhook-id",
                "the event's id: the key a receiver dedupes by",
            ),
            ("webhook-timestamp", "when it was signed, epoch seconds"),
            (
                "webhook-signature",
                "v1,<base64 HMAC-SHA256> per secret (Standard Webhooks)",
            ),
        ] {
            op = op.parameter(header_parameter(header, description, Required::True));
        }
        paths = paths.path(name, PathItem::new(HttpMethod::Post, op));
    }
    paths.build()
}

/// A string header parameter.
fn header_parameter(
    name: &str,
    description: &str,
    required: Required,
) -> utoipa::openapi::path::Parameter {
    ParameterBuilder::new()
        .name(name)
        .parameter_in(ParameterIn::Header)
        .required(required)
        .description(Some(description))
        .schema(Some(ObjectBuilder::new().schema_type(Type::String)))
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
    let scope = route.scope.map(|scope| {
        format!(
            "An API key needs the `{}` scope (a session has every scope).",
            scope.as_str()
        )
    });
    let description: Vec<String> = route
        .about
        .map(str::to_owned)
        .into_iter()
        .chain(scope)
        .collect();
    if !description.is_empty() {
        op = op.description(Some(description.join("\n\n")));
    }
    op = parameters(op, route);
    if let Some(body) = route.body {
        op = op.request_body(Some(
            RequestBodyBuilder::new()
                .required(Some(Required::True))
                .content(
                    "application/json",
                    ContentBuilder::new()
                        .schema(Some(Ref::from_schema_name(body.name())))
                        .build(),
                )
                .build(),
        ));
    }
    op = op.responses(responses(route));
    match route.who {
        Who::Anyone => op,
        // No credential, or one that is then checked: the empty requirement first.
        Who::AnyoneChecked => op
            .security(SecurityRequirement::default())
            .security(SecurityRequirement::new("apiKey", [] as [&str; 0]))
            .security(SecurityRequirement::new("bearer", [] as [&str; 0]))
            .security(SecurityRequirement::new("sessionCookie", [] as [&str; 0])),
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
                            .pattern(Some(route.id_pattern())),
                    )),
            );
        }
    }
    for param in route.query {
        op = op.parameter(
            ParameterBuilder::new()
                .name(param.name)
                .parameter_in(ParameterIn::Query)
                .required(Required::False)
                .description(Some(param.about))
                .example(param.example.map(|example| match param.kind {
                    Kind::Whole { .. } => example.parse::<u64>().map_or(example.into(), Into::into),
                    _ => example.into(),
                }))
                .schema(Some(query_schema(param))),
        );
    }
    if route.paid {
        for (name, description) in [
            ("PAYMENT-SIGNATURE", "x402 v2 PaymentPayload, base64 JSON"),
            ("X-PAYMENT", "x402 v1 payment payload, base64 JSON"),
        ] {
            op = op.parameter(header_parameter(name, description, Required::False));
        }
    }
    op
}

/// A route's success answer: its body by its type (a problem document for a route whose one
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
    } else if let Some(schema) = (route.answer)(&mut Schemas::new()) {
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
/// documents of its errors ([`Operation::problem_statuses`]).
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
    for status in route.problem_statuses() {
        responses = responses.response(status, problem_response(status));
    }
    responses.build()
}

/// The document's components: `schemas` (the events' data), the schemas of the rows' request
/// and answer types and those they refer to, the problem document, and the security schemes.
fn components(mut schemas: Schemas) -> utoipa::openapi::Components {
    for route in domain::api::OPERATIONS.iter().filter(|op| op.documented) {
        if let Some(body) = &route.body {
            body.schemas(&mut schemas);
        }
        (route.answer)(&mut schemas);
    }
    domain::api::answers::push::<crate::http::Problem>(&mut schemas);
    let builder = ComponentsBuilder::new().schemas_from_iter(schemas);
    hand_built_schemas(builder)
        .security_scheme(
            "apiKey",
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::new(
                domain::identity::auth::api_key::HEADER_NAME,
            ))),
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

/// The schema no handler type derives: the x402 v1 body.
fn hand_built_schemas(builder: ComponentsBuilder) -> ComponentsBuilder {
    builder.schema(
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
