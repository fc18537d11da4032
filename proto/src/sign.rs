//! Request signing between the scheduler and its executors.
//!
//! Every request in either direction carries three headers:
//!
//! - [`HEADER_TIMESTAMP`]: the sender's clock, epoch milliseconds in decimal;
//! - [`HEADER_NONCE`]: 32 lower-case hex characters, random per request;
//! - [`HEADER_SIGNATURE`]: lower-case hex of HMAC-SHA256 over the canonical string
//!
//! ```text
//! {METHOD}\n{path_and_query}\n{timestamp_ms}\n{nonce}\n{hex(sha256(body))}
//! ```
//!
//! `METHOD` is the HTTP method exactly as sent (`POST`, `GET`; methods are case-sensitive
//! in HTTP, so no normalisation happens), `path_and_query` the request target without
//! scheme and host (`/trigger`, `/api/executor/v1/plugins/ab12…`), and the body hash is
//! that of the exact bytes on the wire (the empty string's hash for an empty body).
//!
//! Binding the method, the target and the body means a captured signature cannot be
//! moved to another endpoint or another payload. Binding the timestamp, checked against
//! [`MAX_SKEW_MS`], bounds how long a captured request stays valid, and the receiver's
//! [`ReplayGuard`] remembers every nonce it accepted for longer than that, so a request is
//! acted on at most once by each receiver.
//!
//! # Keys
//!
//! Executors of app `A` sign with `A`'s key, [`app_secret`]`(master, "A")`, and say which
//! app they sign for in [`HEADER_APP`]; the scheduler derives the same key from its master
//! secret (`ROTA_EXECUTOR_SECRET` on a scheduler node) and signs what it sends to `A`'s
//! executors with it. An executor therefore holds only its own app's key: it can neither
//! act as another app's executor nor derive the master. Scheduler nodes sign calls to one
//! another with the master itself, without [`HEADER_APP`].

use std::collections::HashSet;
use std::fmt;
use std::sync::Mutex;

use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};

/// Header carrying the sender's clock in epoch milliseconds.
pub const HEADER_TIMESTAMP: &str = "x-rota-timestamp";
/// Header carrying the lower-case hex HMAC-SHA256 of the canonical string.
pub const HEADER_SIGNATURE: &str = "x-rota-signature";
/// Header carrying the request's nonce: 32 lower-case hex characters, never reused.
pub const HEADER_NONCE: &str = "x-rota-nonce";
/// Header naming the app whose key signed an executor's request to a scheduler.
pub const HEADER_APP: &str = "x-rota-app";
/// How far a request's timestamp may be from the receiver's clock, either way.
pub const MAX_SKEW_MS: i64 = 60_000;

/// Length of a hex-encoded nonce (128 random bits).
const NONCE_HEX_LEN: usize = 32;
/// Length of a hex-encoded HMAC-SHA256.
const SIGNATURE_HEX_LEN: usize = 64;
/// Longest header value echoed back in an error message.
const ECHO_MAX: usize = 32;

type HmacSha256 = Hmac<Sha256>;

/// A signing key: the scheduler's master secret or one app's key ([`app_secret`]).
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
    #[error(
        "missing `{HEADER_NONCE}` header: requests between scheduler and executor carry a fresh nonce each"
    )]
    MissingNonce,
    #[error("`{HEADER_NONCE}` header is not {NONCE_HEX_LEN} lower-case hex characters")]
    MalformedNonce,
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
        "request signature does not match: check that the executor's ROTA_EXECUTOR_SECRET is its app's key (`rota app-key`) derived from the scheduler's ROTA_EXECUTOR_SECRET"
    )]
    Mismatch,
    #[error("request replayed: its nonce was used already")]
    Replayed,
    #[error(
        "too many signed requests lately ({0} remembered to refuse their replays); try again shortly"
    )]
    Overloaded(usize),
}

