//! Channels: where an alarm goes, in the receiver's own format.
//!
//! - `webhook`: a POST of §9's JSON ([`Message`]), signed like §8 (`x-rota-timestamp`,
//!   `x-rota-signature: v1=HMAC-SHA256(secret, timestamp + "." + body)`) when the channel
//!   names a secret;
//! - `slack`: an incoming webhook, `{"text": …}`;
//! - `dingtalk`: a custom robot, `{"msgtype":"text","text":{"content":…}}`, signed with
//!   `timestamp` and `sign` = Base64(HMAC-SHA256(secret, timestamp + "\n" + secret)) in the
//!   query; the robot answers `errcode` 0;
//! - `feishu` (Lark): a custom bot, `{"timestamp","sign","msg_type":"text","content":{"text"}}`
//!   with `sign` = Base64(HMAC-SHA256(key: timestamp + "\n" + secret, message: empty)),
//!   the timestamp in seconds; the bot answers `code` 0;
//! - `wecom`: a group robot, `{"msgtype":"text","text":{"content":…}}`; it answers `errcode` 0;
//! - `email`: over SMTP (`ROTA_SMTP_URL`, e.g. `smtp://user:pass@mail.example.com:587?tls=required`
//!   for STARTTLS), to the channel's recipients.
//!
//! The HTTP clients and the SMTP transport are built on first use: a channel that cannot be
//! reached never delays start-up, and is only ever waited on by its own sends. Every HTTP
//! channel's URL is bounded by the node's egress policy ([`rota_net::egress`]), like a
//! webhook job's: a refused send sends nothing and its error names the rule. The SMTP
//! server is the admin's own setting (`ROTA_SMTP_URL`), not a channel's, and is not.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use hmac::{Hmac, KeyInit, Mac};
use reqwest::header::CONTENT_TYPE;
use rota_net::egress::{Egress, denied_in};
use serde::Serialize;
use serde_json::json;
use sha2::Sha256;
use tokio::sync::OnceCell;

use crate::model::Millis;
use crate::names::named_enum;

/// How long one send may take.
pub const SEND_TIMEOUT: Duration = Duration::from_secs(10);
/// How much of a refusing answer the send's error keeps.
const ANSWER_EXCERPT: usize = 200;

named_enum! {
    what = "alarm channel kind";
    /// How a channel delivers.
    pub enum Kind {
        Webhook => "webhook",
        Email => "email",
        Slack => "slack",
        Dingtalk => "dingtalk",
        Feishu => "feishu",
        Wecom => "wecom",
    }
}

/// An alarm as every channel is told it (§9).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Message {
    pub rule: String,
    pub on: String,
    pub app: String,
    pub job: Option<String>,
    pub task: Option<i64>,
    pub run: Option<i64>,
    pub attempt: Option<i32>,
    pub message: String,
    /// RFC 3339, when the last event it folds happened.
    pub at: String,
    /// Events folded into it by the throttle.
    pub count: i32,
    pub resolved: bool,
}

impl Message {
    /// The subject line: what happened, where.
    pub fn title(&self) -> String {
        let what = if self.resolved { "RESOLVED" } else { "ALARM" };
        let job = self
            .job
            .as_deref()
            .map(|j| format!(", job `{j}`"))
            .unwrap_or_default();
        let count = if self.count > 1 {
            format!(" ×{}", self.count)
        } else {
            String::new()
        };
        format!(
            "[Rota {what}] {}{count} — rule `{}`, app `{}`{job}",
            self.on, self.rule, self.app
        )
    }

    /// The message as text, for chat bots and email.
    pub fn text(&self) -> String {
        let mut t = format!("{}\n{}\nat {}", self.title(), self.message, self.at);
        if let Some(task) = self.task {
            t.push_str(&format!("\ntask {task}"));
            if let Some(a) = self.attempt {
                t.push_str(&format!(", attempt {a}"));
            }
            if let Some(run) = self.run {
                t.push_str(&format!(", run {run}"));
            }
        }
        t
    }
}

/// A channel ready to send: its URL opened, its signing secret read.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    pub name: String,
    pub kind: Kind,
    pub url: Option<String>,
    pub to: Vec<String>,
    pub secret: Option<Vec<u8>>,
}

