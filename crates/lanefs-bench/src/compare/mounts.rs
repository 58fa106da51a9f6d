//! The mounts a compare run makes: images made alike, daemons spawned as children (their
//! pids known for CPU time), mounts waited for and settled, and every mount taken down by a
//! guard, also on an error.

use super::*;

/// The last non-empty line of a daemon's log, for an error message.
pub(super) fn last_line(log: &Path) -> String {
    std::fs::read_to_string(log)
        .ok()
        .and_then(|t| {
            t.lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .map(str::to_string)
        })
        .unwrap_or_else(|| "(nothing logged)".to_string())
}

/// Run `cmd`; an error names it and carries the first line it printed.
pub(super) fn run_cmd(cmd: &mut Command) -> Result<(), String> {
    let shown = format!("{cmd:?}").replace('"', "");
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{shown}: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    let text = String::from_utf8_lossy(&out.stderr);
    let text = if text.trim().is_empty() {
        String::from_utf8_lossy(&out.stdout)
    } else {
        text
    };
    let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    Err(format!("{shown} failed ({}): {first}", out.status))
}

/// Undo the escapes of a mountinfo field (`\040` for a space, and so on).
pub(super) fn unescape(field: &str) -> Vec<u8> {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (b[i], octal) {
            (b'\\', Some(d)) => {
                let v = d.iter().fold(0u32, |v, c| v * 8 + u32::from(c - b'0'));
                out.push(v as u8);
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

/// Whether something is mounted on `dir` (an absolute, canonical path).
pub(super) fn is_mounted(dir: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let want = dir.as_os_str().as_bytes();
    text.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .any(|mp| unescape(mp) == want)
}

/// Wait up to `limit` for `child` to exit.
pub(super) fn wait_exit(child: &mut Child, limit: Duration) -> Result<Option<ExitStatus>, String> {
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(st)) => return Ok(Some(st)),
            Ok(None) if start.elapsed() >= limit => return Ok(None),
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(format!("waiting for pid {}: {e}", child.id())),
        }
    }
}

/// How a mount is taken down.
pub(super) enum Kind {
    /// `lanefs umount DIR` (returns once the daemon let go of the image), then the
    /// daemon's exit.
    Lanefs(PathBuf),
    /// `umount DIR`, then the daemon's exit.
    Fuse2fs,
    /// `umount DIR` (the loop device goes with it).
    Kernel,
}

/// One mounted image.
pub(super) struct Mounted {
    pub(super) name: &'static str,
    pub(super) kind: Kind,
    pub(super) image: PathBuf,
    pub(super) dir: PathBuf,
    /// The FUSE daemon (`-f`, so the child is the daemon itself) and its log (its output).
    pub(super) daemon: Option<(Child, PathBuf)>,
    pub(super) up: bool,
}

impl Mounted {
    pub(super) fn pid(&self) -> Option<u32> {
        self.daemon.as_ref().map(|(c, _)| c.id())
    }

    pub(super) fn target(&self) -> Target {
        Target::Mount {
            dir: self.dir.clone(),
            label: self.name.to_string(),
            daemon: self.pid(),
        }
    }

    /// Unmount and wait for the daemon to exit cleanly.
    pub(super) fn unmount(&mut self) -> Result<(), String> {
        if !self.up {
            return Ok(());
        }
        let what = format!("unmounting {} from {}", self.name, self.dir.display());
        match &self.kind {
            Kind::Lanefs(exe) => run_cmd(Command::new(exe).arg("umount").arg(&self.dir)),
            Kind::Fuse2fs | Kind::Kernel => run_cmd(Command::new("umount").arg(&self.dir)),
        }
        .map_err(|e| format!("{what}: {e}"))?;
        self.up = false;
        let Some((child, log)) = &mut self.daemon else {
            return Ok(());
        };
        match wait_exit(child, EXIT_WAIT).map_err(|e| format!("{what}: {e}"))? {
            Some(st) if st.success() => Ok(()),
            Some(st) => Err(format!(
                "{what}: the daemon exited with {st}: {}",
                last_line(log)
            )),
            None => {
                let _ = child.kill();
                let _ = child.wait();
                Err(format!(
                    "{what}: the daemon did not exit within {} s; killed",
                    EXIT_WAIT.as_secs()
                ))
            }
        }
    }

