//! The sandbox: one wasmtime [`Engine`] per process, compiled plugins cached by SHA-256,
//! and one run = one fresh [`Store`](wasmtime::Store) with the plugin contract of SPEC §5 and its limits.
//!
//! # Engine
//!
//! [`Runtime::new`] builds the engine once: the pooling allocator (instance, memory, table
//! and stack slots reserved up front and reused, so a run does not `mmap`), copy-on-write
//! memory images (a module's data segments are mapped, not copied, on instantiation),
//! memory kept resident between runs (2 MiB per slot, reset with a `memset` rather than
//! `madvise`), and epoch interruption driven by one background thread that ticks every
//! [`EPOCH_TICK`] (10 ms).
//!
//! Why 10 ms and not 1 ms: the tick costs a run nothing while it is shorter than a tick
//! (generated code only compares a counter), and a run crossing a tick pays one
//! host callback — at 10 ms that is ≤ 0.01 % of a busy loop's time and one thread wake-up
//! per 10 ms for the process. Timeouts and kills are enforced within one tick plus
//! scheduling noise, i.e. ~10–20 ms, well inside the 1 s the contract allows. 1 ms would
//! buy nothing users can see and cost 1,000 wake-ups per second on a 2-core box.
//!
//! # Plugins
//!
//! A plugin is compiled once per SHA-256 ([`Runtime::compile`]) and kept as an
//! [`InstancePre`] (imports already resolved against one WASI preview 1 [`Linker`] built
//! at start-up) in a bounded in-memory cache. The compiled artifact is also written to
//! `<module_cache_dir>/<engine fingerprint>/<sha256>.cwasm` (atomically: temp file +
//! rename; sealed with a MAC checked before it is loaded, `precompiled`), so a restarted
//! executor loads it ([`Runtime::load_cached`], a few ms) instead of fetching and
//! compiling it again. [`Runtime::compilations`] counts real compilations.
//!
//! # Runs
//!
//! [`Runtime::run`] builds a WASI context that grants exactly the contract and nothing
//! else: stdin = the run's input, argv = `[plugin name] + shell-split(params)`, env =
//! the nine `ROTA_*` variables ([`PluginEnv`]), stdout/stderr = the run's [`RunLog`](crate::logs::RunLog)
//! (line by line, while it runs); no preopened directories (so no file system), no
//! sockets, no inherited environment or stdio; clocks and random are available.
//!
//! The call is asynchronous on purpose (`call_async` on a fiber): the run future is raced
//! against the kill switch and the deadline, and every epoch tick makes the guest yield
//! (`UpdateDeadline::Yield`), so a run is stopped within a tick whether it is spinning in
//! wasm *or* blocked in a host call (a WASI `poll_oneoff` sleep), which an epoch trap
//! alone cannot interrupt. Memory growth past the run's limit traps and the run fails
//! with `out of memory (limit N MiB)`. A failing run never affects another: each has its
//! own store, instance and memory slot, all released when the run returns.
//!
//! [`Runtime::run`] blocks its thread: call it from `spawn_blocking` or a plain thread,
//! never from an async task.

pub mod component;
mod gate;
pub mod host;
mod precompiled;
mod run;

use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::fs;
use std::hash::{Hash, Hasher};
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rota_net::egress::Egress;
use rota_proto::ReportStatus;
use sha2::{Digest, Sha256};
use wasmtime::component::Component;
use wasmtime::{
    Config, Engine, InstanceAllocationStrategy, InstancePre, Linker, Module,
    PoolingAllocationConfig,
};
use wasmtime_wasi::p1;
use wasmtime_wasi::p2::bindings::CommandPre;

use component::{ComponentCtx, HandlerPre, World};
pub(crate) use precompiled::Artifact;
use run::Ctx;

