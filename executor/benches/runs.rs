//! Per-run cost of the sandbox, next to spawning a trivial process (`/bin/true`):
//!
//! - a trivial plugin (instantiate + WASI context + run + tear down), its log discarded:
//!   the floor of the sandbox itself;
//! - the `hello` example (reads its payload, prints its lines; `plugins/build.sh` builds
//!   it, `ROTA_BENCH_HELLO` names another file) with its log in a real [`LogStore`] —
//!   what a user's run costs the sandbox, without the HTTP and reports around it (those
//!   are in `rota/benches/load.rs`).
//!
//! - the components `plugins/build.sh` builds, each reading its payload and writing its
//!   lines: `hello` and `hello-c` (the same lines in Rust and in C) made `wasi:cli`
//!   command components, `echo` (C, a diagnostic plugin that logs 15 lines) likewise, and
//!   the `rota:plugin/handler` hellos in Python and JavaScript — compile time (once per
//!   executor), then latency and CPU per run.
//!
//! ```text
//! cargo bench -p rota-executor --bench runs            # 20,000 measured runs
//! ROTA_BENCH_RUNS=100000 cargo bench -p rota-executor --bench runs
//! ROTA_BENCH_ONLY=components cargo bench -p rota-executor --bench runs
//! ROTA_BENCH_ONLY=components ROTA_BENCH_COMPONENT=hello-py.wasm cargo bench …   # one of them
//! ```
//!
//! Prints Markdown tables (SPEC §7 targets: ≤ 15 µs median, ≤ 50 µs p99, ≥ 40,000
//! runs/s per executor, for the trivial plugin; a Rust or C component's hello ≤ 30 µs of
//! executor CPU per run; Python and JavaScript hello ≤ 1 ms median per run).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rota_executor::logs::{LogStore, RunLog};
use rota_executor::runtime::{Invocation, Plugin, PluginEnv, RunStatus, Runtime, RuntimeConfig};
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

/// The allocator the `rota` binary runs with (`rota/src/main.rs`), so that a run costs here
/// what it costs in an executor (glibc's malloc and free were about 11 % of a command
/// component's CPU per run).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A WASI command that does nothing: what is measured is the executor's overhead.
const TRIVIAL: &str = r#"
(module
  (import "wasi_snapshot_preview1" "proc_exit" (func $proc_exit (param i32)))
  (memory (export "memory") 1)
  (func (export "_start")))
"#;

const THREADS: usize = 2;

struct Stats {
    median: Duration,
    p99: Duration,
    mean: Duration,
}

fn stats(mut samples: Vec<Duration>) -> Stats {
    samples.sort_unstable();
    let n = samples.len().max(1);
    let at = |q: f64| samples[((n as f64 * q) as usize).min(n - 1)];
    Stats {
        median: at(0.5),
        p99: at(0.99),
        mean: samples.iter().sum::<Duration>() / n as u32,
    }
}

fn env() -> PluginEnv {
    PluginEnv {
        job_id: 1,
        job_name: "bench".into(),
        run_id: 1,
        task_id: Some(1),
        attempt: 1,
        scheduled_at: 0,
        shard_index: 0,
        shard_total: 1,
        traceparent: None,
    }
}

fn run_once(rt: &Runtime, plugin: &Plugin, env: &PluginEnv, kill: &CancellationToken) {
    run_logged(rt, plugin, env, kill, b"", &RunLog::discard());
}

fn run_logged(
    rt: &Runtime,
    plugin: &Plugin,
    env: &PluginEnv,
    kill: &CancellationToken,
    input: &[u8],
    log: &RunLog,
) {
    let invocation = Invocation {
        plugin_name: "bench",
        input,
        params: None,
        env,
        timeout: Duration::from_secs(10),
        memory_mb: 0,
        host: None,
    };
    let outcome = rt.run(plugin, &invocation, log, kill);
    assert_eq!(outcome.status, RunStatus::Succeeded, "{outcome:?}");
}

/// This process's CPU time so far (user + system).
fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // utime and stime, in clock ticks (100 a second on Linux).
    Duration::from_millis((ticks(11) + ticks(12)) * 10)
}

