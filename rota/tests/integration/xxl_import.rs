//! `rota import xxl-job` (SPEC §13) against a real MariaDB holding an XXL-JOB admin's
//! tables — as 2.x to 3.3 create them (`job_desc`, one token in the admin's config) and
//! as 3.4 does (`name`, a token per executor group) — and a real `rota standalone`: a dry
//! run changes nothing, the import makes apps, jobs, child jobs and e-mail alarms and lists
//! the GLUE job it leaves out, and a second import changes nothing.

use crate::support;

use std::process::Command;

use serde_json::Value;
use support::*;

/// XXL-JOB's two tables as a version writes them: before 3.4 (`job_desc`, `title`, no
/// token column) or from 3.4 on (`name`, `access_token`).
fn schema(v34: bool) -> [String; 2] {
    let (group_extra, desc) = match v34 {
        true => (
            "`name` VARCHAR(64) NOT NULL, `access_token` VARCHAR(255) DEFAULT NULL,",
            "`name`",
        ),
        false => ("`title` VARCHAR(12) NOT NULL,", "`job_desc`"),
    };
    [
        format!(
            "CREATE TABLE xxl_job_group (`id` INT NOT NULL AUTO_INCREMENT, \
             `app_name` VARCHAR(64) NOT NULL, {group_extra} \
             `address_type` TINYINT NOT NULL DEFAULT 0, `address_list` TEXT, \
             `update_time` DATETIME DEFAULT NULL, PRIMARY KEY (`id`))"
        ),
        format!(
            "CREATE TABLE xxl_job_info (`id` INT NOT NULL AUTO_INCREMENT, \
             `job_group` INT NOT NULL, {desc} VARCHAR(255) NOT NULL, \
             `add_time` DATETIME, `update_time` DATETIME, `author` VARCHAR(64), \
             `alarm_email` VARCHAR(255), `schedule_type` VARCHAR(50) NOT NULL DEFAULT 'NONE', \
             `schedule_conf` VARCHAR(128), `misfire_strategy` VARCHAR(50) NOT NULL DEFAULT 'DO_NOTHING', \
             `executor_route_strategy` VARCHAR(50), `executor_handler` VARCHAR(255), \
             `executor_param` VARCHAR(512), `executor_block_strategy` VARCHAR(50), \
             `executor_timeout` INT NOT NULL DEFAULT 0, `executor_fail_retry_count` INT NOT NULL DEFAULT 0, \
             `glue_type` VARCHAR(50) NOT NULL, `glue_source` MEDIUMTEXT, `glue_remark` VARCHAR(128), \
             `glue_updatetime` DATETIME, `child_jobid` VARCHAR(255), \
             `trigger_status` TINYINT NOT NULL DEFAULT 0, `trigger_last_time` BIGINT NOT NULL DEFAULT 0, \
             `trigger_next_time` BIGINT NOT NULL DEFAULT 0, PRIMARY KEY (`id`))"
        ),
    ]
}

/// Four jobs of group `orders`: a cron job with a child and an alarm e-mail, a sharded
/// fixed-rate job with retries and a timeout (stopped), a GLUE shell job, and the child.
fn rows(v34: bool) -> Vec<String> {
    let (group_cols, group_vals, desc) = match v34 {
        true => ("`name`, `access_token`", "'订单', 'tok-34'", "`name`"),
        false => ("`title`", "'订单'", "`job_desc`"),
    };
    let job = |id: i64, rest: &str| {
        format!(
            "INSERT INTO xxl_job_info (`id`, `job_group`, {desc}, `alarm_email`, `schedule_type`, \
             `schedule_conf`, `misfire_strategy`, `executor_route_strategy`, `executor_handler`, \
             `executor_param`, `executor_block_strategy`, `executor_timeout`, \
             `executor_fail_retry_count`, `glue_type`, `child_jobid`, `trigger_status`) \
             VALUES ({id}, 1, {rest})"
        )
    };
    vec![
        format!(
            "INSERT INTO xxl_job_group (`id`, `app_name`, {group_cols}) VALUES (1, 'orders', {group_vals})"
        ),
        job(
            1,
            "'关闭订单', 'ops@example.com, dev@example.com', 'CRON', '0 0/5 * * * ?', \
             'FIRE_ONCE_NOW', 'ROUND', 'closeOrders', 'region=cn', 'DISCARD_LATER', 0, 0, \
             'BEAN', '4', 1",
        ),
        job(
            2,
            "'对账', '', 'FIX_RATE', '30', 'DO_NOTHING', 'SHARDING_BROADCAST', 'reconcile', '', \
             'SERIAL_EXECUTION', 10, 2, 'BEAN', '', 0",
        ),
        job(
            3,
            "'清理脚本', '', 'CRON', '0 0 3 * * ?', 'DO_NOTHING', 'FIRST', '', '', \
             'SERIAL_EXECUTION', 0, 0, 'GLUE_SHELL', '', 1",
        ),
        job(
            4,
            "'通知', '', 'NONE', '', 'DO_NOTHING', 'FIRST', 'notify', '', 'SERIAL_EXECUTION', \
             0, 0, 'BEAN', '', 1",
        ),
    ]
    .into_iter()
    .chain(ROUTES.iter().enumerate().map(|(i, (route, _))| {
        // The other routes, and the last block strategy, one job each.
        job(
            10 + i as i64,
            &format!(
                "'路由 {route}', '', 'NONE', '', 'DO_NOTHING', '{route}', 'hello', '', \
                 'COVER_EARLY', 0, 0, 'BEAN', '', 1"
            ),
        )
    }))
    .collect()
}

