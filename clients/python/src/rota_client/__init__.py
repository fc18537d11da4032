"""Python client of Rota, a distributed job scheduler and delay queue.

Producers create delayed tasks (:meth:`Client.create_task`, :meth:`Client.create_tasks`);
consumers of a pull job take them with a lease and ack them (:meth:`Client.pull`,
:meth:`Client.ack`, :meth:`Client.nack`, :meth:`Client.extend`), or let
:meth:`Client.consume` run the loop. Workflows: :meth:`Client.start_workflow` starts an
instance and :meth:`Client.wait_instance` waits for its output. See the README for an
example.
"""

from .client import Client, Handler
from .errors import (
    BadRequest,
    Conflict,
    ConnectionFailed,
    Forbidden,
    Invalid,
    LeaseLost,
    NotFound,
    RotaError,
    ServerError,
    TooLarge,
    Unauthorized,
)
from .models import AckResult, Instance, NewTask, Pulled, Task

__version__ = "0.1.0"

__all__ = [
    "Client",
    "Handler",
    "Task",
    "Pulled",
    "AckResult",
    "Instance",
    "NewTask",
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
    "__version__",
]
