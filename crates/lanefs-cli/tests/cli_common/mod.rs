//! What the command-line tests share: running the `lanefs` binary and checking its
//! answers.

#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};

/// Run `lanefs ARGS...`.
pub fn lanefs<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lanefs"))
        .args(args)
        .output()
        .expect("run lanefs")
}

pub fn ok(out: Output) -> Output {
    assert!(
        out.status.success(),
        "failed ({:?}): {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The one `lanefs: ...` line of a failure.
pub fn one_line_failure(out: &Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "unexpected success");
    assert!(!err.contains("panicked"), "panic: {err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "expected one line, got {err:?}");
    lines[0].to_string()
}

pub fn s(p: &Path) -> String {
    p.display().to_string()
}

pub fn at(image: &Path, path: &str) -> String {
    format!("{}:{path}", image.display())
}
