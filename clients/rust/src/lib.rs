//! `rota-client`: a client of a Rota scheduler's REST API (SPEC §6, §8).
//!
//! Producers create delayed tasks ([`Client::create_task`], [`Client::create_tasks`]),
//! read and cancel them; consumers of a `pull` job lease its due tasks ([`Client::pull`])
//! and ack, nack or extend each, or hand a handler to [`Client::consume`], which long-polls,
//! keeps each lease alive while the handler works, and acks on `Ok` or nacks on `Err`.
//! Workflows (SPEC §10): [`Client::start_workflow`] starts an instance and
//! [`Client::wait_instance`] waits for its output; a consumer gives a step's output with
//! [`Client::ack_with_output`].
//!
//! ```no_run
//! # async fn demo() -> Result<(), rota_client::Error> {
//! use rota_client::{Client, NewTask};
//! let rota = Client::new("http://127.0.0.1:8080", "token")?;
//! rota.create_task(&NewTask::new("close-order-q").delay_ms(30 * 60_000).key("order-42")
//!     .payload(r#"{"order_id":42}"#)).await?;
//! let pulled = rota.pull("close-order-q", &rota_client::Pull::default().wait_ms(20_000)).await?;
//! for task in pulled {
//!     // … close the order …
//!     rota.ack(task.task, &task.lease).await?;
//! }
//! # Ok(()) }
//! ```
//!
//! Delivery is at-least-once: a lease that expires (the consumer died, or held it too long
//! without extending) is delivered again as the next attempt. Dedupe with the task's `key`
//! and `attempt` (`docs/delivery.md`).

use std::future::Future;
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// What went wrong: the server's answer (with its `{"error": …}` message), or no answer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The server refused: its status and message. A 409 on ack, nack or extend means the
    /// lease is no longer held ([`Error::is_lease_lost`]).
    #[error("{status}: {message}")]
    Api { status: StatusCode, message: String },
    /// The server could not be reached, or its answer could not be read.
    #[error("talking to the scheduler: {0}")]
    Http(#[from] reqwest::Error),
    /// A base URL that is not one.
    #[error("`{0}` is not an http:// or https:// URL")]
    BadServer(String),
}

