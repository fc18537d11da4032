//! The throttle: how a rule's waiting events become alarms ([`fold`]), decided on the rule
//! as locked by the folding transaction.
//!
//! A rule lets one message out per `throttle_ms`, carrying every event that waited (its
//! `count`). Events gather until none came for [`GATHER_MS`] (or the first waited
//! [`MAX_GATHER_MS`]): a burst is one message, not one plus the rest a throttle later,
//! and a lone event goes out about a second after it happened. When a condition that can clear does
//! (a resolve event after the last problem), the problems still waiting go out with a
//! `resolved` notice after them, once the throttle allows; a resolve of a rule with
//! nothing open is dropped.

use super::{GATHER_MS, MAX_GATHER_MS, On};
use crate::model::Millis;
use crate::store::{AlarmEvent, AlarmRow, AlarmRuleRow, Folded, Pending};

/// Whether folding may make an alarm now, from the rule and its waiting events' first and
/// last times: a last event that resolves is always worth a look; problems once they
/// gathered and the throttle allows. (The pre-check that spares summing the events of a
/// rule that waits.)
pub fn due(
    rule: &AlarmRuleRow,
    first_at: Millis,
    last_at: Millis,
    last_resolved: bool,
    now: Millis,
) -> bool {
    let throttled = rule
        .last_sent_at
        .is_some_and(|t| now < t.saturating_add(rule.throttle_ms));
    let gathered =
        now >= last_at.saturating_add(GATHER_MS) || now >= first_at.saturating_add(MAX_GATHER_MS);
    last_resolved || (!throttled && gathered)
}

pub fn fold(rule: &AlarmRuleRow, pending: &Pending, now: Millis) -> Folded {
    let clears = rule.on_event.parse::<On>().is_ok_and(On::clears);
    let mut folded = Folded {
        alarms: Vec::new(),
        consumed: false,
        open_since: rule.open_since,
        last_sent_at: rule.last_sent_at,
    };
    if let Some(p) = &pending.problems {
        let throttled = rule
            .last_sent_at
            .is_some_and(|t| now < t.saturating_add(rule.throttle_ms));
        let gathered = now >= p.last.at.saturating_add(GATHER_MS)
            || now >= p.first_at.saturating_add(MAX_GATHER_MS);
        if throttled || !(gathered || pending.resolve.is_some()) {
            return folded;
        }
        let message = if p.count == 1 {
            p.last.message.clone()
        } else {
            format!("{} events; the last: {}", p.count, p.last.message)
        };
        folded
            .alarms
            .push(alarm(rule, &p.last, message, p.count, p.first_at, false));
        folded.last_sent_at = Some(now);
        if clears {
            folded.open_since = folded.open_since.or(Some(now));
        }
    }
    if let Some(resolve) = &pending.resolve
        && clears
        && folded.open_since.is_some()
    {
        let message = format!("resolved: {}", resolve.message);
        folded
            .alarms
            .push(alarm(rule, resolve, message, 1, resolve.at, true));
        folded.open_since = None;
    }
    folded.consumed = true;
    folded
}