impl SignatureError {
    /// The receiver is too busy to check this request; nothing is wrong with it, and the
    /// sender may retry (a 503 rather than a 401).
    pub fn is_overload(&self) -> bool {
        matches!(self, SignatureError::Overloaded(_))
    }
}

/// The signing headers of one request, as sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedHeaders {
    pub timestamp: String,
    pub nonce: String,
    pub signature: String,
}

impl SignedHeaders {
    /// `(name, value)` pairs, ready for a request builder.
    pub fn pairs(&self) -> [(&'static str, &str); 3] {
        [
            (HEADER_TIMESTAMP, &self.timestamp),
            (HEADER_NONCE, &self.nonce),
            (HEADER_SIGNATURE, &self.signature),
        ]
    }
}

/// The key of `app`'s executors, derived from the master secret: the hex of
/// HMAC-SHA256(master, `rota/app-key/v1\n{app}`). Deterministic, so every scheduler node
/// derives the same key and nothing needs storing; one-way, so an app's key reveals
/// neither the master nor another app's key.
pub fn app_secret(master: &Secret, app: &str) -> Secret {
    let mut mac = HmacSha256::new_from_slice(master.as_bytes()).expect("HMAC takes any key");
    mac.update(b"rota/app-key/v1\n");
    mac.update(app.as_bytes());
    Secret(hex::encode(mac.finalize().into_bytes()).into_bytes())
}

/// A fresh random nonce.
pub fn new_nonce() -> String {
    hex::encode(rand::random::<[u8; NONCE_HEX_LEN / 2]>())
}

/// Signs a request sent now: a fresh timestamp and nonce, and their signature.
pub fn sign_now(
    secret: &[u8],
    method: &str,
    path_and_query: &str,
    now_ms: i64,
    body: &[u8],
) -> SignedHeaders {
    let nonce = new_nonce();
    let signature = sign(secret, method, path_and_query, now_ms, &nonce, body);
    SignedHeaders {
        timestamp: now_ms.to_string(),
        nonce,
        signature,
    }
}

/// Signs a request: the value of [`HEADER_SIGNATURE`] for these parts.
pub fn sign(
    secret: &[u8],
    method: &str,
    path_and_query: &str,
    timestamp_ms: i64,
    nonce: &str,
    body: &[u8],
) -> String {
    hex::encode(
        mac(secret, method, path_and_query, timestamp_ms, nonce, body)
            .finalize()
            .into_bytes(),
    )
}

/// The signing headers of a received request, as found (each may be missing).
#[derive(Debug, Clone, Copy, Default)]
pub struct Received<'a> {
    pub timestamp: Option<&'a str>,
    pub nonce: Option<&'a str>,
    pub signature: Option<&'a str>,
}

impl<'a> Received<'a> {
    /// Reads the three headers through `header(name)`.
    pub fn from_headers(header: impl Fn(&str) -> Option<&'a str>) -> Self {
        Received {
            timestamp: header(HEADER_TIMESTAMP),
            nonce: header(HEADER_NONCE),
            signature: header(HEADER_SIGNATURE),
        }
    }
}

/// Checks a request's signature headers, in the order a client can fix them: presence,
/// timestamp format, clock skew, nonce and signature formats, then the signature itself
/// (compared in constant time). Whether the nonce was seen before is the
/// [`ReplayGuard`]'s question, asked after this one passes.
pub fn verify(
    secret: &[u8],
    method: &str,
    path_and_query: &str,
    received: &Received<'_>,
    body: &[u8],
    now_ms: i64,
    max_skew_ms: i64,
) -> Result<(), SignatureError> {
    let timestamp = received.timestamp.ok_or(SignatureError::MissingTimestamp)?;
    let nonce = received.nonce.ok_or(SignatureError::MissingNonce)?;
    let signature = received.signature.ok_or(SignatureError::MissingSignature)?;
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
    parse_nonce(nonce).ok_or(SignatureError::MalformedNonce)?;
    let signature = signature.trim();
    if signature.len() != SIGNATURE_HEX_LEN {
        return Err(SignatureError::MalformedSignature);
    }
    let expected = hex::decode(signature).map_err(|_| SignatureError::MalformedSignature)?;
    mac(secret, method, path_and_query, timestamp_ms, nonce, body)
        .verify_slice(&expected)
        .map_err(|_| SignatureError::Mismatch)
}

