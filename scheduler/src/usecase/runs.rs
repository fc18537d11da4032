//! Runs: listing them as the caller may see them, reading one, killing one.

use super::jobs::{job_filter, run_as};
use super::{Error, Result as UseResult};
use crate::access::{Need, Principal};
use crate::model::{Page, Run, RunFilter};
use crate::ports::Ports;
use rota_proto::{KillAck, LogPage};

/// The runs of `filter` that `who` may see, newest first. `job` is a job's id or name (an
/// id is used as it is, so the runs of a deleted job stay listable); the filter's own
/// `job_id` and `apps` are set here.
pub async fn list(
    ports: &Ports,
    who: &Principal,
    job: Option<&str>,
    filter: RunFilter,
) -> UseResult<Page<Run>> {
    let filter = RunFilter {
        job_id: job_filter(ports.store(), job).await?,
        apps: who.app_filter().map(<[String]>::to_vec),
        ..filter
    };
    Ok(ports.store().list_runs(&filter).await?)
}

/// Run `id`, if `who` may read it.
pub async fn get(ports: &Ports, who: &Principal, id: i64) -> UseResult<Run> {
    run_as(ports.store(), who, id, Need::Read).await
}

/// Asks the executor running run `id` to kill it, audited; a finished run is a conflict.
/// The executor's answer: whether it had the run, in its words.
pub async fn kill(ports: &Ports, who: &Principal, id: i64) -> UseResult<KillAck> {
    let run = run_as(ports.store(), who, id, Need::Change).await?;
    if run.status.is_final() {
        return Err(Error::Conflict(format!(
            "run {id} has already finished ({}); it cannot be killed",
            run.status
        )));
    }
    let ack = ports.kill_run(&run).await?;
    tracing::info!(run.id = id, killed = ack.killed, "kill requested");
    ports.audit(&who.name, "kill run", &id.to_string()).await;
    Ok(ack)
}

/// Up to `max_lines` lines of run `id`'s log from line `from_line` (1-based), from the
/// executor that has it. A run never dispatched to an executor (not yet, lost before, or
/// pulled by a consumer or delivered to a webhook — `pull:…`, `webhook:…`, whose outcome
/// is the run's message) has no log: an empty page, complete once the run is over.
pub async fn log(
    ports: &Ports,
    who: &Principal,
    id: i64,
    from_line: u64,
    max_lines: u32,
) -> UseResult<LogPage> {
    let run = run_as(ports.store(), who, id, Need::Read).await?;
    let on_an_executor = run
        .executor
        .as_deref()
        .is_some_and(|e| e.starts_with("http://") || e.starts_with("https://"));
    if !on_an_executor {
        return Ok(LogPage {
            lines: Vec::new(),
            next_line: from_line,
            complete: run.status.is_final(),
        });
    }
    Ok(ports.read_log(&run, from_line, max_lines).await?)
}
