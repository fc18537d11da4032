//! An app's sealed secrets and a job's key-value state (the plugins' `rota` imports).

use super::*;

impl Store {
    /// Stores a sealed secret of `app` (created if new), replacing one of the same name.
    pub async fn set_secret(
        &self,
        app: &str,
        name: &str,
        sealed: &[u8],
        now: Millis,
    ) -> Result<()> {
        let app_id = self.ensure_app(app, now).await?;
        let upsert = if self.is_mysql() {
            "INSERT INTO secrets (app_id, name, sealed, created_at, updated_at) VALUES (?, ?, ?, ?, ?) \
             ON DUPLICATE KEY UPDATE sealed = VALUES(sealed), updated_at = VALUES(updated_at)"
        } else {
            "INSERT INTO secrets (app_id, name, sealed, created_at, updated_at) VALUES (?, ?, ?, ?, ?) \
             ON CONFLICT(app_id, name) DO UPDATE SET sealed = excluded.sealed, updated_at = excluded.updated_at"
        };
        on_pool!(self, |pool, Db| {
            sqlx::query(upsert)
                .bind(app_id)
                .bind(name)
                .bind(sealed)
                .bind(now)
                .bind(now)
                .execute(pool)
                .await?;
        });
        Ok(())
    }

    /// The sealed value of `app`'s secret `name`.
    pub async fn secret(&self, app: &str, name: &str) -> Result<Option<Vec<u8>>> {
        on_pool!(self, |pool, Db| {
            Ok(sqlx::query_scalar(
                "SELECT s.sealed FROM secrets s JOIN apps a ON a.id = s.app_id \
                 WHERE a.name = ? AND s.name = ?",
            )
            .bind(app)
            .bind(name)
            .fetch_optional(pool)
            .await?)
        })
    }

    /// `app`'s secrets by name: (name, created_at, updated_at), never their values.
    pub async fn list_secrets(&self, app: &str) -> Result<Vec<SecretMeta>> {
        on_pool!(self, |pool, Db| {
            Ok(sqlx::query_as(
                "SELECT s.name, s.created_at, s.updated_at FROM secrets s \
                 JOIN apps a ON a.id = s.app_id WHERE a.name = ? ORDER BY s.name",
            )
            .bind(app)
            .fetch_all(pool)
            .await?)
        })
    }

    /// Deletes `app`'s secret `name`; false if there was none.
    pub async fn delete_secret(&self, app: &str, name: &str) -> Result<bool> {
        on_pool!(self, |pool, Db| {
            let r = sqlx::query(
                "DELETE FROM secrets WHERE name = ? AND app_id = (SELECT id FROM apps WHERE name = ?)",
            )
            .bind(name)
            .bind(app)
            .execute(pool)
            .await?;
            Ok(r.affected() > 0)
        })
    }

    pub async fn kv_get(&self, job_id: i64, key: &str) -> Result<Option<Vec<u8>>> {
        on_pool!(self, |pool, Db| {
            Ok(
                sqlx::query_scalar("SELECT v FROM kv WHERE job_id = ? AND k = ?")
                    .bind(job_id)
                    .bind(key)
                    .fetch_optional(pool)
                    .await?,
            )
        })
    }

    pub async fn kv_set(&self, job_id: i64, key: &str, value: &[u8], now: Millis) -> Result<()> {
        let upsert = if self.is_mysql() {
            "INSERT INTO kv (job_id, k, v, updated_at) VALUES (?, ?, ?, ?) \
             ON DUPLICATE KEY UPDATE v = VALUES(v), updated_at = VALUES(updated_at)"
        } else {
            "INSERT INTO kv (job_id, k, v, updated_at) VALUES (?, ?, ?, ?) \
             ON CONFLICT(job_id, k) DO UPDATE SET v = excluded.v, updated_at = excluded.updated_at"
        };
        on_pool!(self, |pool, Db| {
            sqlx::query(upsert)
                .bind(job_id)
                .bind(key)
                .bind(value)
                .bind(now)
                .execute(pool)
                .await?;
        });
        Ok(())
    }

    /// How many keys, and bytes of keys and values, job `job_id`'s state holds besides
    /// `except`.
    pub async fn kv_usage(&self, job_id: i64, except: &str) -> Result<KvUsage> {
        on_pool!(self, |pool, Db| {
            let (keys, bytes): (i64, i64) = sqlx::query_as(
                "SELECT COUNT(*), CAST(COALESCE(SUM(LENGTH(k) + LENGTH(v)), 0) AS SIGNED) \
                 FROM kv WHERE job_id = ? AND k <> ?",
            )
            .bind(job_id)
            .bind(except)
            .fetch_one(pool)
            .await?;
            Ok(KvUsage {
                keys: keys.max(0) as usize,
                bytes: bytes.max(0) as usize,
            })
        })
    }

    /// False if the key was not there.
    pub async fn kv_delete(&self, job_id: i64, key: &str) -> Result<bool> {
        on_pool!(self, |pool, Db| {
            let r = sqlx::query("DELETE FROM kv WHERE job_id = ? AND k = ?")
                .bind(job_id)
                .bind(key)
                .execute(pool)
                .await?;
            Ok(r.affected() > 0)
        })
    }
}