impl Error {
    /// The server's status, if it answered.
    pub fn status(&self) -> Option<StatusCode> {
        match self {
            Error::Api { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// Is this the 409 of a lease that expired or whose attempt already ended?
    pub fn is_lease_lost(&self) -> bool {
        self.status() == Some(StatusCode::CONFLICT)
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A task as the API shows it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Task {
    pub id: i64,
    pub job: i64,
    /// `pending`, `running`, `succeeded`, `failed` (a retry is due), `dead`, `cancelled`.
    pub status: String,
    /// Attempts started so far.
    pub attempts: i32,
    pub due_at: String,
    pub key: Option<String>,
    pub payload: Option<String>,
    pub priority: i32,
}

/// A workflow instance as the API shows it (SPEC §10).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Instance {
    pub id: i64,
    /// The workflow's id.
    pub workflow: i64,
    pub version: i32,
    /// `running`, `succeeded`, `failed` or `cancelled`.
    pub status: String,
    pub input: Value,
    /// `{"<last step>": its output, …}` once it ended.
    pub output: Option<Value>,
    pub key: Option<String>,
    /// Each step: `name`, `status`, `runs`, `output`, … as the API gives them.
    pub steps: Vec<Value>,
}

impl Instance {
    pub fn is_running(&self) -> bool {
        self.status == "running"
    }
}

/// A task to create: [`NewTask::new`] and the builder methods.
#[derive(Debug, Clone, Default, Serialize)]
pub struct NewTask {
    job: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    payload: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    delay_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    run_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    key: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_attempts: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    priority: Option<i32>,
}

impl NewTask {
    /// A task of `job` (its name or id), due now.
    pub fn new(job: impl Into<String>) -> Self {
        NewTask {
            job: job.into(),
            ..NewTask::default()
        }
    }
    pub fn payload(mut self, payload: impl Into<String>) -> Self {
        self.payload = Some(payload.into());
        self
    }
    /// Due this long after the server accepts it.
    pub fn delay_ms(mut self, ms: u64) -> Self {
        self.delay_ms = Some(ms);
        self
    }
    /// Due at this RFC 3339 time.
    pub fn run_at(mut self, at: impl Into<String>) -> Self {
        self.run_at = Some(at.into());
        self
    }
    /// Idempotency: a second task of the job with this key is the first one.
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = Some(n);
        self
    }
    /// −1000 to 1000, higher first.
    pub fn priority(mut self, p: i32) -> Self {
        self.priority = Some(p);
        self
    }
}

/// How to pull: [`Pull::default`] takes one task, leases it for 30 s and does not wait.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Pull {
    #[serde(skip_serializing_if = "Option::is_none")]
    max: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    lease_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    wait_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    consumer: Option<String>,
}

impl Pull {
    /// At most this many tasks (1–1,000).
    pub fn max(mut self, n: u32) -> Self {
        self.max = Some(n);
        self
    }
    /// Each lease holds this long (1,000–43,200,000 ms).
    pub fn lease_ms(mut self, ms: u64) -> Self {
        self.lease_ms = Some(ms);
        self
    }
    /// Wait up to this long for a task to fall due (up to 30,000 ms).
    pub fn wait_ms(mut self, ms: u64) -> Self {
        self.wait_ms = Some(ms);
        self
    }
    /// The consumer's name, shown on its runs as `pull:<consumer>`.
    pub fn consumer(mut self, name: impl Into<String>) -> Self {
        self.consumer = Some(name.into());
        self
    }
}

/// A task handed to this consumer.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Pulled {
    pub task: i64,
    pub attempt: i32,
    /// Give it back to ack, nack or extend.
    pub lease: String,
    pub payload: Option<String>,
    pub key: Option<String>,
    pub priority: i32,
    pub due_at: String,
    pub lease_expires_at: String,
}

/// What became of one ack of [`Client::ack_batch`]: `acked`, `stale` or `not_found`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct AckResult {
    pub task: i64,
    pub status: String,
}

/// A client of one scheduler node (any node serves every call).
#[derive(Clone)]
pub struct Client {
    base: reqwest::Url,
    token: String,
    http: reqwest::Client,
}

impl Client {
    /// A client of the node at `server` (`http://host:8080`) with an API token.
    pub fn new(server: &str, token: impl Into<String>) -> Result<Self> {
        let base = reqwest::Url::parse(server)
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https") && !u.cannot_be_a_base())
            .ok_or_else(|| Error::BadServer(server.to_owned()))?;
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            // Long polls wait up to 30 s on the server.
            .timeout(Duration::from_secs(60))
            .build()?;
        Ok(Client {
            base,
            token: token.into(),
            http,
        })
    }

