#!/usr/bin/env python3
"""SPEC §13's XXL-JOB figure (docs/benchmarks.md, "XXL-JOB executors"): runs per second
of real XXL-JOB executors (testkit/xxl-executor, xxl-job-core 3.3.2, handler `hello`)
through a `rota server` on the private MariaDB, against the same executors driven by the
thinnest admin there is — a stub that only answers their registry and callback calls,
while this script sends `/run` itself as fast as the executors take them (the machine's
floor for these executors; xxl-job-admin cannot be the peer here: it fires whole jobs,
one trigger per job and second, and has no call that makes a burst of one-shot runs).

Each round: TASKS one-shot tasks due at one instant, created ahead, spread over JOBS jobs
(XXL-JOB runs one job's runs one after another on an executor); the time from their due
time to the last callback, and the CPU each process spent meanwhile (/proc), per run.
Interleaved with the stub's round, ROUNDS times; then the medians (min–max).

    scripts/bench/xxl.py                      # builds nothing: needs target/release/rota
    ROUNDS=3 TASKS=4000 JOBS=8 scripts/bench/xxl.py
"""

import http.server
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROTA = os.environ.get("ROTA_BIN", os.path.join(ROOT, "target/release/rota"))
VERSION = os.environ.get("XXL_VERSION", "3.3.2")
ROUNDS = int(os.environ.get("ROUNDS", "3"))
TASKS = int(os.environ.get("TASKS", "4000"))
JOBS = int(os.environ.get("JOBS", "8"))
DB = "mysql://root@127.0.0.1:3307/rota_bench"
TOKEN = "bench-token-0001"
API_TOKEN = "bench-api-token"
HZ = os.sysconf("SC_CLK_TCK")


def cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / HZ


def call(url, body=None, method="POST", headers=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    if data is not None:
        req.add_header("content-type", "application/json")
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read() or b"null")


def free_port():
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def executor(admin, logs):
    run = os.path.join(ROOT, "testkit/xxl-executor/target", VERSION, "run")
    p = subprocess.Popen(
        [run, "--admin-addresses", admin, "--appname", "bench", "--access-token", TOKEN,
         "--port", "0", "--log-path", logs, "--log-level", "warn"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    for line in p.stdout:
        if line.startswith("READY "):
            threading.Thread(target=lambda: p.stdout.read(), daemon=True).start()
            return p, line.split()[1].rstrip("/")
    raise SystemExit("the XXL-JOB executor did not start")


def mariadbd_pid():
    with open("/tmp/rota-bench-mariadb/mariadbd.pid") as f:
        return int(f.read().strip())


def through_rota(tmp):
    subprocess.run([os.path.join(ROOT, "scripts/bench/mariadb-instance.sh"), "reset-db"],
                   check=True, stdout=subprocess.DEVNULL)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = dict(os.environ, ROTA_API_TOKEN=API_TOKEN, ROTA_EXECUTOR_SECRET="bench-secret-0123456789",
               ROTA_LOG="warn")
    node = subprocess.Popen([ROTA, "server", "--database-url", DB, "--listen", f"127.0.0.1:{port}",
                             "--node-name", "bench"], env=env, stdout=subprocess.DEVNULL,
                            stderr=open(os.path.join(tmp, "rota.log"), "w"))
    api = {"authorization": f"Bearer {API_TOKEN}"}
    for _ in range(100):
        try:
            call(base + "/healthz", method="GET")
            break
        except Exception:
            time.sleep(0.1)
    call(base + "/api/v1/apps/bench/secrets/xxl-access-token", {"value": TOKEN}, "PUT", api)
    execs = [executor(base + "/xxl-job-admin", os.path.join(tmp, f"e{i}")) for i in range(2)]
    while len([e for e in call(base + "/api/v1/executors", method="GET", headers=api)["items"]
               if e["protocol"] == "xxl"]) < 2:
        time.sleep(0.2)
    for j in range(JOBS):
        call(base + "/api/v1/jobs", {"name": f"j{j}", "app": "bench", "schedule": {"kind": "none"},
                                      "route": "round_robin",
                                      "delivery": {"kind": "xxl", "handler": "hello"}}, "POST", api)
    due_ms = int(time.time() * 1000) + 8000
    due = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(due_ms / 1000)) + f".{due_ms % 1000:03d}Z"
    for start in range(0, TASKS, 1000):
        batch = [{"job": f"j{i % JOBS}", "payload": str(i), "run_at": due}
                 for i in range(start, min(TASKS, start + 1000))]
        call(base + "/api/v1/tasks/batch", {"tasks": batch}, "POST", api)
    pids = {"rota": node.pid, "mariadbd": mariadbd_pid(),
            "executors": [p.pid for p, _ in execs]}
    time.sleep(max(0, due_ms / 1000 - time.time() - 1))
    before = cpu(pids)
    while True:
        runs, last, ok = sql("SELECT COUNT(*), COALESCE(MAX(finished_at), 0), "
                             "COALESCE(SUM(status = 'succeeded'), 0) FROM rota_bench.runs "
                             "WHERE status NOT IN ('dispatched', 'running')")
        if runs >= TASKS:
            break
        time.sleep(0.2)
    after = cpu(pids)
    for p, _ in execs:
        p.terminate()
    node.terminate()
    for p, _ in execs:
        p.wait()
    node.wait()
    secs = (last - due_ms) / 1000
    return {"runs": runs, "succeeded": ok, "seconds": secs, "per_s": runs / secs,
            "cpu_us": {k: (after[k] - before[k]) * 1e6 / runs for k in after}}


def sql(query):
    """One row of integers from the bench MariaDB."""
    out = subprocess.run([os.path.join(ROOT, "scripts/bench/mariadb-instance.sh"), "client",
                          "/tmp/rota-bench-mariadb", "-N", "-e", query],
                         check=True, capture_output=True, text=True).stdout.split()
    return [int(x) for x in out]


def cpu(pids):
    return {"rota": cpu_s(pids["rota"]), "mariadbd": cpu_s(pids["mariadbd"]),
            "executors": sum(cpu_s(p) for p in pids["executors"])}


class Stub(http.server.ThreadingHTTPServer):
    """An admin that answers registry and callback, counting callbacks."""

    def __init__(self):
        self.callbacks = 0
        self.lock = threading.Lock()
        stub = self

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                if self.path.endswith("/callback"):
                    with stub.lock:
                        stub.callbacks += len(json.loads(body))
                resp = b'{"code":200,"msg":null}'
                self.send_response(200)
                self.send_header("content-length", str(len(resp)))
                self.end_headers()
                self.wfile.write(resp)

        super().__init__(("127.0.0.1", 0), H)
        threading.Thread(target=self.serve_forever, daemon=True).start()


def floor(tmp):
    stub = Stub()
    admin = f"http://127.0.0.1:{stub.server_address[1]}/xxl-job-admin"
    execs = [executor(admin, os.path.join(tmp, f"f{i}")) for i in range(2)]
    headers = {"XXL-JOB-ACCESS-TOKEN": TOKEN}

    def run(i):
        address = execs[i % 2][1]
        now = int(time.time() * 1000)
        call(address + "/run", {"jobId": 1 + i % JOBS, "executorHandler": "hello",
                                "executorParams": str(i), "executorBlockStrategy": "SERIAL_EXECUTION",
                                "executorTimeout": 0, "logId": 1_000_000 + i, "logDateTime": now,
                                "glueType": "BEAN", "glueSource": "", "glueUpdatetime": 0,
                                "broadcastIndex": 0, "broadcastTotal": 1}, "POST", headers)

    pids = [p.pid for p, _ in execs]
    before = sum(cpu_s(p) for p in pids)
    start = time.time()
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(run, range(TASKS)))
    while stub.callbacks < TASKS:
        time.sleep(0.01)
    secs = time.time() - start
    after = sum(cpu_s(p) for p in pids)
    for p, _ in execs:
        p.terminate()
        p.wait()
    stub.shutdown()
    return {"runs": TASKS, "seconds": secs, "per_s": TASKS / secs,
            "cpu_us": {"executors": (after - before) * 1e6 / TASKS}}


