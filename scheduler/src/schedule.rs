//! Job schedules and fire-time planning.
//!
//! This module owns what a job's `schedule` *means*: parsing and validating it once
//! ([`Schedule::compile`]), answering "when does it fire next?"
//! ([`CompiledSchedule::next_after`], [`CompiledSchedule::preview`]), and deciding what a
//! scan should fire for a job whose `next_fire_at` has come within the window
//! ([`plan_fires`]), including the misfire policy. It is pure: no clock reads except the
//! one in [`Schedule::compile`] (which [`Schedule::compile_at`] avoids), no I/O, no
//! locks. The scan loop, the REST API (422 on a bad schedule, the next-5 preview of the
//! console) and the store all go through it, so a cron expression is interpreted the same
//! way everywhere.
//!
//! All instants are epoch milliseconds (`i64`).
//!
//! # Cron flavour
//!
//! Cron expressions are Quartz-style, parsed by `croner`:
//!
//! - 6 or 7 fields: `second minute hour day-of-month month day-of-week [year]`;
//! - `?` and `*` are interchangeable in day-of-month and day-of-week;
//! - `L` (last day of month, or `6L` = last Friday), `W` (`15W` = nearest weekday to the
//!   15th, `LW` = last weekday), `#` (`6#3` = third Friday);
//! - day-of-week numbers follow Quartz: `1` = Sunday … `7` = Saturday (names such as
//!   `MON-FRI` work too);
//! - `0/5` style steps ("from 0, every 5") are accepted, as in Quartz.
//!
//! One departure from Quartz: Quartz rejects an expression that restricts both
//! day-of-month and day-of-week; `croner` accepts it and fires when *either* matches
//! (Vixie cron semantics). Put `+` before the day-of-week field to require both.
//!
//! # Time zones and daylight saving time
//!
//! A cron schedule is evaluated on the wall clock of its IANA time zone (default UTC).
//! Around DST changes we follow `croner`:
//!
//! - spring forward (a wall-clock hour does not exist): a *fixed-time* expression (one
//!   value each in second, minute and hour, e.g. `0 30 2 * * ?`) fires at the first
//!   instant after the gap on that day; an interval or wildcard expression
//!   (`0 */15 * * * ?`) simply has no fire times inside the gap;
//! - fall back (a wall-clock hour happens twice): a fixed-time expression fires once, in
//!   the first pass; an interval expression fires in both passes.
//!
//! Fire times always move forward in real time, so `next_after` never goes backwards.

use std::{fmt, str::FromStr};

use chrono::{DateTime, Datelike, Utc};
use chrono_tz::Tz;
use croner::{
    Cron,
    parser::{CronParser, Seconds, Year},
};
use serde::{Deserialize, Serialize};

/// How far ahead [`Schedule::compile`] looks for a first fire time. A cron expression with
/// none in this horizon is rejected as never firing (the same 10 years past which a delayed
/// task's `run_at` is refused).
pub const FIRE_HORIZON_MS: i64 = 10 * 366 * 24 * 60 * 60 * 1000;

/// How many misfired cron fire times [`plan_fires`] counts one by one before it jumps
/// straight to the first fire time that is no longer a misfire.
const CRON_MISFIRE_COUNT_BUDGET: u32 = 64;

/// When a job fires, as the API and the store carry it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Schedule {
    /// A Quartz-style cron expression, evaluated in `time_zone` (IANA name, default UTC).
    Cron {
        expr: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        time_zone: Option<String>,
    },
    /// Every `every_ms` milliseconds, keeping the phase of the first fire time.
    FixedRate { every_ms: i64 },
    /// Never on its own: fired only through the API or the console.
    None,
}

/// The `kind` of a [`Schedule`], for a database column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScheduleKind {
    Cron,
    FixedRate,
    None,
}

impl ScheduleKind {
    pub const ALL: [ScheduleKind; 3] = [Self::Cron, Self::FixedRate, Self::None];

    /// The name used in JSON and in the database.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Cron => "cron",
            Self::FixedRate => "fixed_rate",
            Self::None => "none",
        }
    }
}

impl fmt::Display for ScheduleKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ScheduleKind {
    type Err = UnknownName;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|kind| kind.as_str() == s)
            .ok_or_else(|| UnknownName {
                what: "schedule kind",
                value: s.to_owned(),
                expected: "cron, fixed_rate, none",
            })
    }
}

/// What to do with fire times that were missed by more than the misfire threshold
/// (every scheduler node was down, or the job was stuck behind a long backlog).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Misfire {
    /// Skip the missed fire times and carry on with the next regular one.
    #[default]
    DoNothing,
    /// Fire once now for all the missed fire times, then carry on.
    FireOnceNow,
}

impl Misfire {
    pub const ALL: [Misfire; 2] = [Self::DoNothing, Self::FireOnceNow];

    /// The name used in JSON and in the database.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::DoNothing => "do_nothing",
            Self::FireOnceNow => "fire_once_now",
        }
    }
}

impl fmt::Display for Misfire {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Misfire {
    type Err = UnknownName;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|misfire| misfire.as_str() == s)
            .ok_or_else(|| UnknownName {
                what: "misfire policy",
                value: s.to_owned(),
                expected: "do_nothing, fire_once_now",
            })
    }
}

/// A name read from the database or a query string that is none of the known ones.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} `{value}`; expected one of: {expected}")]
pub struct UnknownName {
    pub what: &'static str,
    pub value: String,
    pub expected: &'static str,
}

/// Why a [`Schedule`] cannot be used. The messages are shown to users as they are.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    #[error("cron expression `{expr}` is invalid: {reason}")]
    InvalidCron { expr: String, reason: String },
    #[error("unknown time zone `{0}`; use an IANA name such as `UTC` or `Asia/Shanghai`")]
    UnknownTimeZone(String),
    #[error("cron expression `{0}` never fires (no fire time in the next 10 years)")]
    NeverFires(String),
    #[error("every_ms must be at least 1 (got {0})")]
    EveryMsTooSmall(i64),
}

impl Schedule {
    pub fn kind(&self) -> ScheduleKind {
        match self {
            Self::Cron { .. } => ScheduleKind::Cron,
            Self::FixedRate { .. } => ScheduleKind::FixedRate,
            Self::None => ScheduleKind::None,
        }
    }

    /// Validates the schedule and prepares it for fast fire-time computations; a cron
    /// expression that has no fire time in the next 10 years (counted from the current
    /// time) is an error.
    pub fn compile(&self) -> Result<CompiledSchedule, ScheduleError> {
        self.compile_at(Utc::now().timestamp_millis())
    }

