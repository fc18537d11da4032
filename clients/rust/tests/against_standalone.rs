//! The client against a real `rota standalone` (the workspace's binary, started here on
//! port 0 with a data directory of its own): producing, pulling, acking, nacking, lease
//! loss, re-drive, and the consumer loop.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rota_client::{Client, NewTask, Pull};

const TOKEN: &str = "client-test-token";

/// A `rota standalone` killed when dropped.
struct Node {
    child: Child,
    url: String,
    _dir: tempfile::TempDir,
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The binary: `ROTA_BIN`, else the workspace's debug build (`cargo test --workspace`
/// builds it before running any test). `None`, a skip (a failure under CI), without one.
fn binary() -> Option<std::path::PathBuf> {
    let path = std::env::var_os("ROTA_BIN")
        .map(Into::into)
        .unwrap_or_else(|| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/debug/rota")
        });
    if path.exists() {
        Some(path)
    } else {
        rota_testkit::missing(&format!(
            "no rota binary at {} (build it with `cargo build -p rota`, or set ROTA_BIN)",
            path.display()
        ));
        None
    }
}

/// A node with a pull job `orders` of at most `max_attempts` attempts.
async fn node(max_attempts: u32) -> Option<(Node, Client)> {
    let bin = binary()?;
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(bin)
        .args(["standalone", "--data-dir"])
        .arg(dir.path())
        .args(["--listen", "127.0.0.1:0"])
        .env("ROTA_API_TOKEN", TOKEN)
        .env("ROTA_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting rota standalone");
    let mut first = String::new();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    out.read_line(&mut first).unwrap();
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    let url = first
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no URL in `{first}`"))
        .trim_end_matches(',')
        .to_owned();
    let node = Node {
        child,
        url,
        _dir: dir,
    };
    let client = Client::new(&node.url, TOKEN).unwrap();
    let job = serde_json::json!({
        "name": "orders", "app": "shop", "schedule": {"kind": "none"},
        "delivery": {"kind": "pull"}, "max_attempts": max_attempts,
        "backoff": {"kind": "fixed", "delay_ms": 300},
    });
    let created = reqwest::Client::new()
        .post(format!("{}/api/v1/jobs", node.url))
        .bearer_auth(TOKEN)
        .json(&job)
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201, "{:?}", created.text().await);
    Some((node, client))
}

