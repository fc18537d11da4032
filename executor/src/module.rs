//! Plugin validation: is this upload a plugin Rota can run?
//!
//! [`validate_plugin`] is the one gate every plugin passes (the scheduler calls it on
//! upload, so a bad module is a 422 naming the problem rather than a failed run hours
//! later). It turns `.wat` text into the binary module that is stored and hashed, then
//! checks the plugin contract of `SPEC.md` §5. A component (the header's layer is 1) is
//! checked by [`validate_component`]; a core module must be:
//!
//! 1. valid: it compiles with the process's [`Engine`] (a full validation, and the same
//!    compiler settings the executors use);
//! 2. imports only functions: WASI preview 1 functions with the signatures wasmtime-wasi's
//!    p1 linker gives them, and Rota's own optional `rota` functions
//!    ([`crate::runtime::host`]) with theirs; any other import is named in the error;
//! 3. exports `_start: () -> ()` (a WASI *command*), and a `memory` when it imports any
//!    function (every WASI or `rota` call traps without one).
//!
//! Compiling is CPU-heavy (milliseconds to seconds for a large module): callers on an
//! async runtime run this in `spawn_blocking`.

use std::borrow::Cow;

use sha2::{Digest, Sha256};
use wasmtime::component::Component;
use wasmtime::{Engine, Extern, ExternType, FuncType, Linker, Module, Store, ValType};
use wasmtime_wasi::WasiCtxBuilder;
use wasmtime_wasi::p1::{self, WasiP1Ctx};

use crate::runtime::Artifact;
use crate::runtime::component::{self, World};

/// The only import module a plugin may use.
pub const WASI_P1_MODULE: &str = "wasi_snapshot_preview1";

/// Longest parser or compiler reason kept in an error; the rest is cut, so a hostile
/// module cannot make an error (and the 422 carrying it) arbitrarily large.
const REASON_MAX: usize = 500;
/// Longest wat parse error kept: its first line is the message, the rest a source excerpt.
const WAT_REASON_MAX: usize = 200;
/// Longest import name or type kept in an error.
const NAME_MAX: usize = 100;

const WASM_MAGIC: &[u8; 4] = b"\0asm";

/// A plugin that passed [`validate_plugin`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidPlugin {
    /// The binary module (`.wat` text is compiled to binary first): what is stored,
    /// served to executors and hashed.
    pub wasm: Vec<u8>,
    /// Lower-case hex SHA-256 of [`ValidPlugin::wasm`]: the plugin's identity.
    pub sha256: String,
    pub kind: PluginKind,
}

/// What kind of plugin an upload is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PluginKind {
    /// A WASI preview 1 command module.
    Module,
    /// A component written for `world`, importing `imports` (their full names).
    Component { world: World, imports: Vec<String> },
}

