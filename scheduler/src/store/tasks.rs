//! Tasks: creation (idempotent keys, created claimed), reads, cancel, the scan's claim, claims after a crash or a take-over, fires waiting for an executor, retention.

use super::limits::Limited;
use super::*;

impl Store {
    /// Creates tasks in one transaction, all or nothing. A task whose `key` already exists for
    /// its job is not created again: its existing id comes back with `false`.
    pub async fn insert_tasks(&self, tasks: &[NewTask], now: Millis) -> Result<Vec<(i64, bool)>> {
        self.insert_tasks_claiming(tasks, None, now).await
    }

    /// [`Store::insert_tasks`], and those of `claim`'s tasks marked `true` (due inside the
    /// window, of a job without `max_concurrency`) are created already claimed by its
    /// lease, in the same transaction: the node that took them puts them straight into
    /// its wheel, with no claim of their own. `Error::Fenced` if the lease is gone.
    pub async fn insert_tasks_claiming(
        &self,
        tasks: &[NewTask],
        claim: Option<(NodeLease, &[bool])>,
        now: Millis,
    ) -> Result<Vec<(i64, bool)>> {
        retrying!("insert_tasks_claiming", {
            match self.insert_tasks_once(tasks, claim, now).await {
                // A concurrent create took one of the keys between our lookup and our insert: the
                // second look finds it, and the caller gets the existing task as it should.
                Err(Error::Conflict(_)) => self.insert_tasks_once(tasks, claim, now).await,
                other => other,
            }
        })
    }

    async fn insert_tasks_once(
        &self,
        tasks: &[NewTask],
        claim: Option<(NodeLease, &[bool])>,
        now: Millis,
    ) -> Result<Vec<(i64, bool)>> {
        if tasks.is_empty() {
            return Ok(Vec::new());
        }
        let first_id = self.task_ids(tasks.len() as i64).await?;
        on_pool!(self, |pool, Db| {
            let mut tx = pool.begin_write().await?;
            // Existing keys, looked up in chunks.
            let keyed: Vec<(i64, &str)> = tasks
                .iter()
                .filter_map(|t| t.key.as_deref().map(|k| (t.job_id, k)))
                .collect();
            let mut existing: HashMap<(i64, String), i64> = HashMap::new();
            for chunk in keyed.chunks(CHUNK) {
                // An OR of equalities is a set of unique-key lookups on both backends (SQLite
                // scans the whole index for a row-value IN).
                let mut qb =
                    QueryBuilder::<Db>::new("SELECT id, job_id, idem_key FROM tasks WHERE ");
                let mut sep = qb.separated(" OR ");
                for (job, key) in chunk {
                    sep.push("(job_id = ")
                        .push_bind_unseparated(*job)
                        .push_unseparated(" AND idem_key = ")
                        .push_bind_unseparated(*key)
                        .push_unseparated(")");
                }
                let rows: Vec<(i64, i64, String)> = qb.build_query_as().fetch_all(&mut *tx).await?;
                existing.extend(rows.into_iter().map(|(id, job, key)| ((job, key), id)));
            }
            let mut out = Vec::with_capacity(tasks.len());
            let mut fresh = Vec::with_capacity(tasks.len());
            let claimable = |i: usize| claim.is_some_and(|(_, which)| which.get(i) == Some(&true));
            for (i, t) in tasks.iter().enumerate() {
                match t
                    .key
                    .as_ref()
                    .and_then(|k| existing.get(&(t.job_id, k.clone())))
                {
                    Some(&id) => out.push((id, false)),
                    None => {
                        let id = first_id + i as i64;
                        out.push((id, true));
                        fresh.push((id, t, claimable(i)));
                    }
                }
            }
            let owner = match claim {
                Some((lease, _)) if fresh.iter().any(|(_, _, c)| *c) => {
                    // Claimed by a live lease only, held until commit, like the scan's.
                    hold_lease!(self, &mut *tx, lease);
                    Some(lease)
                }
                _ => None,
            };
            for chunk in fresh.chunks(CHUNK) {
                let mut qb = QueryBuilder::<Db>::new(
                    "INSERT INTO tasks (id, job_id, kind, idem_key, payload, params, status, due_at, attempt, \
                     lost_count, max_attempts, backoff, priority, owner_node, owner_epoch, created_at, updated_at, traceparent, \
                     limit_key) ",
                );
                qb.push_values(chunk, |mut b, (id, t, claimed)| {
                    let owner = owner.filter(|_| *claimed);
                    let status = if owner.is_some() {
                        TaskStatus::Claimed
                    } else {
                        TaskStatus::Pending
                    };
                    b.push_bind(*id)
                        .push_bind(t.job_id)
                        .push_bind(t.kind.as_str())
                        .push_bind(t.key.as_deref())
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
                        .push_bind(t.traceparent.as_deref())
                        .push_bind(t.limit_key.as_deref());
                });
                qb.build()
                    .execute(&mut *tx)
                    .await
                    .map_err(|e| match Error::from(e) {
                        Error::Conflict(_) => Error::Conflict(
                            "a task with this key was created concurrently; retry".into(),
                        ),
                        other => other,
                    })?;
            }
            tx.commit().await?;
            Ok(out)
        })
    }

