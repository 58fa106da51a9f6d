//! (1) The kernel's log: the kernel writes a tree and `sync`s, makes changes it commits with
//! fsync only and a few no fsync covers, and is shut down with `xfs_io`; `kernel_case` copies
//! the image at that instant and has e2fsck, lanefs and the kernel each replay a copy.

use super::*;

// ---------------------------------------------------------------------------------------
// (1) The kernel's log, replayed by e2fsck and by lanefs.

fn host_write(p: &Path, data: &[u8], perm: u32, fsync: bool) -> std::fs::File {
    let mut fh = std::fs::File::create(p).unwrap_or_else(|e| panic!("create {}: {e}", p.display()));
    fh.write_all(data)
        .unwrap_or_else(|e| panic!("write {}: {e}", p.display()));
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(perm))
        .unwrap_or_else(|e| panic!("chmod {}: {e}", p.display()));
    if fsync {
        fh.sync_all()
            .unwrap_or_else(|e| panic!("fsync {}: {e}", p.display()));
    }
    fh
}

fn fsync_path(p: &Path) {
    std::fs::File::open(p)
        .and_then(|f| f.sync_all())
        .unwrap_or_else(|e| panic!("fsync {}: {e}", p.display()));
}

pub(super) const SIZES: [usize; 9] = [0, 1, 100, 4095, 4096, 4097, 65536, 300_000, 1_500_000];
pub(super) const PERMS: [u32; 5] = [0o644, 0o600, 0o755, 0o4755, 0o640];

/// Written and then made durable with `sync`.
fn kernel_phase1(m: &Path) {
    for d in ["a", "a/b", "a/b/c", "e", "h", "u"] {
        std::fs::create_dir(m.join(d)).expect("mkdir");
    }
    for (di, d) in ["a", "a/b", "a/b/c", "e"].iter().enumerate() {
        for (k, &sz) in SIZES.iter().enumerate() {
            let seed = (di * 100 + k) as u64;
            host_write(
                &m.join(d).join(format!("f{k}")),
                &content(seed, sz),
                PERMS[k % PERMS.len()],
                false,
            );
        }
    }
    std::os::unix::fs::symlink("a/b", m.join("e/short")).expect("symlink");
    std::os::unix::fs::symlink("l".repeat(300), m.join("e/long")).expect("symlink");
    std::fs::hard_link(m.join("a/f0"), m.join("a/b/hl")).expect("link");
    for i in 0..HTREE {
        let data = if i % 10 == 0 {
            format!("htree {i}\n").into_bytes()
        } else {
            Vec::new()
        };
        host_write(&m.join("h").join(hname(i)), &data, 0o644, false);
    }
    std::fs::rename(m.join("a/f3"), m.join("e/f3_renamed")).expect("rename");
    // Allocated and written home now, unlinked while open later: only the log frees it.
    host_write(&m.join("a/orphan_old"), &content(77, 8 << 20), 0o644, false);
}

/// Changes after the `sync`, committed by fsync only. Returns the open-unlinked files.
fn kernel_phase2(m: &Path) -> Vec<(u64, std::fs::File)> {
    let old = std::fs::File::open(m.join("a/orphan_old")).expect("open orphan_old");
    let old_ino = old.metadata().expect("fstat").ino();
    std::fs::create_dir(m.join("late")).expect("mkdir late");
    std::fs::create_dir(m.join("late/sub")).expect("mkdir late/sub");
    for i in 0..150usize {
        let len = (i * 997) % 20_000 + 1;
        host_write(
            &m.join(format!("late/l{i}")),
            &content(1000 + i as u64, len),
            0o644,
            true,
        );
    }
    for i in (0..HTREE).step_by(4) {
        std::fs::remove_file(m.join("h").join(hname(i))).expect("unlink htree entry");
    }
    for i in 0..1000 {
        let data = if i % 7 == 0 {
            format!("new {i}\n").into_bytes()
        } else {
            Vec::new()
        };
        host_write(
            &m.join(format!("h/new_{i:04}")),
            &data,
            0o644,
            !data.is_empty(),
        );
    }
    for k in 0..4 {
        std::fs::rename(
            m.join(format!("a/b/c/f{k}")),
            m.join(format!("late/sub/c{k}")),
        )
        .expect("rename into late/sub");
    }
    std::fs::rename(m.join("e"), m.join("late/e_moved")).expect("rename dir");
    std::fs::remove_file(m.join("a/f1")).expect("unlink a/f1");
    let fh = std::fs::OpenOptions::new()
        .write(true)
        .open(m.join("a/b/f7"))
        .expect("open a/b/f7");
    fh.set_len(1000).expect("truncate");
    fh.sync_all().expect("fsync");
    let fh = std::fs::OpenOptions::new()
        .write(true)
        .open(m.join("a/f7"))
        .expect("open a/f7");
    std::os::unix::fs::FileExt::write_all_at(&fh, b"overwritten in place", 1000)
        .expect("overwrite");
    fh.sync_all().expect("fsync");
    std::fs::set_permissions(m.join("a/f2"), std::fs::Permissions::from_mode(0o600))
        .expect("chmod");
    std::fs::hard_link(m.join("a/b/f5"), m.join("late/hl2")).expect("link");
    let new = host_write(
        &m.join("late/orphan_new"),
        &content(78, 1 << 20),
        0o644,
        true,
    );
    let new_ino = new.metadata().expect("fstat").ino();
    std::fs::remove_file(m.join("late/orphan_new")).expect("unlink orphan_new");
    std::fs::remove_file(m.join("a/orphan_old")).expect("unlink orphan_old");
    for d in [
        "",
        "a",
        "a/b",
        "a/b/c",
        "late",
        "late/sub",
        "late/e_moved",
        "h",
        "u",
    ] {
        fsync_path(&m.join(d));
    }
    vec![(old_ino, old), (new_ino, new)]
}

