//! Components in the sandbox with real wasmtime, from the `rota:plugin/handler` fixture in
//! component text (`fixtures/handler.wat`): the world is recognised, the context reaches
//! the guest, `err` fails the run with its message, a loop is killed, a memory bomb fails
//! cleanly and the next run succeeds, and the compiled component survives a restart in
//! the disk cache. A handler of rota:plugin 0.2 (`fixtures/handler-output.wat`) returns
//! its run's output; the 0.1 fixture keeps running beside it. A handler of 0.3
//! (`fixtures/handler-trace.wat`) is told its run's trace; the older ones run untold.

use crate::common;

use std::time::Duration;

use rota_executor::World;
use rota_executor::logs::RunLog;
use rota_executor::runtime::{
    Invocation, Plugin, PluginEnv, RunOutcome, RunStatus, Runtime, RuntimeConfig,
};
use tokio_util::sync::CancellationToken;

const HANDLER: &str = include_str!("../fixtures/handler.wat");
/// A handler of rota:plugin 0.2 whose `run` returns its input as its output.
const HANDLER_OUTPUT: &str = include_str!("../fixtures/handler-output.wat");
/// A handler of rota:plugin 0.3 whose `run` returns its context's `traceparent`.
const HANDLER_TRACE: &str = include_str!("../fixtures/handler-trace.wat");

fn config() -> RuntimeConfig {
    RuntimeConfig {
        max_instances: 8,
        memory_cap_mb: 64,
        ..RuntimeConfig::default()
    }
}

fn compile(rt: &Runtime) -> Plugin {
    compile_text(rt, HANDLER)
}

fn compile_text(rt: &Runtime, text: &str) -> Plugin {
    let (wasm, sha256) = common::compiled(text);
    rt.compile(&sha256, &wasm).unwrap()
}

fn run(
    rt: &Runtime,
    plugin: &Plugin,
    input: &str,
    memory_mb: u32,
    kill: &CancellationToken,
) -> (RunOutcome, Vec<String>) {
    run_traced(rt, plugin, input, memory_mb, kill, None)
}

/// [`run`] in the trace `traceparent` names.
fn run_traced(
    rt: &Runtime,
    plugin: &Plugin,
    input: &str,
    memory_mb: u32,
    kill: &CancellationToken,
    traceparent: Option<&str>,
) -> (RunOutcome, Vec<String>) {
    let env = PluginEnv {
        job_id: 7,
        job_name: "close order".into(),
        run_id: 9001,
        task_id: Some(42),
        attempt: 2,
        scheduled_at: 1_767_225_600_123,
        shard_index: 0,
        shard_total: 1,
        traceparent: traceparent.map(str::to_owned),
    };
    let invocation = Invocation {
        plugin_name: "handler",
        input: input.as_bytes(),
        params: Some("--region eu"),
        env: &env,
        timeout: Duration::from_secs(10),
        memory_mb,
        host: None,
    };
    let log = RunLog::memory(1 << 20);
    let outcome = rt.run(plugin, &invocation, &log, kill);
    (outcome, log.lines())
}

#[test]
fn a_handler_gets_its_input_and_context_and_its_err_fails_the_run() {
    let rt = Runtime::new(config()).unwrap();
    let plugin = compile(&rt);
    assert_eq!(plugin.world(), Some(World::Handler));
    let kill = CancellationToken::new();

    let (outcome, lines) = run(&rt, &plugin, "hello", 0, &kill);
    assert_eq!(outcome.status, RunStatus::Succeeded, "{outcome:?}");
    assert_eq!(lines, ["hello from a wat handler"]);

    let (outcome, lines) = run(&rt, &plugin, "who", 0, &kill);
    assert_eq!(outcome.status, RunStatus::Succeeded, "{outcome:?}");
    assert_eq!(lines, ["close order"], "the context's job name");

    let (outcome, lines) = run(&rt, &plugin, "fail", 0, &kill);
    assert_eq!(outcome.status, RunStatus::Failed);
    assert_eq!(outcome.exit_code, None);
    assert_eq!(outcome.message.as_deref(), Some("the input asked to fail"));
    assert_eq!(lines, ["[rota] the input asked to fail"]);
}

