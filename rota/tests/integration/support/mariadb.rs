//! A MariaDB server of a test's own (`mariadb-install-db` into a temporary directory, its
//! own port): for tests that stop and start the database under load (`db_restart.rs`,
//! `soak.rs`).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{eventually, free_port};

const MARIADBD: &str = "/usr/sbin/mariadbd";

/// A MariaDB server of the test's own: data in a temporary directory, TCP on a free port of
/// 127.0.0.1, killed on drop.
pub struct PrivateMariaDb {
    dir: tempfile::TempDir,
    port: u16,
    /// Host addresses it listens on besides 127.0.0.1, root let in from their subnets.
    also: Vec<String>,
    server: Option<Child>,
}

impl PrivateMariaDb {
    /// Installed, started, with database `name` created: the server and the database's
    /// URL; `None` where MariaDB's programs are not here (told as a missing prerequisite).
    pub async fn serving(name: &str) -> Option<(PrivateMariaDb, String)> {
        let Some(mut mariadb) = PrivateMariaDb::install() else {
            rota_testkit::missing("mariadb-install-db or mariadbd is not installed");
            return None;
        };
        mariadb.start().await;
        let url = mariadb.create_database(name).await;
        Some((mariadb, url))
    }

    /// Installs a fresh data directory; `None` if MariaDB's programs are not here.
    pub fn install() -> Option<PrivateMariaDb> {
        let installer = Command::new("mariadb-install-db")
            .arg("--help")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if installer.is_err() || !std::path::Path::new(MARIADBD).exists() {
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let out = Command::new("mariadb-install-db")
            .arg("--no-defaults")
            .arg(format!("--datadir={}", dir.path().join("data").display()))
            .args([
                "--user=root",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
            ])
            .output()
            .expect("running mariadb-install-db");
        assert!(
            out.status.success(),
            "mariadb-install-db failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        Some(PrivateMariaDb {
            dir,
            port: free_port(),
            also: Vec::new(),
            server: None,
        })
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn url(&self, db: &str) -> String {
        self.url_via("127.0.0.1", db)
    }

    /// The URL of database `db` through host address `ip` (see [`Self::also_listen_on`]).
    pub fn url_via(&self, ip: &str, db: &str) -> String {
        format!("mysql://root@{ip}:{}/{db}", self.port)
    }

    /// Listens on `ip` too from the next start, and lets root in from its /24: for a node
    /// in a network namespace, which reaches the host through a veth pair.
    pub fn also_listen_on(&mut self, ip: &str) {
        self.also.push(ip.to_owned());
    }

    /// Starts the server and waits until it answers.
    pub async fn start(&mut self) {
        let server = Command::new(MARIADBD)
            .arg("--no-defaults")
            .arg(format!("--datadir={}", self.path("data").display()))
            .arg(format!("--socket={}", self.path("sock").display()))
            .arg(format!(
                "--log-error={}",
                self.path("mariadbd.err").display()
            ))
            .arg(format!("--port={}", self.port))
            .arg(format!(
                "--bind-address={}",
                std::iter::once("127.0.0.1")
                    .chain(self.also.iter().map(String::as_str))
                    .collect::<Vec<_>>()
                    .join(",")
            ))
            .args([
                "--user=root",
                "--skip-log-bin",
                "--skip-name-resolve",
                "--innodb-buffer-pool-size=64M",
                "--innodb-flush-log-at-trx-commit=1",
                "--max-connections=500",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting mariadbd");
        self.server = Some(server);
        let url = self.url("");
        eventually(
            Duration::from_secs(60),
            "the private MariaDB to answer",
            || {
                let url = url.clone();
                async move {
                    let pool = sqlx::MySqlPool::connect(&url).await.ok()?;
                    pool.close().await;
                    Some(())
                }
            },
        )
        .await;
        if !self.also.is_empty() {
            let admin = sqlx::MySqlPool::connect(&url).await.unwrap();
            for ip in &self.also {
                let subnet = &ip[..ip.rfind('.').expect("an IPv4 address")];
                for sql in [
                    format!("CREATE USER IF NOT EXISTS 'root'@'{subnet}.%'"),
                    format!("GRANT ALL ON *.* TO 'root'@'{subnet}.%' WITH GRANT OPTION"),
                ] {
                    sqlx::query(sqlx::AssertSqlSafe(sql))
                        .execute(&admin)
                        .await
                        .unwrap();
                }
            }
            admin.close().await;
        }
    }

    /// Creates database `name` on the running server; its URL.
    pub async fn create_database(&self, name: &str) -> String {
        let admin = sqlx::MySqlPool::connect(&self.url("")).await.unwrap();
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&admin)
            .await
            .unwrap();
        admin.close().await;
        self.url(name)
    }

    /// Stops the server by its pid (SIGTERM: a clean shutdown) and waits until it exited.
    pub fn stop(&mut self) {
        let mut server = self.server.take().expect("the server runs");
        let pid = server.id().to_string();
        let sent = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .is_ok_and(|s| s.success());
        assert!(sent, "kill -TERM {pid}");
        server.wait().unwrap();
    }
}

impl Drop for PrivateMariaDb {
    fn drop(&mut self) {
        if let Some(mut server) = self.server.take() {
            let _ = server.kill();
            let _ = server.wait();
        }
    }
}
