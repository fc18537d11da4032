//! Runs: what was sent ([`Store::record_dispatches`]) and what came back
//! ([`Store::apply_run_updates`]), with the retry policy's verdict on each attempt that ended.

use std::collections::{BTreeMap, HashMap};

use sqlx::{FromRow, QueryBuilder};

use super::*;

/// The columns of a task whose attempt ended, read (and locked).
pub(super) const ENDED_SELECT: &str = "SELECT t.id, t.job_id, t.kind, t.attempt, t.lost_count, t.status, \
     t.max_attempts, t.backoff";

/// A broadcast attempt ends when its last shard does: how many have.
const SHARDS_FINAL: &str = ", (SELECT COUNT(*) FROM runs r WHERE r.task_id = t.id \
     AND r.attempt = t.attempt AND r.status NOT IN ('dispatched', 'running')) AS shards_final";

/// What the alarm rules make of a batch's run updates and ended attempts: the events to
/// record with them.
pub type Raise<'a> =
    dyn Fn(&[&RunUpdate], &[EndedAttempt], &[InstanceEnded]) -> Vec<AlarmEvent> + Sync + 'a;

/// What the node brings to a batch that ends attempts ([`Store::apply_run_updates_raising`],
/// [`Store::end_leases`]).
pub struct Completing<'a> {
    /// What comes next for each attempt that ended (retry, dead, …).
    pub decide: &'a mut (dyn FnMut(&AttemptEnded) -> TaskNext + Send),
    /// The alarm events the batch raises, recorded in its transaction.
    pub raise: &'a Raise<'a>,
    /// The lease the workflow steps the batch makes ready are created claimed under (while
    /// it is still this node's); they come back in [`Applied::claimed`] for its wheel.
    pub claim: Option<NodeLease>,
    /// The rules of jobs the node read from the database less than its job cache's time
    /// to live ago (5 s; a change made on another node reaches them within that, as it
    /// reaches the node's dispatch); the transaction reads only the other jobs'.
    pub rules: &'a HashMap<i64, JobRules>,
}

#[derive(FromRow)]
pub(super) struct EndedRow {
    pub id: i64,
    pub job_id: i64,
    /// `step`: a workflow's, whose ending moves its instance on.
    pub kind: String,
    pub attempt: i32,
    lost_count: i32,
    pub status: String,
    max_attempts: Option<i32>,
    backoff: Option<String>,
    #[sqlx(default)]
    shards_final: i64,
    /// Read by an ack or a nack ([`Store::end_leases`]): the task's lease.
    #[sqlx(default)]
    pub lease_token: Option<String>,
}

/// What the ended attempts of a batch come to.
#[derive(Default)]
pub(super) struct Verdicts {
    outcomes: Vec<(i64, TaskNext)>,
    /// The same attempts, told in full (for the alarm rules).
    ended: Vec<EndedAttempt>,
    /// Tasks of succeeded attempts' child jobs, to create.
    children: Vec<NewTask>,
    /// Workflow steps' tasks that ended for good.
    steps: Vec<StepTaskEnded>,
    /// Runs that ended an attempt (or a shard of one), for the dashboard's counts.
    counted: Vec<(Millis, RunStatus)>,
    freed_limited: bool,
    /// Fixed-delay jobs whose fire ended for good, with their next fire time.
    resumed: Vec<(i64, Millis)>,
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
    /// tasks' locking read, their jobs' read, one update per kind of outcome, the
    /// dashboard's count.
    pub async fn apply_run_updates(
        &self,
        updates: &[RunUpdate],
        now: Millis,
        decide: &mut (dyn FnMut(&AttemptEnded) -> TaskNext + Send),
    ) -> Result<Applied> {
        let with = Completing {
            decide,
            raise: &|_, _, _| Vec::new(),
            claim: None,
            rules: &HashMap::new(),
        };
        self.apply_run_updates_raising(updates, now, with).await
    }

