//! Calls to XXL-JOB executors, as xxl-job-admin makes them: a JSON body, the app's access
//! token in [`TOKEN_HEADER`], an [`Envelope`] back. They share the node's connection pool
//! and timeout with the calls to Rota's executors ([`ExecutorClient`]).

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::wire::*;
use crate::client::{ClientError, ExecutorClient, answer};

impl ExecutorClient {
    /// `/run`: queue one run on the executor's thread of its job.
    pub async fn xxl_run(
        &self,
        address: &str,
        token: &str,
        trigger: &TriggerParam,
    ) -> Result<Envelope<String>, ClientError> {
        self.xxl_post(address, "run", token, trigger).await
    }

    /// `/kill`: stop the executor's thread of job `job_id` (its running run and those
    /// queued behind it are called back as failed).
    pub async fn xxl_kill(
        &self,
        address: &str,
        token: &str,
        job_id: i64,
    ) -> Result<Envelope<String>, ClientError> {
        self.xxl_post(address, "kill", token, &JobParam { job_id })
            .await
    }

    /// `/log`: a run's log lines from `from_line_num` on.
    pub async fn xxl_log(
        &self,
        address: &str,
        token: &str,
        req: &LogParam,
    ) -> Result<Envelope<LogResult>, ClientError> {
        self.xxl_post(address, "log", token, req).await
    }

    /// `/idleBeat`: success when no run of job `job_id` is running or queued there.
    pub async fn xxl_idle_beat(
        &self,
        address: &str,
        token: &str,
        job_id: i64,
    ) -> Result<Envelope<String>, ClientError> {
        self.xxl_post(address, "idleBeat", token, &JobParam { job_id })
            .await
    }

    async fn xxl_post<Req: Serialize, Resp: DeserializeOwned>(
        &self,
        address: &str,
        path: &str,
        token: &str,
        body: &Req,
    ) -> Result<Envelope<Resp>, ClientError> {
        let url = format!("{}/{path}", address.trim_end_matches('/'));
        let sent = self
            .http
            .post(&url)
            .header(TOKEN_HEADER, token)
            .json(body)
            .send()
            .await;
        let bytes = answer(address, sent).await?;
        serde_json::from_slice(&bytes).map_err(|e| ClientError::BadAnswer {
            address: address.into(),
            reason: format!("not an XXL-JOB answer: {e}"),
        })
    }
}
