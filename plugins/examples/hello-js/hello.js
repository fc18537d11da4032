// hello in JavaScript: reads its input and writes one line to the run's log — what every
// handler does at the least, and what the benchmarks run (docs/benchmarks.md).
//
// Build: plugins/build.sh (componentize-js against plugins/wit, world `handler`).
import { write } from 'rota:plugin/log@0.3.0';

export function run(input, context) {
  const name = new TextDecoder().decode(input).trim() || 'world';
  write('info', `hello, ${name} (job ${context.jobName}, attempt ${context.attempt})`);
}
