//! `GET /api/v1/openapi.json`: the REST API as an OpenAPI 3.1 document, generated with
//! utoipa from each handler's `#[utoipa::path]` and the types it reads and answers.
//!
//! The types the API shares with the rest of the crate or with `rota-proto` (schedules,
//! backoffs, route and status names, log pages, the error body) get their schemas here,
//! written by hand from the same constants the code parses with; the tests below hold each
//! one to what serde actually writes. `tests/integration/api.rs` checks that the document describes
//! exactly the routes [`super::router`] serves.

use std::borrow::Cow;
use std::sync::LazyLock;

use rota_proto::BlockStrategy;
use utoipa::openapi::schema::{
    AdditionalProperties, ArrayBuilder, KnownFormat, ObjectBuilder, OneOfBuilder, Schema,
    SchemaFormat, SchemaType, Type,
};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{ContentBuilder, Ref, RefOr, ResponseBuilder};
use utoipa::{Modify, OpenApi, PartialSchema, ToSchema};

use super::extract::{Json, NameOrId};
use super::views::{PageView, TASK_STATUSES};
use super::{
    alarms, audit, executors, export, jobs, plugins, queue, runs, secrets, tasks, workflows,
};
use crate::backoff::Backoff;
use crate::model::{BlockName, RunStatus, TaskKind};
use crate::route::Route;
use crate::schedule::{Misfire, Schedule};
use crate::workflow::{InstanceStatus, Overlap, StepStatus, When};

/// The name of the bearer-token security scheme every operation requires (repeated in
/// `#[openapi(security(…))]`, which takes a literal only).
const API_TOKEN: &str = "api_token";

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Rota REST API",
        description = "Jobs, the delay queue, runs, plugins and executors of a Rota scheduler. \
            Times are RFC 3339 UTC strings with milliseconds; ids are 64-bit integers; every \
            answer that is not a success is `{\"error\": \"…\"}`."
    ),
    paths(
        plugins::upload,
        plugins::list,
        plugins::delete,
        jobs::create,
        jobs::list,
        jobs::get,
        jobs::update,
        jobs::delete,
        jobs::trigger,
        jobs::backfill,
        queue::pull,
        queue::ack_batch,
        tasks::create,
        tasks::create_batch,
        tasks::list,
        tasks::get,
        tasks::cancel,
        tasks::cancel_by_key,
        tasks::reschedule,
        queue::ack,
        queue::nack,
        queue::extend,
        queue::retry,
        queue::retry_dead,
        runs::list,
        runs::get,
        runs::log,
        runs::kill,
        executors::list,
        executors::nodes,
        secrets::list,
        secrets::set,
        secrets::delete,
        alarms::create_channel,
        alarms::list_channels,
        alarms::get_channel,
        alarms::delete_channel,
        alarms::test_channel,
        alarms::create_rule,
        alarms::list_rules,
        alarms::get_rule,
        alarms::update_rule,
        alarms::delete_rule,
        alarms::history,
        audit::list,
        workflows::create,
        workflows::list,
        workflows::get,
        workflows::update,
        workflows::delete,
        workflows::start,
        workflows::list_instances,
        workflows::get_instance,
        workflows::cancel,
        workflows::retry,
        export::export,
        export::apply,
        document,
    ),
    modifiers(&CommonAnswers),
    security(("api_token" = []))
)]
pub struct ApiDoc;

/// Built once: the document does not change while the process runs.
static DOCUMENT: LazyLock<serde_json::Value> = LazyLock::new(document_value);

/// The document: what the handlers' annotations say, with the constraints the use cases
/// check ([`super::constraints`]).
pub fn document_value() -> serde_json::Value {
    let mut doc = serde_json::to_value(ApiDoc::openapi()).expect("the OpenAPI document is JSON");
    super::constraints::apply(&mut doc);
    doc
}

/// `GET /api/v1/openapi.json`: this document.
#[utoipa::path(
    get,
    path = "/api/v1/openapi.json",
    operation_id = "openapi",
    tag = "meta",
    responses((status = 200, description = "The OpenAPI 3.1 document of this API", body = Object))
)]
pub async fn document() -> Json<&'static serde_json::Value> {
    Json(&DOCUMENT)
}

/// What the layers in front of the handlers answer, documented where they are decided
/// rather than on each handler: the extractors' 400 for a malformed path, query or body
/// (`super::extract`), the bearer token of [`super::auth::require_token`] (a 401 on every
/// operation), the router's body limit (a 413 wherever there is a body), and the
/// database's bad days (`usecase::Error`: 503 on every operation, 507 where it writes).
struct CommonAnswers;

