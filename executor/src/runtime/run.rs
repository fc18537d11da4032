//! One run: a fresh [`Store`] with the plugin contract of SPEC §5 and its limits, for a
//! preview 1 module or a component ([`super::component`]), driven to its end on the
//! calling thread (see [`Runtime::run`]).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio_util::sync::CancellationToken;
use wasmtime::{Engine, ResourceLimiter, Store, Trap, UpdateDeadline};
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p1::WasiP1Ctx;
use wasmtime_wasi::p2::pipe::MemoryInputPipe;
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};
use wasmtime_wasi::{I32Exit, WasiCtxBuilder};

use super::component::{ComponentCtx, HandlerContext};
use super::{
    DEFAULT_MEMORY_MB, FOREVER, Invocation, MESSAGE_MAX, Plugin, Pre, RunOutcome, RunStatus,
    Runtime, WRITE_PERMIT, bounded, host,
};
use crate::logs::{RunLog, Stream};
use crate::shell;

impl Runtime {
    /// Runs `plugin` once in a fresh sandbox, writing its output to `log`, until it exits,
    /// fails, times out or `kill` is cancelled. Blocks the calling thread (see the module
    /// docs); never panics on anything the guest does.
    pub fn run(
        &self,
        plugin: &Plugin,
        invocation: &Invocation<'_>,
        log: &RunLog,
        kill: &CancellationToken,
    ) -> RunOutcome {
        let outcome = self.run_inner(plugin, invocation, log, kill);
        if let (RunStatus::Failed | RunStatus::Timeout | RunStatus::Killed, Some(message)) =
            (outcome.status, &outcome.message)
        {
            log.note(message);
        }
        log.finish();
        outcome
    }

    fn run_inner(
        &self,
        plugin: &Plugin,
        invocation: &Invocation<'_>,
        log: &RunLog,
        kill: &CancellationToken,
    ) -> RunOutcome {
        let memory_mb = match invocation.memory_mb {
            0 => DEFAULT_MEMORY_MB,
            mb => mb,
        }
        .min(self.inner.memory_cap_mb);
        let started = Instant::now();
        // An absurd timeout (`i64::MAX` ms) means "a very long time", not an overflow.
        let deadline = started
            .checked_add(invocation.timeout)
            .unwrap_or_else(|| started + FOREVER);
        let limits = MemoryLimit {
            max_bytes: (memory_mb as usize) << 20,
            hit: false,
        };
        let host = host::Host::new(
            invocation.host.cloned(),
            self.inner.http.clone(),
            self.inner.io.clone(),
            log.clone(),
            deadline,
        );
        let sandbox = Sandbox { kill, deadline };
        let (ended, out_of_memory, output) = match &plugin.pre {
            Pre::Module(pre) => {
                let wasi = match command_wasi(invocation, log) {
                    Ok(wasi) => wasi,
                    Err(outcome) => return outcome,
                };
                let ctx = Ctx {
                    wasi: { wasi }.build_p1(),
                    limits,
                    host,
                };
                let store = self.store(&self.inner.engine, ctx, &sandbox);
                sandbox.drive(store, async |store: &mut Store<_>| {
                    let instance = pre.instantiate_async(&mut *store).await?;
                    let start = instance.get_typed_func::<(), ()>(&mut *store, "_start")?;
                    start.call_async(&mut *store, ()).await.map(Ok)
                })
            }
            Pre::Command(pre) => {
                let wasi = match command_wasi(invocation, log) {
                    Ok(wasi) => wasi,
                    Err(outcome) => return outcome,
                };
                let ctx = ComponentCtx::new({ wasi }.build(), limits, host);
                let store = self.store(&self.inner.component_engine, ctx, &sandbox);
                sandbox.drive(store, async |store: &mut Store<_>| {
                    let command = pre.instantiate_async(&mut *store).await?;
                    let ran = command.wasi_cli_run().call_run(&mut *store).await?;
                    Ok(ran.map_err(|()| Refusal::Exit(1)))
                })
            }
            Pre::Handler(pre) => {
                let mut wasi = WasiCtxBuilder::new();
                wasi.stdout(LogOutput::new(log, Stream::Stdout))
                    .stderr(LogOutput::new(log, Stream::Stderr));
                let ctx = ComponentCtx::new(wasi.build(), limits, host);
                let env = invocation.env;
                let context = HandlerContext {
                    job_id: env.job_id,
                    job_name: env.job_name.clone(),
                    run_id: env.run_id,
                    task_id: env.task_id,
                    attempt: u32::try_from(env.attempt).unwrap_or_default(),
                    scheduled_at: env.scheduled_at,
                    shard_index: u32::try_from(env.shard_index).unwrap_or_default(),
                    shard_total: u32::try_from(env.shard_total).unwrap_or_default(),
                    params: invocation.params.map(str::to_owned),
                    traceparent: env.traceparent.clone(),
                };
                let input = invocation.input;
                let store = self.store(&self.inner.component_engine, ctx, &sandbox);
                sandbox.drive(store, async |store: &mut Store<_>| {
                    Ok(match pre.run(&mut *store, input, &context).await? {
                        Ok(Some(output)) => store
                            .data_mut()
                            .host
                            .output_set(output.into_bytes())
                            .map_err(Refusal::Message),
                        Ok(None) => Ok(()),
                        Err(message) => Err(Refusal::Message(message)),
                    })
                })
            }
        };
        let mut outcome = outcome(ended, out_of_memory, invocation.timeout, memory_mb, log);
        outcome.output = output;
        outcome
    }