    /// [`Store::apply_run_updates`], also recording the alarm events `with.raise` sees in
    /// the batch's updates and ended attempts, in the same transaction: an event is kept
    /// exactly when what it tells of is. With `with.claim`, the workflow steps the batch
    /// makes ready are created claimed by that lease (while it is still this node's) and
    /// come back in [`Applied::claimed`] for its wheel. The jobs' read is only of jobs
    /// whose rules `with.rules` does not bring.
    pub async fn apply_run_updates_raising(
        &self,
        updates: &[RunUpdate],
        now: Millis,
        mut with: Completing<'_>,
    ) -> Result<Applied> {
        retrying!("apply_run_updates_raising", {
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
            let verdicts = self
                .decide_attempts(&mut tx, &ended, now, &mut with)
                .await?;
            self.conclude(tx, &changes, verdicts, now, &mut with).await
        })
    }

    /// The rest of a batch that ended attempts, in its transaction, then the commit: the
    /// tasks' next states, the workflow steps those tasks ended (and the tasks they make
    /// ready, and the instances they end), the children of succeeded tasks, the alarm
    /// events `with.raise` sees in all that, and the dashboard's counts.
    pub(super) async fn conclude(
        &self,
        mut tx: Tx,
        changes: &[&RunUpdate],
        verdicts: Verdicts,
        now: Millis,
        with: &mut Completing<'_>,
    ) -> Result<Applied> {
        self.finish_tasks(&mut tx, &verdicts.outcomes, now).await?;
        self.schedule_retries(&mut tx, &verdicts.outcomes, now)
            .await?;
        let moved = self
            .end_steps(&mut tx, &verdicts.steps, now, with.claim)
            .await?;
        let children = self
            .insert_children(&mut tx, &verdicts.children, now)
            .await?
            + moved.created;
        self.resume_fixed_delays(&mut tx, &verdicts.resumed).await?;
        let events = (with.raise)(changes, &verdicts.ended, &moved.instances);
        self.insert_alarm_events(&mut tx, &events).await?;
        // Last: every batch that ends a run this minute updates the same `run_stats` row,
        // so it is held from here to the commit only.
        self.count_finished(&mut tx, &verdicts.counted).await?;
        tx.commit().await?;
        self.remember_placements(moved.placed);
        Ok(Applied {
            written: changes.len(),
            tasks: verdicts.outcomes,
            children,
            freed_limited: verdicts.freed_limited,
            step_tasks: moved.created,
            claimed: moved.claimed,
            instances: moved.instances,
            instances_started: moved.started,
            handoffs_ms: moved.handoffs_ms,
            fires_resumed: verdicts.resumed.iter().map(|(_, at)| *at).min(),
            drifts: verdicts
                .ended
                .iter()
                .filter_map(|e| Some((e.job_id, e.drift?)))
                .collect(),
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
    /// decide one attempt from the same state) and asks `with.decide` what comes next for
    /// each attempt that is still the task's, unfinished.
    async fn decide_attempts(
        &self,
        tx: &mut Tx,
        ended: &[&RunUpdate],
        now: Millis,
        with: &mut Completing<'_>,
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
            self.rule_on(tx, rows, &by_task, now, with, &mut verdicts)
                .await?;
        }
        Ok(verdicts)
    }

    /// Asks `with.decide` what comes next for each attempt of `rows` (tasks read under
    /// their lock) that `by_task` ends and that is still the task's, unfinished.
    pub(super) async fn rule_on(
        &self,
        tx: &mut Tx,
        rows: Vec<EndedRow>,
        by_task: &HashMap<i64, Vec<&RunUpdate>>,
        now: Millis,
        with: &mut Completing<'_>,
        verdicts: &mut Verdicts,
    ) -> Result<()> {
        let read = self.job_rules(tx, &rows, with.rules).await?;
        let deleted = JobRules::default();
        for row in rows {
            let Some(updates) = by_task.get(&row.id) else {
                continue;
            };
            let job = with
                .rules
                .get(&row.job_id)
                .or_else(|| read.get(&row.job_id))
                .unwrap_or(&deleted);
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
                max_attempts: row.max_attempts.or(job.max_attempts).unwrap_or(1),
                backoff: match row.backoff.as_deref() {
                    Some(s) => parse_json(s)?,
                    None => job.backoff.clone().unwrap_or_default(),
                },
                child_jobs: job.child_jobs.clone(),
            };
            let verdict = (with.decide)(&view);
            verdicts.freed_limited |= job.bounded;
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
                        traceparent: None,
                        limit_key: None,
                    }));
            }
            let for_good = matches!(
                verdict,
                TaskNext::Succeeded | TaskNext::Dead | TaskNext::Cancelled
            );
            if let Some(next) = job.after_fire(now)
                && for_good
                && row.kind == TaskKind::Cron.as_str()
            {
                verdicts.resumed.push((row.job_id, next));
            }
            if row.kind == TaskKind::Step.as_str()
                && matches!(verdict, TaskNext::Succeeded | TaskNext::Dead)
            {
                verdicts.steps.push(StepTaskEnded {
                    task_id: row.id,
                    succeeded: verdict == TaskNext::Succeeded,
                    output: last.output.clone(),
                    finished_at: last.finished_at,
                });
            }
            let drift = (row.kind == TaskKind::Cron.as_str()).then(|| match last.started_at {
                Some(started) => Drift::Late((started - last.scheduled_at).max(0)),
                None => Drift::Skipped,
            });
            verdicts.ended.push(EndedAttempt {
                task_id: row.id,
                job_id: row.job_id,
                attempt: row.attempt,
                run_id: last.run_id,
                status: verdict_status,
                next: verdict.clone(),
                message: last.message.clone(),
                drift,
            });
            verdicts.outcomes.push((row.id, verdict));
        }
        Ok(())
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
                        .push(
                            ", owner_node = NULL, owner_epoch = NULL, lease_token = NULL, \
                             lease_expires_at = NULL WHERE id IN ",
                        );
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
                     owner_epoch = NULL, lease_token = NULL, lease_expires_at = NULL, updated_at = ",
                );
                qb.push_bind(now).push(", due_at = ");
                push_case(&mut qb, "id", chunk.iter().map(|(t, due, _)| (*t, *due)));
                qb.push(", lost_count = lost_count + ");
                push_case(
                    &mut qb,
                    "id",
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
        self.insert_new_tasks(tx, children, now, None).await?;
        Ok(children.len())
    }

    /// Inserts `tasks` (pending, first attempt) in `tx` under consecutive new ids; the
    /// first id. With `claim`, those it marks are created claimed by its lease (which the
    /// caller holds in `tx`).
    pub(super) async fn insert_new_tasks(
        &self,
        tx: &mut Tx,
        tasks: &[NewTask],
        now: Millis,
        claim: Option<(NodeLease, &[bool])>,
    ) -> Result<i64> {
        let first = self.task_ids_in(tx, tasks.len() as i64).await?;
        let owner = |i: usize| {
            claim
                .filter(|(_, which)| which.get(i) == Some(&true))
                .map(|(l, _)| l)
        };
        on_tx!(tx, |tx, Db| {
            for (chunk_no, chunk) in tasks.chunks(CHUNK).enumerate() {
                let base = chunk_no * CHUNK;
                let mut qb = QueryBuilder::<Db>::new(
                    "INSERT INTO tasks (id, job_id, kind, payload, params, status, due_at, attempt, \
                     lost_count, max_attempts, backoff, priority, owner_node, owner_epoch, created_at, \
                     updated_at, traceparent) ",
                );
                qb.push_values(chunk.iter().enumerate(), |mut b, (i, t)| {
                    let owner = owner(base + i);
                    let status = if owner.is_some() {
                        TaskStatus::Claimed
                    } else {
                        TaskStatus::Pending
                    };
                    b.push_bind(first + (base + i) as i64)
                        .push_bind(t.job_id)
                        .push_bind(t.kind.as_str())
                        .push_bind(t.payload.as_deref())
                        .push_bind(t.params.as_deref())
                        .push_bind(status.as_str())
                        .push_bind(t.due_at)
                        .push_bind(1_i32)
                        .push_bind(0_i32)
                        .push_bind(t.max_attempts)
                        .push_bind(t.backoff.as_ref().map(to_json))
                        .push_bind(t.priority)
                        .push_bind(owner.map(|l| l.node_id))
                        .push_bind(owner.map(|l| l.epoch))
                        .push_bind(now)
                        .push_bind(now)
                        .push_bind(t.traceparent.as_deref());
                });
                qb.build().execute(&mut **tx).await?;
            }
        });
        Ok(first)
    }
}

