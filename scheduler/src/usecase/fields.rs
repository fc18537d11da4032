//! Field types the use cases read from what users send (JSON bodies, forms).

use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};

/// A reference to a job or plugin in a body: a JSON number is an id, a string a name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum NameOrId {
    Id(i64),
    Name(String),
}

impl fmt::Display for NameOrId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Id(id) => write!(f, "{id}"),
            Self::Name(name) => write!(f, "`{name}`"),
        }
    }
}

impl<'de> Deserialize<'de> for NameOrId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = NameOrId;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a name (string) or an id (integer)")
            }

            fn visit_i64<E: de::Error>(self, v: i64) -> Result<NameOrId, E> {
                Ok(NameOrId::Id(v))
            }

            fn visit_u64<E: de::Error>(self, v: u64) -> Result<NameOrId, E> {
                i64::try_from(v)
                    .map(NameOrId::Id)
                    .map_err(|_| E::custom(format!("id {v} is out of range")))
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<NameOrId, E> {
                Ok(NameOrId::Name(v.to_owned()))
            }

            fn visit_string<E: de::Error>(self, v: String) -> Result<NameOrId, E> {
                Ok(NameOrId::Name(v))
            }
        }
        d.deserialize_any(V)
    }
}

/// For `PATCH` bodies: tells "absent" (`None`) from "null" (`Some(None)`).
pub fn nullable<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

/// Any JSON value (a workflow instance's input, a step's output), as the OpenAPI document
/// names it: a marker for `#[schema(value_type = …)]` of a `serde_json::Value` field.
pub enum AnyJson {}
