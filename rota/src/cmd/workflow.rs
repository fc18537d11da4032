//! `rota workflow …` (SPEC §10): put a workflow's definition in place from a file (created,
//! or its next version when the steps changed), start an instance and optionally wait for
//! its end, and show an instance step by step.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use super::client::{Answer, ApiClient, Refused, ServerFlags};
use super::task::{print_raw, print_table, text};

/// How often `start --wait` reads the instance.
const POLL: Duration = Duration::from_millis(250);

#[derive(Args)]
pub struct WorkflowArgs {
    #[command(flatten)]
    server: ServerFlags,
    #[command(subcommand)]
    command: WorkflowCommand,
}

#[derive(Subcommand)]
enum WorkflowCommand {
    /// Create the workflow a JSON file defines (`{"name", "app", "steps": […], "schedule"?,
    /// "overlap"?, "enabled"?}`, as `POST /api/v1/workflows` takes it), or give the existing
    /// one of that name what the file says (new steps are a new version; none when they
    /// are unchanged).
    Apply(ApplyArgs),
    /// Start an instance; with --wait, wait for its end and print its output (exit status
    /// 1 unless it succeeded).
    Start(StartArgs),
    /// An instance: its status, each step's status, runs and output.
    Show(ShowArgs),
}

#[derive(Args)]
struct ApplyArgs {
    /// The workflow's definition (JSON).
    #[arg(short = 'f', long = "file", value_name = "FILE")]
    file: PathBuf,
}

#[derive(Args)]
struct StartArgs {
    /// The workflow (name or id).
    workflow: String,
    /// The instance's input: any JSON (default null).
    #[arg(long, value_name = "JSON", value_parser = super::json_value)]
    input: Option<Value>,
    /// An idempotency key: a second start with it returns the first instance.
    #[arg(long)]
    key: Option<String>,
    /// Wait for the instance to end, then print its output.
    #[arg(long)]
    wait: bool,
    /// Give up waiting after this long (e.g. 10m; default: wait as long as it runs).
    #[arg(long, value_name = "DURATION", value_parser = super::duration::parse_duration_ms, requires = "wait")]
    timeout: Option<u64>,
}

#[derive(Args)]
struct ShowArgs {
    /// The instance's id.
    id: i64,
}

impl WorkflowArgs {
    pub async fn run(self) -> anyhow::Result<()> {
        super::finish(self.run_inner().await)
    }

    async fn run_inner(self) -> anyhow::Result<()> {
        let api = ApiClient::new(&self.server)?;
        let json = self.server.json;
        match self.command {
            WorkflowCommand::Apply(args) => apply(&api, json, &args.file).await,
            WorkflowCommand::Start(args) => start(&api, json, args).await,
            WorkflowCommand::Show(args) => {
                let answer = instance(&api, args.id).await?;
                if json {
                    return print_raw(&answer);
                }
                print_instance(&answer.value);
                Ok(())
            }
        }
    }
}

async fn apply(api: &ApiClient, json: bool, file: &std::path::Path) -> anyhow::Result<()> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let def: Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", file.display()))?;
    let Some(name) = def["name"].as_str() else {
        anyhow::bail!("{}: `name` (a string) is missing", file.display());
    };
    let url = api.url(&["workflows", name]);
    let before = match api.send(Method::GET, url.clone(), None).await {
        Ok(found) => {
            let (app, wanted) = (&found.value["app"], &def["app"]);
            if wanted.is_string() && wanted != app {
                anyhow::bail!(
                    "{}: workflow `{name}` is in app {app}, the file says {wanted}; a \
                     workflow's app does not change (delete it and apply again)",
                    file.display()
                );
            }
            Some(found.value["version"].as_i64())
        }
        Err(e) if Refused::is(&e, StatusCode::NOT_FOUND) => None,
        Err(e) => return Err(e),
    };
    let answer = match before {
        None => {
            let created = api.url(&["workflows"]);
            api.send(Method::POST, created, Some(&def)).await?
        }
        Some(_) => {
            let mut change = json!({"steps": def["steps"]});
            // What the file says of these replaces what the workflow has; a schedule the
            // file no longer has is removed.
            for field in ["enabled", "misfire", "overlap"] {
                if let Some(value) = def.get(field) {
                    change[field] = value.clone();
                }
            }
            change["schedule"] = def
                .get("schedule")
                .cloned()
                .unwrap_or_else(|| json!({"kind": "none"}));
            api.send(Method::PATCH, url, Some(&change)).await?
        }
    };
    if json {
        return print_raw(&answer);
    }
    let version = answer.value["version"].as_i64().unwrap_or(0);
    match before {
        None => println!("workflow `{name}` created (version {version})"),
        Some(v) if v == Some(version) => {
            println!("workflow `{name}` applied (version {version}: steps unchanged)")
        }
        Some(_) => println!("workflow `{name}` is now at version {version}"),
    }
    Ok(())
}

