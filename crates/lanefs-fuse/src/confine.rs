//! The daemon's confinement. Once its mount is up, the process that parses a possibly
//! hostile image keeps only what serving needs: the descriptors it opened (the image,
//! `rtdev=`, /dev/fuse, its io_uring queues) and the system calls it makes with them.
//!
//! - `no_new_privs`: nothing it could execute gains privileges (and Landlock and seccomp
//!   need it).
//! - Landlock: a ruleset that handles every file-system and TCP right the kernel knows
//!   and grants none but reading and writing /dev/fuse (opened before; the /dev/fuse
//!   transport's threads open it again to clone the connection), and scopes abstract
//!   UNIX sockets: no other path opens, no file is made, renamed or removed, no TCP port
//!   is bound or reached, whatever the uid.
//! - Capabilities: every one dropped, bounding set included. Serving needs none: the
//!   image and /dev/fuse are open, permissions are checked by the frontend itself, and
//!   the unmount on a signal is the supervising process's (`lanefs mount`'s) to do.
//! - seccomp: an allow-list of the system calls serving makes (`ALLOWED`); any other
//!   kills the process (the supervisor logs it, and the journal replays at the next
//!   mount). A few fail with an errno instead (`REFUSED`): `socket` and `connect`
//!   (the C library's syslog reconnecting: a lost log line is better than a lost mount)
//!   and `umount2`.
//!
//! No-new-privileges, Landlock and capabilities are per thread in Linux, and the engine,
//! the io_uring queues and the signal thread already run when the mount is up: every
//! thread confines itself, the others from a signal handler (`confine_all_threads`, as
//! the C library changes the uid of every thread), before the seccomp filter goes to all
//! of them at once (SECCOMP_FILTER_FLAG_TSYNC). Threads started later inherit all of it.

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};
use std::collections::{BTreeMap, HashSet};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// What [`confine`] put in place, for the daemon's log line.
#[derive(Debug)]
pub struct Confined {
    /// The kernel's Landlock ABI (what the ruleset handles is at most the crate's
    /// newest, 6), or why none.
    pub landlock: Result<i32, String>,
    /// The seccomp filter, or why none.
    pub seccomp: Result<(), String>,
    /// The threads confined (this one included).
    pub threads: usize,
}

impl std::fmt::Display for Confined {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "confined: no_new_privs, no capabilities")?;
        match &self.seccomp {
            Ok(()) => write!(f, ", seccomp filter")?,
            Err(why) => write!(f, ", no seccomp filter ({why})")?,
        }
        match &self.landlock {
            Ok(abi) => write!(f, ", Landlock ABI {abi} (no path but /dev/fuse)")?,
            Err(why) => write!(f, ", no Landlock ({why})")?,
        }
        write!(f, "; {} threads", self.threads)
    }
}

/// Confine this process, every thread of it (see the module's doc). An error leaves it
/// partly confined: the caller stops serving.
/// `supervisor` is the one process the daemon may signal (besides its own threads).
pub fn confine(supervisor: i32) -> Result<Confined, String> {
    // Read again after the confinement (a remount read-only), which opens no path then.
    crate::mountinfo::keep_open().map_err(|e| format!("/proc/self/mountinfo: {e}"))?;
    let (ruleset, landlock) = match landlock_ruleset() {
        Ok(Some((fd, abi))) => (Some(fd), Ok(abi)),
        Ok(None) => (None, Err("not offered by this kernel".to_string())),
        Err(e) => return Err(format!("Landlock: {e}")),
    };
    // An architecture seccompiler does not know serves without the filter, saying so.
    let filters = match arch() {
        Ok(arch) => Ok(seccomp_filters(arch, supervisor)?),
        Err(e) => Err(e),
    };
    let threads = confine_all_threads(ruleset.as_ref().map_or(-1, AsRawFd::as_raw_fd))?;
    drop(ruleset);
    if let Ok(filters) = &filters {
        for f in filters {
            seccompiler::apply_filter_all_threads(f).map_err(|e| format!("seccomp: {e}"))?;
        }
    }
    Ok(Confined {
        landlock,
        seccomp: filters.map(drop),
        threads,
    })
}

