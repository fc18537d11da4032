//! Users and API tokens: the admin's user list (create, change role and apps, delete) and
//! everyone's tokens (create, shown once; revoke). A token is `rota_` and 40 hex digits;
//! only its SHA-256 is stored, so a lost token is revoked and replaced, never shown again.

use askama::Template;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Redirect};
use axum::{Extension, Form};
use serde::Deserialize;

use super::auth::{self, Session};
use super::pages::{Chrome, Errors, MIN_PASSWORD_CHARS, audit, form_status};
use super::{ApiToken, Console, PREFIX, PageResult, User, When, render_status};
use crate::access::{Apps, Role};
use crate::model::now_ms;
use crate::store;
use crate::usecase::{Error, validate};

// ----- users ---------------------------------------------------------------------------------

pub struct UserRow {
    id: i64,
    name: String,
    role: &'static str,
    apps: String,
    created: When,
    me: bool,
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
    let users = console.node.store().list_users().await?;
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
    if form.password.chars().count() < MIN_PASSWORD_CHARS {
        errors.insert(
            "password".into(),
            format!("password: use at least {MIN_PASSWORD_CHARS} characters"),
        );
    }
    let access = access_of(&form.role, &form.apps, &mut errors);
    let Some((role, apps)) = access.filter(|_| errors.is_empty()) else {
        return users_page(&console, &s, form, errors).await;
    };
    let hash = auth::hash_password(form.password.clone())
        .await
        .map_err(Error::Internal)?;
    let store = console.node.store();
    match store
        .insert_user(&name, &hash, role.as_str(), &apps.to_text(), now_ms())
        .await
    {
        Ok(_) => {}
        Err(store::Error::Conflict(_)) => {
            errors.insert("name".into(), format!("name: a user `{name}` exists"));
            return users_page(&console, &s, form, errors).await;
        }
        Err(e) => return Err(Error::from(e).into()),
    }
    audit(
        &console,
        &s.user.name,
        "create user",
        &format!("{name} ({role})"),
    )
    .await;
    Ok(Redirect::to(&format!("{PREFIX}/users")).into_response())
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct AccessForm {
    role: String,
    apps: String,
}

/// The last admin cannot be demoted or deleted: nobody could manage users after.
async fn keep_an_admin(console: &Console, user: &User) -> Result<(), Error> {
    if user.principal().is_admin() {
        let admins = console
            .node
            .store()
            .list_users()
            .await?
            .iter()
            .filter(|u| u.principal().is_admin())
            .count();
        if admins <= 1 {
            return Err(Error::Conflict(format!(
                "`{}` is the only admin; make another user admin first",
                user.name
            )));
        }
    }
    Ok(())
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
    let store = console.node.store();
    let user = store.get_user(id).await?;
    if role != Role::Admin {
        keep_an_admin(&console, &user).await?;
    }
    store
        .set_user_access(id, role.as_str(), &apps.to_text())
        .await?;
    let target = format!("{} → {role} of {}", user.name, apps.to_text());
    audit(&console, &s.user.name, "change user access", &target).await;
    Ok(Redirect::to(&format!("{PREFIX}/users")).into_response())
}

pub async fn delete_user(
    State(console): State<Console>,
    Extension(s): Extension<Session>,
    Path(id): Path<i64>,
) -> PageResult {
    s.who.check_admin("managing users")?;
    let store = console.node.store();
    let user = store.get_user(id).await?;
    if user.id == s.user.id {
        return Err(Error::Conflict("you cannot delete yourself".into()).into());
    }
    keep_an_admin(&console, &user).await?;
    store.delete_user(id).await?;
    audit(&console, &s.user.name, "delete user", &user.name).await;
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
    let whose = (!s.who.is_admin()).then_some(s.user.id);
    let tokens = console.node.store().list_tokens(whose).await?;
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
    if let Err(e) = validate::name("name", &name) {
        let errors = Errors::from([("name".to_owned(), e.to_string())]);
        return tokens_page(&console, &s, None, name, errors).await;
    }
    let token = format!("rota_{}", auth::random_token(20));
    console
        .node
        .store()
        .insert_token(s.user.id, &name, &auth::token_hash(&token), now_ms())
        .await?;
    audit(&console, &s.user.name, "create API token", &name).await;
    tokens_page(&console, &s, Some(token), String::new(), Errors::new()).await
}

pub async fn revoke_token(
    State(console): State<Console>,
    Extension(s): Extension<Session>,
    Path(id): Path<i64>,
) -> PageResult {
    let whose = (!s.who.is_admin()).then_some(s.user.id);
    let revoked = console
        .node
        .store()
        .revoke_token(id, whose, now_ms())
        .await?;
    if !revoked {
        return Err(Error::NotFound(format!("no live token {id} of yours")).into());
    }
    audit(&console, &s.user.name, "revoke API token", &id.to_string()).await;
    Ok(Redirect::to(&format!("{PREFIX}/tokens")).into_response())
}
