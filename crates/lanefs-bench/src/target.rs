//! Targets: the same few file operations on a directory of a mounted file system (real
//! syscalls) or on the engine in-process. Workloads see only [`Backend`].

mod in_process;
mod instance;
mod path;

pub use in_process::LanefsBackend;
pub use instance::{copy_sparse, Instance, Target, Template};
pub use path::PathBackend;

use crate::engine;
use lanefs::RtStats;
use lanefs::{
    BlockDevice, BufCacheStats, FallocMode, FileDevice, Fs, IcacheStats, Ino, MountOptions, Owner,
    SetAttr,
};
use std::ffi::CString;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Variant name used for every record of a path target, where mount options do not apply
/// (defined here, below the config that names it, so the modules import in one direction).
pub const PATH_VARIANT: &str = "-";

/// Permission bits of files the workloads create.
const FILE_PERM: u16 = 0o644;
/// Permission bits of directories the workloads create.
const DIR_PERM: u16 = 0o755;

/// A file name, built before the timed part so the hot loop allocates nothing.
#[derive(Debug, Clone)]
pub struct Name(CString);

impl Name {
    /// A name from `s`, which must not contain a NUL or a slash.
    pub fn new(s: &str) -> Result<Name, String> {
        if s.is_empty() || s.contains('/') {
            return Err(format!("bad file name {s:?}"));
        }
        CString::new(s)
            .map(Name)
            .map_err(|_| format!("file name {s:?} contains a NUL byte"))
    }
    /// The name's bytes, without the NUL.
    pub fn as_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }
    fn display(&self) -> std::borrow::Cow<'_, str> {
        self.0.to_string_lossy()
    }
}

/// A directory of a target.
#[derive(Debug)]
pub enum Dir {
    /// An open directory (its fd is used with `openat`/`unlinkat`) and its path.
    Path {
        /// The directory, opened read-only.
        file: File,
        /// Its path, for error messages.
        path: PathBuf,
    },
    /// A directory inode of the engine.
    Ino(Ino),
}

/// An open regular file of a target.
#[derive(Debug)]
pub enum Handle {
    /// An open file descriptor.
    File(File),
    /// An engine inode holding one open reference (taken by `create`).
    Ino(Ino),
}

/// Journal counters of a target, read by the timer at the edges of a measured phase.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JournalCounters {
    /// Transactions committed.
    pub commits: u64,
    /// Bytes written to the log (log blocks x block size).
    pub log_bytes: u64,
}

impl JournalCounters {
    /// What happened between `earlier` and `self`.
    pub fn since(self, earlier: JournalCounters) -> JournalCounters {
        JournalCounters {
            commits: self.commits.saturating_sub(earlier.commits),
            log_bytes: self.log_bytes.saturating_sub(earlier.log_bytes),
        }
    }
}

/// Device reads a target made to fill its cache of file data, read by the timer at the
/// edges of a measured phase.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeviceReads {
    /// Read calls (each one contiguous run, or one scatter read of it).
    pub reads: u64,
    /// Bytes they read.
    pub bytes: u64,
}

impl DeviceReads {
    /// What happened between `earlier` and `self`.
    pub fn since(self, earlier: DeviceReads) -> DeviceReads {
        DeviceReads {
            reads: self.reads.saturating_sub(earlier.reads),
            bytes: self.bytes.saturating_sub(earlier.bytes),
        }
    }
}

/// A target's free space and how fragmented it is (what `e2freefrag` summarizes).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FreeSpace {
    /// Maximal runs of free blocks.
    pub extents: u64,
    /// Average run of free blocks, in KiB (0 when nothing is free).
    pub avg_extent_kib: f64,
}

