//! The command line: subcommands, their flags and environment variables.
// The flags' doc comments are their `--help` text, written for a terminal, not rustdoc:
// `<listen>` and `[::1]` there are words, not HTML or links.
#![allow(rustdoc::broken_intra_doc_links, rustdoc::invalid_html_tags)]

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Parser, Subcommand, ValueEnum};
use rota_proto::Secret;
use rota_scheduler::Config;
use rota_scheduler::config::defaults;
use tokio::net::TcpListener;

use crate::cmd::{ConfigArgs, JobArgs, QueueArgs, TaskArgs, WorkflowArgs};

#[derive(Parser)]
#[command(
    name = "rota",
    version,
    about = "Rota: a distributed job scheduler and delay queue with WebAssembly job handlers"
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a scheduler node (scan, wheel, dispatch, REST API) against MySQL or SQLite.
    Server(ServerArgs),
    /// Add, read, list, cancel and re-drive delayed tasks on a running scheduler.
    Task(TaskArgs),
    /// Jobs: backfill a recurring job's fire times in a range.
    Job(JobArgs),
    /// Consume a `pull` job's tasks: pull them with a lease, then ack, nack or extend.
    Queue(QueueArgs),
    /// Define workflows from a file, start instances (and wait for them), show them.
    Workflow(WorkflowArgs),
    /// Bring another scheduler's jobs over: `xxl-job` reads an XXL-JOB admin's database.
    Import(crate::cmd::ImportArgs),
    /// Run everything in one process: a scheduler node, the REST API and an embedded
    /// executor, on SQLite under --data-dir.
    Standalone(crate::nodes::StandaloneArgs),
    /// Run an executor node that registers with the scheduler(s) and runs their triggers.
    Executor(crate::nodes::ExecutorArgs),
    /// Print the key of an app's executors, derived from the master secret
    /// (ROTA_EXECUTOR_SECRET of the scheduler nodes): give it to that app's executors as
    /// their ROTA_EXECUTOR_SECRET. It lets them act for that app only.
    AppKey(AppKeyArgs),
    /// Write the jobs, workflows, alarm rules, plugin bindings and secret names of the
    /// token's apps as a YAML document (jobs as code).
    Export(crate::cmd::ExportArgs),
    /// Make a node hold what a document says: checked whole first, plugins uploaded from
    /// their paths, all or nothing; --dry-run prints the plan, --prune deletes the rest.
    Apply(crate::cmd::ApplyArgs),
    /// Config files: check one, show a command's effective settings, print an example.
    Config(ConfigArgs),
    /// Plugin tools.
    Plugin {
        #[command(subcommand)]
        command: PluginCommand,
    },
}

#[derive(Subcommand)]
enum PluginCommand {
    /// Run a plugin once, locally, in the same sandbox, and print its log and exit status.
    Run(crate::nodes::PluginRunArgs),
}

/// TLS, for the node's own listener and for whom its clients trust.
#[derive(Args)]
#[command(next_help_heading = "TLS")]
pub struct TlsArgs {
    /// PEM certificate chain: serve HTTPS instead of plain HTTP (needs --tls-key).
    #[arg(long, env = "ROTA_TLS_CERT")]
    tls_cert: Option<std::path::PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, env = "ROTA_TLS_KEY")]
    tls_key: Option<std::path::PathBuf>,
    /// PEM bundle of CAs to trust besides the system's: the private CA of HTTPS schedulers,
    /// executors, and the services plugins call.
    #[arg(long, env = "ROTA_TLS_CA")]
    tls_ca: Option<std::path::PathBuf>,
}

impl TlsArgs {
    pub fn load(&self) -> anyhow::Result<rota_net::Tls> {
        rota_net::Tls::load(
            self.tls_cert.as_deref(),
            self.tls_key.as_deref(),
            self.tls_ca.as_deref(),
        )
    }
}

