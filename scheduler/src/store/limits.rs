//! Concurrency bounds and rate limits where claims are decided (SPEC §11): a limited job's
//! tasks are claimed under its row's lock, so every node's scan takes its turn and the
//! count (or window) it sees is the count. A limit is of the whole job or per value of a
//! key in the payloads ([`crate::limits::bucket`]).
//!
//! A task that finds its concurrency bucket full waits as `throttled` (no attempt spent,
//! not read again by the scans of pending tasks) and is claimed, by priority then due
//! time, once its bucket has room: a run ending wakes the scan. A task over its rate
//! limit is deferred to the earliest start its bucket's window grants ([`Window`]): it is
//! claimed for then if that is inside the scan's window, else it waits as `throttled`,
//! due then, and no scan reads it again before.

use super::*;
use crate::limits::{RateLimit, Window, bucket, counted_key};

/// A job with a concurrency bound, a rate limit or both.
#[derive(Debug, Clone)]
pub(super) struct Limited {
    pub(super) id: i64,
    /// Runs at once, per bucket.
    pub(super) max_concurrency: Option<i32>,
    /// The JSON Pointer its concurrency buckets are the values of; `None`: one bucket.
    pub(super) concurrency_key: Option<String>,
    pub(super) rate: Option<RateLimit>,
}

impl Limited {
    /// The pointer of the buckets kept in a task's `limit_key` (its slots are counted
    /// there, and the console's queue shows them): the concurrency bound's, else the rate
    /// limit's.
    fn counted_key(&self) -> Option<&str> {
        counted_key(
            self.max_concurrency,
            self.concurrency_key.as_deref(),
            self.rate.as_ref(),
        )
    }
}

#[derive(FromRow)]
struct LimitedRow {
    id: i64,
    max_concurrency: Option<i32>,
    concurrency_key: Option<String>,
    rate_limit: Option<String>,
}

/// A rate bucket's window while a scan decides: what it granted (written back), and once
/// a start falls beyond the scan's window, the starts projected after it (not kept: the
/// tasks wait as `throttled`, due then, and are granted for real when a scan reaches them).
#[derive(Default)]
struct RateBucket {
    window: Window,
    projected: Option<Window>,
    granted: bool,
}

impl RateBucket {
    fn next_start(&self, rate: &RateLimit, earliest: Millis) -> Millis {
        self.projected
            .as_ref()
            .unwrap_or(&self.window)
            .next_start(rate, earliest)
    }

    /// Takes the start `at` ([`RateBucket::next_start`]): granted if it is by `until`,
    /// else projected (and a start granted after a projection counts in it too). Whether
    /// it was granted.
    fn take(&mut self, at: Millis, until: Millis) -> bool {
        let granted = at <= until;
        if granted {
            self.window.grant(at);
            self.granted = true;
        }
        match &mut self.projected {
            Some(projected) => projected.grant(at),
            None if !granted => {
                let mut projected = self.window.clone();
                projected.grant(at);
                self.projected = Some(projected);
            }
            None => {}
        }
        granted
    }
}

/// ` AND due_at <= due_by`, when there is one.
fn push_due_by<DB: sqlx::Database>(qb: &mut QueryBuilder<DB>, due_by: Option<Millis>)
where
    Millis: for<'t> sqlx::Encode<'t, DB> + sqlx::Type<DB>,
{
    if let Some(until) = due_by {
        qb.push(" AND due_at <= ").push_bind(until);
    }
}