/// How often the epoch advances; the granularity of timeouts and kills.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);
/// A run's linear memory limit when its job does not say (SPEC §6: `memory_mb` 64).
pub const DEFAULT_MEMORY_MB: u32 = 64;
/// Default largest memory a job may ask for on an executor.
pub const DEFAULT_MEMORY_CAP_MB: u32 = 1024;
/// The largest memory a 32-bit wasm module can address.
pub const MAX_MEMORY_CAP_MB: u32 = 4096;
/// Default number of runs alive at once (pool slots).
pub const DEFAULT_MAX_INSTANCES: u32 = 128;
/// Core instances, memories and tables one component may have (pool limits).
const CORE_INSTANCES_PER_COMPONENT: u32 = 64;
const MEMORIES_PER_COMPONENT: u32 = 16;
const TABLES_PER_COMPONENT: u32 = 32;
/// Default number of compiled plugins kept in memory.
pub const DEFAULT_MAX_CACHED_MODULES: usize = 256;

/// Bytes of each memory slot kept mapped between runs (reset with `memset`, which beats
/// `madvise` + page faults for small plugins).
const KEEP_RESIDENT_MEMORY: usize = 2 << 20;
const KEEP_RESIDENT_TABLE: usize = 64 << 10;
const KEEP_RESIDENT_STACK: usize = 64 << 10;
/// Longest run message (trap or error text) kept in a report.
const MESSAGE_MAX: usize = 500;
/// A deadline standing in for "never" (a timeout too large to add to the clock).
const FOREVER: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
/// Writes the guest may queue on stdout/stderr at once; everything is accepted.
const WRITE_PERMIT: usize = 64 << 10;

/// How a [`Runtime`] is built.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// Where compiled plugins are kept across restarts; `None` keeps them in memory only.
    pub module_cache_dir: Option<PathBuf>,
    /// Runs alive at once (pool slots); more wait for a slot to free up… or fail, so the
    /// executor bounds its concurrency below this.
    pub max_instances: u32,
    /// Largest linear memory a run may have, in MiB (at most [`MAX_MEMORY_CAP_MB`]); a
    /// job's `memory_mb` is capped by it.
    pub memory_cap_mb: u32,
    /// Compiled plugins kept in memory; the least recently compiled are dropped first
    /// (and reloaded from the disk cache when needed again).
    pub max_cached_modules: usize,
    /// Whom the plugins' `http_request` trusts for `https://` (the system's roots, plus
    /// `--tls-ca`).
    pub tls: rota_net::Tls,
    /// Where the plugins' HTTP may connect, whatever a job's allow-list says
    /// (`--egress-allow`, `--egress-deny`; [`rota_net::egress`]).
    pub egress: rota_net::egress::Policy,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            module_cache_dir: None,
            max_instances: DEFAULT_MAX_INSTANCES,
            memory_cap_mb: DEFAULT_MEMORY_CAP_MB,
            max_cached_modules: DEFAULT_MAX_CACHED_MODULES,
            tls: rota_net::Tls::default(),
            egress: rota_net::egress::Policy::default(),
        }
    }
}

/// Why a plugin cannot be made runnable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuntimeError {
    #[error("cannot set up the WebAssembly engine: {0}")]
    Engine(String),
    #[error("plugin bytes do not match SHA-256 {expected} (they hash to {actual})")]
    HashMismatch { expected: String, actual: String },
    #[error("plugin {sha256} cannot be compiled: {reason}")]
    Compile { sha256: String, reason: String },
    #[error("plugin {sha256} cannot be linked against what Rota provides: {reason}")]
    Link { sha256: String, reason: String },
}

/// A compiled plugin, ready to instantiate; cheap to clone.
#[derive(Clone)]
pub struct Plugin {
    sha256: Arc<str>,
    pre: Pre,
}

/// A plugin's imports resolved against the linker of its kind, ready to instantiate.
#[derive(Clone)]
enum Pre {
    /// A WASI preview 1 command module.
    Module(InstancePre<Ctx>),
    /// A `wasi:cli/run` command component.
    Command(CommandPre<ComponentCtx>),
    /// A `rota:plugin/handler` component.
    Handler(HandlerPre),
}

impl Plugin {
    pub fn sha256(&self) -> &str {
        &self.sha256
    }

    /// The component world it is written for; `None` for a preview 1 module.
    pub fn world(&self) -> Option<World> {
        match self.pre {
            Pre::Module(_) => None,
            Pre::Command(_) => Some(World::Command),
            Pre::Handler(_) => Some(World::Handler),
        }
    }
}

