//! The executor registry: registrations, heartbeats and goodbyes (a replayed one changes
//! nothing), and the reports executors send.

use std::collections::HashMap;

use rota_proto::{Deregistration, Registration, RunReport};

use crate::model::*;
use crate::pipeline::complete::{self};

use super::*;

/// Transactions a large report batch is applied as, at most ([`Ports::apply_reports`]).
const APPLY_PARTS: usize = 4;
/// Reports a part of a batch holds, at least: below this a transaction's fixed statements
/// outweigh what the split saves.
const APPLY_PART_MIN: usize = 16;
/// Reports in a batch applied in parts, at most. A larger one is a burst, where what each
/// report costs matters more than how soon the first steps go out, and whose reports are
/// often of one instance (a map's elements): parts would only wait on each other's locks
/// (a map of 10,000 took 2.0 s split, 0.9 s whole, at four times the node's CPU).
const APPLY_SPLIT_MAX: usize = 256;

impl Ports {
    /// Whether a registration, heartbeat or goodbye signed at `signed_at` is newer than
    /// what the executor sent before (to any node). An older one is a captured request
    /// replayed to another node within the signature window: it must not report a stale
    /// list of runs, nor remove a live executor.
    async fn is_newest(&self, app: &str, address: &str, signed_at: Millis) -> anyhow::Result<bool> {
        let newest = self.cluster.store.executor_clock(app, address).await?;
        let fresh = newest.is_none_or(|newest| signed_at > newest);
        if !fresh {
            tracing::warn!(
                app,
                executor = address,
                signed_at,
                "ignoring a request older than one already accepted from this executor (replayed?)"
            );
        }
        Ok(fresh)
    }

    pub async fn executor_registered(
        &self,
        reg: &Registration,
        signed_at: Millis,
    ) -> anyhow::Result<()> {
        if !self.is_newest(&reg.app, &reg.address, signed_at).await? {
            return Ok(());
        }
        let now = self.cluster.clock.now_ms();
        self.upsert_executor(reg, now, signed_at).await?;
        // A (re)started executor lists the runs it still has; the others it was given are lost.
        complete::reconcile_executor(
            &self.completion,
            &reg.app,
            &reg.address,
            &reg.active_runs,
            None,
            now,
        )
        .await?;
        self.refresh_executors().await?;
        // Fires that found no executor of this app go out now.
        let woken = self
            .cluster
            .store
            .wake_waiting(std::slice::from_ref(&reg.app))
            .await?;
        if woken > 0 {
            tracing::info!(app = %reg.app, tasks = woken, "an executor registered; fires that waited for one go out");
            self.scan_wake.now();
        }
        Ok(())
    }

    pub async fn executor_heartbeat(
        &self,
        reg: &Registration,
        signed_at: Millis,
    ) -> anyhow::Result<()> {
        if !self.is_newest(&reg.app, &reg.address, signed_at).await? {
            return Ok(());
        }
        let now = self.cluster.clock.now_ms();
        let previous = self
            .cluster
            .store
            .executor_heartbeat_at(&reg.app, &reg.address)
            .await?;
        self.upsert_executor(reg, now, signed_at).await?;
        // A run dispatched before the previous heartbeat arrived was known to the executor
        // before it built this one (heartbeats go one at a time), so it must be listed.
        // Anything dispatched later may legitimately be missing.
        if let Some(previous) = previous {
            complete::reconcile_executor(
                &self.completion,
                &reg.app,
                &reg.address,
                &reg.active_runs,
                Some(previous),
                now,
            )
            .await?;
        }
        Ok(())
    }

    /// An executor's goodbye, unless it sent something signed later (a replayed goodbye
    /// does not remove an executor that registered again).
    pub async fn executor_deregistered(
        &self,
        d: &Deregistration,
        signed_at: Millis,
    ) -> anyhow::Result<()> {
        self.cluster
            .store
            .remove_executor(&d.app, &d.address, Some(signed_at))
            .await?;
        self.refresh_executors().await
    }

    /// Records a registration or heartbeat, and moves the executor's clock to its signed time.
    async fn upsert_executor(
        &self,
        reg: &Registration,
        now: Millis,
        signed_at: Millis,
    ) -> anyhow::Result<()> {
        let clamp = |n: u32| i32::try_from(n).unwrap_or(i32::MAX);
        self.cluster
            .store
            .upsert_executor(
                &reg.app,
                &reg.address,
                clamp(reg.capacity),
                clamp(reg.running),
                now,
            )
            .await?;
        self.cluster
            .store
            .advance_executor_clock(&reg.app, &reg.address, signed_at)
            .await?;
        Ok(())
    }

    async fn refresh_executors(&self) -> anyhow::Result<()> {
        let alive_after = self.cluster.clock.now_ms() - self.cluster.config.executor_dead_after_ms;
        self.executors
            .refresh(&self.cluster.store, alive_after)
            .await?;
        Ok(())
    }

