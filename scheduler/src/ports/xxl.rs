//! XXL-JOB executors in the executor registry: their `registry` calls (a registration or
//! its 30-second renewal) and `registryRemove`, and the access token of an app.

use super::*;
use crate::xxl::TOKEN_SECRET;

impl Ports {
    /// The XXL-JOB executor at `address` of `app` is alive: registered (or its heartbeat
    /// renewed); fires of `app`'s jobs that waited for an executor go out.
    pub async fn xxl_registered(&self, app: &str, address: &str) -> anyhow::Result<()> {
        let store = &self.cluster.store;
        let known = store.executor_heartbeat_at(app, address).await?.is_some();
        store
            .upsert_xxl_executor(app, address, self.cluster.clock.now_ms())
            .await?;
        if known {
            return Ok(());
        }
        tracing::info!(app, executor = address, "an XXL-JOB executor registered");
        let alive_after = self.cluster.clock.now_ms() - self.cluster.config.executor_dead_after_ms;
        self.executors.refresh(store, alive_after).await?;
        if store.wake_waiting(&[app.to_owned()]).await? > 0 {
            self.scan_wake.now();
        }
        Ok(())
    }

    /// The XXL-JOB executor at `address` of `app` left (`registryRemove`). Its unfinished
    /// runs are not lost yet: it may be restarting, and those it still runs call back.
    pub async fn xxl_removed(&self, app: &str, address: &str) -> anyhow::Result<()> {
        let store = &self.cluster.store;
        store.remove_executor(app, address, None).await?;
        let alive_after = self.cluster.clock.now_ms() - self.cluster.config.executor_dead_after_ms;
        self.executors.refresh(store, alive_after).await?;
        Ok(())
    }

    /// `app`'s XXL-JOB access token (its secret [`TOKEN_SECRET`]); `None` when it has none.
    pub async fn xxl_token(&self, app: &str) -> anyhow::Result<Option<Vec<u8>>> {
        match self.cluster.store.secret(app, TOKEN_SECRET).await? {
            Some(sealed) => Ok(Some(self.secrets.open(app, TOKEN_SECRET, &sealed)?)),
            None => Ok(None),
        }
    }
}
