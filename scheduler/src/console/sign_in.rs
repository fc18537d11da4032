//! The way into the console: the login page, a password sign-in (a local user, or a
//! directory user checked by LDAP) and the OpenID provider's authorization-code flow
//! (`/login/oidc` sends the browser to the provider, `/login/oidc/callback` takes it back).
//! Signing out is a signed-in user's action (`pages::logout`).

use askama::Template;
use axum::Form;
use axum::extract::{FromRequest, Query, Request, State};
use axum::http::{StatusCode, header};
use axum::response::{AppendHeaders, Html, IntoResponse, Redirect};
use serde::Deserialize;

use super::auth;
use super::lang::Lang;
use super::{Console, PREFIX, PageResult, render, render_status};
use crate::sso::oidc::{FLOW_SECS, Failure, Flow};
use crate::usecase::Error;
use crate::usecase::users::SignIn;

#[derive(Template)]
#[template(path = "login.html")]
pub(super) struct LoginPage {
    lang: Lang,
    user: String,
    error: Option<String>,
    /// Directory users sign in here too (the page says so).
    directory: bool,
    /// The button to the OpenID provider: "Sign in with LABEL".
    provider: Option<String>,
    /// The user-and-password form: off when only the provider signs users in.
    password_form: bool,
}

impl LoginPage {
    fn new(console: &Console, lang: Lang, user: String, error: Option<String>) -> LoginPage {
        let ports = &console.ports;
        let provider = ports.provider().map(|p| {
            let label = &p.settings().label;
            match lang {
                Lang::En => format!("Sign in with {label}"),
                Lang::ZhCn => format!("使用 {label} 登录"),
            }
        });
        LoginPage {
            lang,
            user,
            error,
            directory: ports.directory().is_some(),
            password_form: !(ports.config().sso_only && ports.directory().is_none()),
            provider,
        }
    }
}

pub async fn login_form(State(console): State<Console>, req: Request) -> PageResult {
    if let Some(token) = auth::cookie_token(req.headers())
        && crate::usecase::users::session_user(&console.ports, &auth::token_hash(&token))
            .await?
            .is_some()
    {
        return Ok(Redirect::to(PREFIX).into_response());
    }
    render(&LoginPage::new(
        &console,
        Lang::of(req.headers()),
        String::new(),
        None,
    ))
}

#[derive(Debug, Deserialize)]
pub struct LoginForm {
    #[serde(default)]
    user: String,
    #[serde(default)]
    password: String,
}