async fn start(api: &ApiClient, json: bool, args: StartArgs) -> anyhow::Result<()> {
    let mut body = json!({"input": args.input.unwrap_or(Value::Null)});
    if let Some(key) = &args.key {
        body["key"] = json!(key);
    }
    let url = api.url(&["workflows", &args.workflow, "instances"]);
    let answer = api.send(Method::POST, url, Some(&body)).await?;
    let id = answer.value["id"].as_i64().unwrap_or(0);
    if !args.wait {
        if json {
            return print_raw(&answer);
        }
        let known = if answer.status == StatusCode::OK {
            " (already started with this key)"
        } else {
            ""
        };
        println!(
            "started instance {id} of workflow `{}`{known}",
            args.workflow
        );
        return Ok(());
    }
    let deadline = args
        .timeout
        .map(|ms| tokio::time::Instant::now() + Duration::from_millis(ms));
    let end = loop {
        let now = instance(api, id).await?;
        if now.value["status"] != "running" {
            break now;
        }
        if deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
            anyhow::bail!(
                "instance {id} still runs after the --timeout; `rota workflow show {id}`"
            );
        }
        tokio::time::sleep(POLL).await;
    };
    if json {
        print_raw(&end)?;
    } else {
        println!(
            "instance {id}: {}",
            end.value["status"].as_str().unwrap_or("?")
        );
        println!("{}", serde_json::to_string_pretty(&end.value["output"])?);
    }
    if end.value["status"] != "succeeded" {
        std::process::exit(1);
    }
    Ok(())
}

async fn instance(api: &ApiClient, id: i64) -> anyhow::Result<Answer> {
    let url = api.url(&["workflow-instances", &id.to_string()]);
    api.send(Method::GET, url, None).await
}

/// An instance as `name  value` lines, then a table of its steps, then its output.
fn print_instance(inst: &Value) {
    for name in [
        "id",
        "workflow",
        "version",
        "status",
        "key",
        "created_at",
        "finished_at",
    ] {
        if let Some(value) = text(&inst[name]) {
            println!("{name:<13}{value}");
        }
    }
    println!("{:<13}{}", "input", inst["input"]);
    println!();
    let steps = inst["steps"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    let rows: Vec<Vec<String>> = steps
        .iter()
        .map(|s| {
            let items = &s["items"];
            let items = if items.is_object() {
                format!(
                    "{}/{} ok, {} failed, {} running",
                    items["succeeded"], items["total"], items["failed"], items["running"]
                )
            } else {
                "-".into()
            };
            let runs: Vec<String> = s["runs"]
                .as_array()
                .map(|r| r.iter().map(Value::to_string).collect())
                .unwrap_or_default();
            vec![
                text(&s["name"]).unwrap_or_default(),
                text(&s["status"]).unwrap_or_default(),
                if runs.is_empty() {
                    "-".into()
                } else {
                    runs.join(",")
                },
                items,
                text(&s["message"]).unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    print_table(&["STEP", "STATUS", "RUNS", "ITEMS", "MESSAGE"], &rows);
    if !inst["output"].is_null() {
        println!();
        println!("output {}", inst["output"]);
    }
}
