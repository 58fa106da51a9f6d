//! Goal: the journal's own promises, each checked on the image a crash would leave.
//! - a block changed many times in one transaction is logged once;
//! - the log wraps and checkpoints, and what it holds replays;
//! - blocks freed in a transaction are not reused before it commits, and ENOSPC first
//!   commits so that pending frees count;
//! - a freed metadata block reused for data is revoked: replay never writes its old copy
//!   over the new data;
//! - a failing device aborts the journal, turns the mount read-only, and what was
//!   committed before stays;
//! - a due transaction takes handles while the commit before it writes, up to half the
//!   log, and is asked for once (no early commit of the next).
//!
//! Method: images from `mkfs.ext4` on a memory device; a "crash" is the device's bytes
//! taken while the file system is still mounted (every write so far, nothing after), then
//! mounted again (replay), checked against what was acknowledged, and judged by
//! `e2fsck -fn` after a clean unmount.

mod common;

use lanefs::{BlockDevice, Error, FallocMode, Fs, Ino, MemDevice, MountOptions, Owner, SetAttr};
use lanefs::{Result, ROOT_INO};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

const O: Owner = Owner {
    uid: 0,
    gid: 0,
    umask: 0,
};

fn opts() -> MountOptions {
    MountOptions {
        commit_interval: Duration::ZERO,
        ..MountOptions::default()
    }
}

/// A fresh image's bytes, or None (skipped) without mkfs.ext4.
fn image(test: &str, size: u64, extra: &[&str]) -> Option<(tempfile::TempDir, Vec<u8>)> {
    if !common::require_tools(test, &["mkfs.ext4", "e2fsck"]) {
        return None;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let p = common::mkfs_image_args(dir.path(), "img", size, extra);
    let bytes = std::fs::read(&p).expect("read image");
    Some((dir, bytes))
}

/// Mount a crash image (replaying it), run `check`, unmount, and require e2fsck -fn clean.
fn replay_and_check(dir: &Path, name: &str, bytes: Vec<u8>, check: impl FnOnce(&Fs)) {
    let dev = Arc::new(MemDevice::from_vec(bytes));
    let fs = Fs::mount(dev.clone(), opts()).expect("mount (replay) the crash image");
    check(&fs);
    fs.unmount().expect("unmount after replay");
    let p = dir.join(name);
    std::fs::write(&p, dev.snapshot()).expect("write image");
    common::assert_fsck_clean(&p);
}

fn read_all(fs: &Fs, ino: Ino) -> Vec<u8> {
    let size = fs.getattr(ino).expect("getattr").size as usize;
    let mut buf = vec![0u8; size];
    let n = fs.read(ino, 0, &mut buf).expect("read");
    buf.truncate(n);
    buf
}

fn lookup(fs: &Fs, dir: Ino, name: &str) -> Result<Ino> {
    fs.lookup(dir, name.as_bytes()).map(|a| a.ino)
}

#[test]
fn a_block_changed_many_times_is_logged_once() {
    let Some((_d, img)) = image("a_block_changed_many_times_is_logged_once", 64 << 20, &[]) else {
        return;
    };
    let fs = Fs::mount(Arc::new(MemDevice::from_vec(img)), opts()).expect("mount");
    let f = fs.create(ROOT_INO, b"f", 0o644, O).expect("create").ino;
    fs.fsync(f, false).expect("fsync");
    let before = fs.diagnostics().journal_stats();
    for i in 0..1000u32 {
        let set = SetAttr {
            perm: Some((0o600 + i % 64) as u16),
            ..SetAttr::default()
        };
        fs.setattr(f, &set).expect("chmod");
    }
    fs.fsync(f, false).expect("fsync");
    let after = fs.diagnostics().journal_stats();
    // One descriptor, the inode table block, the superblock-free commit block: a handful.
    let logged = after.log_blocks - before.log_blocks;
    assert_eq!(after.commits - before.commits, 1, "one commit");
    assert!(
        logged <= 4,
        "1000 changes to one inode logged {logged} blocks"
    );
    fs.release(f).expect("release");
    fs.unmount().expect("unmount");
}

#[test]
fn the_log_wraps_checkpoints_and_replays() {
    let test = "the_log_wraps_checkpoints_and_replays";
    let Some((dir, img)) = image(test, 64 << 20, &["-J", "size=4"]) else {
        return;
    };
    let dev = Arc::new(MemDevice::from_vec(img));
    let fs = Fs::mount(dev.clone(), opts()).expect("mount");
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, O).expect("mkdir").ino;
    let mut crash = None;
    for i in 0..3000u32 {
        let name = format!("file{i}");
        let f = fs.create(d, name.as_bytes(), 0o644, O).expect("create").ino;
        fs.write(f, 0, name.as_bytes()).expect("write");
        fs.fsync(f, false).expect("fsync");
        fs.release(f).expect("release");
        if i == 2500 {
            crash = Some(dev.snapshot());
        }
    }
    let st = fs.diagnostics().journal_stats();
    assert!(
        st.log_blocks > 3 * 1024,
        "only {} log blocks written: the 1024-block log did not wrap",
        st.log_blocks
    );
    assert!(st.checkpoints >= 3, "{} checkpoints", st.checkpoints);
    drop(fs);
    replay_and_check(dir.path(), "wrap", crash.expect("snapshot"), |fs| {
        let d = lookup(fs, ROOT_INO, "d").expect("d");
        for i in 0..=2500u32 {
            let name = format!("file{i}");
            let f = lookup(fs, d, &name).unwrap_or_else(|e| panic!("{name} lost: {e}"));
            assert_eq!(read_all(fs, f), name.as_bytes(), "{name} content");
        }
    });
}

