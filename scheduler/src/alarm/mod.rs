//! Alarms (SPEC §9): rules that watch what goes wrong, and the channels that tell people.
//!
//! An event is written where it happens and with it: a failed, timed-out or late run and a
//! dead task in the transaction that ends the attempt ([`raised`], called by completion),
//! a lost executor or a node taken over by the loop that saw it, a fire waiting for an
//! executor or a pull job's backlog by the watcher ([`watch`]). Rules are read from the
//! database into [`Rules`] (every [`REFRESH`], and at once after a change on this node).
//!
//! The sender loop ([`outbox`]) on every node folds each rule's events into alarms — the
//! throttle lets one message out per `throttle_ms`, with the count of the events it
//! folds; events gather until none came for [`GATHER_MS`] — and a
//! `resolved` notice when the condition clears. Each alarm has one send per channel in the
//! outbox table, claimed by one node at a time and retried with backoff until delivered:
//! a channel that is down delays nothing but its own sends ([`channel`]).

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use crate::model::*;
use crate::names::named_enum;
use crate::store::{AlarmEvent, AlarmRuleRow, InstanceEnded, Store};
use crate::workflow::InstanceStatus;

pub mod channel;
pub mod fold;
pub mod outbox;
pub mod watch;

/// How often every node reads the rules again (a change made on another node applies
/// within this long).
pub const REFRESH: Duration = Duration::from_secs(2);
/// A rule's events go out once none came for this long (a burst is one message)…
pub const GATHER_MS: i64 = 1_000;
/// …or once the first of them waited this long.
pub const MAX_GATHER_MS: i64 = 10_000;
/// The throttle when a rule names none.
pub const DEFAULT_THROTTLE_MS: i64 = 60_000;

named_enum! {
    what = "alarm event";
    /// What a rule watches.
    pub enum On {
        /// A run ended `failed`.
        RunFailed => "run_failed",
        /// A task ran out of attempts.
        TaskDead => "task_dead",
        /// A run was stopped at its timeout.
        RunTimeout => "run_timeout",
        /// A run started more than `threshold` ms after it was due.
        Lateness => "lateness",
        /// A fire waits for an executor of its app.
        NoExecutor => "no_executor",
        /// An executor stopped heartbeating.
        ExecutorLost => "executor_lost",
        /// A scheduler node died and another took over its claims.
        NodeTakenOver => "node_taken_over",
        /// A pull job's oldest due task waits longer than `threshold` ms.
        Backlog => "backlog",
        /// A live scheduler node's clock is off the database's by more than `threshold`
        /// ms (by default the cluster's `max_clock_offset_ms`).
        ClockSkew => "clock_skew",
        /// A workflow instance of the app failed (a step failed and nothing runs any more).
        WorkflowFailed => "workflow_failed",
        /// A recurring job's fire started more than `threshold` ms after its fire time, or
        /// never ran (its runs outlast its interval, a block strategy dropped it).
        ScheduleDrift => "schedule_drift",
    }
}

impl On {
    /// Whether the condition can clear (and so has a `resolved` notice).
    pub fn clears(self) -> bool {
        !matches!(self, On::TaskDead | On::NodeTakenOver | On::WorkflowFailed)
    }

    /// Whether a rule on it needs a `threshold` (ms).
    pub fn needs_threshold(self) -> bool {
        matches!(self, On::Lateness | On::Backlog | On::ScheduleDrift)
    }

    /// Whether a rule on it may have a `threshold` (ms).
    pub fn takes_threshold(self) -> bool {
        matches!(
            self,
            On::Lateness | On::Backlog | On::NoExecutor | On::ClockSkew | On::ScheduleDrift
        )
    }

    /// Whether a rule on it may watch one job (else it is about the app, or the cluster).
    pub fn takes_job(self) -> bool {
        !matches!(
            self,
            On::ExecutorLost | On::NodeTakenOver | On::ClockSkew | On::WorkflowFailed
        )
    }

    /// Whether completion raises it, from the run updates and ended attempts of a batch.
    pub fn at_completion(self) -> bool {
        matches!(
            self,
            On::RunFailed | On::TaskDead | On::RunTimeout | On::Lateness | On::ScheduleDrift
        )
    }
}

