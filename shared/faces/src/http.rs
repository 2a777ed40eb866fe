//! The HTTP edge: request ids, body limits, JSON in and out, path and query parameters, and the
//! one place where an [`ApiError`] becomes a response — an RFC 9457 problem document
//! (`application/problem+json` with `type`, `title`, `status`, `detail`, `requestId`, and
//! `field` for bad input).

use std::future::Future;
use std::time::Instant;

use lambda_http::http::{HeaderValue, Method, StatusCode, header};
use lambda_http::request::RequestContext;
use lambda_http::{Body, Request, RequestExt, Response};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use domain::api::{Answer, Row, Success};
use domain::error::ApiError;
use domain::state::AppState;
use domain::upstream::UpstreamError;

/// A 402 in both x402 versions (`reference/x402.md` §1): the v2 `PAYMENT-REQUIRED` header
/// (base64 JSON `PaymentRequired`, with the route's `bazaar` extension:
/// [`crate::discovery::bazaar_http`]) and the v1 JSON body (`x402Version` 1, `error`,
/// `accepts`), plus `price` (the quote) and `requestId`.
fn payment_required(demand: &domain::error::PaymentDemand, request_id: &str) -> Response<Body> {
    let mut body = serde_json::to_value(demand.offer.payment_required_v1(&demand.reason))
        .unwrap_or(Value::Null);
    if let Some(quote) = &demand.quote {
        body["price"] = serde_json::to_value(quote).unwrap_or(Value::Null);
    }
    body["requestId"] = Value::String(request_id.to_owned());
    let mut required = demand.offer.payment_required(&demand.reason);
    required.extensions = crate::discovery::bazaar_http(&demand.offer.resource)
        .map(|bazaar| serde_json::Map::from_iter([("bazaar".to_owned(), bazaar)]));
    let header = domain::x402::encode_header(&required);
    Response::builder()
        .status(StatusCode::PAYMENT_REQUIRED)
        .header(header::CONTENT_TYPE, "application/json")
        .header(domain::x402::PAYMENT_REQUIRED, header)
        .body(Body::Text(body.to_string()))
        .unwrap_or_else(|_| Response::new(Body::Empty))
}

/// The header that carries the request id on every response (and may be sent by the caller).
pub const REQUEST_ID: &str = "x-request-id";
/// The media type of every error body except 402 (RFC 9457).
pub const PROBLEM_JSON: &str = "application/problem+json";

/// The whole `main` of a function binary: initialises logging (JSON when the function's log
/// format is JSON; level from `AWS_LAMBDA_LOG_LEVEL` or `RUST_LOG`), builds the state once from
/// the environment ([`AppState::from_env`]), then serves every invocation with `handle`.
///
/// Errors: invalid configuration at cold start; a runtime failure of `lambda_http`.
pub async fn run<F, Fut>(handle: F) -> Result<(), lambda_http::Error>
where
    F: Fn(&'static AppState, Request) -> Fut + Sync,
    Fut: Future<Output = Response<Body>> + Send,
{
    lambda_http::tracing::init_default_subscriber();
    // Built once and kept for the life of the process, which is the function's warm life.
    let state: &'static AppState = Box::leak(Box::new(AppState::from_env().await?));
    let handle = &handle;
    lambda_http::run(lambda_http::service_fn(move |mut req| async move {
        if let Some(refused) = through_edge(&state.config, &mut req) {
            return Ok(refused);
        }
        Ok::<_, lambda_http::Error>(handle(state, req).await)
    }))
    .await
}

/// Behind the template's edge (`EDGE_ORIGIN_SECRET` set): refuses a request that carries
/// neither origin secret (`X-Origin-Verify`, added by CloudFront; the current one or, during a
/// rotation, the one it replaces: the origin called around the edge) with 403, and takes the
/// caller's address from `CloudFront-Viewer-Address` (`ip:port`) in place of API Gateway's,
/// which is then CloudFront's own, so every per-address limit counts callers. Without the edge,
/// the request is left as it is. Answers the 403 to send instead, if any.
pub fn through_edge(config: &domain::config::Config, req: &mut Request) -> Option<Response<Body>> {
    let secrets = &config.edge_origin_secrets;
    if secrets.is_empty() {
        return None;
    }
    use sha2::Digest;
    let presented = req
        .headers()
        .get("x-origin-verify")
        .map(|v| sha2::Sha256::digest(v.as_bytes()));
    // Compared as digests: the time taken says nothing of the secrets.
    let known = secrets
        .iter()
        .any(|secret| presented == Some(sha2::Sha256::digest(secret.expose().as_bytes())));
    if !known {
        let err = ApiError::Forbidden("this API is served through its edge only".into());
        return Some(problem(&err, &request_id(req)));
    }
    let viewer = req
        .headers()
        .get("cloudfront-viewer-address")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.rsplit_once(':'))
        .map(|(ip, _port)| ip.trim_matches(['[', ']']).to_owned())
        .filter(|ip| ip.parse::<std::net::IpAddr>().is_ok());
    if let (Some(ip), Some(lambda_http::request::RequestContext::ApiGatewayV2(ctx))) = (
        viewer,
        req.extensions_mut()
            .get_mut::<lambda_http::request::RequestContext>(),
    ) {
        ctx.http.source_ip = Some(ip);
    }
    None
}

