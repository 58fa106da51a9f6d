//! The supervisor: the process of `lanefs mount` that stays beside the daemon. The
//! daemon parses a possibly hostile image and confines itself once its mount is up (no
//! capabilities, no path, a seccomp filter: `lanefs_fuse::confine`), so it can no longer
//! unmount; the supervisor, which reads nothing of the image, can:
//!
//! - SIGINT, SIGTERM or SIGHUP (to either process: the daemon passes its own on) unmount
//!   the mount lazily; the daemon then sees its connection end, writes everything back
//!   and exits, and so does the supervisor, with the daemon's exit status.
//! - A daemon that dies with its mount up (killed, or a system call outside its filter)
//!   leaves a dead FUSE mount: the supervisor says why in the log and unmounts it. What
//!   was committed is in the journal, which the next mount replays.

use lanefs_fuse::{log, mount_source, unmount_path, MountConfig, SUBTYPE};
use std::os::fd::{AsFd, AsRawFd, IntoRawFd, OwnedFd};
use std::path::Path;

/// The daemon's work: serve at the mount point with the configuration (its `supervisor`
/// set), telling `ready` once the kernel has the mount. Returns its exit status.
pub type Daemon<'a> = Box<dyn FnOnce(&MountConfig) -> i32 + 'a>;

/// Fork the daemon, which runs `daemon`, and supervise it until it exits; returns its
/// exit status. `source` is the mount's source as mountinfo shows it (what the daemon
/// mounts at `mp`). `detach`: the supervisor's own log lines go to syslog and its
/// standard descriptors to /dev/null (a background mount); else they stay (`-f`).
pub fn supervise(mp: &Path, source: &str, cfg: &MountConfig, detach: bool, daemon: Daemon) -> i32 {
    let waited = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGCHLD];
    // SAFETY: a zeroed sigset_t is valid storage for sigemptyset to initialize.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` and `old` are valid sigset_t storage for the calls; blocking changes
    // only this (single-threaded) process's mask, which the child restores. SIGCHLD's
    // default disposition: one ignored (inherited across exec) would let the kernel reap
    // the daemon unseen.
    unsafe {
        libc::signal(libc::SIGCHLD, libc::SIG_DFL);
        // A log line to a closed stderr (`lanefs mount -f ... 2>&1 | head -1`) is lost,
        // and must not kill the supervisor or the daemon (inherited).
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
        libc::sigemptyset(&mut set);
        for s in waited {
            libc::sigaddset(&mut set, s);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
    }
    // Where a confined daemon asks for a shutdown's flags (lanefs_fuse::flagproxy).
    let chan = lanefs_fuse::flagproxy::channel()
        .map_err(|e| log::line(&format!("shutdown flags channel: {e}")))
        .ok();
    // SAFETY: the caller starts no thread before this (argument parsing and the checks
    // run on the main thread only), so the child may go on with any code.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        let e = std::io::Error::last_os_error();
        log::line(&format!("fork: {e}; serving unsupervised"));
        // SAFETY: restores the mask saved above.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
        return daemon(cfg);
    }
    if pid == 0 {
        // SAFETY: restores the mask saved above, in the child.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
        // A session of its own: no controlling terminal (whose input a daemon taken over
        // could inject, TIOCSTI), and a terminal's ^C reaches only the supervisor.
        // SAFETY: setsid has no preconditions; failing (a group leader) changes nothing.
        unsafe { libc::setsid() };
        let mut cfg = cfg.clone();
        // SAFETY: getppid has no preconditions.
        cfg.supervisor = Some(unsafe { libc::getppid() });
        // The daemon owns its end for its life.
        cfg.flag_channel = chan.map(|(_, d)| d.into_raw_fd());
        std::process::exit(daemon(&cfg));
    }
    drop(daemon);
    let mut chan = chan.map(|(s, _)| s);
    if detach {
        detach_stdio();
        log::to_syslog();
    }
    // SAFETY: `set` was initialized above; signalfd returns a new descriptor (or -1).
    let sfd = unsafe { libc::signalfd(-1, &set, libc::SFD_CLOEXEC) };
    // A stop asked for before the mount is up: done once it is.
    let mut pending = None;
    // What the daemon tells once its mount is up (`flagproxy::tell_mounted`): how the
    // supervisor knows its mount from a later one at the same path of the same source,
    // which it must not touch (not even stat: a path walk into a mount makes its
    // `umount` fail EBUSY). See [`Ours`].
    loop {
        let ours = Ours::told(source);
        if let Some(sig) = pending.filter(|_| ours.at(mp)) {
            pending = None;
            log::line(&format!("signal {sig}: unmounting {}", mp.display()));
            if let Err(e) = unmount_path(mp, true) {
                log::line(&format!("unmounting {}: {e}", mp.display()));
            }
        }
        let sig = if sfd >= 0 {
            let wait = if pending.is_some() { 100 } else { -1 };
            match next_event(sfd, &mut chan, wait) {
                Some(sig) => sig,
                None => continue,
            }
        } else {
            // SAFETY: `set` was initialized above; a null info pointer is allowed.
            unsafe { libc::sigwaitinfo(&set, std::ptr::null_mut()) }
        };
        match sig {
            libc::SIGCHLD => {
                let mut status = 0;
                // SAFETY: waits for our own child; `status` is valid storage.
                let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
                if r == pid {
                    return ended(mp, &Ours::told(source), pid, status);
                }
            }
            libc::SIGINT | libc::SIGTERM | libc::SIGHUP => pending = Some(sig),
            _ => {}
        }
    }
}

