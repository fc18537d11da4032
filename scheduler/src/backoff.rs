//! Retry delays.
//!
//! This module owns the `backoff` of a job or a task: how long to wait before the next
//! attempt once an attempt has failed. It is pure arithmetic, kept apart from the
//! callback handling that schedules the retry so that the policy (and its edge cases:
//! attempt 10,000, a factor of 100, an untrusted value from an old database row) is tested
//! on its own. A retry is then a new attempt of the same task, due at now + the delay
//! (SPEC §4 "Retries").

use serde::{Deserialize, Serialize};

/// The longest delay a backoff may ask for: 10 years, the same bound as a task's
/// `run_at`.
pub const MAX_DELAY_MS: i64 = 10 * 366 * 24 * 60 * 60 * 1000;

/// The largest exponential `factor` accepted; beyond it, the cap is reached by the second
/// retry anyway.
pub const MAX_FACTOR: f64 = 100.0;

/// How long to wait before retrying a failed attempt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Backoff {
    /// The same delay after every failure.
    Fixed { delay_ms: i64 },
    /// `base_ms * factor^(n-1)` after the n-th failure, capped at `max_ms`; with `jitter`,
    /// a random delay between half of that and all of it.
    Exponential {
        base_ms: i64,
        factor: f64,
        max_ms: i64,
        #[serde(default)]
        jitter: bool,
    },
}

impl Default for Backoff {
    /// SPEC: exponential, base 1 s, factor 2, at most 1 hour, no jitter.
    fn default() -> Self {
        Self::Exponential {
            base_ms: 1_000,
            factor: 2.0,
            max_ms: 3_600_000,
            jitter: false,
        }
    }
}

impl Backoff {
    /// Checks the values a user sent; the message names the offending field.
    pub fn validate(&self) -> Result<(), String> {
        match *self {
            Self::Fixed { delay_ms } => check_delay("delay_ms", delay_ms),
            Self::Exponential {
                base_ms,
                factor,
                max_ms,
                jitter: _,
            } => {
                check_delay("base_ms", base_ms)?;
                if !factor.is_finite() || !(1.0..=MAX_FACTOR).contains(&factor) {
                    return Err(format!(
                        "factor must be a number from 1 to {MAX_FACTOR} (got {factor})"
                    ));
                }
                check_delay("max_ms", max_ms)?;
                if max_ms < base_ms {
                    return Err(format!(
                        "max_ms must be at least base_ms ({base_ms}) (got {max_ms})"
                    ));
                }
                Ok(())
            }
        }
    }

    /// The delay before the next attempt, after attempt `failed_attempt` (1-based)
    /// failed.
    ///
    /// - fixed: `delay_ms`;
    /// - exponential: `min(max_ms, base_ms * factor^(failed_attempt - 1))`, rounded down
    ///   to the millisecond and saturating (attempt 1,000,000 simply gets `max_ms`);
    /// - with `jitter`: *equal jitter*, uniformly random in `[d / 2, d]` for that delay
    ///   `d`, so that tasks that failed together do not all retry in the same millisecond
    ///   while each still waits at least half the nominal delay.
    ///
    /// Attempt 0 is treated as attempt 1. The result is never negative, even for values
    /// that did not pass [`Backoff::validate`].
    pub fn delay_ms(&self, failed_attempt: u32, rng: &mut impl rand::Rng) -> i64 {
        match *self {
            Self::Fixed { delay_ms } => delay_ms.max(0),
            Self::Exponential {
                base_ms,
                factor,
                max_ms,
                jitter,
            } => {
                let nominal = exponential(base_ms, factor, max_ms, failed_attempt);
                if jitter && nominal > 0 {
                    rng.random_range(nominal / 2..=nominal)
                } else {
                    nominal
                }
            }
        }
    }
}

fn check_delay(field: &str, value: i64) -> Result<(), String> {
    if value < 0 {
        return Err(format!("{field} must be at least 0 (got {value})"));
    }
    if value > MAX_DELAY_MS {
        return Err(format!(
            "{field} must be at most {MAX_DELAY_MS} (10 years) (got {value})"
        ));
    }
    Ok(())
}

