//! What Rota's test suites share (a dev-dependency only).
//!
//! # Layout
//!
//! - [`missing`]: the one rule for a test whose prerequisite (MariaDB, root, a toolchain, a
//!   browser) is not there: under `CI=true` the test **fails**; elsewhere it is skipped,
//!   said on stderr, and listed in the summary `scripts/test` prints (`ROTA_TEST_SKIPS`).
//! - [`MysqlDb`]: a scratch database of its own on the server named by
//!   `ROTA_TEST_MYSQL_URL`, dropped when the test is done.

use std::io::Write;

/// Whether this run is CI's, where nothing may be skipped.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// A prerequisite of the running test is missing: panics under CI, else records the skip.
/// Call it and `return` from the test.
#[track_caller]
pub fn missing(what: &str) {
    let test = std::thread::current().name().unwrap_or("a test").to_owned();
    if in_ci() {
        panic!("{test}: {what} (CI=true: a missing prerequisite fails the test)");
    }
    eprintln!("SKIPPED {test}: {what}");
    if let Some(path) = std::env::var_os("ROTA_TEST_SKIPS")
        && let Ok(mut file) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
    {
        // One write per line: tests running at once append whole lines (O_APPEND).
        let _ = file.write_all(format!("{test}: {what}\n").as_bytes());
    }
}

/// The server of `ROTA_TEST_MYSQL_URL`, if set.
pub fn mysql_base_url() -> Option<String> {
    std::env::var("ROTA_TEST_MYSQL_URL")
        .ok()
        .filter(|u| !u.is_empty())
}

/// A database of its own on the `ROTA_TEST_MYSQL_URL` server.
pub struct MysqlDb {
    /// `mysql://…/<name>`.
    pub url: String,
    pub name: String,
    admin: sqlx::MySqlPool,
}

impl MysqlDb {
    /// A fresh database named `<prefix>_<random>`; `None` (after [`missing`]) when
    /// `ROTA_TEST_MYSQL_URL` is not set.
    pub async fn create(prefix: &str) -> Option<MysqlDb> {
        let Some(base) = mysql_base_url() else {
            missing(
                "ROTA_TEST_MYSQL_URL is not set (scripts/test sets it when MariaDB is installed)",
            );
            return None;
        };
        Some(Self::create_on(&base, prefix).await)
    }

    /// A fresh database on the server of `base` (`mysql://user@host:port[/db]`).
    pub async fn create_on(base: &str, prefix: &str) -> MysqlDb {
        let server = server_of(base);
        let admin = sqlx::MySqlPool::connect(&server)
            .await
            .unwrap_or_else(|e| panic!("connecting to {server}: {e}"));
        let name = format!("{prefix}_{}", rand::random::<u32>());
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&admin)
            .await
            .unwrap_or_else(|e| panic!("creating database {name}: {e}"));
        MysqlDb {
            url: format!("{}/{name}", server.trim_end_matches('/')),
            name,
            admin,
        }
    }

    /// Drops the database.
    pub async fn drop_db(self) {
        let _ = sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE {}", self.name)))
            .execute(&self.admin)
            .await;
        self.admin.close().await;
    }
}

/// `mysql://user@host:port/db` → `mysql://user@host:port`.
fn server_of(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => match rest.split_once('/') {
            Some((authority, _)) => format!("{scheme}://{authority}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn server_of_strips_the_database() {
        assert_eq!(
            super::server_of("mysql://root@127.0.0.1:3306/rota_ci"),
            "mysql://root@127.0.0.1:3306"
        );
        assert_eq!(
            super::server_of("mysql://root@127.0.0.1:3306"),
            "mysql://root@127.0.0.1:3306"
        );
    }
}