/// The operations the workloads need, with errors as strings that say what failed.
pub trait Backend: Send + Sync {
    /// Label for records: "lanefs" or "path:DIR".
    fn label(&self) -> String;
    /// Where this run works, for error messages (the run's directory or image file).
    fn location(&self) -> String;
    /// The run's own (fresh, empty) directory.
    fn base(&self) -> &Dir;
    /// Make directory `name` in `parent`.
    fn mkdir(&self, parent: &Dir, name: &Name) -> Result<Dir, String>;
    /// Create regular file `name` in `dir` and keep it open.
    fn create(&self, dir: &Dir, name: &Name) -> Result<Handle, String>;
    /// Close a handle from `create`.
    fn close(&self, h: Handle) -> Result<(), String>;
    /// Remove `name` from `dir`.
    fn unlink(&self, dir: &Dir, name: &Name) -> Result<(), String>;
    /// Look `name` up in `dir` and read its attributes: `fstatat` on a path, `Fs::lookup`
    /// then `Fs::getattr` on the engine (a FUSE LOOKUP, then GETATTR).
    fn stat(&self, dir: &Dir, name: &Name) -> Result<(), String>;
    /// Allocate `[off, off+len)` with mode 0 (the size grows).
    fn fallocate(&self, h: &Handle, off: u64, len: u64) -> Result<(), String>;
    /// Set the file size to `size` (truncate).
    fn truncate(&self, h: &Handle, size: u64) -> Result<(), String>;
    /// Write all of `data` at `off`.
    fn write(&self, h: &Handle, off: u64, data: &[u8]) -> Result<(), String>;
    /// Read into `buf` at `off`; returns the bytes read, fewer than `buf.len()` only at the
    /// end of the file.
    fn read(&self, h: &Handle, off: u64, buf: &mut [u8]) -> Result<usize, String>;
    /// Drop the file's clean cached pages (`POSIX_FADV_DONTNEED` on a directory target;
    /// the engine's own page cache in-process), so the next reads go to the device.
    fn drop_cache(&self, h: &Handle) -> Result<(), String>;
    /// Make the file durable: fsync, or fdatasync when `datasync`.
    fn fsync(&self, h: &Handle, datasync: bool) -> Result<(), String>;
    /// The journal's counters since mount, where the target exposes them (the engine).
    fn journal(&self) -> Option<JournalCounters> {
        None
    }
    /// The device reads made for file data since mount, where the target counts them (the
    /// engine's page cache).
    fn device_reads(&self) -> Option<DeviceReads> {
        None
    }
    /// The limit of the target's cache of file data in bytes, where it has its own (the
    /// engine's `pagecache_limit`).
    fn cache_limit(&self) -> Option<u64> {
        None
    }
    /// How many extents map the file, where the target can tell (the engine).
    fn extents(&self, _h: &Handle) -> Result<Option<u64>, String> {
        Ok(None)
    }
    /// The free space and its fragmentation, where the target can tell (the engine).
    fn free_space(&self) -> Result<Option<FreeSpace>, String> {
        Ok(None)
    }
    /// Inodes free for new files, where the target has a fixed number of them (`statvfs`'s
    /// `f_favail`; the engine's statfs).
    fn free_inodes(&self) -> Result<Option<u64>, String> {
        Ok(None)
    }
    /// The inode cache's figures, where the bench can read them (the engine).
    fn icache(&self) -> Option<IcacheStats> {
        None
    }
    /// The metadata buffer cache's figures, where the bench can read them (the engine).
    fn bufcache(&self) -> Option<BufCacheStats> {
        None
    }
    /// CPU time (user + system) the process serving this target has used so far, where
    /// the target is served by a daemon whose pid is known (a FUSE mount).
    fn daemon_cpu(&self) -> Option<Duration> {
        None
    }
    /// Make directory `d` realtime (files and directories made in it keep their data on
    /// the realtime device) with an extent size hint of `hint` blocks (0: none), where the
    /// target has a realtime device (the engine on an image made with one).
    fn set_realtime(&self, _d: &Dir, _hint: u32) -> Result<(), String> {
        Err(format!("{} has no realtime device", self.location()))
    }
    /// Free `[off, off+len)` of the file and keep its size (`FALLOC_FL_PUNCH_HOLE`), where
    /// the workloads need it (the engine).
    fn punch(&self, _h: &Handle, off: u64, len: u64) -> Result<(), String> {
        Err(format!(
            "punching {len} bytes at {off}: not done on {}",
            self.location()
        ))
    }
    /// Make everything durable, so nothing waits for a commit any more (the engine's
    /// `Fs::sync`), where the workloads need it.
    fn sync(&self) -> Result<(), String> {
        Err(format!("sync: not done on {}", self.location()))
    }
    /// The realtime allocator's counters since mount, where the target has one.
    fn rt_stats(&self) -> Option<RtStats> {
        None
    }
    /// The file system's block size in bytes, where the bench can read it (the engine).
    fn block_size(&self) -> Option<u64> {
        None
    }
    /// Check the realtime allocator's bitmap, summary and free counts against each other
    /// (nothing to check without one).
    fn rt_check(&self) -> Result<(), String> {
        Ok(())
    }
}