    /// A store for one run: its memory limit, and the epoch callback that stops it when
    /// killed or out of time (and otherwise lets it yield at every tick).
    fn store<T: RunData>(&self, engine: &Engine, data: T, sandbox: &Sandbox<'_>) -> Store<T> {
        let mut store = Store::new(engine, data);
        store.limiter(|cx| cx.limits());
        let switch = sandbox.kill.clone();
        let deadline = sandbox.deadline;
        store.epoch_deadline_callback(move |_| {
            if switch.is_cancelled() {
                Err(Stop::Killed.into())
            } else if Instant::now() >= deadline {
                Err(Stop::Timeout.into())
            } else {
                Ok(UpdateDeadline::Yield(1))
            }
        });
        store.set_epoch_deadline(1);
        store
    }
}

/// What a run is raced against: its kill switch and its deadline.
struct Sandbox<'a> {
    kill: &'a CancellationToken,
    deadline: Instant,
}

impl Sandbox<'_> {
    /// Runs `call` on `store` to its end, or until the run is killed or out of time;
    /// returns how it ended, whether the memory limit refused a growth, and the output the
    /// plugin set (`rota.output_set`).
    fn drive<T: RunData, F>(&self, mut store: Store<T>, call: F) -> (Ended, bool, Option<String>)
    where
        F: AsyncFnOnce(&mut Store<T>) -> wasmtime::Result<Result<(), Refusal>>,
    {
        let ended = block_on(async {
            tokio::select! {
                biased;
                _ = self.kill.cancelled() => Ended::Stopped(Stop::Killed),
                _ = tokio::time::sleep_until(self.deadline.into()) => Ended::Stopped(Stop::Timeout),
                result = call(&mut store) => match result {
                    Ok(returned) => Ended::Returned(returned),
                    Err(error) => Ended::Error(error),
                },
            }
        })
        .unwrap_or_else(Ended::Executor);
        let out_of_memory = store.data_mut().limits().hit;
        let output = store.data_mut().host().take_output();
        (ended, out_of_memory, output)
    }
}

/// The run's outcome from how it ended.
fn outcome(
    ended: Ended,
    out_of_memory: bool,
    timeout: Duration,
    memory_mb: u32,
    log: &RunLog,
) -> RunOutcome {
    let timeout_ms = timeout.as_millis();
    let stopped = |stop: Stop| match stop {
        Stop::Killed => RunOutcome::new(RunStatus::Killed, None, Some("killed".into())),
        Stop::Timeout => RunOutcome::new(
            RunStatus::Timeout,
            None,
            Some(format!("timed out after {timeout_ms} ms")),
        ),
    };
    let error = match ended {
        Ended::Returned(Ok(())) => return RunOutcome::new(RunStatus::Succeeded, Some(0), None),
        Ended::Returned(Err(Refusal::Exit(code))) => {
            return RunOutcome::new(
                RunStatus::Failed,
                Some(code),
                Some(format!("exited with status {code}")),
            );
        }
        Ended::Returned(Err(Refusal::Message(message))) => {
            return RunOutcome::new(
                RunStatus::Failed,
                None,
                Some(bounded(&message, MESSAGE_MAX)),
            );
        }
        Ended::Stopped(stop) => return stopped(stop),
        Ended::Executor(message) => return RunOutcome::new(RunStatus::Failed, None, Some(message)),
        Ended::Error(error) => error,
    };
    if let Some(&stop) = error.downcast_ref::<Stop>() {
        return stopped(stop);
    }
    if let Some(exit) = error.downcast_ref::<I32Exit>() {
        return match exit.0 {
            0 => RunOutcome::new(RunStatus::Succeeded, Some(0), None),
            code => RunOutcome::new(
                RunStatus::Failed,
                Some(code),
                Some(format!("exited with status {code}")),
            ),
        };
    }
    if out_of_memory {
        return RunOutcome::new(
            RunStatus::Failed,
            None,
            Some(format!("out of memory (limit {memory_mb} MiB)")),
        );
    }
    let message = match error.downcast_ref::<Trap>() {
        Some(trap) => format!("wasm trap: {trap}"),
        None => bounded(&format!("{error:#}"), MESSAGE_MAX),
    };
    // The whole error (with the wasm backtrace) goes to the log; the report keeps the gist.
    let detail = format!("{error:#}");
    if detail != message {
        log.note(&bounded(&detail, 4 * MESSAGE_MAX));
    }
    RunOutcome::new(RunStatus::Failed, None, Some(message))
}

