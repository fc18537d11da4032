//! Users and API tokens: the admin's user list (create, change role and apps, delete) and
//! everyone's tokens (create, shown once; revoke). A token is `rota_` and 40 hex digits;
//! only its SHA-256 is stored, so a lost token is revoked and replaced, never shown again.

use askama::Template;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Redirect};
use axum::{Extension, Form};
use serde::Deserialize;

use super::auth::Session;
use super::pages::{Chrome, Errors, form_status};
use super::{ApiToken, Console, PREFIX, PageResult, User, When, render_status};
use crate::access::{Apps, Role};
use crate::usecase::{self, Error, validate};

// ----- users ---------------------------------------------------------------------------------

pub struct UserRow {
    id: i64,
    name: String,
    role: &'static str,
    apps: String,
    created: When,
    me: bool,
    /// `local`, or where else it signs in (`ldap`, `oidc`)…
    source: String,
    /// …and its identity there (empty for a local user).
    subject: String,
}

impl UserRow {
    fn of(u: &User, me: &str) -> UserRow {
        let who = u.principal();
        UserRow {
            id: u.id,
            name: u.name.clone(),
            role: who.role.as_str(),
            apps: who.apps.to_text(),
            created: When::of(u.created_at),
            me: u.name == me,
            source: u.source.clone(),
            subject: u.subject.clone().unwrap_or_default(),
        }
    }
}

