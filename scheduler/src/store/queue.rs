//! Pull delivery (SPEC §8): fires of a `pull` job that came due wait `ready` for a consumer;
//! a pull leases them (each leased attempt is a run, `executor` = `pull:<consumer>`); an
//! ack or a nack ends the attempt through [`Store::end_leases`], the lease's expiry through
//! [`Store::apply_run_updates`] like an executor's report; either way the retry policy and
//! the rest of completion rule on it. Also the re-drive of dead tasks and the rescheduling of
//! pending ones, which any delivery shares.

use std::collections::{HashMap, HashSet};

use sqlx::{FromRow, QueryBuilder};

use super::runs::{ENDED_SELECT, EndedRow, Verdicts};
use super::*;

/// A task a pull handed to a consumer.
#[derive(Debug, Clone, PartialEq)]
pub struct Leased {
    pub task_id: i64,
    pub job_id: i64,
    pub attempt: i32,
    pub run_id: i64,
    /// The lease's token: `<run id>.<random>`; only its holder can end or extend it.
    pub lease: String,
    pub payload: Option<String>,
    pub key: Option<String>,
    pub priority: i32,
    pub due_at: Millis,
    pub lease_expires_at: Millis,
    /// The trace its task was created in: the consumer continues it.
    pub traceparent: Option<String>,
}

/// A fresh lease's token: `<run id>.<random>`.
pub fn lease_token(run_id: i64) -> String {
    format!("{run_id}.{:016x}", rand::random::<u64>())
}

/// A waiting pull's share of the fires leased straight to it ([`Store::lease_claimed`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Handover {
    pub consumer: String,
    pub leases: Vec<Leased>,
}

/// What a task's current lease is, read to check an ack, a nack or an extension.
#[derive(Debug, Clone, PartialEq, FromRow)]
pub struct HeldLease {
    pub task_id: i64,
    pub job_id: i64,
    pub status: String,
    pub attempt: i32,
    pub lease_token: Option<String>,
    pub lease_expires_at: Option<i64>,
    pub run_id: Option<i64>,
    pub executor: Option<String>,
    pub scheduled_at: Option<i64>,
    pub dispatched_at: Option<i64>,
}

impl HeldLease {
    /// The run update that ends this lease's attempt with `status`.
    pub fn ending(&self, status: RunStatus, now: Millis, message: Option<String>) -> RunUpdate {
        RunUpdate {
            run_id: self.run_id.unwrap_or_default(),
            job_id: self.job_id,
            task_id: self.task_id,
            attempt: self.attempt,
            shard_index: 0,
            shard_total: 1,
            executor: self.executor.clone(),
            scheduled_at: self.scheduled_at.unwrap_or(now),
            dispatched_at: self.dispatched_at,
            started_at: self.dispatched_at,
            finished_at: Some(now),
            status,
            exit_code: None,
            message,
            output: None,
        }
    }

    /// Is `lease` this task's live lease?
    pub fn is(&self, lease: &str) -> bool {
        self.run_id.is_some() && holds(&self.status, self.lease_token.as_deref(), lease)
    }
}

/// An ack or a nack: ends the attempt `lease` holds with `status`, if it is still the
/// task's live lease.
#[derive(Debug, Clone, PartialEq)]
pub struct LeaseEnding {
    pub task_id: i64,
    pub lease: String,
    pub status: RunStatus,
    pub message: Option<String>,
    /// An ack's output (a workflow step's, for the steps after it), as JSON text.
    pub output: Option<String>,
}

/// What a batch of [`LeaseEnding`]s came to.
#[derive(Debug, Default)]
pub struct LeasesEnded {
    pub applied: Applied,
    /// The attempts that ended, as their runs' updates.
    pub updates: Vec<RunUpdate>,
    /// The endings that ended an attempt, as `(task, lease)`.
    pub ended: HashSet<(i64, String)>,
    /// The tasks that exist (of the job asked for): an ending of one of them that did not
    /// end its attempt was stale.
    pub found: HashSet<i64>,
}

/// The run a task's current lease names.
struct LeaseRun {
    id: i64,
    task_id: i64,
    executor: Option<String>,
    scheduled_at: i64,
    dispatched_at: Option<i64>,
}

/// A task an ack or a nack ends, read under its lock, with the run its current lease
/// names ([`lease_run_join`]).
#[derive(FromRow)]
struct LeasedRow {
    #[sqlx(flatten)]
    task: EndedRow,
    run_id: Option<i64>,
    run_task_id: Option<i64>,
    run_executor: Option<String>,
    run_scheduled_at: Option<i64>,
    run_dispatched_at: Option<i64>,
}

