//! Durations on the command line: `500ms`, `30s`, `30m`, `2h`, `1d`, or several together
//! (`1h30m`), and the `--backoff` shorthand built from them. Each parser returns a message
//! that clap prints after the flag's name.

use rota_scheduler::backoff::Backoff;

const UNITS: &str = "ms, s, m, h or d";

/// Milliseconds in a duration such as `30m` or `1h30m`.
pub fn parse_duration_ms(s: &str) -> Result<u64, String> {
    let bad =
        |why: &str| format!("`{s}` is not a duration ({why}); write e.g. 500ms, 30s, 30m, 2h, 1d");
    let mut rest = s.trim();
    if rest.is_empty() {
        return Err(bad("it is empty"));
    }
    let mut total: u64 = 0;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(bad("expected a number"));
        }
        let (number, tail) = rest.split_at(digits);
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let scale: u64 = match unit {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            "" => return Err(bad(&format!("`{number}` needs a unit: {UNITS}"))),
            other => return Err(bad(&format!("unknown unit `{other}`; use {UNITS}"))),
        };
        let part = number
            .parse::<u64>()
            .ok()
            .and_then(|n| n.checked_mul(scale))
            .and_then(|n| total.checked_add(n))
            .filter(|&n| n <= i64::MAX as u64)
            .ok_or_else(|| bad("too long"))?;
        total = part;
        rest = tail;
    }
    Ok(total)
}

/// `fixed:DELAY` or `exp:BASE,FACTOR,MAX[,jitter]` (e.g. `fixed:1s`, `exp:1m,2,1h`).
/// Ranges are the server's to check; it names the field it refuses.
pub fn parse_backoff(s: &str) -> Result<Backoff, String> {
    let usage = "write fixed:DELAY or exp:BASE,FACTOR,MAX[,jitter], e.g. fixed:1s or exp:1m,2,1h";
    let (kind, args) = s
        .split_once(':')
        .ok_or_else(|| format!("`{s}` is not a backoff; {usage}"))?;
    let ms = |what: &str, v: &str| {
        parse_duration_ms(v)
            .map(|n| n as i64)
            .map_err(|e| format!("{what}: {e}"))
    };
    match kind.trim() {
        "fixed" => Ok(Backoff::Fixed {
            delay_ms: ms("delay", args)?,
        }),
        "exp" | "exponential" => {
            let parts: Vec<&str> = args.split(',').map(str::trim).collect();
            let (base, factor, max, jitter) = match parts.as_slice() {
                [base, factor, max] => (base, factor, max, false),
                [base, factor, max, "jitter"] => (base, factor, max, true),
                [_, _, _, other] => {
                    return Err(format!("`{other}` is not `jitter`; {usage}"));
                }
                _ => {
                    return Err(format!(
                        "`{s}` needs a base, a factor and a maximum; {usage}"
                    ));
                }
            };
            let factor = factor
                .parse::<f64>()
                .ok()
                .filter(|f| f.is_finite())
                .ok_or_else(|| format!("factor: `{factor}` is not a number such as 2 or 1.5"))?;
            Ok(Backoff::Exponential {
                base_ms: ms("base", base)?,
                factor,
                max_ms: ms("max", max)?,
                jitter,
            })
        }
        other => Err(format!("unknown backoff kind `{other}`; {usage}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_in_every_unit() {
        assert_eq!(parse_duration_ms("500ms"), Ok(500));
        assert_eq!(parse_duration_ms("30s"), Ok(30_000));
        assert_eq!(parse_duration_ms("30m"), Ok(1_800_000));
        assert_eq!(parse_duration_ms("2h"), Ok(7_200_000));
        assert_eq!(parse_duration_ms("1d"), Ok(86_400_000));
        assert_eq!(parse_duration_ms("0s"), Ok(0));
        assert_eq!(parse_duration_ms("1h30m"), Ok(5_400_000));
        assert_eq!(parse_duration_ms(" 1m "), Ok(60_000));
    }

    #[test]
    fn bad_durations_say_why() {
        for (input, why) in [
            ("", "empty"),
            ("30", "needs a unit"),
            ("30x", "unknown unit `x`"),
            ("m", "expected a number"),
            ("-5s", "expected a number"),
            ("1.5h", "unknown unit `.`"),
            ("99999999999999999999d", "too long"),
            ("106751991168d", "too long"),
        ] {
            let e = parse_duration_ms(input).unwrap_err();
            assert!(e.contains(why), "{input:?}: {e}");
            assert!(e.contains("500ms"), "{input:?}: {e}");
        }
    }

    #[test]
    fn backoffs() {
        assert_eq!(
            parse_backoff("fixed:1s"),
            Ok(Backoff::Fixed { delay_ms: 1_000 })
        );
        assert_eq!(
            parse_backoff("exp:1m,2,1h"),
            Ok(Backoff::Exponential {
                base_ms: 60_000,
                factor: 2.0,
                max_ms: 3_600_000,
                jitter: false
            })
        );
        assert_eq!(
            parse_backoff("exp:500ms, 1.5, 10s, jitter"),
            Ok(Backoff::Exponential {
                base_ms: 500,
                factor: 1.5,
                max_ms: 10_000,
                jitter: true
            })
        );
        for (input, why) in [
            ("1s", "not a backoff"),
            ("linear:1s", "unknown backoff kind"),
            ("fixed:soon", "delay: `soon`"),
            ("exp:1m,2", "needs a base, a factor and a maximum"),
            ("exp:1m,two,1h", "factor: `two`"),
            ("exp:1m,NaN,1h", "factor"),
            ("exp:1m,2,1h,wobble", "`wobble` is not `jitter`"),
        ] {
            let e = parse_backoff(input).unwrap_err();
            assert!(e.contains(why), "{input:?}: {e}");
        }
    }
}