/// What every long-running process (`server`, `executor`, `standalone`) takes besides its
/// own settings.
#[derive(Args)]
#[command(next_help_heading = "Process")]
pub struct ProcessArgs {
    /// A TOML file of this command's settings: each key is a flag's long name (`listen`,
    /// `database-url`), at the top level or in a `[server]`, `[executor]` or `[standalone]`
    /// table. A flag given beats its environment variable, which beats the file, which
    /// beats the default. `rota config example` prints every key.
    #[arg(long, env = "ROTA_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,
    /// How log lines are written to stderr: `text` for people, `json` (one object per line)
    /// for a log pipeline.
    #[arg(long, env = "ROTA_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

/// The format of the process's log lines.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Where email alarms go out from (a scheduler node's own setting, not a channel's).
#[derive(Args)]
#[command(next_help_heading = "Alarms")]
pub struct AlarmArgs {
    /// The SMTP server of email alarm channels: `smtp://user:pass@host:587?tls=required`
    /// for STARTTLS, `smtps://…` for TLS. Without it email channels fail saying so.
    #[arg(long, env = "ROTA_SMTP_URL", hide_env_values = true)]
    smtp_url: Option<String>,
    /// The sender of email alarms.
    #[arg(long, env = "ROTA_ALARM_FROM", default_value = defaults::ALARM_FROM)]
    alarm_from: String,
}

impl AlarmArgs {
    pub fn apply(&self, config: &mut Config) {
        config.smtp_url = self.smtp_url.clone().filter(|u| !u.is_empty());
        config.alarm_from = self.alarm_from.clone();
    }
}

/// Console sign-in through the company's directory (SPEC §14).
#[derive(Args)]
#[command(next_help_heading = "Sign-in")]
pub struct SsoArgs {
    /// The LDAP directory users sign in with: `ldaps://ldap.corp:636`, or `ldap://…` with
    /// --ldap-start-tls (plain `ldap://` only to a loopback address). Certificates are
    /// checked against the system's roots and --tls-ca.
    #[arg(long, env = "ROTA_LDAP_URL")]
    ldap_url: Option<String>,
    /// Upgrade the `ldap://` connection with StartTLS before anything is sent.
    #[arg(long, env = "ROTA_LDAP_START_TLS")]
    ldap_start_tls: bool,
    /// The node's own DN, to search for users and groups.
    #[arg(long, env = "ROTA_LDAP_BIND_DN", default_value = "")]
    ldap_bind_dn: String,
    /// The password of --ldap-bind-dn (never logged).
    #[arg(
        long,
        env = "ROTA_LDAP_BIND_PASSWORD",
        hide_env_values = true,
        default_value = ""
    )]
    ldap_bind_password: String,
    /// Where users are searched: `ou=people,dc=corp,dc=example`.
    #[arg(long, env = "ROTA_LDAP_USER_BASE")]
    ldap_user_base: Option<String>,
    /// The filter finding the user who signs in; `{user}` is the name typed (escaped).
    #[arg(long, env = "ROTA_LDAP_USER_FILTER", default_value = "(uid={user})")]
    ldap_user_filter: String,
    /// Where groups are searched; without it a user's groups are its `memberOf` values.
    #[arg(long, env = "ROTA_LDAP_GROUP_BASE")]
    ldap_group_base: Option<String>,
    /// The filter finding a user's groups under --ldap-group-base; `{dn}` is the user's
    /// DN, `{user}` the name typed.
    #[arg(long, env = "ROTA_LDAP_GROUP_FILTER", default_value = "(member={dn})")]
    ldap_group_filter: String,
    /// The OpenID provider users sign in with (the authorization-code flow with PKCE): its
    /// issuer URL, whose `/.well-known/openid-configuration` names the same issuer —
    /// `https://id.corp.example/realms/main` (http:// only on a loopback address).
    #[arg(long, env = "ROTA_OIDC_ISSUER")]
    oidc_issuer: Option<String>,
    /// The client registered with the provider for this console.
    #[arg(long, env = "ROTA_OIDC_CLIENT_ID")]
    oidc_client_id: Option<String>,
    /// Its secret (never logged); empty for a public client.
    #[arg(
        long,
        env = "ROTA_OIDC_CLIENT_SECRET",
        hide_env_values = true,
        default_value = ""
    )]
    oidc_client_secret: String,
    /// Where the provider sends the browser back, as registered with it: this console's
    /// `/login/oidc/callback` — `https://rota.corp.example/login/oidc/callback`.
    #[arg(long, env = "ROTA_OIDC_REDIRECT_URL")]
    oidc_redirect_url: Option<String>,
    /// Scopes asked for besides `openid` (comma-separated).
    #[arg(
        long,
        env = "ROTA_OIDC_SCOPES",
        value_delimiter = ',',
        default_values = ["profile", "email"]
    )]
    oidc_scopes: Vec<String>,
    /// The ID token's claim listing the user's groups, which --sso-map maps.
    #[arg(long, env = "ROTA_OIDC_GROUPS_CLAIM", default_value = "groups")]
    oidc_groups_claim: String,
    /// How long (ms) after a provider user's last sign-in its API tokens act for it: a
    /// provider cannot be asked between sign-ins, so after this long they may do nothing
    /// until the user signs in again (and the provider vouches for them anew).
    #[arg(long, env = "ROTA_OIDC_MAX_AGE_MS", default_value_t = defaults::OIDC_MAX_AGE_MS,
          value_parser = clap::value_parser!(i64).range(60_000..=31_536_000_000))]
    oidc_max_age_ms: i64,
    /// What the login page's button names the provider: "Sign in with LABEL".
    #[arg(long, env = "ROTA_OIDC_LABEL", default_value = "single sign-on")]
    oidc_label: String,
    /// What a directory's or a provider's group gives its members: `GROUP=ROLE` (every app)
    /// or `GROUP=ROLE:APP,APP` — `ops=operator:orders,billing`, `platform=admin`. GROUP is a
    /// group's name (an LDAP cn or DN, a value of the OIDC groups claim). The highest role of a user's groups wins, with the apps of
    /// the rules that give it; a user in no mapped group cannot sign in. Repeat the flag.
    #[arg(long = "sso-map", env = "ROTA_SSO_MAP", value_delimiter = ';')]
    sso_map: Vec<String>,
    /// How long (ms) what the directory said of a user's groups holds for the user's API
    /// tokens: the first use after that asks it again, so a token stops acting for someone
    /// who left a group within this long.
    #[arg(long, env = "ROTA_LDAP_RECHECK_MS", default_value_t = defaults::LDAP_RECHECK_MS,
          value_parser = clap::value_parser!(i64).range(0..=86_400_000))]
    ldap_recheck_ms: i64,
    /// Only directory or provider users may sign in to the console: local users (the
    /// seeded `admin` too) may not. Their API tokens still work.
    #[arg(long, env = "ROTA_SSO_ONLY")]
    sso_only: bool,
}

