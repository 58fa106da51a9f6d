//! Exclusive access to an image or block device: one writer at a time, and never while
//! the kernel has the same bytes mounted.
//!
//! - A regular image file is locked with `flock`: exclusive for a read-write open, shared
//!   for a read-only one, so a second lanefs writer (another process, or another mount in
//!   this one) is refused while readers may share. A lock held elsewhere is retried for
//!   half a second first (see `LOCK_PATIENCE`).
//! - A read-write open of an image file is refused while a loop device backed by that
//!   file is in use (mounted by the kernel, or held exclusively); a loop device attached
//!   but idle is opened with `O_EXCL` and held for as long as lanefs has the image, so the
//!   kernel cannot mount it meanwhile (a mount through a loop device made later cannot be
//!   stopped from here).
//! - A block device opened read-write is opened with `O_EXCL`: the kernel refuses that
//!   while the device is mounted, and refuses to mount it while lanefs holds it.
//!
//! Read-only opens of an image the kernel has mounted are allowed, as `debugfs` allows
//! them: nothing is written, and the journal is replayed in memory only. A read-only
//! open is refused while another lanefs writes the image (a shared lock it could not
//! hold would let a writer in under a long-lived reader, a read-only mount), except a
//! snapshot ([`claim_snapshot`]): a one-shot read (`lanefs ls`, `fsck -n`) of what the
//! writer has made durable so far, which may be behind it; [`sharing_note`] says who
//! writes meanwhile, for the command to tell its user.

use crate::error::{Error, Result};
use std::fs::File;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// What an open keeps to hold its claim: the loop devices it opened exclusively.
#[derive(Default)]
pub struct Claim {
    _loops: Vec<File>,
}

/// Claim `file` (opened from `path`) for reading, or for writing unless `read_only`.
pub fn claim(file: &File, path: &Path, read_only: bool) -> Result<Claim> {
    let meta = file
        .metadata()
        .map_err(|e| Error::io(format!("finding the type of {}", path.display()), e))?;
    if !meta.file_type().is_file() {
        // Block devices were opened with O_EXCL when writable (see `open_flags`).
        return Ok(Claim::default());
    }
    lock(file, path, read_only)?;
    if read_only {
        return Ok(Claim::default());
    }
    let mut loops = Vec::new();
    for (dev, node) in loops_backed_by(meta.dev(), meta.ino()) {
        if let Some(at) = mounted_at(dev) {
            return Err(Error::Busy(format!(
                "{}: mounted by the kernel through {} at {at}; unmount it first (or open read-only)",
                path.display(),
                node.display()
            )));
        }
        match std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_EXCL)
            .open(&node)
        {
            Ok(f) => loops.push(f),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                return Err(Error::Busy(format!(
                    "{}: its loop device {} is in use (mounted or held by another program)",
                    path.display(),
                    node.display()
                )));
            }
            // No device node to open (another mount namespace, no /dev): the mount
            // table check above is all that can be done.
            Err(_) => {}
        }
    }
    Ok(Claim { _loops: loops })
}

/// Claim `file` (opened read-only from `path`) for a one-shot read: a shared lock when
/// no writer holds the image, else none (the read sees what the writer has made
/// durable so far). Never refused.
pub fn claim_snapshot(file: &File) -> Claim {
    let _ = file.try_lock_shared();
    Claim::default()
}

/// Extra open(2) flags for a device opened read-write: `O_EXCL` on a block device
/// (refused by the kernel while it is mounted). Harmless on regular files without
/// `O_CREAT`, where Linux ignores it.
pub fn open_flags(path: &Path, read_only: bool) -> i32 {
    use std::os::unix::fs::FileTypeExt;
    let is_block = std::fs::metadata(path).is_ok_and(|m| m.file_type().is_block_device());
    if is_block && !read_only {
        libc::O_EXCL
    } else {
        0
    }
}

/// The error for a block device the kernel would not give exclusively.
pub fn busy_device(path: &Path) -> Error {
    Error::Busy(format!(
        "{}: device is in use (mounted by the kernel or held by another program); unmount it first (or open read-only)",
        path.display()
    ))
}

/// How long a lock held elsewhere is retried before the image counts as in use. A child
/// process this program spawns holds copies of its descriptors between fork and exec (the
/// close-on-exec flag closes them only at exec), so a lock just released by closing the
/// image can stay held for that window; a real second writer holds it far longer.
const LOCK_PATIENCE: std::time::Duration = std::time::Duration::from_millis(500);

/// flock the image: exclusive for writing, shared for reading; busy after `LOCK_PATIENCE`.
fn lock(file: &File, path: &Path, read_only: bool) -> Result<()> {
    let start = std::time::Instant::now();
    loop {
        let r = if read_only {
            file.try_lock_shared()
        } else {
            file.try_lock()
        };
        match r {
            Ok(()) => return Ok(()),
            Err(std::fs::TryLockError::WouldBlock) if start.elapsed() < LOCK_PATIENCE => {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                let who = if read_only {
                    "open for writing by another lanefs"
                } else {
                    "in use by another lanefs"
                };
                return Err(Error::Busy(format!("{}: {who}", path.display())));
            }
            // A file system without flock support (some network mounts): go on unlocked.
            Err(std::fs::TryLockError::Error(_)) => return Ok(()),
        }
    }
}