/// A nonce as a number, if it is exactly 32 lower-case hex characters.
fn parse_nonce(nonce: &str) -> Option<u128> {
    let well_formed = nonce.len() == NONCE_HEX_LEN
        && nonce
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    well_formed
        .then(|| u128::from_str_radix(nonce, 16).ok())
        .flatten()
}

/// The nonces a receiver accepted recently, so that each signed request is acted on at
/// most once.
///
/// A request is valid while its timestamp is within `max_skew` of the receiver's clock, so
/// its first and last acceptable arrivals are at most `2 × max_skew` apart. Nonces are kept
/// in two generations of `2 × max_skew` each, and a nonce is forgotten only when its
/// generation is dropped, at least `2 × max_skew` after it was recorded: by then the
/// request it came with is refused for its timestamp. Memory is bounded by the request
/// rate: 16 bytes (plus the set's overhead) per request over `4 × max_skew`, and capped at
/// [`MAX_NONCES`] remembered ones: beyond it requests are refused as
/// [`SignatureError::Overloaded`] until the older generation is dropped, so a sender with a
/// key cannot exhaust the receiver's memory.
#[derive(Debug)]
pub struct ReplayGuard {
    span_ms: i64,
    max_nonces: usize,
    inner: Mutex<Generations>,
}

/// Most nonces a [`ReplayGuard`] remembers (about 70 MB): 4,000 signed requests a second,
/// sustained over the four minutes a nonce may be kept, fit.
pub const MAX_NONCES: usize = 2_000_000;

#[derive(Debug, Default)]
struct Generations {
    started_at_ms: i64,
    current: HashSet<u128>,
    previous: HashSet<u128>,
}

impl ReplayGuard {
    pub fn new(max_skew_ms: i64) -> Self {
        Self::with_cap(max_skew_ms, MAX_NONCES)
    }

    /// A guard that remembers at most `max_nonces` nonces.
    pub fn with_cap(max_skew_ms: i64, max_nonces: usize) -> Self {
        ReplayGuard {
            span_ms: max_skew_ms.max(1).saturating_mul(2),
            max_nonces,
            inner: Mutex::new(Generations::default()),
        }
    }

    /// Records `nonce`; `Err(Replayed)` if it was recorded before. Call it only for a
    /// request whose signature [`verify`] accepted, so that nobody without the key can
    /// fill the guard.
    pub fn check(&self, nonce: &str, now_ms: i64) -> Result<(), SignatureError> {
        let nonce = parse_nonce(nonce).ok_or(SignatureError::MalformedNonce)?;
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if now_ms.saturating_sub(g.started_at_ms) >= self.span_ms {
            let current = std::mem::take(&mut g.current);
            // A gap of two spans or more leaves nothing worth keeping.
            g.previous = if now_ms.saturating_sub(g.started_at_ms) >= 2 * self.span_ms {
                HashSet::new()
            } else {
                current
            };
            g.started_at_ms = now_ms;
        }
        if g.previous.contains(&nonce) || g.current.contains(&nonce) {
            return Err(SignatureError::Replayed);
        }
        let remembered = g.current.len() + g.previous.len();
        if remembered >= self.max_nonces {
            return Err(SignatureError::Overloaded(remembered));
        }
        g.current.insert(nonce);
        Ok(())
    }

