//! `/api/v1/plugins`: uploading and listing plugin modules.

use axum::extract::State;
use axum::http::StatusCode;
use serde::Deserialize;

use super::AppState;
use super::error::{ApiError, ApiResult};
use super::extract::{Json, Query, RawBody};
use super::validate;
use super::views::{PageView, PluginView};
use crate::model::now_ms;

#[derive(Debug, Deserialize)]
pub struct UploadQuery {
    name: Option<String>,
}

/// `POST /api/v1/plugins?name=N` with the module (`.wasm` or `.wat`) as the body.
pub async fn upload(
    State(state): State<AppState>,
    Query(q): Query<UploadQuery>,
    RawBody(body): RawBody,
) -> ApiResult<(StatusCode, Json<PluginView>)> {
    let name = q.name.ok_or_else(|| {
        ApiError::BadRequest(
            "query parameter `name` is required: POST /api/v1/plugins?name=…".into(),
        )
    })?;
    validate::name("name", &name)?;
    let node = state.node.clone();
    // Compiling the module is CPU-heavy: keep it off the async workers.
    let valid =
        tokio::task::spawn_blocking(move || rota_executor::validate_plugin(node.engine(), &body))
            .await
            .map_err(|e| ApiError::Internal(anyhow::anyhow!("plugin validation panicked: {e}")))?
            .map_err(|e| ApiError::Unprocessable(e.to_string()))?;
    let (plugin, created) = state
        .node
        .store()
        .insert_plugin(&name, &valid.sha256, &valid.wasm, now_ms())
        .await?;
    if created {
        tracing::info!(plugin = %name, version = plugin.version, sha256 = %plugin.sha256, "plugin uploaded");
        state.node.plugin_changed(&name);
    }
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(plugin.into())))
}

/// `GET /api/v1/plugins`: every version of every plugin, by name then newest version.
pub async fn list(State(state): State<AppState>) -> ApiResult<Json<PageView<PluginView>>> {
    let plugins = state.node.store().list_plugins().await?;
    Ok(Json(PageView::all(
        plugins.into_iter().map(PluginView::from).collect(),
    )))
}
