//! Extractors that answer every way a request can be malformed with an [`ApiError`] (the
//! JSON error shape, a message naming the problem) instead of axum's plain-text rejections.

use std::str::FromStr;

use axum::extract::{FromRequest, FromRequestParts, RawPathParams, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, header};
use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use utoipa::IntoParams;

use super::error::{ApiError, NOT_JSON};

/// A JSON body. Wrong content type, bad syntax, wrong types, missing or unknown fields are
/// 400s whose message carries serde's field path; a body over the limit is a 413.
#[derive(Debug, Clone, Copy, Default)]
pub struct Json<T>(pub T);

impl<T, S> FromRequest<S> for Json<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        if !is_json(req.headers()) {
            return Err(ApiError::BadRequest(NOT_JSON.into()));
        }
        let bytes = Bytes::from_request(req, state).await?;
        Ok(Json(parse_json(&bytes)?))
    }
}

impl<T: Serialize> axum::response::IntoResponse for Json<T> {
    fn into_response(self) -> axum::response::Response {
        axum::Json(self.0).into_response()
    }
}

/// A raw body (a plugin module): over the limit is a 413 in the JSON error shape.
#[derive(Debug, Clone, Default)]
pub struct RawBody(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for RawBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        Ok(RawBody(Bytes::from_request(req, state).await?))
    }
}

/// A body in JSON (`application/json`) or YAML (`application/yaml`, `text/yaml`): a
/// document under review is usually YAML. YAML is read into JSON's data model first, so
/// both are checked by the same serde definitions and name a bad field the same way.
#[derive(Debug, Clone, Default)]
pub struct JsonOrYaml<T>(pub T);

impl<T, S> FromRequest<S> for JsonOrYaml<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        if is_json(req.headers()) {
            let bytes = Bytes::from_request(req, state).await?;
            return Ok(JsonOrYaml(parse_json(&bytes)?));
        }
        if !is_yaml(req.headers()) {
            return Err(ApiError::BadRequest(
                "send the body as JSON (`content-type: application/json`) or YAML \
                 (`content-type: application/yaml`)"
                    .into(),
            ));
        }
        let bytes = Bytes::from_request(req, state).await?;
        let value: serde_json::Value = yaml_serde::from_slice(&bytes)
            .map_err(|e| ApiError::BadRequest(format!("invalid YAML body: {e}")))?;
        if !value.is_object() {
            return Err(ApiError::BadRequest(
                "invalid YAML body: it must be a mapping (`key: value` lines)".into(),
            ));
        }
        serde_path_to_error::deserialize(value)
            .map(JsonOrYaml)
            .map_err(|e| {
                ApiError::BadRequest(format!("invalid YAML body: {}: {}", e.path(), e.inner()))
            })
    }
}

/// `application/yaml`, `application/x-yaml` or `text/yaml`, parameters allowed.
fn is_yaml(headers: &HeaderMap) -> bool {
    let essence = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(|v| v.trim().to_ascii_lowercase())
        .unwrap_or_default();
    matches!(
        essence.as_str(),
        "application/yaml" | "application/x-yaml" | "text/yaml"
    )
}

/// A JSON body that may be left out: an empty body (or JSON `null`) is `None`; anything
/// else is read like [`Json`].
#[derive(Debug, Clone, Copy, Default)]
pub struct OptionalJson<T>(pub Option<T>);

impl<T, S> FromRequest<S> for OptionalJson<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let json = is_json(req.headers());
        let bytes = Bytes::from_request(req, state).await?;
        if bytes.trim_ascii().is_empty() {
            return Ok(OptionalJson(None));
        }
        if !json {
            return Err(ApiError::BadRequest(NOT_JSON.into()));
        }
        if bytes.trim_ascii() == b"null" {
            return Ok(OptionalJson(None));
        }
        Ok(OptionalJson(Some(parse_json(&bytes)?)))
    }
}

fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    // Every body is an object: serde would also read a struct from an array of its
    // fields' values (`[null]`), which no client means.
    if bytes.trim_ascii_start().first() != Some(&b'{') {
        return Err(ApiError::BadRequest(
            "invalid JSON body: it must be a JSON object (`{…}`)".into(),
        ));
    }
    let error = match axum::Json::<T>::from_bytes(bytes) {
        Ok(json) => return Ok(json.0),
        Err(e) => e,
    };
    // JSON Schema counts `30.0` as the integer 30, and so do the clients generated from the
    // OpenAPI document: read such numbers as integers (only on this slow path, so the
    // common body is parsed once).
    if error.body_text().contains("invalid type: floating point")
        && let Ok(mut value) = serde_json::from_slice::<serde_json::Value>(bytes)
        && integral_floats_to_integers(&mut value)
    {
        // What is wrong with the body once its integers read as integers, by path.
        return serde_path_to_error::deserialize(value).map_err(|e| {
            ApiError::BadRequest(format!("invalid JSON body: {}: {}", e.path(), e.inner()))
        });
    }
    Err(error.into())
}

/// Rewrites every number with no fraction that fits an `i64` (`30.0`, `-1e3`) as an
/// integer; whether any was.
fn integral_floats_to_integers(value: &mut serde_json::Value) -> bool {
    use serde_json::Value;
    match value {
        Value::Number(n) if n.is_f64() => {
            let f = n.as_f64().unwrap_or(f64::NAN);
            // Strictly inside: a literal beyond `i64` is read as the float at its bound.
            let fits = f.fract() == 0.0 && f > i64::MIN as f64 && f < i64::MAX as f64;
            if fits {
                *value = Value::from(f as i64);
            }
            fits
        }
        Value::Array(items) => items
            .iter_mut()
            .fold(false, |any, v| integral_floats_to_integers(v) | any),
        Value::Object(fields) => fields
            .values_mut()
            .fold(false, |any, v| integral_floats_to_integers(v) | any),
        _ => false,
    }
}

/// `application/json` or any `application/*+json`, parameters allowed.
fn is_json(headers: &HeaderMap) -> bool {
    let Some(value) = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let essence = value
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
}

/// A query string. Malformed ones are 400s in the JSON error shape.
#[derive(Debug, Clone, Copy, Default)]
pub struct Query<T>(pub T);

impl<T, S> FromRequestParts<S> for Query<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        Ok(Query(
            axum::extract::Query::<T>::try_from_uri(&parts.uri)?.0,
        ))
    }
}

/// A route's only path parameter, unparsed (percent-decoded).
#[derive(Debug, Clone)]
pub struct PathParam(pub String);

impl<S: Send + Sync> FromRequestParts<S> for PathParam {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let (_, value) = only_path_param(parts, state).await?;
        Ok(PathParam(value))
    }
}

/// A route's only path parameter as an id: anything but an integer is a 400 naming it.
#[derive(Debug, Clone, Copy)]
pub struct PathId(pub i64);

impl<S: Send + Sync> FromRequestParts<S> for PathId {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let (name, value) = only_path_param(parts, state).await?;
        value.parse().map(PathId).map_err(|_| {
            ApiError::BadRequest(format!(
                "path parameter `{name}` must be an integer id, not `{value}`"
            ))
        })
    }
}

async fn only_path_param<S: Send + Sync>(
    parts: &mut Parts,
    state: &S,
) -> Result<(String, String), ApiError> {
    let params = RawPathParams::from_request_parts(parts, state)
        .await
        .map_err(|e| ApiError::BadRequest(e.body_text()))?;
    params
        .iter()
        .next()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .ok_or_else(|| ApiError::Internal(anyhow::anyhow!("route has no path parameter")))
}

/// Parses a query parameter, naming it in the error.
pub fn query_param<T: FromStr>(
    name: &str,
    value: Option<&str>,
    expected: &str,
) -> Result<Option<T>, ApiError> {
    match value {
        None | Some("") => Ok(None),
        Some(v) => v.parse().map(Some).map_err(|_| {
            ApiError::BadRequest(format!(
                "query parameter `{name}` must be {expected}, not `{v}`"
            ))
        }),
    }
}