/// An HTTP request a channel makes: where, its extra headers, its JSON body.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub url: String,
    pub headers: Vec<(&'static str, String)>,
    pub body: Vec<u8>,
}

fn hmac_sha256(key: &[u8], message: &[u8]) -> Vec<u8> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key");
    mac.update(message);
    mac.finalize().into_bytes().to_vec()
}

/// The request `target` (an HTTP kind) makes for `m` at `now`.
pub fn request(target: &Target, m: &Message, now: Millis) -> Result<Request, String> {
    let url = target
        .url
        .clone()
        .ok_or_else(|| format!("channel `{}` has no url", target.name))?;
    let text = m.text();
    let mut headers = Vec::new();
    let (url, body) = match target.kind {
        Kind::Webhook => {
            let body = serde_json::to_vec(m).map_err(|e| e.to_string())?;
            if let Some(secret) = &target.secret {
                headers.push(("x-rota-timestamp", now.to_string()));
                headers.push((
                    "x-rota-signature",
                    rota_proto::webhook_signature(secret, now, &body),
                ));
            }
            (url, body)
        }
        Kind::Slack => (url, json!({ "text": text }).to_string().into_bytes()),
        Kind::Wecom => (
            url,
            json!({"msgtype": "text", "text": {"content": text}})
                .to_string()
                .into_bytes(),
        ),
        Kind::Dingtalk => {
            let mut url = reqwest::Url::parse(&url).map_err(|e| format!("url: {e}"))?;
            if let Some(secret) = &target.secret {
                let mut string_to_sign = now.to_string().into_bytes();
                string_to_sign.push(b'\n');
                string_to_sign.extend_from_slice(secret);
                let sign = BASE64.encode(hmac_sha256(secret, &string_to_sign));
                url.query_pairs_mut()
                    .append_pair("timestamp", &now.to_string())
                    .append_pair("sign", &sign);
            }
            (
                url.to_string(),
                json!({"msgtype": "text", "text": {"content": text}})
                    .to_string()
                    .into_bytes(),
            )
        }
        Kind::Feishu => {
            let mut body = json!({"msg_type": "text", "content": {"text": text}});
            if let Some(secret) = &target.secret {
                let seconds = now.div_euclid(1000).to_string();
                let mut key = format!("{seconds}\n").into_bytes();
                key.extend_from_slice(secret);
                body["timestamp"] = json!(seconds);
                body["sign"] = json!(BASE64.encode(hmac_sha256(&key, b"")));
            }
            (url, body.to_string().into_bytes())
        }
        Kind::Email => return Err("email is not sent over HTTP".into()),
    };
    Ok(Request { url, headers, body })
}

/// Did the receiver take it? A 2xx, and for the bots that answer 200 with an error code
/// in the body, a zero code.
pub fn accepted(kind: Kind, status: u16, body: &[u8]) -> Result<(), String> {
    let excerpt = || {
        let s = String::from_utf8_lossy(body);
        s.chars().take(ANSWER_EXCERPT).collect::<String>()
    };
    if !(200..300).contains(&status) {
        return Err(format!("answered {status}: {}", excerpt()));
    }
    let code_field = match kind {
        Kind::Dingtalk | Kind::Wecom => "errcode",
        Kind::Feishu => "code",
        _ => return Ok(()),
    };
    let v: serde_json::Value =
        serde_json::from_slice(body).map_err(|_| format!("answered {status}: {}", excerpt()))?;
    // Older Feishu bots answer `StatusCode` instead of `code`.
    let code = v
        .get(code_field)
        .or_else(|| v.get("StatusCode"))
        .and_then(|c| c.as_i64());
    match code {
        Some(0) => Ok(()),
        _ => Err(format!("the bot refused it: {}", excerpt())),
    }
}

/// Sends alarms: the HTTP clients (under the egress policy) and the SMTP transport, built
/// on first use.
pub struct Sender {
    http: Egress,
    smtp_url: Option<String>,
    smtp: OnceCell<Result<lettre::AsyncSmtpTransport<lettre::Tokio1Executor>, String>>,
    /// The sender address of email alarms.
    from: String,
}

