//! Value checks shared by the handlers. Each error message starts with the field it is
//! about (`name: …`), so a batch can prefix the item (`tasks[3].name: …`).

use std::ops::RangeInclusive;

use super::error::ApiError;

/// Longest name (job, app, plugin) or task key, in characters.
pub const MAX_NAME_CHARS: usize = 200;

/// A name: 1 to 200 characters of any Unicode text but control characters.
pub fn name(field: &str, value: &str) -> Result<(), ApiError> {
    let chars = value.chars().count();
    if value.trim().is_empty() {
        return Err(invalid(field, "must not be empty"));
    }
    if chars > MAX_NAME_CHARS {
        return Err(invalid(
            field,
            format!("must be at most {MAX_NAME_CHARS} characters (got {chars})"),
        ));
    }
    if value.chars().any(char::is_control) {
        return Err(invalid(
            field,
            "must not contain control characters (newlines, tabs, …)",
        ));
    }
    Ok(())
}

/// An integer inside `range`.
pub fn within<T>(field: &str, value: T, range: RangeInclusive<T>) -> Result<T, ApiError>
where
    T: PartialOrd + std::fmt::Display + Copy,
{
    if range.contains(&value) {
        Ok(value)
    } else {
        Err(invalid(
            field,
            format!(
                "must be between {} and {} (got {value})",
                range.start(),
                range.end()
            ),
        ))
    }
}

/// A text that must fit in `max` bytes; larger is a 413.
pub fn max_bytes(field: &str, value: &str, max: usize) -> Result<(), ApiError> {
    if value.len() > max {
        return Err(ApiError::PayloadTooLarge(format!(
            "{field}: is {} bytes, more than the {max} bytes this scheduler accepts",
            value.len()
        )));
    }
    Ok(())
}

/// The start of a value for an error message: at most 40 characters, `…` if cut.
pub fn excerpt(value: &str) -> String {
    let mut chars = value.chars();
    let head: String = chars.by_ref().take(40).collect();
    if chars.next().is_some() {
        format!("{head}…")
    } else {
        head
    }
}

/// A 422 about `field`.
pub fn invalid(field: &str, message: impl std::fmt::Display) -> ApiError {
    ApiError::Unprocessable(format!("{field}: {message}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(name("name", "日次レポート").is_ok());
        assert!(name("name", &"é".repeat(200)).is_ok());
        assert!(
            name("name", &"é".repeat(201))
                .unwrap_err()
                .to_string()
                .contains("at most 200")
        );
        assert!(name("name", "").is_err());
        assert!(name("name", "   ").is_err());
        assert!(name("name", "a\nb").is_err());
    }

    #[test]
    fn ranges_and_sizes() {
        assert_eq!(within("n", 5, 1..=10).unwrap(), 5);
        assert_eq!(
            within("n", 0, 1..=10).unwrap_err().to_string(),
            "n: must be between 1 and 10 (got 0)"
        );
        assert!(matches!(
            max_bytes("payload", "abc", 2),
            Err(ApiError::PayloadTooLarge(_))
        ));
        assert!(max_bytes("payload", "ab", 2).is_ok());
    }
}
