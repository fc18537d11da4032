#!/usr/bin/env bash
# A private MariaDB for benchmarks, separate from any system server: its own data directory,
# port 3307, socket inside the data directory, no binary log, durable commits
# (innodb_flush_log_at_trx_commit=1), a 4 GiB buffer pool.
#
#   scripts/bench/mariadb-instance.sh start   [DIR]   # install (first time) + start + create rota_bench
#   scripts/bench/mariadb-instance.sh stop    [DIR]   # stop it (SIGTERM to its pid, then wait)
#   scripts/bench/mariadb-instance.sh status  [DIR]
#   scripts/bench/mariadb-instance.sh reset-db [DIR] [DB]   # drop and recreate a database (default rota_bench)
#   scripts/bench/mariadb-instance.sh client  [DIR] [ARGS…] # mariadb client on its socket
#
# DIR defaults to $ROTA_BENCH_MARIADB_DIR or /tmp/rota-bench-mariadb. Environment:
#   ROTA_BENCH_MARIADB_PORT (3307), ROTA_BENCH_MARIADB_BUFFER_POOL (4G),
#   ROTA_BENCH_MARIADB_LOG_FILE (1G), ROTA_BENCH_MARIADB_ARGS (more server options, e.g.
#   --performance-schema=ON to see where statements spend their time).
# The URL for the benchmarks is then mysql://root@127.0.0.1:3307/rota_bench
set -euo pipefail

cmd=${1:-start}
shift || true
DIR=${1:-${ROTA_BENCH_MARIADB_DIR:-/tmp/rota-bench-mariadb}}
[ $# -gt 0 ] && shift
PORT=${ROTA_BENCH_MARIADB_PORT:-3307}
POOL=${ROTA_BENCH_MARIADB_BUFFER_POOL:-4G}
LOGSIZE=${ROTA_BENCH_MARIADB_LOG_FILE:-1G}
MARIADBD=${MARIADBD:-/usr/sbin/mariadbd}
DATA="$DIR/data"
SOCK="$DIR/sock"
PIDFILE="$DIR/mariadbd.pid"
LOG="$DIR/mariadbd.err"

client() { mariadb --no-defaults --protocol=socket --socket="$SOCK" -uroot "$@"; }

running() { [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; }

case "$cmd" in
start)
    mkdir -p "$DIR"
    if running; then
        echo "mariadb already running: pid $(cat "$PIDFILE"), port $PORT, dir $DIR"
    else
        if [ ! -d "$DATA/mysql" ]; then
            command -v mariadb-install-db >/dev/null || { echo "mariadb-install-db not found (apt-get install mariadb-server)" >&2; exit 1; }
            mkdir -p "$DATA"
            mariadb-install-db --no-defaults --datadir="$DATA" --user=root \
                --auth-root-authentication-method=normal --skip-test-db >"$DIR/install.log" 2>&1 \
                || { cat "$DIR/install.log" >&2; exit 1; }
        fi
        # setsid: not in this shell's process group, so it outlives the calling script.
        setsid "$MARIADBD" --no-defaults --user=root --datadir="$DATA" \
            --port="$PORT" --bind-address=127.0.0.1 --socket="$SOCK" --pid-file="$PIDFILE" \
            --log-error="$LOG" \
            --innodb-buffer-pool-size="$POOL" --innodb-log-file-size="$LOGSIZE" \
            --innodb-flush-log-at-trx-commit=1 --skip-log-bin \
            --max-connections=1000 --max-allowed-packet=256M \
            --innodb-lock-wait-timeout=50 --skip-name-resolve ${ROTA_BENCH_MARIADB_ARGS:-} \
            </dev/null >/dev/null 2>&1 &
        for _ in $(seq 1 120); do
            if client -e 'SELECT 1' >/dev/null 2>&1; then break; fi
            sleep 0.5
        done
        client -e 'SELECT 1' >/dev/null 2>&1 || { echo "mariadb did not start; see $LOG" >&2; tail -20 "$LOG" >&2; exit 1; }
        # Root may log in over TCP from 127.0.0.1 without a password (benchmarks only).
        client -e "CREATE USER IF NOT EXISTS 'root'@'127.0.0.1'; GRANT ALL ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION; SET PASSWORD FOR 'root'@'localhost' = PASSWORD('')" >/dev/null
        echo "mariadb started: pid $(cat "$PIDFILE"), port $PORT, dir $DIR"
    fi
    client -e 'CREATE DATABASE IF NOT EXISTS rota_bench'
    echo "ROTA_BENCH_MYSQL_URL=mysql://root@127.0.0.1:$PORT/rota_bench"
    ;;
stop)
    if running; then
        pid=$(cat "$PIDFILE")
        kill "$pid"
        for _ in $(seq 1 120); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
        if kill -0 "$pid" 2>/dev/null; then echo "mariadb $pid still running after 60 s" >&2; exit 1; fi
        echo "mariadb stopped (pid $pid)"
    else
        echo "mariadb not running (dir $DIR)"
    fi
    ;;
status)
    if running; then echo "running: pid $(cat "$PIDFILE"), port $PORT, dir $DIR"; else echo "not running (dir $DIR)"; exit 1; fi
    ;;
reset-db)
    db=${1:-rota_bench}
    client -e "DROP DATABASE IF EXISTS \`$db\`; CREATE DATABASE \`$db\`"
    echo "database $db recreated"
    ;;
client)
    client "$@"
    ;;
*)
    echo "usage: $0 start|stop|status|reset-db|client [DIR] …" >&2
    exit 2
    ;;
esac