/// Wait up to `wait_ms` (-1: for ever) for a signal on `sfd` (a signalfd) or a request on
/// `chan`, answering requests; the signal's number, or None after a request or the wait.
/// A closed channel is dropped.
fn next_event(sfd: i32, chan: &mut Option<OwnedFd>, wait_ms: i32) -> Option<i32> {
    let mut fds = [
        libc::pollfd {
            fd: sfd,
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: chan.as_ref().map_or(-1, |c| c.as_raw_fd()),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    // SAFETY: `fds` holds two pollfd entries (a negative fd is ignored by poll).
    if unsafe { libc::poll(fds.as_mut_ptr(), 2, wait_ms) } <= 0 {
        return None;
    }
    if fds[1].revents != 0 {
        if let Some(c) = chan.as_ref() {
            if !lanefs_fuse::flagproxy::answer(c.as_fd()) {
                *chan = None;
            }
        }
    }
    if fds[0].revents & libc::POLLIN == 0 {
        return None;
    }
    // struct signalfd_siginfo: 128 bytes, ssi_signo first.
    let mut info = [0u8; 128];
    // SAFETY: `info` is 128 writable bytes for the call.
    let n = unsafe { libc::read(sfd, info.as_mut_ptr().cast(), info.len()) };
    (n == 128).then(|| i32::from_ne_bytes([info[0], info[1], info[2], info[3]]))
}

/// How the supervisor knows its daemon's mount, best first: by the unique ID and the
/// device the daemon told (Linux 6.8+; asked of the kernel by ID, so nothing walks into
/// the mount), by its device alone (mountinfo's; a later mount at the same path may take
/// the same one again), or, with no word from the daemon, as a lanefs mount of `source`.
enum Ours<'a> {
    Unique(u64, &'static str),
    Device(&'static str),
    Source(&'a str),
}

impl<'a> Ours<'a> {
    /// What the daemon has told so far.
    fn told(source: &'a str) -> Ours<'a> {
        use lanefs_fuse::flagproxy::{mounted_device, mounted_unique_id};
        match (mounted_unique_id(), mounted_device()) {
            (Some(id), Some(dev)) => Ours::Unique(id, dev),
            (_, Some(dev)) => Ours::Device(dev),
            (_, None) => Ours::Source(source),
        }
    }

    /// Whether the daemon's mount is the one seen at `mp` (read from the kernel's
    /// tables: nothing walks into the mount). By unique ID, the mount must also be the
    /// visible one there (a mount stacked on it is someone else's); where the kernel
    /// cannot be asked by ID (statmount refused, as a container's filter may), by device.
    fn at(&self, mp: &Path) -> bool {
        match self {
            Ours::Unique(id, dev) => match lanefs_fuse::mountinfo::mount_point_of(*id) {
                Ok(p) => p.as_deref() == Some(mp) && visible(mp, dev),
                Err(_) => visible(mp, dev),
            },
            Ours::Device(dev) => visible(mp, dev),
            Ours::Source(source) => mount_source(mp)
                .is_some_and(|(s, t)| s == *source && t == format!("fuse.{SUBTYPE}")),
        }
    }

    /// Whether the daemon's mount, its daemon gone, is still at `mp`: a dead mount. Known
    /// only by the unique ID, asked of the kernel; by device or source a mount at `mp`
    /// may be a later one, and telling a dead one apart would take a path walk into it.
    fn left_dead_at(&self, mp: &Path) -> bool {
        match self {
            Ours::Unique(id, dev) => {
                lanefs_fuse::mountinfo::mount_point_of(*id).is_ok_and(|p| p.as_deref() == Some(mp))
                    && visible(mp, dev)
            }
            _ => false,
        }
    }
}

/// Whether the mount visible at `mp` is on device `dev` (by mountinfo: no path walk).
fn visible(mp: &Path, dev: &str) -> bool {
    lanefs_fuse::mountinfo::device_of(mp).as_deref() == Some(dev)
}

/// The daemon `pid` ended with wait status `status`: its exit status, after a log line
/// and the unmount of the mount it left when it failed. Its mount is `ours` (see
/// [`Ours`]); a mount at the same path that is not is a later one and is left alone. (A
/// daemon that ends with status 0 served until its connection ended: only a mount of its
/// own still there, whose connection ended otherwise, is unmounted.)
fn ended(mp: &Path, ours: &Ours, pid: i32, status: i32) -> i32 {
    if libc::WIFEXITED(status) {
        let code = libc::WEXITSTATUS(status);
        let left = if code == 0 {
            ours.left_dead_at(mp)
        } else {
            ours.at(mp)
        };
        if left {
            log::line(&format!(
                "the daemon of {} (pid {pid}) exited with status {code} and left its mount: unmounting it",
                mp.display()
            ));
            if let Err(e) = unmount_path(mp, true) {
                log::line(&format!("unmounting {}: {e}", mp.display()));
            }
        }
        return code;
    }
    let sig = libc::WTERMSIG(status);
    let why = if sig == libc::SIGSYS {
        ": a system call outside its seccomp filter (-o unconfined serves without the \
         confinement; please report the call, which the kernel's log names)"
    } else {
        ""
    };
    log::line(&format!(
        "the daemon of {} (pid {pid}) was killed by signal {sig}{why}; the journal replays at the next mount",
        mp.display()
    ));
    if ours.at(mp) {
        if let Err(e) = unmount_path(mp, true) {
            log::line(&format!("unmounting {}: {e}", mp.display()));
        }
    }
    1
}

/// Point stdin, stdout and stderr at /dev/null.
pub(crate) fn detach_stdio() {
    if let Ok(null) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    {
        for fd in 0..3 {
            // SAFETY: dup2 onto the standard descriptors; `null` stays open for the call.
            unsafe { libc::dup2(null.as_raw_fd(), fd) };
        }
    }
}