impl fmt::Debug for Plugin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Plugin")
            .field("sha256", &self.sha256)
            .finish()
    }
}

/// The `ROTA_*` environment of a run (SPEC §5, §6 "Plugin env").
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PluginEnv {
    pub job_id: i64,
    pub job_name: String,
    pub run_id: i64,
    /// Set whenever the run belongs to a task; `ROTA_TASK_ID` is absent otherwise.
    pub task_id: Option<i64>,
    /// 1-based.
    pub attempt: i32,
    /// Epoch milliseconds.
    pub scheduled_at: i64,
    pub shard_index: i32,
    pub shard_total: i32,
    /// The W3C `traceparent` of the run's span (or of the scheduler's dispatch when this
    /// process exports no traces): `TRACEPARENT`, for a module that traces its own calls.
    pub traceparent: Option<String>,
}

impl PluginEnv {
    /// The guest's whole environment, in a fixed order.
    pub fn vars(&self, params: Option<&str>) -> Vec<(&'static str, String)> {
        let mut vars = vec![
            ("ROTA_JOB_ID", self.job_id.to_string()),
            ("ROTA_JOB_NAME", self.job_name.clone()),
            ("ROTA_RUN_ID", self.run_id.to_string()),
        ];
        if let Some(task_id) = self.task_id {
            vars.push(("ROTA_TASK_ID", task_id.to_string()));
        }
        vars.extend([
            ("ROTA_ATTEMPT", self.attempt.to_string()),
            ("ROTA_SCHEDULED_AT", self.scheduled_at.to_string()),
            ("ROTA_SHARD_INDEX", self.shard_index.to_string()),
            ("ROTA_SHARD_TOTAL", self.shard_total.to_string()),
            ("ROTA_PARAMS", params.unwrap_or_default().to_owned()),
        ]);
        if let Some(traceparent) = &self.traceparent {
            vars.push(("TRACEPARENT", traceparent.clone()));
        }
        vars
    }
}

/// What to run: everything a run's sandbox is built from.
#[derive(Debug, Clone, Copy)]
pub struct Invocation<'a> {
    /// `argv[0]`.
    pub plugin_name: &'a str,
    /// stdin.
    pub input: &'a [u8],
    /// Split into argv, and `ROTA_PARAMS` verbatim.
    pub params: Option<&'a str>,
    pub env: &'a PluginEnv,
    /// Wall time from the start of instantiation.
    pub timeout: Duration,
    /// Linear memory limit; 0 means [`DEFAULT_MEMORY_MB`]; capped by the runtime's cap.
    pub memory_mb: u32,
    /// What the `rota` imports may reach (`host`); `None`: every call is denied.
    pub host: Option<&'a host::HostAccess>,
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RunStatus {
    Succeeded,
    Failed,
    Timeout,
    Killed,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        self.report_status().as_str()
    }

    pub fn report_status(self) -> ReportStatus {
        match self {
            Self::Succeeded => ReportStatus::Succeeded,
            Self::Failed => ReportStatus::Failed,
            Self::Timeout => ReportStatus::Timeout,
            Self::Killed => ReportStatus::Killed,
        }
    }
}

impl fmt::Display for RunStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The result of [`Runtime::run`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunOutcome {
    pub status: RunStatus,
    /// The guest's exit status, when it exited (returning from `_start` is 0).
    pub exit_code: Option<i32>,
    /// Why it failed, timed out or was killed, in words for the console.
    pub message: Option<String>,
    /// What the plugin set as its output (`rota.output_set`): a workflow step's, for the
    /// steps after it.
    pub output: Option<String>,
}

impl RunOutcome {
    fn new(status: RunStatus, exit_code: Option<i32>, message: Option<String>) -> Self {
        Self {
            status,
            exit_code,
            message,
            output: None,
        }
    }
}

/// The process's WebAssembly runtime; cheap to clone (clones share everything).
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<Inner>,
}

