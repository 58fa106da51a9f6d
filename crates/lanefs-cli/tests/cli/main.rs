//! End-to-end tests of the `lanefs` binary: argument handling, and every command against
//! real images (checked again by e2fsck where it is installed).

mod bench;
mod commands;
mod edits;
mod kernel;
#[path = "../../../lanefs/tests/common/skips.rs"]
mod skips;
mod state;

use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Seconds of the fixed past time given to every test file.
const PAST_SEC: i64 = 1_500_000_000;
/// Nanoseconds of that time.
const PAST_NSEC: i64 = 123_456_789;

/// Run `lanefs` with `args`.
fn lanefs<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Output {
    match Command::new(env!("CARGO_BIN_EXE_lanefs"))
        .args(args)
        .output()
    {
        Ok(out) => out,
        Err(e) => panic!("cannot run lanefs: {e}"),
    }
}

/// Standard output as text.
fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Standard error as text.
fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Assert the command succeeded, showing its stderr if not.
fn ok(out: Output) -> Output {
    assert!(
        out.status.success(),
        "failed ({:?}): {}",
        out.status.code(),
        stderr(&out)
    );
    out
}

/// Assert a failure reported as exactly one `lanefs: ...` line, and return that line.
fn one_line_failure(out: &Output) -> String {
    let err = stderr(out);
    assert!(
        !out.status.success(),
        "unexpected success; stdout: {}",
        stdout(out)
    );
    assert!(!err.contains("panicked"), "panic: {err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "expected one line on stderr, got: {err:?}");
    assert!(lines[0].starts_with("lanefs: "), "bad error line: {err:?}");
    lines[0].to_string()
}

/// `path` as a string argument.
fn s(path: &Path) -> String {
    path.display().to_string()
}

/// `IMAGE:PATH`.
fn at(image: &Path, path: &str) -> String {
    format!("{}:{path}", image.display())
}

/// A fresh temporary directory.
fn tempdir() -> tempfile::TempDir {
    match tempfile::tempdir() {
        Ok(d) => d,
        Err(e) => panic!("tempdir: {e}"),
    }
}

/// Format a new 64 MiB image in `dir`.
fn new_image(dir: &Path) -> PathBuf {
    let image = dir.join("disk.img");
    ok(lanefs(&["mkfs", &s(&image), "--size", "64M"]));
    image
}

/// The e2fsck binary, if installed.
fn e2fsck() -> Option<PathBuf> {
    let found = ["e2fsck", "/sbin/e2fsck", "/usr/sbin/e2fsck"]
        .iter()
        .map(PathBuf::from)
        .find(|p| Command::new(p).arg("-V").output().is_ok());
    if found.is_none() {
        if std::env::var("LANEFS_REQUIRE_PRIVILEGED").as_deref() == Ok("1") {
            panic!("e2fsck is required (LANEFS_REQUIRE_PRIVILEGED=1) but not installed");
        }
        eprintln!("skipping e2fsck check: e2fsck not installed");
    }
    found
}

/// Assert that both `lanefs fsck` and (when installed) `e2fsck -fn` find `image` clean.
fn assert_clean(image: &Path) {
    let out = lanefs(&["fsck", &s(image)]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "lanefs fsck: {}{}",
        stdout(&out),
        stderr(&out)
    );
    if let Some(e2) = e2fsck() {
        let out = Command::new(e2).arg("-fn").arg(image).output();
        let out = match out {
            Ok(out) => out,
            Err(e) => panic!("e2fsck: {e}"),
        };
        assert_eq!(
            out.status.code(),
            Some(0),
            "e2fsck -fn: {}{}",
            stdout(&out),
            stderr(&out)
        );
    }
}

/// Set atime and mtime of `path` (not following symlinks) to the fixed past time.
fn set_past_time(path: &Path) {
    let c = match std::ffi::CString::new(path.as_os_str().as_bytes()) {
        Ok(c) => c,
        Err(e) => panic!("{e}"),
    };
    let t = libc::timespec {
        tv_sec: PAST_SEC as libc::time_t,
        tv_nsec: PAST_NSEC as libc::c_long,
    };
    let times = [t, t];
    // SAFETY: `c` is NUL-terminated and `times` holds two timespecs.
    let rc = unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            c.as_ptr(),
            times.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    assert_eq!(
        rc,
        0,
        "utimensat {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
}

/// Deterministic pseudo-random bytes (xorshift).
fn random_bytes(len: usize, mut seed: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        out.extend_from_slice(&seed.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// Write `data` to `path` with permission bits `mode`.
fn write_file(path: &Path, data: &[u8], mode: u32) {
    if let Err(e) = fs::write(path, data) {
        panic!("write {}: {e}", path.display());
    }
    if let Err(e) = fs::set_permissions(path, fs::Permissions::from_mode(mode)) {
        panic!("chmod {}: {e}", path.display());
    }
}

/// Create a directory with permission bits `mode`.
fn make_dir(path: &Path, mode: u32) {
    if let Err(e) = fs::create_dir(path) {
        panic!("mkdir {}: {e}", path.display());
    }
    if let Err(e) = fs::set_permissions(path, fs::Permissions::from_mode(mode)) {
        panic!("chmod {}: {e}", path.display());
    }
}

/// Create a symlink.
fn make_symlink(target: &str, path: &Path) {
    if let Err(e) = std::os::unix::fs::symlink(target, path) {
        panic!("symlink {}: {e}", path.display());
    }
}

/// A host tree: nested directories, a 3 MiB random file, a file with holes, an empty file,
/// symlinks, a FIFO; modes 0640/0755/0700; every time set to the fixed past time.
fn build_tree(root: &Path) {
    make_dir(root, 0o755);
    make_dir(&root.join("a"), 0o755);
    make_dir(&root.join("a/b"), 0o700);
    write_file(
        &root.join("a/b/big.bin"),
        &random_bytes(3 << 20, 0x9e37_79b9_7f4a_7c15),
        0o640,
    );
    let mut sparse = vec![b'x'; 100];
    sparse.resize(100 + (256 << 10), 0);
    sparse.extend_from_slice(b"end");
    sparse.resize(sparse.len() + (128 << 10), 0);
    write_file(&root.join("a/sparse.bin"), &sparse, 0o644);
    write_file(&root.join("a/empty.txt"), b"", 0o640);
    write_file(&root.join("run.sh"), b"#!/bin/sh\necho hi\n", 0o755);
    make_symlink("a/b/big.bin", &root.join("link"));
    make_symlink("/nonexistent/target", &root.join("dangling"));
    let fifo = root.join("a/fifo");
    let c = std::ffi::CString::new(fifo.as_os_str().as_bytes()).unwrap_or_default();
    // SAFETY: `c` is a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
    for p in [
        "a/b/big.bin",
        "a/sparse.bin",
        "a/empty.txt",
        "run.sh",
        "link",
        "dangling",
        "a/fifo",
    ] {
        set_past_time(&root.join(p));
    }
    for p in ["a/b", "a", ""] {
        set_past_time(&root.join(p));
    }
}

/// Metadata without following symlinks.
fn lmeta(path: &Path) -> fs::Metadata {
    match fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) => panic!("{}: {e}", path.display()),
    }
}

/// Sorted names in a host directory.
fn names(dir: &Path) -> Vec<std::ffi::OsString> {
    let mut v: Vec<_> = match fs::read_dir(dir) {
        Ok(it) => it
            .map(|e| e.map(|e| e.file_name()))
            .collect::<Result<_, _>>()
            .unwrap_or_default(),
        Err(e) => panic!("{}: {e}", dir.display()),
    };
    v.sort();
    v
}

/// Assert two host trees are equal: names, types, modes, owners, mtimes with nanoseconds,
/// file contents and symlink targets.
fn assert_same_tree(a: &Path, b: &Path) {
    let (ma, mb) = (lmeta(a), lmeta(b));
    let what = b.display();
    assert_eq!(ma.file_type(), mb.file_type(), "type of {what}");
    assert_eq!(
        (ma.uid(), ma.gid()),
        (mb.uid(), mb.gid()),
        "owner of {what}"
    );
    assert_eq!(
        (ma.mtime(), ma.mtime_nsec()),
        (mb.mtime(), mb.mtime_nsec()),
        "mtime of {what}"
    );
    if ma.file_type().is_symlink() {
        assert_eq!(
            fs::read_link(a).ok(),
            fs::read_link(b).ok(),
            "target of {what}"
        );
        return;
    }
    assert_eq!(ma.mode() & 0o7777, mb.mode() & 0o7777, "mode of {what}");
    if ma.is_file() {
        assert_eq!(ma.len(), mb.len(), "size of {what}");
        assert!(
            fs::read(a).ok() == fs::read(b).ok(),
            "contents of {what} differ"
        );
    } else if ma.is_dir() {
        assert_eq!(names(a), names(b), "entries of {what}");
        for name in names(a) {
            assert_same_tree(&a.join(&name), &b.join(&name));
        }
    }
}

#[test]
fn help_lists_every_command() {
    let out = ok(lanefs(&["--help"]));
    let text = stdout(&out);
    for cmd in [
        "mkfs", "fsck", "info", "ls", "stat", "cat", "mkdir", "rm", "cp", "bench",
    ] {
        assert!(
            text.lines().any(|l| l.trim_start().starts_with(cmd)),
            "{cmd} missing:\n{text}"
        );
    }
}

#[test]
fn bad_arguments_exit_2() {
    for args in [
        &["frobnicate"][..],
        &["mkfs"],
        &["ls", "-z", "x.img:/"],
        &["cp", "only-one"],
        &["bench", "--threads", "one"],
        &[],
    ] {
        let out = lanefs(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(!stderr(&out).contains("panicked"));
    }
}

/// An unknown command suggests only commands a typo away (clap's own suggestion sent
/// `nosuch` to `bench`), and lists the commands.
#[test]
fn an_unknown_command_suggests_only_near_names() {
    let out = lanefs(&["nosuch"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("unrecognized command 'nosuch'"), "{err}");
    assert!(!err.contains("tip"), "{err}");
    assert!(err.contains("Commands: mkfs, fsck"), "{err}");
    let err = stderr(&lanefs(&["mkfss", "x.img"]));
    assert!(err.contains("a similar command exists: 'mkfs'"), "{err}");
    let err = stderr(&lanefs(&["--rtdev", "d.img", "lss"]));
    assert!(err.contains("'ls'"), "{err}");
}

#[test]
fn cat_of_missing_image_fails_in_one_line() {
    let dir = tempdir();
    let missing = dir.path().join("nonexistent.img");
    let line = one_line_failure(&lanefs(&["cat", &at(&missing, "/x")]));
    assert!(line.starts_with("lanefs: cat: "), "{line}");
    assert!(line.contains("no such file or directory"), "{line}");
    one_line_failure(&lanefs(&["ls", &at(&missing, "/")]));
    let out = lanefs(&["fsck", &s(&missing)]);
    one_line_failure(&out);
    assert_eq!(out.status.code(), Some(8));
}

#[test]
fn argument_errors_before_the_engine_are_one_line() {
    let dir = tempdir();
    let image = dir.path().join("x.img");
    let line = one_line_failure(&lanefs(&["mkfs", &s(&image), "--size", "4X"]));
    assert!(line.contains("invalid size"), "{line}");
    assert!(!image.exists(), "mkfs with a bad size created the image");
    one_line_failure(&lanefs(&["mkfs", &s(&image)]));

    let host = dir.path().join("host.txt");
    write_file(&host, b"hi", 0o644);
    let line = one_line_failure(&lanefs(&["cp", &s(&host), &s(&dir.path().join("other"))]));
    assert!(line.starts_with("lanefs: cp: "), "{line}");

    let line = one_line_failure(&lanefs(&["cat", &at(&host, "relative/path")]));
    assert!(line.contains("absolute"), "{line}");
    one_line_failure(&lanefs(&["stat", "no-colon-and-no-file"]));
    one_line_failure(&lanefs(&["bench", "--size", "12Q"]));
}
