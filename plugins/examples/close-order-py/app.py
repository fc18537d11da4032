"""close-order in Python: the classic delayed-task handler ("close order 42 in 30 minutes
unless it was paid"), the same behaviour as the Rust `close-order` (see its README).

The payload is a JSON object such as `{"order_id": 42}`. The job's params are the order
service's base URL (on the job's HTTP allow-list). The handler asks the service
(`GET {service}/orders/42`, answered `{"paid": true|false}`) and, if the order is unpaid,
closes it (`POST {service}/orders/42/close`, with `Authorization: Bearer <secret>` when the
app has a secret `ORDER_SERVICE_TOKEN`). It remembers closed orders in the job's key-value
state, so a retried run does not close an order twice. Without params it decides from
the payload's `paid` field and only logs.

Build: plugins/build.sh (componentize-py against plugins/wit, world `handler`).
"""

import json

import wit_world
from componentize_py_types import Err
from rota_http import HttpError, request
from wit_world.imports import invocation, kv, log, secrets


def info(text: str) -> None:
    log.write(log.Level.INFO, text)


class WitWorld(wit_world.WitWorld):
    def run(self, input: bytes, context: invocation.Context) -> str | None:
        order = parse_order(input)
        order_id = order["order_id"]
        service = (context.params or "").strip().rstrip("/")
        if not service:
            paid = order.get("paid")
            if paid is None:
                raise Err("no order service (the job's params) and no \"paid\" field in the payload")
            info(f"order {order_id} is {'paid: leaving it' if paid else 'unpaid: closing it'}")
            return
        done_key = f"closed:{order_id}"
        try:
            if kv.get(done_key) is not None:
                info(f"order {order_id} was closed already")
                return
        except Err as e:
            raise Err(f"cannot read this job's state: {e.value}")
        url = f"{service}/orders/{order_id}"
        answer = call("GET", url, [])
        try:
            paid = answer.json().get("paid")
        except (ValueError, AttributeError):
            paid = None
        if paid is True:
            info(f"order {order_id} is paid: leaving it")
        elif paid is False:
            try:
                token = secrets.get("ORDER_SERVICE_TOKEN")
            except Err as e:
                raise Err(f"cannot read the service's token: {e.value}")
            headers = [("authorization", f"Bearer {token}")] if token else []
            call("POST", f"{url}/close", headers)
            try:
                kv.set(done_key, b"1")
            except Err as e:
                log.write(log.Level.ERROR, f"closed, but cannot remember it: {e.value}")
            info(f"order {order_id} was unpaid: closed it")
        else:
            raise Err(
                f"the order service answered GET {url} with {answer.text()!r}, "
                "not {\"paid\": true|false}"
            )


def parse_order(payload: bytes) -> dict:
    if not payload.strip():
        raise Err("payload is not an order: it is empty; expected JSON like {\"order_id\": 42}")
    try:
        order = json.loads(payload)
    except ValueError as e:
        raise Err(f"payload is not an order: {e}")
    if not isinstance(order, dict) or not isinstance(order.get("order_id"), int):
        raise Err("payload is not an order: expected a JSON object with an integer \"order_id\"")
    return order


def call(method: str, url: str, headers):
    """One request to the order service; anything but a 2xx answer fails the run (and the
    job's retry policy tries again later)."""
    try:
        answer = request(method, url, headers)
    except HttpError as e:
        raise Err(f"cannot reach the order service: {e}")
    if not 200 <= answer.status < 300:
        raise Err(f"the order service answered {method} {url} with status {answer.status}")
    return answer
