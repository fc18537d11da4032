//! Request signing between the scheduler and its executors.
//!
//! Every request in either direction carries two headers:
//!
//! - [`HEADER_TIMESTAMP`]: the sender's clock, epoch milliseconds in decimal;
//! - [`HEADER_SIGNATURE`]: lower-case hex of HMAC-SHA256, keyed with the shared executor
//!   secret (`ROTA_EXECUTOR_SECRET`), over the canonical string
//!
//! ```text
//! {METHOD}\n{path_and_query}\n{timestamp_ms}\n{hex(sha256(body))}
//! ```
//!
//! `METHOD` is the HTTP method exactly as sent (`POST`, `GET`; methods are case-sensitive
//! in HTTP, so no normalisation happens), `path_and_query` the request target without
//! scheme and host (`/trigger`, `/api/executor/v1/plugins/ab12…`), and the body hash is
//! that of the exact bytes on the wire (the empty string's hash for an empty body).
//!
//! Binding the method, the target and the body means a captured signature cannot be
//! moved to another endpoint or another payload; binding the timestamp, checked against
//! [`MAX_SKEW_MS`], bounds how long a captured request can be replayed. Replays inside
//! that window are harmless because every endpoint is idempotent (see `docs/protocol.md`).

use std::fmt;

use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};

/// Header carrying the sender's clock in epoch milliseconds.
pub const HEADER_TIMESTAMP: &str = "x-rota-timestamp";
/// Header carrying the lower-case hex HMAC-SHA256 of the canonical string.
pub const HEADER_SIGNATURE: &str = "x-rota-signature";
/// How far a request's timestamp may be from the receiver's clock, either way.
pub const MAX_SKEW_MS: i64 = 60_000;

/// Length of a hex-encoded HMAC-SHA256.
const SIGNATURE_HEX_LEN: usize = 64;
/// Longest header value echoed back in an error message.
const ECHO_MAX: usize = 32;

type HmacSha256 = Hmac<Sha256>;

/// The shared secret between the scheduler and its executors.
///
/// A newtype so the secret never reaches a log by accident: `Debug` prints
/// `Secret(***)` and there is no `Display`.
#[derive(Clone)]
pub struct Secret(Vec<u8>);

impl Secret {
    pub fn new(secret: impl Into<Vec<u8>>) -> Self {
        Self(secret.into())
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// Why a signed request was refused. The messages are meant for the operator reading the
/// receiver's answer or log; none of them reveals the expected signature.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error(
        "missing `{HEADER_TIMESTAMP}` header: requests between scheduler and executor must be signed"
    )]
    MissingTimestamp,
    #[error(
        "missing `{HEADER_SIGNATURE}` header: requests between scheduler and executor must be signed"
    )]
    MissingSignature,
    #[error("`{HEADER_TIMESTAMP}` header `{0}` is not a time in epoch milliseconds")]
    InvalidTimestamp(String),
    #[error(
        "request timestamp is {} away from the server clock (max {}); check that both hosts keep their clocks in sync",
        secs_ceil(*skew_ms),
        duration(*max_skew_ms)
    )]
    Skew { skew_ms: u64, max_skew_ms: u64 },
    #[error("`{HEADER_SIGNATURE}` header is not {SIGNATURE_HEX_LEN} hex characters")]
    MalformedSignature,
    #[error(
        "request signature does not match: check that the scheduler and the executor share the same ROTA_EXECUTOR_SECRET"
    )]
    Mismatch,
}

/// Signs a request: the value of [`HEADER_SIGNATURE`] for these parts.
pub fn sign(
    secret: &[u8],
    method: &str,
    path_and_query: &str,
    timestamp_ms: i64,
    body: &[u8],
) -> String {
    hex::encode(
        mac(secret, method, path_and_query, timestamp_ms, body)
            .finalize()
            .into_bytes(),
    )
}

/// Checks a request's signature headers, in the order a client can fix them: presence,
/// timestamp format, clock skew, signature format, then the signature itself (compared in
/// constant time).
#[allow(clippy::too_many_arguments)] // mirrors `sign` plus what the receiver knows
pub fn verify(
    secret: &[u8],
    method: &str,
    path_and_query: &str,
    timestamp: Option<&str>,
    signature: Option<&str>,
    body: &[u8],
    now_ms: i64,
    max_skew_ms: i64,
) -> Result<(), SignatureError> {
    let timestamp = timestamp.ok_or(SignatureError::MissingTimestamp)?;
    let signature = signature.ok_or(SignatureError::MissingSignature)?;
    let timestamp_ms: i64 = timestamp
        .trim()
        .parse()
        .map_err(|_| SignatureError::InvalidTimestamp(echo(timestamp)))?;
    let max_skew_ms = u64::try_from(max_skew_ms).unwrap_or(0);
    let skew_ms = now_ms.abs_diff(timestamp_ms);
    if skew_ms > max_skew_ms {
        return Err(SignatureError::Skew {
            skew_ms,
            max_skew_ms,
        });
    }
    let signature = signature.trim();
    if signature.len() != SIGNATURE_HEX_LEN {
        return Err(SignatureError::MalformedSignature);
    }
    let expected = hex::decode(signature).map_err(|_| SignatureError::MalformedSignature)?;
    mac(secret, method, path_and_query, timestamp_ms, body)
        .verify_slice(&expected)
        .map_err(|_| SignatureError::Mismatch)
}

