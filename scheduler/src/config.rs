//! A scheduler node's settings. The `rota` binary fills this from flags, environment and an
//! optional TOML file; tests build it with [`Config::for_tests`].

use rota_proto::Secret;

#[derive(Debug, Clone)]
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
    pub max_plugin_bytes: usize,

    /// The console's `admin` password, set at first start (`ROTA_ADMIN_PASSWORD`); `None`
    /// generates one and logs it once.
    pub admin_password: Option<String>,
    /// The key sealing plugin secrets at rest (`ROTA_SECRETS_KEY`); `None` derives one from
    /// the executor secret (`crate::secrets`).
    pub secrets_key: Option<[u8; 32]>,
}

impl Config {
    pub fn new(database_url: impl Into<String>, secret: Secret) -> Self {
        Config {
            database_url: database_url.into(),
            node_name: "rota-1".into(),
            advertise_url: "http://127.0.0.1:8080".into(),
            api_token: None,
            executor_secret: secret,
            window_ms: 5_000,
            scan_interval_ms: 1_000,
            scan_batch: 20_000,
            wheel_capacity: 200_000,
            misfire_threshold_ms: 5_000,
            fast_pool_size: 64,
            slow_pool_size: 16,
            pool_queue: 1_024,
            slow_dispatch_ms: 500,
            slow_dispatch_count: 10,
            dispatch_timeout_ms: 3_000,
            node_dead_after_ms: 3_000,
            heartbeat_interval_ms: rota_proto::wire::DEFAULT_HEARTBEAT_INTERVAL_MS,
            executor_dead_after_ms: rota_proto::wire::DEFAULT_EXECUTOR_DEAD_AFTER_MS,
            executors_die_with_node: false,
            retention_ms: 7 * 24 * 3600 * 1000,
            max_payload_bytes: 64 * 1024,
            max_body_bytes: 32 * 1024 * 1024,
            max_plugin_bytes: 32 * 1024 * 1024,
            admin_password: None,
            secrets_key: None,
        }
    }

    /// A configuration for tests: SQLite at `database_url`, token `test-token`, secret
    /// `test-secret`.
    pub fn for_tests(database_url: impl Into<String>) -> Self {
        let mut c = Config::new(database_url, Secret::new("test-secret"));
        c.api_token = Some("test-token".into());
        c
    }
}
