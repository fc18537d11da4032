#!/usr/bin/env bash
# Runs the Python client's tests against a real `rota standalone`.
# ROTA_BIN: the rota binary (default: ../../target/debug/rota from here).
# Extra arguments go to pytest (e.g. ./run-tests.sh -k consume -x).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [[ -n "${ROTA_BIN:-}" && "${ROTA_BIN}" != /* ]]; then
  ROTA_BIN="$(pwd)/${ROTA_BIN}"   # relative to the caller's directory
fi
export ROTA_BIN="${ROTA_BIN:-$here/../../target/debug/rota}"
cd "$here"

PYTHON="${PYTHON:-python3}"
if [[ ! -x .venv/bin/python ]]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
exec .venv/bin/python -m pytest -q "$@"
