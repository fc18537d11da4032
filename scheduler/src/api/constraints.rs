//! The constraints the use cases check, stated in the OpenAPI document from the same
//! constants that check them: ranges, lengths, patterns, enums and the rules between
//! fields (`delay_ms` or `run_at`, not both). A client generated from the document then
//! refuses what the server would, and a property-based tester (schemathesis, run by
//! `scripts/test`) finds no schema-valid request refused and no invalid one taken.
//!
//! What JSON Schema cannot say stays in the descriptions and is a 422 naming the field: a
//! cron expression that does not parse, a URL the egress policy refuses, a due time more
//! than ten years ahead, a byte limit on UTF-8 text, the same key twice in one batch.

use serde_json::{Value, json};

use crate::alarm::On;
use crate::alarm::channel::Kind;
use crate::model::Delivery;
use crate::schedule::FIRE_HORIZON_MS;
use crate::usecase::validate::{MAX_APP_CHARS, MAX_NAME_CHARS};
use crate::usecase::{alarms, jobs, queue, tasks};
use crate::workflow::MAX_STEPS;

/// An identifier (app, plugin, alarm channel or rule): ASCII letters, digits, `.`, `_`
/// and `-`, starting with a letter or digit (`validate::identifier`).
const IDENTIFIER: &str = "^[A-Za-z0-9][A-Za-z0-9._-]*$";
/// A secret's name (`secrets::check_name`).
const SECRET_NAME: &str = "^[A-Za-z0-9._-]+$";
/// A free name (a job, a task key, a consumer): any text but control and invisible
/// characters, and not only spaces (`validate::name`). Spelled out rather than with `\s`
/// or `\p{…}`, which regex dialects read differently.
const FREE_NAME: &str = concat!(
    "^[^\\u0000-\\u001F\\u007F-\\u009F\\u200B-\\u200F\\u202A-\\u202E\\u2066-\\u2069\\uFEFF]*",
    "[^\\u0000-\\u0020\\u007F-\\u00A0\\u1680\\u2000-\\u200F\\u2028-\\u202F\\u205F\\u2066-\\u2069\\u3000\\uFEFF]",
    "[^\\u0000-\\u001F\\u007F-\\u009F\\u200B-\\u200F\\u202A-\\u202E\\u2066-\\u2069\\uFEFF]*$",
);

