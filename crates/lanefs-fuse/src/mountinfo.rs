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

/// The unique ID of the mount at `path` (Linux 6.8+: never reused while the system runs,
/// unlike mountinfo's mount ID and a FUSE mount's device, which the next mount takes
/// again). A path walk into that mount, and a reference on it for the call (an `umount`
/// meanwhile fails EBUSY): for the daemon, on its own mount before anyone is told of it.
/// No FUSE request is sent (AT_STATX_DONT_SYNC), so it is safe before the daemon serves.
pub fn unique_id(path: &Path) -> Option<u64> {
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: a zeroed statx is valid storage for the call to fill.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path and `stx` writable storage, both live for
    // the call.
    let r = unsafe {
        libc::statx(
            libc::AT_FDCWD,
            c.as_ptr(),
            libc::AT_STATX_DONT_SYNC | libc::AT_SYMLINK_NOFOLLOW,
            libc::STATX_MNT_ID_UNIQUE,
            &mut stx,
        )
    };
    (r == 0 && stx.stx_mask & libc::STATX_MNT_ID_UNIQUE != 0).then_some(stx.stx_mnt_id)
}

/// statmount(2), the same number on every architecture but alpha (Linux 6.8+).
const SYS_STATMOUNT: libc::c_long = 457;
/// statmount's request for the mount point, and the offsets in `struct statmount` of
/// its `mask`, its `mnt_point` (an offset into the strings) and the strings.
const STATMOUNT_MNT_POINT: u64 = 0x10;
const SM_MASK: usize = 8;
const SM_MNT_POINT: usize = 108;
const SM_STR: usize = 512;

/// Where the mount with unique ID `id` ([`unique_id`]) is now: its mount point, or
/// `Ok(None)` once it is gone; an error when the kernel cannot say (before Linux 6.8).
/// Asked of the kernel by ID: nothing walks into the mount.
pub fn mount_point_of(id: u64) -> std::io::Result<Option<PathBuf>> {
    // struct mnt_id_req (its first published size, 24): size, mnt_ns_fd, mnt_id, param.
    let mut req = [0u8; 24];
    req[..4].copy_from_slice(&24u32.to_ne_bytes());
    req[8..16].copy_from_slice(&id.to_ne_bytes());
    req[16..24].copy_from_slice(&STATMOUNT_MNT_POINT.to_ne_bytes());
    let mut buf = vec![0u8; SM_STR + 8192];
    // SAFETY: `req` is a mnt_id_req of the size it states and `buf` is writable for the
    // length passed; both live for the call, which writes only into `buf`.
    let r = unsafe {
        libc::syscall(
            SYS_STATMOUNT,
            req.as_ptr(),
            buf.as_mut_ptr(),
            buf.len(),
            0 as libc::c_uint,
        )
    };
    if r != 0 {
        let e = std::io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::ENOENT) => Ok(None),
            _ => Err(e),
        };
    }
    let mask = u64::from_ne_bytes(buf[SM_MASK..SM_MASK + 8].try_into().unwrap_or_default());
    let point = u32::from_ne_bytes(
        buf[SM_MNT_POINT..SM_MNT_POINT + 4]
            .try_into()
            .unwrap_or_default(),
    );
    if mask & STATMOUNT_MNT_POINT == 0 {
        return Err(std::io::Error::from_raw_os_error(libc::EPROTO));
    }
    let at = SM_STR + point as usize;
    let s = buf.get(at..).unwrap_or_default();
    let end = s.iter().position(|&b| b == 0).unwrap_or(s.len());
    Ok(Some(PathBuf::from(std::ffi::OsStr::from_bytes(&s[..end]))))
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
