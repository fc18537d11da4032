//! Components (SPEC §5, "Components"): plugins built for WASI preview 2, beside the
//! preview 1 modules of [`super`].
//!
//! Two worlds are accepted ([`World`]), told apart by what the component exports:
//!
//! - **command** (`wasi:cli/run`): the preview 1 contract carried over — stdin is the
//!   run's input, argv `[plugin name] + params`, the `ROTA_*` environment, stdout/stderr
//!   the run's log, and `run` returning `err` (or `exit(n)`, n ≠ 0) fails the run;
//! - **handler** (`rota:plugin/handler`, `plugins/wit/rota-plugin.wit`): `run(input,
//!   context)` returns `ok` or `err(message)`; outgoing HTTP is `wasi:http/outgoing-handler`
//!   behind the job's allow-list ([`HttpGate`]), and `kv`, `secrets` and `log` are
//!   the same services the `rota` import module gives a preview 1 plugin; since 0.2 `run`
//!   returns the run's output, since 0.3 its context carries the run's `traceparent` (a
//!   handler of an older version runs unchanged: [`HandlerPre`] picks the version).
//!
//! Both get the whole of WASI 0.2's CLI world (so that toolchains which import every
//! interface, as componentize-py and componentize-js do, link), with nothing behind what
//! reaches out: no preopened directory, no socket address allowed, no name lookup, no
//! inherited environment. The sandbox is the modules' own: the same engine, pooling
//! allocator, memory limit, epoch deadline and kill switch ([`super::Runtime::run`]).

use wasmtime::Store;
use wasmtime::component::{Component, HasSelf, InstancePre, Linker, ResourceTable};
use wasmtime::{Engine, component::types::ComponentItem};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use super::gate::HttpGate;
use super::host;
use super::run::MemoryLimit;
use crate::logs::Stream;

/// The bindings of one version of the `rota:plugin/handler` world, from its WIT folder.
macro_rules! handler_world {
    ($wit:literal) => {
        wasmtime::component::bindgen!({
            path: $wit,
            world: "rota:plugin/handler",
            imports: { default: async },
            exports: { default: async },
            with: {
                "wasi:http": wasmtime_wasi_http::p2::bindings::http,
                "wasi:io": wasmtime_wasi::p2::bindings::io,
                "wasi:clocks": wasmtime_wasi::p2::bindings::clocks,
            },
        });
    };
}

/// `rota:plugin` 0.3 (`plugins/wit`): the context carries the run's trace.
pub(super) mod v0_3 {
    handler_world!("../plugins/wit");
}

/// `rota:plugin` 0.2 (`plugins/wit-0.2`), kept: `run` returns the run's output.
pub(super) mod v0_2 {
    handler_world!("../plugins/wit-0.2");
}

/// `rota:plugin` 0.1 (`plugins/wit-0.1`), kept: a handler built for it runs unchanged.
pub(super) mod v0_1 {
    handler_world!("../plugins/wit-0.1");
}

pub(super) use v0_3::rota::plugin::invocation::Context as HandlerContext;

/// A handler component's imports resolved, for the version of the world it was built for.
#[derive(Clone)]
pub(super) enum HandlerPre {
    V0_3(v0_3::HandlerPre<ComponentCtx>),
    V0_2(v0_2::HandlerPre<ComponentCtx>),
    V0_1(v0_1::HandlerPre<ComponentCtx>),
}

impl HandlerPre {
    /// The newest version whose `run` the component's matches (the error is the newest's).
    pub(super) fn new(pre: InstancePre<ComponentCtx>) -> wasmtime::Result<HandlerPre> {
        let newest = match v0_3::HandlerPre::new(pre.clone()) {
            Ok(pre) => return Ok(HandlerPre::V0_3(pre)),
            Err(newest) => newest,
        };
        if let Ok(pre) = v0_2::HandlerPre::new(pre.clone()) {
            return Ok(HandlerPre::V0_2(pre));
        }
        v0_1::HandlerPre::new(pre)
            .map(HandlerPre::V0_1)
            .map_err(|_| newest)
    }

