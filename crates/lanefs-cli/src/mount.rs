//! `lanefs mount` and `lanefs umount`: serve an image through FUSE.
//!
//! `mount` checks its options, the image path and the mount point, then (unless `-f`)
//! forks before any thread exists: the child becomes the supervisor (`supervise`), whose
//! own child, the daemon, mounts, serves and tells `lanefs mount` through a pipe when the
//! kernel has the mount or why it failed; `lanefs mount` prints that one line (or
//! nothing) and exits. With `-f` the process itself is the supervisor. `umount` unmounts and then waits until the daemon has
//! let go of the image, so the image is clean when it returns. A second mount of a mounted
//! image is a bind mount of the first, and a mount waits for a daemon still closing the
//! image (`holders`).

use crate::cli::{MemfsArgs, MountArgs, UmountArgs};
use crate::error::{CmdResult, Context, Error, Failure};
use crate::holders;
use crate::supervise::{detach_stdio, supervise, Daemon};
use lanefs_fuse::{
    mount_source, preflight, serve, serve_memfs, unmount_path, MountConfig, SUBTYPE,
};
use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long `umount` waits for the daemon to finish writing back.
const WRITEBACK_WAIT: Duration = Duration::from_secs(600);

/// How long a new mount waits for the mount of a daemon that serves one to show (a
/// mount of the image being made at the same time) before it gives up on binding it.
const UNSEEN_MOUNT_WAIT: Duration = Duration::from_secs(1);