/// Changes after the last fsync: a crash may keep them or not.
fn kernel_phase3(m: &Path) {
    for i in 0..40u64 {
        host_write(
            &m.join(format!("u/x{i}")),
            &content(5000 + i, 5000),
            0o644,
            false,
        );
    }
}

/// Shut the mounted file system down with xfs_io (`-f`: flush the log first).
fn shutdown(m: &Path, flush_log: bool) {
    let cmd = if flush_log { "shutdown -f" } else { "shutdown" };
    let out = Command::new("xfs_io")
        .args(["-x", "-c", cmd])
        .arg(m)
        .output()
        .expect("run xfs_io");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && err.trim().is_empty(),
        "xfs_io -x -c '{cmd}' {} failed ({:?}): {}{err}",
        m.display(),
        out.status.code(),
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        std::fs::write(m.join("after_shutdown"), b"x").is_err(),
        "xfs_io -x -c '{cmd}' {}: the file system still accepts writes",
        m.display()
    );
}

pub(super) fn kernel_case(test: &'static str, td: &Path, flush_log: bool, f: &mut Failures) {
    let t0 = Instant::now();
    let name = if flush_log { "logflush" } else { "nologflush" };
    let img = td.join(format!("{name}.img"));
    mkfs(&img, 256 << 20, &[]);
    let mnt = td.join(format!("{name}_mnt"));
    let crash = td.join(format!("{name}_crash.img"));

    let km = KernelMount::mount(&img, &mnt, "").expect("kernel mount rw");
    kernel_phase1(&mnt);
    // SAFETY: sync has no preconditions.
    unsafe { libc::sync() };
    let holders = kernel_phase2(&mnt);
    let orphans: Vec<u64> = holders.iter().map(|h| h.0).collect();
    let model = walk_host(&mnt);
    kernel_phase3(&mnt);
    shutdown(&mnt, flush_log);
    // The dead file system's committed buffers are still dirty in the loop device's cache;
    // unmounting writes them home. The image file now is what a power cut leaves.
    copy_image(&img, &crash);
    drop(holders);
    km.unmount().expect("unmount after shutdown");
    println!(
        "{test} [{name}]: kernel wrote {} entries, shut down ({}) in {}",
        model.len(),
        if flush_log {
            "xfs_io shutdown -f: log flushed"
        } else {
            "xfs_io shutdown: log not flushed"
        },
        secs(t0)
    );

    // Preconditions: the kernel left a log to replay.
    for (what, p) in [("after unmount", &img), ("at the crash", &crash)] {
        let sb = sb_info_or_panic(p);
        println!(
            "{test} [{name}]: {what}: needs_recovery {}, journal start {}, sequence {}, first orphan {:?}",
            sb.needs_recovery, sb.journal_start, sb.journal_seq, sb.first_orphan
        );
        assert!(
            sb.needs_recovery && sb.journal_start != 0,
            "{test} [{name}]: precondition: the kernel's image {what} needs no recovery \
             (features: {}; journal start {}): the shutdown did not leave a log ({})",
            sb.features,
            sb.journal_start,
            sb.journal
        );
    }
    log_evidence(test, td, &format!("[{name}]"), &model, &crash);

    // A: e2fsck replays and fixes.
    let a = td.join(format!("{name}_a_e2fsck.img"));
    copy_image(&crash, &a);
    replay_e2fsck(
        test,
        &a,
        &format!("[{name}] the kernel's log (copy A)"),
        false,
        f,
    );
    let (ta, ca) = after_replay(
        td,
        &a,
        &format!("[{name}] e2fsck -fy (copy A)"),
        &orphans,
        f,
    );

    // B: lanefs replays on mount.
    let b = td.join(format!("{name}_b_lanefs.img"));
    copy_image(&crash, &b);
    let who_b = format!("[{name}] lanefs replay (copy B)");
    let (tb, cb) = match replay_lanefs(
        test,
        &b,
        &format!("[{name}] the kernel's crash image (copy B)"),
        f,
    ) {
        Some(lt) => {
            f.diffs(
                &format!("[{name}] lanefs's own view after replay vs the kernel's last fsync"),
                diff_durable(&model, "lanefs", &lt),
            );
            after_replay(td, &b, &who_b, &orphans, f)
        }
        None => (None, None),
    };
    // C: the kernel replays its own log, for reference.
    let c = td.join(format!("{name}_c_kernel.img"));
    copy_image(&crash, &c);
    let (tc, cc) = replay_kernel(
        td,
        &c,
        &format!("[{name}] kernel mount (copy C)"),
        &model,
        &orphans,
        f,
    );
    compare_all(
        f,
        &format!("[{name}]"),
        &model,
        &[
            ("e2fsck (A)", ta.as_ref()),
            ("lanefs (B)", tb.as_ref()),
            ("kernel (C)", tc.as_ref()),
        ],
    );
    compare_counts(
        f,
        &format!("[{name}]"),
        &[("e2fsck (A)", ca), ("lanefs (B)", cb), ("kernel (C)", cc)],
    );
    let kept = |t: &Option<Tree>| match t {
        Some(t) => t
            .keys()
            .filter(|p| p.starts_with("/u/"))
            .count()
            .to_string(),
        None => "-".into(),
    };
    println!(
        "{test} [{name}]: /u files written after the last fsync (40) kept: e2fsck {}, lanefs {}, kernel {}",
        kept(&ta),
        kept(&tb),
        kept(&tc)
    );
    println!("{test} [{name}]: case done in {}", secs(t0));
}
