//! The schedule parsers and the next-fire arithmetic, case by case.

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
        "`skip` is not a valid misfire policy; expected one of: do_nothing, fire_once_now"
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

// ---- fixed delay ----

fn after_each(ms: i64) -> CompiledSchedule {
    Schedule::FixedDelay { every_ms: ms }
        .compile_at(t0())
        .expect("valid fixed delay")
}

#[test]
fn a_fixed_delay_plans_one_fire_and_waits_for_its_end() {
    let s = after_each(10 * SEC);
    let now = t0();
    assert_eq!(s.next_after(now), Some(now + 10 * SEC), "the first fire");
    // However wide the window, one fire; the next is set when it ends.
    let plan = plan_fires(
        &s,
        now + 10 * SEC,
        now,
        now + HOUR,
        Misfire::DoNothing,
        5 * SEC,
        100,
    );
    assert_eq!(plan.fires, vec![now + 10 * SEC]);
    assert_eq!(plan.next_fire_at, None);
    assert_eq!(s.after_end(now + 42 * SEC), Some(now + 52 * SEC));
    assert_eq!(every(10 * SEC).after_end(now), None, "a rate does not wait");
    // Not yet due, or no room: nothing changes.
    let early = plan_fires(
        &s,
        now + MIN,
        now,
        now + 5 * SEC,
        Misfire::DoNothing,
        5 * SEC,
        100,
    );
    assert_eq!(
        (early.fires.len(), early.next_fire_at),
        (0, Some(now + MIN))
    );
    let full = plan_fires(&s, now, now, now + 5 * SEC, Misfire::DoNothing, 5 * SEC, 0);
    assert_eq!((full.fires.len(), full.next_fire_at), (0, Some(now)));
}

#[test]
fn a_missed_fixed_delay_fires_now_or_waits_a_delay_from_now() {
    let s = after_each(10 * SEC);
    let now = t0();
    let missed = now - HOUR;
    let once = plan_fires(
        &s,
        missed,
        now,
        now + 5 * SEC,
        Misfire::FireOnceNow,
        5 * SEC,
        100,
    );
    assert_eq!(
        (once.fires, once.next_fire_at, once.misfired),
        (vec![now], None, 1)
    );
    let skip = plan_fires(
        &s,
        missed,
        now,
        now + 5 * SEC,
        Misfire::DoNothing,
        5 * SEC,
        100,
    );
    assert_eq!(
        (skip.fires, skip.next_fire_at, skip.misfired),
        (vec![], Some(now + 10 * SEC), 1)
    );
    // Late inside the threshold: fired, late.
    let late = plan_fires(
        &s,
        now - SEC,
        now,
        now + 5 * SEC,
        Misfire::DoNothing,
        5 * SEC,
        100,
    );
    assert_eq!(late.fires, vec![now - SEC]);
    assert_eq!(
        Schedule::FixedDelay { every_ms: 0 }
            .compile_at(now)
            .unwrap_err(),
        ScheduleError::EveryMsTooSmall(0)
    );
}