    /// Best effort, for the error path: unmount (lazily if need be) and reap the daemon.
    pub(super) fn teardown(&mut self) {
        if self.up {
            let plain = Command::new("umount")
                .arg(&self.dir)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            if !plain.is_ok_and(|s| s.success()) {
                let _ = Command::new("umount")
                    .arg("-l")
                    .arg(&self.dir)
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status();
            }
            self.up = false;
        }
        if let Some((child, _)) = &mut self.daemon {
            if !matches!(wait_exit(child, Duration::from_secs(60)), Ok(Some(_))) {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// Every mount of the run; whatever is still mounted when it drops is taken down.
#[derive(Default)]
pub(super) struct Mounts(pub(super) Vec<Mounted>);

impl Drop for Mounts {
    fn drop(&mut self) {
        for m in self.0.iter_mut().rev() {
            m.teardown();
        }
    }
}

/// Make a sparse file of `size` bytes at `image` and format it as every image of the run is.
pub(super) fn make_image(image: &Path, size: u64) -> Result<(), String> {
    let f = File::create(image).map_err(|e| format!("creating {}: {e}", image.display()))?;
    f.set_len(size)
        .map_err(|e| format!("sizing {}: {e}", image.display()))?;
    drop(f);
    run_cmd(Command::new("mkfs.ext4").args(MKFS_ARGS).arg(image))
}

/// How the images are made (besides the size): Debian 12's ext4 defaults at 4 KiB blocks,
/// inode tables and journal written out at once (the kernel then starts no lazy-init thread
/// that would run during the measurements).
pub(super) const MKFS_ARGS: &[&str] = &[
    "-F",
    "-q",
    "-b",
    "4096",
    "-i",
    "16384",
    "-E",
    "lazy_itable_init=0,lazy_journal_init=0",
];

/// Start a FUSE daemon in the foreground with its output to `log`, and wait until its
/// mount shows in /proc/self/mountinfo.
pub(super) fn spawn_daemon(
    name: &str,
    cmd: &mut Command,
    dir: &Path,
    log: &Path,
) -> Result<Child, String> {
    let shown = format!("{cmd:?}").replace('"', "");
    let err = File::create(log).map_err(|e| format!("creating {}: {e}", log.display()))?;
    // Both streams to the log: fuse2fs says some things on stdout.
    let said = err
        .try_clone()
        .map_err(|e| format!("duplicating {}: {e}", log.display()))?;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(said)
        .stderr(err)
        .spawn()
        .map_err(|e| format!("{shown}: {e}"))?;
    let start = Instant::now();
    loop {
        if is_mounted(dir) {
            return Ok(child);
        }
        match child.try_wait() {
            Ok(Some(st)) => {
                return Err(format!(
                    "mounting {name}: {shown} exited ({st}): {}",
                    last_line(log)
                ))
            }
            Ok(None) => {}
            Err(e) => return Err(format!("mounting {name}: waiting for {shown}: {e}")),
        }
        if start.elapsed() > MOUNT_WAIT {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "mounting {name}: {shown} did not mount within {} s",
                MOUNT_WAIT.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Make `name`'s image and mount point under `work` and mount it; the mount joins `mounts`
/// as soon as it is up.
pub(super) fn mount_one(
    mounts: &mut Mounts,
    name: &'static str,
    work: &Path,
    size: u64,
    lanefs_exe: &Path,
) -> Result<(), String> {
    let image = work.join(format!("{name}.img"));
    let dir = work.join(format!("mnt-{name}"));
    std::fs::create_dir(&dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
    // The in-memory ceiling has no image.
    let image = if name == MEMFS || name == MEMFS_DEV {
        PathBuf::new()
    } else {
        make_image(&image, size)?;
        image
    };
    let log = work.join(format!("{name}.log"));
    let (kind, daemon) = match name {
        LANEFS | LANEFS_DEV | MEMFS | MEMFS_DEV => {
            let mut cmd = Command::new(lanefs_exe);
            if name == LANEFS || name == LANEFS_DEV {
                cmd.arg("mount").arg(&image).arg(&dir);
            } else {
                cmd.arg("memfs").arg(&dir);
            }
            let dev = name == LANEFS_DEV || name == MEMFS_DEV;
            cmd.args([
                "-o",
                if dev {
                    "allow_other,no_io_uring"
                } else {
                    "allow_other"
                },
                "-f",
            ]);
            let child = spawn_daemon(name, &mut cmd, &dir, &log)?;
            (Kind::Lanefs(lanefs_exe.to_path_buf()), Some((child, log)))
        }
        FUSE2FS => {
            let mut cmd = Command::new("fuse2fs");
            cmd.arg(&image).arg(&dir).args(["-o", "allow_other", "-f"]);
            let child = spawn_daemon(name, &mut cmd, &dir, &log)?;
            (Kind::Fuse2fs, Some((child, log)))
        }
        _ => {
            run_cmd(
                Command::new("mount")
                    .args(["-o", "loop"])
                    .arg(&image)
                    .arg(&dir),
            )
            .map_err(|e| format!("mounting {name}: {e}"))?;
            (Kind::Kernel, None)
        }
    };
    mounts.0.push(Mounted {
        name,
        kind,
        image,
        dir,
        daemon,
        up: true,
    });
    Ok(())
}

/// After a run, untimed: make the mount write back what the run left (fsync of its root,
/// which commits lanefs's journal, then syncfs), so it does not run during the next
/// target's measurement.
pub(super) fn settle(dir: &Path) -> Result<(), String> {
    let d = File::open(dir).map_err(|e| format!("open {}: {e}", dir.display()))?;
    if let Err(e) = d.sync_all() {
        // A FUSE server may not implement fsyncdir; that is no failure of the run.
        if !matches!(e.raw_os_error(), Some(libc::ENOSYS | libc::EINVAL)) {
            return Err(format!("fsync {}: {e}", dir.display()));
        }
    }
    // SAFETY: plain syscall on an fd owned by `d`.
    if unsafe { libc::syncfs(d.as_raw_fd()) } != 0 {
        let e = std::io::Error::last_os_error();
        return Err(format!("syncfs {}: {e}", dir.display()));
    }
    Ok(())
}

/// `e2fsck -fn IMAGE`: the first line of what it found when the image is not clean.
pub(super) fn fsck_clean(name: &str, image: &Path) -> Result<(), String> {
    run_cmd(Command::new("e2fsck").arg("-fn").arg(image))
        .map_err(|e| format!("{name}'s image is not clean after the run: {e}"))
}
