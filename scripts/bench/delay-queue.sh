#!/usr/bin/env bash
# The delay-queue benchmarks of issue 4 at full size, on SQLite and on a private MariaDB:
# ingest (batch API), fire rate of tasks all due at one instant (+ statements per 1,000 fires
# on MariaDB), lateness at a steady rate (benches/lateness.rs). Run on a quiet machine.
#
#   scripts/bench/delay-queue.sh                 # everything, executor double
#   ROTA_BENCH_REAL_EXECUTOR=1 scripts/bench/delay-queue.sh   # fire with a real `rota executor`
#   CASES="fire" BACKENDS="mysql" scripts/bench/delay-queue.sh
#
# Sizes: ROTA_BENCH_TASKS is left to each bench's default (ingest 200,000; fire 100,000);
# lateness uses ROTA_BENCH_RATE (5,000/s) × ROTA_BENCH_SECONDS (10).
# PROFILE=dev runs debug builds (a smoke test with small sizes only).
# Each MariaDB case runs on a freshly recreated database rota_bench.
# Output: stdout and $OUT (default /tmp/rota-dq-<time>.md).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
CASES=${CASES:-"ingest fire lateness"}
BACKENDS=${BACKENDS:-"sqlite mysql"}
PORT=${ROTA_BENCH_MARIADB_PORT:-3307}
MYSQL_URL="mysql://root@127.0.0.1:$PORT/rota_bench"
OUT=${OUT:-/tmp/rota-dq-$(date +%Y%m%d-%H%M%S).md}
exec > >(tee "$OUT") 2>&1

cargo bench --profile "${PROFILE:-bench}" -p rota --bench delay_queue --bench lateness --no-run
if [ -n "${ROTA_BENCH_REAL_EXECUTOR:-}" ]; then
    cargo build --release -p rota --bin rota
    export ROTA_BENCH_EXECUTOR_BIN="$ROOT/target/release/rota"
fi
case " $BACKENDS " in *" mysql "*) scripts/bench/mariadb-instance.sh start >/dev/null ;; esac

echo "# delay-queue benchmarks, $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, commit $(git rev-parse --short HEAD)"
for backend in $BACKENDS; do
    for c in $CASES; do
        echo
        echo "## $c on $backend"
        echo
        if [ "$backend" = mysql ]; then
            scripts/bench/mariadb-instance.sh reset-db >/dev/null
            export ROTA_BENCH_MYSQL_URL=$MYSQL_URL
        else
            unset ROTA_BENCH_MYSQL_URL
        fi
        if [ "$c" = lateness ]; then
            cargo bench --profile "${PROFILE:-bench}" -q -p rota --bench lateness 2>&1 | grep -v '^\s*Running\|^\s*Finished\|^\s*Compiling'
        else
            cargo bench --profile "${PROFILE:-bench}" -q -p rota --bench delay_queue -- "$c" 2>&1 | grep -v '^\s*Running\|^\s*Finished\|^\s*Compiling'
        fi
    done
done
echo
echo "(written to $OUT)"