impl Store {
    /// Whom run reports, given as `(run id, task id)`, are about: each task that exists with
    /// its job and the job's app (`None` once the job is deleted: a forced delete leaves
    /// running tasks to finish), and each run that is recorded with its task. One statement
    /// per 1,000 reports.
    pub async fn report_owners(&self, reports: &[(i64, i64)]) -> Result<ReportOwners> {
        let mut owners = ReportOwners::default();
        for chunk in reports.chunks(CHUNK) {
            on_pool!(self, |pool, Db| {
                let mut qb = QueryBuilder::<Db>::new(
                    "SELECT 0, t.id, t.job_id, a.name FROM tasks t LEFT JOIN jobs j ON j.id = t.job_id \
                     LEFT JOIN apps a ON a.id = j.app_id WHERE t.id IN ",
                );
                push_ids(&mut qb, chunk.iter().map(|&(_, task)| task));
                qb.push(
                    " UNION ALL SELECT 1, r.id, r.task_id, r.executor FROM runs r WHERE r.id IN ",
                );
                push_ids(&mut qb, chunk.iter().map(|&(run, _)| run));
                let rows: Vec<(i64, i64, i64, Option<String>)> =
                    qb.build_query_as().fetch_all(pool).await?;
                for (kind, id, of, name) in rows {
                    if kind == 0 {
                        owners.tasks.insert(id, (of, name));
                    } else {
                        owners.runs.insert(id, (of, name));
                    }
                }
            });
        }
        Ok(owners)
    }

