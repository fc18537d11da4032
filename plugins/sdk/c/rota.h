/*
 * rota.h: Rota guest helper for C plugins (header-only, no dependencies beyond libc).
 *
 *     #include "rota.h"    (build with -I path/to/plugins/sdk/c)
 *
 * It only wraps the plugin contract (plugins/README.md): stdin is the run's input, the
 * ROTA_* environment variables describe the run, stdout/stderr are its log and the exit
 * status is its outcome. Nothing here is required: a plain C program that reads stdin
 * and prints is a plugin too. Build for WASI with `clang --target=wasm32-wasi -O2`; the
 * header also builds for the host (C99 or later, or C++), so logic can be tested natively.
 */
#ifndef ROTA_H
#define ROTA_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__GNUC__) || defined(__clang__)
#define ROTA_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))
#define ROTA_NORETURN __attribute__((noreturn))
#define ROTA_UNUSED __attribute__((unused))
#else
#define ROTA_PRINTF(fmt, args)
#define ROTA_NORETURN
#define ROTA_UNUSED
#endif

/*
 * Who and what this run is: the ROTA_* environment of the run. Outside Rota (a variable
 * missing or unparsable) each field has a neutral default: ids and scheduled_at 0,
 * job_name "", has_task_id 0, attempt 1, shard_index 0, shard_total 1.
 */
typedef struct rota_context_s {
    long long job_id;       /* ROTA_JOB_ID */
    const char *job_name;   /* ROTA_JOB_NAME (never NULL; points into the environment) */
    long long run_id;       /* ROTA_RUN_ID: this attempt's run */
    int has_task_id;        /* 1 when the run belongs to a task */
    long long task_id;      /* ROTA_TASK_ID, valid when has_task_id */
    unsigned attempt;       /* ROTA_ATTEMPT: 1 for the first attempt, 2 for the first retry */
    long long scheduled_at; /* ROTA_SCHEDULED_AT: due time, ms since the Unix epoch */
    unsigned shard_index;   /* ROTA_SHARD_INDEX: 0-based; 0 unless sharding broadcast */
    unsigned shard_total;   /* ROTA_SHARD_TOTAL: 1 unless sharding broadcast */
} rota_context_t;

/* Parses environment variable `name` as a decimal integer into *out; 0 if absent/invalid. */
static inline int rota_env_ll(const char *name, long long *out) {
    const char *s = getenv(name);
    char *end = NULL;
    long long v;
    if (s == NULL || *s == '\0') return 0;
    v = strtoll(s, &end, 10);
    if (end == s || *end != '\0') return 0;
    *out = v;
    return 1;
}

/* The run's context, from the ROTA_* environment variables. */
static inline rota_context_t rota_context(void) {
    rota_context_t c;
    long long v;
    const char *name = getenv("ROTA_JOB_NAME");
    memset(&c, 0, sizeof c);
    c.job_name = name != NULL ? name : "";
    c.attempt = 1;
    c.shard_total = 1;
    if (rota_env_ll("ROTA_JOB_ID", &v)) c.job_id = v;
    if (rota_env_ll("ROTA_RUN_ID", &v)) c.run_id = v;
    if (rota_env_ll("ROTA_TASK_ID", &v)) { c.task_id = v; c.has_task_id = 1; }
    if (rota_env_ll("ROTA_ATTEMPT", &v) && v >= 0) c.attempt = (unsigned)v;
    if (rota_env_ll("ROTA_SCHEDULED_AT", &v)) c.scheduled_at = v;
    if (rota_env_ll("ROTA_SHARD_INDEX", &v) && v >= 0) c.shard_index = (unsigned)v;
    if (rota_env_ll("ROTA_SHARD_TOTAL", &v) && v > 0) c.shard_total = (unsigned)v;
    return c;
}

/* The job's params (ROTA_PARAMS) verbatim, or NULL when the job has none. argv holds the
 * same params split like a shell would (argv[1..]). */
static inline const char *rota_params(void) {
    const char *p = getenv("ROTA_PARAMS");
    return (p != NULL && *p != '\0') ? p : NULL;
}

/* Writes a printf-style message and a newline to stdout: one line of the run's log. */
static inline ROTA_PRINTF(1, 2) void rota_log(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stdout, fmt, ap);
    va_end(ap);
    fputc('\n', stdout);
}

/* Ends the run with `code` (0 = succeeded, anything else = failed), flushing output. */
static inline ROTA_NORETURN void rota_exit(int code) {
    fflush(stdout);
    fflush(stderr);
    exit(code);
}

/* Ends the run as failed: a printf-style message and a newline to stderr, exit status 1.
 * The job's retry policy decides whether another attempt follows. */
static inline ROTA_PRINTF(1, 2) ROTA_NORETURN void rota_fail(const char *fmt, ...) {
    va_list ap;
    fflush(stdout);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    rota_exit(1);
}

/* Ends the run as succeeded (exit status 0). Returning 0 from main does the same. */
static inline ROTA_NORETURN void rota_succeed(void) {
    rota_exit(0);
}

/*
 * The run's input: all of stdin (a delayed task's payload, or the job's params for a
 * scheduled or manual run) in a malloc'ed, NUL-terminated buffer the caller frees. Its
 * length (which excludes the added NUL; the payload itself may contain NULs) is stored
 * in *len when len is not NULL. Fails the run if stdin cannot be read or memory runs out.
 */
static inline char *rota_payload(size_t *len) {
    size_t cap = 4096, n = 0;
    char *buf = (char *)malloc(cap);
    if (buf == NULL) rota_fail("rota_payload: out of memory");
    for (;;) {
        size_t got;
        if (cap - n < 2) {
            char *bigger;
            if (cap > ((size_t)-1) / 2) { free(buf); rota_fail("rota_payload: payload too large"); }
            bigger = (char *)realloc(buf, cap * 2);
            if (bigger == NULL) { free(buf); rota_fail("rota_payload: out of memory"); }
            buf = bigger;
            cap *= 2;
        }
        got = fread(buf + n, 1, cap - n - 1, stdin);
        n += got;
        if (got == 0) {
            if (ferror(stdin)) { free(buf); rota_fail("rota_payload: cannot read stdin"); }
            break;
        }
    }
    buf[n] = '\0';
    if (len != NULL) *len = n;
    return buf;
}

#endif /* ROTA_H */
