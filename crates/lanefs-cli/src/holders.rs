//! Who else has an image when `lanefs mount` starts.
//!
//! - A live lanefs mount of it: the kernel's ext4 shares one superblock between every
//!   mount of a device, so a second `lanefs mount` of the image is a bind mount of the
//!   first (one daemon serves both; it stops when the last is unmounted). Found by the
//!   mount's source, or through the daemon holding the image, which keeps its mount
//!   point open, when an fsname hides the source.
//! - A lanefs mount daemon whose mount is gone (`umount` returns before the daemon has
//!   written everything back): the new mount waits for it to let go, as a mount after
//!   `umount` of a kernel file system finds the device free. Any other holder (`lanefs
//!   cp`, a library user) is not waited for: the open fails "in use" as before.
//! - A lanefs mount daemon still serving a mount this mount namespace does not show (one
//!   another namespace keeps after the mount here was unmounted, or a mount still being
//!   made): once it has shown no mount for a moment, the new mount fails naming it,
//!   rather than wait for a daemon that may never stop.

use lanefs_fuse::{mountinfo, SUBTYPE};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Whether `a` and `b` name the same file (device and inode).
fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

/// The lanefs mounts whose source is `image`: mount point, and whether it is read-only.
pub fn live_mounts(image: &Path) -> Vec<(PathBuf, bool)> {
    mountinfo::mounts_of_type(&format!("fuse.{SUBTYPE}"))
        .into_iter()
        .filter(|(_, source, _)| same_file(Path::new(source), image))
        .map(|(mp, _, ro)| (mp, ro))
        .collect()
}

/// Whether the process `pid` is a lanefs mount daemon: started as `lanefs mount ...` or
/// as mount(8)'s helper `mount.fuse.lanefs`.
fn is_mount_daemon(pid: &str) -> bool {
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let mut argv = cmdline.split(|&b| b == 0);
    let name = argv
        .next()
        .and_then(|a| {
            Path::new(std::str::from_utf8(a).ok()?)
                .file_name()?
                .to_str()
        })
        .unwrap_or("");
    name == "mount.fuse.lanefs" || (name == "lanefs" && argv.next() == Some(b"mount"))
}

/// The pids of every process but this one (as far as this user may see them).
fn other_pids() -> Vec<u32> {
    let me = std::process::id();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    procs
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != me)
        .collect()
}

/// Whether process `pid` has `image` (canonical) open. A descriptor's link names the
/// file as the kernel resolved it; only one that names `image`, or a file of the same
/// name (a bind mount's or a hard link's), is looked at further, through the
/// descriptor's own /proc link: this scan never walks a path into another process's
/// files, which on a FUSE mount would take a reference on that mount for the walk (and
/// could make an `umount` there fail EBUSY) and wait for its daemon.
fn holds(pid: u32, image: &Path, want: &std::fs::Metadata) -> bool {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten().any(|fd| match std::fs::read_link(fd.path()) {
        Ok(t) if t == image => true,
        Ok(t) if t.file_name().is_some() && t.file_name() == image.file_name() => {
            std::fs::metadata(fd.path())
                .is_ok_and(|m| m.dev() == want.dev() && m.ino() == want.ino())
        }
        _ => false,
    })
}

/// Every process other than this one that has `image` open: its pid and command name.
fn processes_holding(image: &Path) -> Vec<(u32, String)> {
    let Ok(want) = std::fs::metadata(image) else {
        return Vec::new();
    };
    other_pids()
        .into_iter()
        .filter(|&pid| holds(pid, image, &want))
        .map(|pid| {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            (pid, comm.trim().to_string())
        })
        .collect()
}

/// Who holds `image`, for a "busy" message: its lanefs mounts and the processes that
/// have it open (as far as this user may see them), or `None` when none is found.
pub fn who_holds(image: &Path) -> Option<String> {
    let image = &image.canonicalize().ok()?;
    let mut parts: Vec<String> = live_mounts(image)
        .into_iter()
        .map(|(mp, _)| format!("mounted by lanefs at {}", mp.display()))
        .collect();
    parts.extend(
        processes_holding(image)
            .into_iter()
            .map(|(pid, comm)| format!("open in pid {pid} ({comm})")),
    );
    (!parts.is_empty()).then(|| parts.join(", "))
}

/// The live lanefs mount daemon `pid` serves, if any: its mount point (which the daemon
/// holds open, whatever source or fsname the mount shows) and whether it is read-only.
pub fn daemon_mount(pid: u32) -> Option<(PathBuf, bool)> {
    let live = mountinfo::mounts_of_type(&format!("fuse.{SUBTYPE}"));
    let (mp, ro) = live
        .iter()
        .find(|(mp, _, _)| has_open(pid, mp))
        .map(|(mp, _, ro)| (mp.clone(), *ro))?;
    // Another daemon at the same path (this one's mount detached, another mounted there
    // since) makes it unclear whose mount that is: none is taken.
    let other = other_pids()
        .into_iter()
        .any(|p| p != pid && is_mount_daemon(&p.to_string()) && has_open(p, &mp));
    (!other).then_some((mp, ro))
}

/// The lanefs mount daemon serving the mount at `mp` (canonical), found by the mount
/// point it holds open (see [`daemon_mount`]): its pid, when exactly one holds it.
pub fn daemon_at(mp: &Path) -> Option<u32> {
    let mut found = other_pids()
        .into_iter()
        .filter(|&pid| is_mount_daemon(&pid.to_string()) && has_open(pid, mp));
    let first = found.next()?;
    found.next().is_none().then_some(first)
}

/// Whether daemon `pid` still serves a mount: it has /dev/fuse open (a daemon closes it
/// once its connection ends, before it writes back and lets go of the image).
pub fn serving(pid: u32) -> bool {
    has_open(pid, Path::new("/dev/fuse"))
}

/// Whether process `pid` has a descriptor whose link names `path` (read from its /proc
/// links only: nothing walks into `path`).
fn has_open(pid: u32, path: &Path) -> bool {
    std::fs::read_dir(format!("/proc/{pid}/fd")).is_ok_and(|fds| {
        fds.flatten()
            .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|t| t == path))
    })
}

/// A lanefs mount daemon other than this process that has `image` open: its pid.
pub fn daemon_holding(image: &Path) -> Option<u32> {
    let want = std::fs::metadata(image).ok()?;
    other_pids()
        .into_iter()
        .find(|&pid| is_mount_daemon(&pid.to_string()) && holds(pid, image, &want))
}

/// The note for reading `image` while another program writes it, if one does (its
/// lanefs mount named where there is one): what is read is what the writer has made
/// durable so far.
pub fn note_if_shared(image: &Path) {
    let Some(mut who) = lanefs::sharing_note(image) else {
        return;
    };
    let canonical = image.canonicalize().unwrap_or_else(|_| image.to_path_buf());
    if let Some((mp, _)) = live_mounts(&canonical).into_iter().next() {
        who = format!("mounted by lanefs at {}", mp.display());
    }
    crate::error::note(&format!(
        "{} is {who}: this reads what is on it now, which may be behind the mount",
        image.display()
    ));
}
