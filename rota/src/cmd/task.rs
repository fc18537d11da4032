//! `rota task …`: the delay queue from the command line (`/api/v1/tasks`).

use std::path::PathBuf;

use anyhow::Context;
use chrono::{DateTime, SecondsFormat, Utc};
use clap::builder::PossibleValuesParser;
use clap::{ArgGroup, Args, Subcommand};
use reqwest::{Method, StatusCode};
use rota_scheduler::api::views::TASK_STATUSES;
use rota_scheduler::backoff::Backoff;
use serde_json::{Map, Value, json};

use super::client::{Answer, ApiClient, ServerFlags};
use super::duration::{parse_backoff, parse_duration_ms};

#[derive(Args)]
pub struct TaskArgs {
    #[command(flatten)]
    server: ServerFlags,
    #[command(subcommand)]
    command: TaskCommand,
}

#[derive(Subcommand)]
enum TaskCommand {
    /// Create a delayed task (or find the one the job already has for `--key`).
    Add(AddArgs),
    /// Show one task.
    Get {
        /// The task's id.
        id: i64,
    },
    /// Cancel a pending task, by id or by `--job` and `--key`.
    Cancel(CancelArgs),
    /// List tasks, newest first, a page at a time.
    List(ListArgs),
    /// Re-drive a dead task (a new attempt, due now), or `--job J --dead` all of a job's
    /// dead tasks (up to `--limit`).
    Retry(RetryArgs),
}

#[derive(Args)]
#[command(group(ArgGroup::new("which").required(true).args(["id", "job"])))]
struct RetryArgs {
    /// The dead task's id.
    #[arg(conflicts_with = "job")]
    id: Option<i64>,
    /// Re-drive this job's dead tasks (name or id), oldest due first.
    #[arg(long, requires = "dead")]
    job: Option<String>,
    /// With --job: the tasks to re-drive are the dead ones (the only kind there is).
    #[arg(long)]
    dead: bool,
    /// With --job: at most this many (1–10,000; default 1,000).
    #[arg(long, value_name = "N", requires = "job")]
    limit: Option<u32>,
}

#[derive(Args)]
struct AddArgs {
    /// The job (name or id) whose plugin runs the task.
    #[arg(long)]
    job: String,
    /// Run after this long (500ms, 30s, 30m, 2h, 1d), counted from when the server accepts
    /// the task. Without `--delay` or `--at` the task is due now.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration_ms, conflicts_with = "at")]
    delay: Option<u64>,
    /// Run at this RFC 3339 time (2026-12-01T10:00:00Z); a time in the past runs at once.
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    at: Option<String>,
    /// The run's stdin.
    #[arg(long, value_name = "TEXT", conflicts_with = "payload_file")]
    payload: Option<String>,
    /// Read the payload (UTF-8) from this file; `-` reads stdin.
    #[arg(long, value_name = "FILE")]
    payload_file: Option<PathBuf>,
    /// Idempotency key: adding again with the same key returns the existing task.
    #[arg(long)]
    key: Option<String>,
    /// Attempts before the task is dead (1–100; default: the job's).
    #[arg(long, value_name = "N")]
    max_attempts: Option<i64>,
    /// Delay between attempts: `fixed:1s` or `exp:BASE,FACTOR,MAX[,jitter]` such as
    /// `exp:1m,2,1h` (default: the job's).
    #[arg(long, value_name = "POLICY", value_parser = parse_backoff)]
    backoff: Option<Backoff>,
    /// From -1000 to 1000, higher first (default 0).
    #[arg(long, value_name = "P", allow_negative_numbers = true)]
    priority: Option<i64>,
}

#[derive(Args)]
#[command(group(ArgGroup::new("which").required(true).args(["id", "key"])))]
struct CancelArgs {
    /// The task's id.
    #[arg(conflicts_with = "job")]
    id: Option<i64>,
    /// The job (name or id) of the task created with `--key`.
    #[arg(long, requires = "key")]
    job: Option<String>,
    /// The key the task was created with.
    #[arg(long, requires = "job")]
    key: Option<String>,
}

#[derive(Args)]
struct ListArgs {
    /// Only this job's tasks (name or id).
    #[arg(long)]
    job: Option<String>,
    /// Only tasks with this status.
    #[arg(long, value_parser = PossibleValuesParser::new(TASK_STATUSES))]
    status: Option<String>,
    /// Tasks per page (default 50, at most 1,000).
    #[arg(long, value_name = "N")]
    limit: Option<u32>,
    /// The cursor a previous page printed as `next`.
    #[arg(long, value_name = "CURSOR")]
    after: Option<String>,
}