    fn url(&self, segments: &[&str]) -> reqwest::Url {
        let mut url = self.base.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(["api", "v1"]).extend(segments);
        }
        url
    }

    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        segments: &[&str],
        body: Option<&Value>,
    ) -> Result<(StatusCode, T)> {
        let mut req = self
            .http
            .request(method, self.url(segments))
            .bearer_auth(&self.token);
        if let Some(body) = body {
            req = req.json(body);
        }
        let resp = req.send().await?;
        let status = resp.status();
        if !status.is_success() {
            let text = resp.text().await.unwrap_or_default();
            let message = serde_json::from_str::<Value>(&text)
                .ok()
                .and_then(|v| v["error"].as_str().map(str::to_owned))
                .unwrap_or(text);
            return Err(Error::Api { status, message });
        }
        Ok((status, resp.json().await?))
    }

    /// Creates a task; the task and whether it is new (`false`: the job already had a task
    /// with this key, and it is that one).
    pub async fn create_task(&self, task: &NewTask) -> Result<(Task, bool)> {
        let body = serde_json::to_value(task).expect("a task is plain data");
        let (status, task) = self.call(Method::POST, &["tasks"], Some(&body)).await?;
        Ok((task, status == StatusCode::CREATED))
    }

    /// Creates up to 10,000 tasks, all or nothing; their ids, in order.
    pub async fn create_tasks(&self, tasks: &[NewTask]) -> Result<Vec<i64>> {
        let body = json!({"tasks": tasks});
        let (_, v): (_, Value) = self
            .call(Method::POST, &["tasks", "batch"], Some(&body))
            .await?;
        Ok(serde_json::from_value(v["ids"].clone()).unwrap_or_default())
    }

    pub async fn get_task(&self, id: i64) -> Result<Task> {
        Ok(self
            .call(Method::GET, &["tasks", &id.to_string()], None)
            .await?
            .1)
    }

    /// Cancels a task that has not started.
    pub async fn cancel_task(&self, id: i64) -> Result<Task> {
        Ok(self
            .call(Method::DELETE, &["tasks", &id.to_string()], None)
            .await?
            .1)
    }

    /// Re-drives a dead task: a new attempt, due now.
    pub async fn retry_task(&self, id: i64) -> Result<Task> {
        Ok(self
            .call(Method::POST, &["tasks", &id.to_string(), "retry"], None)
            .await?
            .1)
    }

    /// Starts an instance of `workflow` (name or id) with `input`; with a `key` a second
    /// start returns the first instance. The instance, and whether it is new.
    pub async fn start_workflow(
        &self,
        workflow: &str,
        input: &Value,
        key: Option<&str>,
    ) -> Result<(Instance, bool)> {
        let mut body = json!({"input": input});
        if let Some(key) = key {
            body["key"] = json!(key);
        }
        let (status, instance) = self
            .call(
                Method::POST,
                &["workflows", workflow, "instances"],
                Some(&body),
            )
            .await?;
        Ok((instance, status == StatusCode::CREATED))
    }

    pub async fn get_instance(&self, id: i64) -> Result<Instance> {
        Ok(self
            .call(Method::GET, &["workflow-instances", &id.to_string()], None)
            .await?
            .1)
    }

    /// Instance `id` once it has ended (read every `poll`); [`Instance::output`] is then
    /// its output. Bound the wait with `tokio::time::timeout`.
    pub async fn wait_instance(&self, id: i64, poll: Duration) -> Result<Instance> {
        loop {
            let instance = self.get_instance(id).await?;
            if !instance.is_running() {
                return Ok(instance);
            }
            tokio::time::sleep(poll).await;
        }
    }

    /// Leases due tasks of a pull job.
    pub async fn pull(&self, job: &str, how: &Pull) -> Result<Vec<Pulled>> {
        #[derive(Deserialize)]
        struct Items {
            items: Vec<Pulled>,
        }
        let body = serde_json::to_value(how).expect("a pull is plain data");
        let (_, got): (_, Items) = self
            .call(Method::POST, &["jobs", job, "pull"], Some(&body))
            .await?;
        Ok(got.items)
    }

    /// The attempt succeeded.
    pub async fn ack(&self, task: i64, lease: &str) -> Result<Task> {
        self.end_lease(task, "ack", json!({"lease": lease})).await
    }

    /// The attempt succeeded, giving `output` (a workflow step's, for the steps after it;
    /// at most 64 KiB).
    pub async fn ack_with_output(&self, task: i64, lease: &str, output: &Value) -> Result<Task> {
        self.end_lease(task, "ack", json!({"lease": lease, "output": output}))
            .await
    }

    /// `POST /tasks/{task}/{how}` (ack, nack) with `body`.
    async fn end_lease(&self, task: i64, how: &str, body: Value) -> Result<Task> {
        Ok(self
            .call(
                Method::POST,
                &["tasks", &task.to_string(), how],
                Some(&body),
            )
            .await?
            .1)
    }

    /// The attempt failed: retried after `delay_ms` (or the backoff) while attempts remain.
    pub async fn nack(
        &self,
        task: i64,
        lease: &str,
        error: Option<&str>,
        delay_ms: Option<u64>,
    ) -> Result<Task> {
        let mut body = json!({"lease": lease});
        if let Some(error) = error {
            body["error"] = json!(error);
        }
        if let Some(delay) = delay_ms {
            body["delay_ms"] = json!(delay);
        }
        self.end_lease(task, "nack", body).await
    }

    /// The lease now ends `lease_ms` from now; the new end (RFC 3339).
    pub async fn extend(&self, task: i64, lease: &str, lease_ms: u64) -> Result<String> {
        let body = json!({"lease": lease, "lease_ms": lease_ms});
        let (_, v): (_, Value) = self
            .call(
                Method::POST,
                &["tasks", &task.to_string(), "extend"],
                Some(&body),
            )
            .await?;
        Ok(v["lease_expires_at"]
            .as_str()
            .unwrap_or_default()
            .to_owned())
    }

    /// Acks many leases of one job at once.
    pub async fn ack_batch(&self, job: &str, acks: &[(i64, &str)]) -> Result<Vec<AckResult>> {
        let acks: Vec<Value> = acks
            .iter()
            .map(|(task, lease)| json!({"task": task, "lease": lease}))
            .collect();
        let (_, v): (_, Value) = self
            .call(
                Method::POST,
                &["jobs", job, "ack"],
                Some(&json!({"acks": acks})),
            )
            .await?;
        Ok(serde_json::from_value(v["results"].clone()).unwrap_or_default())
    }

    /// Consumes a pull job until `stop` resolves: long-polls with `how`, runs `handler` on
    /// each task while its lease is extended every third of `lease_ms`, then acks (`Ok`) or
    /// nacks with the error (`Err`). A lease lost meanwhile is skipped (the task was handed
    /// out again). Returns how many tasks were acked; errors only when the server cannot
    /// be reached or refuses the pull itself.
    pub async fn consume<H, F>(
        &self,
        job: &str,
        how: Pull,
        handler: H,
        stop: impl Future<Output = ()>,
    ) -> Result<u64>
    where
        H: Fn(Pulled) -> F,
        F: Future<Output = std::result::Result<(), String>>,
    {
        let how = Pull {
            wait_ms: how.wait_ms.or(Some(20_000)),
            ..how
        };
        let lease_ms = how.lease_ms.unwrap_or(30_000);
        let mut acked = 0;
        tokio::pin!(stop);
        loop {
            let pulled = tokio::select! {
                got = self.pull(job, &how) => got?,
                () = &mut stop => return Ok(acked),
            };
            for task in pulled {
                let (id, lease) = (task.task, task.lease.clone());
                let outcome = self.while_held(id, &lease, lease_ms, handler(task)).await;
                let ended = match outcome {
                    Ok(()) => self.ack(id, &lease).await.map(|_| acked += 1),
                    Err(error) => self.nack(id, &lease, Some(&error), None).await.map(|_| ()),
                };
                match ended {
                    Err(e) if e.is_lease_lost() => {}
                    other => other?,
                }
            }
        }
    }

    /// Runs `work` while extending the lease every third of `lease_ms`.
    async fn while_held<F: Future<Output = std::result::Result<(), String>>>(
        &self,
        task: i64,
        lease: &str,
        lease_ms: u64,
        work: F,
    ) -> std::result::Result<(), String> {
        let every = Duration::from_millis((lease_ms / 3).max(100));
        tokio::pin!(work);
        loop {
            tokio::select! {
                done = &mut work => return done,
                () = tokio::time::sleep(every) => {
                    // A lost lease ends nothing here: the ack after the work says so.
                    let _ = self.extend(task, lease, lease_ms).await;
                }
            }
        }
    }
}