struct Inner {
    /// Compiles and runs preview 1 modules.
    engine: Engine,
    /// Compiles and runs components ([`new_engine`] says why apart).
    component_engine: Engine,
    linker: Linker<Ctx>,
    /// What components are linked against (`component::linker`).
    components: wasmtime::component::Linker<ComponentCtx>,
    /// The plugins' HTTP clients (the `rota` import `http_request`, `wasi:http`) under the
    /// egress policy, shared by every run.
    http: Arc<Egress>,
    /// The runtime the process was started on, if any: the imports' network calls run
    /// there (`host::on_io`).
    io: Option<tokio::runtime::Handle>,
    memory_cap_mb: u32,
    /// `<module_cache_dir>/<engine fingerprint>`, and the key its files are sealed with.
    cache_dir: Option<(PathBuf, precompiled::CacheKey)>,
    modules: Mutex<ModuleCache>,
    compilations: AtomicU64,
    disk_loads: AtomicU64,
}

struct ModuleCache {
    max: usize,
    plugins: HashMap<Arc<str>, Plugin>,
    /// Insertion order, for eviction.
    order: VecDeque<Arc<str>>,
}

impl fmt::Debug for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Runtime")
            .field("memory_cap_mb", &self.inner.memory_cap_mb)
            .field("cache_dir", &self.inner.cache_dir)
            .finish_non_exhaustive()
    }
}

impl Runtime {
    /// Builds the engine, the WASI linker and the epoch ticker. Creates the module cache
    /// directory if one is configured.
    pub fn new(config: RuntimeConfig) -> Result<Self, RuntimeError> {
        let memory_cap_mb = config.memory_cap_mb.clamp(1, MAX_MEMORY_CAP_MB);
        let slots = config.max_instances.max(1);
        let engine = new_engine(slots, memory_cap_mb, Kind::Modules)?;
        let component_engine = new_engine(slots, memory_cap_mb, Kind::Components)?;

        let mut linker = Linker::new(&engine);
        p1::add_to_linker_async(&mut linker, |cx: &mut Ctx| &mut cx.wasi)
            .map_err(|e| RuntimeError::Engine(format!("{e:#}")))?;
        host::add_to_linker(&mut linker).map_err(|e| RuntimeError::Engine(format!("{e:#}")))?;
        let components = component::linker(&component_engine)
            .map_err(|e| RuntimeError::Engine(format!("{e:#}")))?;
        // Redirects are followed by `host` itself, each hop checked against the allow-list
        // and the egress policy.
        let tls = config.tls.clone();
        let http = Arc::new(Egress::new(Arc::new(config.egress), move || {
            tls.client()
                .redirect(reqwest::redirect::Policy::none())
                .connect_timeout(Duration::from_secs(5))
        }));

        let cache_dir = match config.module_cache_dir {
            Some(dir) => {
                let fingerprint = engine_fingerprint(&[&engine, &component_engine]);
                let dir = dir.join(&fingerprint);
                let unusable = |e: io::Error| {
                    RuntimeError::Engine(format!(
                        "cannot set up the module cache {}: {e}",
                        dir.display()
                    ))
                };
                fs::create_dir_all(&dir).map_err(unusable)?;
                let key = precompiled::CacheKey::open(&dir, &fingerprint).map_err(unusable)?;
                Some((dir, key))
            }
            None => None,
        };

        start_epoch_ticker(&[&engine, &component_engine])?;
        Ok(Self {
            inner: Arc::new(Inner {
                engine,
                component_engine,
                linker,
                components,
                http,
                io: tokio::runtime::Handle::try_current().ok(),
                memory_cap_mb,
                cache_dir,
                modules: Mutex::new(ModuleCache {
                    max: config.max_cached_modules.max(1),
                    plugins: HashMap::new(),
                    order: VecDeque::new(),
                }),
                compilations: AtomicU64::new(0),
                disk_loads: AtomicU64::new(0),
            }),
        })
    }

    /// The engine of preview 1 modules, to share with plugin validation
    /// (`validate_plugin`).
    pub fn engine(&self) -> &Engine {
        &self.inner.engine
    }

