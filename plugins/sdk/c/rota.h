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

/*
 * Host capabilities: the optional `rota` import module (plugins/README.md, "Host
 * imports"). HTTP to the job's allow-list, the app's secrets, the job's key-value state.
 * A plugin that calls none of these imports nothing from `rota`. Every function returns a
 * length or status (>= 0) or a negative code below; after a negative code, the message
 * Rota gives is read with rota_result() like any result. Outside a WASI build these
 * return ROTA_UNAVAILABLE.
 */
#define ROTA_DENIED (-1)      /* not on the job's allow-list */
#define ROTA_NOT_FOUND (-2)   /* no such key, secret or header */
#define ROTA_TOO_LARGE (-3)   /* a body, key or value over its limit */
#define ROTA_INVALID (-4)     /* a malformed argument (URL, method, header) */
#define ROTA_FAILED (-5)      /* the request failed (connection, timeout, scheduler) */
#define ROTA_UNAVAILABLE (-100) /* not running inside Rota */

#if defined(__wasm__)
#define ROTA_IMPORT(name) __attribute__((import_module("rota"), import_name(name)))
int rota_http_request_raw(const char *method, size_t method_len, const char *url, size_t url_len,
                          const char *headers, size_t headers_len, const void *body,
                          size_t body_len) ROTA_IMPORT("http_request");
int rota_http_header_raw(const char *name, size_t len) ROTA_IMPORT("http_header");
int rota_secret_get_raw(const char *name, size_t len) ROTA_IMPORT("secret_get");
int rota_kv_get_raw(const char *key, size_t len) ROTA_IMPORT("kv_get");
int rota_kv_set_raw(const char *key, size_t key_len, const void *value, size_t value_len)
    ROTA_IMPORT("kv_set");
int rota_kv_delete_raw(const char *key, size_t len) ROTA_IMPORT("kv_delete");
int rota_result_read_raw(void *buf, size_t cap) ROTA_IMPORT("result_read");
int rota_output_set_raw(const char *value, size_t len) ROTA_IMPORT("output_set");
#else
static inline int rota_http_request_raw(const char *m, size_t ml, const char *u, size_t ul,
                                        const char *h, size_t hl, const void *b, size_t bl) {
    (void)m; (void)ml; (void)u; (void)ul; (void)h; (void)hl; (void)b; (void)bl;
    return ROTA_UNAVAILABLE;
}
static inline int rota_http_header_raw(const char *n, size_t l) { (void)n; (void)l; return ROTA_UNAVAILABLE; }
static inline int rota_secret_get_raw(const char *n, size_t l) { (void)n; (void)l; return ROTA_UNAVAILABLE; }
static inline int rota_kv_get_raw(const char *k, size_t l) { (void)k; (void)l; return ROTA_UNAVAILABLE; }
static inline int rota_kv_set_raw(const char *k, size_t kl, const void *v, size_t vl) {
    (void)k; (void)kl; (void)v; (void)vl;
    return ROTA_UNAVAILABLE;
}
static inline int rota_kv_delete_raw(const char *k, size_t l) { (void)k; (void)l; return ROTA_UNAVAILABLE; }
static inline int rota_result_read_raw(void *b, size_t c) { (void)b; (void)c; return 0; }
static inline int rota_output_set_raw(const char *v, size_t l) { (void)v; (void)l; return ROTA_UNAVAILABLE; }
#endif

/*
 * The last call's result (a response body, a value, a secret, or an error's message) as a
 * malloc'd, NUL-terminated buffer; its length in *len when len is not NULL. Free it.
 */
static inline char *rota_result(size_t *len) {
    int total = rota_result_read_raw(NULL, 0);
    size_t n = total > 0 ? (size_t)total : 0;
    char *buf = (char *)malloc(n + 1);
    if (buf == NULL) rota_fail("rota_result: out of memory");
    if (n > 0) rota_result_read_raw(buf, n);
    buf[n] = '\0';
    if (len != NULL) *len = n;
    return buf;
}

/*
 * An HTTP request to a URL on the job's allow-list. headers: "Name: value" lines joined by
 * "\n" (or NULL). Returns the status (100..599) or a negative code; the response body is
 * then read with rota_result().
 */
static inline int rota_http_request(const char *method, const char *url, const char *headers,
                                    const void *body, size_t body_len) {
    if (headers == NULL) headers = "";
    return rota_http_request_raw(method, strlen(method), url, strlen(url), headers,
                                 strlen(headers), body, body_len);
}

/* A secret of the job's app: its length (read it with rota_result()), or ROTA_NOT_FOUND. */
static inline int rota_secret_get(const char *name) {
    return rota_secret_get_raw(name, strlen(name));
}

/* A key of the job's state: the value's length (read it with rota_result()), or
 * ROTA_NOT_FOUND. */
static inline int rota_kv_get(const char *key) { return rota_kv_get_raw(key, strlen(key)); }

/* Sets a key of the job's state (keys up to 256 bytes, values up to 64 KiB): 0 or a code. */
static inline int rota_kv_set(const char *key, const void *value, size_t len) {
    return rota_kv_set_raw(key, strlen(key), value, len);
}

/* Deletes a key of the job's state: 0 or a code. */
static inline int rota_kv_delete(const char *key) {
    return rota_kv_delete_raw(key, strlen(key));
}

/* Sets this run's output (at most 64 KiB of UTF-8; the last call wins): in a workflow, what
 * the steps after this one receive (as JSON if it parses as JSON, else as a string). 0 or a
 * code. */
static inline int rota_output_set(const char *output) {
    return rota_output_set_raw(output, strlen(output));
}

#endif /* ROTA_H */