    pub async fn get_task(&self, id: i64) -> Result<Task> {
        let sql = format!("SELECT {TASK_COLUMNS} FROM tasks WHERE id = ?");
        on_pool!(self, |pool, Db| {
            let row: Option<TaskRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
                .bind(id)
                .fetch_optional(pool)
                .await?;
            row.ok_or_else(|| Error::NotFound(format!("task {id}")))?
                .try_into()
        })
    }

    /// The task of `job_id` created with `key`.
    pub async fn get_task_by_key(&self, job_id: i64, key: &str) -> Result<Task> {
        let sql = format!("SELECT {TASK_COLUMNS} FROM tasks WHERE job_id = ? AND idem_key = ?");
        on_pool!(self, |pool, Db| {
            let row: Option<TaskRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
                .bind(job_id)
                .bind(key)
                .fetch_optional(pool)
                .await?;
            row.ok_or_else(|| Error::NotFound(format!("task with key `{key}` of job {job_id}")))?
                .try_into()
        })
    }

    /// Tasks, newest first.
    pub async fn list_tasks(&self, f: &TaskFilter) -> Result<Page<Task>> {
        let limit = f.limit.clamp(1, 1000);
        on_pool!(self, |pool, Db| {
            let mut qb =
                QueryBuilder::<Db>::new(format!("SELECT {TASK_COLUMNS} FROM tasks WHERE 1 = 1"));
            if let Some(job) = f.job_id {
                qb.push(" AND job_id = ").push_bind(job);
            }
            if let Some(apps) = &f.apps {
                in_apps!(qb, "job_id", apps);
            }
            match f.state {
                None => {}
                Some(TaskState::Pending) => {
                    qb.push(concat!(" AND status IN ", unstarted!(), " AND attempt = 1"));
                }
                Some(TaskState::Failed) => {
                    qb.push(concat!(" AND status IN ", unstarted!(), " AND attempt > 1"));
                }
                Some(TaskState::Is(status)) => {
                    qb.push(" AND status = ").push_bind(status.as_str());
                }
            }
            if let Some(key) = &f.key {
                qb.push(" AND idem_key = ").push_bind(key.as_str());
            }
            if let Some(from) = f.due_from {
                qb.push(" AND due_at >= ").push_bind(from);
            }
            if let Some(to) = f.due_to {
                qb.push(" AND due_at < ").push_bind(to);
            }
            if let Some(before) = f.before_id {
                qb.push(" AND id < ").push_bind(before);
            }
            qb.push(" ORDER BY id DESC LIMIT ")
                .push_bind(i64::from(limit) + 1);
            let rows: Vec<TaskRow> = qb.build_query_as().fetch_all(pool).await?;
            page(rows, limit, |r| r.id)
        })
    }

