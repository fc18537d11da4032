//! Pull delivery (SPEC §8): consumers pull a `pull` job's due tasks with a lease, then ack,
//! nack or extend it; plus the re-drive of dead tasks and the rescheduling of pending ones.
//!
//! A pull answers at once when tasks are ready, else waits up to `wait_ms` for the ready
//! board to say one became ready (on this node's wheel or, through a peer notice,
//! another's) — no polling of the database per consumer. The attempt a lease holds ends
//! the way an executor's run does (`complete::apply`): an ack succeeds it, a nack fails
//! it (retried after `delay_ms` or the backoff, or `dead`), an expired lease loses it.

use std::collections::HashMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use super::fields::{AnyJson, NameOrId};
use super::jobs::{cached_job, task_as};
use super::validate::{self, invalid};
use super::{Error, Result};
use crate::access::{Need, Principal};
use crate::model::Job;
use crate::model::{Delivery, Millis, RunStatus, Task};
use crate::pipeline::ready::Want;
use crate::ports::Ports;
use crate::store::{LeaseEnding, Leased, QueueFacts};

pub const MAX_PULL: i64 = 1000;
const DEFAULT_LEASE_MS: i64 = 30_000;
pub const MIN_LEASE_MS: i64 = 1_000;
pub const MAX_LEASE_MS: i64 = 43_200_000;
pub const MAX_WAIT_MS: i64 = 30_000;
pub const MAX_CONSUMER_CHARS: usize = 100;
/// Most acks in one batch.
pub const MAX_ACKS: usize = 1000;
/// Most tasks one bulk re-drive moves.
pub const MAX_REDRIVE: i64 = 10_000;
pub const MAX_NACK_DELAY_MS: i64 = 7 * 86_400_000;
/// How long a pull whose wait ended waits for the leases dispatch took it for.
const HANDOVER_GRACE: Duration = Duration::from_secs(2);

/// `POST /api/v1/jobs/{job}/pull`.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PullFields {
    /// 1 to 1,000 tasks; 1 by default.
    pub max: Option<i64>,
    /// How long the consumer holds each task before it is delivered again (1,000 to
    /// 43,200,000 ms; 30,000 by default).
    pub lease_ms: Option<i64>,
    /// How long to wait for a task to fall due when none is ready (0 to 30,000 ms; 0).
    pub wait_ms: Option<i64>,
    /// The consumer's name, shown as the runs' executor `pull:<consumer>`.
    pub consumer: Option<String>,
}

