//! Jobs: the checks every way of making or changing one goes through (the REST API and
//! the console accept exactly the same jobs), and finding one by id or name with the
//! caller's permission.

use std::collections::HashSet;
use std::ops::RangeInclusive;
use std::str::FromStr;

use rota_proto::BlockStrategy;
use serde::Deserialize;
use utoipa::ToSchema;

use super::fields::{NameOrId, nullable};
use super::validate::{self, invalid, missing};
use super::{Error, Result};
use crate::access::{Need, Principal};
use crate::backoff::Backoff;
use crate::limits::{MAX_RATE, MAX_RATE_WINDOW_MS, RateLimit};
use crate::model::{BlockName, Delivery, Job, JobSpec, NewTask, Page, Run, Task, TaskKind};
use crate::ports::Ports;
use crate::route::Route;
use crate::schedule::{CompiledSchedule, Misfire, Schedule};
use crate::store::{self, Store};

pub const DEFAULT_TIMEOUT_MS: i64 = 300_000;
pub const MAX_TIMEOUT_MS: i64 = 86_400_000;
const DEFAULT_MAX_ATTEMPTS: i64 = 1;
pub const MAX_ATTEMPTS: i64 = 100;
pub const DEFAULT_MEMORY_MB: i64 = 64;
pub const MAX_MEMORY_MB: i64 = 4096;
pub const MAX_CONCURRENCY: i64 = 1_000_000;
/// The longest debounce: a week.
pub const MAX_DEBOUNCE_MS: i64 = 7 * 86_400_000;
pub const MAX_CHILD_JOBS: usize = 100;
pub const MAX_NO_EXECUTOR_TIMEOUT_MS: i64 = 7 * 86_400_000;
/// Longest one HTTP delivery may take.
pub const MAX_DELIVERY_TIMEOUT_MS: i64 = 300_000;

/// A job's settings as sent to `POST` (name, app, plugin and schedule required) or `PATCH`
/// (any subset, merged onto the stored job). Integers are read as `i64` so that an
/// out-of-range value is a 422 naming its range rather than a serde overflow.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct JobFields {
    /// Unique; any text up to 200 characters.
    name: Option<String>,
    /// The executor group that runs it.
    app: Option<String>,
    /// The plugin's name or id; runs use its latest version.
    plugin: Option<NameOrId>,
    schedule: Option<Schedule>,
    /// The runs' stdin, `ROTA_PARAMS` and argv; `null` clears them.
    #[serde(default, deserialize_with = "nullable")]
    params: Option<Option<String>>,
    /// `first` by default.
    #[schema(value_type = Option<Route>)]
    route: Option<String>,
    /// `serial` by default.
    #[schema(value_type = Option<BlockName>)]
    block: Option<String>,
    /// `do_nothing` by default.
    #[schema(value_type = Option<Misfire>)]
    misfire: Option<String>,
    /// 300,000 (5 minutes) by default.
    timeout_ms: Option<i64>,
    /// 1 to 100; 1 by default.
    max_attempts: Option<i64>,
    /// Exponential from 1 s, factor 2, at most an hour, by default.
    backoff: Option<Backoff>,
    /// 64 by default, up to the executor's cap.
    memory_mb: Option<i64>,
    /// Runs of this job at once across executors; `null` for no limit. The older spelling
    /// of `concurrency: {"limit": N}`.
    #[serde(default, deserialize_with = "nullable")]
    max_concurrency: Option<Option<i64>>,
    /// At most `limit` runs at once across every node and executor — of the whole job, or
    /// per value of `key`, a JSON Pointer into the task's payload (a missing value is its
    /// own bucket). A task over it waits as `throttled`, spending no attempt. `null`: no
    /// bound.
    #[serde(default, deserialize_with = "nullable")]
    concurrency: Option<Option<ConcurrencyField>>,
    /// At most `limit` run starts in any window of `per_ms`, of the whole job or per value
    /// of `key` (a JSON Pointer into the payload); a task over it is deferred to the
    /// earliest time it fits, as `throttled`, spending no attempt. `null`: no limit.
    #[serde(default, deserialize_with = "nullable")]
    rate_limit: Option<Option<RateLimit>>,
    /// With a task `key`: creating a task whose key a pending task of the job holds
    /// replaces that task's payload and moves its due time to the new one's, at most this
    /// long after the first of those creates (1 to 604,800,000 ms). `null`: keys
    /// deduplicate (a second create answers the first task).
    #[serde(default, deserialize_with = "nullable")]
    debounce_ms: Option<Option<i64>>,
    /// Jobs (names or ids) triggered after each successful run.
    child_jobs: Option<Vec<NameOrId>>,
    /// Where the plugin may send HTTP requests (the `rota` import `http_request`): origins
    /// such as `https://api.example.com` or URL prefixes such as
    /// `https://api.example.com/v1/orders`; at most 32. Empty (the default): no network.
    http_allow: Option<Vec<String>>,
    /// `true` by default; a disabled job does not fire on its schedule.
    enabled: Option<bool>,
    /// How long a fire waits for a live executor of the app before it fails as an attempt
    /// (1,000 to 604,800,000 ms); `null` for the default, 600,000 (10 minutes).
    #[serde(default, deserialize_with = "nullable")]
    no_executor_timeout_ms: Option<Option<i64>>,
    /// Who receives its fires: `{"kind":"wasm"}` (the default: its plugin runs on an
    /// executor), `{"kind":"pull"}` (consumers pull them; no plugin) or
    /// `{"kind":"http","url":…,"timeout_ms":…?,"signing_secret":…?}` (each is POSTed to
    /// `url`, which must be on `http_allow`; no plugin).
    delivery: Option<Delivery>,
}