    /// Records runs that `lease` sent to executors: the run rows (kept if a report created
    /// them first) and their tasks' move from `claimed` to `running`. Only for tasks this
    /// lease still holds, unfinished, at the attempt that was sent: a task whose attempt
    /// already ended was written whole by its report (which carries the trigger's
    /// `dispatched_at`), so under load — reports applied before the record, the usual
    /// case — a batch costs one read and no write. A node taken over while its sends were
    /// unanswered (it stalled) records nothing for claims that moved on: the taker learnt
    /// from the executors what had arrived, and recorded that. Returns how many of `runs`
    /// belong to another lease now; `Error::Fenced` if `lease` is no longer this node's
    /// and there was something to write.
    pub async fn record_dispatches(
        &self,
        lease: NodeLease,
        runs: &[Dispatched],
        now: Millis,
    ) -> Result<usize> {
        retrying!("record_dispatches", {
            #[derive(FromRow)]
            struct Held {
                id: i64,
                status: String,
                attempt: i32,
                owner_node: Option<i64>,
                owner_epoch: Option<i64>,
            }
            if runs.is_empty() {
                return Ok(0);
            }
            let upsert_tail = if self.is_mysql() {
                " ON DUPLICATE KEY UPDATE dispatched_at = VALUES(dispatched_at), \
                 executor = COALESCE(executor, VALUES(executor))"
            } else {
                " ON CONFLICT(id) DO UPDATE SET dispatched_at = excluded.dispatched_at, \
                 executor = COALESCE(runs.executor, excluded.executor) ON CONFLICT DO NOTHING"
            };
            // Rows in run-id order, as `apply_run_updates` writes them: two transactions touching
            // the same runs lock them in the same order and cannot deadlock.
            let mut runs: Vec<&Dispatched> = runs.iter().collect();
            runs.sort_by_key(|r| r.run_id);
            let mut elsewhere = 0;
            on_pool!(self, |pool, Db| {
                let mut tx = pool.begin_write().await?;
                let mut leased = false;
                for chunk in runs.chunks(CHUNK) {
                    let mut qb = QueryBuilder::<Db>::new(
                        "SELECT id, status, attempt, owner_node, owner_epoch FROM tasks WHERE id IN ",
                    );
                    push_ids(&mut qb, chunk.iter().map(|r| r.task_id));
                    let tasks: HashMap<i64, Held> = qb
                        .build_query_as::<Held>()
                        .fetch_all(&mut *tx)
                        .await?
                        .into_iter()
                        .map(|t| (t.id, t))
                        .collect();
                    let mut write: Vec<&Dispatched> = Vec::new();
                    for r in chunk {
                        let Some(t) = tasks.get(&r.task_id) else {
                            continue;
                        };
                        let ours = t.owner_node == Some(lease.node_id)
                            && t.owner_epoch == Some(lease.epoch);
                        if t.owner_node.is_some() && !ours {
                            elsewhere += 1;
                        } else if ours
                            && t.attempt == r.attempt
                            && t.status == TaskStatus::Claimed.as_str()
                        {
                            write.push(r);
                        }
                    }
                    if write.is_empty() {
                        continue;
                    }
                    if !leased {
                        // The lease is held (a shared lock on this node's fence) until commit:
                        // no take-over of this node can move the claims read as its own above.
                        // (Locking the task rows instead would take them before the runs, the
                        // opposite order of applying reports, and deadlock with it.)
                        hold_lease!(self, &mut *tx, lease);
                        leased = true;
                    }
                    let mut qb = insert_dispatched::<Db>(write.iter().copied());
                    qb.push(upsert_tail);
                    qb.build().execute(&mut *tx).await?;

                    // Tasks by the attempt that was sent (nearly always one group): only that
                    // attempt moves on, since a fast failure report may have moved the task to
                    // its next attempt, claimed again, since it was read.
                    let mut by_attempt: BTreeMap<i32, Vec<i64>> = BTreeMap::new();
                    for r in &write {
                        by_attempt.entry(r.attempt).or_default().push(r.task_id);
                    }
                    for (attempt, mut task_ids) in by_attempt {
                        task_ids.sort_unstable();
                        task_ids.dedup();
                        let mut qb = QueryBuilder::<Db>::new(
                            "UPDATE tasks SET status = 'running', updated_at = ",
                        );
                        qb.push_bind(now)
                            .push(" WHERE status = 'claimed' AND attempt = ")
                            .push_bind(attempt)
                            .push(" AND id IN ");
                        push_ids(&mut qb, task_ids.into_iter());
                        qb.build().execute(&mut *tx).await?;
                    }
                }
                tx.commit().await?;
            });
            Ok(elsewhere)
        })
    }

