//! Mounting: check what can be checked before touching anything, mount the engine, hand
//! the kernel a /dev/fuse connection, serve until unmounted or signalled, then unmount the
//! engine so the image is clean.

use crate::frontend::LaneFuse;
use crate::log;
use crate::options::{MountConfig, UringMode};
use crate::uring::{self, Transport, UringCapable, UringOffer};
use fuser::{Config, MountOption, Session, SessionACL};
use lanefs::Fs;
use std::ffi::CString;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The FUSE subtype: mounts show as `fuse.lanefs`.
pub const SUBTYPE: &str = "lanefs";

/// Checks that open nothing but /dev/fuse: the mount point is an existing directory that is
/// not already a mount point, and /dev/fuse exists and this user may open it (as
/// fusermount3 will, as the user). Returns the canonical mount point.
pub fn preflight(mountpoint: &Path) -> Result<PathBuf, String> {
    let mp = mountpoint
        .canonicalize()
        .map_err(|e| format!("mount point {}: {e}", mountpoint.display()))?;
    if !mp.is_dir() {
        return Err(format!("mount point {}: not a directory", mp.display()));
    }
    if is_mount_point(&mp) {
        return Err(format!(
            "mount point {}: busy (something is already mounted there)",
            mp.display()
        ));
    }
    if !Path::new("/dev/fuse").exists() {
        return Err("no /dev/fuse: load the fuse module (modprobe fuse) or pass the device into the container".into());
    }
    if let Err(e) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
    {
        let hint = if e.kind() == std::io::ErrorKind::PermissionDenied {
            " (it must be readable and writable by every user, mode 0666 as udev makes it)"
        } else {
            ""
        };
        return Err(format!("/dev/fuse: {e}{hint}"));
    }
    Ok(mp)
}

/// Whether `path` (canonical) is a mount point, by /proc/self/mountinfo.
pub fn is_mount_point(path: &Path) -> bool {
    mount_source(path).is_some()
}

pub use crate::mountinfo::mount_source;

/// Mount `image` at `mountpoint` (canonical, from `preflight`) and serve it until it is
/// unmounted (umount, `fusermount3 -u`, `lanefs umount`) or the daemon gets SIGINT,
/// SIGTERM or SIGHUP. `ready` is told once the kernel has the mount (or why it failed);
/// after that, errors go to the log. Returns once the engine has written everything back.
pub fn serve(
    image: &Path,
    mountpoint: &Path,
    cfg: &MountConfig,
    ready: impl FnOnce(Result<(), String>),
) -> Result<(), String> {
    let fs = match Fs::mount_path(image, cfg.engine.clone()) {
        Ok(fs) => fs,
        Err(e) => {
            let msg = format!("{}: {e}", image.display());
            ready(Err(msg.clone()));
            return Err(msg);
        }
    };
    // A read-write mount the engine can only serve read-only says so (before `ready`,
    // this line reaches the terminal of `lanefs mount`).
    if let Some(why) = fs.read_only_reason().filter(|_| !cfg.engine.read_only) {
        log::line(&format!("mount: note: {}: {why}", image.display()));
    }
    let checks = cfg.kernel_checks_permissions();
    let frontend = LaneFuse::new(fs.clone(), cfg, checks).with_mountpoint(mountpoint);
    let slot = frontend.notifier_slot();
    let fsname = cfg
        .fsname
        .clone()
        .unwrap_or_else(|| image.display().to_string());
    let served = run_session(
        frontend,
        mountpoint,
        cfg,
        &fsname,
        fs.is_read_only(),
        Some(slot),
        ready,
    );
    // Every request thread has stopped and the frontend is gone: this is the last
    // reference, and unmounting writes everything back (nothing after a shutdown).
    if fs.is_shut_down() {
        log::line(&format!(
            "{} was shut down: nothing written at unmount; the journal replays at the next mount",
            image.display()
        ));
    }
    let unmounted = match Arc::try_unwrap(fs) {
        Ok(fs) => Arc::new(fs).unmount(),
        Err(fs) => fs.unmount(),
    }
    .map_err(|e| {
        let msg = format!("{}: writing back at unmount: {e}", image.display());
        log::line(&msg);
        msg
    });
    served.and(unmounted)
}