/// Pulls up to `max` due tasks of a pull job, waiting up to `wait_ms` for one.
pub async fn pull(ports: &Ports, who: &Principal, job: &str, f: PullFields) -> Result<Vec<Leased>> {
    let max = validate::within("max", f.max.unwrap_or(1), 1..=MAX_PULL)?;
    let lease_ms = validate::within(
        "lease_ms",
        f.lease_ms.unwrap_or(DEFAULT_LEASE_MS),
        MIN_LEASE_MS..=MAX_LEASE_MS,
    )?;
    let wait_ms = validate::within("wait_ms", f.wait_ms.unwrap_or(0), 0..=MAX_WAIT_MS)?;
    let consumer = f.consumer.unwrap_or_else(|| who.name.clone());
    validate::name("consumer", &consumer)?;
    if consumer.chars().count() > MAX_CONSUMER_CHARS {
        return Err(invalid(
            "consumer",
            format!("must be at most {MAX_CONSUMER_CHARS} characters"),
        ));
    }
    let entry = queue_job(ports, job).await?;
    let found = &entry.job;
    let spec = &found.spec;
    who.check(&spec.app, Need::Change, &format!("job `{job}`"))?;
    if spec.delivery != Delivery::Pull {
        return Err(Error::Conflict(format!(
            "job `{job}` is delivered by `{}`, not `pull`: nothing can be pulled from it",
            spec.delivery.kind(),
        )));
    }
    let job_id = found.id;
    let deadline = tokio::time::Instant::now() + Duration::from_millis(wait_ms as u64);
    let board = ports.ready_board();
    loop {
        // Listen before looking, so a task that becomes ready in between wakes this pull.
        let signal = board.subscribe(job_id);
        let woken = signal.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        // A disabled job hands out nothing (its tasks wait, §8), but a long poll waits on.
        let enabled = ports
            .cached_job(job_id)
            .await?
            .is_some_and(|j| j.job.spec.enabled);
        // A queue another look found empty (and nothing announced since) is not looked
        // at again: the pull waits to be handed a fire or woken.
        if enabled && board.known_empty(job_id) {
            looked("skipped");
        } else if enabled {
            let mark = board.before_look(job_id);
            let leased = lease(ports, job_id, &consumer, max as usize, lease_ms).await?;
            if !leased.is_empty() {
                looked("leased");
                return Ok(leased);
            }
            looked("empty");
            board.found_empty(job_id, mark);
        }
        if tokio::time::Instant::now() >= deadline {
            return Ok(Vec::new());
        }
        // While it waits, a task falling due on this node's wheel is leased straight to it.
        let want = Want {
            consumer: consumer.clone(),
            max: max as usize,
            lease_ms,
        };
        let mut waiting = enabled.then(|| board.wait_to_take(job_id, want));
        let handed = async {
            match waiting.as_mut() {
                Some(w) => (&mut w.handed).await.ok(),
                None => std::future::pending().await,
            }
        };
        let stop = tokio::select! {
            handed = handed => match handed {
                Some(leased) => return Ok(leased),
                // Dispatch took this pull but had no lease for it: look again.
                None => continue,
            },
            _ = &mut woken => false,
            _ = tokio::time::sleep_until(deadline) => false,
            _ = ports.stopping() => true,
        };
        if stop {
            // Leases dispatch may be handing this pull go back to `ready` unspent.
            return Ok(Vec::new());
        }
        if let Some(w) = waiting.as_mut()
            && !w.withdraw()
        {
            // Dispatch took this pull as it woke: its leases are on their way (given back
            // unspent should they come after the grace).
            if let Ok(Ok(leased)) = tokio::time::timeout(HANDOVER_GRACE, &mut w.handed).await {
                return Ok(leased);
            }
        }
    }
}

async fn lease(
    ports: &Ports,
    job_id: i64,
    consumer: &str,
    max: usize,
    lease_ms: i64,
) -> Result<Vec<Leased>> {
    let run_ids = ports.take_run_ids(max).await?;
    let leased = ports
        .store()
        .lease_ready(job_id, consumer, &run_ids, lease_ms, ports.clock().now_ms())
        .await?;
    if !leased.is_empty() {
        metrics::counter!("rota_pulled_total").increment(leased.len() as u64);
    }
    Ok(leased)
}

/// `POST /api/v1/tasks/{id}/ack`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Ack {
    /// The lease the pull gave.
    pub lease: String,
    /// The attempt's output, any JSON (a workflow step's, given to the steps after it; at
    /// most 64 KiB, more fails the step).
    #[schema(value_type = AnyJson, required = false)]
    pub output: Option<Value>,
}

/// `POST /api/v1/tasks/{id}/nack`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LeaseEnd {
    /// The lease the pull gave.
    pub lease: String,
    /// Why the attempt failed (kept as the run's message).
    pub error: Option<String>,
    /// Retry after this long instead of the backoff (0 to 604,800,000 ms).
    pub delay_ms: Option<i64>,
}

/// `POST /api/v1/tasks/{id}/extend`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LeaseExtension {
    pub lease: String,
    /// The lease now ends this long from now (1,000 to 43,200,000 ms).
    pub lease_ms: i64,
}