/// CPU time (user + system, all threads, living and exited) process `pid` has used: its
/// process CPU clock (`clock_getcpuclockid`, nanoseconds), or where that cannot be read,
/// utime + stime from `/proc/<pid>/stat` (clock ticks). `None` when the process is gone.
pub fn process_cpu(pid: u32) -> Option<Duration> {
    let id = libc::pid_t::try_from(pid).ok()?;
    let mut clock: libc::clockid_t = 0;
    // SAFETY: `clock` is a valid place for the one clockid the call writes.
    if unsafe { libc::clock_getcpuclockid(id, &mut clock) } == 0 {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid place for the one timespec the call writes.
        if unsafe { libc::clock_gettime(clock, &mut ts) } == 0 {
            let secs = u64::try_from(ts.tv_sec).ok()?;
            let nanos = u32::try_from(ts.tv_nsec).ok()?;
            return Some(Duration::new(secs, nanos));
        }
    }
    stat_cpu(pid)
}

/// CPU time (user + system, all threads) this process has used: its process CPU clock
/// (`CLOCK_PROCESS_CPUTIME_ID`).
pub fn own_cpu() -> Option<Duration> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid place for the one timespec the call writes.
    if unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) } != 0 {
        return None;
    }
    let secs = u64::try_from(ts.tv_sec).ok()?;
    let nanos = u32::try_from(ts.tv_nsec).ok()?;
    Some(Duration::new(secs, nanos))
}

/// utime + stime of process `pid` from `/proc/<pid>/stat`.
fn stat_cpu(pid: u32) -> Option<Duration> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces or parentheses:
    // fields are counted after the last ')'. There, index 0 is field 3 (state), so utime
    // (field 14) and stime (field 15) are indexes 11 and 12.
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let hz = u64::try_from(hz).ok().filter(|&h| h > 0)?;
    let ticks = utime.saturating_add(stime);
    Some(Duration::from_secs(ticks / hz) + Duration::from_nanos((ticks % hz) * 1_000_000_000 / hz))
}

#[cfg(test)]
mod cpu_tests {
    use super::*;

    /// A busy child's CPU time is read, rises as it spins, and agrees with /proc's ticks.
    #[test]
    fn process_cpu_reads_another_process() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .spawn()
            .expect("spawn sh");
        let pid = child.id();
        std::thread::sleep(Duration::from_millis(300));
        let a = process_cpu(pid);
        std::thread::sleep(Duration::from_millis(300));
        let (b, ticks) = (process_cpu(pid), stat_cpu(pid));
        let _ = child.kill();
        let _ = child.wait();
        let (a, b, ticks) = (a.expect("cpu a"), b.expect("cpu b"), ticks.expect("ticks"));
        assert!(b > a, "{a:?} then {b:?}");
        assert!(b > Duration::from_millis(100), "{b:?}");
        let diff = b.as_secs_f64() - ticks.as_secs_f64();
        assert!(diff.abs() < 0.1, "clock {b:?} vs /proc ticks {ticks:?}");
        assert_eq!(process_cpu(u32::MAX), None);
    }
}
