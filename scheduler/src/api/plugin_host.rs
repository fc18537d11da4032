//! The scheduler's side of the plugins' `rota` imports (`plugins/README.md`, "Host
//! imports"): a job's key-value state and its app's secrets, served to runs over the
//! signed executor protocol; and secrets management for users in the REST API, which
//! takes values and never gives them back.

use axum::Extension;
use axum::extract::{FromRequestParts, RawPathParams, State};
use axum::http::StatusCode;
use axum::http::request::Parts;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use rota_proto::wire::{
    KV_KEY_MAX, KV_VALUE_MAX, KvOp, KvReply, KvRequest, SecretReply, SecretRequest, kv_over_quota,
};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::AppState;
use super::auth::Signer;
use super::error::{ApiError, ApiResult};
use super::extract::{Json, PathParam};
use super::openapi::ErrorBody;
use super::views::rfc3339;
use crate::access::{Need, Principal};
use crate::model::now_ms;
use crate::secrets;
use crate::store::{self, SecretMeta};
use crate::usecase;

// ----- for runs: the executor protocol -----------------------------------------------------

/// The job a run asks for: it must exist and belong to the asking executor's app, so an
/// executor reaches only its own app's jobs.
async fn job_of(state: &AppState, signer: &Signer, app: &str, job_id: i64) -> ApiResult<()> {
    signer.check_app(app)?;
    match state.node.store().get_job(job_id).await {
        Ok(job) if job.spec.app == app => Ok(()),
        Ok(_) | Err(store::Error::NotFound(_)) => Err(ApiError::NotFound(format!(
            "job {job_id} of app `{app}` not found"
        ))),
        Err(e) => Err(e.into()),
    }
}

fn check_key(key: &str) -> ApiResult<()> {
    if key.is_empty() || key.len() > KV_KEY_MAX {
        return Err(ApiError::Unprocessable(format!(
            "a key must be 1 to {KV_KEY_MAX} bytes long, not {}",
            key.len()
        )));
    }
    if key.chars().any(char::is_control) {
        return Err(ApiError::Unprocessable(
            "a key must not contain control characters".into(),
        ));
    }
    Ok(())
}

/// `POST /api/executor/v1/kv`: get, set or delete a key of the job's state.
pub async fn kv(
    State(state): State<AppState>,
    Extension(signer): Extension<Signer>,
    Json(req): Json<KvRequest>,
) -> ApiResult<Json<KvReply>> {
    job_of(&state, &signer, &req.app, req.job_id).await?;
    check_key(&req.key)?;
    let store = state.node.store();
    let value = match req.op {
        KvOp::Get => store
            .kv_get(req.job_id, &req.key)
            .await?
            .map(|v| BASE64.encode(v)),
        KvOp::Set => {
            let encoded = req
                .value
                .ok_or_else(|| ApiError::BadRequest("`set` needs a `value` (base64)".into()))?;
            let value = BASE64
                .decode(encoded.as_bytes())
                .map_err(|e| ApiError::BadRequest(format!("`value` is not base64: {e}")))?;
            if value.len() > KV_VALUE_MAX {
                return Err(ApiError::PayloadTooLarge(format!(
                    "a value may be at most {KV_VALUE_MAX} bytes, not {}",
                    value.len()
                )));
            }
            let used = store.kv_usage(req.job_id, &req.key).await?;
            if let Some(full) = kv_over_quota(used.keys, used.bytes, &req.key, value.len()) {
                return Err(ApiError::PayloadTooLarge(full));
            }
            store.kv_set(req.job_id, &req.key, &value, now_ms()).await?;
            None
        }
        KvOp::Delete => {
            store.kv_delete(req.job_id, &req.key).await?;
            None
        }
    };
    Ok(Json(KvReply { value }))
}

/// `POST /api/executor/v1/secret`: a secret of the job's app, opened for the run.
pub async fn secret(
    State(state): State<AppState>,
    Extension(signer): Extension<Signer>,
    Json(req): Json<SecretRequest>,
) -> ApiResult<Json<SecretReply>> {
    job_of(&state, &signer, &req.app, req.job_id).await?;
    let Some(sealed) = state.node.store().secret(&req.app, &req.name).await? else {
        return Ok(Json(SecretReply { value: None }));
    };
    let value = state
        .node
        .secrets()
        .open(&req.app, &req.name, &sealed)
        .map_err(|e| ApiError::Unprocessable(e.to_string()))?;
    let value = String::from_utf8(value)
        .map_err(|_| ApiError::Unprocessable(format!("secret `{}` is not UTF-8", req.name)))?;
    Ok(Json(SecretReply { value: Some(value) }))
}

// ----- for users: REST API v1 --------------------------------------------------------------

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

async fn view(state: &AppState, app: &str, name: &str) -> ApiResult<SecretView> {
    let found = state.node.store().list_secrets(app).await?;
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
    super::validate::app("app", &app)?;
    who.check(&app, Need::Read, &format!("app `{app}`"))?;
    let items = state
        .node
        .store()
        .list_secrets(&app)
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
    usecase::secrets::set(&state.node, &who, &app, &name, body.value.as_bytes()).await?;
    Ok(Json(view(&state, &app, &name).await?))
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
    usecase::secrets::delete(&state.node, &who, &app, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}