/// The node's sign-in settings, checked ([`SsoArgs::settings`]).
pub struct Sso {
    pub ldap: Option<rota_scheduler::sso::ldap::Settings>,
    pub oidc: Option<rota_scheduler::sso::oidc::Settings>,
    pub rules: Vec<rota_scheduler::sso::Rule>,
}

impl SsoArgs {
    /// The directory's and the provider's settings and the rules, or every mistake in them,
    /// each naming its flag; `Ok(None)` with neither.
    pub fn settings(&self) -> Result<Option<Sso>, Vec<String>> {
        let mut wrong = Vec::new();
        let rules: Vec<rota_scheduler::sso::Rule> = self
            .sso_map
            .iter()
            .filter_map(|r| {
                rota_scheduler::sso::Rule::parse(r)
                    .map_err(|e| wrong.push(format!("--sso-map {e}")))
                    .ok()
            })
            .collect();
        let ldap = self
            .ldap_url
            .as_deref()
            .filter(|u| !u.is_empty())
            .map(|url| rota_scheduler::sso::ldap::Settings {
                url: url.to_owned(),
                start_tls: self.ldap_start_tls,
                bind_dn: self.ldap_bind_dn.clone(),
                bind_password: self.ldap_bind_password.clone(),
                user_base: self.ldap_user_base.clone().unwrap_or_default(),
                user_filter: self.ldap_user_filter.clone(),
                group_base: self.ldap_group_base.clone().filter(|b| !b.is_empty()),
                group_filter: self.ldap_group_filter.clone(),
            });
        let oidc = self
            .oidc_issuer
            .as_deref()
            .filter(|u| !u.is_empty())
            .map(|issuer| rota_scheduler::sso::oidc::Settings {
                issuer: issuer.to_owned(),
                client_id: self.oidc_client_id.clone().unwrap_or_default(),
                client_secret: self.oidc_client_secret.clone(),
                scopes: self
                    .oidc_scopes
                    .iter()
                    .map(|s| s.trim().to_owned())
                    .filter(|s| !s.is_empty() && s != "openid")
                    .collect(),
                groups_claim: self.oidc_groups_claim.clone(),
                redirect_url: self.oidc_redirect_url.clone().unwrap_or_default(),
                label: self.oidc_label.clone(),
            });
        if ldap.is_none() && oidc.is_none() {
            if !self.sso_map.is_empty() || self.sso_only {
                wrong.push(
                    "--sso-map and --sso-only need a directory or a provider: set --ldap-url \
                     or --oidc-issuer"
                        .into(),
                );
            }
            return if wrong.is_empty() {
                Ok(None)
            } else {
                Err(wrong)
            };
        }
        if let Some(ldap) = &ldap {
            wrong.extend(ldap.check());
        }
        if let Some(oidc) = &oidc {
            wrong.extend(oidc.check());
        }
        if self.sso_map.is_empty() {
            wrong.push(
                "--sso-map: no group gives access, so no directory or provider user could \
                 sign in (e.g. --sso-map ops=operator:orders)"
                    .to_owned(),
            );
        }
        if wrong.is_empty() {
            Ok(Some(Sso { ldap, oidc, rules }))
        } else {
            Err(wrong)
        }
    }

