//! The OpenID provider: console sign-in by the authorization-code flow with PKCE (SPEC §14).
//!
//! 1. [`Provider::begin`] reads the provider's discovery document and sends the browser to
//!    its authorization endpoint with a fresh `state`, `nonce` and PKCE challenge; the three
//!    secrets go back to the browser in a [`Flow`] cookie (HttpOnly; `__Host-` over HTTPS), so
//!    any node of the cluster can finish the sign-in.
//! 2. [`Provider::finish`] takes the provider's answer: the `state` must be the cookie's,
//!    the code is exchanged (with the client secret and the PKCE verifier) for an ID token,
//!    whose signature (the provider's published keys, never the client secret), issuer,
//!    audience, expiry, issue time (not in the future) and nonce are checked. What it says
//!    of the user — `sub`, a name, the groups claim (asked of the userinfo endpoint when the
//!    ID token has none) — is the [`Identity`] the node's rules map.
//!
//! The discovery document and keys are read at each step (sign-ins are rare): a provider's
//! rotated keys are seen at once, and a provider that is down says so on the page while
//! local users still sign in. The node's own HTTP client sends (reqwest, rustls, the system's
//! roots and `--tls-ca`), following no redirects.

use std::sync::Arc;
use std::time::Duration;

use openidconnect::core::{
    CoreAuthDisplay, CoreAuthPrompt, CoreErrorResponseType, CoreGenderClaim, CoreJsonWebKey,
    CoreJweContentEncryptionAlgorithm, CoreJwsSigningAlgorithm, CoreProviderMetadata,
    CoreResponseType, CoreRevocableToken, CoreRevocationErrorResponse,
    CoreTokenIntrospectionResponse, CoreTokenType,
};
use openidconnect::{
    AdditionalClaims, AuthenticationFlow, AuthorizationCode, ClientId, ClientSecret, CsrfToken,
    EmptyExtraTokenFields, EndpointMaybeSet, EndpointNotSet, EndpointSet, IdTokenFields, IssuerUrl,
    Nonce, OAuth2TokenResponse, PkceCodeChallenge, PkceCodeVerifier, RedirectUrl, Scope,
    StandardErrorResponse, StandardTokenResponse, TokenResponse,
};
use serde::{Deserialize, Serialize};

use super::{Group, Identity};

/// How long one request to the provider may take.
const TIMEOUT: Duration = Duration::from_secs(5);
/// How far the provider's clock may be from the node's when an ID token's times are checked.
pub const MAX_SKEW: Duration = Duration::from_secs(60);
/// How long a sign-in may take at the provider (the flow cookie's life).
pub const FLOW_SECS: u64 = 600;
/// The algorithms an ID token may be signed with: the provider's own keys.
const SIGNING_ALGS: [CoreJwsSigningAlgorithm; 9] = [
    CoreJwsSigningAlgorithm::RsaSsaPkcs1V15Sha256,
    CoreJwsSigningAlgorithm::RsaSsaPkcs1V15Sha384,
    CoreJwsSigningAlgorithm::RsaSsaPkcs1V15Sha512,
    CoreJwsSigningAlgorithm::RsaSsaPssSha256,
    CoreJwsSigningAlgorithm::RsaSsaPssSha384,
    CoreJwsSigningAlgorithm::RsaSsaPssSha512,
    CoreJwsSigningAlgorithm::EcdsaP256Sha256,
    CoreJwsSigningAlgorithm::EcdsaP384Sha384,
    CoreJwsSigningAlgorithm::EdDsa,
];
/// The largest response the node reads from the provider.
const MAX_RESPONSE_BYTES: usize = 1 << 20;

/// Where and how the node signs users in (the `--oidc-*` flags).
#[derive(Clone, PartialEq, Eq)]
pub struct Settings {
    /// The provider's issuer URL; its discovery document is at
    /// `<issuer>/.well-known/openid-configuration` and must name the same issuer.
    pub issuer: String,
    /// The client registered with the provider for this console.
    pub client_id: String,
    /// Its secret (empty for a public client); never logged.
    pub client_secret: String,
    /// Scopes asked for besides `openid`.
    pub scopes: Vec<String>,
    /// The ID token's claim listing the user's groups (a list of strings, or one string).
    pub groups_claim: String,
    /// Where the provider sends the browser back: this console's `/login/oidc/callback`,
    /// as registered with the provider.
    pub redirect_url: String,
    /// What the login page's button says: "Sign in with LABEL".
    pub label: String,
}