impl LeasedRow {
    fn split(self) -> (EndedRow, Option<LeaseRun>) {
        let run = match (self.run_id, self.run_task_id, self.run_scheduled_at) {
            (Some(id), Some(task_id), Some(scheduled_at)) => Some(LeaseRun {
                id,
                task_id,
                executor: self.run_executor,
                scheduled_at,
                dispatched_at: self.run_dispatched_at,
            }),
            _ => None,
        };
        (self.task, run)
    }
}

/// The columns and join that read, with a task, the run its lease token names (the
/// token's part before the dot, [`lease_run_id`]): one primary-key lookup per task, in the
/// task's read. On MySQL the run is locked with its task, task first (the order of every
/// path that locks both for a lease: a live ending updates the run a moment later anyway;
/// a stale one holds the current lease's run until its commit, harmlessly); a task with no
/// lease token joins no run.
fn lease_run_join(mysql: bool) -> &'static str {
    if mysql {
        ", t.lease_token, r.id AS run_id, r.task_id AS run_task_id, r.executor AS run_executor, \
         r.scheduled_at AS run_scheduled_at, r.dispatched_at AS run_dispatched_at \
         FROM tasks t LEFT JOIN runs r \
         ON r.id = CAST(SUBSTRING_INDEX(t.lease_token, '.', 1) AS SIGNED)"
    } else {
        ", t.lease_token, r.id AS run_id, r.task_id AS run_task_id, r.executor AS run_executor, \
         r.scheduled_at AS run_scheduled_at, r.dispatched_at AS run_dispatched_at \
         FROM tasks t LEFT JOIN runs r \
         ON r.id = CAST(substr(t.lease_token, 1, instr(t.lease_token, '.') - 1) AS INTEGER)"
    }
}

/// How many batches' worth of ready tasks a pull on MySQL reads as candidates to lock
/// ([`Store::lock_ready`]): enough that a few pulls at once each find untaken ones.
const CANDIDATE_BATCHES: usize = 4;

#[derive(FromRow)]
struct ReadyRow {
    id: i64,
    attempt: i32,
    idem_key: Option<String>,
    payload: Option<String>,
    priority: i32,
    due_at: i64,
    traceparent: Option<String>,
}

impl Store {
    /// Claimed fires of pull jobs, out of `lease`'s wheel: `ready` for a consumer. Returns
    /// how many moved (a task cancelled or taken over meanwhile does not).
    pub async fn mark_ready(&self, lease: NodeLease, task_ids: &[i64], now: Millis) -> Result<u64> {
        retrying!("mark_ready", {
            self.unclaim(lease, task_ids, TaskStatus::Ready, Some(now))
                .await
        })
    }

    /// Leases up to `run_ids.len()` ready tasks of `job_id` to `consumer` until
    /// `now + lease_ms`, higher priority first, then earlier due: each becomes `running`
    /// with a run of its attempt (`executor` = `pull:<consumer>`), in one transaction.
    /// Concurrent pulls on any node never lease one task twice (row locks taken with
    /// `SKIP LOCKED` on MySQL, the one writer on SQLite, and the status check in the update
    /// either way).
    pub async fn lease_ready(
        &self,
        job_id: i64,
        consumer: &str,
        run_ids: &[i64],
        lease_ms: i64,
        now: Millis,
    ) -> Result<Vec<Leased>> {
        retrying!("lease_ready", {
            if run_ids.is_empty() {
                return Ok(Vec::new());
            }
            let executor = format!("pull:{consumer}");
            let expires = now.saturating_add(lease_ms);
            let mut tx = self.begin().await?;
            let rows = self.lock_ready(&mut tx, job_id, run_ids.len()).await?;
            if rows.is_empty() {
                return Ok(Vec::new());
            }
            let leased: Vec<Leased> = rows
                .into_iter()
                .zip(run_ids)
                .map(|(r, &run_id)| Leased {
                    task_id: r.id,
                    job_id,
                    attempt: r.attempt,
                    run_id,
                    lease: lease_token(run_id),
                    payload: r.payload,
                    key: r.idem_key,
                    priority: r.priority,
                    due_at: r.due_at,
                    lease_expires_at: expires,
                    traceparent: r.traceparent,
                })
                .collect();
            let updated = on_tx!(&mut tx, |t, Db| {
                let mut qb = QueryBuilder::<Db>::new(
                    "UPDATE tasks SET status = 'running', lease_expires_at = ",
                );
                qb.push_bind(expires)
                    .push(", updated_at = ")
                    .push_bind(now)
                    .push(", lease_token = ");
                push_case(
                    &mut qb,
                    "id",
                    leased.iter().map(|l| (l.task_id, l.lease.clone())),
                );
                qb.push(" WHERE status = 'ready' AND id IN ");
                push_ids(&mut qb, leased.iter().map(|l| l.task_id));
                qb.build().execute(&mut **t).await?.affected()
            });
            if updated != leased.len() as u64 {
                // Another pull took some between the read and the write (SQLite has no row
                // locks to skip): take none, the caller pulls again.
                tx.rollback().await?;
                return Err(Error::Conflict("a concurrent pull took these tasks".into()));
            }
            insert_lease_runs(&mut tx, leased.iter().map(|l| (l, executor.as_str())), now).await?;
            tx.commit().await?;
            Ok(leased)
        })
    }

