#!/usr/bin/env bash
# The published workflow figures (docs/benchmarks.md, "Workflows"; SPEC §7): real
# `rota server` and `rota executor` processes running the relay step
# (executor/tests/fixtures/relay.wat) on a private MariaDB (scripts/bench/mariadb-instance.sh,
# port 3307), the database reset before each case.
#
#   scripts/bench/workflows.sh                  # handoff, diamonds, map; ROUNDS times
#   CASES="handoff" ROUNDS=5 scripts/bench/workflows.sh
#
#   CASES     handoff diamonds map              (rota/benches/workflows.rs says what each is)
#   ROUNDS    how many times (3); the tables are then printed again as the median
#             (min–max) of the rounds (scripts/bench/medians.py): what is published
#   ROTA_BENCH_RATE, ROTA_BENCH_SECONDS, ROTA_BENCH_INSTANCES, ROTA_BENCH_ELEMENTS: the
#             bench's own.
# Output: stdout and $OUT (default /tmp/rota-workflows-<time>.md). Run on a quiet machine.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
CASES=${CASES:-"handoff diamonds map"}
ROUNDS=${ROUNDS:-3}
PORT=${ROTA_BENCH_MARIADB_PORT:-3307}
DIR=${ROTA_BENCH_MARIADB_DIR:-/tmp/rota-bench-mariadb}
OUT=${OUT:-/tmp/rota-workflows-$(date +%Y%m%d-%H%M%S).md}
exec > >(tee "$OUT") 2>&1

echo "# rota workflow benchmarks, $(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD)"
# Built once and copied: what runs is this commit's, even if the tree changes meanwhile.
KEEP=$(mktemp -d)
cargo build --release --locked -q -p rota --bin rota
cp "${CARGO_TARGET_DIR:-$ROOT/target}/release/rota" "$KEEP/rota"
bench=$(cargo bench --locked -q -p rota --bench workflows --no-run --message-format=json 2>/dev/null |
    python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "workflows" and m.get("executable"):
        print(m["executable"])')
cp "$bench" "$KEEP/workflows-bench"
export ROTA_BIN="$KEEP/rota"
RAW=$(mktemp --suffix .md) # the tables alone, for the medians
scripts/bench/mariadb-instance.sh start >/dev/null
export ROTA_BENCH_MARIADB_PID=$(cat "$DIR/mariadbd.pid")
export ROTA_BENCH_MYSQL_URL="mysql://root@127.0.0.1:$PORT/rota_bench"

for round in $(seq 1 "$ROUNDS"); do
    echo -e "\n## Round $round of $ROUNDS, $(date -u +%H:%MZ)"
    for case in $CASES; do
        scripts/bench/mariadb-instance.sh reset-db >/dev/null
        (cd rota && "$KEEP/workflows-bench" "$case" --bench) | tee -a "$RAW"
    done
done

echo -e "\n## Medians of $ROUNDS rounds (min–max)"
python3 scripts/bench/medians.py "$RAW"
