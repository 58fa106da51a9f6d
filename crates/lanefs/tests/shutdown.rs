//! Goal: `Fs::shutdown` as ext4's FS_IOC_SHUTDOWN.
//! - NOLOGFLUSH stops at once: the image is what a power cut would leave (nothing pending
//!   since the last flush), a remount replays it, the fsync'd file is there and the file
//!   written since is not;
//! - LOGFLUSH commits the running transaction (a new file and the data it maps) but
//!   writes no other dirty data back (an overwrite in place is lost);
//! - DEFAULT writes everything back: every change made before survives;
//! - after any mode, nothing more reaches the device: not the operations (which fail with
//!   `Error::ShutDown`, EIO, but those ext4 still answers: getattr, lookup, readdir,
//!   readlink, listxattr, statfs), not the commit timer or the flusher, not unmount; a
//!   second shutdown is a no-op, a bad flag value EINVAL;
//! - on an MMP image the updater stops writing too, and the next mount waits and replays;
//! - under random workloads, what was fsync'd survives every mode.
//!
//! Method: images from `mkfs.ext4` on a `CrashDevice` (which counts writes and flushes
//! and knows what a power cut would leave); after the shutdown and unmount, the device's
//! bytes are mounted again (replay), checked, unmounted and judged by `e2fsck -fn`.

mod common;

use lanefs::{
    BlockDevice, CrashDevice, Error, FileDevice, Fs, Ino, MemDevice, MountOptions, Owner,
    ShutdownMode, ROOT_INO,
};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

const O: Owner = Owner {
    uid: 0,
    gid: 0,
    umask: 0,
};

/// No commit timer: only what a test asks for is committed.
fn opts() -> MountOptions {
    MountOptions {
        commit_interval: Duration::ZERO,
        ..MountOptions::default()
    }
}

