//! `rota queue …`: a consumer of a `pull` job from the command line (SPEC §8) — pull due
//! tasks with a lease, then ack, nack or extend each. For scripts and for looking at a
//! queue by hand; services use a client library.

use clap::{Args, Subcommand};
use reqwest::Method;
use serde_json::{Map, Value, json};

use super::client::{ApiClient, ServerFlags};
use super::duration::parse_duration_ms;
use super::task::{print_raw, print_task, shorten, text};

#[derive(Args)]
pub struct QueueArgs {
    #[command(flatten)]
    server: ServerFlags,
    #[command(subcommand)]
    command: QueueCommand,
}

#[derive(Subcommand)]
enum QueueCommand {
    /// Lease due tasks of a pull job; prints each task's id, attempt, lease and payload.
    Pull(PullArgs),
    /// The leased attempt succeeded.
    Ack(AckArgs),
    /// The leased attempt failed: retried after --delay (or the job's backoff), or dead.
    Nack(NackArgs),
    /// Hold the lease longer.
    Extend(ExtendArgs),
}

#[derive(Args)]
struct PullArgs {
    /// The pull job (name or id).
    job: String,
    /// How many tasks at most (1–1,000; default 1).
    #[arg(long, value_name = "N")]
    max: Option<u32>,
    /// How long each lease holds before the task is delivered again (1s–12h; default 30s).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration_ms)]
    lease: Option<u64>,
    /// Wait up to this long for a task to fall due when none is ready (up to 30s).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration_ms)]
    wait: Option<u64>,
    /// The consumer's name, shown on the runs as `pull:<consumer>` (default: the token's
    /// user).
    #[arg(long)]
    consumer: Option<String>,
}

#[derive(Args)]
struct LeaseArgs {
    /// The task's id.
    task: i64,
    /// The lease the pull printed.
    lease: String,
}

#[derive(Args)]
struct AckArgs {
    #[command(flatten)]
    lease: LeaseArgs,
    /// The attempt's output, any JSON (a workflow step's, given to the steps after it).
    #[arg(long, value_name = "JSON", value_parser = super::json_value)]
    output: Option<Value>,
}

#[derive(Args)]
struct NackArgs {
    #[command(flatten)]
    lease: LeaseArgs,
    /// Why it failed (kept as the run's message).
    #[arg(long)]
    error: Option<String>,
    /// Retry after this long instead of the job's backoff.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration_ms)]
    delay: Option<u64>,
}

#[derive(Args)]
struct ExtendArgs {
    #[command(flatten)]
    lease: LeaseArgs,
    /// The lease now ends this long from now (1s–12h).
    #[arg(long = "for", value_name = "DURATION", value_parser = parse_duration_ms)]
    duration: u64,
}

impl QueueArgs {
    pub async fn run(self) -> anyhow::Result<()> {
        super::finish(self.run_inner().await)
    }

    async fn run_inner(self) -> anyhow::Result<()> {
        let api = ApiClient::new(&self.server)?;
        let json = self.server.json;
        let (url, body, ended) = match self.command {
            QueueCommand::Pull(args) => {
                let mut body = Map::new();
                for (name, value) in [
                    ("max", args.max.map(Value::from)),
                    ("lease_ms", args.lease.map(Value::from)),
                    ("wait_ms", args.wait.map(Value::from)),
                    ("consumer", args.consumer.map(Value::from)),
                ] {
                    if let Some(value) = value {
                        body.insert(name.into(), value);
                    }
                }
                let body = Value::Object(body);
                let answer = api
                    .send(
                        Method::POST,
                        api.url(&["jobs", &args.job, "pull"]),
                        Some(&body),
                    )
                    .await?;
                if json {
                    return print_raw(&answer);
                }
                print_pulled(&answer.value);
                return Ok(());
            }
            QueueCommand::Ack(a) => {
                let mut body = json!({"lease": a.lease.lease});
                if let Some(output) = a.output {
                    body["output"] = output;
                }
                let url = api.url(&["tasks", &a.lease.task.to_string(), "ack"]);
                (url, body, "acked")
            }
            QueueCommand::Nack(n) => {
                let mut body = json!({"lease": n.lease.lease});
                if let Some(error) = n.error {
                    body["error"] = json!(error);
                }
                if let Some(delay) = n.delay {
                    body["delay_ms"] = json!(delay);
                }
                let url = api.url(&["tasks", &n.lease.task.to_string(), "nack"]);
                (url, body, "nacked")
            }
            QueueCommand::Extend(e) => {
                let url = api.url(&["tasks", &e.lease.task.to_string(), "extend"]);
                let body = json!({"lease": e.lease.lease, "lease_ms": e.duration});
                let answer = api.send(Method::POST, url, Some(&body)).await?;
                if json {
                    return print_raw(&answer);
                }
                println!(
                    "task {}: the lease now ends at {}",
                    e.lease.task, answer.value["lease_expires_at"]
                );
                return Ok(());
            }
        };
        let answer = api.send(Method::POST, url, Some(&body)).await?;
        if json {
            return print_raw(&answer);
        }
        println!("{ended} task {}", answer.value["id"]);
        print_task(&answer.value);
        Ok(())
    }
}

/// The pulled tasks, one block each: what a consumer needs to ack it.
fn print_pulled(answer: &Value) {
    let items = answer["items"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    if items.is_empty() {
        println!("no task is due");
    }
    for item in items {
        for name in [
            "task",
            "attempt",
            "lease",
            "key",
            "priority",
            "due_at",
            "lease_expires_at",
        ] {
            if let Some(value) = text(&item[name]) {
                println!("{name:<17}{value}");
            }
        }
        if let Some(payload) = item["payload"].as_str() {
            println!("{:<17}{}", "payload", shorten(payload));
        }
        println!();
    }
}
