//! Skipped tests a user sees. A test that cannot run here (no root, no loop devices, a
//! tool missing) passes after saying so; libtest keeps a passing test's `print!` output to
//! itself, so the line is written to the process's stderr directly (not captured), and
//! when the test binary exits, after libtest's `test result:` line, one more line counts
//! them: `N of the tests above were skipped, not run: ...`. Under
//! `LANEFS_REQUIRE_PRIVILEGED=1` (as CI sets it) a skip fails instead.
//!
//! Shared by the engine's and the command's tests (included with `#[path]`).

#![allow(dead_code)]

use std::io::Write;
use std::sync::{Mutex, Once};

/// Whether a test that needs tools or privileges must fail instead of skipping.
pub fn required() -> bool {
    std::env::var("LANEFS_REQUIRE_PRIVILEGED").is_ok_and(|v| v == "1")
}

/// The tests skipped so far in this binary.
static SKIPPED: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Say that `test` is skipped for `why` (or fail under `LANEFS_REQUIRE_PRIVILEGED=1`).
pub fn report(test: &str, why: &str) {
    assert!(!required(), "{test}: {why} (LANEFS_REQUIRE_PRIVILEGED=1)");
    let _ = writeln!(std::io::stderr().lock(), "SKIP {test}: {why}");
    let mut skipped = SKIPPED.lock().unwrap_or_else(|e| e.into_inner());
    if skipped.is_empty() {
        at_exit(summary);
    }
    skipped.push(test.to_string());
}

/// The closing line: how many tests of this binary were skipped, and which.
fn summary() {
    let skipped = SKIPPED.lock().unwrap_or_else(|e| e.into_inner());
    let mut names = skipped.clone();
    names.sort();
    names.dedup();
    let _ = writeln!(
        std::io::stderr().lock(),
        "{} of the tests above were skipped, not run: {}",
        names.len(),
        names.join(", ")
    );
}

/// What runs when the test binary exits, in the order given.
static AT_EXIT: Mutex<Vec<fn()>> = Mutex::new(Vec::new());

/// Run `f` when the test binary exits (after libtest's summary).
pub fn at_exit(f: fn()) {
    static REGISTER: Once = Once::new();
    REGISTER.call_once(|| {
        // SAFETY: `run_at_exit` is an `extern "C" fn()` with no arguments that never
        // unwinds (it catches panics) and touches only statics, which live until the
        // process ends; atexit only stores the pointer.
        unsafe { libc::atexit(run_at_exit) };
    });
    AT_EXIT.lock().unwrap_or_else(|e| e.into_inner()).push(f);
}

extern "C" fn run_at_exit() {
    let fns = std::mem::take(&mut *AT_EXIT.lock().unwrap_or_else(|e| e.into_inner()));
    for f in fns {
        let _ = std::panic::catch_unwind(f);
    }
}