    /// The engine of components.
    pub fn component_engine(&self) -> &Engine {
        &self.inner.component_engine
    }

    /// The largest memory a run may have, in MiB.
    pub fn memory_cap_mb(&self) -> u32 {
        self.inner.memory_cap_mb
    }

    /// Plugins compiled from wasm by this runtime (not loaded from the disk cache).
    pub fn compilations(&self) -> u64 {
        self.inner.compilations.load(Ordering::Relaxed)
    }

    /// Plugins loaded from the disk cache by this runtime.
    pub fn disk_loads(&self) -> u64 {
        self.inner.disk_loads.load(Ordering::Relaxed)
    }

    fn modules(&self) -> MutexGuard<'_, ModuleCache> {
        self.inner.modules.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The plugin if it is compiled and in memory. Never blocks on I/O.
    pub fn cached(&self, sha256: &str) -> Option<Plugin> {
        self.modules().plugins.get(sha256).cloned()
    }

    /// The plugin from memory, or from the disk cache. `None` if it has to be fetched
    /// and compiled. May read a file: call it from a blocking context.
    pub fn load_cached(&self, sha256: &str) -> Result<Option<Plugin>, RuntimeError> {
        if let Some(plugin) = self.cached(sha256) {
            return Ok(Some(plugin));
        }
        let Some((path, key)) = self.cache_path(sha256) else {
            return Ok(None);
        };
        if !path.exists() {
            return Ok(None);
        }
        match precompiled::load(
            [&self.inner.engine, &self.inner.component_engine],
            key,
            sha256,
            &path,
        ) {
            Ok(artifact) => {
                self.inner.disk_loads.fetch_add(1, Ordering::Relaxed);
                self.insert(sha256, &artifact).map(Some)
            }
            Err(e) => {
                // A damaged or foreign file (its seal does not verify), or another
                // wasmtime build: compile again.
                tracing::warn!(path = %path.display(), error = %format!("{e:#}"), "ignoring an unusable compiled module");
                let _ = fs::remove_file(&path);
                Ok(None)
            }
        }
    }

    /// The plugin with this SHA-256, built from its wasm bytes: from memory or the disk
    /// cache if present, else compiled (and written to the disk cache). The bytes must
    /// hash to `sha256`. CPU-heavy: call it from a blocking context.
    pub fn compile(&self, sha256: &str, wasm: &[u8]) -> Result<Plugin, RuntimeError> {
        let actual = hex::encode(Sha256::digest(wasm));
        if actual != sha256 {
            return Err(RuntimeError::HashMismatch {
                expected: sha256.to_owned(),
                actual,
            });
        }
        if let Some(plugin) = self.load_cached(sha256)? {
            return Ok(plugin);
        }
        let compiled = if is_component(wasm) {
            Component::new(&self.inner.component_engine, wasm).map(Artifact::Component)
        } else {
            Module::new(&self.inner.engine, wasm).map(Artifact::Module)
        };
        let artifact = compiled.map_err(|e| RuntimeError::Compile {
            sha256: sha256.to_owned(),
            reason: bounded(&format!("{e:#}"), MESSAGE_MAX),
        })?;
        self.inner.compilations.fetch_add(1, Ordering::Relaxed);
        let plugin = self.insert(sha256, &artifact)?;
        if let Some((path, key)) = self.cache_path(sha256)
            && let Err(e) = precompiled::store(&artifact, key, sha256, &path)
        {
            tracing::warn!(path = %path.display(), error = %e, "cannot write the module cache; the plugin will be compiled again after a restart");
        }
        Ok(plugin)
    }

    /// A plugin compiled by [`crate::module::validate_compiled`] with this runtime's
    /// engine, kept as if this runtime had compiled it (no second compilation).
    pub(crate) fn adopt(&self, sha256: &str, artifact: &Artifact) -> Result<Plugin, RuntimeError> {
        if let Some(plugin) = self.cached(sha256) {
            return Ok(plugin);
        }
        self.insert(sha256, artifact)
    }

