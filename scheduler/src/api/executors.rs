//! The cluster in the REST API: the live executors and the scheduler nodes. (What
//! executors themselves call is `crate::protocol`.)

use axum::Extension;
use axum::extract::State;
use serde::Deserialize;
use utoipa::IntoParams;

use super::AppState;
use super::error::ApiResult;
use super::extract::{Json, Query};
use super::openapi::ErrorBody;
use super::views::{ExecutorPage, ExecutorView, NodePage, NodeView, PageView};

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Only this app's executors.
    app: Option<String>,
}

/// `GET /api/v1/executors?app=`: executors that sent a heartbeat within the dead-after
/// time, by app then address.
#[utoipa::path(
    get,
    path = "/api/v1/executors",
    operation_id = "list_executors",
    params(ListQuery),
    responses(
        (status = 200, description = "Live executors, on one page", body = ExecutorPage),
        (status = 400, description = "A malformed query string", body = ErrorBody),
    )
)]
pub async fn list(
    State(state): State<AppState>,
    Extension(who): Extension<crate::access::Principal>,
    Query(q): Query<ListQuery>,
) -> ApiResult<Json<ExecutorPage>> {
    let app = q.app.filter(|a| !a.is_empty());
    let executors = crate::usecase::cluster::executors(&state.ports, &who, app.as_deref()).await?;
    Ok(Json(PageView::all(
        executors.into_iter().map(ExecutorView::from).collect(),
    )))
}

/// `GET /api/v1/nodes`: every scheduler node that ran on this database, live or not, with
/// its measured clock offset.
#[utoipa::path(
    get,
    path = "/api/v1/nodes",
    operation_id = "list_nodes",
    responses(
        (status = 200, description = "The scheduler nodes, by name, on one page", body = NodePage),
    )
)]
pub async fn nodes(State(state): State<AppState>) -> ApiResult<Json<NodePage>> {
    let nodes = crate::usecase::cluster::nodes(&state.ports).await?;
    Ok(Json(PageView::all(
        nodes.into_iter().map(NodeView::from).collect(),
    )))
}