/// A rule as the raisers read it.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    pub id: i64,
    pub name: String,
    pub app: String,
    pub job_id: Option<i64>,
    pub on: On,
    pub threshold: Option<i64>,
    pub channels: Vec<String>,
    pub throttle_ms: i64,
    pub enabled: bool,
    /// An alarm went out and the condition has not cleared.
    pub open: bool,
}

impl Rule {
    pub fn from_row(r: &AlarmRuleRow) -> Option<Rule> {
        Some(Rule {
            id: r.id,
            name: r.name.clone(),
            app: r.app.clone(),
            job_id: r.job_id,
            on: r.on_event.parse().ok()?,
            threshold: r.threshold,
            channels: serde_json::from_str(&r.channels).ok()?,
            throttle_ms: r.throttle_ms,
            enabled: r.enabled,
            open: r.open_since.is_some(),
        })
    }

    /// Does it watch a job `job_id` of `app`?
    fn covers(&self, app: &str, job_id: i64) -> bool {
        self.enabled && self.app == app && self.job_id.is_none_or(|j| j == job_id)
    }

    fn event(&self, resolved: bool, message: String, at: Millis) -> AlarmEvent {
        AlarmEvent {
            id: 0,
            rule_id: self.id,
            resolved,
            count: 1,
            job_id: None,
            task_id: None,
            run_id: None,
            attempt: None,
            message,
            at,
        }
    }
}

/// The rules as last read; shared by every raiser on the node.
#[derive(Default)]
pub struct Rules {
    current: RwLock<Arc<Vec<Rule>>>,
}

impl Rules {
    pub fn snapshot(&self) -> Arc<Vec<Rule>> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Reads the rules again.
    pub async fn refresh(&self, store: &Store) -> crate::store::Result<()> {
        let rules: Vec<Rule> = store
            .alarm_rules()
            .await?
            .iter()
            .filter_map(Rule::from_row)
            .collect();
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(rules);
        Ok(())
    }

    /// Whether any enabled rule watches one of `on`.
    pub fn watch_any(&self, on: &[On]) -> bool {
        self.snapshot()
            .iter()
            .any(|r| r.enabled && on.contains(&r.on))
    }
}

