//! Loading a compiled plugin from the executor's own disk cache: the crate's one `unsafe`
//! call, kept alone here so the rest of the crate stays under `deny(unsafe_code)`.
#![allow(unsafe_code)]

use std::path::Path;

use wasmtime::{Engine, Module};

/// Reads `path`, a module this executor compiled and serialized, back into a [`Module`].
///
/// The file is read into memory rather than mapped (`Module::deserialize_file`): a
/// mapped file that is later truncated or rewritten in place would crash the process
/// with `SIGBUS` on the next access, and reading a compiled plugin costs a few
/// milliseconds once per plugin per process.
pub(super) fn load(engine: &Engine, path: &Path) -> wasmtime::Result<Module> {
    let bytes = std::fs::read(path)?;
    // SAFETY: `Module::deserialize` trusts its input to be a module serialized by a
    // compatible wasmtime; arbitrary bytes could run arbitrary native code. The only
    // files passed here are our own cache: `Runtime::compile` writes them from
    // `Module::serialize` into `<module_cache_dir>/<engine fingerprint>/<sha256>.cwasm`,
    // where the fingerprint is `Engine::precompile_compatibility_hash` (wasmtime version,
    // target, settings) and the file name is the SHA-256 the wasm was verified against
    // before compiling, and writes them atomically (temp file, fsync, rename) so a crash
    // never leaves a partial file under that name. wasmtime also checks the header and
    // the engine compatibility itself and fails cleanly on a mismatch. The cache
    // directory lives under the executor's data dir, which only the executor writes.
    unsafe { Module::deserialize(engine, &bytes) }
}
