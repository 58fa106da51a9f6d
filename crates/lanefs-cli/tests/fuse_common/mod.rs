//! Shared by the FUSE tests: when they can run, mounting and unmounting through the
//! `lanefs` binary, and the checks every test ends with.
//!
//! A FUSE test needs /dev/fuse, `fusermount3`, `e2fsck` and root (for `allow_other`,
//! which tests that switch users need, and for loop mounts); without them it prints
//! `SKIP <test>: <why>`, and fails instead under `LANEFS_REQUIRE_PRIVILEGED=1`.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

pub const LANEFS: &str = env!("CARGO_BIN_EXE_lanefs");

#[path = "../cli_common/accounts.rs"]
pub mod accounts;
#[path = "../../../lanefs/tests/common/skips.rs"]
pub mod skips;
#[allow(unused_imports)]
pub use skips::required;

/// Say that `test` is skipped (seen in cargo's output, counted when the binary exits), or
/// fail when skipping is not allowed; false, for `return skip(...)`.
pub fn skip(test: &str, why: &str) -> bool {
    skips::report(test, why);
    false
}

pub fn have(tool: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool}"))
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Whether FUSE tests can run here (prints the SKIP line when not).
pub fn fuse_ready(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return skip(test, "needs root (allow_other, loop mounts)");
    }
    if !Path::new("/dev/fuse").exists() {
        return skip(test, "no /dev/fuse");
    }
    for tool in ["fusermount3", "e2fsck"] {
        if !have(tool) {
            return skip(test, &format!("{tool} not installed"));
        }
    }
    true
}

/// A tool built for the tests (`pjdfstest`, `fsx`): `$LANEFS_TOOLS/bin`, the workspace's
/// `target/tools/bin` (where `.ci/run` installs them), or PATH.
pub fn tool(name: &str) -> Option<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(d) = std::env::var_os("LANEFS_TOOLS") {
        dirs.push(PathBuf::from(d).join("bin"));
    }
    dirs.push(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/tools/bin"));
    for d in dirs {
        let p = d.join(name);
        if p.exists() {
            return Some(p);
        }
    }
    have(name).then(|| PathBuf::from(name))
}

pub fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    out
}

