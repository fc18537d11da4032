//! `/api/v1/plugins`: uploading and listing plugin modules.

use axum::Extension;
use axum::extract::State;
use axum::http::StatusCode;
use serde::Deserialize;
use utoipa::IntoParams;

use super::AppState;
use super::error::ApiResult;
use super::extract::{Json, PathParam, Query, RawBody};
use super::openapi::{ErrorBody, WasmModule};
use super::views::{PageView, PluginPage, PluginView};
use crate::access::Principal;
use crate::usecase;

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct UploadQuery {
    /// The plugin's name; new bytes under a known name make a new version.
    #[param(required = true)]
    name: Option<String>,
}

/// `POST /api/v1/plugins?name=N` with the module (`.wasm` or `.wat`) as the body.
#[utoipa::path(
    post,
    path = "/api/v1/plugins",
    operation_id = "upload_plugin",
    params(UploadQuery),
    request_body(content(
        (WasmModule = "application/wasm"),
        (WasmModule = "text/plain"),
        (WasmModule = "application/octet-stream"),
    )),
    responses(
        (status = 201, description = "A new plugin, or a new version of one", body = PluginView),
        (status = 200, description = "These bytes were uploaded under this name already", body = PluginView),
        (status = 400, description = "`name` is missing", body = ErrorBody),
        (status = 413, description = "The module is larger than this server accepts", body = ErrorBody),
        (status = 422, description = "Not a valid plugin module (the message names the problem)", body = ErrorBody),
    )
)]
pub async fn upload(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    Query(q): Query<UploadQuery>,
    RawBody(body): RawBody,
) -> ApiResult<(StatusCode, Json<PluginView>)> {
    let (plugin, created) = usecase::plugins::upload(&state.ports, &who, q.name, body).await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(plugin.into())))
}

/// `DELETE /api/v1/plugins/{name}`: every version of a plugin no job uses (admins only),
/// named by its name or the id of any of its versions.
#[utoipa::path(
    delete,
    path = "/api/v1/plugins/{name}",
    operation_id = "delete_plugin",
    params(("name" = String, Path, description = "The plugin's name, or the id of any of its versions")),
    responses(
        (status = 204, description = "Deleted, every version"),
        (status = 404, description = "No plugin has this name or version id", body = ErrorBody),
        (status = 409, description = "Jobs use it (the message names them)", body = ErrorBody),
    )
)]
pub async fn delete(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    PathParam(name): PathParam,
) -> ApiResult<StatusCode> {
    crate::usecase::plugins::delete(&state.ports, &who, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /api/v1/plugins`: every version of every plugin, by name then newest version.
#[utoipa::path(
    get,
    path = "/api/v1/plugins",
    operation_id = "list_plugins",
    responses((status = 200, description = "Every plugin version, on one page", body = PluginPage))
)]
pub async fn list(State(state): State<AppState>) -> ApiResult<Json<PluginPage>> {
    let plugins = crate::usecase::plugins::list(&state.ports).await?;
    Ok(Json(PageView::all(
        plugins.into_iter().map(PluginView::from).collect(),
    )))
}