#[test]
fn frees_wait_for_their_commit_and_enospc_counts_them() {
    let test = "frees_wait_for_their_commit_and_enospc_counts_them";
    let Some((_d, img)) = image(test, 64 << 20, &[]) else {
        return;
    };
    let fs = Fs::mount(Arc::new(MemDevice::from_vec(img)), opts()).expect("mount");
    // Fill the disk with one file, commit.
    let a = fs.create(ROOT_INO, b"a", 0o644, O).expect("create a").ino;
    let free = fs.statfs().expect("statfs").free_blocks * 4096;
    let mut got = 0u64;
    let chunk = 4 << 20;
    loop {
        match fs.fallocate(a, FallocMode::default(), got, chunk) {
            Ok(()) => got += chunk,
            Err(Error::NoSpace) => break,
            Err(e) => panic!("fallocate: {e}"),
        }
    }
    assert!(got > free / 2, "filled only {got} of {free} bytes");
    fs.fsync(a, false).expect("fsync");
    // Free it in a transaction that is not committed yet: the space exists only once
    // that commits, which the failing allocation must force instead of reporting ENOSPC.
    fs.release(a).expect("release a");
    fs.unlink(ROOT_INO, b"a").expect("unlink a");
    let commits = fs.diagnostics().journal_stats().commits;
    let b = fs.create(ROOT_INO, b"b", 0o644, O).expect("create b").ino;
    fs.fallocate(b, FallocMode::default(), 0, got)
        .expect("the freed space is allocatable once its free commits");
    assert!(
        fs.diagnostics().journal_stats().commits > commits,
        "the allocation must have committed the free first"
    );
    fs.release(b).expect("release b");
    fs.unmount().expect("unmount");
}

/// A removed file still open holds its blocks; one let go a moment after an allocation
/// found the disk full (as a FUSE frontend lets a removed file go when the kernel's
/// FORGET comes, after the removal returned) gives them to that allocation instead of
/// ENOSPC; one held for good leaves ENOSPC, after a bounded wait.
#[test]
fn an_allocation_waits_a_moment_for_a_removed_file_still_open() {
    let test = "an_allocation_waits_a_moment_for_a_removed_file_still_open";
    let Some((_d, img)) = image(test, 64 << 20, &[]) else {
        return;
    };
    let fs = Fs::mount(Arc::new(MemDevice::from_vec(img)), opts()).expect("mount");
    let a = fs.create(ROOT_INO, b"a", 0o644, O).expect("create a").ino;
    let chunk = 4 << 20;
    let mut got = 0u64;
    loop {
        match fs.fallocate(a, FallocMode::default(), got, chunk) {
            Ok(()) => got += chunk,
            Err(Error::NoSpace) => break,
            Err(e) => panic!("fallocate: {e}"),
        }
    }
    fs.sync().expect("sync");
    // Removed, still open (the create's reference): an orphan holding its blocks.
    fs.unlink(ROOT_INO, b"a").expect("unlink a");
    let b = fs.create(ROOT_INO, b"b", 0o644, O).expect("create b").ino;
    let start = std::time::Instant::now();
    let held = fs.fallocate(b, FallocMode::default(), 0, chunk);
    assert!(matches!(held, Err(Error::NoSpace)), "{held:?}");
    assert!(start.elapsed() < std::time::Duration::from_secs(2));
    // Let go 20 ms into the allocation's wait.
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(std::time::Duration::from_millis(20));
            fs.release(a).expect("release a");
        });
        fs.fallocate(b, FallocMode::default(), 0, got)
            .expect("the removed file's space, once let go");
    });
    fs.release(b).expect("release b");
    fs.unmount().expect("unmount");
}

