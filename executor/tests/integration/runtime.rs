//! The sandbox end to end with real wasmtime and `.wat` fixtures: the plugin contract,
//! limits, kill, logs and the compiled-module cache.

use crate::common;

use std::time::{Duration, Instant};

use rota_executor::local::{LocalError, LocalRun, run_local};
use rota_executor::logs::{LogStore, RunLog};
use rota_executor::runtime::host::HostAccess;
use rota_executor::runtime::{
    Invocation, PluginEnv, RunOutcome, RunStatus, Runtime, RuntimeConfig,
};
use tokio_util::sync::CancellationToken;

fn runtime() -> Runtime {
    Runtime::new(RuntimeConfig {
        max_instances: 8,
        memory_cap_mb: 64,
        ..RuntimeConfig::default()
    })
    .unwrap()
}

fn env() -> PluginEnv {
    PluginEnv {
        job_id: 7,
        job_name: "close order".into(),
        run_id: 9001,
        task_id: Some(42),
        attempt: 2,
        scheduled_at: 1_767_225_600_123,
        shard_index: 1,
        shard_total: 3,
        traceparent: None,
    }
}

struct Run<'a> {
    input: &'a [u8],
    params: Option<&'a str>,
    timeout: Duration,
    memory_mb: u32,
    host: Option<&'a HostAccess>,
}

impl Default for Run<'_> {
    fn default() -> Self {
        Self {
            input: b"",
            params: None,
            timeout: Duration::from_secs(10),
            memory_mb: 0,
            host: None,
        }
    }
}

fn run_with(
    rt: &Runtime,
    wat: &str,
    run: Run<'_>,
    kill: &CancellationToken,
) -> (RunOutcome, Vec<String>) {
    let (wasm, sha256) = common::compiled(wat);
    let plugin = rt.compile(&sha256, &wasm).unwrap();
    let env = env();
    let invocation = Invocation {
        plugin_name: "close_order",
        input: run.input,
        params: run.params,
        env: &env,
        timeout: run.timeout,
        memory_mb: run.memory_mb,
        host: run.host,
    };
    let log = RunLog::memory(1 << 20);
    let outcome = rt.run(&plugin, &invocation, &log, kill);
    (outcome, log.lines())
}

fn run(rt: &Runtime, wat: &str, run: Run<'_>) -> (RunOutcome, Vec<String>) {
    run_with(rt, wat, run, &CancellationToken::new())
}

#[test]
fn hello_writes_lines_and_succeeds() {
    let rt = runtime();
    let (outcome, lines) = run(&rt, &common::hello(), Run::default());
    assert_eq!(outcome.status, RunStatus::Succeeded, "{outcome:?}");
    assert_eq!(outcome.exit_code, Some(0));
    assert_eq!(outcome.message, None);
    assert_eq!(lines, ["hello", "world", "to stderr"]);

    // An absurd timeout is just long.
    let (outcome, _) = run(
        &rt,
        &common::hello(),
        Run {
            timeout: Duration::MAX,
            ..Run::default()
        },
    );
    assert_eq!(outcome.status, RunStatus::Succeeded, "{outcome:?}");
}

#[test]
fn stdin_is_the_input() {
    let rt = runtime();
    let payload = "{\"order\":42}\nsecond line\n".repeat(500);
    let (outcome, lines) = run(
        &rt,
        &common::echo(),
        Run {
            input: payload.as_bytes(),
            ..Run::default()
        },
    );
    assert_eq!(outcome.status, RunStatus::Succeeded, "{outcome:?}");
    assert_eq!(lines.len(), 1000);
    assert_eq!(lines[0], "{\"order\":42}");
    assert_eq!(lines[999], "second line");
}

#[test]
fn argv_and_env_are_exactly_the_contract() {
    let rt = runtime();
    let params = r#"--dry-run --name="order 42" 'it''s'"#;
    let (outcome, lines) = run(
        &rt,
        &common::contract(),
        Run {
            params: Some(params),
            ..Run::default()
        },
    );
    assert_eq!(outcome.status, RunStatus::Succeeded, "{outcome:?}");
    let env_at = lines.iter().position(|l| l == "env").unwrap();
    assert_eq!(
        lines[..env_at],
        ["argv", "close_order", "--dry-run", "--name=order 42", "its"]
    );
    assert_eq!(
        lines[env_at + 1..],
        [
            "ROTA_JOB_ID=7",
            "ROTA_JOB_NAME=close order",
            "ROTA_RUN_ID=9001",
            "ROTA_TASK_ID=42",
            "ROTA_ATTEMPT=2",
            "ROTA_SCHEDULED_AT=1767225600123",
            "ROTA_SHARD_INDEX=1",
            "ROTA_SHARD_TOTAL=3",
            &format!("ROTA_PARAMS={params}"),
        ]
    );
}