/// Serve a [`MemFs`](crate::memfs::MemFs) at `mountpoint` through the same transports,
/// until unmounted: the FUSE ceiling `lanefs bench --compare` measures lanefs against.
pub fn serve_memfs(
    mountpoint: &Path,
    cfg: &MountConfig,
    ready: impl FnOnce(Result<(), String>),
) -> Result<(), String> {
    let fsname = cfg.fsname.clone().unwrap_or_else(|| "memfs".to_string());
    let fs = crate::memfs::MemFs::new(cfg);
    run_session(
        fs,
        mountpoint,
        cfg,
        &fsname,
        cfg.engine.read_only,
        None,
        ready,
    )
}

/// Mount `frontend` at `mountpoint` and serve it until the connection ends: the options,
/// the transport (FUSE-over-io_uring where negotiated, else /dev/fuse), the signals;
/// the session's notifier goes in `notifier` once the session exists.
fn run_session<FS: UringCapable>(
    frontend: FS,
    mountpoint: &Path,
    cfg: &MountConfig,
    fsname: &str,
    read_only: bool,
    notifier: Option<Arc<std::sync::OnceLock<fuser::Notifier>>>,
    ready: impl FnOnce(Result<(), String>),
) -> Result<(), String> {
    let started = start_session(frontend, mountpoint, cfg, fsname, read_only);
    let Started {
        session,
        transport,
        queues,
        dev_threads,
        held: _held,
    } = match started {
        Ok(s) => s,
        Err(msg) => {
            ready(Err(msg.clone()));
            return Err(msg);
        }
    };
    if let Some(slot) = notifier {
        let _ = slot.set(session.notifier());
    }
    ready(Ok(()));
    // After `ready`: a daemon logs to syslog from here on, `-f` to stderr.
    log::line(&match &transport {
        Transport::Uring { queues, depth } => format!(
            "{}: serving through FUSE-over-io_uring ({queues} queues of {depth} entries)",
            mountpoint.display()
        ),
        Transport::DevFuse(why) => format!(
            "{}: serving through /dev/fuse ({dev_threads} threads); io_uring: {why}",
            mountpoint.display(),
        ),
    });
    // The mount is up: confined before the first request is served.
    if let Some(sup) = cfg.supervisor.filter(|_| !cfg.unconfined) {
        match crate::confine::confine(sup) {
            Ok(c) => log::line(&format!("{}: {c}", mountpoint.display())),
            Err(e) => {
                let msg = format!("{}: {e}; not serving", mountpoint.display());
                log::line(&msg);
                if let Some((p, _)) = queues {
                    p.stop();
                }
                return Err(msg);
            }
        }
    }
    let rings = match queues {
        Some((p, fd)) => p.start(fd, session.dispatcher()),
        None => Vec::new(),
    };

    let served = session.run();
    if let Err(e) = &served {
        log::line(&format!("FUSE session ended: {e}"));
    }
    // The connection is gone: every queue's entries came back with ENOTCONN.
    for t in rings {
        let _ = t.join();
    }
    Ok(())
}

/// A mounted session, not yet serving: its transport, and the io_uring queues to start
/// with their /dev/fuse descriptor when that transport is io_uring.
struct Started<FS: UringCapable> {
    session: Session<FS>,
    transport: Transport,
    queues: Option<(uring::Prepared<FS>, OwnedFd)>,
    dev_threads: usize,
    /// The mount point, held open while the daemon serves (see `start_session`).
    held: Option<std::fs::File>,
}

