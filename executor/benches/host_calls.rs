//! What a call of the `rota` host imports costs a plugin: `kv_get` (in memory, as under
//! `rota plugin run`: the import's own cost, without the scheduler round trip a real run
//! adds), `result_read`, and `http_request` to an HTTP server on 127.0.0.1. Each plugin
//! makes the call in a loop; the time of an empty loop run is subtracted.
//!
//! ```text
//! cargo bench -p rota-executor --bench host_calls
//! ROTA_BENCH_CALLS=50000 cargo bench -p rota-executor --bench host_calls
//! ```
//!
//! Prints a Markdown table for `docs/benchmarks.md`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rota_executor::logs::RunLog;
use rota_executor::runtime::host::{HostAccess, LocalServices, Services};
use rota_executor::runtime::{Invocation, PluginEnv, RunStatus, Runtime, RuntimeConfig};
use rota_proto::allow::AllowList;
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

/// `n` iterations of `body` (which may use `$i`), with the imports at hand.
fn looping(n: u64, data: &str, body: &str) -> String {
    format!(
        r#"(module
  (import "rota" "http_request" (func $http_request (param i32 i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (import "rota" "kv_get" (func $kv_get (param i32 i32) (result i32)))
  (import "rota" "result_read" (func $result_read (param i32 i32) (result i32)))
  (memory (export "memory") 2)
  {data}
  (func (export "_start") (local $i i64)
    (loop $again
      {body}
      (local.set $i (i64.add (local.get $i) (i64.const 1)))
      (br_if $again (i64.lt_u (local.get $i) (i64.const {n}))))))"#
    )
}

fn run(rt: &Runtime, wat: &str, access: &HostAccess) -> Duration {
    let wasm = wat::parse_str(wat).unwrap();
    let sha = hex::encode(Sha256::digest(&wasm));
    let plugin = rt.compile(&sha, &wasm).unwrap();
    let env = PluginEnv::default();
    let invocation = Invocation {
        plugin_name: "bench",
        input: b"",
        params: None,
        env: &env,
        timeout: Duration::from_secs(600),
        memory_mb: 0,
        host: Some(access),
    };
    let log = RunLog::discard();
    let started = Instant::now();
    let outcome = rt.run(&plugin, &invocation, &log, &CancellationToken::new());
    let took = started.elapsed();
    assert_eq!(
        outcome.status,
        RunStatus::Succeeded,
        "{:?}",
        outcome.message
    );
    took
}

fn main() {
    let calls: u64 = std::env::var("ROTA_BENCH_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let http_calls = (calls / 10).max(100);
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let base = tokio.block_on(async {
        let app = axum::Router::new().route("/ping", axum::routing::get(|| async { "pong" }));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        base
    });
    let url = format!("{base}/ping");
    let services = Services::Local(Arc::new(LocalServices::default()));
    if let Services::Local(local) = &services {
        local
            .kv
            .lock()
            .unwrap()
            .insert("k".into(), b"value-16-bytes!!".to_vec());
    }
    let access = HostAccess {
        allow: AllowList::parse(std::slice::from_ref(&base)).unwrap(),
        job_id: 1,
        services,
    };
    // Inside the runtime: the imports' network calls run on it, as in an executor.
    let _guard = tokio.enter();
    // The egress policy denies loopback: open exactly this server's port, as an admin would.
    let port = base.rsplit(':').next().unwrap_or_default();
    let rt = Runtime::new(RuntimeConfig {
        egress: rota_net::egress::Policy::new(&[format!("127.0.0.1:{port}")], &[]).unwrap(),
        ..RuntimeConfig::default()
    })
    .unwrap();

    let per_call = |n: u64, data: &str, body: &str| {
        let empty = run(&rt, &looping(n, "", ""), &access);
        let timed = run(&rt, &looping(n, data, body), &access);
        timed.saturating_sub(empty) / n as u32
    };
    // Warm up (compilation, the first connection).
    per_call(
        100,
        "(data (i32.const 16) \"k\")",
        "(drop (call $kv_get (i32.const 16) (i32.const 1)))",
    );
    let kv = per_call(
        calls,
        "(data (i32.const 16) \"k\")",
        "(drop (call $kv_get (i32.const 16) (i32.const 1)))",
    );
    let kv_read = per_call(
        calls,
        "(data (i32.const 16) \"k\")",
        "(drop (call $kv_get (i32.const 16) (i32.const 1))) (drop (call $result_read (i32.const 1024) (i32.const 64)))",
    );
    let http_data = format!("(data (i32.const 16) \"GET\") (data (i32.const 64) \"{url}\")");
    let http_body = format!(
        "(drop (call $http_request (i32.const 16) (i32.const 3) (i32.const 64) (i32.const {}) (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 0)))",
        url.len()
    );
    let http = per_call(http_calls, &http_data, &http_body);
    println!("| call | per call | calls |");
    println!("|---|---:|---:|");
    println!(
        "| `kv_get` (in memory) | {:.2} µs | {calls} |",
        kv.as_secs_f64() * 1e6
    );
    println!(
        "| `kv_get` + `result_read` (16 bytes) | {:.2} µs | {calls} |",
        kv_read.as_secs_f64() * 1e6
    );
    println!(
        "| `http_request` GET to 127.0.0.1 (4-byte body, keep-alive) | {:.1} µs | {http_calls} |",
        http.as_secs_f64() * 1e6
    );
}