pub async fn login(State(console): State<Console>, req: Request) -> PageResult {
    let ip = auth::client_ip(&req);
    let lang = Lang::of(req.headers());
    let same_origin = auth::same_origin(req.headers());
    let Form(form) = Form::<LoginForm>::from_request(req, &())
        .await
        .map_err(|e| Error::BadRequest(e.body_text()))?;
    let now = std::time::Instant::now();
    let refuse = |status, error: &str| {
        render_status(
            status,
            &LoginPage::new(&console, lang, form.user.clone(), Some(error.to_owned())),
        )
    };
    // The login form has no session to tie a CSRF token to; a cross-site form is refused by
    // its Origin instead (it would sign the victim into the attacker's account).
    if !same_origin {
        return refuse(
            StatusCode::FORBIDDEN,
            lang.t("This sign-in form did not come from this site."),
        );
    }
    if let Some(wait) = console.throttle.wait(&form.user, ip, now) {
        let secs = wait.as_secs().max(1);
        let message = match lang {
            Lang::En => format!("Too many failed sign-ins: try again in {secs} s."),
            Lang::ZhCn => format!("登录失败次数过多：请在 {secs} 秒后重试。"),
        };
        return refuse(StatusCode::TOO_MANY_REQUESTS, &message);
    }
    use crate::usecase::users::SignIn;
    let user = match crate::usecase::users::sign_in_with_password(
        &console.ports,
        &form.user,
        &form.password,
    )
    .await?
    {
        SignIn::User(user) => user,
        SignIn::Wrong => {
            console.throttle.failed(&form.user, ip, now);
            tracing::warn!(user = %form.user, ip = ?ip, "console: failed sign-in");
            return refuse(
                StatusCode::UNAUTHORIZED,
                lang.t("Wrong user name or password."),
            );
        }
        // Both say the password was right: they count as failures, so the page is no
        // faster an oracle of the directory's passwords than a wrong one.
        SignIn::NoAccess => {
            console.throttle.failed(&form.user, ip, now);
            tracing::warn!(user = %form.user, ip = ?ip, "console: a directory user in no mapped group");
            return refuse(
                StatusCode::FORBIDDEN,
                lang.t("Your directory account is in no group that gives access to Rota. Ask an administrator."),
            );
        }
        SignIn::LocalOff => {
            console.throttle.failed(&form.user, ip, now);
            tracing::warn!(user = %form.user, ip = ?ip, "console: local sign-in is off (--sso-only)");
            return refuse(
                StatusCode::FORBIDDEN,
                lang.t("Sign-in with a local account is turned off: use your directory account."),
            );
        }
        SignIn::NameTaken(why) => {
            tracing::warn!(user = %form.user, reason = %why, "console: a directory user's name is taken");
            return refuse(StatusCode::CONFLICT, &name_taken(lang, &why));
        }
        SignIn::DirectoryDown(reason) => {
            tracing::error!(user = %form.user, error = %reason, "console: the directory could not check a sign-in");
            return refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                lang.t(
                    "The directory cannot be reached: try again later (local accounts still work).",
                ),
            );
        }
    };
    console.throttle.succeeded(&form.user, ip);
    let token = auth::random_token(32);
    crate::usecase::users::sign_in(&console.ports, &user, &auth::token_hash(&token)).await?;
    Ok((
        [(
            header::SET_COOKIE,
            auth::session_cookie(&token, console.secure),
        )],
        Redirect::to(PREFIX),
    )
        .into_response())
}

/// The cookie keeping an OpenID sign-in's [`Flow`] while the user is at the provider.
const FLOW_COOKIE: &str = "rota_oidc";
/// Its name over HTTPS: a `__Host-` cookie cannot be set by a sibling subdomain, so nobody
/// can plant a flow of their own in a user's browser and sign it in as themselves.
const HOST_FLOW_COOKIE: &str = "__Host-rota_oidc";

/// The flow cookie's name and the attributes every `Set-Cookie` of it carries: sent back
/// with the provider's redirect (`SameSite=Lax`: a cross-site navigation); over HTTPS a
/// `__Host-` cookie (`Secure`, `Path=/`), else only to `/login/oidc`.
fn flow_cookie_parts(secure: bool) -> (&'static str, &'static str) {
    if secure {
        (HOST_FLOW_COOKIE, "HttpOnly; SameSite=Lax; Path=/; Secure")
    } else {
        (FLOW_COOKIE, "HttpOnly; SameSite=Lax; Path=/login/oidc")
    }
}

/// The `Set-Cookie` value keeping `flow` for [`FLOW_SECS`].
fn flow_cookie(flow: &Flow, secure: bool) -> String {
    let (name, attributes) = flow_cookie_parts(secure);
    format!(
        "{name}={}; {attributes}; Max-Age={FLOW_SECS}",
        flow.to_cookie_value()
    )
}

/// The `Set-Cookie` value dropping it: a flow is used once.
fn end_flow_cookie(secure: bool) -> String {
    let (name, attributes) = flow_cookie_parts(secure);
    format!("{name}=; {attributes}; Max-Age=0")
}

/// The flow the browser kept, under the name this node sets.
fn flow_of(headers: &axum::http::HeaderMap, secure: bool) -> Option<Flow> {
    Flow::from_cookie_value(&auth::cookie(headers, flow_cookie_parts(secure).0)?)
}

