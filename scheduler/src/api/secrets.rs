//! Apps' secrets in the REST API: listed by name, set and deleted; values go in and never
//! come back out (only a run of the app opens them, through `crate::protocol`).

use axum::Extension;
use axum::extract::{FromRequestParts, RawPathParams, State};
use axum::http::StatusCode;
use axum::http::request::Parts;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::AppState;
use super::error::{ApiError, ApiResult};
use super::extract::{Json, PathParam};
use super::openapi::ErrorBody;
use super::views::rfc3339;
use crate::access::Principal;
use crate::secrets;
use crate::store::SecretMeta;
use crate::usecase;

/// A secret as the API shows it: never its value.
#[derive(Debug, Serialize, ToSchema)]
pub struct SecretView {
    pub app: String,
    pub name: String,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(format = DateTime)]
    pub updated_at: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct SecretPage {
    pub items: Vec<SecretView>,
}

/// The body of `PUT /api/v1/apps/{app}/secrets/{name}`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SecretValue {
    /// The secret's value (UTF-8, at most 64 KiB). It is stored sealed and never shown again.
    pub value: String,
}

/// `/api/v1/apps/{app}/secrets/{name}`'s two path parameters, checked: an app name and a
/// secret name.
pub struct SecretPath {
    app: String,
    name: String,
}

impl<S: Send + Sync> FromRequestParts<S> for SecretPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let params = RawPathParams::from_request_parts(parts, state)
            .await
            .map_err(|e| ApiError::BadRequest(e.body_text()))?;
        let get = |key: &str| {
            params
                .iter()
                .find(|(k, _)| *k == key)
                .map(|(_, v)| v.to_owned())
                .ok_or_else(|| ApiError::BadRequest(format!("path parameter `{key}` is missing")))
        };
        let (app, name) = (get("app")?, get("name")?);
        super::validate::app("app", &app)?;
        secrets::check_name(&name)
            .map_err(|e| ApiError::Unprocessable(format!("secret name `{name}` {e}")))?;
        Ok(SecretPath { app, name })
    }
}

async fn view(state: &AppState, who: &Principal, app: &str, name: &str) -> ApiResult<SecretView> {
    let found = usecase::secrets::of_app(&state.ports, who, app).await?;
    let meta = found
        .into_iter()
        .find(|s| s.name == name)
        .ok_or_else(|| ApiError::NotFound(format!("secret `{name}` of app `{app}` not found")))?;
    Ok(secret_view(app, meta))
}

fn secret_view(app: &str, meta: SecretMeta) -> SecretView {
    SecretView {
        app: app.to_owned(),
        name: meta.name,
        created_at: rfc3339(meta.created_at),
        updated_at: rfc3339(meta.updated_at),
    }
}

/// `GET /api/v1/apps/{app}/secrets`: the app's secrets, by name, without their values.
#[utoipa::path(
    get,
    path = "/api/v1/apps/{app}/secrets",
    operation_id = "list_secrets",
    params(("app" = String, Path, description = "The app's name")),
    responses(
        (status = 200, description = "The app's secrets (names and times only)", body = SecretPage),
        (status = 404, description = "The app is not visible to this token", body = ErrorBody),
        (status = 422, description = "`app` is not a valid app name", body = ErrorBody),
    )
)]
pub async fn list(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    PathParam(app): PathParam,
) -> ApiResult<Json<SecretPage>> {
    let items = usecase::secrets::of_app(&state.ports, &who, &app)
        .await?
        .into_iter()
        .map(|meta| secret_view(&app, meta))
        .collect();
    Ok(Json(SecretPage { items }))
}

/// `PUT /api/v1/apps/{app}/secrets/{name}`: sets a secret (creating or replacing it).
#[utoipa::path(
    put,
    path = "/api/v1/apps/{app}/secrets/{name}",
    operation_id = "set_secret",
    params(
        ("app" = String, Path, description = "The app's name"),
        ("name" = String, Path, description = "The secret's name: letters, digits, `_`, `-`, `.`"),
    ),
    request_body(content = SecretValue),
    responses(
        (status = 200, description = "Stored, sealed; the answer has no value", body = SecretView),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 403, description = "Setting secrets needs the operator or admin role", body = ErrorBody),
        (status = 413, description = "The value is over 64 KiB", body = ErrorBody),
        (status = 422, description = "An invalid app or secret name", body = ErrorBody),
    )
)]
pub async fn set(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    SecretPath { app, name }: SecretPath,
    Json(body): Json<SecretValue>,
) -> ApiResult<Json<SecretView>> {
    usecase::secrets::set(&state.ports, &who, &app, &name, body.value.as_bytes()).await?;
    Ok(Json(view(&state, &who, &app, &name).await?))
}

/// `DELETE /api/v1/apps/{app}/secrets/{name}`.
#[utoipa::path(
    delete,
    path = "/api/v1/apps/{app}/secrets/{name}",
    operation_id = "delete_secret",
    params(
        ("app" = String, Path, description = "The app's name"),
        ("name" = String, Path, description = "The secret's name"),
    ),
    responses(
        (status = 204, description = "Deleted"),
        (status = 403, description = "Deleting secrets needs the operator or admin role", body = ErrorBody),
        (status = 404, description = "No such secret", body = ErrorBody),
        (status = 422, description = "An invalid app or secret name", body = ErrorBody),
    )
)]
pub async fn delete(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    SecretPath { app, name }: SecretPath,
) -> ApiResult<StatusCode> {
    usecase::secrets::delete(&state.ports, &who, &app, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}