    /// Sets the node's sign-in settings. Mistakes in them turn sign-in through the directory
    /// and the provider off, not the node: it starts with local sign-in (so the `admin` can
    /// get in and fix them) and says why — unless local sign-in is to be off (`--sso-only`),
    /// when it does not start. `rota config check` names the same mistakes.
    pub fn apply(&self, config: &mut Config) -> anyhow::Result<()> {
        match self.settings() {
            Ok(None) => {}
            Ok(Some(sso)) => {
                config.ldap = sso.ldap;
                config.oidc = sso.oidc;
                config.sso_rules = sso.rules;
                config.sso_only = self.sso_only;
                config.ldap_recheck_ms = self.ldap_recheck_ms;
                config.oidc_max_age_ms = self.oidc_max_age_ms;
            }
            Err(wrong) if self.sso_only => anyhow::bail!(
                "--sso-only, but sign-in through the directory or the provider cannot work: {}",
                wrong.join("; ")
            ),
            Err(wrong) => tracing::error!(
                mistakes = %wrong.join("; "),
                "sign-in through the directory and the provider is off: its settings are \
                 wrong; local users sign in as before"
            ),
        }
        Ok(())
    }
}

/// The egress policy: where jobs' HTTP — webhook deliveries, alarm channels, plugins'
/// requests — may connect, whatever a job's `http_allow` says.
#[derive(Args)]
#[command(next_help_heading = "Egress")]
pub struct EgressArgs {
    /// Open a destination the policy denies (loopback, link-local, metadata, unspecified,
    /// multicast are denied by default): an address or range, with a port if it should be
    /// that port alone (127.0.0.1:18282, 169.254.0.0/16, [::1]:8080), or a host name
    /// (hooks.corp.example, *.corp.example:443). Repeat, or separate with commas. The most
    /// specific rule decides; the node's own ports and its database stay denied.
    #[arg(
        long = "egress-allow",
        env = "ROTA_EGRESS_ALLOW",
        value_delimiter = ','
    )]
    egress_allow: Vec<String>,
    /// Close a destination the policy allows (private ranges are allowed by default):
    /// 10.0.0.0/8, 192.168.0.0/16, *.internal, db.corp.example:5432. Repeat, or separate
    /// with commas.
    #[arg(long = "egress-deny", env = "ROTA_EGRESS_DENY", value_delimiter = ',')]
    egress_deny: Vec<String>,
}

impl EgressArgs {
    pub fn policy(&self) -> anyhow::Result<rota_net::egress::Policy> {
        rota_net::egress::Policy::new(&self.egress_allow, &self.egress_deny)
            .map_err(anyhow::Error::msg)
    }
}

#[derive(Args)]
struct AppKeyArgs {
    /// The app whose key to print.
    #[arg(long)]
    app: String,
    /// The scheduler nodes' master secret.
    #[arg(long, env = "ROTA_EXECUTOR_SECRET", hide_env_values = true)]
    executor_secret: String,
}

