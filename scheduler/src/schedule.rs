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

use chrono::{DateTime, Datelike, Utc};
use chrono_tz::Tz;
use croner::{
    Cron,
    parser::{CronParser, Seconds, Year},
};
use serde::{Deserialize, Serialize};

use crate::names::named_enum;

/// How far ahead [`Schedule::compile`] looks for a first fire time. A cron expression with
/// none in this horizon is rejected as never firing (the same 10 years past which a delayed
/// task's `run_at` is refused).
pub const FIRE_HORIZON_MS: i64 = 10 * 366 * 24 * 60 * 60 * 1000;

/// How many misfired cron fire times [`plan_fires`] counts one by one before it jumps
/// straight to the first fire time that is no longer a misfire.
const CRON_MISFIRE_COUNT_BUDGET: u32 = 64;

/// When a job fires, as the API and the store carry it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(
    tag = "kind",
    rename_all = "snake_case",
    deny_unknown_fields,
    from = "ScheduleFields"
)]
pub enum Schedule {
    /// A Quartz-style cron expression, evaluated in `time_zone` (IANA name, default UTC).
    Cron {
        expr: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        time_zone: Option<String>,
    },
    /// Every `every_ms` milliseconds, keeping the phase of the first fire time.
    FixedRate { every_ms: i64 },
    /// `every_ms` after the previous fire's task ended (its last attempt, however it
    /// ended): runs never overlap, and a slow run pushes the next one back (XXL-JOB's
    /// `fixedDelay`). The first fire is `every_ms` after the job is created or enabled.
    FixedDelay { every_ms: i64 },
    /// Never on its own: fired only through the API or the console.
    None,
}

/// A [`Schedule`] as read: serde lets a unit variant of a tagged enum (`none`) carry
/// unknown fields, which every other body refuses; here it is an empty struct, so
/// `{"kind": "none", "every_ms": 5}` is refused too.
#[derive(Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
enum ScheduleFields {
    Cron {
        expr: String,
        #[serde(default)]
        time_zone: Option<String>,
    },
    FixedRate {
        every_ms: i64,
    },
    FixedDelay {
        every_ms: i64,
    },
    None {},
}

impl From<ScheduleFields> for Schedule {
    fn from(f: ScheduleFields) -> Self {
        match f {
            ScheduleFields::Cron { expr, time_zone } => Schedule::Cron { expr, time_zone },
            ScheduleFields::FixedRate { every_ms } => Schedule::FixedRate { every_ms },
            ScheduleFields::FixedDelay { every_ms } => Schedule::FixedDelay { every_ms },
            ScheduleFields::None {} => Schedule::None,
        }
    }
}

named_enum! {
    what = "schedule kind";
    /// The `kind` of a [`Schedule`], for a database column.
    pub enum ScheduleKind {
        Cron => "cron",
        FixedRate => "fixed_rate",
        FixedDelay => "fixed_delay",
        None => "none",
    }
}

named_enum! {
    what = "misfire policy";
    /// What to do with fire times that were missed by more than the misfire threshold
    /// (every scheduler node was down, or the job was stuck behind a long backlog).
    #[derive(Default)]
    pub enum Misfire {
        /// Skip the missed fire times and carry on with the next regular one.
        #[default]
        DoNothing => "do_nothing",
        /// Fire once now for all the missed fire times, then carry on.
        FireOnceNow => "fire_once_now",
    }
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
    #[error(
        "every_ms must be at least {MIN_EVERY_MS} (got {0}): a job firing more than ten times \
         a second is a loop, not a schedule; use a long-running plugin or a pull consumer"
    )]
    EveryMsBelowMinimum(i64),
    #[error("every_ms must be at most {FIRE_HORIZON_MS} (10 years) (got {0})")]
    EveryMsTooLarge(i64),
}

/// The shortest `every_ms` a new or changed schedule may have. Schedules stored before
/// this bound keep firing as they were (the scan compiles them without it); only what a
/// user sends now is held to it.
pub const MIN_EVERY_MS: i64 = 100;

impl Schedule {
    /// The checks on a schedule a user sends (beyond [`Schedule::compile`], which every
    /// stored schedule passes): fixed rates and delays of at least [`MIN_EVERY_MS`].
    pub fn check_new(&self) -> Result<(), ScheduleError> {
        match self {
            Self::FixedRate { every_ms } | Self::FixedDelay { every_ms }
                if *every_ms < MIN_EVERY_MS =>
            {
                Err(ScheduleError::EveryMsBelowMinimum(*every_ms))
            }
            _ => Ok(()),
        }
    }

