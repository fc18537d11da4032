//! What the REST API and the console both do, written once: the checks on what a user
//! sends, the permission check, the store call and the node's part. A REST handler parses
//! the request, calls here and renders JSON; a console page parses its form, calls here
//! and renders HTML. Both answer the one [`Error`]: JSON `{"error": …}` with its status in
//! the API (`api::error`), a message beside the form field in the console.

pub mod alarms;
pub mod apply;
pub mod audit;
pub mod backfill;
pub mod cluster;
pub mod error;
pub mod executors;
pub mod export;
pub mod fields;
pub mod jobs;
pub mod plugins;
pub mod queue;
pub mod runs;
pub mod secrets;
pub mod tasks;
pub mod users;
pub mod validate;
pub mod workflows;
pub mod xxl;

pub use error::{Error, Result};