impl Modify for CommonAnswers {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let scheme = HttpBuilder::new()
            .scheme(HttpAuthScheme::Bearer)
            .description(Some(
                "The scheduler's `ROTA_API_TOKEN` (an admin), or a token issued in the console \
                 (it acts as its user: role and apps).",
            ))
            .build();
        doc.components
            .get_or_insert_with(Default::default)
            .add_security_scheme(API_TOKEN, SecurityScheme::Http(scheme));
        for item in doc.paths.paths.values_mut() {
            let operations = [
                (&mut item.get, false),
                (&mut item.put, true),
                (&mut item.post, true),
                (&mut item.delete, true),
                (&mut item.patch, true),
            ];
            for (operation, writes) in operations {
                let Some(operation) = operation else {
                    continue;
                };
                let has_body = operation.request_body.is_some();
                let responses = &mut operation.responses.responses;
                responses.entry("400".into()).or_insert_with(|| {
                    error_response(
                        "A malformed path parameter, query string or body (the message names it)",
                    )
                });
                responses.entry("503".into()).or_insert_with(|| {
                    error_response(
                        "The database cannot take the request now (it does not answer, is \
                         read-only, or this node was taken over): nothing was changed; retry",
                    )
                });
                if writes {
                    responses.entry("507".into()).or_insert_with(|| {
                        error_response("The database's disk is full: nothing was stored; retry")
                    });
                }
                responses.entry("401".into()).or_insert_with(|| {
                    error_response("The `Authorization: Bearer <token>` header is missing or wrong")
                });
                responses.entry("403".into()).or_insert_with(|| {
                    error_response(
                        "The token's user lacks the role for this (viewer, operator, admin)",
                    )
                });
                if has_body {
                    responses.entry("413".into()).or_insert_with(|| {
                        error_response("The body is larger than this server accepts")
                    });
                }
            }
        }
    }
}

fn error_response(description: &str) -> RefOr<utoipa::openapi::Response> {
    let content = ContentBuilder::new()
        .schema(Some(Ref::from_schema_name(ErrorBody::name())))
        .build();
    ResponseBuilder::new()
        .description(description)
        .content("application/json", content)
        .into()
}

/// Implements [`ToSchema`] for `$ty` under the component name `$name`.
macro_rules! schema {
    ($ty:ty, $name:literal, $schema:expr) => {
        impl PartialSchema for $ty {
            fn schema() -> RefOr<Schema> {
                $schema
            }
        }

        impl ToSchema for $ty {
            fn name() -> Cow<'static, str> {
                Cow::Borrowed($name)
            }
        }
    };
}

/// [`PageView`]`<T>` as `PageView_T`, its items referring to `T`'s schema.
impl<T: ToSchema> PartialSchema for PageView<T> {
    fn schema() -> RefOr<Schema> {
        let next = ObjectBuilder::new()
            .schema_type(SchemaType::from_iter([Type::String, Type::Null]))
            .description(Some(
                "The cursor of the next page, to pass back as `after`; `null` on the last page",
            ));
        object("A page of a list")
            .property(
                "items",
                ArrayBuilder::new().items(Ref::from_schema_name(T::name())),
            )
            .property("next", next)
            .required("items")
            .required("next")
            .into()
    }
}

impl<T: ToSchema> ToSchema for PageView<T> {
    fn name() -> Cow<'static, str> {
        Cow::Owned(format!("PageView_{}", T::name()))
    }

    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        schemas.push((T::name().into_owned(), T::schema()));
        T::schemas(schemas);
    }
}

/// `{"error": "…"}`, the body of every answer that is not a success
/// ([`rota_proto::ErrorBody`], whose crate does not depend on utoipa).
pub enum ErrorBody {}

schema!(
    ErrorBody,
    "ErrorBody",
    object("What went wrong, in words a user can act on")
        .property("error", String::schema())
        .required("error")
        .additional_properties(Some(AdditionalProperties::FreeForm(false)))
        .into()
);

/// A plugin module as uploaded: `.wasm` bytes or `.wat` text.
pub enum WasmModule {}

schema!(
    WasmModule,
    "WasmModule",
    ObjectBuilder::new()
        .schema_type(Type::String)
        .format(Some(SchemaFormat::KnownFormat(KnownFormat::Binary)))
        .description(Some(
            "A WASI preview 1 command module: `.wasm` bytes or `.wat` text"
        ))
        .into()
);

/// [`rota_proto::LogPage`], the answer of `GET /api/v1/runs/{id}/log`.
pub enum LogPage {}

