//! `GET /api/v1/audit`: who changed what, and when (admins only). The console's changes and
//! the API's land in the same log: jobs, plugins, secrets, users, tokens, triggers, kills,
//! sign-ins.

use axum::Extension;
use axum::extract::State;
use serde::Serialize;
use utoipa::ToSchema;

use super::AppState;
use super::error::ApiResult;
use super::extract::{Json, PageQuery, Query};
use super::openapi::ErrorBody;
use super::views::{PageView, rfc3339};
use crate::access::Principal;
use crate::console::AuditEntry;
use crate::usecase;

/// One change: who did what to which thing, when.
#[derive(Debug, Serialize, ToSchema)]
pub struct AuditView {
    pub id: i64,
    /// The user (or `root`, the node's API token).
    pub user: String,
    /// What was done: `create job`, `delete plugin`, `revoke API token`, …
    pub action: String,
    /// What it was done to: a job's or plugin's name, a run's id, …
    pub target: String,
    #[schema(format = DateTime)]
    pub at: String,
}

impl From<AuditEntry> for AuditView {
    fn from(e: AuditEntry) -> Self {
        AuditView {
            id: e.id,
            user: e.user_name,
            action: e.action,
            target: e.target,
            at: rfc3339(e.at),
        }
    }
}

pub type AuditPage = PageView<AuditView>;

/// `GET /api/v1/audit?limit=&after=`: the audit log, newest first.
#[utoipa::path(
    get,
    path = "/api/v1/audit",
    operation_id = "list_audit",
    params(PageQuery),
    responses(
        (status = 200, description = "A page of the audit log, newest first", body = AuditPage),
        (status = 400, description = "A malformed `limit` or `after`", body = ErrorBody),
        (status = 403, description = "Not an admin", body = ErrorBody),
    )
)]
pub async fn list(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    Query(page): Query<PageQuery>,
) -> ApiResult<Json<AuditPage>> {
    let page = page.parse()?;
    let page = usecase::audit::list(&state.ports, &who, page.before_id, page.limit).await?;
    Ok(Json(PageView::of(page, AuditView::from)))
}