    pub async fn get_run(&self, id: i64) -> Result<Run> {
        let sql = format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = ?");
        on_pool!(self, |pool, Db| {
            let row: Option<RunRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
                .bind(id)
                .fetch_optional(pool)
                .await?;
            row.ok_or_else(|| Error::NotFound(format!("run {id}")))?
                .try_into()
        })
    }

    /// Runs, newest first.
    pub async fn list_runs(&self, f: &RunFilter) -> Result<Page<Run>> {
        let limit = f.limit.clamp(1, 1000);
        on_pool!(self, |pool, Db| {
            let mut qb =
                QueryBuilder::<Db>::new(format!("SELECT {RUN_COLUMNS} FROM runs WHERE 1 = 1"));
            if let Some(job) = f.job_id {
                qb.push(" AND job_id = ").push_bind(job);
            }
            if let Some(apps) = &f.apps {
                in_apps!(qb, "job_id", apps);
            }
            if let Some(task) = f.task_id {
                qb.push(" AND task_id = ").push_bind(task);
            }
            if let Some(status) = f.status {
                qb.push(" AND status = ").push_bind(status.as_str());
            }
            if let Some(before) = f.before_id {
                qb.push(" AND id < ").push_bind(before);
            }
            qb.push(" ORDER BY id DESC LIMIT ")
                .push_bind(i64::from(limit) + 1);
            let rows: Vec<RunRow> = qb.build_query_as().fetch_all(pool).await?;
            page(rows, limit, |r| r.id)
        })
    }