impl std::fmt::Debug for Settings {
    /// Everything but the client secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settings")
            .field("issuer", &self.issuer)
            .field("client_id", &self.client_id)
            .field("scopes", &self.scopes)
            .field("groups_claim", &self.groups_claim)
            .field("redirect_url", &self.redirect_url)
            .field("label", &self.label)
            .finish()
    }
}

/// The path the provider sends the browser back to.
pub const CALLBACK_PATH: &str = "/login/oidc/callback";

impl Settings {
    /// The mistakes of these settings, each naming its flag; none when they can be used
    /// (whether the provider answers is [`Provider::probe`]'s to say).
    pub fn check(&self) -> Vec<String> {
        let mut wrong = Vec::new();
        match url::Url::parse(&self.issuer) {
            Ok(u) if u.scheme() == "https" => {}
            Ok(u) if u.scheme() == "http" && is_loopback(&u) => {}
            Ok(u) => wrong.push(format!(
                "--oidc-issuer `{}`: the scheme is `{}`; an issuer is https:// (http:// only \
                 on a loopback address)",
                self.issuer,
                u.scheme()
            )),
            Err(e) => wrong.push(format!("--oidc-issuer `{}`: {e}", self.issuer)),
        }
        if self.client_id.trim().is_empty() {
            wrong.push("--oidc-client-id: name the client registered with the provider".into());
        }
        match url::Url::parse(&self.redirect_url) {
            Ok(u) if u.path() != CALLBACK_PATH => wrong.push(format!(
                "--oidc-redirect-url `{}`: its path must be {CALLBACK_PATH} (this console's \
                 callback, as registered with the provider)",
                self.redirect_url
            )),
            Ok(u) if u.scheme() != "https" && !is_loopback(&u) => wrong.push(format!(
                "--oidc-redirect-url `{}`: the code would cross the network in clear; use https://",
                self.redirect_url
            )),
            Ok(_) => {}
            Err(e) => wrong.push(format!(
                "--oidc-redirect-url `{}`: {e} (e.g. https://rota.corp.example{CALLBACK_PATH})",
                self.redirect_url
            )),
        }
        if self.groups_claim.trim().is_empty() {
            wrong.push("--oidc-groups-claim: name the ID token's claim listing groups".into());
        }
        wrong
    }
}

/// Whether `u` names this machine (where clear text never crosses a network).
fn is_loopback(u: &url::Url) -> bool {
    match u.host() {
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        None => false,
    }
}

/// What the browser keeps while the user is at the provider: the state to match, the
/// nonce the ID token must carry and the PKCE verifier. URL-safe base64, joined by dots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flow {
    pub state: String,
    pub nonce: String,
    pub verifier: String,
}

impl Flow {
    /// The cookie's value: the three parts joined by dots.
    pub fn to_cookie_value(&self) -> String {
        format!("{}.{}.{}", self.state, self.nonce, self.verifier)
    }

    /// The flow of a cookie's value; `None` for anything [`Flow::to_cookie_value`] does not
    /// make.
    pub fn from_cookie_value(value: &str) -> Option<Flow> {
        let mut parts = value.split('.');
        let (state, nonce, verifier) = (parts.next()?, parts.next()?, parts.next()?);
        let fine = |s: &str| {
            !s.is_empty()
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        };
        (parts.next().is_none() && fine(state) && fine(nonce) && fine(verifier)).then(|| Flow {
            state: state.to_owned(),
            nonce: nonce.to_owned(),
            verifier: verifier.to_owned(),
        })
    }
}

/// Why a sign-in through the provider did not happen.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    /// The provider could not be asked (down, TLS, a discovery document that is wrong).
    #[error("the identity provider cannot be reached: {0}")]
    Unavailable(String),
    /// The answer is not to be trusted: a wrong state, a bad signature, an expired token…
    #[error("{0}")]
    Refused(String),
}

/// The claims of an ID token beyond the standard ones: all of them, so the groups claim can
/// be any the provider uses.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct OtherClaims(serde_json::Map<String, serde_json::Value>);

impl AdditionalClaims for OtherClaims {}

type Fields = IdTokenFields<
    OtherClaims,
    EmptyExtraTokenFields,
    CoreGenderClaim,
    CoreJweContentEncryptionAlgorithm,
    CoreJwsSigningAlgorithm,
