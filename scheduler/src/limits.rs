//! Flow control's pure part (SPEC §11): which bucket of its job's limits a task falls in —
//! the value its payload has at the limit's key, a JSON Pointer (RFC 6901) — and a rate
//! limit's window: the earliest start a bucket can grant. The limits themselves are kept
//! where claims are decided, in the store's claim (`store/limits.rs`).

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::model::Millis;

/// Most starts a rate limit allows per window: a bucket's window keeps one time per start.
pub const MAX_RATE: i64 = 10_000;
/// The longest window of a rate limit: a day.
pub const MAX_RATE_WINDOW_MS: i64 = 86_400_000;

/// A job's rate limit (SPEC §11): at most `limit` run starts in any window of `per_ms`,
/// of the whole job or per value of `key`. A task over it is deferred to the earliest
/// time it fits, as `throttled`, spending no attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RateLimit {
    /// A JSON Pointer (RFC 6901) into the payload, like `/partner`; absent: one limit for
    /// the whole job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Starts per window: 1 to 10,000.
    pub limit: i64,
    /// The window, in ms: 1 to 86,400,000 (a day).
    pub per_ms: i64,
}

/// The starts a rate limit granted in one bucket, oldest first: those that may still
/// constrain a start to come (inside the last window, at most `limit` of them).
///
/// Grants are made in order (none before the last one), so "at most `limit` starts in any
/// window of `per_ms`" holds exactly when every start is at least `per_ms` after the one
/// `limit` grants before it — which is all [`Window::next_start`] has to check.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Window {
    starts: VecDeque<Millis>,
}

impl Window {
    /// A window as stored (a JSON array of times, ascending); unreadable text is an empty
    /// window's (the store writes only what [`Window::to_json`] gave it).
    pub fn from_json(text: &str) -> Window {
        let starts: Vec<Millis> = serde_json::from_str(text).unwrap_or_default();
        Window {
            starts: starts.into(),
        }
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(&self.starts).expect("a list of integers serializes")
    }

    /// The last start granted.
    pub fn last(&self) -> Option<Millis> {
        self.starts.back().copied()
    }

    /// The earliest start at or after `earliest` that `rate` allows: not before the last
    /// grant, and at least `per_ms` after the grant `limit` starts back.
    pub fn next_start(&self, rate: &RateLimit, earliest: Millis) -> Millis {
        let mut at = earliest.max(self.last().unwrap_or(earliest));
        let limit = rate.limit.max(1) as usize;
        if self.starts.len() >= limit {
            let bound = self.starts[self.starts.len() - limit];
            at = at.max(bound.saturating_add(rate.per_ms));
        }
        at
    }

    /// Records a start at `at` (from [`Window::next_start`]), keeping only the last
    /// `limit`: older ones constrain nothing.
    pub fn grant(&mut self, rate: &RateLimit, at: Millis) {
        self.starts.push_back(at);
        while self.starts.len() > rate.limit.max(1) as usize {
            self.starts.pop_front();
        }
    }

    /// Drops the starts a window that begins at `now` no longer holds: they constrain no
    /// start at or after `now`.
    pub fn forget_before(&mut self, rate: &RateLimit, now: Millis) {
        while self
            .starts
            .front()
            .is_some_and(|&s| s.saturating_add(rate.per_ms) <= now)
        {
            self.starts.pop_front();
        }
    }
}

/// The longest bucket name kept as it is (the `tasks.limit_key` column); longer values are
/// kept as `sha256:` and their digest.
const KEY_MAX: usize = 255;