/// A job's concurrency bound as sent (SPEC §11).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ConcurrencyField {
    /// A JSON Pointer (RFC 6901) into the payload, like `/customer`; absent: one bound for
    /// the whole job.
    key: Option<String>,
    /// 1 to 1,000,000.
    limit: i64,
}

/// Why `max_concurrency` and `concurrency` sent together and different are refused.
const DISAGREES: &str = r#"disagrees with `concurrency`; send one of them (`max_concurrency` is `concurrency: {"limit": N}`)"#;

/// A job named in a path: an integer is tried as an id first, then as a name (names are
/// any text, digits included).
pub async fn find_job(store: &Store, id_or_name: &str) -> Result<Job> {
    if let Ok(id) = id_or_name.parse::<i64>() {
        match store.get_job(id).await {
            Err(store::Error::NotFound(_)) => {}
            other => return Ok(other?),
        }
    }
    match store.get_job_by_name(id_or_name).await {
        Err(store::Error::NotFound(_)) => {
            Err(Error::NotFound(format!("job `{id_or_name}` not found")))
        }
        other => Ok(other?),
    }
}

/// Checks `who` against the job `job_id` of a task or run (`what` names it in a 404). A
/// principal scoped to no app needs no lookup; the job of a deleted job's task is in no
/// app a scoped user has.
pub async fn check_job(
    store: &Store,
    who: &Principal,
    job_id: i64,
    need: Need,
    what: &str,
) -> Result<()> {
    if who.app_filter().is_none() {
        return Ok(who.check("", need, what)?);
    }
    match store.get_job(job_id).await {
        Ok(job) => Ok(who.check(&job.spec.app, need, what)?),
        Err(store::Error::NotFound(_)) => Err(Error::NotFound(format!("{what} not found"))),
        Err(e) => Err(e.into()),
    }
}

/// Task `id`, if `who` may read (or change) it.
pub async fn task_as(store: &Store, who: &Principal, id: i64, need: Need) -> Result<Task> {
    let task = store.get_task(id).await?;
    check_job(store, who, task.job_id, need, &format!("task {id}")).await?;
    Ok(task)
}

/// Run `id`, if `who` may read (or change) it.
pub async fn run_as(store: &Store, who: &Principal, id: i64, need: Need) -> Result<Run> {
    let run = store.get_run(id).await?;
    check_job(store, who, run.job_id, need, &format!("run {id}")).await?;
    Ok(run)
}

/// The `job` filter of a list: an id is used as it is (so the tasks and runs of a deleted
/// job stay listable), a name must name an existing job.
pub async fn job_filter(store: &Store, job: Option<&str>) -> Result<Option<i64>> {
    match job.filter(|s| !s.is_empty()) {
        None => Ok(None),
        Some(job) => match job.parse::<i64>() {
            Ok(id) => Ok(Some(id)),
            Err(_) => Ok(Some(find_job(store, job).await?.id)),
        },
    }
}

/// A job referenced from a body (`job`, `child_jobs`): one that does not exist is a 404
/// about `field`.
pub async fn job_ref(store: &Store, field: &str, r: &NameOrId) -> Result<Job> {
    let found = match r {
        NameOrId::Id(id) => store.get_job(*id).await,
        NameOrId::Name(name) => store.get_job_by_name(name).await,
    };
    match found {
        Err(store::Error::NotFound(_)) => Err(missing(field, format!("job {r} does not exist"))),
        other => Ok(other?),
    }
}

