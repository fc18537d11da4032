#!/usr/bin/env bash
# Installs the toolchains plugins/build.sh needs, from the package registries only:
#   Debian (12+):
#     clang + lld + wasi-libc + libclang-rt-dev-wasm32  ->  clang --target=wasm32-wasi (C)
#     rustc + libstd-rust-dev-wasm32                    ->  /usr/bin/rustc --target wasm32-wasi
#     wabt                                              ->  wat2wasm, to check spin.wat
#     python3-venv, nodejs + npm                        ->  the two below
#   PyPI (requirements.txt, into plugins/.venv):
#     componentize-py                                   ->  Python handlers as components
#   npm (package.json + package-lock.json, into plugins/node_modules):
#     @bytecodealliance/componentize-js                 ->  JavaScript handlers as components
#     @bytecodealliance/jco                             ->  `jco new`: a preview 1 module made a
#                                                           command component (its adapter)
# (libclang-rt-dev-wasm32 holds the wasm32 compiler-rt builtins clang links every C
# program with; without it linking fails on libclang_rt.builtins-wasm32.a.)
# CI: plugins/install-toolchains.sh && plugins/build.sh
set -euo pipefail

packages=(clang lld wasi-libc libclang-rt-dev-wasm32 rustc libstd-rust-dev-wasm32 wabt python3-venv)
command -v npm >/dev/null 2>&1 || packages+=(nodejs npm)

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

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python3 -m venv "$here/.venv"
"$here/.venv/bin/pip" install --quiet --disable-pip-version-check -r "$here/requirements.txt"
(cd "$here" && npm ci --no-audit --no-fund --loglevel=error)
echo "toolchains ready: $("$here/.venv/bin/componentize-py" --version), componentize-js $("$here/node_modules/.bin/componentize-js" --version)"