/// A fresh image's bytes, or None (skipped) without mkfs.ext4 and e2fsck.
fn image(test: &str, size: u64) -> Option<(tempfile::TempDir, Vec<u8>)> {
    if !common::require_tools(test, &["mkfs.ext4", "e2fsck"]) {
        return None;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let p = common::mkfs_image_args(dir.path(), "img", size, &[]);
    let bytes = std::fs::read(&p).expect("read image");
    Some((dir, bytes))
}

/// Mount `bytes` (replaying the journal), run `check`, unmount, require e2fsck -fn clean.
fn replay_and_check(dir: &Path, bytes: Vec<u8>, check: impl FnOnce(&Fs)) {
    let dev = Arc::new(MemDevice::from_vec(bytes));
    let fs = Fs::mount(dev.clone(), opts()).expect("mount (replay) after the shutdown");
    check(&fs);
    fs.unmount().expect("unmount after replay");
    let p = dir.join("replayed.img");
    std::fs::write(&p, dev.snapshot()).expect("write image");
    common::assert_fsck_clean(&p);
}

fn make(fs: &Fs, dir: Ino, name: &str, data: &[u8]) -> Ino {
    let f = fs.create(dir, name.as_bytes(), 0o644, O).unwrap();
    fs.write(f.ino, 0, data).unwrap();
    f.ino
}

fn content(fs: &Fs, dir: Ino, name: &str) -> Option<Vec<u8>> {
    let a = match fs.lookup(dir, name.as_bytes()) {
        Err(Error::NotFound) => return None,
        r => r.unwrap(),
    };
    let mut buf = vec![0u8; a.size as usize];
    assert_eq!(fs.read(a.ino, 0, &mut buf).unwrap(), buf.len());
    Some(buf)
}

/// The same workload before each mode: `kept` written and fsync'd (committed, its block
/// mapped), then overwritten in place without fsync; `fresh` created and written after
/// the last commit; `open` left open. Returns the inodes of `kept`, `fresh` and `open`.
fn workload(fs: &Fs) -> (Ino, Ino, Ino) {
    let kept = make(fs, ROOT_INO, "kept", &[1u8; 10_000]);
    fs.fsync(kept, false).unwrap();
    fs.write(kept, 0, &[2u8; 10_000]).unwrap();
    let fresh = make(fs, ROOT_INO, "fresh", b"never fsync'd");
    let open = make(fs, ROOT_INO, "open", b"held open");
    (kept, fresh, open)
}

/// What every mode leaves: operations fail with ShutDown except those ext4 answers,
/// nothing reaches the device, a second shutdown is a no-op, unmount writes nothing.
fn after_shutdown(fs: Arc<Fs>, dev: &CrashDevice, kept: Ino, open: Ino) {
    let (writes, flushes) = (dev.writes(), dev.flushes());
    assert!(fs.is_shut_down() && fs.is_read_only());
    assert!(fs.read_only_reason().unwrap().contains("shut down"));
    let mut buf = [0u8; 4];
    assert_eq!(fs.create(ROOT_INO, b"x", 0o644, O), Err(Error::ShutDown));
    assert_eq!(fs.mkdir(ROOT_INO, b"x", 0o755, O), Err(Error::ShutDown));
    assert_eq!(fs.write(kept, 0, b"late"), Err(Error::ShutDown));
    assert_eq!(fs.read(kept, 0, &mut buf), Err(Error::ShutDown));
    assert_eq!(fs.open(kept), Err(Error::ShutDown));
    assert_eq!(fs.fsync(kept, false), Err(Error::ShutDown));
    assert_eq!(fs.sync(), Err(Error::ShutDown));
    assert_eq!(fs.unlink(ROOT_INO, b"kept"), Err(Error::ShutDown));
    assert_eq!(
        fs.rename(ROOT_INO, b"kept", ROOT_INO, b"k2"),
        Err(Error::ShutDown)
    );
    assert_eq!(fs.getxattr(kept, b"user.a"), Err(Error::ShutDown));
    assert_eq!(fs.touch_atime(ROOT_INO), Err(Error::ShutDown));
    assert_eq!(Error::ShutDown.errno(), libc::EIO);
    // What ext4 still answers after a shutdown (ext4_getattr, ext4_lookup, ext4_readdir,
    // ext4_listxattr and ext4_statfs check no shutdown).
    assert_eq!(fs.getattr(kept).unwrap().size, 10_000);
    assert_eq!(fs.lookup(ROOT_INO, b"kept").unwrap().ino, kept);
    assert!(fs.readdir(ROOT_INO, 0, 100).unwrap().len() >= 5);
    assert!(fs.listxattr(kept).unwrap().is_empty());
    assert!(fs.statfs().unwrap().blocks > 0);
    // A release drops the reference and frees nothing.
    fs.release(open).unwrap();
    // Again: a no-op; a bad flag value is refused first, as ext4 does.
    fs.shutdown(ShutdownMode::Default).unwrap();
    assert!(matches!(
        ShutdownMode::from_flags(3),
        Err(Error::Invalid(_))
    ));
    fs.unmount().expect("unmount after a shutdown");
    assert_eq!(
        (dev.writes(), dev.flushes()),
        (writes, flushes),
        "something reached the device after the shutdown"
    );
}

#[test]
fn shutdown_nologflush_leaves_a_crash_state() {
    let test = "shutdown_nologflush_leaves_a_crash_state";
    let Some((dir, bytes)) = image(test, 64 << 20) else {
        return;
    };
    let dev = Arc::new(CrashDevice::from_vec(bytes));
    let fs = Fs::mount(dev.clone(), opts()).unwrap();
    let (kept, _, open) = workload(&fs);
    let before = (dev.writes(), dev.flushes());
    fs.shutdown(ShutdownMode::NoLogFlush).unwrap();
    assert_eq!((dev.writes(), dev.flushes()), before, "NOLOGFLUSH wrote");
    after_shutdown(fs, &dev, kept, open);
    // Nothing pending since the last flush: the image is exactly a power-cut state.
    assert_eq!(dev.pending_len(), 0);
    assert!(dev.snapshot() == dev.durable());
    replay_and_check(dir.path(), dev.snapshot(), |fs| {
        assert_eq!(content(fs, ROOT_INO, "kept"), Some(vec![1u8; 10_000]));
        assert_eq!(content(fs, ROOT_INO, "fresh"), None);
        assert_eq!(content(fs, ROOT_INO, "open"), None);
    });
}

#[test]
fn shutdown_logflush_commits_but_writes_no_data_back() {
    let test = "shutdown_logflush_commits_but_writes_no_data_back";
    let Some((dir, bytes)) = image(test, 64 << 20) else {
        return;
    };
    let dev = Arc::new(CrashDevice::from_vec(bytes));
    let fs = Fs::mount(dev.clone(), opts()).unwrap();
    let (kept, _, open) = workload(&fs);
    let commits = fs.diagnostics().journal_stats().commits;
    fs.shutdown(ShutdownMode::LogFlush).unwrap();
    assert_eq!(
        fs.diagnostics().journal_stats().commits,
        commits + 1,
        "one commit"
    );
    after_shutdown(fs, &dev, kept, open);
    replay_and_check(dir.path(), dev.snapshot(), |fs| {
        // The overwrite in place was dirty data of a block mapped before: not written.
        assert_eq!(content(fs, ROOT_INO, "kept"), Some(vec![1u8; 10_000]));
        // The new files and the blocks they map were in the committed transaction.
        new_files_there(fs);
    });
}

/// The workload's files made since the last commit, never fsync'd, are there.
fn new_files_there(fs: &Fs) {
    assert_eq!(
        content(fs, ROOT_INO, "fresh").as_deref(),
        Some(&b"never fsync'd"[..])
    );
    assert_eq!(
        content(fs, ROOT_INO, "open").as_deref(),
        Some(&b"held open"[..])
    );
}

#[test]
fn shutdown_default_writes_everything_back() {
    let test = "shutdown_default_writes_everything_back";
    let Some((dir, bytes)) = image(test, 64 << 20) else {
        return;
    };
    let dev = Arc::new(CrashDevice::from_vec(bytes));
    let fs = Fs::mount(dev.clone(), opts()).unwrap();
    let (kept, _, open) = workload(&fs);
    fs.shutdown(ShutdownMode::Default).unwrap();
    after_shutdown(fs, &dev, kept, open);
    assert_eq!(dev.pending_len(), 0, "DEFAULT ends with a flush");
    replay_and_check(dir.path(), dev.snapshot(), |fs| {
        assert_eq!(content(fs, ROOT_INO, "kept"), Some(vec![2u8; 10_000]));
        new_files_there(fs);
    });
}

/// The commit timer and the flusher, busy when the shutdown comes, write nothing after
/// it; a shutdown of a read-only mount only stops it.
#[test]
fn shutdown_stops_the_background_threads() {
    let test = "shutdown_stops_the_background_threads";
    let Some((dir, bytes)) = image(test, 256 << 20) else {
        return;
    };
    let dev = Arc::new(CrashDevice::from_vec(bytes));
    let fs = Fs::mount(
        dev.clone(),
        MountOptions {
            commit_interval: Duration::from_millis(2),
            pagecache_limit: 8 << 20,
            ..MountOptions::default()
        },
    )
    .unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (fs, stop) = (fs.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let name = format!("f{}", n % 64);
                let r = fs
                    .create(ROOT_INO, name.as_bytes(), 0o644, O)
                    .or_else(|e| match e {
                        Error::Exists => fs.lookup(ROOT_INO, name.as_bytes()),
                        e => Err(e),
                    });
                let Ok(a) = r else { return n };
                if fs.write(a.ino, 0, &vec![n as u8; 1 << 20]).is_err() {
                    return n;
                }
                let _ = fs.release(a.ino);
                n += 1;
            }
            n
        })
    };
    // Let the timer and the flusher work, then stop the mount under the writer.
    let start = std::time::Instant::now();
    while dev.writes() < 200 {
        assert!(
            start.elapsed() < Duration::from_secs(60) && !writer.is_finished(),
            "the workload stopped before the device saw 200 writes"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    fs.shutdown(ShutdownMode::NoLogFlush).unwrap();
    let writes = dev.writes();
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, Ordering::Relaxed);
    let done = writer.join().unwrap();
    assert!(done > 0);
    assert_eq!(dev.writes(), writes, "a background thread wrote");
    fs.unmount().unwrap();
    assert_eq!(dev.writes(), writes, "unmount wrote");
    replay_and_check(dir.path(), dev.snapshot(), |fs| {
        fs.lookup(ROOT_INO, b"f0").unwrap();
    });

    // Read-only: nothing to flush; operations fail the same way.
    let dev = Arc::new(MemDevice::from_vec(dev.snapshot()));
    let ro = MountOptions {
        read_only: true,
        ..opts()
    };
    let fs = Fs::mount(dev, ro).unwrap();
    let f0 = fs.lookup(ROOT_INO, b"f0").unwrap().ino;
    fs.shutdown(ShutdownMode::Default).unwrap();
    let mut buf = [0u8; 1];
    assert_eq!(fs.read(f0, 0, &mut buf), Err(Error::ShutDown));
    assert_eq!(fs.fsync(f0, false), Err(Error::ShutDown));
    fs.unmount().unwrap();
}

