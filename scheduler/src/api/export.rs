//! Jobs as code in the REST API (SPEC §12): `GET /api/v1/export` writes the document of
//! the caller's apps (YAML or JSON), `POST /api/v1/apply` makes the node hold what one
//! says — all or nothing, a dry run on request (`usecase::apply`).

use axum::Extension;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};

use super::AppState;
use super::error::ApiResult;
use super::extract::{Json, JsonOrYaml, Query, query_flag};
use super::openapi::ErrorBody;
use crate::access::Principal;
use crate::usecase::apply::Outcome;
use crate::usecase::export::Document;
use crate::usecase::{self};

/// What to export, and how.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ExportQuery {
    /// Only this app's jobs, workflows, rules and secrets (every app the caller sees by
    /// default).
    app: Option<String>,
    /// `yaml` (the default) or `json`.
    #[param(inline)]
    #[serde(default, deserialize_with = "format_or_empty")]
    format: Option<ExportFormat>,
}

/// `?format=` as left out, like every other empty query parameter.
fn format_or_empty<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<ExportFormat>, D::Error> {
    match Option::<String>::deserialize(d)?.as_deref() {
        None | Some("") => Ok(None),
        Some("yaml") => Ok(Some(ExportFormat::Yaml)),
        Some("json") => Ok(Some(ExportFormat::Json)),
        Some(other) => Err(serde::de::Error::custom(format!(
            "`{other}` is not a format; expected `yaml` or `json`"
        ))),
    }
}

/// The format of an exported document.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ExportFormat {
    Yaml,
    Json,
}

/// `GET /api/v1/export`: the jobs, workflows, alarm rules, plugin bindings and secret names
/// of the caller's apps, in the canonical form `POST /api/v1/apply` reads back.
#[utoipa::path(
    get,
    path = "/api/v1/export",
    operation_id = "export",
    tag = "as code",
    params(ExportQuery),
    responses(
        (status = 200, description = "The document", content(
            (Document = "application/json"),
            (Document = "application/yaml"),
        )),
        (status = 400, description = "An unknown format", body = ErrorBody),
        (status = 422, description = "A malformed app name", body = ErrorBody),
        (status = 403, description = "The caller may not read that app", body = ErrorBody),
    )
)]
pub async fn export(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    Query(q): Query<ExportQuery>,
) -> ApiResult<Response> {
    let app = q.app.as_deref().filter(|a| !a.is_empty());
    let doc = usecase::export::export(&state.ports, &who, app).await?;
    if q.format == Some(ExportFormat::Json) {
        return Ok(Json(doc).into_response());
    }
    let text = usecase::export::to_yaml(&doc);
    Ok(([(header::CONTENT_TYPE, "application/yaml")], text).into_response())
}

/// How to apply.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ApplyQuery {
    /// Check the document and answer what it would change, changing nothing.
    #[param(value_type = Option<bool>)]
    dry_run: Option<String>,
    /// Also delete the jobs, workflows and alarm rules of the document's apps that it
    /// does not list.
    #[param(value_type = Option<bool>)]
    prune: Option<String>,
}

/// `POST /api/v1/apply`: makes the node hold what the document says of its apps (JSON, or
/// YAML with `content-type: application/yaml`). Everything is checked first and every
/// problem named; a document with one changes nothing. Applying the same document twice
/// changes nothing the second time.
#[utoipa::path(
    post,
    path = "/api/v1/apply",
    operation_id = "apply",
    tag = "as code",
    params(ApplyQuery),
    request_body(content = Document, description = "A document as `GET /api/v1/export` writes it"),
    responses(
        (status = 200, description = "What changed (or, in a dry run, would)", body = Outcome),
        (status = 400, description = "Not JSON or YAML, not a document (a field named), or a flag not `true` or `false`", body = ErrorBody),
        (status = 403, description = "The document names an app the caller may not change", body = ErrorBody),
        (status = 409, description = "A prune would delete a job with tasks on their way or a workflow with running instances", body = ErrorBody),
        (status = 422, description = "Every entry the node would refuse, each named with its place in the document", body = ErrorBody),
    )
)]
pub async fn apply(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    Query(q): Query<ApplyQuery>,
    JsonOrYaml(doc): JsonOrYaml<Document>,
) -> ApiResult<Json<Outcome>> {
    let dry_run = query_flag("dry_run", q.dry_run.as_deref())?;
    let prune = query_flag("prune", q.prune.as_deref())?;
    let outcome = usecase::apply::apply(&state.ports, &who, doc, dry_run, prune).await?;
    Ok(Json(outcome))
}
