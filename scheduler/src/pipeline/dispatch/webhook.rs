//! HTTP delivery (SPEC §8): each fire of an `http` job is POSTed to the job's URL by the
//! node whose wheel fired it — no executor, no plugin. The body is the payload (the job's
//! params for a recurring or manual fire); headers name the task, attempt and times, and
//! a signature when the job names a signing secret. A 2xx is success; any other answer, a
//! timeout or no connection is a failed attempt with the status and the first bytes of
//! the answer in the run's message, retried per policy (`Retry-After` on 429 and 503
//! decides the delay). A workflow step's 2xx answer body is its output (SPEC §10). Deliveries of one job run at most [`PER_JOB`] at once per node
//! (or its `max_concurrency`, if lower); a slow receiver's job moves to the slow pool like
//! a slow executor's.
//!
//! Why the scheduler and not an executor: an `http` job then needs no executor at all (a
//! team that only wants webhooks runs `rota server`), a delivery is one hop instead of two,
//! and the run is recorded by the node that sent it. The price — the control plane opens
//! connections to your services — is bounded by the job's `http_allow` list, which the URL
//! must be on (`docs/architecture.md`, §5b), and by the node's egress policy
//! ([`rota_net::egress`]), which the admin owns: a delivery refused by it sends nothing and
//! its run's message names the rule.

use std::time::{Duration, Instant};

use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderValue, RETRY_AFTER};
use rota_net::egress::{Egress, denied_in};
use rota_proto::webhook_signature;
use tokio::sync::Semaphore;

use super::*;
use crate::store::Store;
use crate::workflow::MAX_OUTPUT_BYTES;

/// Deliveries of one job in flight at once on one node, at most.
pub(crate) const PER_JOB: usize = 64;
/// How much of a refusing answer the run's message keeps.
const ANSWER_EXCERPT: usize = 200;
/// How long an opened signing secret is reused before it is read again.
const SECRET_TTL: Duration = Duration::from_secs(5);
/// The longest `Retry-After` honoured.
const MAX_RETRY_AFTER_MS: i64 = 3_600_000;

/// A signing secret as read at a moment (`None`: it did not exist).
type OpenedSecret = (Instant, Option<Vec<u8>>);

/// The HTTP clients of deliveries, the signing secrets lately opened, and each job's bound.
pub(crate) struct Webhooks {
    http: Egress,
    secrets: Mutex<HashMap<(String, String), OpenedSecret>>,
    /// Each job's bound and its permits (a new bound, after a change of the job, starts
    /// a new semaphore).
    limits: Mutex<HashMap<i64, (usize, Arc<Semaphore>)>>,
    /// Seals and opens the apps' secrets.
    box_: Arc<crate::secrets::SecretBox>,
}

impl Webhooks {
    pub(crate) fn new(
        tls: &rota_net::Tls,
        egress: Arc<rota_net::egress::Policy>,
        box_: Arc<crate::secrets::SecretBox>,
    ) -> Self {
        let tls = tls.clone();
        let http = Egress::new(egress, move || {
            tls.client()
                .pool_max_idle_per_host(PER_JOB)
                .tcp_nodelay(true)
                .redirect(reqwest::redirect::Policy::none())
        });
        Webhooks {
            http,
            secrets: Mutex::new(HashMap::new()),
            limits: Mutex::new(HashMap::new()),
            box_,
        }
    }

    fn limit(&self, job: &JobEntry) -> Arc<Semaphore> {
        let bound = job
            .job
            .spec
            .max_concurrency
            .map_or(PER_JOB, |m| (m.max(1) as usize).min(PER_JOB));
        let mut limits = self.limits.lock().unwrap_or_else(|e| e.into_inner());
        let entry = limits
            .entry(job.job.id)
            .or_insert_with(|| (bound, Arc::new(Semaphore::new(bound))));
        if entry.0 != bound {
            *entry = (bound, Arc::new(Semaphore::new(bound)));
        }
        entry.1.clone()
    }

    /// The value of secret `name` of `app`; `None` if it does not exist.
    pub(super) async fn secret(
        &self,
        store: &Store,
        app: &str,
        name: &str,
    ) -> anyhow::Result<Option<Vec<u8>>> {
        let key = (app.to_owned(), name.to_owned());
        if let Some((at, value)) = self
            .secrets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
            && at.elapsed() < SECRET_TTL
        {
            return Ok(value.clone());
        }
        let value = match store.secret(app, name).await? {
            Some(sealed) => Some(self.box_.open(app, name, &sealed)?),
            None => None,
        };
        self.secrets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, (Instant::now(), value.clone()));
        Ok(value)
    }
}

/// One fire to POST.
pub(super) struct Webhook {
    pub(super) task: DueTask,
    pub(super) job: Arc<JobEntry>,
}

/// What a delivery came to.
struct Outcome {
    status: RunStatus,
    message: Option<String>,
    started_at: Millis,
    finished_at: Millis,
    retry_after_ms: Option<i64>,
    /// A workflow step's output: the 2xx answer's body.
    output: Option<String>,
}

