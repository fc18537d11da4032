//! Schema migrations at start-up, one node at a time.
//!
//! sqlx's own migration lock is `GET_LOCK` on MySQL (which MariaDB does not wait on when
//! given sqlx's negative timeout, and which Galera does not replicate) and nothing on
//! SQLite, so nodes booting together on an empty database raced each other into
//! "Duplicate entry '1'". Rota takes a lock of its own instead: a row in
//! `rota_migration_lock`, inserted by the node that migrates and deleted when it is done.
//! An `INSERT` of one primary key is exclusive on every backend Rota runs on — MySQL,
//! MariaDB, a Galera cluster (a second member's insert fails certification) and SQLite
//! shared by several processes — so the others wait, then find the schema current.
//!
//! The holder refreshes its row while it migrates; a row left by a node that died while
//! migrating is taken over once it is [`STALE_MS`] old.

use std::time::Duration;

use sqlx::migrate::Migrator;

use super::retry::is_retryable;
use super::{Error, Pool, Result};
use crate::model::now_ms;

/// A lock row not refreshed for this long belongs to a node that died while migrating.
const STALE_MS: i64 = 30_000;
/// How often the holder refreshes its row.
const BEAT: Duration = Duration::from_secs(5);
/// How long a node waits for another's migrations before it gives up.
const WAIT: Duration = Duration::from_secs(600);

static MYSQL: Migrator = sqlx::migrate!("../migrations/mysql");
static SQLITE: Migrator = sqlx::migrate!("../migrations/sqlite");

/// Applies pending migrations under the lock.
pub(super) async fn run(pool: &Pool) -> Result<()> {
    let holder = format!(
        "{}:{}:{:016x}",
        hostname(),
        std::process::id(),
        rand::random::<u64>()
    );
    create_lock_table(pool).await?;
    acquire(pool, &holder).await?;
    let beat = {
        let (pool, holder) = (pool.clone(), holder.clone());
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(BEAT).await;
                if let Err(e) = refresh(&pool, &holder).await {
                    tracing::warn!(error = %e, "refreshing the migration lock failed");
                }
            }
        })
    };
    let result = apply(pool).await;
    beat.abort();
    let released = release(pool, &holder).await;
    result?;
    released
}

async fn apply(pool: &Pool) -> Result<()> {
    // The lock is ours: sqlx's own (GET_LOCK) would only add a second, weaker one.
    match pool {
        Pool::MySql(p) => {
            let mut m = Migrator::with_migrations(MYSQL.migrations.to_vec());
            m.set_locking(false);
            m.run(p).await?
        }
        Pool::Sqlite(p) => {
            let mut m = Migrator::with_migrations(SQLITE.migrations.to_vec());
            m.set_locking(false);
            m.run(p).await?
        }
    }
    Ok(())
}

async fn create_lock_table(pool: &Pool) -> Result<()> {
    on_pool!(@match pool, |pool, Db| {
        sqlx::query(
            "CREATE TABLE IF NOT EXISTS rota_migration_lock (\
             id INTEGER NOT NULL PRIMARY KEY, holder VARCHAR(200) NOT NULL, beat_at BIGINT NOT NULL)",
        )
        .execute(pool)
        .await?;
    });
    Ok(())
}

/// Waits until this node holds the lock row.
async fn acquire(pool: &Pool, holder: &str) -> Result<()> {
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut said = false;
    loop {
        // Bare wall time, on purpose: migrations run before the node reads the database's
        // clock. Beats every 5 s against a 30 s staleness leave 25 s for nodes' clocks
        // to disagree before a live lock could look stale.
        let now = now_ms();
        let inserted = on_pool!(@match pool, |pool, Db| {
            sqlx::query("INSERT INTO rota_migration_lock (id, holder, beat_at) VALUES (1, ?, ?)")
                .bind(holder)
                .bind(now)
                .execute(pool)
                .await
                .map(|_| ())
        });
        match inserted.map_err(Error::from) {
            Ok(()) => return Ok(()),
            // Held by another node (a duplicate key), or, on Galera, lost to another
            // member's insert at certification (a deadlock error): either way, wait.
            Err(Error::Conflict(_)) => {}
            Err(Error::Database(e)) if is_retryable(&e) => {}
            Err(e) => return Err(e),
        }
        let held: Option<(String, i64)> = on_pool!(@match pool, |pool, Db| {
            sqlx::query_as("SELECT holder, beat_at FROM rota_migration_lock WHERE id = 1")
                .fetch_optional(pool)
                .await?
        });
        if let Some((other, beat_at)) = held {
            if now - beat_at > STALE_MS {
                tracing::warn!(holder = %other, "taking over a migration lock its holder stopped refreshing");
                on_pool!(@match pool, |pool, Db| {
                    sqlx::query("DELETE FROM rota_migration_lock WHERE id = 1 AND holder = ? AND beat_at = ?")
                        .bind(&other)
                        .bind(beat_at)
                        .execute(pool)
                        .await?;
                });
                continue;
            }
            if !said {
                tracing::info!(holder = %other, "another node is migrating the schema; waiting");
                said = true;
            }
        }
        if tokio::time::Instant::now() > deadline {
            return Err(Error::Conflict(format!(
                "another node has held the schema migration lock for over {} s; if no node is \
                 migrating, delete the row of table rota_migration_lock",
                WAIT.as_secs()
            )));
        }
        tokio::time::sleep(Duration::from_millis(100 + rand::random::<u64>() % 100)).await;
    }
}

async fn refresh(pool: &Pool, holder: &str) -> Result<()> {
    on_pool!(@match pool, |pool, Db| {
        sqlx::query("UPDATE rota_migration_lock SET beat_at = ? WHERE id = 1 AND holder = ?")
            // Wall time, like `acquire`: the node's clock is not measured yet.
            .bind(now_ms())
            .bind(holder)
            .execute(pool)
            .await?;
    });
    Ok(())
}

async fn release(pool: &Pool, holder: &str) -> Result<()> {
    on_pool!(@match pool, |pool, Db| {
        sqlx::query("DELETE FROM rota_migration_lock WHERE id = 1 AND holder = ?")
            .bind(holder)
            .execute(pool)
            .await?;
    });
    Ok(())
}

fn hostname() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|h| h.trim().to_owned())
        })
        .unwrap_or_else(|| "node".into())
}