/// Every field's problem with a job, in field order; converted to one [`Error`] (the
/// first one's status, every message) for the API, shown field by field in the console.
#[derive(Debug)]
pub struct SpecErrors(pub Vec<Error>);

impl From<SpecErrors> for Error {
    fn from(SpecErrors(errors): SpecErrors) -> Error {
        let message = errors
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ");
        match errors.into_iter().next() {
            Some(first) => first.with_message(message),
            None => Error::Internal(anyhow::anyhow!("a job was refused without a reason")),
        }
    }
}

/// Collects field errors: `take` keeps a value or files its error.
struct Collect(Vec<Error>);

impl Collect {
    fn take<T>(&mut self, r: Result<T>) -> Option<T> {
        r.map_err(|e| self.0.push(e)).ok()
    }

    fn check(&mut self, r: Result<impl Sized>) {
        self.take(r);
    }

    /// A field a new job must have: as sent, else the changed job's.
    fn required<T>(&mut self, field: &str, sent: Option<T>, old: Option<T>) -> Option<T> {
        self.take(sent.or(old).ok_or_else(|| {
            Error::BadRequest(format!(
                "missing field `{field}`: a new job needs `name`, `app`, `schedule` and, \
                 unless its delivery is `pull`, `plugin`"
            ))
        }))
    }

    /// The plugin's name: required (as sent, else the changed job's) when the delivery
    /// runs one; refused when it does not (stored empty).
    async fn plugin(
        &mut self,
        store: &Store,
        sent: Option<NameOrId>,
        old: Option<&JobSpec>,
        delivery: &Delivery,
        planned: &HashSet<String>,
    ) -> Option<String> {
        match (sent, delivery.runs_plugin()) {
            (Some(NameOrId::Name(name)), true) if planned.contains(&name) => Some(name),
            (Some(r), true) => self.take(plugin_ref(store, &r).await),
            // A change to a delivery that runs a plugin, of a job that had none: a 422
            // (the request is well formed; what it asks for needs more).
            (None, true) if old.is_some_and(|s| s.plugin.is_empty()) => self.take(Err(invalid(
                "plugin",
                format!(
                    "a job delivered by `{}` runs a plugin: name one with the new delivery",
                    delivery.kind()
                ),
            ))),
            (None, true) => self.required(
                "plugin",
                None,
                old.map(|s| s.plugin.clone()).filter(|p| !p.is_empty()),
            ),
            (Some(_), false) => self.take(Err(invalid(
                "plugin",
                format!(
                    "a job delivered by `{}` runs no plugin: leave `plugin` out",
                    delivery.kind()
                ),
            ))),
            (None, false) => Some(String::new()),
        }
    }

    /// The schedule as sent, else the changed job's. One sent anew is held to today's
    /// bounds ([`Schedule::check_new`]); one kept, or sent back unchanged (as `rota apply`
    /// does), is not.
    fn schedule(&mut self, sent: Option<Schedule>, old: Option<&JobSpec>) -> Option<Schedule> {
        let kept = old.map(|o| &o.schedule);
        if let Some(new) = sent.as_ref().filter(|s| Some(*s) != kept) {
            self.take(new.check_new().map_err(|e| invalid("schedule", e)));
        }
        self.required("schedule", sent, kept.cloned())
    }

    /// Who receives the job's fires: as sent, else the changed job's, else `wasm`.
    fn delivery(&mut self, sent: Option<Delivery>, old: Option<Delivery>) -> Delivery {
        sent.or(old).unwrap_or_default()
    }

    /// An `http` delivery's URL must be on the job's allow-list, its timeout in range,
    /// its signing secret a name.
    fn webhook(&mut self, delivery: &Delivery, allow: &[String]) {
        let Delivery::Http {
            url,
            timeout_ms,
            signing_secret,
        } = delivery
        else {
            return;
        };
        match reqwest::Url::parse(url) {
            Ok(parsed) if matches!(parsed.scheme(), "http" | "https") => {
                let allowed = rota_proto::allow::AllowList::parse(allow)
                    .map(|list| list.allows(&parsed))
                    .unwrap_or(false);
                if !allowed {
                    self.0.push(invalid(
                        "delivery.url",
                        format!(
                            "`{url}` is not on the job's `http_allow` list; add its origin \
                             (e.g. `{}`) there",
                            parsed.origin().ascii_serialization()
                        ),
                    ));
                }
            }
            _ => self.0.push(invalid(
                "delivery.url",
                format!(
                    "`{}` is not an http:// or https:// URL",
                    validate::excerpt(url)
                ),
            )),
        }
        if let Some(ms) = timeout_ms {
            self.check(validate::within(
                "delivery.timeout_ms",
                *ms,
                1..=MAX_DELIVERY_TIMEOUT_MS,
            ));
        }
        if let Some(name) = signing_secret {
            self.check(validate::name("delivery.signing_secret", name));
        }
    }