/// POSTs a batch's fires (each job's at most its bound at once), then ends every attempt
/// in one batch of run updates, as executors' reports do.
pub(super) async fn deliver(dispatcher: &Dispatcher, deliveries: Vec<Webhook>) {
    if deliveries.is_empty() {
        return;
    }
    let now = dispatcher.cluster.clock.now_ms();
    // Fenced or unconfirmed: nothing goes out, as for executors.
    let deliveries = drop_stale(dispatcher, deliveries, |d| &d.task);
    if now > dispatcher.cluster.fire_lease.until() {
        let tasks = deliveries.into_iter().map(|d| d.task).collect();
        dispatcher.ring.defer(tasks, now + LEASE_RETRY_MS);
        return;
    }
    let ids = match dispatcher
        .run_ids
        .take(&dispatcher.cluster.store, deliveries.len())
        .await
    {
        Ok(ids) => ids,
        Err(e) => {
            tracing::warn!(error = %e, "reserving run ids for webhook deliveries failed; holding them");
            let tasks = deliveries.into_iter().map(|d| d.task).collect();
            dispatcher.ring.defer(tasks, now + UNREACHABLE_HOLD_MS);
            return;
        }
    };
    let sends = deliveries.iter().zip(&ids).map(|(d, &run_id)| async move {
        let permit = dispatcher.webhooks.limit(&d.job).acquire_owned().await;
        let outcome = post(dispatcher, d, run_id).await;
        drop(permit);
        outcome
    });
    let outcomes = futures_util::future::join_all(sends).await;
    let mut retry_after = HashMap::new();
    let updates: Vec<RunUpdate> = deliveries
        .iter()
        .zip(ids)
        .zip(outcomes)
        .map(|((d, run_id), o)| {
            if let Some(ms) = o.retry_after_ms {
                retry_after.insert(d.task.task_id, ms);
            }
            metrics::counter!("rota_webhook_deliveries_total", "status" => o.status.as_str())
                .increment(1);
            RunUpdate {
                run_id,
                job_id: d.task.job_id,
                task_id: d.task.task_id,
                attempt: d.task.attempt,
                shard_index: 0,
                shard_total: 1,
                executor: Some(receiver(&d.job)),
                scheduled_at: d.task.due_at,
                dispatched_at: Some(o.started_at),
                started_at: Some(o.started_at),
                finished_at: Some(o.finished_at),
                status: o.status,
                exit_code: None,
                message: o.message,
                output: o.output,
            }
        })
        .collect();
    let attempts = deliveries
        .iter()
        .map(|d| (d.task.task_id, d.task.attempt))
        .collect();
    apply_then_fired(dispatcher, &updates, &retry_after, attempts).await;
}

/// The run's `executor`: `webhook:` and the URL's origin.
fn receiver(job: &JobEntry) -> String {
    match &job.job.spec.delivery {
        crate::model::Delivery::Http { url, .. } => match reqwest::Url::parse(url) {
            Ok(u) => format!("webhook:{}", u.origin().ascii_serialization()),
            Err(_) => "webhook".to_owned(),
        },
        _ => "webhook".to_owned(),
    }
}

