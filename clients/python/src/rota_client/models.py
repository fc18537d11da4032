"""The answers of the Rota API, as dataclasses."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

__all__ = ["Task", "Pulled", "AckResult", "Instance", "NewTask", "parse_time", "format_time"]

# A JSON object as decoded by the json module.
JSONObject = Mapping[str, Any]


def parse_time(value: str) -> datetime:
    """An RFC 3339 time of the API (``2026-11-30T03:29:00.123Z``) as an aware datetime."""
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    parsed = datetime.fromisoformat(text)
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=timezone.utc)
    return parsed


def format_time(value: datetime) -> str:
    """``value`` in UTC, RFC 3339 with milliseconds. A naive datetime is taken as local
    time, as Python's ``datetime.astimezone`` does."""
    utc = value.astimezone(timezone.utc)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"


def _opt_time(value: Any) -> datetime | None:
    return parse_time(value) if isinstance(value, str) else None


@dataclass(frozen=True)
class Task:
    """A task (``TaskView``): one delayed or manual execution of a job.

    ``status`` is one of ``pending``, ``running``, ``succeeded``, ``failed`` (will
    retry), ``dead`` (will not) and ``cancelled``. ``due_at`` is the current attempt's
    due time. ``created`` is true only on the answer of
    :meth:`rota_client.Client.create_task` that made the task (201); an existing
    ``key``'s task (200) and every other answer have it false.
    """

    id: int
    job: int
    status: str
    due_at: datetime
    attempts: int
    priority: int = 0
    kind: str = "delayed"
    key: str | None = None
    payload: str | None = None
    max_attempts: int | None = None
    last_run_id: int | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    created: bool = False
    raw: JSONObject = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: JSONObject, *, created: bool = False) -> Task:
        return cls(
            id=int(data["id"]),
            job=int(data["job"]),
            status=str(data["status"]),
            due_at=parse_time(data["due_at"]),
            attempts=int(data.get("attempts", 0)),
            priority=int(data.get("priority", 0)),
            kind=str(data.get("kind", "delayed")),
            key=data.get("key"),
            payload=data.get("payload"),
            max_attempts=data.get("max_attempts"),
            last_run_id=data.get("last_run_id"),
            created_at=_opt_time(data.get("created_at")),
            updated_at=_opt_time(data.get("updated_at")),
            created=created,
            raw=dict(data),
        )


@dataclass(frozen=True)
class Pulled:
    """A task handed to a consumer by a pull, with its lease.

    Give ``task`` and ``lease`` back to ``ack``, ``nack`` or ``extend``; only the
    current lease's holder can. A later ``attempt`` of the same ``task`` is a
    redelivery of the same work (dedupe on ``key`` or ``(task, attempt)``).
    """

    task: int
    attempt: int
    lease: str
    due_at: datetime
    lease_expires_at: datetime
    priority: int = 0
    payload: str | None = None
    key: str | None = None

    @classmethod
    def from_json(cls, data: JSONObject) -> Pulled:
        return cls(
            task=int(data["task"]),
            attempt=int(data["attempt"]),
            lease=str(data["lease"]),
            due_at=parse_time(data["due_at"]),
            lease_expires_at=parse_time(data["lease_expires_at"]),
            priority=int(data.get("priority", 0)),
            payload=data.get("payload"),
            key=data.get("key"),
        )


@dataclass(frozen=True)
class AckResult:
    """What became of one item of :meth:`rota_client.Client.ack_batch`: ``status`` is
    ``acked``, ``stale`` (the lease is not the task's current one) or ``not_found``
    (no such task of this job)."""

    task: int
    status: str

    @property
    def acked(self) -> bool:
        return self.status == "acked"

    @classmethod
    def from_json(cls, data: JSONObject) -> AckResult:
        return cls(task=int(data["task"]), status=str(data["status"]))


@dataclass(frozen=True)
class Instance:
    """A workflow instance (``InstanceView``). ``status`` is ``running``, ``succeeded``,
    ``failed`` or ``cancelled``; ``output`` is ``{"<last step>": its output, …}`` once it
    ended; ``steps`` are the API's step objects (``name``, ``status``, ``runs``,
    ``output``, …). ``created`` is true only on the answer of the start that made it."""

    id: int
    workflow: int
    version: int
    status: str
    input: Any = None
    output: Any = None
    key: str | None = None
    steps: list[JSONObject] = field(default_factory=list)
    created_at: datetime | None = None
    finished_at: datetime | None = None
    created: bool = False

    @property
    def running(self) -> bool:
        return self.status == "running"

    @classmethod
    def from_json(cls, data: JSONObject, *, created: bool = False) -> Instance:
        return cls(
            id=int(data["id"]),
            workflow=int(data["workflow"]),
            version=int(data["version"]),
            status=str(data["status"]),
            input=data.get("input"),
            output=data.get("output"),
            key=data.get("key"),
            steps=list(data.get("steps") or []),
            created_at=_opt_time(data.get("created_at")),
            finished_at=_opt_time(data.get("finished_at")),
            created=created,
        )


@dataclass
class NewTask:
    """One task of :meth:`rota_client.Client.create_tasks` (the fields of
    ``create_task``). ``delay_ms`` and ``run_at`` are exclusive; neither means now."""

    job: str | int
    payload: str | None = None
    delay_ms: int | None = None
    run_at: datetime | str | None = None
    key: str | None = None
    max_attempts: int | None = None
    priority: int | None = None
    backoff: JSONObject | None = None

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"job": self.job}
        run_at = format_time(self.run_at) if isinstance(self.run_at, datetime) else self.run_at
        for name, value in (
            ("payload", self.payload),
            ("delay_ms", self.delay_ms),
            ("run_at", run_at),
            ("key", self.key),
            ("max_attempts", self.max_attempts),
            ("priority", self.priority),
            ("backoff", dict(self.backoff) if self.backoff is not None else None),
        ):
            if value is not None:
                body[name] = value
        return body
