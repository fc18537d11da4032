//! Concurrency bounds where claims are decided (SPEC §11): a bounded job's tasks are
//! claimed under its row's lock, so every node's scan takes its turn and the count it sees
//! is the count. A bound is of the whole job or per value of a key in the payloads
//! ([`crate::limits::bucket`]); a task that finds its bucket full waits as `throttled`
//! (no attempt spent, not read again by the scans of pending tasks) and is claimed, by
//! priority then due time, once its bucket has room: a run ending wakes the scan.

use super::*;
use crate::limits::bucket;

/// A job with a concurrency bound.
#[derive(Debug, Clone, FromRow)]
pub(super) struct Limited {
    pub(super) id: i64,
    /// Runs at once, per bucket.
    pub(super) max_concurrency: i32,
    /// The JSON Pointer its buckets are the values of; `None`: one bucket.
    pub(super) concurrency_key: Option<String>,
}

/// A due task of a bounded job, with the bucket it was throttled in (`None` for a pending
/// one, whose bucket is read from its payload).
#[derive(FromRow)]
struct Candidate {
    #[sqlx(flatten)]
    row: DueRow,
    limit_key: Option<String>,
    status: String,
}

/// Pending tasks of one bounded job a scan looks at, at most.
const PENDING_PER_SCAN: i64 = 1_000;

/// The statuses in which a task holds a slot of its bucket: from its claim to its
/// attempt's end (a fire waiting for an executor, a pull task waiting for or leased to a
/// consumer included).
macro_rules! holding {
    () => {
        "('claimed', 'waiting', 'ready', 'running')"
    };
}

/// What a bounded job's turn in a scan decided.
#[derive(Default)]
pub(super) struct Bounded {
    /// To claim (the caller marks them claimed).
    pub(super) claim: Vec<DueRow>,
    /// How many pending tasks it throttled.
    pub(super) throttled: u64,
}

impl Store {
    /// The jobs with a concurrency bound.
    pub(super) async fn limited_jobs(&self, tx: &mut Tx) -> Result<Vec<Limited>> {
        Ok(on_tx!(tx, |tx, Db| {
            sqlx::query_as(
                "SELECT id, max_concurrency, concurrency_key FROM jobs \
                 WHERE max_concurrency IS NOT NULL ORDER BY id",
            )
            .fetch_all(&mut **tx)
            .await?
        }))
    }

    /// Up to `room` tasks of bounded `job` to claim (due by `until`), leaving at most its
    /// bound holding slots in each bucket across all nodes; the pending tasks beyond it are
    /// throttled. Throttled tasks compete with pending ones by priority, then due time.
    /// The job's row is locked meanwhile; a node that finds it locked skips the job this
    /// time (the holder decides).
    pub(super) async fn due_bounded(
        &self,
        tx: &mut Tx,
        job: &Limited,
        room: i64,
        until: Millis,
        now: Millis,
    ) -> Result<Bounded> {
        let mut out = Bounded::default();
        if !self.lock_job_row(tx, job.id).await? {
            return Ok(out);
        }
        let busy: Vec<(Option<String>, i64)> = on_tx!(tx, |tx, Db| {
            sqlx::query_as(concat!(
                "SELECT limit_key, COUNT(*) FROM tasks WHERE job_id = ? AND status IN ",
                holding!(),
                " GROUP BY limit_key"
            ))
            .bind(job.id)
            .fetch_all(&mut **tx)
            .await?
        });
        let mut busy: HashMap<Option<String>, i64> = busy.into_iter().collect();
        let mut candidates = self.throttled_heads(tx, job, &busy).await?;
        candidates.extend(self.pending_due(tx, job, until).await?);
        candidates.sort_by(|a, b| {
            (b.row.priority.cmp(&a.row.priority))
                .then(a.row.due_at.cmp(&b.row.due_at))
                .then(a.row.id.cmp(&b.row.id))
        });
        let mut keyed: Vec<(i64, Option<String>)> = Vec::new();
        let mut throttle: Vec<(i64, Option<String>)> = Vec::new();
        for c in candidates {
            let pending = c.status == TaskStatus::Pending.as_str();
            let key = if pending {
                bucket(job.concurrency_key.as_deref(), c.row.payload.as_deref())
            } else {
                c.limit_key
            };
            let held = busy.entry(key.clone()).or_default();
            if (out.claim.len() as i64) < room && *held < i64::from(job.max_concurrency) {
                *held += 1;
                if pending && key.is_some() {
                    keyed.push((c.row.id, key));
                }
                out.claim.push(c.row);
            } else if pending {
                throttle.push((c.row.id, key));
            }
        }
        out.throttled = throttle.len() as u64;
        self.write_buckets(tx, &keyed, None, now).await?;
        self.write_buckets(tx, &throttle, Some(TaskStatus::Throttled), now)
            .await?;
        Ok(out)
    }

