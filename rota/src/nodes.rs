//! The process subcommands: `rota standalone`, `rota executor` and `rota plugin run`.
//! (`rota server` is in `cli.rs`.) Each parses its flags, prepares what it needs on disk and
//! hands over to the libraries.
// The flags' doc comments are their `--help` text, written for a terminal, not rustdoc:
// `<listen>` and `[::1]` there are words, not HTML or links.
#![allow(rustdoc::broken_intra_doc_links, rustdoc::invalid_html_tags)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use rota_executor::ExecutorConfig;
use rota_executor::local::{LocalRun, run_local};
use rota_executor::logs::LogLimits;
use rota_executor::runtime::host::{HostAccess, LocalServices, Services};
use rota_executor::runtime::{RunStatus, Runtime, RuntimeConfig};
use rota_proto::Secret;
use rota_proto::allow::AllowList;
use rota_scheduler::Config;
use tokio::net::TcpListener;

#[derive(Args)]
pub struct StandaloneArgs {
    /// Where the SQLite database, the secrets, logs and module cache live.
    #[arg(long, env = "ROTA_DATA_DIR", default_value = "./rota-data")]
    data_dir: PathBuf,
    /// Address of the console and REST API.
    #[arg(long, env = "ROTA_LISTEN", default_value = rota_scheduler::config::defaults::LISTEN)]
    listen: SocketAddr,
    /// App (executor group) of the embedded executor.
    #[arg(long, env = "ROTA_APP", default_value = "default")]
    app: String,
    /// Concurrent runs of the embedded executor.
    #[arg(long, env = "ROTA_CAPACITY", default_value_t = rota_executor::config::DEFAULT_CAPACITY)]
    capacity: usize,
    #[command(flatten)]
    logs: LogArgs,
    #[command(flatten)]
    egress: crate::cli::EgressArgs,
    #[command(flatten)]
    xxl: crate::cli::XxlArgs,
    /// The master secret (16 characters or more); without it one is generated and kept in
    /// the data directory.
    #[arg(long, env = "ROTA_EXECUTOR_SECRET", hide_env_values = true)]
    executor_secret: Option<String>,
    /// Admin API bearer token; without it one is generated and kept in the data directory.
    #[arg(long, env = "ROTA_API_TOKEN", hide_env_values = true)]
    api_token: Option<String>,
    /// Password of the console's `admin` user, set at its creation (first start); without it
    /// a random one is generated and logged once.
    #[arg(long, env = "ROTA_ADMIN_PASSWORD", hide_env_values = true)]
    admin_password: Option<String>,
    #[command(flatten)]
    alarms: crate::cli::AlarmArgs,
    #[command(flatten)]
    pub sso: crate::cli::SsoArgs,
    #[command(flatten)]
    pub process: crate::cli::ProcessArgs,
}

#[derive(Args)]
pub struct ExecutorArgs {
    /// Scheduler base URLs, comma-separated; tried in turn.
    #[arg(long, env = "ROTA_SCHEDULER", value_delimiter = ',', required = true)]
    scheduler: Vec<String>,
    /// The app (executor group) whose jobs this executor runs.
    #[arg(long, env = "ROTA_APP")]
    app: String,
    /// Address to listen on for the schedulers' calls.
    #[arg(long, env = "ROTA_LISTEN", default_value = "127.0.0.1:9999")]
    listen: SocketAddr,
    /// URL the schedulers call this executor at; defaults to http://<listen>.
    #[arg(long, env = "ROTA_ADVERTISE_URL")]
    advertise_url: Option<String>,
    /// The app's key, signing every request between this executor and the schedulers
    /// (required): `rota app-key --app NAME` prints it where the scheduler's master secret
    /// is known.
    #[arg(long, env = "ROTA_EXECUTOR_SECRET", hide_env_values = true)]
    executor_secret: String,
    /// Logs, report spool and compiled-module cache.
    #[arg(long, env = "ROTA_DATA_DIR", default_value = "./rota-executor-data")]
    data_dir: PathBuf,
    /// Concurrent runs.
    #[arg(long, env = "ROTA_CAPACITY", default_value_t = rota_executor::config::DEFAULT_CAPACITY)]
    capacity: usize,
    /// Threads for the executor's network side: the schedulers' calls, the reports, the
    /// plugins' host calls (runs have threads of their own, up to the capacity). Default: a
    /// quarter of the cores, at least one: that side is light, and each thread more wakes
    /// the others for work one could do.
    #[arg(long, env = "ROTA_ASYNC_THREADS", value_parser = clap::value_parser!(u16).range(1..=1024))]
    async_threads: Option<u16>,
    /// How long finished runs' reports collect before they go to a scheduler as one
    /// batch, ms: the most a result waits to be seen, against one scheduler transaction
    /// per batch (0–1,000). A run something waits on (a workflow step, a job with
    /// children) is reported within the time its trigger asks for
    /// (10 ms) whatever this says.
    #[arg(long, env = "ROTA_REPORT_WINDOW_MS", default_value_t = rota_executor::config::DEFAULT_REPORT_WINDOW.as_millis() as u64, value_parser = clap::value_parser!(u64).range(0..=1000))]
    report_window_ms: u64,
    #[command(flatten)]
    logs: LogArgs,
    /// Largest linear memory a job may ask for, MiB.
    #[arg(long, env = "ROTA_MEMORY_CAP_MB", default_value_t = rota_executor::runtime::DEFAULT_MEMORY_CAP_MB)]
    memory_cap_mb: u32,
    #[command(flatten)]
    tls: crate::cli::TlsArgs,
    #[command(flatten)]
    egress: crate::cli::EgressArgs,
    #[command(flatten)]
    pub process: crate::cli::ProcessArgs,
}