/// Why an upload is not a plugin Rota can run. Every message names the problem and, where
/// there is one, the fix; they are shown to users as they are.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PluginError {
    #[error("plugin is empty: upload a `.wasm` binary or `.wat` text module")]
    Empty,
    #[error(
        "plugin is neither a WebAssembly binary (it does not start with `\\0asm`) nor valid WebAssembly text: {reason}"
    )]
    NotWasm { reason: String },
    #[error(
        "plugin is a component that imports `{name}`, which Rota does not provide; components may import WASI 0.2's `wasi:cli`, `wasi:clocks`, `wasi:filesystem`, `wasi:io`, `wasi:random` and `wasi:sockets` interfaces, `wasi:http/outgoing-handler` and `wasi:http/types` (0.2), and `rota:plugin` (0.1, 0.2, 0.3: `plugins/wit`)"
    )]
    ComponentImport { name: String },
    #[error(
        "plugin is a component that exports neither `run` (the `rota:plugin/handler` world in `plugins/wit`) nor `wasi:cli/run` (a command): build it for one of the two"
    )]
    ComponentWorld,
    #[error(
        "plugin is a component whose imports or exports do not match what Rota provides: {reason}"
    )]
    ComponentLink { reason: String },
    #[error("plugin is not a valid WebAssembly module: {reason}")]
    Invalid { reason: String },
    #[error(
        "plugin imports `{module}::{name}`, which Rota does not provide; plugins may import only WASI preview 1 (`{WASI_P1_MODULE}`) functions and Rota's own (`rota`)"
    )]
    ForeignImport { module: String, name: String },
    #[error(
        "plugin imports `rota::{name}`, which Rota does not provide; the `rota` functions are {}",
        crate::runtime::host::IMPORTS.iter().map(|(n, _)| format!("`{n}`")).collect::<Vec<_>>().join(", ")
    )]
    UnknownRotaImport { name: String },
    #[error("plugin imports `rota::{name}` as `{found}`, but Rota defines it as `{expected}`")]
    RotaImportSignature {
        name: String,
        found: String,
        expected: String,
    },
    #[error(
        "plugin imports `{WASI_P1_MODULE}::{name}`, which WASI preview 1 does not define; plugins may import only WASI preview 1 functions"
    )]
    UnknownWasiImport { name: String },
    #[error(
        "plugin imports a {kind} (`{module}::{name}`), which Rota does not provide; a plugin may import only functions and must define its own memory and tables"
    )]
    NonFunctionImport {
        kind: &'static str,
        module: String,
        name: String,
    },
    #[error(
        "plugin imports `{WASI_P1_MODULE}::{name}` as `{found}`, but WASI preview 1 defines it as `{expected}`"
    )]
    ImportSignature {
        name: String,
        found: String,
        expected: String,
    },
    #[error("plugin has no `_start` export: build it as a WASI command module")]
    NoStart,
    #[error(
        "plugin's `_start` export must be a function taking no parameters and returning nothing (a WASI command's entry point), not {found}"
    )]
    BadStart { found: String },
    #[error(
        "plugin imports WASI or `rota` functions but exports no memory named `memory`, which they need to exchange data with it"
    )]
    NoMemoryExport,
}

/// Checks that `bytes` (a `.wasm` binary or `.wat` text) is a plugin Rota can run (a WASI
/// preview 1 command module, or a component of one of the two worlds), and returns its
/// binary form, hash and kind.
///
/// Compiles the plugin with `engine`, so it is CPU-heavy: run it in `spawn_blocking`.
pub fn validate_plugin(engine: &Engine, bytes: &[u8]) -> Result<ValidPlugin, PluginError> {
    validate_compiled(engine, engine, bytes).map(|(valid, _)| valid)
}

/// [`validate_plugin`], compiling a component with `component_engine`, and keeping what it
/// compiled (for a runtime with the same engines to adopt rather than compile again:
/// `rota plugin run`).
pub(crate) fn validate_compiled(
    engine: &Engine,
    component_engine: &Engine,
    bytes: &[u8],
) -> Result<(ValidPlugin, Artifact), PluginError> {
    if bytes.trim_ascii().is_empty() {
        return Err(PluginError::Empty);
    }
    let wasm = to_binary(bytes)?;
    let (kind, artifact) = if crate::runtime::is_component(&wasm) {
        let (kind, component) = validate_component(component_engine, &wasm)?;
        (kind, Artifact::Component(component))
    } else {
        let module = Module::new(engine, &wasm).map_err(|e| PluginError::Invalid {
            reason: bounded(&format!("{e:#}"), REASON_MAX),
        })?;
        let imports_wasi = check_imports(engine, &module)?;
        check_exports(&module, imports_wasi)?;
        (PluginKind::Module, Artifact::Module(module))
    };
    let sha256 = hex::encode(Sha256::digest(&wasm));
    let valid = ValidPlugin {
        wasm: wasm.into_owned(),
        sha256,
        kind,
    };
    Ok((valid, artifact))
}

