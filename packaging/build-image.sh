#!/usr/bin/env bash
# Builds Rota's container image with podman from a binary built here (the Containerfile at
# the repository's top says what is in it and why): lays out its root filesystem with
# packaging/image-root.sh in a temporary directory, then `podman build` from it. Needs no
# container registry and starts no container (FROM scratch, no RUN).
#
#   packaging/build-image.sh [BINARY]
#
#   BINARY              default target/release/rota if built, else target/debug/rota
#                       (`cargo build --release -p rota` first for an image to ship: the
#                       debug binary is several times larger)
#   ROTA_IMAGE          the tag (default localhost/rota:dev)
#   ROTA_PODMAN_FLAGS   global podman flags, word-split: e.g. "--storage-driver vfs" where
#                       overlay storage cannot mount (podman inside a container). As root
#                       on Debian 12 with podman 4.3 and no systemd, the defaults work.
#
# Prints the image's tag and size. Push it with `podman push $ROTA_IMAGE REGISTRY/rota:TAG`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

binary=${1:-}
if [ -z "$binary" ]; then
  binary=$root/target/debug/rota
  [ -x "$root/target/release/rota" ] && binary=$root/target/release/rota
fi
image=${ROTA_IMAGE:-localhost/rota:dev}
# shellcheck disable=SC2206 # word-split on purpose: several flags in one variable
podman_flags=(${ROTA_PODMAN_FLAGS:-})

command -v podman >/dev/null 2>&1 || { echo "build-image: no podman (apt-get install podman)" >&2; exit 1; }

context=$(mktemp -d "${TMPDIR:-/tmp}/rota-image.XXXXXX")
trap 'rm -rf "$context"' EXIT
"$root/packaging/image-root.sh" "$binary" "$context"

# --pull=never: FROM scratch pulls nothing, and a registry must never be asked.
# --layers: the COPY layers are cached, so a rebuild with the same binary is quick.
podman "${podman_flags[@]}" build --quiet --pull=never --layers \
  --file "$root/Containerfile" --tag "$image" "$context" >/dev/null
size=$(podman "${podman_flags[@]}" image inspect --format '{{.Size}}' "$image")
echo "build-image: $image from $binary ($((size / 1048576)) MiB)"
