//! `rota job …`: jobs from the command line (`/api/v1/jobs`). For now `backfill`: a
//! recurring job's fire times in a range, created once each (SPEC §11).

use clap::{Args, Subcommand};
use reqwest::Method;
use serde_json::json;

use super::client::{ApiClient, ServerFlags};
use super::task::{parse_time, print_raw};

#[derive(Args)]
pub struct JobArgs {
    #[command(flatten)]
    server: ServerFlags,
    #[command(subcommand)]
    command: JobCommand,
}

#[derive(Subcommand)]
enum JobCommand {
    /// Create the job's fires for each fire time of its schedule in [--from, --to): a
    /// period it missed. A fire time that already has its fire (an earlier backfill, the
    /// scan's own) is left alone, so running it twice creates nothing more.
    Backfill {
        /// The job (name or id).
        job: String,
        /// The first fire time considered, inclusive (RFC 3339: 2026-12-01T00:00:00Z).
        #[arg(long, value_name = "TIME", value_parser = parse_time)]
        from: String,
        /// The end of the range, exclusive (RFC 3339).
        #[arg(long, value_name = "TIME", value_parser = parse_time)]
        to: String,
        /// Refuse a range holding more fire times than this (1–10,000; default 1,000).
        #[arg(long, value_name = "N")]
        max: Option<i64>,
    },
}

impl JobArgs {
    pub async fn run(self) -> anyhow::Result<()> {
        super::finish(self.run_inner().await)
    }

    async fn run_inner(self) -> anyhow::Result<()> {
        let api = ApiClient::new(&self.server)?;
        match self.command {
            JobCommand::Backfill { job, from, to, max } => {
                let mut body = json!({"from": from, "to": to});
                if let Some(max) = max {
                    body["max"] = json!(max);
                }
                let answer = api
                    .send(
                        Method::POST,
                        api.url(&["jobs", &job, "backfill"]),
                        Some(&body),
                    )
                    .await?;
                if self.server.json {
                    return print_raw(&answer);
                }
                let times = answer.value["fire_times"].as_u64().unwrap_or(0);
                let created = answer.value["created"].as_u64().unwrap_or(0);
                println!(
                    "job {job}: {times} fire time(s) in [{from}, {to}); {created} created, {} already there",
                    times.saturating_sub(created)
                );
                Ok(())
            }
        }
    }
}