#[derive(Args)]
struct ServerArgs {
    /// `mysql://user:pass@host:3306/db` or `sqlite:path/to/rota.db`. Several hosts
    /// (`mysql://user:pass@db1:3306,db2:3306,db3:3306/db`) name the members of one cluster
    /// (Galera): the node uses the first ready one and moves on when it fails.
    #[arg(long, env = "ROTA_DATABASE_URL")]
    database_url: String,
    /// Address to listen on.
    #[arg(long, env = "ROTA_LISTEN", default_value = defaults::LISTEN)]
    listen: SocketAddr,
    /// This node's stable name; defaults to <hostname>:<port>.
    #[arg(long, env = "ROTA_NODE_NAME")]
    node_name: Option<String>,
    /// URL executors and other nodes reach this node at; defaults to http://<listen>.
    #[arg(long, env = "ROTA_ADVERTISE_URL")]
    advertise_url: Option<String>,
    /// Password of the console's `admin` user, set at its creation (first start); without it
    /// a random one is generated and logged once.
    #[arg(long, env = "ROTA_ADMIN_PASSWORD", hide_env_values = true)]
    admin_password: Option<String>,
    /// Admin API bearer token.
    #[arg(long, env = "ROTA_API_TOKEN", hide_env_values = true)]
    api_token: Option<String>,
    /// The master secret (required, 16 characters or more, the same on every node): signs
    /// calls between scheduler nodes, and each app's executor key is derived from it
    /// (`rota app-key`).
    #[arg(long, env = "ROTA_EXECUTOR_SECRET", hide_env_values = true)]
    executor_secret: String,
    /// Key sealing plugin secrets at rest: 64 hex digits, the same on every node. Without
    /// it the key is derived from the executor secret.
    #[arg(long, env = "ROTA_SECRETS_KEY", hide_env_values = true)]
    secrets_key: Option<String>,
    /// Concurrent dispatches of the fast pool.
    #[arg(long, env = "ROTA_FAST_POOL", default_value_t = defaults::FAST_POOL)]
    fast_pool: usize,
    /// Concurrent dispatches of the slow pool.
    #[arg(long, env = "ROTA_SLOW_POOL", default_value_t = defaults::SLOW_POOL)]
    slow_pool: usize,
    /// A dispatch slower than this (ms) counts against its job.
    #[arg(long, env = "ROTA_SLOW_DISPATCH_MS", default_value_t = defaults::SLOW_DISPATCH_MS)]
    slow_dispatch_ms: u64,
    /// Slow dispatches per minute after which a job moves to the slow pool.
    #[arg(long, env = "ROTA_SLOW_DISPATCH_COUNT", default_value_t = defaults::SLOW_DISPATCH_COUNT)]
    slow_dispatch_count: u32,
    /// Other scheduler nodes take this one's claims over after this long without its
    /// heartbeat (ms); it stops firing at half of it. Raise it where nodes can pause longer.
    #[arg(long, env = "ROTA_NODE_DEAD_AFTER_MS", default_value_t = defaults::NODE_DEAD_AFTER_MS,
          value_parser = clap::value_parser!(i64).range(600..=600_000))]
    node_dead_after_ms: i64,
    /// A clock further than this (ms) off the database's is a warning on `/readyz` (still
    /// 200: every node's times are corrected by the measured offset), in the log and as a
    /// `clock_skew` alarm.
    #[arg(long, env = "ROTA_MAX_CLOCK_OFFSET_MS", default_value_t = defaults::MAX_CLOCK_OFFSET_MS,
          value_parser = clap::value_parser!(i64).range(1..=3_600_000))]
    max_clock_offset_ms: i64,
    /// Executors are dead after this long without a heartbeat (ms); they are told to beat
    /// every 30 s, or a third of this when that is sooner.
    #[arg(long, env = "ROTA_EXECUTOR_DEAD_AFTER_MS", default_value_t = defaults::EXECUTOR_DEAD_AFTER_MS)]
    executor_dead_after_ms: i64,
    /// Largest task payload accepted (bytes).
    #[arg(long, env = "ROTA_MAX_PAYLOAD_BYTES", default_value_t = defaults::MAX_PAYLOAD_BYTES)]
    max_payload_bytes: usize,
    #[command(flatten)]
    pub(crate) tls: TlsArgs,
    #[command(flatten)]
    egress: EgressArgs,
    #[command(flatten)]
    xxl: XxlArgs,
    #[command(flatten)]
    alarms: AlarmArgs,
    #[command(flatten)]
    sso: SsoArgs,
    #[command(flatten)]
    process: ProcessArgs,
}