/// A Landlock ruleset that handles every right this kernel knows and allows none, with
/// its ABI version; `None` where the kernel has no Landlock.
fn landlock_ruleset() -> Result<Option<(OwnedFd, i32)>, String> {
    use landlock::{
        Access, AccessFs, AccessNet, PathBeneath, PathFd, Ruleset, RulesetAttr, RulesetCreatedAttr,
        Scope, ABI,
    };
    // SAFETY: landlock_create_ruleset with a null attribute, size 0 and the VERSION flag
    // only returns the ABI version (or an error); it reads and writes no memory.
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            1u32, // LANDLOCK_CREATE_RULESET_VERSION
        )
    };
    if abi < 1 {
        return Ok(None);
    }
    // The newest ABI the crate knows: best effort drops what this kernel lacks.
    let all = ABI::V6;
    // /dev/fuse only: the /dev/fuse transport's threads each open it again for a clone
    // of the connection (FUSE_DEV_IOC_CLONE) as they start, after the confinement.
    let fuse = PathBeneath::new(
        PathFd::new("/dev/fuse").map_err(|e| e.to_string())?,
        AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::IoctlDev,
    );
    let created = Ruleset::default()
        .handle_access(AccessFs::from_all(all))
        .and_then(|r| r.handle_access(AccessNet::from_all(all)))
        .and_then(|r| r.scope(Scope::AbstractUnixSocket))
        .and_then(|r| r.create())
        .and_then(|r| r.add_rule(fuse))
        .map_err(|e| e.to_string())?;
    let fd: Option<OwnedFd> = created.into();
    Ok(fd.map(|fd| (fd, abi as i32)))
}