    /// A name-like field (the job's name, its app), checked by `valid`.
    fn named(
        &mut self,
        field: &str,
        sent: Option<String>,
        old: Option<String>,
        valid: fn(&str, &str) -> Result<()>,
    ) -> Option<String> {
        let value = self.required(field, sent, old)?;
        self.take(valid(field, &value).map(|()| value))
    }

    /// A setting named by a word (`route`, `block`, `misfire`): as sent, else the changed
    /// job's, else the default.
    fn word<T>(&mut self, field: &str, sent: Option<String>, old: Option<T>) -> Option<T>
    where
        T: FromStr + Default,
        T::Err: std::fmt::Display,
    {
        match sent {
            Some(text) => self.take(T::from_str(&text).map_err(|e| invalid(field, e))),
            None => Some(old.unwrap_or_default()),
        }
    }

    /// A number within `range`: as sent, else the changed job's, else `default`.
    fn number(
        &mut self,
        field: &str,
        sent: Option<i64>,
        old: Option<i64>,
        default: i64,
        range: RangeInclusive<i64>,
    ) -> i64 {
        let value = sent.or(old).unwrap_or(default);
        self.check(validate::within(field, value, range));
        value
    }

    /// The concurrency bound to keep: `concurrency` as sent, else `max_concurrency` (its
    /// older spelling, a bound of the whole job) as sent, else the changed job's. Both sent
    /// and disagreeing is an error naming both.
    fn concurrency(
        &mut self,
        sent: Option<Option<ConcurrencyField>>,
        max: Option<Option<i64>>,
        old: Option<&JobSpec>,
    ) -> (Option<i64>, Option<String>) {
        let Some(sent) = sent else {
            let limit = self.optional_number(
                "max_concurrency",
                max,
                old.and_then(|s| s.max_concurrency).map(i64::from),
                1..=MAX_CONCURRENCY,
            );
            // A limit sent alone is of the whole job; one kept keeps its key.
            let key = match max {
                Some(_) => None,
                None => old.and_then(|s| s.concurrency_key.clone()),
            };
            return (limit, key.filter(|_| limit.is_some()));
        };
        let limit = sent.as_ref().map(|c| c.limit);
        if let Some(m) = max
            && m != limit
        {
            self.0.push(validate::invalid("max_concurrency", DISAGREES));
        }
        let Some(c) = sent else {
            return (None, None);
        };
        self.check(validate::within(
            "concurrency.limit",
            c.limit,
            1..=MAX_CONCURRENCY,
        ));
        if let Some(key) = &c.key {
            self.check(validate::json_pointer("concurrency.key", key));
        }
        (Some(c.limit), c.key)
    }

    /// The rate limit to keep: as sent (`null` clears it), else the changed job's.
    fn rate_limit(
        &mut self,
        sent: Option<Option<RateLimit>>,
        old: Option<&JobSpec>,
    ) -> Option<RateLimit> {
        let Some(sent) = sent else {
            return old.and_then(|s| s.rate_limit.clone());
        };
        let rate = sent?;
        self.check(validate::within(
            "rate_limit.limit",
            rate.limit,
            1..=MAX_RATE,
        ));
        self.check(validate::within(
            "rate_limit.per_ms",
            rate.per_ms,
            1..=MAX_RATE_WINDOW_MS,
        ));
        if let Some(key) = &rate.key {
            self.check(validate::json_pointer("rate_limit.key", key));
        }
        Some(rate)
    }

    /// The debounce to keep: as sent (`null` clears it), else the changed job's.
    fn debounce(&mut self, sent: Option<Option<i64>>, old: Option<&JobSpec>) -> Option<i64> {
        self.optional_number(
            "debounce_ms",
            sent,
            old.and_then(|s| s.debounce_ms),
            1..=MAX_DEBOUNCE_MS,
        )
    }

