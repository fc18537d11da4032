// order-pipeline in JavaScript: the steps of a small workflow (SPEC §10) that takes an
// order's lines, charges each one, and then either tells the customer or, when a charge
// failed, refunds the ones that went through. `workflow.json` beside this file wires the
// steps; README's "Use it" runs it.
//
//   fetch ──▶ charge (one task per line: a map) ──▶ notify          (all succeeded)
//                                              └──▶ refund          (any failed)
//
// One plugin, four jobs' worth of behaviour: each step's params name what it does
// (`fetch`, `charge`, `notify`, `refund`). Every step reads the workflow payload Rota gives
// it — {"input": the instance's input, "steps": {"<step>": its output, …}} and, in an
// element of a map, "item" and "index" — and returns its own output (rota:plugin 0.2:
// `run` returns a string, here JSON), which the steps after it receive.
//
// The instance's input is an order: {"order_id": 42, "lines": [{"sku": "tea",
// "amount": 450}, …]} (amounts in cents). A line that cannot be charged — an amount that
// is not a positive integer, or above the order's `limit` when it has one — fails its
// element, which fails `charge` and sends the workflow down the refund branch.
//
// Build: plugins/build.sh (componentize-js against plugins/wit, world `handler`).
import { write } from 'rota:plugin/log@0.3.0';

const info = (text) => write('info', text);

export function run(input, context) {
  const payload = parseJson(new TextDecoder().decode(input));
  const order = payload.input ?? {};
  const action = (context.params ?? '').trim();
  return JSON.stringify(act(action, order, payload));
}

function act(action, order, payload) {
  switch (action) {
    case 'fetch':
      return fetchLines(order);
    case 'charge':
      return charge(order, payload.item, payload.index);
    case 'notify':
      return notify(order, payload.steps?.charge ?? []);
    case 'refund':
      return refund(order, payload.steps?.charge ?? []);
    default:
      throw `unknown step "${action}": the step's params must be fetch, charge, notify or refund`;
  }
}

// The lines to charge, one element each for the map after this step.
function fetchLines(order) {
  if (!Number.isInteger(order.order_id) || !Array.isArray(order.lines) || order.lines.length === 0) {
    throw 'the input is not an order: expected {"order_id": 42, "lines": [{"sku": "tea", "amount": 450}]}';
  }
  info(`order ${order.order_id}: ${order.lines.length} lines to charge`);
  return order.lines.map((line) => ({ order_id: order.order_id, sku: String(line.sku), amount: line.amount }));
}

function charge(order, line, index) {
  if (line === undefined) {
    throw 'charge runs as a map over fetch\'s lines ("map": true): it got no element';
  }
  if (!Number.isInteger(line.amount) || line.amount <= 0) {
    throw `line ${index} (${line.sku}): cannot charge ${JSON.stringify(line.amount)}, not a positive amount in cents`;
  }
  if (Number.isInteger(order.limit) && line.amount > order.limit) {
    throw `line ${index} (${line.sku}): ${line.amount} is over the order's limit of ${order.limit}`;
  }
  info(`order ${line.order_id}: charged ${line.amount} for ${line.sku}`);
  return { sku: line.sku, amount: line.amount, charge_id: `ch_${line.order_id}_${index}` };
}

function notify(order, charges) {
  const total = charges.reduce((sum, c) => sum + c.amount, 0);
  info(`order ${order.order_id}: the customer is told ${total} was charged`);
  return { order_id: order.order_id, charged: total, lines: charges.length };
}

// Undoes the charges that went through (a failed element's output is null).
function refund(order, charges) {
  const refunded = charges.filter((c) => c !== null).map((c) => c.charge_id);
  info(`order ${order.order_id}: refunded ${refunded.length} charges`);
  return { order_id: order.order_id, refunded };
}

function parseJson(text) {
  try {
    return JSON.parse(text);
  } catch (e) {
    throw `the payload is not a workflow step's JSON: ${e.message}`;
  }
}
