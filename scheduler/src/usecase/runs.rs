//! Runs: listing them as the caller may see them, reading one, killing one.

use super::jobs::{job_filter, run_as};
use super::{Error, Result as UseResult};
use crate::access::{Need, Principal};
use crate::model::{Page, Run, RunFilter};
use crate::node::Node;
use rota_proto::KillAck;

/// The runs of `filter` that `who` may see, newest first. `job` is a job's id or name (an
/// id is used as it is, so the runs of a deleted job stay listable); the filter's own
/// `job_id` and `apps` are set here.
pub async fn list(
    node: &Node,
    who: &Principal,
    job: Option<&str>,
    filter: RunFilter,
) -> UseResult<Page<Run>> {
    let filter = RunFilter {
        job_id: job_filter(node.store(), job).await?,
        apps: who.app_filter().map(<[String]>::to_vec),
        ..filter
    };
    Ok(node.store().list_runs(&filter).await?)
}

/// Run `id`, if `who` may read it.
pub async fn get(node: &Node, who: &Principal, id: i64) -> UseResult<Run> {
    run_as(node.store(), who, id, Need::Read).await
}

/// Asks the executor running run `id` to kill it, audited; a finished run is a conflict.
/// The executor's answer: whether it had the run, in its words.
pub async fn kill(node: &Node, who: &Principal, id: i64) -> UseResult<KillAck> {
    let run = run_as(node.store(), who, id, Need::Change).await?;
    if run.status.is_final() {
        return Err(Error::Conflict(format!(
            "run {id} has already finished ({}); it cannot be killed",
            run.status
        )));
    }
    let ack = node.kill_run(&run).await?;
    tracing::info!(run.id = id, killed = ack.killed, "kill requested");
    node.audit(&who.name, "kill run", &id.to_string()).await;
    Ok(ack)
}
