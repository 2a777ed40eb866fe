//! What a row takes and answers, as types (issue 45, point 1): a typed row
//! ([`Row<A>`](Row)) names the form `A` of its success answer, and a request body names its
//! type ([`RequestBody::of`]). The handler answers through the row
//! (`faces::http::answer(&api::GET_AGENT, &agent)`): the status is the row's, and a body of
//! another type does not compile. The OpenAPI document takes each row's schemas from the same
//! types ([`Operation::answer`](super::Operation::answer), [`RequestBody::schemas`]), and the
//! MCP tools their output schemas.

use std::borrow::Cow;
use std::marker::PhantomData;

use serde::Serialize;
use serde_json::{Map, Value};
use utoipa::ToSchema;
use utoipa::openapi::schema::SchemaType;
use utoipa::openapi::{ArrayBuilder, ObjectBuilder, Ref, RefOr, Schema, Type};

use super::Operation;
use crate::store::Page;

/// Component schemas by name, as `utoipa` collects a type's and those it refers to
/// (`ToSchema::schemas`).
pub type Schemas = Vec<(String, RefOr<Schema>)>;

/// The form of a row's success answer: the body its handler passes, and the schema the
/// document shows for it.
pub trait Answer {
    /// What the handler passes, serialized as the JSON body (nothing for [`Nothing`]).
    type Body: Serialize + ?Sized;
    /// The answer has no body (204).
    const EMPTY: bool = false;
    /// The body's schema; pushes the named schemas it refers to onto `components`. `None`:
    /// no body.
    fn schema(components: &mut Schemas) -> Option<RefOr<Schema>>;
}

/// Pushes `T`'s own schema, under its name, and the ones it refers to.
pub fn push<T: ToSchema>(components: &mut Schemas) {
    components.push((T::name().into_owned(), T::schema()));
    T::schemas(components);
}

/// One `T`, referred to as its component schema.
pub struct One<T>(PhantomData<fn() -> T>);

impl<T: ToSchema + Serialize> Answer for One<T> {
    type Body = T;
    fn schema(components: &mut Schemas) -> Option<RefOr<Schema>> {
        push::<T>(components);
        Some(Ref::from_schema_name(T::name()).into())
    }
}

/// A page of `T`s: `{items: [T], nextCursor: string | null}` ([`Page`]).
pub struct PageOf<T>(PhantomData<fn() -> T>);

impl<T: ToSchema + Serialize> Answer for PageOf<T> {
    type Body = Page<T>;
    fn schema(components: &mut Schemas) -> Option<RefOr<Schema>> {
        push::<T>(components);
        let page = ObjectBuilder::new()
            .schema_type(Type::Object)
            .property(
                "items",
                ArrayBuilder::new().items(Ref::from_schema_name(T::name())),
            )
            .property(
                "nextCursor",
                ObjectBuilder::new().schema_type(SchemaType::from_iter([Type::String, Type::Null])),
            )
            .required("items")
            .into();
        Some(page)
    }
}

/// A JSON object of no declared type: the provider's objects passed through, or a small
/// object the row's description names.
pub struct Object;

impl Answer for Object {
    type Body = Value;
    fn schema(_: &mut Schemas) -> Option<RefOr<Schema>> {
        Some(ObjectBuilder::new().schema_type(Type::Object).into())
    }
}

/// A JSON array of objects: the provider's lists, passed through.
pub struct List;

impl Answer for List {
    type Body = [Value];
    fn schema(_: &mut Schemas) -> Option<RefOr<Schema>> {
        let object = ObjectBuilder::new().schema_type(Type::Object);
        Some(ArrayBuilder::new().items(object).into())
    }
}

/// No body (204).
pub struct Nothing;

impl Answer for Nothing {
    type Body = ();
    const EMPTY: bool = true;
    fn schema(_: &mut Schemas) -> Option<RefOr<Schema>> {
        None
    }
}

/// An operation whose success answer has the form `A`: a handler answers it with an
/// `A::Body` (`faces::http::answer`), under the row's status.
#[derive(Debug)]
pub struct Row<A> {
    /// The row of [`super::OPERATIONS`].
    pub op: Operation,
    answer: PhantomData<fn() -> A>,
}

impl<A: Answer> Row<A> {
    /// `op`, answering `A`.
    pub(super) const fn new(mut op: Operation) -> Self {
        op.answer = A::schema;
        Row {
            op,
            answer: PhantomData,
        }
    }
}

/// A request body's type, named in the document as its component schema.
#[derive(Debug, Clone, Copy)]
pub struct RequestBody {
    name: fn() -> Cow<'static, str>,
    schemas: fn(&mut Schemas),
}

impl RequestBody {
    /// The body `T` (a type the handler decodes).
    pub const fn of<T: ToSchema>() -> Self {
        RequestBody {
            name: T::name,
            schemas: push::<T>,
        }
    }

