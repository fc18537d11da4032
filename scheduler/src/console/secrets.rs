//! Plugin secrets in the console: each visible app's secrets by name and age, a form to set
//! one (operators and admins of the app), and delete. A value goes in once and is never
//! shown again, here or anywhere (`crate::secrets`).

use askama::Template;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect};
use axum::{Extension, Form};
use serde::Deserialize;

use super::auth::Session;
use super::pages::{Chrome, Errors};
use super::{Console, PREFIX, PageResult, When, render_status};
use crate::usecase::{self, Error};

pub struct SecretRow {
    app: String,
    name: String,
    /// `app/name`, percent-encoded for the delete path.
    path: String,
    updated: When,
    may_change: bool,
}

#[derive(Template)]
#[template(path = "secrets.html")]
struct SecretsPage {
    chrome: Chrome,
    secrets: Vec<SecretRow>,
    /// Apps this user may set secrets of.
    apps: Vec<String>,
    form: SecretForm,
    errors: Errors,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct SecretForm {
    app: String,
    name: String,
    /// Never echoed back: the page shows an empty field after an error too.
    #[serde(skip_serializing)]
    value: String,
}

/// The page, with the form as typed and its `errors` (answered with `status`).
async fn page(
    console: &Console,
    s: &Session,
    form: SecretForm,
    errors: Errors,
    status: StatusCode,
) -> PageResult {
    let mut rows = Vec::new();
    let mut apps = Vec::new();
    for app in crate::usecase::secrets::list(&console.ports, &s.who).await? {
        if app.may_change {
            apps.push(app.app.clone());
        }
        for secret in app.secrets {
            rows.push(SecretRow {
                path: format!(
                    "{}/{}",
                    super::pages::encode(&app.app),
                    super::pages::encode(&secret.name)
                ),
                app: app.app.clone(),
                name: secret.name,
                updated: When::of(secret.updated_at),
                may_change: app.may_change,
            });
        }
    }
    let form = SecretForm {
        value: String::new(),
        ..form
    };
    render_status(
        status,
        &SecretsPage {
            chrome: Chrome::of(s, "secrets"),
            secrets: rows,
            apps,
            form,
            errors,
        },
    )
}

pub async fn list(State(console): State<Console>, Extension(s): Extension<Session>) -> PageResult {
    page(
        &console,
        &s,
        SecretForm::default(),
        Errors::new(),
        StatusCode::OK,
    )
    .await
}

pub async fn set(
    State(console): State<Console>,
    Extension(s): Extension<Session>,
    Form(form): Form<SecretForm>,
) -> PageResult {
    let app = form.app.trim().to_owned();
    let name = form.name.trim().to_owned();
    // The form's own `required`: a value left empty is a slip of the form, not a secret.
    if form.value.is_empty() {
        let errors = Errors::from([("value".to_owned(), "required".to_owned())]);
        let form = SecretForm { app, name, ..form };
        return page(&console, &s, form, errors, StatusCode::UNPROCESSABLE_ENTITY).await;
    }
    // The names and the value's size are the use case's to check, as for the API: the
    // same mistake gets the same status and words, shown above the form.
    match usecase::secrets::set(&console.ports, &s.who, &app, &name, form.value.as_bytes()).await {
        Ok(()) => Ok(Redirect::to(&format!("{PREFIX}/secrets")).into_response()),
        Err(e @ (Error::Unprocessable(_) | Error::PayloadTooLarge(_))) => {
            let status = crate::status::http_status(&e);
            let errors = Errors::from([(String::new(), e.to_string())]);
            page(
                &console,
                &s,
                SecretForm { app, name, ..form },
                errors,
                status,
            )
            .await
        }
        Err(e) => Err(e.into()),
    }
}

pub async fn delete(
    State(console): State<Console>,
    Extension(s): Extension<Session>,
    Path((app, name)): Path<(String, String)>,
) -> PageResult {
    usecase::secrets::delete(&console.ports, &s.who, &app, &name).await?;
    Ok(Redirect::to(&format!("{PREFIX}/secrets")).into_response())
}
