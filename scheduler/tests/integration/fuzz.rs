//! Fuzzing of the inputs strangers control: schedules (cron and the rest), the JSON bodies
//! of jobs and tasks, and uploaded modules. Each target starts from the committed corpus
//! (`tests/fuzz/corpus/<target>/`), mutates it with proptest (byte flips, insertions,
//! deletions, splices, JSON-hostile tokens), and checks that nothing panics and nothing is
//! a 5xx: every input is accepted or refused with a 4xx and a message.
//!
//! `ROTA_FUZZ_CASES` sets the cases per target (256 by default; `.ci/run` runs more).
//! A failing case is shrunk and saved in `tests/regressions/fuzz.txt` by proptest: commit it,
//! and it is replayed first on every later run.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use proptest::prelude::*;
use proptest::test_runner::{Config as Runner, TestRunner};
use rota_scheduler::api::{AppState, router};
use rota_scheduler::schedule::Schedule;
use rota_scheduler::{Config, Node, Store};
use tokio::sync::watch;
use tower::ServiceExt;

const TOKEN: &str = "test-token";

/// The seeds of one target.
fn corpus(target: &str) -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fuzz/corpus")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let seeds: Vec<Vec<u8>> = files.iter().map(|f| std::fs::read(f).unwrap()).collect();
    assert!(!seeds.is_empty(), "no seeds in {}", dir.display());
    seeds
}

fn cases() -> u32 {
    std::env::var("ROTA_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256)
}

/// Tokens that tend to break parsers and validators.
const TOKENS: &[&[u8]] = &[
    b"\"",
    b"\\",
    b"{",
    b"}",
    b"[",
    b"]",
    b",",
    b":",
    b"null",
    b"true",
    b"-1",
    b"0",
    b"1e309",
    b"9223372036854775808",
    b"-9223372036854775809",
    b"18446744073709551616",
    b"\\u0000",
    b"\\ud800",
    b"\xff\xfe",
    b"\xe2\x80\xae",
    b"'; DROP TABLE jobs; --",
    b"../../",
    b"%00",
    b"*",
    b"?",
    b"L",
    b"W",
    b"#",
    b"/",
    b"-",
    b"MON-FRI",
    b"2099",
    b"999999999",
];

/// One edit of an input.
#[derive(Debug, Clone)]
enum Edit {
    Flip { at: usize, bit: u8 },
    Insert { at: usize, byte: u8 },
    Token { at: usize, token: usize },
    Delete { at: usize, len: usize },
    Duplicate { at: usize, len: usize },
    Splice { at: usize, seed: usize, from: usize },
}

fn edit() -> impl Strategy<Value = Edit> {
    let at = any::<usize>();
    prop_oneof![
        (at, 0u8..8).prop_map(|(at, bit)| Edit::Flip { at, bit }),
        (at, any::<u8>()).prop_map(|(at, byte)| Edit::Insert { at, byte }),
        (at, 0..TOKENS.len()).prop_map(|(at, token)| Edit::Token { at, token }),
        (at, 1usize..16).prop_map(|(at, len)| Edit::Delete { at, len }),
        (at, 1usize..64).prop_map(|(at, len)| Edit::Duplicate { at, len }),
        (at, any::<usize>(), any::<usize>()).prop_map(|(at, seed, from)| Edit::Splice {
            at,
            seed,
            from
        }),
    ]
}

/// A seed and the edits applied to it, in order.
fn mutated(seeds: Vec<Vec<u8>>) -> impl Strategy<Value = Vec<u8>> {
    let n = seeds.len();
    (0..n, prop::collection::vec(edit(), 0..6)).prop_map(move |(i, edits)| {
        let mut input = seeds[i].clone();
        for e in edits {
            apply(&mut input, &e, &seeds);
        }
        input
    })
}

fn apply(input: &mut Vec<u8>, edit: &Edit, seeds: &[Vec<u8>]) {
    let pos = |at: usize, len: usize| if len == 0 { 0 } else { at % (len + 1) };
    match *edit {
        Edit::Flip { at, bit } if !input.is_empty() => {
            let i = at % input.len();
            input[i] ^= 1 << bit;
        }
        Edit::Flip { .. } => {}
        Edit::Insert { at, byte } => input.insert(pos(at, input.len()), byte),
        Edit::Token { at, token } => {
            let i = pos(at, input.len());
            input.splice(i..i, TOKENS[token].iter().copied());
        }
        Edit::Delete { at, len } => {
            let i = pos(at, input.len());
            let end = (i + len).min(input.len());
            input.drain(i..end);
        }
        Edit::Duplicate { at, len } => {
            let i = pos(at, input.len());
            let end = (i + len).min(input.len());
            let chunk = input[i..end].to_vec();
            input.splice(end..end, chunk);
        }
        Edit::Splice { at, seed, from } => {
            let other = &seeds[seed % seeds.len()];
            let from = pos(from, other.len());
            let i = pos(at, input.len());
            input.truncate(i);
            input.extend_from_slice(&other[from..]);
        }
    }
}

fn run(target: &str, strategy: impl Strategy<Value = Vec<u8>>, check: impl Fn(&[u8])) {
    let mut config = Runner::with_cases(cases());
    config.failure_persistence = Some(Box::new(
        proptest::test_runner::FileFailurePersistence::WithSource("regressions"),
    ));
    config.source_file = Some(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/integration/fuzz.rs"
    ));
    let mut runner = TestRunner::new(config);
    runner
        .run(&strategy, |input| {
            check(&input);
            Ok(())
        })
        .unwrap_or_else(|e| panic!("fuzz target `{target}`: {e}"));
}

