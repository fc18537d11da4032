//! `.wat` plugin fixtures shared by the executor's integration tests.
#![allow(dead_code)]

use sha2::{Digest, Sha256};

/// `$write (fd ptr len)`: one `fd_write` of a buffer (scratch memory at 0..16).
macro_rules! write_fn {
    () => {
        r#"
  (func $write (param $fd i32) (param $ptr i32) (param $len i32)
    (i32.store (i32.const 0) (local.get $ptr))
    (i32.store (i32.const 4) (local.get $len))
    (drop (call $fd_write (local.get $fd) (i32.const 0) (i32.const 1) (i32.const 8))))
"#
    };
}

/// The WASI imports and helpers every fixture may use:
/// `$write (fd ptr len)`, `$print_num (n)` (decimal + newline on stdout),
/// `$print_cstrs (count ptrs)` (NUL-terminated strings, one per line).
/// Memory map: 0..64 scratch, 1024.. data, 4096.. pointer arrays, 16384.. string buffers.
const PRELUDE: &str = concat!(
    r#"
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_read" (func $fd_read (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $proc_exit (param i32)))
  (import "wasi_snapshot_preview1" "args_sizes_get" (func $args_sizes_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "args_get" (func $args_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "environ_sizes_get" (func $environ_sizes_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "environ_get" (func $environ_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "path_open" (func $path_open (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_prestat_get" (func $fd_prestat_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "poll_oneoff" (func $poll_oneoff (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "sock_accept" (func $sock_accept (param i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "sock_send" (func $sock_send (param i32 i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "sock_recv" (func $sock_recv (param i32 i32 i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
"#,
    write_fn!(),
    r#"
  (func $print_num (param $n i32) (local $p i32)
    (local.set $p (i32.const 63))
    (i32.store8 (i32.const 63) (i32.const 10))
    (loop $digits
      (local.set $p (i32.sub (local.get $p) (i32.const 1)))
      (i32.store8 (local.get $p)
        (i32.add (i32.const 48) (i32.rem_u (local.get $n) (i32.const 10))))
      (local.set $n (i32.div_u (local.get $n) (i32.const 10)))
      (br_if $digits (local.get $n)))
    (call $write (i32.const 1) (local.get $p) (i32.sub (i32.const 64) (local.get $p))))
  (func $print_cstrs (param $count i32) (param $ptrs i32) (local $i i32) (local $s i32) (local $len i32)
    (block $done
      (loop $each
        (br_if $done (i32.ge_u (local.get $i) (local.get $count)))
        (local.set $s (i32.load (i32.add (local.get $ptrs) (i32.shl (local.get $i) (i32.const 2)))))
        (local.set $len (i32.const 0))
        (block $end
          (loop $scan
            (br_if $end (i32.eqz (i32.load8_u (i32.add (local.get $s) (local.get $len)))))
            (local.set $len (i32.add (local.get $len) (i32.const 1)))
            (br $scan)))
        (i32.store8 (i32.add (local.get $s) (local.get $len)) (i32.const 10))
        (call $write (i32.const 1) (local.get $s) (i32.add (local.get $len) (i32.const 1)))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $each))))
"#
);

/// A module with the prelude and `body` (data segments and an exported `_start`).
pub fn plugin(body: &str) -> String {
    format!("(module {PRELUDE} {body})")
}

/// Writes `hello`, `world` to stdout and `to stderr` to stderr, then returns.
pub fn hello() -> String {
    plugin(
        r#"
        (data (i32.const 1024) "hello\nworld\n")
        (data (i32.const 1100) "to stderr\n")
        (func (export "_start")
          (call $write (i32.const 1) (i32.const 1024) (i32.const 12))
          (call $write (i32.const 2) (i32.const 1100) (i32.const 10)))
        "#,
    )
}

/// Copies stdin to stdout.
pub fn echo() -> String {
    plugin(
        r#"
        (func (export "_start") (local $n i32)
          (loop $more
            (i32.store (i32.const 32) (i32.const 16384))
            (i32.store (i32.const 36) (i32.const 4096))
            (if (call $fd_read (i32.const 0) (i32.const 32) (i32.const 1) (i32.const 40))
              (then (call $proc_exit (i32.const 2))))
            (local.set $n (i32.load (i32.const 40)))
            (if (local.get $n)
              (then
                (call $write (i32.const 1) (i32.const 16384) (local.get $n))
                (br $more)))))
        "#,
    )
}

/// Prints `argv`, each argument, `env`, each `NAME=value`, one per line.
pub fn contract() -> String {
    plugin(
        r#"
        (data (i32.const 1024) "argv\n")
        (data (i32.const 1032) "env\n")
        (func (export "_start")
          (call $write (i32.const 1) (i32.const 1024) (i32.const 5))
          (drop (call $args_sizes_get (i32.const 16) (i32.const 20)))
          (drop (call $args_get (i32.const 4096) (i32.const 16384)))
          (call $print_cstrs (i32.load (i32.const 16)) (i32.const 4096))
          (call $write (i32.const 1) (i32.const 1032) (i32.const 4))
          (drop (call $environ_sizes_get (i32.const 16) (i32.const 20)))
          (drop (call $environ_get (i32.const 8192) (i32.const 32768)))
          (call $print_cstrs (i32.load (i32.const 16)) (i32.const 8192)))
        "#,
    )
}

/// Spins forever.
pub fn forever() -> String {
    plugin(r#"(func (export "_start") (loop $spin (br $spin)))"#)
}

/// Sleeps 10 s in one host call (`poll_oneoff` on the monotonic clock).
pub fn sleeper() -> String {
    plugin(
        r#"
        (func (export "_start")
          (i64.store (i32.const 1024) (i64.const 0))
          (i32.store8 (i32.const 1032) (i32.const 0))
          (i32.store (i32.const 1040) (i32.const 1))
          (i64.store (i32.const 1048) (i64.const 10000000000))
          (i64.store (i32.const 1056) (i64.const 0))
          (i32.store16 (i32.const 1064) (i32.const 0))
          (call $print_num (call $poll_oneoff (i32.const 1024) (i32.const 2048) (i32.const 1) (i32.const 3000))))
        "#,
    )
}

/// Grows memory 1 MiB at a time, forever.
pub fn memory_bomb() -> String {
    plugin(
        r#"(func (export "_start")
             (loop $grow (drop (memory.grow (i32.const 16))) (br $grow)))"#,
    )
}

/// Tries to reach the file system: prints the errno of `fd_prestat_get(3)` (is there a
/// preopened directory?) and of `path_open(3, "/etc/passwd")`.
pub fn file_opener() -> String {
    plugin(
        r#"
        (data (i32.const 1024) "/etc/passwd")
        (func (export "_start")
          (call $print_num (call $fd_prestat_get (i32.const 3) (i32.const 2048)))
          (call $print_num
            (call $path_open (i32.const 3) (i32.const 0) (i32.const 1024) (i32.const 11)
              (i32.const 0) (i64.const 2) (i64.const 0) (i32.const 0) (i32.const 2048))))
        "#,
    )
}

/// Tries the only socket calls WASI preview 1 has (there is no `socket` or `connect`):
/// `sock_accept` on descriptors 0..8 (a host could have handed over a listening socket),
/// then `sock_send` and `sock_recv` on descriptor 3; prints each errno, one per line.
pub fn socket_user() -> String {
    plugin(
        r#"
        (data (i32.const 1100) "ping")
        (func (export "_start") (local $fd i32)
          (loop $each
            (call $print_num (call $sock_accept (local.get $fd) (i32.const 0) (i32.const 2048)))
            (local.set $fd (i32.add (local.get $fd) (i32.const 1)))
            (br_if $each (i32.lt_u (local.get $fd) (i32.const 8))))
          (i32.store (i32.const 1024) (i32.const 1100))
          (i32.store (i32.const 1028) (i32.const 4))
          (call $print_num
            (call $sock_send (i32.const 3) (i32.const 1024) (i32.const 1) (i32.const 0) (i32.const 2048)))
          (call $print_num
            (call $sock_recv (i32.const 3) (i32.const 1024) (i32.const 1) (i32.const 0)
              (i32.const 2048) (i32.const 2052))))
        "#,
    )
}

/// Exits with status 3 after a line.
pub fn exit3() -> String {
    plugin(
        r#"
        (data (i32.const 1024) "bye\n")
        (func (export "_start")
          (call $write (i32.const 1) (i32.const 1024) (i32.const 4))
          (call $proc_exit (i32.const 3)))
        "#,
    )
}

/// Traps (`unreachable`).
pub fn trap() -> String {
    plugin(r#"(func (export "_start") unreachable)"#)
}

/// Writes `lines` lines of 99 characters plus a newline.
pub fn chatty(lines: u32) -> String {
    plugin(&format!(
        r#"
        (data (i32.const 1024) "{}\n")
        (func (export "_start") (local $i i32)
          (loop $line
            (call $write (i32.const 1) (i32.const 1024) (i32.const 100))
            (local.set $i (i32.add (local.get $i) (i32.const 1)))
            (br_if $line (i32.lt_u (local.get $i) (i32.const {lines})))))
        "#,
        "x".repeat(99)
    ))
}

/// The binary module and its SHA-256 for a wat fixture.
pub fn compiled(wat: &str) -> (Vec<u8>, String) {
    let wasm = wat::parse_str(wat).expect("fixture is valid wat");
    let sha256 = hex::encode(Sha256::digest(&wasm));
    (wasm, sha256)
}

/// The `rota` imports and WASI helpers for host-capability fixtures, with 4 pages of
/// memory: `$print_code (n)` prints a signed number and a newline; `$print_result` prints
/// the last `rota` result (up to 64 KiB) and a newline; `$stdin (ptr) -> len` reads all of
/// stdin to `ptr`. Memory map: 0..64 scratch, 1024.. strings, 65536.. stdin,
/// 131072.. results.
const HOST_PRELUDE: &str = concat!(
    r#"
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_read" (func $fd_read (param i32 i32 i32 i32) (result i32)))
  (import "rota" "http_request" (func $http_request (param i32 i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (import "rota" "http_header" (func $http_header (param i32 i32) (result i32)))
  (import "rota" "secret_get" (func $secret_get (param i32 i32) (result i32)))
  (import "rota" "kv_get" (func $kv_get (param i32 i32) (result i32)))
  (import "rota" "kv_set" (func $kv_set (param i32 i32 i32 i32) (result i32)))
  (import "rota" "kv_delete" (func $kv_delete (param i32 i32) (result i32)))
  (import "rota" "result_read" (func $result_read (param i32 i32) (result i32)))
  (import "rota" "output_set" (func $output_set (param i32 i32) (result i32)))
  (memory (export "memory") 4)
"#,
    write_fn!(),
    r#"
  (func $print_code (param $n i32) (local $p i32) (local $neg i32)
    (local.set $neg (i32.lt_s (local.get $n) (i32.const 0)))
    (if (local.get $neg) (then (local.set $n (i32.sub (i32.const 0) (local.get $n)))))
    (local.set $p (i32.const 63))
    (i32.store8 (i32.const 63) (i32.const 10))
    (loop $digits
      (local.set $p (i32.sub (local.get $p) (i32.const 1)))
      (i32.store8 (local.get $p)
        (i32.add (i32.const 48) (i32.rem_u (local.get $n) (i32.const 10))))
      (local.set $n (i32.div_u (local.get $n) (i32.const 10)))
      (br_if $digits (local.get $n)))
    (if (local.get $neg)
      (then
        (local.set $p (i32.sub (local.get $p) (i32.const 1)))
        (i32.store8 (local.get $p) (i32.const 45))))
    (call $write (i32.const 1) (local.get $p) (i32.sub (i32.const 64) (local.get $p))))
  (func $print_result (local $n i32)
    (local.set $n (call $result_read (i32.const 131072) (i32.const 65535)))
    (if (i32.gt_u (local.get $n) (i32.const 65535)) (then (local.set $n (i32.const 65535))))
    (i32.store8 (i32.add (i32.const 131072) (local.get $n)) (i32.const 10))
    (call $write (i32.const 1) (i32.const 131072) (i32.add (local.get $n) (i32.const 1))))
  (func $stdin (param $ptr i32) (result i32) (local $total i32) (local $n i32)
    (loop $more
      (i32.store (i32.const 32) (i32.add (local.get $ptr) (local.get $total)))
      (i32.store (i32.const 36) (i32.const 8192))
      (drop (call $fd_read (i32.const 0) (i32.const 32) (i32.const 1) (i32.const 40)))
      (local.set $n (i32.load (i32.const 40)))
      (local.set $total (i32.add (local.get $total) (local.get $n)))
      (br_if $more (local.get $n)))
    (local.get $total))
"#
);

/// A module with the host prelude and `body`.
pub fn host_plugin(body: &str) -> String {
    format!("(module {HOST_PRELUDE} {body})")
}

/// Reads key `k` of the job's state and prints the code (and the value), then sets it to
/// stdin and prints that code (and the error, if any).
pub fn kv_plugin() -> String {
    host_plugin(
        r#"
        (data (i32.const 1024) "k")
        (func (export "_start") (local $r i32) (local $len i32)
          (local.set $len (call $stdin (i32.const 65536)))
          (local.set $r (call $kv_get (i32.const 1024) (i32.const 1)))
          (call $print_code (local.get $r))
          (if (i32.ge_s (local.get $r) (i32.const 0)) (then (call $print_result)))
          (local.set $r (call $kv_set (i32.const 1024) (i32.const 1) (i32.const 65536) (local.get $len)))
          (call $print_code (local.get $r))
          (if (i32.lt_s (local.get $r) (i32.const 0)) (then (call $print_result))))
        "#,
    )
}

/// Sets stdin as the run's output; prints the code (and the error, if any).
pub fn output_plugin() -> String {
    host_plugin(
        r#"
        (func (export "_start") (local $r i32) (local $len i32)
          (local.set $len (call $stdin (i32.const 65536)))
          (local.set $r (call $output_set (i32.const 65536) (local.get $len)))
          (call $print_code (local.get $r))
          (if (i32.lt_s (local.get $r) (i32.const 0)) (then (call $print_result))))
        "#,
    )
}

/// Sends `method url` with `headers` and stdin as the body; prints the status (or error
/// code) and then the body (or error message).
pub fn http_plugin(method: &str, url: &str, headers: &str) -> String {
    let esc = |s: &str| {
        s.replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('\n', "\\n")
    };
    host_plugin(&format!(
        r#"
        (data (i32.const 1024) "{m}")
        (data (i32.const 2048) "{u}")
        (data (i32.const 8192) "{h}")
        (func (export "_start") (local $len i32) (local $status i32)
          (local.set $len (call $stdin (i32.const 65536)))
          (local.set $status (call $http_request
            (i32.const 1024) (i32.const {ml}) (i32.const 2048) (i32.const {ul})
            (i32.const 8192) (i32.const {hl}) (i32.const 65536) (local.get $len)))
          (call $print_code (local.get $status))
          (call $print_result))
        "#,
        m = esc(method),
        u = esc(url),
        h = esc(headers),
        ml = method.len(),
        ul = url.len(),
        hl = headers.len(),
    ))
}

/// Reads secret `name`; prints the code, and the value if `show` (a plugin that keeps it
/// to itself prints only its length).
pub fn secret_plugin(name: &str, show: bool) -> String {
    host_plugin(&format!(
        r#"
        (data (i32.const 1024) "{name}")
        (func (export "_start") (local $r i32)
          (local.set $r (call $secret_get (i32.const 1024) (i32.const {len})))
          (call $print_code (local.get $r))
          {show})
        "#,
        len = name.len(),
        show = if show { "(call $print_result)" } else { "" },
    ))
}
