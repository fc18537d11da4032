//! Several members of one database behind one `--database-url`:
//! `mysql://user:pass@host1:3316,host2:3317,host3:3318/rota` names the three members of a
//! Galera cluster, say. Rota talks to one member at a time: at start the first in the list
//! that is ready, then the same one until it fails. A watcher checks that member every
//! second on a connection of its own; when it stops answering, or answers but is not ready
//! (Galera's `wsrep_ready` is off on a member cut off from the primary component), every
//! pool of the store moves to the next member that is ready: new connections go there, and
//! connections opened before the move are closed the next time they are taken from a pool.
//! Statements caught by the failure fail like any database error, and their callers' usual
//! recovery (the next scan round, a report re-sent, an API client's retry) applies.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use sqlx::mysql::{MySqlConnectOptions, MySqlConnection};
use sqlx::{ConnectOptions, Connection, MySqlPool};

use super::{Error, Result};

/// How often the watcher checks the member in use.
const WATCH_EVERY: Duration = Duration::from_secs(1);
/// How long a member may take to connect or to answer the check.
const CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// The members named by a multi-host URL, and which of them the store uses.
pub(super) struct Members {
    /// `host:port` of each member, for log lines.
    names: Vec<String>,
    options: Vec<MySqlConnectOptions>,
    current: AtomicUsize,
    /// When the store last moved to another member: connections older than that go.
    moved_at: Mutex<Option<Instant>>,
    /// Every pool that must follow a move.
    pools: Mutex<Vec<MySqlPool>>,
}

/// The single-host URLs a `mysql://` URL names, one per host of its comma-separated host
/// list, each with the URL's user, password, database and parameters.
pub(super) fn split_hosts(url: &str) -> Result<Vec<(String, String)>> {
    let bad =
        |why: &str| Error::InvalidUrl(format!("{why} (in `{}`)", crate::config::redact_url(url)));
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| bad("no `://` after the scheme"))?;
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (user, hosts) = match authority.rfind('@') {
        Some(at) => (&authority[..=at], &authority[at + 1..]),
        None => ("", authority),
    };
    hosts
        .split(',')
        .map(|host| {
            let host = host.trim();
            if host.is_empty() {
                return Err(bad("an empty host in the host list"));
            }
            Ok((host.to_owned(), format!("{scheme}://{user}{host}{tail}")))
        })
        .collect()
}

/// The `host`, `port` of every server a `mysql://` URL names (3306 when it gives none);
/// nothing for SQLite. The egress policy denies them to jobs' HTTP.
pub fn database_endpoints(url: &str) -> Vec<(String, u16)> {
    let url = match url.strip_prefix("mariadb:") {
        Some(rest) => format!("mysql:{rest}"),
        None => url.to_owned(),
    };
    if !url.starts_with("mysql:") {
        return Vec::new();
    }
    let Ok(hosts) = split_hosts(&url) else {
        return Vec::new();
    };
    hosts
        .iter()
        .filter_map(|(_, one)| {
            let opts = one.parse::<MySqlConnectOptions>().ok()?;
            Some((opts.get_host().to_owned(), opts.get_port()))
        })
        .collect()
}

impl Members {
    /// The members of `url`, or `None` when it names one host.
    pub(super) fn of(url: &str) -> Result<Option<Arc<Members>>> {
        let hosts = split_hosts(url)?;
        if hosts.len() < 2 {
            return Ok(None);
        }
        let mut names = Vec::new();
        let mut options = Vec::new();
        for (name, url) in hosts {
            options.push(url.parse::<MySqlConnectOptions>()?);
            names.push(name);
        }
        Ok(Some(Arc::new(Members {
            names,
            options,
            current: AtomicUsize::new(0),
            moved_at: Mutex::new(None),
            pools: Mutex::new(Vec::new()),
        })))
    }

    /// The options of the member in use.
    pub(super) fn options(&self) -> MySqlConnectOptions {
        self.options[self.current.load(Ordering::Acquire)].clone()
    }

    /// Makes `pool` follow the moves from member to member.
    pub(super) fn follow(&self, pool: &MySqlPool) {
        pool.set_connect_options(self.options());
        self.pools.lock().expect("members lock").push(pool.clone());
    }

    /// Whether a connection opened `age` ago predates the last move (so it is to a member
    /// the store left).
    pub(super) fn is_stale(&self, age: Duration) -> bool {
        let moved_at = *self.moved_at.lock().expect("members lock");
        moved_at.is_some_and(|m| {
            Instant::now()
                .checked_sub(age)
                .is_none_or(|opened| opened < m)
        })
    }

    /// Starts on the first member, in the URL's order, that is ready; an error naming what
    /// each one answered if none is.
    pub(super) async fn choose(&self) -> Result<()> {
        let mut why = Vec::new();
        for (i, opts) in self.options.iter().enumerate() {
            match connect_ready(opts).await {
                Ok(conn) => {
                    let _ = conn.close().await;
                    if i > 0 {
                        tracing::warn!(member = %self.names[i], "database members before it are not ready: {}", why.join("; "));
                    }
                    self.move_to(i);
                    return Ok(());
                }
                Err(e) => why.push(format!("{}: {e}", self.names[i])),
            }
        }
        Err(Error::Unavailable(format!(
            "no database member is ready: {}",
            why.join("; ")
        )))
    }

