#!/usr/bin/env bash
# The published load figures (docs/benchmarks.md, "What users run"): real `rota server`
# and `rota executor` processes running the `hello` example, on a private MariaDB
# (scripts/bench/mariadb-instance.sh, port 3307) and on SQLite.
#
#   scripts/bench/load.sh                       # everything below
#   CASES="sweep" BACKENDS="mysql" NODES="1" scripts/bench/load.sh
#
#   CASES     sweep burst floor   (floor: the burst with a silent no-op plugin, labelled so)
#   BACKENDS  mysql sqlite
#   NODES     1 2 3               (scheduler nodes; SQLite runs one)
#   ROUNDS    how many times to run it all (3); each table is then printed again as
#             the median (min–max) of the rounds (scripts/bench/medians.py): what is published
#   ROTA_BENCH_RATES, ROTA_BENCH_SECONDS, ROTA_BENCH_TASKS: see rota/benches/load.rs.
# Output: stdout and $OUT (default /tmp/rota-load-<time>.md). Run on a quiet machine.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
CASES=${CASES:-"sweep burst floor"}
BACKENDS=${BACKENDS:-"mysql sqlite"}
NODES=${NODES:-"1 2 3"}
ROUNDS=${ROUNDS:-3}
PORT=${ROTA_BENCH_MARIADB_PORT:-3307}
DIR=${ROTA_BENCH_MARIADB_DIR:-/tmp/rota-bench-mariadb}
OUT=${OUT:-/tmp/rota-load-$(date +%Y%m%d-%H%M%S).md}
exec > >(tee "$OUT") 2>&1

echo "# rota load benchmarks, $(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD)"
cargo build --release --locked -p rota --bin rota
cargo bench --locked -p rota --bench load --no-run
[ -f plugins/target/hello.wasm ] || plugins/build.sh >/dev/null
export ROTA_BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release/rota"
noop=$(mktemp --suffix .wat)
RAW=$(mktemp --suffix .md) # the tables alone, for the medians
echo '(module (memory (export "memory") 1) (func (export "_start")))' >"$noop"

case " $BACKENDS " in *" mysql "*)
    scripts/bench/mariadb-instance.sh start >/dev/null
    export ROTA_BENCH_MARIADB_PID=$(cat "$DIR/mariadbd.pid")
;; esac

run() { # backend nodes case [plugin]
    local backend=$1 nodes=$2 case=$3 plugin=${4:-$ROOT/plugins/target/hello.wasm}
    if [ "$backend" = mysql ]; then
        scripts/bench/mariadb-instance.sh reset-db >/dev/null
        export ROTA_BENCH_MYSQL_URL="mysql://root@127.0.0.1:$PORT/rota_bench"
    else
        unset ROTA_BENCH_MYSQL_URL
    fi
    ROTA_BENCH_NODES=$nodes ROTA_BENCH_PLUGIN=$plugin \
        cargo bench --locked -q -p rota --bench load -- "$case" | tee -a "$RAW"
}

for round in $(seq 1 "$ROUNDS"); do
    echo -e "\n## Round $round of $ROUNDS, $(date -u +%H:%MZ)"
    for backend in $BACKENDS; do
        for case in $CASES; do
            case $case in
            sweep)
                for n in $NODES; do
                    [ "$backend" = sqlite ] && [ "$n" != 1 ] && continue
                    run "$backend" "$n" sweep
                done
                ;;
            burst) run "$backend" 1 burst ;;
            floor) run "$backend" 1 burst "$noop" ;;
            esac
        done
    done
done
rm -f "$noop"
if [ "$ROUNDS" -gt 1 ]; then
    echo -e "\n## Medians of $ROUNDS rounds (min–max), $(date -u +%Y-%m-%dT%H:%MZ)"
    python3 "$ROOT/scripts/bench/medians.py" "$RAW"
fi
rm -f "$RAW"