/// An inode freed by a transaction not yet committed keeps its number from new files
/// (a crash would leave it in use on disk, its old entry perhaps replayed), unless the
/// same transaction made it; once the free commits, the number is free for anyone. Under
/// `ialloc=locked`, which always takes the group's first free inode, so the numbers say
/// which inodes were free to take.
#[test]
fn freed_inodes_wait_for_their_commit_unless_their_transaction_made_them() {
    let test = "freed_inodes_wait_for_their_commit_unless_their_transaction_made_them";
    let Some((_d, img)) = image(test, 64 << 20, &[]) else {
        return;
    };
    let o = MountOptions {
        ialloc: lanefs::IallocPolicy::Locked,
        ..opts()
    };
    let fs = Fs::mount(Arc::new(MemDevice::from_vec(img)), o).expect("mount");
    let make = |name: &[u8]| {
        let ino = fs.create(ROOT_INO, name, 0o644, O).expect("create").ino;
        fs.release(ino).expect("release");
        ino
    };
    let a = make(b"a");
    fs.sync().expect("sync");
    fs.unlink(ROOT_INO, b"a").expect("unlink a");
    let b = make(b"b");
    assert_ne!(b, a, "a number whose free is not committed was taken");
    let c = make(b"c");
    fs.unlink(ROOT_INO, b"c").expect("unlink c");
    let d = make(b"d");
    assert_eq!(
        d, c,
        "a number made and freed by the running transaction is free at once"
    );
    fs.sync().expect("sync");
    let e = make(b"e");
    assert_eq!(e, a, "a number is free once its free committed");
    fs.unmount().expect("unmount");
}

#[test]
fn revoked_metadata_is_not_replayed_over_reused_blocks() {
    let test = "revoked_metadata_is_not_replayed_over_reused_blocks";
    let Some((dir, img)) = image(test, 64 << 20, &[]) else {
        return;
    };
    let dev = Arc::new(MemDevice::from_vec(img));
    let fs = Fs::mount(dev.clone(), opts()).expect("mount");
    // Metadata blocks in the log: directories with many entries, and a file whose extent
    // tree has index blocks (many discontiguous extents).
    let mut dirs = Vec::new();
    for k in 0..8 {
        let name = format!("dir{k}");
        let d = fs
            .mkdir(ROOT_INO, name.as_bytes(), 0o755, O)
            .expect("mkdir")
            .ino;
        for i in 0..300 {
            let f = fs
                .create(
                    d,
                    format!("entry-with-a-long-name-{i:04}").as_bytes(),
                    0o644,
                    O,
                )
                .expect("create")
                .ino;
            fs.release(f).expect("release");
        }
        dirs.push((name, d));
    }
    let frag = fs.create(ROOT_INO, b"frag", 0o644, O).expect("create").ino;
    for i in 0..2000u64 {
        fs.write(frag, i * 8192, &[1u8; 4096]).expect("write");
    }
    fs.fsync(ROOT_INO, false).expect("fsync");
    // Free all of it (directory blocks and extent-tree blocks are revoked), commit.
    for (name, d) in &dirs {
        for i in 0..300 {
            fs.unlink(*d, format!("entry-with-a-long-name-{i:04}").as_bytes())
                .expect("unlink");
        }
        fs.rmdir(ROOT_INO, name.as_bytes()).expect("rmdir");
    }
    fs.release(frag).expect("release");
    fs.unlink(ROOT_INO, b"frag").expect("unlink frag");
    fs.fsync(ROOT_INO, false).expect("fsync");
    // Fill every free block with data, so the freed metadata blocks are reused, and make
    // it durable without a checkpoint.
    let fill = fs.create(ROOT_INO, b"fill", 0o644, O).expect("create").ino;
    let pattern: Vec<u8> = (0..1 << 20).map(|i: u32| (i % 251) as u8).collect();
    let mut off = 0u64;
    loop {
        match fs.write(fill, off, &pattern) {
            Ok(_) => off += pattern.len() as u64,
            Err(Error::NoSpace) => break,
            Err(e) => panic!("write: {e}"),
        }
    }
    fs.fsync(fill, false).expect("fsync");
    let crash = dev.snapshot();
    drop(fs);
    replay_and_check(dir.path(), "revoke", crash, |fs| {
        let f = lookup(fs, ROOT_INO, "fill").expect("fill");
        let data = read_all(fs, f);
        assert_eq!(data.len() as u64, off, "fill size");
        for (k, c) in data.chunks(pattern.len()).enumerate() {
            assert!(
                c == &pattern[..c.len()],
                "fill MiB {k} differs after replay: an old metadata copy was replayed over it"
            );
        }
        for (name, _) in &dirs {
            assert!(lookup(fs, ROOT_INO, name).is_err(), "{name} came back");
        }
    });
}

