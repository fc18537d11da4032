//! Alarms (SPEC §9): `/api/v1/alarm-channels`, `/api/v1/alarm-rules` and the history,
//! `GET /api/v1/alarms`. Each parses, calls `usecase::alarms` and renders; a channel's URL
//! is never rendered, only its hint.

use axum::Extension;
use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::AppState;
use super::error::ApiResult;
use super::extract::{Json, PageQuery, PathParam, Query};
use super::openapi::ErrorBody;
use super::views::{PageView, rfc3339, rfc3339_opt};
use crate::access::Principal;
use crate::store::{AlarmChannelRow, AlarmDelivery, AlarmRow, AlarmRuleRow};
use crate::usecase::alarms::{self, ChannelFields, RuleFields, RulePatch};

const CHANNEL: &str = "The channel's name";
const RULE: &str = "The rule's name";

/// A channel, without its URL.
#[derive(Debug, Serialize, ToSchema)]
pub struct ChannelView {
    pub name: String,
    pub kind: String,
    /// The app it serves; none: every app.
    pub app: Option<String>,
    /// Scheme and host of its URL (the rest may hold a token and is never shown).
    pub url: Option<String>,
    pub to: Vec<String>,
    /// The app secret that signs its messages.
    pub secret: Option<String>,
    #[schema(format = DateTime)]
    pub created_at: String,
}

impl From<AlarmChannelRow> for ChannelView {
    fn from(c: AlarmChannelRow) -> Self {
        ChannelView {
            name: c.name,
            kind: c.kind,
            app: c.app,
            url: c.url_hint,
            to: c
                .recipients
                .and_then(|r| serde_json::from_str(&r).ok())
                .unwrap_or_default(),
            secret: c.secret,
            created_at: rfc3339(c.created_at),
        }
    }
}

/// A rule, and whether its condition is open.
#[derive(Debug, Serialize, ToSchema)]
pub struct RuleView {
    pub name: String,
    pub app: String,
    /// The job's id, if it watches one job.
    pub job: Option<i64>,
    pub on: String,
    pub threshold: Option<i64>,
    pub channels: Vec<String>,
    pub throttle_ms: i64,
    pub enabled: bool,
    /// Since when an alarm is out whose condition has not cleared.
    #[schema(format = DateTime)]
    pub open_since: Option<String>,
    #[schema(format = DateTime)]
    pub last_sent_at: Option<String>,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(format = DateTime)]
    pub updated_at: String,
}

impl From<AlarmRuleRow> for RuleView {
    fn from(r: AlarmRuleRow) -> Self {
        RuleView {
            name: r.name,
            app: r.app,
            job: r.job_id,
            on: r.on_event,
            threshold: r.threshold,
            channels: serde_json::from_str(&r.channels).unwrap_or_default(),
            throttle_ms: r.throttle_ms,
            enabled: r.enabled,
            open_since: rfc3339_opt(r.open_since),
            last_sent_at: rfc3339_opt(r.last_sent_at),
            created_at: rfc3339(r.created_at),
            updated_at: rfc3339(r.updated_at),
        }
    }
}

/// One alarm's send to one channel.
#[derive(Debug, Serialize, ToSchema)]
pub struct SendView {
    pub channel: String,
    /// `pending` (being retried), `sent`, or `failed` (it gave up).
    pub status: String,
    pub attempts: i32,
    #[schema(format = DateTime)]
    pub next_at: Option<String>,
    pub last_error: Option<String>,
    #[schema(format = DateTime)]
    pub sent_at: Option<String>,
}

impl From<AlarmDelivery> for SendView {
    fn from(d: AlarmDelivery) -> Self {
        SendView {
            next_at: (d.status == "pending").then(|| rfc3339(d.next_at)),
            channel: d.channel,
            status: d.status,
            attempts: d.attempts,
            last_error: d.last_error,
            sent_at: rfc3339_opt(d.sent_at),
        }
    }
}

/// An alarm as sent (§9), with its sends.
#[derive(Debug, Serialize, ToSchema)]
pub struct AlarmView {
    pub id: i64,
    pub rule: String,
    pub on: String,
    pub app: String,
    /// The job's id.
    pub job: Option<i64>,
    pub task: Option<i64>,
    pub run: Option<i64>,
    pub attempt: Option<i32>,
    pub message: String,
    /// Events folded into it by the throttle.
    pub count: i32,
    pub resolved: bool,
    #[schema(format = DateTime)]
    pub first_at: String,
    #[schema(format = DateTime)]
    pub at: String,
    #[schema(format = DateTime)]
    pub created_at: String,
    pub sends: Vec<SendView>,
}

