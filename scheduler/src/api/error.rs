//! How a use-case [`Error`](crate::usecase::Error) is answered over HTTP, and the errors of
//! reading a request (its body, JSON and query string) as the same type.

use axum::extract::rejection::{BytesRejection, JsonRejection, QueryRejection};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

pub use crate::usecase::Error as ApiError;

pub type ApiResult<T> = Result<T, ApiError>;

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = crate::status::http_status(&self);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::http_status as status;
    use crate::store;

    #[test]
    fn a_database_that_cannot_take_a_request_now_is_a_503_not_a_500() {
        let broken = store::Error::Database(sqlx::Error::Io(std::io::Error::other("reset")));
        let e = ApiError::from(broken);
        assert_eq!(status(&e), StatusCode::SERVICE_UNAVAILABLE, "{e}");
        assert!(e.to_string().contains("retry it"), "{e}");
        let busy = store::Error::Database(sqlx::Error::PoolTimedOut);
        assert_eq!(
            status(&ApiError::from(busy)),
            StatusCode::SERVICE_UNAVAILABLE
        );
        let corrupt = store::Error::Corrupt("bad row".into());
        assert_eq!(
            status(&ApiError::from(corrupt)),
            StatusCode::INTERNAL_SERVER_ERROR
        );
    }
}
