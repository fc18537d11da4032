//! Scheduler nodes: membership, epochs, fences, take-overs (`docs/cluster.md`).

use super::*;

impl Store {
    /// Registers this scheduler node (by its stable name) and starts a new epoch for it.
    pub async fn start_node(&self, name: &str, address: &str, now: Millis) -> Result<NodeLease> {
        retrying!("start_node", {
            let upsert = if self.is_mysql() {
                "INSERT INTO nodes (name, address, epoch, heartbeat_at, started_at) VALUES (?, ?, 1, ?, ?) \
                 ON DUPLICATE KEY UPDATE epoch = epoch + 1, address = VALUES(address), \
                 heartbeat_at = VALUES(heartbeat_at), started_at = VALUES(started_at)"
            } else {
                "INSERT INTO nodes (name, address, epoch, heartbeat_at, started_at) VALUES (?, ?, 1, ?, ?) \
                 ON CONFLICT(name) DO UPDATE SET epoch = epoch + 1, address = excluded.address, \
                 heartbeat_at = excluded.heartbeat_at, started_at = excluded.started_at"
            };
            on_pool!(self, |pool, Db| {
                let mut tx = pool.begin_write().await?;
                sqlx::query(upsert)
                    .bind(name)
                    .bind(address)
                    .bind(now)
                    .bind(now)
                    .execute(&mut *tx)
                    .await?;
                let (node_id, epoch): (i64, i64) =
                    sqlx::query_as("SELECT id, epoch FROM nodes WHERE name = ?")
                        .bind(name)
                        .fetch_one(&mut *tx)
                        .await?;
                sqlx::query(sqlx::AssertSqlSafe(format!(
                    "{} INTO node_fences (node_id, epoch) VALUES (?, ?)",
                    self.insert_ignore()
                )))
                .bind(node_id)
                .bind(epoch)
                .execute(&mut *tx)
                .await?;
                sqlx::query("UPDATE node_fences SET epoch = ? WHERE node_id = ?")
                    .bind(epoch)
                    .bind(node_id)
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(NodeLease { node_id, epoch })
            })
        })
    }

    /// Refreshes this node's heartbeat. False when a newer incarnation of the same node name
    /// has taken over (its epoch is higher): this process must stop scheduling.
    pub async fn heartbeat_node(&self, lease: NodeLease, now: Millis) -> Result<bool> {
        heartbeat_on(&self.pool, lease, now).await
    }