impl Sender {
    pub fn new(
        tls: rota_net::Tls,
        egress: Arc<rota_net::egress::Policy>,
        smtp_url: Option<String>,
        from: String,
    ) -> Self {
        Sender {
            http: Egress::new(egress, move || {
                tls.client()
                    .timeout(SEND_TIMEOUT)
                    .redirect(reqwest::redirect::Policy::none())
            }),
            smtp_url,
            smtp: OnceCell::new(),
            from,
        }
    }

    /// Sends `m` to `target`; the reason if it was not delivered.
    pub async fn send(&self, target: &Target, m: &Message, now: Millis) -> Result<(), String> {
        if target.kind == Kind::Email {
            return self.email(target, m).await;
        }
        let req = request(target, m, now)?;
        let url = reqwest::Url::parse(&req.url).map_err(|e| format!("url: {e}"))?;
        let http = self
            .http
            .client(&url)
            .map_err(|refused| format!("nothing was sent: {refused}"))?;
        let mut call = http
            .post(&req.url)
            .header(CONTENT_TYPE, "application/json")
            .body(req.body);
        for (k, v) in req.headers {
            call = call.header(k, v);
        }
        let resp = call.send().await.map_err(describe)?;
        let status = resp.status().as_u16();
        let body = resp.bytes().await.unwrap_or_default();
        accepted(target.kind, status, &body)
    }

    async fn email(&self, target: &Target, m: &Message) -> Result<(), String> {
        use lettre::AsyncTransport;
        let transport = self
            .smtp
            .get_or_init(|| async {
                let url = self.smtp_url.as_deref().ok_or_else(|| {
                    "no SMTP server: start the node with --smtp-url or ROTA_SMTP_URL (e.g. smtp://user:pass@host:587?tls=required)"
                        .to_owned()
                })?;
                lettre::AsyncSmtpTransport::<lettre::Tokio1Executor>::from_url(url)
                    .map(|b| b.timeout(Some(SEND_TIMEOUT)).build())
                    .map_err(|e| format!("ROTA_SMTP_URL: {e}"))
            })
            .await
            .as_ref()
            .map_err(Clone::clone)?;
        let from: lettre::message::Mailbox = self
            .from
            .parse()
            .map_err(|e| format!("sender address `{}`: {e}", self.from))?;
        let mut builder = lettre::Message::builder().from(from).subject(m.title());
        for to in &target.to {
            builder = builder.to(to.parse().map_err(|e| format!("recipient `{to}`: {e}"))?);
        }
        let email = builder
            .header(lettre::message::header::ContentType::TEXT_PLAIN)
            .body(m.text())
            .map_err(|e| e.to_string())?;
        transport
            .send(email)
            .await
            .map(|_| ())
            .map_err(|e| format!("SMTP: {e}"))
    }
}