/// A memory device whose writes fail once a budget is spent.
struct FailingDev {
    inner: MemDevice,
    left: AtomicU64,
}

impl BlockDevice for FailingDev {
    fn read_at(&self, off: u64, buf: &mut [u8]) -> Result<()> {
        self.inner.read_at(off, buf)
    }
    fn write_at(&self, off: u64, buf: &[u8]) -> Result<()> {
        if self
            .left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_err()
        {
            return Err(Error::io_other(
                format!("writing at byte {off}"),
                "injected error",
            ));
        }
        self.inner.write_at(off, buf)
    }
    fn flush(&self) -> Result<()> {
        if self.left.load(Ordering::SeqCst) == 0 {
            return Err(Error::io_other("flushing the device", "injected error"));
        }
        Ok(())
    }
    fn size(&self) -> u64 {
        self.inner.size()
    }
}

#[test]
fn a_failing_device_aborts_the_journal_and_keeps_what_was_committed() {
    let test = "a_failing_device_aborts_the_journal_and_keeps_what_was_committed";
    let Some((dir, img)) = image(test, 64 << 20, &[]) else {
        return;
    };
    for budget in [0u64, 1, 2, 3, 5, 8, 13, 21, 40] {
        let dev = Arc::new(FailingDev {
            inner: MemDevice::from_vec(img.clone()),
            left: AtomicU64::new(u64::MAX),
        });
        let fs = Fs::mount(dev.clone(), opts()).expect("mount");
        let keep = fs.create(ROOT_INO, b"keep", 0o644, O).expect("create").ino;
        fs.write(keep, 0, b"committed before the failure")
            .expect("write");
        fs.fsync(keep, false).expect("fsync");
        dev.left.store(budget, Ordering::SeqCst);
        // Work until the device fails; every error must be a clear one.
        let mut failed = None;
        for i in 0..200 {
            let r = fs
                .create(ROOT_INO, format!("new{i}").as_bytes(), 0o644, O)
                .and_then(|a| {
                    fs.write(a.ino, 0, &[9u8; 10000])?;
                    fs.fsync(a.ino, false)?;
                    fs.release(a.ino)
                });
            if let Err(e) = r {
                failed = Some(e);
                break;
            }
        }
        let e = failed.unwrap_or_else(|| panic!("budget {budget}: the device never failed"));
        assert!(
            matches!(e, Error::Io { .. } | Error::ReadOnly),
            "budget {budget}: unexpected error {e:?}"
        );
        assert!(fs.is_read_only(), "budget {budget}: mount not read-only");
        assert!(
            fs.create(ROOT_INO, b"after", 0o644, O).is_err(),
            "budget {budget}: a change after the failure was accepted"
        );
        let bytes = dev.inner.snapshot();
        drop(fs);
        replay_and_check(dir.path(), &format!("fail{budget}"), bytes, |fs| {
            let k = lookup(fs, ROOT_INO, "keep").expect("keep");
            assert_eq!(read_all(fs, k), b"committed before the failure");
        });
    }
}

