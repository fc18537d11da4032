//! Apps and the executor registry: registrations, heartbeats, the signed clock, the dead.

use super::*;

impl Store {
    /// The id of app `name`, creating it on first use.
    pub async fn ensure_app(&self, name: &str, now: Millis) -> Result<i64> {
        let insert = format!(
            "{} INTO apps (name, created_at) VALUES (?, ?)",
            self.insert_ignore()
        );
        on_pool!(self, |pool, Db| {
            sqlx::query(sqlx::AssertSqlSafe(insert))
                .bind(name)
                .bind(now)
                .execute(pool)
                .await?;
            let id: i64 = sqlx::query_scalar("SELECT id FROM apps WHERE name = ?")
                .bind(name)
                .fetch_one(pool)
                .await?;
            Ok(id)
        })
    }

    pub async fn list_apps(&self) -> Result<Vec<App>> {
        on_pool!(self, |pool, Db| {
            let rows: Vec<(i64, String, i64)> =
                sqlx::query_as("SELECT id, name, created_at FROM apps ORDER BY name")
                    .fetch_all(pool)
                    .await?;
            Ok(rows
                .into_iter()
                .map(|(id, name, created_at)| App {
                    id,
                    name,
                    created_at,
                })
                .collect())
        })
    }

    /// Registers one of Rota's executors or refreshes its heartbeat.
    pub async fn upsert_executor(
        &self,
        app: &str,
        address: &str,
        capacity: i32,
        running: i32,
        now: Millis,
    ) -> Result<()> {
        self.upsert_speaking(ExecutorProtocol::Rota, app, address, capacity, running, now)
            .await
    }

    /// Registers an XXL-JOB executor or refreshes its heartbeat (its `registry` call).
    /// It says nothing of its room: `capacity` is xxl-job-core's pool of 200 threads.
    pub async fn upsert_xxl_executor(&self, app: &str, address: &str, now: Millis) -> Result<()> {
        self.upsert_speaking(ExecutorProtocol::Xxl, app, address, 200, 0, now)
            .await
    }

    /// Registers an executor speaking `protocol` or refreshes its heartbeat.
    async fn upsert_speaking(
        &self,
        protocol: ExecutorProtocol,
        app: &str,
        address: &str,
        capacity: i32,
        running: i32,
        now: Millis,
    ) -> Result<()> {
        let app_id = self.ensure_app(app, now).await?;
        let sql = if self.is_mysql() {
            "INSERT INTO executors (app_id, address, capacity, running, registered_at, \
             last_heartbeat_at, protocol) VALUES (?, ?, ?, ?, ?, ?, ?) ON DUPLICATE KEY UPDATE \
             capacity = VALUES(capacity), running = VALUES(running), \
             last_heartbeat_at = VALUES(last_heartbeat_at), protocol = VALUES(protocol)"
        } else {
            "INSERT INTO executors (app_id, address, capacity, running, registered_at, \
             last_heartbeat_at, protocol) VALUES (?, ?, ?, ?, ?, ?, ?) \
             ON CONFLICT(app_id, address) DO UPDATE SET capacity = excluded.capacity, \
             running = excluded.running, last_heartbeat_at = excluded.last_heartbeat_at, \
             protocol = excluded.protocol"
        };
        on_pool!(self, |pool, Db| {
            sqlx::query(sql)
                .bind(app_id)
                .bind(address)
                .bind(capacity)
                .bind(running)
                .bind(now)
                .bind(now)
                .bind(protocol.as_str())
                .execute(pool)
                .await?;
        });
        Ok(())
    }

    /// When the registry last heard from this executor.
    pub async fn executor_heartbeat_at(&self, app: &str, address: &str) -> Result<Option<Millis>> {
        on_pool!(self, |pool, Db| {
            let at: Option<i64> = sqlx::query_scalar(
                "SELECT e.last_heartbeat_at FROM executors e JOIN apps a ON a.id = e.app_id \
                 WHERE a.name = ? AND e.address = ?",
            )
            .bind(app)
            .bind(address)
            .fetch_optional(pool)
            .await?;
            Ok(at)
        })
    }