    /// A number within `range` that may be `null` (no limit, or the default): as sent
    /// (`null` included), else the changed job's.
    fn optional_number(
        &mut self,
        field: &str,
        sent: Option<Option<i64>>,
        old: Option<i64>,
        range: RangeInclusive<i64>,
    ) -> Option<i64> {
        let value = sent.unwrap_or(old);
        if let Some(v) = value {
            self.check(validate::within(field, v, range));
        }
        value
    }
    /// The retry backoff: as sent, else the changed job's, else the default.
    fn backoff(&mut self, sent: Option<Backoff>, old: Option<Backoff>) -> Backoff {
        let backoff = sent.or(old).unwrap_or_default();
        self.check(backoff.validate().map_err(|e| invalid("backoff", e)));
        backoff
    }

    /// The job's params: as sent (`null` clears them), else the changed job's; at most
    /// `max` bytes.
    fn params(
        &mut self,
        sent: Option<Option<String>>,
        old: Option<&JobSpec>,
        max: usize,
    ) -> Option<String> {
        let params = sent.unwrap_or_else(|| old.and_then(|s| s.params.clone()));
        if let Some(p) = &params {
            self.check(validate::max_bytes("params", p, max));
        }
        params
    }

    /// Every entry of the allow-list must be inside the node's egress policy: a job cannot
    /// open what the admin closed (the policy is checked again at every connection).
    async fn egress(&mut self, policy: &rota_net::egress::Policy, allow: &[String]) {
        for (i, entry) in allow.iter().enumerate() {
            let Ok(url) = reqwest::Url::parse(entry.trim()) else {
                continue; // `http_allow` already says why
            };
            if let Err(denied) = policy.check_url_now(&url).await {
                self.0.push(invalid(
                    "http_allow",
                    format!(
                        "entry {i} (`{}`): {denied}; only an admin can open it \
                         (--egress-allow)",
                        validate::excerpt(entry)
                    ),
                ));
            }
        }
    }

    /// Where the plugin may send HTTP requests: as sent, else the changed job's, else
    /// nowhere. A list sent is checked against the egress policy; one kept from before is
    /// not, so a job whose list the admin has since closed can still be changed (its
    /// requests are refused when they are made).
    async fn http_allow(
        &mut self,
        sent: Option<Vec<String>>,
        old: Option<Vec<String>>,
        policy: &rota_net::egress::Policy,
    ) -> Vec<String> {
        let check_egress = sent.is_some();
        let allow = sent.or(old).unwrap_or_default();
        self.check(
            rota_proto::allow::AllowList::parse(&allow).map_err(|e| invalid("http_allow", e)),
        );
        if check_egress {
            self.egress(policy, &allow).await;
        }
        allow
    }
}

/// Validates the fields (merged onto `base` for an update) into a job spec and its
/// compiled schedule, checking every field, so a form can show every problem at once.
pub async fn build_spec(
    ports: &Ports,
    who: &Principal,
    f: JobFields,
    base: Option<&Job>,
) -> Result<(JobSpec, CompiledSchedule), SpecErrors> {
    build_spec_with(ports, who, f, base, &HashSet::new()).await
}