/// Checks a component: it compiles, imports only what Rota provides (by name, then by
/// type against the linker the executors use), and is written for one of the two worlds.
fn validate_component(
    engine: &Engine,
    wasm: &[u8],
) -> Result<(PluginKind, Component), PluginError> {
    let component = Component::new(engine, wasm).map_err(|e| PluginError::Invalid {
        reason: bounded(&format!("{e:#}"), REASON_MAX),
    })?;
    let imports = component::imports_of(engine, &component);
    if let Some(name) = imports.iter().find(|name| !component::is_provided(name)) {
        return Err(PluginError::ComponentImport {
            name: bounded(name, NAME_MAX),
        });
    }
    let world = component::world_of(engine, &component).ok_or(PluginError::ComponentWorld)?;
    component::check_links(engine, &component, world).map_err(|e| PluginError::ComponentLink {
        reason: bounded(&format!("{e:#}"), REASON_MAX),
    })?;
    Ok((PluginKind::Component { world, imports }, component))
}

/// The binary module: `bytes` itself if it has the wasm magic, else `bytes` parsed as wat.
fn to_binary(bytes: &[u8]) -> Result<Cow<'_, [u8]>, PluginError> {
    if bytes.starts_with(WASM_MAGIC) {
        return Ok(Cow::Borrowed(bytes));
    }
    let text = std::str::from_utf8(bytes).map_err(|_| PluginError::NotWasm {
        reason: "it is not UTF-8 text either".into(),
    })?;
    wat::parse_str(text)
        .map(Cow::Owned)
        .map_err(|e| PluginError::NotWasm {
            reason: wat_reason(&e.to_string()),
        })
}

/// The first line of a wat error (its message) with the line and column from the second
/// (`--> <anon>:3:7`), without the source excerpt that follows.
fn wat_reason(error: &str) -> String {
    let mut lines = error.lines();
    let message = lines.next().unwrap_or("unknown parse error").trim();
    let location = lines
        .next()
        .and_then(|l| l.trim().strip_prefix("--> "))
        .and_then(|l| {
            let mut parts = l.rsplitn(3, ':');
            let column = parts.next()?.parse::<u32>().ok()?;
            let line = parts.next()?.parse::<u32>().ok()?;
            Some(format!(" (line {line}, column {column})"))
        })
        .unwrap_or_default();
    bounded(&format!("{message}{location}"), WAT_REASON_MAX)
}

/// Rejects any import but a WASI preview 1 or `rota` function with its signature. Returns
/// whether there is one (and so the module needs to export its memory).
fn check_imports(engine: &Engine, module: &Module) -> Result<bool, PluginError> {
    let mut needs_memory = false;
    let mut wasi: Option<WasiFunctions> = None;
    for import in module.imports() {
        let (module_name, name) = (import.module(), import.name());
        let ExternType::Func(found) = import.ty() else {
            return Err(PluginError::NonFunctionImport {
                kind: extern_kind(&import.ty()),
                module: bounded(module_name, NAME_MAX),
                name: bounded(name, NAME_MAX),
            });
        };
        if module_name == crate::runtime::host::MODULE {
            check_rota_import(engine, name, &found)?;
            needs_memory = true;
            continue;
        }
        if module_name != WASI_P1_MODULE {
            return Err(PluginError::ForeignImport {
                module: bounded(module_name, NAME_MAX),
                name: bounded(name, NAME_MAX),
            });
        }
        let wasi = wasi.get_or_insert_with(|| WasiFunctions::new(engine));
        let Some(expected) = wasi.get(name) else {
            return Err(PluginError::UnknownWasiImport {
                name: bounded(name, NAME_MAX),
            });
        };
        // The rule instantiation applies: what the host provides must be a subtype of
        // what the module declares.
        if !expected.matches(&found) {
            return Err(PluginError::ImportSignature {
                name: bounded(name, NAME_MAX),
                found: signature(&found),
                expected: signature(&expected),
            });
        }
    }
    Ok(needs_memory || wasi.is_some())
}

