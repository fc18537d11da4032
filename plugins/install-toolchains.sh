#!/usr/bin/env bash
# Installs the toolchains plugins/build.sh needs, from Debian's (12+) own packages:
#   clang + lld + wasi-libc + libclang-rt-dev-wasm32  ->  clang --target=wasm32-wasi (C)
#   rustc + libstd-rust-dev-wasm32                    ->  /usr/bin/rustc --target wasm32-wasi
#   wabt                                              ->  wat2wasm, to check spin.wat
# (libclang-rt-dev-wasm32 holds the wasm32 compiler-rt builtins clang links every C
# program with; without it linking fails on libclang_rt.builtins-wasm32.a.)
# CI: plugins/install-toolchains.sh && plugins/build.sh
set -euo pipefail

packages=(clang lld wasi-libc libclang-rt-dev-wasm32 rustc libstd-rust-dev-wasm32 wabt)

sudo=()
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
        sudo=(sudo)
    else
        echo "install-toolchains.sh: run as root (or install sudo)" >&2
        exit 1
    fi
fi

export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update
"${sudo[@]}" apt-get install -y "${packages[@]}"
