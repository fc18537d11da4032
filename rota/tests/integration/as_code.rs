//! Jobs as code (SPEC §12) through the binary: `rota export` of a node with jobs of every
//! kind, child jobs, a workflow, alarm channels and rules, a plugin and a secret; `rota
//! apply` of that document to an empty node (SQLite, and MariaDB) uploads the plugin from
//! its path and makes everything, after which export gives the same bytes; a second apply
//! changes nothing; `--dry-run` changes nothing; a document with a mistake changes nothing
//! and names it (a webhook channel's URL, which no export carries, included); `--prune`
//! deletes what the document lacks, and refuses to delete a busy job or a channel in use.

use crate::support;

use serde_json::{Value, json};
use support::*;

/// Does nothing and succeeds.
const NOOP: &str = r#"(module (memory (export "memory") 1) (func (export "_start")))"#;

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

async fn rota(server: &str, args: &[&str]) -> Out {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_rota"));
    cmd.args(args)
        .env("ROTA_SERVER", server)
        .env("ROTA_API_TOKEN", TOKEN);
    let out = tokio::task::spawn_blocking(move || cmd.output().expect("running rota"))
        .await
        .unwrap();
    let out = Out {
        code: out.status.code().expect("rota exited"),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    };
    assert!(!out.stderr.contains("panicked"), "{}", out.stderr);
    out
}

/// The secret a document names but does not carry.
async fn prepare(api: &Api) {
    api.ok(
        "PUT",
        "/api/v1/apps/billing/secrets/partner-token",
        Some(json!({"value": "s3cret"})),
    )
    .await;
}

/// Where the webhook channel `pager` POSTs: a credential, which no export carries.
const PAGER_URL: &str = "http://127.0.0.1:9/pager?token=hook-s3cret";

/// A node holding one of everything a document carries.
async fn furnish(api: &Api, module: &[u8]) {
    prepare(api).await;
    for channel in [
        json!({"name": "ops", "kind": "email", "to": ["ops@example.com"], "app": "billing"}),
        json!({"name": "pager", "kind": "webhook", "url": PAGER_URL, "app": "billing",
               "secret": "partner-token"}),
    ] {
        api.ok("POST", "/api/v1/alarm-channels", Some(channel))
            .await;
    }
    api.upload("reporter", module.to_vec()).await;
    let job = |body: Value| async move { api.ok("POST", "/api/v1/jobs", Some(body)).await };
    job(
        json!({"name": "notify", "app": "billing", "plugin": "reporter",
        "schedule": {"kind": "none"}, "params": "--quiet"}),
    )
    .await;
    job(
        json!({"name": "report", "app": "billing", "plugin": "reporter",
        "schedule": {"kind": "cron", "expr": "0 0 6 * * *", "time_zone": "Europe/Berlin"},
        "route": "round_robin", "max_attempts": 3, "timeout_ms": 60000,
        "concurrency": {"key": "/customer", "limit": 2}, "child_jobs": ["notify"]}),
    )
    .await;
    job(
        json!({"name": "close-order", "app": "billing", "schedule": {"kind": "none"},
        "delivery": {"kind": "pull"}, "debounce_ms": 5000,
        "rate_limit": {"limit": 100, "per_ms": 60000}}),
    )
    .await;
    job(
        json!({"name": "nightly", "app": "billing", "plugin": "reporter",
        "schedule": {"kind": "fixed_delay", "every_ms": 60000}, "enabled": false}),
    )
    .await;
    api.ok(
        "POST",
        "/api/v1/workflows",
        Some(
            json!({"name": "month-end", "app": "billing", "overlap": "queue",
            "schedule": {"kind": "cron", "expr": "0 0 1 1 * *"},
            "steps": [
                {"name": "report", "job": "report"},
                {"name": "tell", "job": "notify", "after": ["report"], "when": "all_done"},
            ]}),
        ),
    )
    .await;
    api.ok(
        "POST",
        "/api/v1/alarm-rules",
        Some(
            json!({"name": "report-failed", "app": "billing", "job": "report",
            "on": "run_failed", "channels": ["ops", "pager"], "throttle_ms": 1000}),
        ),
    )
    .await;
}

async fn job_names(api: &Api) -> Vec<String> {
    let page = api.ok("GET", "/api/v1/jobs?limit=100", None).await;
    let mut names: Vec<String> = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["name"].as_str().unwrap().to_owned())
        .collect();
    names.sort();
    names
}

