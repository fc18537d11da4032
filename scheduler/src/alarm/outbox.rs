//! The outbox: every node folds rules' waiting events into alarms and sends the alarms'
//! pending sends, each claimed by one node for [`CLAIM_MS`] (so a node that dies mid-send
//! leaves it to the next), retried with backoff until delivered or [`GIVE_UP_MS`] old.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{Semaphore, watch};

use super::channel::{Kind, Message, Sender, Target};
use super::{Rules, fold};
use crate::clock::Clock;
use crate::model::*;
use crate::secrets::SecretBox;
use crate::store::{AlarmChannelRow, AlarmRow, Store};

/// How often the outbox looks for events to fold and sends to make.
const TICK: Duration = Duration::from_millis(250);
/// How long a node holds a send it claimed (longer than a send's timeout).
pub const CLAIM_MS: i64 = 30_000;
/// Sends in flight at once on one node.
const IN_FLIGHT: usize = 32;
/// The first retry's delay; doubling up to [`MAX_RETRY_MS`].
const FIRST_RETRY_MS: i64 = 2_000;
const MAX_RETRY_MS: i64 = 300_000;
/// A send still failing this long after its alarm was made gives up (`failed`).
pub const GIVE_UP_MS: i64 = 86_400_000;

/// What alarms need on a node: the store, the rules, the sender, the secret box (channel
/// URLs are sealed; signing secrets are the apps').
pub struct Alarms {
    pub store: Store,
    pub rules: Arc<Rules>,
    pub sender: Sender,
    pub secrets: Arc<SecretBox>,
    /// When alarms are raised, sent and retried: the node's time.
    pub clock: Clock,
    in_flight: Arc<Semaphore>,
}

/// The secret-box name a channel's URL is sealed under.
fn url_name(channel: &str) -> String {
    format!("alarm-channel:{channel}")
}

/// The secret-box app of a channel (`*` for one that serves every app).
fn box_app(app: Option<&str>) -> &str {
    app.unwrap_or("*")
}

impl Alarms {
    pub fn new(
        store: Store,
        rules: Arc<Rules>,
        sender: Sender,
        secrets: Arc<SecretBox>,
        clock: Clock,
    ) -> Self {
        Alarms {
            store,
            rules,
            sender,
            secrets,
            clock,
            in_flight: Arc::new(Semaphore::new(IN_FLIGHT)),
        }
    }

    /// A channel's URL, sealed for the store.
    pub fn seal_url(&self, app: Option<&str>, channel: &str, url: &str) -> Vec<u8> {
        self.secrets
            .seal(box_app(app), &url_name(channel), url.as_bytes())
    }

    /// A stored channel's URL, opened (`None` for an email channel).
    pub fn open_url(&self, c: &AlarmChannelRow) -> Result<Option<String>, String> {
        c.url_sealed
            .as_ref()
            .map(|sealed| {
                self.secrets
                    .open(box_app(c.app.as_deref()), &url_name(&c.name), sealed)
                    .map_err(|e| e.to_string())
                    .and_then(|v| String::from_utf8(v).map_err(|e| e.to_string()))
            })
            .transpose()
    }

    /// A stored channel, ready to send: its URL opened, its signing secret read.
    pub async fn target(&self, c: &AlarmChannelRow) -> Result<Target, String> {
        let kind: Kind = c.kind.parse()?;
        let url = self.open_url(c)?;
        let secret = match (&c.secret, &c.app) {
            (Some(name), Some(app)) => {
                let sealed = self
                    .store
                    .secret(app, name)
                    .await
                    .map_err(|e| e.to_string())?
                    .ok_or_else(|| {
                        format!("channel `{}`: app `{app}` has no secret `{name}`", c.name)
                    })?;
                Some(
                    self.secrets
                        .open(app, name, &sealed)
                        .map_err(|e| e.to_string())?,
                )
            }
            _ => None,
        };
        let to = match &c.recipients {
            Some(json) => serde_json::from_str(json).map_err(|e| e.to_string())?,
            None => Vec::new(),
        };
        Ok(Target {
            name: c.name.clone(),
            kind,
            url,
            to,
            secret,
        })
    }

    /// An alarm as channels tell it (the job by name, if it still exists).
    pub async fn message(&self, a: &AlarmRow) -> Message {
        let job = match a.job_id {
            Some(id) => Some(match self.store.get_job(id).await {
                Ok(job) => job.spec.name,
                Err(_) => format!("#{id}"),
            }),
            None => None,
        };
        Message {
            rule: a.rule.clone(),
            on: a.on_event.clone(),
            app: a.app.clone(),
            job,
            task: a.task_id,
            run: a.run_id,
            attempt: a.attempt,
            message: a.message.clone(),
            at: crate::model::rfc3339(a.last_at),
            count: a.count,
            resolved: a.resolved,
        }
    }

