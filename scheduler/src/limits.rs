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

/// The starts a rate limit granted in one bucket, in time order: those that may still
/// constrain a start to come (inside the last window, and those granted ahead of it).
///
/// "At most `limit` starts in any window of `per_ms`" holds exactly when any `limit + 1`
/// consecutive starts span at least `per_ms`. A start may be granted before one granted
/// earlier — a task due now, after a scan granted one due later in its window — when the
/// groups it joins still span that: a bucket's later grant does not hold back a task its
/// limit has room for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Window {
    starts: VecDeque<Millis>,
}

/// Most times [`Window::next_start`] tries between the earliest and the start after the
/// last grant (which always fits): it looks for a gap among the starts granted ahead.
const GAPS_TRIED: usize = 64;

impl Window {
    /// A window as stored (a JSON array of times, ascending); unreadable text is an empty
    /// window's (the store writes only what [`Window::to_json`] gave it).
    pub fn from_json(text: &str) -> Window {
        let mut starts: Vec<Millis> = serde_json::from_str(text).unwrap_or_default();
        starts.sort_unstable();
        Window {
            starts: starts.into(),
        }
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(&self.starts).expect("a list of integers serializes")
    }

    /// The latest start granted.
    pub fn last(&self) -> Option<Millis> {
        self.starts.back().copied()
    }

    /// The earliest start at or after `earliest` that `rate` allows. A start can only
    /// come to fit where a granted one leaves its window (`per_ms` after it), so those
    /// times are tried in order, after `earliest` itself; past [`GAPS_TRIED`] of them, the
    /// start after the last grant that keeps the limit.
    pub fn next_start(&self, rate: &RateLimit, earliest: Millis) -> Millis {
        let per_ms = rate.per_ms;
        std::iter::once(earliest)
            .chain(
                self.starts
                    .iter()
                    .map(|s| s.saturating_add(per_ms))
                    .filter(|&t| t > earliest),
            )
            .take(GAPS_TRIED)
            .find(|&t| self.fits(rate, t))
            .unwrap_or_else(|| self.after_last(rate, earliest))
    }

    /// Whether a start at `at` keeps the limit: every group of `limit + 1` consecutive
    /// starts it would join spans at least `per_ms` (the others already do).
    fn fits(&self, rate: &RateLimit, at: Millis) -> bool {
        let limit = rate.limit.max(1) as usize;
        let s = &self.starts;
        // Fewer than `limit` others within `per_ms` either side: no window can be full.
        let near_from = s.partition_point(|&x| x.saturating_add(rate.per_ms) <= at);
        let near_to = s.partition_point(|&x| x < at.saturating_add(rate.per_ms));
        if near_to - near_from < limit {
            return true;
        }
        // The starts with `at` among them, in order: `at` is the `i`th.
        let i = s.partition_point(|&x| x < at);
        let with = |k: usize| match k.cmp(&i) {
            std::cmp::Ordering::Less => s[k],
            std::cmp::Ordering::Equal => at,
            std::cmp::Ordering::Greater => s[k - 1],
        };
        (i.saturating_sub(limit)..=i)
            .filter(|&j| j + limit <= s.len())
            .all(|j| with(j + limit) - with(j) >= rate.per_ms)
    }

    /// The earliest start at or after `earliest`, and after every grant, that keeps the
    /// limit: `per_ms` after the grant `limit` starts back.
    fn after_last(&self, rate: &RateLimit, earliest: Millis) -> Millis {
        let mut at = earliest.max(self.last().unwrap_or(earliest));
        let limit = rate.limit.max(1) as usize;
        if self.starts.len() >= limit {
            let bound = self.starts[self.starts.len() - limit];
            at = at.max(bound.saturating_add(rate.per_ms));
        }
        at
    }

    /// Records a start at `at` (from [`Window::next_start`]), in time order.
    pub fn grant(&mut self, at: Millis) {
        let i = self.starts.partition_point(|&x| x <= at);
        self.starts.insert(i, at);
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

/// The pointer of the buckets a limited job's tasks are kept in (`tasks.limit_key`, where
/// their slots are counted and the console's queue shows them): the concurrency bound's
/// key when the job has a bound, else its rate limit's.
pub fn counted_key<'a>(
    max_concurrency: Option<i32>,
    concurrency_key: Option<&'a str>,
    rate: Option<&'a RateLimit>,
) -> Option<&'a str> {
    match max_concurrency {
        Some(_) => concurrency_key,
        None => rate.and_then(|r| r.key.as_deref()),
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
            w.grant(at);
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
                w.grant(at);
                granted.push(at);
            }
            stored = w.to_json();
        }
        assert!(within(&granted, &r), "{granted:?}");
        assert_eq!(Window::from_json("not json"), Window::default());
    }

    #[test]
    fn a_start_the_limit_has_room_for_is_not_held_behind_a_later_grant() {
        // A scan claimed ahead a task due at 250; a task due now (60) comes after it.
        let roomy = rate(10, 1_000);
        let mut w = Window::default();
        w.grant(250);
        assert_eq!(w.next_start(&roomy, 60), 60, "10 a second leaves room now");
        // One a second: 60 would share a window with 250, and so would anything up to it;
        // the first start that fits is a window after 250.
        let one = rate(1, 1_000);
        assert_eq!(w.next_start(&one, 60), 1_250);
        // A gap between two grants ahead is taken when it fits on both sides.
        let mut w = Window::default();
        w.grant(0);
        w.grant(2_500);
        assert_eq!(w.next_start(&one, 10), 1_000);
        assert_eq!(
            w.next_start(&one, 1_600),
            3_500,
            "1,600 is within a window of 2,500"
        );
    }

    #[test]
    fn past_the_gaps_it_tries_a_start_comes_after_the_last_grant_and_keeps_the_limit() {
        // One per 10 ms, granted back to back ahead: no gap anywhere among 101 starts, more
        // than a start looks through before it takes the time after the last.
        let r = rate(1, 10);
        let mut w = Window::default();
        let mut starts: Vec<Millis> = (0..=100).map(|k| k * 10).collect();
        for &s in &starts {
            w.grant(s);
        }
        let at = w.next_start(&r, 0);
        assert_eq!(at, 1_010);
        starts.push(at);
        assert!(within(&starts, &r));
    }

    /// Tasks due in any order, each granted as soon as its limit allows: never more than
    /// the limit in any window, never before a task is due, and no earlier time would have
    /// fitted.
    #[test]
    fn starts_granted_out_of_order_keep_the_limit_and_each_is_the_earliest_that_fits() {
        let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = move |n: u64| {
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (seed >> 33) % n
        };
        for round in 0..200 {
            let r = rate(1 + next(4) as i64, 10 + next(60) as i64);
            let mut w = Window::default();
            let mut starts: Vec<Millis> = Vec::new();
            for _ in 0..(5 + next(25)) {
                let due = next(200) as Millis;
                let at = w.next_start(&r, due);
                assert!(at >= due, "round {round}: granted {at} before due {due}");
                for earlier in due..at {
                    let mut with = starts.clone();
                    with.push(earlier);
                    assert!(
                        !within(&with, &r),
                        "round {round}: {earlier} fitted before {at} ({r:?}, {starts:?})"
                    );
                }
                w.grant(at);
                starts.push(at);
                assert!(within(&starts, &r), "round {round}: {r:?} {starts:?}");
            }
        }
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