/// [`run`] for a function that needs its configuration alone (`status`, `docs`, `console`): no
/// store, no clients,
/// and no secret read at cold start.
///
/// Errors: invalid configuration at cold start; a runtime failure of `lambda_http`.
pub async fn run_config<F, Fut>(handle: F) -> Result<(), lambda_http::Error>
where
    F: Fn(&'static domain::config::Config, Request) -> Fut + Sync,
    Fut: Future<Output = Response<Body>> + Send,
{
    lambda_http::tracing::init_default_subscriber();
    let config: &'static domain::config::Config =
        Box::leak(Box::new(domain::config::Config::from_env()?));
    let handle = &handle;
    lambda_http::run(lambda_http::service_fn(move |mut req| async move {
        if let Some(refused) = through_edge(config, &mut req) {
            return Ok(refused);
        }
        Ok::<_, lambda_http::Error>(handle(config, req).await)
    }))
    .await
}

/// What a handler returns before [`serve`] turns errors into problem documents.
pub type HttpResult = Result<Response<Body>, ApiError>;

/// Runs one request through `handler` and returns the response to send.
///
/// Before the handler: rejects bodies over `max_body_bytes` with 413, and a write (any method
/// but GET, HEAD, OPTIONS) whose body is not `application/json` with 415 ([`require_json`]).
/// After it: waits for the rate-limit counts the request started
/// ([`domain::ratelimit::settle_pending`]), turns an
/// [`ApiError`] into a problem document, sets `X-Request-Id` on every response (the service's
/// own id, [`request_id`]), and logs one line per request (method, path, status, milliseconds,
/// the caller's `X-Request-Id` beside the service's; never other headers, so keys and tokens are
/// not logged).
pub fn serve<F, Fut>(
    max_body_bytes: usize,
    req: Request,
    handler: F,
) -> impl Future<Output = Response<Body>>
where
    F: FnOnce(Request) -> Fut,
    Fut: Future<Output = HttpResult>,
{
    serve_checked(max_body_bytes, req, json_or_nothing, handler)
}

/// [`serve`], the body's media type checked by `media`.
pub(crate) async fn serve_checked<F, Fut>(
    max_body_bytes: usize,
    req: Request,
    media: fn(&Request) -> Result<(), ApiError>,
    handler: F,
) -> Response<Body>
where
    F: FnOnce(Request) -> Fut,
    Fut: Future<Output = HttpResult>,
{
    let started = Instant::now();
    let request_id = request_id(&req);
    let caller_request_id = caller_request_id(&req).unwrap_or_default().to_owned();
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let result = if body_bytes(&req).len() > max_body_bytes {
        Err(ApiError::PayloadTooLarge {
            limit: max_body_bytes,
        })
    } else if let Err(err) = media(&req) {
        Err(err)
    } else {
        // Every log line of the request carries its id (and the caller's, when it sent one);
        // the rate-limit counts written beside the work are in before the answer leaves. The
        // handler's future is boxed: the functions' futures are deep, and a box ends the nesting
        // the compiler lays out at once.
        domain::ratelimit::settle_pending(tracing::Instrument::instrument(
            Box::pin(handler(req)),
            tracing::info_span!(
                "request",
                request_id = %request_id,
                caller_request_id = %caller_request_id
            ),
        ))
        .await
    };
    let mut response = match result {
        Ok(response) => response,
        Err(err) => {
            let status = err.status();
            if status.is_server_error() {
                tracing::error!(request_id, error = %err, "request failed");
            } else {
                tracing::info!(request_id, error = %err, "request refused");
            }
            problem(&err, &request_id)
        }
    };
    if let Ok(value) = HeaderValue::from_str(&request_id) {
        response.headers_mut().insert(REQUEST_ID, value);
    }
    tracing::info!(
        request_id,
        caller_request_id,
        %method,
        path,
        status = response.status().as_u16(),
        ms = started.elapsed().as_millis() as u64,
        "request"
    );
    response
}

/// [`serve`] for routes a browser calls from the web app (auth and keys): CORS for the one
/// configured `web_origin`, exactly — `Access-Control-Allow-Origin: <origin>` with credentials on
/// every response to it, and preflight (`OPTIONS`) answered 204 with the allowed methods and
/// headers. Other origins get no CORS headers, and their preflight a 403.
pub async fn serve_cors<F, Fut>(
    max_body_bytes: usize,
    web_origin: Option<&str>,
    req: Request,
    handler: F,
) -> Response<Body>
where
    F: FnOnce(Request) -> Fut,
    Fut: Future<Output = HttpResult>,
{
    let origin = req
        .headers()
        .get(header::ORIGIN)
        .and_then(|o| o.to_str().ok())
        .map(str::to_owned);
    let allowed = origin
        .as_deref()
        .filter(|o| Some(*o) == web_origin)
        .map(str::to_owned);
    let preflight = req.method() == Method::OPTIONS;
    let allowed_for_preflight = allowed.clone();
    let mut response = serve(max_body_bytes, req, |req| async move {
        if !preflight {
            return handler(req).await;
        }
        if allowed_for_preflight.is_none() {
            return Err(ApiError::Forbidden(
                "this origin may not call the API from a browser".into(),
            ));
        }
        preflight_answer(
            "GET, POST, PATCH, DELETE, OPTIONS",
            "content-type, authorization, x-request-id",
        )
    })
    .await;
    let headers = response.headers_mut();
    headers.append(header::VARY, HeaderValue::from_static("Origin"));
    if let Some(origin) = allowed.and_then(|o| HeaderValue::from_str(&o).ok()) {
        headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
        headers.insert(
            header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
            HeaderValue::from_static("true"),
        );
        headers.insert(
            header::ACCESS_CONTROL_EXPOSE_HEADERS,
            HeaderValue::from_static("x-request-id"),
        );
    }
    response
}

/// The caller's `X-Request-Id`, when it is a safe token (1 to 128 of `[A-Za-z0-9._-]`): logged
/// beside the service's own id, never instead of it (callers could otherwise make two requests
/// share an id in the logs).
pub fn caller_request_id(req: &Request) -> Option<&str> {
    req.headers()
        .get(REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .filter(|v| {
            !v.is_empty()
                && v.len() <= 128
                && v.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        })
}

/// The service's id of a request: API Gateway's request id, else a random one (never the
/// caller's; see [`caller_request_id`]).
pub fn request_id(req: &Request) -> String {
    if let Some(RequestContext::ApiGatewayV2(ctx)) = req.request_context_ref()
        && let Some(id) = ctx.request_id.as_deref().filter(|id| !id.is_empty())
    {
        return id.to_owned();
    }
    domain::ids::random_hex(16)
}

/// The raw body bytes of a request (empty for no body).
pub fn body_bytes(req: &Request) -> &[u8] {
    match req.body() {
        Body::Empty => &[],
        Body::Text(text) => text.as_bytes(),
        Body::Binary(bytes) => bytes,
        _ => &[],
    }
}

/// The success answer of `row` (issue 45, point 1): its status ([`Success::Ok`]) and `body`,
/// of the type the row declares ([`domain::api::Answer`]), as JSON (nothing for a 204). A
/// handler answers only through here, so it cannot answer a status or a body its row does not
/// declare.
///
/// Errors: 500 when the body cannot be serialized.
pub fn answer<A: Answer>(row: &Row<A>, body: &A::Body) -> HttpResult {
    answer_as(row, Success::Ok, body)
}

/// The answer `success` of `row`: [`answer`], or the row's other success
/// ([`Success::Again`]) or a paid order's 202 ([`Success::Pending`]).
///
/// Errors: 500 when the row declares no such success (a handler's mistake, which the callers'
/// test finds), or the body cannot be serialized.
pub fn answer_as<A: Answer>(row: &Row<A>, success: Success, body: &A::Body) -> HttpResult {
    let status = row
        .op
        .status_of(success)
        .and_then(|status| StatusCode::from_bytes(status.as_bytes()).ok())
        .ok_or_else(|| {
            ApiError::Internal(format!("`{}` declares no {success:?} answer", row.op.id))
        })?;
    if A::EMPTY {
        return empty(status);
    }
    json(status, body)
}

/// A JSON response with `status` (the views it serializes carry wallet addresses in EIP-55:
/// [`domain::address::Checksummed`]).
pub(crate) fn json<T: Serialize + ?Sized>(status: StatusCode, value: &T) -> HttpResult {
    let body = serde_json::to_string(value)
        .map_err(|e| ApiError::Internal(format!("cannot serialise response: {e}")))?;
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::Text(body))
        .map_err(|e| ApiError::Internal(e.to_string()))
}

/// A CORS preflight's answer: 204 allowing `methods` and `headers`, for 600 s.
pub(crate) fn preflight_answer(methods: &'static str, headers: &'static str) -> HttpResult {
    let mut response = empty(StatusCode::NO_CONTENT)?;
    let allowed = response.headers_mut();
    allowed.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static(methods),
    );
    allowed.insert(
        header::ACCESS_CONTROL_ALLOW_HEADERS,
        HeaderValue::from_static(headers),
    );
    allowed.insert(
        header::ACCESS_CONTROL_MAX_AGE,
        HeaderValue::from_static("600"),
    );
    Ok(response)
}