schema!(
    LogPage,
    "LogPage",
    object("A page of a run's log")
        .property("lines", Vec::<String>::schema())
        .property(
            "next_line",
            integer("The line to ask for next (1-based)", KnownFormat::Int64)
        )
        .property(
            "complete",
            boolean("The run is over and every line was returned")
        )
        .required("lines")
        .required("next_line")
        .required("complete")
        .into()
);

/// A task status as the API names it (the model has more: see [`super::views::task_status`]).
pub enum TaskStatusName {}

schema!(
    TaskStatusName,
    "TaskStatus",
    names("`failed` will be retried; `dead` will not", TASK_STATUSES)
);

schema!(
    BlockName,
    "BlockStrategy",
    names(
        "What a fire does while the job's previous run is still going",
        BlockStrategy::ALL.map(BlockStrategy::as_str)
    )
);

schema!(
    Route,
    "Route",
    names(
        "How a run picks an executor of the job's app",
        Route::ALL.map(Route::as_str)
    )
);

schema!(
    Misfire,
    "Misfire",
    names(
        "What a schedule does with fire times it missed",
        Misfire::ALL.map(Misfire::as_str)
    )
);

schema!(
    RunStatus,
    "RunStatus",
    names(
        "Where a run is, or how it ended",
        RunStatus::ALL.iter().map(|s| s.as_str())
    )
);

schema!(
    TaskKind,
    "TaskKind",
    names(
        "What created the task",
        TaskKind::ALL.iter().map(|k| k.as_str())
    )
);

pub use crate::usecase::fields::AnyJson;

schema!(
    AnyJson,
    "AnyJson",
    ObjectBuilder::new()
        .schema_type(SchemaType::AnyValue)
        .description(Some("Any JSON value"))
        .into()
);

schema!(
    When,
    "When",
    names(
        "When a workflow step runs once its predecessors are done",
        When::ALL.iter().map(|w| w.as_str())
    )
);

schema!(
    Overlap,
    "Overlap",
    names(
        "What a workflow's scheduled fire does while an earlier instance still runs",
        Overlap::ALL.iter().map(|o| o.as_str())
    )
);

schema!(
    StepStatus,
    "StepStatus",
    names(
        "Where a workflow instance's step is, or how it ended",
        StepStatus::ALL.iter().map(|s| s.as_str())
    )
);

schema!(
    InstanceStatus,
    "InstanceStatus",
    names(
        "Where a workflow instance is, or how it ended",
        InstanceStatus::ALL.iter().map(|s| s.as_str())
    )
);

schema!(
    NameOrId,
    "NameOrId",
    OneOfBuilder::new()
        .description(Some("A name (string) or an id (integer)"))
        .item(integer("An id", KnownFormat::Int64))
        .item(String::schema())
        .into()
);

schema!(
    Schedule,
    "Schedule",
    OneOfBuilder::new()
        .description(Some("When a job fires"))
        .item(
            variant("cron", "A Quartz cron expression (with seconds)")
                .property("expr", String::schema())
                .property(
                    "time_zone",
                    ObjectBuilder::new()
                        .schema_type(Type::String)
                        .description(Some("An IANA time zone; UTC by default"))
                )
                .required("expr")
        )
        .item(
            variant("fixed_rate", "Every `every_ms` milliseconds")
                .property(
                    "every_ms",
                    integer("Milliseconds between fires", KnownFormat::Int64)
                        .minimum(Some(crate::schedule::MIN_EVERY_MS))
                        .maximum(Some(crate::schedule::FIRE_HORIZON_MS))
                )
                .required("every_ms")
        )
        .item(
            variant(
                "fixed_delay",
                "`every_ms` milliseconds after the previous fire's task ended (never overlapping)"
            )
            .property(
                "every_ms",
                integer(
                    "Milliseconds from a fire's end to the next fire",
                    KnownFormat::Int64
                )
                .minimum(Some(crate::schedule::MIN_EVERY_MS))
                .maximum(Some(crate::schedule::FIRE_HORIZON_MS))
            )
            .required("every_ms")
        )
        .item(variant("none", "Only when triggered"))
        .into()
);

schema!(
    Backoff,
    "Backoff",
    OneOfBuilder::new()
        .description(Some("How long a failed attempt waits before the next"))
        .item(
            variant("fixed", "The same delay every time")
                .property("delay_ms", delay())
                .required("delay_ms")
        )
        .item(
            variant(
                "exponential",
                "`base_ms × factor^(attempt−1)`, at most `max_ms`, optionally jittered"
            )
            .property("base_ms", delay())
            .property(
                "factor",
                ObjectBuilder::new()
                    .schema_type(Type::Number)
                    .format(Some(SchemaFormat::KnownFormat(KnownFormat::Double)))
                    .minimum(Some(1))
                    .maximum(Some(crate::backoff::MAX_FACTOR))
            )
            .property(
                "max_ms",
                delay().description(Some("Milliseconds; at least `base_ms`"))
            )
            .property(
                "jitter",
                boolean("Randomise each delay; `false` by default")
            )
            .required("base_ms")
            .required("factor")
            .required("max_ms")
        )
        .into()
);