/// A `rota` import must be one of [`crate::runtime::host::IMPORTS`], with its signature
/// (`i32` parameters, one `i32` result).
fn check_rota_import(engine: &Engine, name: &str, found: &FuncType) -> Result<(), PluginError> {
    let Some(&(_, params)) = crate::runtime::host::IMPORTS
        .iter()
        .find(|(n, _)| *n == name)
    else {
        return Err(PluginError::UnknownRotaImport {
            name: bounded(name, NAME_MAX),
        });
    };
    let expected = FuncType::new(
        engine,
        std::iter::repeat_n(ValType::I32, params),
        [ValType::I32],
    );
    if !expected.matches(found) {
        return Err(PluginError::RotaImportSignature {
            name: name.to_owned(),
            found: signature(found),
            expected: signature(&expected),
        });
    }
    Ok(())
}

/// Requires the WASI command entry point, and a memory for WASI to work in.
fn check_exports(module: &Module, imports_wasi: bool) -> Result<(), PluginError> {
    match module.get_export("_start") {
        None => return Err(PluginError::NoStart),
        Some(ExternType::Func(ty)) if ty.params().len() == 0 && ty.results().len() == 0 => {}
        Some(ExternType::Func(ty)) => {
            return Err(PluginError::BadStart {
                found: format!("a function of type `{}`", signature(&ty)),
            });
        }
        Some(other) => {
            return Err(PluginError::BadStart {
                found: format!("a {}", extern_kind(&other)),
            });
        }
    }
    if imports_wasi && !matches!(module.get_export("memory"), Some(ExternType::Memory(_))) {
        return Err(PluginError::NoMemoryExport);
    }
    Ok(())
}

/// The WASI preview 1 functions exactly as the executor links them.
///
/// Imports are looked up in wasmtime-wasi's own p1 linker rather than in a hard-coded
/// list of names and signatures, so what validation accepts is by construction what
/// will link at run time, on any wasmtime version. Reading a definition's type needs a
/// `Store`; an empty one is built for that (and only when the module imports WASI at
/// all), which costs microseconds next to the compilation above.
struct WasiFunctions {
    linker: Linker<WasiP1Ctx>,
    store: Store<WasiP1Ctx>,
}

impl WasiFunctions {
    fn new(engine: &Engine) -> Self {
        let mut linker = Linker::new(engine);
        p1::add_to_linker_sync(&mut linker, |cx| cx)
            .expect("a fresh linker takes every WASI preview 1 function");
        let store = Store::new(engine, WasiCtxBuilder::new().build_p1());
        Self { linker, store }
    }

    /// The type of the WASI preview 1 function `name`, if WASI defines it.
    fn get(&mut self, name: &str) -> Option<FuncType> {
        match self.linker.get(&mut self.store, WASI_P1_MODULE, name) {
            Ok(Extern::Func(func)) => Some(func.ty(&self.store)),
            _ => None,
        }
    }
}

/// A function type in wat syntax, `(func (param i32) (result i32))`.
fn signature(ty: &FuncType) -> String {
    let mut text = String::from("(func");
    for (keyword, types) in [
        ("param", ty.params().collect::<Vec<_>>()),
        ("result", ty.results().collect()),
    ] {
        if !types.is_empty() {
            text.push_str(" (");
            text.push_str(keyword);
            for t in types {
                text.push(' ');
                text.push_str(&t.to_string());
            }
            text.push(')');
        }
    }
    text.push(')');
    bounded(&text, NAME_MAX * 2)
}

fn extern_kind(ty: &ExternType) -> &'static str {
    match ty {
        ExternType::Func(_) => "function",
        ExternType::Memory(_) => "memory",
        ExternType::Table(_) => "table",
        ExternType::Global(_) => "global",
        ExternType::Tag(_) => "tag",
    }
}

