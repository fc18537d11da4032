#!/usr/bin/env bash
# 10 million pending tasks in MySQL/MariaDB: the scheduler's memory and the scan's cost.
#
#   scripts/bench/ten-million.sh            # full size (needs target/release/rota)
#   ROTA_BENCH_TASKS=20000 ROTA_BENCH_RUN_S=15 ROTA_BIN=target/debug/rota scripts/bench/ten-million.sh   # smoke test
#
# 1. Starts the private MariaDB (scripts/bench/mariadb-instance.sh, port 3307), recreates the
#    database $ROTA_BENCH_DB (rota_bench_10m), starts `rota server` on it (migrations) and a real
#    `rota executor`, uploads a no-op plugin and creates a job through the API, and measures an
#    idle server on the empty table ($ROTA_BENCH_BASELINE_S = 15 s) as the baseline.
# 2. Stops both, loads $ROTA_BENCH_TASKS (10,000,000) pending tasks of that job with direct SQL
#    (INSERT … SELECT from MariaDB's sequence engine, 1,000,000 rows per statement), due from
#    +1 h spread evenly over 30 days, with a small payload; bumps the task id sequence.
# 3. Adds $ROTA_BENCH_SOON (5,000) tasks due over the next minute, starts server and executor
#    again and lets them run $ROTA_BENCH_RUN_S (60) s, sampling the server's VmRSS every second
#    and /metrics every 10 s (rota_scan_seconds sum/count → mean scan time per interval).
# 4. Prints max and final RSS, the scan means (baseline on the empty table vs. 10 M rows),
#    how many of the soon-due tasks succeeded, and EXPLAIN / ANALYZE of the scan's claim query
#    (the SELECT of Store::claim_due in scheduler/src/store.rs).
#
# Output goes to stdout and to $ROTA_BENCH_OUT (default /tmp/rota-10m-<time>/).
# The MariaDB is left running (stop it with scripts/bench/mariadb-instance.sh stop).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TASKS=${ROTA_BENCH_TASKS:-10000000}
SOON=${ROTA_BENCH_SOON:-5000}
RUN_S=${ROTA_BENCH_RUN_S:-60}
BASELINE_S=${ROTA_BENCH_BASELINE_S:-15}
CHUNK=${ROTA_BENCH_CHUNK:-1000000}
BIN=${ROTA_BIN:-$ROOT/target/release/rota}
MDIR=${ROTA_BENCH_MARIADB_DIR:-/tmp/rota-bench-mariadb}
PORT=${ROTA_BENCH_MARIADB_PORT:-3307}
DB=${ROTA_BENCH_DB:-rota_bench_10m}
SPORT=${ROTA_BENCH_SERVER_PORT:-18080}
EPORT=${ROTA_BENCH_EXECUTOR_PORT:-18081}
OUT=${ROTA_BENCH_OUT:-/tmp/rota-10m-$(date +%Y%m%d-%H%M%S)}
SECRET=bench-secret-0123456789
TOKEN=bench-token
APP=bench10m
JOB=ten-million
URL="mysql://root@127.0.0.1:$PORT/$DB"
API="http://127.0.0.1:$SPORT"

[ -x "$BIN" ] || { echo "no $BIN: cargo build --release -p rota --bin rota (or set ROTA_BIN)" >&2; exit 1; }
mkdir -p "$OUT"
exec > >(tee "$OUT/report.txt") 2>&1

sql() { mariadb --no-defaults -h127.0.0.1 -P"$PORT" -uroot "$DB" "$@"; }
now_ms() { echo $(($(date +%s%N) / 1000000)); }
api() { # METHOD PATH [curl args…]
    local m=$1 p=$2
    shift 2
    curl -fsS -X "$m" -H "authorization: Bearer $TOKEN" "$API$p" "$@"
}
rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
# rota_scan_seconds_sum and _count from /metrics, "sum count".
scan_metrics() {
    curl -fsS -H "authorization: Bearer $TOKEN" "$API/metrics" | awk '
        /^rota_scan_seconds_sum/ {s=$2} /^rota_scan_seconds_count/ {c=$2}
        END {printf "%s %s\n", (s==""?0:s), (c==""?0:c)}'
}