>;
type Tokens = StandardTokenResponse<Fields, CoreTokenType>;
type UserInfo = openidconnect::UserInfoClaims<OtherClaims, CoreGenderClaim>;
type Client = openidconnect::Client<
    OtherClaims,
    CoreAuthDisplay,
    CoreGenderClaim,
    CoreJweContentEncryptionAlgorithm,
    CoreJsonWebKey,
    CoreAuthPrompt,
    StandardErrorResponse<CoreErrorResponseType>,
    Tokens,
    CoreTokenIntrospectionResponse,
    CoreRevocableToken,
    CoreRevocationErrorResponse,
    EndpointSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointMaybeSet,
    EndpointMaybeSet,
>;

/// Who signed in, and the names the console may show them by, best first:
/// `preferred_username`, a verified `email`, `sub`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedIn {
    pub names: Vec<String>,
    pub identity: Identity,
}

/// The provider, with the HTTP client the node trusts.
pub struct Provider {
    settings: Settings,
    http: Http,
}

impl Provider {
    /// The provider of the node's settings, if it signs users in through one.
    pub fn of(config: &crate::config::Config) -> anyhow::Result<Option<Arc<Provider>>> {
        use anyhow::Context;
        let Some(settings) = &config.oidc else {
            return Ok(None);
        };
        let tls = config
            .tls
            .client_config()
            .context("the TLS settings of the identity provider")?;
        Ok(Some(Arc::new(Provider::new(
            settings.clone(),
            Arc::unwrap_or_clone(tls),
        )?)))
    }

    /// The provider of `settings`, reached through a client trusting `tls` that follows no
    /// redirects and gives up after five seconds.
    pub fn new(settings: Settings, tls: rustls::ClientConfig) -> anyhow::Result<Provider> {
        let http = reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .redirect(reqwest::redirect::Policy::none())
            .timeout(TIMEOUT)
            .build()?;
        Ok(Provider {
            settings,
            http: Http(http),
        })
    }

    /// What the node was told of the provider.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Says in the log whether sign-in through the provider works (its discovery document
    /// and keys are read); local users sign in either way.
    pub fn announce(provider: Option<Arc<Self>>) {
        let Some(provider) = provider else {
            return;
        };
        tokio::spawn(async move {
            match provider.probe().await {
                Ok(()) => tracing::info!(issuer = %provider.settings.issuer, "OIDC sign-in is on"),
                Err(e) => tracing::warn!(
                    issuer = %provider.settings.issuer,
                    error = %e,
                    "OIDC sign-in is configured but the provider does not answer as it should: \
                     its users cannot sign in until it does; local users can"
                ),
            }
        });
    }

    /// Reads the discovery document and the keys, as a sign-in would.
    pub async fn probe(&self) -> Result<(), Failure> {
        self.client().await.map(|_| ())
    }

    /// Where to send the browser, and the flow it keeps meanwhile.
    pub async fn begin(&self) -> Result<(url::Url, Flow), Failure> {
        let client = self.client().await?;
        let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
        let mut request = client
            .authorize_url(
                AuthenticationFlow::<CoreResponseType>::AuthorizationCode,
                CsrfToken::new_random,
                Nonce::new_random,
            )
            .set_pkce_challenge(challenge);
        for scope in &self.settings.scopes {
            request = request.add_scope(Scope::new(scope.clone()));
        }
        let (url, state, nonce) = request.url();
        Ok((
            url,
            Flow {
                state: state.secret().clone(),
                nonce: nonce.secret().clone(),
                verifier: verifier.secret().clone(),
            },
        ))
    }

