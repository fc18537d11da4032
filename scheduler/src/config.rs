//! A scheduler node's settings. The `rota` binary fills this from its flags, their
//! environment variables and its config file (`rota/src/cli.rs`, `rota/src/config_file.rs`);
//! tests build it with [`Config::for_tests`].

use rota_proto::Secret;

/// `Debug` shows every setting but the secrets (the API token, the admin password and the
/// sealing key), so a logged configuration leaks nothing.
#[derive(Clone)]
pub struct Config {
    /// `mysql://…` or `sqlite:…`.
    pub database_url: String,
    /// This node's stable name (its identity across restarts; claims are fenced by epoch).
    pub node_name: String,
    /// The URL other nodes and executors reach this node at.
    pub advertise_url: String,
    /// Accepted as an admin API bearer token (`ROTA_API_TOKEN`). `None` = API closed.
    pub api_token: Option<String>,
    /// Shared secret that signs scheduler ↔ executor requests.
    pub executor_secret: Secret,

    /// How far ahead the scan claims work (XXL-JOB's pre-read: 5 s).
    pub window_ms: i64,
    /// How often the scan runs when nothing wakes it sooner.
    pub scan_interval_ms: u64,
    /// Tasks claimed per scan transaction at most.
    pub scan_batch: u32,
    /// Tasks held in the wheel at most: the scan claims less when it is this full.
    pub wheel_capacity: usize,
    /// A cron fire time later than this is a misfire (the job's misfire policy applies).
    pub misfire_threshold_ms: i64,

    /// Concurrent dispatches of the fast and slow pools.
    pub fast_pool_size: usize,
    pub slow_pool_size: usize,
    /// Batches waiting per pool before the ring thread blocks (back-pressure).
    pub pool_queue: usize,
    /// A dispatch slower than this counts against its job…
    pub slow_dispatch_ms: u64,
    /// …and a job with more than this many slow dispatches in a minute moves to the slow pool.
    pub slow_dispatch_count: u32,
    /// Timeout of one HTTP request to an executor.
    pub dispatch_timeout_ms: u64,

    /// A scheduler node whose heartbeat is this old is dead: another node takes over its
    /// claims (and a stalled one that wakes finds itself fenced). It heartbeats every sixth
    /// of this, and fires only while its last heartbeat is younger than half of it.
    pub node_dead_after_ms: i64,

    /// A clock further than this off the database's is reported (a log line, `/readyz`,
    /// `rota_clock_offset_seconds`); due times stay right, corrected by the offset.
    pub max_clock_offset_ms: i64,

    /// Interval executors are told to heartbeat at.
    pub heartbeat_interval_ms: i64,
    /// An executor silent this long is dead and its runs are lost.
    pub executor_dead_after_ms: i64,
    /// Every executor in the registry died with this node (`rota standalone`: the embedded
    /// executor): at start-up their unfinished runs are lost and retried at once, instead of
    /// after the dead timeout.
    pub executors_die_with_node: bool,

    /// Finished tasks and their runs are deleted this long after their last due time; task
    /// keys keep deduplicating until then.
    pub retention_ms: i64,

    pub max_payload_bytes: usize,
    pub max_body_bytes: usize,
    /// Where the XXL-JOB admin API is served (`{path}/api/registry`, …): what XXL-JOB
    /// executors have as `xxl.job.admin.addresses` after the node's URL: empty (the root)
    /// or `/` and segments, without a trailing slash.
    pub xxl_context_path: String,
    pub max_plugin_bytes: usize,