/// Cron and the other schedules: compiling never panics; a compiled schedule's next fire
/// time is after the time asked about, and previews are strictly increasing.
#[test]
fn fuzz_schedules() {
    let now = 1_767_225_600_000; // 2026-01-01T00:00:00Z
    let zones = [
        None,
        Some("UTC"),
        Some("Asia/Shanghai"),
        Some("America/New_York"),
        Some("Mars/Olympus"),
    ];
    for seed in corpus("schedule") {
        let expr = String::from_utf8(seed).unwrap();
        let schedule = Schedule::Cron {
            expr: expr.clone(),
            time_zone: None,
        };
        assert!(
            schedule.compile_at(now).is_ok(),
            "seed `{expr}` must compile"
        );
    }
    let strategy = (mutated(corpus("schedule")), 0..zones.len(), any::<i64>());
    let strategy = strategy.prop_map(move |(bytes, zone, every)| {
        // Both parts of the case travel as one byte string: zone index, rate, expression.
        let mut case = vec![zone as u8];
        case.extend_from_slice(&every.to_le_bytes());
        case.extend_from_slice(&bytes);
        case
    });
    run("schedule", strategy, |case| {
        let zone = zones[case[0] as usize];
        let every = i64::from_le_bytes(case[1..9].try_into().unwrap());
        let expr = String::from_utf8_lossy(&case[9..]).into_owned();
        let schedules = [
            Schedule::Cron {
                expr,
                time_zone: zone.map(str::to_owned),
            },
            Schedule::FixedRate { every_ms: every },
        ];
        for schedule in schedules {
            let Ok(compiled) = schedule.compile_at(now) else {
                continue;
            };
            if let Some(next) = compiled.next_after(now) {
                assert!(next > now, "{schedule:?}: next {next} is not after {now}");
            }
            let preview = compiled.preview(now, 5);
            assert!(
                preview.windows(2).all(|w| w[0] < w[1]),
                "{schedule:?}: {preview:?}"
            );
        }
    });
}

/// A node on a fresh SQLite store, shared by the HTTP targets, and the runtime it runs on.
struct Target {
    rt: tokio::runtime::Runtime,
    app: Router,
    _node: Node,
    _stop: watch::Sender<bool>,
    _dir: tempfile::TempDir,
}

fn target() -> &'static Target {
    static TARGET: OnceLock<Target> = OnceLock::new();
    TARGET.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("rota.db").display());
        let (node, stop) = rt.block_on(async {
            let mut config = Config::for_tests(url.clone());
            config.dispatch_timeout_ms = 100;
            let store = Store::connect(&url).await.unwrap();
            let (stop, stop_rx) = watch::channel(false);
            (Node::start(config, store, stop_rx).await.unwrap(), stop)
        });
        let app = router(AppState { ports: node.ports().clone() });
        let t = Target { rt, app, _node: node, _stop: stop, _dir: dir };
        // What the job and task seeds refer to.
        let module = std::fs::read(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz/corpus/wasm/01.wat"),
        )
        .unwrap();
        assert_eq!(t.send(Method::POST, "/api/v1/plugins?name=echo", "application/wasm", module).0, StatusCode::CREATED);
        let base = br#"{"name": "base", "app": "default", "plugin": "echo", "schedule": {"kind": "none"}}"#;
        assert_eq!(t.send(Method::POST, "/api/v1/jobs", "application/json", base.to_vec()).0, StatusCode::CREATED);
        t
    })
}