fn object(description: &str) -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::Object)
        .description(Some(description))
}

/// One variant of a `kind`-tagged enum: an object whose `kind` is `kind`.
fn variant(kind: &str, description: &str) -> ObjectBuilder {
    object(description)
        .property(
            "kind",
            ObjectBuilder::new()
                .schema_type(Type::String)
                .enum_values(Some([kind])),
        )
        .required("kind")
        .additional_properties(Some(AdditionalProperties::FreeForm(false)))
}

fn integer(description: &str, format: KnownFormat) -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::Integer)
        .format(Some(SchemaFormat::KnownFormat(format)))
        .description(Some(description))
}

/// A backoff's delay: 0 to ten years, in milliseconds.
fn delay() -> ObjectBuilder {
    integer("Milliseconds", KnownFormat::Int64)
        .minimum(Some(0))
        .maximum(Some(crate::backoff::MAX_DELAY_MS))
}

fn boolean(description: &str) -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::Boolean)
        .description(Some(description))
}

/// A string that is one of `names`.
fn names<'a>(description: &str, names: impl IntoIterator<Item = &'a str>) -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .description(Some(description))
        .enum_values(Some(names))
        .into()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use serde::Serialize;
    use serde_json::Value;

    use super::*;

    /// The schema as JSON, for comparing with what serde writes.
    fn json_of<T: ToSchema>() -> Value {
        serde_json::to_value(T::schema()).expect("a schema serializes")
    }

    fn keys(v: &Value) -> BTreeSet<String> {
        v.as_object().expect("an object").keys().cloned().collect()
    }

    fn properties(schema: &Value) -> BTreeSet<String> {
        keys(&schema["properties"])
    }

    fn required(schema: &Value) -> BTreeSet<String> {
        schema["required"]
            .as_array()
            .map(|r| r.iter().map(|k| k.as_str().unwrap().to_owned()).collect())
            .unwrap_or_default()
    }

    /// `value` fits one branch of the `kind`-tagged `oneOf`: that branch names each key it
    /// has and requires each key it needs.
    fn fits_a_variant<T: ToSchema + Serialize>(value: &T) -> bool {
        let value = serde_json::to_value(value).unwrap();
        let schema = json_of::<T>();
        schema["oneOf"].as_array().unwrap().iter().any(|branch| {
            branch["properties"]["kind"]["enum"][0] == value["kind"]
                && keys(&value).is_subset(&properties(branch))
                && required(branch).is_subset(&keys(&value))
        })
    }

    #[test]
    fn schedules_and_backoffs_fit_their_schemas() {
        let schedules = [
            Schedule::Cron {
                expr: "0 0 * * * ?".into(),
                time_zone: Some("Asia/Shanghai".into()),
            },
            Schedule::Cron {
                expr: "0 0 * * * ?".into(),
                time_zone: None,
            },
            Schedule::FixedRate { every_ms: 1000 },
            Schedule::FixedDelay { every_ms: 1000 },
            Schedule::None,
        ];
        for schedule in &schedules {
            assert!(fits_a_variant(schedule), "{schedule:?}");
        }
        let backoffs = [
            Backoff::Fixed { delay_ms: 5 },
            Backoff::Exponential {
                base_ms: 1000,
                factor: 2.0,
                max_ms: 60_000,
                jitter: true,
            },
        ];
        for backoff in &backoffs {
            assert!(fits_a_variant(backoff), "{backoff:?}");
        }
        // One branch per variant, no more.
        assert_eq!(json_of::<Schedule>()["oneOf"].as_array().unwrap().len(), 4);
        assert_eq!(json_of::<Backoff>()["oneOf"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn foreign_bodies_fit_their_schemas() {
        let page = rota_proto::LogPage {
            lines: vec!["hello".into()],
            next_line: 2,
            complete: true,
        };
        let error = rota_proto::ErrorBody { error: "no".into() };
        for (value, schema) in [
            (serde_json::to_value(page).unwrap(), json_of::<LogPage>()),
            (serde_json::to_value(error).unwrap(), json_of::<ErrorBody>()),
        ] {
            assert_eq!(keys(&value), properties(&schema));
            assert_eq!(keys(&value), required(&schema));
        }
    }
}