    /// Claimed fires of pull jobs, out of `node`'s wheel, leased straight to pulls waiting
    /// on that node (each [`Handover`] a pull's share, its leases' `key` the fire's): each
    /// fire becomes `running` with its lease and a run of its attempt (`executor` =
    /// `pull:<consumer>`), in one transaction — the `ready` step and the pull's own
    /// transaction in one. A fire no longer claimed by `node` (cancelled, taken over) is
    /// left out of its handover. The handovers as leased.
    ///
    /// The update checks that `node` still holds each fire, so when all are (the usual
    /// case) nothing is read first; when some were not, that transaction is undone and the
    /// fires still held are read, locked, and leased alone.
    pub async fn lease_claimed(
        &self,
        node: NodeLease,
        handovers: &[Handover],
        now: Millis,
    ) -> Result<Vec<Handover>> {
        retrying!("lease_claimed", {
            let all: Vec<&Leased> = handovers.iter().flat_map(|h| &h.leases).collect();
            if all.is_empty() {
                return Ok(Vec::new());
            }
            let mut tx = self.begin().await?;
            let mut all_held = true;
            for chunk in all.chunks(CHUNK) {
                if self.lease_held(&mut tx, node, chunk, now).await? != chunk.len() as u64 {
                    all_held = false;
                    break;
                }
            }
            let mut lost: HashSet<i64> = HashSet::new();
            if !all_held {
                tx.rollback().await?;
                tx = self.begin().await?;
                for chunk in all.chunks(CHUNK) {
                    let held = self.still_held(&mut tx, node, chunk).await?;
                    let (kept, gone): (Vec<&Leased>, Vec<&Leased>) =
                        chunk.iter().partition(|l| held.contains(&l.task_id));
                    lost.extend(gone.iter().map(|l| l.task_id));
                    if !kept.is_empty() {
                        self.lease_held(&mut tx, node, &kept, now).await?;
                    }
                }
            }
            let kept: Vec<Handover> = handovers
                .iter()
                .map(|h| Handover {
                    consumer: h.consumer.clone(),
                    leases: h
                        .leases
                        .iter()
                        .filter(|l| !lost.contains(&l.task_id))
                        .cloned()
                        .collect(),
                })
                .collect();
            let runs: Vec<(&Leased, String)> = kept
                .iter()
                .flat_map(|h| h.leases.iter().map(|l| (l, format!("pull:{}", h.consumer))))
                .collect();
            if !runs.is_empty() {
                insert_lease_runs(&mut tx, runs.iter().map(|(l, e)| (*l, e.as_str())), now).await?;
            }
            tx.commit().await?;
            Ok(kept)
        })
    }

    /// Leases `fires` that `node` still holds (claimed under its epoch): how many it did.
    async fn lease_held(
        &self,
        tx: &mut Tx,
        node: NodeLease,
        fires: &[&Leased],
        now: Millis,
    ) -> Result<u64> {
        Ok(on_tx!(tx, |t, Db| {
            let mut qb = QueryBuilder::<Db>::new(
                "UPDATE tasks SET status = 'running', owner_node = NULL, owner_epoch = NULL, updated_at = ",
            );
            qb.push_bind(now).push(", lease_expires_at = ");
            push_case(
                &mut qb,
                "id",
                fires.iter().map(|l| (l.task_id, l.lease_expires_at)),
            );
            qb.push(", lease_token = ");
            push_case(
                &mut qb,
                "id",
                fires.iter().map(|l| (l.task_id, l.lease.clone())),
            );
            qb.push(" WHERE status = 'claimed' AND owner_node = ")
                .push_bind(node.node_id)
                .push(" AND owner_epoch = ")
                .push_bind(node.epoch)
                .push(" AND id IN ");
            push_ids(&mut qb, fires.iter().map(|l| l.task_id));
            qb.build().execute(&mut **t).await?.affected()
        }))
    }