impl ExecutorArgs {
    /// The async runtime's worker threads: `--async-threads`, else a quarter of the cores.
    pub fn async_threads(&self) -> usize {
        match self.async_threads {
            Some(n) => usize::from(n),
            None => std::thread::available_parallelism().map_or(1, |n| (n.get() / 4).max(1)),
        }
    }
}

/// Where run logs stop growing: old segments are deleted whole, by age and by total size.
#[derive(Args)]
pub struct LogArgs {
    /// Run logs older than this are deleted, days.
    #[arg(long, env = "ROTA_LOG_RETENTION_DAYS", default_value_t = rota_executor::logs::DEFAULT_LOG_RETENTION.as_secs() / 86_400, value_parser = clap::value_parser!(u64).range(1..=3650))]
    log_retention_days: u64,
    /// Bound on the run logs' total size on disk, MiB; the oldest go first (a log still
    /// being written is kept).
    #[arg(long, env = "ROTA_LOG_MAX_MIB", default_value_t = rota_executor::logs::DEFAULT_LOG_MAX_TOTAL_BYTES >> 20, value_parser = clap::value_parser!(u64).range(16..=16 * 1024 * 1024))]
    log_max_mib: u64,
}

impl LogArgs {
    fn limits(&self) -> LogLimits {
        LogLimits {
            retention: std::time::Duration::from_secs(self.log_retention_days * 86_400),
            max_total_bytes: self.log_max_mib << 20,
            ..LogLimits::default()
        }
    }
}

#[derive(Args)]
pub struct PluginRunArgs {
    /// The plugin: a `.wasm` WASI preview 1 command module or component (a `wasi:cli`
    /// command or a `rota:plugin/handler`), or `.wat` text.
    file: PathBuf,
    /// The run's stdin (a task's payload).
    #[arg(long, default_value = "")]
    payload: String,
    /// Read the payload from a file instead.
    #[arg(long, conflicts_with = "payload")]
    payload_file: Option<PathBuf>,
    /// Job params (argv after the plugin name and ROTA_PARAMS; a handler's
    /// `context.params`); repeat to add words.
    #[arg(long = "param", allow_hyphen_values = true)]
    params: Vec<String>,
    /// Wall-time limit in milliseconds.
    #[arg(long, default_value_t = 10_000)]
    timeout_ms: u64,
    /// Linear memory limit in MiB.
    #[arg(long, default_value_t = 64)]
    memory_mb: u32,
    /// Let the plugin's `http_request` (a component's `wasi:http`) reach this origin or URL
    /// prefix (repeatable), as a job's `http_allow` would.
    #[arg(long = "allow")]
    allow: Vec<String>,
    /// A secret the plugin can read with `secret_get` (a component's `secrets.get`), as
    /// NAME=VALUE (repeatable).
    #[arg(long = "secret", value_parser = parse_secret)]
    secrets: Vec<(String, String)>,
    /// The egress policy applies here as on an executor: a service on this machine
    /// (loopback) needs `--egress-allow 127.0.0.1:PORT` as well as `--allow`.
    #[command(flatten)]
    egress: crate::cli::EgressArgs,
}

fn parse_secret(s: &str) -> Result<(String, String), String> {
    let (name, value) = s
        .split_once('=')
        .ok_or_else(|| format!("`{s}` is not NAME=VALUE"))?;
    rota_scheduler::secrets::check_name(name).map_err(|e| format!("secret name `{name}` {e}"))?;
    Ok((name.to_owned(), value.to_owned()))
}

