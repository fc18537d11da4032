;; spin: a plugin that never ends, for timeout and kill tests.
;;
;; A WASI preview 1 command module written by hand: it exports `memory` and `_start`,
;; logs one line ("spinning forever") so a test can see that the run started, then loops
;; forever without calling the host. Rota must end it at the job's timeout (run status
;; `timeout`) or on a kill, without disturbing any other run. Upload the text as is
;; (Rota compiles `.wat` at upload), or run `wat2wasm spin.wat` for a binary.
(module
  (import "wasi_snapshot_preview1" "fd_write"
    (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  ;; iovec at 0: { buf = 16, len = 17 }; bytes written go to 8; the text is at 16.
  (data (i32.const 0) "\10\00\00\00\11\00\00\00")
  (data (i32.const 16) "spinning forever\n")
  (func (export "_start")
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))
    (loop $forever
      (br $forever))))
