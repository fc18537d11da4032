//! Commands that talk to a running scheduler node over its REST API (SPEC §6), such as
//! `rota task add`. They print what the server answered, in words or (`--json`) as the raw
//! JSON, and exit 1 with the server's `error` message when it refuses.
//!
//! Layout:
//! - [`client`]: the connection flags (`--server`, `--token`, `--json`) and the HTTP client
//!   that turns a non-2xx answer into `"<status>: <server's error>"`.
//! - [`duration`]: `500ms`, `30s`, `30m`, `2h`, `1d` and the `--backoff` shorthand.
//! - [`task`]: `rota task add | get | cancel | list | retry`.
//! - [`job`]: `rota job backfill`.
//! - [`queue`]: `rota queue pull | ack | nack | extend`, a consumer of a `pull` job.
//! - [`workflow`]: `rota workflow apply | start | show`.
//! - [`import`]: `rota import xxl-job`, an XXL-JOB admin's apps and jobs.
//! - [`apply`]: `rota export` and `rota apply`, jobs as code.
//!
//! And one that talks to no node: [`config`], `rota config check | show | example`.

mod apply;
mod client;
mod config;
mod duration;
mod import;
mod job;
mod queue;
mod task;
mod workflow;

pub use apply::{ApplyArgs, ExportArgs};
pub use config::ConfigArgs;
pub use import::ImportArgs;
pub use job::JobArgs;
pub use queue::QueueArgs;
pub use task::TaskArgs;
pub use workflow::WorkflowArgs;

/// Runs a client command to its end: on failure prints `error: …` (the whole chain on one
/// line) and exits with status 1, the way every client command reports an error.
fn finish(result: anyhow::Result<()>) -> anyhow::Result<()> {
    if let Err(e) = result {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
    Ok(())
}

/// A flag's value as JSON (`--input`, `--output`).
fn json_value(s: &str) -> Result<serde_json::Value, String> {
    serde_json::from_str(s).map_err(|e| {
        format!("not JSON ({e}); e.g. '{{\"order\": 42}}', or '\"text\"' for a string")
    })
}