/// The system calls serving makes, by name (`libc::SYS_*` of the build target).
const ALLOWED: &[(&str, libc::c_long)] = &[
    // Data and metadata on the open image, /dev/fuse and the queues' rings.
    ("read", libc::SYS_read),
    ("write", libc::SYS_write),
    ("pread64", libc::SYS_pread64),
    ("pwrite64", libc::SYS_pwrite64),
    ("readv", libc::SYS_readv),
    ("writev", libc::SYS_writev),
    ("preadv", libc::SYS_preadv),
    ("pwritev", libc::SYS_pwritev),
    ("preadv2", libc::SYS_preadv2),
    ("pwritev2", libc::SYS_pwritev2),
    ("lseek", libc::SYS_lseek),
    ("fsync", libc::SYS_fsync),
    ("fdatasync", libc::SYS_fdatasync),
    #[cfg(target_arch = "x86_64")]
    ("sync_file_range", libc::SYS_sync_file_range),
    ("fallocate", libc::SYS_fallocate),
    ("ftruncate", libc::SYS_ftruncate),
    ("fstat", libc::SYS_fstat),
    ("newfstatat", libc::SYS_newfstatat),
    ("statx", libc::SYS_statx),
    ("fcntl", libc::SYS_fcntl),
    ("ioctl", libc::SYS_ioctl),
    ("close", libc::SYS_close),
    ("dup", libc::SYS_dup),
    ("io_uring_enter", libc::SYS_io_uring_enter),
    ("io_uring_register", libc::SYS_io_uring_register),
    #[cfg(target_arch = "x86_64")]
    ("poll", libc::SYS_poll),
    ("ppoll", libc::SYS_ppoll),
    // Opens reach Landlock, which refuses every path: allowed here so that a stray open
    // fails with EACCES instead of killing the mount.
    ("openat", libc::SYS_openat),
    #[cfg(target_arch = "x86_64")]
    ("open", libc::SYS_open),
    // Memory (the allocator) and threads.
    ("mmap", libc::SYS_mmap),
    ("munmap", libc::SYS_munmap),
    ("mremap", libc::SYS_mremap),
    ("mprotect", libc::SYS_mprotect),
    ("madvise", libc::SYS_madvise),
    ("brk", libc::SYS_brk),
    ("futex", libc::SYS_futex),
    // seize (papaya's epochs, `icache=papaya`) at every retire.
    ("membarrier", libc::SYS_membarrier),
    ("clone", libc::SYS_clone),
    ("clone3", libc::SYS_clone3),
    ("set_robust_list", libc::SYS_set_robust_list),
    ("rseq", libc::SYS_rseq),
    ("exit", libc::SYS_exit),
    ("exit_group", libc::SYS_exit_group),
    ("sched_yield", libc::SYS_sched_yield),
    ("sched_getaffinity", libc::SYS_sched_getaffinity),
    ("sched_setaffinity", libc::SYS_sched_setaffinity),
    ("prctl", libc::SYS_prctl),
    ("sigaltstack", libc::SYS_sigaltstack),
    ("rt_sigaction", libc::SYS_rt_sigaction),
    ("rt_sigprocmask", libc::SYS_rt_sigprocmask),
    ("rt_sigreturn", libc::SYS_rt_sigreturn),
    ("restart_syscall", libc::SYS_restart_syscall),
    // Time, identity, randomness.
    ("clock_gettime", libc::SYS_clock_gettime),
    ("clock_nanosleep", libc::SYS_clock_nanosleep),
    ("nanosleep", libc::SYS_nanosleep),
    ("gettimeofday", libc::SYS_gettimeofday),
    ("getrandom", libc::SYS_getrandom),
    ("getpid", libc::SYS_getpid),
    ("gettid", libc::SYS_gettid),
    ("getppid", libc::SYS_getppid),
    ("getuid", libc::SYS_getuid),
    ("geteuid", libc::SYS_geteuid),
    ("getgid", libc::SYS_getgid),
    ("getegid", libc::SYS_getegid),
    ("uname", libc::SYS_uname),
    // The signal thread's self-pipe (a socket pair); the supervisor's flag channel (a
    // socket pair, crate::flagproxy); syslog on its connected socket.
    ("recvfrom", libc::SYS_recvfrom),
    ("recvmsg", libc::SYS_recvmsg),
    ("sendto", libc::SYS_sendto),
    ("sendmsg", libc::SYS_sendmsg),
];

/// Refused with an errno rather than allowed (stacked before the allow-list, which lists
/// them too: the kernel takes the stricter answer). `socket` and `connect`: the C
/// library's syslog reconnecting. `umount2`: fuser unmounts a user's mount when its
/// session ends (the connection is gone by then); EINVAL, not EPERM, which would make it
/// run `fusermount3 -u`. `process_vm_readv`: below.
const REFUSED: &[(libc::c_long, i32)] = &[
    (libc::SYS_socket, libc::EACCES),
    (libc::SYS_connect, libc::EACCES),
    (libc::SYS_umount2, libc::EINVAL),
    // A shutdown's flags, which the daemon tries to read first: refused, so that it asks
    // the supervisor (crate::flagproxy), and reads no other process's memory.
    (libc::SYS_process_vm_readv, libc::EPERM),
];

fn arch() -> Result<TargetArch, String> {
    TargetArch::try_from(std::env::consts::ARCH)
        .map_err(|e| format!("seccomp: {e} ({})", std::env::consts::ARCH))
}

