//! Components in `rota standalone` (SPEC §5, "Components"), with the `rota:plugin/handler`
//! component of `executor/tests/fixtures/handler.wat` (text: no toolchain needed; the
//! Python and JavaScript examples are in `examples.rs`): uploaded through the API, which
//! says what it is; runs that succeed, fail with the handler's message, loop until their
//! timeout, or allocate without end — and the run after those succeeds on the same
//! executor. A component importing what Rota lacks is refused at upload, by name.

use crate::support;

use serde_json::json;
use support::*;

const HANDLER: &str = include_str!("../../../executor/tests/fixtures/handler.wat");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_component_runs_fails_and_is_stopped_like_a_module() {
    let data = tempfile::tempdir().unwrap();
    let node = Standalone::start(data.path());
    let api = node.api.clone();
    wait_ready(&api).await;

    api.upload("handler", HANDLER).await;
    let plugins = api.ok("GET", "/api/v1/plugins", None).await;
    let plugin = &plugins["items"][0];
    assert_eq!(plugin["kind"], "component", "{plugin}");
    assert_eq!(plugin["world"], "rota:plugin/handler", "{plugin}");
    assert_eq!(
        plugin["imports"],
        json!(["rota:plugin/invocation@0.1.0", "rota:plugin/log@0.1.0"])
    );

    api.ok(
        "POST",
        "/api/v1/jobs",
        Some(
            json!({"name": "handler", "app": "default", "plugin": "handler",
                    "schedule": {"kind": "none"}, "timeout_ms": 1_000, "memory_mb": 16,
                    "params": "--region eu"}),
        ),
    )
    .await;
    let task = |payload: &'static str| {
        let api = api.clone();
        async move {
            api.ok(
                "POST",
                "/api/v1/tasks",
                Some(json!({"job": "handler", "payload": payload})),
            )
            .await["id"]
                .as_i64()
                .unwrap()
        }
    };
    let run_of = |t: serde_json::Value| {
        let api = api.clone();
        async move {
            api.ok("GET", &format!("/api/v1/runs/{}", t["last_run_id"]), None)
                .await
        }
    };

    // The handler's own `err`: a failed run with its message.
    let failing = task("fail").await;
    let run = run_of(task_reaches(&api, failing, "dead").await).await;
    assert_eq!(run["status"], "failed", "{run}");
    assert_eq!(run["message"], "the input asked to fail", "{run}");

    // A loop is stopped at the job's timeout.
    let looping = task("loop").await;
    let run = run_of(task_reaches(&api, looping, "dead").await).await;
    assert_eq!(run["status"], "timeout", "{run}");
    assert_eq!(run["message"], "timed out after 1000 ms", "{run}");

    // Allocating without end fails at the job's memory limit, cleanly…
    let growing = task("grow").await;
    let run = run_of(task_reaches(&api, growing, "dead").await).await;
    assert_eq!(run["status"], "failed", "{run}");
    assert_eq!(run["message"], "out of memory (limit 16 MiB)", "{run}");

    // …and the next run, on the same executor, succeeds and logs through `rota:plugin/log`.
    let fine = task("hello").await;
    let t = task_reaches(&api, fine, "succeeded").await;
    let lines = run_log(&api, t["last_run_id"].as_i64().unwrap()).await;
    assert!(
        lines.iter().any(|l| l == "hello from a wat handler"),
        "{lines:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_component_importing_what_rota_lacks_is_refused_by_name() {
    let data = tempfile::tempdir().unwrap();
    let node = Standalone::start(data.path());
    let api = node.api.clone();
    wait_ready(&api).await;

    let wants_keyvalue = r#"(component
        (import "wasi:keyvalue/store@0.2.0-draft" (instance))
        (core module $m (func (export "run")))
    )"#;
    let (status, body) = api.try_upload("kv", wants_keyvalue).await;
    assert_eq!(status, 422, "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("imports `wasi:keyvalue/store@0.2.0-draft`, which Rota does not provide"),
        "{body}"
    );

    let no_world = "(component)";
    let (status, body) = api.try_upload("empty", no_world).await;
    assert_eq!(status, 422, "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("exports neither `run`"),
        "{body}"
    );
}

/// Whether the executor's compiled cache under `dir` holds plugin `sha256`.
fn compiled(dir: &std::path::Path, sha256: &str) -> bool {
    let name = format!("{sha256}.cwasm");
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.file_name().is_some_and(|n| n == name.as_str()) {
                return true;
            }
        }
    }
    false
}

