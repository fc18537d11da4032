//! The one error type every handler returns: a status and a message a user can act on,
//! answered as `{"error": "…"}` (the shape of [`rota_proto::ErrorBody`]).

use axum::extract::rejection::{BytesRejection, JsonRejection, QueryRejection};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::node::NodeError;
use crate::store;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The request is malformed: bad JSON, a wrong type, an unknown field, a bad path or
    /// query parameter.
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    Unauthorized(String),
    /// Signed in, but this principal may not do it (the message says which role would).
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    MethodNotAllowed(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    PayloadTooLarge(String),
    /// Well-formed but invalid: a value out of range, a cron expression that does not
    /// parse, a reference to something that does not exist.
    #[error("{0}")]
    Unprocessable(String),
    /// Something Rota depends on (an executor) did not answer; trying later may work.
    #[error("{0}")]
    Unavailable(String),
    /// A bug or a database failure: logged with its cause, answered generically.
    #[error(transparent)]
    Internal(#[from] anyhow::Error),
}

pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    pub fn status(&self) -> StatusCode {
        match self {
            Self::BadRequest(_) => StatusCode::BAD_REQUEST,
            Self::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            Self::Forbidden(_) => StatusCode::FORBIDDEN,
            Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            Self::Conflict(_) => StatusCode::CONFLICT,
            Self::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Self::Unprocessable(_) => StatusCode::UNPROCESSABLE_ENTITY,
            Self::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The same kind of error with another message (an internal error keeps its cause).
    pub fn with_message(self, message: String) -> Self {
        match self {
            Self::BadRequest(_) => Self::BadRequest(message),
            Self::Unauthorized(_) => Self::Unauthorized(message),
            Self::Forbidden(_) => Self::Forbidden(message),
            Self::NotFound(_) => Self::NotFound(message),
            Self::MethodNotAllowed(_) => Self::MethodNotAllowed(message),
            Self::Conflict(_) => Self::Conflict(message),
            Self::PayloadTooLarge(_) => Self::PayloadTooLarge(message),
            Self::Unprocessable(_) => Self::Unprocessable(message),
            Self::Unavailable(_) => Self::Unavailable(message),
            Self::Internal(e) => Self::Internal(e),
        }
    }

    /// Puts `prefix` before the message of a client error, so an error about one item of a
    /// batch names the item (`tasks[17].` + `delay_ms: …`).
    pub fn prefixed(self, prefix: &str) -> Self {
        let p = |m: String| format!("{prefix}{m}");
        match self {
            Self::BadRequest(m) => Self::BadRequest(p(m)),
            Self::NotFound(m) => Self::NotFound(p(m)),
            Self::Conflict(m) => Self::Conflict(p(m)),
            Self::PayloadTooLarge(m) => Self::PayloadTooLarge(p(m)),
            Self::Unprocessable(m) => Self::Unprocessable(p(m)),
            other => other,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let error = match self {
            Self::Internal(e) => {
                tracing::error!(error = %format!("{e:#}"), "request failed");
                "internal error; the cause is in the scheduler's log".to_owned()
            }
            other => other.to_string(),
        };
        (status, axum::Json(rota_proto::ErrorBody { error })).into_response()
    }
}

impl From<store::Error> for ApiError {
    fn from(e: store::Error) -> Self {
        match e {
            store::Error::NotFound(what) => Self::NotFound(format!("{what} not found")),
            store::Error::Conflict(m) => Self::Conflict(m),
            store::Error::Fenced => Self::Unavailable(
                "this scheduler node was taken over by another; use another node".into(),
            ),
            other => Self::Internal(other.into()),
        }
    }
}

impl From<NodeError> for ApiError {
    fn from(e: NodeError) -> Self {
        match e {
            NodeError::NoExecutor(_) => Self::Conflict(e.to_string()),
            NodeError::Client(_) | NodeError::OwnerUnreachable { .. } => {
                Self::Unavailable(e.to_string())
            }
            NodeError::Store(e) => e.into(),
        }
    }
}

impl From<BytesRejection> for ApiError {
    fn from(r: BytesRejection) -> Self {
        match r {
            BytesRejection::FailedToBufferBody(f)
                if f.status() == StatusCode::PAYLOAD_TOO_LARGE =>
            {
                Self::PayloadTooLarge("request body is larger than this server accepts".into())
            }
            other => Self::BadRequest(format!(
                "could not read the request body: {}",
                cause(&other)
            )),
        }
    }
}

impl From<JsonRejection> for ApiError {
    fn from(r: JsonRejection) -> Self {
        match r {
            JsonRejection::JsonDataError(e) => {
                Self::BadRequest(format!("invalid JSON body: {}", cause(&e)))
            }
            JsonRejection::JsonSyntaxError(e) => {
                Self::BadRequest(format!("malformed JSON body: {}", cause(&e)))
            }
            JsonRejection::MissingJsonContentType(_) => Self::BadRequest(NOT_JSON.into()),
            JsonRejection::BytesRejection(e) => e.into(),
            other => Self::BadRequest(other.body_text()),
        }
    }
}

impl From<QueryRejection> for ApiError {
    fn from(r: QueryRejection) -> Self {
        Self::BadRequest(format!("invalid query string: {}", cause(&r)))
    }
}

pub(crate) const NOT_JSON: &str = "expected a JSON body with `Content-Type: application/json`";

/// The innermost useful message of an axum rejection: serde's, with its field path and
/// position, rather than axum's generic headline.
fn cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut inner = e;
    while let Some(source) = inner.source() {
        inner = source;
    }
    inner.to_string()
}
