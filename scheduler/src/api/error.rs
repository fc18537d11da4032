//! How a use-case [`Error`](crate::usecase::Error) is answered over HTTP, and the errors of
//! reading a request (its body, JSON and query string) as the same type.

use axum::extract::rejection::{BytesRejection, JsonRejection, QueryRejection};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

pub use crate::usecase::Error as ApiError;

pub type ApiResult<T> = Result<T, ApiError>;

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