/// `GET /login/oidc`: sends the browser to the provider, keeping the flow in a cookie.
pub async fn oidc_begin(State(console): State<Console>, req: Request) -> PageResult {
    let lang = Lang::of(req.headers());
    let Some(provider) = console.ports.provider() else {
        return refused(
            &console,
            lang,
            StatusCode::NOT_FOUND,
            lang.t("Sign-in through an identity provider is not set up on this node."),
        );
    };
    match provider.begin().await {
        Ok((url, flow)) => Ok((
            [(header::SET_COOKIE, flow_cookie(&flow, console.secure))],
            Redirect::to(url.as_str()),
        )
            .into_response()),
        Err(Failure::Unavailable(why) | Failure::Refused(why)) => {
            tracing::error!(error = %why, "console: the identity provider cannot start a sign-in");
            refused(
                &console,
                lang,
                StatusCode::SERVICE_UNAVAILABLE,
                &provider_down(lang, &why),
            )
        }
    }
}

/// What the provider sends the browser back with.
#[derive(Debug, Deserialize)]
pub struct Callback {
    /// The code to exchange for the user's ID token.
    code: Option<String>,
    /// The state this browser's flow began with.
    state: Option<String>,
    /// Why the provider did not sign the user in (`access_denied`, …), and its words.
    error: Option<String>,
    error_description: Option<String>,
    /// The issuer, from a provider that says who answers (RFC 9207): it must be ours.
    iss: Option<String>,
}

/// `GET /login/oidc/callback`: checks the provider's answer against the browser's flow and
/// signs the user in, or says on the login page why not (nothing is signed in).
pub async fn oidc_callback(
    State(console): State<Console>,
    Query(answer): Query<Callback>,
    req: Request,
) -> PageResult {
    let lang = Lang::of(req.headers());
    let Some(provider) = console.ports.provider() else {
        return refused(
            &console,
            lang,
            StatusCode::NOT_FOUND,
            lang.t("Sign-in through an identity provider is not set up on this node."),
        );
    };
    if let Some(error) = &answer.error {
        // Shown on this site's page: short, and only as text.
        let error: String = error.chars().take(60).collect();
        let said: String = answer
            .error_description
            .as_deref()
            .unwrap_or_default()
            .chars()
            .take(200)
            .collect();
        tracing::warn!(
            error,
            said,
            "console: the identity provider did not sign a user in"
        );
        let message = match lang {
            Lang::En => format!("The identity provider did not sign you in: {error} {said}"),
            Lang::ZhCn => format!("身份提供方未让你登录：{error} {said}"),
        };
        return refused(&console, lang, StatusCode::FORBIDDEN, &message);
    }
    if let Some(iss) = &answer.iss
        && iss.trim_end_matches('/') != provider.settings().issuer.trim_end_matches('/')
    {
        tracing::warn!(iss, "console: a sign-in's answer came from another issuer");
        let message = match lang {
            Lang::En => format!("Sign-in refused: the answer came from another issuer ({iss})."),
            Lang::ZhCn => format!("登录被拒绝：应答来自其他签发方（{iss}）。"),
        };
        return refused(&console, lang, StatusCode::FORBIDDEN, &message);
    }
    let (Some(flow), Some(state), Some(code)) = (
        flow_of(req.headers(), console.secure),
        &answer.state,
        &answer.code,
    ) else {
        return refused(
            &console,
            lang,
            StatusCode::BAD_REQUEST,
            lang.t(
                "This sign-in was not started in this browser, or took too long: sign in again.",
            ),
        );
    };
    let signed_in = match provider.finish(&flow, state, code).await {
        Ok(signed_in) => signed_in,
        Err(Failure::Unavailable(why)) => {
            tracing::error!(error = %why, "console: the identity provider cannot finish a sign-in");
            return refused(
                &console,
                lang,
                StatusCode::SERVICE_UNAVAILABLE,
                &provider_down(lang, &why),
            );
        }
        Err(Failure::Refused(why)) => {
            tracing::warn!(reason = %why, "console: an identity provider's answer was refused");
            let message = match lang {
                Lang::En => format!("Sign-in refused: {why}."),
                Lang::ZhCn => format!("登录被拒绝：{why}。"),
            };
            return refused(&console, lang, StatusCode::FORBIDDEN, &message);
        }
    };
    let user = match crate::usecase::users::sign_in_with_provider(&console.ports, &signed_in)
        .await?
    {
        SignIn::User(user) => user,
        SignIn::NoAccess => {
            tracing::warn!(user = ?signed_in.names.first(), subject = %signed_in.identity.subject, "console: a provider's user in no mapped group");
            return refused(
                &console,
                lang,
                StatusCode::FORBIDDEN,
                lang.t(
                    "Your account is in no group that gives access to Rota. Ask an administrator.",
                ),
            );
        }
        SignIn::NameTaken(why) => {
            tracing::warn!(user = ?signed_in.names.first(), reason = %why, "console: a provider's user's name is taken");
            return refused(
                &console,
                lang,
                StatusCode::CONFLICT,
                &name_taken(lang, &why),
            );
        }
        other => {
            return Err(Error::Internal(anyhow::anyhow!(
                "a provider's sign-in came back as {other:?}"
            ))
            .into());
        }
    };
    let token = auth::random_token(32);
    crate::usecase::users::sign_in(&console.ports, &user, &auth::token_hash(&token)).await?;
    Ok(signed_in_page(&console, lang, &token))
}