/// An empty response with `status` (e.g. 204).
pub(crate) fn empty(status: StatusCode) -> HttpResult {
    Response::builder()
        .status(status)
        .body(Body::Empty)
        .map_err(|e| ApiError::Internal(e.to_string()))
}

/// Parses the request body as JSON into `T`.
///
/// Every body of this API is a JSON object. Errors (all 400, field `body` unless a field is at
/// fault): an empty body; a body that is not an object; malformed JSON
/// (with line and column); a missing, unknown or mistyped field (named, with its path such as
/// `tags.owner`); trailing data after the JSON value.
pub fn json_body<T: DeserializeOwned>(req: &Request) -> Result<T, ApiError> {
    decode_json(body_bytes(req))
}

/// The byte a JSON object starts with (named: a line-based reader counts a brace literal as a
/// block).
const OPENING_BRACE: u8 = 0x7B;

/// [`json_body`] of any bytes (e.g. the arguments of an MCP tool call): a JSON object decoded
/// into `T`, with the same 400s naming the field at fault.
pub fn decode_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    match bytes.iter().find(|b| !b.is_ascii_whitespace()) {
        None => return Err(ApiError::invalid("body", "a JSON body is required")),
        Some(&OPENING_BRACE) => {}
        Some(_) => return Err(ApiError::invalid("body", "must be a JSON object")),
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value: T = serde_path_to_error::deserialize(&mut de).map_err(|err| {
        let path = err.path().to_string();
        let inner = err.into_inner();
        if inner.is_syntax() || inner.is_eof() {
            return ApiError::invalid("body", format!("malformed JSON: {inner}"));
        }
        let message = inner.to_string();
        // serde_path_to_error's path ends at an unknown field, but stops at the parent of a
        // missing one.
        let field = match missing_field(&message) {
            Some(name) if path == "." => name.to_owned(),
            Some(name) => format!("{path}.{name}"),
            None if path == "." => "body".to_owned(),
            None => path,
        };
        ApiError::invalid(field, message)
    })?;
    de.end()
        .map_err(|e| ApiError::invalid("body", format!("malformed JSON: {e}")))?;
    Ok(value)
}

