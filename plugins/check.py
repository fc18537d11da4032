#!/usr/bin/env python3
"""Checks that plugin modules keep Rota's plugin contract (plugins/README.md).

Usage: check.py FILE.wasm|FILE.wat ...   (build.sh runs it on everything it built)

Each file must be a WASI preview 1 *command* module: a core module (not a component)
that exports a `_start` function of type () -> () and a memory named `memory`, and
imports only functions, only from `wasi_snapshot_preview1` (only ones WASI preview 1
defines) and Rota's optional `rota` module (only its functions). Prints each module's imports and exports; exits 1 if any file fails. `.wat`
files are converted with `wat2wasm` (apt package wabt) when it is installed, else
skipped. Standard library only. The authoritative check is the scheduler's own, at
upload (422 naming the problem); this one catches a broken build early.
"""

import os
import shutil
import subprocess
import sys
import tempfile

WASI = "wasi_snapshot_preview1"
# Rota's optional host functions (executor/src/runtime/host.rs, plugins/README.md).
ROTA = "rota"
ROTA_FUNCS = {"http_request", "http_header", "secret_get", "kv_get", "kv_set", "kv_delete",
              "result_read", "output_set"}
WASI_P1_FUNCS = {
    "args_get", "args_sizes_get", "environ_get", "environ_sizes_get", "clock_res_get",
    "clock_time_get", "fd_advise", "fd_allocate", "fd_close", "fd_datasync",
    "fd_fdstat_get", "fd_fdstat_set_flags", "fd_fdstat_set_rights", "fd_filestat_get",
    "fd_filestat_set_size", "fd_filestat_set_times", "fd_pread", "fd_prestat_get",
    "fd_prestat_dir_name", "fd_pwrite", "fd_read", "fd_readdir", "fd_renumber", "fd_seek",
    "fd_sync", "fd_tell", "fd_write", "path_create_directory", "path_filestat_get",
    "path_filestat_set_times", "path_link", "path_open", "path_readlink",
    "path_remove_directory", "path_rename", "path_symlink", "path_unlink_file",
    "poll_oneoff", "proc_exit", "proc_raise", "sched_yield", "random_get", "sock_accept",
    "sock_recv", "sock_send", "sock_shutdown",
}
KINDS = {0: "func", 1: "table", 2: "memory", 3: "global", 4: "tag"}


class Bad(Exception):
    pass


class Reader:
    def __init__(self, data, pos=0, end=None):
        self.data, self.pos = data, pos
        self.end = len(data) if end is None else end

    def byte(self):
        if self.pos >= self.end:
            raise Bad("truncated module")
        b = self.data[self.pos]
        self.pos += 1
        return b

    def uleb(self):
        result = shift = 0
        while True:
            b = self.byte()
            result |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return result

    def name(self):
        n = self.uleb()
        if self.pos + n > self.end:
            raise Bad("truncated name")
        s = self.data[self.pos:self.pos + n].decode("utf-8", "replace")
        self.pos += n
        return s

    def limits(self):
        flags = self.byte()
        self.uleb()
        if flags & 1:
            self.uleb()


def check_module(data):
    """Returns (imports, exports, problems) of a binary module."""
    if data[:4] != b"\0asm":
        raise Bad("not a WebAssembly binary (no \\0asm magic)")
    if data[4:8] != b"\x01\x00\x00\x00":
        raise Bad("not a core module (a component? Rota runs WASI preview 1 core modules)")
    r = Reader(data, 8)
    types, func_types, imports, exports = [], [], [], []
    while r.pos < r.end:
        sid, size = r.byte(), r.uleb()
        s = Reader(data, r.pos, r.pos + size)
        r.pos += size
        if sid == 1:  # type
            for _ in range(s.uleb()):
                if s.byte() != 0x60:
                    types.append(None)  # not a plain function type (GC proposal)
                    break
                params = [s.byte() for _ in range(s.uleb())]
                results = [s.byte() for _ in range(s.uleb())]
                types.append((params, results))
        elif sid == 2:  # import
            for _ in range(s.uleb()):
                module, field, kind = s.name(), s.name(), s.byte()
                if kind == 0:
                    func_types.append(s.uleb())
                elif kind == 1:
                    s.byte()
                    s.limits()
                elif kind == 2:
                    s.limits()
                elif kind == 3:
                    s.byte()
                    s.byte()
                elif kind == 4:
                    s.byte()
                    s.uleb()
                else:
                    raise Bad("unknown import kind %d" % kind)
                imports.append((module, field, KINDS[kind]))
        elif sid == 3:  # function
            func_types.extend(s.uleb() for _ in range(s.uleb()))
        elif sid == 7:  # export
            for _ in range(s.uleb()):
                field, kind, index = s.name(), s.byte(), s.uleb()
                exports.append((field, KINDS.get(kind, "kind %d" % kind), index))

    problems = []
    for module, field, kind in imports:
        if module == ROTA:
            if kind != "func" or field not in ROTA_FUNCS:
                problems.append("imports `rota::%s`, which Rota does not provide (it has %s)"
                                % (field, ", ".join(sorted(ROTA_FUNCS))))
            continue
        if module != WASI:
            problems.append("imports `%s::%s`: only `%s` and `%s` are allowed"
                            % (module, field, WASI, ROTA))
        elif kind != "func":
            problems.append("imports a %s (`%s::%s`): only functions may be imported"
                            % (kind, module, field))
        elif field not in WASI_P1_FUNCS:
            problems.append("imports `%s::%s`, which WASI preview 1 does not define"
                            % (module, field))
    by_name = {field: (kind, index) for field, kind, index in exports}
    start = by_name.get("_start")
    if start is None:
        problems.append("no `_start` export: not a WASI command module")
    elif start[0] != "func":
        problems.append("`_start` is a %s export, not a function" % start[0])
    else:
        index = start[1]
        sig = types[func_types[index]] if index < len(func_types) and func_types[index] < len(types) else None
        if sig != ([], []):
            problems.append("`_start` is not a function of type () -> ()")
    memory = by_name.get("memory")
    if memory is None or memory[0] != "memory":
        problems.append("no memory exported as `memory`")
    return imports, exports, problems


def wat_to_wasm(path):
    tool = shutil.which("wat2wasm")
    if tool is None:
        return None
    fd, out = tempfile.mkstemp(suffix=".wasm")
    os.close(fd)
    try:
        proc = subprocess.run([tool, path, "-o", out], capture_output=True, text=True)
        if proc.returncode != 0:
            raise Bad("wat2wasm failed: " + proc.stderr.strip())
        with open(out, "rb") as f:
            return f.read()
    finally:
        os.unlink(out)


def main(paths):
    if not paths:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    failed = 0
    for path in paths:
        data = b""
        try:
            if path.endswith(".wat"):
                data = wat_to_wasm(path)
                if data is None:
                    print("%s: skipped (install wat2wasm, apt package wabt, to check .wat)" % path)
                    continue
            else:
                with open(path, "rb") as f:
                    data = f.read()
            imports, exports, problems = check_module(data)
        except (Bad, OSError) as e:
            imports, exports, problems = [], [], [str(e)]
        status = "FAIL" if problems else "ok"
        print("%s: %s (%d bytes)" % (path, status, len(data)))
        print("  imports: " + (", ".join("%s::%s" % (m, f) for m, f, _ in imports) or "(none)"))
        print("  exports: " + (", ".join("%s (%s)" % (f, k) for f, k, _ in exports) or "(none)"))
        for p in problems:
            print("  problem: " + p)
        failed += bool(problems)
    if failed:
        print("%d of %d plugin(s) break the plugin contract" % (failed, len(paths)), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