impl From<(AlarmRow, Vec<AlarmDelivery>)> for AlarmView {
    fn from((a, sends): (AlarmRow, Vec<AlarmDelivery>)) -> Self {
        AlarmView {
            id: a.id,
            rule: a.rule,
            on: a.on_event,
            app: a.app,
            job: a.job_id,
            task: a.task_id,
            run: a.run_id,
            attempt: a.attempt,
            message: a.message,
            count: a.count,
            resolved: a.resolved,
            first_at: rfc3339(a.first_at),
            at: rfc3339(a.last_at),
            created_at: rfc3339(a.created_at),
            sends: sends.into_iter().map(SendView::from).collect(),
        }
    }
}

pub type ChannelPage = PageView<ChannelView>;
pub type RulePage = PageView<RuleView>;
pub type AlarmPage = PageView<AlarmView>;

/// `POST /api/v1/alarm-channels`.
#[utoipa::path(
    post,
    path = "/api/v1/alarm-channels",
    operation_id = "create_alarm_channel",
    request_body = ChannelFields,
    responses(
        (status = 201, description = "The channel (its URL only as a hint)", body = ChannelView),
        (status = 400, description = "Malformed JSON or an unknown field", body = ErrorBody),
        (status = 403, description = "Not an operator of the app (an admin, for every app)", body = ErrorBody),
        (status = 409, description = "A channel of that name exists", body = ErrorBody),
        (status = 422, description = "A bad kind, URL, recipient or secret", body = ErrorBody),
    )
)]
pub async fn create_channel(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    Json(body): Json<ChannelFields>,
) -> ApiResult<(StatusCode, Json<ChannelView>)> {
    let c = alarms::create_channel(&state.ports, &who, body).await?;
    Ok((StatusCode::CREATED, Json(c.into())))
}

/// `GET /api/v1/alarm-channels`.
#[utoipa::path(
    get,
    path = "/api/v1/alarm-channels",
    operation_id = "list_alarm_channels",
    responses((status = 200, description = "The channels you see", body = ChannelPage))
)]
pub async fn list_channels(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
) -> ApiResult<Json<ChannelPage>> {
    let all = alarms::channels(&state.ports, &who).await?;
    Ok(Json(PageView::all(
        all.into_iter().map(ChannelView::from).collect(),
    )))
}

/// `GET /api/v1/alarm-channels/{name}`.
#[utoipa::path(
    get,
    path = "/api/v1/alarm-channels/{name}",
    operation_id = "get_alarm_channel",
    params(("name" = String, Path, description = CHANNEL)),
    responses(
        (status = 200, description = "The channel", body = ChannelView),
        (status = 404, description = "No such channel", body = ErrorBody),
    )
)]
pub async fn get_channel(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    PathParam(name): PathParam,
) -> ApiResult<Json<ChannelView>> {
    Ok(Json(
        alarms::channel(&state.ports, &who, &name).await?.into(),
    ))
}

/// `DELETE /api/v1/alarm-channels/{name}`.
#[utoipa::path(
    delete,
    path = "/api/v1/alarm-channels/{name}",
    operation_id = "delete_alarm_channel",
    params(("name" = String, Path, description = CHANNEL)),
    responses(
        (status = 204, description = "Deleted"),
        (status = 404, description = "No such channel", body = ErrorBody),
        (status = 409, description = "A rule still sends to it", body = ErrorBody),
    )
)]
pub async fn delete_channel(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    PathParam(name): PathParam,
) -> ApiResult<StatusCode> {
    alarms::delete_channel(&state.ports, &who, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Tested {
    delivered: bool,
}

/// `POST /api/v1/alarm-channels/{name}/test`: sends a test message now.
#[utoipa::path(
    post,
    path = "/api/v1/alarm-channels/{name}/test",
    operation_id = "test_alarm_channel",
    params(("name" = String, Path, description = CHANNEL)),
    responses(
        (status = 200, description = "Delivered", body = Tested),
        (status = 404, description = "No such channel", body = ErrorBody),
        (status = 502, description = "Not delivered; the message says why", body = ErrorBody),
    )
)]
pub async fn test_channel(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    PathParam(name): PathParam,
) -> ApiResult<Json<Tested>> {
    alarms::test_channel(&state.ports, &who, &name).await?;
    Ok(Json(Tested { delivered: true }))
}