    /// [`Schedule::compile`] with the "never fires" probe starting at `now_ms`.
    pub fn compile_at(&self, now_ms: i64) -> Result<CompiledSchedule, ScheduleError> {
        let compiled = match self {
            Self::Cron { expr, time_zone } => compile_cron(expr, time_zone.as_deref(), now_ms)?,
            Self::FixedRate { every_ms } if *every_ms < 1 => {
                return Err(ScheduleError::EveryMsTooSmall(*every_ms));
            }
            Self::FixedRate { every_ms } => CompiledSchedule(Compiled::FixedRate {
                every_ms: *every_ms,
            }),
            Self::None => CompiledSchedule(Compiled::None),
        };
        Ok(compiled)
    }
}

/// The Quartz flavour described in the module docs.
fn quartz_parser() -> CronParser {
    CronParser::builder()
        .seconds(Seconds::Required)
        .year(Year::Optional)
        .alternative_weekdays(true)
        .sloppy_ranges(true)
        .build()
}

fn compile_cron(
    expr: &str,
    time_zone: Option<&str>,
    now_ms: i64,
) -> Result<CompiledSchedule, ScheduleError> {
    let tz = match time_zone {
        None => Tz::UTC,
        Some(name) => name
            .parse::<Tz>()
            .map_err(|_| ScheduleError::UnknownTimeZone(name.to_owned()))?,
    };
    let fields = quartz_fields(expr);
    let cron = parse_quartz(&fields).map_err(|reason| ScheduleError::InvalidCron {
        expr: expr.to_owned(),
        reason,
    })?;
    let compiled = CompiledSchedule(Compiled::Cron {
        cron: Box::new(cron),
        tz,
    });

    let horizon = now_ms.saturating_add(FIRE_HORIZON_MS);
    let fires_in_horizon =
        |schedule: &CompiledSchedule| schedule.next_after(now_ms).is_some_and(|t| t <= horizon);
    // croner gives up on an expression that never fires only at its year-5000 limit,
    // which takes a few hundred milliseconds for `0 0 0 31 2,4,6,9,11 ?`. So probe first
    // with the same six fields and the horizon's years instead of the expression's own:
    // every fire time of the expression inside the horizon is one of the probe's, so a
    // probe without any proves the expression never fires, in a couple of milliseconds.
    if fields.len() >= 6 {
        let probe = DateTime::from_timestamp_millis(now_ms)
            .map(|now| now.with_timezone(&tz).year())
            .and_then(|year| {
                let years = format!("{year}-{}", year.saturating_add(11));
                let mut probe_fields = fields[..6].to_vec();
                probe_fields.push(&years);
                quartz_parser().parse(&probe_fields.join(" ")).ok()
            })
            .map(|cron| {
                CompiledSchedule(Compiled::Cron {
                    cron: Box::new(cron),
                    tz,
                })
            });
        if probe.is_some_and(|probe| !fires_in_horizon(&probe)) {
            return Err(ScheduleError::NeverFires(expr.to_owned()));
        }
    }
    if !fires_in_horizon(&compiled) {
        return Err(ScheduleError::NeverFires(expr.to_owned()));
    }
    Ok(compiled)
}

/// Splits a Quartz expression into fields, spelling them the way croner reads them:
/// Quartz reads a bare `L` in day-of-week as Saturday; croner does not.
fn quartz_fields(expr: &str) -> Vec<&str> {
    expr.split_whitespace()
        .enumerate()
        .map(|(index, field)| match field {
            "L" | "l" if index == DAY_OF_WEEK => "7",
            _ => field,
        })
        .collect()
}

/// Parses the fields of a Quartz expression; the error is a reason a user can act on.
fn parse_quartz(fields: &[&str]) -> Result<Cron, String> {
    let parser = quartz_parser();
    let Some(first) = fields.first() else {
        return Err("it is empty".to_owned());
    };
    let is_nickname = fields.len() == 1 && first.starts_with('@');
    if !is_nickname && !(6..=7).contains(&fields.len()) {
        return Err(format!(
            "expected 6 or 7 fields (second minute hour day-of-month month day-of-week [year]), \
             found {}",
            fields.len()
        ));
    }
    let err = match parser.parse(&fields.join(" ")) {
        Ok(cron) => return Ok(cron),
        Err(err) => err,
    };
    if is_nickname {
        return Err(format!(
            "unknown nickname `{first}`; use @yearly, @monthly, @weekly, @daily or @hourly"
        ));
    }
    // croner's messages rarely say which field is wrong: find it by parsing each field
    // alone, with wildcards everywhere else (only on this error path).
    for (index, field) in fields.iter().enumerate() {
        let mut probe = vec!["*"; fields.len()];
        probe[index] = field;
        if let Err(field_err) = parser.parse(&probe.join(" ")) {
            let (name, allowed) = CRON_FIELDS[index];
            return Err(format!(
                "{name} field `{field}`: {}; allowed: {allowed}",
                cron_error_reason(&field_err)
            ));
        }
    }
    Err(cron_error_reason(&err))
}

/// The index of the day-of-week field.
const DAY_OF_WEEK: usize = 5;

/// Field names and what each accepts, for error messages.
const CRON_FIELDS: [(&str, &str); 7] = [
    ("second", "0-59"),
    ("minute", "0-59"),
    ("hour", "0-23"),
    ("day-of-month", "1-31, L, LW, 15W, ?"),
    ("month", "1-12 or JAN-DEC"),
    ("day-of-week", "1-7 (1 = Sunday) or SUN-SAT, 6L, 6#3, ?"),
    ("year", "a year such as 2030, or a range 2030-2035"),
];

/// `croner`'s messages, without the prefixes that only make sense inside `croner`.
fn cron_error_reason(err: &croner::errors::CronError) -> String {
    use croner::errors::CronError as E;
    let reason = match err {
        E::EmptyPattern => "it is empty".to_owned(),
        E::InvalidPattern(msg) | E::IllegalCharacters(msg) | E::ComponentError(msg) => msg.clone(),
        other => other.to_string(),
    };
    reason.trim_end_matches('.').to_owned()
}

/// A validated [`Schedule`], ready to compute fire times. Cheap to clone (the cron
/// pattern is boxed once).
#[derive(Debug, Clone)]
pub struct CompiledSchedule(Compiled);

#[derive(Debug, Clone)]
enum Compiled {
    Cron { cron: Box<Cron>, tz: Tz },
    FixedRate { every_ms: i64 },
    None,
}

