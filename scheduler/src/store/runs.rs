//! Runs: what was sent ([`Store::record_dispatches`]) and what came back
//! ([`Store::apply_run_updates`]), with the retry policy's verdict on each attempt that ended.

use std::collections::{BTreeMap, HashMap};

use sqlx::{FromRow, QueryBuilder};

use super::*;

/// The columns of a task whose attempt ended, read (and locked) with what its job says of
/// retries; the job's through subqueries, which lock nothing (a join would lock the job's
/// row too, and a concurrent change of the job would then deadlock with the report).
const ENDED_SELECT: &str = "SELECT t.id, t.job_id, t.attempt, t.lost_count, t.status, t.max_attempts, \
     t.backoff, (SELECT j.max_attempts FROM jobs j WHERE j.id = t.job_id) AS job_max_attempts, \
     (SELECT j.backoff FROM jobs j WHERE j.id = t.job_id) AS job_backoff, \
     (SELECT j.child_jobs FROM jobs j WHERE j.id = t.job_id) AS child_jobs, \
     (SELECT j.max_concurrency FROM jobs j WHERE j.id = t.job_id) AS max_concurrency";

/// A broadcast attempt ends when its last shard does: how many have.
const SHARDS_FINAL: &str = ", (SELECT COUNT(*) FROM runs r WHERE r.task_id = t.id \
     AND r.attempt = t.attempt AND r.status NOT IN ('dispatched', 'running')) AS shards_final";

#[derive(FromRow)]
struct EndedRow {
    id: i64,
    job_id: i64,
    attempt: i32,
    lost_count: i32,
    status: String,
    max_attempts: Option<i32>,
    backoff: Option<String>,
    job_max_attempts: Option<i32>,
    job_backoff: Option<String>,
    child_jobs: Option<String>,
    max_concurrency: Option<i32>,
    #[sqlx(default)]
    shards_final: i64,
}

/// What the ended attempts of a batch come to.
#[derive(Default)]
struct Verdicts {
    outcomes: Vec<(i64, TaskNext)>,
    /// Tasks of succeeded attempts' child jobs, to create.
    children: Vec<NewTask>,
    /// Runs that ended an attempt (or a shard of one), for the dashboard's counts.
    counted: Vec<(Millis, RunStatus)>,
    freed_limited: bool,
}

impl Store {
    /// Applies run updates (executor reports, undeliverable dispatches, lost runs) in one
    /// transaction, idempotently: a repeated or stale update changes nothing. For every
    /// attempt that ended, `decide` says what happens to its task (retry, dead, …), and
    /// children of succeeded tasks are created.
    ///
    /// Whether an update ends an attempt is decided on the task, locked: only a final
    /// status for the attempt the task is at, while it is claimed or running, does. So a
    /// report applied twice (a resent callback, two batches in flight) decides once, and
    /// the run rows need no read first: their upsert moves a status only forward.
    /// Statements per batch, whatever its size up to [`CHUNK`]: the runs' upsert, the
    /// tasks' locking read, the dashboard's count, one update per kind of outcome.
    pub async fn apply_run_updates(
        &self,
        updates: &[RunUpdate],
        now: Millis,
        decide: &mut (dyn FnMut(&AttemptEnded) -> TaskNext + Send),
    ) -> Result<Applied> {
        if updates.is_empty() {
            return Ok(Applied::default());
        }
        let changes = most_advanced_per_run(updates);
        let ended: Vec<&RunUpdate> = changes
            .iter()
            .copied()
            .filter(|u| u.status.is_final())
            .collect();
        let mut tx = self.begin().await?;
        self.upsert_runs(&mut tx, &changes).await?;
        let verdicts = self.decide_attempts(&mut tx, &ended, now, decide).await?;
        self.count_finished(&mut tx, &verdicts.counted).await?;
        self.finish_tasks(&mut tx, &verdicts.outcomes, now).await?;
        self.schedule_retries(&mut tx, &verdicts.outcomes, now)
            .await?;
        let children = self
            .insert_children(&mut tx, &verdicts.children, now)
            .await?;
        tx.commit().await?;
        Ok(Applied {
            written: changes.len(),
            tasks: verdicts.outcomes,
            children,
            freed_limited: verdicts.freed_limited,
        })
    }