/// A failed request, with its cause (reqwest's top line alone says little) and without
/// its URL (a bot's token may be in it; the error is kept in the history).
fn describe(e: reqwest::Error) -> String {
    if let Some(denied) = denied_in(&e) {
        return format!("nothing was sent: {denied}");
    }
    let e = e.without_url();
    let mut text = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message() -> Message {
        Message {
            rule: "orders-failing".into(),
            on: "run_failed".into(),
            app: "shop".into(),
            job: Some("close-order".into()),
            task: Some(42),
            run: Some(9),
            attempt: Some(2),
            message: "exit 1".into(),
            at: "2026-12-01T10:00:00Z".into(),
            count: 3,
            resolved: false,
        }
    }

    fn target(kind: Kind, secret: Option<&str>) -> Target {
        Target {
            name: "c".into(),
            kind,
            url: Some("https://example.com/hook?access_token=t".into()),
            to: Vec::new(),
            secret: secret.map(|s| s.as_bytes().to_vec()),
        }
    }

    fn body(r: &Request) -> serde_json::Value {
        serde_json::from_slice(&r.body).unwrap()
    }

    #[test]
    fn the_webhook_body_is_the_spec_json_and_signed_like_deliveries() {
        let r = request(
            &target(Kind::Webhook, Some("whsec")),
            &message(),
            1_700_000_000_000,
        )
        .unwrap();
        let b = body(&r);
        for key in [
            "rule", "on", "app", "job", "task", "run", "attempt", "message", "at", "count",
            "resolved",
        ] {
            assert!(b.get(key).is_some(), "{key} missing from {b}");
        }
        assert_eq!(b["count"], 3);
        let sig = r
            .headers
            .iter()
            .find(|(k, _)| *k == "x-rota-signature")
            .unwrap();
        assert_eq!(
            sig.1,
            rota_proto::webhook_signature(b"whsec", 1_700_000_000_000, &r.body)
        );
        let unsigned = request(&target(Kind::Webhook, None), &message(), 1).unwrap();
        assert!(unsigned.headers.is_empty());
    }

    #[test]
    fn slack_gets_text() {
        let r = request(&target(Kind::Slack, None), &message(), 0).unwrap();
        let b = body(&r);
        assert!(
            b["text"]
                .as_str()
                .unwrap()
                .starts_with("[Rota ALARM] run_failed ×3 — rule `orders-failing`")
        );
    }

    #[test]
    fn dingtalk_signs_in_the_query_as_its_docs_say() {
        // DingTalk: sign = urlEncode(base64(HmacSHA256(key = secret, timestamp + "\n" + secret))).
        //   printf '1700000000000\nSEC' | openssl dgst -sha256 -hmac SEC -binary | base64
        let r = request(
            &target(Kind::Dingtalk, Some("SEC")),
            &message(),
            1_700_000_000_000,
        )
        .unwrap();
        let url = reqwest::Url::parse(&r.url).unwrap();
        let q: std::collections::HashMap<_, _> = url.query_pairs().into_owned().collect();
        assert_eq!(q["access_token"], "t");
        assert_eq!(q["timestamp"], "1700000000000");
        assert_eq!(q["sign"], "r+2we0q01lkZqz38LA5IPNbHN81U1leRf3Au4PSQb6Q=");
        let b = body(&r);
        assert_eq!(b["msgtype"], "text");
        assert!(b["text"]["content"].as_str().unwrap().contains("exit 1"));
        assert!(accepted(Kind::Dingtalk, 200, br#"{"errcode":0,"errmsg":"ok"}"#).is_ok());
        assert!(
            accepted(
                Kind::Dingtalk,
                200,
                br#"{"errcode":310000,"errmsg":"sign not match"}"#
            )
            .unwrap_err()
            .contains("sign not match")
        );
    }

    #[test]
    fn feishu_signs_in_the_body_with_seconds() {
        // Feishu: sign = base64(HmacSHA256(key = timestamp + "\n" + secret, message = "")).
        //   printf '' | openssl dgst -sha256 -mac HMAC \
        //     -macopt hexkey:$(printf '1700000000\nSEC' | xxd -p) -binary | base64
        let r = request(
            &target(Kind::Feishu, Some("SEC")),
            &message(),
            1_700_000_000_999,
        )
        .unwrap();
        let b = body(&r);
        assert_eq!(b["msg_type"], "text");
        assert_eq!(b["timestamp"], "1700000000");
        assert_eq!(b["sign"], "yKzlnG5gJbbUvULgjP0QN/V99n1fNH31XG8Rrvl9pfk=");
        assert!(
            b["content"]["text"]
                .as_str()
                .unwrap()
                .contains("close-order")
        );
        assert!(accepted(Kind::Feishu, 200, br#"{"code":0,"msg":"success"}"#).is_ok());
        assert!(accepted(Kind::Feishu, 200, br#"{"StatusCode":0}"#).is_ok());
        assert!(
            accepted(
                Kind::Feishu,
                200,
                br#"{"code":19021,"msg":"sign match fail"}"#
            )
            .is_err()
        );
    }

    #[test]
    fn wecom_gets_a_text_message() {
        let r = request(&target(Kind::Wecom, None), &message(), 0).unwrap();
        let b = body(&r);
        assert_eq!(b["msgtype"], "text");
        assert!(
            b["text"]["content"]
                .as_str()
                .unwrap()
                .contains("task 42, attempt 2, run 9")
        );
        assert!(
            accepted(
                Kind::Wecom,
                200,
                br#"{"errcode":93000,"errmsg":"invalid webhook url"}"#
            )
            .is_err()
        );
    }

    #[test]
    fn a_refusal_names_the_status_and_the_answer() {
        assert_eq!(
            accepted(Kind::Slack, 404, b"no_service").unwrap_err(),
            "answered 404: no_service"
        );
    }
}