SERVER_PID=
EXECUTOR_PID=
start_nodes() { # TAG
    ROTA_EXECUTOR_SECRET=$SECRET ROTA_API_TOKEN=$TOKEN RUST_LOG=${RUST_LOG:-warn} \
        "$BIN" server --database-url "$URL" --listen "127.0.0.1:$SPORT" \
        --node-name "bench10m-$1-$$" >"$OUT/server-$1.log" 2>&1 &
    SERVER_PID=$!
    for _ in $(seq 1 240); do
        curl -fsS "$API/healthz" >/dev/null 2>&1 && break
        kill -0 "$SERVER_PID" 2>/dev/null || { echo "server exited; see $OUT/server-$1.log" >&2; tail -20 "$OUT/server-$1.log" >&2; exit 1; }
        sleep 0.25
    done
    curl -fsS "$API/healthz" >/dev/null || { echo "server not healthy" >&2; exit 1; }
    ROTA_EXECUTOR_SECRET=$SECRET RUST_LOG=${RUST_LOG:-warn} \
        "$BIN" executor --scheduler "$API" --app "$APP" --listen "127.0.0.1:$EPORT" \
        --data-dir "$OUT/executor-data" >"$OUT/executor-$1.log" 2>&1 &
    EXECUTOR_PID=$!
    for _ in $(seq 1 120); do
        api GET "/api/v1/executors" 2>/dev/null | grep -q "127.0.0.1:$EPORT" && return 0
        kill -0 "$EXECUTOR_PID" 2>/dev/null || { echo "executor exited; see $OUT/executor-$1.log" >&2; tail -20 "$OUT/executor-$1.log" >&2; exit 1; }
        sleep 0.25
    done
    echo "the executor did not register" >&2
    exit 1
}
stop_pid() {
    local pid=$1
    [ -n "$pid" ] || return 0
    kill "$pid" 2>/dev/null || return 0
    for _ in $(seq 1 120); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.25; done
    kill -9 "$pid" 2>/dev/null || true
}
stop_nodes() {
    stop_pid "$EXECUTOR_PID"; EXECUTOR_PID=
    stop_pid "$SERVER_PID"; SERVER_PID=
}
trap stop_nodes EXIT

echo "== ten million pending tasks: $TASKS tasks, $SOON due within a minute, $RUN_S s run; binary $BIN; output $OUT"
"$ROOT/scripts/bench/mariadb-instance.sh" start "$MDIR" >/dev/null
"$ROOT/scripts/bench/mariadb-instance.sh" reset-db "$MDIR" "$DB" >/dev/null

# ---- 1. schema, app, plugin, job; baseline on the empty table ------------------------------
start_nodes setup
printf '(module (memory (export "memory") 1) (func (export "_start")))' >"$OUT/noop.wat"
api POST "/api/v1/plugins?name=noop" --data-binary @"$OUT/noop.wat" >/dev/null
JOB_ID=$(api POST /api/v1/jobs -H 'content-type: application/json' \
    -d "{\"name\":\"$JOB\",\"app\":\"$APP\",\"plugin\":\"noop\",\"schedule\":{\"kind\":\"none\"}}" | jq -r .id)
echo "job $JOB id $JOB_ID"
sleep "$BASELINE_S"
read -r B_SUM B_COUNT < <(scan_metrics)
B_RSS=$(rss_kb "$SERVER_PID")
stop_nodes

# ---- 2. load ---------------------------------------------------------------------------------
T0=$(now_ms)
FIRST_DUE=$((T0 + 3600000))
SPAN=$((30 * 86400000))
STEP=$((SPAN / TASKS))
BASE_ID=$(sql -N -e "SELECT GREATEST(COALESCE(MAX(id), 0), (SELECT next_value FROM sequences WHERE name = 'task')) FROM tasks")
echo "loading $TASKS tasks (ids from $((BASE_ID + 1)), due every $STEP ms from +1 h) …"
L0=$(date +%s.%N)
done_rows=0
while [ "$done_rows" -lt "$TASKS" ]; do
    a=$((done_rows + 1))
    b=$((done_rows + CHUNK))
    [ "$b" -gt "$TASKS" ] && b=$TASKS
    sql -e "SET unique_checks = 0; SET foreign_key_checks = 0;
        INSERT INTO tasks (id, job_id, kind, idem_key, payload, params, status, due_at, attempt,
                           lost_count, max_attempts, backoff, priority, created_at, updated_at)
        SELECT $BASE_ID + seq, $JOB_ID, 'delayed', NULL, CONCAT('{\"order\":', seq, '}'), NULL,
               'pending', $FIRST_DUE + seq * $STEP, 1, 0, NULL, NULL, 0, $T0, $T0
        FROM seq_${a}_to_${b};"
    done_rows=$b
    printf '  %d rows, %.0f s\n' "$done_rows" "$(echo "$(date +%s.%N) - $L0" | bc)"
done
NEXT_ID=$((BASE_ID + TASKS + 1))
sql -e "UPDATE sequences SET next_value = $NEXT_ID WHERE name = 'task'; ANALYZE TABLE tasks;" >/dev/null
LOAD_S=$(printf "%.1f" "$(echo "$(date +%s.%N) - $L0" | bc)")
echo "loaded in ${LOAD_S} s"
sql -e "SELECT status, COUNT(*) FROM tasks GROUP BY status;
        SELECT table_rows, ROUND(data_length/1048576) AS data_mib, ROUND(index_length/1048576) AS index_mib
        FROM information_schema.tables WHERE table_schema = '$DB' AND table_name = 'tasks'"