    /// Writes the runs, in run-id order (as `record_dispatches` does: two transactions
    /// touching the same runs lock them in the same order and cannot deadlock).
    async fn upsert_runs(&self, tx: &mut Tx, changes: &[&RunUpdate]) -> Result<()> {
        let tail = self.run_upsert_tail();
        on_tx!(tx, |tx, Db| {
            for chunk in changes.chunks(CHUNK) {
                let mut qb = QueryBuilder::<Db>::new(
                    "INSERT INTO runs (id, job_id, task_id, attempt, shard_index, shard_total, executor, status, \
                     scheduled_at, dispatched_at, started_at, finished_at, exit_code, message) ",
                );
                qb.push_values(chunk, |mut b, u| {
                    b.push_bind(u.run_id)
                        .push_bind(u.job_id)
                        .push_bind(u.task_id)
                        .push_bind(u.attempt)
                        .push_bind(u.shard_index)
                        .push_bind(u.shard_total)
                        .push_bind(u.executor.as_deref())
                        .push_bind(u.status.as_str())
                        .push_bind(u.scheduled_at)
                        .push_bind(u.dispatched_at)
                        .push_bind(u.started_at)
                        .push_bind(u.finished_at)
                        .push_bind(u.exit_code)
                        .push_bind(u.message.as_deref().map(truncate_message));
                });
                qb.push(tail);
                qb.build().execute(&mut **tx).await?;
            }
        });
        Ok(())
    }

