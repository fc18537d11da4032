//! The executor protocol's side of the node (`docs/protocol.md`): executors registering,
//! heartbeating and leaving, their run reports, the plugin modules they fetch and the
//! `rota` imports their runs call (a job's key-value state, its app's secrets). The caller
//! has checked the request's signature: `app` is the app whose key signed it.

use std::collections::HashMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use rota_proto::wire::{
    KV_KEY_MAX, KV_VALUE_MAX, KvOp, KvReply, KvRequest, SecretReply, SecretRequest, kv_over_quota,
};
use rota_proto::{Deregistration, Registration, RegistrationAck, RunReport};

use super::validate::{self, invalid};
use super::{Error, Result};
use crate::model::Millis;
use crate::ports::Ports;
use crate::store;

/// Longest executor address accepted.
const MAX_ADDRESS_LEN: usize = 2048;

/// How many plugins one answer names at most (an app with more compiles the rest at their
/// first trigger).
const PLUGINS_TO_WARM: u32 = 64;

pub(super) fn check_executor(app: &str, address: &str) -> Result<()> {
    validate::app("app", app)?;
    if !(address.starts_with("http://") || address.starts_with("https://"))
        || address.len() > MAX_ADDRESS_LEN
    {
        return Err(invalid(
            "address",
            format!(
                "must be the executor's base URL, `http://host:port` (at most {MAX_ADDRESS_LEN} bytes)"
            ),
        ));
    }
    Ok(())
}

/// Which of the two beats an executor sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Beat {
    /// (Re)starting: runs it was given and no longer lists are lost at once.
    Register,
    /// Still here, with the runs it has.
    Heartbeat,
}

/// An executor registering or heartbeating, its request signed at `signed_at` and
/// received at `received_us` (this node's time, µs). The answer: when to beat next, the
/// plugins to compile ahead, and this node's time.
pub async fn beat(
    ports: &Ports,
    beat: Beat,
    reg: &Registration,
    signed_at: Millis,
    received_us: i64,
) -> Result<RegistrationAck> {
    check_executor(&reg.app, &reg.address)?;
    match beat {
        Beat::Register => {
            ports.executor_registered(reg, signed_at).await?;
            tracing::info!(app = %reg.app, address = %reg.address, capacity = reg.capacity, "executor registered");
        }
        Beat::Heartbeat => ports.executor_heartbeat(reg, signed_at).await?,
    }
    ack(ports, &reg.app, received_us).await
}

/// The answer to a registration or heartbeat: when to beat next, the plugins the app's
/// jobs bind, for the executor to compile ahead of their first run, and this node's time
/// when the request arrived (`received_us`) and when the answer leaves, in ms for
/// executors of before 2026-12-04 and in µs.
async fn ack(ports: &Ports, app: &str, received_us: i64) -> Result<RegistrationAck> {
    let plugins = ports.store().plugins_bound_by(app, PLUGINS_TO_WARM).await?;
    let answered_us = ports.clock().now_us();
    Ok(RegistrationAck {
        heartbeat_interval_ms: ports.config().executor_heartbeat_ms(),
        plugins,
        scheduler_time_ms: Some(answered_us.div_euclid(1000)),
        scheduler_received_ms: Some(received_us.div_euclid(1000)),
        scheduler_time_us: Some(answered_us),
        scheduler_received_us: Some(received_us),
    })
}

/// An executor shutting down gracefully: nothing is dispatched to it any more.
pub async fn deregister(ports: &Ports, d: &Deregistration, signed_at: Millis) -> Result<()> {
    ports.executor_deregistered(d, signed_at).await?;
    tracing::info!(app = %d.app, address = %d.address, "executor deregistered");
    Ok(())
}

/// What becomes of one report.
enum Verdict {
    Take,
    OtherApp,
    Gone,
}

/// Applies the reports of an executor of `app` that are about `app`: a report's task must
/// be of a job of that app (or of a job deleted since), with the job it names, and a
/// recorded run must be of that task. Others are dropped and logged, not refused: one
/// stray report (of a job moved to another app meanwhile, say) must not hold up the
/// executor's later ones. Returns the rows written; repeats are applied already.
pub async fn accept_reports(ports: &Ports, app: &str, batch: &[RunReport]) -> Result<usize> {
    let store = ports.store();
    let pairs: Vec<(i64, i64)> = batch.iter().map(|r| (r.run_id, r.task_id)).collect();
    let owners = store.report_owners(&pairs).await?;
    let mut reports = Vec::with_capacity(batch.len());
    // Reports about tasks of deleted jobs name no app: one is taken only from an executor
    // of the signer's app that the run was recorded as sent to.
    let mut registered: HashMap<String, bool> = HashMap::new();
    for report in batch {
        let recorded = owners.runs.get(&report.run_id);
        let run_fits = recorded.is_none_or(|(task, _)| *task == report.task_id);
        let verdict = match owners.tasks.get(&report.task_id) {
            Some((job, Some(owner))) if *job == report.job_id && run_fits => {
                if owner == app {
                    Verdict::Take
                } else {
                    Verdict::OtherApp
                }
            }
            Some((job, None)) if *job == report.job_id && run_fits => {
                let sent_to_it = recorded
                    .is_some_and(|(_, executor)| executor.as_deref() == Some(&report.executor));
                let of_app = match registered.get(&report.executor) {
                    Some(&known) => known,
                    None => {
                        let known = store
                            .executor_heartbeat_at(app, &report.executor)
                            .await?
                            .is_some();
                        registered.insert(report.executor.clone(), known);
                        known
                    }
                };
                if sent_to_it && of_app {
                    Verdict::Take
                } else {
                    Verdict::OtherApp
                }
            }
            Some(_) => Verdict::OtherApp,
            None => Verdict::Gone,
        };
        match verdict {
            Verdict::Take => reports.push(report.clone()),
            Verdict::OtherApp => {
                tracing::warn!(
                    app,
                    run.id = report.run_id,
                    task.id = report.task_id,
                    job.id = report.job_id,
                    "dropping a report that is not of the signing executor's app"
                );
            }
            Verdict::Gone => {
                tracing::info!(
                    run.id = report.run_id,
                    task.id = report.task_id,
                    "dropping the report of a task that no longer exists"
                );
            }
        }
    }
    let written = ports.apply_reports(&reports).await?;
    tracing::debug!(reports = batch.len(), written, "callback applied");
    Ok(written)
}

