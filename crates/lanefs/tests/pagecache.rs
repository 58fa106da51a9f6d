//! Goal: the page cache of folios (seed 002) keeps every read equal to the file's bytes
//! whatever mixes of folio orders, evictions, splits and write-backs happen underneath.
//! Method: one file per folio order (0, 2, 4, 6) under a page-cache limit far smaller than
//! the files, so every pass evicts; threads write, truncate, punch holes and read
//! overlapping ranges (a third of the writes straight to the device, `Fs::write_direct`)
//! while a model of the bytes is kept beside the file. Changes and the
//! model's update are one step (a test-level lock taken exclusively), reads share it, so
//! readers race each other and the eviction sweeps their misses trigger. Then the file is
//! read back after a remount and `e2fsck -fn` judges the image.

mod common;

use common::{assert_fsck_clean, mkfs_image, watchdog, Rng};
use lanefs::{FallocMode, Fs, MountOptions, Owner, SetAttr, ROOT_INO};
use std::sync::{Arc, RwLock};
use std::time::Duration;

const FILE_MAX: u64 = 3 << 20;

fn mount(img: &std::path::Path, order: u8) -> Arc<Fs> {
    let opts = MountOptions {
        commit_interval: Duration::from_millis(5),
        pagecache_limit: 256 << 10,
        folio_max_order: order,
        ..MountOptions::default()
    };
    Fs::mount_path(img, opts).expect("mount")
}

fn check_all(fs: &Fs, ino: u64, model: &[u8]) {
    let mut got = vec![0u8; model.len() + 4096];
    let mut done = 0;
    loop {
        let n = fs.read(ino, done as u64, &mut got[done..]).expect("read");
        if n == 0 {
            break;
        }
        done += n;
    }
    assert_eq!(done, model.len(), "file length");
    if let Some(p) = (0..done).find(|&i| got[i] != model[i]) {
        panic!("byte {p} reads {:#x}, model {:#x}", got[p], model[p]);
    }
}

#[test]
fn folios_of_every_order_match_a_model_under_eviction() {
    let _w = watchdog("folios_of_every_order_match_a_model_under_eviction", 600);
    let td = tempfile::tempdir().expect("tempdir");
    let img = mkfs_image(td.path(), "pc.img", 64 << 20);
    for order in [0u8, 2, 4, 6] {
        let fs = mount(&img, order);
        let name = format!("f{order}");
        let ino = fs
            .create(ROOT_INO, name.as_bytes(), 0o644, Owner::default())
            .expect("create")
            .ino;
        let model = Arc::new(RwLock::new(Vec::<u8>::new()));
        std::thread::scope(|s| {
            for t in 0..3u64 {
                let (fs, model) = (&fs, &model);
                s.spawn(move || {
                    let mut r = Rng(0x9E37_79B9 ^ ((t + 1) * 7919 + u64::from(order)));
                    for step in 0..1500 {
                        let k = r.below(100);
                        if k < 45 {
                            // Read an arbitrary range and compare it with the model.
                            let m = model.read().unwrap();
                            let off = r.below(m.len() as u64 + 8192);
                            let len = 1 + r.below(200_000) as usize;
                            let mut buf = vec![0u8; len];
                            let n = fs.read(ino, off, &mut buf).expect("read");
                            let want = m.len().saturating_sub(off as usize).min(len);
                            assert_eq!(n, want, "read of {len} at {off} (order {order})");
                            let o = off as usize;
                            if let Some(p) = (0..n).find(|&i| buf[i] != m[o + i]) {
                                panic!(
                                    "order {order} step {step}: byte {} reads {:#x}, model {:#x}",
                                    o + p,
                                    buf[p],
                                    m[o + p]
                                );
                            }
                            continue;
                        }
                        let mut m = model.write().unwrap();
                        if k < 80 {
                            let mut off = r.below(FILE_MAX - 300_000);
                            let len = 1 + r.below(300_000) as usize;
                            let byte = (r.next() % 255) as u8 + 1;
                            let data = vec![byte; len];
                            if r.below(3) == 0 {
                                // Past the cache (where aligned): over cached, dirty and
                                // written-back blocks alike.
                                off -= off % 4096;
                                fs.write_direct(ino, off, &data).expect("write_direct");
                            } else {
                                fs.write(ino, off, &data).expect("write");
                            }
                            let end = off as usize + len;
                            if m.len() < end {
                                m.resize(end, 0);
                            }
                            m[off as usize..end].copy_from_slice(&data);
                        } else if k < 90 {
                            let size = r.below(FILE_MAX);
                            let set = SetAttr {
                                size: Some(size),
                                ..Default::default()
                            };
                            fs.setattr(ino, &set).expect("truncate");
                            m.resize(size as usize, 0);
                        } else if k < 97 {
                            let off = r.below(m.len() as u64 + 1);
                            let len = 1 + r.below(400_000);
                            let mode = FallocMode {
                                punch_hole: true,
                                keep_size: true,
                                ..Default::default()
                            };
                            fs.fallocate(ino, mode, off, len).expect("punch");
                            let end = (off + len).min(m.len() as u64) as usize;
                            m[off as usize..end].fill(0);
                        } else {
                            fs.fsync(ino, false).expect("fsync");
                        }
                    }
                });
            }
        });
        let model = model.read().unwrap().clone();
        check_all(&fs, ino, &model);
        // The limit holds once the file system is idle: a sweep skips folios another
        // thread holds, and the commit thread may still be writing ordered data (up to 48
        // folios held at once) as the workers finish; it sweeps when its commit ends.
        fs.sync().expect("sync");
        let st = fs.diagnostics().pagecache_stats();
        assert!(
            st.bytes <= st.limit,
            "order {order}: page cache holds {} bytes over a {}-byte limit ({} dirty)",
            st.bytes,
            st.limit,
            st.dirty_bytes
        );
        fs.unmount().expect("unmount");
        assert_fsck_clean(&img);
        let fs = mount(&img, order);
        check_all(&fs, ino, &model);
        fs.unmount().expect("unmount");
    }
}

