//! The example plugins of `plugins/` end to end, in `rota standalone`: `close-order` in
//! Rust (a preview 1 module), Python and JavaScript (components of the
//! `rota:plugin/handler` world) driven by delayed tasks against an order service in the
//! test; the command components made from `hello` and `echo`. The examples need the
//! toolchains of `plugins/install-toolchains.sh` (`plugins/build.sh`); CI builds them and
//! sets `ROTA_EXAMPLE_PLUGINS=plugins/target`. Without it, outside CI, a test says so and
//! checks nothing (under `CI` it fails).

use crate::support;

use std::path::PathBuf;
use std::time::Duration;

/// How long a plugin's first run may take: it compiles the plugin on the executor, which
/// for a Python or JavaScript component (13–20 MB) in a debug build on a busy test machine
/// takes minutes.
const FIRST_RUN: Duration = Duration::from_secs(300);

use serde_json::json;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_order_decides_per_order_from_a_delayed_task() {
    let Some(module) = example("close-order.wasm") else {
        return;
    };

    let data = tempfile::tempdir().unwrap();
    let node = Standalone::start(data.path());
    let api = node.api.clone();
    wait_ready(&api).await;

    api.upload("close-order", module).await;
    api.ok(
        "POST",
        "/api/v1/jobs",
        Some(json!({"name": "close-order", "app": "default", "plugin": "close-order", "schedule": {"kind": "none"}})),
    )
    .await;
    let mut expected = Vec::new();
    for (order, paid, line) in [
        (42, false, "order 42 is unpaid: closing it"),
        (43, true, "order 43 is paid: leaving it"),
    ] {
        let payload = json!({"order_id": order, "paid": paid}).to_string();
        let id = api
            .ok(
                "POST",
                "/api/v1/tasks",
                Some(json!({"job": "close-order", "delay_ms": 300, "payload": payload})),
            )
            .await["id"]
            .as_i64()
            .unwrap();
        expected.push((id, line));
    }
    let bad = api
        .ok(
            "POST",
            "/api/v1/tasks",
            Some(json!({"job": "close-order", "payload": "not json"})),
        )
        .await["id"]
        .as_i64()
        .unwrap();

    for (id, line) in expected {
        let run = eventually(Duration::from_secs(60), "the order task to succeed", || {
            let api = api.clone();
            async move {
                let t = api.ok("GET", &format!("/api/v1/tasks/{id}"), None).await;
                (t["status"] == "succeeded").then(|| t["last_run_id"].as_i64().unwrap())
            }
        })
        .await;
        let log = api
            .ok("GET", &format!("/api/v1/runs/{run}/log"), None)
            .await;
        let lines: Vec<String> = log["lines"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l.as_str().unwrap().to_owned())
            .collect();
        assert!(
            lines.iter().any(|l| l.contains(line)),
            "{line} in {lines:?}"
        );
    }
    eventually(
        Duration::from_secs(60),
        "the malformed order to fail for good",
        || {
            let api = api.clone();
            async move {
                let t = api.ok("GET", &format!("/api/v1/tasks/{bad}"), None).await;
                (t["status"] == "dead").then_some(())
            }
        },
    )
    .await;
    let runs = api
        .ok("GET", &format!("/api/v1/runs?task={bad}"), None)
        .await;
    assert_eq!(runs["items"][0]["exit_code"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_order_asks_the_order_service_through_the_host_imports() {
    close_order_asks_the_order_service("close-order.wasm").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_order_in_python_asks_the_order_service_through_wasi_http() {
    close_order_asks_the_order_service("close-order-py.wasm").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_order_in_javascript_asks_the_order_service_through_wasi_http() {
    close_order_asks_the_order_service("close-order-js.wasm").await;
}

/// The example's real use, the same for the Rust module (through the `rota` host
/// imports) and the Python and JavaScript components (through `wasi:http` and the
/// `rota:plugin` interfaces): an order service the test runs on 127.0.0.1 closes the
/// unpaid order (with the app's secret as its token) and leaves the paid one; a retry
/// finds the close in the job's key-value state; the same plugin in a job whose
/// allow-list does not have the service is denied before any packet, and its run fails
/// saying so. The secret appears in no log and no API answer.
async fn close_order_asks_the_order_service(file: &str) {
    let Some(module) = example(file) else {
        return;
    };
    let service = OrderService::start(&[43]).await;
    let data = tempfile::tempdir().unwrap();
    let node = Standalone::start(data.path());
    let api = node.api.clone();
    wait_ready(&api).await;
    api.upload("close-order", module).await;
    const TOKEN_VALUE: &str = "s3cret-order-token-9f2";
    let stored = api
        .ok(
            "PUT",
            "/api/v1/apps/default/secrets/ORDER_SERVICE_TOKEN",
            Some(json!({"value": TOKEN_VALUE})),
        )
        .await;
    assert!(!stored.to_string().contains(TOKEN_VALUE), "{stored}");
    for (name, allow) in [
        ("close-order", json!([service.url])),
        ("close-order-offline", json!(["http://127.0.0.1:9"])),
    ] {
        api.ok(
            "POST",
            "/api/v1/jobs",
            Some(
                json!({"name": name, "app": "default", "plugin": "close-order",
                        "schedule": {"kind": "none"}, "params": service.url,
                        "http_allow": allow}),
            ),
        )
        .await;
    }
    let task = |job: &'static str, order: i64| {
        let api = api.clone();
        async move {
            api.ok(
                "POST",
                "/api/v1/tasks",
                Some(json!({"job": job, "delay_ms": 200, "payload": json!({"order_id": order}).to_string()})),
            )
            .await["id"]
                .as_i64()
                .unwrap()
        }
    };
    let unpaid = task("close-order", 42).await;
    let paid = task("close-order", 43).await;
    let mut logs = Vec::new();
    for (id, line) in [
        (unpaid, "order 42 was unpaid: closed it"),
        (paid, "order 43 is paid: leaving it"),
    ] {
        // The first run compiles the plugin on the executor.
        let t = task_reaches_within(&api, id, "succeeded", FIRST_RUN).await;
        let lines = run_log(&api, t["last_run_id"].as_i64().unwrap()).await;
        assert!(
            lines.iter().any(|l| l.contains(line)),
            "{line} in {lines:?}"
        );
        logs.extend(lines);
    }
    let get_42 = format!("[rota] http GET {}/orders/42 -> 200", service.url);
    assert!(
        logs.iter().any(|l| l.starts_with(&get_42)),
        "{get_42} in {logs:?}"
    );
    assert_eq!(
        service.log().closed,
        [(42, Some(format!("Bearer {TOKEN_VALUE}")))],
        "only order 42 closed, with the app's secret"
    );

    // A retry (another task for the same order) finds the close in the job's state.
    let again = task("close-order", 42).await;
    let t = task_reaches(&api, again, "succeeded").await;
    let lines = run_log(&api, t["last_run_id"].as_i64().unwrap()).await;
    assert!(
        lines
            .iter()
            .any(|l| l.contains("order 42 was closed already")),
        "{lines:?}"
    );
    assert_eq!(service.log().closed.len(), 1, "not closed twice");

    // Not on the allow-list: denied before any packet, the run fails and says why.
    let requests_before = service.log().requests.len();
    let denied = task("close-order-offline", 44).await;
    let t = task_reaches(&api, denied, "dead").await;
    let run = api
        .ok("GET", &format!("/api/v1/runs/{}", t["last_run_id"]), None)
        .await;
    assert_eq!(run["status"], "failed", "{run}");
    let lines = run_log(&api, run["id"].as_i64().unwrap()).await;
    assert!(
        lines
            .iter()
            .any(|l| l.contains("denied: not on the job's allow-list")),
        "{lines:?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("cannot reach the order service")),
        "{lines:?}"
    );
    assert_eq!(
        service.log().requests.len(),
        requests_before,
        "nothing reached it"
    );

    // The secret is in no log line and no API answer.
    logs.extend(lines);
    assert!(logs.iter().all(|l| !l.contains(TOKEN_VALUE)), "{logs:?}");
    let listed = api.ok("GET", "/api/v1/apps/default/secrets", None).await;
    assert_eq!(listed["items"][0]["name"], "ORDER_SERVICE_TOKEN");
    assert!(!listed.to_string().contains(TOKEN_VALUE), "{listed}");
}

/// A built example plugin (`ROTA_EXAMPLE_PLUGINS`, which `scripts/test` sets after building
/// them with `plugins/build.sh`); `None` (a skip, or a failure under CI) otherwise.
fn example(file: &str) -> Option<Vec<u8>> {
    let path = example_path(file)?;
    Some(std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
}

/// Where the built example plugin `file` is ([`example`]).
fn example_path(file: &str) -> Option<PathBuf> {
    let Some(dir) = std::env::var_os("ROTA_EXAMPLE_PLUGINS").map(PathBuf::from) else {
        rota_testkit::missing(
            "ROTA_EXAMPLE_PLUGINS is not set: the example plugins were not built",
        );
        return None;
    };
    // Relative to the workspace root (tests run in the package directory).
    let dir = if dir.is_relative() {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join(dir)
    } else {
        dir
    };
    Some(dir.join(file))
}

/// `rota plugin run` runs a component with the flags a module gets: `--allow` is the
/// allow-list its `wasi:http` requests pass, `--secret` what `secrets.get` reads,
/// `--param` its `context.params`; off the allow-list a request never leaves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugin_run_runs_a_python_component_with_the_same_flags() {
    let Some(file) = example_path("close-order-py.wasm") else {
        return;
    };
    let service = OrderService::start(&[]).await;
    let run = |allow: bool| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_rota"));
        cmd.arg("plugin").arg("run").arg(&file);
        cmd.env("ROTA_EGRESS_ALLOW", TEST_EGRESS_ALLOW);
        cmd.args(["--payload", r#"{"order_id": 42}"#, "--param", &service.url]);
        cmd.args(["--secret", "ORDER_SERVICE_TOKEN=tok-7"]);
        if allow {
            cmd.args(["--allow", &service.url]);
        }
        async move {
            tokio::task::spawn_blocking(move || cmd.output().expect("running rota"))
                .await
                .unwrap()
        }
    };
    let out = run(true).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(
        stdout.contains("order 42 was unpaid: closed it"),
        "{stdout}"
    );
    assert_eq!(
        service.log().closed,
        [(42, Some("Bearer tok-7".to_owned()))]
    );

    let requests = service.log().requests.len();
    let out = run(false).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        stdout.contains("denied: not on the job's allow-list"),
        "{stdout}"
    );
    assert_eq!(service.log().requests.len(), requests, "nothing reached it");
}

/// A `wasi:cli` command component keeps the preview 1 contract: `echo` made a component
/// (`jco new`) sees the same argv, `ROTA_*` environment (and nothing else) and stdin in a
/// real run through the scheduler, and exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_component_keeps_the_preview_1_contract() {
    let Some(component) = example("echo.component.wasm") else {
        return;
    };
    let data = tempfile::tempdir().unwrap();
    let node = Standalone::start(data.path());
    let api = node.api.clone();
    wait_ready(&api).await;
    api.upload("echo-component", component).await;
    let plugin = &api.ok("GET", "/api/v1/plugins", None).await["items"][0];
    assert_eq!(plugin["kind"], "component", "{plugin}");
    assert_eq!(plugin["world"], "wasi:cli/command", "{plugin}");
    api.ok(
        "POST",
        "/api/v1/jobs",
        Some(
            json!({"name": "echo", "app": "default", "plugin": "echo-component",
                    "schedule": {"kind": "none"}, "params": "--dry-run 'a b'"}),
        ),
    )
    .await;
    let id = api
        .ok(
            "POST",
            "/api/v1/tasks",
            Some(json!({"job": "echo", "payload": "line one\nline two"})),
        )
        .await["id"]
        .as_i64()
        .unwrap();
    let t = task_reaches(&api, id, "succeeded").await;
    let run = api
        .ok("GET", &format!("/api/v1/runs/{}", t["last_run_id"]), None)
        .await;
    assert_eq!(run["exit_code"], 0, "{run}");
    let lines = run_log(&api, run["id"].as_i64().unwrap()).await;
    for want in [
        "argc = 3",
        "argv[0] = echo-component",
        "argv[1] = --dry-run",
        "argv[2] = a b",
        "env ROTA_JOB_NAME=echo",
        &format!("env ROTA_TASK_ID={id}"),
        "env ROTA_ATTEMPT=1",
        "env ROTA_PARAMS=--dry-run 'a b'",
        "env: 0 other variables",
        "line one",
        "line two",
    ] {
        assert!(lines.iter().any(|l| l == want), "{want:?} in {lines:?}");
    }
}

/// `hello-c`, the C twin of `hello`, runs as a preview 1 module and as the command
/// component `plugins/build.sh` makes of it, with the same lines.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hello_in_c_runs_as_a_module_and_as_a_component() {
    for file in ["hello-c.wasm", "hello-c.component.wasm"] {
        let Some(path) = example_path(file) else {
            return;
        };
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_rota"));
        cmd.arg("plugin").arg("run").arg(&path);
        cmd.args(["--payload", "hi there"]);
        let out = tokio::task::spawn_blocking(move || cmd.output().expect("running rota"))
            .await
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{file}: {out:?}");
        assert!(stdout.contains("hello from "), "{file}: {stdout}");
        assert!(stdout.contains("payload: 8 bytes"), "{file}: {stdout}");
    }
}

/// `rota <args>` against `api`, as README's "Use it" runs it; its stdout (it must succeed).
async fn rota_cli(api: &Api, args: &[&str]) -> String {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_rota"));
    cmd.args(args)
        .env("ROTA_SERVER", &api.base)
        .env("ROTA_API_TOKEN", TOKEN);
    let out = tokio::task::spawn_blocking(move || cmd.output().expect("running rota"))
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "rota {args:?}: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The order pipeline of `plugins/examples/order-pipeline` (a JavaScript component of
/// rota:plugin 0.1.1, its outputs set with `rota:plugin/output`), applied from its
/// `workflow.json` with the CLI: an order whose lines all charge is notified with the
/// total; one with a line over its limit fails that element and is refunded the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_order_pipeline_charges_every_line_or_refunds_what_went_through() {
    let Some(module) = example("order-pipeline.wasm") else {
        return;
    };
    let data = tempfile::tempdir().unwrap();
    let node = Standalone::start(data.path());
    let api = node.api.clone();
    wait_ready(&api).await;
    api.upload("order-pipeline", module).await;
    api.ok(
        "POST",
        "/api/v1/jobs",
        Some(
            json!({"name": "order-step", "app": "default", "plugin": "order-pipeline",
                    "schedule": {"kind": "none"}, "max_attempts": 1, "timeout_ms": 300_000}),
        ),
    )
    .await;
    let definition = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../plugins/examples/order-pipeline/workflow.json");
    rota_cli(
        &api,
        &["workflow", "apply", "-f", &definition.to_string_lossy()],
    )
    .await;

    let lines = json!([{"sku": "tea", "amount": 450}, {"sku": "cup", "amount": 1200}]);
    // As README's "Use it" runs it.
    let input = json!({"order_id": 42, "lines": lines}).to_string();
    let printed = rota_cli(
        &api,
        &[
            "workflow",
            "start",
            "order-pipeline",
            "--wait",
            "--input",
            &input,
        ],
    )
    .await;
    let (first, output) = printed.split_once('\n').unwrap();
    assert!(first.ends_with(": succeeded"), "{printed}");
    let output: serde_json::Value = serde_json::from_str(output).unwrap();
    assert_eq!(
        output,
        json!({"notify": {"order_id": 42, "charged": 1650, "lines": 2}, "refund": null}),
        "{printed}"
    );

    let over = crate::workflows::run_to_end_within(
        &api,
        "order-pipeline",
        json!({"order_id": 43, "lines": lines, "limit": 1000}),
        FIRST_RUN,
    )
    .await;
    assert_eq!(over["status"], "failed", "{over}");
    let step = |name: &str| crate::workflows::step(&over, name).clone();
    assert_eq!(step("charge")["status"], "failed");
    assert_eq!(
        step("charge")["output"],
        json!([{"sku": "tea", "amount": 450, "charge_id": "ch_43_0"}, null])
    );
    assert_eq!(step("notify")["status"], "skipped");
    assert_eq!(
        step("refund")["output"],
        json!({"order_id": 43, "refunded": ["ch_43_0"]})
    );
    let failed_run = step("charge")["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_i64().unwrap())
        .collect::<Vec<_>>();
    let mut messages = Vec::new();
    for run in failed_run {
        let r = api.ok("GET", &format!("/api/v1/runs/{run}"), None).await;
        messages.push(r["message"].as_str().unwrap_or_default().to_owned());
    }
    assert!(
        messages
            .iter()
            .any(|m| m.contains("line 1 (cup): 1200 is over the order's limit of 1000")),
        "{messages:?}"
    );
}