/// How a rate bucket is stored: `=` and its value, or `-` for the bucket of no value.
fn stored_bucket(key: &Option<String>) -> String {
    match key {
        Some(value) => format!("={value}"),
        None => "-".to_owned(),
    }
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

/// The slots a job's buckets hold, per status and bucket: grouped in the order of
/// `ix_tasks_job_limit` (job, status, bucket), the database counts as it reads, where a
/// `GROUP BY limit_key` alone made it build a temporary table and sort it (MariaDB: 1.5
/// against 1.0 ms for 2,500 held slots). Summed per bucket by [`per_bucket`].
const HOLDING_PER_STATUS: &str = concat!(
    "SELECT status, limit_key, COUNT(*) FROM tasks WHERE job_id = ? AND status IN ",
    holding!(),
    " GROUP BY status, limit_key"
);

fn per_bucket(rows: Vec<(String, Option<String>, i64)>) -> HashMap<Option<String>, i64> {
    let mut out: HashMap<Option<String>, i64> = HashMap::new();
    for (_, key, n) in rows {
        *out.entry(key).or_default() += n;
    }
    out
}

/// What a bounded job's turn in a scan decided.
#[derive(Default)]
pub(super) struct Bounded {
    /// To claim (the caller marks them claimed), each due when its rate limit allows.
    pub(super) claim: Vec<DueRow>,
    /// How many pending tasks it throttled.
    pub(super) throttled: u64,
    /// For a job with a concurrency bound whose turn it had (its row was not locked by
    /// another node): whether tasks of it wait `throttled` for a slot, or would if created
    /// now (a bucket is at its bound), so the ends of its runs are awaited.
    pub(super) slot_waits: Option<bool>,
}

/// What a scan decided for the tasks of a limited job it does not claim, and the due
/// times it moved.
#[derive(Default)]
struct Decided {
    /// Claimed pending tasks whose bucket is to be written.
    keyed: Vec<(i64, Option<String>)>,
    /// Pending tasks to throttle, with their bucket.
    throttle: Vec<(i64, Option<String>)>,
    /// Tasks whose due time moves: claimed for a later start, or deferred past this scan.
    moved: Vec<(i64, Millis)>,
    /// Tasks deferred past this scan that were pending (already throttled ones stay so).
    deferred_pending: Vec<(i64, Option<String>)>,
}

impl Store {
    /// The jobs with a concurrency bound or a rate limit.
    pub(super) async fn limited_jobs(&self, tx: &mut Tx) -> Result<Vec<Limited>> {
        let rows: Vec<LimitedRow> = on_tx!(tx, |tx, Db| {
            sqlx::query_as(
                "SELECT id, max_concurrency, concurrency_key, rate_limit FROM jobs \
                 WHERE max_concurrency IS NOT NULL OR rate_limit IS NOT NULL ORDER BY id",
            )
            .fetch_all(&mut **tx)
            .await?
        });
        rows.into_iter()
            .map(|r| {
                Ok(Limited {
                    id: r.id,
                    max_concurrency: r.max_concurrency,
                    concurrency_key: r.concurrency_key,
                    rate: r.rate_limit.as_deref().map(parse_json).transpose()?,
                })
            })
            .collect()
    }

    /// Up to `room` tasks of limited `job` to claim (due by `until`), leaving at most its
    /// bound holding slots in each bucket across all nodes and granting each the earliest
    /// start its rate limit allows; the pending tasks beyond them are throttled. Throttled
    /// tasks compete with pending ones by priority, then due time. The job's row is locked
    /// meanwhile; a node that finds it locked skips the job this time (the holder decides).
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
        let mut busy = match job.max_concurrency {
            Some(_) => self.holding(tx, job.id).await?,
            None => HashMap::new(),
        };
        let rated = job.rate.as_ref().map(|_| until);
        let (mut candidates, slots_waited) = match job.max_concurrency {
            Some(limit) => {
                self.throttled_heads(tx, job.id, limit, &busy, rated)
                    .await?
            }
            None => {
                let throttled = self
                    .due_in(tx, job.id, TaskStatus::Throttled, until)
                    .await?;
                (throttled, false)
            }
        };
        candidates.extend(self.due_in(tx, job.id, TaskStatus::Pending, until).await?);
        candidates.sort_by(|a, b| {
            (b.row.priority.cmp(&a.row.priority))
                .then(a.row.due_at.cmp(&b.row.due_at))
                .then(a.row.id.cmp(&b.row.id))
        });
        let mut windows = match &job.rate {
            Some(rate) => {
                self.rate_windows(tx, job.id, rate, &candidates, now)
                    .await?
            }
            None => HashMap::new(),
        };
        let mut decided = Decided::default();
        for mut c in candidates {
            let pending = c.status == TaskStatus::Pending.as_str();
            let key = if pending {
                bucket(job.counted_key(), c.row.payload.as_deref())
            } else {
                c.limit_key.clone()
            };
            let full = match job.max_concurrency {
                Some(limit) => busy.get(&key).copied().unwrap_or(0) >= i64::from(limit),
                None => false,
            };
            if (out.claim.len() as i64) >= room || full {
                if pending {
                    decided.throttle.push((c.row.id, key));
                }
                continue;
            }
            if let Some(rate) = &job.rate {
                let rate_key = bucket(rate.key.as_deref(), c.row.payload.as_deref());
                let window = windows.entry(rate_key).or_default();
                let at = window.next_start(rate, c.row.due_at.max(now));
                let granted = window.take(at, until);
                if at != c.row.due_at {
                    decided.moved.push((c.row.id, at));
                    c.row.due_at = at;
                }
                if !granted {
                    if pending {
                        decided.deferred_pending.push((c.row.id, key));
                    }
                    continue;
                }
            }
            *busy.entry(key.clone()).or_default() += 1;
            // A task created through the API has its bucket already (`NewTask::limit_key`);
            // one whose job's key changed since, or made without it, has it written.
            if pending && key != c.limit_key {
                decided.keyed.push((c.row.id, key));
            }
            out.claim.push(c.row);
        }
        out.throttled = (decided.throttle.len() + decided.deferred_pending.len()) as u64;
        // Waiting before this scan (some may have been claimed now: a run's report is then
        // hurried for nothing until the next scan), throttled by it, or a bucket left at its
        // bound (the next task of it, created later, waits for one of these runs to end).
        out.slot_waits = job.max_concurrency.map(|limit| {
            slots_waited
                || !decided.throttle.is_empty()
                || busy.values().any(|&held| held >= i64::from(limit))
        });
        self.write_rate_windows(tx, job.id, &windows).await?;
        self.write_decided(tx, decided, now).await?;
        Ok(out)
    }

    /// The earliest due time after `after` of a task of `job_id` waiting to be claimed
    /// (pending, or throttled and deferred).
    pub(super) async fn next_due_after(
        &self,
        tx: &mut Tx,
        job_id: i64,
        after: Millis,
    ) -> Result<Option<Millis>> {
        // One index dive per status on `(job_id, status, due_at)`: a MIN over `status IN
        // (…)` with a range after it walked every waiting task past `after` (thousands per
        // scan at 5,000 limited tasks/s).
        Ok(on_tx!(tx, |tx, Db| {
            sqlx::query_scalar(
                "SELECT MIN(d) FROM (\
                 SELECT MIN(due_at) AS d FROM tasks \
                 WHERE job_id = ? AND status = 'pending' AND due_at > ? \
                 UNION ALL SELECT MIN(due_at) AS d FROM tasks \
                 WHERE job_id = ? AND status = 'throttled' AND due_at > ?) m",
            )
            .bind(job_id)
            .bind(after)
            .bind(job_id)
            .bind(after)
            .fetch_one(&mut **tx)
            .await?
        }))
    }

    /// The slots each bucket of `job_id` holds.
    async fn holding(&self, tx: &mut Tx, job_id: i64) -> Result<HashMap<Option<String>, i64>> {
        let busy = on_tx!(tx, |tx, Db| {
            sqlx::query_as(HOLDING_PER_STATUS)
                .bind(job_id)
                .fetch_all(&mut **tx)
                .await?
        });
        Ok(per_bucket(busy))
    }

    /// Writes what a scan decided for a limited job's tasks: buckets, throttles, due times.
    async fn write_decided(&self, tx: &mut Tx, decided: Decided, now: Millis) -> Result<()> {
        self.write_buckets(tx, &decided.keyed, None, now).await?;
        let mut throttle = decided.throttle;
        throttle.extend(decided.deferred_pending);
        self.write_buckets(tx, &throttle, Some(TaskStatus::Throttled), now)
            .await?;
        on_tx!(tx, |tx, Db| {
            for chunk in decided.moved.chunks(CHUNK) {
                let mut qb = QueryBuilder::<Db>::new("UPDATE tasks SET due_at = ");
                push_case(&mut qb, "id", chunk.iter().copied());
                qb.push(" WHERE id IN ");
                push_ids(&mut qb, chunk.iter().map(|(id, _)| *id));
                qb.build().execute(&mut **tx).await?;
            }
        });
        Ok(())
    }

    /// The windows of `job_id`'s rate buckets that `candidates` fall in, as stored, without
    /// the starts that no longer constrain one at or after `now`.
    async fn rate_windows(
        &self,
        tx: &mut Tx,
        job_id: i64,
        rate: &RateLimit,
        candidates: &[Candidate],
        now: Millis,
    ) -> Result<HashMap<Option<String>, RateBucket>> {
        let keys: BTreeMap<String, Option<String>> = candidates
            .iter()
            .map(|c| bucket(rate.key.as_deref(), c.row.payload.as_deref()))
            .map(|k| (stored_bucket(&k), k))
            .collect();
        let names: Vec<&String> = keys.keys().collect();
        let mut out = HashMap::new();
        for chunk in names.chunks(CHUNK) {
            let rows: Vec<(String, String)> = on_tx!(tx, |tx, Db| {
                let mut qb = QueryBuilder::<Db>::new(
                    "SELECT bucket, starts FROM rate_windows WHERE job_id = ",
                );
                qb.push_bind(job_id).push(" AND bucket IN (");
                let mut sep = qb.separated(", ");
                for name in chunk {
                    sep.push_bind((*name).clone());
                }
                qb.push(")");
                qb.build_query_as().fetch_all(&mut **tx).await?
            });
            for (name, starts) in rows {
                let Some(key) = keys.get(&name) else { continue };
                let mut window = Window::from_json(&starts);
                window.forget_before(rate, now);
                out.insert(
                    key.clone(),
                    RateBucket {
                        window,
                        ..RateBucket::default()
                    },
                );
            }
        }
        Ok(out)
    }

    /// Writes back the windows that granted starts.
    async fn write_rate_windows(
        &self,
        tx: &mut Tx,
        job_id: i64,
        windows: &HashMap<Option<String>, RateBucket>,
    ) -> Result<()> {
        let rows: Vec<(String, String, Millis)> = windows
            .iter()
            .filter(|(_, b)| b.granted)
            .filter_map(|(k, b)| Some((stored_bucket(k), b.window.to_json(), b.window.last()?)))
            .collect();
        let tail = if self.is_mysql() {
            " ON DUPLICATE KEY UPDATE starts = VALUES(starts), last_at = VALUES(last_at)"
        } else {
            " ON CONFLICT(job_id, bucket) DO UPDATE SET starts = excluded.starts, \
             last_at = excluded.last_at"
        };
        on_tx!(tx, |tx, Db| {
            for chunk in rows.chunks(CHUNK) {
                let mut qb = QueryBuilder::<Db>::new(
                    "INSERT INTO rate_windows (job_id, bucket, starts, last_at) ",
                );
                qb.push_values(chunk, |mut b, (name, starts, last)| {
                    b.push_bind(job_id)
                        .push_bind(name.clone())
                        .push_bind(starts.clone())
                        .push_bind(*last);
                });
                qb.push(tail);
                qb.build().execute(&mut **tx).await?;
            }
        });
        Ok(())
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
    ///
    /// With `due_by` (a job with a rate limit too), only tasks due by then: those deferred
    /// further wait for a later scan. Also whether any bucket has throttled tasks waiting.
    async fn throttled_heads(
        &self,
        tx: &mut Tx,
        job_id: i64,
        limit: i32,
        busy: &HashMap<Option<String>, i64>,
        due_by: Option<Millis>,
    ) -> Result<(Vec<Candidate>, bool)> {
        let waiting: Vec<Option<String>> = on_tx!(tx, |tx, Db| {
            let mut qb = QueryBuilder::<Db>::new("SELECT limit_key FROM tasks WHERE job_id = ");
            qb.push_bind(job_id).push(" AND status = 'throttled'");
            push_due_by(&mut qb, due_by);
            qb.push(" GROUP BY limit_key");
            qb.build_query_scalar().fetch_all(&mut **tx).await?
        });
        let limit = i64::from(limit);
        let any_waiting = !waiting.is_empty();
        let open: Vec<Option<String>> = waiting
            .into_iter()
            .filter(|k| busy.get(k).copied().unwrap_or(0) < limit)
            .collect();
        if open.is_empty() {
            return Ok((Vec::new(), any_waiting));
        }
        let lock = if self.is_mysql() { " FOR UPDATE" } else { "" };
        let keys: Vec<String> = open.iter().flatten().cloned().collect();
        let no_key = open.iter().any(Option::is_none);
        let mut out = Vec::new();
        for chunk in keys.chunks(CHUNK).map(Some).chain(no_key.then_some(None)) {
            out.extend(on_tx!(tx, |tx, Db| {
                let mut qb = QueryBuilder::<Db>::new(concat!(
                    "SELECT ",
                    due_columns!(),
                    ", limit_key, status FROM tasks WHERE id IN (\
                       SELECT id FROM (SELECT id, ROW_NUMBER() OVER (PARTITION BY limit_key \
                         ORDER BY priority DESC, due_at, id) AS n \
                       FROM tasks WHERE job_id = ",
                ));
                qb.push_bind(job_id).push(" AND status = 'throttled'");
                push_due_by(&mut qb, due_by);
                qb.push(" AND ");
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
        Ok((out, any_waiting))
    }

    /// `job_id`'s tasks in `status` (pending, or throttled for a job with a rate limit
    /// alone) due by `until`, by priority then due time, locked (skipping those another
    /// transaction holds).
    async fn due_in(
        &self,
        tx: &mut Tx,
        job_id: i64,
        status: TaskStatus,
        until: Millis,
    ) -> Result<Vec<Candidate>> {
        let skip_locked = self.skip_locked();
        let index = self.by_job_status_due();
        Ok(on_tx!(tx, |tx, Db| {
            sqlx::query_as(sqlx::AssertSqlSafe(format!(
                concat!(
                    "SELECT ",
                    due_columns!(),
                    ", limit_key, status FROM tasks{index} WHERE job_id = ? AND status = ? \
                     AND due_at <= ? ORDER BY priority DESC, due_at, id LIMIT ?{skip_locked}"
                ),
                index = index,
                skip_locked = skip_locked
            )))
            .bind(job_id)
            .bind(status.as_str())
            .bind(until)
            .bind(PENDING_PER_SCAN)
            .fetch_all(&mut **tx)
            .await?
        }))
    }

    /// ` FORCE INDEX (ix_tasks_job_status)` (SQLite: `INDEXED BY`), after `FROM tasks`: a
    /// job's tasks in one status due by a time, read in an order of their own. Left to
    /// itself MariaDB walks `ix_tasks_ready` for that order, and when fewer than the `LIMIT`
    /// are due it reads every task of the job in that status (7,500 rows for 817 due, at
    /// 5,000 tasks/s delayed up to 3 s) instead of the range it returns.
    fn by_job_status_due(&self) -> &'static str {
        if self.is_mysql() {
            " FORCE INDEX (ix_tasks_job_status)"
        } else {
            " INDEXED BY ix_tasks_job_status"
        }
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
        let holding = per_bucket(on_pool!(self, |pool, Db| {
            sqlx::query_as(HOLDING_PER_STATUS)
                .bind(job_id)
                .fetch_all(pool)
                .await?
        }));
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