impl CompiledSchedule {
    pub fn kind(&self) -> ScheduleKind {
        match self.0 {
            Compiled::Cron { .. } => ScheduleKind::Cron,
            Compiled::FixedRate { .. } => ScheduleKind::FixedRate,
            Compiled::None => ScheduleKind::None,
        }
    }

    /// The first fire time strictly after `after_ms`, or `None` if there is none (a `none`
    /// schedule, a cron expression whose years have all passed, or out of range).
    ///
    /// Cron fire times are whole seconds. A fixed-rate schedule has no anchor of its own,
    /// so here the answer is `after_ms + every_ms`; [`plan_fires`] keeps a running job's
    /// phase.
    pub fn next_after(&self, after_ms: i64) -> Option<i64> {
        match &self.0 {
            Compiled::Cron { cron, tz } => {
                let start = DateTime::from_timestamp_millis(after_ms)?.with_timezone(tz);
                let next = cron.find_next_occurrence(&start, false).ok()?;
                Some(next.timestamp_millis())
            }
            Compiled::FixedRate { every_ms } => after_ms.checked_add(*every_ms),
            Compiled::None => None,
        }
    }

    /// The next `n` fire times after `after_ms` (fewer if the schedule runs out).
    pub fn preview(&self, after_ms: i64, n: usize) -> Vec<i64> {
        let mut out = Vec::with_capacity(n.min(64));
        let mut cursor = after_ms;
        while out.len() < n {
            let Some(next) = self.next_after(cursor) else {
                break;
            };
            out.push(next);
            cursor = next;
        }
        out
    }
}

/// What one scan does for one job: the fire times to put into the wheel, the job's new
/// `next_fire_at`, and how many fire times were lost to the misfire policy.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FirePlan {
    /// Fire times to dispatch, in increasing order.
    pub fires: Vec<i64>,
    /// The first fire time that was not planned (`None`: the schedule has no more).
    pub next_fire_at: Option<i64>,
    /// Fire times older than the misfire threshold that were skipped (`do_nothing`) or
    /// folded into one fire at `now` (`fire_once_now`). Exact for fixed rate; for cron
    /// exact up to 64, beyond which the misfired stretch is jumped over and this is a lower
    /// bound (counting a week of per-second fire times one by one is not worth it).
    pub misfired: u32,
}

/// Plans the fires of one job for one scan.
///
/// Every fire time `t` from `next_fire_at` on with `t <= until` is planned in order, except
/// misfires: `t < now - misfire_threshold_ms`.
///
/// - [`Misfire::DoNothing`] skips the misfires (counted in [`FirePlan::misfired`]).
/// - [`Misfire::FireOnceNow`] plans one fire at `now` in their place, then continues with
///   the fire times strictly after `now`; late fire times inside the threshold, which the
///   fire at `now` already covers, are not planned again.
///
/// Fire times in `[now - misfire_threshold_ms, now]` fire late but fire. A fixed-rate job
/// keeps its phase (`next_fire_at + k * every_ms`) and misfires are skipped arithmetically;
/// a cron job jumps to the first fire time at or after `now - misfire_threshold_ms`, so a
/// job that was down for a week costs no more than one that was down for a minute.
///
/// At most `max_fires` fires are planned; when capped, `next_fire_at` is the first fire
/// time not planned, so the next scan continues where this one stopped. With `max_fires`
/// = 0 a `fire_once_now` catch-up is left for the next call (nothing changes), while
/// `do_nothing` misfires are still skipped.
///
/// A `none` schedule plans nothing and returns `next_fire_at: None`. `until` below `now`
/// is treated as `now`, a negative threshold as 0.
pub fn plan_fires(
    schedule: &CompiledSchedule,
    next_fire_at: i64,
    now: i64,
    until: i64,
    misfire: Misfire,
    misfire_threshold_ms: i64,
    max_fires: usize,
) -> FirePlan {
    let mut plan = FirePlan {
        fires: Vec::new(),
        next_fire_at: Some(next_fire_at),
        misfired: 0,
    };
    if matches!(schedule.0, Compiled::None) {
        plan.next_fire_at = None;
        return plan;
    }
    let until = until.max(now);
    if next_fire_at > until {
        return plan;
    }
    let cutoff = now.saturating_sub(misfire_threshold_ms.max(0));

    let mut cursor = Some(next_fire_at);
    if next_fire_at < cutoff {
        match misfire {
            Misfire::DoNothing => {
                let (misfired, first_on_time) = skip_misfires(schedule, next_fire_at, cutoff);
                plan.misfired = misfired;
                cursor = first_on_time;
            }
            Misfire::FireOnceNow if max_fires == 0 => return plan,
            Misfire::FireOnceNow => {
                let (misfired, _) = skip_misfires(schedule, next_fire_at, cutoff);
                plan.misfired = misfired;
                plan.fires.push(now);
                cursor = first_after(schedule, next_fire_at, now);
            }
        }
    }

    while let Some(t) = cursor {
        if t > until || plan.fires.len() >= max_fires {
            break;
        }
        plan.fires.push(t);
        // From a fire time, `next_after` keeps a fixed rate's phase.
        cursor = schedule.next_after(t);
    }
    plan.next_fire_at = cursor;
    plan
}

/// The first fire time after `after` of the schedule that fires at `anchor`
/// (`anchor <= after`); fixed rate keeps the phase of `anchor`.
fn first_after(schedule: &CompiledSchedule, anchor: i64, after: i64) -> Option<i64> {
    match schedule.0 {
        Compiled::FixedRate { every_ms } => {
            // k = floor((after - anchor) / every) + 1, in i128 so no subtraction overflows.
            let steps =
                (i128::from(after) - i128::from(anchor)).div_euclid(i128::from(every_ms)) + 1;
            i64::try_from(i128::from(anchor) + steps * i128::from(every_ms)).ok()
        }
        _ => schedule.next_after(after),
    }
}

/// Counts the fire times from `first` (a misfire, `first < cutoff`) up to `cutoff`, and
/// returns that count with the first fire time at or after `cutoff`.
fn skip_misfires(schedule: &CompiledSchedule, first: i64, cutoff: i64) -> (u32, Option<i64>) {
    match schedule.0 {
        Compiled::FixedRate { every_ms } => {
            // k = ceil((cutoff - first) / every) fire times lie before the cutoff.
            let span = i128::from(cutoff) - i128::from(first);
            let every = i128::from(every_ms);
            let missed = (span + every - 1).div_euclid(every);
            let next = i64::try_from(i128::from(first) + missed * every).ok();
            (u32::try_from(missed).unwrap_or(u32::MAX), next)
        }
        _ => {
            let mut missed = 0u32;
            let mut cursor = Some(first);
            while let Some(t) = cursor {
                if t >= cutoff {
                    return (missed, Some(t));
                }
                if missed == CRON_MISFIRE_COUNT_BUDGET {
                    // At least one more lies before the cutoff: jump over the rest.
                    return (missed + 1, schedule.next_after(cutoff - 1));
                }
                missed += 1;
                cursor = schedule.next_after(t);
            }
            (missed, None)
        }
    }
}