/// [`build_spec`] where the plugins named in `planned` count as uploaded: a document
/// applied as a dry run (`usecase::apply`) binds plugins it has not uploaded yet.
pub async fn build_spec_with(
    ports: &Ports,
    who: &Principal,
    f: JobFields,
    base: Option<&Job>,
    planned: &HashSet<String>,
) -> Result<(JobSpec, CompiledSchedule), SpecErrors> {
    let store = ports.store();
    let old = base.map(|j| &j.spec);
    let mut bad = Collect(Vec::new());

    let name = bad.named("name", f.name, old.map(|s| s.name.clone()), validate::name);
    let app = bad.named("app", f.app, old.map(|s| s.app.clone()), validate::app);
    let delivery = bad.delivery(f.delivery, old.map(|s| s.delivery.clone()));
    let plugin = bad.plugin(store, f.plugin, old, &delivery, planned).await;
    let schedule = bad.schedule(f.schedule, old);
    let compiled = match &schedule {
        Some(s) => bad.take(s.compile().map_err(|e| invalid("schedule", e))),
        None => None,
    };
    let params = bad.params(f.params, old, ports.config().max_payload_bytes);
    let route = bad.word("route", f.route, old.map(|s| s.route));
    let block = bad.word::<BlockStrategy>("block", f.block, old.map(|s| s.block));
    let misfire = bad.word("misfire", f.misfire, old.map(|s| s.misfire));

    let timeout_ms = bad.number(
        "timeout_ms",
        f.timeout_ms,
        old.map(|s| s.timeout_ms),
        DEFAULT_TIMEOUT_MS,
        1..=MAX_TIMEOUT_MS,
    );
    let max_attempts = bad.number(
        "max_attempts",
        f.max_attempts,
        old.map(|s| i64::from(s.max_attempts)),
        DEFAULT_MAX_ATTEMPTS,
        1..=MAX_ATTEMPTS,
    );
    let memory_mb = bad.number(
        "memory_mb",
        f.memory_mb,
        old.map(|s| i64::from(s.memory_mb)),
        DEFAULT_MEMORY_MB,
        1..=MAX_MEMORY_MB,
    );
    let (max_concurrency, concurrency_key) = bad.concurrency(f.concurrency, f.max_concurrency, old);
    let rate_limit = bad.rate_limit(f.rate_limit, old);
    let debounce_ms = bad.debounce(f.debounce_ms, old);
    let no_executor_timeout_ms = bad.optional_number(
        "no_executor_timeout_ms",
        f.no_executor_timeout_ms,
        old.and_then(|s| s.no_executor_timeout_ms),
        1_000..=MAX_NO_EXECUTOR_TIMEOUT_MS,
    );
    let backoff = bad.backoff(f.backoff, old.map(|s| s.backoff.clone()));
    let http_allow = bad
        .http_allow(
            f.http_allow,
            old.map(|s| s.http_allow.clone()),
            &ports.config().egress,
        )
        .await;
    bad.webhook(&delivery, &http_allow);
    let child_jobs = match f.child_jobs {
        Some(refs) => bad.take(child_jobs(store, who, &refs, base.map(|j| j.id)).await),
        None => Some(old.map(|s| s.child_jobs.clone()).unwrap_or_default()),
    };

    let (
        Some(name),
        Some(app),
        Some(plugin),
        Some(schedule),
        Some(compiled),
        Some(route),
        Some(block),
        Some(misfire),
        Some(child_jobs),
        true,
    ) = (
        name,
        app,
        plugin,
        schedule,
        compiled,
        route,
        block,
        misfire,
        child_jobs,
        bad.0.is_empty(),
    )
    else {
        return Err(SpecErrors(bad.0));
    };
    let spec = JobSpec {
        name,
        app,
        plugin,
        schedule,
        params,
        route,
        block,
        misfire,
        timeout_ms,
        max_attempts: max_attempts as i32,
        backoff,
        memory_mb: memory_mb as i32,
        max_concurrency: max_concurrency.map(|m| m as i32),
        concurrency_key,
        rate_limit,
        debounce_ms,
        child_jobs,
        http_allow,
        enabled: f.enabled.or(old.map(|s| s.enabled)).unwrap_or(true),
        no_executor_timeout_ms,
        delivery,
    };
    Ok((spec, compiled))
}

/// The name of the plugin `r` refers to; it must have been uploaded.
async fn plugin_ref(store: &Store, r: &NameOrId) -> Result<String> {
    let found = match r {
        NameOrId::Id(id) => store.get_plugin(*id).await,
        NameOrId::Name(name) => store.latest_plugin(name).await,
    };
    match found {
        Ok(plugin) => Ok(plugin.name),
        Err(store::Error::NotFound(_)) => Err(missing(
            "plugin",
            format!("plugin {r} does not exist; upload it first with POST /api/v1/plugins?name=…"),
        )),
        Err(e) => Err(e.into()),
    }
}

/// Resolves child job references to ids, in order, without repeats; a job cannot be its
/// own child. A child fires with its parent's success, so naming one is triggering it:
/// `who` must be allowed to change it (else a user of one app could run another app's
/// jobs, XXL-JOB's CVE-2024-42681).
async fn child_jobs(
    store: &Store,
    who: &Principal,
    refs: &[NameOrId],
    this_job: Option<i64>,
) -> Result<Vec<i64>> {
    if refs.len() > MAX_CHILD_JOBS {
        return Err(invalid(
            "child_jobs",
            format!("at most {MAX_CHILD_JOBS} child jobs (got {})", refs.len()),
        ));
    }
    let mut ids = Vec::with_capacity(refs.len());
    let mut seen = HashSet::new();
    for (i, r) in refs.iter().enumerate() {
        let field = format!("child_jobs[{i}]");
        let child = job_ref(store, &field, r).await?;
        who.check(
            &child.spec.app,
            Need::Change,
            &format!("{field}: job `{r}`"),
        )?;
        if Some(child.id) == this_job {
            return Err(invalid(&field, "a job cannot be its own child"));
        }
        if seen.insert(child.id) {
            ids.push(child.id);
        }
    }
    if let Some(this_job) = this_job {
        reject_cycle(store, &ids, this_job).await?;
    }
    Ok(ids)
}