/// An RFC 3339 time, sent to the server in UTC with milliseconds.
pub(super) fn parse_time(s: &str) -> Result<String, String> {
    DateTime::parse_from_rfc3339(s.trim())
        .map(|t| {
            t.with_timezone(&Utc)
                .to_rfc3339_opts(SecondsFormat::Millis, true)
        })
        .map_err(|e| format!("`{s}` is not an RFC 3339 time such as 2026-12-01T10:00:00Z ({e})"))
}

impl TaskArgs {
    pub async fn run(self) -> anyhow::Result<()> {
        super::finish(self.run_inner().await)
    }

    async fn run_inner(self) -> anyhow::Result<()> {
        let api = ApiClient::new(&self.server)?;
        let json = self.server.json;
        match self.command {
            TaskCommand::Add(args) => {
                let body = args.body().await?;
                let answer = api
                    .send(Method::POST, api.url(&["tasks"]), Some(&body))
                    .await?;
                if json {
                    return print_raw(&answer);
                }
                let id = &answer.value["id"];
                match (answer.status, text(&answer.value["key"])) {
                    (StatusCode::CREATED, _) => println!("created task {id}"),
                    (_, Some(key)) => println!("task {id} already exists for key {key}"),
                    (_, None) => println!("task {id} already exists"),
                }
                print_task(&answer.value);
            }
            TaskCommand::Get { id } => {
                let answer = api
                    .send(Method::GET, api.url(&["tasks", &id.to_string()]), None)
                    .await?;
                if json {
                    return print_raw(&answer);
                }
                print_task(&answer.value);
            }
            TaskCommand::Cancel(args) => {
                let url = match (args.id, &args.job, &args.key) {
                    (Some(id), _, _) => api.url(&["tasks", &id.to_string()]),
                    (None, Some(job), Some(key)) => {
                        let mut url = api.url(&["tasks"]);
                        url.query_pairs_mut()
                            .append_pair("job", job)
                            .append_pair("key", key);
                        url
                    }
                    // clap requires an id or both --job and --key.
                    _ => anyhow::bail!("give a task id, or --job and --key"),
                };
                let answer = api.send(Method::DELETE, url, None).await?;
                if json {
                    return print_raw(&answer);
                }
                println!("cancelled task {}", answer.value["id"]);
                print_task(&answer.value);
            }
            TaskCommand::Retry(args) => {
                let answer = match (args.id, args.job) {
                    (Some(id), _) => {
                        api.send(
                            Method::POST,
                            api.url(&["tasks", &id.to_string(), "retry"]),
                            None,
                        )
                        .await?
                    }
                    (None, Some(job)) => {
                        let mut body = json!({"job": job, "status": "dead"});
                        if let Some(limit) = args.limit {
                            body["limit"] = json!(limit);
                        }
                        api.send(Method::POST, api.url(&["tasks", "retry"]), Some(&body))
                            .await?
                    }
                    // clap requires one of them.
                    (None, None) => anyhow::bail!("give a task id, or --job and --dead"),
                };
                if json {
                    return print_raw(&answer);
                }
                match args.id {
                    Some(id) => {
                        println!("task {id} is due again (a new attempt)");
                        print_task(&answer.value);
                    }
                    None => println!("{} dead task(s) are due again", answer.value["retried"]),
                }
            }
            TaskCommand::List(args) => {
                let mut url = api.url(&["tasks"]);
                {
                    let mut q = url.query_pairs_mut();
                    for (name, value) in [
                        ("job", args.job),
                        ("status", args.status),
                        ("limit", args.limit.map(|n| n.to_string())),
                        ("after", args.after),
                    ] {
                        if let Some(value) = value {
                            q.append_pair(name, &value);
                        }
                    }
                }
                let answer = api.send(Method::GET, url, None).await?;
                if json {
                    return print_raw(&answer);
                }
                print_task_page(&answer.value);
            }
        }
        Ok(())
    }
}

impl AddArgs {
    /// The `POST /api/v1/tasks` body; absent flags are left to the server's defaults.
    async fn body(self) -> anyhow::Result<Value> {
        let payload = match (self.payload, self.payload_file) {
            (Some(text), _) => Some(text),
            (None, Some(path)) => Some(read_payload(path).await?),
            (None, None) => None,
        };
        let mut body = Map::new();
        body.insert("job".into(), json!(self.job));
        let optional = [
            ("payload", payload.map(Value::from)),
            ("delay_ms", self.delay.map(Value::from)),
            ("run_at", self.at.map(Value::from)),
            ("key", self.key.map(Value::from)),
            ("max_attempts", self.max_attempts.map(Value::from)),
            (
                "backoff",
                self.backoff
                    .map(|b| serde_json::to_value(b).expect("a backoff is plain data")),
            ),
            ("priority", self.priority.map(Value::from)),
        ];
        for (name, value) in optional {
            if let Some(value) = value {
                body.insert(name.into(), value);
            }
        }
        Ok(Value::Object(body))
    }
}