/// The bytes of the plugin module `sha256`, if a job of `app` uses it: an executor cannot
/// fetch another app's plugins.
pub async fn plugin_module(ports: &Ports, app: &str, sha256: &str) -> Result<Vec<u8>> {
    let is_hash = sha256.len() == 64
        && sha256
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    if !is_hash {
        return Err(Error::BadRequest(
            "path parameter `sha256` must be 64 lower-case hex characters (a SHA-256)".into(),
        ));
    }
    if !ports.store().app_uses_plugin(app, sha256).await? {
        return Err(Error::NotFound(format!(
            "no plugin {sha256} used by a job of app `{app}`"
        )));
    }
    Ok(ports.store().plugin_module(sha256).await?)
}

/// The job a run asks for: it must exist and belong to `app`, so an executor reaches only
/// its own app's jobs.
async fn job_of(ports: &Ports, app: &str, job_id: i64) -> Result<()> {
    match ports.store().get_job(job_id).await {
        Ok(job) if job.spec.app == app => Ok(()),
        Ok(_) | Err(store::Error::NotFound(_)) => Err(Error::NotFound(format!(
            "job {job_id} of app `{app}` not found"
        ))),
        Err(e) => Err(e.into()),
    }
}

fn check_key(key: &str) -> Result<()> {
    if key.is_empty() || key.len() > KV_KEY_MAX {
        return Err(Error::Unprocessable(format!(
            "a key must be 1 to {KV_KEY_MAX} bytes long, not {}",
            key.len()
        )));
    }
    if key.chars().any(char::is_control) {
        return Err(Error::Unprocessable(
            "a key must not contain control characters".into(),
        ));
    }
    Ok(())
}

/// A run's `kv_get`, `kv_set` or `kv_delete` on its job's state.
pub async fn kv(ports: &Ports, req: KvRequest) -> Result<KvReply> {
    job_of(ports, &req.app, req.job_id).await?;
    check_key(&req.key)?;
    let store = ports.store();
    let value = match req.op {
        KvOp::Get => store
            .kv_get(req.job_id, &req.key)
            .await?
            .map(|v| BASE64.encode(v)),
        KvOp::Set => {
            let encoded = req
                .value
                .ok_or_else(|| Error::BadRequest("`set` needs a `value` (base64)".into()))?;
            let value = BASE64
                .decode(encoded.as_bytes())
                .map_err(|e| Error::BadRequest(format!("`value` is not base64: {e}")))?;
            if value.len() > KV_VALUE_MAX {
                return Err(Error::PayloadTooLarge(format!(
                    "a value may be at most {KV_VALUE_MAX} bytes, not {}",
                    value.len()
                )));
            }
            let used = store.kv_usage(req.job_id, &req.key).await?;
            if let Some(full) = kv_over_quota(used.keys, used.bytes, &req.key, value.len()) {
                return Err(Error::PayloadTooLarge(full));
            }
            store
                .kv_set(req.job_id, &req.key, &value, ports.clock().now_ms())
                .await?;
            None
        }
        KvOp::Delete => {
            store.kv_delete(req.job_id, &req.key).await?;
            None
        }
    };
    Ok(KvReply { value })
}

/// A run's `secret_get`: its app's secret, opened.
pub async fn secret(ports: &Ports, req: SecretRequest) -> Result<SecretReply> {
    job_of(ports, &req.app, req.job_id).await?;
    let Some(sealed) = ports.store().secret(&req.app, &req.name).await? else {
        return Ok(SecretReply { value: None });
    };
    let value = ports
        .secrets()
        .open(&req.app, &req.name, &sealed)
        .map_err(|e| Error::Unprocessable(e.to_string()))?;
    let value = String::from_utf8(value)
        .map_err(|_| Error::Unprocessable(format!("secret `{}` is not UTF-8", req.name)))?;
    Ok(SecretReply { value: Some(value) })
}