/// `POST /api/v1/alarm-rules`.
#[utoipa::path(
    post,
    path = "/api/v1/alarm-rules",
    operation_id = "create_alarm_rule",
    request_body = RuleFields,
    responses(
        (status = 201, description = "The rule", body = RuleView),
        (status = 400, description = "Malformed JSON or an unknown field", body = ErrorBody),
        (status = 403, description = "Not an operator of the app", body = ErrorBody),
        (status = 409, description = "A rule of that name exists", body = ErrorBody),
        (status = 404, description = "`job` or a channel names nothing that exists", body = ErrorBody),
        (status = 422, description = "A bad event, job, threshold, channel or throttle", body = ErrorBody),
    )
)]
pub async fn create_rule(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    Json(body): Json<RuleFields>,
) -> ApiResult<(StatusCode, Json<RuleView>)> {
    let r = alarms::create_rule(&state.ports, &who, body).await?;
    Ok((StatusCode::CREATED, Json(r.into())))
}

/// `GET /api/v1/alarm-rules`.
#[utoipa::path(
    get,
    path = "/api/v1/alarm-rules",
    operation_id = "list_alarm_rules",
    responses((status = 200, description = "The rules you see", body = RulePage))
)]
pub async fn list_rules(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
) -> ApiResult<Json<RulePage>> {
    let all = alarms::rules(&state.ports, &who).await?;
    Ok(Json(PageView::all(
        all.into_iter().map(RuleView::from).collect(),
    )))
}

/// `GET /api/v1/alarm-rules/{name}`.
#[utoipa::path(
    get,
    path = "/api/v1/alarm-rules/{name}",
    operation_id = "get_alarm_rule",
    params(("name" = String, Path, description = RULE)),
    responses(
        (status = 200, description = "The rule", body = RuleView),
        (status = 404, description = "No such rule", body = ErrorBody),
    )
)]
pub async fn get_rule(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    PathParam(name): PathParam,
) -> ApiResult<Json<RuleView>> {
    Ok(Json(alarms::rule(&state.ports, &who, &name).await?.into()))
}

/// `PATCH /api/v1/alarm-rules/{name}`.
#[utoipa::path(
    patch,
    path = "/api/v1/alarm-rules/{name}",
    operation_id = "update_alarm_rule",
    params(("name" = String, Path, description = RULE)),
    request_body = RulePatch,
    responses(
        (status = 200, description = "The rule as changed", body = RuleView),
        (status = 400, description = "Malformed JSON or an unknown field", body = ErrorBody),
        (status = 404, description = "No such rule", body = ErrorBody),
        (status = 422, description = "A bad threshold, channel or throttle", body = ErrorBody),
    )
)]
pub async fn update_rule(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    PathParam(name): PathParam,
    Json(body): Json<RulePatch>,
) -> ApiResult<Json<RuleView>> {
    Ok(Json(
        alarms::update_rule(&state.ports, &who, &name, body)
            .await?
            .into(),
    ))
}

/// `DELETE /api/v1/alarm-rules/{name}`.
#[utoipa::path(
    delete,
    path = "/api/v1/alarm-rules/{name}",
    operation_id = "delete_alarm_rule",
    params(("name" = String, Path, description = RULE)),
    responses(
        (status = 204, description = "Deleted, with the events it had not sent"),
        (status = 404, description = "No such rule", body = ErrorBody),
    )
)]
pub async fn delete_rule(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    PathParam(name): PathParam,
) -> ApiResult<StatusCode> {
    alarms::delete_rule(&state.ports, &who, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct HistoryQuery {
    /// Only this rule's alarms.
    rule: Option<String>,
}

/// `GET /api/v1/alarms?rule=&limit=&after=`: the alarms sent, newest first, with each
/// send's status and last error.
#[utoipa::path(
    get,
    path = "/api/v1/alarms",
    operation_id = "list_alarms",
    params(HistoryQuery, PageQuery),
    responses(
        (status = 200, description = "A page of the history, newest first", body = AlarmPage),
        (status = 400, description = "A malformed `limit` or `after`", body = ErrorBody),
    )
)]
pub async fn history(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    Query(q): Query<HistoryQuery>,
    Query(page): Query<PageQuery>,
) -> ApiResult<Json<AlarmPage>> {
    let page = page.parse()?;
    let found = alarms::history(
        &state.ports,
        &who,
        q.rule.as_deref(),
        page.before_id,
        page.limit,
    )
    .await?;
    Ok(Json(PageView::of(found, AlarmView::from)))
}
