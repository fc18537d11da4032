#!/usr/bin/env bash
# Two commits under the same load, interleaved: is B's tail (or cost) worse than A's?
#
#   scripts/bench/compare.sh A B [ROUNDS]        # e.g. scripts/bench/compare.sh 33bf2a2 main 4
#
# Builds `rota` of each commit apart (a git worktree each, built into this checkout's target
# directory so the dependencies build once; the binaries are kept as $WORK/rota-<sha>), then, for ROUNDS
# rounds (4), runs the same bench binary — the current checkout's `load` bench, `sweep`
# case — against each binary on a freshly reset private MariaDB
# (scripts/bench/mariadb-instance.sh), in alternating order (A B, B A, A B, …) so that a
# machine drifting over the hour favours neither. Prints every run's row and, per commit,
# the median and the spread (min–max) of p50, p99, p99.9, the executor's, the scheduler's
# and the database's CPU per task and the statements per 1,000 tasks.
#
# Environment: RATE (8000 tasks/s), SECONDS_PER_RUN (30), ROTA_COMPARE_DIR
# (/tmp/rota-compare), BUILD_ONLY=1 (build, run nothing: while the machine is busy), and
# the bench's own (ROTA_BENCH_*; see rota/benches/load.rs).
# Output: stdout and $OUT (default $WORK/compare-<time>.md). Run on a quiet machine.
set -euo pipefail
[ $# -ge 2 ] || { sed -n 2,19p "$0" >&2; exit 2; }
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
A=$(git rev-parse --short "$1")
B=$(git rev-parse --short "$2")
ROUNDS=${3:-4}
RATE=${RATE:-8000}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-30}
WORK=${ROTA_COMPARE_DIR:-/tmp/rota-compare}
PORT=${ROTA_BENCH_MARIADB_PORT:-3307}
DIR=${ROTA_BENCH_MARIADB_DIR:-/tmp/rota-bench-mariadb}
mkdir -p "$WORK"
OUT=${OUT:-$WORK/compare-$(date +%Y%m%d-%H%M%S).md}
ROWS="$WORK/rows-$$.tsv"
: >"$ROWS"
exec > >(tee "$OUT") 2>&1

build() { # commit → $WORK/rota-<commit>
    local sha=$1 tree="$WORK/tree-$1"
    [ -x "$WORK/rota-$sha" ] && return
    [ -d "$tree" ] || git worktree add --detach "$tree" "$sha" >/dev/null
    (cd "$tree" && CARGO_TARGET_DIR="$ROOT/target" cargo build --release --locked -q -p rota --bin rota)
    cp "$ROOT/target/release/rota" "$WORK/rota-$sha"
}

echo "# compare $A vs $B: $ROUNDS rounds at $RATE/s, $SECONDS_PER_RUN s each, $(date -u +%Y-%m-%dT%H:%MZ), bench of $(git rev-parse --short HEAD)"
build "$A"
build "$B"
cargo bench --locked -q -p rota --bench load --no-run 2>/dev/null
[ -f plugins/target/hello.wasm ] || plugins/build.sh >/dev/null
[ "${BUILD_ONLY:-}" = 1 ] && exit 0
scripts/bench/mariadb-instance.sh start >/dev/null
export ROTA_BENCH_MARIADB_PID=$(cat "$DIR/mariadbd.pid")
export ROTA_BENCH_MYSQL_URL="mysql://root@127.0.0.1:$PORT/rota_bench"

run() { # commit round
    scripts/bench/mariadb-instance.sh reset-db >/dev/null
    local row
    row=$(ROTA_BIN="$WORK/rota-$1" ROTA_BENCH_RATES=$RATE ROTA_BENCH_SECONDS=$SECONDS_PER_RUN \
        cargo bench --locked -q -p rota --bench load -- sweep 2>/dev/null | grep -E "^\| $RATE \|")
    echo "$1 round $2: $row"
    printf '%s\t%s\n' "$1" "$row" >>"$ROWS"
}

for round in $(seq 1 "$ROUNDS"); do
    if [ $((round % 2)) = 1 ]; then run "$A" "$round"; run "$B" "$round"; else run "$B" "$round"; run "$A" "$round"; fi
done

python3 - "$ROWS" "$A" "$B" <<'EOF'
import statistics, sys
rows, order = {}, sys.argv[2:]
for line in open(sys.argv[1]):
    sha, row = line.rstrip("\n").split("\t")
    cells = [c.strip() for c in row.strip("|").split("|")]
    rows.setdefault(sha, []).append(cells)
# Columns of the sweep's table (rota/benches/load.rs).
cols = [("p50 ms", 2), ("p99 ms", 3), ("p99.9 ms", 4), ("executor µs/task", 7),
        ("scheduler µs/task", 8), ("database µs/task", 9), ("statements /1,000", 10)]
def num(cell):
    try:
        return float(cell.split()[0])
    except (ValueError, IndexError):
        return None
print("\n| commit | runs | " + " | ".join(name + " median (min–max)" for name, _ in cols) + " |")
print("|---" * (len(cols) + 2) + "|")
for sha in order:
    out = []
    for _, i in cols:
        xs = [x for x in (num(r[i]) for r in rows.get(sha, [])) if x is not None]
        out.append(f"{statistics.median(xs):g} ({min(xs):g}–{max(xs):g})" if xs else "–")
    print(f"| {sha} | {len(rows.get(sha, []))} | " + " | ".join(out) + " |")
EOF
rm -f "$ROWS"