/// Acks task `id`'s attempt: the task has succeeded. The task as it now is.
pub async fn ack(ports: &Ports, who: &Principal, id: i64, end: Ack) -> Result<Task> {
    let ending = LeaseEnding {
        task_id: id,
        lease: end.lease,
        status: RunStatus::Succeeded,
        message: None,
        output: end.output.as_ref().map(Value::to_string),
    };
    end_one(ports, who, ending, None).await
}

/// Nacks task `id`'s attempt: a failed attempt, retried after `delay_ms` (or the backoff)
/// while attempts remain, else `dead`.
pub async fn nack(ports: &Ports, who: &Principal, id: i64, end: LeaseEnd) -> Result<Task> {
    let delay = end
        .delay_ms
        .map(|d| validate::within("delay_ms", d, 0..=MAX_NACK_DELAY_MS))
        .transpose()?;
    if let Some(error) = &end.error {
        validate::max_bytes("error", error, 64 * 1024)?;
    }
    let ending = LeaseEnding {
        task_id: id,
        lease: end.lease,
        status: RunStatus::Failed,
        message: Some(end.error.unwrap_or_else(|| "nacked by the consumer".into())),
        output: None,
    };
    end_one(ports, who, ending, delay).await
}

/// Moves the end of task `id`'s lease to `lease_ms` from now; the new end.
pub async fn extend(
    ports: &Ports,
    who: &Principal,
    id: i64,
    ext: LeaseExtension,
) -> Result<Millis> {
    let lease_ms = validate::within("lease_ms", ext.lease_ms, MIN_LEASE_MS..=MAX_LEASE_MS)?;
    task_as(ports.store(), who, id, Need::Change).await?;
    let now = ports.clock().now_ms();
    let expires = now + lease_ms;
    if ports
        .store()
        .extend_lease(id, &ext.lease, expires, now)
        .await?
    {
        Ok(expires)
    } else {
        Err(stale(id))
    }
}

/// Ends the leased attempt `ending` names if its lease is the task's live one and `who`
/// may; the task as it then is.
async fn end_one(
    ports: &Ports,
    who: &Principal,
    ending: LeaseEnding,
    retry_after: Option<Millis>,
) -> Result<Task> {
    let id = ending.task_id;
    let task = task_as(ports.store(), who, id, Need::Change).await?;
    let delays: HashMap<i64, Millis> = retry_after.map(|d| (id, d)).into_iter().collect();
    let ended = ports
        .end_leases(None, &[task.job_id], &[ending], &delays)
        .await?;
    if ended.ended.is_empty() {
        return Err(stale(id));
    }
    Ok(ports.store().get_task(id).await?)
}

/// One item of `POST /api/v1/jobs/{job}/ack`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AckItem {
    pub task: i64,
    pub lease: String,
    /// The attempt's output, any JSON (as in a single ack).
    #[schema(value_type = AnyJson, required = false)]
    pub output: Option<Value>,
}

/// What became of one item of a batch ack.
#[derive(Debug, Serialize, ToSchema)]
pub struct AckResult {
    pub task: i64,
    /// `acked`; `stale` (the lease is not the task's current one: it expired, or was
    /// ended); `not_found` (no such task of this job).
    pub status: &'static str,
}

/// Acks many leases of one job at once (the tasks must be the job's); each item's result.
pub async fn ack_batch(
    ports: &Ports,
    who: &Principal,
    job: &str,
    items: Vec<AckItem>,
) -> Result<Vec<AckResult>> {
    if items.len() > MAX_ACKS {
        return Err(Error::PayloadTooLarge(format!(
            "acks: at most {MAX_ACKS} in one batch (got {}); split it",
            items.len()
        )));
    }
    let entry = queue_job(ports, job).await?;
    let job = &entry.job;
    who.check(
        &job.spec.app,
        Need::Change,
        &format!("job `{}`", job.spec.name),
    )?;
    let endings: Vec<LeaseEnding> = items
        .iter()
        .map(|i| LeaseEnding {
            task_id: i.task,
            lease: i.lease.clone(),
            status: RunStatus::Succeeded,
            message: None,
            output: i.output.as_ref().map(Value::to_string),
        })
        .collect();
    let ended = ports
        .end_leases(Some(job.id), &[job.id], &endings, &HashMap::new())
        .await?;
    Ok(items
        .into_iter()
        .map(|i| AckResult {
            task: i.task,
            status: if ended.ended.contains(&(i.task, i.lease)) {
                "acked"
            } else if ended.found.contains(&i.task) {
                "stale"
            } else {
                "not_found"
            },
        })
        .collect())
}

