//! Claims taken over from a dead node (or this node's earlier run) that had been sent to
//! XXL-JOB executors — or not: their runs are written before the `/run` goes out
//! (`store/xxl.rs`), and the node may have died between the two. An XXL-JOB executor
//! cannot be asked which runs it holds, but it runs one job's runs one after another and
//! writes each one's log file when it starts: once the job's thread is idle (`/idleBeat`),
//! a run without a log file never reached it. That run's row is dropped and its task fired
//! again; one that started is left to its callback (or, if none comes, to the overdue
//! check in `complete.rs`). Meanwhile the tasks stay claimed by this node, out of its wheel.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::Cluster;
use super::ring::Ring;
use crate::client::ExecutorClient;
use crate::model::*;
use crate::secrets::SecretBox;
use crate::xxl::TOKEN_SECRET;
use crate::xxl::wire::{LogParam, SUCCESS};

/// How long a job's thread may stay busy before the runs waiting on it are left to the
/// overdue check.
const IDLE_WAIT: Duration = Duration::from_secs(600);
/// How often a busy job's thread is asked again.
const IDLE_POLL: Duration = Duration::from_secs(1);

/// What the watch reads and calls.
#[derive(Clone)]
pub(crate) struct Probe {
    pub cluster: Arc<Cluster>,
    pub client: ExecutorClient,
    pub ring: Ring,
    pub secrets: Arc<SecretBox>,
}

/// Watches `runs` (written before their send, of recovered claims `tasks`) of `app`'s
/// XXL-JOB executors in the background, under `lease`.
pub(crate) fn watch(probe: Probe, app: String, runs: Vec<(DueTask, Run)>, lease: NodeLease) {
    let mut by_thread: BTreeMap<(String, i64), Vec<(DueTask, Run)>> = BTreeMap::new();
    for (task, run) in runs {
        let address = run.executor.clone().unwrap_or_default();
        by_thread
            .entry((address, run.job_id))
            .or_default()
            .push((task, run));
    }
    for ((address, job_id), runs) in by_thread {
        let (probe, app) = (probe.clone(), app.clone());
        tokio::spawn(async move {
            if let Err(e) = settle(&probe, &app, &address, job_id, runs, lease).await {
                tracing::warn!(error = %format!("{e:#}"), executor = %address, job.id = job_id,
                    "checking which recovered runs an XXL-JOB executor got failed; the overdue check ends them");
            }
        });
    }
}

/// Waits for job `job_id`'s thread at `address` to be idle, then fires again the tasks of
/// `runs` whose run never started there.
async fn settle(
    probe: &Probe,
    app: &str,
    address: &str,
    job_id: i64,
    runs: Vec<(DueTask, Run)>,
    lease: NodeLease,
) -> anyhow::Result<()> {
    let store = &probe.cluster.store;
    let Some(sealed) = store.secret(app, TOKEN_SECRET).await? else {
        anyhow::bail!("app `{app}` has no secret `{TOKEN_SECRET}`");
    };
    let token =
        String::from_utf8_lossy(&probe.secrets.open(app, TOKEN_SECRET, &sealed)?).into_owned();
    let started = tokio::time::Instant::now();
    loop {
        let idle = probe.client.xxl_idle_beat(address, &token, job_id).await?;
        if idle.code == SUCCESS {
            break;
        }
        if started.elapsed() > IDLE_WAIT {
            anyhow::bail!("the job's thread stayed busy");
        }
        tokio::time::sleep(IDLE_POLL).await;
    }
    let mut refire = Vec::new();
    for (task, run) in runs {
        let req = LogParam {
            log_date_tim: run.scheduled_at,
            log_id: run.id,
            from_line_num: 1,
        };
        let log = probe.client.xxl_log(address, &token, &req).await?;
        let never_started = log
            .payload()
            .and_then(|l| l.log_content)
            .is_some_and(|c| c.contains("logFile not exists"));
        if never_started && store.forget_unsent_run(run.id).await? {
            tracing::info!(
                run.id = run.id,
                task.id = task.task_id,
                executor = address,
                "a recovered run never reached its XXL-JOB executor; firing its task again"
            );
            refire.push(task);
        }
    }
    probe.ring.insert(DueTask::held_under(refire, lease));
    Ok(())
}