/// A chain of child jobs that leads back to `this_job` would run forever: follow the
/// children of `children` and refuse one that does.
async fn reject_cycle(store: &Store, children: &[i64], this_job: i64) -> Result<()> {
    let mut stack = children.to_vec();
    let mut visited = HashSet::new();
    while let Some(id) = stack.pop() {
        if !visited.insert(id) {
            continue;
        }
        let job = match store.get_job(id).await {
            Err(store::Error::NotFound(_)) => continue,
            other => other?,
        };
        if job.spec.child_jobs.contains(&this_job) {
            return Err(invalid(
                "child_jobs",
                format!(
                    "job {id} (`{}`) already runs job {this_job} after it: child jobs must not form a cycle",
                    job.spec.name
                ),
            ));
        }
        stack.extend(job.spec.child_jobs);
    }
    Ok(())
}

/// Job `id` (an id or a name), if `who` may read it.
pub async fn get(ports: &Ports, who: &Principal, id: &str) -> Result<Job> {
    let job = find_job(ports.store(), id).await?;
    who.check(&job.spec.app, Need::Read, &format!("job `{id}`"))?;
    Ok(job)
}

/// Job `id` (an id or a name), if `who` may change it.
pub async fn to_change(ports: &Ports, who: &Principal, id: &str) -> Result<Job> {
    let job = find_job(ports.store(), id).await?;
    who.check(&job.spec.app, Need::Change, &format!("job `{id}`"))?;
    Ok(job)
}

/// Stores a new job built by [`build_spec`] (the caller may change its app), audited.
pub async fn create(
    ports: &Ports,
    who: &Principal,
    spec: &JobSpec,
    schedule: &CompiledSchedule,
) -> Result<Job> {
    who.check_app(&spec.app)?;
    let job = ports.create_job(spec, schedule).await?;
    ports.audit(&who.name, "create job", &job.spec.name).await;
    tracing::info!(job.id = job.id, job.name = %job.spec.name, "job created");
    Ok(job)
}

/// Replaces `job`'s settings with `spec` (built by [`build_spec`] on it, or changed in
/// one field), audited as `action`: the caller may change the job's app and the one it
/// moves to. `force` changes a delivery while tasks are on their way.
pub async fn update(
    ports: &Ports,
    who: &Principal,
    job: &Job,
    spec: &JobSpec,
    schedule: &CompiledSchedule,
    force: bool,
) -> Result<Job> {
    who.check(
        &job.spec.app,
        Need::Change,
        &format!("job `{}`", job.spec.name),
    )?;
    who.check_app(&spec.app)?;
    let updated = ports.update_job(job, spec, schedule, force).await?;
    let action = match (job.spec.enabled, spec.enabled) {
        (false, true) if only_enabled_differs(&job.spec, spec) => "enable job",
        (true, false) if only_enabled_differs(&job.spec, spec) => "disable job",
        _ => "update job",
    };
    ports.audit(&who.name, action, &updated.spec.name).await;
    Ok(updated)
}

fn only_enabled_differs(a: &JobSpec, b: &JobSpec) -> bool {
    let mut a = a.clone();
    a.enabled = b.enabled;
    a == *b
}

/// Turns job `id` on or off.
pub async fn set_enabled(ports: &Ports, who: &Principal, id: &str, enabled: bool) -> Result<Job> {
    let job = to_change(ports, who, id).await?;
    let mut spec = job.spec.clone();
    spec.enabled = enabled;
    let schedule = spec
        .schedule
        .compile()
        .map_err(|e| Error::Unprocessable(format!("schedule: {e}")))?;
    update(ports, who, &job, &spec, &schedule, false).await
}