/// Refuses a body whose `Content-Type` is not `application/json` (parameters allowed): a route
/// that changes state from a JSON body cannot then be reached by a cross-site HTML form, which
/// can only send `text/plain`, `multipart/form-data` or `application/x-www-form-urlencoded`.
/// [`serve`] applies it to every write that has a body.
///
/// Errors: 415 naming the media type it takes.
pub fn require_json(req: &Request) -> Result<(), ApiError> {
    let media_type = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(|v| v.trim().to_ascii_lowercase());
    if media_type.as_deref() == Some("application/json") {
        return Ok(());
    }
    Err(ApiError::UnsupportedMediaType(
        "the body must be sent as Content-Type: application/json".into(),
    ))
}

/// A write's body is JSON or nothing: [`require_json`] for any method but GET, HEAD and OPTIONS
/// that carries a body.
pub(crate) fn json_or_nothing(req: &Request) -> Result<(), ApiError> {
    let write = !matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS);
    if write && !body_bytes(req).iter().all(u8::is_ascii_whitespace) {
        return require_json(req);
    }
    Ok(())
}

/// The field name in serde's "missing field `x`" message.
fn missing_field(message: &str) -> Option<&str> {
    message.strip_prefix("missing field `")?.split('`').next()
}

/// A query string parameter, if present.
pub fn query_param<'a>(req: &'a Request, name: &str) -> Option<&'a str> {
    req.query_string_parameters_ref()
        .and_then(|q| q.first(name))
}