/// `min(max_ms, base_ms * factor^(failed_attempt - 1))` without overflow or NaN.
fn exponential(base_ms: i64, factor: f64, max_ms: i64, failed_attempt: u32) -> i64 {
    let max_ms = max_ms.max(0);
    let base_ms = base_ms.max(0);
    if base_ms == 0 {
        return 0;
    }
    // A NaN or sub-1 factor (unvalidated input) would shrink or poison the delay.
    let factor = if factor.is_nan() {
        1.0
    } else {
        factor.max(1.0)
    };
    let exponent = i32::try_from(failed_attempt.saturating_sub(1)).unwrap_or(i32::MAX);
    // base >= 1 and factor^n >= 1, so the product is >= 1 or +inf, never NaN. Both
    // operands below 2^53 are exact, so the usual "1 min, 2, 4…" is exact too.
    let delay = base_ms as f64 * factor.powi(exponent);
    if delay >= max_ms as f64 {
        max_ms
    } else {
        // In [1, max_ms): the cast neither saturates nor loses the integer part.
        delay as i64
    }
}

#[cfg(test)]
mod tests {
    use rand::{SeedableRng, rngs::StdRng};

    use super::*;

    const MIN: i64 = 60_000;

    fn rng() -> StdRng {
        StdRng::seed_from_u64(0x5eed)
    }

    fn delays(backoff: &Backoff, attempts: std::ops::RangeInclusive<u32>) -> Vec<i64> {
        let mut rng = rng();
        attempts.map(|n| backoff.delay_ms(n, &mut rng)).collect()
    }

    #[test]
    fn one_minute_then_two_then_four() {
        // The seeds' "retry in 1 min, then 2, then 4, up to 5 times".
        let backoff = Backoff::Exponential {
            base_ms: MIN,
            factor: 2.0,
            max_ms: 3_600_000,
            jitter: false,
        };
        assert_eq!(backoff.validate(), Ok(()));
        assert_eq!(
            delays(&backoff, 1..=4),
            vec![MIN, 2 * MIN, 4 * MIN, 8 * MIN]
        );
    }

    #[test]
    fn exponential_is_capped() {
        let backoff = Backoff::Exponential {
            base_ms: MIN,
            factor: 2.0,
            max_ms: 10 * MIN,
            jitter: false,
        };
        assert_eq!(
            delays(&backoff, 1..=7),
            vec![MIN, 2 * MIN, 4 * MIN, 8 * MIN, 10 * MIN, 10 * MIN, 10 * MIN]
        );
    }

    #[test]
    fn default_is_the_spec_default() {
        let backoff = Backoff::default();
        assert_eq!(
            backoff,
            Backoff::Exponential {
                base_ms: 1_000,
                factor: 2.0,
                max_ms: 3_600_000,
                jitter: false
            }
        );
        assert_eq!(backoff.validate(), Ok(()));
        assert_eq!(delays(&backoff, 1..=3), vec![1_000, 2_000, 4_000]);
        // 2^12 s > 1 h: capped from the 13th failure on.
        assert_eq!(
            delays(&backoff, 12..=14),
            vec![2_048_000, 3_600_000, 3_600_000]
        );
    }

    #[test]
    fn fixed_is_fixed() {
        let backoff = Backoff::Fixed { delay_ms: 1_500 };
        assert_eq!(backoff.validate(), Ok(()));
        assert_eq!(delays(&backoff, 1..=5), vec![1_500; 5]);
        let mut rng = rng();
        assert_eq!(backoff.delay_ms(u32::MAX, &mut rng), 1_500);
        assert_eq!(backoff.delay_ms(0, &mut rng), 1_500);
    }

    #[test]
    fn fractional_factor_rounds_down() {
        let backoff = Backoff::Exponential {
            base_ms: 1_000,
            factor: 1.5,
            max_ms: 1_000_000,
            jitter: false,
        };
        assert_eq!(delays(&backoff, 1..=4), vec![1_000, 1_500, 2_250, 3_375]);
        assert_eq!(delays(&backoff, 5..=5), vec![5_062]);
    }