    /// Locks job `id`'s row for the transaction; `false` if another transaction holds it.
    async fn lock_job_row(&self, tx: &mut Tx, id: i64) -> Result<bool> {
        let skip_locked = self.skip_locked();
        let locked: Option<i64> = on_tx!(tx, |tx, Db| {
            sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                "SELECT id FROM jobs WHERE id = ?{skip_locked}"
            )))
            .bind(id)
            .fetch_optional(&mut **tx)
            .await?
        });
        Ok(locked.is_some())
    }

    /// The first throttled tasks of each of `job`'s buckets that has room (`busy`: the
    /// slots held per bucket), as many as its bound, locked. The buckets with throttled
    /// tasks are read first, from `ix_tasks_job_limit` alone (MariaDB reads each throttled
    /// task's index entry: it does not take a loose scan here): while every such bucket is
    /// full — the usual case between two runs' ends — no task row is read or locked and no
    /// window is computed, however many wait.
    async fn throttled_heads(
        &self,
        tx: &mut Tx,
        job: &Limited,
        busy: &HashMap<Option<String>, i64>,
    ) -> Result<Vec<Candidate>> {
        let waiting: Vec<Option<String>> = on_tx!(tx, |tx, Db| {
            sqlx::query_scalar(
                "SELECT limit_key FROM tasks WHERE job_id = ? AND status = 'throttled' \
                 GROUP BY limit_key",
            )
            .bind(job.id)
            .fetch_all(&mut **tx)
            .await?
        });
        let limit = i64::from(job.max_concurrency);
        let open: Vec<Option<String>> = waiting
            .into_iter()
            .filter(|k| busy.get(k).copied().unwrap_or(0) < limit)
            .collect();
        if open.is_empty() {
            return Ok(Vec::new());
        }
        let lock = if self.is_mysql() { " FOR UPDATE" } else { "" };
        let keys: Vec<String> = open.iter().flatten().cloned().collect();
        let no_key = open.iter().any(Option::is_none);
        let mut out = Vec::new();
        for chunk in keys.chunks(CHUNK).map(Some).chain(no_key.then_some(None)) {
            out.extend(on_tx!(tx, |tx, Db| {
                let mut qb = QueryBuilder::<Db>::new(
                    "SELECT id, job_id, kind, idem_key, due_at, attempt, priority, payload, params, \
                     limit_key, status FROM tasks WHERE id IN (\
                       SELECT id FROM (SELECT id, ROW_NUMBER() OVER (PARTITION BY limit_key \
                         ORDER BY priority DESC, due_at, id) AS n \
                       FROM tasks WHERE job_id = ",
                );
                qb.push_bind(job.id).push(" AND status = 'throttled' AND ");
                match chunk {
                    Some(keys) => {
                        qb.push("limit_key IN (");
                        let mut sep = qb.separated(", ");
                        for k in keys {
                            sep.push_bind(k.clone());
                        }
                        qb.push(")");
                    }
                    None => {
                        qb.push("limit_key IS NULL");
                    }
                }
                qb.push(") ranked WHERE n <= ")
                    .push_bind(limit)
                    .push(") AND status = 'throttled'")
                    .push(lock);
                let rows: Vec<Candidate> = qb.build_query_as().fetch_all(&mut **tx).await?;
                rows
            }));
        }
        Ok(out)
    }

    /// `job`'s pending tasks due by `until`, by priority then due time, locked (skipping
    /// those another transaction holds).
    async fn pending_due(
        &self,
        tx: &mut Tx,
        job: &Limited,
        until: Millis,
    ) -> Result<Vec<Candidate>> {
        let skip_locked = self.skip_locked();
        Ok(on_tx!(tx, |tx, Db| {
            sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "SELECT id, job_id, kind, idem_key, due_at, attempt, priority, payload, params, \
                 limit_key, status FROM tasks WHERE job_id = ? AND status = 'pending' AND due_at <= ? \
                 ORDER BY priority DESC, due_at, id LIMIT ?{skip_locked}"
            )))
            .bind(job.id)
            .bind(until)
            .bind(PENDING_PER_SCAN)
            .fetch_all(&mut **tx)
            .await?
        }))
    }

    /// Writes each task's bucket, and with `status` that status too.
    async fn write_buckets(
        &self,
        tx: &mut Tx,
        tasks: &[(i64, Option<String>)],
        status: Option<TaskStatus>,
        now: Millis,
    ) -> Result<()> {
        on_tx!(tx, |tx, Db| {
            for chunk in tasks.chunks(CHUNK) {
                let mut qb = QueryBuilder::<Db>::new("UPDATE tasks SET limit_key = ");
                push_case(&mut qb, "id", chunk.iter().map(|(id, k)| (*id, k.clone())));
                if let Some(status) = status {
                    qb.push(", status = ").push_bind(status.as_str());
                    qb.push(", updated_at = ").push_bind(now);
                }
                qb.push(" WHERE id IN ");
                push_ids(&mut qb, chunk.iter().map(|(id, _)| *id));
                qb.build().execute(&mut **tx).await?;
            }
        });
        Ok(())
    }

    /// The buckets of bounded job `job_id` with the most throttled tasks, at most `n`, each
    /// with the slots it holds: the job page's queue per key.
    pub async fn busiest_buckets(&self, job_id: i64, n: i64) -> Result<Vec<Bucket>> {
        let waiting: Vec<(Option<String>, i64)> = on_pool!(self, |pool, Db| {
            sqlx::query_as(
                "SELECT limit_key, COUNT(*) AS n FROM tasks WHERE job_id = ? AND status = 'throttled' \
                 GROUP BY limit_key ORDER BY n DESC, limit_key LIMIT ?",
            )
            .bind(job_id)
            .bind(n)
            .fetch_all(pool)
            .await?
        });
        let holding: Vec<(Option<String>, i64)> = on_pool!(self, |pool, Db| {
            sqlx::query_as(concat!(
                "SELECT limit_key, COUNT(*) FROM tasks WHERE job_id = ? AND status IN ",
                holding!(),
                " GROUP BY limit_key"
            ))
            .bind(job_id)
            .fetch_all(pool)
            .await?
        });
        let holding: HashMap<Option<String>, i64> = holding.into_iter().collect();
        Ok(waiting
            .into_iter()
            .map(|(key, throttled)| Bucket {
                holding: holding.get(&key).copied().unwrap_or(0),
                key,
                throttled,
            })
            .collect())
    }
}