/// Loop devices whose backing file is (dev, ino): (their device number, their node).
fn loops_backed_by(dev: u64, ino: u64) -> Vec<(u64, PathBuf)> {
    let Ok(entries) = std::fs::read_dir("/sys/block") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(name) = name.to_str().filter(|n| n.starts_with("loop")) else {
            continue;
        };
        let sys = e.path();
        let Ok(backing) = std::fs::read_to_string(sys.join("loop/backing_file")) else {
            continue;
        };
        let backing = backing.trim_end_matches('\n');
        let backing = backing.strip_suffix(" (deleted)").unwrap_or(backing);
        let same = std::fs::metadata(backing).is_ok_and(|m| m.dev() == dev && m.ino() == ino);
        let number = std::fs::read_to_string(sys.join("dev"))
            .ok()
            .and_then(|s| parse_dev(s.trim()));
        if let (true, Some(number)) = (same, number) {
            out.push((number, PathBuf::from("/dev").join(name)));
        }
    }
    out
}

/// Who writes the image or device at `path` while it is read: "mounted by the kernel at
/// /mnt (through /dev/loop0)", "open for writing by another lanefs", or `None`. For a
/// read-only command's note that what it shows may be behind the writer.
pub fn sharing_note(path: &Path) -> Option<String> {
    let meta = std::fs::metadata(path).ok()?;
    if meta.file_type().is_file() {
        for (dev, node) in loops_backed_by(meta.dev(), meta.ino()) {
            if let Some(at) = mounted_at(dev) {
                let node = node.display();
                return Some(format!("mounted by the kernel at {at} (through {node})"));
            }
        }
        let probe = File::open(path).ok()?;
        return match probe.try_lock_shared() {
            Err(std::fs::TryLockError::WouldBlock) => {
                Some("open for writing by another lanefs".to_string())
            }
            _ => None,
        };
    }
    use std::os::unix::fs::FileTypeExt;
    if meta.file_type().is_block_device() {
        return mounted_at(meta.rdev()).map(|at| format!("mounted by the kernel at {at}"));
    }
    None
}

/// "major:minor" as a device number.
fn parse_dev(s: &str) -> Option<u64> {
    let (ma, mi) = s.split_once(':')?;
    Some(libc::makedev(ma.parse().ok()?, mi.parse().ok()?))
}

/// Where device `dev` is mounted, if it is (from /proc/self/mountinfo).
fn mounted_at(dev: u64) -> Option<String> {
    let table = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    table.lines().find_map(|line| {
        let mut f = line.split(' ');
        let (_, _, number, _, point) = (f.next()?, f.next()?, f.next()?, f.next()?, f.next()?);
        (parse_dev(number)? == dev).then(|| point.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_numbers_parse() {
        assert_eq!(parse_dev("7:3"), Some(libc::makedev(7, 3)));
        assert_eq!(parse_dev("259:0"), Some(libc::makedev(259, 0)));
        assert_eq!(parse_dev("7"), None);
        assert_eq!(parse_dev("x:1"), None);
    }

    #[test]
    fn second_writer_is_refused_and_readers_share() {
        let td = tempfile::tempdir().unwrap();
        let p = td.path().join("img");
        std::fs::write(&p, [0u8; 4096]).unwrap();
        assert_eq!(sharing_note(&p), None);
        let a = File::options().read(true).write(true).open(&p).unwrap();
        let _ca = claim(&a, &p, false).unwrap();
        let a2 = File::options().read(true).write(true).open(&p).unwrap();
        let e = claim(&a2, &p, false)
            .err()
            .expect("a second writer refused");
        assert!(e.to_string().contains("in use by another lanefs"), "{e}");
        // A reader is refused while a writer holds it; a snapshot reads on, and is told
        // who writes.
        let b = File::open(&p).unwrap();
        let e = claim(&b, &p, true)
            .err()
            .expect("reader refused while a writer holds it");
        assert!(e.to_string().contains("open for writing"), "{e}");
        let _snapshot = claim_snapshot(&b);
        let note = sharing_note(&p);
        assert_eq!(note.as_deref(), Some("open for writing by another lanefs"));
        drop((_ca, a, a2));
        let c = File::open(&p).unwrap();
        let _cc = claim(&c, &p, true).unwrap();
        let _cb = claim(&b, &p, true).unwrap();
        let w = File::options().read(true).write(true).open(&p).unwrap();
        let e = claim(&w, &p, false)
            .err()
            .expect("writer refused while readers hold it");
        assert!(matches!(e, Error::Busy(_)), "{e}");
    }
}
