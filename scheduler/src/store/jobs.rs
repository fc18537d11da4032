//! Jobs: create, change (re-planning the schedule), read, list, delete; a fixed-delay
//! job's next fire once one ended, and how far behind its schedule a job runs.

use super::*;

/// Binds a job's settings, in the column order of the INSERT and UPDATE below, after `app_id`
/// for the app column.
macro_rules! bind_spec {
    ($query:expr, $spec:expr, $app_id:expr) => {
        $query
            .bind(&$spec.name)
            .bind($app_id)
            .bind(&$spec.plugin)
            .bind(to_json(&$spec.schedule))
            .bind(&$spec.params)
            .bind($spec.route.as_str())
            .bind($spec.block.as_str())
            .bind($spec.misfire.as_str())
            .bind($spec.timeout_ms)
            .bind($spec.max_attempts)
            .bind(to_json(&$spec.backoff))
            .bind($spec.memory_mb)
            .bind($spec.max_concurrency)
            .bind(&$spec.concurrency_key)
            .bind($spec.rate_limit.as_ref().map(to_json))
            .bind($spec.debounce_ms)
            .bind(to_json(&$spec.child_jobs))
            .bind(to_json(&$spec.http_allow))
            .bind($spec.enabled)
            .bind($spec.no_executor_timeout_ms)
            .bind(match &$spec.delivery {
                Delivery::Wasm => None,
                other => Some(to_json(other)),
            })
    };
}

