//! `rota import xxl-job`: an XXL-JOB admin's apps and jobs, read from its MySQL database
//! (`xxl_job_group`, `xxl_job_info`; 2.x to 3.x), made on a Rota node through its REST API
//! (SPEC §13). Each XXL executor group becomes an app (its access token the app's secret
//! `xxl-access-token`), each BEAN job a job named `xxl-<id>` with `xxl` delivery and its
//! handler — schedule, misfire, route, block strategy, timeout, retries, child jobs and
//! enabled state carried over — and a job's alarm e-mail an e-mail channel and a
//! `run_failed` rule. GLUE jobs (source kept in XXL's database) are listed, not imported.
//!
//! What exists already is compared and left alone when equal, so a second import changes
//! nothing; `--dry-run` prints the same report and changes nothing at all. Users and logs
//! stay behind.

use std::collections::BTreeMap;

use anyhow::Context;
use clap::{Args, Subcommand};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use sqlx::Row;
use sqlx::mysql::MySqlPool;

use super::client::{ApiClient, Refused, ServerFlags};

/// The app secret holding the XXL-JOB access token (the node's `xxl::TOKEN_SECRET`).
const TOKEN_SECRET: &str = rota_scheduler::xxl::TOKEN_SECRET;

#[derive(Args)]
pub struct ImportArgs {
    #[command(flatten)]
    server: ServerFlags,
    #[command(subcommand)]
    command: ImportCommand,
}