/// Events that ended attempts and started runs raise for `rules`; `apps` names each job's
/// app. A failed or timed-out run, a dead task, a run that started later than a lateness
/// rule's threshold; and, for an open rule, the run that clears it (a success, a start on
/// time).
pub fn raised(
    rules: &[Rule],
    apps: &HashMap<i64, String>,
    updates: &[&RunUpdate],
    ended: &[EndedAttempt],
    now: Millis,
) -> Vec<AlarmEvent> {
    let mut out = Vec::new();
    let matching = |job_id: i64, on: On| {
        let app = apps.get(&job_id);
        rules
            .iter()
            .filter(move |r| r.on == on && app.is_some_and(|a| r.covers(a, job_id)))
    };
    for e in ended {
        let about = |mut ev: AlarmEvent| {
            ev.job_id = Some(e.job_id);
            ev.task_id = Some(e.task_id);
            ev.run_id = Some(e.run_id);
            ev.attempt = Some(e.attempt);
            ev
        };
        let said = e.message.as_deref().unwrap_or("no message");
        for (on, hit) in [
            (On::RunFailed, e.status == RunStatus::Failed),
            (On::RunTimeout, e.status == RunStatus::Timeout),
        ] {
            for r in matching(e.job_id, on) {
                if hit {
                    let m = format!(
                        "task {} attempt {}: run {} {}: {said}",
                        e.task_id, e.attempt, e.run_id, e.status
                    );
                    out.push(about(r.event(false, m, now)));
                } else if r.open && e.status == RunStatus::Succeeded {
                    let m = format!("run {} of task {} succeeded", e.run_id, e.task_id);
                    out.push(about(r.event(true, m, now)));
                }
            }
        }
        if let Some(drift) = e.drift {
            for r in matching(e.job_id, On::ScheduleDrift) {
                let threshold = r.threshold.unwrap_or(i64::MAX);
                let ev = match drift {
                    Drift::Late(ms) if ms > threshold => r.event(
                        false,
                        format!(
                            "fire of task {} started {ms} ms after its fire time \
                             (threshold {threshold} ms): the job's runs fall behind its schedule",
                            e.task_id
                        ),
                        now,
                    ),
                    Drift::Skipped => r.event(
                        false,
                        format!("fire of task {} never ran: {said}", e.task_id),
                        now,
                    ),
                    Drift::Late(ms) if r.open => r.event(
                        true,
                        format!(
                            "fire of task {} started {ms} ms after its fire time",
                            e.task_id
                        ),
                        now,
                    ),
                    Drift::Late(_) => continue,
                };
                out.push(about(ev));
            }
        }
        if e.next == TaskNext::Dead {
            for r in matching(e.job_id, On::TaskDead) {
                let m = format!(
                    "task {} is dead after attempt {} ({}: {said})",
                    e.task_id, e.attempt, e.status
                );
                out.push(about(r.event(false, m, now)));
            }
        }
    }
    for u in updates {
        let Some(started) = u.started_at else {
            continue;
        };
        let late = started - u.scheduled_at;
        for r in matching(u.job_id, On::Lateness) {
            let threshold = r.threshold.unwrap_or(i64::MAX);
            let mut ev = if late > threshold {
                r.event(
                    false,
                    format!(
                        "run {} of task {} started {late} ms after it was due (threshold {threshold} ms)",
                        u.run_id, u.task_id
                    ),
                    now,
                )
            } else if r.open {
                r.event(
                    true,
                    format!("run {} started {late} ms after it was due", u.run_id),
                    now,
                )
            } else {
                continue;
            };
            ev.job_id = Some(u.job_id);
            ev.task_id = Some(u.task_id);
            ev.run_id = Some(u.run_id);
            ev.attempt = Some(u.attempt);
            out.push(ev);
        }
    }
    coalesce(out)
}

/// Events of the instances in `ended` that failed, for the `workflow_failed` rules of
/// their workflows' apps: one row per rule (counting the instances), told by the last.
pub fn workflows_failed(rules: &[Rule], ended: &[InstanceEnded], now: Millis) -> Vec<AlarmEvent> {
    let mut out = Vec::new();
    for i in ended.iter().filter(|i| i.status == InstanceStatus::Failed) {
        let steps = i
            .failed_steps
            .iter()
            .map(|s| format!("`{s}`"))
            .collect::<Vec<_>>()
            .join(", ");
        let message = format!(
            "workflow `{}` instance {} failed: step{} {steps} failed",
            i.workflow,
            i.id,
            if i.failed_steps.len() == 1 { "" } else { "s" }
        );
        for r in rules
            .iter()
            .filter(|r| r.enabled && r.on == On::WorkflowFailed && r.app == i.app)
        {
            out.push(r.event(false, message.clone(), now));
        }
    }
    coalesce(out)
}

/// One row per rule and kind (problem or resolve) of a batch: its count is how many events
/// it stands for, its details the last one's, and its place in the order that of the last
/// one (so a batch that ends in a success ends with the resolve).
pub fn coalesce(events: Vec<AlarmEvent>) -> Vec<AlarmEvent> {
    let mut out: Vec<AlarmEvent> = Vec::with_capacity(events.len().min(8));
    for e in events {
        let count = match out
            .iter()
            .position(|o| o.rule_id == e.rule_id && o.resolved == e.resolved)
        {
            Some(i) => out.remove(i).count.saturating_add(e.count),
            None => e.count,
        };
        out.push(AlarmEvent { count, ..e });
    }
    out
}