    /// The upsert tail of a run row. A run's status only moves forward: dispatched →
    /// running → one final status. The check is in the statement itself: two reports for
    /// a run whose row does not exist yet meet only here, and a report may name the
    /// attempt under another run id (a trigger delivered twice, numbered twice) and so
    /// meet the attempt's row through its unique key — either way a late `running` loses
    /// to the final status already there. (MySQL evaluates the assignments in order, each
    /// seeing the columns already assigned, so `status` goes last; SQLite's all see the
    /// old row.)
    fn run_upsert_tail(&self) -> &'static str {
        if self.is_mysql() {
            concat!(
                " ON DUPLICATE KEY UPDATE executor = COALESCE(VALUES(executor), executor), \
                 dispatched_at = COALESCE(dispatched_at, VALUES(dispatched_at)), \
                 started_at = COALESCE(started_at, VALUES(started_at)), \
                 finished_at = IF(",
                run_advances!("VALUES(status)", "status"),
                ", VALUES(finished_at), finished_at), \
                 exit_code = IF(",
                run_advances!("VALUES(status)", "status"),
                ", VALUES(exit_code), exit_code), \
                 message = IF(",
                run_advances!("VALUES(status)", "status"),
                ", VALUES(message), message), \
                 status = IF(",
                run_advances!("VALUES(status)", "status"),
                ", VALUES(status), status)"
            )
        } else {
            macro_rules! sqlite_set {
                () => {
                    concat!(
                        " DO UPDATE SET executor = COALESCE(excluded.executor, runs.executor), \
                         dispatched_at = COALESCE(runs.dispatched_at, excluded.dispatched_at), \
                         started_at = COALESCE(runs.started_at, excluded.started_at), \
                         finished_at = CASE WHEN ",
                        run_advances!("excluded.status", "runs.status"),
                        " THEN excluded.finished_at ELSE runs.finished_at END, \
                         exit_code = CASE WHEN ",
                        run_advances!("excluded.status", "runs.status"),
                        " THEN excluded.exit_code ELSE runs.exit_code END, \
                         message = CASE WHEN ",
                        run_advances!("excluded.status", "runs.status"),
                        " THEN excluded.message ELSE runs.message END, \
                         status = CASE WHEN ",
                        run_advances!("excluded.status", "runs.status"),
                        " THEN excluded.status ELSE runs.status END"
                    )
                };
            }
            concat!(
                " ON CONFLICT(id)",
                sqlite_set!(),
                " ON CONFLICT(task_id, attempt, shard_index)",
                sqlite_set!()
            )
        }
    }

    /// Locks the tasks of the attempts that ended (in id order, so two transactions never
    /// decide one attempt from the same state) and asks `decide` what comes next for each
    /// attempt that is still the task's, unfinished.
    async fn decide_attempts(
        &self,
        tx: &mut Tx,
        ended: &[&RunUpdate],
        now: Millis,
        decide: &mut (dyn FnMut(&AttemptEnded) -> TaskNext + Send),
    ) -> Result<Verdicts> {
        let mut verdicts = Verdicts::default();
        if ended.is_empty() {
            return Ok(verdicts);
        }
        let mut by_task: HashMap<i64, Vec<&RunUpdate>> = HashMap::new();
        for u in ended {
            by_task.entry(u.task_id).or_default().push(u);
        }
        let mut task_ids: Vec<i64> = by_task.keys().copied().collect();
        task_ids.sort_unstable();
        let broadcast = ended.iter().any(|u| u.shard_total > 1);
        let lock = if self.is_mysql() {
            " ORDER BY t.id FOR UPDATE"
        } else {
            ""
        };
        for chunk in task_ids.chunks(CHUNK) {
            let rows: Vec<EndedRow> = on_tx!(tx, |tx, Db| {
                let mut qb = QueryBuilder::<Db>::new(ENDED_SELECT);
                if broadcast {
                    qb.push(SHARDS_FINAL);
                }
                qb.push(" FROM tasks t WHERE t.id IN ");
                push_ids(&mut qb, chunk.iter().copied());
                qb.push(lock);
                qb.build_query_as().fetch_all(&mut **tx).await?
            });
            for row in rows {
                let Some(updates) = by_task.get(&row.id) else {
                    continue;
                };
                let status: TaskStatus = parse(&row.status)?;
                // A report for an older attempt, or for a task cancelled meanwhile, ends nothing.
                let current: Vec<&RunUpdate> = updates
                    .iter()
                    .copied()
                    .filter(|u| u.attempt == row.attempt)
                    .collect();
                let Some(&last) = current.last() else {
                    continue;
                };
                if !matches!(status, TaskStatus::Claimed | TaskStatus::Running) {
                    continue;
                }
                verdicts.counted.extend(
                    current
                        .iter()
                        .map(|u| (u.finished_at.unwrap_or(now), u.status)),
                );
                let verdict_status = if last.shard_total > 1 {
                    if i64::from(last.shard_total) > row.shards_final {
                        continue;
                    }
                    self.combined_shards(tx, row.id, row.attempt).await?
                } else {
                    last.status
                };
                let view = AttemptEnded {
                    task_id: row.id,
                    job_id: row.job_id,
                    attempt: row.attempt,
                    lost_count: row.lost_count,
                    status: verdict_status,
                    max_attempts: row.max_attempts.or(row.job_max_attempts).unwrap_or(1),
                    backoff: match row.backoff.as_deref().or(row.job_backoff.as_deref()) {
                        Some(s) => parse_json(s)?,
                        None => Backoff::default(),
                    },
                    child_jobs: match row.child_jobs.as_deref() {
                        Some(s) => parse_json(s)?,
                        None => Vec::new(),
                    },
                };
                let verdict = decide(&view);
                verdicts.freed_limited |= row.max_concurrency.is_some();
                if verdict == TaskNext::Succeeded {
                    verdicts
                        .children
                        .extend(view.child_jobs.iter().map(|&child| NewTask {
                            job_id: child,
                            kind: TaskKind::Child,
                            key: None,
                            payload: None,
                            params: None,
                            due_at: now,
                            max_attempts: None,
                            backoff: None,
                            priority: 0,
                        }));
                }
                verdicts.outcomes.push((row.id, verdict));
            }
        }
        Ok(verdicts)
    }

    /// The verdict of a broadcast attempt whose shards have all ended.
    async fn combined_shards(&self, tx: &mut Tx, task_id: i64, attempt: i32) -> Result<RunStatus> {
        let statuses: Vec<String> = on_tx!(tx, |tx, Db| {
            sqlx::query_scalar("SELECT status FROM runs WHERE task_id = ? AND attempt = ?")
                .bind(task_id)
                .bind(attempt)
                .fetch_all(&mut **tx)
                .await?
        });
        Ok(combine_shards(
            statuses
                .iter()
                .map(|s| parse(s))
                .collect::<Result<Vec<RunStatus>>>()?,
        ))
    }

    /// The dashboard's per-minute counts of ended runs, counted once: by the transaction
    /// that ended their attempt.
    async fn count_finished(&self, tx: &mut Tx, counted: &[(Millis, RunStatus)]) -> Result<()> {
        let mut per_minute: BTreeMap<(Millis, &str), i64> = BTreeMap::new();
        for (finished_at, status) in counted {
            let minute = finished_at.div_euclid(60_000) * 60_000;
            *per_minute.entry((minute, status.as_str())).or_default() += 1;
        }
        if per_minute.is_empty() {
            return Ok(());
        }
        let tail = if self.is_mysql() {
            " ON DUPLICATE KEY UPDATE runs = runs + VALUES(runs)"
        } else {
            " ON CONFLICT(minute, status) DO UPDATE SET runs = runs + excluded.runs"
        };
        on_tx!(tx, |tx, Db| {
            let mut qb = QueryBuilder::<Db>::new("INSERT INTO run_stats (minute, status, runs) ");
            qb.push_values(&per_minute, |mut b, ((minute, status), n)| {
                b.push_bind(*minute).push_bind(*status).push_bind(*n);
            });
            qb.push(tail);
            qb.build().execute(&mut **tx).await?;
        });
        Ok(())
    }

    /// Tasks whose verdict is final: succeeded, dead or cancelled, owned by no node.
    async fn finish_tasks(
        &self,
        tx: &mut Tx,
        outcomes: &[(i64, TaskNext)],
        now: Millis,
    ) -> Result<()> {
        for (status, next) in [
            (TaskStatus::Succeeded, TaskNext::Succeeded),
            (TaskStatus::Dead, TaskNext::Dead),
            (TaskStatus::Cancelled, TaskNext::Cancelled),
        ] {
            let ids = collect_ids(outcomes, |n| *n == next);
            on_tx!(tx, |tx, Db| {
                for chunk in ids.chunks(CHUNK) {
                    let mut qb = QueryBuilder::<Db>::new("UPDATE tasks SET status = ");
                    qb.push_bind(status.as_str())
                        .push(", updated_at = ")
                        .push_bind(now)
                        .push(", owner_node = NULL, owner_epoch = NULL WHERE id IN ");
                    push_ids(&mut qb, chunk.iter().copied());
                    qb.build().execute(&mut **tx).await?;
                }
            });
        }
        Ok(())
    }

    /// Tasks to try again: pending at their next attempt, due after the backoff (a loss
    /// counts as one, and not against the attempts).
    async fn schedule_retries(
        &self,
        tx: &mut Tx,
        outcomes: &[(i64, TaskNext)],
        now: Millis,
    ) -> Result<()> {
        let retries: Vec<(i64, Millis, bool)> = outcomes
            .iter()
            .filter_map(|(t, n)| match n {
                TaskNext::Retry { due_at, lost } => Some((*t, *due_at, *lost)),
                _ => None,
            })
            .collect();
        on_tx!(tx, |tx, Db| {
            for chunk in retries.chunks(CHUNK) {
                let mut qb = QueryBuilder::<Db>::new(
                    "UPDATE tasks SET status = 'pending', attempt = attempt + 1, owner_node = NULL, \
                     owner_epoch = NULL, updated_at = ",
                );
                qb.push_bind(now).push(", due_at = ");
                push_case(&mut qb, chunk.iter().map(|(t, due, _)| (*t, *due)));
                qb.push(", lost_count = lost_count + ");
                push_case(
                    &mut qb,
                    chunk.iter().map(|(t, _, lost)| (*t, i32::from(*lost))),
                );
                qb.push(" WHERE id IN ");
                push_ids(&mut qb, chunk.iter().map(|(t, _, _)| *t));
                qb.build().execute(&mut **tx).await?;
            }
        });
        Ok(())
    }

    /// Children of succeeded parents, in the same transaction: a parent's success and its
    /// children's triggers are committed together or not at all. (A child whose job was
    /// deleted meanwhile is created anyway; dispatch cancels it.) Returns how many.
    async fn insert_children(
        &self,
        tx: &mut Tx,
        children: &[NewTask],
        now: Millis,
    ) -> Result<usize> {
        if children.is_empty() {
            return Ok(0);
        }
        let first = self.task_ids_in(tx, children.len() as i64).await?;
        on_tx!(tx, |tx, Db| {
            for (chunk_no, chunk) in children.chunks(CHUNK).enumerate() {
                let base = first + (chunk_no * CHUNK) as i64;
                let mut qb = QueryBuilder::<Db>::new(
                    "INSERT INTO tasks (id, job_id, kind, status, due_at, attempt, lost_count, priority, \
                     created_at, updated_at) ",
                );
                qb.push_values(chunk.iter().enumerate(), |mut b, (i, t)| {
                    b.push_bind(base + i as i64)
                        .push_bind(t.job_id)
                        .push_bind(t.kind.as_str())
                        .push_bind(TaskStatus::Pending.as_str())
                        .push_bind(t.due_at)
                        .push_bind(1_i32)
                        .push_bind(0_i32)
                        .push_bind(t.priority)
                        .push_bind(now)
                        .push_bind(now);
                });
                qb.build().execute(&mut **tx).await?;
            }
        });
        Ok(children.len())
    }
}

