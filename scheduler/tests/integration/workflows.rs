//! `/api/v1/workflows` and `/api/v1/workflow-instances` through the router (SPEC §10):
//! every invalid graph refused naming its problem, an instance started with its first
//! steps' tasks carrying the input, an idempotent start, reading, listing, cancelling,
//! a new version, deleting — and each change in the audit log.

use crate::support;

use axum::http::{Method, StatusCode};
use serde_json::{Value, json};
use support::{Answer, TestApp};

const START: &str = r#"(module (func (export "_start")))"#;

/// This module's calls on the shared [`TestApp`].
trait WorkflowCalls {
    async fn get(&self, path: &str) -> Answer;
    async fn post(&self, path: &str, body: Value) -> Answer;
    async fn patch(&self, path: &str, body: Value) -> Answer;
    async fn delete(&self, path: &str) -> Answer;
    async fn jobs(&self, app: &str, names: &[&str]);
}

impl WorkflowCalls for TestApp {
    async fn get(&self, path: &str) -> Answer {
        self.token_call(Method::GET, path, None).await
    }

    async fn post(&self, path: &str, body: Value) -> Answer {
        self.token_call(Method::POST, path, Some(body)).await
    }

    async fn patch(&self, path: &str, body: Value) -> Answer {
        self.token_call(Method::PATCH, path, Some(body)).await
    }

    async fn delete(&self, path: &str) -> Answer {
        self.token_call(Method::DELETE, path, None).await
    }

    /// Uploads a plugin and creates a job per name in `app`.
    async fn jobs(&self, app: &str, names: &[&str]) {
        let upload = self
            .reply(
                axum::http::Request::post("/api/v1/plugins?name=noop")
                    .header("authorization", format!("Bearer {}", support::TOKEN))
                    .header("content-type", "application/wasm")
                    .body(axum::body::Body::from(START))
                    .unwrap(),
            )
            .await;
        assert!(upload.status.is_success(), "{}", upload.text);
        for name in names {
            self.post(
                "/api/v1/jobs",
                json!({"name": name, "app": app, "plugin": "noop", "schedule": {"kind": "none"}}),
            )
            .await
            .expect(StatusCode::CREATED);
        }
    }
}

fn diamond(name: &str) -> Value {
    json!({
        "name": name,
        "app": "default",
        "steps": [
            {"name": "fetch", "job": "fetch"},
            {"name": "a", "job": "a", "after": ["fetch"]},
            {"name": "b", "job": "b", "after": ["fetch"]},
            {"name": "join", "job": "join", "after": ["a", "b"], "when": "all_done"},
        ]
    })
}

#[tokio::test]
async fn every_invalid_workflow_is_refused_naming_the_problem() {
    let t = TestApp::start_with(|_| {}).await;
    t.jobs("default", &["x", "y"]).await;
    t.jobs("billing", &["other-app"]).await;
    let step = |name: &str, after: &[&str]| json!({"name": name, "job": "x", "after": after});
    let invalid = StatusCode::UNPROCESSABLE_ENTITY;
    let cases: Vec<(Value, StatusCode, &str)> = vec![
        (
            json!([step("a", &["c"]), step("b", &["a"]), step("c", &["b"])]),
            invalid,
            "a cycle: a → c → b → a",
        ),
        (
            json!([step("a", &["nope"])]),
            invalid,
            "unknown step \"nope\"",
        ),
        (
            json!([step("a", &[]), step("a", &[])]),
            invalid,
            "duplicate step \"a\"",
        ),
        (
            json!([step("a", &[]), step("b", &[]), {"name": "m", "job": "y", "after": ["a", "b"], "map": true}]),
            invalid,
            "`map` needs exactly one predecessor",
        ),
        (
            json!([step("a", &[]), {"name": "b", "job": "x", "after": ["a"], "when": "sometimes"}]),
            invalid,
            "`sometimes` is not a valid `when`",
        ),
        (
            json!([{"name": "a", "job": "x", "when": "any_failed"}]),
            invalid,
            "`when` (any_failed) needs predecessors",
        ),
        (
            json!([{"name": "a", "job": "other-app"}]),
            invalid,
            "steps[0].job: job `other-app` is in app `billing`, not in the workflow's app `default`",
        ),
        (
            json!(
                (0..101)
                    .map(|i| json!({"name": format!("s{i}"), "job": "x"}))
                    .collect::<Vec<_>>()
            ),
            invalid,
            "101 steps, at most 100",
        ),
        (json!([]), invalid, "at least one step"),
        (
            json!([{"name": "a", "job": "missing"}]),
            StatusCode::NOT_FOUND,
            "steps[0].job: job `missing` does not exist",
        ),
        (
            json!([{"name": "a", "job": "x", "colour": "red"}]),
            StatusCode::BAD_REQUEST,
            "colour",
        ),
    ];
    for (steps, status, needle) in cases {
        t.post(
            "/api/v1/workflows",
            json!({"name": "w", "app": "default", "steps": steps}),
        )
        .await
        .expect_error(status, needle);
    }
    assert_eq!(
        t.get("/api/v1/workflows").await.json()["items"],
        json!([]),
        "nothing was stored"
    );
    t.stop().await;
}