#[derive(Subcommand)]
enum ImportCommand {
    /// Apps and jobs of an XXL-JOB admin, from its database, as jobs run by the same
    /// XXL-JOB executors (`xxl` delivery). Run it again to pick up changes: what is equal
    /// is left alone.
    XxlJob {
        /// The XXL-JOB database: mysql://user:password@host:3306/xxl_job
        #[arg(long, env = "XXL_JOB_DATABASE_URL", hide_env_values = true)]
        database_url: String,
        /// The executors' access token (`xxl.job.accessToken`), for databases that do not
        /// keep one per executor group (before 3.4: it was in xxl-job-admin's config).
        #[arg(long, env = "XXL_JOB_ACCESS_TOKEN", hide_env_values = true)]
        access_token: Option<String>,
        /// Print what would be made and change nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

impl ImportArgs {
    pub async fn run(self) -> anyhow::Result<()> {
        super::finish(self.run_inner().await)
    }

    async fn run_inner(self) -> anyhow::Result<()> {
        let api = ApiClient::new(&self.server)?;
        let ImportCommand::XxlJob {
            database_url,
            access_token,
            dry_run,
        } = self.command;
        let xxl = read(&database_url).await?;
        let plan = plan(&xxl, access_token.as_deref());
        if !plan.errors.is_empty() {
            for (id, desc, why) in &plan.errors {
                eprintln!("XXL job {id} ({desc}): {why}");
            }
            anyhow::bail!(
                "{} job(s) above cannot be imported as they are; nothing was changed (fix \
                 or delete them in XXL-JOB and import again)",
                plan.errors.len()
            );
        }
        let mut report = Report::default();
        apply(&api, &plan, dry_run, &mut report).await?;
        report.print(dry_run);
        Ok(())
    }
}

/// An executor group of XXL-JOB.
#[derive(Debug, Clone)]
pub(crate) struct Group {
    id: i64,
    app_name: String,
    access_token: Option<String>,
}

/// A job of XXL-JOB, as its row says.
#[derive(Debug, Clone, Default)]
pub(crate) struct XxlJob {
    id: i64,
    group: i64,
    desc: String,
    alarm_email: String,
    schedule_type: String,
    schedule_conf: String,
    misfire: String,
    route: String,
    handler: String,
    param: String,
    block: String,
    timeout_s: i64,
    retries: i64,
    glue_type: String,
    children: String,
    enabled: bool,
}

pub(crate) struct Xxl {
    groups: Vec<Group>,
    jobs: Vec<XxlJob>,
}

/// Reads the groups and jobs, whichever XXL-JOB version wrote them (3.4 renamed
/// `job_desc` to `name` and gave each group its `access_token`).
async fn read(url: &str) -> anyhow::Result<Xxl> {
    let pool = MySqlPool::connect(url)
        .await
        .context("connecting to the XXL-JOB database")?;
    let columns = |table: &'static str| {
        let pool = pool.clone();
        async move {
            sqlx::query_scalar::<_, String>(
                "SELECT CAST(COLUMN_NAME AS CHAR) FROM information_schema.COLUMNS \
                 WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?",
            )
            .bind(table)
            .fetch_all(&pool)
            .await
            .with_context(|| format!("reading the columns of `{table}`"))
        }
    };
    let group_cols = columns("xxl_job_group").await?;
    let job_cols = columns("xxl_job_info").await?;
    if group_cols.is_empty() || job_cols.is_empty() {
        anyhow::bail!(
            "no `xxl_job_group` and `xxl_job_info` tables here: is it XXL-JOB's database?"
        );
    }
    let token = match group_cols.iter().any(|c| c == "access_token") {
        true => "CAST(access_token AS CHAR)",
        false => "NULL",
    };
    let groups = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT CAST(id AS SIGNED) AS id, CAST(app_name AS CHAR) AS app_name, \
         {token} AS access_token FROM xxl_job_group ORDER BY id"
    )))
    .fetch_all(&pool)
    .await
    .context("reading xxl_job_group")?
    .into_iter()
    .map(|r| -> anyhow::Result<Group> {
        Ok(Group {
            id: r.try_get("id")?,
            app_name: r.try_get("app_name")?,
            access_token: r.try_get::<Option<String>, _>("access_token")?,
        })
    })
    .collect::<anyhow::Result<_>>()?;
    let desc = match job_cols.iter().any(|c| c == "name") {
        true => "name",
        false => "job_desc",
    };
    let text = |c: &str| format!("COALESCE(CAST({c} AS CHAR), '') AS {c}");
    let texts = [
        "alarm_email",
        "schedule_type",
        "schedule_conf",
        "misfire_strategy",
        "executor_route_strategy",
        "executor_handler",
        "executor_param",
        "executor_block_strategy",
        "glue_type",
        "child_jobid",
    ]
    .map(text)
    .join(", ");
    let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT CAST(id AS SIGNED) AS id, CAST(job_group AS SIGNED) AS job_group, \
         COALESCE(CAST({desc} AS CHAR), '') AS job_desc, {texts}, \
         CAST(executor_timeout AS SIGNED) AS executor_timeout, \
         CAST(executor_fail_retry_count AS SIGNED) AS executor_fail_retry_count, \
         CAST(trigger_status AS SIGNED) AS trigger_status FROM xxl_job_info ORDER BY id"
    )))
    .fetch_all(&pool)
    .await
    .context("reading xxl_job_info")?;
    let mut jobs = Vec::with_capacity(rows.len());
    for r in rows {
        let s = |c: &str| r.try_get::<String, _>(c);
        jobs.push(XxlJob {
            id: r.try_get("id")?,
            group: r.try_get("job_group")?,
            desc: s("job_desc")?,
            alarm_email: s("alarm_email")?,
            schedule_type: s("schedule_type")?,
            schedule_conf: s("schedule_conf")?,
            misfire: s("misfire_strategy")?,
            route: s("executor_route_strategy")?,
            handler: s("executor_handler")?,
            param: s("executor_param")?,
            block: s("executor_block_strategy")?,
            glue_type: s("glue_type")?,
            children: s("child_jobid")?,
            timeout_s: r.try_get("executor_timeout")?,
            retries: r.try_get("executor_fail_retry_count")?,
            enabled: r.try_get::<i64, _>("trigger_status")? == 1,
        });
    }
    pool.close().await;
    Ok(Xxl { groups, jobs })
}

/// What the import makes: apps with their tokens, jobs, and what it leaves out, why.
#[derive(Debug, Default)]
pub(crate) struct Plan {
    /// App name → its access token, if known.
    apps: BTreeMap<String, Option<String>>,
    /// Rota job name → (the XXL job's description, the job's body without `child_jobs`,
    /// the names of its child jobs).
    jobs: BTreeMap<String, (String, Value, Vec<String>)>,
    /// Job name → the e-mail addresses alarmed when one of its runs fails.
    alarms: BTreeMap<String, (String, Vec<String>)>,
    /// XXL jobs left out by design (GLUE): id, description, why.
    skipped: Vec<(i64, String, String)>,
    /// XXL jobs Rota cannot take as they are (an unknown route, a cron expression that
    /// does not parse): id, description, what is wrong. Any of them stops the import
    /// before it changes anything.
    errors: Vec<(i64, String, String)>,
}

