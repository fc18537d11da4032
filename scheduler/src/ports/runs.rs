//! A run on its executor: killing it, reading its log — on Rota's executors and on
//! XXL-JOB's (`xxl/`), each in its own protocol.

use rota_proto::{KillAck, LogPage, LogRequest};

use super::*;
use crate::client::ClientError;
use crate::xxl::wire::{LogParam, SUCCESS};

impl Ports {
    pub async fn kill_run(&self, run: &Run) -> Result<KillAck, NodeError> {
        let (app, address) = self.executor_of(run).await?;
        if self.executors.protocol(&app, address) == ExecutorProtocol::Xxl {
            // XXL-JOB stops the job's thread: this run, and any of the job queued behind it
            // there (each called back as killed).
            let token = self.xxl_token_for(&app, address).await?;
            let answer = self.client.xxl_kill(address, &token, run.job_id).await?;
            return Ok(KillAck {
                killed: answer.code == SUCCESS,
                message: answer.msg.unwrap_or_else(|| {
                    format!("the XXL-JOB executor stopped job {}'s thread", run.job_id)
                }),
            });
        }
        Ok(self.client.kill(&app, address, run.id).await?)
    }

    /// `app`'s XXL-JOB token, for a call to its executor at `address`.
    async fn xxl_token_for(&self, app: &str, address: &str) -> Result<String, NodeError> {
        match self.xxl_token(app).await {
            Ok(Some(token)) => Ok(String::from_utf8_lossy(&token).into_owned()),
            Ok(None) => Err(NodeError::Client(ClientError::Refused {
                address: address.into(),
                status: 401,
                body: format!("app `{app}` has no XXL-JOB access token to call it with"),
            })),
            Err(e) => Err(NodeError::Client(ClientError::Refused {
                address: address.into(),
                status: 500,
                body: format!("{e:#}"),
            })),
        }
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
        if self.executors.protocol(&app, address) == ExecutorProtocol::Xxl {
            let token = self.xxl_token_for(&app, address).await?;
            let req = LogParam {
                log_date_tim: run.scheduled_at,
                log_id: run.id,
                from_line_num: i64::try_from(from_line.max(1)).unwrap_or(i64::MAX),
            };
            let answer = self.client.xxl_log(address, &token, &req).await?;
            return Ok(xxl_page(answer.payload(), run, from_line, max_lines));
        }
        let req = LogRequest {
            run_id: run.id,
            from_line,
            max_lines,
        };
        Ok(self.client.log(&app, address, &req).await?)
    }
}

/// An XXL-JOB executor's `/log` answer as a page: at most `max_lines` of the lines it gave
/// (it gives all from `from_line` on); complete when the run is over and nothing is left.
fn xxl_page(
    answer: Option<crate::xxl::wire::LogResult>,
    run: &Run,
    from_line: u64,
    max_lines: u32,
) -> LogPage {
    let content = answer.and_then(|a| a.log_content).unwrap_or_default();
    let lines: Vec<String> = content
        .lines()
        .take(max_lines as usize)
        .map(str::to_owned)
        .collect();
    let from_line = from_line.max(1);
    LogPage {
        complete: run.status.is_final() && lines.is_empty(),
        next_line: from_line + lines.len() as u64,
        lines,
    }
}