#[cfg(test)]
mod tests {
    use chrono::{NaiveDate, TimeZone};

    use super::*;

    const SEC: i64 = 1_000;
    const MIN: i64 = 60 * SEC;
    const HOUR: i64 = 60 * MIN;
    const DAY: i64 = 24 * HOUR;

    /// Epoch ms of a UTC wall-clock time.
    fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> i64 {
        Utc.with_ymd_and_hms(y, mo, d, h, mi, s)
            .single()
            .expect("valid test date")
            .timestamp_millis()
    }

    /// Epoch ms of a wall-clock time in `tz`.
    fn local(tz: Tz, y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> i64 {
        tz.with_ymd_and_hms(y, mo, d, h, mi, s)
            .single()
            .expect("unambiguous test date")
            .timestamp_millis()
    }

    /// A reference "now" for compile probes: 2026-01-01T00:00:00Z.
    fn t0() -> i64 {
        utc(2026, 1, 1, 0, 0, 0)
    }

    fn cron(expr: &str) -> CompiledSchedule {
        cron_in(expr, None)
    }

    fn cron_in(expr: &str, tz: Option<&str>) -> CompiledSchedule {
        Schedule::Cron {
            expr: expr.to_owned(),
            time_zone: tz.map(str::to_owned),
        }
        .compile_at(t0())
        .unwrap_or_else(|err| panic!("`{expr}` should compile: {err}"))
    }

    fn cron_err(expr: &str) -> ScheduleError {
        Schedule::Cron {
            expr: expr.to_owned(),
            time_zone: None,
        }
        .compile_at(t0())
        .expect_err("should not compile")
    }

    fn every(ms: i64) -> CompiledSchedule {
        Schedule::FixedRate { every_ms: ms }
            .compile_at(t0())
            .expect("valid fixed rate")
    }

    // ---- serde and names ----

    #[test]
    fn schedule_json_shapes() {
        let cases = [
            (
                r#"{"kind":"cron","expr":"0/5 * * * * ?","time_zone":"Asia/Shanghai"}"#,
                Schedule::Cron {
                    expr: "0/5 * * * * ?".into(),
                    time_zone: Some("Asia/Shanghai".into()),
                },
            ),
            (
                r#"{"kind":"cron","expr":"0 0 * * * ?"}"#,
                Schedule::Cron {
                    expr: "0 0 * * * ?".into(),
                    time_zone: None,
                },
            ),
            (
                r#"{"kind":"fixed_rate","every_ms":1500}"#,
                Schedule::FixedRate { every_ms: 1500 },
            ),
            (r#"{"kind":"none"}"#, Schedule::None),
        ];
        for (json, schedule) in cases {
            let parsed: Schedule = serde_json::from_str(json).expect("valid json");
            assert_eq!(parsed, schedule);
            assert_eq!(serde_json::to_string(&schedule).expect("serializes"), json);
        }
        assert!(serde_json::from_str::<Schedule>(r#"{"kind":"hourly"}"#).is_err());
        assert!(serde_json::from_str::<Schedule>(r#"{"kind":"fixed_rate"}"#).is_err());
    }

    #[test]
    fn misfire_names_round_trip() {
        for misfire in Misfire::ALL {
            assert_eq!(misfire.as_str().parse::<Misfire>(), Ok(misfire));
            let json = serde_json::to_string(&misfire).expect("serializes");
            assert_eq!(json, format!("\"{}\"", misfire.as_str()));
        }
        assert_eq!(Misfire::default(), Misfire::DoNothing);
        let err = "skip".parse::<Misfire>().expect_err("unknown");
        assert_eq!(
            err.to_string(),
            "unknown misfire policy `skip`; expected one of: do_nothing, fire_once_now"
        );
    }

    #[test]
    fn schedule_kind_names_round_trip() {
        for kind in ScheduleKind::ALL {
            assert_eq!(kind.as_str().parse::<ScheduleKind>(), Ok(kind));
        }
        assert_eq!(Schedule::None.kind(), ScheduleKind::None);
        assert_eq!(every(5).kind(), ScheduleKind::FixedRate);
        assert_eq!(cron("* * * * * ?").kind(), ScheduleKind::Cron);
        assert!("Cron".parse::<ScheduleKind>().is_err());
    }

    // ---- compile errors ----

    #[test]
    fn invalid_cron_is_an_actionable_error() {
        let cases = [
            ("", "it is empty"),
            ("   ", "it is empty"),
            (
                "nonsense",
                "expected 6 or 7 fields (second minute hour day-of-month month day-of-week \
                 [year]), found 1",
            ),
            ("* * * * *", "found 5"),
            ("0 0 0 1 1 ? 2026 1", "found 8"),
            ("61 * * * * ?", "second field `61`: "),
            ("0 0 25 * * ?", "hour field `25`: "),
            ("0 0 0 32 * ?", "day-of-month field `32`: "),
            ("0 0 0 1 13 ?", "month field `13`: "),
            ("0 0 0 ? * 9", "day-of-week field `9`: "),
            ("0 0 0 ? * 0", "allowed: 1-7 (1 = Sunday)"),
            ("0 0 0 1 ? ?", "month field `?`: "),
            ("0 0 0 L-3 * ?", "day-of-month field `L-3`: "),
            ("0 0 0 * * ? 20x0", "year field `20x0`: "),
            ("@often", "unknown nickname `@often`"),
        ];
        for (expr, expected) in cases {
            let err = cron_err(expr);
            assert!(
                matches!(&err, ScheduleError::InvalidCron { expr: e, .. } if e == expr),
                "`{expr}`: {err:?}"
            );
            let msg = err.to_string();
            assert!(
                msg.starts_with(&format!("cron expression `{expr}` is invalid: ")),
                "{msg}"
            );
            assert!(msg.contains(expected), "`{expr}`: {msg}");
        }
    }

    #[test]
    fn quartz_saturday_l_and_nicknames() {
        // A bare `L` in day-of-week is Saturday in Quartz. 2026-03-07 is a Saturday.
        assert_eq!(
            cron("0 0 0 ? * L").next_after(utc(2026, 3, 1, 0, 0, 0)),
            Some(utc(2026, 3, 7, 0, 0, 0))
        );
        assert_eq!(
            cron("@hourly").next_after(utc(2026, 3, 1, 0, 10, 0)),
            Some(utc(2026, 3, 1, 1, 0, 0))
        );
        // Lower case works like upper case.
        assert_eq!(
            cron("0 0 0 ? * mon").next_after(utc(2026, 3, 1, 0, 0, 0)),
            Some(utc(2026, 3, 2, 0, 0, 0))
        );
    }

    #[test]
    fn day_of_month_and_day_of_week_together_mean_either() {
        // Quartz refuses this; croner (Vixie semantics) fires on the 15th or on Mondays.
        let s = cron("0 0 0 15 * MON");
        assert_eq!(
            s.preview(utc(2026, 3, 10, 0, 0, 0), 3),
            vec![
                utc(2026, 3, 15, 0, 0, 0),
                utc(2026, 3, 16, 0, 0, 0),
                utc(2026, 3, 23, 0, 0, 0)
            ]
        );
        // `+` asks for both: a 15th that is a Monday (June 2026).
        assert_eq!(
            cron("0 0 0 15 * +MON").next_after(utc(2026, 3, 10, 0, 0, 0)),
            Some(utc(2026, 6, 15, 0, 0, 0))
        );
    }

    #[test]
    fn cron_that_never_fires_is_rejected() {
        for expr in ["0 0 0 30 2 ?", "0 0 0 31 4 ?", "0 0 0 1 1 ? 2020"] {
            let err = cron_err(expr);
            assert_eq!(err, ScheduleError::NeverFires(expr.to_owned()));
            assert_eq!(
                err.to_string(),
                format!("cron expression `{expr}` never fires (no fire time in the next 10 years)")
            );
        }
        // Beyond the horizon counts as never; just inside it is fine.
        assert!(matches!(
            cron_err("0 0 0 1 1 ? 2040"),
            ScheduleError::NeverFires(_)
        ));
        cron("0 0 0 1 1 ? 2035");
        // 29 February happens, just not every year.
        cron("0 0 0 29 2 ?");
    }

    #[test]
    fn unknown_time_zone_is_rejected() {
        let err = Schedule::Cron {
            expr: "0 * * * * ?".into(),
            time_zone: Some("Mars/Olympus_Mons".into()),
        }
        .compile_at(t0())
        .expect_err("unknown zone");
        assert_eq!(
            err,
            ScheduleError::UnknownTimeZone("Mars/Olympus_Mons".into())
        );
        assert!(
            err.to_string()
                .contains("unknown time zone `Mars/Olympus_Mons`")
        );
    }

    #[test]
    fn fixed_rate_must_be_positive() {
        for ms in [0, -1, i64::MIN] {
            let err = Schedule::FixedRate { every_ms: ms }
                .compile_at(t0())
                .expect_err("not positive");
            assert_eq!(err, ScheduleError::EveryMsTooSmall(ms));
            assert!(err.to_string().starts_with("every_ms must be at least 1"));
        }
        every(1);
    }

    #[test]
    fn compile_uses_the_clock_for_the_probe() {
        let schedule = Schedule::Cron {
            expr: "0 0 0 1 1 ? 2020".into(),
            time_zone: None,
        };
        assert!(schedule.compile().is_err());
        assert!(schedule.compile_at(utc(2019, 6, 1, 0, 0, 0)).is_ok());
    }

    // ---- cron fire times ----

    #[test]
    fn seconds_cron() {
        let s = cron("0/5 * * * * ?");
        let start = utc(2026, 3, 1, 12, 0, 0);
        assert_eq!(
            s.preview(start, 4),
            vec![
                start + 5 * SEC,
                start + 10 * SEC,
                start + 15 * SEC,
                start + 20 * SEC
            ]
        );
        // Strictly after, whatever the milliseconds.
        assert_eq!(s.next_after(start - 1), Some(start));
        assert_eq!(s.next_after(start + 1), Some(start + 5 * SEC));
        assert_eq!(s.next_after(start + 4_999), Some(start + 5 * SEC));
        // `*` works as well as `?`.
        let every_second = cron("* * * * * *");
        assert_eq!(every_second.next_after(start), Some(start + SEC));
        // Start offsets: 3, 18, 33, 48.
        let offset = cron("3/15 * * * * ?");
        assert_eq!(
            offset.preview(start, 4),
            vec![
                start + 3 * SEC,
                start + 18 * SEC,
                start + 33 * SEC,
                start + 48 * SEC
            ]
        );
    }

    #[test]
    fn quartz_weekdays_and_question_mark() {
        // Quartz numbering: 6 = Friday. 2026-03-06 is a Friday.
        let s = cron("0 0 12 ? * 6");
        let from = utc(2026, 3, 1, 0, 0, 0);
        assert_eq!(
            s.preview(from, 2),
            vec![utc(2026, 3, 6, 12, 0, 0), utc(2026, 3, 13, 12, 0, 0)]
        );
        let weekdays = cron("0 30 9 ? * MON-FRI");
        // 2026-03-07 is a Saturday: the next one is Monday the 9th.
        assert_eq!(
            weekdays.next_after(utc(2026, 3, 6, 10, 0, 0)),
            Some(utc(2026, 3, 9, 9, 30, 0))
        );
        // 1 = Sunday.
        assert_eq!(
            cron("0 0 0 ? * 1").next_after(from),
            Some(utc(2026, 3, 8, 0, 0, 0))
        );
    }

    #[test]
    fn quartz_last_day_and_last_weekday() {
        let from = utc(2026, 1, 15, 0, 0, 0);
        assert_eq!(
            cron("0 0 0 L * ?").preview(from, 3),
            vec![
                utc(2026, 1, 31, 0, 0, 0),
                utc(2026, 2, 28, 0, 0, 0),
                utc(2026, 3, 31, 0, 0, 0)
            ]
        );
        // Last Friday (Quartz 6) of January 2026 is the 30th.
        assert_eq!(
            cron("0 0 0 ? * 6L").next_after(from),
            Some(utc(2026, 1, 30, 0, 0, 0))
        );
        // Last weekday of May 2026: the 31st is a Sunday, so Friday the 29th.
        assert_eq!(
            cron("0 0 0 LW * ?").next_after(utc(2026, 5, 1, 0, 0, 0)),
            Some(utc(2026, 5, 29, 0, 0, 0))
        );
    }

    #[test]
    fn quartz_nearest_weekday() {
        // 2026-02-15 is a Sunday: 15W is Monday the 16th. 2026-08-15 is a Saturday: Friday 14th.
        let s = cron("0 0 9 15W * ?");
        assert_eq!(
            s.next_after(utc(2026, 2, 1, 0, 0, 0)),
            Some(utc(2026, 2, 16, 9, 0, 0))
        );
        assert_eq!(
            s.next_after(utc(2026, 8, 1, 0, 0, 0)),
            Some(utc(2026, 8, 14, 9, 0, 0))
        );
        // 2026-04-15 is a Wednesday: the day itself.
        assert_eq!(
            s.next_after(utc(2026, 4, 1, 0, 0, 0)),
            Some(utc(2026, 4, 15, 9, 0, 0))
        );
    }

    #[test]
    fn quartz_nth_weekday() {
        // Third Friday (6#3) of March 2026 is the 20th; of April, the 17th.
        let s = cron("0 0 10 ? * 6#3");
        assert_eq!(
            s.preview(utc(2026, 3, 1, 0, 0, 0), 2),
            vec![utc(2026, 3, 20, 10, 0, 0), utc(2026, 4, 17, 10, 0, 0)]
        );
        // Second Monday by name.
        assert_eq!(
            cron("0 0 10 ? * MON#2").next_after(utc(2026, 3, 1, 0, 0, 0)),
            Some(utc(2026, 3, 9, 10, 0, 0))
        );
    }

    #[test]
    fn seven_fields_with_year() {
        let s = cron("0 0 0 1 1 ? 2027-2028");
        assert_eq!(
            s.preview(t0(), 5),
            vec![utc(2027, 1, 1, 0, 0, 0), utc(2028, 1, 1, 0, 0, 0)]
        );
        assert_eq!(s.next_after(utc(2028, 1, 1, 0, 0, 0)), None);
    }

    #[test]
    fn time_zone_shifts_wall_time() {
        let utc_daily = cron_in("0 0 9 * * ?", None);
        let explicit_utc = cron_in("0 0 9 * * ?", Some("UTC"));
        let shanghai = cron_in("0 0 9 * * ?", Some("Asia/Shanghai"));
        let from = utc(2026, 3, 1, 12, 0, 0);
        let in_utc = utc_daily.next_after(from).expect("fires");
        assert_eq!(in_utc, utc(2026, 3, 2, 9, 0, 0));
        assert_eq!(explicit_utc.next_after(from), Some(in_utc));
        // 09:00 in Shanghai (UTC+8) is 01:00 UTC: 8 hours earlier than 09:00 UTC.
        let in_shanghai = shanghai.next_after(from).expect("fires");
        assert_eq!(in_shanghai, in_utc - 8 * HOUR);
        assert_eq!(
            in_shanghai,
            local(chrono_tz::Asia::Shanghai, 2026, 3, 2, 9, 0, 0)
        );
    }

    #[test]
    fn dst_follows_croner() {
        let ny = chrono_tz::America::New_York;
        // 2026-03-08 02:30 does not exist in New York (02:00 -> 03:00).
        let fixed = cron_in("0 30 2 * * ?", Some("America/New_York"));
        let before = local(ny, 2026, 3, 7, 12, 0, 0);
        assert_eq!(
            fixed.next_after(before - DAY),
            Some(local(ny, 2026, 3, 7, 2, 30, 0))
        );
        let first = fixed.next_after(before).expect("fires");
        // On the 7th it ran at 02:30; on the 8th it runs right after the gap, at 03:00 EDT.
        assert_eq!(first, local(ny, 2026, 3, 8, 3, 0, 0));
        let after = fixed.next_after(first).expect("fires");
        assert_eq!(after, local(ny, 2026, 3, 9, 2, 30, 0));

        // Interval jobs simply have no fire times in the gap.
        let half_hourly = cron_in("0 0/30 * * * ?", Some("America/New_York"));
        let gap_start = local(ny, 2026, 3, 8, 1, 30, 0);
        assert_eq!(
            half_hourly.preview(gap_start, 2),
            vec![
                local(ny, 2026, 3, 8, 3, 0, 0),
                local(ny, 2026, 3, 8, 3, 30, 0)
            ]
        );

        // 2026-11-01 01:30 happens twice: a fixed-time job fires once.
        let fall = cron_in("0 30 1 * * ?", Some("America/New_York"));
        let evening = local(ny, 2026, 10, 31, 12, 0, 0);
        let fires = fall.preview(evening, 2);
        let first_pass = utc(2026, 11, 1, 5, 30, 0); // EDT = UTC-4
        assert_eq!(fires, vec![first_pass, utc(2026, 11, 2, 6, 30, 0)]);
        // An interval job fires in both passes.
        let hourly = cron_in("0 30 * * * ?", Some("America/New_York"));
        assert_eq!(
            hourly.preview(first_pass - 1, 3),
            vec![first_pass, first_pass + HOUR, first_pass + 2 * HOUR]
        );
    }

    #[test]
    fn next_after_never_goes_backwards_and_handles_extremes() {
        let s = cron("* * * * * ?");
        assert_eq!(s.next_after(i64::MAX), None);
        assert_eq!(s.next_after(i64::MIN), None);
        assert_eq!(every(10).next_after(i64::MAX - 5), None);
        assert_eq!(every(10).next_after(100), Some(110));
        let none = Schedule::None.compile_at(t0()).expect("none compiles");
        assert_eq!(none.next_after(0), None);
        assert!(none.preview(0, 5).is_empty());
        let mut t = t0();
        for _ in 0..100 {
            let next = s.next_after(t).expect("fires");
            assert!(next > t);
            t = next;
        }
    }

    #[test]
    fn preview_gives_the_next_five() {
        let s = cron("0 0 * * * ?");
        let start = utc(2026, 3, 1, 12, 0, 0);
        assert_eq!(
            s.preview(start, 5),
            (1..=5).map(|h| start + h * HOUR).collect::<Vec<_>>()
        );
        assert_eq!(every(250).preview(0, 3), vec![250, 500, 750]);
        assert!(s.preview(start, 0).is_empty());
    }

    // ---- plan_fires ----

    const THRESHOLD: i64 = 5_000;

    #[test]
    fn plans_every_fire_in_the_window_and_keeps_the_next() {
        let s = every(1_000);
        let now = 1_000_000;
        let plan = plan_fires(
            &s,
            now + 500,
            now,
            now + 5_000,
            Misfire::DoNothing,
            THRESHOLD,
            100,
        );
        assert_eq!(
            plan,
            FirePlan {
                fires: vec![
                    now + 500,
                    now + 1_500,
                    now + 2_500,
                    now + 3_500,
                    now + 4_500
                ],
                next_fire_at: Some(now + 5_500),
                misfired: 0,
            }
        );
    }

    #[test]
    fn window_edges() {
        let s = every(1_000);
        let now = 1_000_000;
        // t == until is included.
        let plan = plan_fires(
            &s,
            now + 5_000,
            now,
            now + 5_000,
            Misfire::DoNothing,
            THRESHOLD,
            100,
        );
        assert_eq!(plan.fires, vec![now + 5_000]);
        assert_eq!(plan.next_fire_at, Some(now + 6_000));
        // Not yet due: nothing changes.
        let plan = plan_fires(
            &s,
            now + 5_001,
            now,
            now + 5_000,
            Misfire::DoNothing,
            THRESHOLD,
            100,
        );
        assert_eq!(
            plan,
            FirePlan {
                fires: vec![],
                next_fire_at: Some(now + 5_001),
                misfired: 0
            }
        );
        // t == now - threshold is late, not a misfire.
        for misfire in Misfire::ALL {
            let plan = plan_fires(
                &s,
                now - THRESHOLD,
                now,
                now + 1_000,
                misfire,
                THRESHOLD,
                100,
            );
            assert_eq!(plan.misfired, 0, "{misfire}");
            assert_eq!(
                plan.fires,
                (0..=6)
                    .map(|k| now - THRESHOLD + k * 1_000)
                    .collect::<Vec<_>>(),
                "{misfire}"
            );
            assert_eq!(plan.next_fire_at, Some(now + 2_000));
        }
        // One millisecond older is a misfire.
        let plan = plan_fires(
            &s,
            now - THRESHOLD - 1,
            now,
            now + 1_000,
            Misfire::DoNothing,
            THRESHOLD,
            100,
        );
        assert_eq!(plan.misfired, 1);
        assert_eq!(plan.fires.first(), Some(&(now - THRESHOLD + 999)));
    }

    #[test]
    fn do_nothing_skips_misfires_and_keeps_fixed_rate_phase() {
        let s = every(1_000);
        let now = 10_000_000;
        // Last planned fire was long ago, at phase 123.
        let plan = plan_fires(
            &s,
            1_123,
            now,
            now + 5_000,
            Misfire::DoNothing,
            THRESHOLD,
            100,
        );
        // Fire times before now - 5000 = 9_995_000 are misfires: 1_123 ..= 9_994_123.
        assert_eq!(plan.misfired, 9_994);
        assert_eq!(plan.fires.first(), Some(&9_995_123));
        assert!(plan.fires.iter().all(|t| t % 1_000 == 123));
        assert_eq!(plan.fires.len(), 10);
        assert_eq!(plan.fires.last(), Some(&10_004_123));
        assert_eq!(plan.next_fire_at, Some(10_005_123));
    }

    #[test]
    fn fire_once_now_collapses_misfires_into_one_fire() {
        let s = every(1_000);
        let now = 10_000_000;
        let plan = plan_fires(
            &s,
            1_123,
            now,
            now + 5_000,
            Misfire::FireOnceNow,
            THRESHOLD,
            100,
        );
        assert_eq!(plan.misfired, 9_994);
        // One fire at now, then the regular ones after now, in phase; the late ones in
        // [now - threshold, now] are covered by the fire at now.
        let mut expected = vec![now];
        expected.extend((0..5).map(|k| 10_000_123 + k * 1_000));
        assert_eq!(plan.fires, expected);
        assert_eq!(plan.next_fire_at, Some(10_005_123));
    }

    #[test]
    fn fire_once_now_does_not_duplicate_a_fire_time_equal_to_now() {
        let s = every(1_000);
        let now = 10_000_000;
        let plan = plan_fires(
            &s,
            0,
            now,
            now + 2_000,
            Misfire::FireOnceNow,
            THRESHOLD,
            100,
        );
        assert_eq!(plan.fires, vec![now, now + 1_000, now + 2_000]);
        assert_eq!(plan.next_fire_at, Some(now + 3_000));
    }

    #[test]
    fn fixed_rate_down_for_a_week_is_arithmetic() {
        let s = every(1);
        let now = 7 * DAY;
        let started = std::time::Instant::now();
        let plan = plan_fires(&s, 0, now, now + 5, Misfire::DoNothing, THRESHOLD, 1_000);
        assert!(started.elapsed() < std::time::Duration::from_millis(50));
        assert_eq!(plan.misfired, u32::try_from(now - THRESHOLD).expect("fits"));
        assert_eq!(plan.fires.first(), Some(&(now - THRESHOLD)));
        assert_eq!(plan.fires.len(), 1_000);
        assert_eq!(plan.next_fire_at, Some(now - THRESHOLD + 1_000));
    }

    #[test]
    fn misfire_count_saturates() {
        let s = every(1);
        let plan = plan_fires(&s, i64::MIN, 0, 10, Misfire::DoNothing, 0, 5);
        assert_eq!(plan.misfired, u32::MAX);
        assert_eq!(plan.fires, vec![0, 1, 2, 3, 4]);
        assert_eq!(plan.next_fire_at, Some(5));
    }

    #[test]
    fn cron_misfires_both_policies() {
        let s = cron("0 * * * * ?"); // every minute
        let now = utc(2026, 3, 1, 12, 0, 30);
        let last = utc(2026, 3, 1, 11, 55, 0);
        // Misfired: 11:55 .. 11:59 (all before 12:00:25); 12:00 is late but inside.
        let plan = plan_fires(
            &s,
            last,
            now,
            now + 5_000,
            Misfire::DoNothing,
            60 * SEC,
            100,
        );
        // Threshold 60 s: cutoff 11:59:30, so 11:55..11:59 misfire, 12:00:00 fires late.
        assert_eq!(plan.misfired, 5);
        assert_eq!(plan.fires, vec![utc(2026, 3, 1, 12, 0, 0)]);
        assert_eq!(plan.next_fire_at, Some(utc(2026, 3, 1, 12, 1, 0)));

        let plan = plan_fires(
            &s,
            last,
            now,
            now + 5_000,
            Misfire::FireOnceNow,
            60 * SEC,
            100,
        );
        assert_eq!(plan.misfired, 5);
        assert_eq!(plan.fires, vec![now]);
        assert_eq!(plan.next_fire_at, Some(utc(2026, 3, 1, 12, 1, 0)));
    }

    #[test]
    fn cron_down_for_a_week_jumps() {
        let s = cron("* * * * * ?"); // every second
        let now = utc(2026, 3, 8, 0, 0, 0);
        let last = now - 7 * DAY;
        let started = std::time::Instant::now();
        let plan = plan_fires(
            &s,
            last,
            now,
            now + 5_000,
            Misfire::DoNothing,
            THRESHOLD,
            100,
        );
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
        assert_eq!(
            plan.misfired,
            CRON_MISFIRE_COUNT_BUDGET + 1,
            "a lower bound"
        );
        assert_eq!(
            plan.fires,
            (-5..=5).map(|k| now + k * SEC).collect::<Vec<_>>()
        );
        assert_eq!(plan.next_fire_at, Some(now + 6 * SEC));

        let plan = plan_fires(
            &s,
            last,
            now,
            now + 5_000,
            Misfire::FireOnceNow,
            THRESHOLD,
            100,
        );
        assert_eq!(plan.misfired, CRON_MISFIRE_COUNT_BUDGET + 1);
        assert_eq!(
            plan.fires,
            (0..=5).map(|k| now + k * SEC).collect::<Vec<_>>(),
            "now, then the fire times after now"
        );
    }

    #[test]
    fn cron_misfires_up_to_the_budget_are_exact() {
        let s = cron("* * * * * ?");
        let now = utc(2026, 3, 8, 0, 0, 0);
        let budget = i64::from(CRON_MISFIRE_COUNT_BUDGET);
        // Exactly `budget` misfires: last = cutoff - budget seconds.
        let plan = plan_fires(
            &s,
            now - THRESHOLD - budget * SEC,
            now,
            now,
            Misfire::DoNothing,
            THRESHOLD,
            100,
        );
        assert_eq!(plan.misfired, CRON_MISFIRE_COUNT_BUDGET);
        assert_eq!(plan.fires.first(), Some(&(now - THRESHOLD)));
    }

    #[test]
    fn cap_leaves_the_rest_for_the_next_scan() {
        let s = every(100);
        let now = 1_000_000;
        let plan = plan_fires(&s, now, now, now + 5_000, Misfire::DoNothing, THRESHOLD, 7);
        assert_eq!(
            plan.fires,
            (0..7).map(|k| now + k * 100).collect::<Vec<_>>()
        );
        assert_eq!(plan.next_fire_at, Some(now + 700));
        // The next call picks up exactly there: nothing lost, nothing doubled.
        let rest = plan_fires(
            &s,
            now + 700,
            now,
            now + 5_000,
            Misfire::DoNothing,
            THRESHOLD,
            1_000,
        );
        assert_eq!(rest.fires.first(), Some(&(now + 700)));
        assert_eq!(rest.fires.len(), 44);
        assert_eq!(rest.next_fire_at, Some(now + 5_100));

        // The collapsed fire counts against the cap.
        let plan = plan_fires(&s, 0, now, now + 5_000, Misfire::FireOnceNow, THRESHOLD, 1);
        assert_eq!(plan.fires, vec![now]);
        assert_eq!(plan.next_fire_at, Some(now + 100));
    }

    #[test]
    fn zero_cap() {
        let s = every(100);
        let now = 1_000_000;
        let plan = plan_fires(&s, now, now, now + 5_000, Misfire::DoNothing, THRESHOLD, 0);
        assert_eq!(
            plan,
            FirePlan {
                fires: vec![],
                next_fire_at: Some(now),
                misfired: 0
            }
        );
        // fire_once_now keeps its catch-up for the next call.
        let plan = plan_fires(&s, 0, now, now + 5_000, Misfire::FireOnceNow, THRESHOLD, 0);
        assert_eq!(
            plan,
            FirePlan {
                fires: vec![],
                next_fire_at: Some(0),
                misfired: 0
            }
        );
        // do_nothing still skips what it would skip anyway.
        let plan = plan_fires(&s, 0, now, now + 5_000, Misfire::DoNothing, THRESHOLD, 0);
        assert_eq!(plan.next_fire_at, Some(now - THRESHOLD));
        assert!(plan.fires.is_empty());
    }

    #[test]
    fn schedule_running_out_ends_with_none() {
        let s = cron("0 0 0 1 1 ? 2027");
        let at = utc(2027, 1, 1, 0, 0, 0);
        let plan = plan_fires(&s, at, at, at + 5_000, Misfire::DoNothing, THRESHOLD, 10);
        assert_eq!(plan.fires, vec![at]);
        assert_eq!(plan.next_fire_at, None);
        // Misfired and nothing after it.
        let plan = plan_fires(
            &s,
            at,
            at + DAY,
            at + DAY + 5_000,
            Misfire::DoNothing,
            THRESHOLD,
            10,
        );
        assert_eq!(
            plan,
            FirePlan {
                fires: vec![],
                next_fire_at: None,
                misfired: 1
            }
        );
        let plan = plan_fires(
            &s,
            at,
            at + DAY,
            at + DAY + 5_000,
            Misfire::FireOnceNow,
            THRESHOLD,
            10,
        );
        assert_eq!(
            plan,
            FirePlan {
                fires: vec![at + DAY],
                next_fire_at: None,
                misfired: 1
            }
        );
    }

    #[test]
    fn none_schedule_plans_nothing() {
        let none = Schedule::None.compile_at(t0()).expect("compiles");
        let plan = plan_fires(&none, 0, 10, 5_010, Misfire::FireOnceNow, THRESHOLD, 10);
        assert_eq!(plan, FirePlan::default());
    }

    #[test]
    fn odd_arguments_are_tolerated() {
        let s = every(1_000);
        // until < now behaves as until == now; a negative threshold as 0.
        let plan = plan_fires(&s, 500, 2_000, 0, Misfire::DoNothing, -7, 10);
        assert_eq!(plan.misfired, 2);
        assert!(plan.fires.is_empty());
        assert_eq!(plan.next_fire_at, Some(2_500));
        // Overflow near the end of time ends the schedule instead of wrapping.
        let plan = plan_fires(
            &s,
            i64::MAX - 10,
            i64::MAX - 10,
            i64::MAX,
            Misfire::DoNothing,
            THRESHOLD,
            10,
        );
        assert_eq!(plan.fires, vec![i64::MAX - 10]);
        assert_eq!(plan.next_fire_at, None);
    }

    #[test]
    fn naive_dates_helper_sanity() {
        // Guards the helpers the other tests rely on.
        let date = NaiveDate::from_ymd_opt(2026, 3, 6).expect("date");
        assert_eq!(date.format("%a").to_string(), "Fri");
        assert_eq!(utc(1970, 1, 1, 0, 0, 1), 1_000);
    }
}