/// The bucket of a task with `payload` under a bound per value of `pointer`: the value
/// found there — a string as itself, anything else as its JSON text. `None` (one bucket of
/// its own) when the payload is not JSON or has no value there; and when the job's bound
/// has no key (`pointer` is `None`), every task is in that one bucket.
pub fn bucket(pointer: Option<&str>, payload: Option<&str>) -> Option<String> {
    let pointer = pointer?;
    let doc: Value = serde_json::from_str(payload?).ok()?;
    let text = match doc.pointer(pointer)? {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    if text.len() <= KEY_MAX {
        return Some(text);
    }
    let digest = Sha256::digest(text.as_bytes());
    Some(format!("sha256:{}", hex(&digest)))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate(limit: i64, per_ms: i64) -> RateLimit {
        RateLimit {
            key: None,
            limit,
            per_ms,
        }
    }

    /// At most `limit` of `starts` in any window `[x, x + per_ms)`.
    fn within(starts: &[Millis], r: &RateLimit) -> bool {
        starts.iter().all(|&x| {
            starts
                .iter()
                .filter(|&&s| s >= x && s < x + r.per_ms)
                .count()
                <= r.limit as usize
        })
    }

    #[test]
    fn a_window_grants_at_most_its_limit_in_any_window_and_each_start_as_early_as_it_fits() {
        let r = rate(3, 1_000);
        let mut w = Window::default();
        let mut starts = Vec::new();
        // Ten tasks due at once, then five due later, some inside and some after the wait.
        let due = [
            0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5_000, 5_000, 5_100, 9_000, 9_999,
        ];
        for d in due {
            let at = w.next_start(&r, d);
            assert!(at >= d, "never before the task is due");
            w.grant(&r, at);
            starts.push(at);
        }
        assert_eq!(
            starts,
            [
                0, 0, 0, 1_000, 1_000, 1_000, 2_000, 2_000, 2_000, 3_000, 5_000, 5_000, 5_100,
                9_000, 9_999
            ]
        );
        assert!(within(&starts, &r));
    }

    #[test]
    fn a_stored_window_keeps_its_limit_across_scans() {
        let r = rate(2, 500);
        let mut granted = Vec::new();
        let mut stored = Window::default().to_json();
        // Each "scan" reads the window, forgets what has passed, grants some, writes it back.
        for scan in 0..20 {
            let now = scan * 137;
            let mut w = Window::from_json(&stored);
            w.forget_before(&r, now);
            for _ in 0..(scan % 4) {
                let at = w.next_start(&r, now);
                w.grant(&r, at);
                granted.push(at);
            }
            stored = w.to_json();
        }
        assert!(granted.windows(2).all(|p| p[0] <= p[1]));
        assert!(within(&granted, &r), "{granted:?}");
        assert_eq!(Window::from_json("not json"), Window::default());
    }

    #[test]
    fn a_bucket_is_the_value_at_the_pointer() {
        let p = Some(r#"{"customer": {"id": 42, "name": "ACME"}, "a/b": "slash", "m~n": 1}"#);
        assert_eq!(bucket(Some("/customer/name"), p), Some("ACME".into()));
        assert_eq!(bucket(Some("/customer/id"), p), Some("42".into()));
        assert_eq!(
            bucket(Some("/customer"), p),
            Some(r#"{"id":42,"name":"ACME"}"#.into())
        );
        assert_eq!(bucket(Some("/a~1b"), p), Some("slash".into()));
        assert_eq!(bucket(Some("/m~0n"), p), Some("1".into()));
    }

    #[test]
    fn no_key_no_value_or_no_json_is_the_bucket_of_its_own() {
        let p = Some(r#"{"customer": 7}"#);
        assert_eq!(bucket(None, p), None);
        assert_eq!(bucket(Some("/tenant"), p), None);
        assert_eq!(bucket(Some("/customer"), Some("not json")), None);
        assert_eq!(bucket(Some("/customer"), None), None);
    }

    #[test]
    fn a_long_value_is_kept_as_its_digest() {
        let long = "x".repeat(300);
        let payload = serde_json::json!({ "k": long }).to_string();
        let b = bucket(Some("/k"), Some(&payload)).unwrap();
        assert!(b.starts_with("sha256:") && b.len() == 71, "{b}");
        let other = serde_json::json!({ "k": format!("{long}y") }).to_string();
        assert_ne!(bucket(Some("/k"), Some(&other)), Some(b));
    }
}
