//! The query parameters of an operation ([`super::Operation`]): what each means and the values
//! it takes, as HTTP spells them and as an MCP tool's arguments do.

use super::PROVIDER_ID;

/// A query parameter of an operation: its name, what it means, the values it takes and, where
/// one helps a reader (and a conformance run reach the success answer), an example. Over HTTP
/// each is a string of the query; an MCP tool takes it as an argument of its kind's JSON type.
#[derive(Debug, Clone, Copy)]
pub struct Param {
    /// The name, as the query and an MCP tool's arguments spell it.
    pub name: &'static str,
    /// One line for a reader.
    pub about: &'static str,
    /// The values it takes.
    pub kind: Kind,
    /// An example value, as the query spells it.
    pub example: Option<&'static str>,
}

/// The values a query parameter takes.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    /// Text: a slug, a cursor, one of the service's ids.
    Text,
    /// A whole number from `min` to `max`.
    Whole {
        /// The least.
        min: u64,
        /// The most.
        max: u64,
    },
    /// One of the provider's numeric ids.
    ProviderId,
    /// One or more of these names: comma-separated over HTTP (OpenAPI's `form` style, not
    /// exploded), a list in MCP.
    Names(fn() -> Vec<&'static str>),
}

impl Param {
    pub(crate) const fn new(name: &'static str, about: &'static str, kind: Kind) -> Param {
        Param {
            name,
            about,
            kind,
            example: None,
        }
    }

    pub(crate) const fn example(mut self, example: &'static str) -> Param {
        self.example = Some(example);
        self
    }

    /// The JSON Schema of one value (an MCP argument; the document's parameter schema is its
    /// HTTP spelling: `faces::openapi`).
    pub fn schema(&self) -> serde_json::Value {
        self.kind.schema(self.about)
    }
}

impl Kind {
    /// The JSON Schema of a value of this kind that means `about`: text, a whole number, one of
    /// the provider's ids as a number or its digits, or a list of names.
    pub fn schema(&self, about: &str) -> serde_json::Value {
        use serde_json::json;
        match *self {
            Kind::Text => json!({"type": "string", "description": about}),
            Kind::Whole { min, max } => json!({
                "type": "integer", "minimum": min, "maximum": max, "description": about,
            }),
            Kind::ProviderId => json!({
                "type": ["integer", "string"], "pattern": PROVIDER_ID, "minimum": 1,
                "description": about,
            }),
            Kind::Names(names) => json!({
                "type": "array", "items": {"enum": names()}, "minItems": 1, "description": about,
            }),
        }
    }
}