    /// Which of `fires` `node` still holds, locked.
    async fn still_held(
        &self,
        tx: &mut Tx,
        node: NodeLease,
        fires: &[&Leased],
    ) -> Result<HashSet<i64>> {
        let lock = if self.is_mysql() { " FOR UPDATE" } else { "" };
        let held: Vec<i64> = on_tx!(tx, |t, Db| {
            let mut qb = QueryBuilder::<Db>::new(
                "SELECT id FROM tasks WHERE status = 'claimed' AND owner_node = ",
            );
            qb.push_bind(node.node_id)
                .push(" AND owner_epoch = ")
                .push_bind(node.epoch)
                .push(" AND id IN ");
            push_ids(&mut qb, fires.iter().map(|l| l.task_id));
            qb.push(lock);
            qb.build_query_scalar().fetch_all(&mut **t).await?
        });
        Ok(held.into_iter().collect())
    }

    /// Leases that were never handed to their pull (it left while they were being leased)
    /// go back to `ready` as if never leased: their runs are deleted and the attempt is not
    /// spent. How many went back.
    pub async fn release_leases(&self, leases: &[Leased], now: Millis) -> Result<u64> {
        retrying!("release_leases", {
            if leases.is_empty() {
                return Ok(0);
            }
            let mut tx = self.begin().await?;
            let mut released = 0;
            for chunk in leases.chunks(CHUNK) {
                released += on_tx!(&mut tx, |t, Db| {
                    let mut qb = QueryBuilder::<Db>::new(
                        "UPDATE tasks SET status = 'ready', lease_token = NULL, lease_expires_at = NULL, updated_at = ",
                    );
                    qb.push_bind(now)
                        .push(" WHERE status = 'running' AND lease_token IN ");
                    let mut tokens = qb.separated(", ");
                    tokens.push_unseparated("(");
                    for l in chunk {
                        tokens.push_bind(l.lease.as_str());
                    }
                    tokens.push_unseparated(")");
                    let released = qb.build().execute(&mut **t).await?.affected();
                    // A run is `running` only while its lease is live: these were released.
                    let mut qb = QueryBuilder::<Db>::new(
                        "DELETE FROM runs WHERE status = 'running' AND id IN ",
                    );
                    push_ids(&mut qb, chunk.iter().map(|l| l.run_id));
                    qb.build().execute(&mut **t).await?;
                    released
                });
            }
            tx.commit().await?;
            Ok(released)
        })
    }

    /// Up to `want` ready tasks of `job_id` in pull order (higher priority first, then
    /// earlier due), locked in `tx` on MySQL.
    ///
    /// MySQL: a locking scan of the ready index would step over the entries of every task
    /// leased since InnoDB's last purge (a lease moves a task out of `ready`, which leaves a
    /// delete-marked entry at the head of the index) and look each one up in the table —
    /// under a steady pull, thousands of pages per batch. A plain read skips those entries
    /// at the cost of the index alone, so the candidates are read that way (a few batches'
    /// worth, as concurrent pulls may hold the first ones) and locked by primary key,
    /// skipping any another pull holds and any no longer ready. Only when every candidate
    /// was taken does the locking scan run, so a pull never comes back empty while an
    /// untaken task is ready.
    async fn lock_ready(&self, tx: &mut Tx, job_id: i64, want: usize) -> Result<Vec<ReadyRow>> {
        const COLUMNS: &str =
            "SELECT id, attempt, idem_key, payload, priority, due_at, traceparent FROM tasks";
        let skip_locked = self.skip_locked();
        on_tx!(tx, |tx, Db| {
            // The job's ready tasks in pull order: `columns` of the first `limit`, plus `lock`.
            let scan = |columns: &str, limit: usize, lock: &str| {
                let mut qb = QueryBuilder::<Db>::new(format!("{columns} WHERE job_id = "));
                qb.push_bind(job_id)
                    .push(" AND status = 'ready' ORDER BY priority DESC, due_at, id LIMIT ")
                    .push_bind(limit as i64)
                    .push(lock.to_owned());
                qb
            };
            if !self.is_mysql() {
                return Ok(scan(COLUMNS, want, "")
                    .build_query_as()
                    .fetch_all(&mut **tx)
                    .await?);
            }
            let limit = want * CANDIDATE_BATCHES;
            let candidates: Vec<i64> = scan("SELECT id FROM tasks", limit, "")
                .build_query_scalar()
                .fetch_all(&mut **tx)
                .await?;
            let mut rows: Vec<ReadyRow> = Vec::with_capacity(want);
            let mut next = candidates.iter().copied();
            while rows.len() < want {
                let ids: Vec<i64> = next.by_ref().take(want - rows.len()).collect();
                if ids.is_empty() {
                    break;
                }
                let mut qb =
                    QueryBuilder::<Db>::new(format!("{COLUMNS} WHERE status = 'ready' AND id IN "));
                push_ids(&mut qb, ids.into_iter());
                qb.push(skip_locked);
                rows.extend(qb.build_query_as::<ReadyRow>().fetch_all(&mut **tx).await?);
            }
            if rows.len() < want && candidates.len() == limit {
                // Every candidate was held by another pull: the rest of the queue, locked as
                // it is read.
                let held: std::collections::HashSet<i64> = rows.iter().map(|r| r.id).collect();
                let more: Vec<ReadyRow> = scan(COLUMNS, want, skip_locked)
                    .build_query_as()
                    .fetch_all(&mut **tx)
                    .await?;
                rows.extend(more.into_iter().filter(|r| !held.contains(&r.id)));
                rows.truncate(want);
            }
            rows.sort_by(|a, b| {
                b.priority
                    .cmp(&a.priority)
                    .then(a.due_at.cmp(&b.due_at))
                    .then(a.id.cmp(&b.id))
            });
            Ok(rows)
        })
    }