    #[test]
    fn huge_attempt_numbers_saturate() {
        let mut rng = rng();
        for factor in [1.0, 1.000_001, 2.0, MAX_FACTOR] {
            let backoff = Backoff::Exponential {
                base_ms: MAX_DELAY_MS,
                factor,
                max_ms: MAX_DELAY_MS,
                jitter: false,
            };
            for attempt in [0, 1, 2, 64, 1_000, 1 << 31, u32::MAX] {
                assert_eq!(backoff.delay_ms(attempt, &mut rng), MAX_DELAY_MS);
            }
        }
        let backoff = Backoff::Exponential {
            base_ms: 1,
            factor: MAX_FACTOR,
            max_ms: i64::MAX,
            jitter: false,
        };
        assert_eq!(backoff.delay_ms(u32::MAX, &mut rng), i64::MAX);
        // factor 1: never grows, however many attempts.
        let flat = Backoff::Exponential {
            base_ms: 700,
            factor: 1.0,
            max_ms: 1_000,
            jitter: false,
        };
        assert_eq!(flat.delay_ms(u32::MAX, &mut rng), 700);
    }

    #[test]
    fn attempt_zero_is_attempt_one() {
        let backoff = Backoff::default();
        let mut rng = rng();
        assert_eq!(backoff.delay_ms(0, &mut rng), backoff.delay_ms(1, &mut rng));
    }

    #[test]
    fn unvalidated_values_never_go_negative_or_nan() {
        let mut rng = rng();
        let cases = [
            Backoff::Fixed { delay_ms: -5 },
            Backoff::Exponential {
                base_ms: -1_000,
                factor: 2.0,
                max_ms: 10_000,
                jitter: true,
            },
            Backoff::Exponential {
                base_ms: 0,
                factor: f64::INFINITY,
                max_ms: 10_000,
                jitter: false,
            },
            Backoff::Exponential {
                base_ms: 1_000,
                factor: f64::NAN,
                max_ms: 10_000,
                jitter: true,
            },
            Backoff::Exponential {
                base_ms: 1_000,
                factor: 0.5,
                max_ms: -1,
                jitter: false,
            },
        ];
        for backoff in cases {
            assert!(backoff.validate().is_err(), "{backoff:?}");
            for attempt in [0, 1, 2, 40, u32::MAX] {
                let delay = backoff.delay_ms(attempt, &mut rng);
                assert!(delay >= 0, "{backoff:?} attempt {attempt}: {delay}");
            }
        }
        // NaN behaves as factor 1.
        let nan = Backoff::Exponential {
            base_ms: 1_000,
            factor: f64::NAN,
            max_ms: 10_000,
            jitter: false,
        };
        assert_eq!(nan.delay_ms(5, &mut rng), 1_000);
    }

    #[test]
    fn equal_jitter_stays_in_bounds() {
        let backoff = Backoff::Exponential {
            base_ms: MIN,
            factor: 2.0,
            max_ms: 3_600_000,
            jitter: true,
        };
        let mut rng = rng();
        for attempt in 1..=8 {
            let nominal = (MIN << (attempt - 1)).min(3_600_000);
            let samples: Vec<i64> = (0..2_000)
                .map(|_| backoff.delay_ms(attempt, &mut rng))
                .collect();
            assert!(
                samples.iter().all(|d| (nominal / 2..=nominal).contains(d)),
                "attempt {attempt}"
            );
            // Really spread out: both halves of the range are hit, mean near 3/4.
            assert!(samples.iter().any(|d| *d < nominal * 5 / 8));
            assert!(samples.iter().any(|d| *d > nominal * 7 / 8));
            let mean = samples.iter().sum::<i64>() / 2_000;
            assert!((mean - nominal * 3 / 4).abs() < nominal / 40, "mean {mean}");
        }
        // Same seed, same delays.
        assert_eq!(
            delays(&backoff, 1..=10),
            delays(&backoff, 1..=10),
            "seeded rng is deterministic"
        );
        // Jitter never exceeds the cap.
        let mut rng = StdRng::seed_from_u64(7);
        for _ in 0..1_000 {
            let d = backoff.delay_ms(30, &mut rng);
            assert!((1_800_000..=3_600_000).contains(&d));
        }
    }

    #[test]
    fn jitter_on_zero_and_one() {
        let mut rng = rng();
        let zero = Backoff::Exponential {
            base_ms: 0,
            factor: 2.0,
            max_ms: 0,
            jitter: true,
        };
        assert_eq!(zero.validate(), Ok(()));
        assert_eq!(zero.delay_ms(3, &mut rng), 0);
        let one = Backoff::Exponential {
            base_ms: 1,
            factor: 1.0,
            max_ms: 1,
            jitter: true,
        };
        for _ in 0..100 {
            assert!((0..=1).contains(&one.delay_ms(1, &mut rng)));
        }
    }