pub async fn standalone(
    args: StandaloneArgs,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let dir = &args.data_dir;
    std::fs::create_dir_all(dir)
        .with_context(|| format!("creating the data directory {}", dir.display()))?;
    let secret_file = dir.join("executor-secret");
    let given_secret = args.executor_secret.clone().filter(|s| !s.is_empty());
    let (secret, new_secret) = match given_secret.clone() {
        Some(s) if s.len() < 16 => {
            anyhow::bail!(
                "the executor secret (ROTA_EXECUTOR_SECRET) must be at least 16 characters"
            )
        }
        Some(s) => (s, false),
        None => read_or_create_secret(&secret_file)?,
    };
    let token_file = dir.join("api-token");
    let given_token = args.api_token.clone().filter(|t| !t.is_empty());
    let (token, new_token) = match given_token.clone() {
        Some(t) => (t, false),
        None => read_or_create_secret(&token_file)?,
    };

    let listener = TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("listening on {}", args.listen))?;
    let scheduler_url = format!("http://{}", listener.local_addr()?);
    let executor_listener = TcpListener::bind("127.0.0.1:0")
        .await
        .context("listening for the embedded executor")?;
    let executor_url = format!("http://{}", executor_listener.local_addr()?);

    let db = dir.join("rota.db");
    let mut config = Config::new(
        format!("sqlite:{}", db.display()),
        Secret::new(secret.as_bytes()),
    );
    args.alarms.apply(&mut config);
    args.sso.apply(&mut config)?;
    config.traces = crate::telemetry::enabled();
    config.node_name = "standalone".into();
    config.advertise_url = scheduler_url.clone();
    config.api_token = Some(token.clone());
    config.executors_die_with_node = true;
    config.xxl_context_path = args.xxl.context_path()?;
    config.admin_password = args.admin_password.clone().filter(|p| !p.is_empty());
    // One policy for both halves; each also denies the other's port (and its own, added
    // where it starts), so no job reaches either through the other.
    let egress = args.egress.policy()?;
    config.egress = egress.clone();
    config
        .egress
        .deny_own_port(executor_listener.local_addr()?, "the embedded executor");

    // The embedded executor holds its app's key, like any executor.
    let mut executor = ExecutorConfig::new(
        vec![scheduler_url.clone()],
        args.app.clone(),
        executor_url,
        rota_proto::app_secret(&Secret::new(secret.as_bytes()), &args.app),
        dir.join("executor"),
    );
    executor.capacity = args.capacity;
    executor.logs = args.logs.limits();
    executor.egress = egress;
    executor.seal_egress(executor_listener.local_addr()?).await;

    say(format!(
        "Rota standalone: console and API on {scheduler_url}, data in {}",
        dir.display()
    ));
    if new_token {
        say(format!(
            "  API token (shown once; kept in {}): {token}",
            token_file.display()
        ));
    } else if given_token.is_none() {
        say(format!("  API token: in {}", token_file.display()));
    }
    if new_secret {
        say(format!(
            "  executor secret generated and kept in {}",
            secret_file.display()
        ));
    } else if given_secret.is_some() {
        say("  executor secret: given (--executor-secret or ROTA_EXECUTOR_SECRET)".to_owned());
    } else {
        say(format!("  executor secret: in {}", secret_file.display()));
    }
    say(format!("  embedded executor: app `{}`", args.app));

    // One wasmtime engine for the process: the embedded executor's also validates uploads.
    let runtime =
        Runtime::new(executor.runtime_config()).context("starting the WebAssembly runtime")?;
    config.engine = Some(runtime.engine().clone());

    // The executor drains first (its last reports and its goodbye need the scheduler),
    // then the scheduler stops.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let (stop_scheduler_tx, stop_scheduler_rx) = tokio::sync::watch::channel(false);
    let scheduler = {
        let mut stop = stop_scheduler_rx;
        tokio::spawn(rota_scheduler::run(config, listener, async move {
            let _ = stop.wait_for(|s| *s).await;
        }))
    };
    let executor = {
        let mut stop = stop_rx.clone();
        tokio::spawn(async move {
            // Registration retries until the scheduler answers, so starting both at once is fine.
            rota_executor::run_with_runtime(executor, runtime, executor_listener, async move {
                let _ = stop.wait_for(|s| *s).await;
            })
            .await
        })
    };
    shutdown.await;
    let _ = stop_tx.send(true);
    let executor_result = executor.await.context("the embedded executor panicked");
    let _ = stop_scheduler_tx.send(true);
    let scheduler_result = scheduler.await.context("the scheduler panicked")?;
    let executor_result = executor_result?;
    executor_result.context("embedded executor")?;
    scheduler_result.context("scheduler")
}

