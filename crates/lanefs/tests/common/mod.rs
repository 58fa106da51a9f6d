//! Helpers shared by the integration tests: images made by the system's `mkfs.ext4`,
//! `e2fsck -fn` as the judge of on-disk validity, and the skip-or-require rule for tests
//! that need system tools or root.
//!
//! A test that lacks a tool or privilege prints `SKIP <test>: <reason>` and returns, unless
//! `LANEFS_REQUIRE_PRIVILEGED=1`, where it panics instead (CI sets it where tools exist).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc;
use std::time::Duration;

/// A small xorshift generator (deterministic per seed).
pub struct Rng(pub u64);

impl Rng {
    /// The next value.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// A value below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

pub mod skips;
#[allow(unused_imports)]
pub use skips::required;

/// Say that `test` is skipped (seen in cargo's output, counted when the binary exits), or
/// panic under `LANEFS_REQUIRE_PRIVILEGED=1`.
pub fn skip(test: &str, why: &str) {
    skips::report(test, why);
}

/// Whether `tool -V` runs.
pub fn have_tool(tool: &str) -> bool {
    Command::new(tool).arg("-V").output().is_ok()
}

/// True if every tool runs; otherwise skips (or panics) naming the first missing one.
pub fn require_tools(test: &str, tools: &[&str]) -> bool {
    match tools.iter().find(|t| !have_tool(t)) {
        Some(t) => {
            skip(test, &format!("{t} not found"));
            false
        }
        None => true,
    }
}

/// True when running as root; otherwise skips (or panics).
pub fn require_root(test: &str) -> bool {
    let out = Command::new("id").arg("-u").output();
    let root = out.is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    if !root {
        skip(test, "not running as root");
    }
    root
}

/// Make an ext4 image of `size` bytes at `dir/name` with `mkfs.ext4 -q -F -b 4096`.
pub fn mkfs_image(dir: &Path, name: &str, size: u64) -> PathBuf {
    mkfs_image_args(dir, name, size, &[])
}

/// Run `e2fsck -fn` on an image: (exit code, stdout and stderr).
pub fn e2fsck(path: &Path) -> (i32, String) {
    let out = Command::new("e2fsck")
        .arg("-fn")
        .arg(path)
        .output()
        .expect("run e2fsck");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

/// Panic with e2fsck's output unless `e2fsck -fn` exits 0.
pub fn assert_fsck_clean(path: &Path) {
    let (code, text) = e2fsck(path);
    assert_eq!(
        code,
        0,
        "e2fsck -fn {} exited {code}:\n{text}",
        path.display()
    );
}

/// Like [`mkfs_image`], with extra `mkfs.ext4` arguments (e.g. `-g 8192`, `-N 250000`).
pub fn mkfs_image_args(dir: &Path, name: &str, size: u64, extra: &[&str]) -> PathBuf {
    let path = dir.join(name);
    let f = std::fs::File::create(&path).expect("create image file");
    f.set_len(size).expect("size image file");
    drop(f);
    let out = Command::new("mkfs.ext4")
        .args(["-q", "-F", "-b", "4096"])
        .args(extra)
        .arg(&path)
        .output()
        .expect("run mkfs.ext4");
    assert!(
        out.status.success(),
        "mkfs.ext4 {extra:?} {} failed: {}{}",
        path.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    path
}

/// Ends the whole test process (exit 101) if still alive after its time limit: a deadlock
/// must fail the run, not hang it. Dropping it disarms it.
pub struct Watchdog {
    _disarm: mpsc::Sender<()>,
}

/// Arm a watchdog for `test` that fires after `secs` seconds.
pub fn watchdog(test: &str, secs: u64) -> Watchdog {
    let (tx, rx) = mpsc::channel::<()>();
    let test = test.to_string();
    std::thread::spawn(move || {
        if rx.recv_timeout(Duration::from_secs(secs)) == Err(mpsc::RecvTimeoutError::Timeout) {
            eprintln!("{test}: still running after {secs} s (deadlock?): exiting");
            std::process::exit(101);
        }
    });
    Watchdog { _disarm: tx }
}

/// Whether the test runs as root (no subprocess).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and only reads the process's credentials.
    unsafe { libc::geteuid() == 0 }
}

/// Run a command; Ok(stdout) on success, Err(stdout+stderr) otherwise.
pub fn run(cmd: &mut Command) -> Result<String, String> {
    let out = cmd.output().map_err(|e| format!("spawn {cmd:?}: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.success() {
        Ok(text)
    } else {
        Err(format!(
            "{cmd:?} exited {:?}:\n{text}{}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// A kernel loop mount, unmounted when dropped (also while unwinding from a panic).
pub struct KernelMount {
    /// The mount point.
    pub dir: PathBuf,
    mounted: bool,
}

impl KernelMount {
    /// `opts` is added to `loop` (e.g. `ro,noload`).
    pub fn mount(img: &Path, dir: &Path, opts: &str) -> Result<KernelMount, String> {
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        let opts = if opts.is_empty() {
            "loop".to_string()
        } else {
            format!("loop,{opts}")
        };
        run(Command::new("mount")
            .args(["-t", "ext4", "-o", &opts])
            .arg(img)
            .arg(dir))?;
        Ok(KernelMount {
            dir: dir.to_path_buf(),
            mounted: true,
        })
    }

    /// Unmount now; Err if the kernel refuses.
    pub fn unmount(mut self) -> Result<(), String> {
        self.mounted = false;
        let mut last = String::new();
        for _ in 0..20 {
            match run(Command::new("umount").arg(&self.dir)) {
                Ok(_) => return Ok(()),
                Err(e) => last = e,
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        Err(format!("umount {} failed: {last}", self.dir.display()))
    }
}

impl Drop for KernelMount {
    fn drop(&mut self) {
        if !self.mounted {
            return;
        }
        for _ in 0..20 {
            if Command::new("umount")
                .arg(&self.dir)
                .status()
                .is_ok_and(|s| s.success())
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
    }
}

/// Whether the machine can run these tests: tools, root, and a working loop mount of a
/// fresh image. Prints SKIP (or panics when required) otherwise.
pub fn kernel_ready(test: &str, td: &Path, extra_tools: &[&str]) -> bool {
    for tool in ["mkfs.ext4", "e2fsck", "debugfs", "dumpe2fs", "cp"]
        .iter()
        .chain(extra_tools)
    {
        if !have_tool(tool) {
            skip(test, &format!("{tool} not found"));
            return false;
        }
    }
    if !is_root() {
        skip(test, "not root (loop mounts need privilege)");
        return false;
    }
    let img = mkfs_image(td, "probe.img", 16 << 20);
    match KernelMount::mount(&img, &td.join("probe"), "ro") {
        Ok(m) => {
            m.unmount().expect("unmount probe");
            let _ = std::fs::remove_file(&img);
            true
        }
        Err(e) => {
            skip(test, &format!("cannot loop-mount a fresh image: {e}"));
            false
        }
    }
}

/// Make an image of `size` bytes at `dir/name` with `mke2fs -q -F ARGS` (no default block
/// size or type: pass `-t ext2|ext3|ext4`, `-b`, `-O`, ... as needed). Err with mke2fs's
/// output if it refuses.
pub fn mke2fs_image(dir: &Path, name: &str, size: u64, args: &[&str]) -> Result<PathBuf, String> {
    let path = dir.join(name);
    let f = std::fs::File::create(&path).map_err(|e| format!("create {}: {e}", path.display()))?;
    f.set_len(size)
        .map_err(|e| format!("size {}: {e}", path.display()))?;
    drop(f);
    run(Command::new("mke2fs")
        .args(["-q", "-F"])
        .args(args)
        .arg(&path))
    .map_err(|e| format!("mke2fs {args:?}: {e}"))?;
    Ok(path)
}

/// `lanefs::fsck::check` on an image opened read-only: Ok(summary) when clean, otherwise
/// Err with the summary and the first problems (or the error that stopped it).
pub fn lanefs_fsck(path: &Path) -> Result<String, String> {
    let dev = lanefs::FileDevice::open(path, true)
        .map_err(|e| format!("lanefs fsck: open {}: {e}", path.display()))?;
    match lanefs::fsck::check(&dev, &lanefs::fsck::FsckOptions::default()) {
        Ok(r) if r.is_clean() => Ok(r.summary()),
        Ok(r) => {
            let mut s = format!("lanefs fsck: {}", r.summary());
            for p in r.problems.iter().take(8) {
                s.push_str(&format!("\n  {p}"));
            }
            Err(s)
        }
        Err(e) => Err(format!("lanefs fsck: {e}")),
    }
}

/// `debugfs -R CMD IMAGE` (read-only): its stdout, or Err with its output.
pub fn debugfs(img: &Path, cmd: &str) -> Result<String, String> {
    run(Command::new("debugfs").arg("-R").arg(cmd).arg(img))
}

/// `debugfs -R CMD IMAGE` as raw bytes (for `cat`).
pub fn debugfs_bytes(img: &Path, cmd: &str) -> Result<Vec<u8>, String> {
    let out = Command::new("debugfs")
        .arg("-R")
        .arg(cmd)
        .arg(img)
        .output()
        .map_err(|e| format!("spawn debugfs: {e}"))?;
    if out.status.success() {
        Ok(out.stdout)
    } else {
        Err(format!(
            "debugfs -R {cmd:?} exited {:?}: {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}