/// One constraint on a property of a component schema.
enum Rule {
    /// An integer's inclusive range.
    Range(i64, i64),
    /// A string's pattern and its length in characters.
    Text(&'static str, usize, usize),
    /// A string that is one of these.
    OneOf(Vec<&'static str>),
    /// An array's length.
    Items(usize, usize),
    /// An array of strings each matching a pattern, of at most this many characters.
    EachText(&'static str, usize),
    /// A count from 1 with no upper bound and no integer format (a larger one is capped,
    /// whatever its size: `extract::capped_count`).
    Count,
}

/// `(schema, property, rule)`: every constraint the document states.
fn rules() -> Vec<(&'static str, &'static str, Rule)> {
    use Rule::*;
    let name = || Text(FREE_NAME, 1, MAX_NAME_CHARS);
    let lease = || Range(queue::MIN_LEASE_MS, queue::MAX_LEASE_MS);
    let priority = || Range(-tasks::MAX_PRIORITY, tasks::MAX_PRIORITY);
    let mut rules = vec![
        ("TaskFields", "priority", priority()),
        ("TaskFields", "max_attempts", Range(1, tasks::MAX_ATTEMPTS)),
        ("TaskFields", "delay_ms", Range(0, FIRE_HORIZON_MS)),
        ("TaskFields", "key", name()),
        ("BatchBody", "tasks", Items(0, tasks::MAX_BATCH)),
        ("Reschedule", "priority", priority()),
        ("Reschedule", "delay_ms", Range(0, FIRE_HORIZON_MS)),
        ("PullFields", "max", Range(1, queue::MAX_PULL)),
        ("PullFields", "lease_ms", lease()),
        ("PullFields", "wait_ms", Range(0, queue::MAX_WAIT_MS)),
        (
            "PullFields",
            "consumer",
            Text(FREE_NAME, 1, queue::MAX_CONSUMER_CHARS),
        ),
        ("LeaseEnd", "delay_ms", Range(0, queue::MAX_NACK_DELAY_MS)),
        ("LeaseExtension", "lease_ms", lease()),
        ("AckBatch", "acks", Items(0, queue::MAX_ACKS)),
        ("BulkRetry", "status", OneOf(vec!["dead"])),
        ("BulkRetry", "limit", Range(1, queue::MAX_REDRIVE)),
        ("RuleFields", "name", Text(IDENTIFIER, 1, alarms::MAX_NAME)),
        ("RuleFields", "app", Text(IDENTIFIER, 1, MAX_APP_CHARS)),
        (
            "RuleFields",
            "on",
            OneOf(On::ALL.iter().map(|o| o.as_str()).collect()),
        ),
        (
            "ChannelFields",
            "name",
            Text(IDENTIFIER, 1, alarms::MAX_NAME),
        ),
        ("ChannelFields", "app", Text(IDENTIFIER, 1, MAX_APP_CHARS)),
        (
            "ChannelFields",
            "kind",
            OneOf(Kind::ALL.iter().map(|k| k.as_str()).collect()),
        ),
        ("ChannelFields", "to", Items(1, alarms::MAX_RECIPIENTS)),
        (
            "ChannelFields",
            "secret",
            Text(SECRET_NAME, 1, crate::secrets::NAME_MAX),
        ),
        ("JobFields", "name", name()),
        ("JobFields", "app", Text(IDENTIFIER, 1, MAX_APP_CHARS)),
        ("JobFields", "timeout_ms", Range(1, jobs::MAX_TIMEOUT_MS)),
        ("JobFields", "max_attempts", Range(1, jobs::MAX_ATTEMPTS)),
        ("JobFields", "memory_mb", Range(1, jobs::MAX_MEMORY_MB)),
        (
            "JobFields",
            "max_concurrency",
            Range(1, jobs::MAX_CONCURRENCY),
        ),
        ("ConcurrencyField", "limit", Range(1, jobs::MAX_CONCURRENCY)),
        ("JobFields", "debounce_ms", Range(1, jobs::MAX_DEBOUNCE_MS)),
        ("RateLimit", "limit", Range(1, crate::limits::MAX_RATE)),
        (
            "RateLimit",
            "per_ms",
            Range(1, crate::limits::MAX_RATE_WINDOW_MS),
        ),
        (
            "JobFields",
            "no_executor_timeout_ms",
            Range(1_000, jobs::MAX_NO_EXECUTOR_TIMEOUT_MS),
        ),
        ("JobFields", "child_jobs", Items(0, jobs::MAX_CHILD_JOBS)),
        ("WorkflowBody", "name", name()),
        ("WorkflowBody", "app", Text(IDENTIFIER, 1, MAX_APP_CHARS)),
        ("WorkflowBody", "steps", Items(1, MAX_STEPS)),
        ("WorkflowPatch", "steps", Items(1, MAX_STEPS)),
        ("WorkflowStepBody", "name", name()),
        ("InstanceStart", "key", name()),
    ];
    // A new rule and a change to one check these the same way.
    for schema in ["RuleFields", "RulePatch"] {
        rules.extend([
            (schema, "threshold", Range(1, alarms::MAX_THRESHOLD_MS)),
            (schema, "throttle_ms", Range(0, alarms::MAX_THROTTLE_MS)),
            (schema, "channels", Items(1, alarms::MAX_CHANNELS)),
            (schema, "channels", EachText(IDENTIFIER, alarms::MAX_NAME)),
        ]);
    }
    rules
}

/// `(path, parameter, rule)`: the constraints on path and query parameters.
fn parameter_rules() -> Vec<(&'static str, &'static str, Rule)> {
    use Rule::*;
    let app = || Text(IDENTIFIER, 1, MAX_APP_CHARS);
    let secret = || Text(SECRET_NAME, 1, crate::secrets::NAME_MAX);
    vec![
        ("/api/v1/jobs", "limit", Count),
        ("/api/v1/tasks", "limit", Count),
        ("/api/v1/runs", "limit", Count),
        ("/api/v1/runs/{id}/log", "limit", Count),
        ("/api/v1/alarms", "limit", Count),
        ("/api/v1/audit", "limit", Count),
        ("/api/v1/workflow-instances", "limit", Count),
        ("/api/v1/apps/{app}/secrets", "app", app()),
        ("/api/v1/apps/{app}/secrets/{name}", "app", app()),
        ("/api/v1/apps/{app}/secrets/{name}", "name", secret()),
        ("/api/v1/export", "app", app()),
    ]
}

/// Two fields that may not both be given (not `null`).
const NOT_BOTH: &[(&str, &str, &str)] = &[
    ("TaskFields", "delay_ms", "run_at"),
    ("Reschedule", "delay_ms", "run_at"),
];

/// States every constraint in `doc` (the OpenAPI document as JSON). Panics on a rule for
/// a schema or property the document does not have: the table and the types must move
/// together (a unit test builds the document).
pub fn apply(doc: &mut Value) {
    for (schema, property, rule) in rules() {
        let target = &mut doc["components"]["schemas"][schema]["properties"][property];
        assert!(
            target.is_object(),
            "no property `{property}` in schema `{schema}`"
        );
        constrain(target, &rule);
    }
    for (path, name, rule) in parameter_rules() {
        let item = &mut doc["paths"][path];
        assert!(item.is_object(), "no path `{path}`");
        let mut found = false;
        for parameter in parameters_of(item).filter(|p| p["name"] == name) {
            constrain(&mut parameter["schema"], &rule);
            found = true;
        }
        assert!(found, "no parameter `{name}` on `{path}`");
    }
    for (schema, a, b) in NOT_BOTH {
        let target = &mut doc["components"]["schemas"][*schema];
        assert!(target["properties"][*a].is_object() && target["properties"][*b].is_object());
        let given = json!({"not": {"type": "null"}});
        target["not"] = json!({
            "required": [a, b],
            "properties": {*a: given, *b: given},
        });
        let said = format!("`{a}` and `{b}` may not both be given.");
        append_description(target, &said);
    }
    // A reschedule needs one of them: when the task is now due.
    doc["components"]["schemas"]["Reschedule"]["anyOf"] = json!([
        {"required": ["delay_ms"], "properties": {"delay_ms": {"type": "integer"}}},
        {"required": ["run_at"], "properties": {"run_at": {"type": "string"}}},
    ]);
    // A new job names what a change may leave out, and runs a plugin unless it is pulled
    // or delivered over HTTP (when it may not name one).
    doc["paths"]["/api/v1/jobs"]["post"]["requestBody"]["content"]["application/json"]["schema"] = json!({
        "allOf": [{"$ref": "#/components/schemas/JobFields"}],
        "required": ["name", "app", "schedule"],
        "properties": {
            "name": {"type": "string"},
            "app": {"type": "string"},
            "schedule": {"$ref": "#/components/schemas/Schedule"},
        },
        "oneOf": [
            {
                "required": ["plugin"],
                "properties": {
                    "plugin": {"$ref": "#/components/schemas/NameOrId"},
                    "delivery": {"oneOf": [
                        {"type": "null"},
                        {"type": "object", "properties": {"kind": {"const": "wasm"}}},
                    ]},
                },
            },
            {
                "required": ["delivery"],
                "properties": {
                    "plugin": {"type": "null"},
                    "delivery": {
                        "type": "object",
                        "required": ["kind"],
                        "properties": {"kind": {"enum": Delivery::PLUGINLESS}},
                    },
                },
            },
        ],
    });
    // An empty query parameter (`?status=`) is the same as leaving it out.
    let items = doc["paths"]
        .as_object_mut()
        .into_iter()
        .flat_map(|p| p.values_mut());
    for parameter in items.flat_map(parameters_of) {
        if parameter["in"] == "query" && parameter["required"] != true {
            let schema = parameter["schema"].take();
            parameter["schema"] = json!({"anyOf": [schema, {"type": "string", "maxLength": 0}]});
        }
    }
    alarm_rule_conditions(&mut doc["components"]["schemas"]["RuleFields"]);
    // A delivery has the fields of its kind and no others (`model::DeliveryFields`).
    let deliveries = doc["components"]["schemas"]["Delivery"]
        .get_mut("oneOf")
        .and_then(Value::as_array_mut);
    for kind in deliveries.into_iter().flatten() {
        kind["additionalProperties"] = json!(false);
        if let Some(timeout) = kind
            .get_mut("properties")
            .and_then(|p| p.get_mut("timeout_ms"))
        {
            constrain(timeout, &Rule::Range(1, jobs::MAX_DELIVERY_TIMEOUT_MS));
        }
    }
    // A name in a body is one character at least.
    doc["components"]["schemas"]["NameOrId"]["oneOf"][1]["minLength"] = json!(1);
}

/// Every parameter of every operation of the path item `item`. (`get_mut`, not `[]`:
/// indexing a JSON object mutably adds the key.)
fn parameters_of(item: &mut Value) -> impl Iterator<Item = &mut Value> {
    item.as_object_mut()
        .into_iter()
        .flat_map(|operations| operations.values_mut())
        .filter_map(|operation| operation.get_mut("parameters"))
        .filter_map(Value::as_array_mut)
        .flatten()
}

/// What an alarm rule's `on` allows of `job` and `threshold` (`usecase::alarms`): a
/// `backlog` rule watches one job and needs a threshold, a `lateness` rule needs one; the
/// app- and cluster-wide kinds name no job; only the kinds with a threshold take one.
fn alarm_rule_conditions(rule: &mut Value) {
    let kinds = |f: fn(On) -> bool| -> Vec<&'static str> {
        On::ALL
            .iter()
            .filter(|o| f(**o))
            .map(|o| o.as_str())
            .collect()
    };
    let no_job = kinds(|o| !o.takes_job());
    let no_threshold = kinds(|o| !o.takes_threshold());
    let need_threshold = kinds(On::needs_threshold);
    let absent = |field: &str| json!({"properties": {field: {"type": "null"}}});
    let given = |field: &str| json!({"required": [field], "properties": {field: {"not": {"type": "null"}}}});
    rule["allOf"] = json!([
        {"if": {"required": ["on"], "properties": {"on": {"enum": no_job}}}, "then": absent("job")},
        {"if": {"required": ["on"], "properties": {"on": {"enum": no_threshold}}}, "then": absent("threshold")},
        {"if": {"required": ["on"], "properties": {"on": {"enum": need_threshold}}}, "then": given("threshold")},
        {"if": {"required": ["on"], "properties": {"on": {"const": "backlog"}}}, "then": given("job")},
    ]);
}

/// Adds `rule` to the schema `target` (or to its non-null branch).
fn constrain(target: &mut Value, rule: &Rule) {
    // `Option<T>` fields are `{"type": [T, "null"]}` or `{"oneOf": [T, {"type": "null"}]}`.
    // (`get_mut`, not `[]`: indexing a JSON object mutably adds the key.)
    if let Some(branches) = target.get_mut("oneOf").and_then(Value::as_array_mut) {
        for branch in branches.iter_mut().filter(|b| b["type"] != "null") {
            constrain(branch, rule);
        }
        return;
    }
    let set = |target: &mut Value, key: &str, value: Value| {
        target[key] = value;
    };
    match rule {
        Rule::Range(min, max) => {
            set(target, "minimum", json!(min));
            set(target, "maximum", json!(max));
        }
        Rule::Text(pattern, min, max) => {
            set(target, "pattern", json!(pattern));
            set(target, "minLength", json!(min));
            set(target, "maxLength", json!(max));
        }
        Rule::OneOf(values) => {
            let nullable = target["type"]
                .as_array()
                .is_some_and(|t| t.contains(&json!("null")));
            let mut values: Vec<Value> = values.iter().map(|v| json!(v)).collect();
            if nullable {
                values.push(Value::Null);
            }
            set(target, "enum", Value::Array(values));
        }
        Rule::Items(min, max) => {
            set(target, "minItems", json!(min));
            set(target, "maxItems", json!(max));
        }
        Rule::Count => {
            if let Some(fields) = target.as_object_mut() {
                fields.remove("format");
                fields.remove("maximum");
            }
            set(target, "minimum", json!(1));
        }
        Rule::EachText(pattern, max) => {
            let items = &mut target["items"];
            items["pattern"] = json!(pattern);
            items["minLength"] = json!(1);
            items["maxLength"] = json!(max);
        }
    }
}

fn append_description(target: &mut Value, text: &str) {
    let now = target["description"].as_str().unwrap_or_default();
    target["description"] = json!(if now.is_empty() {
        text.to_owned()
    } else {
        format!("{now} {text}")
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rule_names_a_property_the_document_has() {
        // `apply` panics otherwise.
        let doc = crate::api::openapi::document_value();
        assert_eq!(
            doc["components"]["schemas"]["PullFields"]["properties"]["max"]["maximum"],
            json!(queue::MAX_PULL)
        );
        assert!(doc["components"]["schemas"]["TaskFields"]["not"].is_object());
    }
}