    /// Checks the member in use every second and moves to the next ready one when it fails;
    /// ends when the store is gone.
    pub(super) fn watch(self: &Arc<Self>) {
        let members: Weak<Members> = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut conn: Option<MySqlConnection> = None;
            loop {
                tokio::time::sleep(WATCH_EVERY).await;
                let Some(me) = members.upgrade() else { return };
                let at = me.current.load(Ordering::Acquire);
                if let Some(c) = conn.as_mut()
                    && check(c).await.is_ok()
                {
                    continue;
                }
                // The watcher's own connection may have died alone: one fresh try first.
                let why = match connect_ready(&me.options[at]).await {
                    Ok(c) => {
                        conn = Some(c);
                        continue;
                    }
                    Err(e) => e,
                };
                conn = me.fail_over(at, &why).await;
            }
        });
    }

    /// Moves from member `from`, which failed with `why`, to the next ready one after it;
    /// its connection, or `None` (staying put) when no other member is ready.
    async fn fail_over(&self, from: usize, why: &str) -> Option<MySqlConnection> {
        let n = self.options.len();
        for step in 1..n {
            let to = (from + step) % n;
            if let Ok(conn) = connect_ready(&self.options[to]).await {
                tracing::warn!(
                    from = %self.names[from], to = %self.names[to],
                    "database member failed ({why}); moving to the next one"
                );
                metrics::counter!("rota_db_failovers_total").increment(1);
                self.move_to(to);
                return Some(conn);
            }
        }
        tracing::error!(member = %self.names[from], "database member failed ({why}) and no other member is ready");
        None
    }

    fn move_to(&self, to: usize) {
        let previous = self.current.swap(to, Ordering::AcqRel);
        for pool in self.pools.lock().expect("members lock").iter() {
            pool.set_connect_options(self.options[to].clone());
        }
        // After the pools have the new member: a connection opened meanwhile, to either
        // member, counts as older and is closed once; none to the old one survives.
        if previous != to {
            *self.moved_at.lock().expect("members lock") = Some(Instant::now());
        }
    }
}

/// A connection to a member that answers and is ready to take writes.
async fn connect_ready(opts: &MySqlConnectOptions) -> std::result::Result<MySqlConnection, String> {
    let mut conn = tokio::time::timeout(CHECK_TIMEOUT, opts.connect())
        .await
        .map_err(|_| "no answer".to_owned())?
        .map_err(|e| e.to_string())?;
    check(&mut conn).await?;
    Ok(conn)
}

/// Answers, and is ready to take writes: not read-only (a MySQL Group Replication
/// secondary, a replica), and on Galera `wsrep_ready` ON (a server without Galera reports no
/// such status, or OFF while it has no cluster, and is ready whenever it answers).
async fn check(conn: &mut MySqlConnection) -> std::result::Result<(), String> {
    let answer = tokio::time::timeout(CHECK_TIMEOUT, async {
        let read_only: i64 = sqlx::query_scalar("SELECT CAST(@@global.read_only AS SIGNED)")
            .fetch_one(&mut *conn)
            .await?;
        let status = sqlx::query_as::<_, (String, String)>(
            "SHOW GLOBAL STATUS WHERE Variable_name IN ('wsrep_ready', 'wsrep_cluster_status')",
        )
        .fetch_all(&mut *conn)
        .await?;
        Ok::<_, sqlx::Error>((read_only, status))
    })
    .await
    .map_err(|_| "no answer".to_owned())?
    .map_err(|e| e.to_string())?;
    let (read_only, status) = answer;
    if read_only != 0 {
        return Err("read-only (not the primary)".into());
    }
    let value = |name: &str| {
        status
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    };
    match (value("wsrep_ready"), value("wsrep_cluster_status")) {
        (Some("OFF"), Some(cluster)) if cluster != "Disconnected" => {
            Err(format!("not ready (cluster status {cluster})"))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_database_endpoints_are_every_member_with_its_port() {
        assert_eq!(
            database_endpoints("mysql://u:p@db1:3316,db2/rota"),
            [("db1".to_owned(), 3316), ("db2".to_owned(), 3306)]
        );
        assert_eq!(
            database_endpoints("mariadb://u@10.0.0.7:3307/rota"),
            [("10.0.0.7".to_owned(), 3307)]
        );
        assert!(database_endpoints("sqlite:rota.db").is_empty());
    }

    #[test]
    fn a_host_list_becomes_one_url_per_member() {
        let members =
            split_hosts("mysql://rota:pw@db1:3316, db2:3317,db3/rota?ssl-mode=disabled").unwrap();
        assert_eq!(
            members,
            vec![
                (
                    "db1:3316".into(),
                    "mysql://rota:pw@db1:3316/rota?ssl-mode=disabled".into()
                ),
                (
                    "db2:3317".into(),
                    "mysql://rota:pw@db2:3317/rota?ssl-mode=disabled".into()
                ),
                (
                    "db3".into(),
                    "mysql://rota:pw@db3/rota?ssl-mode=disabled".into()
                ),
            ]
        );
        assert_eq!(
            split_hosts("mysql://h/db").unwrap(),
            vec![("h".into(), "mysql://h/db".into())]
        );
        assert!(Members::of("mysql://root@a:1/db").unwrap().is_none());
        assert!(Members::of("mysql://root@a:1,b:2/db").unwrap().is_some());
    }

    #[test]
    fn a_bad_host_list_says_what_is_wrong_without_the_password() {
        let err = split_hosts("mysql://rota:secret@db1,,db3/rota")
            .unwrap_err()
            .to_string();
        assert!(err.contains("an empty host in the host list"), "{err}");
        assert!(!err.contains("secret"), "{err}");
        let err = split_hosts("db1,db2/rota").unwrap_err().to_string();
        assert!(err.contains("no `://`"), "{err}");
    }
}
