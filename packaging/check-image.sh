#!/usr/bin/env bash
# Checks Rota's container image where no container can start (SPEC §12, issue 38): builds
# it with packaging/build-image.sh (or takes TAG), copies its filesystem out with podman,
# and runs the image's own binary from that copy with chroot, as the image's user 65532:
#
#   1. the image's config: user 65532:65532, entrypoint /usr/local/bin/rota, ports 8080
#      and 9999; in its filesystem no shell, /var/lib/rota 65532's and 0700;
#   2. `rota --version`;
#   3. `rota standalone` on a free loopback port until GET /readyz answers 200, and
#      GET /healthz;
#   4. `rota plugin run` of the example plugins when built (hello.wasm, a module, and
#      hello.component.wasm, a component: ROTA_EXAMPLE_PLUGINS, default plugins/target),
#      else of web/e2e/hello.wat, which is always there;
#   5. a task through that standalone: the plugin uploaded, a job made for it, a task added
#      with the image's own `rota task add`, run by the embedded executor (which compiles
#      and logs under /var/lib/rota as 65532) until it succeeded.
# Prints each check; any failure exits non-zero with the last lines rota wrote.
#
#   packaging/check-image.sh [TAG]
#
#   TAG                 check this image; without it one is built from ROTA_BIN (default
#                       target/debug/rota) as localhost/rota:check and removed afterwards
#   ROTA_PODMAN_FLAGS   global podman flags (packaging/build-image.sh)
#
# Why not `podman run`: this check must pass where no container runtime can start (CI
# machines, this sandbox). What podman does here needs none: the build is FROM scratch
# with no RUN, `podman create` makes a container without starting it, and `podman export`
# streams its filesystem. Found to work as root on Debian 12 (podman 4.3.1, crun, overlay
# storage, no systemd) with podman's defaults: no --isolation, no --storage-driver.
# chroot gives the binary the image's filesystem as /, so it finds nothing of the host's:
# a missing library, certificate or permission fails here as it would in a container.
#
# Needs podman, curl and root (chroot). Missing one: exit 2 (scripts/test lists it as
# skipped); under CI=true that fails (exit 1).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rota_bin=${ROTA_BIN:-$root/target/debug/rota}
case "$rota_bin" in /*) ;; *) rota_bin=$(pwd)/$rota_bin ;; esac
cd "$root"
# shellcheck disable=SC2206 # word-split on purpose: several flags in one variable
podman_flags=(${ROTA_PODMAN_FLAGS:-})

missing() {
  if [ "${CI:-}" = true ]; then
    echo "check-image: $1 (CI=true: a missing prerequisite fails)" >&2
    exit 1
  fi
  echo "check-image: skipped: $1"
  exit 2
}
command -v podman >/dev/null 2>&1 || missing "no podman (apt-get install podman)"
command -v curl >/dev/null 2>&1 || missing "no curl (apt-get install curl)"
[ "$(id -u)" -eq 0 ] || missing "not root: chroot needs root"

say() { echo "check-image: $*"; }
fail() { echo "check-image: FAILED: $*" >&2; exit 1; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/rota-check-image.XXXXXX")
image=${1:-}
built=""
container=""
rota_pid=""
cleanup() {
  local status=$?
  trap - EXIT INT TERM
  if [ -n "$rota_pid" ] && kill -0 "$rota_pid" 2>/dev/null; then
    kill -TERM "$rota_pid" 2>/dev/null || true
    wait "$rota_pid" 2>/dev/null || true
  fi
  if [ "$status" -ne 0 ] && [ -f "$tmp/rota.log" ]; then
    echo "check-image: the last lines rota wrote:" >&2
    tail -n 20 "$tmp/rota.log" >&2 || true
  fi
  [ -n "$container" ] && podman "${podman_flags[@]}" rm --force "$container" >/dev/null 2>&1
  [ -n "$built" ] && podman "${podman_flags[@]}" rmi --force "$built" >/dev/null 2>&1
  rm -rf "$tmp"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [ -z "$image" ]; then
  [ -x "$rota_bin" ] || fail "no rota binary at $rota_bin (build it, or set ROTA_BIN)"
  image=localhost/rota:check
  built=$image
  ROTA_IMAGE=$image packaging/build-image.sh "$rota_bin"
fi

# 1. What the image says about itself, and what is (and is not) in it.
config=$(podman "${podman_flags[@]}" image inspect --format \
  'user={{.Config.User}} entrypoint={{.Config.Entrypoint}} ports={{.Config.ExposedPorts}}' "$image")
for want in "user=65532:65532" "entrypoint=[/usr/local/bin/rota]" "8080/tcp" "9999/tcp"; do
  [[ "$config" == *"$want"* ]] || fail "$image: expected $want in its config: $config"
done
say "ok: $image runs /usr/local/bin/rota as 65532:65532 and exposes 8080, 9999"

fs=$tmp/rootfs
mkdir -m 0755 "$fs"
container=$(podman "${podman_flags[@]}" create "$image")
# --numeric-owner: the image's uids as they are, not mapped through this host's names.
podman "${podman_flags[@]}" export "$container" | tar -x --numeric-owner -C "$fs"
shells=$(find "$fs" \( -name sh -o -name bash -o -name dash -o -name busybox \) -print)
[ -z "$shells" ] || fail "the image holds a shell: $shells"
data=$(stat -c '%u:%g %a' "$fs/var/lib/rota")
[ "$data" = "65532:65532 700" ] || fail "/var/lib/rota is $data, not 65532:65532 700"
say "ok: no shell in its filesystem ($(du -sh "$fs" | cut -f1)); /var/lib/rota is 65532's, 0700"

# The image's binary, with the image's filesystem as / and as its user, in an environment
# as bare as a container's. chroot by its path: env -i clears PATH before looking it up.
bare=(env -i HOME=/var/lib/rota PATH=/usr/local/bin ROTA_LOG="${ROTA_LOG:-warn}")
in_image=("$(command -v chroot)" --userspec=65532:65532 "$fs" /usr/local/bin/rota)

# 2. --version.
version=$("${bare[@]}" "${in_image[@]}" --version) || fail "rota --version failed in the image"
[[ "$version" == "rota "* ]] || fail "rota --version said: $version"
say "ok: $version"

# 3. A standalone node to ready. Port 0: the kernel picks a free port, rota prints its URL.
token="check-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
"${bare[@]}" ROTA_API_TOKEN="$token" "${in_image[@]}" standalone \
  --data-dir /var/lib/rota --listen 127.0.0.1:0 >"$tmp/rota.log" 2>&1 </dev/null &
rota_pid=$!
url=""
for _ in $(seq 1 300); do
  kill -0 "$rota_pid" 2>/dev/null || fail "rota standalone exited at start"
  url=$(grep -o -m1 'http://127\.0\.0\.1:[0-9]*' "$tmp/rota.log" 2>/dev/null || true)
  [ -n "$url" ] && break
  sleep 0.1
done
[ -n "$url" ] || fail "rota standalone printed no URL within 30 s"
ready=""
for _ in $(seq 1 300); do
  ready=$(curl -s -o /dev/null -w '%{http_code}' "$url/readyz" || true)
  [ "$ready" = 200 ] && break
  sleep 0.1
done
[ "$ready" = 200 ] || fail "GET $url/readyz answered ${ready:-nothing} within 30 s"
curl -fsS "$url/healthz" >/dev/null || fail "GET $url/healthz failed"
say "ok: rota standalone from the image: GET /readyz 200, GET /healthz 200 at $url"

# 4. Plugins run by `rota plugin run`, copied into the image's /tmp.
plugins_dir=${ROTA_EXAMPLE_PLUGINS:-plugins/target}
plugins=()
for name in hello.wasm hello.component.wasm; do
  [ -f "$plugins_dir/$name" ] && plugins+=("$plugins_dir/$name")
done
if [ ${#plugins[@]} -eq 0 ]; then
  say "example plugins not built in $plugins_dir (plugins/build.sh): using web/e2e/hello.wat"
  plugins=(web/e2e/hello.wat)
fi
for plugin in "${plugins[@]}"; do
  cp "$plugin" "$fs/tmp/"
  out=$("${bare[@]}" "${in_image[@]}" plugin run "/tmp/$(basename "$plugin")" --payload hi 2>&1) ||
    fail "rota plugin run $plugin: $out"
  [[ "$out" == *succeeded* ]] || fail "rota plugin run $plugin: $out"
  say "ok: rota plugin run $plugin: $(tail -n 1 <<<"$out")"
done

# 5. A task through the standalone, run by its embedded executor.
plugin=${plugins[0]}
api() { curl -fsS -H "Authorization: Bearer $token" "$@"; }
api --data-binary "@$plugin" "$url/api/v1/plugins?name=image-check" >/dev/null ||
  fail "uploading $plugin"
api -H 'content-type: application/json' "$url/api/v1/jobs" -d \
  '{"name": "image-check", "app": "default", "plugin": "image-check", "schedule": {"kind": "none"}}' \
  >/dev/null || fail "creating the job"
client=("${bare[@]}" ROTA_SERVER="$url" ROTA_API_TOKEN="$token" "${in_image[@]}")
added=$("${client[@]}" task add --job image-check --payload hi --json) ||
  fail "rota task add: $added"
id=$(grep -o '"id": *[0-9]*' <<<"$added" | head -n 1 | grep -o '[0-9]*$') ||
  fail "rota task add said no id: $added"
status=""
for _ in $(seq 1 300); do
  status=$("${client[@]}" task get "$id" --json |
    grep -o '"status": *"[a-z]*"' | head -n 1 | grep -o '[a-z]*"$' | tr -d '"') || true
  case "$status" in succeeded | dead | cancelled) break ;; esac
  sleep 0.1
done
[ "$status" = succeeded ] || fail "task $id is ${status:-unknown} after 30 s, not succeeded"
say "ok: task $id added with the image's rota CLI ran on its embedded executor: succeeded"
say "all checks passed for $image"
