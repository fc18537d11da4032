//! `xxl` delivery's sends (SPEC §13): a trigger for an XXL-JOB executor goes out as
//! xxl-job-admin's `/run` — one call per run, the Rota run id as its `logId` — with the
//! job's handler, the task's input as `executorParams`, the job's block strategy and
//! timeout, and the shard as `broadcastIndex`/`broadcastTotal`; the app's access token
//! (its secret [`TOKEN_SECRET`]) in the header. The answers become the acks of Rota's own
//! executors, so routes, failover, sharding and the record of what was sent are the same
//! for both; the run ends when the executor's callback arrives (`ports/xxl.rs`).

use std::collections::BTreeMap;

use rota_proto::{BlockStrategy, TriggerAck};

use super::*;
use crate::xxl::TOKEN_SECRET;
use crate::xxl::wire::{Envelope, SUCCESS, TriggerParam};

/// An executor's answer to one `/run`.
type Answer = Result<Envelope<String>, ClientError>;

/// Sends `batch` (the triggers of `group`, numbered) to the XXL-JOB executor at `address`
/// and answers as a Rota executor would. Every call unanswered for want of a connection:
/// the error, so the next candidate may take them. A call that reached the executor and
/// got no answer counts as accepted (it may run; a `/run` repeated with its `logId` is
/// refused by the executor, never run twice).
pub(super) async fn trigger(
    dispatcher: &Dispatcher,
    app: &str,
    address: &str,
    group: &[Pending],
    batch: &TriggerBatch,
) -> Result<TriggerBatchAck, ClientError> {
    let token = match token(dispatcher, app).await {
        Ok(token) => token,
        Err(reason) => {
            let acks = batch
                .triggers
                .iter()
                .map(|t| TriggerAck {
                    run_id: t.run_id,
                    outcome: TriggerOutcome::Rejected {
                        reason: reason.clone(),
                    },
                })
                .collect();
            return Ok(TriggerBatchAck { acks, room: None });
        }
    };
    // Recorded before they go out: an XXL-JOB executor cannot be asked later which it took
    // (`store/xxl.rs`). Unrecorded, nothing is sent: they wait in the wheel as if it were full.
    let now = dispatcher.cluster.clock.now_ms();
    let records: Vec<Dispatched> = group
        .iter()
        .filter_map(|p| dispatched(p, address, now))
        .collect();
    if let Err(e) = dispatcher.cluster.store.prerecord_runs(&records).await {
        tracing::warn!(error = %e, "recording XXL-JOB runs before sending them failed; holding them");
        let acks = batch
            .triggers
            .iter()
            .map(|t| TriggerAck {
                run_id: t.run_id,
                outcome: TriggerOutcome::Full,
            })
            .collect();
        return Ok(TriggerBatchAck {
            acks,
            room: Some(0),
        });
    }
    // One job's runs one after another, different jobs' at once: xxl-job-core makes a
    // job's thread at its first `/run`, and two first `/run`s racing each make one — the
    // loser's queued run is then killed unrun ("null [job not executed, in the job queue,
    // killed.]"). So within a batch, and across batches on their way to this executor at
    // once (a trigger by hand and a task due now, in CI of 2026-12-07).
    let mut by_job: BTreeMap<i64, Vec<usize>> = BTreeMap::new();
    for (i, t) in batch.triggers.iter().enumerate() {
        by_job.entry(t.job_id).or_default().push(i);
    }
    let token = &token;
    let jobs = by_job.into_iter().map(|(job_id, indices)| async move {
        let turn = dispatcher.xxl_sends.of(address, job_id);
        let _turn = turn.lock().await;
        let mut answered = Vec::with_capacity(indices.len());
        for i in indices {
            let t = &batch.triggers[i];
            let handler = group
                .iter()
                .find(|p| p.run_id == Some(t.run_id))
                .and_then(|p| match &p.job.job.spec.delivery {
                    Delivery::Xxl { handler } => Some(handler.clone()),
                    _ => None,
                });
            let answer = match handler {
                Some(handler) => {
                    let param = param(t, handler);
                    Some(dispatcher.client.xxl_run(address, token, &param).await)
                }
                None => None,
            };
            answered.push((i, answer));
        }
        answered
    });
    let mut answers: Vec<(usize, Option<Answer>)> =
        join_all(jobs).await.into_iter().flatten().collect();
    answers.sort_by_key(|(i, _)| *i);
    let answers: Vec<_> = answers.into_iter().map(|(_, a)| a).collect();
    if let Some(Some(Err(first))) = answers.first()
        && answers
            .iter()
            .all(|a| matches!(a, Some(Err(e)) if e.not_delivered()))
    {
        return Err(ClientError::Unreachable {
            address: address.into(),
            reason: first.to_string(),
        });
    }
    let acks = batch
        .triggers
        .iter()
        .zip(answers)
        .map(|(t, answer)| TriggerAck {
            run_id: t.run_id,
            outcome: match answer {
                None => TriggerOutcome::Rejected {
                    reason: "the job is no longer delivered to XXL-JOB executors".into(),
                },
                Some(Ok(answer)) => outcome(answer),
                Some(Err(e)) if e.not_delivered() => TriggerOutcome::Rejected {
                    reason: e.to_string(),
                },
                Some(Err(_)) => TriggerOutcome::Accepted,
            },
        })
        .collect();
    Ok(TriggerBatchAck { acks, room: None })
}

