//! Value checks shared by the use cases and the request parsers. Each error message starts with the field it is
//! about (`name: …`), so a batch can prefix the item (`tasks[3].name: …`).

use std::ops::RangeInclusive;

use super::Error;

/// Longest name (job, app, plugin) or task key, in characters.
pub const MAX_NAME_CHARS: usize = 200;

/// A name: 1 to 200 characters of any Unicode text but control characters.
pub fn name(field: &str, value: &str) -> Result<(), Error> {
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
    if value.chars().any(is_invisible) {
        return Err(invalid(
            field,
            "must not contain invisible or text-direction characters (U+200B–U+200F, U+202A–U+202E, U+2066–U+2069, U+FEFF): they make one name look like another",
        ));
    }
    Ok(())
}

/// Zero-width and bidirectional formatting characters: a name holding them can read as a
/// different name in the console and in logs ("Trojan Source", CVE-2021-42574).
fn is_invisible(c: char) -> bool {
    matches!(c, '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{FEFF}')
}

/// Longest app name, in characters.
pub const MAX_APP_CHARS: usize = 64;

/// An app name: an identifier of at most 64 characters ([`identifier`]). Apps name
/// executor groups: they travel in an HTTP header (`x-rota-app`), in URLs and in key
/// derivations, where anything wider invites confusion.
pub fn app(field: &str, value: &str) -> Result<(), Error> {
    identifier(field, value, MAX_APP_CHARS)
}

/// A plugin name: an identifier of at most 200 characters ([`identifier`]); it is part of
/// URLs and of the console's forms.
pub fn plugin(field: &str, value: &str) -> Result<(), Error> {
    identifier(field, value, MAX_NAME_CHARS)
}

/// 1 to `max` ASCII letters, digits, `.`, `_` and `-`, starting with a letter or digit: no
/// path separators, spaces, quotes or look-alike characters.
fn identifier(field: &str, value: &str, max: usize) -> Result<(), Error> {
    let well_formed = value
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        && value
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphanumeric())
        && value.len() <= max;
    if well_formed {
        return Ok(());
    }
    Err(invalid(
        field,
        format!(
            "`{}` is not a valid name: 1 to {max} ASCII letters, digits, `.`, `_` or `-`, starting with a letter or digit",
            excerpt(value)
        ),
    ))
}

/// An integer inside `range`.
pub fn within<T>(field: &str, value: T, range: RangeInclusive<T>) -> Result<T, Error>
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
pub fn max_bytes(field: &str, value: &str, max: usize) -> Result<(), Error> {
    if value.len() > max {
        return Err(Error::PayloadTooLarge(format!(
            "{field}: is {} bytes, more than the {max} bytes this scheduler accepts",
            value.len()
        )));
    }
    Ok(())
}

pub use crate::names::excerpt;

/// A 422 about `field`.
/// A JSON Pointer (RFC 6901) of at most 200 characters: empty (the whole document) or
/// `/`-separated tokens in which `~` is only ever `~0` or `~1`.
pub fn json_pointer(field: &str, pointer: &str) -> Result<(), Error> {
    if pointer.chars().count() > 200 {
        return Err(invalid(field, "a JSON Pointer of at most 200 characters"));
    }
    if !pointer.is_empty() && !pointer.starts_with('/') {
        return Err(invalid(
            field,
            format!(
                "`{}` is not a JSON Pointer (RFC 6901): it is empty or starts with `/`, like `/customer/id`",
                excerpt(pointer)
            ),
        ));
    }
    let mut chars = pointer.chars();
    while let Some(c) = chars.next() {
        if c == '~' && !matches!(chars.next(), Some('0' | '1')) {
            return Err(invalid(
                field,
                format!(
                    "`{}` is not a JSON Pointer (RFC 6901): `~` is written `~0` and `/` inside a name `~1`",
                    excerpt(pointer)
                ),
            ));
        }
    }
    Ok(())
}

pub fn invalid(field: &str, message: impl std::fmt::Display) -> Error {
    Error::Unprocessable(format!("{field}: {message}"))
}

/// A 404 about `field`: it names a job, plugin or channel that does not exist (SPEC §6:
/// 404 missing, whether the name is in the path or the body).
pub fn missing(field: &str, message: impl std::fmt::Display) -> Error {
    Error::NotFound(format!("{field}: {message}"))
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
            Err(Error::PayloadTooLarge(_))
        ));
        assert!(max_bytes("payload", "ab", 2).is_ok());
    }
}