async fn read_payload(path: PathBuf) -> anyhow::Result<String> {
    let what = if path.as_os_str() == "-" {
        "stdin".to_owned()
    } else {
        path.display().to_string()
    };
    tokio::task::spawn_blocking(move || {
        if path.as_os_str() == "-" {
            std::io::read_to_string(std::io::stdin())
        } else {
            std::fs::read_to_string(&path)
        }
    })
    .await
    .context("reading the payload")?
    .with_context(|| format!("--payload-file: reading {what} (the payload must be UTF-8 text)"))
}

pub(super) fn print_raw(answer: &Answer) -> anyhow::Result<()> {
    println!("{}", answer.body.trim_end());
    Ok(())
}

/// A field as text: strings unquoted, `null` and absent as `None`.
pub(super) fn text(v: &Value) -> Option<String> {
    match v {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    }
}

/// One task as `name  value` lines, in the API's words; absent fields are left out.
pub(super) fn print_task(task: &Value) {
    const FIELDS: [&str; 12] = [
        "id",
        "job",
        "kind",
        "status",
        "due_at",
        "attempts",
        "max_attempts",
        "key",
        "priority",
        "last_run_id",
        "created_at",
        "updated_at",
    ];
    for name in FIELDS {
        if let Some(value) = text(&task[name]) {
            println!("{name:<13}{value}");
        }
    }
    if let Some(payload) = task["payload"].as_str() {
        println!("{:<13}{}", "payload", shorten(payload));
    }
}

/// A payload on one line: quoted and escaped, cut after 200 characters.
pub(super) fn shorten(payload: &str) -> String {
    const MAX: usize = 200;
    let chars = payload.chars().count();
    if chars <= MAX {
        return format!("{payload:?}");
    }
    let head: String = payload.chars().take(MAX).collect();
    format!("{head:?}… ({} bytes)", payload.len())
}

/// `rows` under `header`, each column as wide as its widest cell.
pub(super) fn print_table(header: &[&str], rows: &[Vec<String>]) {
    let header: Vec<String> = header.iter().map(|h| (*h).to_owned()).collect();
    let widths: Vec<usize> = (0..header.len())
        .map(|i| {
            std::iter::once(&header)
                .chain(rows)
                .map(|r| r.get(i).map_or(0, |c| c.chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    for row in std::iter::once(&header).chain(rows) {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, &w)| format!("{cell:<w$}"))
            .collect();
        println!("{}", line.join("  ").trim_end());
    }
}

/// A page of tasks as a table, then the cursor of the next page.
fn print_task_page(page: &Value) {
    let items = page["items"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    if items.is_empty() {
        println!("no tasks");
    } else {
        const COLUMNS: [(&str, &str); 6] = [
            ("ID", "id"),
            ("JOB", "job"),
            ("STATUS", "status"),
            ("ATTEMPTS", "attempts"),
            ("DUE_AT", "due_at"),
            ("KEY", "key"),
        ];
        let rows: Vec<Vec<String>> = items
            .iter()
            .map(|t| {
                COLUMNS
                    .iter()
                    .map(|(_, field)| text(&t[field]).unwrap_or_else(|| "-".into()))
                    .collect()
            })
            .collect();
        let header: Vec<&str> = COLUMNS.iter().map(|(h, _)| *h).collect();
        print_table(&header, &rows);
    }
    if let Some(next) = text(&page["next"]) {
        println!("next: {next}  (pass --after {next} for the next page)");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_sent_in_utc_with_milliseconds() {
        assert_eq!(
            parse_time("2026-12-01T10:00:00Z").unwrap(),
            "2026-12-01T10:00:00.000Z"
        );
        assert_eq!(
            parse_time("2026-12-01T12:00:00.5+02:00").unwrap(),
            "2026-12-01T10:00:00.500Z"
        );
        assert!(
            parse_time("tomorrow")
                .unwrap_err()
                .contains("not an RFC 3339 time")
        );
    }

    #[test]
    fn long_payloads_are_cut() {
        assert_eq!(shorten("a\nb"), r#""a\nb""#);
        let long = "x".repeat(300);
        assert!(shorten(&long).ends_with("… (300 bytes)"));
    }
}