/// `lanefs mount IMAGE MOUNTPOINT [-o OPTS] [-f]`.
pub fn mount(a: &MountArgs) -> CmdResult<i32> {
    let opts: Vec<&str> = a.options.iter().flat_map(|o| o.split(',')).collect();
    if opts.contains(&"remount") {
        return remount(&a.mountpoint, &opts);
    }
    let mut cfg = MountConfig::default();
    for o in &a.options {
        cfg.parse(o)
            .map_err(|e| Failure::new("-o", Error::msg(e.to_string())))?;
    }
    // The daemon leaves the working directory: name the data device absolutely.
    if cfg.engine.rtdev.is_none() {
        cfg.engine.rtdev = crate::session::rtdev();
    }
    if let Some(p) = cfg.engine.rtdev.take() {
        cfg.engine.rtdev = Some(p.canonicalize().ctx(p.display())?);
    }
    let image = a.image.canonicalize().ctx(a.image.display())?;
    let mp = preflight(&a.mountpoint).map_err(|e| Failure::new("", Error::msg(e)))?;
    // Another mount of the image (found by its source, or through its daemon when an
    // fsname hides the image), or its daemon still closing (see `holders`).
    let start = Instant::now();
    let mut told = false;
    loop {
        if let Some((first, first_ro)) = holders::live_mounts(&image).into_iter().next() {
            return bind(&first, first_ro, &mp, cfg.engine.read_only);
        }
        let Some(pid) = holders::daemon_holding(&image) else {
            break;
        };
        if let Some((first, first_ro)) = holders::daemon_mount(pid) {
            return bind(&first, first_ro, &mp, cfg.engine.read_only);
        }
        // A daemon serving a mount that is not here (or not yet): nothing to bind, and
        // nothing that ends by waiting.
        if start.elapsed() > UNSEEN_MOUNT_WAIT && holders::serving(pid) {
            let msg = format!(
                "in use by the lanefs daemon (pid {pid}), which serves a mount not shown \
                 here: one another mount namespace still has, or one unmounted lazily while \
                 still in use; it ends when that mount's last user lets go"
            );
            return Err(Failure::new(image.display(), Error::msg(msg)));
        }
        if start.elapsed() > WRITEBACK_WAIT {
            let msg = format!(
                "the lanefs daemon (pid {pid}) of an earlier mount still holds it after {} s",
                WRITEBACK_WAIT.as_secs()
            );
            return Err(Failure::new(image.display(), Error::msg(msg)));
        }
        if !told && start.elapsed() > Duration::from_secs(5) {
            crate::error::note(&format!(
                "waiting for the daemon of an earlier mount (pid {pid}) to finish writing {} back",
                image.display()
            ));
            told = true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let source = cfg
        .fsname
        .clone()
        .unwrap_or_else(|| image.display().to_string());
    run(&mp, &source, &cfg, a.foreground, |mp, cfg, ready| {
        serve(&image, mp, cfg, ready)
    })
}

/// A second mount of an image already mounted at `first`: a bind mount of it, read-only
/// when asked (the kernel shares one superblock between the mounts of a device, and so
/// one daemon serves both here). The options of the first mount stay in force; a
/// read-write mount of an image mounted read-only is refused, as ext4 refuses it.
fn bind(first: &Path, first_ro: bool, mp: &Path, read_only: bool) -> CmdResult<i32> {
    use rustix::mount::{mount_bind, mount_remount, MountFlags};
    let already = |why: &str| {
        Failure::new(
            mp.display(),
            Error::msg(format!(
                "the image is already mounted at {}{why}",
                first.display()
            )),
        )
    };
    if first_ro && !read_only {
        return Err(already(" read-only; mount it read-only here too (-o ro)"));
    }
    // A clone of the first mount, detached and made private (a clone of a shared mount
    // joins its peer group, as a plain bind does), then attached at `mp`: as a fresh
    // mount of the device would be, it propagates where `mp`'s parent is shared but is
    // no peer of the first (as a peer, mounts made under either would show under both:
    // fstests generic/409, 411).
    let cloned = rustix::mount::open_tree(
        rustix::fs::CWD,
        first,
        rustix::mount::OpenTreeFlags::OPEN_TREE_CLONE
            | rustix::mount::OpenTreeFlags::OPEN_TREE_CLOEXEC,
    )
    .and_then(|fd| {
        make_private(&fd)?;
        rustix::mount::move_mount(
            &fd,
            c"",
            rustix::fs::CWD,
            mp,
            rustix::mount::MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
        )
    });
    // Kernels before 5.2 have no open_tree: a plain bind.
    let bound = match cloned {
        Err(rustix::io::Errno::NOSYS) => mount_bind(first, mp),
        r => r,
    };
    bound.map_err(|e| {
        let why = if e == rustix::io::Errno::PERM {
            " (a second mount of one image is a bind mount of the first, which needs root)"
                .to_string()
        } else {
            format!("; binding it here: {e}")
        };
        already(&why)
    })?;
    if read_only && !first_ro {
        if let Err(e) = mount_remount(mp, MountFlags::BIND | MountFlags::RDONLY, "") {
            let _ = unmount_path(mp, true);
            return Err(already(&format!("; making the bind read-only: {e}")));
        }
    }
    Ok(0)
}

/// Make the detached mount `fd` (from open_tree) private: in no peer group.
fn make_private(fd: &OwnedFd) -> rustix::io::Result<()> {
    // struct mount_attr (linux/mount.h): attr_set, attr_clr, propagation, userns_fd.
    let attr: [u64; 4] = [0, 0, libc::MS_PRIVATE, 0];
    // SAFETY: mount_setattr reads `attr`, whose size is passed, during the call; the
    // empty path with AT_EMPTY_PATH names `fd` itself.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            fd.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            attr.as_ptr(),
            std::mem::size_of_val(&attr),
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(rustix::io::Errno::from_raw_os_error(
            std::io::Error::last_os_error().raw_os_error().unwrap_or(0),
        ))
    }
}

/// `mount -o remount,ro|rw MOUNTPOINT` (mount(8) runs the helper with the options and
/// the mount point): write everything back first when going read-only, then have the
/// kernel flip the mount (MS_REMOUNT; FUSE takes the read-only flag and the VFS flags
/// and ignores the rest, as it does for every FUSE file system). The daemon keeps
/// serving; it notices a read-only mount and updates no access time there.
fn remount(target: &Path, opts: &[&str]) -> CmdResult<i32> {
    use rustix::mount::MountFlags;
    let mp = target.canonicalize().ctx(target.display())?;
    match lanefs_fuse::mount_source(&mp) {
        Some((_, kind)) if kind == format!("fuse.{SUBTYPE}") => {}
        _ => {
            return Err(Failure::new(
                mp.display(),
                Error::msg("remount: not a lanefs mount"),
            ))
        }
    }
    let mut flags = MountFlags::empty();
    let mut ro = lanefs_fuse::mountinfo::read_only(&mp);
    for o in opts {
        match *o {
            "ro" => ro = true,
            "rw" => ro = false,
            "nosuid" => flags |= MountFlags::NOSUID,
            "nodev" => flags |= MountFlags::NODEV,
            "noexec" => flags |= MountFlags::NOEXEC,
            "noatime" => flags |= MountFlags::NOATIME,
            "nodiratime" => flags |= MountFlags::NODIRATIME,
            "sync" => flags |= MountFlags::SYNCHRONOUS,
            "dirsync" => flags |= MountFlags::DIRSYNC,
            // The rest (the engine's and FUSE's own options) cannot change on a live
            // mount; mount(8) passes them along, and the kernel ignores them too.
            _ => {}
        }
    }
    if ro {
        flags |= MountFlags::RDONLY;
        // Everything written so far reaches the image before the mount turns read-only:
        // an fsync of the root (FUSE_FSYNCDIR) commits every change made before it
        // (syncfs reaches no FUSE daemon: Linux sends FUSE_SYNCFS to virtiofs only).
        let dir = std::fs::File::open(&mp).ctx(mp.display())?;
        dir.sync_all().ctx(mp.display())?;
    }
    rustix::mount::mount_remount(&mp, flags, c"")
        .map_err(std::io::Error::from)
        .ctx(mp.display())?;
    Ok(0)
}

/// `lanefs memfs MOUNTPOINT [-o OPTS] [-f]`: the in-memory ceiling, served as `mount`
/// serves an image.
pub fn memfs(a: &MemfsArgs) -> CmdResult<i32> {
    let mut cfg = MountConfig::default();
    for o in &a.options {
        cfg.parse(o)
            .map_err(|e| Failure::new("-o", Error::msg(e.to_string())))?;
    }
    let mp = preflight(&a.mountpoint).map_err(|e| Failure::new("", Error::msg(e)))?;
    let source = cfg.fsname.clone().unwrap_or_else(|| "memfs".into());
    run(&mp, &source, &cfg, a.foreground, serve_memfs)
}

/// Take no transparent huge pages in the daemon (PR_SET_THP_DISABLE, inherited by the
/// forked daemon). Its heap (mimalloc) returns freed 64 KiB pages to the system a moment
/// after they are freed; where such a page lay in a huge page, touching it again faults
/// the whole 2 MiB back in, which the kernel zeroes. A daemon allocates and frees pages
/// at every request (file data, replies), so with huge pages zeroing was a fifth of all
/// CPU time during `tar x` on the mount (`perf record -a`) and `tar x` took 1.6-2.2 s
/// against 1.3 s without (docs/fuse-frontend.md#real-programs). Best effort: a kernel
/// without the call serves as before.
fn no_huge_pages() {
    // SAFETY: PR_SET_THP_DISABLE takes the flag and three zero arguments and changes only
    // this process's (and its children's) huge page policy.
    unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
}

/// Serve with `server` under a supervisor (`supervise`): in the foreground, or in a
/// forked process that reports the daemon's first line. `source` is the mount's source
/// as mountinfo will show it.
fn run(
    mp: &Path,
    source: &str,
    cfg: &MountConfig,
    foreground: bool,
    server: impl Fn(&Path, &MountConfig, Box<dyn FnOnce(Result<(), String>)>) -> Result<(), String>,
) -> CmdResult<i32> {
    no_huge_pages();
    if foreground {
        let daemon: Daemon = Box::new(|cfg| {
            match server(mp, cfg, {
                let (chan, mp) = (cfg.flag_channel, mp.to_path_buf());
                Box::new(move |r| mounted(chan, &mp, &r))
            }) {
                Ok(()) => 0,
                Err(e) => {
                    lanefs_fuse::log::line(&e);
                    1
                }
            }
        });
        return Ok(supervise(mp, source, cfg, false, daemon));
    }
    let (rd, wr) = pipe().ctx("pipe")?;
    // SAFETY: no thread has been started yet (argument parsing and the checks above run
    // on the main thread only), so the child may go on with any code.
    match unsafe { libc::fork() } {
        -1 => Err(Failure::new("fork", std::io::Error::last_os_error())),
        0 => {
            drop(rd);
            std::process::exit(background(mp, source, cfg, wr, server));
        }
        _ => {
            drop(wr);
            let mut msg = String::new();
            let mut f = std::fs::File::from(rd);
            let _ = f.read_to_string(&mut msg);
            match msg.strip_prefix("ok") {
                Some(_) => Ok(0),
                None if msg.is_empty() => Err(Failure::new(
                    "",
                    Error::msg("the daemon exited before mounting"),
                )),
                None => Err(Failure::new("", Error::msg(msg))),
            }
        }
    }
}

/// In the daemon, once its mount is up (`r` is Ok) and before it says so: tell the
/// supervisor the mount's device (see `supervise`).
fn mounted(chan: Option<i32>, mp: &Path, r: &Result<(), String>) {
    if let (Ok(()), Some(chan)) = (r, chan) {
        if let Err(e) = lanefs_fuse::flagproxy::tell_mounted(chan, mp) {
            lanefs_fuse::log::line(&format!("telling the supervisor the mount: {e}"));
        }
    }
}

/// The background mount: a session of its own, the supervisor, and in its child the
/// daemon, which sends its status line to `lanefs mount` through `status`.
fn background(
    mp: &Path,
    source: &str,
    cfg: &MountConfig,
    status: OwnedFd,
    server: impl Fn(&Path, &MountConfig, Box<dyn FnOnce(Result<(), String>)>) -> Result<(), String>,
) -> i32 {
    // SAFETY: setsid has no preconditions; failure (already a group leader) is harmless.
    unsafe { libc::setsid() };
    let _ = std::env::set_current_dir("/");
    close_inherited(status.as_raw_fd());
    let daemon: Daemon = Box::new(move |cfg| {
        let status = std::fs::File::from(status);
        let (chan, mpb) = (cfg.flag_channel, mp.to_path_buf());
        let r = server(
            mp,
            cfg,
            Box::new(move |r| {
                mounted(chan, &mpb, &r);
                let mut f = status;
                let _ = match &r {
                    Ok(()) => f.write_all(b"ok"),
                    Err(e) => f.write_all(e.as_bytes()),
                };
                drop(f);
                if r.is_ok() {
                    detach_stdio();
                    lanefs_fuse::log::to_syslog();
                }
            }),
        );
        i32::from(r.is_err())
    });
    supervise(mp, source, cfg, true, daemon)
}

/// Close every descriptor above standard error that the daemon inherited, except `keep`
/// (the status pipe). A caller's descriptor without close-on-exec (a shell's `exec
/// 3>/mnt/a/log`, a test's raw open) would otherwise live as long as the mount, and a
/// file it names keeps another mount busy: `umount` says EBUSY until this daemon exits.
fn close_inherited(keep: std::os::fd::RawFd) {
    let keep = keep as libc::c_uint;
    // SAFETY: this runs in the forked child before it opens anything: the descriptors
    // above 2 are those inherited across the fork, which no object in this process owns
    // except `keep` (the status pipe, left open); the rest of `run`'s parent side
    // (the pipe's read end) was dropped already. close_range only closes descriptors.
    unsafe {
        if keep > 3 {
            libc::close_range(3, keep - 1, 0);
        }
        // The standard descriptors stay even when the pipe is one of them (started
        // with stdin or stdout closed).
        libc::close_range((keep + 1).max(3), libc::c_uint::MAX, 0);
    }
}

fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned by nothing else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// `lanefs umount MOUNTPOINT`: unmount, then wait for the daemon to release the image.
pub fn umount(a: &UmountArgs) -> CmdResult<i32> {
    let mp = a.mountpoint.canonicalize().ctx(a.mountpoint.display())?;
    let Some((source, fstype)) = mount_source(&mp) else {
        return Err(Failure::new(mp.display(), Error::msg("not mounted")));
    };
    if fstype != format!("fuse.{SUBTYPE}") {
        return Err(Failure::new(
            mp.display(),
            Error::msg(format!("not a lanefs mount (type {fstype})")),
        ));
    }
    let image = PathBuf::from(&source);
    let by_image = image.is_absolute() && image.exists();
    // A source that names no image (`fsname=`): the daemon, by the mount point it holds,
    // and the connection, by the mount's device number (which its binds share).
    let daemon = (!by_image)
        .then(|| holders::daemon_at(&mp))
        .flatten()
        .zip(lanefs_fuse::mountinfo::device_of(&mp));
    unmount_path(&mp, false).ctx(mp.display())?;
    // The daemon goes on serving while another mount of the image (a bind) is left.
    if by_image && holders::live_mounts(&image).is_empty() {
        wait_released(&image).map_err(|e| Failure::new(&source, Error::msg(e)))?;
    }
    if let Some((pid, dev)) = daemon {
        if !lanefs_fuse::mountinfo::device_mounted(&format!("fuse.{SUBTYPE}"), &dev) {
            wait_exited(pid).map_err(|e| Failure::new(&source, Error::msg(e)))?;
        }
    }
    Ok(0)
}

/// Wait until the daemon `pid` has exited (written everything back).
fn wait_exited(pid: u32) -> Result<(), String> {
    let start = Instant::now();
    while Path::new(&format!("/proc/{pid}")).exists() {
        if start.elapsed() > WRITEBACK_WAIT {
            return Err(format!(
                "unmounted, but the daemon (pid {pid}) is still running after 10 minutes"
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// Wait until no process holds the image's exclusive claim (the daemon has written
/// everything back and exited).
fn wait_released(image: &Path) -> Result<(), String> {
    let start = Instant::now();
    let f = std::fs::File::open(image).map_err(|e| crate::error::io_text(&e))?;
    let block = f
        .metadata()
        .map(|m| {
            use std::os::unix::fs::FileTypeExt;
            m.file_type().is_block_device()
        })
        .unwrap_or(false);
    loop {
        let free = if block {
            std::fs::OpenOptions::new()
                .read(true)
                .custom_flags_excl()
                .open(image)
                .is_ok()
        } else {
            // SAFETY: flock on a descriptor `f` owns; LOCK_NB never blocks.
            let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
            if r == 0 {
                // SAFETY: as above; gives the lock straight back.
                unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_UN) };
            }
            r == 0
        };
        if free {
            return Ok(());
        }
        if start.elapsed() > WRITEBACK_WAIT {
            return Err("unmounted, but the daemon still holds the image after 10 minutes".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

trait ExclOpen {
    fn custom_flags_excl(&mut self) -> &mut Self;
}

impl ExclOpen for std::fs::OpenOptions {
    fn custom_flags_excl(&mut self) -> &mut Self {
        use std::os::unix::fs::OpenOptionsExt;
        self.custom_flags(libc::O_EXCL)
    }
}

/// When run as `mount.fuse.lanefs SOURCE MOUNTPOINT [-o OPTS] [-n] [-s] [-f] [-v]` (by
/// mount(8) for `-t fuse.lanefs` and fstab lines), the arguments of `lanefs mount`.
pub fn helper_args(args: Vec<OsString>) -> Vec<OsString> {
    let is_helper = args
        .first()
        .and_then(|a| Path::new(a).file_name())
        .is_some_and(|n| n == "mount.fuse.lanefs");
    if !is_helper {
        return args;
    }
    let mut out: Vec<OsString> = vec!["lanefs".into(), "mount".into()];
    let mut it = args.into_iter().skip(1);
    while let Some(a) = it.next() {
        match a.to_str() {
            // mount(8)'s own flags: no mtab, sloppy, verbose.
            Some("-n" | "-s" | "-v") => {}
            Some("-o") => {
                out.push(a);
                if let Some(v) = it.next() {
                    out.push(v);
                }
            }
            _ => out.push(a),
        }
    }
    out
}