#[test]
fn cold_sequential_reads_go_to_the_device_in_large_runs() {
    let td = tempfile::tempdir().expect("tempdir");
    let img = mkfs_image(td.path(), "ra.img", 128 << 20);
    let fs = Fs::mount_path(&img, MountOptions::default()).expect("mount");
    let ino = fs
        .create(ROOT_INO, b"big", 0o644, Owner::default())
        .expect("create")
        .ino;
    let chunk: Vec<u8> = (0..1 << 20).map(|i| (i % 251) as u8).collect();
    for k in 0..32u64 {
        fs.write(ino, k << 20, &chunk).expect("write");
    }
    fs.fsync(ino, false).expect("fsync");
    fs.diagnostics().drop_cache(ino).expect("drop cache");
    let before = fs.diagnostics().pagecache_stats();
    let mut buf = vec![0u8; 64 << 10];
    for k in 0..(32u64 << 20) / (64 << 10) {
        let n = fs.read(ino, k * (64 << 10), &mut buf).expect("read");
        assert_eq!(n, buf.len());
        assert_eq!(buf[..], chunk[(k as usize % 16) * (64 << 10)..][..64 << 10]);
    }
    let after = fs.diagnostics().pagecache_stats();
    let (reads, bytes) = (
        after.device_reads - before.device_reads,
        after.device_read_bytes - before.device_read_bytes,
    );
    assert_eq!(bytes, 32 << 20, "every byte read once");
    assert!(
        bytes / reads >= 1 << 20,
        "{reads} device reads for {bytes} bytes: read-ahead runs too small"
    );
    fs.unmount().expect("unmount");
}

/// Past the background threshold (an eighth of the limit) a writer wakes the flusher,
/// which writes files back, oldest first, until dirty data is under half of it: with no
/// fsync and no commit timer. What it wrote is on the device: after dropping the clean
/// cache, the files read back from the image as written.
#[test]
fn the_flusher_writes_back_past_the_background_threshold() {
    let td = tempfile::tempdir().expect("tempdir");
    let img = mkfs_image(td.path(), "flush.img", 64 << 20);
    let limit: u64 = 8 << 20;
    let opts = MountOptions {
        // No commit timer: only the flusher writes back.
        commit_interval: Duration::ZERO,
        pagecache_limit: limit,
        ..MountOptions::default()
    };
    let fs = Fs::mount_path(&img, opts).expect("mount");
    let _dog = watchdog("the_flusher_writes_back_past_the_background_threshold", 120);
    // Three files of 512 KiB: 1.5 MiB dirty, past limit / 8 (1 MiB) and under limit / 4
    // (2 MiB), where writers would write back themselves.
    let data = |k: u64| -> Vec<u8> { (0..512 << 10).map(|i| (i % 253) as u8 ^ k as u8).collect() };
    let mut inos = Vec::new();
    for k in 0..3u64 {
        let ino = fs
            .create(
                ROOT_INO,
                format!("f{k}").as_bytes(),
                0o644,
                Owner::default(),
            )
            .expect("create")
            .ino;
        for off in (0..512u64 << 10).step_by(64 << 10) {
            let d = data(k);
            fs.write(ino, off, &d[off as usize..][..64 << 10])
                .expect("write");
        }
        inos.push(ino);
    }
    let start = std::time::Instant::now();
    while fs.diagnostics().pagecache_stats().dirty_bytes > limit / 16 {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "still {} dirty bytes after 60 s",
            fs.diagnostics().pagecache_stats().dirty_bytes
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // The oldest file went first: it is clean, so dropping the clean cache sends its
    // reads to the device.
    fs.diagnostics().drop_cache(inos[0]).expect("drop cache");
    let before = fs.diagnostics().pagecache_stats().device_read_bytes;
    check_all(&fs, inos[0], &data(0));
    assert_eq!(
        fs.diagnostics().pagecache_stats().device_read_bytes - before,
        512 << 10,
        "the first file was not read from the device"
    );
    for (k, &ino) in inos.iter().enumerate() {
        check_all(&fs, ino, &data(k as u64));
    }
    fs.unmount().expect("unmount");
    assert_fsck_clean(&img);
}