fn alarm(
    rule: &AlarmRuleRow,
    e: &AlarmEvent,
    message: String,
    count: i64,
    first_at: Millis,
    resolved: bool,
) -> AlarmRow {
    AlarmRow {
        id: 0,
        rule_id: rule.id,
        rule: rule.name.clone(),
        on_event: rule.on_event.clone(),
        app: rule.app.clone(),
        job_id: e.job_id,
        task_id: e.task_id,
        run_id: e.run_id,
        attempt: e.attempt,
        message,
        count: i32::try_from(count).unwrap_or(i32::MAX),
        resolved,
        first_at,
        last_at: e.at,
        created_at: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(on: &str) -> AlarmRuleRow {
        AlarmRuleRow {
            id: 1,
            name: "r".into(),
            app: "shop".into(),
            job_id: None,
            on_event: on.into(),
            threshold: None,
            channels: "[\"c\"]".into(),
            throttle_ms: 60_000,
            enabled: true,
            open_since: None,
            last_sent_at: None,
            created_at: 0,
            updated_at: 0,
        }
    }

    fn event(id: i64, at: Millis, resolved: bool) -> AlarmEvent {
        AlarmEvent {
            id,
            rule_id: 1,
            resolved,
            count: 1,
            job_id: Some(7),
            task_id: Some(id),
            run_id: Some(100 + id),
            attempt: Some(1),
            message: format!("event {id}"),
            at,
        }
    }

    #[test]
    fn a_burst_waits_to_gather_then_goes_out_as_one_message_with_its_count() {
        let events: Vec<_> = (1..=100).map(|i| event(i, 10_000 + i, false)).collect();
        let r = rule("run_failed");
        assert_eq!(
            fold(&r, &Pending::of(&events), 11_000),
            Folded::default(),
            "the last came 900 ms ago"
        );
        let f = fold(&r, &Pending::of(&events), 11_100);
        assert_eq!(f.alarms.len(), 1);
        assert_eq!(f.alarms[0].count, 100);
        assert_eq!(f.alarms[0].first_at, 10_001);
        assert_eq!(f.alarms[0].last_at, 10_100);
        assert!(
            f.alarms[0]
                .message
                .starts_with("100 events; the last: event 100")
        );
        assert!(f.consumed);
        assert_eq!((f.open_since, f.last_sent_at), (Some(11_100), Some(11_100)));
    }

    #[test]
    fn a_steady_stream_still_goes_out_after_the_longest_gather() {
        // One every 500 ms: never a second of quiet.
        let events: Vec<_> = (0..20).map(|i| event(i + 1, i * 500, false)).collect();
        let r = rule("run_failed");
        assert!(!fold(&r, &Pending::of(&events), MAX_GATHER_MS - 1).consumed);
        assert_eq!(
            fold(&r, &Pending::of(&events), MAX_GATHER_MS).alarms[0].count,
            20
        );
    }

    #[test]
    fn within_the_throttle_events_wait_for_its_end() {
        let mut r = rule("run_failed");
        r.last_sent_at = Some(50_000);
        r.open_since = Some(50_000);
        let events = vec![event(1, 60_000, false), event(2, 70_000, false)];
        assert!(!fold(&r, &Pending::of(&events), 109_999).consumed);
        let f = fold(&r, &Pending::of(&events), 110_000);
        assert_eq!(f.alarms.len(), 1);
        assert_eq!(f.alarms[0].count, 2);
        assert_eq!(f.open_since, Some(50_000), "still the same open condition");
    }

    #[test]
    fn a_clearing_condition_sends_what_waited_then_a_resolved_notice() {
        let r = rule("run_failed");
        let events = vec![event(1, 1_000, false), event(2, 1_100, true)];
        let f = fold(&r, &Pending::of(&events), 1_200);
        assert_eq!(f.alarms.len(), 2);
        assert!(!f.alarms[0].resolved && f.alarms[1].resolved);
        assert_eq!(f.alarms[1].message, "resolved: event 2");
        assert_eq!(f.open_since, None);
        assert!(f.consumed);
    }

    #[test]
    fn a_resolve_of_an_open_rule_is_a_notice_and_of_a_closed_one_nothing() {
        let mut r = rule("lateness");
        let events = vec![event(5, 1_000, true)];
        let f = fold(&r, &Pending::of(&events), 1_000);
        assert!(f.alarms.is_empty());
        assert!(f.consumed);
        r.open_since = Some(500);
        let f = fold(&r, &Pending::of(&events), 1_000);
        assert_eq!(f.alarms.len(), 1);
        assert!(f.alarms[0].resolved);
        assert_eq!(f.open_since, None);
    }

    #[test]
    fn a_problem_after_a_resolve_keeps_the_condition_open() {
        let r = rule("run_failed");
        let events = vec![
            event(1, 1_000, false),
            event(2, 1_100, true),
            event(3, 1_200, false),
        ];
        let f = fold(&r, &Pending::of(&events), 2_300);
        assert_eq!(f.alarms.len(), 1);
        assert_eq!(f.alarms[0].count, 2);
        assert_eq!(f.open_since, Some(2_300));
    }

    #[test]
    fn rows_that_stand_for_several_events_count_as_many() {
        let mut e = event(1, 0, false);
        e.count = 40;
        let f = fold(
            &rule("run_failed"),
            &Pending::of(&[e, event(2, 10, false)]),
            2_000,
        );
        assert_eq!(f.alarms[0].count, 41);
    }

    #[test]
    fn the_pre_check_waits_for_the_gather_and_the_throttle_but_not_for_a_resolve() {
        let mut r = rule("run_failed");
        assert!(!due(&r, 0, 500, false, 1_499));
        assert!(due(&r, 0, 500, false, 1_500));
        r.last_sent_at = Some(1_000);
        assert!(!due(&r, 0, 500, false, 60_999));
        assert!(due(&r, 0, 500, false, 61_000));
        assert!(due(&r, 0, 500, true, 2_000));
    }

    #[test]
    fn a_dead_task_never_opens_a_condition() {
        let r = rule("task_dead");
        let f = fold(&r, &Pending::of(&[event(1, 0, false)]), 5_000);
        assert_eq!(f.alarms.len(), 1);
        assert_eq!(f.open_since, None);
    }
}
