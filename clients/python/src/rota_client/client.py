"""The synchronous Rota client."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any
from urllib.parse import quote

import httpx

from .errors import ConnectionFailed, LeaseLost, RotaError, ServerError, error_for
from .models import AckResult, Instance, NewTask, Pulled, Task, format_time, parse_time

__all__ = ["Client", "Handler"]

log = logging.getLogger("rota_client")

#: A consumer's handler: called with each pulled task; returning acks it, raising nacks it.
Handler = Callable[[Pulled], object]

_USER_AGENT = "rota-client-python/0.1.0"
# Longest error text sent with a nack (the rest of a huge exception text is dropped).
_MAX_ERROR_CHARS = 4000
# Tries of an ack or nack that got no answer, and the pauses between them (seconds).
_FINISH_PAUSES = (0.2, 0.5, 1.0)


def _job_path(job: str | int) -> str:
    return quote(str(job), safe="")


class Client:
    """A client of one Rota server (any scheduler node).

    ``server`` is the API's base URL (``http://127.0.0.1:8080``), ``token`` an API token
    (``ROTA_API_TOKEN``), ``timeout`` the seconds to wait for an answer (a long-polling
    pull waits its ``wait_ms`` on top). Every non-2xx answer raises a
    :class:`~rota_client.RotaError` subclass; no answer raises
    :class:`~rota_client.ConnectionFailed`.

    The client holds a connection pool: close it (``close()`` or ``with Client(...)``).
    It may be shared by threads.
    """

    def __init__(
        self,
        server: str,
        token: str,
        timeout: float = 10.0,
        *,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.server = server.rstrip("/")
        self.timeout = float(timeout)
        self._http = httpx.Client(
            base_url=self.server,
            headers={
                "Authorization": f"Bearer {token}",
                "Accept": "application/json",
                "User-Agent": _USER_AGENT,
            },
            timeout=self.timeout,
            transport=transport,
        )

    # -- lifecycle ------------------------------------------------------------------

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Client({self.server!r})"

    # -- transport ------------------------------------------------------------------

    def _request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Mapping[str, str | int] | None = None,
        lease: bool = False,
        timeout: float | None = None,
    ) -> httpx.Response:
        what = f"{method} {path}"
        try:
            response = self._http.request(
                method,
                path,
                json=json,
                params=params,
                timeout=timeout if timeout is not None else self.timeout,
            )
        except httpx.TimeoutException as exc:
            raise ConnectionFailed(f"{what}: no answer from {self.server} in time ({exc})") from exc
        except httpx.TransportError as exc:
            raise ConnectionFailed(f"{what}: cannot reach {self.server} ({exc})") from exc
        if response.is_success:
            return response
        raise error_for(response.status_code, _error_message(response), lease=lease)

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self._request(method, path, **kwargs)
        try:
            return response.json()
        except ValueError as exc:
            raise RotaError(
                response.status_code, f"{method} {path}: the answer is not JSON: {response.text[:200]!r}"
            ) from exc

    def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Mapping[str, str | int] | None = None,
    ) -> Any:
        """Any other call of the REST API (``/api/v1/...``, see its OpenAPI document at
        ``/api/v1/openapi.json``): answers the decoded JSON (None for an empty answer),
        raises :class:`~rota_client.RotaError` like the other methods."""
        response = self._request(method, path, json=json, params=params)
        if not response.content:
            return None
        return response.json()

    # -- producing ------------------------------------------------------------------

    def create_task(
        self,
        job: str | int,
        payload: str | None = None,
        delay_ms: int | None = None,
        run_at: datetime | str | None = None,
        key: str | None = None,
        max_attempts: int | None = None,
        priority: int | None = None,
        *,
        backoff: Mapping[str, Any] | None = None,
    ) -> Task:
        """Creates a task of ``job`` (a name or an id), due after ``delay_ms`` or at
        ``run_at`` (exclusive; neither means now; a naive ``run_at`` is local time).

        With a ``key`` the job already has, the existing task is returned and
        ``created`` is false (the server's 200); a new task has ``created`` true (201).
        ``backoff`` is ``{"kind": "fixed", "delay_ms": N}`` or
        ``{"kind": "exponential", "base_ms": N, "factor": F, "max_ms": N}``.
        """
        body = NewTask(
            job=job,
            payload=payload,
            delay_ms=delay_ms,
            run_at=run_at,
            key=key,
            max_attempts=max_attempts,
            priority=priority,
            backoff=backoff,
        ).to_json()
        response = self._request("POST", "/api/v1/tasks", json=body)
        return Task.from_json(response.json(), created=response.status_code == 201)

    def create_tasks(self, items: Iterable[NewTask | Mapping[str, Any]]) -> list[int]:
        """Creates up to 10,000 tasks at once, all or nothing; answers their ids in the
        order given (for an item whose ``key`` exists, the existing task's id).

        Each item is a :class:`~rota_client.NewTask` or a mapping of the same fields
        (``{"job": "orders", "delay_ms": 5000, "key": "order-42"}``).
        """
        tasks = [
            item.to_json() if isinstance(item, NewTask) else _task_mapping(item) for item in items
        ]
        data = self._json("POST", "/api/v1/tasks/batch", json={"tasks": tasks})
        return [int(i) for i in data["ids"]]

    def start_workflow(self, workflow: str | int, input: Any = None, key: str | None = None) -> Instance:
        """Starts an instance of ``workflow`` (a name or an id) with ``input`` (any JSON
        value). With a ``key`` already used, the existing instance is returned and
        ``created`` is false (the server's 200)."""
        body: dict[str, Any] = {"input": input}
        if key is not None:
            body["key"] = key
        response = self._request("POST", f"/api/v1/workflows/{_job_path(workflow)}/instances", json=body)
        return Instance.from_json(response.json(), created=response.status_code == 201)

    def get_instance(self, id: int) -> Instance:
        """Workflow instance ``id``; :class:`~rota_client.NotFound` if there is none."""
        return Instance.from_json(self._json("GET", f"/api/v1/workflow-instances/{int(id)}"))

    def wait_instance(self, id: int, timeout: float | None = None, poll: float = 0.25) -> Instance:
        """Workflow instance ``id`` once it has ended (read every ``poll`` seconds); its
        ``output`` is then the instance's. Raises ``TimeoutError`` after ``timeout``
        seconds if given."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            instance = self.get_instance(id)
            if not instance.running:
                return instance
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"workflow instance {id} still runs after {timeout} s")
            time.sleep(poll)

    def get_task(self, id: int) -> Task:
        """The task ``id``; :class:`~rota_client.NotFound` if there is none."""
        return Task.from_json(self._json("GET", f"/api/v1/tasks/{int(id)}"))

    def cancel_task(self, id: int) -> Task:
        """Cancels a pending task (a cancelled one stays cancelled); a task that is
        running or finished is a :class:`~rota_client.Conflict`."""
        return Task.from_json(self._json("DELETE", f"/api/v1/tasks/{int(id)}"))

    def retry_task(self, id: int) -> Task:
        """Re-drives a ``dead`` task: a new attempt, due now. A task that is not dead is
        a :class:`~rota_client.Conflict`."""
        return Task.from_json(self._json("POST", f"/api/v1/tasks/{int(id)}/retry"))

    def retry_dead(self, job: str | int, limit: int | None = None) -> int:
        """Re-drives up to ``limit`` (1,000 by default) of ``job``'s dead tasks, oldest
        first; answers how many."""
        body: dict[str, Any] = {"job": job, "status": "dead"}
        if limit is not None:
            body["limit"] = limit
        return int(self._json("POST", "/api/v1/tasks/retry", json=body)["retried"])

    # -- consuming ------------------------------------------------------------------

    def pull(
        self,
        job: str | int,
        max: int = 1,
        lease_ms: int | None = None,
        wait_ms: int | None = None,
        consumer: str | None = None,
    ) -> list[Pulled]:
        """Takes up to ``max`` (1–1,000) due tasks of the pull job ``job``, higher
        priority first, each with a lease of ``lease_ms`` (1,000–43,200,000; 30,000 by
        default). With ``wait_ms`` (up to 30,000) it waits that long for a task to fall
        due when none is ready; an empty list means none did. ``consumer`` names the
        runs' executor ``pull:<consumer>``."""
        body: dict[str, Any] = {"max": max}
        if lease_ms is not None:
            body["lease_ms"] = lease_ms
        if wait_ms is not None:
            body["wait_ms"] = wait_ms
        if consumer is not None:
            body["consumer"] = consumer
        wait_s = wait_ms / 1000.0 if isinstance(wait_ms, int) and wait_ms > 0 else 0.0
        data = self._json(
            "POST",
            f"/api/v1/jobs/{_job_path(job)}/pull",
            json=body,
            timeout=self.timeout + wait_s,
        )
        return [Pulled.from_json(item) for item in data["items"]]

    def ack(self, task: int, lease: str, output: Any = None) -> Task:
        """The attempt succeeded: the task is ``succeeded``. ``output`` (any JSON value, at
        most 64 KiB; ``None`` sends none) is a workflow step's output, given to the steps
        after it. A lease that is not the task's current one is
        :class:`~rota_client.LeaseLost` (409) and changes nothing."""
        body: dict[str, Any] = {"lease": lease}
        if output is not None:
            body["output"] = output
        data = self._json("POST", f"/api/v1/tasks/{int(task)}/ack", json=body, lease=True)
        return Task.from_json(data)

    def nack(
        self, task: int, lease: str, error: str | None = None, delay_ms: int | None = None
    ) -> Task:
        """The attempt failed: the task is ``failed`` and retried after ``delay_ms`` (or
        its backoff) while attempts remain, else ``dead``. ``error`` is kept as the
        run's message. A stale lease is :class:`~rota_client.LeaseLost`."""
        body: dict[str, Any] = {"lease": lease}
        if error is not None:
            body["error"] = error
        if delay_ms is not None:
            body["delay_ms"] = delay_ms
        data = self._json("POST", f"/api/v1/tasks/{int(task)}/nack", json=body, lease=True)
        return Task.from_json(data)

    def extend(self, task: int, lease: str, lease_ms: int) -> datetime:
        """The lease now ends ``lease_ms`` (1,000–43,200,000) from now; answers its new
        end. A stale lease is :class:`~rota_client.LeaseLost`."""
        data = self._json(
            "POST",
            f"/api/v1/tasks/{int(task)}/extend",
            json={"lease": lease, "lease_ms": lease_ms},
            lease=True,
        )
        return parse_time(data["lease_expires_at"])

    def ack_batch(
        self, job: str | int, acks: Iterable[tuple[int, str] | Pulled]
    ) -> list[AckResult]:
        """Acks up to 1,000 leases of ``job``'s tasks at once: ``(task, lease)`` pairs or
        :class:`~rota_client.Pulled` items. A stale or unknown one does not fail the
        others: each result's ``status`` is ``acked``, ``stale`` or ``not_found``."""
        items = []
        for ack in acks:
            task, lease = (ack.task, ack.lease) if isinstance(ack, Pulled) else ack
            items.append({"task": int(task), "lease": lease})
        data = self._json("POST", f"/api/v1/jobs/{_job_path(job)}/ack", json={"acks": items})
        return [AckResult.from_json(r) for r in data["results"]]

    def consume(
        self,
        job: str | int,
        handler: Handler,
        *,
        consumer: str | None = None,
        max: int = 10,
        lease_ms: int = 30000,
        wait_ms: int = 20000,
        stop: threading.Event | None = None,
    ) -> int:
        """Consumes ``job`` until ``stop`` is set: long-polls (``wait_ms``) for up to
        ``max`` tasks, then calls ``handler(pulled)`` for each in turn. A handler that
        returns acks the task; one that raises an ``Exception`` nacks it with the
        exception's text (the task is retried per its policy). While a batch is being
        handled, a background thread extends the leases of its unfinished tasks every
        ``lease_ms / 3``; it is stopped before ``consume`` handles the next batch or
        returns.

        ``stop`` is checked between batches (and while pausing after a failed pull);
        the tasks of a batch already pulled are handled first. A pull blocks up to
        ``wait_ms``, so a lower ``wait_ms`` makes ``consume`` return sooner after
        ``stop`` is set. Returns how many tasks were handled.

        A pull that gets no answer or a 5xx is tried again after a pause; any other
        error of a pull (a 401, an unknown job, a bad ``max``) is raised. An ack or nack
        that gets no answer is tried again a few times; one refused (e.g. the lease was
        lost) is logged to the ``rota_client`` logger, as the task will be delivered
        again. A ``BaseException`` from the handler (``KeyboardInterrupt``) propagates
        after the lease thread is stopped; the task's lease then expires and the task
        is delivered again.
        """
        stop_event = stop if stop is not None else threading.Event()
        handled = 0
        pause = 0.5
        while not stop_event.is_set():
            try:
                batch = self.pull(job, max=max, lease_ms=lease_ms, wait_ms=wait_ms, consumer=consumer)
            except (ConnectionFailed, ServerError) as exc:
                log.warning("rota consume %s: pull failed, trying again in %.1fs: %s", job, pause, exc)
                stop_event.wait(pause)
                pause = min(pause * 2, 10.0)
                continue
            pause = 0.5
            if not batch:
                continue
            keeper = _LeaseKeeper(self, batch, lease_ms)
            keeper.start()
            try:
                for item in batch:
                    try:
                        handler(item)
                    except Exception as exc:  # noqa: BLE001 - any failure of the handler nacks
                        keeper.release(item.task)
                        text = f"{type(exc).__name__}: {exc}"[:_MAX_ERROR_CHARS]
                        self._finish(item, error=text)
                    else:
                        keeper.release(item.task)
                        self._finish(item, error=None)
                    handled += 1
            finally:
                keeper.stop()
        return handled

    def _finish(self, item: Pulled, *, error: str | None) -> None:
        """Acks (``error`` None) or nacks ``item``, trying again when no answer came."""
        verb = "ack" if error is None else "nack"
        for attempt, pause in enumerate((*_FINISH_PAUSES, None)):
            try:
                if error is None:
                    self.ack(item.task, item.lease)
                else:
                    self.nack(item.task, item.lease, error=error)
                return
            except LeaseLost as exc:
                # After a retry this may be our own first ack that did land.
                log.warning(
                    "rota: %s of task %d (attempt %d) refused, it will be delivered again "
                    "unless an earlier %s landed: %s",
                    verb, item.task, item.attempt, verb, exc.message,
                )
                return
            except (ConnectionFailed, ServerError) as exc:
                if pause is None:
                    log.error(
                        "rota: %s of task %d (attempt %d) failed %d times, the task will be "
                        "delivered again when its lease expires: %s",
                        verb, item.task, item.attempt, attempt + 1, exc,
                    )
                    return
                time.sleep(pause)
            except RotaError as exc:
                log.error("rota: %s of task %d (attempt %d) refused: %s", verb, item.task, item.attempt, exc)
                return


class _LeaseKeeper:
    """A thread that extends the leases of a batch's unfinished tasks every
    ``lease_ms / 3`` until each is released or the keeper is stopped."""

    def __init__(self, client: Client, batch: list[Pulled], lease_ms: int) -> None:
        self._client = client
        self._lease_ms = lease_ms
        self._interval = max(lease_ms, 1) / 3000.0
        self._held: dict[int, Pulled] = {item.task: item for item in batch}
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rota-lease-keeper", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def release(self, task: int) -> None:
        with self._lock:
            self._held.pop(task, None)

    def stop(self) -> None:
        self._done.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._done.wait(self._interval):
            with self._lock:
                held = list(self._held.values())
            for item in held:
                if self._done.is_set():
                    return
                with self._lock:
                    if item.task not in self._held:
                        continue
                try:
                    self._client.extend(item.task, item.lease, self._lease_ms)
                except LeaseLost as exc:
                    with self._lock:
                        still_held = self._held.pop(item.task, None) is not None
                    if still_held:
                        log.warning(
                            "rota: lease of task %d (attempt %d) lost while it was being handled; "
                            "it will be delivered again: %s",
                            item.task, item.attempt, exc.message,
                        )
                except RotaError as exc:
                    log.warning("rota: extending the lease of task %d failed: %s", item.task, exc)
                except Exception:  # noqa: BLE001 - the keeper must never die silently mid-batch
                    log.exception("rota: extending the lease of task %d failed", item.task)


def _task_mapping(item: Mapping[str, Any]) -> dict[str, Any]:
    body = {k: v for k, v in item.items() if v is not None}
    run_at = body.get("run_at")
    if isinstance(run_at, datetime):
        body["run_at"] = format_time(run_at)
    return body


def _error_message(response: httpx.Response) -> str:
    try:
        data = response.json()
    except ValueError:
        data = None
    if isinstance(data, dict) and isinstance(data.get("error"), str):
        return str(data["error"])
    text = response.text.strip()
    return text[:500] if text else (response.reason_phrase or f"HTTP {response.status_code}")