/// The API's public base URL: `PUBLIC_BASE_URL`, else `https://<Host>` (API Gateway and
/// CloudFront serve HTTPS only). The x402 `resource` of a paid route and an approval's link are
/// made on it.
pub fn public_base(config: &domain::config::Config, req: &Request) -> String {
    config.payments.public_base_url.clone().unwrap_or_else(|| {
        let host = req
            .headers()
            .get(lambda_http::http::header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or("localhost");
        format!("https://{host}")
    })
}

/// The invocation's deadline, or `REQUEST_BUDGET_SECONDS` when it names none.
pub fn deadline(state: &domain::state::AppState, req: &Request) -> domain::deadline::Deadline {
    domain::deadline::Deadline::from_epoch_millis(
        req.lambda_context_ref().map_or(0, |c| c.deadline),
        state.config.payments.request_budget,
    )
}

/// Sets `PAYMENT-RESPONSE` and `X-PAYMENT-RESPONSE` (base64 JSON of the settle response) on a
/// response: every answer to a request whose payment settled carries them.
pub fn set_payment_response(
    response: &mut Response<Body>,
    settlement: &domain::x402::SettleResponse,
) {
    if let Ok(value) = HeaderValue::from_str(&domain::x402::encode_header(settlement)) {
        let headers = response.headers_mut();
        headers.insert(domain::x402::PAYMENT_RESPONSE, value.clone());
        headers.insert(domain::x402::X_PAYMENT_RESPONSE, value);
    }
}

/// An RFC 9457 problem document, as every error but the 402 answers it.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Problem {
    /// `/problems/<slug>` (e.g. `/problems/invalid-request`).
    #[serde(rename = "type")]
    pub kind: String,
    /// A short title of the type.
    pub title: String,
    /// The HTTP status.
    pub status: u16,
    /// What happened, and what to do.
    pub detail: String,
    /// The request id (also `X-Request-Id`).
    pub request_id: String,
    /// The field that is wrong (400 `invalid-request`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// The payment, when one was charged (see `GET /api/payments`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub payment: Option<Value>,
    /// The key policy's limit that refused (403 `policy-violation`): `maxPricePerServer`,
    /// `dailySpendLimit`, `monthlySpendLimit`, `allowedPlans`, `allowedRegions` or
    /// `maxActiveServers`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<String>,
    /// What is left of that limit: USD, or servers for `maxActiveServers`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remaining: Option<f64>,
    /// The approval the key's owner can grant (403 `policy-violation` of a key's paid request):
    /// its owner opens `approvalUrl`; the same request repeated once it is granted passes the
    /// policy once (`GET /api/approvals/{id}` follows it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approval: Option<domain::store::approvals::ApprovalOffer>,
}