    /// Its component schema's name, e.g. `NewAgent`.
    pub fn name(&self) -> Cow<'static, str> {
        (self.name)()
    }

    /// Pushes its schema and the ones it refers to onto `components`.
    pub fn schemas(&self, components: &mut Schemas) {
        (self.schemas)(components)
    }
}

/// Puts the component schemas `defs` in `schema` as its `$defs`, and points its `$ref`s there:
/// a schema that stands alone (an MCP tool's, an x402 `bazaar` extension's), whose `$ref`s are
/// all same-document fragments.
pub fn with_defs(schema: &mut Value, defs: Schemas) {
    if !defs.is_empty() {
        let defs: Map<String, Value> = defs
            .into_iter()
            .map(|(name, schema)| (name, serde_json::to_value(schema).unwrap_or_default()))
            .collect();
        schema["$defs"] = Value::Object(defs);
    }
    to_defs(schema);
}

/// Points every `$ref` of `schema` at its `$defs` (the document's refs name
/// `#/components/schemas/…`).
fn to_defs(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            for (key, value) in map.iter_mut() {
                match (key.as_str(), value) {
                    ("$ref", Value::String(target)) => {
                        *target = target.replace("#/components/schemas/", "#/$defs/");
                    }
                    (_, value) => to_defs(value),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(to_defs),
        _ => {}
    }
}

/// Which of a row's successes a handler answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Success {
    /// The row's status ([`Operation::ok`](super::Operation::ok)).
    Ok,
    /// Its other success of the same shape ([`Operation::also_ok`](super::Operation::also_ok),
    /// e.g. 200 for a creation that found what it would create already there).
    Again,
    /// A paid order that goes on in the background: 202.
    Pending,
}

/// What the MCP transport (`rmcp`'s Streamable HTTP service) answers besides a JSON-RPC
/// response: 202 for a notification, and plain-text refusals of what is not a valid MCP message
/// over HTTP (400, 406, 415, 422).
pub const MCP_TRANSPORT: &[(&str, &str)] = &[
    ("202", "a notification or response accepted"),
    ("400", "not a JSON-RPC message, or a bad protocol version"),
    (
        "406",
        "`Accept` lacks application/json and text/event-stream",
    ),
    ("415", "`Content-Type` is not application/json"),
    ("422", "a JSON-RPC message MCP does not know"),
];

impl Operation {
    /// The statuses of the problem documents the row may answer: its
    /// [`errors`](Operation::errors), 429 and 503 (the store busy) on every rate-limited row
    /// (every row that reads a credential and the sign-in rows, which read the store), 415 on
    /// every row with a body (`faces::http::serve` takes JSON only).
    pub fn problem_statuses(&self) -> Vec<&'static str> {
        let mut statuses = self.errors.to_vec();
        let limited =
            self.who != super::Who::Anyone || matches!(self.id, "getNonce" | "verifySignIn");
        if limited && self.method != lambda_http::http::Method::OPTIONS {
            statuses.extend(["429", "503"]);
        }
        if self.body.is_some() {
            statuses.push("415");
        }
        statuses.sort_unstable();
        statuses.dedup();
        statuses
    }

    /// Every status the row may answer: its successes ([`Success`]), the MCP transport's
    /// ([`MCP_TRANSPORT`]) for the MCP endpoint, and its [problems](Self::problem_statuses).
    /// The callers' test holds every answer of every row to it.
    pub fn statuses(&self) -> Vec<&'static str> {
        let mut statuses: Vec<&'static str> = [Success::Ok, Success::Again, Success::Pending]
            .into_iter()
            .filter_map(|success| self.status_of(success))
            .collect();
        if self.function == super::Function::Mcp && self.method == lambda_http::http::Method::POST {
            statuses.extend(MCP_TRANSPORT.iter().map(|(status, _)| *status));
        }
        statuses.extend(self.problem_statuses());
        statuses.sort_unstable();
        statuses.dedup();
        statuses
    }

    /// The status of `success` for this row, e.g. `201`; `None` when the row declares no such
    /// success (a handler's mistake).
    pub fn status_of(&self, success: Success) -> Option<&'static str> {
        match success {
            Success::Ok => Some(self.ok.0),
            Success::Again => self.also_ok.map(|(status, _)| status),
            Success::Pending => self.paid.then_some("202"),
        }
    }
}

// The MCP endpoint's body as the document shows it: the `mcp` function reads it with `rmcp`,
// so this type is a schema only.
/// A JSON-RPC 2.0 request or notification of the Model Context Protocol (`initialize`,
/// `tools/list`, `tools/call`, …).
#[derive(Debug, Serialize, ToSchema)]
pub struct JsonRpcMessage {
    /// `"2.0"`.
    pub jsonrpc: String,
    /// The method, e.g. `tools/call`.
    pub method: String,
    /// Its parameters.
    #[schema(value_type = Option<Object>)]
    pub params: Option<Value>,
}
