#!/usr/bin/env python3
"""Replays the statements of one consumer's pull + batch ack, batch by batch, through the
`mariadb` client against a fresh copy of Rota's schema on the private bench MariaDB
(scripts/bench/mariadb-instance.sh), and prints mariadbd's CPU per task: a way to price a
schema or statement change before building it. Text protocol, so the absolute figures are
higher than the prepared statements' of `cargo bench --bench delivery -- pull`; compare
variants with each other, several runs each (docs/benchmarks.md, "Delivery").

    scripts/bench/replay-pull-ack.py VARIANT [TASKS]

VARIANT: `base` (the statements of dc45e0e) or a `+`-joined set of changes: `upd` (the
ack much as in Store::end_leases: one locked read of the tasks — without its join to the runs — and the runs updated), `nolease` (no lease index),
`keeplease` (the ack leaves lease_expires_at), `char` (status CHAR(9)), `gen` (virtual
generated-column keys), `sgen` (stored generated keys for the scan's and the pull's indexes:
priced, not built). `floor` replays only the two writes §8 cannot do without — the lease's
`UPDATE tasks` and the ack's, each committed — no reads, no runs, no counts: a lower bound
for any design that keeps leases in the database; `floor+bare` also drops every index of
`tasks` but the pull's. REPLAY_BATCH sets the batch (100). Leaves a database `replay_<variant>`; drop it after.
"""
import os, subprocess, sys, time, random
V = sys.argv[1]; N = int(sys.argv[2]) if len(sys.argv) > 2 else 40000; B = int(os.environ.get("REPLAY_BATCH", 100))
DIR = os.environ.get('ROTA_BENCH_MARIADB_DIR', '/tmp/rota-bench-mariadb')
PID = int(open(f'{DIR}/mariadbd.pid').read())
MIGRATIONS = os.path.join(os.path.dirname(os.path.abspath(__file__)), '../../migrations/mysql')
def sq(db, sql):
    subprocess.run(['mariadb', '--no-defaults', '--protocol=socket', f'--socket={DIR}/sock', '-uroot', db],
                   input=sql.encode(), check=True, stdout=subprocess.DEVNULL)
