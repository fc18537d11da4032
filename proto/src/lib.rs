//! What Rota's scheduler and executor say to each other, defined once.
//!
//! The scheduler dispatches runs to executors over HTTP and executors report back over
//! HTTP; both sides depend on this crate for the paths, the JSON bodies and the request
//! signing, so the two can never drift apart. It has no I/O and no async: the HTTP
//! clients and servers live in `rota-scheduler` and `rota-executor`.
//!
//! `docs/protocol.md` describes the protocol end to end (endpoints, heartbeat, batching,
//! idempotency, crash reconcile).
//!
//! # Layout
//!
//! - [`wire`]: the endpoint paths and every request and answer body
//!   ([`Trigger`], [`RunReport`], [`Registration`], …), serde types with a pinned JSON
//!   shape.
//! - [`allow`]: a job's HTTP allow-list (which URLs a plugin may reach), parsed and
//!   matched the same way on both sides.
//! - [`sign`](mod@sign): HMAC-SHA256 request signing with per-app keys and replay protection
//!   ([`sign_now`], [`verify_once`], [`ReplayGuard`], [`app_secret`], [`Secret`]) and its
//!   headers.

pub mod allow;
pub mod sign;
pub mod wire;

pub use sign::{
    HEADER_APP, HEADER_NONCE, HEADER_SIGNATURE, HEADER_TIMESTAMP, MAX_NONCES, MAX_SKEW_MS,
    Received, ReplayGuard, Secret, SignatureError, SignedHeaders, app_secret, sign, sign_now,
    verify, verify_once, webhook_signature,
};
pub use wire::{
    BeatAck, BlockStrategy, CallbackAck, CallbackBatch, Deregistration, ErrorBody, IdleBeatAck,
    IdleBeatRequest, KillAck, KillRequest, KnownRun, LogPage, LogRequest, PluginRef, Registration,
    RegistrationAck, ReportStatus, RunReport, RunsKnownAck, RunsKnownRequest, TaskAttempt, Trigger,
    TriggerAck, TriggerBatch, TriggerBatchAck, TriggerOutcome, UnknownBlockStrategy, WarmRequest,
};

/// An error with its sources, `outer: inner: …`: HTTP clients hide the useful part
/// (connection refused, timed out) there.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(inner) = source {
        text.push_str(": ");
        text.push_str(&inner.to_string());
        source = inner.source();
    }
    text
}