    /// How many nonces are remembered.
    pub fn len(&self) -> usize {
        let g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        g.current.len() + g.previous.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A guard for requests valid within [`MAX_SKEW_MS`].
impl Default for ReplayGuard {
    fn default() -> Self {
        ReplayGuard::new(MAX_SKEW_MS)
    }
}

/// [`verify`], then the [`ReplayGuard`]: what a receiver runs on every signed request.
pub fn verify_once(
    guard: &ReplayGuard,
    secret: &[u8],
    method: &str,
    path_and_query: &str,
    received: &Received<'_>,
    body: &[u8],
    now_ms: i64,
) -> Result<(), SignatureError> {
    verify(
        secret,
        method,
        path_and_query,
        received,
        body,
        now_ms,
        MAX_SKEW_MS,
    )?;
    guard.check(received.nonce.unwrap_or_default(), now_ms)
}

/// HMAC-SHA256 fed with the canonical string, without building it in one allocation.
fn mac(
    secret: &[u8],
    method: &str,
    path_and_query: &str,
    timestamp_ms: i64,
    nonce: &str,
    body: &[u8],
) -> HmacSha256 {
    let mut mac = HmacSha256::new_from_slice(secret).expect("HMAC accepts keys of any length");
    mac.update(method.as_bytes());
    mac.update(b"\n");
    mac.update(path_and_query.as_bytes());
    mac.update(b"\n");
    mac.update(timestamp_ms.to_string().as_bytes());
    mac.update(b"\n");
    mac.update(nonce.as_bytes());
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

/// A webhook's (or a signed alarm channel's) signature, the `x-rota-signature` header:
/// `v1=<hex HMAC-SHA256(secret, timestamp + "." + body)>`, the timestamp in epoch ms as
/// sent in `x-rota-timestamp`. Receivers recompute it over the bytes they received.
pub fn webhook_signature(secret: &[u8], timestamp: i64, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("v1={}", hex::encode(mac.finalize().into_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"s3cret";
    const NOW: i64 = 1_767_225_600_000; // 2026-01-01T00:00:00Z
    const NONCE: &str = "000102030405060708090a0b0c0d0e0f";
    const BODY: &[u8] = br#"{"triggers":[]}"#;

    fn check(
        method: &str,
        path: &str,
        timestamp: i64,
        nonce: &str,
        signature: &str,
        body: &[u8],
    ) -> Result<(), SignatureError> {
        let ts = timestamp.to_string();
        let received = Received {
            timestamp: Some(&ts),
            nonce: Some(nonce),
            signature: Some(signature),
        };
        verify(SECRET, method, path, &received, body, NOW, MAX_SKEW_MS)
    }

    #[test]
    fn round_trip() {
        let sig = sign(SECRET, "POST", "/trigger", NOW, NONCE, BODY);
        assert_eq!(sig.len(), 64);
        assert!(
            sig.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        );
        assert_eq!(check("POST", "/trigger", NOW, NONCE, &sig, BODY), Ok(()));
        let now = sign_now(SECRET, "POST", "/trigger", NOW, BODY);
        assert_eq!(now.timestamp, NOW.to_string());
        assert_eq!(
            check("POST", "/trigger", NOW, &now.nonce, &now.signature, BODY),
            Ok(())
        );
    }

    /// Pins the canonical string so another implementation can test against it.
    #[test]
    fn known_vector() {
        let canonical = format!(
            "POST\n/trigger\n{NOW}\n{NONCE}\n{}",
            hex::encode(Sha256::digest(BODY))
        );
        let mut mac = HmacSha256::new_from_slice(SECRET).unwrap();
        mac.update(canonical.as_bytes());
        let expected = hex::encode(mac.finalize().into_bytes());
        assert_eq!(sign(SECRET, "POST", "/trigger", NOW, NONCE, BODY), expected);
        assert_eq!(
            expected,
            "8ad04231658a70e126fe377227f0d16eacd6e66708d8330cb1ee407d1edb4920"
        );
    }

    #[test]
    fn app_keys_are_derived_one_way_and_differ_per_app() {
        let master = Secret::new("master-secret-0123456789");
        let shop = app_secret(&master, "shop");
        // Pinned, so another implementation can test against it.
        assert_eq!(
            shop.as_bytes(),
            b"39b5bec374204853928e9f4d01874fc882bb95e24f9a3730c33a4ac5db3b164e"
        );
        assert_eq!(shop.as_bytes(), app_secret(&master, "shop").as_bytes());
        assert_ne!(shop.as_bytes(), app_secret(&master, "billing").as_bytes());
        assert_ne!(shop.as_bytes(), master.as_bytes());
        let other = app_secret(&Secret::new("another-master-secret"), "shop");
        assert_ne!(shop.as_bytes(), other.as_bytes());
        // A request signed with one app's key is refused with another's.
        let sig = sign(shop.as_bytes(), "POST", "/trigger", NOW, NONCE, BODY);
        let received = Received {
            timestamp: Some(&NOW.to_string()),
            nonce: Some(NONCE),
            signature: Some(&sig),
        };
        let billing = app_secret(&master, "billing");
        assert_eq!(
            verify(
                billing.as_bytes(),
                "POST",
                "/trigger",
                &received,
                BODY,
                NOW,
                MAX_SKEW_MS
            ),
            Err(SignatureError::Mismatch)
        );
    }

    #[test]
    fn empty_body_is_signed_too() {
        let path = "/api/executor/v1/plugins/ab";
        let sig = sign(SECRET, "GET", path, NOW, NONCE, b"");
        assert_eq!(check("GET", path, NOW, NONCE, &sig, b""), Ok(()));
        assert_eq!(
            check("GET", path, NOW, NONCE, &sig, b" "),
            Err(SignatureError::Mismatch)
        );
    }

    #[test]
    fn any_changed_part_is_refused() {
        let sig = sign(SECRET, "POST", "/trigger?x=1", NOW, NONCE, BODY);
        let other_nonce = "100102030405060708090a0b0c0d0e0f";
        let cases = [
            ("POST", "/trigger?x=2", NOW, NONCE, "query"),
            ("POST", "/triggex?x=1", NOW, NONCE, "path"),
            ("PUT", "/trigger?x=1", NOW, NONCE, "method"),
            ("post", "/trigger?x=1", NOW, NONCE, "method case"),
            ("POST", "/trigger?x=1", NOW + 1, NONCE, "timestamp"),
            ("POST", "/trigger?x=1", NOW, other_nonce, "nonce"),
        ];
        for (method, path, ts, nonce, what) in cases {
            assert_eq!(
                check(method, path, ts, nonce, &sig, BODY),
                Err(SignatureError::Mismatch),
                "changed {what}"
            );
        }
        // Every single byte of the body, flipped one at a time.
        for i in 0..BODY.len() {
            let mut body = BODY.to_vec();
            body[i] ^= 1;
            assert_eq!(
                check("POST", "/trigger?x=1", NOW, NONCE, &sig, &body),
                Err(SignatureError::Mismatch),
                "body byte {i}"
            );
        }
        let ts = NOW.to_string();
        let received = Received {
            timestamp: Some(&ts),
            nonce: Some(NONCE),
            signature: Some(&sig),
        };
        let other = verify(
            b"other secret",
            "POST",
            "/trigger?x=1",
            &received,
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
            check("POST", "/trigger?x=1", NOW, NONCE, &bad, BODY),
            Err(SignatureError::Mismatch)
        );
    }

    #[test]
    fn skew_is_bounded_both_ways() {
        for ts in [NOW - MAX_SKEW_MS, NOW + MAX_SKEW_MS] {
            let sig = sign(SECRET, "POST", "/beat", ts, NONCE, b"");
            assert_eq!(check("POST", "/beat", ts, NONCE, &sig, b""), Ok(()));
        }
        for ts in [NOW - 75_000, NOW + 75_000] {
            let sig = sign(SECRET, "POST", "/beat", ts, NONCE, b"");
            let err = check("POST", "/beat", ts, NONCE, &sig, b"").unwrap_err();
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
        let sig = sign(SECRET, "POST", "/beat", ts, NONCE, b"");
        let err = check("POST", "/beat", ts, NONCE, &sig, b"").unwrap_err();
        assert!(err.to_string().contains("61 s away"), "{err}");
        // Extreme values neither overflow nor pass.
        let sig = sign(SECRET, "POST", "/beat", i64::MIN, NONCE, b"");
        assert!(matches!(
            check("POST", "/beat", i64::MIN, NONCE, &sig, b""),
            Err(SignatureError::Skew { .. })
        ));
    }

    #[test]
    fn missing_and_malformed_headers() {
        let sig = sign(SECRET, "POST", "/beat", NOW, NONCE, b"");
        let ts = NOW.to_string();
        let run = |timestamp: Option<&str>, nonce: Option<&str>, signature: Option<&str>| {
            let received = Received {
                timestamp,
                nonce,
                signature,
            };
            verify(SECRET, "POST", "/beat", &received, b"", NOW, MAX_SKEW_MS)
        };
        let (t, n, s) = (Some(ts.as_str()), Some(NONCE), Some(sig.as_str()));
        assert_eq!(run(None, n, s), Err(SignatureError::MissingTimestamp));
        assert_eq!(run(t, None, s), Err(SignatureError::MissingNonce));
        assert_eq!(run(t, n, None), Err(SignatureError::MissingSignature));
        assert_eq!(run(None, None, None), Err(SignatureError::MissingTimestamp));
        assert_eq!(
            run(Some("yesterday"), n, s),
            Err(SignatureError::InvalidTimestamp("yesterday".into()))
        );
        assert_eq!(
            run(Some(""), n, s),
            Err(SignatureError::InvalidTimestamp(String::new()))
        );
        for nonce in [
            "",
            "abc",
            &NONCE.to_uppercase(),
            &format!("{NONCE}00"),
            &"z".repeat(32),
        ] {
            assert_eq!(
                run(t, Some(nonce), s),
                Err(SignatureError::MalformedNonce),
                "{nonce}"
            );
        }
        assert_eq!(
            run(t, n, Some("zz")),
            Err(SignatureError::MalformedSignature)
        );
        assert_eq!(
            run(t, n, Some(&"g".repeat(64))),
            Err(SignatureError::MalformedSignature)
        );
        assert_eq!(
            run(t, n, Some(&sig[..62])),
            Err(SignatureError::MalformedSignature)
        );
        // Upper-case hex is the same signature.
        assert_eq!(run(t, n, Some(&sig.to_uppercase())), Ok(()));
    }

    #[test]
    fn echoed_values_are_bounded() {
        let long = "9x".repeat(10_000);
        let received = Received {
            timestamp: Some(&long),
            nonce: Some(NONCE),
            signature: Some("00"),
        };
        let err = verify(SECRET, "POST", "/beat", &received, b"", NOW, MAX_SKEW_MS).unwrap_err();
        assert!(err.to_string().len() < 150, "{err}");
    }

    #[test]
    fn a_nonce_is_accepted_once_for_as_long_as_its_request_is_valid() {
        let guard = ReplayGuard::new(MAX_SKEW_MS);
        assert_eq!(guard.check(NONCE, NOW), Ok(()));
        assert_eq!(guard.check(NONCE, NOW), Err(SignatureError::Replayed));
        // The last moment a request stamped `NOW - MAX_SKEW_MS` and first seen then is still
        // valid: twice the skew later, across a generation change.
        let first = "ffffffffffffffffffffffffffffffff";
        assert_eq!(guard.check(first, NOW + 1), Ok(()));
        for later in [
            NOW + MAX_SKEW_MS,
            NOW + 2 * MAX_SKEW_MS,
            NOW + 2 * MAX_SKEW_MS + 1,
        ] {
            assert_eq!(
                guard.check(first, later),
                Err(SignatureError::Replayed),
                "{later}"
            );
        }
        assert_eq!(
            guard.check(NONCE, NOW + 2 * MAX_SKEW_MS),
            Err(SignatureError::Replayed)
        );
        // Old generations are dropped, so memory stays bounded.
        let fresh = "0123456789abcdef0123456789abcdef";
        assert_eq!(guard.check(fresh, NOW + 10 * MAX_SKEW_MS), Ok(()));
        assert_eq!(guard.len(), 1);
        assert_eq!(
            guard.check("nope", NOW),
            Err(SignatureError::MalformedNonce)
        );
    }

    #[test]
    fn the_guard_is_capped_and_frees_up_with_time() {
        let guard = ReplayGuard::with_cap(MAX_SKEW_MS, 2);
        let nonce = |i: u8| format!("{i:032x}");
        assert_eq!(guard.check(&nonce(1), NOW), Ok(()));
        assert_eq!(guard.check(&nonce(2), NOW), Ok(()));
        let full = guard.check(&nonce(3), NOW).unwrap_err();
        assert!(
            full.is_overload() && full.to_string().contains("try again"),
            "{full}"
        );
        // A replay is still a replay, not an overload.
        assert_eq!(guard.check(&nonce(1), NOW), Err(SignatureError::Replayed));
        // Once both generations have been dropped, there is room again.
        assert_eq!(guard.check(&nonce(3), NOW + 4 * MAX_SKEW_MS), Ok(()));
    }

    #[test]
    fn verify_once_refuses_a_replay_and_a_late_copy() {
        let guard = ReplayGuard::new(MAX_SKEW_MS);
        let signed = sign_now(SECRET, "POST", "/trigger", NOW, BODY);
        let received = Received {
            timestamp: Some(&signed.timestamp),
            nonce: Some(&signed.nonce),
            signature: Some(&signed.signature),
        };
        let run = |now| verify_once(&guard, SECRET, "POST", "/trigger", &received, BODY, now);
        assert_eq!(run(NOW), Ok(()));
        assert_eq!(run(NOW + 1_000), Err(SignatureError::Replayed));
        assert!(matches!(
            run(NOW + MAX_SKEW_MS + 1),
            Err(SignatureError::Skew { .. })
        ));
        // A refused signature leaves no trace in the guard.
        let bad = verify_once(&guard, b"wrong", "POST", "/trigger", &received, BODY, NOW);
        assert_eq!(bad, Err(SignatureError::Mismatch));
        assert_eq!(guard.len(), 1);
    }

    #[test]
    fn secret_is_redacted() {
        let secret = Secret::new("hunter2");
        assert_eq!(format!("{secret:?}"), "Secret(***)");
        assert_eq!(format!("{:?}", Some(secret.clone())), "Some(Secret(***))");
        assert_eq!(secret.as_bytes(), b"hunter2");
        let key = app_secret(&secret, "shop");
        assert_eq!(format!("{key:?}"), "Secret(***)");
    }

    #[test]
    fn the_signature_is_hmac_sha256_of_timestamp_dot_body() {
        // Computed independently: printf '1700000000000.{"a":1}' |
        //   openssl dgst -sha256 -hmac whsec
        assert_eq!(
            webhook_signature(b"whsec", 1_700_000_000_000, br#"{"a":1}"#),
            "v1=e396dba269569843ec61b16bf9a0e70c598b534678cf1863562e0699c7685c8d"
        );
        assert_ne!(
            webhook_signature(b"whsec", 1_700_000_000_001, br#"{"a":1}"#),
            webhook_signature(b"whsec", 1_700_000_000_000, br#"{"a":1}"#),
            "the timestamp is signed"
        );
    }
}
