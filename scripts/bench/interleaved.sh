#!/usr/bin/env bash
# The load bench's sustained sweep (rota/benches/load.rs: real `rota server` and `rota
# executor` running `hello`, on the private MariaDB) at one rate, with the bench setting
# SWITCH off (0) and on (1) in turn, ROUNDS times, the database reset before each run; then
# the medians (min–max). What SPEC §7 compares one setting by: scripts/bench/traces.sh,
# scripts/bench/flow-control.sh.
#
#   scripts/bench/interleaved.sh NAME SWITCH    (e.g. traces ROTA_BENCH_TRACES)
#   RATE=5000 SECONDS_EACH=60 ROUNDS=3 scripts/bench/interleaved.sh …
#
# Other ROTA_BENCH_* settings in the environment reach the bench. Output: stdout and $OUT
# (default /tmp/rota-NAME-<time>.md). Run on a quiet machine.
set -euo pipefail
NAME=${1:?usage: interleaved.sh NAME SWITCH}
SWITCH=${2:?usage: interleaved.sh NAME SWITCH}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
RATE=${RATE:-5000}
SECONDS_EACH=${SECONDS_EACH:-60}
ROUNDS=${ROUNDS:-3}
DIR=${ROTA_BENCH_MARIADB_DIR:-/tmp/rota-bench-mariadb}
PORT=${ROTA_BENCH_MARIADB_PORT:-3307}
OUT=${OUT:-/tmp/rota-$NAME-$(date +%Y%m%d-%H%M%S).md}
exec > >(tee "$OUT") 2>&1

echo "# rota $NAME benchmark ($SWITCH 0 and 1), $(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD)"
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
export ROTA_BENCH_RATES=$RATE ROTA_BENCH_SECONDS=$SECONDS_EACH
scripts/bench/mariadb-instance.sh start >/dev/null
export ROTA_BENCH_MARIADB_PID=$(cat "$DIR/mariadbd.pid")
export ROTA_BENCH_MYSQL_URL="mysql://root@127.0.0.1:$PORT/rota_bench"
RAW=$(mktemp --suffix .md)
for round in $(seq 1 "$ROUNDS"); do
    echo -e "\n## Round $round of $ROUNDS, $(date -u +%H:%MZ)"
    for on in 0 1; do
        scripts/bench/mariadb-instance.sh reset-db >/dev/null
        (cd rota && env "$SWITCH=$on" "$KEEP/load-bench" sweep --bench) | tee -a "$RAW"
    done
done
echo -e "\n## Medians of $ROUNDS rounds (min–max)"
python3 scripts/bench/medians.py "$RAW"
