//! `rota task …`, `rota queue …` and `rota workflow …` end to end: the built binary
//! against a scheduler node started in this process on port 0. Each command runs as a
//! real process, off the runtime's threads.

use crate::fixtures;
use crate::support;

use std::time::Duration;

use serde_json::{Value, json};
use support::*;

/// What one `rota` process did.
#[derive(Debug)]
struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

/// Runs `rota <args>` with `env` (and nothing inherited that would point it elsewhere).
async fn rota_with(env: &[(&str, &str)], args: &[&str]) -> Out {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_rota"));
    cmd.args(args)
        .env_remove("ROTA_SERVER")
        .env_remove("ROTA_API_TOKEN")
        .envs(env.iter().copied());
    let out = tokio::task::spawn_blocking(move || cmd.output().expect("running rota"))
        .await
        .unwrap();
    let out = Out {
        code: out.status.code().expect("rota exited, not killed"),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    };
    assert!(!out.stderr.contains("panicked"), "rota panicked: {out:?}");
    out
}

/// Runs `rota <args>` against `server`, configured through the environment.
async fn rota(server: &TestServer, args: &[&str]) -> Out {
    rota_with(
        &[("ROTA_SERVER", &server.url), ("ROTA_API_TOKEN", TOKEN)],
        args,
    )
    .await
}

/// Like [`rota`], but the command must succeed.
async fn rota_ok(server: &TestServer, args: &[&str]) -> String {
    let out = rota(server, args).await;
    assert_eq!(out.code, 0, "rota {args:?}: {out:?}");
    out.stdout
}

async fn job(api: &Api, name: &str) {
    api.upload_plugin("noop").await;
    api.ok(
        "POST",
        "/api/v1/jobs",
        Some(
            json!({"name": name, "app": "default", "plugin": "noop", "schedule": {"kind": "none"}}),
        ),
    )
    .await;
}

/// A pull job `name` of app `default`, one attempt per task.
async fn pull_job(api: &Api, name: &str) {
    api.ok(
        "POST",
        "/api/v1/jobs",
        Some(
            json!({"name": name, "app": "default", "schedule": {"kind": "none"},
                    "delivery": {"kind": "pull"}, "max_attempts": 1}),
        ),
    )
    .await;
}

/// `rota <args>` against `server`, run in the background (a command that waits).
fn rota_meanwhile(server: &TestServer, args: &[&str]) -> tokio::task::JoinHandle<Out> {
    let url = server.url.clone();
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    tokio::spawn(async move {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        rota_with(&[("ROTA_SERVER", &url), ("ROTA_API_TOKEN", TOKEN)], &args).await
    })
}

/// The id in a first line such as `created task 17`.
fn id_after(stdout: &str, prefix: &str) -> i64 {
    let first = stdout.lines().next().unwrap_or_default();
    first
        .strip_prefix(prefix)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|id| id.parse().ok())
        .unwrap_or_else(|| panic!("expected `{prefix}<id>` first, got:\n{stdout}"))
}