/// The filters: the refusals, one per errno, then the allow-list (anything else kills).
fn seccomp_filters(arch: TargetArch, supervisor: i32) -> Result<Vec<BpfProgram>, String> {
    let err = |e: seccompiler::BackendError| format!("seccomp: {e}");
    let build = |rules: BTreeMap<i64, Vec<SeccompRule>>,
                 miss: SeccompAction,
                 hit: SeccompAction|
     -> Result<BpfProgram, String> {
        SeccompFilter::new(rules, miss, hit, arch)
            .and_then(BpfProgram::try_from)
            .map_err(|e| format!("seccomp: {e}"))
    };
    let any = |calls: &mut dyn Iterator<Item = libc::c_long>| -> BTreeMap<i64, Vec<SeccompRule>> {
        calls.map(|n| (n, Vec::new())).collect()
    };
    // kill only the supervisor (a signal passed on), tgkill only this process's threads
    // (an abort, the confinement's own signal): a root daemon without capabilities could
    // otherwise signal every root process.
    let arg0_is = |v: i32| -> Result<Vec<SeccompRule>, String> {
        let c = SeccompCondition::new(
            0,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::Eq,
            v as u32 as u64,
        )
        .map_err(err)?;
        Ok(vec![SeccompRule::new(vec![c]).map_err(err)?])
    };
    // SAFETY: getpid has no preconditions.
    let me = unsafe { libc::getpid() };
    let mut filters = Vec::new();
    let mut errnos: Vec<i32> = REFUSED.iter().map(|r| r.1).collect();
    errnos.sort_unstable();
    errnos.dedup();
    for errno in errnos {
        filters.push(build(
            any(&mut REFUSED.iter().filter(|r| r.1 == errno).map(|r| r.0)),
            SeccompAction::Allow,
            SeccompAction::Errno(errno as u32),
        )?);
    }
    let mut allowed = any(&mut ALLOWED
        .iter()
        .map(|(_, n)| *n)
        .chain(REFUSED.iter().map(|r| r.0)));
    allowed.insert(libc::SYS_kill, arg0_is(supervisor)?);
    allowed.insert(libc::SYS_tgkill, arg0_is(me)?);
    filters.push(build(
        allowed,
        SeccompAction::KillProcess,
        SeccompAction::Allow,
    )?);
    Ok(filters)
}

/// The Landlock ruleset the signal handler enforces (-1: none).
static RULESET: AtomicI32 = AtomicI32::new(-1);
/// Threads that ran the handler, and those of them that failed.
static DONE: AtomicUsize = AtomicUsize::new(0);
static FAILED: AtomicUsize = AtomicUsize::new(0);

/// Confine the calling thread: no_new_privs, the Landlock ruleset `ruleset` (if >= 0),
/// an empty bounding set and no capabilities. Raw system calls only: it runs in a signal
/// handler. Returns whether every step worked.
fn confine_thread(ruleset: i32) -> bool {
    // SAFETY: these calls pass only integers and, for capset, pointers to the two local
    // structures that live until the call returns; none touches memory of this program
    // otherwise, and all are async-signal-safe system calls.
    unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return false;
        }
        if ruleset >= 0 && libc::syscall(libc::SYS_landlock_restrict_self, ruleset, 0u32) != 0 {
            return false;
        }
        // Needs CAP_SETPCAP: a daemon without capabilities (not root) has an empty
        // effective set already, and EPERM here changes nothing.
        for cap in 0..64 {
            libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0);
        }
        #[repr(C)]
        struct Header {
            version: u32,
            pid: i32,
        }
        #[repr(C)]
        #[derive(Clone, Copy)]
        struct Data {
            effective: u32,
            permitted: u32,
            inheritable: u32,
        }
        let mut h = Header {
            version: 0x2008_0522, // _LINUX_CAPABILITY_VERSION_3
            pid: 0,
        };
        let d = [Data {
            effective: 0,
            permitted: 0,
            inheritable: 0,
        }; 2];
        libc::syscall(libc::SYS_capset, &mut h as *mut Header, d.as_ptr()) == 0
    }
}

extern "C" fn on_confine_signal(_: libc::c_int) {
    // SAFETY: __errno_location returns this thread's errno slot, valid for the thread's
    // life; the handler restores what it found so the interrupted code sees no change.
    let errno = unsafe { *libc::__errno_location() };
    if !confine_thread(RULESET.load(Ordering::Acquire)) {
        FAILED.fetch_add(1, Ordering::AcqRel);
    }
    DONE.fetch_add(1, Ordering::AcqRel);
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

/// Every thread of the process but this one, by /proc/self/task.
fn other_threads() -> Result<Vec<i32>, String> {
    // SAFETY: gettid has no preconditions.
    let me = unsafe { libc::gettid() };
    let dir = std::fs::read_dir("/proc/self/task").map_err(|e| format!("/proc/self/task: {e}"))?;
    Ok(dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&t| t != me)
        .collect())
}