/// Events of `on` for every enabled rule of `app` (any app, if `None`) that watches it.
pub fn app_events(
    rules: &[Rule],
    on: On,
    app: Option<&str>,
    resolved: bool,
    message: &str,
    now: Millis,
) -> Vec<AlarmEvent> {
    rules
        .iter()
        .filter(|r| r.enabled && r.on == on && app.is_none_or(|a| r.app == a))
        .filter(|r| !resolved || r.open)
        .map(|r| r.event(resolved, message.to_owned(), now))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(id: i64, on: On, job_id: Option<i64>, threshold: Option<i64>, open: bool) -> Rule {
        Rule {
            id,
            name: format!("r{id}"),
            app: "shop".into(),
            job_id,
            on,
            threshold,
            channels: vec!["c".into()],
            throttle_ms: 60_000,
            enabled: true,
            open,
        }
    }

    fn ended(task: i64, status: RunStatus, next: TaskNext) -> EndedAttempt {
        EndedAttempt {
            task_id: task,
            job_id: 7,
            attempt: 2,
            run_id: 100 + task,
            status,
            next,
            message: Some("exit 3".into()),
            drift: None,
        }
    }

    fn update(task: i64, scheduled_at: Millis, started_at: Option<Millis>) -> RunUpdate {
        RunUpdate {
            run_id: 100 + task,
            job_id: 7,
            task_id: task,
            attempt: 1,
            shard_index: 0,
            shard_total: 1,
            executor: None,
            scheduled_at,
            dispatched_at: None,
            started_at,
            finished_at: None,
            status: RunStatus::Running,
            exit_code: None,
            message: None,
            output: None,
        }
    }

    fn apps() -> HashMap<i64, String> {
        HashMap::from([(7, "shop".to_owned()), (8, "other".to_owned())])
    }

    #[test]
    fn failures_timeouts_and_deaths_raise_for_the_rules_that_watch_them() {
        let rules = vec![
            rule(1, On::RunFailed, None, None, false),
            rule(2, On::TaskDead, Some(7), None, false),
            rule(3, On::RunTimeout, None, None, false),
            rule(4, On::TaskDead, Some(8), None, false),
        ];
        let out = raised(
            &rules,
            &apps(),
            &[],
            &[
                ended(1, RunStatus::Failed, TaskNext::Dead),
                ended(
                    2,
                    RunStatus::Timeout,
                    TaskNext::Retry {
                        due_at: 0,
                        lost: false,
                    },
                ),
            ],
            1_000,
        );
        let got: Vec<(i64, Option<i64>, bool, i32)> = out
            .iter()
            .map(|e| (e.rule_id, e.task_id, e.resolved, e.count))
            .collect();
        assert_eq!(
            got,
            vec![
                (1, Some(1), false, 1),
                (2, Some(1), false, 1),
                (3, Some(2), false, 1)
            ]
        );
        assert!(
            out[0].message.contains("failed: exit 3"),
            "{}",
            out[0].message
        );
        assert!(
            out[1].message.contains("dead after attempt 2"),
            "{}",
            out[1].message
        );
        assert_eq!(
            (out[0].run_id, out[0].attempt, out[0].at),
            (Some(101), Some(2), 1_000)
        );
    }

    #[test]
    fn a_success_resolves_only_an_open_rule_and_other_apps_are_not_watched() {
        let rules = vec![
            rule(1, On::RunFailed, None, None, true),
            rule(2, On::RunFailed, None, None, false),
        ];
        let success = [ended(1, RunStatus::Succeeded, TaskNext::Succeeded)];
        let out = raised(&rules, &apps(), &[], &success, 0);
        assert_eq!(out.len(), 1);
        assert!(out[0].resolved && out[0].rule_id == 1);
        // A job of another app, or one whose app is unknown, raises nothing.
        let mut other = ended(1, RunStatus::Failed, TaskNext::Dead);
        other.job_id = 8;
        assert!(raised(&rules, &apps(), &[], &[other.clone()], 0).is_empty());
        other.job_id = 9;
        assert!(raised(&rules, &apps(), &[], &[other], 0).is_empty());
    }

    #[test]
    fn a_late_start_raises_and_a_start_on_time_resolves_an_open_lateness_rule() {
        let late = vec![rule(1, On::Lateness, None, Some(500), false)];
        let u = [
            update(1, 10_000, Some(10_600)),
            update(2, 10_000, Some(10_400)),
        ];
        let refs: Vec<&RunUpdate> = u.iter().collect();
        let out = raised(&late, &apps(), &refs, &[], 0);
        assert_eq!(out.len(), 1);
        assert!(
            out[0].message.contains("600 ms after it was due"),
            "{}",
            out[0].message
        );
        let open = vec![rule(1, On::Lateness, None, Some(500), true)];
        let out = raised(&open, &apps(), &refs[1..], &[], 0);
        assert!(out.len() == 1 && out[0].resolved);
        // A report without a start says nothing about lateness.
        let unstarted = [update(3, 10_000, None)];
        assert!(raised(&late, &apps(), &[&unstarted[0]], &[], 0).is_empty());
    }

    #[test]
    fn a_fire_behind_its_schedule_or_never_run_raises_drift_and_one_on_time_resolves_it() {
        let fire = |task, drift| EndedAttempt {
            drift: Some(drift),
            ..ended(task, RunStatus::Succeeded, TaskNext::Succeeded)
        };
        let rules = vec![rule(1, On::ScheduleDrift, Some(7), Some(1_000), false)];
        let behind = [fire(1, Drift::Late(1_400))];
        let out = raised(&rules, &apps(), &[], &behind, 0);
        assert_eq!(out.len(), 1);
        assert!(
            out[0]
                .message
                .contains("started 1400 ms after its fire time"),
            "{}",
            out[0].message
        );
        let dropped = [EndedAttempt {
            message: Some("executor x is still running this job".into()),
            ..fire(2, Drift::Skipped)
        }];
        let out = raised(&rules, &apps(), &[], &dropped, 0);
        assert!(
            out[0]
                .message
                .contains("never ran: executor x is still running")
        );
        // Inside the threshold: nothing, unless the rule is open (then it clears).
        let on_time = [fire(3, Drift::Late(200))];
        assert!(raised(&rules, &apps(), &[], &on_time, 0).is_empty());
        let open = vec![rule(1, On::ScheduleDrift, Some(7), Some(1_000), true)];
        let out = raised(&open, &apps(), &[], &on_time, 0);
        assert!(out.len() == 1 && out[0].resolved);
        // A delayed task (no drift) says nothing of the schedule.
        let delayed = [ended(4, RunStatus::Failed, TaskNext::Dead)];
        assert!(raised(&open, &apps(), &[], &delayed, 0).is_empty());
    }

    #[test]
    fn a_batch_of_failures_is_one_row_per_rule_told_by_the_last() {
        let rules = vec![rule(1, On::RunFailed, None, None, true)];
        let batch: Vec<EndedAttempt> = (1..=50)
            .map(|t| ended(t, RunStatus::Failed, TaskNext::Dead))
            .chain([ended(51, RunStatus::Succeeded, TaskNext::Succeeded)])
            .chain((52..=60).map(|t| ended(t, RunStatus::Failed, TaskNext::Dead)))
            .collect();
        let out = raised(&rules, &apps(), &[], &batch, 0);
        let got: Vec<(bool, i32, Option<i64>)> = out
            .iter()
            .map(|e| (e.resolved, e.count, e.task_id))
            .collect();
        // The batch ended failing: the resolve comes before the problems' row.
        assert_eq!(got, vec![(true, 1, Some(51)), (false, 59, Some(60))]);
    }

    #[test]
    fn app_events_go_to_every_rule_of_the_app_and_resolves_only_to_open_ones() {
        let rules = vec![
            rule(1, On::ExecutorLost, None, None, false),
            rule(2, On::ExecutorLost, None, None, true),
            rule(3, On::NodeTakenOver, None, None, false),
        ];
        let lost = app_events(&rules, On::ExecutorLost, Some("shop"), false, "gone", 5);
        assert_eq!(
            lost.iter().map(|e| e.rule_id).collect::<Vec<_>>(),
            vec![1, 2]
        );
        let back = app_events(&rules, On::ExecutorLost, Some("shop"), true, "back", 5);
        assert_eq!(back.iter().map(|e| e.rule_id).collect::<Vec<_>>(), vec![2]);
        assert!(app_events(&rules, On::ExecutorLost, Some("other"), false, "x", 5).is_empty());
        assert_eq!(
            app_events(&rules, On::NodeTakenOver, None, false, "x", 5).len(),
            1
        );
    }
}