    /// Folds the waiting events of every rule whose fold is due (a glance at when its
    /// events came spares reading those of a rule that waits); the alarms made.
    pub async fn fold_all(&self, now: Millis) -> crate::store::Result<usize> {
        let waiting = self.store.waiting_alarm_events().await?;
        if waiting.is_empty() {
            return Ok(0);
        }
        let rules = self.store.alarm_rules().await?;
        let mut made = 0;
        for w in waiting {
            let due = rules
                .iter()
                .find(|r| r.id == w.rule_id)
                .is_none_or(|r| fold::due(r, w.first_at, w.last_at, w.last_resolved, now));
            if !due {
                continue;
            }
            let alarms = self
                .store
                .fold_alarm_events(w.rule_id, now, &|r, pending| fold::fold(r, pending, now))
                .await?;
            for a in &alarms {
                let state = if a.resolved { "resolved" } else { "raised" };
                metrics::counter!("rota_alarms_total", "rule" => a.rule.clone(), "on" => a.on_event.clone(), "status" => state)
                    .increment(1);
            }
            if !alarms.is_empty() {
                // A rule that opened or cleared: the raisers see it now, not at the next read.
                self.rules.refresh(&self.store).await?;
            }
            made += alarms.len();
        }
        Ok(made)
    }

    /// Claims the sends that are due (as many as there is room for) and sends each in
    /// its own task.
    async fn send_due(self: &Arc<Self>, now: Millis) -> crate::store::Result<()> {
        let room = self.in_flight.available_permits();
        if room == 0 {
            return Ok(());
        }
        let claimed = self
            .store
            .claim_alarm_deliveries(now, now + CLAIM_MS, room as u32)
            .await?;
        for d in claimed {
            let Ok(permit) = self.in_flight.clone().try_acquire_owned() else {
                break;
            };
            let me = self.clone();
            tokio::spawn(async move {
                let outcome = me.deliver(d.alarm_id, &d.channel, d.attempts).await;
                if let Err(e) = me
                    .store
                    .finish_alarm_delivery(d.alarm_id, &d.channel, outcome)
                    .await
                {
                    tracing::warn!(alarm = d.alarm_id, channel = %d.channel, error = %e, "recording an alarm send failed");
                }
                drop(permit);
            });
        }
        Ok(())
    }

    /// One send: `Ok(sent_at)`, or the error with the next try (`None`: give up).
    async fn deliver(
        &self,
        alarm_id: i64,
        channel: &str,
        attempts: i32,
    ) -> Result<Millis, (String, Option<Millis>)> {
        let give_up = |e: String| (e, None);
        let alarm = match self.store.alarm(alarm_id).await {
            Ok(Some(a)) => a,
            Ok(None) => return Err(give_up(format!("alarm {alarm_id} is gone"))),
            Err(e) => return Err((e.to_string(), Some(self.clock.now_ms() + FIRST_RETRY_MS))),
        };
        let row = match self.store.alarm_channel(channel).await {
            Ok(Some(c)) => c,
            Ok(None) => return Err(give_up(format!("channel `{channel}` was deleted"))),
            Err(e) => return Err((e.to_string(), Some(self.clock.now_ms() + FIRST_RETRY_MS))),
        };
        let result = match self.target(&row).await {
            Ok(target) => {
                let m = self.message(&alarm).await;
                // Bots check a signature's timestamp against their own wall clocks.
                self.sender.send(&target, &m, wall_ms()).await
            }
            Err(e) => Err(e),
        };
        let now = self.clock.now_ms();
        let status = if result.is_ok() { "sent" } else { "failed" };
        metrics::counter!("rota_alarm_sends_total", "channel" => channel.to_owned(), "status" => status)
            .increment(1);
        match result {
            Ok(()) => {
                metrics::counter!("rota_alarms_total", "rule" => alarm.rule.clone(), "on" => alarm.on_event.clone(), "status" => "sent")
                    .increment(1);
                Ok(now)
            }
            Err(e) => {
                tracing::warn!(alarm = alarm_id, channel, attempt = attempts + 1, error = %e, "an alarm was not delivered");
                if now - alarm.created_at >= GIVE_UP_MS {
                    metrics::counter!("rota_alarms_total", "rule" => alarm.rule.clone(), "on" => alarm.on_event.clone(), "status" => "failed")
                        .increment(1);
                    return Err(give_up(e));
                }
                let delay = FIRST_RETRY_MS
                    .saturating_mul(1_i64 << attempts.clamp(0, 20))
                    .min(MAX_RETRY_MS);
                Err((e, Some(now + delay)))
            }
        }
    }
}

/// The outbox loop of a node, until shutdown: reads the rules again every
/// [`super::REFRESH`], folds events, sends what is due.
pub async fn outbox_loop(alarms: Arc<Alarms>, shutdown: watch::Receiver<bool>) {
    let mut every = crate::periodic::Every::new(TICK, shutdown);
    let mut read_at: Option<Instant> = None;
    while every.tick().await {
        if read_at.is_none_or(|at| at.elapsed() >= super::REFRESH) {
            match alarms.rules.refresh(&alarms.store).await {
                Ok(()) => read_at = Some(Instant::now()),
                Err(e) => tracing::warn!(error = %e, "reading the alarm rules failed"),
            }
            let open = alarms.rules.snapshot().iter().filter(|r| r.open).count();
            metrics::gauge!("rota_alarm_open_conditions").set(open as f64);
        }
        let now = alarms.clock.now_ms();
        if let Err(e) = alarms.fold_all(now).await {
            tracing::warn!(error = %e, "folding alarm events failed");
        }
        if let Err(e) = alarms.send_due(now).await {
            tracing::warn!(error = %e, "claiming alarm sends failed");
        }
    }
}
