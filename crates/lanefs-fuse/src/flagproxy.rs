//! The supervisor reads for a confined daemon what the daemon may no longer read itself:
//! FS_IOC_SHUTDOWN's flags, whether a caller is in a supplementary group, and a caller's
//! fsuid where the kernel does not name it (under FUSE_ALLOW_IDMAP). And the daemon tells
//! the supervisor, once, the device of the mount it made.
//!
//! The kernel passes the daemon no input for the `_IOR` command, only the caller's pid
//! and pointer, and a confined daemon, with no capabilities, may not read the memory of a
//! caller that has some (root's `godown`). Its supervisor, unconfined and reading
//! nothing of the image, may: over a socket pair the daemon sends a pid; the supervisor
//! answers with the `u32` that the thread of that pid passes to the ioctl it is in right
//! now, by /proc/PID/syscall (the system call and its arguments, which the kernel shows
//! only to who may trace the thread). It reads nothing else: a thread that is not in an
//! EXT4_IOC_SHUTDOWN ioctl gets EPERM, so a daemon taken over by a hostile image learns
//! no memory but a shutdown's flags through it. A caller's groups (for set-group-ID
//! rules) and fsuid come from /proc/PID/status, which Landlock refuses the daemon; the
//! supervisor answers only whether one thread is in one group, and its fsuid.
//!
//! One question at a time (a lock); a channel that failed once (no answer in 5 s, or
//! broken) is not asked again, so a late answer is never taken for another question's;
//! an errno the supervisor answers is that question's alone. The supervisor answers for
//! any pid the daemon names: a hostile daemon learns through it which threads exist and
//! their fsuid and groups, what any process may read in /proc, and no more.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// `_IOR('X', 125, __u32)`: EXT4_IOC_SHUTDOWN, the number of XFS_IOC_GOINGDOWN.
pub const EXT4_IOC_SHUTDOWN: u32 = 0x8004_587d;

/// A connected pair of sequenced-packet sockets: (the supervisor's, the daemon's), both
/// close-on-exec. The daemon's waits at most 5 s for an answer.
pub fn channel() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors socketpair writes.
    let r = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned by nothing else.
    let (sup, daemon) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let tv = libc::timeval {
        tv_sec: 5,
        tv_usec: 0,
    };
    // SAFETY: SO_RCVTIMEO takes a timeval, passed with its size; it lives for the call.
    let r = unsafe {
        libc::setsockopt(
            daemon.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&tv as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((sup, daemon))
}

/// Requests: (kind, pid, gid), three `u32`s; answers: (errno, value), two.
const FLAGS: u32 = 1;
const IN_GROUP: u32 = 2;
const FSUID: u32 = 3;
const MOUNTED: u32 = 4;
const MOUNTED_ID: u32 = 5;

/// The supervisor's side: the device (`major:minor`) its daemon said it mounted, and
/// the mount's unique ID where the kernel has one (Linux 6.8+).
static MOUNTED_DEV: std::sync::OnceLock<String> = std::sync::OnceLock::new();
static MOUNTED_UNIQUE: std::sync::OnceLock<u64> = std::sync::OnceLock::new();

/// The daemon's end of the channel, once it has one; whether it failed.
static DAEMON: std::sync::OnceLock<RawFd> = std::sync::OnceLock::new();
static LOCK: std::sync::Mutex<bool> = std::sync::Mutex::new(false);

/// Use `chan` (the daemon's end, open for the process's life) for [`ask_flags`] and
/// [`ask_in_group`].
pub fn set_daemon_channel(chan: RawFd) {
    let _ = DAEMON.set(chan);
}

/// The daemon's side: the flags thread `pid` passes to its shutdown ioctl, as read by the
/// supervisor.
pub fn ask_flags(pid: u32) -> io::Result<u32> {
    ask([FLAGS, pid, 0])
}

/// The daemon's side: whether thread `pid` is in group `gid` (its supplementary groups),
/// as read by the supervisor.
pub fn ask_in_group(pid: u32, gid: u32) -> io::Result<bool> {
    ask([IN_GROUP, pid, gid]).map(|v| v != 0)
}

/// The daemon's side: thread `pid`'s fsuid, as read by the supervisor.
pub fn ask_fsuid(pid: u32) -> io::Result<u32> {
    ask([FSUID, pid, 0])
}

/// The daemon's side, once its mount at `mp` is up (before it says so to anyone else):
/// tell the supervisor the mount's device, as mountinfo shows it, and its unique ID
/// where the kernel has one, by which the supervisor knows its mount from a later one
/// at the same path (which takes the same device and mountinfo ID again). `chan` is the
/// daemon's end of the channel.
pub fn tell_mounted(chan: RawFd, mp: &std::path::Path) -> io::Result<()> {
    set_daemon_channel(chan);
    let dev = crate::mountinfo::device_of(mp)
        .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))?;
    let (major, minor) = dev
        .split_once(':')
        .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)))
        .ok_or_else(|| io::Error::from_raw_os_error(libc::EPROTO))?;
    ask([MOUNTED, major, minor])?;
    if let Some(id) = crate::mountinfo::unique_id(mp) {
        ask([MOUNTED_ID, id as u32, (id >> 32) as u32])?;
    }
    Ok(())
}

