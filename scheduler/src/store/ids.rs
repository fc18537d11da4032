//! Ids chosen before rows are written: the sequences, and this node's block of task ids
//! (a batch needs no read-back, a run id travels to the executor before its row exists).

use super::*;

impl Store {
    /// `n` consecutive task ids for rows `tx` is about to insert; the first. MySQL: from
    /// this node's block ([`Store::task_ids`]), so the sequence row is never held for the
    /// transaction. SQLite: inside the transaction, on its one connection.
    pub(super) async fn task_ids_in(&self, tx: &mut Tx, n: i64) -> Result<i64> {
        match tx {
            // A refill of the node's block goes through the control connections: every
            // connection of the main pool may be held by a transaction like this one, each
            // waiting for a connection to refill with (100 acks at once did that, for the
            // 10 s of the pool's timeout).
            Tx::MySql(_) => self.task_ids_from(n, &self.control).await,
            Tx::Sqlite(tx) => {
                let end: i64 = sqlx::query_scalar(
                    "UPDATE sequences SET next_value = next_value + ? WHERE name = 'task' RETURNING next_value",
                )
                .bind(n)
                .fetch_one(&mut **tx)
                .await?;
                Ok(end - n)
            }
        }
    }

    /// `n` consecutive new task ids; the first. On MySQL they come from a block of
    /// [`TASK_ID_BLOCK`] this node reserved: every node updating the one sequence row per
    /// batch was the busiest conflict between Galera members (and a statement per batch on
    /// any server). Task ids stay unique; across nodes they are no longer in creation order.
    pub(super) async fn task_ids(&self, n: i64) -> Result<i64> {
        self.task_ids_from(n, &self.pool).await
    }

    /// [`Store::task_ids`], a new block reserved through `pool`.
    async fn task_ids_from(&self, n: i64, pool: &Pool) -> Result<i64> {
        let n = n.max(1);
        if !self.is_mysql() || n >= TASK_ID_BLOCK {
            return self.allocate_ids_on(pool, "task", n).await;
        }
        {
            let mut block = self.task_block.lock().unwrap_or_else(|e| e.into_inner());
            if block.1 - block.0 >= n {
                block.0 += n;
                return Ok(block.0 - n);
            }
        }
        let first = self.allocate_ids_on(pool, "task", TASK_ID_BLOCK).await?;
        let mut block = self.task_block.lock().unwrap_or_else(|e| e.into_inner());
        // What a concurrent caller left of an older block is dropped: ids may have gaps.
        *block = (first + n, first + TASK_ID_BLOCK);
        Ok(first)
    }

    /// Reserves `n` consecutive ids of sequence `name` and returns the first. Ids are chosen
    /// before rows are written, so a batch needs no read-back and a run id can travel to the
    /// executor before the run row exists.
    pub async fn allocate_ids(&self, name: &str, n: i64) -> Result<i64> {
        self.allocate_ids_on(&self.pool, name, n).await
    }

    /// [`Store::allocate_ids`] through `pool`.
    async fn allocate_ids_on(&self, pool: &Pool, name: &str, n: i64) -> Result<i64> {
        retrying!("allocate_ids", {
            let n = n.max(1);
            // One statement, outside any transaction: MySQL hands the new value back through
            // `LAST_INSERT_ID(expr)` in the statement's answer, SQLite through `RETURNING`.
            let end: i64 = match pool {
                Pool::MySql(pool) => {
                    let r = sqlx::query(
                        "UPDATE sequences SET next_value = LAST_INSERT_ID(next_value + ?) WHERE name = ?",
                    )
                    .bind(n)
                    .bind(name)
                    .execute(pool)
                    .await?;
                    if r.rows_affected() == 0 {
                        return Err(Error::Corrupt(format!("no sequence `{name}`")));
                    }
                    r.insert_id()
                }
                Pool::Sqlite(pool) => {
                    sqlx::query_scalar(
                        "UPDATE sequences SET next_value = next_value + ? WHERE name = ? RETURNING next_value",
                    )
                    .bind(n)
                    .bind(name)
                    .fetch_one(pool)
                    .await?
                }
            };
            Ok(end - n)
        })
    }
}
