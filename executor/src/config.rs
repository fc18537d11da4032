//! What an executor node is configured with, its defaults, and what its runtime and
//! egress policy derive from it.

use std::path::PathBuf;
use std::time::Duration;

use rota_proto::Secret;

use crate::logs::LogLimits;
use crate::runtime::{DEFAULT_MEMORY_CAP_MB, RuntimeConfig};

pub const DEFAULT_CAPACITY: usize = 64;
pub const DEFAULT_QUEUE: usize = 10_000;
pub const DEFAULT_HEARTBEAT_INTERVAL: Duration = Duration::from_secs(30);
pub const DEFAULT_DRAIN_GRACE: Duration = Duration::from_secs(30);
/// How long a batch of run reports collects after its first one, unless configured
/// (`--report-window-ms`). Each batch costs the scheduler's database one transaction
/// whatever its size, so under load longer windows mean fewer statements per run; the
/// results wait at most this much longer to be seen (the runs' own times are in the
/// reports). A final report whose trigger asks for `report_within_ms` (a workflow step, a
/// job with children) closes its batch sooner.
pub const DEFAULT_REPORT_WINDOW: Duration = Duration::from_millis(100);

/// Everything an executor node is configured with.
#[derive(Debug, Clone)]
pub struct ExecutorConfig {
    /// Base URLs of the scheduler nodes, tried in turn (`http://127.0.0.1:8080`; plain
    /// HTTP, every request HMAC-signed).
    pub schedulers: Vec<String>,
    /// The executor group whose jobs this node runs.
    pub app: String,
    /// Base URL the schedulers call this node at: its identity.
    pub advertise_url: String,
    /// The app's key (`ROTA_EXECUTOR_SECRET` on an executor node; `rota app-key` derives it
    /// from the scheduler's master secret). It signs and checks every request.
    pub secret: Secret,
    /// Holds `logs/`, `spool/` and `modules/`. One node per directory.
    pub data_dir: PathBuf,
    /// Runs executing at once.
    pub capacity: usize,
    /// Runs accepted but not executing (waiting for their time, their turn or a slot);
    /// beyond it triggers are answered `full`.
    pub queue: usize,
    /// Largest linear memory a job may ask for, MiB (a job's default is 64).
    pub memory_cap_mb: u32,
    /// Run logs: the per-run cap, retention by age and the bound on their total size.
    pub logs: LogLimits,
    /// Until a scheduler's registration ack says otherwise.
    pub heartbeat_interval: Duration,
    /// HTTPS for the schedulers' calls, and whom this node's clients trust.
    pub tls: rota_net::Tls,
    /// Where plugins' HTTP may connect (`--egress-allow`, `--egress-deny`), whatever a
    /// job's allow-list says; [`ExecutorConfig::seal_egress`] adds this node's own port and
    /// its schedulers.
    pub egress: rota_net::egress::Policy,
    /// How long run reports collect after the first before they are sent as one batch
    /// (`--report-window-ms`): the delay a finished run's result may wait to be seen, against
    /// one scheduler transaction per batch ([`DEFAULT_REPORT_WINDOW`]).
    pub report_window: Duration,
    /// How long running runs get to finish at shutdown before they are killed.
    pub drain_grace: Duration,
}

impl ExecutorConfig {
    /// A configuration with the defaults for everything else.
    pub fn new(
        schedulers: Vec<String>,
        app: impl Into<String>,
        advertise_url: impl Into<String>,
        secret: Secret,
        data_dir: impl Into<PathBuf>,
    ) -> Self {
        Self {
            schedulers,
            app: app.into(),
            advertise_url: advertise_url.into(),
            secret,
            data_dir: data_dir.into(),
            capacity: DEFAULT_CAPACITY,
            queue: DEFAULT_QUEUE,
            memory_cap_mb: DEFAULT_MEMORY_CAP_MB,
            logs: LogLimits::default(),
            heartbeat_interval: DEFAULT_HEARTBEAT_INTERVAL,
            tls: rota_net::Tls::default(),
            egress: rota_net::egress::Policy::default(),
            report_window: DEFAULT_REPORT_WINDOW,
            drain_grace: DEFAULT_DRAIN_GRACE,
        }
    }

    /// The runtime this node needs: a pool slot per concurrent run (plus a few for
    /// `rota plugin run`-style callers sharing it) and the module cache in `data_dir`.
    pub fn runtime_config(&self) -> RuntimeConfig {
        RuntimeConfig {
            module_cache_dir: Some(self.data_dir.join("modules")),
            max_instances: u32::try_from(self.capacity.saturating_add(4)).unwrap_or(u32::MAX),
            memory_cap_mb: self.memory_cap_mb,
            tls: self.tls.clone(),
            egress: self.egress.clone(),
            ..RuntimeConfig::default()
        }
    }

    /// Adds what a plugin must never reach, whatever the admin opened: this node's own
    /// listen socket and its schedulers (their API and the executor protocol). Call it
    /// before [`ExecutorConfig::runtime_config`]; [`crate::run`] does.
    pub async fn seal_egress(&mut self, listen: std::net::SocketAddr) {
        self.egress
            .deny_own_port(listen, "this executor's own port");
        for scheduler in &self.schedulers {
            let Ok(url) = reqwest::Url::parse(scheduler) else {
                continue; // `check` says why
            };
            if let (Some(host), Some(port)) = (url.host_str(), url.port_or_known_default()) {
                self.egress
                    .deny_service(host, port, "a scheduler of this executor")
                    .await;
            }
        }
    }

    pub(crate) fn check(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            !self.schedulers.is_empty(),
            "an executor needs at least one scheduler URL"
        );
        for url in &self.schedulers {
            anyhow::ensure!(
                url.starts_with("http://") || url.starts_with("https://"),
                "scheduler URL `{url}` must start with http:// or https://"
            );
        }
        let scheme = format!("{}://", self.tls.scheme());
        anyhow::ensure!(
            self.advertise_url.starts_with(&scheme),
            "the advertised URL `{}` must be the executor's base URL, `{scheme}host:port`{}",
            self.advertise_url,
            if self.tls.serves_https() {
                " (it serves HTTPS)"
            } else {
                " (it serves plain HTTP without --tls-cert)"
            }
        );
        anyhow::ensure!(
            !self.app.trim().is_empty(),
            "the app name must not be empty"
        );
        anyhow::ensure!(self.capacity > 0, "capacity must be at least 1");
        Ok(())
    }
}