/// The signals handled, the mount made and FUSE_INIT answered: everything that can fail
/// before the mount serves.
fn start_session<FS: UringCapable>(
    mut frontend: FS,
    mountpoint: &Path,
    cfg: &MountConfig,
    fsname: &str,
    read_only: bool,
) -> Result<Started<FS>, String> {
    let root = geteuid() == 0;
    // A signal unmounts; the request loops then see the connection end. Set up first, so
    // that nothing can fail between starting the queues and serving.
    handle_signals(mountpoint, cfg.supervisor)?;
    let (opts, checks) = mount_options(cfg, fsname, read_only);
    let (acl, mut config) = session_config(cfg, &opts);
    let (prepared, decided) = offer_uring(&mut frontend, cfg)?;
    // With io_uring the /dev/fuse threads only take forgets (one per evicted inode) and
    // interrupts: one thread, so they come in batches instead of waking a thread per CPU.
    if prepared.is_ok() && uring::offered() {
        config.n_threads = Some(1);
    }
    // Held while the daemon lives: `lanefs mount` finds a live mount of an image by its
    // daemon's descriptors (this one names the mount point), whatever source or fsname
    // the mount shows. O_PATH on the directory under the mount: it pins nothing of the
    // FUSE mount itself.
    let held = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
        .open(mountpoint)
        .ok();
    // As root, mount(2) directly with the type fuse.lanefs (fuser's own direct mount says
    // plain "fuse"); otherwise fusermount3 does it, subtype and all.
    let session = if root {
        direct_mount(mountpoint, fsname, &opts, cfg, checks, read_only).and_then(|fd| {
            Session::from_fd(frontend, fd, acl, config.clone()).map_err(|e| {
                let _ = unmount_path(mountpoint, true);
                format!("FUSE handshake: {e}")
            })
        })
    } else {
        Session::new(frontend, mountpoint, &config)
            .map_err(|e| format!("mounting at {}: {e}", mountpoint.display()))
    };
    let session = match session {
        Ok(s) => s,
        Err(msg) => {
            if let Ok(p) = prepared {
                p.stop();
            }
            return Err(msg);
        }
    };
    let decided = decided.lock().unwrap_or_else(|e| e.into_inner()).take();
    let (transport, queues) = pick_transport(&session, prepared, decided, mountpoint, root)?;
    Ok(Started {
        session,
        transport,
        queues,
        dev_threads: config.n_threads.unwrap_or(1),
        held,
    })
}

/// Who may use the mount (`allow_other`, `allow_root`, else its owner) and the fuser
/// session's configuration: the mount options, a thread per `-o threads`, a cloned
/// /dev/fuse descriptor each.
fn session_config(cfg: &MountConfig, opts: &[MountOption]) -> (SessionACL, Config) {
    let acl = if cfg.allow_other {
        SessionACL::All
    } else if cfg.allow_root {
        SessionACL::RootAndOwner
    } else {
        SessionACL::Owner
    };
    let mut config = Config::default();
    config.mount_options = opts.to_vec();
    config.acl = acl;
    config.n_threads = Some(cfg.threads);
    config.clone_fd = true;
    (acl, config)
}

/// Where FUSE_INIT records whether io_uring was agreed, or why not.
type Decided = Arc<std::sync::Mutex<Option<Result<(), String>>>>;

/// FUSE-over-io_uring: the queues are made before the handshake, so the frontend asks
/// for it at FUSE_INIT only when they exist. Returns the queues (or why there are none)
/// and where the handshake records its decision; an error when io_uring is required and
/// the queues cannot be made.
fn offer_uring<FS: UringCapable>(
    frontend: &mut FS,
    cfg: &MountConfig,
) -> Result<(Result<uring::Prepared<FS>, String>, Decided), String> {
    let prepared = match cfg.io_uring {
        UringMode::Off => Err("turned off (-o no_io_uring)".to_string()),
        _ => uring::prepare::<FS>(cfg.io_uring_depth, uring_payload(cfg), cfg.io_uring_spin),
    };
    let decided: Decided = Arc::new(std::sync::Mutex::new(None));
    match &prepared {
        Ok(p) => frontend.offer_uring(UringOffer {
            max_write: uring_payload(cfg) as u32,
            payload: p.payload as u32,
            required: cfg.io_uring == UringMode::Required,
            decided: decided.clone(),
        }),
        Err(why) if cfg.io_uring == UringMode::Required => return Err(format!("io_uring: {why}")),
        Err(_) => {}
    }
    Ok((prepared, decided))
}