    /// The console's `admin` password, set at first start (`ROTA_ADMIN_PASSWORD`); `None`
    /// generates one and logs it once.
    pub admin_password: Option<String>,
    /// The key sealing plugin secrets at rest (`ROTA_SECRETS_KEY`); `None` derives one from
    /// the executor secret (`crate::secrets`).
    pub secrets_key: Option<[u8; 32]>,
    /// HTTPS for the API and console (`--tls-cert`/`--tls-key`), and whom this node's
    /// clients trust when they call executors and other nodes (`--tls-ca`).
    pub tls: rota_net::Tls,
    /// Where email alarms go out (`--smtp-url`: `smtp://user:pass@host:587?tls=required`
    /// for STARTTLS, `smtps://…` for TLS); `None`: email channels fail with that reason.
    pub smtp_url: Option<String>,
    /// The sender of email alarms (`--alarm-from`).
    pub alarm_from: String,
    /// Where webhook deliveries and alarm channels may connect (`--egress-allow`,
    /// `--egress-deny`), and what every job's `http_allow` is bounded by. [`crate::run`]
    /// adds this node's own listen port and its database.
    pub egress: rota_net::egress::Policy,
    /// The wasmtime engine uploads are validated with: `rota standalone` passes its
    /// embedded executor's, so the process has one engine; `None` makes one.
    pub engine: Option<wasmtime::Engine>,
    /// The process exports OpenTelemetry traces (the binary's `OTEL_*` settings): each API
    /// request opens a span continuing the caller's `traceparent`, and each task created
    /// one inside it. Off, neither is opened.
    pub traces: bool,
    /// Console sign-in through the company's directory (SPEC §14, the `--ldap-*` flags);
    /// `None`: local users only.
    pub ldap: Option<crate::sso::ldap::Settings>,
    /// Console sign-in through an OpenID provider (SPEC §14, the `--oidc-*` flags).
    pub oidc: Option<crate::sso::oidc::Settings>,
    /// What directory or provider groups give (`--sso-map`).
    pub sso_rules: Vec<crate::sso::Rule>,
    /// Local users may not sign in to the console (`--sso-only`): the directory is the
    /// only way in. Their API tokens still work.
    pub sso_only: bool,
    /// How long the directory's word on a user's access holds for the user's API tokens
    /// (`--ldap-recheck-ms`); then the next use asks it again.
    pub ldap_recheck_ms: i64,
    /// How long after a provider user's last sign-in its API tokens act for it
    /// (`--oidc-max-age-ms`); then they may do nothing until it signs in again.
    pub oidc_max_age_ms: i64,
}

/// The server's defaults, in one place: [`Config::new`] and the CLI's flags both read
/// them.
pub mod defaults {
    /// Where the REST API and the console listen.
    pub const LISTEN: &str = "127.0.0.1:8080";
    /// Concurrent dispatches of the fast pool.
    pub const FAST_POOL: usize = 64;
    /// Concurrent dispatches of the slow pool.
    pub const SLOW_POOL: usize = 16;
    /// A dispatch slower than this (ms) counts against its job.
    pub const SLOW_DISPATCH_MS: u64 = 500;
    /// Slow dispatches per minute after which a job moves to the slow pool.
    pub const SLOW_DISPATCH_COUNT: u32 = 10;
    /// Other nodes take a node's claims over after this long without its heartbeat (ms).
    pub const NODE_DEAD_AFTER_MS: i64 = 3_000;
    /// A clock further than this (ms) off the database's is warned about.
    pub const MAX_CLOCK_OFFSET_MS: i64 = 500;
    /// Executors are dead after this long without a heartbeat (ms).
    pub const EXECUTOR_DEAD_AFTER_MS: i64 = rota_proto::wire::DEFAULT_EXECUTOR_DEAD_AFTER_MS;
    /// xxl-job-admin's context path in 2.x, which executors' admin addresses end with.
    pub const XXL_CONTEXT_PATH: &str = "/xxl-job-admin";
    /// Largest task payload accepted (bytes).
    pub const MAX_PAYLOAD_BYTES: usize = 64 * 1024;
    /// The sender of email alarms.
    pub const ALARM_FROM: &str = "Rota <rota@localhost>";
    /// How long the directory's word on a user's access holds for its API tokens (ms).
    pub const LDAP_RECHECK_MS: i64 = 5 * 60 * 1000;
    /// How long after a provider user's last sign-in its API tokens act for it (ms).
    pub const OIDC_MAX_AGE_MS: i64 = 7 * 24 * 3600 * 1000;
}

/// See [`Config::bounded_window_ms`].
const BOUNDED_LEAD_MS: i64 = 300;