/// Where XXL-JOB executors find this node's admin API (SPEC §13).
#[derive(Args)]
#[command(next_help_heading = "XXL-JOB executors")]
pub struct XxlArgs {
    /// The path XXL-JOB executors' `xxl.job.admin.addresses` end with after this node's
    /// URL (xxl-job-admin 2.x's default; `/` for 3.x's root): they call
    /// `{path}/api/registry`, `/api/registryRemove` and `/api/callback` there.
    #[arg(long, env = "ROTA_XXL_CONTEXT_PATH", default_value = defaults::XXL_CONTEXT_PATH)]
    xxl_context_path: String,
}

impl XxlArgs {
    /// The context path, checked: `/`, or `/` and segments without a trailing slash.
    pub fn context_path(&self) -> anyhow::Result<String> {
        let path = self.xxl_context_path.trim();
        let segments_ok = path.split('/').skip(1).all(|s| {
            !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        });
        match path {
            "/" => Ok(String::new()),
            p if p.starts_with('/') && segments_ok => Ok(p.to_owned()),
            p => anyhow::bail!(
                "--xxl-context-path `{p}`: expected `/` or a path such as `/xxl-job-admin` \
                 (letters, digits, `-`, `_`, `.`; no trailing slash)"
            ),
        }
    }
}

impl ServerArgs {
    fn config(&self) -> anyhow::Result<Config> {
        if self.executor_secret.len() < 16 {
            anyhow::bail!("ROTA_EXECUTOR_SECRET must be at least 16 characters");
        }
        let mut c = Config::new(
            self.database_url.clone(),
            Secret::new(self.executor_secret.as_bytes()),
        );
        self.alarms.apply(&mut c);
        self.sso.apply(&mut c)?;
        c.traces = crate::telemetry::enabled();
        c.node_name = self
            .node_name
            .clone()
            .unwrap_or_else(|| format!("{}:{}", hostname(), self.listen.port()));
        c.tls = self.tls.load()?;
        c.egress = self.egress.policy()?;
        c.advertise_url = self
            .advertise_url
            .clone()
            .unwrap_or_else(|| format!("{}://{}", c.tls.scheme(), self.listen));
        c.api_token = self.api_token.clone().filter(|t| !t.is_empty());
        c.admin_password = self.admin_password.clone().filter(|p| !p.is_empty());
        c.fast_pool_size = self.fast_pool;
        c.slow_pool_size = self.slow_pool;
        c.slow_dispatch_ms = self.slow_dispatch_ms;
        c.slow_dispatch_count = self.slow_dispatch_count;
        c.executor_dead_after_ms = self.executor_dead_after_ms;
        c.max_clock_offset_ms = self.max_clock_offset_ms;
        c.node_dead_after_ms = self.node_dead_after_ms;
        c.max_payload_bytes = self.max_payload_bytes;
        c.xxl_context_path = self.xxl.context_path()?;
        if let Some(key) = self.secrets_key.as_deref().filter(|k| !k.is_empty()) {
            c.secrets_key = Some(
                rota_scheduler::secrets::SecretBox::parse_key(key)
                    .map_err(|e| anyhow::anyhow!("ROTA_SECRETS_KEY: {e}"))?,
            );
        }
        Ok(c)
    }
}

impl Cli {
    /// Mistakes in the settings a node checks only as a whole (directory sign-in), each
    /// naming its flag: `rota config check` reports them as the node would log them.
    pub fn whole_setting_mistakes(&self) -> Vec<String> {
        let sso = match &self.command {
            Command::Server(a) => &a.sso,
            Command::Standalone(a) => &a.sso,
            _ => return Vec::new(),
        };
        sso.settings().err().unwrap_or_default()
    }