/// The WASI context of the command contract: stdin = the run's input, argv =
/// `[plugin name] + shell-split(params)`, env = the `ROTA_*` variables, stdout/stderr =
/// the run's log. An `Err` is the outcome of a run that cannot start (unsplittable params).
fn command_wasi(invocation: &Invocation<'_>, log: &RunLog) -> Result<WasiCtxBuilder, RunOutcome> {
    let mut argv = vec![invocation.plugin_name.to_owned()];
    match shell::split(invocation.params.unwrap_or_default()) {
        Ok(words) => argv.extend(words),
        Err(e) => {
            let message = format!("cannot split the job's params into arguments: {e}");
            return Err(RunOutcome::new(RunStatus::Failed, None, Some(message)));
        }
    }
    let mut wasi = WasiCtxBuilder::new();
    wasi.stdin(MemoryInputPipe::new(Bytes::copy_from_slice(
        invocation.input,
    )))
    .stdout(LogOutput::new(log, Stream::Stdout))
    .stderr(LogOutput::new(log, Stream::Stderr))
    .args(&argv)
    .envs(&invocation.env.vars(invocation.params));
    Ok(wasi)
}

/// How a run ended.
enum Ended {
    /// The guest returned: `Ok` or how it said it failed.
    Returned(Result<(), Refusal>),
    /// The executor stopped it.
    Stopped(Stop),
    /// The call failed: a trap, an exit, a stop raised from the epoch callback, …
    Error(wasmtime::Error),
    /// The executor could not drive the run at all.
    Executor(String),
}

/// A guest's own failure, returned rather than trapped.
enum Refusal {
    /// A command's `run` returned `err` (exit status 1).
    Exit(i32),
    /// A handler's `run` returned `err(message)`.
    Message(String),
}

/// Why the executor stopped a run; raised from the epoch callback as the call's error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
enum Stop {
    #[error("run killed")]
    Killed,
    #[error("run timed out")]
    Timeout,
}

/// What every run's store data has: its memory limit.
pub(super) trait RunData: Send + 'static {
    fn limits(&mut self) -> &mut MemoryLimit;
    fn host(&mut self) -> &mut host::Host;
}

/// The data of a preview 1 module's store.
pub(super) struct Ctx {
    pub(super) wasi: WasiP1Ctx,
    limits: MemoryLimit,
    pub(super) host: host::Host,
}

impl RunData for Ctx {
    fn limits(&mut self) -> &mut MemoryLimit {
        &mut self.limits
    }
    fn host(&mut self) -> &mut host::Host {
        &mut self.host
    }
}

impl RunData for ComponentCtx {
    fn limits(&mut self) -> &mut MemoryLimit {
        &mut self.limits
    }
    fn host(&mut self) -> &mut host::Host {
        &mut self.host
    }
}

/// Caps linear memory growth; remembers that it refused one, to name the failure.
pub(super) struct MemoryLimit {
    max_bytes: usize,
    hit: bool,
}

/// Growth past the run's limit (also raised as a trap).
#[derive(Debug, thiserror::Error)]
#[error("memory limit of {limit_mib} MiB reached (growing to {desired} bytes)")]
struct MemoryLimitReached {
    limit_mib: usize,
    desired: usize,
}

impl ResourceLimiter for MemoryLimit {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.max_bytes {
            self.hit = true;
            return Err(MemoryLimitReached {
                limit_mib: self.max_bytes >> 20,
                desired,
            }
            .into());
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        _desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        // Bounded by the pool's per-table element limit.
        Ok(true)
    }
}

/// Guest stdout or stderr, appended to the run's log as lines complete.
#[derive(Clone)]
struct LogOutput {
    log: RunLog,
    stream: Stream,
}

impl LogOutput {
    fn new(log: &RunLog, stream: Stream) -> Self {
        Self {
            log: log.clone(),
            stream,
        }
    }
}

impl IsTerminal for LogOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for LogOutput {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for LogOutput {
    async fn ready(&mut self) {}
}

impl OutputStream for LogOutput {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.log.write(self.stream, &bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(WRITE_PERMIT)
    }
}

impl tokio::io::AsyncWrite for LogOutput {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.log.write(self.stream, buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

thread_local! {
    /// The executor of runs on threads outside any tokio runtime (benchmarks, the CLI).
    static LOCAL_RUNTIME: io::Result<tokio::runtime::Runtime> =
        tokio::runtime::Builder::new_current_thread().enable_all().build();
}

/// Drives a run future to completion on this (blocking) thread: on the ambient tokio
/// runtime inside `spawn_blocking`, else on a per-thread current-thread runtime.
fn block_on<F: Future>(future: F) -> Result<F::Output, String> {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) => Ok(handle.block_on(future)),
        Err(_) => LOCAL_RUNTIME.with(|rt| match rt {
            Ok(rt) => Ok(rt.block_on(future)),
            Err(e) => Err(format!("executor error: cannot start a run loop: {e}")),
        }),
    }
}
