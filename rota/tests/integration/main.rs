//! Rota's system tests: the built `rota` binary as real processes (servers, executors,
//! MariaDB, Galera, network namespaces), one module per promise. One test binary for the
//! crate: it links once, and its tests share the harness's threads.

#[path = "../../../executor/tests/integration/common/mod.rs"]
mod fixtures;
mod support;

mod alarms;
mod as_code;
mod cli;
mod clock;
mod cluster;
mod components;
mod config_file;
mod crash;
mod db_restart;
mod delivery;
mod egress;
mod examples;
mod executors;
mod galera;
mod limits;
mod logs;
mod packaging;
mod partition;
mod pipeline;
mod plugin_host;
mod promises;
mod resources;
mod schedules;
mod sign_in;
mod soak;
mod standalone;
mod tls;
mod traces;
mod webhooks;
mod workflow_chaos;
mod workflows;
mod xxl;
mod xxl_import;
