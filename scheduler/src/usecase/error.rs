//! The one error of the use cases: what went wrong, in words a user can act on, and its
//! kind. The REST API answers it as `{"error": "…"}` with the kind's HTTP status (mapped
//! in `crate::status`, not here: a use case knows nothing of HTTP); the console shows it
//! beside the form field or on an error page.

use crate::ports::NodeError;
use crate::store;

#[derive(Debug, thiserror::Error)]
pub enum Error {
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
    /// Something Rota depends on (an executor, the database) cannot take the request now;
    /// trying later may work.
    #[error("{0}")]
    Unavailable(String),
    /// The database's disk is full: nothing was stored; retrying once space is freed works.
    #[error("{0}")]
    InsufficientStorage(String),
    /// Something Rota called for the user (an alarm channel's endpoint) refused or failed;
    /// the message says how.
    #[error("{0}")]
    BadGateway(String),
    /// A bug or a database failure: logged with its cause, answered generically.
    #[error(transparent)]
    Internal(#[from] anyhow::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
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
            Self::InsufficientStorage(_) => Self::InsufficientStorage(message),
            Self::BadGateway(_) => Self::BadGateway(message),
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

impl From<crate::access::Denied> for Error {
    fn from(d: crate::access::Denied) -> Self {
        match d {
            crate::access::Denied::NotFound(m) => Self::NotFound(m),
            crate::access::Denied::Forbidden(m) => Self::Forbidden(m),
        }
    }
}

impl From<store::Error> for Error {
    fn from(e: store::Error) -> Self {
        match e {
            store::Error::NotFound(what) => Self::NotFound(format!("{what} not found")),
            store::Error::Conflict(m) => Self::Conflict(m),
            store::Error::Changed(what) => Self::Conflict(format!(
                "{what} changed while this request was served; send it again"
            )),
            store::Error::Fenced => Self::Unavailable(
                "this scheduler node was taken over by another; use another node".into(),
            ),
            e if e.exhausted().is_some() => {
                tracing::warn!(error = %e, "a request met a database out of a resource");
                let not_stored = "it was not stored: retry it once the database can write \
                                  again (a task `key` makes a retry safe)";
                match e.exhausted() {
                    Some(store::Exhausted::Space) => Self::InsufficientStorage(format!(
                        "{}; {not_stored}",
                        store::Exhausted::Space
                    )),
                    _ => Self::Unavailable(format!("{}; {not_stored}", store::Exhausted::ReadOnly)),
                }
            }
            e if e.is_transient() => {
                tracing::warn!(error = %e, "a request met a database it could not use now");
                Self::Unavailable(format!(
                    "the database could not take this request now ({e}); it was not acknowledged: \
                     retry it (a task `key` makes a retry safe)"
                ))
            }
            other => Self::Internal(other.into()),
        }
    }
}

impl From<NodeError> for Error {
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