    /// Applies executor reports; returns how many run rows were written.
    ///
    /// On MySQL a batch of a few dozen to [`APPLY_SPLIT_MAX`] reports is applied as up to
    /// [`APPLY_PARTS`] transactions at once ([`split_by_instance`]): the next workflow
    /// steps its reports make ready fall due when their transaction commits, and one
    /// transaction of a hundred reports kept them waiting its whole length (SPEC §7's
    /// hand-off). Each part is a complete apply
    /// (reports, their tasks' next states and the steps they make ready commit together);
    /// the batch is acknowledged only when every part is, and a resent batch changes only
    /// what a failed part did not write.
    pub async fn apply_reports(&self, reports: &[RunReport]) -> anyhow::Result<usize> {
        // Each run's end as a span of its trace, open while it is applied.
        let _spans: Vec<tracing::Span> = match self.config().traces {
            true => reports.iter().filter_map(report_span).collect(),
            false => Vec::new(),
        };
        let mut updates: Vec<RunUpdate> = reports.iter().map(RunUpdate::from_report).collect();
        // SQLite has one writer: parts would only queue behind one another.
        let concurrent = self.cluster.store.backend() == crate::store::Backend::MySql;
        if !concurrent || !(2 * APPLY_PART_MIN..=APPLY_SPLIT_MAX).contains(&updates.len()) {
            return Ok(complete::apply(&self.completion, &updates).await?.written);
        }
        let mut task_ids: Vec<i64> = updates.iter().map(|u| u.task_id).collect();
        task_ids.sort_unstable();
        task_ids.dedup();
        let instances = self.cluster.store.step_instances(&task_ids).await?;
        updates.sort_by_key(|u| u.run_id);
        let parts = split_by_instance(updates, &instances);
        let parts = parts
            .iter()
            .map(|part| complete::apply(&self.completion, part));
        let mut written = 0;
        for applied in futures_util::future::join_all(parts).await {
            written += applied?.written;
        }
        Ok(written)
    }
}

/// `updates` (in run-id order) in up to [`APPLY_PARTS`] parts of about equal size, each in
/// run-id order, with every workflow instance's steps (`instances`: a step task's
/// instance) in one part. Parts that shared an instance waited on its row lock, one
/// applying after the other: two in three of the apply's lock waits at 1,000 step
/// transitions/s, when parts were run-id ranges.
fn split_by_instance(
    updates: Vec<RunUpdate>,
    instances: &HashMap<i64, i64>,
) -> Vec<Vec<RunUpdate>> {
    let size = updates.len().div_ceil(APPLY_PARTS).max(APPLY_PART_MIN);
    // Each instance's (or lone task's) updates, in the order of their first run.
    let mut groups: Vec<Vec<RunUpdate>> = Vec::new();
    let mut group_of: HashMap<(bool, i64), usize> = HashMap::new();
    for u in updates {
        let key = match instances.get(&u.task_id) {
            Some(&instance) => (true, instance),
            None => (false, u.task_id),
        };
        let g = *group_of.entry(key).or_insert_with(|| {
            groups.push(Vec::new());
            groups.len() - 1
        });
        groups[g].push(u);
    }
    let mut parts: Vec<Vec<RunUpdate>> = vec![Vec::new()];
    for group in groups {
        let full = parts.last().is_some_and(|p| p.len() >= size);
        if full && parts.len() < APPLY_PARTS {
            parts.push(Vec::new());
        }
        parts.last_mut().expect("a part").extend(group);
    }
    for part in &mut parts {
        part.sort_by_key(|u| u.run_id);
    }
    parts
}

/// The span of a final report sent in a trace (the executor's run its parent); `None` for
/// a `running` report or one outside any trace.
fn report_span(report: &RunReport) -> Option<tracing::Span> {
    if report.status == rota_proto::ReportStatus::Running {
        return None;
    }
    let traceparent = report.traceparent.as_deref()?;
    let span = tracing::info_span!(
        parent: None,
        "report",
        otel.name = "report",
        otel.kind = "consumer",
        rota.task.id = report.task_id,
        rota.run.id = report.run_id,
        rota.attempt = report.attempt,
        rota.status = ?report.status,
    );
    rota_net::trace::continue_from(&span, Some(traceparent));
    Some(span)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn update(run_id: i64, task_id: i64) -> RunUpdate {
        RunUpdate::sample(run_id, task_id, RunStatus::Succeeded)
    }

    #[test]
    fn a_batch_splits_between_instances_never_inside_one() {
        // 40 instances of three steps each, their runs interleaved as a batch brings them:
        // instance k's tasks are 3k, 3k+1, 3k+2, run in rounds.
        let mut updates = Vec::new();
        let mut instances = HashMap::new();
        for round in 0..3 {
            for k in 0..40i64 {
                let task = 3 * k + round;
                instances.insert(task, 1_000 + k);
                updates.push(update(updates.len() as i64 + 1, task));
            }
        }
        // And 8 tasks of no workflow.
        updates.extend((0..8).map(|t| update(200 + t, 900 + t)));
        let parts = split_by_instance(updates.clone(), &instances);
        assert_eq!(parts.len(), APPLY_PARTS);
        let mut part_of: HashMap<i64, usize> = HashMap::new();
        for (p, part) in parts.iter().enumerate() {
            assert!(part.windows(2).all(|w| w[0].run_id < w[1].run_id));
            assert!(part.len() >= APPLY_PART_MIN, "a part of {}", part.len());
            for u in part {
                if let Some(&instance) = instances.get(&u.task_id) {
                    let first = *part_of.entry(instance).or_insert(p);
                    assert_eq!(first, p, "instance {instance} is in two parts");
                }
            }
        }
        let mut all: Vec<RunUpdate> = parts.into_iter().flatten().collect();
        all.sort_by_key(|u| u.run_id);
        assert_eq!(all, updates, "a report was lost or doubled");
    }
}