impl Config {
    /// How far ahead the scan claims the tasks of a job with a concurrency bound: a claimed
    /// task holds its bucket's slot from its claim, so claiming it a whole window ahead
    /// holds slots for seconds before anything runs, and a task created meanwhile due
    /// sooner finds its bucket full of later ones and waits for them (at 5,000 tasks/s over
    /// 1,000 customers limited to 8 at once, claims 5 s ahead made 1 % of the runs start
    /// 250 ms late, claims 300 ms ahead 126 ms). The scan comes back in time for the next
    /// such task ([`crate::store::Claimed::bounded_next`]). Never more than the window.
    pub fn bounded_window_ms(&self) -> i64 {
        BOUNDED_LEAD_MS.min(self.window_ms)
    }

    /// When a scan should run for a limited job's task due at `due`: half the bounded
    /// window before, so that each scan claims half a window's tasks, each between a half
    /// and a whole window ahead (coming back the moment the next one entered the window
    /// ran the scans back to back under a steady stream).
    pub fn limited_scan_by(&self, due: crate::model::Millis) -> crate::model::Millis {
        due - self.bounded_window_ms() / 2
    }

    pub fn new(database_url: impl Into<String>, secret: Secret) -> Self {
        Config {
            database_url: database_url.into(),
            node_name: "rota-1".into(),
            advertise_url: format!("http://{}", defaults::LISTEN),
            api_token: None,
            executor_secret: secret,
            window_ms: 5_000,
            scan_interval_ms: 1_000,
            scan_batch: 20_000,
            wheel_capacity: 200_000,
            misfire_threshold_ms: 5_000,
            fast_pool_size: defaults::FAST_POOL,
            slow_pool_size: defaults::SLOW_POOL,
            pool_queue: 1_024,
            slow_dispatch_ms: defaults::SLOW_DISPATCH_MS,
            slow_dispatch_count: defaults::SLOW_DISPATCH_COUNT,
            dispatch_timeout_ms: 3_000,
            node_dead_after_ms: defaults::NODE_DEAD_AFTER_MS,
            max_clock_offset_ms: defaults::MAX_CLOCK_OFFSET_MS,
            heartbeat_interval_ms: rota_proto::wire::DEFAULT_HEARTBEAT_INTERVAL_MS,
            executor_dead_after_ms: defaults::EXECUTOR_DEAD_AFTER_MS,
            xxl_context_path: defaults::XXL_CONTEXT_PATH.into(),
            executors_die_with_node: false,
            retention_ms: 7 * 24 * 3600 * 1000,
            max_payload_bytes: defaults::MAX_PAYLOAD_BYTES,
            max_body_bytes: 32 * 1024 * 1024,
            max_plugin_bytes: 32 * 1024 * 1024,
            admin_password: None,
            secrets_key: None,
            tls: rota_net::Tls::default(),
            smtp_url: None,
            alarm_from: defaults::ALARM_FROM.into(),
            egress: rota_net::egress::Policy::default(),
            engine: None,
            traces: false,
            ldap: None,
            oidc: None,
            sso_rules: Vec::new(),
            sso_only: false,
            ldap_recheck_ms: defaults::LDAP_RECHECK_MS,
            oidc_max_age_ms: defaults::OIDC_MAX_AGE_MS,
        }
    }

    /// The interval executors are told to heartbeat at: [`Config::heartbeat_interval_ms`],
    /// or a third of [`Config::executor_dead_after_ms`] when that is sooner, so that a
    /// node set to declare executors dead early never declares a beating one dead.
    pub fn executor_heartbeat_ms(&self) -> i64 {
        self.heartbeat_interval_ms
            .min(self.executor_dead_after_ms / 3)
            .max(50)
    }