/// A device that counts the writes and flushes it passes to an image file.
struct Counting {
    inner: FileDevice,
    writes: AtomicU64,
}

impl BlockDevice for Counting {
    fn read_at(&self, off: u64, buf: &mut [u8]) -> lanefs::Result<()> {
        self.inner.read_at(off, buf)
    }
    fn write_at(&self, off: u64, buf: &[u8]) -> lanefs::Result<()> {
        self.writes.fetch_add(1, Ordering::Relaxed);
        self.inner.write_at(off, buf)
    }
    fn flush(&self) -> lanefs::Result<()> {
        self.writes.fetch_add(1, Ordering::Relaxed);
        self.inner.flush()
    }
    fn size(&self) -> u64 {
        self.inner.size()
    }
}

/// On an MMP image the updater (ext4's kmmpd, every 5 s) writes nothing after a
/// shutdown, and unmount leaves the block as a crash would: the next mount waits for it
/// and replays.
#[test]
fn shutdown_stops_the_mmp_updater() {
    use lanefs::internals::disk::mmp::SEQ_CLEAN;
    let test = "shutdown_stops_the_mmp_updater";
    if !common::require_tools(test, &["mke2fs", "e2fsck"]) {
        return;
    }
    let td = tempfile::tempdir().unwrap();
    let img = common::mkfs_image_args(td.path(), "mmp.img", 64 << 20, &["-O", "mmp"]);
    let dev = Arc::new(Counting {
        inner: FileDevice::open(&img, false).unwrap(),
        writes: AtomicU64::new(0),
    });
    let fs = Fs::mount(dev.clone(), opts()).unwrap();
    let kept = make(&fs, ROOT_INO, "kept", b"fsync'd");
    fs.fsync(kept, false).unwrap();
    fs.shutdown(ShutdownMode::NoLogFlush).unwrap();
    let writes = dev.writes.load(Ordering::Relaxed);
    // Past one update interval of the MMP block.
    std::thread::sleep(Duration::from_secs(6));
    fs.unmount().unwrap();
    assert_eq!(
        dev.writes.load(Ordering::Relaxed),
        writes,
        "the MMP updater wrote"
    );
    drop(dev);
    let mmp = {
        use std::os::unix::fs::FileExt;
        let f = std::fs::File::open(&img).unwrap();
        let mut raw = vec![0u8; 1024];
        f.read_exact_at(&mut raw, 1024).unwrap();
        let sb = lanefs::internals::disk::superblock::Superblock::decode(&raw, 64 << 20).unwrap();
        let mut b = vec![0u8; 1024];
        f.read_exact_at(&mut b, sb.mmp_block() * u64::from(sb.block_size()))
            .unwrap();
        lanefs::internals::disk::mmp::Mmp::decode(&b).unwrap()
    };
    assert_ne!(
        mmp.seq, SEQ_CLEAN,
        "unmount after a shutdown marked MMP clean"
    );
    let fs = Fs::mount_path(&img, opts()).unwrap();
    assert_eq!(
        content(&fs, ROOT_INO, "kept").as_deref(),
        Some(&b"fsync'd"[..])
    );
    fs.unmount().unwrap();
    common::assert_fsck_clean(&img);
}