def cpu():
    f = open(f'/proc/{PID}/stat').read().split(')')[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf('SC_CLK_TCK')
db = 'replay_' + V.replace('+', '_')
mig = ''.join(open(f'{MIGRATIONS}/{f}').read() for f in sorted(os.listdir(MIGRATIONS)))
sq('mysql', f'DROP DATABASE IF EXISTS {db}; CREATE DATABASE {db};')
sq(db, mig)
ddl = {
  'base': '',
  'char': "ALTER TABLE tasks MODIFY status CHAR(9) NOT NULL;",
  'nolease': "ALTER TABLE tasks DROP INDEX ix_tasks_lease;",
  'gen': """ALTER TABLE tasks DROP INDEX ix_tasks_due, DROP INDEX ix_tasks_ready, DROP INDEX ix_tasks_lease,
     ADD COLUMN scan_status VARCHAR(16) AS (IF(status IN ('pending','claimed','waiting'), status, NULL)) VIRTUAL,
     ADD COLUMN ready_job BIGINT AS (IF(status = 'ready', job_id, NULL)) VIRTUAL,
     ADD COLUMN lease_end BIGINT AS (IF(status = 'running', lease_expires_at, NULL)) VIRTUAL,
     ADD INDEX ix_tasks_due (scan_status, due_at), ADD INDEX ix_tasks_ready (ready_job, priority DESC, due_at),
     ADD INDEX ix_tasks_lease (lease_end);""",
  'floor': '',
  'bare': "ALTER TABLE tasks DROP INDEX uk_tasks_job_key, DROP INDEX ix_tasks_due, DROP INDEX ix_tasks_job, DROP INDEX ix_tasks_job_status, DROP INDEX ix_tasks_lease;",
  'sgen': """ALTER TABLE tasks DROP INDEX ix_tasks_due, DROP INDEX ix_tasks_ready,
     ADD COLUMN scan_status VARCHAR(16) AS (IF(status IN ('pending','claimed','waiting'), status, NULL)) STORED,
     ADD COLUMN ready_job BIGINT AS (IF(status = 'ready', job_id, NULL)) STORED,
     ADD INDEX ix_tasks_due (scan_status, due_at), ADD INDEX ix_tasks_ready (ready_job, priority DESC, due_at);""",
}
for k in V.split('+'):
    sq(db, ddl.get(k, ''))
# N ready tasks of job 1, after 300,000 finished ones of job 2 (with runs) as history
def ins(lo, hi, status, job):
    vals = ','.join(f"({i},{job},'delayed','{status}',{1000+i},1,0,0,0,0,'p{i}')" for i in range(lo, hi))
    return f"INSERT INTO tasks (id,job_id,kind,status,due_at,attempt,lost_count,priority,created_at,updated_at,payload) VALUES {vals};"
s = []
for lo in range(1, 300001, 1000):
    s.append(ins(lo, lo+1000, 'succeeded', 2))
for lo in range(300001, 300001+N, 1000):
    s.append(ins(lo, min(lo+1000, 300001+N), 'ready', 1))
s.append(f"INSERT INTO runs (id,job_id,task_id,attempt,shard_index,shard_total,executor,status,scheduled_at) SELECT id, 2, id, 1, 0, 1, 'ex1', 'succeeded', 1 FROM tasks WHERE job_id = 2;")
sq(db, '\n'.join(s))
adv = lambda new, old: f"(CASE {new} WHEN 'dispatched' THEN 0 WHEN 'running' THEN 1 ELSE 2 END > CASE {old} WHEN 'dispatched' THEN 0 WHEN 'running' THEN 1 ELSE 2 END)"
tail = (" ON DUPLICATE KEY UPDATE executor = COALESCE(VALUES(executor), executor), dispatched_at = COALESCE(dispatched_at, VALUES(dispatched_at)), "
        "started_at = COALESCE(started_at, VALUES(started_at)), "
        f"finished_at = IF({adv('VALUES(status)','status')}, VALUES(finished_at), finished_at), "
        f"exit_code = IF({adv('VALUES(status)','status')}, VALUES(exit_code), exit_code), "
        f"message = IF({adv('VALUES(status)','status')}, VALUES(message), message), "
        f"status = IF({adv('VALUES(status)','status')}, VALUES(status), status)")
ack_upd = 'upd' in V.split('+')
keep_lease = 'keeplease' in V.split('+')
stmts = []
now = 5000
candidates = ("SELECT id FROM tasks WHERE ready_job = 1 ORDER BY priority DESC, due_at, id LIMIT 400;" if 'sgen' in V.split('+')
              else "SELECT id FROM tasks WHERE job_id = 1 AND status = 'ready' ORDER BY priority DESC, due_at, id LIMIT 400;")
for b in range(N // B):
    ids = list(range(300001 + b*B, 300001 + (b+1)*B))
    idl = ','.join(map(str, ids))
    runs = [10_000_000 + i for i in ids]
    tok = {i: f"{10_000_000+i}.{random.getrandbits(64):016x}" for i in ids}
    case = 'CASE id ' + ' '.join(f"WHEN {i} THEN '{tok[i]}'" for i in ids) + ' END'
    if 'floor' in V.split('+'):
        stmts.append(f"""BEGIN;
UPDATE tasks SET status = 'running', lease_expires_at = {now+30000}, updated_at = {now}, lease_token = {case} WHERE status = 'ready' AND id IN ({idl});
COMMIT;
BEGIN;
UPDATE tasks SET status = 'succeeded', updated_at = {now}, lease_token = NULL, lease_expires_at = NULL WHERE id IN ({idl});
COMMIT;""")
        now += 7
        continue
    stmts.append(f"""BEGIN;
{candidates}
SELECT id, attempt, idem_key, payload, priority, due_at FROM tasks WHERE status = 'ready' AND id IN ({idl}) FOR UPDATE SKIP LOCKED;
UPDATE tasks SET status = 'running', lease_expires_at = {now+30000}, updated_at = {now}, lease_token = {case} WHERE status = 'ready' AND id IN ({idl});
INSERT INTO runs (id, job_id, task_id, attempt, shard_index, shard_total, executor, status, scheduled_at, dispatched_at, started_at) VALUES """ +
      ','.join(f"({10_000_000+i},1,{i},1,0,1,'pull:c0','running',{1000+i},{now},{now})" for i in ids) + ";\nCOMMIT;")
    if ack_upd:
        stmts.append(f"""BEGIN;
SELECT t.id, t.job_id, t.attempt, t.lost_count, t.status, t.max_attempts, t.backoff, t.lease_token FROM tasks t WHERE t.id IN ({idl}) ORDER BY t.id FOR UPDATE;
UPDATE runs SET status = 'succeeded', finished_at = {now} WHERE id IN ({','.join(map(str, runs))}) AND status = 'running';""")
    else:
        stmts.append(f"""SELECT t.id AS task_id, t.job_id, t.status, t.attempt, t.lease_token, t.lease_expires_at, r.id AS run_id, r.executor, r.scheduled_at, r.dispatched_at FROM tasks t LEFT JOIN runs r ON r.task_id = t.id AND r.attempt = t.attempt AND r.shard_index = 0 WHERE t.id IN ({idl});
BEGIN;
INSERT INTO runs (id, job_id, task_id, attempt, shard_index, shard_total, executor, status, scheduled_at, dispatched_at, started_at, finished_at, exit_code, message) VALUES """ +
      ','.join(f"({10_000_000+i},1,{i},1,0,1,'pull:c0','succeeded',{1000+i},{now},{now},{now},NULL,NULL)" for i in ids) + tail + f""";
SELECT t.id, t.job_id, t.attempt, t.lost_count, t.status, t.max_attempts, t.backoff FROM tasks t WHERE t.id IN ({idl}) ORDER BY t.id FOR UPDATE;""")
    lease_clear = '' if keep_lease else ', lease_expires_at = NULL'
    stmts.append(f"""SELECT id, max_attempts, backoff, child_jobs, max_concurrency FROM jobs WHERE id IN (1);
UPDATE tasks SET status = 'succeeded', updated_at = {now}, owner_node = NULL, owner_epoch = NULL, lease_token = NULL{lease_clear} WHERE id IN ({idl});
INSERT INTO run_stats (minute, status, runs) VALUES (0, 'succeeded', 100) ON DUPLICATE KEY UPDATE runs = runs + VALUES(runs);
COMMIT;""")
    now += 7
sql = '\n'.join(stmts)
time.sleep(3)
c0 = cpu(); t0 = time.time()
sq(db, sql)
c1 = cpu(); t1 = time.time()
left = subprocess.run(['mariadb', '--no-defaults', '--protocol=socket', f'--socket={DIR}/sock', '-uroot', db, '-N', '-e', "SELECT status, COUNT(*) FROM tasks WHERE job_id=1 GROUP BY status"], capture_output=True).stdout.decode().split()
print(f"{V}: {N} tasks, mariadbd {1e6*(c1-c0)/N:.1f} µs/task, wall {1e6*(t1-t0)/N:.1f} µs/task, {left}")