/// The supervisor's side: the device (`major:minor`) of the mount its daemon made, once
/// the daemon has said (the first word only: a daemon taken over later cannot move it).
pub fn mounted_device() -> Option<&'static str> {
    MOUNTED_DEV.get().map(String::as_str)
}

/// The supervisor's side: the unique ID of the mount its daemon made
/// ([`crate::mountinfo::unique_id`]), once the daemon has said and where the kernel has
/// one.
pub fn mounted_unique_id() -> Option<u64> {
    MOUNTED_UNIQUE.get().copied()
}

fn ask(req: [u32; 3]) -> io::Result<u32> {
    let chan = *DAEMON
        .get()
        .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOTCONN))?;
    let mut failed = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    if *failed {
        return Err(io::Error::from_raw_os_error(libc::ENOTCONN));
    }
    match exchange(chan, req) {
        Ok(answer) => answer,
        // No answer (in 5 s), or a broken channel: never asked again, so that a late
        // answer is not taken for another question's.
        Err(e) => {
            *failed = true;
            Err(e)
        }
    }
}

/// One request on `chan` and its answer: the outer error is the channel's (sending,
/// receiving, a malformed answer), the inner one the supervisor's answer (an errno).
fn exchange(chan: RawFd, req: [u32; 3]) -> io::Result<io::Result<u32>> {
    let b: Vec<u8> = req.iter().flat_map(|w| w.to_ne_bytes()).collect();
    // SAFETY: `b` is readable for its length during the call.
    if unsafe { libc::send(chan, b.as_ptr().cast(), b.len(), libc::MSG_NOSIGNAL) }
        != b.len() as isize
    {
        return Err(io::Error::last_os_error());
    }
    let mut ans = [0u8; 8];
    // SAFETY: `ans` is 8 writable bytes for the call.
    let n = unsafe { libc::recv(chan, ans.as_mut_ptr().cast(), ans.len(), 0) };
    if n != ans.len() as isize {
        return Err(if n < 0 {
            io::Error::last_os_error()
        } else {
            io::Error::from_raw_os_error(libc::EPROTO)
        });
    }
    let errno = i32::from_ne_bytes([ans[0], ans[1], ans[2], ans[3]]);
    if errno != 0 {
        return Ok(Err(io::Error::from_raw_os_error(errno)));
    }
    Ok(Ok(u32::from_ne_bytes([ans[4], ans[5], ans[6], ans[7]])))
}

