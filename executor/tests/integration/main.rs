//! The executor's integration tests: real wasmtime, `.wat` fixtures and real HTTP on
//! 127.0.0.1. One test binary for the crate: it links once.

mod common;

mod components;
mod host;
mod node;
mod runtime;
