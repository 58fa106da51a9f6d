//! /proc/self/mountinfo, read for what a mount point shows: its source, its type, and
//! whether the kernel has it read-only (after `mount -o remount,ro`).

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// /proc/self/mountinfo opened once for good ([`keep_open`]): a confined daemon may open
/// no path, and reads it again from offset 0 (the kernel writes it afresh each time).
static KEPT: std::sync::OnceLock<std::fs::File> = std::sync::OnceLock::new();

/// Keep /proc/self/mountinfo open for later reads (before the daemon confines itself).
pub fn keep_open() -> std::io::Result<()> {
    if KEPT.get().is_none() {
        let _ = KEPT.set(std::fs::File::open("/proc/self/mountinfo")?);
    }
    Ok(())
}

/// The text of /proc/self/mountinfo now.
fn text() -> Option<String> {
    let Some(f) = KEPT.get() else {
        return std::fs::read_to_string("/proc/self/mountinfo").ok();
    };
    use std::os::unix::fs::FileExt;
    let mut out = Vec::new();
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = f.read_at(&mut buf, out.len() as u64).ok()?;
        if n == 0 {
            return String::from_utf8(out).ok();
        }
        out.extend_from_slice(&buf[..n]);
    }
}

/// The fields of the visible mount at `path` (canonical): its per-mount options, its
/// type and its source.
fn fields(path: &Path) -> Option<(String, String, String)> {
    let info = text()?;
    let want = path.as_os_str().as_bytes();
    let mut found = None;
    for line in info.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let Some(sep) = f.iter().position(|&x| x == "-") else {
            continue;
        };
        if f.len() < sep + 3 || f.len() < 6 {
            continue;
        }
        if unescape(f[4]).as_slice() == want {
            // The last mount on a path is the visible one.
            found = Some((
                f[5].to_string(),
                f[sep + 1].to_string(),
                String::from_utf8_lossy(&unescape(f[sep + 2])).into_owned(),
            ));
        }
    }
    found
}

/// The source and file-system type of the mount at `path` (canonical), by
/// /proc/self/mountinfo.
pub fn mount_source(path: &Path) -> Option<(String, String)> {
    fields(path).map(|(_, kind, source)| (source, kind))
}

/// Whether the kernel holds the mount at `path` read-only (its per-mount options say
/// `ro`); false when `path` is not a mount point.
pub fn read_only(path: &Path) -> bool {
    fields(path).is_some_and(|(opts, _, _)| opts.split(',').any(|o| o == "ro"))
}

/// The device (`major:minor`, which every bind of one file system shows) of the
/// visible mount at `path` (canonical).
pub fn device_of(path: &Path) -> Option<String> {
    let info = text()?;
    let want = path.as_os_str().as_bytes();
    info.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (f.len() > 4 && unescape(f[4]).as_slice() == want).then(|| f[2].to_string())
        })
        .next_back()
}

/// Whether a mount of type `kind` on device `dev` (`major:minor`) is left.
pub fn device_mounted(kind: &str, dev: &str) -> bool {
    text().is_some_and(|info| {
        info.lines().any(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let sep = f.iter().position(|&x| x == "-");
            f.len() > 2 && f[2] == dev && sep.is_some_and(|k| f.get(k + 1) == Some(&kind))
        })
    })
}

/// Every visible mount of type `kind`: its mount point, its source, and whether the kernel
/// holds it read-only. Bind mounts of one file system are listed once each.
pub fn mounts_of_type(kind: &str) -> Vec<(PathBuf, String, bool)> {
    let Some(info) = text() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for line in info.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let Some(sep) = f.iter().position(|&x| x == "-") else {
            continue;
        };
        if f.len() < sep + 3 || f.len() < 6 || f[sep + 1] != kind {
            continue;
        }
        out.push((
            PathBuf::from(std::ffi::OsStr::from_bytes(&unescape(f[4]))),
            String::from_utf8_lossy(&unescape(f[sep + 2])).into_owned(),
            f[5].split(',').any(|o| o == "ro"),
        ));
    }
    out
}

/// mountinfo escapes space, tab, newline and backslash as octal `\NNN`.
fn unescape(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}