/// The page after a sign-in through the provider: the session opened, the flow ended.
fn signed_in_page(console: &Console, lang: Lang, token: &str) -> axum::response::Response {
    // The session cookie is SameSite=Strict: a browser does not send it on a redirect whose
    // chain began at the provider, so the page itself goes on to the console.
    let next = match lang {
        Lang::En => "Signed in. Continue to the console",
        Lang::ZhCn => "已登录。进入控制台",
    };
    (
        AppendHeaders([
            (
                header::SET_COOKIE,
                auth::session_cookie(token, console.secure),
            ),
            (header::SET_COOKIE, end_flow_cookie(console.secure)),
            (header::CACHE_CONTROL, "no-store".to_owned()),
        ]),
        Html(format!(
            "<!doctype html><html lang=\"{}\"><head><meta charset=\"utf-8\">\
             <meta http-equiv=\"refresh\" content=\"0;url={PREFIX}\"><title>Rota</title></head>\
             <body><p><a href=\"{PREFIX}\">{next}</a></p></body></html>",
            lang.tag()
        )),
    )
        .into_response()
}

/// The login page with `message`, the flow (if any) ended.
fn refused(console: &Console, lang: Lang, status: StatusCode, message: &str) -> PageResult {
    let page = render_status(
        status,
        &LoginPage::new(console, lang, String::new(), Some(message.to_owned())),
    )?;
    Ok((
        [(header::SET_COOKIE, end_flow_cookie(console.secure))],
        page,
    )
        .into_response())
}

/// The page's words for a provider that cannot be asked, with why (the issuer and what
/// it answered are no secret: the browser is sent there).
fn provider_down(lang: Lang, why: &str) -> String {
    format!(
        "{} ({why})",
        lang.t(
            "The identity provider cannot be reached: try again later (local accounts still work)."
        )
    )
}

/// The page's words for a name the user cannot have, with why.
fn name_taken(lang: Lang, why: &str) -> String {
    match lang {
        Lang::En => {
            format!("You cannot sign in here under this name: {why}. Ask an administrator.")
        }
        Lang::ZhCn => format!("无法以此名称登录：{why}。请联系管理员。"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flow_cookie_is_a_host_cookie_over_https_and_round_trips() {
        let flow = Flow {
            state: "s".into(),
            nonce: "n".into(),
            verifier: "v".into(),
        };
        for secure in [true, false] {
            let set = flow_cookie(&flow, secure);
            let (pair, _) = set.split_once(';').unwrap();
            let mut headers = axum::http::HeaderMap::new();
            headers.insert(header::COOKIE, pair.parse().unwrap());
            assert_eq!(flow_of(&headers, secure), Some(flow.clone()), "{set}");
            assert_eq!(flow_of(&headers, !secure), None, "{set}");
            assert!(end_flow_cookie(secure).contains("Max-Age=0"));
        }
        let set = flow_cookie(&flow, true);
        assert!(
            set.starts_with("__Host-") && set.contains("; Secure") && set.contains("Path=/;"),
            "{set}"
        );
    }
}
