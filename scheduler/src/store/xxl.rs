//! Runs on XXL-JOB executors (`xxl/`). Rota's own executors can be asked which triggers
//! they took, so a run is recorded after its send; an XXL-JOB executor cannot, so its run
//! is written before the `/run` goes out. A node taking over a dead node's claims then
//! finds the runs already sent instead of sending them again, and a callback finds its
//! run on any node. A run whose callback never comes (its executor restarted, or the
//! sender died between the record and the send) is found past its job's timeout.

use super::*;

impl Store {
    /// Writes `runs` as `dispatched` before their `/run` is sent. A run already written
    /// (sent again to the next candidate) takes its new executor while it is unanswered.
    pub async fn prerecord_runs(&self, runs: &[Dispatched]) -> Result<()> {
        let tail = if self.is_mysql() {
            " ON DUPLICATE KEY UPDATE executor = IF(status = 'dispatched', VALUES(executor), \
             executor), dispatched_at = IF(status = 'dispatched', VALUES(dispatched_at), \
             dispatched_at)"
        } else {
            " ON CONFLICT(id) DO UPDATE SET executor = excluded.executor, \
             dispatched_at = excluded.dispatched_at WHERE runs.status = 'dispatched'"
        };
        retrying!("prerecord_runs", {
            on_pool!(self, |pool, Db| {
                for chunk in runs.chunks(CHUNK) {
                    let mut qb = insert_dispatched::<Db>(chunk);
                    qb.push(tail);
                    qb.build().execute(pool).await?;
                }
            });
            Ok(())
        })
    }

    /// Drops run `id` if it is still only written (`dispatched`): it never reached its
    /// executor, and its task is fired again. Whether it was dropped.
    pub async fn forget_unsent_run(&self, id: i64) -> Result<bool> {
        retrying!("forget_unsent_run", {
            on_pool!(self, |pool, Db| {
                let done = sqlx::query("DELETE FROM runs WHERE id = ? AND status = 'dispatched'")
                    .bind(id)
                    .execute(pool)
                    .await?;
                Ok(done.rows_affected() == 1)
            })
        })
    }

    /// The unfinished runs sent to the executors at `addresses`.
    pub async fn unfinished_runs_at(&self, addresses: &[String]) -> Result<Vec<Run>> {
        if addresses.is_empty() {
            return Ok(Vec::new());
        }
        on_pool!(self, |pool, Db| {
            let mut qb = QueryBuilder::<Db>::new(format!(
                "SELECT {RUN_COLUMNS} FROM runs WHERE status IN ('dispatched', 'running') \
                 AND executor IN ("
            ));
            let mut sep = qb.separated(", ");
            for a in addresses {
                sep.push_bind(a.as_str());
            }
            qb.push(")");
            let rows: Vec<RunRow> = qb.build_query_as().fetch_all(pool).await?;
            rows.into_iter().map(Run::try_from).collect()
        })
    }

    /// The unfinished runs on XXL-JOB executors sent longer ago than their job's timeout
    /// and `grace`: an executor calls a run that times out back as such, so no callback by
    /// then means none is coming.
    pub async fn overdue_xxl_runs(&self, now: Millis, grace: Millis) -> Result<Vec<Run>> {
        on_pool!(self, |pool, Db| {
            let rows: Vec<RunRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "SELECT {RUN_COLUMNS} FROM runs WHERE id IN (SELECT r.id FROM executors e \
                 JOIN runs r ON r.executor = e.address AND r.status IN ('dispatched', 'running') \
                 JOIN jobs j ON j.id = r.job_id \
                 WHERE e.protocol = 'xxl' AND r.dispatched_at < ? - j.timeout_ms)"
            )))
            .bind(now - grace)
            .fetch_all(pool)
            .await?;
            rows.into_iter().map(Run::try_from).collect()
        })
    }
}