/// Deletes job `id` (an id or a name); with `force`, its pending tasks are cancelled first
/// (without it, a job with pending or running tasks is a conflict). Every node hears of
/// it; audited. The number of tasks cancelled.
pub async fn delete(ports: &Ports, who: &Principal, id: &str, force: bool) -> Result<usize> {
    let job = to_change(ports, who, id).await?;
    // A step's job stays while a workflow names it: deleting it would leave the workflow's
    // instances waiting on tasks that are gone.
    let users: Vec<String> = ports
        .store()
        .list_workflows()
        .await?
        .into_iter()
        .filter(|w| w.steps.iter().any(|s| s.job_id == job.id))
        .map(|w| format!("`{}`", w.name))
        .collect();
    if !users.is_empty() {
        return Err(Error::Conflict(format!(
            "job `{}` is a step of workflow {}: change or delete the workflow first",
            job.spec.name,
            users.join(", ")
        )));
    }
    let cancelled = ports.delete_job(job.id, force).await?;
    ports.job_changed(job.id).await;
    ports.audit(&who.name, "delete job", &job.spec.name).await;
    tracing::info!(
        job.id = job.id,
        cancelled_tasks = cancelled.len(),
        "job deleted"
    );
    Ok(cancelled.len())
}

/// A page of the jobs `who` sees, newest first: of `app` only, and whose name contains
/// `search`, when given.
pub async fn list(
    ports: &Ports,
    who: &Principal,
    app: Option<&str>,
    search: Option<&str>,
    before_id: Option<i64>,
    limit: u32,
) -> Result<Page<Job>> {
    Ok(ports
        .store()
        .list_jobs(app, who.app_filter(), search, before_id, limit)
        .await?)
}

/// Fires the job named `job` (an id or a name, as [`find_job`] reads it) once now, outside
/// its schedule (a manual task), with `params` in place of the job's when given; the new
/// task's id. Needs the right to change the job; errors name it as the caller did.
pub async fn trigger(
    ports: &Ports,
    who: &Principal,
    job: &str,
    params: Option<String>,
) -> Result<i64> {
    if let Some(params) = &params {
        validate::max_bytes("params", params, ports.config().max_payload_bytes)?;
    }
    let named = job;
    let job = find_job(ports.store(), named).await?;
    who.check(&job.spec.app, Need::Change, &format!("job `{named}`"))?;
    let now = ports.clock().now_ms();
    let task = NewTask {
        job_id: job.id,
        kind: TaskKind::Manual,
        key: None,
        payload: None,
        params: params.or_else(|| job.spec.params.clone()),
        due_at: now,
        max_attempts: None,
        backoff: None,
        priority: 0,
        traceparent: None,
        limit_key: None,
    };
    let (task_id, _) = *ports
        .store_tasks(std::slice::from_ref(&task), now)
        .await?
        .first()
        .ok_or_else(|| Error::Internal(anyhow::anyhow!("inserting a task returned no id")))?;
    tracing::info!(job.id = job.id, task.id = task_id, "job triggered");
    ports.audit(&who.name, "trigger job", &job.spec.name).await;
    Ok(task_id)
}

/// A job referenced from a task (`job`) as the node's job cache has it: one that does not
/// exist is a 404 about `field`.
pub async fn cached_job(
    ports: &Ports,
    field: &str,
    r: &NameOrId,
) -> Result<std::sync::Arc<crate::pipeline::JobEntry>> {
    let found = match r {
        NameOrId::Id(id) => ports.cached_job(*id).await?,
        NameOrId::Name(name) => ports.cached_job_named(name).await?,
    };
    found.ok_or_else(|| missing(field, format!("job {r} does not exist")))
}

/// A bounded job's busiest buckets (SPEC §11): the ten with the most throttled tasks, each
/// with the slots it holds; empty for a job without a bound.
pub async fn busiest_buckets(
    ports: &Ports,
    who: &Principal,
    job: &Job,
) -> Result<Vec<store::Bucket>> {
    who.check(
        &job.spec.app,
        Need::Read,
        &format!("job `{}`", job.spec.name),
    )?;
    if job.spec.max_concurrency.is_none() && job.spec.rate_limit.is_none() {
        return Ok(Vec::new());
    }
    Ok(ports.store().busiest_buckets(job.id, 10).await?)
}

/// How far behind its schedule recurring job `job`'s last twenty fires ran (SPEC §11
/// drift); `None` for a job without a recurring schedule.
pub async fn schedule_drift(
    ports: &Ports,
    who: &Principal,
    job: &Job,
) -> Result<Option<store::ScheduleDrift>> {
    who.check(
        &job.spec.app,
        Need::Read,
        &format!("job `{}`", job.spec.name),
    )?;
    if job.spec.schedule == Schedule::None {
        return Ok(None);
    }
    Ok(Some(ports.store().schedule_drift(job.id, 20).await?))
}