    /// In `tx`: whether `lease` is still this node's, and then held so until commit (as
    /// [`hold_lease!`] holds it) — for work that claims when it may and otherwise leaves
    /// what it creates to any node's scan, rather than failing.
    pub(super) async fn holds_lease(&self, tx: &mut Tx, lease: NodeLease) -> Result<bool> {
        let held: Result<()> = on_tx!(tx, |tx, Db| {
            async {
                hold_lease!(self, &mut **tx, lease);
                Ok(())
            }
            .await
        });
        match held {
            Ok(()) => Ok(true),
            Err(Error::Fenced) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// The node holding a claimed task; `None` if it is not claimed.
    pub async fn task_owner(&self, task_id: i64) -> Result<Option<NodeRef>> {
        on_pool!(self, |pool, Db| {
            Ok(sqlx::query_as(
                "SELECT n.id, n.address FROM tasks t JOIN nodes n ON n.id = t.owner_node \
                 WHERE t.id = ? AND t.status = 'claimed'",
            )
            .bind(task_id)
            .fetch_optional(pool)
            .await?)
        })
    }

    /// Takes over the claims of every other node whose heartbeat is older than
    /// `dead_before`: its epoch is bumped (if it only stalled, its next heartbeat or claim
    /// finds itself fenced) and its claimed tasks move to `lease`, in one transaction.
    /// Returns the names of the nodes taken over and the claims now held by `lease`.
    pub async fn take_over_dead(
        &self,
        lease: NodeLease,
        dead_before: Millis,
    ) -> Result<(Vec<String>, Vec<DueTask>)> {
        retrying!("take_over_dead", {
            let skip_locked = self.skip_locked();
            on_pool!(control self, |pool, Db| {
                let mut tx = pool.begin_write().await?;
                // Only a node that is itself still live takes others over: a fenced one would
                // move their claims to an epoch nobody holds any more.
                hold_lease!(self, &mut *tx, lease);
                // `heartbeat_at` 0 marks a node already taken over (until it starts again).
                let dead: Vec<(i64, String)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
                    "SELECT id, name FROM nodes WHERE id <> ? AND heartbeat_at > 0 \
                     AND heartbeat_at < ? ORDER BY id{skip_locked}"
                )))
                .bind(lease.node_id)
                .bind(dead_before)
                .fetch_all(&mut *tx)
                .await?;
                if dead.is_empty() {
                    return Ok((Vec::new(), Vec::new()));
                }
                let mut names = Vec::with_capacity(dead.len());
                let mut moved = Vec::new();
                for (id, name) in dead {
                    // Its fence, exclusively: a write of its still in flight (a claim, a record)
                    // holds it shared; skip the node this round rather than wait (MariaDB rolls
                    // a stalled writer's transaction back after `idle_transaction_timeout`).
                    let fence: Option<i64> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                        "SELECT epoch FROM node_fences WHERE node_id = ?{skip_locked}"
                    )))
                    .bind(id)
                    .fetch_optional(&mut *tx)
                    .await?;
                    if fence.is_none() {
                        continue;
                    }
                    sqlx::query("UPDATE node_fences SET epoch = epoch + 1 WHERE node_id = ?")
                        .bind(id)
                        .execute(&mut *tx)
                        .await?;
                    sqlx::query("UPDATE nodes SET epoch = epoch + 1, heartbeat_at = 0 WHERE id = ?")
                        .bind(id)
                        .execute(&mut *tx)
                        .await?;
                    let rows: Vec<DueRow> = sqlx::query_as(concat!(
                        due_select!(),
                        " WHERE status = 'claimed' AND owner_node = ? ORDER BY due_at"
                    ))
                    .bind(id)
                    .fetch_all(&mut *tx)
                    .await?;
                    sqlx::query(
                        "UPDATE tasks SET owner_node = ?, owner_epoch = ? \
                         WHERE status = 'claimed' AND owner_node = ?",
                    )
                    .bind(lease.node_id)
                    .bind(lease.epoch)
                    .bind(id)
                    .execute(&mut *tx)
                    .await?;
                    for row in rows {
                        moved.push(DueTask::try_from(row)?);
                    }
                    names.push(name);
                }
                tx.commit().await?;
                Ok((names, moved))
            })
        })
    }

    /// Scheduler nodes that heartbeat after `alive_after`.
    pub async fn live_nodes(&self, alive_after: Millis) -> Result<Vec<NodeRef>> {
        on_pool!(self, |pool, Db| {
            Ok(
                sqlx::query_as("SELECT id, address FROM nodes WHERE heartbeat_at > ? ORDER BY id")
                    .bind(alive_after)
                    .fetch_all(pool)
                    .await?,
            )
        })
    }

    /// Every scheduler node that ever ran on this database, by name.
    pub async fn nodes(&self) -> Result<Vec<NodeRow>> {
        on_pool!(self, |pool, Db| {
            Ok(sqlx::query_as(
                "SELECT name, address, started_at, heartbeat_at, clock_offset_ms FROM nodes \
                 ORDER BY name",
            )
            .fetch_all(pool)
            .await?)
        })
    }

    /// The live nodes (heartbeat after `alive_after`) whose clock is off the database's
    /// by more than `beyond_ms`: their names and offsets.
    pub async fn skewed_nodes(
        &self,
        alive_after: Millis,
        beyond_ms: Millis,
    ) -> Result<Vec<(String, Millis)>> {
        on_pool!(self, |pool, Db| {
            Ok(sqlx::query_as(
                "SELECT name, clock_offset_ms FROM nodes WHERE heartbeat_at > ? \
                 AND (clock_offset_ms > ? OR clock_offset_ms < ?) ORDER BY name",
            )
            .bind(alive_after)
            .bind(beyond_ms)
            .bind(-beyond_ms)
            .fetch_all(pool)
            .await?)
        })
    }

    /// The last heartbeat of the node called `name`, if it ever ran.
    pub async fn node_heartbeat_at(&self, name: &str) -> Result<Option<Millis>> {
        on_pool!(self, |pool, Db| {
            let at: Option<i64> =
                sqlx::query_scalar("SELECT heartbeat_at FROM nodes WHERE name = ?")
                    .bind(name)
                    .fetch_optional(pool)
                    .await?;
            Ok(at)
        })
    }
}
