//! A run on its executor: killing it, reading its log.

use rota_proto::{KillAck, LogPage, LogRequest};

use super::*;

impl Ports {
    pub async fn kill_run(&self, run: &Run) -> Result<KillAck, NodeError> {
        let (app, address) = self.executor_of(run).await?;
        Ok(self.client.kill(&app, address, run.id).await?)
    }

    /// The app and address of the executor a run went to: the app its address is registered
    /// under (whose key it checks), else its job's.
    async fn executor_of<'r>(&self, run: &'r Run) -> Result<(String, &'r str), NodeError> {
        // A pulled or webhook-delivered run (`pull:…`, `webhook:…`) is on no executor.
        let address = run
            .executor
            .as_deref()
            .filter(|e| e.starts_with("http://") || e.starts_with("https://"))
            .ok_or(NodeError::NoExecutor(run.id))?;
        let app = match self
            .cluster
            .store
            .apps_at_address(address)
            .await?
            .as_slice()
        {
            [app] => app.clone(),
            _ => self.cluster.store.get_job(run.job_id).await?.spec.app,
        };
        Ok((app, address))
    }

    pub async fn read_log(
        &self,
        run: &Run,
        from_line: u64,
        max_lines: u32,
    ) -> Result<LogPage, NodeError> {
        let (app, address) = self.executor_of(run).await?;
        let req = LogRequest {
            run_id: run.id,
            from_line,
            max_lines,
        };
        Ok(self.client.log(&app, address, &req).await?)
    }
}
