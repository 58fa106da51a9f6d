//! Conformance of the FUSE mount: pjdfstest 0.2.2 (0 failed, on root's mount and on
//! one made by an unprivileged user with `allow_other`), fsx (100,000 operations
//! with fallocate, punch hole and copy_file_range; no mismatch), and an fsstress-like run
//! of several processes doing random namespace operations at once (no unexpected errno;
//! the tree the mount shows is the tree e2fsck, lanefs fsck and the kernel see after).
//!
//! `pjdfstest` and `fsx` come from crates.io (`.ci/run` installs them into
//! `target/tools`); without them, or without FUSE and root, a test prints SKIP (a failure
//! under `LANEFS_REQUIRE_PRIVILEGED=1`).

mod fuse_common;

use fuse_common::*;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

const CONF: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/conformance");

#[test]
fn pjdfstest_passes() {
    let test = "pjdfstest_passes";
    if !fuse_ready(test) {
        return;
    }
    let Some(pjd) = pjdfstest(test) else {
        return;
    };
    let t = tempfile::tempdir().unwrap();
    let img = t.path().join("a.img");
    mkfs(&img, "512M", &[]);
    let m = Mount::new(&img, &t.path().join("mnt"), "allow_other");
    let summary = run_pjdfstest(&pjd, &m);
    println!("pjdfstest on lanefs: {summary}");
    m.umount();
    e2fsck_clean(&img);
}

/// pjdfstest run by root on a mount made by an unprivileged user (`lanefs-a`, through
/// fusermount3) with `allow_other`: the kernel checks every access (default_permissions
/// comes with allow_other for any mounter), root's overrides included, and the daemon
/// runs as `lanefs-a`. fusermount3 forces `nosuid,nodev` on a user's mount, which
/// changes nothing pjdfstest 0.2.2 looks at: its device nodes are made, looked at,
/// renamed and removed but never opened, and the only program it executes (for the
/// ETXTBSY cases) is a copy of sleep(1) without the set-user-ID bit. So the suite is the
/// same as on root's mount: 0 failed, and the same 16 skipped (13 `erofs_*` cases, which
/// need a remount, 2 `exdev_*` ones, which need a second file system, and
/// `link::link_count_max`, see the README).
#[test]
fn pjdfstest_passes_on_a_user_mount() {
    let test = "pjdfstest_passes_on_a_user_mount";
    if !fuse_ready(test) {
        return;
    }
    let Some(pjd) = pjdfstest(test) else {
        return;
    };
    let Some(u) = Users::get(test) else {
        return;
    };
    let _conf = UserAllowOther::new();
    let t = u.a_dir("lanefs-pjd-");
    let img = t.path().join("a.img");
    mkfs(&img, "512M", &[]);
    let m = u.mount_as_a(&img, &t.path().join("mnt"), "allow_other");
    let opts = super_options(&m.dir).unwrap_or_default();
    assert!(
        opts.contains("default_permissions") && opts.contains(&format!("user_id={}", u.a)),
        "mounted by lanefs-a: {opts}"
    );
    let summary = run_pjdfstest(&pjd, &m);
    println!("pjdfstest on lanefs mounted by lanefs-a: {summary}");
    assert!(summary.contains(" 16 skipped"), "{summary}");
    m.umount();
    e2fsck_clean(&img);
}

/// The pjdfstest binary (prints the SKIP line when it is missing).
fn pjdfstest(test: &str) -> Option<std::path::PathBuf> {
    let pjd = tool("pjdfstest");
    if pjd.is_none() {
        skip(
            test,
            "pjdfstest not installed (cargo install pjdfstest@0.2.2)",
        );
    }
    pjd
}

/// Run pjdfstest as root in a fresh 777 directory of `m`; panics unless 0 failed.
/// Returns its summary line.
fn run_pjdfstest(pjd: &Path, m: &Mount) -> String {
    let work = m.path("pjd");
    fs::create_dir(&work).unwrap();
    fs::set_permissions(&work, fs::Permissions::from_mode(0o777)).unwrap();
    let out = run(Command::new(pjd)
        .arg("-c")
        .arg(format!("{CONF}/pjdfstest.toml"))
        .arg("-p")
        .arg(&work)
        .current_dir(&work));
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    let summary = text
        .lines()
        .find(|l| l.starts_with("Summary:"))
        .unwrap_or_else(|| panic!("no summary:\n{text}"))
        .to_string();
    let failed: Vec<&str> = text
        .lines()
        .filter(|l| l.trim_end().ends_with("FAILED"))
        .collect();
    assert!(
        out.status.success() && summary.contains(" 0 failed"),
        "{summary}\n{}",
        failed.join("\n")
    );
    summary
}

