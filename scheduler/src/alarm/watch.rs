//! The watcher: conditions no single event tells of, looked at every [`EVERY`] on every
//! node — fires waiting for an executor (`no_executor`), a pull job's backlog older than
//! the threshold (`backlog`), a live scheduler node whose clock is off the database's
//! (`clock_skew`, from the offsets the nodes write with their heartbeats), and whether a
//! lost executor's app has one again (the `resolved` of `executor_lost`). A condition raises an event when it holds and its rule
//! is not open, and a resolve when it no longer holds and the rule is open; events several
//! nodes raise at once fold into one message.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::outbox::Alarms;
use super::{On, Rule};
use crate::model::*;
use crate::store::AlarmEvent;

/// How often the watcher looks.
pub const EVERY: Duration = Duration::from_secs(2);

/// What the watcher asks of the node it runs on.
pub struct Watching {
    /// Whether `app` has a live executor.
    pub has_executor: Arc<dyn Fn(&str) -> bool + Send + Sync>,
    /// The cluster's bound on a node's clock offset: a `clock_skew` rule's default.
    pub max_clock_offset_ms: Millis,
    /// A node whose heartbeat is older than this is not live.
    pub node_dead_after_ms: Millis,
}

/// What one look finds for one rule: `Some((holds, message))`, or `None` if the rule is
/// not the watcher's.
async fn look(
    alarms: &Alarms,
    rule: &Rule,
    watching: &Watching,
    now: Millis,
) -> crate::store::Result<Option<(bool, String)>> {
    Ok(match rule.on {
        On::NoExecutor => {
            let (n, since) = alarms
                .store
                .waiting_for_executor(&rule.app, rule.job_id)
                .await?;
            let waited = since.map_or(0, |s| now - s);
            Some((
                n > 0 && waited >= rule.threshold.unwrap_or(0),
                format!(
                    "{n} fires of app `{}` wait for an executor (the oldest for {waited} ms)",
                    rule.app
                ),
            ))
        }
        On::Backlog => {
            let Some(job) = rule.job_id else {
                return Ok(None);
            };
            let oldest = alarms.store.oldest_ready(job).await?;
            let age = oldest.map_or(0, |due| now - due);
            let threshold = rule.threshold.unwrap_or(0);
            Some((
                oldest.is_some() && age > threshold,
                format!(
                    "the oldest due task waits {age} ms for a consumer (threshold {threshold} ms)"
                ),
            ))
        }
        On::ClockSkew => {
            let bound = rule.threshold.unwrap_or(watching.max_clock_offset_ms);
            let skewed = alarms
                .store
                .skewed_nodes(now - watching.node_dead_after_ms, bound)
                .await?;
            let message = if skewed.is_empty() {
                format!("every live scheduler node's clock is within {bound} ms of the database's")
            } else {
                let nodes: Vec<String> = skewed
                    .iter()
                    .map(|(name, offset)| {
                        let (by, way) = (
                            offset.abs(),
                            if *offset > 0 { "behind" } else { "ahead of" },
                        );
                        format!("`{name}` is {by} ms {way} the database's")
                    })
                    .collect();
                format!(
                    "scheduler node clocks are off by more than {bound} ms: {}; their times are \
                     corrected, but fix their time sync (NTP)",
                    nodes.join(", ")
                )
            };
            Some((!skewed.is_empty(), message))
        }
        On::ExecutorLost if rule.open => Some((
            !(watching.has_executor)(&rule.app),
            format!("app `{}` has an executor again", rule.app),
        )),
        _ => None,
    })
}

/// One look at every rule the watcher keeps; the events it raised.
pub async fn look_all(
    alarms: &Alarms,
    watching: &Watching,
    now: Millis,
) -> crate::store::Result<usize> {
    let rules = alarms.rules.snapshot();
    let mut events: Vec<AlarmEvent> = Vec::new();
    for rule in rules.iter().filter(|r| r.enabled) {
        let Some((holds, message)) = look(alarms, rule, watching, now).await? else {
            continue;
        };
        if holds == rule.open {
            continue;
        }
        events.push(AlarmEvent {
            id: 0,
            rule_id: rule.id,
            resolved: !holds,
            count: 1,
            job_id: rule.job_id,
            task_id: None,
            run_id: None,
            attempt: None,
            message,
            at: now,
        });
    }
    alarms.store.raise_alarm_events(&events).await?;
    Ok(events.len())
}

/// The watcher loop of a node, until shutdown.
pub async fn watch_loop(alarms: Arc<Alarms>, watching: Watching, shutdown: watch::Receiver<bool>) {
    let mut every = crate::periodic::Every::new(EVERY, shutdown);
    while every.tick().await {
        if !alarms
            .rules
            .watch_any(&[On::NoExecutor, On::Backlog, On::ExecutorLost, On::ClockSkew])
        {
            continue;
        }
        if let Err(e) = look_all(&alarms, &watching, alarms.clock.now_ms()).await {
            tracing::warn!(error = %e, "watching alarm conditions failed");
        }
    }
}