/// Confine every thread of the process with `ruleset` (see [`confine_thread`]): the
/// others by a signal whose handler does it, until a look at /proc/self/task finds no
/// thread not yet signalled (one that an unconfined thread started meanwhile), then this
/// one. Returns how many threads.
fn confine_all_threads(ruleset: i32) -> Result<usize, String> {
    let sig = libc::SIGRTMIN();
    RULESET.store(ruleset, Ordering::Release);
    DONE.store(0, Ordering::Release);
    FAILED.store(0, Ordering::Release);
    // SAFETY: a zeroed sigaction is a valid value to fill; the handler only makes
    // async-signal-safe system calls and touches atomics.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_confine_signal as *const () as usize;
        sa.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        if libc::sigaction(sig, &sa, std::ptr::null_mut()) != 0 {
            return Err(format!(
                "confining threads: sigaction: {}",
                std::io::Error::last_os_error()
            ));
        }
    }
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    let mut signalled = HashSet::new();
    let mut sent = 0;
    loop {
        let new: Vec<i32> = other_threads()?
            .into_iter()
            .filter(|t| !signalled.contains(t))
            .collect();
        if new.is_empty() {
            break;
        }
        for t in new {
            signalled.insert(t);
            // SAFETY: tgkill only sends a signal, whose handler is installed above. A
            // thread that ended meanwhile is ESRCH and not waited for.
            if unsafe { libc::syscall(libc::SYS_tgkill, pid, t, sig) } == 0 {
                sent += 1;
            }
        }
        let start = Instant::now();
        while DONE.load(Ordering::Acquire) < sent {
            if start.elapsed() > Duration::from_secs(5) {
                return Err(format!(
                    "confining threads: {} of {sent} did not answer in 5 s",
                    sent - DONE.load(Ordering::Acquire)
                ));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    let failed = FAILED.load(Ordering::Acquire) + usize::from(!confine_thread(ruleset));
    if failed > 0 {
        return Err(format!(
            "confining threads: {failed} of {} failed",
            sent + 1
        ));
    }
    // SAFETY: ignores the signal from now on (nobody sends it; the handler would stay
    // valid anyway).
    unsafe { libc::signal(sig, libc::SIG_IGN) };
    Ok(sent + 1)
}

/// The debug builds' test hook: a root caller's ioctl with a path makes the daemon try to
/// open it (tests show a confined daemon cannot). `_IOW('L', 0x7e, [u8; 256])`.
pub const IOC_PROBE_OPEN: u32 = (1 << 30) | (256 << 16) | ((b'L' as u32) << 8) | 0x7e;

/// The debug builds' other test hook: the daemon makes a system call outside its filter
/// (syslog(2), reading the kernel log buffer's size), which a confined daemon dies of.
/// `_IO('L', 0x7d)`.
pub const IOC_PROBE_FORBIDDEN: u32 = ((b'L' as u32) << 8) | 0x7d;

/// Make the forbidden call of [`IOC_PROBE_FORBIDDEN`]; returns if not confined.
pub fn probe_forbidden() {
    // SAFETY: syslog(2) with SYSLOG_ACTION_SIZE_BUFFER (10) takes no buffer and only
    // returns a size.
    unsafe { libc::syscall(libc::SYS_syslog, 10, std::ptr::null_mut::<u8>(), 0) };
}

/// Try to open the path in `arg` (NUL-padded) read-only; the errno if refused.
pub fn probe_open(arg: &[u8]) -> Result<(), i32> {
    let end = arg.iter().position(|&b| b == 0).unwrap_or(arg.len());
    let path = <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(&arg[..end]);
    std::fs::File::open(path)
        .map(drop)
        .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))
}