#[test]
fn malformed_params_fail_the_run() {
    let rt = runtime();
    let (outcome, _) = run(
        &rt,
        &common::hello(),
        Run {
            params: Some("'unterminated"),
            ..Run::default()
        },
    );
    assert_eq!(outcome.status, RunStatus::Failed);
    assert!(
        outcome
            .message
            .as_deref()
            .unwrap()
            .contains("unterminated single quote"),
        "{outcome:?}"
    );
}

#[test]
fn an_endless_loop_times_out() {
    let rt = runtime();
    let started = Instant::now();
    let (outcome, lines) = run(
        &rt,
        &common::forever(),
        Run {
            timeout: Duration::from_millis(200),
            ..Run::default()
        },
    );
    let elapsed = started.elapsed();
    assert_eq!(outcome.status, RunStatus::Timeout, "{outcome:?}");
    assert_eq!(outcome.message.as_deref(), Some("timed out after 200 ms"));
    assert!(elapsed >= Duration::from_millis(200), "{elapsed:?}");
    assert!(elapsed < Duration::from_millis(1200), "{elapsed:?}");
    assert_eq!(lines, ["[rota] timed out after 200 ms"]);
}

#[test]
fn a_sleeping_host_call_times_out_too() {
    let rt = runtime();
    let started = Instant::now();
    let (outcome, _) = run(
        &rt,
        &common::sleeper(),
        Run {
            timeout: Duration::from_millis(200),
            ..Run::default()
        },
    );
    let elapsed = started.elapsed();
    assert_eq!(outcome.status, RunStatus::Timeout, "{outcome:?}");
    assert!(elapsed < Duration::from_millis(1200), "{elapsed:?}");
}

#[test]
fn a_memory_bomb_fails_cleanly_and_the_next_run_succeeds() {
    let rt = runtime();
    let (outcome, lines) = run(
        &rt,
        &common::memory_bomb(),
        Run {
            memory_mb: 16,
            ..Run::default()
        },
    );
    assert_eq!(outcome.status, RunStatus::Failed, "{outcome:?}");
    assert_eq!(outcome.exit_code, None);
    assert_eq!(
        outcome.message.as_deref(),
        Some("out of memory (limit 16 MiB)")
    );
    assert!(
        lines.iter().any(|l| l.starts_with("[rota] out of memory")),
        "{lines:?}"
    );

    // A job asking beyond the executor's cap gets the cap.
    let (outcome, _) = run(
        &rt,
        &common::memory_bomb(),
        Run {
            memory_mb: 100_000,
            ..Run::default()
        },
    );
    assert_eq!(
        outcome.message.as_deref(),
        Some("out of memory (limit 64 MiB)")
    );

    // A module whose initial memory is over the run's limit fails at instantiation…
    let big = "(module (memory (export \"memory\") 1000) (func (export \"_start\")))";
    let (outcome, _) = run(
        &rt,
        big,
        Run {
            memory_mb: 16,
            ..Run::default()
        },
    );
    assert_eq!(outcome.status, RunStatus::Failed, "{outcome:?}");
    assert_eq!(
        outcome.message.as_deref(),
        Some("out of memory (limit 16 MiB)")
    );
    // …and one over the executor's cap does not even compile (a `rejected` trigger).
    let huge = "(module (memory (export \"memory\") 2000) (func (export \"_start\")))";
    let (wasm, sha256) = common::compiled(huge);
    let err = rt.compile(&sha256, &wasm).unwrap_err();
    assert!(err.to_string().contains("minimum byte size"), "{err}");

    let (outcome, lines) = run(&rt, &common::hello(), Run::default());
    assert_eq!(outcome.status, RunStatus::Succeeded, "{outcome:?}");
    assert_eq!(lines.len(), 3);
}

#[test]
fn there_is_no_file_system() {
    let rt = runtime();
    let (outcome, lines) = run(&rt, &common::file_opener(), Run::default());
    assert_eq!(outcome.status, RunStatus::Succeeded, "{outcome:?}");
    assert_eq!(lines.len(), 2, "{lines:?}");
    for errno in &lines {
        let errno: u32 = errno.parse().unwrap();
        assert_ne!(errno, 0, "{lines:?}");
    }
    // EBADF: fd 3 is not a preopened directory; nothing is.
    assert_eq!(lines[0], "8");
}

