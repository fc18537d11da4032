//! hello: the smallest useful Rota plugin.
//!
//! Logs who it is ("hello from <job> run <id> attempt <n>") and how long its payload is,
//! then exits 0 (succeeded). Build: `../../build.sh` (→ `plugins/target/hello.wasm`).

#[path = "../../sdk/rust/rota.rs"]
mod rota;

fn main() {
    let ctx = rota::context();
    let payload = rota::payload();
    rota::log(&format!(
        "hello from {} run {} attempt {}",
        ctx.job_name, ctx.run_id, ctx.attempt
    ));
    if let Some(task_id) = ctx.task_id {
        rota::log(&format!("task {}", task_id));
    }
    if ctx.shard_total > 1 {
        rota::log(&format!("shard {} of {}", ctx.shard_index, ctx.shard_total));
    }
    rota::log(&format!("payload: {} bytes", payload.len()));
}
