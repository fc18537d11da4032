//! Rota on a three-member MariaDB Galera cluster (`scripts/galera`, ports 3316–3318): three
//! `rota server` nodes, each attached to a different member through a multi-host URL, two
//! executors, 20,000 delayed tasks over 20 s. Mid-run a Galera member and a Rota node are
//! SIGKILLed: the node on the dead member moves to the next one, the survivors take the dead
//! node's claims over, every task succeeds with one run and one send per attempt, and the
//! member rejoins so that the cluster is whole at the end.
//!
//! Needs Debian's `galera-4` (with `mariadb-server` and `rsync`); the test starts the cluster
//! (as root: members run as the system user `mysql`) unless it is already running, and
//! stops it again if it started it.

use crate::support;

use std::path::PathBuf;
use std::time::Duration;

use support::*;

const PROVIDER: &str = "/usr/lib/galera/libgalera_smm.so";

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/galera")
}

/// Runs `scripts/galera ARGS`, which must succeed.
fn galera(args: &[&str]) -> std::process::Output {
    let script = script();
    let out = std::process::Command::new(&script)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
    assert!(
        out.status.success(),
        "scripts/galera {}: {}\n{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The URL of every member, starting with member `first` (1, 2 or 3).
fn members_from(first: usize, db: &str) -> String {
    let hosts: Vec<String> = (0..3)
        .map(|k| format!("127.0.0.1:{}", 3315 + (first - 1 + k) % 3 + 1))
        .collect();
    format!("mysql://root@{}/{db}", hosts.join(","))
}

async fn cluster_size(url: &str) -> i64 {
    let pool = sqlx::MySqlPool::connect(url).await.unwrap();
    let (_, size): (String, String) = sqlx::query_as("SHOW STATUS LIKE 'wsrep_cluster_size'")
        .fetch_one(&pool)
        .await
        .unwrap();
    pool.close().await;
    size.parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_galera_member_and_a_node_killed_mid_run_lose_nothing_and_send_nothing_twice() {
    if !std::path::Path::new(PROVIDER).exists() {
        rota_testkit::missing("galera-4 is not installed (apt-get install galera-4 rsync)");
        return;
    }
    // `status` fails while a member is down: here that only means "not running yet".
    let was_running = std::process::Command::new(script())
        .arg("status")
        .output()
        .is_ok_and(|out| {
            out.status.success() && !String::from_utf8_lossy(&out.stdout).contains("not running")
        });
    tokio::task::spawn_blocking(|| galera(&["start"]))
        .await
        .unwrap();
    let db = rota_testkit::MysqlDb::create_on("mysql://root@127.0.0.1:3316", "rota_ga").await;
    let run = chaos::Chaos {
        node_urls: [
            members_from(1, &db.name),
            members_from(2, &db.name),
            members_from(3, &db.name),
        ],
        read_url: db.url.clone(),
        failed: &["n2"],
        logs: "rota-galera-chaos-logs",
    };
    // Mid-run: member 3 (n3's) and node n2 die; the member restarts 8 s later and rejoins.
    let outcome = run
        .run(async |nodes: &mut [KillOnDrop]| {
            galera(&["kill-member", "3"]);
            nodes[1].0.kill().unwrap();
            nodes[1].0.wait().unwrap();
            tokio::time::sleep(Duration::from_secs(8)).await;
            tokio::task::spawn_blocking(|| galera(&["start-member", "3"]))
                .await
                .unwrap();
        })
        .await;
    eprintln!(
        "database retries on the surviving nodes: {} over {} sends ({:.2} per 1,000)",
        outcome.retries,
        outcome.sends,
        outcome.retries * 1_000.0 / outcome.sends as f64
    );
    // n3 went on through the next member rather than being taken over.
    assert!(
        outcome.logs[2].contains("moving to the next one"),
        "n3 did not move off the killed member:\n{}",
        outcome.logs[2]
    );
    assert_eq!(cluster_size(&db.url).await, 3, "the killed member rejoined");
    db.drop_db().await;
    if !was_running {
        tokio::task::spawn_blocking(|| galera(&["stop"]))
            .await
            .unwrap();
    }
}