#[test]
fn a_looping_handler_is_killed_and_a_memory_bomb_fails_cleanly() {
    let rt = Runtime::new(config()).unwrap();
    let plugin = compile(&rt);

    let kill = CancellationToken::new();
    let killer = {
        let kill = kill.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            kill.cancel();
        })
    };
    let (outcome, _) = run(&rt, &plugin, "loop", 0, &kill);
    killer.join().unwrap();
    assert_eq!(outcome.status, RunStatus::Killed, "{outcome:?}");

    let kill = CancellationToken::new();
    let (outcome, _) = run(&rt, &plugin, "grow", 8, &kill);
    assert_eq!(outcome.status, RunStatus::Failed);
    assert_eq!(
        outcome.message.as_deref(),
        Some("out of memory (limit 8 MiB)")
    );
    let (outcome, _) = run(&rt, &plugin, "hello", 8, &kill);
    assert_eq!(outcome.status, RunStatus::Succeeded, "{outcome:?}");
}

#[test]
fn a_compiled_component_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let config = RuntimeConfig {
        module_cache_dir: Some(dir.path().to_owned()),
        ..config()
    };
    let (wasm, sha256) = common::compiled(HANDLER);
    let first = Runtime::new(config.clone()).unwrap();
    first.compile(&sha256, &wasm).unwrap();
    assert_eq!(first.compilations(), 1);
    drop(first);

    let second = Runtime::new(config).unwrap();
    let plugin = second.load_cached(&sha256).unwrap().expect("on disk");
    assert_eq!((second.compilations(), second.disk_loads()), (0, 1));
    assert_eq!(plugin.world(), Some(World::Handler));
    let (outcome, lines) = run(&second, &plugin, "hello", 0, &CancellationToken::new());
    assert_eq!(outcome.status, RunStatus::Succeeded, "{outcome:?}");
    assert_eq!(lines, ["hello from a wat handler"]);
}

#[test]
fn a_handler_of_0_2_returns_its_output_and_one_over_64_kib_fails_the_run_saying_so() {
    let rt = Runtime::new(config()).unwrap();
    let plugin = compile_text(&rt, HANDLER_OUTPUT);
    assert_eq!(plugin.world(), Some(World::Handler));
    let kill = CancellationToken::new();

    let (outcome, _) = run(&rt, &plugin, r#"{"charged": 1650}"#, 0, &kill);
    assert_eq!(outcome.status, RunStatus::Succeeded, "{outcome:?}");
    assert_eq!(outcome.output.as_deref(), Some(r#"{"charged": 1650}"#));
    let (outcome, _) = run(&rt, &plugin, "", 0, &kill);
    assert_eq!(outcome.status, RunStatus::Succeeded, "{outcome:?}");
    assert_eq!(outcome.output, None, "ok(none): no output");

    let big = "o".repeat(70_000);
    let (outcome, _) = run(&rt, &plugin, &big, 0, &kill);
    assert_eq!(outcome.status, RunStatus::Failed, "{outcome:?}");
    assert_eq!(
        outcome.message.as_deref(),
        Some("output of 70000 bytes, at most 65536 allowed")
    );
    assert_eq!(outcome.output, None, "nothing was kept");

    // A handler built for 0.1 links and runs against the same linker.
    let old = compile(&rt);
    let (outcome, lines) = run(&rt, &old, "hello", 0, &kill);
    assert_eq!(outcome.status, RunStatus::Succeeded, "{outcome:?}");
    assert_eq!(lines, ["hello from a wat handler"]);
}

#[test]
fn a_handler_of_0_3_is_told_its_runs_trace_and_older_ones_run_as_before() {
    let rt = Runtime::new(config()).unwrap();
    let plugin = compile_text(&rt, HANDLER_TRACE);
    assert_eq!(plugin.world(), Some(World::Handler));
    let kill = CancellationToken::new();
    let traced = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

    let (outcome, _) = run_traced(&rt, &plugin, "", 0, &kill, Some(traced));
    assert_eq!(outcome.status, RunStatus::Succeeded, "{outcome:?}");
    assert_eq!(
        outcome.output.as_deref(),
        Some(traced),
        "the context's traceparent"
    );
    let (outcome, _) = run_traced(&rt, &plugin, "", 0, &kill, None);
    assert_eq!(outcome.status, RunStatus::Succeeded, "{outcome:?}");
    assert_eq!(outcome.output, None, "an untraced run has none");

    // The 0.2 and 0.1 handlers run in a trace as they always ran.
    let output = compile_text(&rt, HANDLER_OUTPUT);
    let (outcome, _) = run_traced(&rt, &output, "in", 0, &kill, Some(traced));
    assert_eq!(outcome.output.as_deref(), Some("in"), "{outcome:?}");
    let old = compile(&rt);
    let (outcome, lines) = run_traced(&rt, &old, "hello", 0, &kill, Some(traced));
    assert_eq!(outcome.status, RunStatus::Succeeded, "{outcome:?}");
    assert_eq!(lines, ["hello from a wat handler"]);
}