/// `lanefs mkfs IMAGE --size SIZE` (ext4, 4 KiB blocks unless `args` say otherwise).
pub fn mkfs(image: &Path, size: &str, args: &[&str]) {
    let out = run(Command::new(LANEFS)
        .arg("mkfs")
        .arg(image)
        .args(["--size", size, "-b", "4096"])
        .args(args));
    assert!(
        out.status.success(),
        "mkfs: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `e2fsck -fn`: panics with its output unless clean.
pub fn e2fsck_clean(image: &Path) {
    let out = run(Command::new("e2fsck").arg("-fn").arg(image));
    assert!(
        out.status.success(),
        "e2fsck -fn {}:\n{}{}",
        image.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// An image mounted with `lanefs mount` (daemonized); unmounted lazily on drop if a test
/// failed before `umount`.
pub struct Mount {
    pub image: PathBuf,
    pub dir: PathBuf,
    mounted: bool,
}

impl Mount {
    /// Mount `image` on `dir` with `-o opts` (empty: none); panics with the command's
    /// message on failure.
    pub fn new(image: &Path, dir: &Path, opts: &str) -> Mount {
        std::fs::create_dir_all(dir).unwrap();
        let mut cmd = Command::new(LANEFS);
        cmd.arg("mount").arg(image).arg(dir);
        if !opts.is_empty() {
            cmd.args(["-o", opts]);
        }
        let out = run(&mut cmd);
        assert!(
            out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
            "lanefs mount: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Mount {
            image: image.to_path_buf(),
            dir: dir.to_path_buf(),
            mounted: true,
        }
    }

    /// Take charge of a mount made another way (`lanefs mount -f` as a child), so that a
    /// failing test leaves no mount behind.
    pub fn adopt(image: &Path, dir: &Path) -> Mount {
        Mount {
            image: image.to_path_buf(),
            dir: dir.to_path_buf(),
            mounted: true,
        }
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.join(rel)
    }

    /// `lanefs umount`: returns once the daemon has written everything back.
    pub fn umount(mut self) {
        let out = run(Command::new(LANEFS).arg("umount").arg(&self.dir));
        assert!(
            out.status.success(),
            "lanefs umount: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        self.mounted = false;
    }

    /// Forget the mount (it was taken down another way).
    pub fn forget(mut self) {
        self.mounted = false;
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if self.mounted {
            let _ = Command::new("umount").arg("-l").arg(&self.dir).output();
        }
    }
}

/// Wait until `image`'s exclusive lock is free (the daemon has exited), at most `max`.
pub fn wait_released(image: &Path, max: Duration) -> bool {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open(image).unwrap();
    let start = Instant::now();
    while start.elapsed() < max {
        // SAFETY: flock on a descriptor `f` owns; LOCK_NB never blocks.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// Whether `dir` is a mount point now.
pub fn is_mounted(dir: &Path) -> bool {
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    info.lines()
        .any(|l| l.split(' ').nth(4) == Some(dir.to_str().unwrap()))
}

/// Loop-mount `image` read-only with the kernel's ext4 at `dir`, run `f`, unmount.
pub fn with_kernel_mount<T>(image: &Path, dir: &Path, f: impl FnOnce(&Path) -> T) -> T {
    kernel_mount_with(image, dir, "loop,ro", f)
}

/// Mount `image` with the kernel's ext4 at `dir` with `-o opts` (`loop`, `loop,ro`), run
/// `f`, unmount (also when `f` panics).
pub fn kernel_mount_with<T>(image: &Path, dir: &Path, opts: &str, f: impl FnOnce(&Path) -> T) -> T {
    std::fs::create_dir_all(dir).unwrap();
    let out = run(Command::new("mount")
        .args(["-t", "ext4", "-o", opts])
        .arg(image)
        .arg(dir));
    assert!(
        out.status.success(),
        "kernel mount: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(dir)));
    let _ = run(Command::new("umount").arg(dir));
    match r {
        Ok(v) => v,
        Err(p) => std::panic::resume_unwind(p),
    }
}

/// Every path under `root` with what it is: directories, symlink targets, file bytes'
/// hash and size, modes; sorted. Two trees are the same when their listings are equal.
pub fn listing(root: &Path) -> Vec<String> {
    use std::os::unix::fs::MetadataExt;
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        let mut names: Vec<_> = std::fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        names.sort();
        for p in names {
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            if rel == "lost+found" {
                continue;
            }
            let m = std::fs::symlink_metadata(&p).unwrap();
            let ft = m.file_type();
            let what = if ft.is_dir() {
                stack.push(p.clone());
                "dir".to_string()
            } else if ft.is_symlink() {
                format!("-> {}", std::fs::read_link(&p).unwrap().display())
            } else if ft.is_file() {
                let data = std::fs::read(&p).unwrap();
                format!("{} bytes {:016x}", data.len(), fnv(&data))
            } else {
                format!("special rdev {}", m.rdev())
            };
            out.push(format!("{rel} {:o} {} {what}", m.mode(), m.nlink()));
        }
    }
    out.sort();
    out
}

pub fn fnv(data: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for &b in data {
        h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
    }
    h
}

/// The daemon of the mount at `dir` (canonical): the `lanefs mount` process with `dir`
/// among its arguments that serves the mount, the child of its supervisor (the other
/// such process; see `supervisor_pid`).
pub fn daemon_pid(dir: &Path) -> Option<i32> {
    let all = mount_processes(dir);
    all.iter()
        .find(|(_, ppid)| all.iter().any(|(p, _)| p == ppid))
        .map(|(pid, _)| *pid)
}

/// The supervisor of the mount at `dir` (canonical): the `lanefs mount` process that
/// started its daemon and unmounts for it.
pub fn supervisor_pid(dir: &Path) -> Option<i32> {
    let all = mount_processes(dir);
    all.iter()
        .find(|(pid, _)| all.iter().any(|(_, ppid)| ppid == pid))
        .map(|(pid, _)| *pid)
}

/// Every `lanefs mount` process with `dir` among its arguments, with its parent's pid.
fn mount_processes(dir: &Path) -> Vec<(i32, i32)> {
    use std::os::unix::ffi::OsStrExt;
    let want = dir.as_os_str().as_bytes();
    let mut found = Vec::new();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return found;
    };
    for e in procs.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<&[u8]> = cmd.split(|&b| b == 0).collect();
        if args.len() > 3
            && args[1] == b"mount"
            && args.contains(&want)
            && args[0].ends_with(b"lanefs")
        {
            let ppid = std::fs::read_to_string(e.path().join("status"))
                .ok()
                .and_then(|s| {
                    s.lines()
                        .find_map(|l| l.strip_prefix("PPid:"))
                        .and_then(|v| v.trim().parse().ok())
                })
                .unwrap_or(0);
            found.push((pid, ppid));
        }
    }
    found
}

/// The accounts tests that switch between unprivileged users need (`.ci/run` makes them):
/// `lanefs-a` mounts, `lanefs-b` is the other user, `lanefs-g` a group neither belongs to
/// by /etc/group (tests give it as a supplementary group with `setpriv --groups`).
#[derive(Debug, Clone, Copy)]
pub struct Users {
    pub a: u32,
    pub a_gid: u32,
    pub b: u32,
    pub b_gid: u32,
    pub g: u32,
}

impl Users {
    /// Look the accounts up (prints the SKIP line when one is missing, or `setpriv`).
    pub fn get(test: &str) -> Option<Users> {
        if !have("setpriv") {
            skip(test, "setpriv not installed (package util-linux)");
            return None;
        }
        if let Err(why) = accounts::ensure() {
            skip(test, &why);
            return None;
        }
        let id = |args: &[&str]| -> Option<u32> {
            let out = Command::new("id").args(args).output().ok()?;
            String::from_utf8_lossy(&out.stdout).trim().parse().ok()
        };
        let group = |name: &str| -> Option<u32> {
            let out = Command::new("getent").args(["group", name]).output().ok()?;
            String::from_utf8_lossy(&out.stdout)
                .split(':')
                .nth(2)?
                .trim()
                .parse()
                .ok()
        };
        let users = (|| {
            Some(Users {
                a: id(&["-u", "lanefs-a"])?,
                a_gid: id(&["-g", "lanefs-a"])?,
                b: id(&["-u", "lanefs-b"])?,
                b_gid: id(&["-g", "lanefs-b"])?,
                g: group("lanefs-g")?,
            })
        })();
        if users.is_none() {
            skip(
                test,
                "needs users lanefs-a, lanefs-b and group lanefs-g (as .ci/run makes them: \
                 useradd -M -s /usr/sbin/nologin lanefs-a; ...; groupadd lanefs-g)",
            );
            return None;
        }
        // fusermount3 opens /dev/fuse as the user: udev makes it 0666, a hand-made node
        // may not be.
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata("/dev/fuse").map_or(0, |m| m.permissions().mode());
        if mode & 0o006 != 0o006 {
            skip(
                test,
                &format!(
                    "/dev/fuse is mode {:o}: users cannot mount (chmod 0666 /dev/fuse, as udev does)",
                    mode & 0o777
                ),
            );
            return None;
        }
        users
    }

    /// `setpriv` switching to user `lanefs-a` with no supplementary group, then `args`.
    pub fn as_a(&self) -> Command {
        let mut c = Command::new("setpriv");
        c.arg(format!("--reuid={}", self.a))
            .arg(format!("--regid={}", self.a_gid))
            .arg("--clear-groups");
        c
    }

    /// A directory under /tmp that `lanefs-a` owns (mode 755), for its images and mount
    /// points; removed on drop.
    pub fn a_dir(&self, prefix: &str) -> tempfile::TempDir {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::Builder::new()
            .prefix(prefix)
            .tempdir_in("/tmp")
            .unwrap();
        std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::chown(t.path(), Some(self.a), Some(self.a_gid)).unwrap();
        t
    }

    /// The `lanefs` binary as `lanefs-a` can run it: the one cargo built, or a copy in
    /// `dir` (one of `a_dir`'s) when the build is out of that user's reach (a workspace
    /// under /root, say).
    pub fn lanefs_for_a(&self, dir: &Path) -> PathBuf {
        let reach = run(self.as_a().args(["test", "-x", LANEFS]));
        if reach.status.success() {
            return PathBuf::from(LANEFS);
        }
        let copy = dir.join("lanefs");
        if !copy.exists() {
            std::fs::copy(LANEFS, &copy).unwrap();
        }
        copy
    }

    /// `lanefs mount IMAGE DIR -o OPTS` run by `lanefs-a` (through fusermount3, the daemon
    /// running as `lanefs-a`); `image` is given to `lanefs-a` first and `dir` made and
    /// given to it. Panics with the command's message on failure.
    pub fn mount_as_a(&self, image: &Path, dir: &Path, opts: &str) -> Mount {
        std::fs::create_dir_all(dir).unwrap();
        for p in [image, dir] {
            std::os::unix::fs::chown(p, Some(self.a), Some(self.a_gid)).unwrap();
        }
        let lanefs = self.lanefs_for_a(image.parent().unwrap());
        let mut cmd = self.as_a();
        cmd.arg(lanefs).arg("mount").arg(image).arg(dir);
        if !opts.is_empty() {
            cmd.args(["-o", opts]);
        }
        let out = run(&mut cmd);
        assert!(
            out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
            "lanefs mount as lanefs-a: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Mount::adopt(image, dir)
    }

    /// `lanefs umount` run by `lanefs-a` (fusermount3 -u), for a mount only `lanefs-a`
    /// reaches (root cannot even look up its mount point there).
    pub fn umount_as_a(&self, m: Mount) {
        let lanefs = self.lanefs_for_a(m.image.parent().unwrap());
        let out = run(self.as_a().arg(lanefs).arg("umount").arg(&m.dir));
        assert!(
            out.status.success(),
            "lanefs umount as lanefs-a: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            wait_released(&m.image, Duration::from_secs(30)),
            "the daemon of {} did not exit",
            m.dir.display()
        );
        m.forget();
    }
}

/// `user_allow_other` in /etc/fuse.conf while any guard lives (so that a user's
/// fusermount3 takes `allow_other`): the first guard adds the line (making the file if
/// there is none), the last one dropped, even by a panic, puts back exactly what was
/// there before (the bytes, or no file). Guards of tests running at once share it.
pub struct UserAllowOther(());

/// The guards alive, and what /etc/fuse.conf held before the first (None: no file).
static FUSE_CONF: std::sync::Mutex<(usize, Option<Option<Vec<u8>>>)> =
    std::sync::Mutex::new((0, None));

const FUSE_CONF_PATH: &str = "/etc/fuse.conf";

impl UserAllowOther {
    pub fn new() -> UserAllowOther {
        let mut g = FUSE_CONF.lock().unwrap_or_else(|e| e.into_inner());
        if g.0 == 0 {
            let before = match std::fs::read(FUSE_CONF_PATH) {
                Ok(b) => Some(b),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                Err(e) => panic!("{FUSE_CONF_PATH}: {e}"),
            };
            let on = before.as_deref().is_some_and(|b| {
                String::from_utf8_lossy(b)
                    .lines()
                    .any(|l| l.trim() == "user_allow_other")
            });
            if !on {
                let mut now = before.clone().unwrap_or_default();
                if !now.is_empty() && !now.ends_with(b"\n") {
                    now.push(b'\n');
                }
                now.extend_from_slice(b"user_allow_other\n");
                std::fs::write(FUSE_CONF_PATH, now)
                    .unwrap_or_else(|e| panic!("{FUSE_CONF_PATH}: {e}"));
            }
            g.1 = Some(before);
        }
        g.0 += 1;
        UserAllowOther(())
    }
}

impl Default for UserAllowOther {
    fn default() -> UserAllowOther {
        UserAllowOther::new()
    }
}

impl Drop for UserAllowOther {
    fn drop(&mut self) {
        let mut g = FUSE_CONF.lock().unwrap_or_else(|e| e.into_inner());
        g.0 -= 1;
        if g.0 == 0 {
            match g.1.take() {
                Some(Some(bytes)) => {
                    let _ = std::fs::write(FUSE_CONF_PATH, bytes);
                }
                Some(None) => {
                    let _ = std::fs::remove_file(FUSE_CONF_PATH);
                }
                None => {}
            }
        }
    }
}

/// The super options of the mount at `dir` (canonical) in /proc/self/mountinfo (the
/// last field: `rw,user_id=...,default_permissions,allow_other`).
pub fn super_options(dir: &Path) -> Option<String> {
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let want = dir.to_str()?;
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines()
        .rfind(|l| l.split(' ').nth(4) == Some(want))
        .and_then(|l| l.rsplit(' ').next())
        .map(str::to_string)
}

/// `diff -u` of lanefs's output (`-`) against the kernel's (`+`).
pub fn line_diff(got: &str, want: &str) -> String {
    let t = tempfile::tempdir().unwrap();
    let (g, w) = (t.path().join("lanefs"), t.path().join("kernel"));
    std::fs::write(&g, got).unwrap();
    std::fs::write(&w, want).unwrap();
    let out = run(Command::new("diff").arg("-u").arg(&g).arg(&w));
    String::from_utf8_lossy(&out.stdout).into_owned()
}