#[tokio::test]
async fn a_producer_creates_tasks_once_per_key_and_a_consumer_acks_them() {
    let Some((_node, rota)) = node(3).await else {
        return;
    };
    let task = NewTask::new("orders")
        .key("order-42")
        .payload(r#"{"order_id":42}"#)
        .priority(5);
    let (first, created) = rota.create_task(&task).await.unwrap();
    assert!(created);
    let (again, created) = rota.create_task(&task).await.unwrap();
    assert!(!created, "the key's task is the first one");
    assert_eq!(again.id, first.id);
    let ids = rota
        .create_tasks(&[
            NewTask::new("orders"),
            NewTask::new("orders").delay_ms(3_600_000),
        ])
        .await
        .unwrap();
    assert_eq!(ids.len(), 2);

    let pulled = rota
        .pull(
            "orders",
            &Pull::default().max(10).wait_ms(10_000).consumer("t1"),
        )
        .await
        .unwrap();
    let mut got: Vec<i64> = pulled.iter().map(|p| p.task).collect();
    // The delayed one is not due; the priority-5 one comes first.
    while got.len() < 2 {
        let more = rota
            .pull("orders", &Pull::default().max(10).wait_ms(5_000))
            .await
            .unwrap();
        assert!(!more.is_empty(), "a due task never came: have {got:?}");
        got.extend(more.iter().map(|p| p.task));
    }
    assert_eq!(got.len(), 2);
    assert!(got.contains(&first.id) && got.contains(&ids[0]));
    let p = pulled.iter().find(|p| p.task == first.id).unwrap();
    assert_eq!(p.payload.as_deref(), Some(r#"{"order_id":42}"#));
    assert_eq!(p.key.as_deref(), Some("order-42"));
    let done = rota.ack(p.task, &p.lease).await.unwrap();
    assert_eq!(done.status, "succeeded");
    let stale = rota.ack(p.task, &p.lease).await.unwrap_err();
    assert!(stale.is_lease_lost(), "{stale}");

    let cancelled = rota.cancel_task(ids[1]).await.unwrap();
    assert_eq!(cancelled.status, "cancelled");
    let bad = rota
        .pull("orders", &Pull::default().max(0))
        .await
        .unwrap_err();
    assert_eq!(bad.status().map(|s| s.as_u16()), Some(422));
    assert!(bad.to_string().contains("max"), "{bad}");
}

#[tokio::test]
async fn a_nack_retries_and_the_last_one_kills_and_a_retry_revives() {
    let Some((_node, rota)) = node(2).await else {
        return;
    };
    let (task, _) = rota.create_task(&NewTask::new("orders")).await.unwrap();
    let p = rota
        .pull("orders", &Pull::default().wait_ms(10_000))
        .await
        .unwrap()
        .pop()
        .expect("the due task");
    let until = rota.extend(p.task, &p.lease, 120_000).await.unwrap();
    assert!(
        until > p.lease_expires_at,
        "{until} vs {}",
        p.lease_expires_at
    );
    let t = rota
        .nack(p.task, &p.lease, Some("warehouse closed"), Some(0))
        .await
        .unwrap();
    assert_eq!(t.status, "failed");
    let p = rota
        .pull("orders", &Pull::default().wait_ms(10_000))
        .await
        .unwrap()
        .pop()
        .expect("the retry");
    assert_eq!((p.task, p.attempt), (task.id, 2));
    let t = rota.nack(p.task, &p.lease, None, None).await.unwrap();
    assert_eq!(t.status, "dead");
    let t = rota.retry_task(task.id).await.unwrap();
    assert_eq!(t.status, "failed", "due again after a failure: {t:?}");
    let p = rota
        .pull("orders", &Pull::default().wait_ms(10_000))
        .await
        .unwrap()
        .pop()
        .expect("the re-driven task");
    let results = rota
        .ack_batch("orders", &[(p.task, &p.lease), (p.task, "1.0")])
        .await
        .unwrap();
    let statuses: Vec<&str> = results.iter().map(|r| r.status.as_str()).collect();
    assert_eq!(statuses, ["acked", "stale"]);
    assert_eq!(rota.get_task(task.id).await.unwrap().status, "succeeded");
}

#[tokio::test]
async fn the_consumer_loop_acks_what_works_and_nacks_what_fails() {
    let Some((_node, rota)) = node(2).await else {
        return;
    };
    let ids = rota
        .create_tasks(&[
            NewTask::new("orders").payload("ok"),
            NewTask::new("orders").payload("fail once"),
            NewTask::new("orders").payload("ok"),
        ])
        .await
        .unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let failed_once = Arc::new(AtomicUsize::new(0));
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let consumer = {
        let rota = rota.clone();
        let (calls, failed_once) = (calls.clone(), failed_once.clone());
        tokio::spawn(async move {
            rota.consume(
                "orders",
                Pull::default().max(2).lease_ms(3_000).wait_ms(1_000),
                move |task| {
                    let (calls, failed_once) = (calls.clone(), failed_once.clone());
                    async move {
                        calls.fetch_add(1, Ordering::SeqCst);
                        // Longer than a third of the lease: the loop extends it meanwhile.
                        tokio::time::sleep(Duration::from_millis(1_200)).await;
                        if task.payload.as_deref() == Some("fail once")
                            && failed_once.fetch_add(1, Ordering::SeqCst) == 0
                        {
                            return Err("the first try fails".into());
                        }
                        Ok(())
                    }
                },
                async {
                    let _ = stop_rx.await;
                },
            )
            .await
        })
    };
    for _ in 0..300 {
        let mut done = 0;
        for id in &ids {
            if rota.get_task(*id).await.unwrap().status == "succeeded" {
                done += 1;
            }
        }
        if done == ids.len() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = stop_tx.send(());
    let acked = consumer.await.unwrap().unwrap();
    assert_eq!(acked, 3, "every task acked once");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        4,
        "three tasks, one of them twice"
    );
    for id in &ids {
        assert_eq!(rota.get_task(*id).await.unwrap().status, "succeeded");
    }
}

/// A workflow whose step is the pull job: the producer starts an instance, a consumer acks
/// the step with an output, and the producer's wait returns the instance's output.
#[tokio::test]
async fn a_started_workflow_is_waited_for_and_gives_its_steps_output() {
    let Some((node, rota)) = node(1).await else {
        return;
    };
    let wf = serde_json::json!({"name": "checkout", "app": "shop",
                                "steps": [{"name": "close", "job": "orders"}]});
    let created = reqwest::Client::new()
        .post(format!("{}/api/v1/workflows", node.url))
        .bearer_auth(TOKEN)
        .json(&wf)
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201, "{:?}", created.text().await);
    let input = serde_json::json!({"order": 42});
    let (inst, new) = rota
        .start_workflow("checkout", &input, Some("order-42"))
        .await
        .unwrap();
    assert!(new);
    assert!(inst.is_running());
    let (again, new) = rota
        .start_workflow("checkout", &input, Some("order-42"))
        .await
        .unwrap();
    assert!(!new, "the key's instance");
    assert_eq!(again.id, inst.id);

    let waiter = {
        let rota = Client::new(&node.url, TOKEN).unwrap();
        tokio::spawn(async move {
            rota.wait_instance(inst.id, Duration::from_millis(100))
                .await
        })
    };
    let pulled = rota
        .pull("orders", &Pull::default().wait_ms(10_000))
        .await
        .unwrap();
    let step: serde_json::Value =
        serde_json::from_str(pulled[0].payload.as_deref().unwrap()).unwrap();
    assert_eq!(step["input"], input);
    rota.ack_with_output(
        pulled[0].task,
        &pulled[0].lease,
        &serde_json::json!({"closed": 42}),
    )
    .await
    .unwrap();
    let done = tokio::time::timeout(Duration::from_secs(30), waiter)
        .await
        .expect("the instance ends once its step is acked")
        .unwrap()
        .unwrap();
    assert_eq!(done.status, "succeeded");
    assert_eq!(
        done.output,
        Some(serde_json::json!({"close": {"closed": 42}}))
    );
    let missing = rota.start_workflow("nope", &input, None).await.unwrap_err();
    assert_eq!(missing.status().map(|s| s.as_u16()), Some(404));
}
