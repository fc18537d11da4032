//! Components in `rota standalone` (SPEC §5, "Components"), with the `rota:plugin/handler`
//! component of `executor/tests/fixtures/handler.wat` (text: no toolchain needed; the
//! Python and JavaScript examples are in `examples.rs`): uploaded through the API, which
//! says what it is; runs that succeed, fail with the handler's message, loop until their
//! timeout, or allocate without end — and the run after those succeeds on the same
//! executor. A component importing what Rota lacks is refused at upload, by name.

mod support;

use serde_json::json;
use support::*;

const HANDLER: &str = include_str!("../../executor/tests/fixtures/handler.wat");

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