    /// A configuration for tests: SQLite at `database_url`, token `test-token`, secret
    /// `test-secret`.
    pub fn for_tests(database_url: impl Into<String>) -> Self {
        let mut c = Config::new(database_url, Secret::new("test-secret"));
        c.api_token = Some("test-token".into());
        c
    }
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hidden = |set: bool| if set { Some("***") } else { None };
        f.debug_struct("Config")
            .field("database_url", &redact_url(&self.database_url))
            .field("node_name", &self.node_name)
            .field("advertise_url", &self.advertise_url)
            .field("api_token", &hidden(self.api_token.is_some()))
            .field("executor_secret", &self.executor_secret)
            .field("window_ms", &self.window_ms)
            .field("scan_interval_ms", &self.scan_interval_ms)
            .field("scan_batch", &self.scan_batch)
            .field("wheel_capacity", &self.wheel_capacity)
            .field("misfire_threshold_ms", &self.misfire_threshold_ms)
            .field("fast_pool_size", &self.fast_pool_size)
            .field("slow_pool_size", &self.slow_pool_size)
            .field("pool_queue", &self.pool_queue)
            .field("slow_dispatch_ms", &self.slow_dispatch_ms)
            .field("slow_dispatch_count", &self.slow_dispatch_count)
            .field("dispatch_timeout_ms", &self.dispatch_timeout_ms)
            .field("node_dead_after_ms", &self.node_dead_after_ms)
            .field("max_clock_offset_ms", &self.max_clock_offset_ms)
            .field("heartbeat_interval_ms", &self.heartbeat_interval_ms)
            .field("executor_dead_after_ms", &self.executor_dead_after_ms)
            .field("executors_die_with_node", &self.executors_die_with_node)
            .field("retention_ms", &self.retention_ms)
            .field("max_payload_bytes", &self.max_payload_bytes)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("max_plugin_bytes", &self.max_plugin_bytes)
            .field("admin_password", &hidden(self.admin_password.is_some()))
            .field("secrets_key", &hidden(self.secrets_key.is_some()))
            .field("tls", &self.tls)
            .field("egress", &self.egress.admin_rules())
            .field("engine", &self.engine.as_ref().map(|_| "shared"))
            .field("traces", &self.traces)
            .field("ldap", &self.ldap)
            .field("oidc", &self.oidc)
            .field("sso_rules", &self.sso_rules)
            .field("sso_only", &self.sso_only)
            .field("ldap_recheck_ms", &self.ldap_recheck_ms)
            .field("oidc_max_age_ms", &self.oidc_max_age_ms)
            .finish()
    }
}

/// A database URL without its password (`mysql://rota:***@db/rota`); one that does not
/// parse but may hold credentials is not shown at all.
/// `url` with its password, if any, shown as `***` (a multi-host URL too, which is not a
/// URL to the `url` crate).
pub(crate) fn redact_url(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) if u.password().is_some() => {
            let _ = u.set_password(Some("***"));
            u.to_string()
        }
        Ok(_) => url.to_owned(),
        Err(_) => {
            let Some((scheme, rest)) = url.split_once("://") else {
                return if url.contains('@') {
                    "(an unreadable URL with credentials)".to_owned()
                } else {
                    url.to_owned()
                };
            };
            let end = rest.find(['/', '?']).unwrap_or(rest.len());
            match rest[..end].rfind('@') {
                Some(at) => {
                    let user = rest[..at].split(':').next().unwrap_or("");
                    let shown = if rest[..at].contains(':') {
                        format!("{user}:***")
                    } else {
                        user.to_owned()
                    };
                    format!("{scheme}://{shown}{}", &rest[at..])
                }
                None => url.to_owned(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_shows_no_secret() {
        let mut c = Config::new(
            "mysql://rota:db-password-1@db:3306/rota",
            Secret::new("master-secret-value"),
        );
        c.api_token = Some("api-token-value".into());
        c.admin_password = Some("admin-password-value".into());
        c.secrets_key = Some([7; 32]);
        let shown = format!("{c:?}");
        for secret in [
            "db-password-1",
            "master-secret-value",
            "api-token-value",
            "admin-password-value",
            "[7, 7",
        ] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
        assert!(shown.contains("mysql://rota:***@db:3306/rota"), "{shown}");
        assert!(shown.contains("api_token: Some(\"***\")"), "{shown}");
        c.database_url = "mysql://rota:pa ss@@db".into();
        assert!(!format!("{c:?}").contains("pa ss"));
    }

    #[test]
    fn executors_beat_three_times_within_dead_after() {
        let mut c = Config::for_tests("sqlite::memory:");
        assert_eq!(c.executor_heartbeat_ms(), 30_000, "the default, under 90 s");
        c.executor_dead_after_ms = 3_000;
        assert_eq!(c.executor_heartbeat_ms(), 1_000);
        c.executor_dead_after_ms = 60;
        assert_eq!(c.executor_heartbeat_ms(), 50, "never below 50 ms");
    }
}