#[derive(Template)]
#[template(path = "users.html")]
struct UsersPage {
    chrome: Chrome,
    users: Vec<UserRow>,
    roles: Vec<&'static str>,
    form: UserForm,
    errors: Errors,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct UserForm {
    name: String,
    password: String,
    role: String,
    apps: String,
}

async fn users_page(console: &Console, s: &Session, form: UserForm, errors: Errors) -> PageResult {
    let users = usecase::users::list(&console.ports, &s.who).await?;
    let status = form_status(&errors);
    render_status(
        status,
        &UsersPage {
            chrome: Chrome::of(s, "users"),
            users: users.iter().map(|u| UserRow::of(u, &s.user.name)).collect(),
            roles: Role::ALL.iter().map(|r| r.as_str()).collect(),
            form,
            errors,
        },
    )
}

pub async fn users(State(console): State<Console>, Extension(s): Extension<Session>) -> PageResult {
    s.who.check_admin("managing users")?;
    let form = UserForm {
        role: Role::Viewer.as_str().into(),
        apps: "*".into(),
        ..UserForm::default()
    };
    users_page(&console, &s, form, Errors::new()).await
}

/// Reads a role and an app scope from a form, filing what is wrong.
fn access_of(role: &str, apps: &str, errors: &mut Errors) -> Option<(Role, Apps)> {
    let role = Role::parse(role)
        .map_err(|e| errors.insert("role".into(), e))
        .ok();
    let apps = match role {
        Some(Role::Admin) => Some(Apps::All),
        _ => Apps::parse(apps)
            .map_err(|e| errors.insert("apps".into(), e))
            .ok(),
    };
    Some((role?, apps?))
}

pub async fn create_user(
    State(console): State<Console>,
    Extension(s): Extension<Session>,
    Form(form): Form<UserForm>,
) -> PageResult {
    s.who.check_admin("managing users")?;
    let mut errors = Errors::new();
    let name = form.name.trim().to_owned();
    if let Err(e) = validate::name("name", &name) {
        errors.insert("name".into(), e.to_string());
    }
    if let Err(e) = usecase::users::check_password("password", &form.password) {
        errors.insert("password".into(), e.to_string());
    }
    let access = access_of(&form.role, &form.apps, &mut errors);
    let Some((role, apps)) = access.filter(|_| errors.is_empty()) else {
        return users_page(&console, &s, form, errors).await;
    };
    match usecase::users::create(&console.ports, &s.who, &name, &form.password, role, apps).await {
        Ok(()) => Ok(Redirect::to(&format!("{PREFIX}/users")).into_response()),
        Err(Error::Conflict(m)) => {
            errors.insert("name".into(), m);
            users_page(&console, &s, form, errors).await
        }
        Err(e) => Err(e.into()),
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct AccessForm {
    role: String,
    apps: String,
}

pub async fn set_access(
    State(console): State<Console>,
    Extension(s): Extension<Session>,
    Path(id): Path<i64>,
    Form(form): Form<AccessForm>,
) -> PageResult {
    s.who.check_admin("managing users")?;
    let mut errors = Errors::new();
    let Some((role, apps)) = access_of(&form.role, &form.apps, &mut errors) else {
        let message = errors.into_values().collect::<Vec<_>>().join("; ");
        return Err(Error::Unprocessable(message).into());
    };
    usecase::users::set_access(&console.ports, &s.who, id, role, apps).await?;
    Ok(Redirect::to(&format!("{PREFIX}/users")).into_response())
}

pub async fn delete_user(
    State(console): State<Console>,
    Extension(s): Extension<Session>,
    Path(id): Path<i64>,
) -> PageResult {
    usecase::users::delete(&console.ports, &s.who, id).await?;
    Ok(Redirect::to(&format!("{PREFIX}/users")).into_response())
}

// ----- API tokens ----------------------------------------------------------------------------

pub struct TokenRow {
    id: i64,
    user: String,
    name: String,
    created: When,
    revoked: Option<When>,
}

impl From<&ApiToken> for TokenRow {
    fn from(t: &ApiToken) -> TokenRow {
        TokenRow {
            id: t.id,
            user: t.user_name.clone(),
            name: t.name.clone(),
            created: When::of(t.created_at),
            revoked: When::opt(t.revoked_at),
        }
    }
}

#[derive(Template)]
#[template(path = "tokens.html")]
struct TokensPage {
    chrome: Chrome,
    tokens: Vec<TokenRow>,
    /// A token just created: shown this once.
    created: Option<String>,
    name: String,
    errors: Errors,
}

async fn tokens_page(
    console: &Console,
    s: &Session,
    created: Option<String>,
    name: String,
    errors: Errors,
) -> PageResult {
    // An admin sees and may revoke everyone's tokens.
    let tokens = usecase::users::tokens(&console.ports, &s.who, s.user.id).await?;
    let status = form_status(&errors);
    render_status(
        status,
        &TokensPage {
            chrome: Chrome::of(s, "tokens"),
            tokens: tokens.iter().map(TokenRow::from).collect(),
            created,
            name,
            errors,
        },
    )
}

pub async fn tokens(
    State(console): State<Console>,
    Extension(s): Extension<Session>,
) -> PageResult {
    tokens_page(&console, &s, None, String::new(), Errors::new()).await
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct TokenForm {
    name: String,
}

/// Issues a token to the signed-in user. The page that answers is the only place it is
/// ever shown (and it is not cached: every page is `no-store`).
pub async fn create_token(
    State(console): State<Console>,
    Extension(s): Extension<Session>,
    Form(form): Form<TokenForm>,
) -> PageResult {
    let name = form.name.trim().to_owned();
    match usecase::users::create_token(&console.ports, &s.who, s.user.id, &name).await {
        Ok(token) => tokens_page(&console, &s, Some(token), String::new(), Errors::new()).await,
        Err(e @ Error::Unprocessable(_)) => {
            let errors = Errors::from([("name".to_owned(), e.to_string())]);
            tokens_page(&console, &s, None, name, errors).await
        }
        Err(e) => Err(e.into()),
    }
}

pub async fn revoke_token(
    State(console): State<Console>,
    Extension(s): Extension<Session>,
    Path(id): Path<i64>,
) -> PageResult {
    usecase::users::revoke_token(&console.ports, &s.who, s.user.id, id).await?;
    Ok(Redirect::to(&format!("{PREFIX}/tokens")).into_response())
}
