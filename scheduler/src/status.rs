//! How a use case's error reads over HTTP: its status, the same through both doors (the
//! REST API answers with it and `{"error": "…"}`, the console with it and an error page).

use axum::http::StatusCode;

use crate::usecase::Error;

/// The HTTP status that answers `e`: the REST API's and the console's.
pub fn http_status(e: &Error) -> StatusCode {
    match e {
        Error::BadRequest(_) => StatusCode::BAD_REQUEST,
        Error::Unauthorized(_) => StatusCode::UNAUTHORIZED,
        Error::Forbidden(_) => StatusCode::FORBIDDEN,
        Error::NotFound(_) => StatusCode::NOT_FOUND,
        Error::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
        Error::Conflict(_) => StatusCode::CONFLICT,
        Error::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
        Error::Unprocessable(_) => StatusCode::UNPROCESSABLE_ENTITY,
        Error::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        Error::InsufficientStorage(_) => StatusCode::INSUFFICIENT_STORAGE,
        Error::BadGateway(_) => StatusCode::BAD_GATEWAY,
        Error::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
    }
}
