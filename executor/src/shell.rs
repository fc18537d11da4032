//! Splitting a job's params into argv words the way a POSIX shell would, without running
//! one (SPEC §5: argv is `[plugin name]` followed by the params split like a shell would).
//!
//! Supported: blanks (space, tab, newline) separate words; `'…'` is literal; `"…"` is
//! literal except that a backslash escapes `\`, `"`, `$`, `` ` `` and a newline; a
//! backslash outside quotes escapes the next character (and drops a newline); adjacent
//! quoted and unquoted parts join into one word (`--name="a b"` is one word). Nothing
//! is expanded: no variables, globs, tildes, command substitution or comments, since no
//! shell runs and the params are data.

/// Why params cannot be split; the run fails with this as its message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SplitError {
    #[error("params have an unterminated {0} quote")]
    UnterminatedQuote(&'static str),
    #[error("params end with a lone backslash")]
    TrailingBackslash,
}

/// Splits `text` into words like a POSIX shell (see the module docs).
pub fn split(text: &str) -> Result<Vec<String>, SplitError> {
    let mut words = Vec::new();
    let mut word = String::new();
    // A word exists once anything (even an empty quoted string) was seen.
    let mut in_word = false;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' | '\n' => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => word.push(c),
                        None => return Err(SplitError::UnterminatedQuote("single")),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c @ ('\\' | '"' | '$' | '`')) => word.push(c),
                            Some('\n') => {}
                            Some(c) => {
                                word.push('\\');
                                word.push(c);
                            }
                            None => return Err(SplitError::UnterminatedQuote("double")),
                        },
                        Some(c) => word.push(c),
                        None => return Err(SplitError::UnterminatedQuote("double")),
                    }
                }
            }
            '\\' => match chars.next() {
                Some('\n') => {}
                Some(c) => {
                    in_word = true;
                    word.push(c);
                }
                None => return Err(SplitError::TrailingBackslash),
            },
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    Ok(words)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(text: &str) -> Vec<String> {
        split(text).unwrap()
    }

    #[test]
    fn blanks_separate_words() {
        assert_eq!(ok(""), Vec::<String>::new());
        assert_eq!(ok("  \t\n "), Vec::<String>::new());
        assert_eq!(ok("a b  c\td\ne"), ["a", "b", "c", "d", "e"]);
        assert_eq!(ok("  --dry-run  "), ["--dry-run"]);
    }

    #[test]
    fn quotes_group_and_join() {
        assert_eq!(ok("'a b' \"c d\""), ["a b", "c d"]);
        assert_eq!(ok("--name=\"order 42\" x"), ["--name=order 42", "x"]);
        assert_eq!(ok("a'b'\"c\"d"), ["abcd"]);
        assert_eq!(ok("'' \"\""), ["", ""]);
        assert_eq!(ok("'it''s'"), ["its"]);
    }

    #[test]
    fn single_quotes_are_literal() {
        assert_eq!(ok(r#"'a\b "c" $HOME'"#), [r#"a\b "c" $HOME"#]);
    }

    #[test]
    fn backslashes() {
        assert_eq!(ok(r"a\ b c"), ["a b", "c"]);
        assert_eq!(ok(r#"\"x\""#), [r#""x""#]);
        assert_eq!(ok(r#""a\"b\\c\$d\ne""#), [r#"a"b\c$d\ne"#]);
        assert_eq!(ok("a\\\nb"), ["ab"]);
    }

    #[test]
    fn nothing_is_expanded() {
        assert_eq!(
            ok("$HOME ~ *.txt #x `id`"),
            ["$HOME", "~", "*.txt", "#x", "`id`"]
        );
    }

    #[test]
    fn unicode_survives() {
        assert_eq!(ok("订单 'ß ü'"), ["订单", "ß ü"]);
    }

    #[test]
    fn malformed_params_are_errors() {
        assert_eq!(split("'abc"), Err(SplitError::UnterminatedQuote("single")));
        assert_eq!(split("\"abc"), Err(SplitError::UnterminatedQuote("double")));
        assert_eq!(
            split("\"abc\\"),
            Err(SplitError::UnterminatedQuote("double"))
        );
        assert_eq!(split("abc\\"), Err(SplitError::TrailingBackslash));
        assert_eq!(
            split("'x").unwrap_err().to_string(),
            "params have an unterminated single quote"
        );
    }
}