fn spawn_true() {
    let status = Command::new("/bin/true")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("spawn /bin/true");
    assert!(status.success());
}

/// Per-call latencies of `f`, after `warmup` unmeasured calls.
fn latencies(warmup: usize, runs: usize, mut f: impl FnMut()) -> Vec<Duration> {
    for _ in 0..warmup {
        f();
    }
    (0..runs)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed()
        })
        .collect()
}

/// Calls per second with `THREADS` threads doing `per_thread` calls each.
fn throughput<F: Fn() + Sync>(per_thread: usize, f: F) -> f64 {
    let start = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..THREADS {
            scope.spawn(|| {
                for _ in 0..per_thread {
                    f();
                }
            });
        }
    });
    (THREADS * per_thread) as f64 / start.elapsed().as_secs_f64()
}

fn micros(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

fn main() {
    let runs: usize = std::env::var("ROTA_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let spawns = (runs / 10).clamp(200, 2_000);

    let rt = Runtime::new(RuntimeConfig {
        max_instances: 16,
        ..RuntimeConfig::default()
    })
    .expect("runtime");
    let wasm = wat::parse_str(TRIVIAL).expect("wat");
    let sha256 = hex::encode(Sha256::digest(&wasm));
    let plugin = rt.compile(&sha256, &wasm).expect("compile");
    let env = env();
    let kill = CancellationToken::new();
    if std::env::var("ROTA_BENCH_ONLY").is_ok_and(|v| v == "components") {
        components(&rt, runs, &env, &kill);
        return;
    }
    if std::env::var("ROTA_BENCH_ONLY").is_ok_and(|v| v == "hello") {
        // For a profiler: the hello runs alone.
        if let Some((lat, rate, cpu)) = hello(&rt, runs, &env, &kill) {
            println!(
                "hello: median {}, {rate:.0}/s, CPU {:?}/run",
                micros(lat.median),
                cpu
            );
        }
        return;
    }

    let wasm_lat = stats(latencies(2_000, runs, || {
        run_once(&rt, &plugin, &env, &kill)
    }));
    let wasm_rate = throughput(runs / THREADS, || run_once(&rt, &plugin, &env, &kill));
    let proc_lat = stats(latencies(50, spawns, spawn_true));
    let proc_rate = throughput(spawns / THREADS, spawn_true);

    println!("## Executor per-run overhead (trivial plugin)\n");
    println!(
        "{runs} measured wasm runs after 2,000 warm-up runs; {spawns} process spawns; throughput on {THREADS} threads.\n"
    );
    println!("| what | median | p99 | mean | runs/s ({THREADS} threads) |");
    println!("|---|---:|---:|---:|---:|");
    println!(
        "| wasm run (instantiate + WASI ctx + `_start` + teardown) | {} | {} | {} | {:.0} |",
        micros(wasm_lat.median),
        micros(wasm_lat.p99),
        micros(wasm_lat.mean),
        wasm_rate
    );
    println!(
        "| spawn `/bin/true` (fork/exec + wait) | {} | {} | {} | {:.0} |",
        micros(proc_lat.median),
        micros(proc_lat.p99),
        micros(proc_lat.mean),
        proc_rate
    );
    if let Some((lat, rate, cpu)) = hello(&rt, runs, &env, &kill) {
        println!(
            "| `hello` (reads its payload, prints 3 lines to a segment log store) | {} | {} | {} | {:.0} (CPU {:.1} µs/run) |",
            micros(lat.median),
            micros(lat.p99),
            micros(lat.mean),
            rate,
            cpu.as_secs_f64() * 1e6
        );
    }
    println!("\nTarget (SPEC §7): ≤ 15 µs median, ≤ 50 µs p99, ≥ 40,000 runs/s per executor.");
    components(&rt, runs, &env, &kill);
}

/// The example components: compile time, then latency, runs/s on two threads and the
/// process's CPU per run (with a real log store). Python and JavaScript runs are a few
/// hundred times costlier, so they get a tenth of the runs.
fn components(rt: &Runtime, runs: usize, env: &PluginEnv, kill: &CancellationToken) {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../plugins/target");
    println!("\n## Components (reads its payload, writes a line to a segment log store)\n");
    println!(
        "| component | bytes | compile (once per executor) | median | p99 | runs/s ({THREADS} threads) | CPU per run |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for (file, what, share) in [
        (
            "hello.component.wasm",
            "`hello`, Rust, `wasi:cli` command",
            1,
        ),
        (
            "hello-c.component.wasm",
            "`hello-c`, C, `wasi:cli` command",
            1,
        ),
        (
            "echo.component.wasm",
            "`echo`, C, `wasi:cli` command (15 log lines)",
            1,
        ),
        ("hello-py.wasm", "`hello-py`, Python handler", 10),
        ("hello-js.wasm", "`hello-js`, JavaScript handler", 10),
    ] {
        if std::env::var("ROTA_BENCH_COMPONENT").is_ok_and(|only| only != file) {
            continue;
        }
        let path = format!("{dir}/{file}");
        let Ok(wasm) = std::fs::read(&path) else {
            println!("| {what} | not built ({path}: run plugins/build.sh) | | | | | |");
            continue;
        };
        let sha256 = hex::encode(Sha256::digest(&wasm));
        let started = Instant::now();
        let plugin = rt.compile(&sha256, &wasm).expect("compile component");
        let compile = started.elapsed();
        let n = (runs / share).max(100);
        let (lat, rate, cpu) = logged_runs(rt, &plugin, n, env, kill);
        println!(
            "| {what} | {} | {:.2} s | {} | {} | {rate:.0} | {} |",
            wasm.len(),
            compile.as_secs_f64(),
            micros(lat.median),
            micros(lat.p99),
            micros(cpu)
        );
    }
    println!(
        "\nTargets (SPEC §7): Rust/C component ≤ 30 µs executor CPU per run; Python and JavaScript ≤ 1 ms median."
    );
}

/// The `hello` example with a real log store: latencies, runs/s on two threads, and the
/// process's CPU per run over those. `None` (said) when it is not built.
fn hello(
    rt: &Runtime,
    runs: usize,
    env: &PluginEnv,
    kill: &CancellationToken,
) -> Option<(Stats, f64, Duration)> {
    let path = std::env::var("ROTA_BENCH_HELLO").unwrap_or_else(|_| {
        concat!(env!("CARGO_MANIFEST_DIR"), "/../plugins/target/hello.wasm").into()
    });
    let Ok(wasm) = std::fs::read(&path) else {
        println!("| `hello` | not built ({path}: run plugins/build.sh) | | | |");
        return None;
    };
    let sha256 = hex::encode(Sha256::digest(&wasm));
    let plugin = rt.compile(&sha256, &wasm).expect("compile hello");
    Some(logged_runs(rt, &plugin, runs, env, kill))
}

/// `runs` runs of `plugin` with its log in a real log store, after a tenth as many
/// unmeasured: latencies, runs/s on two threads, and the process's CPU per run over those.
fn logged_runs(
    rt: &Runtime,
    plugin: &Plugin,
    runs: usize,
    env: &PluginEnv,
    kill: &CancellationToken,
) -> (Stats, f64, Duration) {
    let dir = tempfile::tempdir().expect("log dir");
    let logs = LogStore::open(
        dir.path(),
        rota_executor::logs::DEFAULT_LOG_CAP_BYTES,
        rota_executor::logs::DEFAULT_LOG_RETENTION,
    )
    .expect("log store");
    let next = std::sync::atomic::AtomicI64::new(1);
    let one = || {
        let id = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let log = logs.create(id);
        run_logged(rt, plugin, env, kill, br#"{"order_id":42}"#, &log);
        // The executor hands the lines to the OS once per report batch (50 ms of runs);
        // every hundred runs is as often as that at 2,000 runs/s.
        if id % 100 == 0 {
            logs.flush();
        }
    };
    let lat = stats(latencies((runs / 10).max(10), runs, one));
    let cpu_before = cpu_time();
    let rate = throughput(runs / THREADS, one);
    let cpu = (cpu_time() - cpu_before) / (runs / THREADS * THREADS) as u32;
    (lat, rate, cpu)
}