/// The supervisor's side: answer one request waiting on `chan` (never blocking on a
/// daemon that does not read its answers). False once the daemon's end is closed.
pub fn answer(chan: BorrowedFd<'_>) -> bool {
    let mut req = [0u8; 12];
    // SAFETY: `req` is 12 writable bytes for the call.
    let n = unsafe {
        libc::recv(
            chan.as_raw_fd(),
            req.as_mut_ptr().cast(),
            req.len(),
            libc::MSG_DONTWAIT,
        )
    };
    if n < 0 {
        let e = io::Error::last_os_error().raw_os_error();
        return matches!(e, Some(libc::EINTR | libc::EAGAIN));
    }
    if n == 0 {
        return false;
    }
    let w = |k: usize| u32::from_ne_bytes([req[k], req[k + 1], req[k + 2], req[k + 3]]);
    let r = match (n, w(0)) {
        (12, FLAGS) => shutdown_flags(w(4)),
        (12, IN_GROUP) => in_group(w(4), w(8)).map(u32::from),
        (12, FSUID) => fsuid(w(4)),
        (12, MOUNTED) => {
            let _ = MOUNTED_DEV.set(format!("{}:{}", w(4), w(8)));
            Ok(0)
        }
        (12, MOUNTED_ID) => {
            let _ = MOUNTED_UNIQUE.set(u64::from(w(4)) | u64::from(w(8)) << 32);
            Ok(0)
        }
        _ => Err(io::Error::from_raw_os_error(libc::EINVAL)),
    };
    let (errno, value) = match r {
        Ok(v) => (0, v),
        Err(e) => (e.raw_os_error().unwrap_or(libc::EIO), 0),
    };
    let mut ans = [0u8; 8];
    ans[..4].copy_from_slice(&errno.to_ne_bytes());
    ans[4..].copy_from_slice(&value.to_ne_bytes());
    // SAFETY: `ans` is 8 readable bytes for the call.
    unsafe {
        libc::send(
            chan.as_raw_fd(),
            ans.as_ptr().cast(),
            ans.len(),
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
        )
    };
    true
}

/// Whether thread `pid` is in group `gid` (its fsgid or a supplementary group), by
/// /proc/PID/status.
pub fn in_group(pid: u32, gid: u32) -> io::Result<bool> {
    let status = status(pid)?;
    let field = |k: &str| status.lines().find_map(|l| l.strip_prefix(k)).unwrap_or("");
    let fsgid = field("Gid:").split_whitespace().nth(3);
    Ok(fsgid.and_then(|g| g.parse().ok()) == Some(gid)
        || field("Groups:")
            .split_whitespace()
            .any(|x| x.parse() == Ok(gid)))
}

/// Thread `pid`'s fsuid (the fourth of /proc/PID/status's `Uid:` line).
pub fn fsuid(pid: u32) -> io::Result<u32> {
    let status = status(pid)?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|u| u.split_whitespace().nth(3))
        .and_then(|u| u.parse().ok())
        .ok_or_else(|| io::Error::from_raw_os_error(libc::EPROTO))
}

/// /proc/PID/status of thread `pid`; ESRCH for pid 0 (a caller in a pid namespace the
/// daemon cannot see, or the kernel itself), and for any pid when /proc is not of this
/// process's pid namespace (FUSE gives pids as this namespace numbers them, and another
/// /proc would name other processes).
fn status(pid: u32) -> io::Result<String> {
    if pid == 0 {
        return Err(io::Error::from_raw_os_error(libc::ESRCH));
    }
    let text = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    if !proc_is_ours() {
        return Err(io::Error::from_raw_os_error(libc::ESRCH));
    }
    Ok(text)
}

/// Whether /proc shows this process's pid namespace: /proc/self names this process.
/// Asked once, after a read of /proc succeeded (so only where /proc may be read).
fn proc_is_ours() -> bool {
    static OURS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *OURS.get_or_init(|| {
        std::fs::read_link("/proc/self")
            .is_ok_and(|p| p.as_os_str().to_str() == Some(&std::process::id().to_string()))
    })
}

