#!/usr/bin/env bash
# Runs the Go client's checks and tests against a real `rota standalone` (which the tests'
# TestMain starts on port 0 with a data directory of its own).
# ROTA_BIN: the rota binary (default: ../../target/debug/rota from here). Without it the
# tests that need a server are skipped, unless CI=true, where they fail.
# Extra arguments go to `go test` (e.g. ./run-tests.sh -run Consume -v).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [[ -n "${ROTA_BIN:-}" && "${ROTA_BIN}" != /* ]]; then
  ROTA_BIN="$(pwd)/${ROTA_BIN}"   # relative to the caller's directory
fi
export ROTA_BIN="${ROTA_BIN:-$here/../../target/debug/rota}"
cd "$here"

unformatted="$(gofmt -l .)"
if [[ -n "$unformatted" ]]; then
  echo "gofmt would change these files:" >&2
  echo "$unformatted" >&2
  exit 1
fi
go vet ./...
# -count=1: the tests start the rota binary, which go test's cache does not see change.
exec go test -count=1 "$@" ./...
