//! Deep trees: seeded shifts of a file of many extents (a depth-2 tree on 1 KiB blocks)
//! that change its depth both ways; reads racing shifts; realtime files, whose shifts move
//! whole rt extents.

use super::*;

/// A file of 1,200 one-block extents on 1 KiB blocks (84 extents a leaf: a depth-2
/// tree), collapsed and grown by seeded shifts with remounts, compared with the model at
/// every step; collapses then take it down to a handful of extents (depth 0) and inserts
/// and writes grow it again.
#[test]
fn deep_trees_shift_and_change_depth() {
    let (dev, mut fs) = mem_fs(64 << 20, 1024, "");
    let bs = 1024u64;
    let ino = new_file(&fs, "deep");
    let mut m = vec![0u8; 2400 * bs as usize];
    for k in 0..1200u64 {
        let off = 2 * k * bs;
        let data = pattern(k, off, bs as usize);
        fs.write(ino, off, &data).unwrap();
        m[off as usize..(off + bs) as usize].copy_from_slice(&data);
    }
    // The last block written is 2398.
    m.truncate(2399 * bs as usize);
    fs.sync().unwrap();
    assert!(
        tree_depth(&*dev, "deep").is_none_or(|d| d == 2),
        "not a depth-2 tree"
    );
    let mut rng = StdRng::seed_from_u64(44);
    for step in 0..120 {
        let blocks = m.len() as u64 / bs;
        let (blk, n) = (rng.gen_range(0..blocks), rng.gen_range(1..40));
        let (off, len) = (blk * bs, n * bs);
        if step % 3 == 2 {
            let want = model_insert(&m, bs, off, len);
            check_shift(
                &format!("step {step}"),
                fs.insert_range(ino, off, len),
                want,
                &mut m,
            )
            .unwrap();
        } else {
            let want = model_collapse(&m, bs, off, len);
            check_shift(
                &format!("step {step}"),
                fs.collapse_range(ino, off, len),
                want,
                &mut m,
            )
            .unwrap();
        }
        if step % 40 == 39 {
            fs.unmount().unwrap();
            fs = Fs::mount(dev.clone(), opts()).unwrap();
        }
        same(&read_all(&fs, ino), &m, &format!("step {step}"));
    }
    // Down to the first three blocks and the last: at most four extents, all in the
    // inode (depth 0), the tree blocks freed.
    while m.len() as u64 > 4 * bs {
        let len = ((m.len() as u64 / bs - 4) * bs).min(300 * bs);
        let want = model_collapse(&m, bs, 3 * bs, len);
        check_shift("shrink", fs.collapse_range(ino, 3 * bs, len), want, &mut m).unwrap();
    }
    same(&read_all(&fs, ino), &m, "deep");
    fs.sync().unwrap();
    assert_eq!(
        tree_depth(&*dev, "deep").unwrap_or(0),
        0,
        "not back to depth 0"
    );
    // And up again: 400 times two blocks inserted at 0 and the first written (one more
    // extent each, past 4 x 84: depth 2).
    for k in 0..400u64 {
        let want = model_insert(&m, bs, 0, 2 * bs);
        check_shift("grow", fs.insert_range(ino, 0, 2 * bs), want, &mut m).unwrap();
        let data = pattern(9000 + k, 0, bs as usize);
        fs.write(ino, 0, &data).unwrap();
        m[..bs as usize].copy_from_slice(&data);
    }
    same(&read_all(&fs, ino), &m, "grown");
    fs.unmount().unwrap();
    assert!(
        tree_depth(&*dev, "deep").is_none_or(|d| d == 2),
        "not depth 2 again"
    );
    let fs = Fs::mount(dev.clone(), opts()).unwrap();
    same(&read_all(&fs, ino), &m, "deep");
    fs.unmount().unwrap();
    assert_clean(&*dev, "deep tree");
}

