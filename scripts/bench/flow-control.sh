#!/usr/bin/env bash
# SPEC §7's flow-control figure (docs/benchmarks.md, "Flow control"): the load bench's
# sustained sweep at one rate, payloads spread over KEYS customers, with the job limiting
# each customer (`concurrency` 8 at once and `rate_limit` 50/s, both per `/customer`:
# `ROTA_BENCH_LIMITS=1`) and without, interleaved (scripts/bench/interleaved.sh).
#
#   scripts/bench/flow-control.sh
#   RATE=5000 KEYS=1000 SECONDS_EACH=60 ROUNDS=3 scripts/bench/flow-control.sh
export ROTA_BENCH_KEYS=${KEYS:-1000}
exec "$(dirname "$0")/interleaved.sh" flow-control ROTA_BENCH_LIMITS
