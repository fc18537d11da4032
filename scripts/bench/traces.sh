#!/usr/bin/env bash
# SPEC §12's tracing overhead (docs/benchmarks.md, "Traces"): the load bench's sustained
# sweep at one rate with every process exporting OpenTelemetry traces, sampling all, to a
# collector double in the bench (`ROTA_BENCH_TRACES=1`), against the same load without,
# interleaved (scripts/bench/interleaved.sh).
#
#   scripts/bench/traces.sh
#   RATE=5000 SECONDS_EACH=60 ROUNDS=3 scripts/bench/traces.sh
exec "$(dirname "$0")/interleaved.sh" traces ROTA_BENCH_TRACES
