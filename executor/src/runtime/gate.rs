//! A component's outgoing HTTP (`wasi:http/outgoing-handler`), under the same rules as
//! the `rota` import `http_request` of a preview 1 plugin ([`super::host`]): the URL must
//! be on the job's allow-list and inside the executor's egress policy (a request refused
//! by either gets `HTTP-request-denied`, and no address the policy denies is ever
//! connected to), a request takes at most the run's remaining time and
//! [`REQUEST_TIMEOUT`], bodies are capped both ways at [`BODY_MAX`], and each request —
//! or its denial — is a `[rota]` line of the run's log, its URL without the query.
//!
//! The request is sent by the process's plugin HTTP clients ([`Egress`]: their connection
//! pools, `--tls-ca` roots and the policy's resolver), on the process's runtime. Redirects are the
//! guest's to follow: a 3xx is its answer, as `wasi:http` expects.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use rota_proto::allow::AllowList;
use wasmtime_wasi_http::{Error as HttpError, RequestOptions, WasiBody, WasiHttpHooks};

use super::host::{BODY_MAX, Body, NoAnswer, REQUEST_TIMEOUT, exchange, on_io, redacted};
use crate::logs::RunLog;
use rota_net::egress::Egress;

type Sent = wasmtime_wasi_http::Result<(
    http::Response<WasiBody>,
    Box<dyn Future<Output = Result<(), HttpError>> + Send>,
)>;

/// One run's gate to the network.
pub(super) struct HttpGate {
    /// The job's allow-list; `None` (no job) refuses everything.
    pub(super) allow: Option<AllowList>,
    pub(super) egress: Arc<Egress>,
    pub(super) io: Option<tokio::runtime::Handle>,
    pub(super) log: RunLog,
    pub(super) deadline: Instant,
}

impl WasiHttpHooks for HttpGate {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        _options: Option<RequestOptions>,
        _fut: Box<dyn Future<Output = Result<(), HttpError>> + Send>,
    ) -> Box<dyn Future<Output = Sent> + Send> {
        let allow = self.allow.clone();
        let egress = self.egress.clone();
        let io = self.io.clone();
        let log = self.log.clone();
        let deadline = self.deadline;
        Box::new(async move {
            let (parts, body) = request.into_parts();
            let method = parts.method;
            let Ok(url) = reqwest::Url::parse(&parts.uri.to_string()) else {
                log.note(&format!("http {method} {}: not a URL", parts.uri));
                return Err(HttpError::HttpRequestUriInvalid);
            };
            if !allow.as_ref().is_some_and(|a| a.allows(&url)) {
                log.note(&format!(
                    "http {method} {} denied: not on the job's allow-list",
                    redacted(&url)
                ));
                return Err(HttpError::HttpRequestDenied);
            }
            let client = match egress.client(&url) {
                Ok(client) => client,
                Err(refused) => {
                    log.note(&format!(
                        "http {method} {} refused: {refused}",
                        redacted(&url)
                    ));
                    return Err(HttpError::HttpRequestDenied);
                }
            };
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(HttpError::ConnectionTimeout);
            }
            let body = match Limited::new(body, BODY_MAX).collect().await {
                Ok(collected) => collected.to_bytes(),
                Err(_) => {
                    log.note(&format!(
                        "http {method} {}: the request body is over {BODY_MAX} bytes; refused",
                        redacted(&url)
                    ));
                    return Err(HttpError::HttpRequestBodySize(None));
                }
            };
            let mut headers = parts.headers;
            headers.remove(http::header::HOST);
            let mut req = client
                .request(method.clone(), url.clone())
                .timeout(left.min(REQUEST_TIMEOUT))
                .headers(headers);
            if !body.is_empty() {
                req = req.body(body);
            }
            let sent = Instant::now();
            let answer = on_io(&io, exchange(req))
                .await
                .map_err(|refused| NoAnswer::Failed(refused.1))
                .and_then(|r| r);
            let ms = sent.elapsed().as_millis();
            let (status, _, headers, body) = match answer {
                Ok(answer) => answer,
                Err(NoAnswer::Denied(denied)) => {
                    log.note(&format!(
                        "http {method} {} refused: {denied}",
                        redacted(&url)
                    ));
                    return Err(HttpError::HttpRequestDenied);
                }
                Err(NoAnswer::Failed(why)) => {
                    log.note(&format!(
                        "http {method} {} failed after {ms} ms: {why}",
                        redacted(&url)
                    ));
                    return Err(HttpError::InternalError(Some(why)));
                }
            };
            log.note(&format!(
                "http {method} {} -> {} ({ms} ms)",
                redacted(&url),
                status.as_u16()
            ));
            let body = match body {
                Body::Whole(bytes) => bytes,
                Body::TooLarge => {
                    log.note(&format!(
                        "http {method} {}: the response body is over {BODY_MAX} bytes; refused",
                        redacted(&url)
                    ));
                    return Err(HttpError::HttpResponseBodySize(None));
                }
                Body::Broken(why) => return Err(HttpError::InternalError(Some(why))),
            };
            let mut response = http::Response::builder().status(status);
            for (name, value) in &headers {
                response = response.header(name.as_str(), value.as_str());
            }
            let body = Full::new(Bytes::from(body))
                .map_err(|never| match never {})
                .boxed_unsync();
            let response = response
                .body(body)
                .map_err(|e| HttpError::InternalError(Some(e.to_string())))?;
            let done: Box<dyn Future<Output = Result<(), HttpError>> + Send> =
                Box::new(async { Ok(()) });
            Ok((response, done))
        })
    }
}
