"""rota_client against a real `rota standalone` (see conftest.py)."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone

import pytest

from rota_client import (
    AckResult,
    Client,
    Conflict,
    Invalid,
    LeaseLost,
    NewTask,
    NotFound,
    Pulled,
    RotaError,
    Unauthorized,
)

from .conftest import Server


def pull_n(client: Client, job: str, n: int, *, lease_ms: int | None = None, timeout: float = 15) -> list[Pulled]:
    """Pulls until `n` tasks came (they fall due through the scheduler's wheel)."""
    got: list[Pulled] = []
    deadline = time.monotonic() + timeout
    while len(got) < n:
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"only {len(got)} of {n} tasks were pulled: {got}"
        got += client.pull(job, max=n - len(got), lease_ms=lease_ms, wait_ms=min(2000, int(remaining * 1000)))
    return got


def pull_one(client: Client, job: str, *, lease_ms: int | None = None) -> Pulled:
    (item,) = pull_n(client, job, 1, lease_ms=lease_ms)
    return item


def runs_of(server: Server, task: int) -> list[dict[str, object]]:
    with server.http() as http:
        answer = http.get("/api/v1/runs", params={"task": task})
    assert answer.status_code == 200, answer.text
    items: list[dict[str, object]] = answer.json()["items"]
    return items


def test_create_and_idempotent_key(client: Client, job: str) -> None:
    first = client.create_task(job, payload='{"order_id":42}', delay_ms=60_000, key="order-42", priority=5)
    assert first.created is True
    assert first.status == "pending"
    assert first.key == "order-42"
    assert first.payload == '{"order_id":42}'
    assert first.priority == 5
    assert first.attempts == 0
    assert first.due_at > datetime.now(timezone.utc) + timedelta(seconds=50)

    again = client.create_task(job, payload="other", delay_ms=1, key="order-42")
    assert again.created is False
    assert again.id == first.id
    assert again.payload == '{"order_id":42}'

    read = client.get_task(first.id)
    assert read.id == first.id and read.status == "pending" and read.created is False

    cancelled = client.cancel_task(first.id)
    assert cancelled.status == "cancelled"
    assert client.get_task(first.id).status == "cancelled"


def test_create_run_at(client: Client, job: str) -> None:
    at = datetime.now(timezone.utc) + timedelta(hours=1)
    task = client.create_task(job, run_at=at, max_attempts=3)
    assert abs((task.due_at - at).total_seconds()) < 0.01
    assert task.max_attempts == 3
    client.cancel_task(task.id)


def test_batch(client: Client, job: str) -> None:
    existing = client.create_task(job, delay_ms=60_000, key="b-existing")
    ids = client.create_tasks(
        [
            NewTask(job=job, payload="one", key="b-1"),
            {"job": job, "payload": "two", "priority": 7},
            {"job": job, "key": "b-existing"},
        ]
    )
    assert len(ids) == 3
    assert ids[2] == existing.id
    assert len(set(ids)) == 3
    assert client.get_task(ids[0]).payload == "one"
    assert client.get_task(ids[1]).priority == 7

    # All or nothing: the same key twice in one batch is a 422 and creates nothing.
    with pytest.raises(Invalid) as refused:
        client.create_tasks([{"job": job, "key": "dup"}, {"job": job, "key": "dup"}])
    assert refused.value.status == 422

    pulled = pull_n(client, job, 2)
    # Higher priority first.
    assert [p.task for p in pulled] == [ids[1], ids[0]]
    assert [r.status for r in client.ack_batch(job, pulled)] == ["acked", "acked"]
    client.cancel_task(existing.id)


def test_pull_and_ack(client: Client, job: str) -> None:
    task = client.create_task(job, payload="hello", key="k-ack")
    item = pull_one(client, job)
    assert item.task == task.id
    assert item.attempt == 1
    assert item.payload == "hello" and item.key == "k-ack"
    assert item.lease
    assert item.lease_expires_at > datetime.now(timezone.utc) + timedelta(seconds=20)
    assert client.get_task(task.id).status == "running"

    acked = client.ack(item.task, item.lease)
    assert acked.status == "succeeded"
    assert client.get_task(task.id).status == "succeeded"

    # The attempt has ended: its lease is stale, a 409 that changes nothing.
    with pytest.raises(LeaseLost) as stale:
        client.ack(item.task, item.lease)
    assert stale.value.status == 409
    assert "lease" in stale.value.message
    assert isinstance(stale.value, Conflict) and isinstance(stale.value, RotaError)
    assert client.get_task(task.id).status == "succeeded"


def test_expired_lease_is_stale(client: Client, job: str) -> None:
    task = client.create_task(job)
    first = pull_one(client, job, lease_ms=1000)
    # Not acked: the lease expires and the task is delivered again.
    second = pull_one(client, job)
    assert second.task == task.id and second.attempt == 2
    with pytest.raises(LeaseLost) as stale:
        client.ack(first.task, first.lease)
    assert stale.value.status == 409
    assert client.ack(second.task, second.lease).status == "succeeded"


def test_nack_with_delay_then_redelivered(client: Client, server: Server, job: str) -> None:
    task = client.create_task(job, payload="p")
    item = pull_one(client, job)
    before = datetime.now(timezone.utc)
    nacked = client.nack(item.task, item.lease, error="warehouse closed", delay_ms=1500)
    assert nacked.status == "failed"
    assert nacked.due_at >= before + timedelta(milliseconds=1400)
    # "failed" until a scheduler's wheel takes the retry (due within seconds): then
    # the server shows it "pending".
    assert client.get_task(task.id).status in ("failed", "pending")
    assert client.pull(job, max=1) == []  # not due yet

    again = pull_one(client, job)
    assert again.task == task.id
    assert again.attempt == 2
    assert datetime.now(timezone.utc) >= nacked.due_at
    assert client.ack(again.task, again.lease).status == "succeeded"

    runs = sorted(runs_of(server, task.id), key=lambda r: int(str(r["attempt"])))
    assert [(r["attempt"], r["status"]) for r in runs] == [(1, "failed"), (2, "succeeded")]
    assert runs[0]["message"] == "warehouse closed"


def test_extend(client: Client, job: str) -> None:
    task = client.create_task(job)
    item = pull_one(client, job, lease_ms=1000)
    new_end = client.extend(item.task, item.lease, 60_000)
    assert new_end > item.lease_expires_at + timedelta(seconds=50)
    # Past the first end (and the second-granular expiry check): still held.
    time.sleep(2.5)
    assert client.pull(job, max=1) == []
    assert client.ack(item.task, item.lease).status == "succeeded"
    assert client.get_task(task.id).attempts == 1

    with pytest.raises(LeaseLost):
        client.extend(item.task, item.lease, 60_000)


def test_ack_batch(client: Client, job: str) -> None:
    ids = client.create_tasks([{"job": job, "payload": str(i)} for i in range(3)])
    items = pull_n(client, job, 3)
    assert sorted(p.task for p in items) == sorted(ids)
    first = items[0]
    assert client.ack(first.task, first.lease).status == "succeeded"

    results = client.ack_batch(job, [(p.task, p.lease) for p in items] + [(999_999_999, "nope")])
    assert results == [
        AckResult(first.task, "stale"),
        AckResult(items[1].task, "acked"),
        AckResult(items[2].task, "acked"),
        AckResult(999_999_999, "not_found"),
    ]
    assert [r.acked for r in results] == [False, True, True, False]
    assert {client.get_task(i).status for i in ids} == {"succeeded"}


def test_consume_with_a_failure_redelivered(client: Client, server: Server, job: str) -> None:
    ids = client.create_tasks([{"job": job, "payload": p, "key": p} for p in ("a", "b", "c")])
    seen: list[tuple[str | None, int]] = []
    succeeded: set[str | None] = set()
    stop = threading.Event()
    failed_once = False

    def handler(item: Pulled) -> None:
        nonlocal failed_once
        seen.append((item.payload, item.attempt))
        if item.payload == "b" and not failed_once:
            failed_once = True
            raise ValueError("b is not ready")
        succeeded.add(item.payload)
        if succeeded == {"a", "b", "c"}:
            stop.set()

    result: list[int] = []
    thread = threading.Thread(
        target=lambda: result.append(
            client.consume(job, handler, consumer="py-test", max=10, lease_ms=5000, wait_ms=1000, stop=stop)
        )
    )
    thread.start()
    thread.join(30)
    stop.set()
    thread.join(5)
    assert not thread.is_alive(), "consume() did not return after stop was set"
    assert result == [4]
    assert sorted(seen) == [("a", 1), ("b", 1), ("b", 2), ("c", 1)]
    assert [client.get_task(i).status for i in ids] == ["succeeded"] * 3
    assert client.get_task(ids[1]).attempts == 2
    assert not [t for t in threading.enumerate() if t.name == "rota-lease-keeper"]

    runs = sorted(runs_of(server, ids[1]), key=lambda r: int(str(r["attempt"])))
    assert [(r["attempt"], r["status"]) for r in runs] == [(1, "failed"), (2, "succeeded")]
    assert runs[0]["message"] == "ValueError: b is not ready"
    assert runs[0]["executor"] == "pull:py-test"


def test_consume_extends_leases_of_slow_handlers(client: Client, job: str) -> None:
    ids = client.create_tasks([{"job": job, "payload": str(i)} for i in range(2)])
    # Both in one batch: the second waits for the first's 2.5 s, past its 1 s lease.
    pull_started = threading.Event()
    seen: list[tuple[int, int]] = []
    stop = threading.Event()

    def handler(item: Pulled) -> None:
        seen.append((item.task, item.attempt))
        pull_started.set()
        time.sleep(2.5)
        if len(seen) == 2:
            stop.set()

    time.sleep(1.0)  # let both fall due, so that one pull takes them together
    handled = client.consume(job, handler, max=10, lease_ms=1000, wait_ms=1000, stop=stop)
    assert handled == 2
    assert sorted(seen) == sorted((i, 1) for i in ids)
    assert [client.get_task(i).status for i in ids] == ["succeeded"] * 2
    assert [client.get_task(i).attempts for i in ids] == [1, 1]
    assert not [t for t in threading.enumerate() if t.name == "rota-lease-keeper"]


def test_consume_returns_when_stopped_while_idle(client: Client, job: str) -> None:
    stop = threading.Event()
    threading.Timer(0.5, stop.set).start()
    started = time.monotonic()
    assert client.consume(job, lambda item: None, wait_ms=500, stop=stop) == 0
    assert time.monotonic() - started < 5


def test_retry_dead(client: Client, job: str) -> None:
    task = client.create_task(job, max_attempts=1)
    item = pull_one(client, job)
    assert client.nack(item.task, item.lease, error="fatal").status == "dead"

    with pytest.raises(Conflict) as not_dead:
        client.retry_task(client.create_task(job, delay_ms=60_000).id)
    assert not_dead.value.status == 409

    retried = client.retry_task(task.id)
    assert retried.id == task.id and retried.status not in ("dead", "succeeded")
    again = pull_one(client, job)
    assert (again.task, again.attempt) == (task.id, 2)
    assert client.ack(again.task, again.lease).status == "succeeded"


def test_retry_dead_in_bulk(client: Client, job: str) -> None:
    ids = client.create_tasks([{"job": job, "max_attempts": 1} for _ in range(3)])
    for item in pull_n(client, job, 3):
        client.nack(item.task, item.lease)
    assert {client.get_task(i).status for i in ids} == {"dead"}

    assert client.retry_dead(job, limit=2) == 2
    assert client.retry_dead(job) == 1
    assert client.retry_dead(job) == 0
    items = pull_n(client, job, 3)
    assert sorted(p.task for p in items) == sorted(ids)
    assert {p.attempt for p in items} == {2}
    assert [r.status for r in client.ack_batch(job, items)] == ["acked"] * 3


def test_errors(client: Client, server: Server, job: str) -> None:
    with pytest.raises(Invalid) as bad_max:
        client.pull(job, max=0)
    assert bad_max.value.status == 422
    assert "max" in bad_max.value.message
    assert "max" in str(bad_max.value)

    with pytest.raises(Invalid) as both:
        client.create_task(job, delay_ms=5, run_at=datetime.now(timezone.utc))
    assert "delay_ms" in both.value.message

    with pytest.raises(NotFound) as missing:
        client.get_task(999_999_999)
    assert missing.value.status == 404 and "999999999" in missing.value.message

    with pytest.raises(NotFound) as no_job:
        client.pull("no-such-job")
    assert "no-such-job" in no_job.value.message

    with pytest.raises(NotFound):
        client.ack(999_999_999, "lease")

    with Client(server.url, "wrong-token") as intruder:
        with pytest.raises(Unauthorized) as denied:
            intruder.get_task(1)
    assert denied.value.status == 401 and denied.value.message

    task = client.create_task(job)
    item = pull_one(client, job)
    with pytest.raises(Conflict) as running:
        client.cancel_task(task.id)
    assert not isinstance(running.value, LeaseLost)
    assert "running" in running.value.message
    client.ack(item.task, item.lease)


def test_start_workflow_and_wait_for_its_output(client: Client, server: Server, job: str) -> None:
    name = f"wf-{job}"
    with server.http() as http:
        answer = http.post(
            "/api/v1/workflows",
            json={"name": name, "app": "shop", "steps": [{"name": "close", "job": job}]},
        )
    assert answer.status_code == 201, answer.text
    started = client.start_workflow(name, {"order": 42}, key="order-42")
    assert started.created and started.running
    again = client.start_workflow(name, {"order": 43}, key="order-42")
    assert not again.created and again.id == started.id and again.input == {"order": 42}

    result: list[object] = []
    waiter = threading.Thread(target=lambda: result.append(client.wait_instance(started.id, timeout=30, poll=0.1)))
    waiter.start()
    item = pull_one(client, job)
    assert item.payload is not None and '"order":42' in item.payload.replace(" ", "")
    client.ack(item.task, item.lease, output={"closed": 42})
    waiter.join(35)
    done = result[0]
    assert done.status == "succeeded"
    assert done.output == {"close": {"closed": 42}}
    assert done.steps[0]["output"] == {"closed": 42}
    with pytest.raises(NotFound):
        client.start_workflow("no-such-workflow")
    with pytest.raises(TimeoutError):
        client.wait_instance(client.start_workflow(name).id, timeout=0.3, poll=0.1)