    pub fn kind(&self) -> ScheduleKind {
        match self {
            Self::Cron { .. } => ScheduleKind::Cron,
            Self::FixedRate { .. } => ScheduleKind::FixedRate,
            Self::FixedDelay { .. } => ScheduleKind::FixedDelay,
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
            Self::FixedRate { every_ms } | Self::FixedDelay { every_ms } if *every_ms < 1 => {
                return Err(ScheduleError::EveryMsTooSmall(*every_ms));
            }
            // A rate beyond the fire horizon would put the next fire past any date.
            Self::FixedRate { every_ms } | Self::FixedDelay { every_ms }
                if *every_ms > FIRE_HORIZON_MS =>
            {
                return Err(ScheduleError::EveryMsTooLarge(*every_ms));
            }
            Self::FixedRate { every_ms } => CompiledSchedule(Compiled::FixedRate {
                every_ms: *every_ms,
            }),
            Self::FixedDelay { every_ms } => CompiledSchedule(Compiled::FixedDelay {
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
    FixedDelay { every_ms: i64 },
    None,
}

impl CompiledSchedule {
    pub fn kind(&self) -> ScheduleKind {
        match self.0 {
            Compiled::Cron { .. } => ScheduleKind::Cron,
            Compiled::FixedRate { .. } => ScheduleKind::FixedRate,
            Compiled::FixedDelay { .. } => ScheduleKind::FixedDelay,
            Compiled::None => ScheduleKind::None,
        }
    }

    /// The first fire time strictly after `after_ms`, or `None` if there is none (a `none`
    /// schedule, a cron expression whose years have all passed, or out of range).
    ///
    /// Cron fire times are whole seconds. A fixed-rate schedule has no anchor of its own,
    /// so here the answer is `after_ms + every_ms`; [`plan_fires`] keeps a running job's
    /// phase. A fixed-delay schedule's is `after_ms + every_ms` too: its first fire after
    /// `after_ms`, and (for a preview) its fire times if runs took no time.
    pub fn next_after(&self, after_ms: i64) -> Option<i64> {
        match &self.0 {
            Compiled::Cron { cron, tz } => {
                let start = DateTime::from_timestamp_millis(after_ms)?.with_timezone(tz);
                let next = cron.find_next_occurrence(&start, false).ok()?;
                Some(next.timestamp_millis())
            }
            Compiled::FixedRate { every_ms } | Compiled::FixedDelay { every_ms } => {
                after_ms.checked_add(*every_ms)
            }
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
/// A fixed-delay schedule plans one fire and returns `next_fire_at: None`: the next is
/// set when that fire's task ends ([`CompiledSchedule::after_end`]). A misfired one fires
/// at `now` with `fire_once_now`; with `do_nothing` it is skipped and the next is
/// `every_ms` after `now`.
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
    if let Compiled::FixedDelay { every_ms } = schedule.0 {
        match (next_fire_at < cutoff, misfire) {
            _ if max_fires == 0 => {}
            (false, _) => {
                plan.fires.push(next_fire_at);
                plan.next_fire_at = None;
            }
            (true, Misfire::FireOnceNow) => {
                plan.misfired = 1;
                plan.fires.push(now);
                plan.next_fire_at = None;
            }
            (true, Misfire::DoNothing) => {
                plan.misfired = 1;
                plan.next_fire_at = now.checked_add(every_ms);
            }
        }
        return plan;
    }

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

impl CompiledSchedule {
    /// A fixed-delay schedule's next fire time once a fire's task ended at `ended_at`;
    /// `None` for every other kind (their fires do not wait for one another).
    pub fn after_end(&self, ended_at: i64) -> Option<i64> {
        match self.0 {
            Compiled::FixedDelay { every_ms } => ended_at.checked_add(every_ms),
            _ => None,
        }
    }
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
mod tests;

/// The bound on new schedules ([`Schedule::check_new`]); the rest is in `schedule/tests.rs`.
#[cfg(test)]
mod bound_tests {
    use super::Schedule;

    #[test]
    fn new_schedules_fire_at_most_ten_times_a_second() {
        for s in [1, 99].map(|every_ms| Schedule::FixedDelay { every_ms }) {
            assert!(
                s.check_new()
                    .unwrap_err()
                    .to_string()
                    .contains("at least 100")
            );
            // A stored one still compiles: the scan keeps firing what was allowed before.
            assert!(s.compile_at(0).is_ok());
        }
        assert!(Schedule::FixedRate { every_ms: 99 }.check_new().is_err());
        assert!(Schedule::FixedRate { every_ms: 100 }.check_new().is_ok());
    }
}
