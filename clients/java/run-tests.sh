#!/usr/bin/env bash
# Runs the Java client's tests against a real `rota standalone` (started by the tests).
# ROTA_BIN: the rota binary (default: ../../target/debug/rota from here). Without it the
# server tests are skipped, unless CI=true, where they fail.
# Extra arguments go to Maven (e.g. ./run-tests.sh -Dtest=ConsumeTest, or -o offline).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [[ -n "${ROTA_BIN:-}" && "${ROTA_BIN}" != /* ]]; then
  ROTA_BIN="$(pwd)/${ROTA_BIN}"   # relative to the caller's directory
fi
export ROTA_BIN="${ROTA_BIN:-$here/../../target/debug/rota}"
cd "$here"
if [[ ! -x "$ROTA_BIN" ]]; then
  echo "run-tests.sh: no rota binary at $ROTA_BIN: the tests against a server will be" \
    "$([[ "${CI:-}" == true ]] && echo failed || echo skipped) (set ROTA_BIN)" >&2
fi

reports=target/surefire-reports
rm -rf "$reports"   # so that the summary below counts this run only
status=0
"${MVN:-mvn}" -q -B test "$@" || status=$?

# `-q` hides Surefire's closing line on success: print it from the reports.
if compgen -G "$reports/TEST-*.xml" > /dev/null; then
  totals=(0 0 0 0)
  for report in "$reports"/TEST-*.xml; do
    suite="$(grep -o '<testsuite [^>]*' "$report" | head -n 1)"
    i=0
    for attr in tests failures errors skipped; do
      n="$(sed -n "s/.* ${attr}=\"\([0-9]*\)\".*/\1/p" <<< "$suite")"
      totals[i]=$(( totals[i] + ${n:-0} ))
      i=$(( i + 1 ))
    done
  done
  echo; echo "Tests run: ${totals[0]}, Failures: ${totals[1]}, Errors: ${totals[2]}, Skipped: ${totals[3]}"
fi
exit "$status"
