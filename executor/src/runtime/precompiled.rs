//! The executor's disk cache of compiled plugins, and the crate's one `unsafe` call
//! (kept alone here so the rest of the crate stays under `deny(unsafe_code)`).
//!
//! `Module::deserialize` (and `Component::deserialize`) trusts its input to be native code wasmtime itself produced:
//! arbitrary bytes could run arbitrary code. So a cache file is sealed when written and
//! checked before it is deserialized: `<sha256>.cwasm` holds an HMAC-SHA256 tag, then the
//! serialized module. The tag covers the engine's fingerprint (wasmtime version, target,
//! settings), the plugin's SHA-256 and the bytes, under a key of this cache
//! ([`CacheKey`]: 32 random bytes in `cache.key`, readable by the executor's user only).
//! A file that was damaged, truncated, copied in from another cache or engine, or
//! written by anyone without the key fails the check: it is deleted and the plugin is
//! compiled again from its verified wasm.

#![allow(unsafe_code)]

use std::fs;
use std::io::{self, Write};
use std::path::Path;

use hmac::{KeyInit, Mac};
use sha2::Sha256;
use wasmtime::component::Component;
use wasmtime::{Engine, Module, Precompiled};

type HmacSha256 = hmac::Hmac<Sha256>;

const TAG_LEN: usize = 32;

/// A compiled plugin: a preview 1 module or a component.
pub(crate) enum Artifact {
    Module(Module),
    Component(Component),
}

impl Artifact {
    fn serialize(&self) -> wasmtime::Result<Vec<u8>> {
        match self {
            Artifact::Module(m) => m.serialize(),
            Artifact::Component(c) => c.serialize(),
        }
    }
}

/// The key that seals one cache directory's files.
#[derive(Clone)]
pub(super) struct CacheKey {
    key: [u8; 32],
    /// The engine's fingerprint: a file compiled by another engine never verifies.
    fingerprint: String,
}

impl std::fmt::Debug for CacheKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CacheKey({}, ***)", self.fingerprint)
    }
}

impl CacheKey {
    /// The key of the cache in `dir`, created (random, mode 0600) on first use.
    pub(super) fn open(dir: &Path, fingerprint: &str) -> io::Result<CacheKey> {
        let path = dir.join("cache.key");
        let key = match fs::read(&path) {
            Ok(bytes) if bytes.len() == 32 => bytes,
            Ok(_) | Err(_) => {
                let fresh: [u8; 32] = rand::random();
                write_atomically(&path, &fresh, true)?;
                // Another process may have won the race: use what is on disk.
                fs::read(&path)?
            }
        };
        let key: [u8; 32] = key
            .try_into()
            .map_err(|_| io::Error::other("the module cache key is not 32 bytes"))?;
        Ok(CacheKey {
            key,
            fingerprint: fingerprint.to_owned(),
        })
    }

    fn tag(&self, sha256: &str, bytes: &[u8]) -> HmacSha256 {
        let mut mac =
            <HmacSha256 as KeyInit>::new_from_slice(&self.key).expect("HMAC takes any key length");
        mac.update(self.fingerprint.as_bytes());
        mac.update(b"\n");
        mac.update(sha256.as_bytes());
        mac.update(b"\n");
        mac.update(bytes);
        mac
    }
}

/// Reads the sealed plugin `path` (the plugin `sha256`) back into an [`Artifact`], a module
/// for `engine` or a component for `component_engine`; an error if the seal does not
/// verify.
///
/// The file is read into memory rather than mapped (`Module::deserialize_file`): a mapped
/// file that is later truncated or rewritten in place would crash the process with
/// `SIGBUS` on the next access, and reading a compiled plugin costs a few milliseconds
/// once per plugin per process.
pub(super) fn load(
    [engine, component_engine]: [&Engine; 2],
    key: &CacheKey,
    sha256: &str,
    path: &Path,
) -> wasmtime::Result<Artifact> {
    let file = fs::read(path)?;
    if file.len() < TAG_LEN {
        wasmtime::bail!("the file is shorter than its seal");
    }
    let (tag, bytes) = file.split_at(TAG_LEN);
    key.tag(sha256, bytes)
        .verify_slice(tag)
        .map_err(|_| wasmtime::format_err!("the file's seal does not verify"))?;
    // SAFETY: `bytes` verified against a tag only this cache's key makes, which
    // `store` computed over what `Module::serialize` returned for this engine (its
    // fingerprint is in the tag) and this plugin. wasmtime checks the header and the
    // engine compatibility again and fails cleanly on a mismatch.
    match Engine::detect_precompiled(bytes) {
        Some(Precompiled::Module) => {
            unsafe { Module::deserialize(engine, bytes) }.map(Artifact::Module)
        }
        Some(Precompiled::Component) => {
            unsafe { Component::deserialize(component_engine, bytes) }.map(Artifact::Component)
        }
        None => wasmtime::bail!("the file is not a compiled module or component"),
    }
}

/// Serializes `artifact` and writes it sealed to `path`, atomically (a reader sees the whole
/// file or none).
pub(super) fn store(
    artifact: &Artifact,
    key: &CacheKey,
    sha256: &str,
    path: &Path,
) -> io::Result<()> {
    let bytes = artifact
        .serialize()
        .map_err(|e| io::Error::other(format!("{e:#}")))?;
    let tag = key.tag(sha256, &bytes).finalize().into_bytes();
    let mut file = Vec::with_capacity(TAG_LEN + bytes.len());
    file.extend_from_slice(&tag);
    file.extend_from_slice(&bytes);
    write_atomically(path, &file, false)
}

fn write_atomically(path: &Path, bytes: &[u8], private: bool) -> io::Result<()> {
    let tmp = path.with_extension(format!(
        "tmp-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or_default()
    ));
    let result = (|| {
        let mut options = fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        if private {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(0o600);
        }
        let _ = private;
        let mut file = options.open(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}