/// The problem document of an error, whatever carries it (an HTTP response, an MCP tool
/// error), and the seconds of its `Retry-After`, if any. Internal details (store errors, upstream
/// credentials trouble) are never in it; [`serve`] logs them. A [`ApiError::Charged`] error is
/// its inner error's document with the payment and what happens next. A 402 is not a problem
/// document on the wire (see [`problem`]); here it is one with the reason as its detail.
pub fn problem_document(err: &ApiError, request_id: &str) -> (Problem, Option<u64>) {
    if let ApiError::Charged(charged) = err {
        let (mut doc, retry_after) = problem_document(&charged.error, request_id);
        doc.detail = format!("{} — {}", doc.detail, charged.next);
        doc.payment = Some(charged.payment.clone());
        return (doc, retry_after);
    }
    let (status, slug, title) = err.problem_parts();
    let detail = match err {
        ApiError::Store(_) | ApiError::Internal(_) => {
            "an internal error occurred; quote the request id when reporting it".to_owned()
        }
        // The service's own words for what others said; their text goes to the log only
        // (`serve` logs every refused and failed request's error).
        ApiError::Upstream(err) => upstream_detail(err),
        ApiError::Facilitator(err) => facilitator_detail(err),
        other => other.to_string(),
    };
    let mut doc = Problem {
        kind: format!("/problems/{slug}"),
        title: title.to_owned(),
        status: status.as_u16(),
        detail,
        request_id: request_id.to_owned(),
        field: None,
        payment: None,
        limit: None,
        remaining: None,
        approval: None,
    };
    let mut retry_after = None;
    match err {
        ApiError::Invalid { field, message } => {
            doc.field = Some(field.clone());
            doc.detail = message.clone();
        }
        ApiError::Upstream(UpstreamError::RateLimited { retry_after: secs }) => {
            retry_after = Some(secs.unwrap_or(1));
        }
        ApiError::Busy {
            retry_after: secs, ..
        } => retry_after = Some(*secs),
        ApiError::RateLimited(exceeded) => retry_after = Some(exceeded.retry_after),
        ApiError::PolicyViolation {
            limit,
            remaining,
            approval,
            ..
        } => {
            doc.limit = Some(limit.clone());
            doc.remaining = *remaining;
            doc.approval = approval.as_deref().cloned();
        }
        _ => {}
    }
    (doc, retry_after)
}