    /// Checks the provider's answer (`state`, `code`) against the browser's `flow`, and who
    /// it says signed in.
    pub async fn finish(&self, flow: &Flow, state: &str, code: &str) -> Result<SignedIn, Failure> {
        if state != flow.state {
            return Err(Failure::Refused(
                "the sign-in's state does not match the one this browser started with".into(),
            ));
        }
        let client = self.client().await?;
        let tokens = client
            .exchange_code(AuthorizationCode::new(code.to_owned()))
            .map_err(|e| Failure::Unavailable(e.to_string()))?
            .set_pkce_verifier(PkceCodeVerifier::new(flow.verifier.clone()))
            .request_async(&self.http)
            .await
            .map_err(|e| {
                Failure::Refused(format!("the provider did not give a token: {}", chain(&e)))
            })?;
        let Some(id_token) = tokens.id_token() else {
            return Err(Failure::Refused(
                "the provider's answer has no ID token".into(),
            ));
        };
        let skew = chrono::Duration::from_std(MAX_SKEW).expect("a minute fits");
        let verifier = client
            .id_token_verifier()
            // Signed by the provider's published keys only: never keyed by the client
            // secret (HS256), which is the node's as much as the provider's.
            .set_allowed_algs(SIGNING_ALGS)
            .set_time_fn(move || chrono::Utc::now() - skew)
            .set_issue_time_verifier_fn(move |iat| {
                if iat > chrono::Utc::now() + skew {
                    Err(format!("issued in the future ({iat})"))
                } else {
                    Ok(())
                }
            });
        let claims = id_token
            .claims(&verifier, &Nonce::new(flow.nonce.clone()))
            .map_err(|e| Failure::Refused(format!("the ID token is not valid: {e}")))?;
        // Groups (and a name) from the ID token; from the userinfo endpoint when the
        // provider keeps them there (many put only the standard claims in the ID token).
        let groups_claim = &self.settings.groups_claim;
        let info = match claims.additional_claims().0.get(groups_claim) {
            Some(_) => None,
            None => self.user_info(&client, &tokens, claims.subject()).await?,
        };
        let sub = claims.subject().as_str();
        let verified_email = claims
            .email()
            .filter(|_| claims.email_verified() == Some(true))
            .map(|e| e.as_str());
        // The names to show, best first; the first the console takes is the user's.
        let names = [
            claims.preferred_username().map(|n| n.as_str()),
            info.as_ref()
                .and_then(|i| i.preferred_username())
                .map(|n| n.as_str()),
            verified_email,
            Some(sub),
        ]
        .into_iter()
        .flatten()
        .map(str::to_owned)
        .collect();
        let groups = groups_in(claims.additional_claims().0.get(groups_claim).or_else(|| {
            info.as_ref()
                .and_then(|i| i.additional_claims().0.get(groups_claim))
        }));
        Ok(SignedIn {
            names,
            identity: Identity {
                provider: "oidc",
                // `sub` is unique at one issuer: a new issuer's users are new users.
                subject: format!("{} {sub}", self.settings.issuer),
                groups,
            },
        })
    }

    /// What the provider's userinfo endpoint says of the user `subject` (it must be the same
    /// user), asked with the access token; `None` when the provider has no such endpoint.
    async fn user_info(
        &self,
        client: &Client,
        tokens: &Tokens,
        subject: &openidconnect::SubjectIdentifier,
    ) -> Result<Option<UserInfo>, Failure> {
        let Ok(request) = client.user_info(tokens.access_token().clone(), Some(subject.clone()))
        else {
            return Ok(None);
        };
        let info: UserInfo = request
            .request_async(&self.http)
            .await
            .map_err(|e| Failure::Unavailable(format!("its userinfo endpoint: {}", chain(&e))))?;
        Ok(Some(info))
    }

    /// The client of the provider as its discovery document describes it now.
    async fn client(&self) -> Result<Client, Failure> {
        let issuer = IssuerUrl::new(self.settings.issuer.clone())
            .map_err(|e| Failure::Unavailable(format!("--oidc-issuer: {e}")))?;
        let metadata = CoreProviderMetadata::discover_async(issuer, &self.http)
            .await
            .map_err(|e| Failure::Unavailable(chain(&e)))?;
        let redirect = RedirectUrl::new(self.settings.redirect_url.clone())
            .map_err(|e| Failure::Unavailable(format!("--oidc-redirect-url: {e}")))?;
        let secret = Some(&self.settings.client_secret)
            .filter(|s| !s.is_empty())
            .map(|s| ClientSecret::new(s.clone()));
        Ok(Client::from_provider_metadata(
            metadata,
            ClientId::new(self.settings.client_id.clone()),
            secret,
        )
        .set_redirect_uri(redirect))
    }
}

/// The node's HTTP client, as the `openidconnect` crate asks for one.
struct Http(reqwest::Client);

impl<'c> openidconnect::AsyncHttpClient<'c> for Http {
    type Error = Unreachable;
    type Future = std::pin::Pin<
        Box<dyn Future<Output = Result<openidconnect::HttpResponse, Unreachable>> + Send + 'c>,
    >;