    /// Instantiates the handler and calls `run` with the context its version has: its
    /// output (a 0.1 handler has none), or its `err` message.
    pub(super) async fn run(
        &self,
        store: &mut Store<ComponentCtx>,
        input: &[u8],
        context: &HandlerContext,
    ) -> wasmtime::Result<Result<Option<String>, String>> {
        // The fields every version's context has (0.3 added `traceparent`).
        macro_rules! context_of {
            ($version:ident) => {
                $version::rota::plugin::invocation::Context {
                    job_id: context.job_id,
                    job_name: context.job_name.clone(),
                    run_id: context.run_id,
                    task_id: context.task_id,
                    attempt: context.attempt,
                    scheduled_at: context.scheduled_at,
                    shard_index: context.shard_index,
                    shard_total: context.shard_total,
                    params: context.params.clone(),
                }
            };
        }
        match self {
            HandlerPre::V0_3(pre) => {
                let handler = pre.instantiate_async(&mut *store).await?;
                handler.call_run(&mut *store, input, context).await
            }
            HandlerPre::V0_2(pre) => {
                let handler = pre.instantiate_async(&mut *store).await?;
                handler
                    .call_run(&mut *store, input, &context_of!(v0_2))
                    .await
            }
            HandlerPre::V0_1(pre) => {
                let handler = pre.instantiate_async(&mut *store).await?;
                let ran = handler
                    .call_run(&mut *store, input, &context_of!(v0_1))
                    .await?;
                Ok(ran.map(|()| None))
            }
        }
    }
}

/// Which of the two component worlds a plugin is written for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum World {
    /// `wasi:cli/run`: stdin, argv, env, stdout/stderr and the exit status.
    Command,
    /// `rota:plugin/handler`: a typed `run` and the host's interfaces.
    Handler,
}

impl World {
    /// How the world is named to users (the console, errors, `rota plugin run`).
    pub fn as_str(self) -> &'static str {
        match self {
            World::Command => "wasi:cli/command",
            World::Handler => "rota:plugin/handler",
        }
    }
}

/// The interfaces a component may import: name (without version) and the version family
/// its version must belong to. Anything else is refused at upload, by name.
pub const PROVIDED: &[(&str, &str)] = &[
    ("wasi:io/error", "0.2"),
    ("wasi:io/poll", "0.2"),
    ("wasi:io/streams", "0.2"),
    ("wasi:clocks/monotonic-clock", "0.2"),
    ("wasi:clocks/wall-clock", "0.2"),
    ("wasi:random/random", "0.2"),
    ("wasi:random/insecure", "0.2"),
    ("wasi:random/insecure-seed", "0.2"),
    ("wasi:cli/environment", "0.2"),
    ("wasi:cli/exit", "0.2"),
    ("wasi:cli/stdin", "0.2"),
    ("wasi:cli/stdout", "0.2"),
    ("wasi:cli/stderr", "0.2"),
    ("wasi:cli/terminal-input", "0.2"),
    ("wasi:cli/terminal-output", "0.2"),
    ("wasi:cli/terminal-stdin", "0.2"),
    ("wasi:cli/terminal-stdout", "0.2"),
    ("wasi:cli/terminal-stderr", "0.2"),
    ("wasi:filesystem/types", "0.2"),
    ("wasi:filesystem/preopens", "0.2"),
    ("wasi:sockets/network", "0.2"),
    ("wasi:sockets/instance-network", "0.2"),
    ("wasi:sockets/udp", "0.2"),
    ("wasi:sockets/udp-create-socket", "0.2"),
    ("wasi:sockets/tcp", "0.2"),
    ("wasi:sockets/tcp-create-socket", "0.2"),
    ("wasi:sockets/ip-name-lookup", "0.2"),
    ("wasi:http/types", "0.2"),
    ("wasi:http/outgoing-handler", "0.2"),
    ("rota:plugin/invocation", "0.1"),
    ("rota:plugin/kv", "0.1"),
    ("rota:plugin/secrets", "0.1"),
    ("rota:plugin/log", "0.1"),
    ("rota:plugin/invocation", "0.2"),
    ("rota:plugin/kv", "0.2"),
    ("rota:plugin/secrets", "0.2"),
    ("rota:plugin/log", "0.2"),
    ("rota:plugin/invocation", "0.3"),
    ("rota:plugin/kv", "0.3"),
    ("rota:plugin/secrets", "0.3"),
    ("rota:plugin/log", "0.3"),
];

