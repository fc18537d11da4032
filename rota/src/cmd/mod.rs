//! Commands that talk to a running scheduler node over its REST API (SPEC §6), such as
//! `rota task add`. They print what the server answered, in words or (`--json`) as the raw
//! JSON, and exit 1 with the server's `error` message when it refuses.
//!
//! Layout:
//! - [`client`]: the connection flags (`--server`, `--token`, `--json`) and the HTTP client
//!   that turns a non-2xx answer into `"<status>: <server's error>"`.
//! - [`duration`]: `500ms`, `30s`, `30m`, `2h`, `1d` and the `--backoff` shorthand.
//! - [`task`]: `rota task add | get | cancel | list | retry`.
//! - [`queue`]: `rota queue pull | ack | nack | extend`, a consumer of a `pull` job.

mod client;
mod duration;
mod queue;
mod task;

pub use queue::QueueArgs;
pub use task::TaskArgs;

/// Runs a client command to its end: on failure prints `error: …` (the whole chain on one
/// line) and exits with status 1, the way every client command reports an error.
fn finish(result: anyhow::Result<()>) -> anyhow::Result<()> {
    if let Err(e) = result {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
    Ok(())
}