pub async fn executor(
    args: ExecutorArgs,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    if args.executor_secret.len() < 16 {
        anyhow::bail!("ROTA_EXECUTOR_SECRET must be at least 16 characters");
    }
    let tls = args.tls.load()?;
    if !args.listen.ip().is_loopback() && !tls.serves_https() {
        tracing::warn!(
            listen = %args.listen,
            "listening beyond loopback over plain HTTP: requests are signed, but payloads and logs travel unencrypted; give --tls-cert and --tls-key"
        );
    }
    let listener = TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("listening on {}", args.listen))?;
    let advertise = args
        .advertise_url
        .unwrap_or_else(|| format!("{}://{}", tls.scheme(), args.listen));
    let mut config = ExecutorConfig::new(
        args.scheduler,
        args.app,
        advertise,
        Secret::new(args.executor_secret.as_bytes()),
        args.data_dir,
    );
    config.capacity = args.capacity;
    config.report_window = std::time::Duration::from_millis(args.report_window_ms);
    config.logs = args.logs.limits();
    config.memory_cap_mb = args.memory_cap_mb;
    config.tls = tls;
    config.egress = args.egress.policy()?;
    tracing::info!(listen = %args.listen, "rota executor listening");
    rota_executor::run(config, listener, shutdown).await
}

/// Runs a plugin once, locally, in the same sandbox; prints its log and how it ended.
/// Returns the process exit code: 0 if the plugin succeeded.
pub fn plugin_run(args: PluginRunArgs) -> anyhow::Result<i32> {
    let module =
        std::fs::read(&args.file).with_context(|| format!("reading {}", args.file.display()))?;
    let input = match &args.payload_file {
        Some(f) => std::fs::read(f).with_context(|| format!("reading {}", f.display()))?,
        None => args.payload.clone().into_bytes(),
    };
    let params = (!args.params.is_empty()).then(|| shell_join(&args.params));
    let name = args
        .file
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("plugin")
        .to_owned();
    let runtime = Runtime::new(RuntimeConfig {
        egress: args.egress.policy()?,
        ..RuntimeConfig::default()
    })
    .context("starting the WebAssembly runtime")?;
    let allow = AllowList::parse(&args.allow).map_err(|e| anyhow::anyhow!("--allow: {e}"))?;
    let access = HostAccess {
        allow,
        job_id: 0,
        services: Services::Local(Arc::new(LocalServices {
            kv: Default::default(),
            secrets: args.secrets.iter().cloned().collect(),
        })),
    };
    let outcome = run_local(
        &runtime,
        &LocalRun {
            name: &name,
            module: &module,
            input: &input,
            params: params.as_deref(),
            timeout: Duration::from_millis(args.timeout_ms),
            memory_mb: args.memory_mb,
            host: Some(&access),
        },
    )
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    for line in &outcome.log_lines {
        println!("{line}");
    }
    let code = outcome
        .exit_code
        .map(|c| format!(", exit code {c}"))
        .unwrap_or_default();
    let message = outcome
        .message
        .as_deref()
        .map(|m| format!(": {m}"))
        .unwrap_or_default();
    let short = &outcome.sha256[..12.min(outcome.sha256.len())];
    eprintln!("{name} ({short}): {}{code}{message}", outcome.status);
    Ok(if outcome.status == RunStatus::Succeeded {
        0
    } else {
        1
    })
}

/// Prints a line of the start-up banner; a closed stdout is not a reason to stop.
fn say(line: String) {
    use std::io::Write;
    let _ = writeln!(std::io::stdout(), "{line}");
}

/// Joins words so that the plugin's shell-like split gives them back.
fn shell_join(words: &[String]) -> String {
    words
        .iter()
        .map(|w| {
            if !w.is_empty()
                && w.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_=.,/:@%+".contains(c))
            {
                w.clone()
            } else {
                format!("'{}'", w.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Reads a secret kept in `path`, or creates one (32 random bytes, hex) readable only by
/// the owner. Returns it and whether it was created now.
fn read_or_create_secret(path: &Path) -> anyhow::Result<(String, bool)> {
    if let Ok(s) = std::fs::read_to_string(path) {
        let s = s.trim().to_owned();
        if s.len() >= 16 {
            return Ok((s, false));
        }
        anyhow::bail!(
            "{} holds a secret shorter than 16 characters; remove it to generate a new one",
            path.display()
        );
    }
    let bytes: [u8; 32] = rand::random();
    let secret = hex::encode(bytes);
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    std::io::Write::write_all(&mut file, secret.as_bytes())
        .with_context(|| format!("writing {}", path.display()))?;
    Ok((secret, true))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_survive_the_shell_split() {
        let words: Vec<String> = ["--dry-run", "a b", "it's", ""]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(shell_join(&words), r"--dry-run 'a b' 'it'\''s' ''");
    }

    #[test]
    fn secrets_are_created_once_and_private() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        let (a, created) = read_or_create_secret(&path).unwrap();
        assert!(created);
        assert_eq!(a.len(), 64);
        let (b, created) = read_or_create_secret(&path).unwrap();
        assert!(!created);
        assert_eq!(a, b);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(
                std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
                0o600
            );
        }
    }
}