/// The Rota name of XXL job `id`.
fn job_name(id: i64) -> String {
    format!("xxl-{id}")
}

/// Decides what the import makes of `xxl` (no I/O).
pub(crate) fn plan(xxl: &Xxl, token: Option<&str>) -> Plan {
    let mut plan = Plan::default();
    let apps: BTreeMap<i64, &Group> = xxl.groups.iter().map(|g| (g.id, g)).collect();
    for g in &xxl.groups {
        // The group's own token (3.4 on), else the one the admin's config gave them all.
        let own = g.access_token.clone().filter(|t| !t.is_empty());
        plan.apps
            .insert(g.app_name.clone(), own.or_else(|| token.map(str::to_owned)));
    }
    let imported: Vec<i64> = xxl
        .jobs
        .iter()
        .filter(|j| j.glue_type == "BEAN" && apps.contains_key(&j.group))
        .map(|j| j.id)
        .collect();
    for j in &xxl.jobs {
        let skip = |why: String| (j.id, j.desc.clone(), why);
        let Some(group) = apps.get(&j.group) else {
            plan.skipped.push(skip(format!(
                "its executor group {} does not exist",
                j.group
            )));
            continue;
        };
        if j.glue_type != "BEAN" {
            plan.skipped.push(skip(format!(
                "a GLUE job ({}): its source lives in XXL-JOB's database and runs on the \
                 executor; make it a plugin or a BEAN handler",
                j.glue_type
            )));
            continue;
        }
        match spec(j, &group.app_name) {
            Ok(body) => {
                let children = j
                    .children
                    .split(',')
                    .filter_map(|c| c.trim().parse::<i64>().ok())
                    .filter(|c| *c != j.id && imported.contains(c))
                    .map(job_name)
                    .collect();
                plan.jobs
                    .insert(job_name(j.id), (j.desc.clone(), body, children));
                let to: Vec<String> = j
                    .alarm_email
                    .split(',')
                    .map(|a| a.trim().to_owned())
                    .filter(|a| !a.is_empty())
                    .collect();
                if !to.is_empty() {
                    plan.alarms
                        .insert(job_name(j.id), (group.app_name.clone(), to));
                }
            }
            Err(why) => plan.errors.push(skip(why)),
        }
    }
    plan
}

/// The Rota job body of BEAN job `j` of app `app`, or why it has none.
fn spec(j: &XxlJob, app: &str) -> Result<Value, String> {
    let schedule = match j.schedule_type.as_str() {
        "CRON" => {
            let schedule = json!({"kind": "cron", "expr": j.schedule_conf.trim()});
            let parsed: rota_scheduler::schedule::Schedule =
                serde_json::from_value(schedule.clone()).map_err(|e| e.to_string())?;
            if let Err(e) = parsed.compile() {
                return Err(format!("cron `{}`: {e}", j.schedule_conf.trim()));
            }
            schedule
        }
        "FIX_RATE" => match j.schedule_conf.trim().parse::<i64>() {
            Ok(s) if s > 0 => json!({"kind": "fixed_rate", "every_ms": s * 1000}),
            _ => {
                return Err(format!(
                    "FIX_RATE `{}` is not a number of seconds",
                    j.schedule_conf
                ));
            }
        },
        "NONE" | "" => json!({"kind": "none"}),
        other => return Err(format!("schedule type `{other}` is not one Rota knows")),
    };
    let route = match j.route.as_str() {
        "FIRST" | "" => "first",
        "LAST" => "last",
        "ROUND" => "round_robin",
        "RANDOM" => "random",
        "CONSISTENT_HASH" => "consistent_hash",
        "LEAST_FREQUENTLY_USED" => "least_frequently_used",
        "LEAST_RECENTLY_USED" => "least_recently_used",
        "FAILOVER" => "failover",
        "BUSYOVER" => "busyover",
        "SHARDING_BROADCAST" => "sharding_broadcast",
        other => return Err(format!("route `{other}` is not one Rota knows")),
    };
    let block = match j.block.as_str() {
        "SERIAL_EXECUTION" | "" => "serial",
        "DISCARD_LATER" => "discard_later",
        "COVER_EARLY" => "cover_early",
        other => return Err(format!("block strategy `{other}` is not one Rota knows")),
    };
    let misfire = match j.misfire.as_str() {
        "FIRE_ONCE_NOW" => "fire_once_now",
        _ => "do_nothing",
    };
    if j.handler.trim().is_empty() {
        return Err("it names no handler".into());
    }
    let mut body = json!({
        "name": job_name(j.id),
        "app": app,
        "schedule": schedule,
        "route": route,
        "block": block,
        "misfire": misfire,
        // XXL-JOB retried at once: the first retry of Rota's backoff, a second, is closest.
        "max_attempts": j.retries.clamp(0, 99) + 1,
        "enabled": j.enabled,
        "delivery": {"kind": "xxl", "handler": j.handler.trim()},
    });
    if j.timeout_s > 0 {
        body["timeout_ms"] = json!(j.timeout_s * 1000);
    }
    if !j.param.is_empty() {
        body["params"] = json!(j.param);
    }
    Ok(body)
}