async fn post(dispatcher: &Dispatcher, d: &Webhook, run_id: i64) -> Outcome {
    let started_at = dispatcher.cluster.clock.now_ms();
    let failed = |message: String| Outcome {
        status: RunStatus::Failed,
        message: Some(message),
        started_at,
        finished_at: dispatcher.cluster.clock.now_ms(),
        retry_after_ms: None,
        output: None,
    };
    let spec = &d.job.job.spec;
    let crate::model::Delivery::Http {
        url,
        timeout_ms,
        signing_secret,
    } = &spec.delivery
    else {
        return failed("the job is no longer delivered by http".into());
    };
    // The delivery's span, open until the answer: the service continues it from the
    // `traceparent` header.
    let span = round::dispatch_span(dispatcher.cluster.config.traces, &d.task, &spec.name, 0);
    let body = d.task.input(spec.params.as_deref());
    // The receiver checks the signature's timestamp against its own wall clock.
    let signed_at = crate::model::wall_ms();
    let mut headers = HeaderMap::new();
    let content_type = if serde_json::from_str::<serde_json::Value>(&body).is_ok() {
        "application/json"
    } else {
        "text/plain; charset=utf-8"
    };
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    for (name, value) in [
        ("x-rota-task", d.task.task_id.to_string()),
        ("x-rota-attempt", d.task.attempt.to_string()),
        ("x-rota-run", run_id.to_string()),
        ("x-rota-scheduled-at", d.task.due_at.to_string()),
        ("x-rota-timestamp", signed_at.to_string()),
    ]
    .into_iter()
    .chain(rota_net::trace::traceparent(&span).map(|tp| (rota_net::trace::TRACEPARENT, tp)))
    {
        if let Ok(v) = HeaderValue::from_str(&value) {
            headers.insert(name, v);
        }
    }
    if let Some(name) = signing_secret {
        let store = &dispatcher.cluster.store;
        match dispatcher.webhooks.secret(store, &spec.app, name).await {
            Ok(Some(secret)) => {
                let sig = webhook_signature(&secret, signed_at, body.as_bytes());
                if let Ok(v) = HeaderValue::from_str(&sig) {
                    headers.insert("x-rota-signature", v);
                }
            }
            Ok(None) => {
                return failed(format!(
                    "signing secret `{name}` of app `{}` does not exist; nothing was sent",
                    spec.app
                ));
            }
            Err(e) => return failed(format!("reading signing secret `{name}` failed: {e:#}")),
        }
    }
    let timeout =
        Duration::from_millis(timeout_ms.unwrap_or(spec.timeout_ms).clamp(1, 300_000) as u64);
    let http = match reqwest::Url::parse(url) {
        Ok(parsed) => dispatcher.webhooks.http.client(&parsed),
        Err(e) => return failed(format!("`{url}` is not a URL: {e}")),
    };
    let http = match http {
        Ok(http) => http,
        Err(refused) => return failed(format!("nothing was sent to {url}: {refused}")),
    };
    let sent = http
        .post(url)
        .headers(headers)
        .body(body)
        .timeout(timeout)
        .send()
        .await;
    let resp = match sent {
        Ok(resp) => resp,
        Err(e) if e.is_timeout() => {
            return failed(format!(
                "no answer from {url} within {} ms",
                timeout.as_millis()
            ));
        }
        Err(e) => match denied_in(&e) {
            Some(denied) => return failed(format!("nothing was sent to {url}: {denied}")),
            None => return failed(format!("could not deliver to {url}: {}", error_chain(&e))),
        },
    };
    let status = resp.status();
    if status.is_success() {
        return answered(dispatcher, d, resp, url, started_at).await;
    }
    let retry_after_ms = match status.as_u16() {
        429 | 503 => resp
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| retry_after(v, started_at)),
        _ => None,
    };
    let text = resp.text().await.unwrap_or_default();
    let excerpt: String = text.chars().take(ANSWER_EXCERPT).collect();
    let mut outcome = failed(format!("HTTP {}: {}", status.as_u16(), excerpt.trim()));
    outcome.retry_after_ms = retry_after_ms;
    outcome
}

/// A 2xx: the attempt succeeded. A workflow step's output is the answer's body (a body
/// over the limit is read only that far: the step fails naming its size).
async fn answered(
    dispatcher: &Dispatcher,
    d: &Webhook,
    resp: reqwest::Response,
    url: &str,
    started_at: Millis,
) -> Outcome {
    let code = resp.status().as_u16();
    let (status, message, output) = match d.task.kind {
        TaskKind::Step => match body_upto(resp, MAX_OUTPUT_BYTES + 1).await {
            Ok(body) => (RunStatus::Succeeded, format!("HTTP {code}"), Some(body)),
            Err(e) => (
                RunStatus::Failed,
                format!("HTTP {code}, but reading the answer from {url} failed: {e}"),
                None,
            ),
        },
        _ => (RunStatus::Succeeded, format!("HTTP {code}"), None),
    };
    Outcome {
        status,
        message: Some(message),
        started_at,
        finished_at: dispatcher.cluster.clock.now_ms(),
        retry_after_ms: None,
        output,
    }
}

/// The answer's body, at most `max` bytes of it (as text; invalid UTF-8 replaced).
async fn body_upto(mut resp: reqwest::Response, max: usize) -> Result<String, reqwest::Error> {
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await? {
        body.extend_from_slice(&chunk);
        if body.len() >= max {
            body.truncate(max);
            break;
        }
    }
    Ok(String::from_utf8_lossy(&body).into_owned())
}

/// A `Retry-After` value (delay seconds, or an HTTP date) as milliseconds from `now`.
fn retry_after(value: &str, now: Millis) -> Option<i64> {
    let ms = match value.trim().parse::<i64>() {
        Ok(seconds) => seconds.saturating_mul(1000),
        Err(_) => chrono::DateTime::parse_from_rfc2822(value.trim())
            .ok()?
            .timestamp_millis()
            .saturating_sub(now),
    };
    Some(ms.clamp(0, MAX_RETRY_AFTER_MS))
}

/// An error and its causes on one line (reqwest's outermost says only "error sending").
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut parts = vec![e.to_string()];
    let mut cause = e.source();
    while let Some(c) = cause {
        parts.push(c.to_string());
        cause = c.source();
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_is_seconds_or_a_date_and_bounded() {
        let now = 1_700_000_000_000;
        assert_eq!(retry_after("3", now), Some(3_000));
        assert_eq!(retry_after("999999", now), Some(MAX_RETRY_AFTER_MS));
        assert_eq!(retry_after("-5", now), Some(0));
        let in_ten = chrono::DateTime::from_timestamp_millis(now + 10_000)
            .unwrap()
            .to_rfc2822();
        assert_eq!(retry_after(&in_ten, now), Some(10_000));
        assert_eq!(retry_after("soon", now), None);
    }
}
