//! Alarms (SPEC §9): channels and rules, the events rules raise, the alarms the throttle
//! folds them into, and each alarm's sends (one per channel) — the outbox any node sends
//! from, claiming a send for a while so that one node sends it, and another takes it up if
//! that node dies.

use sqlx::{FromRow, QueryBuilder};

use super::*;

/// A channel as stored; its URL sealed.
#[derive(Debug, Clone, PartialEq, FromRow)]
pub struct AlarmChannelRow {
    pub name: String,
    pub app: Option<String>,
    pub kind: String,
    pub url_sealed: Option<Vec<u8>>,
    pub url_hint: Option<String>,
    /// Email: the recipients, JSON.
    pub recipients: Option<String>,
    /// The app secret that signs its messages.
    pub secret: Option<String>,
    pub created_at: i64,
}

/// A rule as stored.
#[derive(Debug, Clone, PartialEq, FromRow)]
pub struct AlarmRuleRow {
    pub id: i64,
    pub name: String,
    pub app: String,
    pub job_id: Option<i64>,
    pub on_event: String,
    pub threshold: Option<i64>,
    /// Channel names, JSON.
    pub channels: String,
    pub throttle_ms: i64,
    pub enabled: bool,
    pub open_since: Option<i64>,
    pub last_sent_at: Option<i64>,
    pub created_at: i64,
    pub updated_at: i64,
}

/// An event a rule saw, to fold into its next alarm.
#[derive(Debug, Clone, PartialEq, FromRow)]
pub struct AlarmEvent {
    #[sqlx(default)]
    pub id: i64,
    pub rule_id: i64,
    /// The rule's condition cleared.
    pub resolved: bool,
    /// How many events of the rule this row stands for (those of one batch fold into one
    /// row, told by the last of them).
    pub count: i32,
    pub job_id: Option<i64>,
    pub task_id: Option<i64>,
    pub run_id: Option<i64>,
    pub attempt: Option<i32>,
    pub message: String,
    pub at: Millis,
}

/// An alarm the throttle let out.
#[derive(Debug, Clone, PartialEq, FromRow)]
pub struct AlarmRow {
    pub id: i64,
    pub rule_id: i64,
    pub rule: String,
    pub on_event: String,
    pub app: String,
    pub job_id: Option<i64>,
    pub task_id: Option<i64>,
    pub run_id: Option<i64>,
    pub attempt: Option<i32>,
    pub message: String,
    pub count: i32,
    pub resolved: bool,
    pub first_at: i64,
    pub last_at: i64,
    pub created_at: i64,
}

/// One alarm's send to one channel.
#[derive(Debug, Clone, PartialEq, FromRow)]
pub struct AlarmDelivery {
    pub alarm_id: i64,
    pub channel: String,
    /// `pending`, `sent`, or `failed` (it gave up).
    pub status: String,
    pub attempts: i32,
    pub next_at: i64,
    pub last_error: Option<String>,
    pub sent_at: Option<i64>,
}

/// A rule's waiting events at a glance ([`Store::waiting_alarm_events`]).
#[derive(Debug, Clone, PartialEq, FromRow)]
pub struct WaitingEvents {
    pub rule_id: i64,
    pub first_at: i64,
    pub last_at: i64,
    /// The last of them is a resolve.
    pub last_resolved: bool,
}

/// A rule's waiting events as a fold weighs them, summed by the store.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Pending {
    pub problems: Option<Problems>,
    /// The first resolve after the last problem (the first of all, without problems).
    pub resolve: Option<AlarmEvent>,
}

/// The problems (events that are not resolves) among a rule's waiting events.
#[derive(Debug, Clone, PartialEq)]
pub struct Problems {
    /// How many events they stand for.
    pub count: i64,
    /// When the first came.
    pub first_at: Millis,
    /// The last, which tells the alarm.
    pub last: AlarmEvent,
}

impl Pending {
    /// What the store sums from rows, summed from a list (the same rules, for tests).
    pub fn of(events: &[AlarmEvent]) -> Pending {
        let problems: Vec<&AlarmEvent> = events.iter().filter(|e| !e.resolved).collect();
        let last_problem = problems.last().map(|e| e.id).unwrap_or(i64::MIN);
        Pending {
            problems: problems.last().map(|last| Problems {
                count: problems.iter().map(|e| i64::from(e.count)).sum(),
                first_at: problems.iter().map(|e| e.at).min().unwrap_or(last.at),
                last: (*last).clone(),
            }),
            resolve: events
                .iter()
                .find(|e| e.resolved && e.id > last_problem)
                .cloned(),
        }
    }
}

