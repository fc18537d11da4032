#!/usr/bin/env bash
# Builds every example plugin into plugins/target/ and checks each keeps the plugin
# contract (plugins/check.py):
#   target/hello.wasm, target/close-order.wasm   Rust, Debian's /usr/bin/rustc --target wasm32-wasi
#   target/echo.wasm                             C, clang --target=wasm32-wasi
#   target/spin.wat                              WAT, copied as is (Rota compiles .wat at upload)
#
# Toolchains: plugins/install-toolchains.sh (Debian packages). Overrides:
#   WASM_RUSTC=...    a rustc with the wasm32 WASI std (default /usr/bin/rustc, NOT the
#                     rustup one on PATH, which has no wasm32 target here)
#   WASM_TARGET=...   its target name (default: wasm32-wasip1 if it knows it, else wasm32-wasi)
#   WASM_CC=...       a clang with a WASI sysroot (default clang)
#   WASI_SYSROOT=...  passed as --sysroot (default: none; /usr/share/wasi-sysroot if present)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="$here/target"
install_hint="run: apt-get install -y clang lld wasi-libc libclang-rt-dev-wasm32 rustc libstd-rust-dev-wasm32 (or plugins/install-toolchains.sh)"

die() {
    echo "build.sh: $*" >&2
    exit 1
}

rustc="${WASM_RUSTC:-/usr/bin/rustc}"
cc="${WASM_CC:-clang}"
sysroot="${WASI_SYSROOT:-}"
if [ -z "$sysroot" ] && [ -d /usr/share/wasi-sysroot ]; then
    sysroot=/usr/share/wasi-sysroot
fi
cc_flags=(--target=wasm32-wasi -O2 -Wall -Wextra -Wl,--strip-all)
if [ -n "$sysroot" ]; then
    cc_flags+=("--sysroot=$sysroot")
fi

mkdir -p "$out"
probe="$(mktemp -d)"
trap 'rm -rf "$probe"' EXIT

# --- toolchain checks: fail early, with the fix -------------------------------------
[ -x "$rustc" ] || command -v "$rustc" >/dev/null 2>&1 ||
    die "no rustc at $rustc (Debian's, with the wasm32 WASI std); $install_hint"
if [ -z "${WASM_TARGET:-}" ]; then
    if "$rustc" --print target-list 2>/dev/null | grep -qx wasm32-wasip1; then
        WASM_TARGET=wasm32-wasip1
    else
        WASM_TARGET=wasm32-wasi
    fi
fi
echo 'fn main() {}' >"$probe/probe.rs"
"$rustc" --target "$WASM_TARGET" --edition 2021 -o "$probe/probe.wasm" "$probe/probe.rs" \
    >"$probe/rustc.log" 2>&1 || {
    cat "$probe/rustc.log" >&2
    die "$rustc cannot build for $WASM_TARGET (no wasm32 std: for Debian's rustc install libstd-rust-dev-wasm32, for rustup run rustup target add $WASM_TARGET); $install_hint"
}
command -v "$cc" >/dev/null 2>&1 || die "no C compiler '$cc'; $install_hint"
echo 'int main(void) { return 0; }' >"$probe/probe.c"
"$cc" "${cc_flags[@]}" -o "$probe/probe-c.wasm" "$probe/probe.c" >"$probe/cc.log" 2>&1 || {
    cat "$probe/cc.log" >&2
    die "$cc cannot build for wasm32-wasi (needs lld, wasi-libc and libclang-rt-dev-wasm32); $install_hint"
}

# --- the examples ---------------------------------------------------------------------
build_rust() { # name: examples/<name>/main.rs -> target/<name>.wasm
    echo "rust  examples/$1 -> target/$1.wasm"
    "$rustc" --target "$WASM_TARGET" --edition 2021 -O -C panic=abort -C strip=symbols \
        --crate-name "${1//-/_}" -o "$out/$1.wasm" "$here/examples/$1/main.rs"
}
build_c() { # name: examples/<name>/<name>.c -> target/<name>.wasm
    echo "c     examples/$1 -> target/$1.wasm"
    "$cc" "${cc_flags[@]}" -I "$here/sdk/c" -o "$out/$1.wasm" "$here/examples/$1/$1.c"
}
copy_wat() { # name: examples/<name>/<name>.wat -> target/<name>.wat
    echo "wat   examples/$1 -> target/$1.wat"
    cp "$here/examples/$1/$1.wat" "$out/$1.wat"
}

build_rust hello
build_rust close-order
build_c echo
copy_wat spin

# --- check the plugin contract ----------------------------------------------------------
if command -v python3 >/dev/null 2>&1; then
    python3 "$here/check.py" "$out/hello.wasm" "$out/close-order.wasm" "$out/echo.wasm" "$out/spin.wat"
else
    echo "build.sh: python3 not found; skipped the plugin contract check (plugins/check.py)" >&2
fi
echo "built into $out"