/// The io_uring queues and the /dev/fuse descriptor they serve.
type Queues<FS> = (uring::Prepared<FS>, OwnedFd);

/// The transport the handshake settled on: io_uring when the queues exist and FUSE_INIT
/// agreed to it (the queues then get their own /dev/fuse descriptor), /dev/fuse
/// otherwise, saying why. Queues not used are stopped. Without a descriptor for the
/// queues the kernel would wait for them: the mount fails (unmounted, as root).
fn pick_transport<FS: UringCapable>(
    session: &Session<FS>,
    prepared: Result<uring::Prepared<FS>, String>,
    decided: Option<Result<(), String>>,
    mountpoint: &Path,
    root: bool,
) -> Result<(Transport, Option<Queues<FS>>), String> {
    Ok(match (prepared, decided) {
        (Ok(p), Some(Ok(()))) => {
            let transport = Transport::Uring {
                queues: p.queues(),
                depth: p.depth,
            };
            match std::os::fd::AsFd::as_fd(session).try_clone_to_owned() {
                Ok(fd) => (transport, Some((p, fd))),
                // Without a descriptor for the queues the kernel would wait for them:
                // nothing to do but fail the mount.
                Err(e) => {
                    p.stop();
                    if root {
                        let _ = unmount_path(mountpoint, true);
                    }
                    return Err(format!("io_uring: duplicating /dev/fuse: {e}"));
                }
            }
        }
        (Ok(p), decided) => {
            p.stop();
            let why = decided
                .and_then(Result::err)
                .unwrap_or_else(|| "not negotiated".into());
            (Transport::DevFuse(why), None)
        }
        (Err(why), _) => (Transport::DevFuse(why), None),
    })
}

/// SIGINT, SIGTERM and SIGHUP unmount `mountpoint` (a supervised daemon passes them to
/// its supervisor, which unmounts).
fn handle_signals(mountpoint: &Path, supervisor: Option<i32>) -> Result<(), String> {
    let mp = mountpoint.to_path_buf();
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ])
    .map_err(|e| format!("signal handlers: {e}"))?;
    std::thread::Builder::new()
        .name("lanefs-signals".into())
        .spawn(move || {
            for sig in signals.forever() {
                // A supervised daemon may not unmount (confined): its supervisor does.
                if let Some(sup) = supervisor {
                    // SAFETY: getppid has no preconditions; kill only sends a signal to
                    // the supervising process, while it is still this one's parent.
                    unsafe {
                        if libc::getppid() == sup {
                            libc::kill(sup, sig);
                        }
                    }
                    continue;
                }
                log::line(&format!("signal {sig}: unmounting {}", mp.display()));
                if let Err(e) = unmount_path(&mp, true) {
                    log::line(&format!("unmounting {}: {e}", mp.display()));
                }
                break;
            }
        })
        .map(|_| ())
        .map_err(|e| format!("signal thread: {e}"))
}

/// The mount's options: its name and type, the permission checks, ro/rw and the VFS
/// flags asked for; and whether the kernel checks permissions (default_permissions).
fn mount_options(cfg: &MountConfig, fsname: &str, read_only: bool) -> (Vec<MountOption>, bool) {
    let mut opts = vec![
        MountOption::FSName(fsname.to_string()),
        MountOption::Subtype(SUBTYPE.into()),
    ];
    // allow_other and allow_root bring default_permissions, for any mounter.
    let checks = cfg.kernel_checks_permissions();
    if checks {
        opts.push(MountOption::DefaultPermissions);
    }
    opts.push(if read_only {
        MountOption::RO
    } else {
        MountOption::RW
    });
    for f in &cfg.vfs_flags {
        opts.push(match f.as_str() {
            "dev" => MountOption::Dev,
            "nodev" => MountOption::NoDev,
            "suid" => MountOption::Suid,
            "nosuid" => MountOption::NoSuid,
            "exec" => MountOption::Exec,
            "noexec" => MountOption::NoExec,
            "atime" => MountOption::Atime,
            "noatime" => MountOption::NoAtime,
            "sync" => MountOption::Sync,
            "async" => MountOption::Async,
            "dirsync" => MountOption::DirSync,
            _ => continue,
        });
    }
    (opts, checks)
}

