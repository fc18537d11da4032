//! The XXL-JOB admin API's side of the node (SPEC §13): what an executor built on
//! `xxl-job-core` calls — `registry` (every 30 s), `registryRemove` and `callback` — each
//! checked against the access token of the app it is about (the app's secret
//! [`TOKEN_SECRET`]). A callback ends its run through the same path as a report of Rota's
//! own executors ([`executors::accept_reports`]): once, whichever node it reaches.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use rota_proto::{ReportStatus, RunReport};
use sha2::{Digest, Sha256};

use super::executors::{self, check_executor};
use super::{Error, Result};
use crate::model::{Millis, Run};
use crate::ports::Ports;
use crate::store;
use crate::xxl::TOKEN_SECRET;
use crate::xxl::wire::{CallbackParam, RegistryParam, SUCCESS, TIMEOUT};

/// How long a callback waits for its run's dispatch to be recorded (a fast handler can
/// call back before the node that sent it wrote the run), before asking to be sent again.
const UNRECORDED_WAIT: Duration = Duration::from_secs(2);

/// `registry`: the executor at `registryValue` of app `registryKey` is alive.
pub async fn registry(ports: &Ports, token: Option<&str>, p: &RegistryParam) -> Result<()> {
    let (app, address) = registered(p)?;
    check_token(ports, app, token).await?;
    ports
        .xxl_registered(app, address)
        .await
        .map_err(Error::Internal)
}

/// `registryRemove`: the executor is leaving.
pub async fn registry_remove(ports: &Ports, token: Option<&str>, p: &RegistryParam) -> Result<()> {
    let (app, address) = registered(p)?;
    check_token(ports, app, token).await?;
    ports
        .xxl_removed(app, address)
        .await
        .map_err(Error::Internal)
}

/// `callback`: runs that ended. Each is applied if the token is its app's; one whose run
/// is not known (yet) or whose app has another token is not, and the answer says so — the
/// executor keeps it and sends it again later (what it already sent is applied once).
pub async fn callback(ports: &Ports, token: Option<&str>, list: &[CallbackParam]) -> Result<()> {
    let now = ports.clock().now_ms();
    let mut by_app: BTreeMap<String, Vec<RunReport>> = BTreeMap::new();
    let mut refused: Vec<String> = Vec::new();
    let mut tokens: HashMap<String, bool> = HashMap::new();
    for c in list {
        let Some(run) = recorded_run(ports, c.log_id).await? else {
            refused.push(format!("run {} is not known (yet)", c.log_id));
            continue;
        };
        let app = match ports.store().get_job(run.job_id).await {
            Ok(job) => job.spec.app,
            Err(store::Error::NotFound(_)) => {
                refused.push(format!("the job of run {} is gone", c.log_id));
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        let allowed = match tokens.get(&app) {
            Some(&allowed) => allowed,
            None => {
                let allowed = check_token(ports, &app, token).await.is_ok();
                tokens.insert(app.clone(), allowed);
                allowed
            }
        };
        if !allowed {
            refused.push(format!("run {}: the access token is wrong", c.log_id));
            continue;
        }
        by_app.entry(app).or_default().push(report(&run, c, now));
    }
    for (app, reports) in by_app {
        executors::accept_reports(ports, &app, &reports).await?;
    }
    match refused.is_empty() {
        true => Ok(()),
        false => Err(Error::Unprocessable(refused.join("; "))),
    }
}

/// The app and address a registry call names, checked.
fn registered(p: &RegistryParam) -> Result<(&str, &str)> {
    if p.registry_group != "EXECUTOR" {
        return Err(Error::BadRequest(format!(
            "registryGroup: only `EXECUTOR` registers here, not `{}`",
            p.registry_group
        )));
    }
    let address = p.registry_value.trim_end_matches('/');
    check_executor(&p.registry_key, address)?;
    Ok((&p.registry_key, address))
}

/// Fails unless `given` is `app`'s XXL-JOB access token.
async fn check_token(ports: &Ports, app: &str, given: Option<&str>) -> Result<()> {
    let Some(token) = ports.xxl_token(app).await.map_err(Error::Internal)? else {
        return Err(Error::Unauthorized(format!(
            "app `{app}` takes no XXL-JOB executors: it has no secret `{TOKEN_SECRET}` (set it to \
             the executors' xxl.job.accessToken)"
        )));
    };
    // Compared as digests: the time taken says nothing of how much of it matched.
    let digest = |b: &[u8]| Sha256::digest(b);
    if digest(&token) != digest(given.unwrap_or_default().as_bytes()) {
        return Err(Error::Unauthorized("The access token is wrong.".into()));
    }
    Ok(())
}

/// Run `id` once its dispatch is recorded; `None` if it is not within [`UNRECORDED_WAIT`].
async fn recorded_run(ports: &Ports, id: i64) -> Result<Option<Run>> {
    let started = tokio::time::Instant::now();
    loop {
        match ports.store().get_run(id).await {
            Ok(run) => return Ok(Some(run)),
            Err(store::Error::NotFound(_)) if started.elapsed() < UNRECORDED_WAIT => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(store::Error::NotFound(_)) => return Ok(None),
            Err(e) => return Err(e.into()),
        }
    }
}

/// The report a callback makes of `run`. XXL-JOB says when a run ended, not when it
/// started: it counts as started when it was sent. `handleMsg` is the run's message, and a
/// success's is its output (a workflow step's result, `XxlJobHelper.handleSuccess(..)`).
fn report(run: &Run, c: &CallbackParam, now: Millis) -> RunReport {
    let message = c.handle_msg.clone().filter(|m| !m.is_empty());
    let status = match c.handle_code {
        SUCCESS => ReportStatus::Succeeded,
        TIMEOUT => ReportStatus::Timeout,
        // xxl-job-core's words for a run stopped by `/kill`, running or still queued.
        _ if message.as_deref().is_some_and(|m| m.contains("killed")) => ReportStatus::Killed,
        _ => ReportStatus::Failed,
    };
    RunReport {
        run_id: run.id,
        job_id: run.job_id,
        task_id: run.task_id,
        attempt: run.attempt,
        shard_index: run.shard_index,
        shard_total: run.shard_total,
        executor: run.executor.clone().unwrap_or_default(),
        scheduled_at: run.scheduled_at,
        dispatched_at: run.dispatched_at,
        started_at: run.dispatched_at,
        finished_at: Some(now),
        status,
        exit_code: None,
        output: message
            .clone()
            .filter(|_| status == ReportStatus::Succeeded),
        message,
        // XXL-JOB's callbacks carry no trace context.
        traceparent: None,
    }
}