    #[test]
    fn validate_names_the_field() {
        let cases = [
            (
                Backoff::Fixed { delay_ms: -1 },
                "delay_ms must be at least 0 (got -1)",
            ),
            (
                Backoff::Fixed {
                    delay_ms: MAX_DELAY_MS + 1,
                },
                "delay_ms must be at most",
            ),
            (
                Backoff::Exponential {
                    base_ms: -1,
                    factor: 2.0,
                    max_ms: 10,
                    jitter: false,
                },
                "base_ms must be at least 0",
            ),
            (
                Backoff::Exponential {
                    base_ms: 1,
                    factor: 0.5,
                    max_ms: 10,
                    jitter: false,
                },
                "factor must be a number from 1 to 100 (got 0.5)",
            ),
            (
                Backoff::Exponential {
                    base_ms: 1,
                    factor: 101.0,
                    max_ms: 10,
                    jitter: false,
                },
                "factor must be",
            ),
            (
                Backoff::Exponential {
                    base_ms: 1,
                    factor: f64::INFINITY,
                    max_ms: 10,
                    jitter: false,
                },
                "factor must be",
            ),
            (
                Backoff::Exponential {
                    base_ms: 1,
                    factor: f64::NAN,
                    max_ms: 10,
                    jitter: false,
                },
                "factor must be",
            ),
            (
                Backoff::Exponential {
                    base_ms: 1_000,
                    factor: 2.0,
                    max_ms: 999,
                    jitter: false,
                },
                "max_ms must be at least base_ms (1000) (got 999)",
            ),
            (
                Backoff::Exponential {
                    base_ms: 1_000,
                    factor: 2.0,
                    max_ms: MAX_DELAY_MS + 1,
                    jitter: false,
                },
                "max_ms must be at most",
            ),
        ];
        for (backoff, expected) in cases {
            let err = backoff.validate().expect_err("invalid");
            assert!(err.starts_with(expected), "{backoff:?}: {err}");
        }
        // The edges are valid.
        for backoff in [
            Backoff::Fixed { delay_ms: 0 },
            Backoff::Fixed {
                delay_ms: MAX_DELAY_MS,
            },
            Backoff::Exponential {
                base_ms: 0,
                factor: 1.0,
                max_ms: 0,
                jitter: true,
            },
            Backoff::Exponential {
                base_ms: MAX_DELAY_MS,
                factor: MAX_FACTOR,
                max_ms: MAX_DELAY_MS,
                jitter: false,
            },
        ] {
            assert_eq!(backoff.validate(), Ok(()), "{backoff:?}");
        }
    }

    #[test]
    fn json_shapes() {
        let fixed: Backoff =
            serde_json::from_str(r#"{"kind":"fixed","delay_ms":5000}"#).expect("fixed");
        assert_eq!(fixed, Backoff::Fixed { delay_ms: 5_000 });
        let exp: Backoff = serde_json::from_str(
            r#"{"kind":"exponential","base_ms":60000,"factor":2,"max_ms":3600000}"#,
        )
        .expect("jitter defaults to false");
        assert_eq!(
            exp,
            Backoff::Exponential {
                base_ms: 60_000,
                factor: 2.0,
                max_ms: 3_600_000,
                jitter: false
            }
        );
        assert_eq!(
            serde_json::to_string(&exp).expect("serializes"),
            r#"{"kind":"exponential","base_ms":60000,"factor":2.0,"max_ms":3600000,"jitter":false}"#
        );
        assert_eq!(
            serde_json::to_string(&fixed).expect("serializes"),
            r#"{"kind":"fixed","delay_ms":5000}"#
        );
        for bad in [
            r#"{"kind":"linear","delay_ms":5}"#,
            r#"{"kind":"fixed"}"#,
            r#"{"kind":"exponential","base_ms":1,"factor":"2","max_ms":3}"#,
            r#"{"delay_ms":5}"#,
        ] {
            assert!(serde_json::from_str::<Backoff>(bad).is_err(), "{bad}");
        }
    }
}