#[test]
fn fsx_finds_no_mismatch() {
    let test = "fsx_finds_no_mismatch";
    if !fuse_ready(test) {
        return;
    }
    let Some(fsx) = tool("fsx") else {
        skip(test, "fsx not installed (cargo install fsx)");
        return;
    };
    let ops: u64 = std::env::var("LANEFS_FSX_OPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000);
    let t = tempfile::tempdir().unwrap();
    let img = t.path().join("a.img");
    mkfs(&img, "256M", &[]);
    // Once with the kernel's page cache writing through, once with writeback caching.
    for (i, opts) in ["", "writeback_cache"].iter().enumerate() {
        let m = Mount::new(&img, &t.path().join("mnt"), opts);
        let art = t.path().join(format!("artifacts{i}"));
        fs::create_dir(&art).unwrap();
        let out = run(Command::new(&fsx)
            .arg("-N")
            .arg(if i == 0 { ops } else { ops / 4 }.to_string())
            .arg("-S")
            .arg((1000 + i).to_string())
            .arg("-f")
            .arg(format!("{CONF}/fsx.toml"))
            .arg("-P")
            .arg(&art)
            .arg(m.path(&format!("fsx{i}"))));
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && text.contains("All operations completed A-OK"),
            "fsx ({opts}):\n{}",
            text.lines().rev().take(40).collect::<Vec<_>>().join("\n")
        );
        m.umount();
        e2fsck_clean(&img);
    }
}

/// One stress worker (run as a child process of `namespace_stress_from_processes`):
/// random namespace operations under `dir`, every errno checked against what the
/// operation may legitimately return while others race it.
#[test]
fn stress_worker() {
    let (Ok(dir), Ok(seed)) = (
        std::env::var("LANEFS_STRESS_DIR"),
        std::env::var("LANEFS_STRESS_SEED"),
    ) else {
        return;
    };
    let seed: u64 = seed.parse().unwrap();
    let ops: usize = std::env::var("LANEFS_STRESS_OPS").unwrap().parse().unwrap();
    worker(Path::new(&dir), seed, ops);
}

fn worker(root: &Path, seed: u64, ops: usize) {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut rnd = move |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    let name = |r: &mut dyn FnMut(u64) -> u64| {
        let depth = r(3);
        let mut p = root.to_path_buf();
        for _ in 0..depth {
            p.push(format!("d{}", r(4)));
        }
        p.push(format!("{}{}", ["f", "d", "l"][r(3) as usize], r(12)));
        p
    };
    // What racing workers may make any operation fail with.
    let allowed = [
        libc::ENOENT,
        libc::EEXIST,
        libc::ENOTEMPTY,
        libc::ENOTDIR,
        libc::EISDIR,
        libc::EINVAL,
        libc::EXDEV,
        libc::ELOOP,
        libc::EMLINK,
        libc::EPERM,
    ];
    let mut done = 0;
    for i in 0..ops {
        let a = name(&mut rnd);
        let b = name(&mut rnd);
        let r: std::io::Result<()> = match rnd(11) {
            0 | 1 => fs::write(&a, vec![(i % 251) as u8; rnd(20_000) as usize]),
            2 => fs::create_dir(&a),
            3 => fs::remove_file(&a),
            4 => fs::remove_dir(&a),
            5 | 6 => fs::rename(&a, &b),
            7 => fs::hard_link(&a, &b),
            8 => std::os::unix::fs::symlink(&b, &a),
            9 => fs::OpenOptions::new().write(true).open(&a).and_then(|f| {
                f.set_len(rnd(50_000))?;
                f.sync_all()
            }),
            _ => fs::read_dir(&a).and_then(|d| {
                for e in d {
                    let e = e?;
                    let _ = fs::symlink_metadata(e.path());
                }
                Ok(())
            }),
        };
        match r {
            Ok(()) => done += 1,
            Err(e) => {
                let code = e.raw_os_error().unwrap_or(0);
                assert!(allowed.contains(&code), "op {i} on {}: {e}", a.display());
            }
        }
    }
    println!("worker {seed}: {done} of {ops} operations succeeded");
    assert!(
        done * 10 > ops,
        "too few operations succeeded to mean anything"
    );
}

#[test]
fn namespace_stress_from_processes() {
    let test = "namespace_stress_from_processes";
    if !fuse_ready(test) {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let img = t.path().join("a.img");
    mkfs(&img, "256M", &[]);
    let m = Mount::new(&img, &t.path().join("mnt"), "");
    // The directories paths run through, made up front (workers remove and remake them).
    for a in 0..4 {
        for b in 0..4 {
            fs::create_dir_all(m.path(&format!("d{a}/d{b}"))).unwrap();
        }
    }
    let me = std::env::current_exe().unwrap();
    let ops: usize = std::env::var("LANEFS_STRESS_OPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000);
    let kids: Vec<_> = (0..4)
        .map(|k| {
            Command::new(&me)
                .args([
                    "--exact",
                    "stress_worker",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env("LANEFS_STRESS_DIR", &m.dir)
                .env("LANEFS_STRESS_SEED", (k + 1).to_string())
                .env("LANEFS_STRESS_OPS", ops.to_string())
                .output_async()
        })
        .collect();
    for (k, kid) in kids.into_iter().enumerate() {
        let out = kid.wait_with_output().unwrap();
        print!(
            "{}",
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter(|l| l.starts_with("worker"))
                .collect::<Vec<_>>()
                .join("\n")
        );
        println!();
        assert!(
            out.status.success(),
            "worker {k}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let before = listing(&m.dir);
    m.umount();
    e2fsck_clean(&img);
    let out = run(Command::new(LANEFS).arg("fsck").arg(&img));
    assert!(
        out.status.success(),
        "lanefs fsck: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let after = with_kernel_mount(&img, &t.path().join("k"), listing);
    assert_eq!(before, after);
}

trait SpawnPiped {
    fn output_async(&mut self) -> std::process::Child;
}

impl SpawnPiped for Command {
    fn output_async(&mut self) -> std::process::Child {
        self.stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    }
}