#[test]
fn there_are_no_sockets() {
    let rt = runtime();
    let (outcome, lines) = run(&rt, &common::socket_user(), Run::default());
    assert_eq!(outcome.status, RunStatus::Succeeded, "{outcome:?}");
    // Eight accepts, a send and a receive: every one refused with an errno.
    assert_eq!(lines.len(), 10, "{lines:?}");
    for errno in &lines {
        let errno: u32 = errno.parse().unwrap();
        assert_ne!(errno, 0, "a socket call succeeded: {lines:?}");
    }
}

#[test]
fn exit_status_and_traps_fail_the_run() {
    let rt = runtime();
    let (outcome, lines) = run(&rt, &common::exit3(), Run::default());
    assert_eq!(outcome.status, RunStatus::Failed);
    assert_eq!(outcome.exit_code, Some(3));
    assert_eq!(outcome.message.as_deref(), Some("exited with status 3"));
    assert_eq!(lines, ["bye", "[rota] exited with status 3"]);

    let (outcome, lines) = run(&rt, &common::trap(), Run::default());
    assert_eq!(outcome.status, RunStatus::Failed);
    assert_eq!(outcome.exit_code, None);
    let message = outcome.message.unwrap();
    assert!(message.starts_with("wasm trap: "), "{message}");
    assert!(message.contains("unreachable"), "{message}");
    assert!(lines.iter().any(|l| l.contains("unreachable")), "{lines:?}");
}

#[test]
fn kill_stops_a_running_loop() {
    let rt = runtime();
    let kill = CancellationToken::new();
    let switch = kill.clone();
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        switch.cancel();
        Instant::now()
    });
    let (outcome, _) = run_with(&rt, &common::forever(), Run::default(), &kill);
    let stopped = Instant::now();
    let killed_at = killer.join().unwrap();
    assert_eq!(outcome.status, RunStatus::Killed, "{outcome:?}");
    assert_eq!(outcome.message.as_deref(), Some("killed"));
    assert!(stopped.duration_since(killed_at) < Duration::from_millis(500));

    // Killed while sleeping in a host call, too.
    let kill = CancellationToken::new();
    let switch = kill.clone();
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        switch.cancel();
    });
    let started = Instant::now();
    let (outcome, _) = run_with(&rt, &common::sleeper(), Run::default(), &kill);
    killer.join().unwrap();
    assert_eq!(outcome.status, RunStatus::Killed, "{outcome:?}");
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[test]
fn runs_in_parallel_do_not_disturb_each_other() {
    let rt = runtime();
    let bomb = {
        let rt = rt.clone();
        std::thread::spawn(move || {
            run(
                &rt,
                &common::forever(),
                Run {
                    timeout: Duration::from_millis(300),
                    ..Run::default()
                },
            )
        })
    };
    for _ in 0..20 {
        let (outcome, _) = run(&rt, &common::hello(), Run::default());
        assert_eq!(outcome.status, RunStatus::Succeeded);
    }
    assert_eq!(bomb.join().unwrap().0.status, RunStatus::Timeout);
}

#[test]
fn the_log_is_capped_and_says_so() {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let logs = LogStore::open(dir.path(), 1 << 20, Duration::from_secs(3600)).unwrap();
    let (wasm, sha256) = common::compiled(&common::chatty(20_000));
    let plugin = rt.compile(&sha256, &wasm).unwrap();
    let env = env();
    let invocation = Invocation {
        plugin_name: "chatty",
        input: b"",
        params: None,
        env: &env,
        timeout: Duration::from_secs(10),
        memory_mb: 0,
        host: None,
    };
    let log = logs.create(env.run_id);
    let outcome = rt.run(&plugin, &invocation, &log, &CancellationToken::new());
    assert_eq!(outcome.status, RunStatus::Succeeded, "{outcome:?}");
    let size = logs.stored_bytes(env.run_id).unwrap();
    assert!(size <= (1 << 20) + 100, "{size}");
    let page = logs.read(env.run_id, 10_000, 1000, false).unwrap();
    assert_eq!(
        page.lines.last().map(String::as_str),
        Some("[rota] log truncated at 1 MiB")
    );
    assert!(page.complete);
    // 1 MiB of 100-byte lines, then the notice.
    assert_eq!(page.next_line, 10_485 + 2);
}