/// The job a queue route names (by id or by name) as the node's job cache has it, so that
/// a pull or a batch ack reads no job row (a change made through another node reaches the
/// cache within its refresh, as for task creation).
async fn queue_job(ports: &Ports, job: &str) -> Result<std::sync::Arc<crate::pipeline::JobEntry>> {
    let by_id = match job.parse::<i64>() {
        Ok(id) => ports.cached_job(id).await?,
        Err(_) => None,
    };
    let found = match by_id {
        Some(entry) => Some(entry),
        None => ports.cached_job_named(job).await?,
    };
    found.ok_or_else(|| Error::NotFound(format!("job `{job}` not found")))
}

fn stale(id: i64) -> Error {
    Error::Conflict(format!(
        "task {id}: this lease is no longer held (it expired and the task was handed out again, \
         or the attempt already ended); nothing was changed"
    ))
}

/// Re-drives a dead task: a new attempt, due now.
pub async fn retry(ports: &Ports, who: &Principal, id: i64) -> Result<Task> {
    task_as(ports.store(), who, id, Need::Change).await?;
    let now = ports.clock().now_ms();
    let task = ports.store().redrive_task(id, now, now).await?;
    ports.wake_scan();
    ports.audit(&who.name, "retry task", &id.to_string()).await;
    Ok(task)
}

/// `POST /api/v1/tasks/retry`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BulkRetry {
    pub job: NameOrId,
    /// Only `dead`.
    pub status: String,
    /// At most this many (1 to 10,000; 1,000 by default), oldest due first.
    pub limit: Option<i64>,
}

/// Re-drives a job's dead tasks; how many.
pub async fn retry_dead(ports: &Ports, who: &Principal, f: BulkRetry) -> Result<u64> {
    if f.status != "dead" {
        return Err(invalid(
            "status",
            format!("only `dead` tasks can be retried (got `{}`)", f.status),
        ));
    }
    let limit = validate::within("limit", f.limit.unwrap_or(1000), 1..=MAX_REDRIVE)?;
    let job = cached_job(ports, "job", &f.job).await?;
    who.check(&job.job.spec.app, Need::Change, &format!("job {}", f.job))?;
    let now = ports.clock().now_ms();
    let n = ports
        .store()
        .redrive_dead(job.job.id, limit as u32, now, now)
        .await?;
    if n > 0 {
        ports.wake_scan();
        let target = format!("{n} dead task(s) of job `{}`", job.job.spec.name);
        ports.audit(&who.name, "retry dead tasks", &target).await;
    }
    Ok(n)
}

/// What `job`'s queue holds (ready, leased and dead tasks, and the consumers seen in the
/// last minute), if `who` may read the job.
pub async fn facts(ports: &Ports, who: &Principal, job: &Job) -> Result<QueueFacts> {
    who.check(
        &job.spec.app,
        Need::Read,
        &format!("job `{}`", job.spec.name),
    )?;
    Ok(ports
        .store()
        .queue_facts(job.id, ports.clock().now_ms() - 60_000)
        .await?)
}

/// `rota_pull_looks_total{result}`: a pull's looks at its queue in the database that
/// leased tasks or found none, and those it skipped because the queue was known empty.
fn looked(result: &'static str) {
    metrics::counter!("rota_pull_looks_total", "result" => result).increment(1);
}
