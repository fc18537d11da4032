//! The scheduler's integration tests: a node in this process on real SQLite and MariaDB,
//! over real HTTP — the REST API, the console, security, the store contract and the fuzz
//! targets. One test binary for the crate: it links once.

mod support;

mod api;
mod console;
mod fuzz;
mod security;
#[macro_use]
mod store_contract;
mod store_limits;
mod store_workflows;
mod store_xxl;
mod workflows;