# ---- 3. tasks due soon, then run -------------------------------------------------------------
NOW=$(now_ms)
SOON_FROM=$((NOW + 10000))
SOON_STEP=$((40000 / (SOON > 0 ? SOON : 1)))
if [ "$SOON" -gt 0 ]; then
    sql -e "INSERT INTO tasks (id, job_id, kind, idem_key, payload, params, status, due_at, attempt,
                               lost_count, max_attempts, backoff, priority, created_at, updated_at)
            SELECT $NEXT_ID + seq, $JOB_ID, 'delayed', NULL, CONCAT('{\"soon\":', seq, '}'), NULL,
                   'pending', $SOON_FROM + seq * $SOON_STEP, 1, 0, NULL, NULL, 0, $NOW, $NOW
            FROM seq_0_to_$((SOON - 1));
            UPDATE sequences SET next_value = $((NEXT_ID + SOON + 1)) WHERE name = 'task';"
fi
echo "$SOON tasks due from +10 s to +50 s; starting server and executor for $RUN_S s …"
start_nodes run
R0=$(date +%s)
echo "t_s rss_kb" >"$OUT/rss.txt"
MAX_RSS=0
LAST_SUM=0; LAST_COUNT=0
INTERVALS=""
for i in $(seq 1 "$RUN_S"); do
    sleep 1
    r=$(rss_kb "$SERVER_PID")
    echo "$i $r" >>"$OUT/rss.txt"
    [ "$r" -gt "$MAX_RSS" ] && MAX_RSS=$r
    if [ $((i % 10)) -eq 0 ] || [ "$i" -eq "$RUN_S" ]; then
        read -r s c < <(scan_metrics)
        INTERVALS+=$(awk -v i="$i" -v s="$s" -v c="$c" -v ls="$LAST_SUM" -v lc="$LAST_COUNT" -v r="$r" \
            'BEGIN { n = c - lc; printf "| %d | %d | %.1f | %.3f |\\n", i, n, r/1024, (n > 0 ? (s - ls) / n * 1000 : 0) }')
        LAST_SUM=$s; LAST_COUNT=$c
    fi
done
FINAL_RSS=$(rss_kb "$SERVER_PID")
curl -fsS -H "authorization: Bearer $TOKEN" "$API/metrics" >"$OUT/metrics.txt"
read -r S_SUM S_COUNT < <(scan_metrics)
SOON_DONE=$(sql -N -e "SELECT COUNT(*) FROM tasks WHERE job_id = $JOB_ID AND id > $NEXT_ID AND status = 'succeeded'")
STATUS=$(sql -N -e "SELECT GROUP_CONCAT(CONCAT(status, '=', n) SEPARATOR ', ') FROM (SELECT status, COUNT(*) n FROM tasks GROUP BY status) x")
stop_nodes

# ---- 4. report -------------------------------------------------------------------------------
mean_ms() { awk -v s="$1" -v c="$2" 'BEGIN { printf "%.3f", (c > 0 ? s / c * 1000 : 0) }'; }
echo
echo "### Scheduler with $TASKS pending tasks (MariaDB $(sql -N -e 'SELECT VERSION()'))"
echo
echo "| measure | value |"
echo "|---|---:|"
echo "| load time (direct SQL) | ${LOAD_S} s |"
echo "| server RSS, max over ${RUN_S} s | $(awk -v k="$MAX_RSS" 'BEGIN{printf "%.1f", k/1024}') MiB |"
echo "| server RSS, final | $(awk -v k="$FINAL_RSS" 'BEGIN{printf "%.1f", k/1024}') MiB |"
echo "| server RSS, empty table (after ${BASELINE_S} s) | $(awk -v k="$B_RSS" 'BEGIN{printf "%.1f", k/1024}') MiB |"
echo "| scan mean, empty table | $(mean_ms "$B_SUM" "$B_COUNT") ms ($B_COUNT scans) |"
echo "| scan mean, $TASKS pending | $(mean_ms "$S_SUM" "$S_COUNT") ms ($S_COUNT scans) |"
echo "| soon-due tasks succeeded | $SOON_DONE of $SOON |"
echo "| task statuses after the run | $STATUS |"
echo
echo "Per 10 s interval of the run:"
echo
echo "| t s | scans | RSS MiB | mean scan ms |"
echo "|---:|---:|---:|---:|"
printf '%b' "$INTERVALS"
echo
UNTIL=$(($(now_ms) + 5000))
CLAIM="SELECT id, job_id, kind, due_at, attempt, priority, payload, params FROM tasks WHERE status = 'pending' AND due_at <= $UNTIL ORDER BY due_at LIMIT 20000"
echo "EXPLAIN of the scan's claim query (Store::claim_due):"
echo
echo '```'
echo "$CLAIM FOR UPDATE SKIP LOCKED"
sql -t -e "EXPLAIN $CLAIM FOR UPDATE SKIP LOCKED"
sql -e "EXPLAIN FORMAT=JSON $CLAIM FOR UPDATE SKIP LOCKED\\G" | sed -n '/{/,$p'
echo '```'
echo
echo "ANALYZE (executed, without the lock clause; r_rows = rows actually read):"
echo
echo '```'
sql -e "ANALYZE FORMAT=JSON $CLAIM\\G" | sed -n '/{/,$p'
echo '```'
echo
echo "RSS samples: $OUT/rss.txt; metrics: $OUT/metrics.txt; logs: $OUT/*.log"
