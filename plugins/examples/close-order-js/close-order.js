// close-order in JavaScript: the classic delayed-task handler ("close order 42 in 30
// minutes unless it was paid"), the same behaviour as the Rust `close-order` (see its
// README).
//
// The payload is a JSON object such as {"order_id": 42}. The job's params are the order
// service's base URL (on the job's HTTP allow-list). The handler asks the service
// (GET {service}/orders/42, answered {"paid": true|false}) and, if the order is unpaid,
// closes it (POST {service}/orders/42/close, with `Authorization: Bearer <secret>` when
// the app has a secret ORDER_SERVICE_TOKEN). It remembers closed orders in the job's
// key-value state, so a retried run does not close an order twice. Without params it
// decides from the payload's `paid` field and only logs.
//
// `fetch` is componentize-js's, over `wasi:http/outgoing-handler`: Rota lets through only
// URLs on the job's allow-list. Throwing a string (or an Error) fails the run with it.
//
// Build: plugins/build.sh (componentize-js against plugins/wit, world `handler`).
import { get as kvGet, set as kvSet } from 'rota:plugin/kv@0.3.0';
import { get as secretGet } from 'rota:plugin/secrets@0.3.0';
import { write } from 'rota:plugin/log@0.3.0';

const info = (text) => write('info', text);

export async function run(input, context) {
  const order = parseOrder(new TextDecoder().decode(input));
  const id = order.order_id;
  const service = (context.params ?? '').trim().replace(/\/+$/, '');
  if (!service) {
    if (typeof order.paid !== 'boolean') {
      throw 'no order service (the job\'s params) and no "paid" field in the payload';
    }
    info(`order ${id} is ${order.paid ? 'paid: leaving it' : 'unpaid: closing it'}`);
    return;
  }
  const doneKey = `closed:${id}`;
  let done;
  try {
    done = kvGet(doneKey);
  } catch (e) {
    throw `cannot read this job's state: ${e.payload ?? e}`;
  }
  if (done !== undefined) {
    info(`order ${id} was closed already`);
    return;
  }
  const url = `${service}/orders/${id}`;
  const answer = await call('GET', url, {});
  let paid;
  try {
    paid = JSON.parse(answer.text).paid;
  } catch {
    paid = undefined;
  }
  if (paid === true) {
    info(`order ${id} is paid: leaving it`);
  } else if (paid === false) {
    let token;
    try {
      token = secretGet('ORDER_SERVICE_TOKEN');
    } catch (e) {
      throw `cannot read the service's token: ${e.payload ?? e}`;
    }
    await call('POST', `${url}/close`, token === undefined ? {} : { authorization: `Bearer ${token}` });
    try {
      kvSet(doneKey, new TextEncoder().encode('1'));
    } catch (e) {
      write('error', `closed, but cannot remember it: ${e.payload ?? e}`);
    }
    info(`order ${id} was unpaid: closed it`);
  } else {
    throw `the order service answered GET ${url} with ${JSON.stringify(answer.text)}, not {"paid": true|false}`;
  }
}

function parseOrder(text) {
  if (!text.trim()) {
    throw 'payload is not an order: it is empty; expected JSON like {"order_id": 42}';
  }
  let order;
  try {
    order = JSON.parse(text);
  } catch (e) {
    throw `payload is not an order: ${e.message}`;
  }
  if (order === null || typeof order !== 'object' || !Number.isInteger(order.order_id)) {
    throw 'payload is not an order: expected a JSON object with an integer "order_id"';
  }
  return order;
}

// One request to the order service; anything but a 2xx answer fails the run (and the
// job's retry policy tries again later).
async function call(method, url, headers) {
  let response;
  try {
    response = await fetch(url, { method, headers });
  } catch (e) {
    throw `cannot reach the order service: ${e.message ?? e}`;
  }
  const text = await response.text();
  if (!response.ok) {
    throw `the order service answered ${method} ${url} with status ${response.status}`;
  }
  return { status: response.status, text };
}