/// XXL-JOB's routes not in [`rows`]' first jobs, and Rota's names for them.
const ROUTES: [(&str, &str); 7] = [
    ("LAST", "last"),
    ("RANDOM", "random"),
    ("CONSISTENT_HASH", "consistent_hash"),
    ("LEAST_FREQUENTLY_USED", "least_frequently_used"),
    ("LEAST_RECENTLY_USED", "least_recently_used"),
    ("FAILOVER", "failover"),
    ("BUSYOVER", "busyover"),
];

/// `rota import xxl-job` against `node`, with `args`: whether it succeeded, its stdout
/// and its stderr.
fn run_import(node: &Standalone, db: &str, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rota"))
        .args([
            "import",
            "xxl-job",
            "--server",
            &node.api.base,
            "--token",
            TOKEN,
        ])
        .args(["--database-url", db])
        .args(args)
        .output()
        .expect("running rota import xxl-job");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}

/// [`run_import`], which must succeed: its stdout.
fn import(node: &Standalone, db: &str, args: &[&str]) -> String {
    let (ok, stdout, stderr) = run_import(node, db, args);
    assert!(ok, "rota import failed: {stdout}{stderr}");
    stdout
}

/// A scratch MariaDB database holding XXL-JOB's tables, [`rows`] and `extra`.
async fn xxl_database(v34: bool, extra: &[String]) -> Option<rota_testkit::MysqlDb> {
    let db = rota_testkit::MysqlDb::create("rota_xxl").await?;
    let pool = sqlx::MySqlPool::connect(&db.url).await.unwrap();
    for sql in schema(v34).iter().chain(&rows(v34)).chain(extra) {
        sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
            .execute(&pool)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    pool.close().await;
    Some(db)
}

async fn job(api: &Api, name: &str) -> Value {
    api.ok("GET", &format!("/api/v1/jobs/{name}"), None).await
}

async fn imports_an_xxl_job_database(v34: bool) {
    let Some(db) = xxl_database(v34, &[]).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let node = Standalone::start(dir.path());
    let api = &node.api;
    // Before 3.4 the token was in the admin's config: the flag gives it.
    let token_flag: &[&str] = if v34 {
        &[]
    } else {
        &["--access-token", "tok-2x"]
    };

    let dry = import(&node, &db.url, &[token_flag, &["--dry-run"]].concat());
    assert!(dry.contains("create     job xxl-1 (关闭订单)"), "{dry}");
    assert!(dry.contains("--dry-run changed nothing"), "{dry}");
    let (status, _) = api.call("GET", "/api/v1/jobs/xxl-1", None).await;
    assert_eq!(status, 404, "a dry run makes nothing");

    let first = import(&node, &db.url, token_flag);
    assert!(
        first.contains("skipped    XXL job 3 (清理脚本): a GLUE job (GLUE_SHELL)"),
        "{first}"
    );
    let close = job(api, "xxl-1").await;
    assert_eq!(close["app"], "orders");
    assert_eq!(close["schedule"]["kind"], "cron");
    assert_eq!(close["schedule"]["expr"], "0 0/5 * * * ?");
    assert_eq!(close["misfire"], "fire_once_now");
    assert_eq!(close["route"], "round_robin");
    assert_eq!(close["block"], "discard_later");
    assert_eq!(close["params"], "region=cn");
    assert_eq!(close["enabled"], true);
    assert_eq!(close["delivery"]["kind"], "xxl");
    assert_eq!(close["delivery"]["handler"], "closeOrders");
    let notify = job(api, "xxl-4").await;
    assert_eq!(close["child_jobs"], serde_json::json!([notify["id"]]));
    let rec = job(api, "xxl-2").await;
    assert_eq!(rec["schedule"]["kind"], "fixed_rate");
    assert_eq!(rec["schedule"]["every_ms"], 30_000);
    assert_eq!(rec["route"], "sharding_broadcast");
    assert_eq!(rec["max_attempts"], 3, "two retries are three attempts");
    assert_eq!(rec["timeout_ms"], 10_000);
    assert_eq!(rec["enabled"], false);
    for (i, (_, route)) in ROUTES.iter().enumerate() {
        let j = job(api, &format!("xxl-{}", 10 + i)).await;
        assert_eq!(j["route"], *route, "{j}");
        assert_eq!(j["block"], "cover_early", "{j}");
        assert_eq!(j["schedule"]["kind"], "none", "{j}");
    }
    let (status, _) = api.call("GET", "/api/v1/jobs/xxl-3", None).await;
    assert_eq!(status, 404, "the GLUE job is not imported");
    let secrets = api.ok("GET", "/api/v1/apps/orders/secrets", None).await;
    assert!(
        secrets.to_string().contains("xxl-access-token"),
        "the app's token is set: {secrets}"
    );
    let channel = api
        .ok("GET", "/api/v1/alarm-channels/xxl-1-mail", None)
        .await;
    assert_eq!(
        channel["to"],
        serde_json::json!(["ops@example.com", "dev@example.com"])
    );
    let rule = api
        .ok("GET", "/api/v1/alarm-rules/xxl-1-failed", None)
        .await;
    assert_eq!(rule["on"], "run_failed");

    let again = import(&node, &db.url, token_flag);
    assert!(
        again.contains("0 created, 0 updated"),
        "a second import changes nothing: {again}"
    );
    db.drop_db().await;
}

#[tokio::test]
async fn an_xxl_job_2x_database_is_imported_once() {
    imports_an_xxl_job_database(false).await;
}

#[tokio::test]
async fn an_xxl_job_3_4_database_is_imported_with_its_group_tokens() {
    imports_an_xxl_job_database(true).await;
}

/// Rows Rota cannot take (an unknown route, a cron expression that does not parse) are
/// each named, and the import changes nothing at all.
#[tokio::test]
async fn bad_rows_are_named_and_nothing_is_half_imported() {
    let bad = |id: i64, route: &str, cron: &str| {
        format!(
            "INSERT INTO xxl_job_info (`id`, `job_group`, `job_desc`, `schedule_type`, \
             `schedule_conf`, `executor_route_strategy`, `executor_handler`, \
             `executor_block_strategy`, `glue_type`) \
             VALUES ({id}, 1, 'bad {id}', 'CRON', '{cron}', '{route}', 'hello', \
             'SERIAL_EXECUTION', 'BEAN')"
        )
    };
    let extra = [
        bad(50, "NOPE", "0 * * * * ?"),
        bad(51, "FIRST", "every tuesday"),
    ];
    let Some(db) = xxl_database(false, &extra).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let node = Standalone::start(dir.path());
    let (ok, stdout, stderr) = run_import(&node, &db.url, &["--access-token", "t"]);
    assert!(!ok, "an import with bad rows fails: {stdout}");
    assert!(
        stderr.contains("XXL job 50 (bad 50): route `NOPE` is not one Rota knows"),
        "{stderr}"
    );
    assert!(
        stderr.contains("XXL job 51 (bad 51): cron `every tuesday`"),
        "{stderr}"
    );
    assert!(stderr.contains("nothing was changed"), "{stderr}");
    let jobs = node.api.ok("GET", "/api/v1/jobs", None).await;
    assert!(
        !jobs.to_string().contains("xxl-"),
        "no job was made: {jobs}"
    );
    let (status, secrets) = node
        .api
        .call("GET", "/api/v1/apps/orders/secrets", None)
        .await;
    assert!(
        status == 404 || !secrets.to_string().contains("xxl-access-token"),
        "no token was set: {status} {secrets}"
    );
    db.drop_db().await;
}