#[test]
fn a_logged_block_that_starts_with_the_magic_is_escaped() {
    let test = "a_logged_block_that_starts_with_the_magic_is_escaped";
    let Some((dir, img)) = image(test, 64 << 20, &[]) else {
        return;
    };
    let dev = Arc::new(MemDevice::from_vec(img));
    let fs = Fs::mount(dev.clone(), opts()).expect("mount");
    // A slow symlink's target block is journaled metadata; this one starts with the jbd2
    // magic (big-endian), so its log copy must be escaped and unescaped on replay.
    let mut target = vec![0xC0, 0x3B, 0x39, 0x98];
    target.extend(std::iter::repeat_n(b'x', 200));
    let l = fs
        .symlink(ROOT_INO, b"magic", &target, O)
        .expect("symlink")
        .ino;
    fs.fsync(ROOT_INO, false).expect("fsync");
    let crash = dev.snapshot();
    drop(fs);
    // e2fsck replays the same log.
    let p = dir.path().join("escaped-e2fsck");
    std::fs::write(&p, &crash).expect("write");
    let out = std::process::Command::new("e2fsck")
        .arg("-fy")
        .arg(&p)
        .output()
        .expect("e2fsck");
    assert!(
        out.status.code().is_some_and(|c| c <= 1),
        "e2fsck -fy: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    common::assert_fsck_clean(&p);
    let replayed = std::fs::read(&p).expect("read");
    let fs = Fs::mount(
        Arc::new(MemDevice::from_vec(replayed)),
        MountOptions {
            read_only: true,
            ..opts()
        },
    )
    .expect("mount e2fsck's replay");
    assert_eq!(fs.readlink(l).expect("readlink"), target, "e2fsck's replay");
    drop(fs);
    replay_and_check(dir.path(), "escaped", crash, |fs| {
        assert_eq!(fs.readlink(l).expect("readlink"), target, "lanefs's replay");
    });
}

#[test]
fn the_commit_timer_commits_without_fsync() {
    let test = "the_commit_timer_commits_without_fsync";
    let Some((dir, img)) = image(test, 64 << 20, &[]) else {
        return;
    };
    let dev = Arc::new(MemDevice::from_vec(img));
    let timed = MountOptions {
        commit_interval: Duration::from_millis(100),
        ..MountOptions::default()
    };
    let fs = Fs::mount(dev.clone(), timed).expect("mount");
    let f = fs.create(ROOT_INO, b"timed", 0o644, O).expect("create").ino;
    fs.write(f, 0, b"committed by the timer").expect("write");
    fs.release(f).expect("release");
    let before = fs.diagnostics().journal_stats().commits;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while fs.diagnostics().journal_stats().commits == before {
        assert!(
            std::time::Instant::now() < deadline,
            "no timer commit in 10 s with commit_interval 100 ms"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let crash = dev.snapshot();
    drop(fs);
    replay_and_check(dir.path(), "timer", crash, |fs| {
        let f = lookup(fs, ROOT_INO, "timed").expect("the timer's commit holds the file");
        assert_eq!(read_all(fs, f), b"committed by the timer");
    });
}

#[test]
fn a_truncate_left_on_the_orphan_list_is_finished_at_mount() {
    let test = "a_truncate_left_on_the_orphan_list_is_finished_at_mount";
    if !common::require_tools(test, &["mkfs.ext4", "e2fsck", "debugfs"]) {
        return;
    }
    let Some((dir, img)) = image(test, 64 << 20, &[]) else {
        return;
    };
    // A 1 MiB file, then the state a kernel crash mid-truncate leaves: the new size is
    // on disk, the blocks past it are still mapped, and the inode heads the orphan list.
    let dev = Arc::new(MemDevice::from_vec(img));
    let fs = Fs::mount(dev.clone(), opts()).expect("mount");
    let f = fs.create(ROOT_INO, b"big", 0o644, O).expect("create").ino;
    fs.write(f, 0, &vec![7u8; 1 << 20]).expect("write");
    fs.release(f).expect("release");
    fs.unmount().expect("unmount");
    let p = dir.path().join("orphan-truncate");
    std::fs::write(&p, dev.snapshot()).expect("write image");
    let cmds = format!("sif <{f}> size 4096\nssv last_orphan {f}\n");
    let out = std::process::Command::new("debugfs")
        .args(["-w", "-f", "-"])
        .arg(&p)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().expect("stdin").write_all(cmds.as_bytes())?;
            c.wait_with_output()
        })
        .expect("debugfs");
    assert!(out.status.success(), "debugfs failed");
    let fs = Fs::mount(
        Arc::new(MemDevice::from_vec(std::fs::read(&p).expect("read"))),
        opts(),
    )
    .expect("mount processes the orphan");
    let a = fs.getattr(f).expect("the file is still there");
    assert_eq!(a.size, 4096, "size");
    assert_eq!(a.blocks, 8, "blocks past the size were freed");
    assert_eq!(read_all(&fs, f), vec![7u8; 4096]);
    drop(fs);
    replay_and_check(
        dir.path(),
        "orphan-done",
        std::fs::read(&p).expect("read"),
        |fs| {
            assert_eq!(fs.getattr(f).expect("getattr").blocks, 8);
        },
    );
}

/// Device block of the journal's first block (its superblock), from debugfs.
fn journal_sb_block(img: &Path) -> u64 {
    let out = std::process::Command::new("debugfs")
        .args(["-R", "bmap <8> 0"])
        .arg(img)
        .output()
        .expect("debugfs");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("bmap output")
}

#[test]
fn a_crashed_image_replays_in_memory_on_a_read_only_mount_and_a_bad_journal_is_named() {
    let test = "a_crashed_image_replays_in_memory_on_a_read_only_mount_and_a_bad_journal_is_named";
    if !common::require_tools(test, &["mkfs.ext4", "e2fsck", "debugfs"]) {
        return;
    }
    let Some((dir, img)) = image(test, 64 << 20, &[]) else {
        return;
    };
    let dev = Arc::new(MemDevice::from_vec(img));
    let fs = Fs::mount(dev.clone(), opts()).expect("mount");
    let f = fs
        .create(ROOT_INO, b"logged", 0o644, O)
        .expect("create")
        .ino;
    fs.write(f, 0, b"only in the log").expect("write");
    fs.fsync(f, false).expect("fsync");
    let crash = dev.snapshot();
    drop(fs);
    // Read-only: the log is replayed into memory, the device is not written.
    let ro = Arc::new(MemDevice::from_vec(crash.clone()));
    let fs = Fs::mount(
        ro.clone(),
        MountOptions {
            read_only: true,
            ..opts()
        },
    )
    .expect("read-only mount of a crashed image");
    let g = lookup(&fs, ROOT_INO, "logged").expect("the logged file is visible");
    assert_eq!(read_all(&fs, g), b"only in the log");
    fs.unmount().expect("unmount");
    assert!(
        ro.snapshot() == crash,
        "a read-only mount wrote to the device"
    );
    // A journal superblock that fails its checksum is refused by name.
    let p = dir.path().join("bad-jsb");
    std::fs::write(&p, &crash).expect("write");
    let jsb = journal_sb_block(&p) as usize * 4096;
    let mut bad = crash.clone();
    bad[jsb + 0x40] ^= 0xFF; // s_nr_users, covered by the checksum
    let e = Fs::mount(Arc::new(MemDevice::from_vec(bad)), opts())
        .err()
        .expect("a corrupt journal superblock must be refused");
    assert!(
        e.to_string().contains("journal superblock"),
        "error does not name the journal superblock: {e}"
    );
    // So is one whose log start lies outside the log.
    let mut bad = crash;
    bad[jsb + 0x1C..jsb + 0x20].copy_from_slice(&u32::MAX.to_be_bytes());
    let e = Fs::mount(Arc::new(MemDevice::from_vec(bad)), opts())
        .err()
        .expect("a log start outside the log must be refused");
    assert!(
        e.to_string().contains("journal superblock"),
        "error does not name the journal superblock: {e}"
    );
}

/// An image with 4 KiB blocks and a 1,024-block log: a transaction is due past 341
/// buffers and handles wait past 512; each 16 creates dirty one more inode-table block.
fn small_log_image(test: &str) -> Option<(tempfile::TempDir, Vec<u8>)> {
    image(
        test,
        128 << 20,
        &["-b", "4096", "-J", "size=4", "-N", "32768"],
    )
}

/// A commit thread that, in a test's time, commits only when asked (a due transaction).
fn asked_commits_only() -> MountOptions {
    MountOptions {
        commit_interval: Duration::from_secs(3600),
        ..MountOptions::default()
    }
}

/// Create (and close) files `f{i}` in `d` for each `i` of `range`.
fn create_files(fs: &Fs, d: Ino, range: std::ops::Range<u32>) {
    for i in range {
        let f = fs
            .create(d, format!("f{i}").as_bytes(), 0o644, O)
            .expect("create")
            .ino;
        fs.release(f).expect("release");
    }
}

/// A memory device whose writes stop at a gate while it is shut (the commit thread stuck in
/// its log writes, as behind a slow disk), until the test opens it.
struct HeldDev {
    inner: MemDevice,
    state: std::sync::Mutex<Held>,
    cv: std::sync::Condvar,
}

#[derive(Default)]
struct Held {
    shut: bool,
    /// A write is waiting at the gate.
    waiting: bool,
}

impl HeldDev {
    fn pass(&self) {
        let mut s = self.state.lock().unwrap();
        while s.shut {
            s.waiting = true;
            self.cv.notify_all();
            s = self.cv.wait(s).unwrap();
        }
        s.waiting = false;
    }
    fn set_shut(&self, shut: bool) {
        self.state.lock().unwrap().shut = shut;
        self.cv.notify_all();
    }
    /// Wait until a write waits at the shut gate; false after `limit`.
    fn wait_for_writer(&self, limit: Duration) -> bool {
        let s = self.state.lock().unwrap();
        let (s, _) = self
            .cv
            .wait_timeout_while(s, limit, |s| !s.waiting)
            .unwrap();
        s.waiting
    }
}

impl BlockDevice for HeldDev {
    fn read_at(&self, off: u64, buf: &mut [u8]) -> Result<()> {
        self.inner.read_at(off, buf)
    }
    fn write_at(&self, off: u64, buf: &[u8]) -> Result<()> {
        self.pass();
        self.inner.write_at(off, buf)
    }
    fn flush(&self) -> Result<()> {
        self.pass();
        self.inner.flush()
    }
    fn size(&self) -> u64 {
        self.inner.size()
    }
}

#[test]
fn a_due_transaction_takes_handles_while_the_commit_before_writes() {
    let test = "a_due_transaction_takes_handles_while_the_commit_before_writes";
    let Some((dir, img)) = small_log_image(test) else {
        return;
    };
    let dev = Arc::new(HeldDev {
        inner: MemDevice::from_vec(img),
        state: Default::default(),
        cv: Default::default(),
    });
    let fs = Arc::new(Fs::mount(dev.clone(), asked_commits_only()).expect("mount"));
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, O).expect("mkdir").ino;
    let before = fs.diagnostics().journal_stats().commits;
    // Shut the device, then fill the first transaction past due: the commit thread takes
    // it and stops at its first write.
    dev.set_shut(true);
    create_files(&fs, d, 0..6000);
    assert!(
        dev.wait_for_writer(Duration::from_secs(30)),
        "the commit thread never wrote the first due transaction"
    );
    // The next transaction: 5,500 creates dirty at least 344 inode-table blocks (past due)
    // and, with their directory blocks, well under 512. None of them may wait for the
    // stuck commit. A watchdog opens the device after 20 s so that a failure ends.
    let opened_by_watchdog = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watchdog = {
        let (dev, opened, done) = (dev.clone(), opened_by_watchdog.clone(), done.clone());
        std::thread::spawn(move || {
            let t = std::time::Instant::now();
            while !done.load(Ordering::SeqCst) {
                if t.elapsed() > Duration::from_secs(20) {
                    opened.store(true, Ordering::SeqCst);
                    dev.set_shut(false);
                    return;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        })
    };
    create_files(&fs, d, 6000..11_500);
    done.store(true, Ordering::SeqCst);
    watchdog.join().expect("watchdog");
    assert!(
        !opened_by_watchdog.load(Ordering::SeqCst),
        "creates in a due transaction waited for the commit before it"
    );
    assert_eq!(
        fs.diagnostics().journal_stats().commits,
        before,
        "a commit finished while the device was shut"
    );
    // 4,000 more dirty 250 more table blocks: past half the log, the creates wait.
    let more = {
        let fs = fs.clone();
        std::thread::spawn(move || create_files(&fs, d, 11_500..15_500))
    };
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        !more.is_finished(),
        "a transaction grew past half the log while the commit before it was stuck"
    );
    dev.set_shut(false);
    more.join().expect("creates past the limit");
    fs.sync().expect("sync");
    assert!(
        fs.diagnostics().journal_stats().commits >= before + 2,
        "both transactions commit"
    );
    for i in (0..15_500u32).step_by(7) {
        lookup(&fs, d, &format!("f{i}")).unwrap_or_else(|e| panic!("f{i} lost: {e}"));
    }
    let fs = Arc::into_inner(fs).expect("one owner");
    fs.unmount().expect("unmount");
    let p = dir.path().join("held");
    std::fs::write(&p, dev.inner.snapshot()).expect("write image");
    common::assert_fsck_clean(&p);
}

#[test]
fn each_due_transaction_is_committed_once_and_whole() {
    let test = "each_due_transaction_is_committed_once_and_whole";
    let Some((_dir, img)) = small_log_image(test) else {
        return;
    };
    let fs = Fs::mount(Arc::new(MemDevice::from_vec(img)), asked_commits_only()).expect("mount");
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, O).expect("mkdir").ino;
    let before = fs.diagnostics().journal_stats();
    // About 1,250 inode-table blocks and the directory's leaves.
    create_files(&fs, d, 0..20_000);
    // Only due transactions committed so far (no timer, no sync): each at least its
    // 341 buffers, logged with its descriptor blocks.
    let after = fs.diagnostics().journal_stats();
    let commits = after.commits - before.commits;
    let logged = after.log_blocks - before.log_blocks;
    assert!(commits >= 3, "{commits} commits of 20,000 creates");
    assert!(
        logged / commits > 341,
        "{commits} commits logged {logged} blocks: a transaction committed before it was due"
    );
    fs.unmount().expect("unmount");
}