/// Is `import` (`ns:pkg/iface@x.y.z`) one of [`PROVIDED`], in a version family Rota has?
pub fn is_provided(import: &str) -> bool {
    let (name, version) = import.split_once('@').unwrap_or((import, ""));
    PROVIDED.iter().any(|(n, family)| {
        *n == name
            && version
                .strip_prefix(family)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
    })
}

/// The world a component's exports make it, if any.
pub fn world_of(engine: &Engine, component: &Component) -> Option<World> {
    let ty = component.component_type();
    let mut world = None;
    for (name, item) in ty.exports(engine) {
        match item.ty {
            ComponentItem::ComponentFunc(_) if name == "run" => return Some(World::Handler),
            ComponentItem::ComponentInstance(_)
                if name.split_once('@').map_or(name, |(n, _)| n) == "wasi:cli/run" =>
            {
                world = Some(World::Command);
            }
            _ => {}
        }
    }
    world
}

/// The names of a component's imports, in its order.
pub fn imports_of(engine: &Engine, component: &Component) -> Vec<String> {
    component
        .component_type()
        .imports(engine)
        .map(|(name, _)| name.to_owned())
        .collect()
}

/// Links `component` as the executors will, checking the types of its imports and of
/// `world`'s exports.
pub fn check_links(engine: &Engine, component: &Component, world: World) -> wasmtime::Result<()> {
    let pre = linker(engine)?.instantiate_pre(component)?;
    match world {
        World::Handler => HandlerPre::new(pre).map(drop),
        World::Command => wasmtime_wasi::p2::bindings::CommandPre::new(pre).map(drop),
    }
}

/// The data of one component run's store.
pub(super) struct ComponentCtx {
    wasi: WasiCtx,
    table: ResourceTable,
    http: WasiHttpCtx,
    gate: HttpGate,
    pub(super) limits: MemoryLimit,
    pub(super) host: host::Host,
}

impl ComponentCtx {
    pub(super) fn new(wasi: WasiCtx, limits: MemoryLimit, host: host::Host) -> Self {
        ComponentCtx {
            wasi,
            table: ResourceTable::new(),
            http: WasiHttpCtx::new(),
            gate: host.http_gate(),
            limits,
            host,
        }
    }
}

impl WasiView for ComponentCtx {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for ComponentCtx {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.gate,
        }
    }
}

