//! Flow control's pure part (SPEC §11): which bucket of its job's concurrency bound a task
//! falls in — the value its payload has at the job's key, a JSON Pointer (RFC 6901). The
//! bound itself is kept where claims are decided, in the store's claim (`store/limits.rs`).

use serde_json::Value;
use sha2::{Digest, Sha256};

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
