#!/usr/bin/env bash
# Builds every example plugin into plugins/target/ and checks each keeps the plugin
# contract (plugins/check.py checks the preview 1 modules; Rota checks components at upload):
#   target/hello.wasm, target/close-order.wasm   Rust, Debian's /usr/bin/rustc --target wasm32-wasi
#   target/echo.wasm, target/hello-c.wasm        C, clang --target=wasm32-wasi
#   target/spin.wat                              WAT, copied as is (Rota compiles .wat at upload)
#   target/hello.component.wasm                  hello made a wasi:cli command component (jco new)
#   target/echo.component.wasm                   echo, likewise
#   target/hello-c.component.wasm                hello-c, likewise
#   target/hello-py.wasm, target/close-order-py.wasm   Python handlers (componentize-py)
#   target/hello-js.wasm, target/close-order-js.wasm   JavaScript handlers (componentize-js)
#   target/order-pipeline.wasm                   a workflow's steps in JavaScript (0.1.1: outputs)
# The handlers are components of the rota:plugin/handler world (plugins/wit).
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
install_hint="run: plugins/install-toolchains.sh (Debian's clang, rustc and wasm std; componentize-py from PyPI; componentize-js and jco from npm)"

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

py="$here/.venv/bin/componentize-py"
cjs="$here/node_modules/.bin/componentize-js"
jco="$here/node_modules/.bin/jco"
[ -x "$py" ] || die "no componentize-py in plugins/.venv; $install_hint"
[ -x "$cjs" ] && [ -x "$jco" ] || die "no componentize-js or jco in plugins/node_modules; $install_hint"

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

command_component() { # name: target/<name>.wasm -> target/<name>.component.wasm
    echo "jco   target/$1.wasm -> target/$1.component.wasm"
    "$jco" new "$out/$1.wasm" --wasi-command -o "$out/$1.component.wasm" >/dev/null
}
build_py() { # name: examples/<name>/app.py -> target/<name>.wasm
    echo "py    examples/$1 -> target/$1.wasm"
    "$py" -d "$here/wit" -w handler componentize -p "$here/sdk/python" -p "$here/examples/$1" \
        app -o "$out/$1.wasm" >/dev/null
}
build_js() { # name, file: examples/<name>/<file> -> target/<name>.wasm
    echo "js    examples/$1 -> target/$1.wasm"
    # componentize-js reads the WIT through a WASI sandbox: relative paths, from here.
    (cd "$here" && "$cjs" --wit wit --world-name handler -o "$out/$1.wasm" "examples/$1/$2" >/dev/null)
}

build_rust hello
build_rust close-order
build_c echo
build_c hello-c
copy_wat spin
command_component hello
command_component echo
command_component hello-c
build_py hello-py
build_py close-order-py
build_js hello-js hello.js
build_js close-order-js close-order.js
build_js order-pipeline pipeline.js

# --- check the plugin contract ----------------------------------------------------------
if command -v python3 >/dev/null 2>&1; then
    python3 "$here/check.py" "$out/hello.wasm" "$out/close-order.wasm" "$out/echo.wasm" "$out/hello-c.wasm" "$out/spin.wat"
else
    echo "build.sh: python3 not found; skipped the plugin contract check (plugins/check.py)" >&2
fi
echo "built into $out"