    fn call(&'c self, request: openidconnect::HttpRequest) -> Self::Future {
        Box::pin(send(self.0.clone(), request))
    }
}

/// One request to the provider through the node's client.
async fn send(
    http: reqwest::Client,
    request: openidconnect::HttpRequest,
) -> Result<openidconnect::HttpResponse, Unreachable> {
    let (parts, body) = request.into_parts();
    let response = http
        .request(parts.method, parts.uri.to_string())
        .headers(parts.headers)
        .body(body)
        .send()
        .await
        .map_err(|e| Unreachable(chain(&e)))?;
    let mut answer = openidconnect::http::Response::builder().status(response.status());
    for (name, value) in response.headers() {
        answer = answer.header(name, value);
    }
    let mut response = response;
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| Unreachable(chain(&e)))? {
        if body.len() + chunk.len() > MAX_RESPONSE_BYTES {
            return Err(Unreachable(format!(
                "the answer is over {MAX_RESPONSE_BYTES} bytes, more than a provider sends"
            )));
        }
        body.extend_from_slice(&chunk);
    }
    answer.body(body).map_err(|e| Unreachable(e.to_string()))
}

/// A request to the provider that got no answer.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Unreachable(String);

/// An error with its causes, as one line.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let more = cause.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = cause.source();
    }
    text
}

/// The groups a claim's value names: a list of strings, or one string.
fn groups_in(value: Option<&serde_json::Value>) -> Vec<Group> {
    let named = |name: &str| Group {
        dn: name.to_owned(),
        name: name.to_owned(),
    };
    match value {
        Some(serde_json::Value::String(one)) => vec![named(one)],
        Some(serde_json::Value::Array(many)) => {
            many.iter().filter_map(|v| v.as_str()).map(named).collect()
        }
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> Settings {
        Settings {
            issuer: "https://id.corp.example".into(),
            client_id: "rota".into(),
            client_secret: "s3cret".into(),
            scopes: vec!["profile".into()],
            groups_claim: "groups".into(),
            redirect_url: format!("https://rota.corp.example{CALLBACK_PATH}"),
            label: "Corp".into(),
        }
    }

    #[test]
    fn settings_name_each_mistake_with_its_flag() {
        assert!(settings().check().is_empty(), "{:?}", settings().check());
        let loopback = Settings {
            issuer: "http://127.0.0.1:9000".into(),
            redirect_url: format!("http://localhost:8080{CALLBACK_PATH}"),
            ..settings()
        };
        assert!(loopback.check().is_empty(), "{:?}", loopback.check());
        let bad = Settings {
            issuer: "http://id.corp.example".into(),
            client_id: " ".into(),
            groups_claim: String::new(),
            redirect_url: "https://rota.corp.example/".into(),
            ..settings()
        };
        let wrong = bad.check().join("\n");
        for says in [
            "--oidc-issuer `http://id.corp.example`: the scheme is `http`",
            "--oidc-client-id",
            "--oidc-groups-claim",
            "--oidc-redirect-url `https://rota.corp.example/`: its path must be /login/oidc/callback",
        ] {
            assert!(wrong.contains(says), "{says} in {wrong}");
        }
        assert!(!format!("{:?}", settings()).contains("s3cret"));
    }

    #[test]
    fn a_flow_round_trips_through_its_cookie_and_nothing_else_passes() {
        let flow = Flow {
            state: "aB-_1".into(),
            nonce: "n0nce".into(),
            verifier: "v".repeat(43),
        };
        assert_eq!(Flow::from_cookie_value(&flow.to_cookie_value()), Some(flow));
        for bad in ["", "a.b", "a.b.c.d", "a..c", "a.b.c;d", "a b.c.d"] {
            assert_eq!(Flow::from_cookie_value(bad), None, "{bad}");
        }
    }

    #[test]
    fn groups_come_from_a_list_or_one_string() {
        let names = |v: serde_json::Value| -> Vec<String> {
            groups_in(Some(&v)).into_iter().map(|g| g.name).collect()
        };
        assert_eq!(
            names(serde_json::json!(["ops", 3, "devs"])),
            ["ops", "devs"]
        );
        assert_eq!(names(serde_json::json!("ops")), ["ops"]);
        assert!(names(serde_json::json!({"ops": true})).is_empty());
        assert!(groups_in(None).is_empty());
    }
}