    /// Ends the attempts that acks and nacks hold, in one transaction, each only if its
    /// lease is still the task's live one (of `job_id`, when given): the tasks are read with
    /// their lease under their lock, and with the run that lease names, so a lease that
    /// expired or ended meanwhile ends nothing; the live leases' runs are moved to their
    /// final status; then completion goes on as for reports
    /// ([`Store::apply_run_updates_raising`]: `with.decide`, `with.raise`, the tasks' next
    /// states, children, counts). One read of the tasks and their runs instead of a check before
    /// the transaction, a locked read inside it and a read of the runs; the runs updated
    /// rather than upserted; the jobs' rules read only for jobs the node did not bring.
    pub async fn end_leases(
        &self,
        job_id: Option<i64>,
        endings: &[LeaseEnding],
        now: Millis,
        mut with: Completing<'_>,
    ) -> Result<LeasesEnded> {
        retrying!("end_leases", {
            if endings.is_empty() {
                return Ok(LeasesEnded::default());
            }
            let mut task_ids: Vec<i64> = endings.iter().map(|e| e.task_id).collect();
            task_ids.sort_unstable();
            task_ids.dedup();
            let lock = if self.is_mysql() {
                " ORDER BY t.id FOR UPDATE"
            } else {
                ""
            };
            let mut tx = self.begin().await?;
            let join = lease_run_join(self.is_mysql());
            let mut rows: Vec<EndedRow> = Vec::with_capacity(task_ids.len());
            let mut runs: HashMap<i64, LeaseRun> = HashMap::with_capacity(task_ids.len());
            for chunk in task_ids.chunks(CHUNK) {
                let read: Vec<LeasedRow> = on_tx!(&mut tx, |t, Db| {
                    let mut qb = QueryBuilder::<Db>::new(ENDED_SELECT);
                    qb.push(join).push(" WHERE ");
                    if let Some(job_id) = job_id {
                        qb.push("t.job_id = ").push_bind(job_id).push(" AND ");
                    }
                    qb.push("t.id IN ");
                    push_ids(&mut qb, chunk.iter().copied());
                    qb.push(lock);
                    qb.build_query_as::<LeasedRow>().fetch_all(&mut **t).await?
                });
                for row in read {
                    let (task, run) = row.split();
                    if let Some(run) = run {
                        runs.insert(task.id, run);
                    }
                    rows.push(task);
                }
            }
            let found: HashSet<i64> = rows.iter().map(|r| r.id).collect();
            let mut asked: HashMap<i64, Vec<&LeaseEnding>> = HashMap::new();
            for e in endings {
                asked.entry(e.task_id).or_default().push(e);
            }
            let mut updates = Vec::with_capacity(rows.len());
            let mut held = HashMap::with_capacity(rows.len());
            rows.retain(|row| {
                let Some(e) = live_ending(row, &asked) else {
                    return false;
                };
                // The run the live lease names, of this task (a lease always names its own).
                let Some(run) = runs
                    .get(&row.id)
                    .filter(|r| r.task_id == row.id && Some(r.id) == lease_run_id(&e.lease))
                else {
                    return false;
                };
                updates.push(lease_run_update(row, run, e, now));
                held.insert(row.id, e.lease.clone());
                true
            });
            self.finish_runs(&mut tx, &updates, now).await?;
            let changes: Vec<&RunUpdate> = updates.iter().collect();
            let by_task: HashMap<i64, Vec<&RunUpdate>> =
                changes.iter().map(|u| (u.task_id, vec![*u])).collect();
            let mut verdicts = Verdicts::default();
            self.rule_on(&mut tx, rows, &by_task, now, &mut with, &mut verdicts)
                .await?;
            let applied = self
                .conclude(tx, &changes, verdicts, now, &mut with)
                .await?;
            let ended = applied
                .tasks
                .iter()
                .filter_map(|(task, _)| Some((*task, held.remove(task)?)))
                .collect();
            Ok(LeasesEnded {
                applied,
                updates,
                ended,
                found,
            })
        })
    }