#[test]
fn compiled_modules_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let config = RuntimeConfig {
        module_cache_dir: Some(dir.path().to_owned()),
        max_instances: 4,
        ..RuntimeConfig::default()
    };
    let (wasm, sha256) = common::compiled(&common::hello());

    let first = Runtime::new(config.clone()).unwrap();
    assert!(first.load_cached(&sha256).unwrap().is_none());
    first.compile(&sha256, &wasm).unwrap();
    first.compile(&sha256, &wasm).unwrap();
    assert_eq!(first.compilations(), 1);
    assert!(first.cached(&sha256).is_some());
    drop(first);

    // A restarted executor loads the compiled form without compiling.
    let second = Runtime::new(config.clone()).unwrap();
    assert!(second.cached(&sha256).is_none());
    let plugin = second.load_cached(&sha256).unwrap().expect("on disk");
    assert_eq!((second.compilations(), second.disk_loads()), (0, 1));
    let env = env();
    let log = RunLog::memory(1 << 20);
    let invocation = Invocation {
        plugin_name: "hello",
        input: b"",
        params: None,
        env: &env,
        timeout: Duration::from_secs(5),
        memory_mb: 0,
        host: None,
    };
    let outcome = second.run(&plugin, &invocation, &log, &CancellationToken::new());
    assert_eq!(outcome.status, RunStatus::Succeeded);
    assert_eq!(log.lines().len(), 3);
    drop(second);
    // Loaded into memory, not mapped: damaging the file under a live module is harmless.

    // A damaged cache file is dropped and the module compiled again.
    let cached: Vec<_> = walk(dir.path())
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "cwasm"))
        .collect();
    assert_eq!(cached.len(), 1, "{cached:?}");
    std::fs::write(&cached[0], b"not a module").unwrap();
    let third = Runtime::new(config.clone()).unwrap();
    assert!(third.load_cached(&sha256).unwrap().is_none());
    third.compile(&sha256, &wasm).unwrap();
    assert_eq!(third.compilations(), 1);

    // The seal binds a file to its plugin: hello's compiled code under echo's name (a
    // swapped or planted file) is not loaded; echo is compiled from its own wasm.
    let (echo_wasm, echo_sha) = common::compiled(&common::echo());
    third.compile(&echo_sha, &echo_wasm).unwrap();
    drop(third);
    let echo_file = cached[0].with_file_name(format!("{echo_sha}.cwasm"));
    std::fs::copy(&cached[0], &echo_file).unwrap();
    let fourth = Runtime::new(config).unwrap();
    assert!(fourth.load_cached(&echo_sha).unwrap().is_none());
    assert!(!echo_file.exists(), "the planted file is deleted");
    fourth.compile(&echo_sha, &echo_wasm).unwrap();
    assert_eq!(fourth.compilations(), 1);
}

#[test]
fn bytes_must_match_their_hash() {
    let rt = runtime();
    let (wasm, _) = common::compiled(&common::hello());
    let err = rt.compile(&"0".repeat(64), &wasm).unwrap_err();
    assert!(err.to_string().contains("do not match"), "{err}");
    let err = rt
        .compile(
            &hex::encode(<sha2::Sha256 as sha2::Digest>::digest(b"junk")),
            b"junk",
        )
        .unwrap_err();
    assert!(err.to_string().contains("cannot be compiled"), "{err}");
}

#[test]
fn run_local_runs_wat_text() {
    let rt = runtime();
    let wat = common::echo();
    let outcome = run_local(
        &rt,
        &LocalRun {
            name: "echo",
            module: wat.as_bytes(),
            input: b"hi\nthere",
            params: None,
            timeout: Duration::from_secs(5),
            memory_mb: 0,
            host: None,
        },
    )
    .unwrap();
    assert_eq!(outcome.status, RunStatus::Succeeded);
    assert_eq!(outcome.log_lines, ["hi", "there"]);
    assert_eq!(outcome.sha256, common::compiled(&wat).1);

    let err = run_local(
        &rt,
        &LocalRun {
            name: "bad",
            module: br#"(module (func (export "run")))"#,
            input: b"",
            params: None,
            timeout: Duration::from_secs(5),
            memory_mb: 0,
            host: None,
        },
    )
    .unwrap_err();
    assert!(matches!(err, LocalError::Plugin(_)), "{err}");
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}
