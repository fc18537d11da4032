//! The connection to a scheduler node: flags shared by every client command and a thin
//! `reqwest` wrapper that speaks the API's error shape.

use std::time::Duration;

use anyhow::Context;
use clap::Args;
use reqwest::{Method, StatusCode, Url};
use rota_proto::ErrorBody;
use serde_json::Value;

/// Where the scheduler is and how to talk to it; global, so they go before or after the
/// subcommand (`rota task --json get 7` or `rota task get 7 --json`).
#[derive(Args)]
#[command(next_help_heading = "Connection")]
pub struct ServerFlags {
    /// Base URL of any scheduler node.
    #[arg(
        long,
        global = true,
        env = "ROTA_SERVER",
        default_value = "http://127.0.0.1:8080",
        value_parser = parse_server
    )]
    server: Url,
    /// Admin API bearer token.
    #[arg(long, global = true, env = "ROTA_API_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Print the server's JSON answer instead of the human form.
    #[arg(long, global = true)]
    pub json: bool,
    /// PEM bundle of CAs to trust besides the system's, for an https:// server with a
    /// private CA.
    #[arg(long, global = true, env = "ROTA_TLS_CA")]
    tls_ca: Option<std::path::PathBuf>,
}

fn parse_server(s: &str) -> Result<Url, String> {
    let url = Url::parse(s)
        .map_err(|e| format!("`{s}` is not a URL ({e}); e.g. http://127.0.0.1:8080"))?;
    if !matches!(url.scheme(), "http" | "https") || url.cannot_be_a_base() {
        return Err(format!(
            "`{s}` is not an http:// or https:// URL; e.g. http://127.0.0.1:8080"
        ));
    }
    Ok(url)
}

/// A 2xx answer: its status and body, raw and parsed.
pub struct Answer {
    pub status: StatusCode,
    pub body: String,
    pub value: Value,
}

pub struct ApiClient {
    base: Url,
    token: Option<String>,
    http: reqwest::Client,
}

impl ApiClient {
    pub fn new(flags: &ServerFlags) -> anyhow::Result<Self> {
        let tls = rota_net::Tls::load(None, None, flags.tls_ca.as_deref())?;
        let http = tls
            .client()
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(60))
            .build()
            .context("building the HTTP client")?;
        Ok(ApiClient {
            base: flags.server.clone(),
            token: flags.token.clone().filter(|t| !t.is_empty()),
            http,
        })
    }

    /// `<server>/api/v1/<segments…>`, each segment percent-encoded, keeping any path the
    /// server URL already has (a node behind a reverse proxy at `/rota`).
    pub fn url(&self, segments: &[&str]) -> Url {
        let mut url = self.base.clone();
        url.set_query(None);
        url.set_fragment(None);
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(["api", "v1"]).extend(segments);
        }
        url
    }

    /// Sends a request; a non-2xx answer becomes a [`Refused`] error, `"<status>:
    /// <message>"`, where the message is the API's `error` (or the start of whatever else
    /// came back).
    pub async fn send(
        &self,
        method: Method,
        url: Url,
        body: Option<&Value>,
    ) -> anyhow::Result<Answer> {
        let body = body.map(|b| ("application/json", b.to_string().into_bytes()));
        let (status, body) = self.send_raw(method, url, body).await?;
        let value = serde_json::from_str(&body).with_context(|| {
            format!("the scheduler answered {status} with something that is not JSON")
        })?;
        Ok(Answer {
            status,
            body,
            value,
        })
    }

    /// [`ApiClient::send`] of a body of any type (a module, a YAML document), answering
    /// the body as text, whatever its type.
    pub async fn send_raw(
        &self,
        method: Method,
        url: Url,
        body: Option<(&str, Vec<u8>)>,
    ) -> anyhow::Result<(StatusCode, String)> {
        let mut req = self.http.request(method, url);
        if let Some(token) = &self.token {
            req = req.bearer_auth(token);
        }
        if let Some((content_type, bytes)) = body {
            req = req
                .header(reqwest::header::CONTENT_TYPE, content_type)
                .body(bytes);
        }
        let resp = req
            .send()
            .await
            .with_context(|| format!("could not reach the scheduler at {}", self.base))?;
        let status = resp.status();
        let body = resp
            .text()
            .await
            .with_context(|| format!("reading the scheduler's answer ({status})"))?;
        if !status.is_success() {
            let message = match serde_json::from_str::<ErrorBody>(&body) {
                Ok(e) => e.error,
                Err(_) if body.trim().is_empty() => "(no message)".to_owned(),
                Err(_) => body.trim().chars().take(300).collect(),
            };
            return Err(Refused { status, message }.into());
        }
        Ok((status, body))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(server: &str) -> ApiClient {
        ApiClient::new(&ServerFlags {
            server: parse_server(server).unwrap(),
            token: None,
            json: false,
            tls_ca: None,
        })
        .unwrap()
    }

    #[test]
    fn urls_keep_the_servers_path_and_encode_segments() {
        assert_eq!(
            client("http://127.0.0.1:8080")
                .url(&["tasks", "7"])
                .as_str(),
            "http://127.0.0.1:8080/api/v1/tasks/7"
        );
        assert_eq!(
            client("http://h/rota/").url(&["tasks"]).as_str(),
            "http://h/rota/api/v1/tasks"
        );
        assert_eq!(
            client("http://h/rota").url(&["a/b c"]).as_str(),
            "http://h/rota/api/v1/a%2Fb%20c"
        );
    }

    #[test]
    fn only_http_urls_are_servers() {
        assert!(parse_server("localhost:8080").is_err());
        assert!(parse_server("ftp://h").is_err());
        assert!(parse_server("nonsense").is_err());
        assert!(parse_server("https://rota.example").is_ok());
    }
}

/// A non-2xx answer: its status and the API's message.
#[derive(Debug)]
pub struct Refused {
    pub status: StatusCode,
    pub message: String,
}

impl Refused {
    /// Is `error` the API's answer `status`?
    pub fn is(error: &anyhow::Error, status: StatusCode) -> bool {
        error
            .downcast_ref::<Refused>()
            .is_some_and(|r| r.status == status)
    }
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.status, self.message)
    }
}

impl std::error::Error for Refused {}
