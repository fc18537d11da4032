/*
 * echo: shows a plugin everything Rota hands it.
 *
 * Prints its argv (the plugin name, then the job's params split like a shell would),
 * the ROTA_* environment variables it sees (and TRACEPARENT, the run's span, when the node
 * exports traces; and how many others there are: none under Rota, whose sandbox passes no
 * other environment), the parsed context from rota.h, and
 * then echoes its stdin (the task's payload or the job's params) to stdout line by line.
 * Exits 0. Build: `clang --target=wasm32-wasi -O2 -I ../../sdk/c -o echo.wasm echo.c`.
 */
#include <string.h>

#include "rota.h"

extern char **environ;

int main(int argc, char **argv) {
    size_t len, start, i, lines = 0;
    int others = 0;
    char **e;
    char *payload;
    rota_context_t ctx = rota_context();
    const char *params = rota_params();

    rota_log("argc = %d", argc);
    for (i = 0; i < (size_t)argc; i++) rota_log("argv[%zu] = %s", i, argv[i]);

    for (e = environ; e != NULL && *e != NULL; e++) {
        if (strncmp(*e, "ROTA_", 5) == 0 || strncmp(*e, "TRACEPARENT=", 12) == 0)
            rota_log("env %s", *e);
        else others++;
    }
    rota_log("env: %d other variable%s", others, others == 1 ? "" : "s");

    rota_log("context: job %lld (%s) run %lld attempt %u shard %u/%u scheduled_at %lld",
             ctx.job_id, ctx.job_name, ctx.run_id, ctx.attempt, ctx.shard_index,
             ctx.shard_total, ctx.scheduled_at);
    if (ctx.has_task_id) rota_log("context: task %lld", ctx.task_id);
    rota_log("params: %s", params != NULL ? params : "(none)");

    payload = rota_payload(&len);
    rota_log("stdin: %zu bytes", len);
    /* Line by line; a final line without a newline is echoed too. */
    for (start = 0, i = 0; i <= len; i++) {
        if (i == len || payload[i] == '\n') {
            if (i == len && i == start) break;
            fwrite(payload + start, 1, i - start, stdout);
            fputc('\n', stdout);
            lines++;
            start = i + 1;
        }
    }
    rota_log("stdin: %zu line%s echoed", lines, lines == 1 ? "" : "s");
    free(payload);
    return 0;
}