fn millis(rfc3339: &Value) -> i64 {
    chrono::DateTime::parse_from_rfc3339(rfc3339.as_str().unwrap())
        .unwrap()
        .timestamp_millis()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_are_added_read_listed_and_cancelled() {
    let (db, _dir) = sqlite_url();
    let server = TestServer::start(&db, |_| {}).await;
    let api = &server.api;
    job(api, "close-order").await;

    // Created: said in words, then the task.
    let before = now_ms();
    let out = rota_ok(
        &server,
        &[
            "task",
            "add",
            "--job",
            "close-order",
            "--delay",
            "30m",
            "--payload",
            "order 42",
            "--key",
            "order-42",
            "--max-attempts",
            "3",
            "--backoff",
            "exp:1s,2,1m,jitter",
            "--priority",
            "-5",
        ],
    )
    .await;
    let first = id_after(&out, "created task ");
    assert!(out.contains("status       pending"), "{out}");
    assert!(out.contains("due_at       "), "{out}");
    let task = api.ok("GET", &format!("/api/v1/tasks/{first}"), None).await;
    let due = millis(&task["due_at"]);
    assert!(
        (before + 1_800_000..=now_ms() + 1_800_000).contains(&due),
        "due {due}, added at {before}"
    );
    assert_eq!(task["payload"], "order 42");
    assert_eq!(task["key"], "order-42");
    assert_eq!(task["max_attempts"], 3);
    assert_eq!(task["priority"], -5);

    // The same key again: the existing task (200), said so.
    let out = rota_ok(
        &server,
        &[
            "task",
            "add",
            "--job",
            "close-order",
            "--key",
            "order-42",
            "--delay",
            "1h",
        ],
    )
    .await;
    assert_eq!(
        out.lines().next(),
        Some(format!("task {first} already exists for key order-42").as_str()),
        "{out}"
    );

    // --at, --payload-file and --json (raw JSON on stdout).
    let payload = _dir.path().join("payload.txt");
    std::fs::write(&payload, "line 1\nline 2\n").unwrap();
    let at = chrono::Utc::now() + chrono::Duration::days(1);
    let at = at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let out = rota_ok(
        &server,
        &[
            "task",
            "add",
            "--job",
            "close-order",
            "--at",
            &at,
            "--payload-file",
            payload.to_str().unwrap(),
            "--key",
            "order-43",
            "--json",
        ],
    )
    .await;
    let created: Value = serde_json::from_str(&out).expect("--json prints JSON");
    let second = created["id"].as_i64().unwrap();
    assert_eq!(created["status"], "pending");
    assert_eq!(created["due_at"], at.as_str());

    // get: human and JSON.
    let out = rota_ok(&server, &["task", "get", &second.to_string()]).await;
    assert!(out.contains(&format!("id           {second}")), "{out}");
    assert!(out.contains(r#"payload      "line 1\nline 2\n""#), "{out}");
    let out = rota_ok(&server, &["task", "--json", "get", &first.to_string()]).await;
    let got: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(got["id"], first);
    assert_eq!(got["payload"], "order 42");

    // list: a table, newest first, a page at a time with a cursor.
    let out = rota_ok(
        &server,
        &["task", "list", "--job", "close-order", "--limit", "1"],
    )
    .await;
    let mut lines = out.lines();
    let header = lines.next().unwrap();
    assert!(
        header.starts_with("ID") && header.contains("STATUS"),
        "{out}"
    );
    assert!(
        lines.next().unwrap().starts_with(&second.to_string()),
        "{out}"
    );
    let next = out
        .lines()
        .find_map(|l| l.strip_prefix("next: "))
        .and_then(|l| l.split_whitespace().next())
        .unwrap_or_else(|| panic!("no next cursor in:\n{out}"));
    let out = rota_ok(
        &server,
        &["task", "list", "--job", "close-order", "--after", next],
    )
    .await;
    assert!(
        out.lines().nth(1).unwrap().starts_with(&first.to_string()),
        "{out}"
    );
    let out = rota_ok(&server, &["task", "list", "--status", "cancelled"]).await;
    assert_eq!(out.trim(), "no tasks");

    // cancel by id, again (idempotent), and by job and key.
    let out = rota_ok(&server, &["task", "cancel", &first.to_string()]).await;
    assert_eq!(
        out.lines().next(),
        Some(format!("cancelled task {first}").as_str())
    );
    assert!(out.contains("status       cancelled"), "{out}");
    rota_ok(&server, &["task", "cancel", &first.to_string()]).await;
    let out = rota_ok(
        &server,
        &[
            "task",
            "cancel",
            "--job",
            "close-order",
            "--key",
            "order-43",
        ],
    )
    .await;
    assert_eq!(id_after(&out, "cancelled task "), second);
    let out = rota_ok(
        &server,
        &["task", "list", "--status", "cancelled", "--json"],
    )
    .await;
    let page: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(page["items"].as_array().unwrap().len(), 2, "{page}");
    assert_eq!(page["next"], Value::Null);

    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_errors_print_the_status_and_the_servers_message() {
    let (db, _dir) = sqlite_url();
    let server = TestServer::start(&db, |_| {}).await;
    let api = &server.api;
    job(api, "slow").await;
    let _executor = ExecutorDouble::start(&server.url, "default", Behaviour::Hang).await;

    // A running task cannot be cancelled: 409.
    let out = rota_ok(&server, &["task", "add", "--job", "slow"]).await;
    let id = id_after(&out, "created task ");
    eventually(
        Duration::from_secs(15),
        "the task to be running",
        || async move {
            let task = api.ok("GET", &format!("/api/v1/tasks/{id}"), None).await;
            (task["status"] == "running").then_some(())
        },
    )
    .await;
    let out = rota(&server, &["task", "cancel", &id.to_string()]).await;
    assert_eq!(out.code, 1, "{out:?}");
    assert_eq!(
        out.stderr.trim(),
        format!("error: 409 Conflict: task {id} is running; only a pending task can be cancelled")
    );
    assert!(out.stdout.is_empty(), "{out:?}");

    // Missing: 404. Invalid: 422 naming the field. Both exit 1, --json or not.
    let out = rota(&server, &["task", "get", "987654"]).await;
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.starts_with("error: 404 Not Found: "), "{out:?}");
    let out = rota(
        &server,
        &[
            "task",
            "add",
            "--job",
            "slow",
            "--max-attempts",
            "0",
            "--json",
        ],
    )
    .await;
    assert_eq!(out.code, 1, "{out:?}");
    assert!(
        out.stderr
            .starts_with("error: 422 Unprocessable Entity: max_attempts"),
        "{out:?}"
    );
    let out = rota(&server, &["task", "add", "--job", "no-such-job"]).await;
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.contains("no-such-job"), "{out:?}");

    // A wrong token (the flag wins over the environment): 401.
    let out = rota(&server, &["task", "list", "--token", "wrong"]).await;
    assert_eq!(out.code, 1, "{out:?}");
    assert!(
        out.stderr.starts_with("error: 401 Unauthorized: "),
        "{out:?}"
    );

    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_is_an_error_not_a_panic() {
    // A port nobody listens on any more.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let out = rota_with(&[], &["task", "get", "1", "--server", &url]).await;
    assert_eq!(out.code, 1, "{out:?}");
    assert!(
        out.stderr
            .starts_with(&format!("error: could not reach the scheduler at {url}/")),
        "{out:?}"
    );
}

#[tokio::test]
async fn bad_flags_are_cli_errors_naming_the_flag() {
    let at = "2030-01-01T00:00:00Z";
    for (args, flag, words) in [
        (
            &["task", "add", "--job", "j", "--delay", "30x"][..],
            "--delay",
            "unknown unit `x`",
        ),
        (
            &["task", "add", "--job", "j", "--delay", "soon"],
            "--delay",
            "not a duration",
        ),
        (
            &["task", "add", "--job", "j", "--delay", "30"],
            "--delay",
            "needs a unit",
        ),
        (
            &["task", "add", "--job", "j", "--at", "tomorrow"],
            "--at",
            "RFC 3339",
        ),
        (
            &["task", "add", "--job", "j", "--backoff", "exp:1m"],
            "--backoff",
            "a factor",
        ),
        (
            &["task", "add", "--job", "j", "--max-attempts", "many"],
            "--max-attempts",
            "many",
        ),
        (&["task", "add", "--delay", "1s"], "--job", "required"),
        (
            &["task", "add", "--job", "j", "--delay", "1s", "--at", at],
            "--at",
            "cannot be used",
        ),
        (
            &[
                "task",
                "add",
                "--job",
                "j",
                "--payload",
                "p",
                "--payload-file",
                "f",
            ],
            "--payload",
            "cannot be used",
        ),
        (
            &["task", "list", "--status", "sleeping"],
            "--status",
            "sleeping",
        ),
        (
            &["standalone", "--log-max-mib", "3"],
            "--log-max-mib",
            "3 is not in 16..",
        ),
        (
            &["standalone", "--log-retention-days", "0"],
            "--log-retention-days",
            "0 is not in 1..",
        ),
        (&["task", "cancel"], "--key", "required"),
        (&["task", "cancel", "--key", "k"], "--job", "required"),
        (
            &["task", "cancel", "7", "--job", "j", "--key", "k"],
            "[ID]",
            "cannot be used",
        ),
        (
            &["task", "get", "1", "--server", "localhost:8080"],
            "--server",
            "not an http:// or https:// URL",
        ),
    ] {
        let out = rota_with(&[], args).await;
        assert_eq!(out.code, 2, "{args:?}: {out:?}");
        assert!(
            out.stderr.contains(flag) && out.stderr.contains(words),
            "{args:?} should name {flag} and say {words:?}: {}",
            out.stderr
        );
    }

    // A payload file that is not there: named, exit 1, nothing sent.
    let out = rota_with(
        &[("ROTA_SERVER", "http://127.0.0.1:9")],
        &[
            "task",
            "add",
            "--job",
            "j",
            "--payload-file",
            "/no/such/payload",
        ],
    )
    .await;
    assert_eq!(out.code, 1, "{out:?}");
    assert!(
        out.stderr
            .starts_with("error: --payload-file: reading /no/such/payload"),
        "{out:?}"
    );
}

/// `rota plugin run` gives a local run the `rota` imports: `--allow` for the allow-list,
/// `--secret` for secrets, and a key-value state in memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugin_run_provides_the_host_imports() {
    let service = OrderService::start(&[]).await;
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str, wat: String| {
        let path = dir.path().join(name);
        std::fs::write(&path, wat).unwrap();
        path.display().to_string()
    };
    let url = format!("{}/orders/42", service.url);
    let http = file("http.wat", fixtures::http_plugin("GET", &url, ""));
    // The service listens on loopback, which the egress policy denies unless opened.
    let exception = service.url.trim_start_matches("http://");
    let refused = rota_with(&[], &["plugin", "run", &http, "--allow", &service.url]).await;
    assert!(
        refused.stdout.contains(&format!(
            "[rota] http GET {url} refused: the egress policy refuses {exception}: loopback"
        )),
        "{refused:?}"
    );
    let allowed = rota_with(
        &[],
        &[
            "plugin",
            "run",
            &http,
            "--allow",
            &service.url,
            "--egress-allow",
            exception,
        ],
    )
    .await;
    assert_eq!(allowed.code, 0, "{allowed:?}");
    assert!(allowed.stdout.contains("\n200\n"), "{allowed:?}");
    assert!(
        allowed
            .stdout
            .contains(&format!("[rota] http GET {url} -> 200")),
        "{allowed:?}"
    );
    let denied = rota_with(&[], &["plugin", "run", &http]).await;
    assert!(
        denied
            .stdout
            .contains("denied: not on the job's allow-list"),
        "{denied:?}"
    );
    assert!(denied.stdout.contains("\n-1\n"), "{denied:?}");

    let secret = file("secret.wat", fixtures::secret_plugin("TOKEN", true));
    let out = rota_with(&[], &["plugin", "run", &secret, "--secret", "TOKEN=abc"]).await;
    assert_eq!(out.stdout, "3\nabc\n", "{out:?}");
    let bad = rota_with(&[], &["plugin", "run", &secret, "--secret", "no-equals"]).await;
    assert_eq!(bad.code, 2, "{bad:?}");
    assert!(
        bad.stderr.contains("`no-equals` is not NAME=VALUE"),
        "{bad:?}"
    );
    let bad = rota_with(&[], &["plugin", "run", &http, "--allow", "ftp://x"]).await;
    assert_ne!(bad.code, 0);
    assert!(
        bad.stderr.contains("--allow: entry 0 (`ftp://x`)"),
        "{bad:?}"
    );

    let kv = file("kv.wat", fixtures::kv_plugin());
    let out = rota_with(&[], &["plugin", "run", &kv, "--payload", "v"]).await;
    assert_eq!(
        out.stdout, "-2\n0\n",
        "a fresh state for each local run: {out:?}"
    );
}

/// An executor never runs without a secret, nor with a short one, wherever it listens; a
/// TLS certificate without its key is named; `rota app-key` prints the key the scheduler
/// derives for the app.
#[tokio::test]
async fn executors_need_their_apps_key_and_app_key_prints_it() {
    let base = [
        "executor",
        "--scheduler",
        "http://127.0.0.1:9",
        "--app",
        "shop",
    ];
    for (listen, env, words) in [
        ("0.0.0.0:0", vec![], "--executor-secret"),
        ("127.0.0.1:0", vec![], "--executor-secret"),
        (
            "0.0.0.0:0",
            vec![("ROTA_EXECUTOR_SECRET", "short")],
            "at least 16",
        ),
    ] {
        let mut args = base.to_vec();
        args.extend(["--listen", listen]);
        let out = rota_with(&env, &args).await;
        assert_ne!(out.code, 0, "{listen} {env:?}: {out:?}");
        assert!(out.stderr.contains(words), "{listen}: {}", out.stderr);
    }
    let key = "k".repeat(64);
    let mut args = base.to_vec();
    args.extend([
        "--listen",
        "127.0.0.1:0",
        "--tls-cert",
        "/nonexistent/cert.pem",
    ]);
    let out = rota_with(&[("ROTA_EXECUTOR_SECRET", key.as_str())], &args).await;
    assert_ne!(out.code, 0);
    assert!(out.stderr.contains("--tls-key"), "{}", out.stderr);

    let master = std::str::from_utf8(SECRET).unwrap();
    let out = rota_with(
        &[("ROTA_EXECUTOR_SECRET", master)],
        &["app-key", "--app", "shop"],
    )
    .await;
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.stdout.trim(), app_key_text("shop"));
    let out = rota_with(
        &[("ROTA_EXECUTOR_SECRET", master)],
        &["app-key", "--app", "../x"],
    )
    .await;
    assert_ne!(out.code, 0);
    assert!(out.stderr.contains("--app"), "{}", out.stderr);
}

/// The line `name  value` of a pulled task or a task, its value.
fn field<'a>(stdout: &'a str, name: &str) -> &'a str {
    stdout
        .lines()
        .find_map(|l| {
            l.strip_prefix(name)
                .filter(|rest| rest.starts_with(' '))
                .map(str::trim)
        })
        .unwrap_or_else(|| panic!("no `{name}` in:\n{stdout}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_job_is_consumed_and_its_dead_task_re_driven_from_the_command_line() {
    let (db, _dir) = sqlite_url();
    let server = TestServer::start(&db, |_| {}).await;
    let api = &server.api;
    pull_job(api, "orders").await;
    let out = rota_ok(&server, &["queue", "pull", "orders"]).await;
    assert!(out.contains("no task is due"), "{out}");

    rota_ok(
        &server,
        &["task", "add", "--job", "orders", "--payload", "order 42"],
    )
    .await;
    let out = rota_ok(
        &server,
        &[
            "queue",
            "pull",
            "orders",
            "--wait",
            "10s",
            "--consumer",
            "shell",
        ],
    )
    .await;
    let task = field(&out, "task").to_owned();
    let lease = field(&out, "lease").to_owned();
    assert_eq!(field(&out, "payload"), "\"order 42\"");
    assert_eq!(field(&out, "attempt"), "1");

    let out = rota_ok(&server, &["queue", "extend", &task, &lease, "--for", "2m"]).await;
    assert!(out.contains("the lease now ends at"), "{out}");
    let out = rota_ok(
        &server,
        &[
            "queue",
            "nack",
            &task,
            &lease,
            "--error",
            "warehouse closed",
        ],
    )
    .await;
    assert!(out.starts_with(&format!("nacked task {task}")), "{out}");
    assert_eq!(field(&out, "status"), "dead", "one attempt only");

    // A stale lease is refused with the server's words.
    let out = rota(&server, &["queue", "ack", &task, &lease]).await;
    assert_eq!(out.code, 1, "{out:?}");
    assert!(
        out.stderr.contains("409") && out.stderr.contains("no longer held"),
        "{out:?}"
    );

    let out = rota_ok(&server, &["task", "retry", &task]).await;
    assert!(out.contains("is due again"), "{out}");
    let out = rota_ok(&server, &["queue", "pull", "orders", "--wait", "10s"]).await;
    assert_eq!(field(&out, "attempt"), "2");
    let lease = field(&out, "lease").to_owned();
    let out = rota_ok(&server, &["queue", "ack", &task, &lease]).await;
    assert_eq!(field(&out, "status"), "succeeded");

    let out = rota_ok(&server, &["task", "retry", "--job", "orders", "--dead"]).await;
    assert!(out.contains("0 dead task(s)"), "nothing left dead: {out}");
    let out = rota(&server, &["task", "retry", &task]).await;
    assert_eq!(out.code, 1);
    assert!(out.stderr.contains("only a dead task"), "{out:?}");
}

/// `rota workflow apply` creates a workflow from a file and applies it again as a new
/// version only when its steps change; `start --wait` prints the output once a consumer
/// (`rota queue ack --output`) ends the step, and exits 1 for a failed instance; `show`
/// prints each step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workflow_is_applied_from_a_file_started_waited_for_and_shown() {
    let (db, dir) = sqlite_url();
    let server = TestServer::start(&db, |_| {}).await;
    let api = &server.api;
    pull_job(api, "pack").await;
    let file = dir.path().join("order.json");
    let def = |after: &[&str]| {
        json!({"name": "order", "app": "default", "steps": [
            {"name": "pack", "job": "pack", "after": after},
        ]})
        .to_string()
    };
    std::fs::write(&file, def(&[])).unwrap();
    let path = file.to_str().unwrap();
    let out = rota_ok(&server, &["workflow", "apply", "-f", path]).await;
    assert_eq!(out.trim(), "workflow `order` created (version 1)");
    let out = rota_ok(&server, &["workflow", "apply", "-f", path]).await;
    assert_eq!(
        out.trim(),
        "workflow `order` applied (version 1: steps unchanged)"
    );
    std::fs::write(&file, "{\"name\": ").unwrap();
    let out = rota(&server, &["workflow", "apply", "-f", path]).await;
    assert_eq!(out.code, 1);
    assert!(out.stderr.contains("is not JSON"), "{out:?}");
    std::fs::write(&file, def(&["ghost"])).unwrap();
    let out = rota(&server, &["workflow", "apply", "-f", path]).await;
    assert_eq!(out.code, 1);
    assert!(
        out.stderr.contains("422") && out.stderr.contains("ghost"),
        "{out:?}"
    );

    // A consumer acks the step with an output while `start --wait` waits.
    let waiting = rota_meanwhile(
        &server,
        &[
            "workflow",
            "start",
            "order",
            "--input",
            r#"{"order": 42}"#,
            "--wait",
        ],
    );
    let out = rota_ok(&server, &["queue", "pull", "pack", "--wait", "10s"]).await;
    let task = field(&out, "task").to_owned();
    let lease = field(&out, "lease").to_owned();
    let out = rota(
        &server,
        &["queue", "ack", &task, &lease, "--output", "{nope"],
    )
    .await;
    assert_eq!(out.code, 2, "a flag error: {out:?}");
    assert!(out.stderr.contains("--output"), "{out:?}");
    rota_ok(
        &server,
        &["queue", "ack", &task, &lease, "--output", r#"{"boxes": 2}"#],
    )
    .await;
    let waited = waiting.await.unwrap();
    assert_eq!(waited.code, 0, "{waited:?}");
    let first: i64 = waited
        .stdout
        .strip_prefix("instance ")
        .and_then(|rest| rest.split(':').next())
        .and_then(|id| id.parse().ok())
        .unwrap_or_else(|| panic!("`instance <id>: …` first: {waited:?}"));
    assert!(waited.stdout.contains(": succeeded"), "{waited:?}");
    assert!(waited.stdout.contains("\"boxes\": 2"), "{waited:?}");

    let out = rota_ok(&server, &["workflow", "show", &first.to_string()]).await;
    assert_eq!(field(&out, "status"), "succeeded");
    assert!(
        out.lines()
            .any(|l| l.starts_with("pack") && l.contains("succeeded")),
        "{out}"
    );

    // A failed instance: `start --wait` says so and exits 1.
    let waiting = rota_meanwhile(
        &server,
        &["workflow", "start", "order", "--wait", "--timeout", "30s"],
    );
    let out = rota_ok(&server, &["queue", "pull", "pack", "--wait", "10s"]).await;
    let task = field(&out, "task").to_owned();
    let lease = field(&out, "lease").to_owned();
    rota_ok(&server, &["queue", "nack", &task, &lease]).await;
    let waited = waiting.await.unwrap();
    assert_eq!(waited.code, 1, "{waited:?}");
    assert!(waited.stdout.contains(": failed"), "{waited:?}");
    let out = rota(&server, &["workflow", "start", "nope"]).await;
    assert_eq!(out.code, 1);
    assert!(out.stderr.contains("404"), "{out:?}");
}

/// `rota job backfill` (SPEC §11): a disabled job's missed fire times created once, a
/// second run creating nothing, and a refused range in the server's words.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_is_backfilled_from_the_command_line_once() {
    let (db, _dir) = sqlite_url();
    let server = TestServer::start(&db, |_| {}).await;
    let api = &server.api;
    api.upload_plugin("noop").await;
    api.ok(
        "POST",
        "/api/v1/jobs",
        Some(
            json!({"name": "hourly", "app": "default", "plugin": "noop", "enabled": false,
                    "schedule": {"kind": "cron", "expr": "0 0 * * * ?", "time_zone": "UTC"}}),
        ),
    )
    .await;
    let args = [
        "job",
        "backfill",
        "hourly",
        "--from",
        "2026-12-01T00:00:00Z",
        "--to",
        "2026-12-01T06:00:00Z",
    ];
    let out = rota_ok(&server, &args).await;
    assert_eq!(
        out.trim(),
        "job hourly: 6 fire time(s) in [2026-12-01T00:00:00.000Z, 2026-12-01T06:00:00.000Z); \
         6 created, 0 already there"
    );
    let out = rota_ok(&server, &args).await;
    assert!(out.contains("0 created, 6 already there"), "{out}");
    let mut over = args.to_vec();
    over.extend(["--max", "3"]);
    let out = rota(&server, &over).await;
    assert_eq!(out.code, 1, "{out:?}");
    assert!(
        out.stderr
            .contains("422 Unprocessable Entity: to: the range holds more than 3 fire times"),
        "{out:?}"
    );
    let out = rota(
        &server,
        &["job", "backfill", "hourly", "--from", "today", "--to", "x"],
    )
    .await;
    assert_eq!(out.code, 2, "a bad flag is clap's usage error: {out:?}");
    assert!(out.stderr.contains("--from"), "{out:?}");
    server.stop().await;
}