#[test]
fn unnamed_tmpfiles_open_at_a_crash_are_freed_at_mount_and_a_linked_one_stays() {
    let test = "unnamed_tmpfiles_open_at_a_crash_are_freed_at_mount_and_a_linked_one_stays";
    let Some((dir, img)) = image(test, 64 << 20, &[]) else {
        return;
    };
    let dev = Arc::new(MemDevice::from_vec(img));
    let fs = Fs::mount(dev.clone(), opts()).expect("mount");
    fs.sync().expect("sync");
    let before = fs.statfs().expect("statfs");
    // Two unnamed files with data (the orphan list's chain has two links), one named.
    let a = fs.tmpfile(ROOT_INO, 0o600, O, true).expect("tmpfile").ino;
    let b = fs.tmpfile(ROOT_INO, 0o600, O, false).expect("tmpfile").ino;
    let k = fs.tmpfile(ROOT_INO, 0o644, O, true).expect("tmpfile").ino;
    for i in [a, b, k] {
        fs.write(i, 0, &vec![3u8; 256 << 10]).expect("write");
    }
    assert_eq!(fs.link(b, ROOT_INO, b"never"), Err(Error::NotFound));
    fs.link(k, ROOT_INO, b"kept").expect("link");
    assert_eq!(fs.link(k, ROOT_INO, b"kept2").expect("link").nlink, 2);
    fs.sync().expect("sync");
    let crash = dev.snapshot();
    replay_and_check(dir.path(), "tmpfile-crash", crash, |fs| {
        assert_eq!(fs.lookup(ROOT_INO, b"kept").expect("kept").ino, k);
        assert_eq!(read_all(fs, k), vec![3u8; 256 << 10]);
        for i in [a, b] {
            assert!(fs.getattr(i).is_err(), "inode {i} was freed at mount");
        }
        let after = fs.statfs().expect("statfs");
        assert_eq!(after.free_inodes, before.free_inodes - 1);
    });
    // Without a crash, the last release frees them and the unmount leaves nothing.
    for i in [a, b, k] {
        fs.release(i).expect("release");
    }
    fs.unlink(ROOT_INO, b"kept").expect("unlink");
    fs.unlink(ROOT_INO, b"kept2").expect("unlink");
    fs.sync().expect("sync");
    let end = fs.statfs().expect("statfs");
    assert_eq!(
        (end.free_inodes, end.free_blocks),
        (before.free_inodes, before.free_blocks)
    );
    fs.unmount().expect("unmount");
    let p = dir.path().join("tmpfile-clean");
    std::fs::write(&p, dev.snapshot()).expect("write image");
    common::assert_fsck_clean(&p);
}