/// The detail of a provider failure: stable, the service's own sentence per kind (the
/// provider's message may name internals, and changes without notice).
fn upstream_detail(err: &UpstreamError) -> String {
    match err {
        UpstreamError::Status { status: 404, .. } => {
            "the provider has no such resource (HTTP 404)".to_owned()
        }
        UpstreamError::Status { status: 409, .. } => {
            "the provider refused the request: it conflicts with the resource's state (HTTP 409)"
                .to_owned()
        }
        UpstreamError::Status {
            status: status @ (400 | 422),
            ..
        } => format!(
            "the provider refused the request as invalid (HTTP {status}); check the plan, \
             region, image and hostname"
        ),
        UpstreamError::Status { status, .. } => {
            format!("the provider failed (HTTP {status}); try again later")
        }
        UpstreamError::RateLimited { .. } => {
            "the provider is rate limiting this service; try again later".to_owned()
        }
        UpstreamError::Timeout => "the provider did not answer in time".to_owned(),
        UpstreamError::Transport(_) => {
            "the provider could not be reached; try again later".to_owned()
        }
        UpstreamError::Decode(_) => "the provider's answer could not be understood".to_owned(),
        UpstreamError::NoToken => {
            "the provider's token could not be read; the operator must fix its parameter".to_owned()
        }
    }
}

/// The detail of a facilitator failure: stable, the service's own sentence per kind.
fn facilitator_detail(err: &domain::x402::facilitator::FacilitatorError) -> String {
    use domain::x402::facilitator::FacilitatorError as F;
    match err {
        F::Timeout => "the payment facilitator did not answer in time".to_owned(),
        F::Transport(_) => {
            "the payment facilitator could not be reached; try again later".to_owned()
        }
        F::Protocol(_) => "the payment facilitator's answer could not be understood".to_owned(),
    }
}