    /// Runs not yet finished on any of these executors (to mark them lost when they die).
    /// The dispatched and running runs of these executors, each `(app, address)`: runs at
    /// the address of that app's jobs (or of jobs deleted since), so one app's executor can
    /// never speak for runs another app's executor has at the same address.
    pub async fn unfinished_runs_on(&self, executors: &[(String, String)]) -> Result<Vec<Run>> {
        if executors.is_empty() {
            return Ok(Vec::new());
        }
        on_pool!(self, |pool, Db| {
            let mut qb = QueryBuilder::<Db>::new(format!(
                "SELECT {RUN_COLUMNS} FROM runs WHERE status IN ('dispatched', 'running') AND ("
            ));
            for (i, (app, address)) in executors.iter().enumerate() {
                if i > 0 {
                    qb.push(" OR ");
                }
                qb.push("(executor = ")
                    .push_bind(address.as_str())
                    .push(
                        " AND (job_id IN (SELECT sj.id FROM jobs sj JOIN apps sa ON sa.id = sj.app_id \
                         WHERE sa.name = ",
                    )
                    .push_bind(app.as_str())
                    .push(") OR job_id NOT IN (SELECT id FROM jobs)))");
            }
            qb.push(")");
            let rows: Vec<RunRow> = qb.build_query_as().fetch_all(pool).await?;
            rows.into_iter().map(Run::try_from).collect()
        })
    }

    /// Finished runs per `bucket_ms` (a multiple of a minute) and status from `since`, in
    /// time order.
    pub async fn run_stats(&self, since: Millis, bucket_ms: Millis) -> Result<Vec<RunStat>> {
        let bucket = bucket_ms.max(60_000);
        on_pool!(self, |pool, Db| {
            Ok(sqlx::query_as(
                "SELECT minute - (minute % ?) AS bucket, status, CAST(SUM(runs) AS SIGNED) AS runs \
                 FROM run_stats WHERE minute >= ? GROUP BY bucket, status ORDER BY bucket",
            )
            .bind(bucket)
            .bind(since)
            .fetch_all(pool)
            .await?)
        })
    }

    /// The dashboard's numbers: jobs, tasks waiting to run, runs scheduled since `since` by
    /// status; of `apps`' jobs only, when given.
    pub async fn console_counts(&self, since: Millis, apps: Option<&[String]>) -> Result<Counts> {
        on_pool!(self, |pool, Db| {
            let mut qb = QueryBuilder::<Db>::new("SELECT COUNT(*) FROM jobs WHERE 1 = 1");
            if let Some(apps) = apps {
                in_apps!(qb, "id", apps);
            }
            let jobs: i64 = qb.build_query_scalar().fetch_one(pool).await?;
            let mut qb = QueryBuilder::<Db>::new(concat!(
                "SELECT COUNT(*) FROM tasks WHERE status IN ",
                unstarted!()
            ));
            if let Some(apps) = apps {
                in_apps!(qb, "job_id", apps);
            }
            let tasks_pending: i64 = qb.build_query_scalar().fetch_one(pool).await?;
            let mut qb =
                QueryBuilder::<Db>::new("SELECT status, COUNT(*) FROM runs WHERE scheduled_at >= ");
            qb.push_bind(since);
            if let Some(apps) = apps {
                in_apps!(qb, "job_id", apps);
            }
            qb.push(" GROUP BY status");
            let runs_by_status: Vec<(String, i64)> = qb.build_query_as().fetch_all(pool).await?;
            Ok(Counts {
                jobs,
                tasks_pending,
                runs_by_status,
            })
        })
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
        RunUpdate::sample(run_id, run_id, status)
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