    /// Leased attempts' runs, ended: their final status, end and message (one statement per
    /// kind of ending, mostly one). Only a run still under way moves.
    async fn finish_runs(&self, tx: &mut Tx, updates: &[RunUpdate], now: Millis) -> Result<()> {
        let mut kinds: HashMap<(RunStatus, Option<&str>), Vec<i64>> = HashMap::new();
        for u in updates {
            kinds
                .entry((u.status, u.message.as_deref()))
                .or_default()
                .push(u.run_id);
        }
        for ((status, message), mut ids) in kinds {
            ids.sort_unstable();
            let message = message.map(truncate_message);
            on_tx!(tx, |t, Db| {
                for chunk in ids.chunks(CHUNK) {
                    let mut qb = QueryBuilder::<Db>::new("UPDATE runs SET status = ");
                    qb.push_bind(status.as_str())
                        .push(", finished_at = ")
                        .push_bind(now)
                        .push(", message = ")
                        .push_bind(message.clone())
                        .push(" WHERE status IN ('dispatched', 'running') AND id IN ");
                    push_ids(&mut qb, chunk.iter().copied());
                    qb.build().execute(&mut **t).await?;
                }
            });
        }
        Ok(())
    }

    /// The current leases of these tasks (those that exist), with their attempts' runs.
    pub async fn held_leases(&self, task_ids: &[i64]) -> Result<Vec<HeldLease>> {
        let mut out = Vec::with_capacity(task_ids.len());
        on_pool!(self, |pool, Db| {
            for chunk in task_ids.chunks(CHUNK) {
                let mut qb = QueryBuilder::<Db>::new(
                    "SELECT t.id AS task_id, t.job_id, t.status, t.attempt, t.lease_token, \
                     t.lease_expires_at, r.id AS run_id, r.executor, r.scheduled_at, r.dispatched_at \
                     FROM tasks t LEFT JOIN runs r \
                     ON r.task_id = t.id AND r.attempt = t.attempt AND r.shard_index = 0 \
                     WHERE t.id IN ",
                );
                push_ids(&mut qb, chunk.iter().copied());
                out.extend(qb.build_query_as::<HeldLease>().fetch_all(pool).await?);
            }
        });
        Ok(out)
    }

    /// Moves the end of a live lease; false if `lease` is not the task's live lease (it
    /// expired, or ended).
    pub async fn extend_lease(
        &self,
        task_id: i64,
        lease: &str,
        expires: Millis,
        now: Millis,
    ) -> Result<bool> {
        retrying!("extend_lease", {
            on_pool!(self, |pool, Db| {
                let r = sqlx::query(
                    "UPDATE tasks SET lease_expires_at = ?, updated_at = ? \
                     WHERE id = ? AND status = 'running' AND lease_token = ? AND lease_expires_at > ?",
                )
                .bind(expires)
                .bind(now)
                .bind(task_id)
                .bind(lease)
                .bind(now)
                .execute(pool)
                .await?;
                Ok(r.affected() > 0)
            })
        })
    }

    /// Takes the token of leases that expired by `now` (up to `limit`), so that no ack or
    /// extension can use them any more, and returns them: the caller ends each attempt as
    /// lost. (A crash in between leaves them expired without a token; the next call finds
    /// them again.)
    pub async fn expire_leases(&self, now: Millis, limit: u32) -> Result<Vec<HeldLease>> {
        retrying!("expire_leases", {
            let ids: Vec<i64> = on_pool!(self, |pool, Db| {
                sqlx::query_scalar(
                    "SELECT id FROM tasks WHERE lease_expires_at <= ? AND status = 'running' \
                     ORDER BY lease_expires_at LIMIT ?",
                )
                .bind(now)
                .bind(i64::from(limit))
                .fetch_all(pool)
                .await?
            });
            if ids.is_empty() {
                return Ok(Vec::new());
            }
            let held = self.held_leases(&ids).await?;
            on_pool!(self, |pool, Db| {
                let mut qb = QueryBuilder::<Db>::new(
                    "UPDATE tasks SET lease_token = NULL WHERE status = 'running' AND lease_expires_at <= ",
                );
                qb.push_bind(now).push(" AND id IN ");
                push_ids(&mut qb, ids.iter().copied());
                qb.build().execute(pool).await?;
            });
            Ok(held
                .into_iter()
                .filter(|h| {
                    h.status == TaskStatus::Running.as_str()
                        && h.lease_expires_at.is_some_and(|at| at <= now)
                })
                .collect())
        })
    }