/// Whether the XXL-JOB executor at `address` runs nothing of job `job_id` (`/idleBeat`).
pub(super) async fn idle(
    dispatcher: &Dispatcher,
    app: &str,
    address: &str,
    job_id: i64,
) -> Result<bool, ClientError> {
    let token = token(dispatcher, app)
        .await
        .map_err(|reason| ClientError::Refused {
            address: address.into(),
            status: 401,
            body: reason,
        })?;
    let answer = dispatcher
        .client
        .xxl_idle_beat(address, &token, job_id)
        .await?;
    Ok(answer.code == SUCCESS)
}

/// The app's XXL-JOB access token, or why there is none.
async fn token(dispatcher: &Dispatcher, app: &str) -> Result<String, String> {
    let store = &dispatcher.cluster.store;
    match dispatcher.webhooks.secret(store, app, TOKEN_SECRET).await {
        Ok(Some(token)) => Ok(String::from_utf8_lossy(&token).into_owned()),
        Ok(None) => Err(format!(
            "app `{app}` has no secret `{TOKEN_SECRET}` (its XXL-JOB access token); nothing was sent"
        )),
        Err(e) => Err(format!("reading secret `{TOKEN_SECRET}` failed: {e:#}")),
    }
}

/// The `/run` of trigger `t`.
fn param(t: &Trigger, handler: String) -> TriggerParam {
    // Delayed tasks and workflow steps run beside each other; XXL-JOB queues the runs of
    // one job on one executor behind each other unless told to drop or cover them.
    let block = match (t.exclusive, t.block) {
        (true, BlockStrategy::DiscardLater) => "DISCARD_LATER",
        (true, BlockStrategy::CoverEarly) => "COVER_EARLY",
        _ => "SERIAL_EXECUTION",
    };
    TriggerParam {
        job_id: t.job_id,
        executor_handler: handler,
        executor_params: t.input.clone(),
        executor_block_strategy: block.into(),
        // Whole seconds, rounded up: XXL-JOB counts no finer.
        executor_timeout: (t.timeout_ms.max(0) + 999) / 1000,
        log_id: t.run_id,
        log_date_time: t.scheduled_at,
        glue_type: "BEAN".into(),
        glue_source: String::new(),
        glue_updatetime: 0,
        broadcast_index: t.shard_index,
        broadcast_total: t.shard_total,
    }
}

/// What an executor's answer to `/run` means for the trigger.
fn outcome(answer: Envelope<String>) -> TriggerOutcome {
    if answer.code == SUCCESS {
        return TriggerOutcome::Accepted;
    }
    let msg = answer.msg.unwrap_or_default();
    // xxl-job-core's words (sic): the `logId` is queued already; the job runs and the
    // block strategy is `DISCARD_LATER`.
    if msg.contains("repeate trigger job") {
        TriggerOutcome::Duplicate
    } else if msg.contains("Discard Later") {
        TriggerOutcome::Busy
    } else {
        TriggerOutcome::Rejected {
            reason: format!(
                "the XXL-JOB executor refused the run (code {}): {msg}",
                answer.code
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_jobs_sends_to_one_executor_take_turns_and_idle_pairs_are_forgotten() {
        let sends = JobSends::default();
        let first = sends.of("http://e1", 7);
        let held = first.lock().await;
        assert!(
            sends.of("http://e1", 7).try_lock().is_err(),
            "a second send of job 7 to e1 went while the first was on its way"
        );
        assert!(
            sends.of("http://e1", 8).try_lock().is_ok(),
            "another job waited"
        );
        assert!(
            sends.of("http://e2", 7).try_lock().is_ok(),
            "another executor waited"
        );
        drop(held);
        assert!(sends.of("http://e1", 7).try_lock().is_ok());
        drop(first);
        let _other = sends.of("http://e3", 1);
        let pairs = sends.locks.lock().expect("poisoned").len();
        assert_eq!(pairs, 1, "pairs no send holds were kept");
    }

    fn refused(msg: &str) -> Envelope<String> {
        Envelope {
            code: 500,
            msg: Some(msg.into()),
            content: None,
            data: None,
        }
    }

    #[test]
    fn an_executors_answers_read_as_acks() {
        assert_eq!(outcome(Envelope::success()), TriggerOutcome::Accepted);
        assert_eq!(
            outcome(refused("repeate trigger job, logId:7")),
            TriggerOutcome::Duplicate
        );
        assert_eq!(
            outcome(refused("block strategy effect：Discard Later")),
            TriggerOutcome::Busy
        );
        assert_eq!(
            outcome(refused("job handler [nope] not found.")),
            TriggerOutcome::Rejected {
                reason:
                    "the XXL-JOB executor refused the run (code 500): job handler [nope] not found."
                        .into()
            }
        );
    }
}

/// A lock per XXL-JOB executor and job, held while that job's `/run`s go to that executor.
#[derive(Default)]
pub(crate) struct JobSends {
    locks: std::sync::Mutex<std::collections::HashMap<(String, i64), Turn>>,
}

/// One executor's and job's turn to send.
type Turn = Arc<tokio::sync::Mutex<()>>;

impl JobSends {
    /// The lock of `job_id`'s sends to `address` (the pairs no send holds are forgotten).
    pub(crate) fn of(&self, address: &str, job_id: i64) -> Turn {
        let mut locks = self.locks.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(lock) = locks.get(&(address.to_owned(), job_id)) {
            return lock.clone();
        }
        locks.retain(|_, l| Arc::strong_count(l) > 1);
        let lock = Arc::new(tokio::sync::Mutex::new(()));
        locks.insert((address.to_owned(), job_id), lock.clone());
        lock
    }
}
