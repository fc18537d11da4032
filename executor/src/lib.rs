//! Rota's executor node: runs plugins as sandboxed WASI preview 1 modules in wasmtime.
//!
//! This crate will grow into the whole executor: the sandboxed runtime (one `Engine` per
//! process, modules compiled once and cached by SHA-256, a fresh `Store` per run with
//! memory and time limits), the bounded run queue with the block strategies, per-run
//! logs, and batched callbacks to the scheduler, speaking the protocol defined in
//! `rota-proto`. For now it owns plugin validation, which the scheduler also uses when a
//! plugin is uploaded.
//!
//! # Layout
//!
//! - [`module`]: plugin validation: is this `.wasm`/`.wat` upload a WASI preview 1
//!   command module Rota can run ([`validate_plugin`]), and what is its binary form and
//!   SHA-256.

pub mod module;

pub use module::{PluginError, ValidPlugin, validate_plugin};