impl Store {
    pub async fn insert_job(
        &self,
        spec: &JobSpec,
        next_fire_at: Option<Millis>,
        now: Millis,
    ) -> Result<Job> {
        let app_id = self.ensure_app(&spec.app, now).await?;
        let id = on_pool!(self, |pool, Db| {
            let r = bind_spec!(
                sqlx::query(
                    "INSERT INTO jobs (name, app_id, plugin, schedule, params, route, block_strategy, misfire, \
                     timeout_ms, max_attempts, backoff, memory_mb, max_concurrency, concurrency_key, rate_limit, debounce_ms, child_jobs, \
                     http_allow, enabled, no_executor_timeout_ms, delivery, next_fire_at, created_at, updated_at) \
                     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                ),
                spec,
                app_id
            )
            .bind(next_fire_at)
            .bind(now)
            .bind(now)
            .execute(pool)
            .await
            .map_err(|e| match Error::from(e) {
                Error::Conflict(_) => Error::Conflict(format!("a job named `{}` already exists", spec.name)),
                other => other,
            })?;
            r.insert_id()
        });
        self.get_job(id).await
    }

    /// Replaces a job's settings and its next fire time. With `replan` (the schedule or
    /// `enabled` changed, [`JobSpec::replans`]), in the same transaction, the job's
    /// generation moves on and the recurring fires planned under the old one that have not
    /// been dispatched are deleted: wherever a copy of one still sits (a wheel, a pool), it
    /// is of an older generation and is dropped at dispatch.
    pub async fn update_job(
        &self,
        id: i64,
        spec: &JobSpec,
        next_fire_at: Option<Millis>,
        replan: bool,
        now: Millis,
    ) -> Result<Job> {
        retrying!("update_job", {
            let app_id = self.ensure_app(&spec.app, now).await?;
            on_pool!(self, |pool, Db| {
                let mut tx = pool.begin_write().await?;
                bind_spec!(
                    sqlx::query(
                        "UPDATE jobs SET name = ?, app_id = ?, plugin = ?, schedule = ?, params = ?, route = ?, \
                         block_strategy = ?, misfire = ?, timeout_ms = ?, max_attempts = ?, backoff = ?, \
                         memory_mb = ?, max_concurrency = ?, concurrency_key = ?, rate_limit = ?, debounce_ms = ?, child_jobs = ?, http_allow = ?, enabled = ?, \
                         no_executor_timeout_ms = ?, delivery = ?, next_fire_at = ?, generation = generation + ?, updated_at = ? WHERE id = ?",
                    ),
                    spec,
                    app_id
                )
                .bind(next_fire_at)
                .bind(i64::from(replan))
                .bind(now)
                .bind(id)
                .execute(&mut *tx)
                .await
                .map_err(|e| match Error::from(e) {
                    Error::Conflict(_) => Error::Conflict(format!("a job named `{}` already exists", spec.name)),
                    other => other,
                })?;
                if replan {
                    sqlx::query(concat!(
                        "DELETE FROM tasks WHERE job_id = ? AND kind = 'cron' AND status IN ",
                        unstarted!()
                    ))
                    .bind(id)
                    .execute(&mut *tx)
                    .await?;
                    // A fixed-delay job's fire still under way sets the next one when it
                    // ends: fires never overlap, whatever the change.
                    if matches!(spec.schedule, Schedule::FixedDelay { .. }) {
                        sqlx::query(
                            "UPDATE jobs SET next_fire_at = NULL WHERE id = ? AND EXISTS (\
                               SELECT 1 FROM tasks WHERE job_id = ? AND kind = 'cron' \
                               AND status IN ('claimed', 'waiting', 'ready', 'running'))",
                        )
                        .bind(id)
                        .bind(id)
                        .execute(&mut *tx)
                        .await?;
                    }
                }
                tx.commit().await?;
            });
            self.get_job(id).await
        })
    }

    /// Sets the next fire of fixed-delay jobs whose fire ended (`next`: job → its next fire
    /// time), unless the job is disabled or something else set it meanwhile (a change of
    /// the job re-plans it).
    pub(super) async fn resume_fixed_delays(
        &self,
        tx: &mut Tx,
        next: &[(i64, Millis)],
    ) -> Result<()> {
        if next.is_empty() {
            return Ok(());
        }
        on_tx!(tx, |tx, Db| {
            let mut qb = QueryBuilder::<Db>::new("UPDATE jobs SET next_fire_at = ");
            push_case(&mut qb, "id", next.iter().copied());
            qb.push(" WHERE next_fire_at IS NULL AND enabled = 1 AND id IN ");
            push_ids(&mut qb, next.iter().map(|(id, _)| *id));
            qb.build().execute(&mut **tx).await?;
        });
        Ok(())
    }

    /// How far behind its schedule job `job_id`'s last `n` fires that ended ran (from
    /// `ix_runs_job`, newest first).
    pub async fn schedule_drift(&self, job_id: i64, n: i64) -> Result<ScheduleDrift> {
        let rows: Vec<(i64, Option<i64>)> = on_pool!(self, |pool, Db| {
            sqlx::query_as(
                "SELECT r.scheduled_at, r.started_at FROM runs r JOIN tasks t ON t.id = r.task_id \
                 WHERE r.job_id = ? AND t.kind = 'cron' \
                 AND r.status NOT IN ('dispatched', 'running') ORDER BY r.id DESC LIMIT ?",
            )
            .bind(job_id)
            .bind(n)
            .fetch_all(pool)
            .await?
        });
        let late: Vec<Millis> = rows
            .iter()
            .filter_map(|(due, started)| Some((started.as_ref()? - due).max(0)))
            .collect();
        Ok(ScheduleDrift {
            fires: rows.len(),
            most_ms: late.iter().copied().max(),
            last_ms: late.first().copied(),
            skipped: rows.len() - late.len(),
        })
    }

    pub async fn get_job(&self, id: i64) -> Result<Job> {
        let sql = format!(
            "SELECT {JOB_COLUMNS} FROM jobs j JOIN apps a ON a.id = j.app_id WHERE j.id = ?"
        );
        on_pool!(self, |pool, Db| {
            let row: Option<JobRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
                .bind(id)
                .fetch_optional(pool)
                .await?;
            row.ok_or_else(|| Error::NotFound(format!("job {id}")))?
                .try_into()
        })
    }

    pub async fn get_job_by_name(&self, name: &str) -> Result<Job> {
        let sql = format!(
            "SELECT {JOB_COLUMNS} FROM jobs j JOIN apps a ON a.id = j.app_id WHERE j.name = ?"
        );
        on_pool!(self, |pool, Db| {
            let row: Option<JobRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
                .bind(name)
                .fetch_optional(pool)
                .await?;
            row.ok_or_else(|| Error::NotFound(format!("job `{name}`")))?
                .try_into()
        })
    }

    /// Jobs, newest first, `limit` per page, optionally of one app or whose name contains
    /// `search`.
    /// Jobs, newest first: of `app`, of `apps` (a scoped user's view), matching `search`.
    pub async fn list_jobs(
        &self,
        app: Option<&str>,
        apps: Option<&[String]>,
        search: Option<&str>,
        before_id: Option<i64>,
        limit: u32,
    ) -> Result<Page<Job>> {
        let limit = limit.clamp(1, 1000);
        on_pool!(self, |pool, Db| {
            let mut qb = QueryBuilder::<Db>::new(format!(
                "SELECT {JOB_COLUMNS} FROM jobs j JOIN apps a ON a.id = j.app_id WHERE 1 = 1"
            ));
            if let Some(app) = app {
                qb.push(" AND a.name = ").push_bind(app);
            }
            if let Some(apps) = apps {
                in_apps!(qb, "j.id", apps);
            }
            if let Some(search) = search {
                // `!` escapes LIKE metacharacters the same way on both backends (a backslash
                // would itself need escaping in MySQL string literals).
                let pattern = format!(
                    "%{}%",
                    search
                        .replace('!', "!!")
                        .replace('%', "!%")
                        .replace('_', "!_")
                );
                qb.push(" AND j.name LIKE ")
                    .push_bind(pattern)
                    .push(" ESCAPE '!'");
            }
            if let Some(before) = before_id {
                qb.push(" AND j.id < ").push_bind(before);
            }
            qb.push(" ORDER BY j.id DESC LIMIT ")
                .push_bind(i64::from(limit) + 1);
            let rows: Vec<JobRow> = qb.build_query_as().fetch_all(pool).await?;
            page(rows, limit, |r| r.id)
        })
    }

    /// How many of job `id`'s tasks are pending or running: what a delete without `force`
    /// refuses (read ahead by `usecase::apply`, which deletes nothing unless it can delete
    /// all it plans to).
    pub async fn unfinished_tasks(&self, id: i64) -> Result<i64> {
        Ok(on_pool!(self, |pool, Db| {
            sqlx::query_scalar(
                "SELECT COUNT(*) FROM tasks WHERE job_id = ? AND status IN \
                 ('pending', 'throttled', 'claimed', 'waiting', 'ready', 'running')",
            )
            .bind(id)
            .fetch_one(pool)
            .await?
        }))
    }

    /// Deletes a job. With pending or running tasks it is a conflict unless `force`, which
    /// cancels the pending ones first (running ones finish on their own).
    pub async fn delete_job(&self, id: i64, force: bool, now: Millis) -> Result<Vec<i64>> {
        retrying!("delete_job", {
            on_pool!(self, |pool, Db| {
                let mut tx = pool.begin_write().await?;
                let exists: Option<i64> = sqlx::query_scalar("SELECT id FROM jobs WHERE id = ?")
                    .bind(id)
                    .fetch_optional(&mut *tx)
                    .await?;
                if exists.is_none() {
                    return Err(Error::NotFound(format!("job {id}")));
                }
                let active: Vec<(i64, String)> = sqlx::query_as(
                    "SELECT id, status FROM tasks WHERE job_id = ? AND status IN \
                     ('pending', 'throttled', 'claimed', 'waiting', 'ready', 'running')",
                )
                .bind(id)
                .fetch_all(&mut *tx)
                .await?;
                if !active.is_empty() && !force {
                    return Err(Error::Conflict(format!(
                        "job {id} has {} pending or running task(s); cancel them or delete with ?force=true",
                        active.len()
                    )));
                }
                let cancelled: Vec<i64> = active
                    .iter()
                    .filter(|(_, s)| s != "running")
                    .map(|(id, _)| *id)
                    .collect();
                for chunk in cancelled.chunks(CHUNK) {
                    let mut qb = QueryBuilder::<Db>::new(
                        "UPDATE tasks SET status = 'cancelled', updated_at = ",
                    );
                    qb.push_bind(now).push(concat!(
                        " WHERE status IN ",
                        unstarted!(),
                        " AND id IN "
                    ));
                    push_ids(&mut qb, chunk.iter().copied());
                    qb.build().execute(&mut *tx).await?;
                }
                sqlx::query("DELETE FROM kv WHERE job_id = ?")
                    .bind(id)
                    .execute(&mut *tx)
                    .await?;
                sqlx::query("DELETE FROM rate_windows WHERE job_id = ?")
                    .bind(id)
                    .execute(&mut *tx)
                    .await?;
                sqlx::query("DELETE FROM jobs WHERE id = ?")
                    .bind(id)
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(cancelled)
            })
        })
    }
}
