//! What signing costs each request between nodes: signing (with a fresh nonce), checking
//! (signature and replay guard), deriving an app's key; and what the replay guard's memory
//! costs per remembered nonce.
//!
//! ```text
//! cargo bench -p rota-proto --bench sign
//! ROTA_BENCH_REQUESTS=1000000 cargo bench -p rota-proto --bench sign
//! ```
//!
//! Prints a Markdown table for `docs/benchmarks.md`.

use std::hint::black_box;
use std::time::Instant;

use rota_proto::{ReplayGuard, Secret, app_secret, sign_now, verify_once};

const NOW: i64 = 1_767_225_600_000;

fn per_op(n: u64, mut op: impl FnMut(u64)) -> f64 {
    let started = Instant::now();
    for i in 0..n {
        op(i);
    }
    started.elapsed().as_secs_f64() * 1e6 / n as f64
}

/// Resident memory of this process, bytes (Linux).
fn rss() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn main() {
    let n: u64 = std::env::var("ROTA_BENCH_REQUESTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200_000);
    // Memory first, before the timing loops leave freed memory behind for the guard to reuse.
    let nonces: Vec<String> = (0..n).map(|_| rota_proto::sign::new_nonce()).collect();
    let before = rss();
    let guard = ReplayGuard::default();
    for nonce in &nonces {
        guard.check(nonce, NOW).unwrap();
    }
    let after = rss();
    let memory = format!(
        "| replay guard memory | {:.0} B per remembered nonce ({} nonces) |",
        (after.saturating_sub(before)) as f64 / n as f64,
        guard.len()
    );
    drop(guard);
    let key = app_secret(&Secret::new("bench-master-secret-0123456789"), "default");
    println!("| operation | per request |");
    println!("|---|---:|");
    for size in [64usize, 4096, 65_536] {
        let body = vec![b'x'; size];
        let sign = per_op(n, |_| {
            black_box(sign_now(key.as_bytes(), "POST", "/trigger", NOW, &body));
        });
        let signed: Vec<_> = (0..n)
            .map(|_| sign_now(key.as_bytes(), "POST", "/trigger", NOW, &body))
            .collect();
        let guard = ReplayGuard::default();
        let check = per_op(n, |i| {
            let s = &signed[i as usize];
            let received = rota_proto::Received {
                timestamp: Some(&s.timestamp),
                nonce: Some(&s.nonce),
                signature: Some(&s.signature),
            };
            verify_once(
                &guard,
                key.as_bytes(),
                "POST",
                "/trigger",
                &received,
                &body,
                NOW,
            )
            .unwrap();
        });
        println!("| sign, {size} B body | {sign:.2} µs |");
        println!("| verify + replay check, {size} B body | {check:.2} µs |");
    }
    let derive = per_op(n, |i| {
        black_box(app_secret(
            &key,
            if i % 2 == 0 { "shop" } else { "billing" },
        ));
    });
    println!("| derive an app's key | {derive:.2} µs |");
    println!("{memory}");
}