/// What folding a rule's events decided ([`Store::fold_alarm_events`]).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Folded {
    /// Alarms to send, in order (a message, then maybe its recovery notice).
    pub alarms: Vec<AlarmRow>,
    /// The waiting events are used up (else they wait for a later fold).
    pub consumed: bool,
    pub open_since: Option<i64>,
    pub last_sent_at: Option<i64>,
}

const RULE_COLUMNS: &str = "id, name, app, job_id, on_event, threshold, channels, throttle_ms, enabled, \
     open_since, last_sent_at, created_at, updated_at";
const CHANNEL_COLUMNS: &str =
    "name, app, kind, url_sealed, url_hint, recipients, secret, created_at";
const ALARM_COLUMNS: &str = "id, rule_id, rule, on_event, app, job_id, task_id, run_id, attempt, message, count, \
     resolved, first_at, last_at, created_at";

/// A unique-key violation said in words: `what` named `name` already exists.
fn exists(what: &'static str, name: &str) -> impl FnOnce(sqlx::Error) -> Error {
    let name = name.to_owned();
    move |e| match Error::from(e) {
        Error::Conflict(_) => Error::Conflict(format!("{what} `{name}` already exists")),
        other => other,
    }
}

impl Store {
    pub async fn create_alarm_channel(&self, c: &AlarmChannelRow) -> Result<()> {
        on_pool!(self, |pool, Db| {
            sqlx::query(
                "INSERT INTO alarm_channels (name, app, kind, url_sealed, url_hint, recipients, secret, created_at) \
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            )
            .bind(&c.name)
            .bind(&c.app)
            .bind(&c.kind)
            .bind(&c.url_sealed)
            .bind(&c.url_hint)
            .bind(&c.recipients)
            .bind(&c.secret)
            .bind(c.created_at)
            .execute(pool)
            .await
            .map_err(exists("alarm channel", &c.name))?;
        });
        Ok(())
    }

    pub async fn alarm_channels(&self) -> Result<Vec<AlarmChannelRow>> {
        self.named_rows(CHANNEL_COLUMNS, "alarm_channels", None)
            .await
    }

    pub async fn alarm_channel(&self, name: &str) -> Result<Option<AlarmChannelRow>> {
        Ok(self
            .named_rows(CHANNEL_COLUMNS, "alarm_channels", Some(name))
            .await?
            .pop())
    }

    /// Changes where a channel sends and how it signs (its name, app and kind stay); false
    /// if there is no such channel.
    pub async fn update_alarm_channel(&self, c: &AlarmChannelRow) -> Result<bool> {
        on_pool!(self, |pool, Db| {
            Ok(sqlx::query(
                "UPDATE alarm_channels SET url_sealed = ?, url_hint = ?, recipients = ?, \
                 secret = ? WHERE name = ?",
            )
            .bind(&c.url_sealed)
            .bind(&c.url_hint)
            .bind(&c.recipients)
            .bind(&c.secret)
            .bind(&c.name)
            .execute(pool)
            .await?
            .affected()
                > 0)
        })
    }

    /// Deletes a channel; false if there was none. Its pending sends fail when they come up.
    pub async fn delete_alarm_channel(&self, name: &str) -> Result<bool> {
        on_pool!(self, |pool, Db| {
            Ok(sqlx::query("DELETE FROM alarm_channels WHERE name = ?")
                .bind(name)
                .execute(pool)
                .await?
                .affected()
                > 0)
        })
    }

    /// Creates a rule; its id.
    pub async fn create_alarm_rule(&self, r: &AlarmRuleRow) -> Result<i64> {
        on_pool!(self, |pool, Db| {
            let done = sqlx::query(
                "INSERT INTO alarm_rules (name, app, job_id, on_event, threshold, channels, throttle_ms, \
                 enabled, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            )
            .bind(&r.name)
            .bind(&r.app)
            .bind(r.job_id)
            .bind(&r.on_event)
            .bind(r.threshold)
            .bind(&r.channels)
            .bind(r.throttle_ms)
            .bind(r.enabled)
            .bind(r.created_at)
            .bind(r.updated_at)
            .execute(pool)
            .await
            .map_err(exists("alarm rule", &r.name))?;
            Ok(done.insert_id())
        })
    }

    /// Writes a rule's settings (not its open/sent state); false if it is gone.
    pub async fn update_alarm_rule(&self, r: &AlarmRuleRow) -> Result<bool> {
        on_pool!(self, |pool, Db| {
            Ok(sqlx::query(
                "UPDATE alarm_rules SET job_id = ?, on_event = ?, threshold = ?, channels = ?, \
                 throttle_ms = ?, enabled = ?, updated_at = ? WHERE id = ?",
            )
            .bind(r.job_id)
            .bind(&r.on_event)
            .bind(r.threshold)
            .bind(&r.channels)
            .bind(r.throttle_ms)
            .bind(r.enabled)
            .bind(r.updated_at)
            .bind(r.id)
            .execute(pool)
            .await?
            .affected()
                > 0)
        })
    }

    pub async fn alarm_rules(&self) -> Result<Vec<AlarmRuleRow>> {
        self.named_rows(RULE_COLUMNS, "alarm_rules", None).await
    }

    pub async fn alarm_rule(&self, name: &str) -> Result<Option<AlarmRuleRow>> {
        Ok(self
            .named_rows(RULE_COLUMNS, "alarm_rules", Some(name))
            .await?
            .pop())
    }

    /// The rows of a table of named things (channels, rules) by name, or the one named.
    async fn named_rows<T>(&self, columns: &str, table: &str, name: Option<&str>) -> Result<Vec<T>>
    where
        T: Send
            + Unpin
            + for<'r> FromRow<'r, sqlx::mysql::MySqlRow>
            + for<'r> FromRow<'r, sqlx::sqlite::SqliteRow>,
    {
        let filter = if name.is_some() {
            " WHERE name = ?"
        } else {
            ""
        };
        let sql = format!("SELECT {columns} FROM {table}{filter} ORDER BY name");
        on_pool!(self, |pool, Db| {
            let mut q = sqlx::query_as(sqlx::AssertSqlSafe(sql));
            if let Some(name) = name {
                q = q.bind(name);
            }
            Ok(q.fetch_all(pool).await?)
        })
    }

    /// Deletes a rule and the events it had not folded yet; false if there was none.
    pub async fn delete_alarm_rule(&self, name: &str) -> Result<bool> {
        retrying!("delete_alarm_rule", {
            on_pool!(self, |pool, Db| {
                let mut tx = pool.begin_write().await?;
                sqlx::query(
                    "DELETE FROM alarm_events WHERE rule_id IN (SELECT id FROM alarm_rules WHERE name = ?)",
                )
                .bind(name)
                .execute(&mut *tx)
                .await?;
                let gone = sqlx::query("DELETE FROM alarm_rules WHERE name = ?")
                    .bind(name)
                    .execute(&mut *tx)
                    .await?
                    .affected()
                    > 0;
                tx.commit().await?;
                Ok(gone)
            })
        })
    }

    /// Records events (outside any other transaction: conditions a watcher saw).
    pub async fn raise_alarm_events(&self, events: &[AlarmEvent]) -> Result<()> {
        retrying!("raise_alarm_events", {
            if events.is_empty() {
                return Ok(());
            }
            let mut tx = self.begin().await?;
            self.insert_alarm_events(&mut tx, events).await?;
            tx.commit().await?;
            Ok(())
        })
    }

    /// Records events inside `tx`: they are kept exactly when what they tell of is.
    pub(super) async fn insert_alarm_events(
        &self,
        tx: &mut Tx,
        events: &[AlarmEvent],
    ) -> Result<()> {
        on_tx!(tx, |tx, Db| {
            for chunk in events.chunks(CHUNK) {
                let mut qb = QueryBuilder::<Db>::new(
                    "INSERT INTO alarm_events (rule_id, resolved, count, job_id, task_id, run_id, attempt, message, at) ",
                );
                qb.push_values(chunk, |mut b, e| {
                    b.push_bind(e.rule_id)
                        .push_bind(e.resolved)
                        .push_bind(e.count)
                        .push_bind(e.job_id)
                        .push_bind(e.task_id)
                        .push_bind(e.run_id)
                        .push_bind(e.attempt)
                        .push_bind(truncate_message(&e.message))
                        .push_bind(e.at);
                });
                qb.build().execute(&mut **tx).await?;
            }
        });
        Ok(())
    }

    /// The rules that have events waiting, each with when its first and last came and
    /// whether the last is a resolve: enough to tell whether folding is due yet, read
    /// from the ends of the `(rule_id, id)` index, however many events wait.
    pub async fn waiting_alarm_events(&self) -> Result<Vec<WaitingEvents>> {
        on_pool!(self, |pool, Db| {
            Ok(sqlx::query_as(
                "SELECT w.rule_id, f.at AS first_at, l.at AS last_at, l.resolved AS last_resolved \
                 FROM (SELECT rule_id, MIN(id) AS first_id, MAX(id) AS last_id \
                       FROM alarm_events GROUP BY rule_id) w \
                 JOIN alarm_events f ON f.id = w.first_id JOIN alarm_events l ON l.id = w.last_id",
            )
            .fetch_all(pool)
            .await?)
        })
    }

    /// Folds rule `rule_id`'s waiting events with `fold` (given the rule, locked, and its
    /// events summed), in one transaction: the events are marked as this fold's, the
    /// alarms it makes are written with a pending send per channel of the rule, the marked
    /// events are deleted and the rule's open/sent state is updated. Two nodes folding one
    /// rule take turns; an event committed meanwhile waits for the next fold. The new
    /// alarms.
    pub async fn fold_alarm_events(
        &self,
        rule_id: i64,
        now: Millis,
        fold: &(dyn Fn(&AlarmRuleRow, &Pending) -> Folded + Sync),
    ) -> Result<Vec<AlarmRow>> {
        retrying!("fold_alarm_events", {
            let lock = if self.is_mysql() { " FOR UPDATE" } else { "" };
            let mut tx = self.begin().await?;
            let rule: Option<AlarmRuleRow> = on_tx!(&mut tx, |tx, Db| {
                sqlx::query_as(sqlx::AssertSqlSafe(format!(
                    "SELECT {RULE_COLUMNS} FROM alarm_rules WHERE id = ?{lock}"
                )))
                .bind(rule_id)
                .fetch_optional(&mut **tx)
                .await?
            });
            let Some(rule) = rule else {
                // The rule is gone: so are its events.
                on_tx!(&mut tx, |tx, Db| {
                    sqlx::query("DELETE FROM alarm_events WHERE rule_id = ?")
                        .bind(rule_id)
                        .execute(&mut **tx)
                        .await?;
                });
                tx.commit().await?;
                return Ok(Vec::new());
            };
            let pending = self.take_events(&mut tx, rule_id).await?;
            let folded = fold(&rule, &pending);
            if !folded.consumed {
                // Dropped uncommitted: the marks are undone, the events wait.
                return Ok(Vec::new());
            }
            let made = self
                .write_alarms(&mut tx, &rule, folded.alarms, now)
                .await?;
            on_tx!(&mut tx, |tx, Db| {
                sqlx::query("DELETE FROM alarm_events WHERE rule_id = ? AND folding")
                    .bind(rule_id)
                    .execute(&mut **tx)
                    .await?;
                sqlx::query("UPDATE alarm_rules SET open_since = ?, last_sent_at = ? WHERE id = ?")
                    .bind(folded.open_since)
                    .bind(folded.last_sent_at)
                    .bind(rule_id)
                    .execute(&mut **tx)
                    .await?;
            });
            tx.commit().await?;
            Ok(made)
        })
    }

    /// Marks rule `rule_id`'s waiting events as this transaction's fold and sums them.
    async fn take_events(&self, tx: &mut Tx, rule_id: i64) -> Result<Pending> {
        const EVENT: &str = "SELECT id, rule_id, resolved, count, job_id, task_id, run_id, attempt, message, at \
             FROM alarm_events WHERE rule_id = ? AND folding AND resolved = ?";
        on_tx!(tx, |tx, Db| {
            sqlx::query("UPDATE alarm_events SET folding = TRUE WHERE rule_id = ? AND NOT folding")
                .bind(rule_id)
                .execute(&mut **tx)
                .await?;
            let last: Option<AlarmEvent> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "{EVENT} ORDER BY id DESC LIMIT 1"
            )))
            .bind(rule_id)
            .bind(false)
            .fetch_optional(&mut **tx)
            .await?;
            let problems = match last {
                Some(last) => {
                    let (count, first_at): (i64, i64) = sqlx::query_as(
                        "SELECT CAST(SUM(count) AS SIGNED), MIN(at) FROM alarm_events \
                         WHERE rule_id = ? AND folding AND NOT resolved",
                    )
                    .bind(rule_id)
                    .fetch_one(&mut **tx)
                    .await?;
                    Some(Problems {
                        count,
                        first_at,
                        last,
                    })
                }
                None => None,
            };
            let after = problems.as_ref().map_or(i64::MIN, |p| p.last.id);
            let resolve: Option<AlarmEvent> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "{EVENT} AND id > ? ORDER BY id LIMIT 1"
            )))
            .bind(rule_id)
            .bind(true)
            .bind(after)
            .fetch_optional(&mut **tx)
            .await?;
            Ok(Pending { problems, resolve })
        })
    }

    /// Writes `alarms` of `rule`, each with a pending send per channel of the rule.
    async fn write_alarms(
        &self,
        tx: &mut Tx,
        rule: &AlarmRuleRow,
        alarms: Vec<AlarmRow>,
        now: Millis,
    ) -> Result<Vec<AlarmRow>> {
        let channels: Vec<String> = parse_json(&rule.channels)?;
        let mut made = Vec::with_capacity(alarms.len());
        for a in alarms {
            let id = on_tx!(tx, |tx, Db| {
                let id = sqlx::query(
                    "INSERT INTO alarms (rule_id, rule, on_event, app, job_id, task_id, run_id, attempt, message, \
                     count, resolved, first_at, last_at, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                )
                .bind(a.rule_id)
                .bind(&a.rule)
                .bind(&a.on_event)
                .bind(&a.app)
                .bind(a.job_id)
                .bind(a.task_id)
                .bind(a.run_id)
                .bind(a.attempt)
                .bind(truncate_message(&a.message))
                .bind(a.count)
                .bind(a.resolved)
                .bind(a.first_at)
                .bind(a.last_at)
                .bind(now)
                .execute(&mut **tx)
                .await?
                .insert_id();
                if !channels.is_empty() {
                    let mut qb = QueryBuilder::<Db>::new(
                        "INSERT INTO alarm_deliveries (alarm_id, channel, status, attempts, next_at) ",
                    );
                    qb.push_values(&channels, |mut b, c| {
                        b.push_bind(id)
                            .push_bind(c.as_str())
                            .push_bind("pending")
                            .push_bind(0_i32)
                            .push_bind(now);
                    });
                    qb.build().execute(&mut **tx).await?;
                }
                id
            });
            made.push(AlarmRow {
                id,
                created_at: now,
                ..a
            });
        }
        Ok(made)
    }

    /// Claims up to `limit` sends that are due, each until `claim_until` (a send claimed by
    /// a node that died is due again once its claim ends). The claimed sends.
    pub async fn claim_alarm_deliveries(
        &self,
        now: Millis,
        claim_until: Millis,
        limit: u32,
    ) -> Result<Vec<AlarmDelivery>> {
        let due: Vec<AlarmDelivery> = on_pool!(self, |pool, Db| {
            sqlx::query_as(
                "SELECT alarm_id, channel, status, attempts, next_at, last_error, sent_at \
                 FROM alarm_deliveries WHERE status = 'pending' AND next_at <= ? \
                 AND (claimed_until IS NULL OR claimed_until < ?) ORDER BY next_at LIMIT ?",
            )
            .bind(now)
            .bind(now)
            .bind(i64::from(limit))
            .fetch_all(pool)
            .await?
        });
        let mut claimed = Vec::with_capacity(due.len());
        for d in due {
            let won = on_pool!(self, |pool, Db| {
                sqlx::query(
                    "UPDATE alarm_deliveries SET claimed_until = ? WHERE alarm_id = ? AND channel = ? \
                     AND status = 'pending' AND (claimed_until IS NULL OR claimed_until < ?)",
                )
                .bind(claim_until)
                .bind(d.alarm_id)
                .bind(&d.channel)
                .bind(now)
                .execute(pool)
                .await?
                .affected()
                    > 0
            });
            if won {
                claimed.push(d);
            }
        }
        Ok(claimed)
    }

    /// Ends a claimed send: `sent`; or failed once more, `next_at` the next try (`None`:
    /// it gave up, `failed`).
    pub async fn finish_alarm_delivery(
        &self,
        alarm_id: i64,
        channel: &str,
        outcome: std::result::Result<Millis, (String, Option<Millis>)>,
    ) -> Result<()> {
        on_pool!(self, |pool, Db| {
            match outcome {
                Ok(sent_at) => sqlx::query(
                    "UPDATE alarm_deliveries SET status = 'sent', attempts = attempts + 1, sent_at = ?, \
                     claimed_until = NULL WHERE alarm_id = ? AND channel = ?",
                )
                .bind(sent_at)
                .bind(alarm_id)
                .bind(channel)
                .execute(pool)
                .await?,
                Err((error, next_at)) => sqlx::query(
                    "UPDATE alarm_deliveries SET status = ?, attempts = attempts + 1, next_at = COALESCE(?, next_at), \
                     last_error = ?, claimed_until = NULL WHERE alarm_id = ? AND channel = ?",
                )
                .bind(if next_at.is_some() { "pending" } else { "failed" })
                .bind(next_at)
                .bind(truncate_message(&error))
                .bind(alarm_id)
                .bind(channel)
                .execute(pool)
                .await?,
            };
        });
        Ok(())
    }

    /// One alarm.
    pub async fn alarm(&self, id: i64) -> Result<Option<AlarmRow>> {
        on_pool!(self, |pool, Db| {
            Ok(sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "SELECT {ALARM_COLUMNS} FROM alarms WHERE id = ?"
            )))
            .bind(id)
            .fetch_optional(pool)
            .await?)
        })
    }

    /// The history, newest first: alarms of `rule` (any, if `None`) of the apps in
    /// `apps` (any, if `None`) with ids below `before`, and their sends.
    pub async fn alarm_history(
        &self,
        rule: Option<&str>,
        apps: Option<&[String]>,
        before: Option<i64>,
        limit: u32,
    ) -> Result<Vec<(AlarmRow, Vec<AlarmDelivery>)>> {
        let rows: Vec<AlarmRow> = on_pool!(self, |pool, Db| {
            let mut qb =
                QueryBuilder::<Db>::new(format!("SELECT {ALARM_COLUMNS} FROM alarms WHERE 1 = 1"));
            if let Some(rule) = rule {
                qb.push(" AND rule = ").push_bind(rule);
            }
            if let Some(apps) = apps {
                if apps.is_empty() {
                    return Ok(Vec::new());
                }
                qb.push(" AND app IN (");
                let mut sep = qb.separated(", ");
                for a in apps {
                    sep.push_bind(a.as_str());
                }
                qb.push(")");
            }
            if let Some(before) = before {
                qb.push(" AND id < ").push_bind(before);
            }
            qb.push(" ORDER BY id DESC LIMIT ")
                .push_bind(i64::from(limit));
            qb.build_query_as().fetch_all(pool).await?
        });
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let sends: Vec<AlarmDelivery> = on_pool!(self, |pool, Db| {
            let mut qb = QueryBuilder::<Db>::new(
                "SELECT alarm_id, channel, status, attempts, next_at, last_error, sent_at \
                 FROM alarm_deliveries WHERE alarm_id IN ",
            );
            push_ids(&mut qb, rows.iter().map(|r| r.id));
            qb.push(" ORDER BY channel");
            qb.build_query_as().fetch_all(pool).await?
        });
        Ok(rows
            .into_iter()
            .map(|r| {
                let mine = sends
                    .iter()
                    .filter(|s| s.alarm_id == r.id)
                    .cloned()
                    .collect();
                (r, mine)
            })
            .collect())
    }

    /// Fires of `app` (of one job, if given) waiting for an executor: how many, and since
    /// when the oldest waits.
    pub async fn waiting_for_executor(
        &self,
        app: &str,
        job_id: Option<i64>,
    ) -> Result<(i64, Option<i64>)> {
        on_pool!(self, |pool, Db| {
            let mut qb = QueryBuilder::<Db>::new(
                "SELECT COUNT(*), MIN(t.updated_at) FROM tasks t JOIN jobs j ON j.id = t.job_id \
                 JOIN apps a ON a.id = j.app_id WHERE t.status = 'waiting' AND a.name = ",
            );
            qb.push_bind(app);
            if let Some(job) = job_id {
                qb.push(" AND t.job_id = ").push_bind(job);
            }
            Ok(qb
                .build_query_as::<(i64, Option<i64>)>()
                .fetch_one(pool)
                .await?)
        })
    }

    /// When the oldest task of a pull job that is ready for a consumer fell due.
    pub async fn oldest_ready(&self, job_id: i64) -> Result<Option<i64>> {
        on_pool!(self, |pool, Db| {
            Ok(sqlx::query_scalar(
                "SELECT MIN(due_at) FROM tasks WHERE job_id = ? AND status = 'ready'",
            )
            .bind(job_id)
            .fetch_one(pool)
            .await?)
        })
    }
}