/// HMAC-SHA256 fed with the canonical string, without building it in one allocation.
fn mac(
    secret: &[u8],
    method: &str,
    path_and_query: &str,
    timestamp_ms: i64,
    body: &[u8],
) -> HmacSha256 {
    let mut mac = HmacSha256::new_from_slice(secret).expect("HMAC accepts keys of any length");
    mac.update(method.as_bytes());
    mac.update(b"\n");
    mac.update(path_and_query.as_bytes());
    mac.update(b"\n");
    mac.update(timestamp_ms.to_string().as_bytes());
    mac.update(b"\n");
    mac.update(hex::encode(Sha256::digest(body)).as_bytes());
    mac
}

/// A header value as it may appear in an error: bounded, so a hostile client cannot make
/// the server log or echo megabytes.
fn echo(value: &str) -> String {
    match value.char_indices().nth(ECHO_MAX) {
        Some((end, _)) => format!("{}…", &value[..end]),
        None => value.to_owned(),
    }
}

/// Whole seconds, rounded up so a refused skew never reads as equal to the maximum.
fn secs_ceil(ms: u64) -> String {
    format!("{} s", ms.div_ceil(1000))
}

fn duration(ms: u64) -> String {
    if ms.is_multiple_of(1000) {
        format!("{} s", ms / 1000)
    } else {
        format!("{ms} ms")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"s3cret";
    const NOW: i64 = 1_767_225_600_000; // 2026-01-01T00:00:00Z
    const BODY: &[u8] = br#"{"triggers":[]}"#;

    fn check(
        method: &str,
        path: &str,
        timestamp: i64,
        signature: &str,
        body: &[u8],
    ) -> Result<(), SignatureError> {
        verify(
            SECRET,
            method,
            path,
            Some(&timestamp.to_string()),
            Some(signature),
            body,
            NOW,
            MAX_SKEW_MS,
        )
    }

    #[test]
    fn round_trip() {
        let sig = sign(SECRET, "POST", "/trigger", NOW, BODY);
        assert_eq!(sig.len(), 64);
        assert!(
            sig.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        );
        assert_eq!(check("POST", "/trigger", NOW, &sig, BODY), Ok(()));
    }

    /// Pins the canonical string so another implementation can test against it.
    #[test]
    fn known_vector() {
        let canonical = format!(
            "POST\n/trigger\n{NOW}\n{}",
            hex::encode(Sha256::digest(BODY))
        );
        let mut mac = HmacSha256::new_from_slice(SECRET).unwrap();
        mac.update(canonical.as_bytes());
        let expected = hex::encode(mac.finalize().into_bytes());
        assert_eq!(sign(SECRET, "POST", "/trigger", NOW, BODY), expected);
        assert_eq!(
            expected,
            "fe7fbdfdf891fb0a202bf01925cb87062743ba0be78318d56bcb56a1ae092de8"
        );
    }

    #[test]
    fn empty_body_is_signed_too() {
        let sig = sign(SECRET, "GET", "/api/executor/v1/plugins/ab", NOW, b"");
        assert_eq!(
            check("GET", "/api/executor/v1/plugins/ab", NOW, &sig, b""),
            Ok(())
        );
        assert_eq!(
            check("GET", "/api/executor/v1/plugins/ab", NOW, &sig, b" "),
            Err(SignatureError::Mismatch)
        );
    }

    #[test]
    fn any_changed_part_is_refused() {
        let sig = sign(SECRET, "POST", "/trigger?x=1", NOW, BODY);
        let mut body = BODY.to_vec();
        body[3] ^= 1;
        let cases = [
            ("POST", "/trigger?x=1", NOW, body.as_slice(), "body"),
            ("POST", "/trigger?x=2", NOW, BODY, "query"),
            ("POST", "/triggex?x=1", NOW, BODY, "path"),
            ("PUT", "/trigger?x=1", NOW, BODY, "method"),
            ("post", "/trigger?x=1", NOW, BODY, "method case"),
            ("POST", "/trigger?x=1", NOW + 1, BODY, "timestamp"),
        ];
        for (method, path, ts, body, what) in cases {
            assert_eq!(
                check(method, path, ts, &sig, body),
                Err(SignatureError::Mismatch),
                "changed {what}"
            );
        }
        let other = verify(
            b"other secret",
            "POST",
            "/trigger?x=1",
            Some(&NOW.to_string()),
            Some(&sig),
            BODY,
            NOW,
            MAX_SKEW_MS,
        );
        assert_eq!(other, Err(SignatureError::Mismatch));
        // One flipped hex digit in the signature itself.
        let mut bad = sig.clone().into_bytes();
        bad[0] = if bad[0] == b'0' { b'1' } else { b'0' };
        let bad = String::from_utf8(bad).unwrap();
        assert_eq!(
            check("POST", "/trigger?x=1", NOW, &bad, BODY),
            Err(SignatureError::Mismatch)
        );
    }

    #[test]
    fn skew_is_bounded_both_ways() {
        for ts in [NOW - MAX_SKEW_MS, NOW + MAX_SKEW_MS] {
            let sig = sign(SECRET, "POST", "/beat", ts, b"");
            assert_eq!(check("POST", "/beat", ts, &sig, b""), Ok(()));
        }
        for ts in [NOW - 75_000, NOW + 75_000] {
            let sig = sign(SECRET, "POST", "/beat", ts, b"");
            let err = check("POST", "/beat", ts, &sig, b"").unwrap_err();
            assert_eq!(
                err,
                SignatureError::Skew {
                    skew_ms: 75_000,
                    max_skew_ms: 60_000
                }
            );
            assert!(
                err.to_string()
                    .starts_with("request timestamp is 75 s away from the server clock (max 60 s)"),
                "{err}"
            );
        }
        // Just over the limit reads as over it, not as equal to it.
        let ts = NOW - MAX_SKEW_MS - 1;
        let sig = sign(SECRET, "POST", "/beat", ts, b"");
        let err = check("POST", "/beat", ts, &sig, b"").unwrap_err();
        assert!(err.to_string().contains("61 s away"), "{err}");
        // Extreme values neither overflow nor pass.
        let sig = sign(SECRET, "POST", "/beat", i64::MIN, b"");
        assert!(matches!(
            check("POST", "/beat", i64::MIN, &sig, b""),
            Err(SignatureError::Skew { .. })
        ));
    }

    #[test]
    fn missing_and_malformed_headers() {
        let sig = sign(SECRET, "POST", "/beat", NOW, b"");
        let ts = NOW.to_string();
        let run = |ts: Option<&str>, sig: Option<&str>| {
            verify(SECRET, "POST", "/beat", ts, sig, b"", NOW, MAX_SKEW_MS)
        };
        assert_eq!(run(None, Some(&sig)), Err(SignatureError::MissingTimestamp));
        assert_eq!(run(Some(&ts), None), Err(SignatureError::MissingSignature));
        assert_eq!(run(None, None), Err(SignatureError::MissingTimestamp));
        assert_eq!(
            run(Some("yesterday"), Some(&sig)),
            Err(SignatureError::InvalidTimestamp("yesterday".into()))
        );
        assert_eq!(
            run(Some(""), Some(&sig)),
            Err(SignatureError::InvalidTimestamp(String::new()))
        );
        assert_eq!(
            run(Some(&ts), Some("zz")),
            Err(SignatureError::MalformedSignature)
        );
        assert_eq!(
            run(Some(&ts), Some(&"g".repeat(64))),
            Err(SignatureError::MalformedSignature)
        );
        assert_eq!(
            run(Some(&ts), Some(&sig[..62])),
            Err(SignatureError::MalformedSignature)
        );
        // Upper-case hex is the same signature.
        assert_eq!(run(Some(&ts), Some(&sig.to_uppercase())), Ok(()));
    }

    #[test]
    fn echoed_values_are_bounded() {
        let long = "9x".repeat(10_000);
        let err = verify(
            SECRET,
            "POST",
            "/beat",
            Some(&long),
            Some("00"),
            b"",
            NOW,
            MAX_SKEW_MS,
        )
        .unwrap_err();
        assert!(err.to_string().len() < 150, "{err}");
    }

    #[test]
    fn secret_is_redacted() {
        let secret = Secret::new("hunter2");
        assert_eq!(format!("{secret:?}"), "Secret(***)");
        assert_eq!(format!("{:?}", Some(secret.clone())), "Some(Secret(***))");
        assert_eq!(secret.as_bytes(), b"hunter2");
    }
}