/// A count from 1 in a query parameter, capped at `max`: any larger integer, however
/// large, reads as `max` (the document states no maximum, and a client need not know
/// the cap). `None` when absent.
pub fn capped_count(name: &str, value: Option<&str>, max: u32) -> Result<Option<u32>, ApiError> {
    let Some(v) = value.filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    if !v.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ApiError::BadRequest(format!(
            "query parameter `{name}` must be a positive integer, not `{v}`"
        )));
    }
    if v.bytes().all(|b| b == b'0') {
        return Err(ApiError::BadRequest(format!(
            "query parameter `{name}` must be at least 1"
        )));
    }
    Ok(Some(v.parse::<u32>().map_or(max, |n| n.min(max))))
}

/// A query parameter that must be `true` or `false`.
pub fn query_flag(name: &str, value: Option<&str>) -> Result<bool, ApiError> {
    Ok(query_param(name, value, "`true` or `false`")?.unwrap_or(false))
}

/// The `limit` and `after` of a list, as given: handlers read them with a [`Query`] of
/// their own, next to the list's filters.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PageQuery {
    /// Items per page: 50 by default; a limit over 1,000 is capped.
    #[param(value_type = Option<u64>, minimum = 1, default = 50)]
    limit: Option<String>,
    /// The `next` cursor of the previous page.
    #[param(pattern = "^[0-9]{1,18}$")]
    after: Option<String>,
}

impl PageQuery {
    pub fn parse(&self) -> Result<PageParams, ApiError> {
        PageParams::parse(self.limit.as_deref(), self.after.as_deref())
    }
}

/// `limit` and `after` of a list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageParams {
    pub limit: u32,
    pub before_id: Option<i64>,
}

impl PageParams {
    pub const DEFAULT_LIMIT: u32 = 50;
    pub const MAX_LIMIT: u32 = 1000;

    /// Default 50; over 1,000 is capped; 0 is a 400.
    pub fn parse(limit: Option<&str>, after: Option<&str>) -> Result<Self, ApiError> {
        let limit = capped_count("limit", limit, Self::MAX_LIMIT)?.unwrap_or(Self::DEFAULT_LIMIT);
        let cursor = after.filter(|a| !a.is_empty());
        if cursor.is_some_and(|a| a.len() > 18 || !a.bytes().all(|b| b.is_ascii_digit())) {
            return Err(ApiError::BadRequest(format!(
                "query parameter `after` must be the `next` cursor of a previous page, not `{}`",
                cursor.unwrap_or_default()
            )));
        }
        let before_id = query_param("after", cursor, "the `next` cursor of a previous page")?;
        Ok(PageParams { limit, before_id })
    }
}

pub use crate::usecase::fields::{NameOrId, nullable};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_params_default_cap_and_errors() {
        assert_eq!(
            PageParams::parse(None, None).unwrap(),
            PageParams {
                limit: 50,
                before_id: None
            }
        );
        assert_eq!(
            PageParams::parse(Some("5000"), Some("7")).unwrap(),
            PageParams {
                limit: 1000,
                before_id: Some(7)
            }
        );
        assert!(PageParams::parse(Some("0"), None).is_err());
        assert!(
            PageParams::parse(Some("-1"), None)
                .unwrap_err()
                .to_string()
                .contains("`limit`")
        );
        assert!(
            PageParams::parse(None, Some("x"))
                .unwrap_err()
                .to_string()
                .contains("`after`")
        );
    }

    #[test]
    fn name_or_id_reads_numbers_and_strings() {
        assert_eq!(
            serde_json::from_str::<NameOrId>("42").unwrap(),
            NameOrId::Id(42)
        );
        assert_eq!(
            serde_json::from_str::<NameOrId>("\"42\"").unwrap(),
            NameOrId::Name("42".into())
        );
        assert!(serde_json::from_str::<NameOrId>("1.5").is_err());
        assert!(serde_json::from_str::<NameOrId>("18446744073709551615").is_err());
    }

    #[test]
    fn json_content_types() {
        let with = |v: &'static str| {
            let mut h = HeaderMap::new();
            h.insert(header::CONTENT_TYPE, v.parse().unwrap());
            is_json(&h)
        };
        assert!(with("application/json"));
        assert!(with("Application/JSON; charset=utf-8"));
        assert!(with("application/merge-patch+json"));
        assert!(!with("text/plain"));
        assert!(!is_json(&HeaderMap::new()));
    }
}
