//! `kill -9` of the daemon while several processes write and fsync: every file whose
//! fsync returned is intact after replay, whoever replays it (lanefs, the kernel, e2fsck),
//! and the image is clean after.
//!
//! Method: three writer processes (this test binary re-run as `crash_writer`) each
//! write files of seeded random content into the mount, fsync each, and only then record
//! its name in a host file outside the mount. At a random moment the daemon gets SIGKILL.
//! The image is then copied twice: the kernel mounts one copy (replaying its journal),
//! `e2fsck -fy` replays and checks another, and lanefs mounts the original; each must
//! hold every recorded file with its exact bytes, and `e2fsck -fn` must be clean after.
//! `LANEFS_FUSE_CRASH_ROUNDS` sets the rounds (default 3), `LANEFS_FUSE_CRASH_SEED` the
//! seed.

// Both include the one skips module: its skips are counted apart, in two lines.
#[allow(clippy::duplicate_mod)]
mod cli_common;
#[allow(clippy::duplicate_mod)]
mod fuse_common;

use fuse_common::*;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

fn content(seed: u64, n: u64) -> Vec<u8> {
    let x = (seed << 32 ^ n).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    cli_common::noise(x, 1000 + (x % 200_000) as usize)
}

/// A writer (child process): files `w<seed>/<n>` in the mount, each fsynced and then
/// recorded in the log file, until the mount goes away.
#[test]
fn crash_writer() {
    let (Ok(dir), Ok(log), Ok(seed)) = (
        std::env::var("LANEFS_CRASH_DIR"),
        std::env::var("LANEFS_CRASH_LOG"),
        std::env::var("LANEFS_CRASH_WRITER"),
    ) else {
        return;
    };
    let seed: u64 = seed.parse().unwrap();
    let dir = PathBuf::from(dir).join(format!("w{seed}"));
    if fs::create_dir(&dir).is_err() {
        return;
    }
    let mut log = fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(log)
        .unwrap();
    for n in 0.. {
        let p = dir.join(n.to_string());
        let r = fs::File::create(&p).and_then(|mut f| {
            f.write_all(&content(seed, n))?;
            f.sync_all()
        });
        if r.is_err() {
            return;
        }
        // fsync returned: the file is acknowledged.
        // One write(2) per line: lines of the writers never interleave.
        log.write_all(format!("w{seed}/{n}\n").as_bytes()).unwrap();
        log.sync_all().unwrap();
        // Every few files, an unacknowledged overwrite in flight as well.
        if n % 3 == 0 {
            let _ = fs::write(dir.join("scratch"), content(seed, n + 1_000_000));
        }
    }
}

fn check_files(root: &Path, acked: &[String], who: &str) {
    for name in acked {
        let (w, n) = name.split_once('/').unwrap();
        let seed: u64 = w[1..].parse().unwrap();
        let data = fs::read(root.join(name)).unwrap_or_else(|e| panic!("{who}: {name}: {e}"));
        assert!(
            data == content(seed, n.parse().unwrap()),
            "{who}: {name} differs"
        );
    }
}

#[test]
fn kill_9_replays_every_fsynced_file() {
    let test = "kill_9_replays_every_fsynced_file";
    if !fuse_ready(test) {
        return;
    }
    let rounds: u64 = std::env::var("LANEFS_FUSE_CRASH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let seed: u64 = std::env::var("LANEFS_FUSE_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let me = std::env::current_exe().unwrap();
    for round in 0..rounds {
        let t = tempfile::tempdir().unwrap();
        let img = t.path().join("a.img");
        mkfs(&img, "512M", &[]);
        let dir = t.path().join("mnt");
        let m = Mount::new(&img, &dir, "commit=1");
        let dir = dir.canonicalize().unwrap();
        let log = t.path().join("acked");
        let writers: Vec<_> = (1..=3)
            .map(|w| {
                Command::new(&me)
                    .args(["--exact", "crash_writer", "--nocapture", "--test-threads=1"])
                    .env("LANEFS_CRASH_DIR", &dir)
                    .env("LANEFS_CRASH_LOG", &log)
                    .env("LANEFS_CRASH_WRITER", (round * 10 + w).to_string())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let wait_ms = 300 + (seed.wrapping_mul(7919).wrapping_add(round * 104_729)) % 1500;
        std::thread::sleep(Duration::from_millis(wait_ms));
        let pid = daemon_pid(&dir).expect("daemon");
        // SAFETY: kill sends a signal; `pid` is the daemon found above.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
        for mut w in writers {
            let _ = w.wait();
        }
        assert!(wait_released(&img, Duration::from_secs(30)));
        let _ = run(Command::new("umount").arg("-l").arg(&dir));
        m.forget();
        let acked: Vec<String> = fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect();
        assert!(
            !acked.is_empty(),
            "round {round}: nothing was acknowledged in {wait_ms} ms"
        );
        println!(
            "round {round}: killed after {wait_ms} ms, {} files fsynced",
            acked.len()
        );

        // The kernel replays a copy.
        let kcopy = t.path().join("kernel.img");
        fs::copy(&img, &kcopy).unwrap();
        let kdir = t.path().join("k");
        fs::create_dir(&kdir).unwrap();
        let out = run(Command::new("mount")
            .args(["-t", "ext4", "-o", "loop"])
            .arg(&kcopy)
            .arg(&kdir));
        assert!(
            out.status.success(),
            "kernel mount: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let r = std::panic::catch_unwind(|| check_files(&kdir, &acked, "kernel"));
        let _ = run(Command::new("umount").arg(&kdir));
        r.unwrap();
        e2fsck_clean(&kcopy);
        // e2fsck replays another.
        let ecopy = t.path().join("e2fsck.img");
        fs::copy(&img, &ecopy).unwrap();
        let out = run(Command::new("e2fsck").arg("-fy").arg(&ecopy));
        assert!(
            out.status.code().is_some_and(|c| c <= 1),
            "e2fsck -fy: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        e2fsck_clean(&ecopy);
        // lanefs replays the original, through a new mount.
        let m = Mount::new(&img, &dir, "");
        check_files(&dir, &acked, "lanefs");
        m.umount();
        e2fsck_clean(&img);
    }
}
