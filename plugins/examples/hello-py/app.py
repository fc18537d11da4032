"""hello in Python: reads its input and writes one line to the run's log — what every
handler does at the least, and what the benchmarks run (docs/benchmarks.md).

Build: plugins/build.sh (componentize-py against plugins/wit, world `handler`).
"""

import wit_world
from wit_world.imports import invocation, log


class WitWorld(wit_world.WitWorld):
    def run(self, input: bytes, context: invocation.Context) -> str | None:
        name = input.decode("utf-8", errors="replace").strip() or "world"
        log.write(log.Level.INFO, f"hello, {name} (job {context.job_name}, attempt {context.attempt})")