async fn round_trip(target_db: &str) {
    let dir = tempfile::tempdir().unwrap();
    let module = wat::parse_str(NOOP).unwrap();
    std::fs::write(dir.path().join("reporter.wasm"), &module).unwrap();
    let (source_db, _keep) = sqlite_url();
    let source = TestServer::start(&source_db, |_| {}).await;
    furnish(&source.api, &module).await;

    let exported = rota(&source.url, &["export"]).await;
    assert_eq!(exported.code, 0, "{}", exported.stderr);
    let text = exported.stdout;
    for expected in [
        "version: 1",
        "name: reporter",
        "sha256:",
        "app: billing",
        "name: partner-token",
        "route: round_robin",
        "child_jobs:\n  - notify",
        "key: /customer",
        "kind: pull",
        "time_zone: Europe/Berlin",
        "enabled: false",
        "overlap: queue",
        "when: all_done",
        "name: report-failed",
        "throttle_ms: 1000",
        "alarm_channels:",
        "kind: webhook",
        "- ops@example.com",
        "secret: partner-token",
    ] {
        assert!(text.contains(expected), "no `{expected}` in:\n{text}");
    }
    assert!(
        !text.contains("s3cret"),
        "a secret's value or a URL left the node"
    );
    // The module travels beside the document.
    let sha = text
        .split("sha256: ")
        .nth(1)
        .unwrap()
        .lines()
        .next()
        .unwrap();
    let doc = text.replace(
        &format!("sha256: {sha}\n"),
        &format!("sha256: {sha}\n  path: reporter.wasm\n"),
    );
    let target = TestServer::start(target_db, |_| {}).await;
    prepare(&target.api).await;
    // The webhook channel is new there: without its URL the document is refused, naming it.
    let no_url = dir.path().join("no-url.yaml");
    std::fs::write(&no_url, &doc).unwrap();
    let refused = rota(&target.url, &["apply", "-f", no_url.to_str().unwrap()]).await;
    assert_eq!(refused.code, 1);
    assert!(
        refused.stderr.contains("alarm_channels[1] `pager`: url:"),
        "{}",
        refused.stderr
    );
    let doc = doc.replace(
        "  kind: webhook\n",
        &format!("  kind: webhook\n  url: {PAGER_URL}\n"),
    );
    let file = dir.path().join("billing.yaml");
    std::fs::write(&file, &doc).unwrap();
    let file = file.to_str().unwrap();
    let plan = rota(&target.url, &["apply", "-f", file, "--dry-run"]).await;
    assert_eq!(plan.code, 0, "{}", plan.stderr);
    for line in [
        "^ upload plugin reporter",
        "+ create job report",
        "+ create workflow month-end",
        "+ create alarm_channel ops",
        "+ create alarm_channel pager",
        "+ create alarm_rule report-failed",
        "would change 9",
    ] {
        assert!(
            plan.stdout.contains(line),
            "no `{line}` in:\n{}",
            plan.stdout
        );
    }
    assert!(
        job_names(&target.api).await.is_empty(),
        "a dry run made jobs"
    );
    let plugins = target.api.ok("GET", "/api/v1/plugins", None).await;
    assert_eq!(
        plugins["items"].as_array().unwrap().len(),
        0,
        "a dry run uploaded"
    );

    let applied = rota(&target.url, &["apply", "-f", file]).await;
    assert_eq!(applied.code, 0, "{}", applied.stderr);
    assert!(applied.stdout.contains("changed 8"), "{}", applied.stdout);
    let again = rota(&target.url, &["export"]).await;
    assert_eq!(
        again.stdout, text,
        "export → apply → export is not the same document"
    );
    let second = rota(&target.url, &["apply", "-f", file]).await;
    assert_eq!(second.code, 0, "{}", second.stderr);
    assert!(
        second.stdout.contains("changed 0, 9 unchanged"),
        "{}",
        second.stdout
    );

    // One bad entry among good ones: nothing changes, and it is named.
    let bad = doc.replace("0 0 6 * * *", "0 0 61 * * *");
    let bad = bad.replacen("jobs:\n", "jobs:\n- name: extra\n  app: billing\n  schedule:\n    kind: none\n  delivery:\n    kind: pull\n", 1);
    let bad_file = dir.path().join("bad.yaml");
    std::fs::write(&bad_file, bad).unwrap();
    let refused = rota(&target.url, &["apply", "-f", bad_file.to_str().unwrap()]).await;
    assert_eq!(refused.code, 1);
    assert!(
        refused.stderr.contains("422") && refused.stderr.contains("`report`: schedule"),
        "{}",
        refused.stderr
    );
    assert!(!job_names(&target.api).await.contains(&"extra".to_owned()));

    // --prune: what the document lacks goes, and only that.
    let fewer = doc.replace("- name: close-order\n", "- name: close-order-gone\n");
    let fewer = drop_job(&fewer, "close-order-gone");
    let fewer_file = dir.path().join("fewer.yaml");
    std::fs::write(&fewer_file, &fewer).unwrap();
    let kept = rota(&target.url, &["apply", "-f", fewer_file.to_str().unwrap()]).await;
    assert_eq!(kept.code, 0, "{}", kept.stderr);
    assert!(
        job_names(&target.api)
            .await
            .contains(&"close-order".to_owned()),
        "deleted without --prune"
    );
    // A job with a task on its way is not deleted, and then nothing is.
    target
        .api
        .ok(
            "POST",
            "/api/v1/tasks",
            Some(json!({"job": "close-order", "delay_ms": 3_600_000})),
        )
        .await;
    let busy = rota(
        &target.url,
        &["apply", "-f", fewer_file.to_str().unwrap(), "--prune"],
    )
    .await;
    assert_eq!(busy.code, 1);
    assert!(
        busy.stderr.contains("409") && busy.stderr.contains("close-order"),
        "{}",
        busy.stderr
    );
    assert_eq!(job_names(&target.api).await.len(), 4);
    let task = target
        .api
        .ok("GET", "/api/v1/tasks?job=close-order", None)
        .await;
    let id = task["items"][0]["id"].as_i64().unwrap();
    target
        .api
        .ok("DELETE", &format!("/api/v1/tasks/{id}"), None)
        .await;
    let pruned = rota(
        &target.url,
        &["apply", "-f", fewer_file.to_str().unwrap(), "--prune"],
    )
    .await;
    assert_eq!(pruned.code, 0, "{}", pruned.stderr);
    assert!(
        pruned.stdout.contains("- delete job close-order"),
        "{}",
        pruned.stdout
    );
    assert_eq!(
        job_names(&target.api).await,
        ["nightly", "notify", "report"]
    );

    // A threshold the document no longer gives is cleared (PATCH would keep it).
    target
        .api
        .ok(
            "POST",
            "/api/v1/alarm-rules",
            Some(
                json!({"name": "slow-start", "app": "billing", "on": "no_executor",
                        "threshold": 30000, "channels": ["ops"]}),
            ),
        )
        .await;
    let cleared = dir.path().join("cleared.yaml");
    std::fs::write(
        &cleared,
        "version: 1\nalarm_rules:\n- name: slow-start\n  app: billing\n  on: no_executor\n  channels:\n  - ops\n",
    )
    .unwrap();
    let applied = rota(&target.url, &["apply", "-f", cleared.to_str().unwrap()]).await;
    assert_eq!(applied.code, 0, "{}", applied.stderr);
    assert!(
        applied
            .stdout
            .contains("~ update alarm_rule slow-start (threshold)"),
        "{}",
        applied.stdout
    );
    let rule = target
        .api
        .ok("GET", "/api/v1/alarm-rules/slow-start", None)
        .await;
    assert_eq!(rule["threshold"], Value::Null, "{rule}");
    source.stop().await;
    target.stop().await;
}

/// The document without the job entry named `name` (its lines up to the next entry).
fn drop_job(doc: &str, name: &str) -> String {
    let start = doc.find(&format!("- name: {name}\n")).expect("the entry");
    let rest = &doc[start + 2..];
    let end = rest
        .find("\n- ")
        .map(|i| start + 2 + i + 1)
        .unwrap_or(doc.len());
    let end = end.min(
        doc[start..]
            .find("\nworkflows:")
            .map_or(doc.len(), |i| start + i + 1),
    );
    format!("{}{}", &doc[..start], &doc[end..])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_apply_export_is_the_same_document_on_sqlite() {
    let (db, _keep) = sqlite_url();
    round_trip(&db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_apply_export_is_the_same_document_on_mariadb() {
    let Some(db) = rota_testkit::MysqlDb::create("rota_ac").await else {
        return;
    };
    round_trip(&db.url).await;
    db.drop_db().await;
}
