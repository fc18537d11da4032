/*
 * hello-c: the smallest useful Rota plugin, in C — the Rust `hello` line for line.
 *
 * Logs who it is ("hello from <job> run <id> attempt <n>", plus the task and shard when
 * there are any) and how long its payload is, then exits 0 (succeeded).
 * Build: `../../build.sh` (-> plugins/target/hello-c.wasm and hello-c.component.wasm), or
 * `clang --target=wasm32-wasi -O2 -I ../../sdk/c -o hello-c.wasm hello-c.c`.
 */
#include "rota.h"

int main(void) {
    size_t len;
    rota_context_t ctx = rota_context();
    char *payload = rota_payload(&len);

    rota_log("hello from %s run %lld attempt %u", ctx.job_name, ctx.run_id, ctx.attempt);
    if (ctx.has_task_id) rota_log("task %lld", ctx.task_id);
    if (ctx.shard_total > 1) rota_log("shard %u of %u", ctx.shard_index, ctx.shard_total);
    rota_log("payload: %zu bytes", len);
    free(payload);
    return 0;
}