impl Target {
    fn send(
        &self,
        method: Method,
        path: &str,
        content_type: &str,
        body: Vec<u8>,
    ) -> (StatusCode, Vec<u8>) {
        let req = Request::builder()
            .method(method)
            .uri(path)
            .header(header::AUTHORIZATION, format!("Bearer {TOKEN}"))
            .header(header::CONTENT_TYPE, content_type)
            .body(Body::from(body))
            .unwrap();
        self.rt.block_on(async {
            let res = self.app.clone().oneshot(req).await.unwrap();
            let status = res.status();
            let body = axum::body::to_bytes(res.into_body(), usize::MAX)
                .await
                .unwrap();
            (status, body.to_vec())
        })
    }

    /// Sends `input` and checks the answer: a success, or a 4xx with an error message.
    fn check(&self, path: &str, content_type: &str, input: &[u8]) {
        let (status, body) = self.send(Method::POST, path, content_type, input.to_vec());
        let shown = String::from_utf8_lossy(&input[..input.len().min(300)]).into_owned();
        let answer = String::from_utf8_lossy(&body).into_owned();
        assert!(
            status.is_success() || status.is_client_error(),
            "POST {path} answered {status} to `{shown}`: {answer}"
        );
        if status.is_client_error() {
            let error: serde_json::Value = serde_json::from_slice(&body)
                .unwrap_or_else(|e| panic!("POST {path}: not JSON ({e}): {answer}"));
            let message = error["error"].as_str().unwrap_or_default();
            assert!(
                !message.is_empty(),
                "POST {path}: no message for `{shown}`: {answer}"
            );
        }
    }
}

/// The JSON of a new job, decoded and validated through the API.
#[test]
fn fuzz_job_json() {
    let t = target();
    for seed in corpus("job") {
        let (status, body) = t.send(Method::POST, "/api/v1/jobs", "application/json", seed);
        assert!(
            status.is_success(),
            "a job seed was refused: {}",
            String::from_utf8_lossy(&body)
        );
    }
    run("job", mutated(corpus("job")), |input| {
        t.check("/api/v1/jobs", "application/json", input)
    });
}

/// The JSON of a new task, one and in batches, decoded and validated through the API.
#[test]
fn fuzz_task_json() {
    let t = target();
    for seed in corpus("task") {
        let (status, body) = t.send(Method::POST, "/api/v1/tasks", "application/json", seed);
        assert!(
            status.is_success(),
            "a task seed was refused: {}",
            String::from_utf8_lossy(&body)
        );
    }
    let seeds = corpus("task");
    let batch: Vec<u8> = [b"{\"tasks\": [".as_slice(), &seeds.join(&b","[..]), b"]}"].concat();
    let mut with_batch = seeds.clone();
    with_batch.push(batch);
    run("task", mutated(with_batch), |input| {
        let path = if input.starts_with(b"{\"tasks\"") {
            "/api/v1/tasks/batch"
        } else {
            "/api/v1/tasks"
        };
        t.check(path, "application/json", input)
    });
}

/// Uploaded modules: text and binary, validated by wasmtime and Rota's import rules.
#[test]
fn fuzz_upload_validation() {
    let t = target();
    let seeds: Vec<Vec<u8>> = corpus("wasm")
        .into_iter()
        .map(|text| wat::parse_bytes(&text).unwrap().into_owned())
        .collect();
    for (i, seed) in seeds.iter().enumerate() {
        let (status, body) = t.send(
            Method::POST,
            &format!("/api/v1/plugins?name=seed{i}"),
            "application/wasm",
            seed.clone(),
        );
        assert!(
            status.is_success(),
            "wasm seed {i} was refused: {}",
            String::from_utf8_lossy(&body)
        );
    }
    run("wasm", mutated(seeds), |input| {
        t.check("/api/v1/plugins?name=fuzzed", "application/wasm", input)
    });
}
