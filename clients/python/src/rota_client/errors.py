"""Errors raised by :class:`rota_client.Client`.

Every answer of the server outside 2xx is a :class:`RotaError` carrying the HTTP status
and the server's ``{"error": "..."}`` message; the common statuses have subclasses so
that callers can ``except NotFound`` rather than compare ``.status``.
"""

from __future__ import annotations

__all__ = [
    "RotaError",
    "ConnectionFailed",
    "BadRequest",
    "Unauthorized",
    "Forbidden",
    "NotFound",
    "Conflict",
    "LeaseLost",
    "TooLarge",
    "Invalid",
    "ServerError",
]


class RotaError(Exception):
    """The server refused a request (``status`` is its HTTP status), or could not be
    reached (``status`` is 0, see :class:`ConnectionFailed`).

    ``message`` is the server's ``error`` text, in words a user can act on.
    """

    status: int
    message: str

    def __init__(self, status: int, message: str) -> None:
        super().__init__(status, message)
        self.status = status
        self.message = message

    def __str__(self) -> str:
        if self.status:
            return f"{self.status}: {self.message}"
        return self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}(status={self.status!r}, message={self.message!r})"


class ConnectionFailed(RotaError):
    """No answer: the connection failed or timed out (``status`` is 0). Whether the
    request took effect is unknown."""

    def __init__(self, message: str) -> None:
        super().__init__(0, message)


class BadRequest(RotaError):
    """400: a malformed request (bad JSON, a path id that is not an integer)."""


class Unauthorized(RotaError):
    """401: the token is missing, unknown or revoked."""


class Forbidden(RotaError):
    """403: the token's user lacks the role or the app for this."""


class NotFound(RotaError):
    """404: no such task, job or route."""


class Conflict(RotaError):
    """409: the request conflicts with the current state (e.g. cancelling a running
    task, retrying a task that is not dead)."""


class LeaseLost(Conflict):
    """409 on ``ack``, ``nack`` or ``extend``: the lease is not the task's current one
    (it expired and the task was handed out again, or the attempt already ended).
    Nothing was changed."""


class TooLarge(RotaError):
    """413: the body, a payload or a batch is over its limit."""


class Invalid(RotaError):
    """422: a value is out of range or inconsistent; the message names the field."""


class ServerError(RotaError):
    """5xx: the server failed (or a proxy in front of it did)."""


_BY_STATUS: dict[int, type[RotaError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: TooLarge,
    422: Invalid,
}


def error_for(status: int, message: str, *, lease: bool = False) -> RotaError:
    """The exception for an HTTP ``status``; ``lease`` marks a lease operation, whose
    409 is :class:`LeaseLost`."""
    if status == 409 and lease:
        return LeaseLost(status, message)
    cls = _BY_STATUS.get(status)
    if cls is None:
        cls = ServerError if status >= 500 else RotaError
    return cls(status, message)
