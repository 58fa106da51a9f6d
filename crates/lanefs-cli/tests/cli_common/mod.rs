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

/// `n` pseudo-random bytes from `seed` (xorshift): file contents that compress to nothing
/// and that a test can make again to compare.
pub fn noise(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

pub mod accounts;
#[path = "../../../lanefs/tests/common/skips.rs"]
pub mod skips;
#[allow(unused_imports)]
pub use skips::required;

/// Say that `test` is skipped (seen in cargo's output, counted when the binary exits), or
/// fail when skipping is not allowed.
pub fn skip(test: &str, why: &str) {
    skips::report(test, why);
}

/// Loop-mount `image` at `mnt` with `opts` (`loop,...`); false (after a SKIP line, or a
/// panic when required) if this machine cannot.
pub fn kernel_mount(test: &str, image: &Path, mnt: &Path, opts: &str) -> bool {
    std::fs::create_dir_all(mnt).unwrap();
    let st = Command::new("mount")
        .args(["-o", opts])
        .arg(image)
        .arg(mnt)
        .status();
    if st.is_ok_and(|s| s.success()) {
        return true;
    }
    skip(test, "cannot loop-mount");
    false
}

/// `e2fsck -fn IMAGE` finds nothing (a SKIP line where e2fsck is not installed).
pub fn e2fsck_clean(image: &Path) {
    let out = std::process::Command::new("e2fsck")
        .arg("-fn")
        .arg(image)
        .output();
    match out {
        Ok(out) => assert_eq!(
            out.status.code(),
            Some(0),
            "e2fsck -fn: {}",
            String::from_utf8_lossy(&out.stdout)
        ),
        Err(_) => skip("e2fsck", "e2fsck not installed"),
    }
}

/// The unprivileged user the builds run as (`lanefs-a`, as `.ci/run` makes it): its uid
/// and gid, or `None` after a SKIP line when this test cannot switch to it.
pub fn builder(test: &str) -> Option<(u32, u32)> {
    let root = Command::new("id").arg("-u").output().unwrap().stdout;
    if String::from_utf8_lossy(&root).trim() != "0" {
        skip(test, "needs root to run mkfs as another user");
        return None;
    }
    if let Err(why) = accounts::ensure() {
        skip(test, &why);
        return None;
    }
    let id = |flag: &str| -> Option<u32> {
        let out = Command::new("id").args([flag, "lanefs-a"]).output().ok()?;
        String::from_utf8_lossy(&out.stdout).trim().parse().ok()
    };
    let setpriv = Command::new("setpriv").arg("--version").output();
    match (
        id("-u"),
        id("-g"),
        setpriv.is_ok_and(|o| o.status.success()),
    ) {
        (Some(uid), Some(gid), true) => Some((uid, gid)),
        _ => {
            skip(
                test,
                "needs setpriv and user lanefs-a (useradd -M -s /usr/sbin/nologin lanefs-a)",
            );
            None
        }
    }
}

/// A checksum of file contents (crc32c, as the engine already links it).
pub fn crc(data: &[u8]) -> u32 {
    lanefs::internals::disk::crc32c_raw(!0, data)
}

/// What `p` (of metadata `m`) holds, as the tree views compare it: a file's bytes as
/// `file` words them, a symlink's target, a device's numbers, nothing for the rest.
pub fn holds(p: &Path, m: &std::fs::Metadata, file: impl FnOnce(&[u8]) -> String) -> String {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let ft = m.file_type();
    if ft.is_file() {
        file(&std::fs::read(p).unwrap())
    } else if ft.is_symlink() {
        format!("-> {}", std::fs::read_link(p).unwrap().display())
    } else if ft.is_char_device() || ft.is_block_device() {
        format!("{},{}", libc::major(m.rdev()), libc::minor(m.rdev()))
    } else {
        String::new()
    }
}