/// Readers racing shifts: one thread inserts a hole of four blocks at block 8 and
/// collapses it again, over and over, while another reads 6 blocks at block 6 (through
/// the lock-free cached path when it can): every read sees the file before an insert or
/// after it, whole, never a mix or a stale folio.
#[test]
fn reads_racing_shifts_see_one_version() {
    let (dev, fs) = mem_fs(32 << 20, 4096, "");
    let bs = 4096usize;
    let ino = new_file(&fs, "f");
    let base = pattern(8, 0, 32 * bs);
    fs.write(ino, 0, &base).unwrap();
    let inserted = model_insert(&base, bs as u64, 8 * bs as u64, 4 * bs as u64).unwrap();
    let (a, b) = (6 * bs, 12 * bs);
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|sc| {
        sc.spawn(|| {
            // Stops the reader however this thread ends (a failed check panics).
            struct Stop<'a>(&'a std::sync::atomic::AtomicBool);
            impl Drop for Stop<'_> {
                fn drop(&mut self) {
                    self.0.store(true, std::sync::atomic::Ordering::Release);
                }
            }
            let _stop = Stop(&stop);
            let mut mine = vec![0u8; b - a];
            for k in 0..300 {
                fs.insert_range(ino, 8 * bs as u64, 4 * bs as u64).unwrap();
                fs.read(ino, a as u64, &mut mine).unwrap();
                assert!(mine == inserted[a..b], "round {k}: the insert is not seen");
                fs.collapse_range(ino, 8 * bs as u64, 4 * bs as u64)
                    .unwrap();
            }
        });
        let mut reads = 0;
        let mut buf = vec![0u8; b - a];
        while !stop.load(std::sync::atomic::Ordering::Acquire) {
            assert_eq!(fs.read(ino, a as u64, &mut buf).unwrap(), b - a);
            assert!(
                buf == base[a..b] || buf == inserted[a..b],
                "read {reads} is neither version"
            );
            reads += 1;
        }
    });
    same(&read_all(&fs, ino), &base, "after the race");
    fs.unmount().unwrap();
    assert_clean(&*dev, "race");
}

/// keep the rt bitmap exact; a shift of whole blocks that cuts an rt extent is EINVAL.
#[test]
fn realtime_files_shift_in_whole_rt_extents() {
    let td = tempfile::tempdir().unwrap();
    let (img, rt) = (td.path().join("img"), td.path().join("rt"));
    format(
        &FileDevice::create(&img, 32 << 20).unwrap(),
        &mkfs_opts(4096, ""),
    )
    .unwrap();
    drop(FileDevice::create(&rt, 16 << 20).unwrap());
    lanefs::format_rt(&img, &rt, 4, 1).unwrap();
    let o = MountOptions {
        rtdev: Some(rt.clone()),
        ..opts()
    };
    let fs = Fs::mount_path(&img, o.clone()).unwrap();
    let f = new_file(&fs, "rt");
    fs.set_realtime(f, true).unwrap();
    let bs = 4096u64;
    let mut m = pattern(5, 0, 64 * bs as usize);
    fs.write(f, 0, &m).unwrap();
    let mut rng = StdRng::seed_from_u64(3);
    for step in 0..40 {
        let blocks = m.len() as u64 / bs;
        let (blk, n) = (rng.gen_range(0..blocks / 4) * 4, rng.gen_range(1..4) * 4);
        let (off, len) = (blk * bs, n * bs);
        let what = format!("step {step}");
        if step % 2 == 0 {
            let want = model_collapse(&m, bs, off, len);
            check_shift(&what, fs.collapse_range(f, off, len), want, &mut m).unwrap();
        } else {
            let want = model_insert(&m, bs, off, len);
            check_shift(&what, fs.insert_range(f, off, len), want, &mut m).unwrap();
            let data = pattern(step, off, bs as usize);
            fs.write(f, off + bs, &data).unwrap();
            m[(off + bs) as usize..(off + 2 * bs) as usize].copy_from_slice(&data);
        }
        same(&read_all(&fs, f), &m, &what);
        fs.diagnostics().rt_check().unwrap();
    }
    assert!(matches!(
        fs.collapse_range(f, bs, 4 * bs),
        Err(Error::Invalid(_))
    ));
    assert!(matches!(
        fs.insert_range(f, 0, 2 * bs),
        Err(Error::Invalid(_))
    ));
    same(&read_all(&fs, f), &m, "rt");
    fs.unmount().unwrap();
    let fs = Fs::mount_path(&img, o).unwrap();
    same(&read_all(&fs, f), &m, "rt");
    fs.diagnostics().rt_check().unwrap();
    fs.unmount().unwrap();
    let r = check(
        &FileDevice::open(&img, true).unwrap(),
        &FsckOptions::default(),
    )
    .unwrap();
    assert!(r.is_clean(), "{}", r.summary());
}