/// `text` cut to at most `max` characters (on a char boundary), marked with `…` when cut.
fn bounded(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal WASI command: writes "hi\n" to stdout.
    const HELLO: &str = r#"
        (module
          (import "wasi_snapshot_preview1" "fd_write"
            (func $fd_write (param i32 i32 i32 i32) (result i32)))
          (memory (export "memory") 1)
          (data (i32.const 16) "hi\n")
          (func (export "_start")
            (i32.store (i32.const 0) (i32.const 16))
            (i32.store (i32.const 4) (i32.const 3))
            (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))
    "#;

    fn validate(bytes: impl AsRef<[u8]>) -> Result<ValidPlugin, PluginError> {
        validate_plugin(&Engine::default(), bytes.as_ref())
    }

    fn sha256_hex(bytes: &[u8]) -> String {
        hex::encode(Sha256::digest(bytes))
    }

    #[test]
    fn wat_is_compiled_and_the_binary_hashed() {
        let plugin = validate(HELLO).unwrap();
        let binary = wat::parse_str(HELLO).unwrap();
        assert!(plugin.wasm.starts_with(WASM_MAGIC));
        assert_eq!(plugin.wasm, binary);
        assert_eq!(plugin.sha256, sha256_hex(&binary));
        assert_eq!(plugin.sha256.len(), 64);
        assert_eq!(plugin.sha256, plugin.sha256.to_lowercase());
    }

    #[test]
    fn binary_is_kept_as_is() {
        let binary = wat::parse_str(HELLO).unwrap();
        let plugin = validate(&binary).unwrap();
        assert_eq!(plugin.wasm, binary);
        assert_eq!(plugin.sha256, sha256_hex(&binary));
        // Text and binary of the same module are the same plugin.
        assert_eq!(plugin, validate(HELLO).unwrap());
    }

    #[test]
    fn a_command_without_imports_needs_no_memory() {
        validate(r#"(module (func (export "_start")))"#).unwrap();
    }

    #[test]
    fn missing_start_is_named() {
        let err =
            validate(r#"(module (memory (export "memory") 1) (func (export "run")))"#).unwrap_err();
        assert_eq!(err, PluginError::NoStart);
        assert_eq!(
            err.to_string(),
            "plugin has no `_start` export: build it as a WASI command module"
        );
    }

    #[test]
    fn start_must_be_a_nullary_function() {
        let err = validate(r#"(module (func (export "_start") (param i32)))"#).unwrap_err();
        assert!(matches!(err, PluginError::BadStart { .. }), "{err}");
        assert!(
            err.to_string()
                .ends_with("not a function of type `(func (param i32))`"),
            "{err}"
        );
        let err = validate(r#"(module (memory (export "_start") 1))"#).unwrap_err();
        assert!(err.to_string().ends_with("not a memory"), "{err}");
    }

    #[test]
    fn foreign_import_module_is_named() {
        let err = validate(
            r#"(module (import "env" "foo" (func)) (memory (export "memory") 1) (func (export "_start")))"#,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "plugin imports `env::foo`, which Rota does not provide; plugins may import only \
             WASI preview 1 (`wasi_snapshot_preview1`) functions and Rota's own (`rota`)"
        );
    }

    #[test]
    fn rota_imports_are_checked_by_name_and_signature() {
        let ok = validate(
            r#"(module (import "rota" "kv_get" (func (param i32 i32) (result i32)))
                (memory (export "memory") 1) (func (export "_start")))"#,
        );
        assert!(ok.is_ok(), "{ok:?}");
        let err = validate(
            r#"(module (import "rota" "launch_missiles" (func (param i32 i32) (result i32)))
                (memory (export "memory") 1) (func (export "_start")))"#,
        )
        .unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with("plugin imports `rota::launch_missiles`, which Rota does not provide; the `rota` functions are `http_request`"),
            "{text}"
        );
        let err = validate(
            r#"(module (import "rota" "kv_set" (func (param i32 i32) (result i32)))
                (memory (export "memory") 1) (func (export "_start")))"#,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "plugin imports `rota::kv_set` as `(func (param i32 i32) (result i32))`, but Rota \
             defines it as `(func (param i32 i32 i32 i32) (result i32))`"
        );
        let err = validate(
            r#"(module (import "rota" "kv_get" (func (param i32 i32) (result i32)))
                (func (export "_start")))"#,
        )
        .unwrap_err();
        assert_eq!(err, PluginError::NoMemoryExport);
    }

    #[test]
    fn unknown_wasi_function_is_named() {
        let err = validate(
            r#"(module (import "wasi_snapshot_preview1" "fd_frobnicate" (func))
                       (memory (export "memory") 1) (func (export "_start")))"#,
        )
        .unwrap_err();
        assert_eq!(
            err,
            PluginError::UnknownWasiImport {
                name: "fd_frobnicate".into()
            }
        );
        assert!(
            err.to_string()
                .contains("`wasi_snapshot_preview1::fd_frobnicate`")
        );
    }

    #[test]
    fn wasi_function_with_wrong_signature_is_refused() {
        let err = validate(
            r#"(module (import "wasi_snapshot_preview1" "fd_write" (func (param i32) (result i32)))
                       (memory (export "memory") 1) (func (export "_start")))"#,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "plugin imports `wasi_snapshot_preview1::fd_write` as `(func (param i32) (result i32))`, \
             but WASI preview 1 defines it as `(func (param i32 i32 i32 i32) (result i32))`"
        );
    }

    #[test]
    fn memory_and_table_imports_are_refused() {
        let err =
            validate(r#"(module (import "env" "memory" (memory 1)) (func (export "_start")))"#)
                .unwrap_err();
        assert_eq!(
            err,
            PluginError::NonFunctionImport {
                kind: "memory",
                module: "env".into(),
                name: "memory".into()
            }
        );
        let err = validate(
            r#"(module (import "wasi_snapshot_preview1" "t" (table 1 funcref)) (func (export "_start")))"#,
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("plugin imports a table (`wasi_snapshot_preview1::t`)"),
            "{err}"
        );
    }

    #[test]
    fn wasi_imports_need_an_exported_memory() {
        let err = validate(
            r#"(module (import "wasi_snapshot_preview1" "proc_exit" (func (param i32)))
                       (func (export "_start") (call 0 (i32.const 0))))"#,
        )
        .unwrap_err();
        assert_eq!(err, PluginError::NoMemoryExport);
    }

    #[test]
    fn garbage_is_refused() {
        let err = validate(b"\xff\xfe\x00garbage").unwrap_err();
        assert!(matches!(err, PluginError::NotWasm { .. }), "{err}");
        assert!(err.to_string().contains("not UTF-8"), "{err}");

        let err = validate("hello world").unwrap_err();
        let PluginError::NotWasm { reason } = &err else {
            panic!("{err}")
        };
        assert!(!reason.contains('\n'), "{reason}");
        assert!(reason.contains("line 1, column 1"), "{reason}");
    }

    #[test]
    fn invalid_binary_is_refused_with_the_reason() {
        let mut bytes = wat::parse_str(HELLO).unwrap();
        bytes.truncate(bytes.len() - 3);
        let err = validate(&bytes).unwrap_err();
        let PluginError::Invalid { reason } = &err else {
            panic!("{err}")
        };
        assert!(!reason.is_empty() && reason.chars().count() <= REASON_MAX + 1);

        let err = validate(b"\0asm\x01\0\0\0\x7f").unwrap_err();
        assert!(matches!(err, PluginError::Invalid { .. }), "{err}");
    }

    #[test]
    fn invalid_wat_module_is_refused() {
        // Parses as text but does not type-check.
        let err = validate(r#"(module (func (export "_start") (result i32)))"#).unwrap_err();
        assert!(
            matches!(
                err,
                PluginError::Invalid { .. } | PluginError::NotWasm { .. }
            ),
            "{err}"
        );
    }

    #[test]
    fn empty_is_refused() {
        assert_eq!(validate(b""), Err(PluginError::Empty));
        assert_eq!(validate(" \n\t"), Err(PluginError::Empty));
    }

    #[test]
    fn a_component_without_a_world_is_refused() {
        assert_eq!(validate("(component)"), Err(PluginError::ComponentWorld));
        let binary = wat::parse_str("(component)").unwrap();
        assert_eq!(validate(&binary), Err(PluginError::ComponentWorld));
    }

    #[test]
    fn a_component_importing_what_rota_lacks_is_refused_by_name() {
        let wat = r#"(component
            (import "wasi:keyvalue/store@0.2.0-draft" (instance))
        )"#;
        let err = validate(wat).unwrap_err();
        assert_eq!(
            err,
            PluginError::ComponentImport {
                name: "wasi:keyvalue/store@0.2.0-draft".into()
            }
        );
        assert!(
            err.to_string()
                .contains("`wasi:keyvalue/store@0.2.0-draft`")
        );
    }

    #[test]
    fn reasons_are_bounded() {
        assert_eq!(bounded("abc", 5), "abc");
        assert_eq!(bounded("abcdef", 3), "abc…");
        assert_eq!(bounded("ééé", 2), "éé…");
        let long = format!("(module {})", "x".repeat(10_000));
        let PluginError::NotWasm { reason } = validate(long).unwrap_err() else {
            panic!()
        };
        assert!(reason.chars().count() <= WAT_REASON_MAX + 1, "{reason}");
    }

    /// What a Rust `wasm32-wasip1` binary typically imports.
    #[test]
    fn common_wasi_imports_are_accepted() {
        validate(
            r#"(module
                 (import "wasi_snapshot_preview1" "fd_write" (func (param i32 i32 i32 i32) (result i32)))
                 (import "wasi_snapshot_preview1" "fd_read" (func (param i32 i32 i32 i32) (result i32)))
                 (import "wasi_snapshot_preview1" "args_get" (func (param i32 i32) (result i32)))
                 (import "wasi_snapshot_preview1" "args_sizes_get" (func (param i32 i32) (result i32)))
                 (import "wasi_snapshot_preview1" "environ_get" (func (param i32 i32) (result i32)))
                 (import "wasi_snapshot_preview1" "environ_sizes_get" (func (param i32 i32) (result i32)))
                 (import "wasi_snapshot_preview1" "clock_time_get" (func (param i32 i64 i32) (result i32)))
                 (import "wasi_snapshot_preview1" "random_get" (func (param i32 i32) (result i32)))
                 (import "wasi_snapshot_preview1" "sched_yield" (func (result i32)))
                 (import "wasi_snapshot_preview1" "proc_exit" (func (param i32)))
                 (memory (export "memory") 1)
                 (func (export "_start")))"#,
        )
        .unwrap();
    }

    /// The production engine (pooling allocator, epoch interruption) validates the same.
    #[test]
    fn works_with_a_pooling_engine() {
        let mut pool = wasmtime::PoolingAllocationConfig::default();
        pool.total_core_instances(4)
            .total_memories(4)
            .total_tables(4)
            .max_memory_size(64 << 20);
        let mut config = wasmtime::Config::new();
        config
            .allocation_strategy(wasmtime::InstanceAllocationStrategy::Pooling(pool))
            .epoch_interruption(true);
        let engine = Engine::new(&config).unwrap();
        let plugin = validate_plugin(&engine, HELLO.as_bytes()).unwrap();
        assert_eq!(plugin, validate(HELLO).unwrap());
        assert_eq!(
            validate_plugin(&engine, br#"(module (func (export "run")))"#),
            Err(PluginError::NoStart)
        );
    }
}
