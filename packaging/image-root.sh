#!/usr/bin/env bash
# Lays out the root filesystem of Rota's container image in DIR, from this machine: the
# Containerfile starts FROM scratch and copies DIR in (DIR is the build context), so the
# build needs no registry and no base image (issue 38).
#
#   packaging/image-root.sh BINARY DIR
#
# DIR must not exist or be empty. DIR/rootfs is the image's root filesystem, every file of
# it root's; DIR/var-lib holds what belongs to the service user (uid 65532), copied to
# /var/lib with --chown: COPY takes no owner from the context, and copies a directory's
# contents, so the data directory has to be the content of a directory of its own to be
# created with that owner and its mode. What the image gets:
#   /usr/local/bin/rota             BINARY
#   the shared libraries `ldd BINARY` names (glibc, libgcc_s, the loader), at those paths
#   /etc/passwd, /etc/group         root, and `rota` (uid and gid 65532) whose home is the
#                                   data directory; no login shell (there is no shell)
#   /etc/nsswitch.conf              files then DNS, for glibc's getaddrinfo (database hosts)
#   /etc/ssl/certs/ca-certificates.crt   this machine's CA bundle (Debian ca-certificates):
#                                   public HTTPS for plugins, webhooks and alarm channels
#   /var/lib/rota                   the data directory, 0700 (DIR/var-lib/rota)
#   /tmp                            1777, as everywhere
# Ownership is left to the Containerfile's COPY, so this runs the same as root or not.
set -euo pipefail

[ $# -eq 2 ] || { echo "usage: $0 BINARY DIR" >&2; exit 64; }
binary=$1
dir=$2
[ -x "$binary" ] || { echo "image-root: no executable at $binary" >&2; exit 1; }
if [ -e "$dir" ] && [ -n "$(ls -A "$dir")" ]; then
  echo "image-root: $dir is not empty" >&2
  exit 1
fi
certs=/etc/ssl/certs/ca-certificates.crt
[ -s "$certs" ] || { echo "image-root: no CA bundle at $certs (apt-get install ca-certificates)" >&2; exit 1; }

root=$dir/rootfs
mkdir -p "$root"/usr/local/bin "$root"/etc/ssl/certs "$root"/var/lib "$root"/tmp "$dir"/var-lib/rota
chmod 0755 "$root"
install -m 0755 "$binary" "$root"/usr/local/bin/rota

# `ldd` lines: "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x…)" and the loader as
# "/lib64/ld-linux-x86-64.so.2 (0x…)"; the vDSO has no file. Each is copied to the path
# the binary asks for, its symlinks followed (-L), so the loader finds it where it looks.
# A static binary ("not a dynamic executable") needs none. A library not found fails.
ldd_out=$(ldd "$binary" 2>&1 || true)
if grep -q "not found" <<<"$ldd_out"; then
  echo "image-root: $binary needs libraries this machine lacks:" >&2
  echo "$ldd_out" >&2
  exit 1
fi
libs=$(awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' <<<"$ldd_out")
for lib in $libs; do
  mkdir -p "$root$(dirname "$lib")"
  cp -L "$lib" "$root$lib"
done

cat >"$root"/etc/passwd <<'EOF'
root:x:0:0:root:/root:/sbin/nologin
rota:x:65532:65532:rota:/var/lib/rota:/sbin/nologin
EOF
cat >"$root"/etc/group <<'EOF'
root:x:0:
rota:x:65532:
EOF
cat >"$root"/etc/nsswitch.conf <<'EOF'
passwd: files
group: files
hosts: files dns
EOF
cp -L "$certs" "$root$certs"
chmod 0644 "$root"/etc/passwd "$root"/etc/group "$root"/etc/nsswitch.conf "$root$certs"
chmod 0700 "$dir"/var-lib/rota
chmod 1777 "$root"/tmp

echo "image-root: $dir: rota and $(wc -w <<<"$libs") libraries ($(du -sh "$dir" | cut -f1))"