    /// Cancels a task that has not started. Returns the task as it now is and whether this
    /// call cancelled it (false: it was already cancelled). Running or finished → conflict.
    /// A fixed-delay job's fire cancelled sets its next fire, as its end would have.
    pub async fn cancel_task(&self, id: i64, now: Millis) -> Result<(Task, bool)> {
        retrying!("cancel_task", {
            let mut owned = self.begin().await?;
            let tx = &mut owned;
            let changed = on_tx!(tx, |tx, Db| {
                sqlx::query(concat!(
                    "UPDATE tasks SET status = 'cancelled', updated_at = ? WHERE id = ? AND status IN ",
                    unstarted!()
                ))
                .bind(now)
                .bind(id)
                .execute(&mut **tx)
                .await?
                .affected()
                    > 0
            });
            if changed {
                let fire: Option<(i64, String)> = on_tx!(tx, |tx, Db| {
                    sqlx::query_as(
                        "SELECT j.id, j.schedule FROM tasks t JOIN jobs j ON j.id = t.job_id \
                         WHERE t.id = ? AND t.kind = 'cron'",
                    )
                    .bind(id)
                    .fetch_optional(&mut **tx)
                    .await?
                });
                if let Some((job_id, schedule)) = fire
                    && let Ok(Schedule::FixedDelay { every_ms }) = serde_json::from_str(&schedule)
                {
                    self.resume_fixed_delays(tx, &[(job_id, now.saturating_add(every_ms))])
                        .await?;
                }
            }
            owned.commit().await?;
            let task = self.get_task(id).await?;
            match task.status {
                TaskStatus::Cancelled => Ok((task, changed)),
                s => Err(Error::Conflict(format!(
                    "task {id} is {s}; only a pending task can be cancelled"
                ))),
            }
        })
    }

    /// Debounces pending task `id` — one no node has claimed yet — onto a new create of its
    /// key: its payload becomes `payload` and it is due at `due_at`, but no later than
    /// `bound_ms` after it was created (the first create of the run of them). A throttled
    /// one goes back to pending: its new payload may be of another bucket. `false` when it
    /// is not pending any more.
    pub async fn debounce_task(
        &self,
        id: i64,
        payload: Option<&str>,
        due_at: Millis,
        bound_ms: Millis,
        now: Millis,
    ) -> Result<bool> {
        retrying!("debounce_task", {
            on_pool!(self, |pool, Db| {
                Ok(sqlx::query(
                    "UPDATE tasks SET payload = ?, \
                       due_at = CASE WHEN ? < created_at + ? THEN ? ELSE created_at + ? END, \
                       status = 'pending', limit_key = NULL, updated_at = ? \
                     WHERE id = ? AND status IN ('pending', 'throttled')",
                )
                .bind(payload)
                .bind(due_at)
                .bind(bound_ms)
                .bind(due_at)
                .bind(bound_ms)
                .bind(now)
                .bind(id)
                .execute(pool)
                .await?
                .affected()
                    > 0)
            })
        })
    }

    /// Gives up task `id`'s key, so a new task of its job can take it (a debounced job's
    /// key names the task pending under it).
    pub async fn hand_key_over(&self, id: i64) -> Result<()> {
        retrying!("hand_key_over", {
            on_pool!(self, |pool, Db| {
                sqlx::query("UPDATE tasks SET idem_key = NULL WHERE id = ?")
                    .bind(id)
                    .execute(pool)
                    .await?;
            });
            Ok(())
        })
    }

    /// Sets task `id`'s created time: a debounced task that replaced one about to fire
    /// keeps the first create's, which bounds its due time.
    pub async fn set_created_at(&self, id: i64, at: Millis) -> Result<()> {
        retrying!("set_created_at", {
            on_pool!(self, |pool, Db| {
                sqlx::query("UPDATE tasks SET created_at = ? WHERE id = ?")
                    .bind(at)
                    .bind(id)
                    .execute(pool)
                    .await?;
            });
            Ok(())
        })
    }