    /// A dead task becomes pending again for a new attempt, due at `due_at`. Conflict if it
    /// is not dead.
    pub async fn redrive_task(&self, id: i64, due_at: Millis, now: Millis) -> Result<Task> {
        retrying!("redrive_task", {
            let changed = self.redrive(&[id], due_at, now).await?;
            let task = self.get_task(id).await?;
            if changed == 0 {
                return Err(Error::Conflict(format!(
                    "task {id} is {}; only a dead task can be retried",
                    task.status
                )));
            }
            Ok(task)
        })
    }

    /// Up to `limit` dead tasks of `job_id`, oldest due first, pending again for a new
    /// attempt due at `due_at`. Returns how many.
    pub async fn redrive_dead(
        &self,
        job_id: i64,
        limit: u32,
        due_at: Millis,
        now: Millis,
    ) -> Result<u64> {
        retrying!("redrive_dead", {
            let ids: Vec<i64> = on_pool!(self, |pool, Db| {
                sqlx::query_scalar(
                    "SELECT id FROM tasks WHERE job_id = ? AND status = 'dead' ORDER BY due_at, id LIMIT ?",
                )
                .bind(job_id)
                .bind(i64::from(limit))
                .fetch_all(pool)
                .await?
            });
            self.redrive(&ids, due_at, now).await
        })
    }

    async fn redrive(&self, ids: &[i64], due_at: Millis, now: Millis) -> Result<u64> {
        let mut changed = 0;
        on_pool!(self, |pool, Db| {
            for chunk in ids.chunks(CHUNK) {
                let mut qb = QueryBuilder::<Db>::new(
                    "UPDATE tasks SET status = 'pending', attempt = attempt + 1, lease_token = NULL, \
                     lease_expires_at = NULL, owner_node = NULL, owner_epoch = NULL, due_at = ",
                );
                qb.push_bind(due_at)
                    .push(", updated_at = ")
                    .push_bind(now)
                    .push(" WHERE status = 'dead' AND id IN ");
                push_ids(&mut qb, chunk.iter().copied());
                changed += qb.build().execute(pool).await?.affected();
            }
        });
        Ok(changed)
    }

    /// Moves a task that is not in any wheel (pending, waiting for an executor, or ready
    /// for a consumer) to `due_at` and optionally a new priority and payload; it is
    /// pending again. False if it is not in one of those states any more.
    pub async fn reschedule_task(
        &self,
        id: i64,
        due_at: Millis,
        priority: Option<i32>,
        payload: Option<Option<&str>>,
        now: Millis,
    ) -> Result<bool> {
        retrying!("reschedule_task", {
            on_pool!(self, |pool, Db| {
                let mut qb =
                    QueryBuilder::<Db>::new("UPDATE tasks SET status = 'pending', due_at = ");
                qb.push_bind(due_at).push(", updated_at = ").push_bind(now);
                if let Some(p) = priority {
                    qb.push(", priority = ").push_bind(p);
                }
                if let Some(payload) = payload {
                    qb.push(", payload = ").push_bind(payload);
                }
                qb.push(" WHERE id = ")
                    .push_bind(id)
                    .push(" AND status IN ('pending', 'throttled', 'waiting', 'ready')");
                Ok(qb.build().execute(pool).await?.affected() > 0)
            })
        })
    }

    /// How many of a job's tasks are on their way to a receiver: in a wheel, ready for a
    /// consumer, or running (dispatched or leased).
    pub async fn tasks_in_flight(&self, job_id: i64) -> Result<i64> {
        on_pool!(self, |pool, Db| {
            Ok(sqlx::query_scalar(
                "SELECT COUNT(*) FROM tasks WHERE job_id = ? AND status IN ('claimed', 'ready', 'running')",
            )
            .bind(job_id)
            .fetch_one(pool)
            .await?)
        })
    }

    /// A job whose ready tasks nothing holds any more (it is no longer pulled, or an http
    /// job was enabled again): they are pending again, for the scan to deliver.
    pub async fn unready(&self, job_id: i64, now: Millis) -> Result<u64> {
        on_pool!(self, |pool, Db| {
            Ok(sqlx::query(
                "UPDATE tasks SET status = 'pending', updated_at = ? WHERE job_id = ? AND status = 'ready'",
            )
            .bind(now)
            .bind(job_id)
            .execute(pool)
            .await?
            .affected())
        })
    }