/// What the import did (or, dry, would do), line by line.
#[derive(Default)]
struct Report {
    lines: Vec<String>,
    made: usize,
    changed: usize,
    same: usize,
}

impl Report {
    fn note(&mut self, outcome: Outcome, what: String) {
        match outcome {
            Outcome::Made => self.made += 1,
            Outcome::Changed => self.changed += 1,
            Outcome::Same => self.same += 1,
        }
        let word = match outcome {
            Outcome::Made => "create",
            Outcome::Changed => "update",
            Outcome::Same => "unchanged",
        };
        self.lines.push(format!("{word:<10} {what}"));
    }

    fn print(&self, dry_run: bool) {
        for l in &self.lines {
            println!("{l}");
        }
        let verb = if dry_run { "would be" } else { "were" };
        println!(
            "{} created, {} updated, {} unchanged{}",
            self.made,
            self.changed,
            self.same,
            if dry_run {
                format!(" ({verb}: --dry-run changed nothing)")
            } else {
                String::new()
            }
        );
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Made,
    Changed,
    Same,
}

/// Makes `plan` on the node (`dry`: only says what it would make).
async fn apply(api: &ApiClient, plan: &Plan, dry: bool, report: &mut Report) -> anyhow::Result<()> {
    for (app, token) in &plan.apps {
        let Some(token) = token else {
            report.lines.push(format!(
                "{:<10} app {app}: no access token known (pass --access-token): its executors are refused until its secret `{TOKEN_SECRET}` is set",
                "warning"
            ));
            continue;
        };
        let url = api.url(&["apps", app, "secrets", TOKEN_SECRET]);
        let exists = get(api, api.url(&["apps", app, "secrets"]))
            .await?
            .and_then(|v| v["items"].as_array().cloned())
            .is_some_and(|items| items.iter().any(|s| s["name"] == TOKEN_SECRET));
        // A secret's value is never read back: an existing one is left as it is.
        let outcome = if exists { Outcome::Same } else { Outcome::Made };
        if outcome == Outcome::Made && !dry {
            api.send(Method::PUT, url, Some(&json!({"value": token})))
                .await?;
        }
        report.note(outcome, format!("app {app} (secret `{TOKEN_SECRET}`)"));
    }
    // Jobs first without their child jobs, which may not exist yet; then the child jobs.
    let mut parents = Vec::new();
    for (name, (desc, body, children)) in &plan.jobs {
        let existing = get(api, api.url(&["jobs", name])).await?;
        let old_children = match &existing {
            Some(old) => child_names(api, old).await?,
            None => Vec::new(),
        };
        let outcome = match &existing {
            None => Outcome::Made,
            Some(old) if differs(old, body) || old_children != *children => Outcome::Changed,
            Some(_) => Outcome::Same,
        };
        if old_children != *children {
            parents.push((name, children));
        }
        if !dry {
            match outcome {
                Outcome::Made => {
                    api.send(Method::POST, api.url(&["jobs"]), Some(body))
                        .await
                        .with_context(|| format!("creating job {name}"))?;
                }
                Outcome::Changed => {
                    let mut patch = body.clone();
                    patch.as_object_mut().map(|m| m.remove("name"));
                    api.send(Method::PATCH, api.url(&["jobs", name]), Some(&patch))
                        .await
                        .with_context(|| format!("updating job {name}"))?;
                }
                Outcome::Same => {}
            }
        }
        report.note(outcome, format!("job {name} ({desc})"));
    }
    for (name, children) in parents.into_iter().filter(|_| !dry) {
        api.send(
            Method::PATCH,
            api.url(&["jobs", name]),
            Some(&json!({"child_jobs": children})),
        )
        .await
        .with_context(|| format!("setting the child jobs of {name}"))?;
    }
    for (job, (app, to)) in &plan.alarms {
        alarm(api, job, app, to, dry, report).await?;
    }
    for (id, desc, why) in &plan.skipped {
        report
            .lines
            .push(format!("{:<10} XXL job {id} ({desc}): {why}", "skipped"));
    }
    Ok(())
}

/// The e-mail channel and `run_failed` rule of job `job`'s alarm e-mail.
async fn alarm(
    api: &ApiClient,
    job: &str,
    app: &str,
    to: &[String],
    dry: bool,
    report: &mut Report,
) -> anyhow::Result<()> {
    let channel = format!("{job}-mail");
    let rule = format!("{job}-failed");
    let want_channel = json!({"name": channel, "kind": "email", "app": app, "to": to});
    let outcome = match get(api, api.url(&["alarm-channels", &channel])).await? {
        None => Outcome::Made,
        Some(old) if old["to"] != json!(to) => Outcome::Changed,
        Some(_) => Outcome::Same,
    };
    if !dry && outcome != Outcome::Same {
        if outcome == Outcome::Changed {
            api.send(Method::DELETE, api.url(&["alarm-channels", &channel]), None)
                .await?;
        }
        api.send(
            Method::POST,
            api.url(&["alarm-channels"]),
            Some(&want_channel),
        )
        .await?;
    }
    report.note(
        outcome,
        format!("alarm channel {channel} ({})", to.join(", ")),
    );
    let want_rule =
        json!({"name": rule, "app": app, "job": job, "on": "run_failed", "channels": [channel]});
    let outcome = match get(api, api.url(&["alarm-rules", &rule])).await? {
        None => Outcome::Made,
        Some(old) if old["on"] != "run_failed" || old["channels"] != json!([channel]) => {
            Outcome::Changed
        }
        Some(_) => Outcome::Same,
    };
    if !dry {
        match outcome {
            Outcome::Made => {
                api.send(Method::POST, api.url(&["alarm-rules"]), Some(&want_rule))
                    .await?;
            }
            Outcome::Changed => {
                api.send(
                    Method::PATCH,
                    api.url(&["alarm-rules", &rule]),
                    Some(&json!({"on": "run_failed", "channels": [channel]})),
                )
                .await?;
            }
            Outcome::Same => {}
        }
    }
    report.note(outcome, format!("alarm rule {rule} (run_failed)"));
    Ok(())
}

/// The resource at `url`; `None` on a 404.
async fn get(api: &ApiClient, url: reqwest::Url) -> anyhow::Result<Option<Value>> {
    match api.send(Method::GET, url, None).await {
        Ok(answer) => Ok(Some(answer.value)),
        Err(e) if Refused::is(&e, StatusCode::NOT_FOUND) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Whether job `old` (as the API shows it) differs from `body` in a field the import
/// sets (those it leaves out are left as they are).
fn differs(old: &Value, body: &Value) -> bool {
    body.as_object()
        .into_iter()
        .flatten()
        .filter(|(k, _)| k.as_str() != "name")
        .any(|(k, v)| old.get(k) != Some(v))
}

/// The names of job `old`'s child jobs (the API shows their ids).
async fn child_names(api: &ApiClient, old: &Value) -> anyhow::Result<Vec<String>> {
    let mut names = Vec::new();
    for id in old["child_jobs"].as_array().into_iter().flatten() {
        let id = id.to_string();
        if let Some(job) = get(api, api.url(&["jobs", &id])).await? {
            names.push(job["name"].as_str().unwrap_or_default().to_owned());
        }
    }
    Ok(names)
}