    fn cache_path(&self, sha256: &str) -> Option<(PathBuf, &precompiled::CacheKey)> {
        let is_hash = sha256.len() == 64 && sha256.bytes().all(|b| b.is_ascii_hexdigit());
        let (dir, key) = self.inner.cache_dir.as_ref()?;
        is_hash.then(|| (dir.join(format!("{sha256}.cwasm")), key))
    }

    fn insert(&self, sha256: &str, artifact: &Artifact) -> Result<Plugin, RuntimeError> {
        let link = |e: wasmtime::Error| RuntimeError::Link {
            sha256: sha256.to_owned(),
            reason: bounded(&format!("{e:#}"), MESSAGE_MAX),
        };
        let pre = match artifact {
            Artifact::Module(module) => {
                Pre::Module(self.inner.linker.instantiate_pre(module).map_err(link)?)
            }
            Artifact::Component(component) => {
                let pre = self
                    .inner
                    .components
                    .instantiate_pre(component)
                    .map_err(link)?;
                match component::world_of(&self.inner.component_engine, component) {
                    Some(World::Handler) => Pre::Handler(HandlerPre::new(pre).map_err(link)?),
                    Some(World::Command) => Pre::Command(CommandPre::new(pre).map_err(link)?),
                    None => {
                        return Err(link(wasmtime::format_err!(
                            "it exports neither `run` (the rota:plugin handler world) nor `wasi:cli/run`"
                        )));
                    }
                }
            }
        };
        let plugin = Plugin {
            sha256: Arc::from(sha256),
            pre,
        };
        let mut modules = self.modules();
        if modules
            .plugins
            .insert(plugin.sha256.clone(), plugin.clone())
            .is_none()
        {
            modules.order.push_back(plugin.sha256.clone());
        }
        while modules.plugins.len() > modules.max {
            let Some(oldest) = modules.order.pop_front() else {
                break;
            };
            modules.plugins.remove(&oldest);
        }
        Ok(plugin)
    }
}

/// Which plugins an engine is for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Modules,
    Components,
}

/// One of the runtime's two engines: the pooling allocator (instance, memory, table and
/// stack slots reserved up front and reused, so a run does not `mmap`), copy-on-write
/// memory images, memory kept resident between runs, and epoch interruption.
///
/// Why components have an engine of their own: with guard pages and signal-based bounds
/// checks (the default, and the modules' engine) every memory a run grows is made
/// accessible with `mprotect` and made inaccessible again when its slot is recycled, and
/// each `mprotect` shoots down the TLB of every core. A module has one memory; a command
/// component made with the preview 1 adapter has two and grows one every run, a Python
/// one has ten: `mprotect` was 30 % of a command component's CPU per run. Without guard
/// pages and with explicit bounds checks, a recycled slot keeps its pages accessible
/// (only zeroed), and the same run costs 49 µs of CPU instead of 119 µs. Modules keep the
/// signal-based engine: they grow no second memory, and explicit checks made them slower
/// (33 µs instead of 18.5 µs per `hello` run).
fn new_engine(slots: u32, memory_cap_mb: u32, kind: Kind) -> Result<Engine, RuntimeError> {
    let mut pool = PoolingAllocationConfig::default();
    pool.total_core_instances(slots)
        .total_memories(slots)
        .total_tables(slots)
        .total_stacks(slots)
        .max_memory_size((memory_cap_mb as usize) << 20)
        .linear_memory_keep_resident(KEEP_RESIDENT_MEMORY)
        .table_keep_resident(KEEP_RESIDENT_TABLE)
        .async_stack_keep_resident(KEEP_RESIDENT_STACK)
        // Reset only the pages a run dirtied (Linux 6.7+; a no-op elsewhere): a `memset`
        // of the whole kept-resident region was a quarter of the executor's CPU per run.
        .pagemap_scan(wasmtime::Enabled::Auto);
    if kind == Kind::Components {
        // A run is one component of up to `CORE_INSTANCES_PER_COMPONENT` core instances
        // (componentize-py's have ~14): room for a quarter of the slots to be Python runs
        // at once and for every slot to be a small component.
        pool.total_component_instances(slots)
            .max_core_instances_per_component(CORE_INSTANCES_PER_COMPONENT)
            .max_memories_per_component(MEMORIES_PER_COMPONENT)
            .max_tables_per_component(TABLES_PER_COMPONENT)
            .total_core_instances(slots * 4)
            .total_memories(slots * 3)
            .total_tables(slots * 3);
    }
    let mut wasm = Config::new();
    wasm.allocation_strategy(InstanceAllocationStrategy::Pooling(pool))
        .memory_init_cow(true)
        .epoch_interruption(true);
    if kind == Kind::Components {
        wasm.signals_based_traps(false).memory_guard_size(0);
    }
    Engine::new(&wasm).map_err(|e| RuntimeError::Engine(format!("{e:#}")))
}

