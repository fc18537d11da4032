#!/usr/bin/env bash
# Build the XXL-JOB test executor against one xxl-job-core version.
#
#   build.sh VERSION [OUT_DIR]      VERSION: 2.5.0 or 3.3.2 (any published xxl-job-core version may work)
#
# Produces OUT_DIR (default: <this dir>/target/VERSION) containing
#   xxl-test-executor.jar   this project's classes
#   lib/*.jar               runtime dependencies (xxl-job-core VERSION, netty, gson, slf4j-simple, ...)
#   classpath.txt           the absolute classpath, one line
#   run                     exec java -cp ... rota.testkit.XxlTestExecutor "$@"
#   .stamp                  inputs hash; a later call with the same inputs does nothing
# The Maven build directory is <this dir>/target/build-VERSION, so versions coexist.
# Maven is tried offline first (-o) and only goes online when that fails (first run, new version).
# Environment: MVN (default mvn), MVN_ARGS (extra Maven arguments, e.g. -Dmaven.repo.local=...).
set -euo pipefail

if [ $# -lt 1 ] || [ $# -gt 2 ] || [ -z "$1" ]; then
    echo "usage: $0 VERSION [OUT_DIR]" >&2
    exit 2
fi
VERSION=$1
case "$VERSION" in
    *[!0-9A-Za-z.-]*) echo "build.sh: bad version: $VERSION" >&2; exit 2 ;;
esac

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
OUT=${2:-$HERE/target/$VERSION}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
BUILD_DIR=$HERE/target/build-$VERSION
MVN=${MVN:-mvn}
read -r -a EXTRA <<<"${MVN_ARGS:-}"

# One build per version at a time (tests may call this concurrently).
mkdir -p "$HERE/target"
if command -v flock >/dev/null 2>&1; then
    exec 9>"$HERE/target/.lock-$VERSION"
    flock 9
fi

stamp=$(
    {
        echo "version=$VERSION"
        cd "$HERE"
        sha256sum pom.xml build.sh
        find src -type f -print0 | sort -z | xargs -0 sha256sum
    } | sha256sum | cut -d' ' -f1
)
if [ -x "$OUT/run" ] && [ -f "$OUT/.stamp" ] && [ "$(cat "$OUT/.stamp")" = "$stamp" ] \
    && [ -f "$OUT/xxl-test-executor.jar" ]; then
    echo "build.sh: $OUT is up to date (xxl-job-core $VERSION)" >&2
    exit 0
fi

rm -f "$OUT/.stamp"
rm -rf "$OUT/lib"

mvn_build() {
    "$MVN" -q -B -Dstyle.color=never "$@" "${EXTRA[@]}" -f "$HERE/pom.xml" \
        -Dxxl.version="$VERSION" -Dxxl.build.dir="$BUILD_DIR" \
        -Dxxl.lib.dir="$OUT/lib" \
        clean package dependency:copy-dependencies
}

# Maven's output is kept in a file and shown only on failure (Debian's Maven 3.8 prints stray
# ANSI resets even with -B, which would otherwise land on our stdout).
log=$(mktemp)
trap 'rm -f "$log"' EXIT
show_log() { sed 's/\x1b\[[0-9;]*m//g' "$log" | grep -v '^[[:space:]]*$' >&2 || true; }
if ! mvn_build -o >"$log" 2>&1; then
    echo "build.sh: offline build failed, retrying online (downloads xxl-job-core $VERSION and plugins)" >&2
    rm -rf "$OUT/lib"
    if ! mvn_build >"$log" 2>&1; then
        show_log
        echo "build.sh: maven build of xxl-job-core $VERSION failed" >&2
        exit 1
    fi
fi

cp "$BUILD_DIR/xxl-test-executor.jar" "$OUT/xxl-test-executor.jar"
{
    printf '%s' "$OUT/xxl-test-executor.jar"
    for j in "$OUT"/lib/*.jar; do printf ':%s' "$j"; done
    echo
} >"$OUT/classpath.txt"

cat >"$OUT/run" <<'RUN'
#!/bin/sh
# Start the XXL-JOB test executor; flags are documented in README.md (or pass --help).
here=$(cd "$(dirname "$0")" && pwd)
if [ -n "${JAVA_HOME:-}" ] && [ -x "$JAVA_HOME/bin/java" ]; then java="$JAVA_HOME/bin/java"; else java=java; fi
# shellcheck disable=SC2086
exec "$java" ${XXL_EXECUTOR_JAVA_OPTS:-} -cp "$here/xxl-test-executor.jar:$here/lib/*" rota.testkit.XxlTestExecutor "$@"
RUN
chmod +x "$OUT/run"
echo "$VERSION" >"$OUT/xxl.version"
echo "$stamp" >"$OUT/.stamp"
echo "build.sh: built xxl-job-core $VERSION into $OUT" >&2