/// Property: under a random workload (files created, written, appended, overwritten,
/// some fsync'd, directories made), every file whose last change was fsync'd reads back
/// exactly after a shutdown in any mode and a replaying mount; after DEFAULT, every file
/// does; e2fsck is clean after the replay.
#[test]
fn shutdown_keeps_what_was_fsynced_in_every_mode() {
    let test = "shutdown_keeps_what_was_fsynced_in_every_mode";
    let Some((dir, bytes)) = image(test, 64 << 20) else {
        return;
    };
    let seeds: u64 = std::env::var("LANEFS_SHUTDOWN_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(4);
    for mode in [
        ShutdownMode::Default,
        ShutdownMode::LogFlush,
        ShutdownMode::NoLogFlush,
    ] {
        for seed in 1..=seeds {
            let mut rng = common::Rng(seed * 0x9E37_79B9 + u64::from(mode.flags()));
            let dev = Arc::new(CrashDevice::from_vec(bytes.clone()));
            let fs = Fs::mount(dev.clone(), opts()).unwrap();
            // name -> (directory, inode, bytes now, synced: the last change was fsync'd)
            let mut files: Vec<(Ino, String, Ino, Vec<u8>, bool)> = Vec::new();
            let mut dirs = vec![(ROOT_INO, String::new())];
            for op in 0..60 {
                match rng.below(10) {
                    0 => {
                        let (d, path) = dirs[rng.below(dirs.len() as u64) as usize].clone();
                        let name = format!("d{op}");
                        let a = fs.mkdir(d, name.as_bytes(), 0o755, O).unwrap();
                        dirs.push((a.ino, format!("{path}/{name}")));
                    }
                    1..=3 => {
                        let (d, path) = dirs[rng.below(dirs.len() as u64) as usize].clone();
                        let name = format!("f{op}");
                        let data = vec![op as u8; rng.below(20_000) as usize + 1];
                        let ino = make(&fs, d, &name, &data);
                        files.push((d, format!("{path}/{name}"), ino, data, false));
                    }
                    4..=6 if !files.is_empty() => {
                        let k = rng.below(files.len() as u64) as usize;
                        let f = &mut files[k];
                        let at = rng.below(f.3.len() as u64 + 4096);
                        let piece = vec![(op as u8) ^ 0x5A; rng.below(9000) as usize + 1];
                        fs.write(f.2, at, &piece).unwrap();
                        let end = at as usize + piece.len();
                        if f.3.len() < end {
                            f.3.resize(end, 0);
                        }
                        f.3[at as usize..end].copy_from_slice(&piece);
                        f.4 = false;
                    }
                    _ if !files.is_empty() => {
                        let k = rng.below(files.len() as u64) as usize;
                        fs.fsync(files[k].2, false).unwrap();
                        files[k].4 = true;
                    }
                    _ => {}
                }
            }
            fs.shutdown(mode).unwrap();
            fs.unmount().unwrap();
            replay_and_check(dir.path(), dev.snapshot(), |fs| {
                for (d, path, _, data, synced) in &files {
                    let name = path.rsplit('/').next().unwrap();
                    if *synced || mode == ShutdownMode::Default {
                        let got = content(fs, *d, name);
                        assert!(
                            got.as_deref() == Some(&data[..]),
                            "{mode:?} seed {seed}: {path} lost or changed"
                        );
                    }
                }
            });
        }
    }
}