#[tokio::test]
async fn an_instance_starts_its_first_step_with_the_input_and_is_read_listed_and_cancelled() {
    let t = TestApp::start_with(|_| {}).await;
    t.jobs("default", &["fetch", "a", "b", "join"]).await;
    let created = t.post("/api/v1/workflows", diamond("orders")).await;
    created.expect(StatusCode::CREATED);
    let wf = created.json();
    assert_eq!(wf["version"], 1);
    assert_eq!(wf["steps"][0]["when"], "all_succeeded");
    assert_eq!(wf["steps"][3]["when"], "all_done");
    t.post("/api/v1/workflows", diamond("orders"))
        .await
        .expect_error(StatusCode::CONFLICT, "workflow `orders` already exists");
    assert_eq!(
        t.get("/api/v1/workflows/orders").await.json()["id"],
        wf["id"]
    );

    let started = t
        .post(
            "/api/v1/workflows/orders/instances",
            json!({"input": {"order": 42}, "key": "order-42"}),
        )
        .await;
    started.expect(StatusCode::CREATED);
    let inst = started.json();
    assert_eq!(inst["status"], "running");
    assert_eq!(inst["steps"][0]["status"], "running");
    assert_eq!(inst["steps"][1]["status"], "pending");
    let task_id = inst["steps"][0]["task"].as_i64().unwrap();
    let task = t.get(&format!("/api/v1/tasks/{task_id}")).await.json();
    assert_eq!(task["kind"], "step");
    let payload: Value = serde_json::from_str(task["payload"].as_str().unwrap()).unwrap();
    assert_eq!(payload, json!({"input": {"order": 42}, "steps": {}}));

    // The same key: the same instance, 200, and no second task.
    let again = t
        .post(
            "/api/v1/workflows/orders/instances",
            json!({"input": {"order": 43}, "key": "order-42"}),
        )
        .await;
    again.expect(StatusCode::OK);
    assert_eq!(again.json()["id"], inst["id"]);
    let id = inst["id"].as_i64().unwrap();
    let page = t
        .get("/api/v1/workflow-instances?workflow=orders")
        .await
        .json();
    assert_eq!(page["items"].as_array().unwrap().len(), 1);
    t.get("/api/v1/workflow-instances?status=sideways")
        .await
        .expect_error(StatusCode::BAD_REQUEST, "status");

    // A step's job stays while the workflow names it.
    t.delete("/api/v1/jobs/a?force=true").await.expect_error(
        StatusCode::CONFLICT,
        "job `a` is a step of workflow `orders`",
    );
    // Deleting it while the instance runs needs force.
    t.delete("/api/v1/workflows/orders")
        .await
        .expect_error(StatusCode::CONFLICT, "1 running instances");

    let cancelled = t
        .post(
            &format!("/api/v1/workflow-instances/{id}/cancel"),
            json!({}),
        )
        .await;
    cancelled.expect(StatusCode::OK);
    let cancelled = cancelled.json();
    assert_eq!(cancelled["status"], "cancelled");
    assert!(
        cancelled["steps"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["status"] == "cancelled"),
        "{cancelled}"
    );
    assert!(cancelled["finished_at"].is_string());
    assert_eq!(
        t.get(&format!("/api/v1/tasks/{task_id}")).await.json()["status"],
        "cancelled"
    );
    t.post(
        &format!("/api/v1/workflow-instances/{id}/cancel"),
        json!({}),
    )
    .await
    .expect_error(
        StatusCode::CONFLICT,
        "only a running instance can be cancelled",
    );
    t.get("/api/v1/workflow-instances/999999")
        .await
        .expect_error(StatusCode::NOT_FOUND, "workflow instance 999999");

    // A new version; then the workflow goes.
    let v2 = t
        .patch(
            "/api/v1/workflows/orders",
            json!({"steps": [{"name": "fetch", "job": "fetch"}]}),
        )
        .await;
    v2.expect(StatusCode::OK);
    assert_eq!(v2.json()["version"], 2);
    assert_eq!(
        t.get(&format!("/api/v1/workflow-instances/{id}"))
            .await
            .json()["version"],
        1,
        "the instance keeps its version"
    );
    // This node last started version 1: its next start finds the change and runs version 2.
    let start = |input: i64| {
        t.post(
            "/api/v1/workflows/orders/instances",
            json!({"input": input}),
        )
    };
    let v2_start = start(1).await;
    v2_start.expect(StatusCode::CREATED);
    let v2_inst = v2_start.json();
    assert_eq!(v2_inst["version"], 2, "{v2_inst}");
    assert_eq!(v2_inst["steps"].as_array().unwrap().len(), 1);
    t.post(
        &format!("/api/v1/workflow-instances/{}/cancel", v2_inst["id"]),
        json!({}),
    )
    .await
    .expect(StatusCode::OK);
    // Disabled, then deleted, after this node last started it: refused, each saying why.
    t.patch("/api/v1/workflows/orders", json!({"enabled": false}))
        .await
        .expect(StatusCode::OK);
    start(2)
        .await
        .expect_error(StatusCode::CONFLICT, "workflow `orders` is disabled");
    t.patch("/api/v1/workflows/orders", json!({"enabled": true}))
        .await
        .expect(StatusCode::OK);
    start(3).await.expect(StatusCode::CREATED);
    t.delete("/api/v1/workflows/orders?force=true")
        .await
        .expect(StatusCode::NO_CONTENT);
    t.get("/api/v1/workflows/orders")
        .await
        .expect_error(StatusCode::NOT_FOUND, "workflow `orders` not found");
    start(4)
        .await
        .expect_error(StatusCode::NOT_FOUND, "workflow `orders` not found");
    t.delete("/api/v1/jobs/a?force=true")
        .await
        .expect(StatusCode::NO_CONTENT);

    let audit = t.get("/api/v1/audit").await.json();
    let actions: Vec<&str> = audit["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["action"].as_str())
        .collect();
    for action in [
        "create workflow",
        "start workflow",
        "cancel workflow instance",
        "update workflow",
        "delete workflow",
    ] {
        assert!(actions.contains(&action), "{action} not in {actions:?}");
    }
    t.stop().await;
}

#[tokio::test]
async fn a_disabled_workflow_starts_nothing_and_an_oversized_input_is_refused() {
    let t = TestApp::start_with(|c| c.max_payload_bytes = 1_000).await;
    t.jobs("default", &["only"]).await;
    t.post(
        "/api/v1/workflows",
        json!({"name": "off", "app": "default", "enabled": false, "steps": [{"name": "s", "job": "only"}]}),
    )
    .await
    .expect(StatusCode::CREATED);
    t.post("/api/v1/workflows/off/instances", json!({}))
        .await
        .expect_error(StatusCode::CONFLICT, "workflow `off` is disabled");
    t.patch("/api/v1/workflows/off", json!({"enabled": true}))
        .await
        .expect(StatusCode::OK);
    t.post(
        "/api/v1/workflows/off/instances",
        json!({"input": "x".repeat(2_000)}),
    )
    .await
    .expect_error(StatusCode::PAYLOAD_TOO_LARGE, "input");
    t.post("/api/v1/workflows/off/instances", json!({}))
        .await
        .expect(StatusCode::CREATED);
    t.stop().await;
}

/// Pulls `job`'s one due step task, waiting for it: its task id, lease and payload.
async fn pull_one(t: &TestApp, job: &str) -> (i64, Value, Value) {
    let pulled = t
        .post(
            &format!("/api/v1/jobs/{job}/pull"),
            json!({"max": 1, "wait_ms": 10_000, "lease_ms": 60_000}),
        )
        .await
        .json();
    let item = pulled["items"][0].clone();
    assert!(item.is_object(), "a task of `{job}` is due: {pulled}");
    let payload: Value = serde_json::from_str(item["payload"].as_str().unwrap()).unwrap();
    (
        item["task"].as_i64().unwrap(),
        item["lease"].clone(),
        payload,
    )
}

/// Instance `id` once its status is not `running` (within 20 s).
async fn ended(t: &TestApp, id: i64) -> Value {
    for _ in 0..400 {
        let inst = t
            .get(&format!("/api/v1/workflow-instances/{id}"))
            .await
            .json();
        if inst["status"] != "running" {
            return inst;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("instance {id} still running after 20 s");
}

/// Steps delivered to pull consumers and to an http receiver pass their outputs along (an
/// ack's `output`, JSON kept as JSON; the receiver's 2xx body); a step nacked to death
/// fails the instance, skipping what needed it; a retry runs it again and the instance
/// finishes with the sink's output. A nack with an output is refused, naming it.
#[tokio::test]
async fn pull_and_http_steps_pass_their_outputs_and_a_failed_instance_is_retried() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let receiver = axum::Router::new().route(
        "/ship",
        axum::routing::post(|body: String| async move {
            let payload: Value = serde_json::from_str(&body).unwrap();
            let order = &payload["steps"]["pack"]["order"];
            axum::Json(json!({"tracking": format!("T-{order}")}))
        }),
    );
    tokio::spawn(async move { axum::serve(listener, receiver).await.unwrap() });
    let url = format!("http://{addr}/ship");
    let t = TestApp::start_with(|c| {
        c.egress = rota_net::egress::Policy::new(&[addr.to_string()], &[]).unwrap();
    })
    .await;
    t.post(
        "/api/v1/jobs",
        json!({"name": "pack", "app": "default", "schedule": {"kind": "none"},
               "delivery": {"kind": "pull"}, "max_attempts": 1}),
    )
    .await
    .expect(StatusCode::CREATED);
    t.post(
        "/api/v1/jobs",
        json!({"name": "ship", "app": "default", "schedule": {"kind": "none"},
               "http_allow": [url], "delivery": {"kind": "http", "url": url}}),
    )
    .await
    .expect(StatusCode::CREATED);
    t.post(
        "/api/v1/workflows",
        json!({"name": "order", "app": "default", "steps": [
            {"name": "pack", "job": "pack"},
            {"name": "ship", "job": "ship", "after": ["pack"]},
        ]}),
    )
    .await
    .expect(StatusCode::CREATED);
    let start = |n: i64| {
        t.post(
            "/api/v1/workflows/order/instances",
            json!({"input": {"n": n}}),
        )
    };
    let first = start(1).await.json()["id"].as_i64().unwrap();

    let (task, lease, payload) = pull_one(&t, "pack").await;
    assert_eq!(payload, json!({"input": {"n": 1}, "steps": {}}));
    t.post(
        &format!("/api/v1/tasks/{task}/nack"),
        json!({"lease": lease, "output": 1}),
    )
    .await
    .expect_error(StatusCode::BAD_REQUEST, "unknown field `output`");
    t.post(
        &format!("/api/v1/tasks/{task}/ack"),
        json!({"lease": lease, "output": {"order": 42, "items": ["a", "b"]}}),
    )
    .await
    .expect(StatusCode::OK);
    let done = ended(&t, first).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    assert_eq!(
        done["steps"][0]["output"],
        json!({"order": 42, "items": ["a", "b"]}),
        "an ack's output, kept as JSON"
    );
    assert_eq!(done["steps"][1]["output"], json!({"tracking": "T-42"}));
    assert_eq!(done["output"], json!({"ship": {"tracking": "T-42"}}));

    // Nacked to death: the instance fails, `ship` is skipped; retried, it succeeds.
    let second = start(2).await.json()["id"].as_i64().unwrap();
    let (task, lease, _) = pull_one(&t, "pack").await;
    t.post(
        &format!("/api/v1/tasks/{task}/nack"),
        json!({"lease": lease, "error": "out of boxes"}),
    )
    .await
    .expect(StatusCode::OK);
    let failed = ended(&t, second).await;
    assert_eq!(failed["status"], "failed", "{failed}");
    assert_eq!(failed["steps"][1]["status"], "skipped");
    t.post(
        &format!("/api/v1/workflow-instances/{first}/retry"),
        json!({}),
    )
    .await
    .expect_error(
        StatusCode::CONFLICT,
        "only a failed instance can be retried",
    );
    let retried = t
        .post(
            &format!("/api/v1/workflow-instances/{second}/retry"),
            json!({}),
        )
        .await;
    retried.expect(StatusCode::OK);
    let retried = retried.json();
    assert_eq!(retried["status"], "running");
    assert_eq!(retried["steps"][0]["status"], "running");
    assert_eq!(retried["steps"][1]["status"], "pending");
    let (task, lease, payload) = pull_one(&t, "pack").await;
    assert_eq!(payload["input"], json!({"n": 2}));
    t.post(
        &format!("/api/v1/tasks/{task}/ack"),
        json!({"lease": lease, "output": {"order": 43}}),
    )
    .await
    .expect(StatusCode::OK);
    let done = ended(&t, second).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    assert_eq!(done["output"], json!({"ship": {"tracking": "T-43"}}));
    assert_eq!(
        done["steps"][0]["runs"].as_array().unwrap().len(),
        2,
        "the nacked attempt's run and the retry's"
    );
    let audit = t.get("/api/v1/audit").await.json();
    assert!(
        audit["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["action"] == "retry workflow instance"
                && e["target"].as_str() == Some(second.to_string().as_str())),
        "{audit}"
    );
    t.stop().await;
}

/// A workflow with a schedule starts instances on its own, each with its fire time as
/// input and key; a bad schedule, misfire or overlap is refused naming it; removing the
/// schedule clears the next fire time (that a workflow without one never fires is the
/// store contract's).
#[tokio::test]
async fn a_scheduled_workflow_starts_instances_on_its_own_until_its_schedule_goes() {
    let t = TestApp::start_with(|_| {}).await;
    t.post(
        "/api/v1/jobs",
        json!({"name": "tick", "app": "default", "schedule": {"kind": "none"},
               "delivery": {"kind": "pull"}}),
    )
    .await
    .expect(StatusCode::CREATED);
    let body = |extra: Value| {
        let mut b = json!({"name": "ticker", "app": "default",
                           "steps": [{"name": "tick", "job": "tick"}]});
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        b
    };
    for (extra, field) in [
        (
            json!({"schedule": {"kind": "fixed_rate", "every_ms": 0}}),
            "schedule",
        ),
        (
            json!({"schedule": {"kind": "cron", "expr": "nope"}}),
            "schedule",
        ),
        (json!({"overlap": "sometimes"}), "overlap"),
        (json!({"misfire": "later"}), "misfire"),
    ] {
        t.post("/api/v1/workflows", body(extra))
            .await
            .expect_error(StatusCode::UNPROCESSABLE_ENTITY, field);
    }
    let created = t
        .post(
            "/api/v1/workflows",
            body(json!({"schedule": {"kind": "fixed_rate", "every_ms": 200}, "overlap": "allow"})),
        )
        .await;
    created.expect(StatusCode::CREATED);
    let wf = created.json();
    assert_eq!(
        wf["schedule"],
        json!({"kind": "fixed_rate", "every_ms": 200})
    );
    assert_eq!(wf["overlap"], "allow");
    assert_eq!(wf["misfire"], "do_nothing");
    assert!(wf["next_fire_at"].is_string(), "{wf}");

    let mut seen = Value::Null;
    for _ in 0..200 {
        seen = t
            .get("/api/v1/workflow-instances?workflow=ticker")
            .await
            .json();
        if seen["items"].as_array().unwrap().len() >= 2 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let items = seen["items"].as_array().unwrap();
    assert!(items.len() >= 2, "two fires in 10 s: {seen}");
    for i in items {
        let at = i["input"]["scheduled_at"].as_str().unwrap();
        let ms = chrono::DateTime::parse_from_rfc3339(at)
            .unwrap()
            .timestamp_millis();
        assert_eq!(i["key"], format!("fire:{ms}"), "{i}");
    }

    let off = t
        .patch(
            "/api/v1/workflows/ticker",
            json!({"schedule": {"kind": "none"}}),
        )
        .await;
    off.expect(StatusCode::OK);
    assert_eq!(off.json()["schedule"], Value::Null);
    assert_eq!(off.json()["next_fire_at"], Value::Null);
    t.stop().await;
}