    /// Removes an executor from the registry; false if it was not registered, or (with
    /// `signed_before`) if it sent something signed at that time or later.
    pub async fn remove_executor(
        &self,
        app: &str,
        address: &str,
        signed_before: Option<Millis>,
    ) -> Result<bool> {
        on_pool!(self, |pool, Db| {
            let r = sqlx::query(
                "DELETE FROM executors WHERE address = ? AND app_id = (SELECT id FROM apps WHERE name = ?) \
                 AND signed_at < ?",
            )
            .bind(address)
            .bind(app)
            .bind(signed_before.unwrap_or(i64::MAX))
            .execute(pool)
            .await?;
            Ok(r.affected() > 0)
        })
    }

    /// The signed time of the newest registration or heartbeat accepted from an executor;
    /// `None` if it is not registered.
    pub async fn executor_clock(&self, app: &str, address: &str) -> Result<Option<Millis>> {
        on_pool!(self, |pool, Db| {
            Ok(sqlx::query_scalar(
                "SELECT e.signed_at FROM executors e JOIN apps a ON a.id = e.app_id \
                 WHERE a.name = ? AND e.address = ?",
            )
            .bind(app)
            .bind(address)
            .fetch_optional(pool)
            .await?)
        })
    }

    /// Moves an executor's clock forward to `signed_at` (never back).
    pub async fn advance_executor_clock(
        &self,
        app: &str,
        address: &str,
        signed_at: Millis,
    ) -> Result<()> {
        on_pool!(self, |pool, Db| {
            sqlx::query(
                "UPDATE executors SET signed_at = ? WHERE address = ? \
                 AND app_id = (SELECT id FROM apps WHERE name = ?) AND signed_at < ?",
            )
            .bind(signed_at)
            .bind(address)
            .bind(app)
            .bind(signed_at)
            .execute(pool)
            .await?;
        });
        Ok(())
    }

    /// Executors whose last heartbeat is after `alive_after`, of one app or all, sorted by
    /// app then address (route strategies rely on a stable order).
    pub async fn list_executors(
        &self,
        app: Option<&str>,
        alive_after: Millis,
    ) -> Result<Vec<Executor>> {
        on_pool!(self, |pool, Db| {
            let mut qb = QueryBuilder::<Db>::new(
                "SELECT a.name AS app, e.address, e.protocol, e.capacity, e.running, \
                 e.registered_at, e.last_heartbeat_at FROM executors e JOIN apps a ON a.id = e.app_id \
                 WHERE e.last_heartbeat_at > ",
            );
            qb.push_bind(alive_after);
            if let Some(app) = app {
                qb.push(" AND a.name = ").push_bind(app);
            }
            qb.push(" ORDER BY a.name, e.address");
            let rows: Vec<ExecutorRow> = qb.build_query_as().fetch_all(pool).await?;
            Ok(rows.into_iter().map(Executor::from).collect())
        })
    }

    /// Executors whose last heartbeat is at or before `alive_after` (dead).
    pub async fn dead_executors(&self, alive_after: Millis) -> Result<Vec<Executor>> {
        on_pool!(self, |pool, Db| {
            let rows: Vec<ExecutorRow> = sqlx::query_as(
                "SELECT a.name AS app, e.address, e.protocol, e.capacity, e.running, \
                 e.registered_at, e.last_heartbeat_at FROM executors e JOIN apps a ON a.id = e.app_id \
                 WHERE e.last_heartbeat_at <= ? ORDER BY e.address",
            )
            .bind(alive_after)
            .fetch_all(pool)
            .await?;
            Ok(rows.into_iter().map(Executor::from).collect())
        })
    }

    /// The apps an executor address is registered under (one, in practice).
    pub async fn apps_at_address(&self, address: &str) -> Result<Vec<String>> {
        on_pool!(self, |pool, Db| {
            Ok(sqlx::query_scalar(
                "SELECT a.name FROM executors e JOIN apps a ON a.id = e.app_id WHERE e.address = ?",
            )
            .bind(address)
            .fetch_all(pool)
            .await?)
        })
    }
}