    /// Whether the services the settings name answer as they should: the OpenID provider's
    /// discovery document and keys are read (a provider that is down, or names another
    /// issuer, is a mistake naming --oidc-issuer). `rota config check` asks; a node starts
    /// either way and logs the same.
    pub fn unanswered_services(&self) -> Vec<String> {
        // A standalone node trusts the system's roots alone.
        let (sso, tls) = match &self.command {
            Command::Server(a) => (&a.sso, Some(&a.tls)),
            Command::Standalone(a) => (&a.sso, None),
            _ => return Vec::new(),
        };
        let Ok(Some(crate::cli::Sso {
            oidc: Some(settings),
            ..
        })) = sso.settings()
        else {
            return Vec::new();
        };
        let issuer = settings.issuer.clone();
        let probe = async move {
            let tls = match tls {
                Some(tls) => tls.load()?,
                None => rota_net::Tls::default(),
            }
            .client_config()?;
            let provider = rota_scheduler::sso::oidc::Provider::new(
                settings,
                std::sync::Arc::unwrap_or_clone(tls),
            )?;
            provider.probe().await.map_err(anyhow::Error::from)
        };
        // `rota config` runs on the process's (multi-threaded) runtime.
        let answered =
            tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(probe));
        match answered {
            Ok(()) => Vec::new(),
            Err(e) => vec![format!("--oidc-issuer `{issuer}`: {e:#}")],
        }
    }

    /// The name the process's traces carry: the long-running commands trace, the others
    /// (clients of a node) do not.
    pub fn service_name(&self) -> Option<&'static str> {
        match &self.command {
            Command::Server(_) => Some("rota-server"),
            Command::Standalone(_) => Some("rota-standalone"),
            Command::Executor(_) => Some("rota-executor"),
            _ => None,
        }
    }

    /// The async runtime's worker threads, where the command sets them (else tokio's
    /// default: one per core).
    pub fn async_threads(&self) -> Option<usize> {
        match &self.command {
            Command::Executor(a) => Some(a.async_threads()),
            _ => None,
        }
    }

    /// How the process logs: its `--log-format`, or text for the commands without one.
    pub fn log_format(&self) -> LogFormat {
        match &self.command {
            Command::Server(a) => a.process.log_format,
            Command::Standalone(a) => a.process.log_format,
            Command::Executor(a) => a.process.log_format,
            _ => LogFormat::Text,
        }
    }

    pub async fn run(self) -> anyhow::Result<()> {
        match self.command {
            Command::Server(args) => {
                let config = args.config()?;
                let listener = TcpListener::bind(args.listen)
                    .await
                    .with_context(|| format!("listening on {}", args.listen))?;
                tracing::info!(listen = %args.listen, "rota server listening");
                rota_scheduler::run(config, listener, shutdown_signal()).await
            }
            Command::Task(args) => args.run().await,
            Command::Job(args) => args.run().await,
            Command::Queue(args) => args.run().await,
            Command::Workflow(args) => args.run().await,
            Command::Import(args) => args.run().await,
            Command::Config(args) => args.run(),
            Command::Export(args) => args.run().await,
            Command::Apply(args) => args.run().await,
            Command::Standalone(args) => crate::nodes::standalone(args, shutdown_signal()).await,
            Command::Executor(args) => crate::nodes::executor(args, shutdown_signal()).await,
            Command::AppKey(args) => {
                if args.executor_secret.len() < 16 {
                    anyhow::bail!("ROTA_EXECUTOR_SECRET must be at least 16 characters");
                }
                rota_scheduler::api::validate::app("app", &args.app)
                    .map_err(|e| anyhow::anyhow!("--app: {e}"))?;
                let master = Secret::new(args.executor_secret.as_bytes());
                let key = rota_proto::app_secret(&master, &args.app);
                println!("{}", String::from_utf8_lossy(key.as_bytes()));
                Ok(())
            }
            Command::Plugin {
                command: PluginCommand::Run(args),
            } => {
                let code =
                    tokio::task::spawn_blocking(move || crate::nodes::plugin_run(args)).await??;
                if code != 0 {
                    std::process::exit(code);
                }
                Ok(())
            }
        }
    }
}

/// This machine's name, for the default node name (two hosts listening on 0.0.0.0:8080 must
/// not share one).
fn hostname() -> String {
    std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".into())
}

/// Completes on SIGINT or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}
