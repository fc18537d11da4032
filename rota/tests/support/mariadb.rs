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
    server: Option<Child>,
}

impl PrivateMariaDb {
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
            server: None,
        })
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn url(&self, db: &str) -> String {
        format!("mysql://root@127.0.0.1:{}/{db}", self.port)
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
            .args([
                "--user=root",
                "--bind-address=127.0.0.1",
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