    /// A job's queue at a glance: tasks ready for a consumer, leased (running), dead, and
    /// the consumers whose leases began since `since` (among its 2,000 newest runs).
    pub async fn queue_facts(&self, job_id: i64, since: Millis) -> Result<QueueFacts> {
        let counts: Vec<(String, i64)> = on_pool!(self, |pool, Db| {
            sqlx::query_as(
                "SELECT status, COUNT(*) FROM tasks WHERE job_id = ? \
                 AND status IN ('ready', 'running', 'dead') GROUP BY status",
            )
            .bind(job_id)
            .fetch_all(pool)
            .await?
        });
        let consumers: Vec<String> = on_pool!(self, |pool, Db| {
            sqlx::query_scalar(
                "SELECT DISTINCT executor FROM (SELECT executor, dispatched_at FROM runs \
                 WHERE job_id = ? ORDER BY id DESC LIMIT 2000) r \
                 WHERE executor LIKE 'pull:%' AND dispatched_at >= ? ORDER BY executor",
            )
            .bind(job_id)
            .bind(since)
            .fetch_all(pool)
            .await?
        });
        let count = |s: &str| counts.iter().find(|(k, _)| k == s).map_or(0, |(_, n)| *n);
        Ok(QueueFacts {
            ready: count("ready"),
            leased: count("running"),
            dead: count("dead"),
            consumers: consumers
                .into_iter()
                .map(|c| c.trim_start_matches("pull:").to_owned())
                .collect(),
        })
    }
}

/// A job's queue at a glance ([`Store::queue_facts`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QueueFacts {
    pub ready: i64,
    pub leased: i64,
    pub dead: i64,
    pub consumers: Vec<String>,
}

/// Does `lease` hold a task whose status is `status` and whose lease token is `token`?
/// Only the running attempt's current token does: an expired lease's token was taken, an
/// ended attempt's cleared, and each token is its own task's.
fn holds(status: &str, token: Option<&str>, lease: &str) -> bool {
    status == TaskStatus::Running.as_str() && token == Some(lease)
}

/// The ending asked for `row`'s task that holds its live lease, if any.
fn live_ending<'a>(
    row: &EndedRow,
    asked: &HashMap<i64, Vec<&'a LeaseEnding>>,
) -> Option<&'a LeaseEnding> {
    asked
        .get(&row.id)?
        .iter()
        .copied()
        .find(|e| holds(&row.status, row.lease_token.as_deref(), &e.lease))
}

/// The run a lease token names: its part before the dot ([`Leased::lease`]).
fn lease_run_id(lease: &str) -> Option<i64> {
    lease.split_once('.')?.0.parse().ok()
}

/// The run update that ends `row`'s leased attempt, whose run is `run`, as `ending` says.
fn lease_run_update(
    row: &EndedRow,
    run: &LeaseRun,
    ending: &LeaseEnding,
    now: Millis,
) -> RunUpdate {
    RunUpdate {
        run_id: run.id,
        job_id: row.job_id,
        task_id: row.id,
        attempt: row.attempt,
        shard_index: 0,
        shard_total: 1,
        executor: run.executor.clone(),
        scheduled_at: run.scheduled_at,
        dispatched_at: run.dispatched_at,
        started_at: run.dispatched_at,
        finished_at: Some(now),
        status: ending.status,
        exit_code: None,
        message: ending.message.clone(),
        output: ending.output.clone(),
    }
}

/// The runs of freshly leased attempts, each with its executor (`pull:<consumer>`).
async fn insert_lease_runs<'a>(
    tx: &mut Tx,
    runs: impl Iterator<Item = (&'a Leased, &'a str)>,
    now: Millis,
) -> Result<()> {
    let runs: Vec<(&Leased, &str)> = runs.collect();
    for chunk in runs.chunks(CHUNK) {
        on_tx!(&mut *tx, |t, Db| {
            let mut qb = QueryBuilder::<Db>::new(
                "INSERT INTO runs (id, job_id, task_id, attempt, shard_index, shard_total, executor, status, \
                 scheduled_at, dispatched_at, started_at) ",
            );
            qb.push_values(chunk, |mut b, (l, executor)| {
                b.push_bind(l.run_id)
                    .push_bind(l.job_id)
                    .push_bind(l.task_id)
                    .push_bind(l.attempt)
                    .push_bind(0_i32)
                    .push_bind(1_i32)
                    .push_bind(*executor)
                    .push_bind(RunStatus::Running.as_str())
                    .push_bind(l.due_at)
                    .push_bind(now)
                    .push_bind(now);
            });
            qb.build().execute(&mut **t).await?;
        });
    }
    Ok(())
}