    /// One scan, in one transaction: turns the recurring fire times due by `until` into task
    /// rows (one per job and fire time, whatever races), advances those jobs' next fire times,
    /// and claims up to `limit` pending tasks due by `until` for this node's wheel — those of
    /// jobs with a concurrency bound only when due by `bounded_until` (the earlier: a claim
    /// holds a slot, [`crate::config::Config::bounded_window_ms`]).
    ///
    /// The claim is durable: a claimed task stays `claimed` by `lease` until its dispatch is
    /// recorded, so a node that restarts finds it again ([`Store::claims_of`]) instead of losing
    /// it, and no other node takes it while the lease holds.
    pub async fn claim_due(
        &self,
        lease: NodeLease,
        now: Millis,
        until: Millis,
        bounded_until: Millis,
        limit: u32,
        plan: &mut (dyn FnMut(&DueJob) -> JobFires + Send),
    ) -> Result<Claimed> {
        retrying!("claim_due", {
            let mut tx = self.begin().await?;
            // Claim only under a live lease, holding it for the transaction: a take-over (which
            // bumps the epoch) waits for this claim and then moves it too, or runs first and
            // this claim is refused.
            self.hold_lease_in(&mut tx, lease).await?;
            let cron_fires = self
                .plan_recurring(&mut tx, now, until, limit, plan)
                .await?;
            // Jobs with a concurrency bound are claimed one by one, never with the rest.
            let limited = self.limited_jobs(&mut tx).await?;
            let mut rows = self.due_unlimited(&mut tx, until, limit, &limited).await?;
            let mut throttled = Vec::new();
            let mut slot_waits = Vec::new();
            let mut bounded_next: Option<Millis> = None;
            for job in &limited {
                let room = i64::from(limit) - rows.len() as i64;
                if room <= 0 {
                    break;
                }
                let until = match job.max_concurrency {
                    Some(_) => until.min(bounded_until),
                    None => until,
                };
                let bounded = self.due_bounded(&mut tx, job, room, until, now).await?;
                if job.max_concurrency.is_some() {
                    let next = self.next_due_after(&mut tx, job.id, until).await?;
                    bounded_next = match (bounded_next, next) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    };
                }
                if bounded.throttled > 0 {
                    throttled.push((job.id, bounded.throttled));
                }
                slot_waits.extend(bounded.slot_waits.map(|waits| (job.id, waits)));
                rows.extend(bounded.claim);
            }
            self.mark_claimed(&mut tx, lease, &rows).await?;
            tx.commit().await?;
            Ok(Claimed {
                tasks: rows
                    .into_iter()
                    .map(DueTask::try_from)
                    .collect::<Result<_>>()?,
                cron_fires,
                throttled,
                bounded_next,
                slot_waits,
            })
        })
    }

    /// Fails with [`Error::Fenced`] unless `lease` is this node's live one, and holds it
    /// (a shared lock on MySQL) until the transaction ends.
    async fn hold_lease_in(&self, tx: &mut Tx, lease: NodeLease) -> Result<()> {
        on_tx!(tx, |tx, Db| hold_lease!(self, &mut **tx, lease));
        Ok(())
    }

    /// The recurring jobs due by `until`: their fire times become task rows (idempotent
    /// keys, so a fire is one task whatever races) and their next fire times move on.
    /// Returns how many fires were planned.
    async fn plan_recurring(
        &self,
        tx: &mut Tx,
        now: Millis,
        until: Millis,
        limit: u32,
        plan: &mut (dyn FnMut(&DueJob) -> JobFires + Send),
    ) -> Result<usize> {
        let skip_locked = self.skip_locked();
        let jobs: Vec<RecurringRow> = on_tx!(tx, |tx, Db| {
            sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "SELECT id, schedule, misfire, next_fire_at, generation FROM jobs \
                 WHERE enabled = 1 AND next_fire_at <= ? ORDER BY next_fire_at LIMIT ?{skip_locked}"
            )))
            .bind(until)
            .bind(i64::from(limit))
            .fetch_all(&mut **tx)
            .await?
        });
        let mut fires: Vec<(i64, i64, Millis)> = Vec::new();
        let mut next: Vec<(i64, Option<Millis>)> = Vec::with_capacity(jobs.len());
        for row in jobs {
            let Some(next_fire_at) = row.next_fire_at else {
                continue;
            };
            let job = DueJob {
                id: row.id,
                schedule: parse_json(&row.schedule)?,
                misfire: parse(&row.misfire)?,
                next_fire_at,
            };
            let planned = plan(&job);
            fires.extend(planned.fires.iter().map(|&t| (row.id, row.generation, t)));
            next.push((row.id, planned.next_fire_at));
        }
        if !fires.is_empty() {
            self.insert_fires(tx, &fires, now).await?;
        }
        for chunk in next.chunks(CHUNK) {
            on_tx!(tx, |tx, Db| {
                let mut qb = QueryBuilder::<Db>::new("UPDATE jobs SET next_fire_at = ");
                push_case(&mut qb, "id", chunk.iter().copied());
                qb.push(" WHERE id IN ");
                push_ids(&mut qb, chunk.iter().map(|(id, _)| *id));
                qb.build().execute(&mut **tx).await?;
            });
        }
        Ok(fires.len())
    }

    /// Fire times of job `job_id` (at `generation`) in a range, as its fires (SPEC §11,
    /// backfill): each created unless that fire exists already. Returns how many it created.
    pub async fn backfill_fires(
        &self,
        job_id: i64,
        generation: i64,
        times: &[Millis],
        now: Millis,
    ) -> Result<u64> {
        if times.is_empty() {
            return Ok(0);
        }
        let fires: Vec<(i64, i64, Millis)> =
            times.iter().map(|&t| (job_id, generation, t)).collect();
        retrying!("backfill_fires", {
            let mut tx = self.begin().await?;
            let created = self.insert_fires(&mut tx, &fires, now).await?;
            tx.commit().await?;
            Ok(created)
        })
    }

    /// Recurring fires (job, generation, time) as pending task rows; a fire already there
    /// is left alone. Returns how many it created.
    async fn insert_fires(
        &self,
        tx: &mut Tx,
        fires: &[(i64, i64, Millis)],
        now: Millis,
    ) -> Result<u64> {
        let mut created = 0;
        let insert_ignore = self.insert_ignore();
        let first = self.task_ids_in(tx, fires.len() as i64).await?;
        for (chunk_no, chunk) in fires.chunks(CHUNK).enumerate() {
            let base = first + (chunk_no * CHUNK) as i64;
            on_tx!(tx, |tx, Db| {
                let mut qb = QueryBuilder::<Db>::new(format!(
                    "{insert_ignore} INTO tasks (id, job_id, kind, idem_key, status, due_at, attempt, \
                     lost_count, priority, created_at, updated_at) "
                ));
                qb.push_values(
                    chunk.iter().enumerate(),
                    |mut b, (i, (job, generation, t))| {
                        b.push_bind(base + i as i64)
                            .push_bind(*job)
                            .push_bind(TaskKind::Cron.as_str())
                            .push_bind(cron_key(*generation, *t))
                            .push_bind(TaskStatus::Pending.as_str())
                            .push_bind(*t)
                            .push_bind(1_i32)
                            .push_bind(0_i32)
                            .push_bind(0_i32)
                            .push_bind(now)
                            .push_bind(now);
                    },
                );
                created += qb.build().execute(&mut **tx).await?.affected();
            });
        }
        Ok(created)
    }

    /// Up to `limit` pending tasks due by `until`, earliest first, of jobs not in `limited`.
    async fn due_unlimited(
        &self,
        tx: &mut Tx,
        until: Millis,
        limit: u32,
        limited: &[Limited],
    ) -> Result<Vec<DueRow>> {
        let skip_locked = self.skip_locked();
        Ok(on_tx!(tx, |tx, Db| {
            let mut qb = QueryBuilder::<Db>::new(concat!(
                due_select!(),
                " WHERE status = 'pending' AND due_at <= "
            ));
            qb.push_bind(until);
            if !limited.is_empty() {
                qb.push(" AND job_id NOT IN ");
                push_ids(&mut qb, limited.iter().map(|j| j.id));
            }
            qb.push(" ORDER BY due_at LIMIT ")
                .push_bind(i64::from(limit))
                .push(skip_locked);
            qb.build_query_as().fetch_all(&mut **tx).await?
        }))
    }

    /// Marks `rows` claimed by `lease`.
    async fn mark_claimed(&self, tx: &mut Tx, lease: NodeLease, rows: &[DueRow]) -> Result<()> {
        for chunk in rows.chunks(CHUNK) {
            on_tx!(tx, |tx, Db| {
                let mut qb =
                    QueryBuilder::<Db>::new("UPDATE tasks SET status = 'claimed', owner_node = ");
                qb.push_bind(lease.node_id)
                    .push(", owner_epoch = ")
                    .push_bind(lease.epoch)
                    .push(" WHERE id IN ");
                push_ids(&mut qb, chunk.iter().map(|r| r.id));
                qb.build().execute(&mut **tx).await?;
            });
        }
        Ok(())
    }

    /// Tasks still claimed by an earlier epoch of this node (it crashed or was killed after
    /// claiming them and before recording their dispatch).
    pub async fn claims_of(&self, lease: NodeLease) -> Result<Vec<DueTask>> {
        on_pool!(self, |pool, Db| {
            let rows: Vec<DueRow> = sqlx::query_as(concat!(
                due_select!(),
                " WHERE status = 'claimed' AND owner_node = ? AND owner_epoch < ? ORDER BY due_at"
            ))
            .bind(lease.node_id)
            .bind(lease.epoch)
            .fetch_all(pool)
            .await?;
            rows.into_iter().map(DueTask::try_from).collect()
        })
    }

    /// Moves this node's claims to `lease` (an earlier epoch's claims after a restart, or
    /// claims just taken over). `Error::Fenced` if this node was itself taken over meanwhile:
    /// the claims are the taker's then, and must not be pulled back.
    pub async fn adopt_claims(&self, lease: NodeLease, task_ids: &[i64]) -> Result<()> {
        retrying!("adopt_claims", {
            on_pool!(control self, |pool, Db| {
                let mut tx = pool.begin_write().await?;
                hold_lease!(self, &mut *tx, lease);
                for chunk in task_ids.chunks(CHUNK) {
                    let mut qb = QueryBuilder::<Db>::new("UPDATE tasks SET owner_node = ");
                    qb.push_bind(lease.node_id)
                        .push(", owner_epoch = ")
                        .push_bind(lease.epoch)
                        .push(" WHERE status = 'claimed' AND owner_node = ")
                        .push_bind(lease.node_id)
                        .push(" AND id IN ");
                    push_ids(&mut qb, chunk.iter().copied());
                    qb.build().execute(&mut *tx).await?;
                }
                tx.commit().await?;
            });
            Ok(())
        })
    }

    /// Hands claims back (graceful shutdown): the tasks become pending for any node.
    pub async fn release_claims(&self, lease: NodeLease, task_ids: &[i64]) -> Result<()> {
        retrying!("release_claims", {
            self.unclaim(lease, task_ids, TaskStatus::Pending, None)
                .await
                .map(|_| ())
        })
    }

    /// Claims of `lease` leave its wheel for the database with `status`, owned by no node
    /// (and `updated_at`, when given); how many moved (one cancelled or taken over meanwhile
    /// does not).
    pub(super) async fn unclaim(
        &self,
        lease: NodeLease,
        task_ids: &[i64],
        status: TaskStatus,
        updated_at: Option<Millis>,
    ) -> Result<u64> {
        let mut moved = 0;
        on_pool!(self, |pool, Db| {
            for chunk in task_ids.chunks(CHUNK) {
                let mut qb = QueryBuilder::<Db>::new("UPDATE tasks SET status = ");
                qb.push_bind(status.as_str())
                    .push(", owner_node = NULL, owner_epoch = NULL");
                if let Some(at) = updated_at {
                    qb.push(", updated_at = ").push_bind(at);
                }
                qb.push(" WHERE status = 'claimed' AND owner_node = ")
                    .push_bind(lease.node_id)
                    .push(" AND owner_epoch = ")
                    .push_bind(lease.epoch)
                    .push(" AND id IN ");
                push_ids(&mut qb, chunk.iter().copied());
                moved += qb.build().execute(pool).await?.affected();
            }
        });
        Ok(moved)
    }

    /// Claimed fires that found no live executor of their app: out of `lease`'s wheel, they
    /// wait in the database (`waiting`, since `since`) until one registers
    /// ([`Store::wake_waiting`]) or they wait too long ([`Store::claim_expired_waiting`]).
    /// A wait is not an attempt.
    pub async fn park_waiting(&self, lease: NodeLease, task_ids: &[(i64, Millis)]) -> Result<()> {
        retrying!("park_waiting", {
            let mut by_since: BTreeMap<Millis, Vec<i64>> = BTreeMap::new();
            for &(id, since) in task_ids {
                by_since.entry(since).or_default().push(id);
            }
            for (since, ids) in by_since {
                self.unclaim(lease, &ids, TaskStatus::Waiting, Some(since))
                    .await?;
            }
            Ok(())
        })
    }

    /// Waiting fires of these apps' jobs become pending again (an executor of the app is
    /// live); returns how many.
    pub async fn wake_waiting(&self, apps: &[String]) -> Result<u64> {
        if apps.is_empty() {
            return Ok(0);
        }
        on_pool!(self, |pool, Db| {
            let mut qb = QueryBuilder::<Db>::new(
                "UPDATE tasks SET status = 'pending' WHERE status = 'waiting'",
            );
            in_apps!(qb, "job_id", apps);
            Ok(qb.build().execute(pool).await?.affected())
        })
    }

    /// Claims, for `lease`, up to `limit` waiting fires that have waited longer than their
    /// job's `no_executor_timeout_ms`, with their job's app: the caller fails each as an
    /// attempt.
    pub async fn claim_expired_waiting(
        &self,
        lease: NodeLease,
        now: Millis,
        limit: u32,
    ) -> Result<Vec<(DueTask, String, Millis)>> {
        retrying!("claim_expired_waiting", {
            #[derive(FromRow)]
            struct Expired {
                id: i64,
                app: String,
                since: i64,
            }
            let skip_locked = self.skip_locked();
            on_pool!(self, |pool, Db| {
                let mut tx = pool.begin_write().await?;
                hold_lease!(self, &mut *tx, lease);
                let expired: Vec<Expired> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
                    "SELECT t.id, a.name AS app, t.updated_at AS since FROM tasks t \
                     JOIN jobs j ON j.id = t.job_id JOIN apps a ON a.id = j.app_id \
                     WHERE t.status = 'waiting' \
                     AND t.updated_at < ? - COALESCE(j.no_executor_timeout_ms, {DEFAULT_NO_EXECUTOR_TIMEOUT_MS}) \
                     ORDER BY t.updated_at LIMIT ?{skip_locked}"
                )))
                .bind(now)
                .bind(i64::from(limit))
                .fetch_all(&mut *tx)
                .await?;
                if expired.is_empty() {
                    return Ok(Vec::new());
                }
                let mut qb =
                    QueryBuilder::<Db>::new("UPDATE tasks SET status = 'claimed', owner_node = ");
                qb.push_bind(lease.node_id)
                    .push(", owner_epoch = ")
                    .push_bind(lease.epoch)
                    .push(" WHERE status = 'waiting' AND id IN ");
                push_ids(&mut qb, expired.iter().map(|e| e.id));
                qb.build().execute(&mut *tx).await?;
                let mut qb = QueryBuilder::<Db>::new(concat!(due_select!(), " WHERE id IN "));
                push_ids(&mut qb, expired.iter().map(|e| e.id));
                let rows: Vec<DueRow> = qb.build_query_as().fetch_all(&mut *tx).await?;
                tx.commit().await?;
                let meta: HashMap<i64, (String, Millis)> = expired
                    .into_iter()
                    .map(|e| (e.id, (e.app, e.since)))
                    .collect();
                rows.into_iter()
                    .map(|r| {
                        let (app, since) = meta.get(&r.id).cloned().unwrap_or_default();
                        Ok((DueTask::try_from(r)?, app, since))
                    })
                    .collect()
            })
        })
    }

    /// Claimed tasks whose job was deleted: cancelled (a forced delete cancelled its
    /// pending tasks; these were created or claimed as it happened).
    pub async fn cancel_orphans(&self, task_ids: &[i64], now: Millis) -> Result<()> {
        retrying!("cancel_orphans", {
            on_pool!(self, |pool, Db| {
                for chunk in task_ids.chunks(CHUNK) {
                    let mut qb = QueryBuilder::<Db>::new(
                        "UPDATE tasks SET status = 'cancelled', updated_at = ",
                    );
                    qb.push_bind(now).push(
                        ", owner_node = NULL, owner_epoch = NULL WHERE status = 'claimed' \
                               AND job_id NOT IN (SELECT id FROM jobs) AND id IN ",
                    );
                    push_ids(&mut qb, chunk.iter().copied());
                    qb.build().execute(pool).await?;
                }
            });
            Ok(())
        })
    }

    /// Deletes up to `limit` finished tasks (succeeded, dead, cancelled) whose last due time
    /// is before `before`, with their runs. Returns how many tasks went. Small batches on an
    /// index range, so retention never holds locks the scan would wait for.
    pub async fn purge_finished(&self, before: Millis, limit: u32) -> Result<usize> {
        retrying!("purge_finished", {
            on_pool!(self, |pool, Db| {
                let mut ids: Vec<i64> = Vec::new();
                for status in ["succeeded", "dead", "cancelled"] {
                    let room = i64::from(limit) - ids.len() as i64;
                    if room <= 0 {
                        break;
                    }
                    let found: Vec<i64> = sqlx::query_scalar(
                        "SELECT id FROM tasks WHERE status = ? AND due_at < ? ORDER BY due_at LIMIT ?",
                    )
                    .bind(status)
                    .bind(before)
                    .bind(room)
                    .fetch_all(pool)
                    .await?;
                    ids.extend(found);
                }
                if ids.is_empty() {
                    return Ok(0);
                }
                let mut tx = pool.begin_write().await?;
                let mut qb = QueryBuilder::<Db>::new("DELETE FROM runs WHERE task_id IN ");
                push_ids(&mut qb, ids.iter().copied());
                qb.build().execute(&mut *tx).await?;
                let mut qb = QueryBuilder::<Db>::new(
                    "DELETE FROM tasks WHERE status IN ('succeeded', 'dead', 'cancelled') AND id IN ",
                );
                push_ids(&mut qb, ids.iter().copied());
                let deleted = qb.build().execute(&mut *tx).await?.affected();
                // The dashboard's counts go with the runs they counted.
                sqlx::query("DELETE FROM run_stats WHERE minute < ?")
                    .bind(before)
                    .execute(&mut *tx)
                    .await?;
                // Rate windows whose last start is older than the longest window before
                // `before` (at most now): they constrain no start to come.
                sqlx::query("DELETE FROM rate_windows WHERE last_at < ?")
                    .bind(before.saturating_sub(crate::limits::MAX_RATE_WINDOW_MS))
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(deleted as usize)
            })
        })
    }
}