def main():
    subprocess.run([os.path.join(ROOT, "testkit/xxl-executor/build.sh"), VERSION], check=True)
    subprocess.run([os.path.join(ROOT, "scripts/bench/mariadb-instance.sh"), "start"],
                   check=True, stdout=subprocess.DEVNULL)
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    print(f"# XXL-JOB executors through Rota and the floor, {time.strftime('%Y-%m-%dT%H:%MZ', time.gmtime())}, "
          f"commit {commit}; xxl-job-core {VERSION}, 2 executors, {TASKS} runs over {JOBS} jobs")
    rows = {"rota": [], "floor": []}
    for r in range(ROUNDS):
        with tempfile.TemporaryDirectory() as tmp:
            a = through_rota(tmp)
        with tempfile.TemporaryDirectory() as tmp:
            b = floor(tmp)
        rows["rota"].append(a)
        rows["floor"].append(b)
        print(f"round {r + 1}: through rota {a['per_s']:.0f} runs/s ({a['succeeded']}/{a['runs']} succeeded, "
              f"cpu µs/run {json.dumps({k: round(v) for k, v in a['cpu_us'].items()})}); "
              f"floor {b['per_s']:.0f} runs/s (executors {b['cpu_us']['executors']:.0f} µs/run)")
        sys.stdout.flush()

    def med(xs):
        return f"{statistics.median(xs):.0f} ({min(xs):.0f}–{max(xs):.0f})"

    print("\n| | runs/s | executors µs/run | rota µs/run | mariadbd µs/run |\n|---|---|---|---|---|")
    a = rows["rota"]
    print(f"| through rota server | {med([x['per_s'] for x in a])} | "
          f"{med([x['cpu_us']['executors'] for x in a])} | {med([x['cpu_us']['rota'] for x in a])} | "
          f"{med([x['cpu_us']['mariadbd'] for x in a])} |")
    b = rows["floor"]
    print(f"| stub admin, /run sent directly | {med([x['per_s'] for x in b])} | "
          f"{med([x['cpu_us']['executors'] for x in b])} | – | – |")


if __name__ == "__main__":
    main()