/// The io_uring queues' payload: the mount's `max_write`, 1 MiB unless given (as
/// libfuse; fuser's own default of 16 MiB would cost 16 MiB an entry).
fn uring_payload(cfg: &MountConfig) -> usize {
    cfg.max_write.map_or(1 << 20, |w| w as usize)
}

fn geteuid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Open /dev/fuse and mount it at `mountpoint` as `fuse.lanefs` with `fsname` as the
/// source (root only).
fn direct_mount(
    mountpoint: &Path,
    fsname: &str,
    opts: &[MountOption],
    cfg: &MountConfig,
    checks: bool,
    read_only: bool,
) -> Result<OwnedFd, String> {
    let dev = CString::new("/dev/fuse").expect("no NUL");
    // SAFETY: `dev` is a NUL-terminated path that outlives the call.
    let fd = unsafe { libc::open(dev.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(format!("/dev/fuse: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: `fd` was just opened and is owned by nothing else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut data = format!(
        "fd={},rootmode=40000,user_id={},group_id={}",
        std::os::fd::AsRawFd::as_raw_fd(&fd),
        0,
        0
    );
    if cfg.allow_other || cfg.allow_root {
        data.push_str(",allow_other");
    }
    if checks {
        data.push_str(",default_permissions");
    }
    let mut flags: libc::c_ulong = 0;
    if read_only {
        flags |= libc::MS_RDONLY;
    }
    for o in opts {
        flags |= match o {
            MountOption::NoDev => libc::MS_NODEV,
            MountOption::NoSuid => libc::MS_NOSUID,
            MountOption::NoExec => libc::MS_NOEXEC,
            MountOption::NoAtime => libc::MS_NOATIME,
            MountOption::Sync => libc::MS_SYNCHRONOUS,
            MountOption::DirSync => libc::MS_DIRSYNC,
            _ => 0,
        };
    }
    let c = |s: &[u8]| CString::new(s).map_err(|_| "a NUL byte in a mount argument".to_string());
    let (src, tgt, ty, dat) = (
        c(fsname.as_bytes())?,
        c(mountpoint.as_os_str().as_bytes())?,
        c(format!("fuse.{SUBTYPE}").as_bytes())?,
        c(data.as_bytes())?,
    );
    // SAFETY: every pointer is a NUL-terminated string living until the call returns.
    let r = unsafe {
        libc::mount(
            src.as_ptr(),
            tgt.as_ptr(),
            ty.as_ptr(),
            flags,
            dat.as_ptr().cast(),
        )
    };
    if r != 0 {
        return Err(format!(
            "mounting at {}: {}",
            mountpoint.display(),
            std::io::Error::last_os_error()
        ));
    }
    Ok(fd)
}

/// Unmount the FUSE mount at `mountpoint`: umount2 as root, else `fusermount3 -u`.
/// `lazy` detaches at once and lets the daemon finish what is in flight (as libfuse does
/// on a signal); otherwise a busy mount is an error, as with umount(8).
pub fn unmount_path(mountpoint: &Path, lazy: bool) -> std::io::Result<()> {
    if geteuid() == 0 {
        let tgt = CString::new(mountpoint.as_os_str().as_bytes())?;
        let flags = if lazy { libc::MNT_DETACH } else { 0 };
        // SAFETY: `tgt` is a NUL-terminated path living until the call returns.
        if unsafe { libc::umount2(tgt.as_ptr(), flags) } == 0 {
            return Ok(());
        }
        return Err(std::io::Error::last_os_error());
    }
    let mut cmd = std::process::Command::new("fusermount3");
    cmd.arg("-u");
    if lazy {
        cmd.arg("-z");
    }
    let out = cmd.arg(mountpoint).output()?;
    if out.status.success() {
        Ok(())
    } else {
        let msg = String::from_utf8_lossy(&out.stderr).trim().to_string();
        Err(std::io::Error::other(msg))
    }
}