/// One update per run: the furthest along (a final status over `running` over
/// `dispatched`; between two final ones, the first), in run-id order.
fn most_advanced_per_run(updates: &[RunUpdate]) -> Vec<&RunUpdate> {
    let rank = |s: RunStatus| match s {
        RunStatus::Dispatched => 0,
        RunStatus::Running => 1,
        _ => 2,
    };
    let mut latest: HashMap<i64, &RunUpdate> = HashMap::new();
    for u in updates {
        match latest.get(&u.run_id) {
            Some(prev) if rank(prev.status) >= rank(u.status) && prev.status.is_final() => {}
            Some(prev) if rank(prev.status) > rank(u.status) => {}
            _ => {
                latest.insert(u.run_id, u);
            }
        }
    }
    let mut changes: Vec<&RunUpdate> = latest.into_values().collect();
    changes.sort_by_key(|u| u.run_id);
    changes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn update(run_id: i64, status: RunStatus) -> RunUpdate {
        RunUpdate {
            run_id,
            job_id: 1,
            task_id: run_id,
            attempt: 1,
            shard_index: 0,
            shard_total: 1,
            executor: None,
            scheduled_at: 0,
            dispatched_at: None,
            started_at: None,
            finished_at: None,
            status,
            exit_code: None,
            message: None,
        }
    }

    #[test]
    fn the_furthest_update_of_each_run_is_kept() {
        let updates = [
            update(2, RunStatus::Succeeded),
            update(1, RunStatus::Running),
            update(2, RunStatus::Running),
            update(1, RunStatus::Failed),
            update(1, RunStatus::Running),
            update(2, RunStatus::Failed),
            update(3, RunStatus::Dispatched),
        ];
        let kept: Vec<(i64, RunStatus)> = most_advanced_per_run(&updates)
            .into_iter()
            .map(|u| (u.run_id, u.status))
            .collect();
        assert_eq!(
            kept,
            [
                (1, RunStatus::Failed),
                (2, RunStatus::Succeeded),
                (3, RunStatus::Dispatched)
            ]
        );
    }
}