/// The linker every component is instantiated against: WASI 0.2's CLI world, the
/// outgoing half of `wasi:http`, and `rota:plugin`'s imports.
pub(super) fn linker(engine: &Engine) -> wasmtime::Result<Linker<ComponentCtx>> {
    let mut linker = Linker::new(engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)?;
    v0_3::rota::plugin::invocation::add_to_linker::<_, HasSelf<_>>(&mut linker, |cx| cx)?;
    v0_3::rota::plugin::kv::add_to_linker::<_, HasSelf<_>>(&mut linker, |cx| cx)?;
    v0_3::rota::plugin::secrets::add_to_linker::<_, HasSelf<_>>(&mut linker, |cx| cx)?;
    v0_3::rota::plugin::log::add_to_linker::<_, HasSelf<_>>(&mut linker, |cx| cx)?;
    v0_2::rota::plugin::invocation::add_to_linker::<_, HasSelf<_>>(&mut linker, |cx| cx)?;
    v0_2::rota::plugin::kv::add_to_linker::<_, HasSelf<_>>(&mut linker, |cx| cx)?;
    v0_2::rota::plugin::secrets::add_to_linker::<_, HasSelf<_>>(&mut linker, |cx| cx)?;
    v0_2::rota::plugin::log::add_to_linker::<_, HasSelf<_>>(&mut linker, |cx| cx)?;
    v0_1::rota::plugin::invocation::add_to_linker::<_, HasSelf<_>>(&mut linker, |cx| cx)?;
    v0_1::rota::plugin::kv::add_to_linker::<_, HasSelf<_>>(&mut linker, |cx| cx)?;
    v0_1::rota::plugin::secrets::add_to_linker::<_, HasSelf<_>>(&mut linker, |cx| cx)?;
    v0_1::rota::plugin::log::add_to_linker::<_, HasSelf<_>>(&mut linker, |cx| cx)?;
    Ok(linker)
}

/// `rota:plugin`'s imports, the same services in every version of the world.
macro_rules! rota_imports {
    ($version:ident) => {
        impl $version::rota::plugin::invocation::Host for ComponentCtx {}

        impl $version::rota::plugin::kv::Host for ComponentCtx {
            async fn get(&mut self, key: String) -> Result<Option<Vec<u8>>, String> {
                self.host
                    .kv_call(rota_proto::wire::KvOp::Get, key, None)
                    .await
            }

            async fn set(&mut self, key: String, value: Vec<u8>) -> Result<(), String> {
                self.host
                    .kv_call(rota_proto::wire::KvOp::Set, key, Some(value))
                    .await
                    .map(drop)
            }

            async fn delete(&mut self, key: String) -> Result<(), String> {
                self.host
                    .kv_call(rota_proto::wire::KvOp::Delete, key, None)
                    .await
                    .map(drop)
            }
        }

        impl $version::rota::plugin::secrets::Host for ComponentCtx {
            async fn get(&mut self, name: String) -> Result<Option<String>, String> {
                self.host.secret_call(name).await
            }
        }

        impl $version::rota::plugin::log::Host for ComponentCtx {
            async fn write(&mut self, level: $version::rota::plugin::log::Level, message: String) {
                use $version::rota::plugin::log::Level;
                let stream = match level {
                    Level::Debug | Level::Info => Stream::Stdout,
                    Level::Warn | Level::Error => Stream::Stderr,
                };
                let mut line = message.into_bytes();
                line.push(b'\n');
                self.host.log().write(stream, &line);
            }
        }
    };
}

rota_imports!(v0_3);
rota_imports!(v0_2);
rota_imports!(v0_1);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provided_imports_match_by_name_and_version_family() {
        assert!(is_provided("wasi:cli/environment@0.2.0"));
        assert!(is_provided("wasi:cli/environment@0.2.9"));
        assert!(is_provided("wasi:http/outgoing-handler@0.2.12"));
        assert!(is_provided("rota:plugin/kv@0.1.0"));
        assert!(is_provided("rota:plugin/kv@0.2.0"));
        assert!(is_provided("rota:plugin/log@0.3.0"));
        assert!(!is_provided("rota:plugin/output@0.1.1"));
        assert!(!is_provided("wasi:http/incoming-handler@0.2.0"));
        assert!(!is_provided("wasi:cli/environment@0.3.0"));
        assert!(!is_provided("wasi:cli/environment@0.20.0"));
        assert!(!is_provided("wasi:cli/environment"));
        assert!(!is_provided("rota:plugin/kv@1.0.0"));
        assert!(!is_provided("wasi:keyvalue/store@0.2.0-draft"));
    }
}