/// Starts the thread that advances the engines' epochs every [`EPOCH_TICK`]. It holds
/// only weak references and ends once the engines are dropped.
fn start_epoch_ticker(engines: &[&Engine]) -> Result<(), RuntimeError> {
    let weak: Vec<_> = engines.iter().map(|e| e.weak()).collect();
    std::thread::Builder::new()
        .name("rota-epoch".into())
        .spawn(move || {
            loop {
                std::thread::sleep(EPOCH_TICK);
                let mut alive = false;
                for engine in weak.iter().filter_map(|w| w.upgrade()) {
                    engine.increment_epoch();
                    alive = true;
                }
                if !alive {
                    return;
                }
            }
        })
        .map(drop)
        .map_err(|e| RuntimeError::Engine(format!("cannot start the epoch thread: {e}")))
}

/// Whether `wasm` is a component rather than a core module: bytes 6..8 of the header are
/// the layer, 0 for a core module and 1 for a component.
pub(crate) fn is_component(wasm: &[u8]) -> bool {
    wasm.get(..4) == Some(b"\0asm") && wasm.get(6..8) == Some(&[1, 0][..])
}

/// A short stable name for everything that makes compiled code compatible with this
/// engine (wasmtime version, target, settings): the disk cache's subdirectory.
fn engine_fingerprint(engines: &[&Engine]) -> String {
    let mut hasher = DefaultHasher::new();
    for engine in engines {
        engine.precompile_compatibility_hash().hash(&mut hasher);
    }
    format!("{:016x}", hasher.finish())
}

/// `text` cut to at most `max` characters, marked with `…` when cut.
pub(crate) fn bounded(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_is_exactly_the_contract() {
        let env = PluginEnv {
            job_id: 7,
            job_name: "close-order".into(),
            run_id: 9001,
            task_id: Some(42),
            attempt: 2,
            scheduled_at: 1_767_225_600_123,
            shard_index: 0,
            shard_total: 1,
            traceparent: None,
        };
        let names: Vec<_> = env.vars(None).into_iter().map(|(k, _)| k).collect();
        assert_eq!(
            names,
            [
                "ROTA_JOB_ID",
                "ROTA_JOB_NAME",
                "ROTA_RUN_ID",
                "ROTA_TASK_ID",
                "ROTA_ATTEMPT",
                "ROTA_SCHEDULED_AT",
                "ROTA_SHARD_INDEX",
                "ROTA_SHARD_TOTAL",
                "ROTA_PARAMS"
            ]
        );
        let vars = env.vars(Some("--dry-run 'a b'"));
        assert_eq!(vars[8], ("ROTA_PARAMS", "--dry-run 'a b'".to_owned()));
        assert_eq!(vars[5].1, "1767225600123");
        let no_task = PluginEnv {
            task_id: None,
            ..env
        };
        assert!(no_task.vars(None).iter().all(|(k, _)| *k != "ROTA_TASK_ID"));
        let traced = PluginEnv {
            traceparent: Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into()),
            ..no_task
        };
        assert_eq!(
            traced.vars(None).last(),
            Some(&(
                "TRACEPARENT",
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".to_owned()
            )),
            "a traced run's module is told its trace"
        );
    }

    #[test]
    fn statuses_map_to_the_wire() {
        assert_eq!(RunStatus::Timeout.report_status(), ReportStatus::Timeout);
        assert_eq!(RunStatus::Killed.to_string(), "killed");
    }
}
