#!/usr/bin/env bash
# SPEC §7's flow-control figure (docs/benchmarks.md, "Flow control"): the load bench's
# sustained sweep (rota/benches/load.rs: real `rota server` and `rota executor` running
# `hello`, on the private MariaDB) at one rate, payloads spread over KEYS customers, with
# the job limiting each customer (`concurrency` 8 at once and `rate_limit` 50/s, both per
# `/customer`) and without, interleaved, ROUNDS times; then the medians (min–max).
#
#   scripts/bench/flow-control.sh
#   RATE=5000 KEYS=1000 SECONDS_EACH=60 ROUNDS=3 scripts/bench/flow-control.sh
#
# Output: stdout and $OUT (default /tmp/rota-flow-<time>.md). Run on a quiet machine.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
RATE=${RATE:-5000}
KEYS=${KEYS:-1000}
SECONDS_EACH=${SECONDS_EACH:-60}
ROUNDS=${ROUNDS:-3}
DIR=${ROTA_BENCH_MARIADB_DIR:-/tmp/rota-bench-mariadb}
PORT=${ROTA_BENCH_MARIADB_PORT:-3307}
OUT=${OUT:-/tmp/rota-flow-$(date +%Y%m%d-%H%M%S).md}
exec > >(tee "$OUT") 2>&1

echo "# rota flow-control benchmark, $(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD)"
# Built once and copied: what runs is this commit's, even if the tree changes meanwhile.
KEEP=$(mktemp -d)
cargo build --release --locked -q -p rota --bin rota
cp "${CARGO_TARGET_DIR:-$ROOT/target}/release/rota" "$KEEP/rota"
bench=$(cargo bench --locked -q -p rota --bench load --no-run --message-format=json 2>/dev/null |
    python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "load" and m.get("executable"):
        print(m["executable"])')
cp "$bench" "$KEEP/load-bench"
[ -f plugins/target/hello.wasm ] || plugins/build.sh >/dev/null
export ROTA_BIN="$KEEP/rota" ROTA_BENCH_PLUGIN="$ROOT/plugins/target/hello.wasm"
export ROTA_BENCH_RATES=$RATE ROTA_BENCH_SECONDS=$SECONDS_EACH ROTA_BENCH_KEYS=$KEYS
scripts/bench/mariadb-instance.sh start >/dev/null
export ROTA_BENCH_MARIADB_PID=$(cat "$DIR/mariadbd.pid")
export ROTA_BENCH_MYSQL_URL="mysql://root@127.0.0.1:$PORT/rota_bench"
RAW=$(mktemp --suffix .md)
for round in $(seq 1 "$ROUNDS"); do
    echo -e "\n## Round $round of $ROUNDS, $(date -u +%H:%MZ)"
    for limits in 0 1; do
        scripts/bench/mariadb-instance.sh reset-db >/dev/null
        (cd rota && ROTA_BENCH_LIMITS=$limits "$KEEP/load-bench" sweep --bench) | tee -a "$RAW"
    done
done
echo -e "\n## Medians of $ROUNDS rounds (min–max)"
python3 scripts/bench/medians.py "$RAW"