/// Turns an error into its response: the problem document of [`problem_document`] (with
/// `Retry-After` when it names one, and the payment response headers after a settlement), or for
/// a 402 the x402 answer (v2 `PAYMENT-REQUIRED` header and v1 body).
pub fn problem(err: &ApiError, request_id: &str) -> Response<Body> {
    if let ApiError::PaymentRequired(demand) = err {
        return payment_required(demand, request_id);
    }
    if let ApiError::OAuth(refusal) = err {
        return crate::oauth::error(refusal);
    }
    let (doc, retry_after) = problem_document(err, request_id);
    let mut builder = Response::builder()
        .status(doc.status)
        .header(header::CONTENT_TYPE, PROBLEM_JSON);
    if let Some(secs) = retry_after {
        builder = builder.header(header::RETRY_AFTER, secs.to_string());
    }
    if let ApiError::RateLimited(exceeded) = err {
        builder = builder
            .header("ratelimit-policy", exceeded.policy_header())
            .header("ratelimit", exceeded.limit_header());
    }
    let body = serde_json::to_string(&doc).unwrap_or_default();
    let mut response = builder
        .body(Body::Text(body))
        .unwrap_or_else(|_| Response::new(Body::Empty));
    if let ApiError::Charged(charged) = err {
        set_payment_response(&mut response, &charged.settlement);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use domain::x402::facilitator::FacilitatorError;

    /// A request as API Gateway hands it over from `source`, with `headers`.
    fn from(source: &str, headers: &[(&str, &str)]) -> Request {
        use lambda_http::aws_lambda_events::apigw::ApiGatewayV2httpRequestContext;
        let mut req = Request::default();
        for (name, value) in headers {
            req.headers_mut().insert(
                lambda_http::http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        let mut ctx = ApiGatewayV2httpRequestContext::default();
        ctx.http.source_ip = Some(source.to_owned());
        req.extensions_mut()
            .insert(lambda_http::request::RequestContext::ApiGatewayV2(ctx));
        req
    }

    fn edge(secrets: &[&str]) -> domain::config::Config {
        let mut vars = vec![("TABLE_NAME", "t".to_owned())];
        for (name, secret) in ["EDGE_ORIGIN_SECRET", "EDGE_ORIGIN_SECRET_PREVIOUS"]
            .into_iter()
            .zip(secrets)
        {
            vars.push((name, secret.to_string()));
        }
        domain::config::Config::from_lookup(|k| {
            vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone())
        })
        .unwrap()
    }

    #[test]
    fn behind_the_edge_only_cloudfront_gets_in_and_the_viewer_is_the_caller() {
        let source = |req: &Request| domain::identity::auth::source_address(req);
        // No edge: nothing checked, nothing rewritten.
        let mut req = from(
            "203.0.113.9",
            &[("cloudfront-viewer-address", "198.51.100.1:1")],
        );
        assert!(through_edge(&edge(&[]), &mut req).is_none());
        assert_eq!(source(&req), "203.0.113.9");
        // The edge: without the secret, or with another, 403.
        const SECRET: &str = "s3cret-from-cloudfront-0123456789abcdef";
        const PREVIOUS: &str = "the-one-before-it-0123456789abcdefghij";
        let config = edge(&[SECRET]);
        for headers in [
            vec![],
            vec![("x-origin-verify", "guess")],
            vec![("x-origin-verify", PREVIOUS)],
        ] {
            let mut req = from("203.0.113.9", &headers);
            let refused = through_edge(&config, &mut req).unwrap();
            assert_eq!(refused.status(), StatusCode::FORBIDDEN);
        }
        // During a rotation both pass; neither may be short, nor the previous one alone.
        let rotating = edge(&[SECRET, PREVIOUS]);
        for secret in [SECRET, PREVIOUS] {
            let mut req = from("130.176.0.1", &[("x-origin-verify", secret)]);
            assert!(through_edge(&rotating, &mut req).is_none());
        }
        let parsed = |vars: &[(&str, &str)]| {
            domain::config::Config::from_lookup(|k| {
                (k == "TABLE_NAME").then(|| "t".to_owned()).or_else(|| {
                    vars.iter()
                        .find(|(n, _)| *n == k)
                        .map(|(_, v)| v.to_string())
                })
            })
        };
        assert!(parsed(&[("EDGE_ORIGIN_SECRET", "short")]).is_err());
        assert!(
            parsed(&[
                ("EDGE_ORIGIN_SECRET", SECRET),
                ("EDGE_ORIGIN_SECRET_PREVIOUS", "x")
            ])
            .is_err()
        );
        assert!(parsed(&[("EDGE_ORIGIN_SECRET_PREVIOUS", PREVIOUS)]).is_err());
        // With it: the viewer's address (IPv4 or IPv6, without its port) is the caller's.
        for (viewer, ip) in [
            ("198.51.100.10:46532", "198.51.100.10"),
            // An IPv6 viewer is its /64, as every per-address budget counts it.
            ("2001:db8::7:443", "2001:db8::/64"),
        ] {
            let mut req = from(
                "130.176.0.1",
                &[
                    ("x-origin-verify", SECRET),
                    ("cloudfront-viewer-address", viewer),
                ],
            );
            assert!(through_edge(&config, &mut req).is_none());
            assert_eq!(source(&req), ip);
        }
    }

    #[test]
    fn details_of_others_failures_are_the_services_own_words() {
        let secret = "SECRET-INTERNAL host db-7.internal:5432".to_owned();
        let errors = [
            ApiError::Upstream(UpstreamError::Status {
                status: 422,
                code: Some(7),
                message: secret.clone(),
            }),
            ApiError::Upstream(UpstreamError::Status {
                status: 404,
                code: None,
                message: secret.clone(),
            }),
            ApiError::Upstream(UpstreamError::Status {
                status: 500,
                code: None,
                message: secret.clone(),
            }),
            ApiError::Upstream(UpstreamError::Transport(secret.clone())),
            ApiError::Upstream(UpstreamError::Decode(secret.clone())),
            ApiError::Facilitator(FacilitatorError::Transport(secret.clone())),
            ApiError::Facilitator(FacilitatorError::Protocol(secret.clone())),
        ];
        for err in &errors {
            let (doc, _) = problem_document(err, "req");
            assert!(!doc.detail.contains("SECRET"), "{}", doc.detail);
            assert!(!doc.detail.is_empty());
        }
        let (doc, _) = problem_document(&errors[0], "req");
        assert_eq!(
            (doc.status, doc.kind.as_str()),
            (400, "/problems/upstream-rejected")
        );
    }
}
