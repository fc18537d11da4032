//! XXL-JOB executors as a delivery (SPEC §13): a job with `{"kind": "xxl", "handler": …}`
//! runs on executors built on `xxl-job-core` (tested: 2.5.0 and 3.3.2), unchanged. Rota
//! takes xxl-job-admin's place on both sides of its protocol:
//!
//! - [`admin`]: the admin API those executors call — `registry`, `registryRemove`,
//!   `callback` under the configured context path (`--xxl-context-path`, default
//!   `/xxl-job-admin`), each checked against the app's access token;
//! - [`client`]: the calls to them — `/run` (the Rota run id as `logId`), `/kill`, `/log`,
//!   `/idleBeat` — made by dispatch (`pipeline/dispatch/xxl.rs`) and by the run pages;
//! - [`wire`]: the JSON both speak.
//!
//! An app's access token is its secret [`TOKEN_SECRET`] (`rota secret set --app A
//! xxl-access-token`), the executors' `xxl.job.accessToken`: an app without one takes no
//! XXL-JOB executor. Routes, sharding broadcast, block strategies, timeouts, retries and
//! kills are Rota's (`docs/xxl-job.md` maps each).

pub mod admin;
pub mod client;
pub mod wire;

/// The app secret holding its XXL-JOB access token.
pub const TOKEN_SECRET: &str = "xxl-access-token";