/// Issue 18: a component is compiled when a job binds it, not at the job's first trigger
/// (a Python or JavaScript handler takes seconds to compile); a new version of a bound
/// plugin too. No task exists while the compiled cache fills.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_is_compiled_when_a_job_binds_it_before_any_trigger() {
    let data = tempfile::tempdir().unwrap();
    let node = Standalone::start(data.path());
    let api = node.api.clone();
    wait_ready(&api).await;
    let newest_sha = |api: Api| async move {
        let plugins = api.ok("GET", "/api/v1/plugins", None).await;
        plugins["items"]
            .as_array()
            .unwrap()
            .iter()
            .max_by_key(|p| p["version"].as_i64())
            .unwrap()["sha256"]
            .as_str()
            .unwrap()
            .to_owned()
    };

    api.upload("handler", HANDLER).await;
    let first = newest_sha(api.clone()).await;
    assert!(
        !compiled(data.path(), &first),
        "nothing binds the plugin yet, so nothing compiled it"
    );
    api.ok(
        "POST",
        "/api/v1/jobs",
        Some(
            json!({"name": "handler", "app": "default", "plugin": "handler",
                    "schedule": {"kind": "none"}}),
        ),
    )
    .await;
    eventually(
        std::time::Duration::from_secs(30),
        "the executor to compile the plugin the new job binds",
        || async { compiled(data.path(), &first).then_some(()) },
    )
    .await;

    // A new version of the bound plugin is compiled on upload.
    api.upload(
        "handler",
        HANDLER.replace("hello from a wat handler", "hello from version two"),
    )
    .await;
    let second = newest_sha(api.clone()).await;
    assert_ne!(first, second);
    eventually(
        std::time::Duration::from_secs(30),
        "the executor to compile the new version of a bound plugin",
        || async { compiled(data.path(), &second).then_some(()) },
    )
    .await;
    let tasks = api.ok("GET", "/api/v1/tasks", None).await;
    assert_eq!(tasks["items"].as_array().unwrap().len(), 0, "{tasks}");

    // And the first task runs the new version.
    let task = api
        .ok(
            "POST",
            "/api/v1/tasks",
            Some(json!({"job": "handler", "payload": "hi"})),
        )
        .await;
    let id = task["id"].as_i64().unwrap();
    let done = task_reaches_within(&api, id, "succeeded", std::time::Duration::from_secs(30)).await;
    let run = api
        .ok(
            "GET",
            &format!("/api/v1/runs/{}", done["last_run_id"]),
            None,
        )
        .await;
    assert_eq!(run["status"], "succeeded", "{run}");
}

/// A preview 1 module that prints `module v1`.
const MODULE_V1: &str = r#"(module
  (import "wasi_snapshot_preview1" "fd_write" (func $write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 64) "module v1\n")
  (func (export "_start")
    (i32.store (i32.const 0) (i32.const 64))
    (i32.store (i32.const 4) (i32.const 10))
    (drop (call $write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))"#;

/// A live job whose plugin gets a new version that is a component, with tasks already
/// claimed into the wheel: every run dispatched after the upload runs the component, and
/// nothing is lost or run twice on the way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_job_switched_from_a_module_to_a_component_runs_the_component_from_then_on() {
    let data = tempfile::tempdir().unwrap();
    let node = Standalone::start(data.path());
    let api = node.api.clone();
    wait_ready(&api).await;
    api.upload("switch", MODULE_V1).await;
    api.ok(
        "POST",
        "/api/v1/jobs",
        Some(
            json!({"name": "switch", "app": "default", "plugin": "switch",
                    "schedule": {"kind": "none"}}),
        ),
    )
    .await;
    let before = api
        .ok(
            "POST",
            "/api/v1/tasks",
            Some(json!({"job": "switch", "payload": "hi"})),
        )
        .await["id"]
        .as_i64()
        .unwrap();
    let t = task_reaches(&api, before, "succeeded").await;
    let lines = run_log(&api, t["last_run_id"].as_i64().unwrap()).await;
    assert!(lines.iter().any(|l| l == "module v1"), "{lines:?}");

    // Twenty tasks due in 2–4 s (inside the scan window: claimed into the wheel at once),
    // then the component replaces the module.
    let later: Vec<_> = (0..20)
        .map(|i| json!({"job": "switch", "payload": "hi", "delay_ms": 2_000 + i * 100}))
        .collect();
    let ids = api.add_tasks(later).await;
    api.upload("switch", HANDLER).await;
    for id in ids {
        let t = task_reaches(&api, id, "succeeded").await;
        let run = t["last_run_id"].as_i64().unwrap();
        let lines = run_log(&api, run).await;
        assert!(
            lines.iter().any(|l| l == "hello from a wat handler"),
            "task {id} (run {run}) did not run the component: {lines:?}"
        );
        let runs = api
            .ok("GET", &format!("/api/v1/runs?task={id}"), None)
            .await;
        assert_eq!(
            runs["items"].as_array().unwrap().len(),
            1,
            "task {id}: {runs}"
        );
    }
}