/// The `u32` that thread `pid` passes to the EXT4_IOC_SHUTDOWN ioctl it is making now;
/// EPERM when it is making no such call.
fn shutdown_flags(pid: u32) -> io::Result<u32> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/syscall"))?;
    let mut f = text.split_whitespace();
    let nr: i64 = f.next().and_then(|n| n.parse().ok()).unwrap_or(-1);
    let hex = |s: Option<&str>| {
        s.and_then(|s| s.strip_prefix("0x"))
            .and_then(|s| u64::from_str_radix(s, 16).ok())
    };
    let (_fd, cmd, arg) = (hex(f.next()), hex(f.next()), hex(f.next()));
    match (cmd, arg) {
        (Some(cmd), Some(arg)) if nr == libc::SYS_ioctl && cmd as u32 == EXT4_IOC_SHUTDOWN => {
            read_u32(pid, arg)
        }
        _ => Err(io::Error::from_raw_os_error(libc::EPERM)),
    }
}

/// The `u32` at `addr` in the memory of process (or thread) `pid`.
pub fn read_u32(pid: u32, addr: u64) -> io::Result<u32> {
    let pid = libc::pid_t::try_from(pid)
        .ok()
        .filter(|&p| p > 0)
        // No pid: the caller is in a pid namespace the daemon cannot see.
        .ok_or_else(|| io::Error::from_raw_os_error(libc::ESRCH))?;
    let mut b = [0u8; 4];
    let local = libc::iovec {
        iov_base: b.as_mut_ptr().cast(),
        iov_len: b.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as usize as *mut libc::c_void,
        iov_len: b.len(),
    };
    // SAFETY: `local` describes `b`, 4 bytes this function owns and may write, alive for
    // the whole call; `remote` is an address in the other process, which the kernel checks
    // (EFAULT) and which this process never dereferences. Both arrays hold one iovec.
    let n = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
    match n {
        4 => Ok(u32::from_ne_bytes(b)),
        n if n < 0 => Err(io::Error::last_os_error()),
        // Part of the word past a mapping's end.
        _ => Err(io::Error::from_raw_os_error(libc::EFAULT)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A thread in no shutdown ioctl gets EPERM: the supervisor reads nothing for it;
    /// a group question is answered.
    #[test]
    fn nothing_read_for_a_thread_not_in_the_ioctl() {
        let (sup, daemon) = channel().unwrap();
        let t = std::thread::spawn(move || {
            for _ in 0..3 {
                let mut p = libc::pollfd {
                    fd: sup.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one pollfd.
                unsafe { libc::poll(&mut p, 1, 5000) };
                assert!(answer(std::os::fd::AsFd::as_fd(&sup)));
            }
        });
        let me = std::process::id();
        let e = exchange(daemon.as_raw_fd(), [FLAGS, me, 0])
            .unwrap()
            .unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EPERM));
        // SAFETY: getgid has no preconditions.
        let gid = unsafe { libc::getgid() };
        let v = exchange(daemon.as_raw_fd(), [IN_GROUP, me, gid])
            .unwrap()
            .unwrap();
        assert_eq!(v != 0, in_group(me, gid).unwrap());
        assert!(in_group(me, gid).unwrap(), "the fsgid is a group one is in");
        // SAFETY: geteuid has no preconditions (the fsuid follows the euid here).
        let uid = unsafe { libc::geteuid() };
        let got = exchange(daemon.as_raw_fd(), [FSUID, me, 0]).unwrap();
        assert_eq!(got.unwrap(), uid);
        t.join().unwrap();
    }

    /// A word of this process reads back; a bad address is EFAULT; no pid is ESRCH.
    #[test]
    fn a_word_of_a_process() {
        let word: u32 = 0x0102_0304;
        let me = std::process::id();
        assert_eq!(read_u32(me, &word as *const u32 as u64).unwrap(), word);
        let bad = read_u32(me, 8).unwrap_err();
        assert_eq!(bad.raw_os_error(), Some(libc::EFAULT));
        let none = read_u32(0, &word as *const u32 as u64).unwrap_err();
        assert_eq!(none.raw_os_error(), Some(libc::ESRCH));
    }
}
