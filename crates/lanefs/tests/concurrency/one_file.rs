//! Tests on one file: disjoint writers with concurrent readers, fallocate and truncate loops
//! that must return every block, and removes and setattrs racing commits.

use super::*;

// ---------------------------------------------------------------------------------------
// Test 2: one file, disjoint writers, concurrent readers.

pub(super) const STRIPE: usize = 3000;
pub(super) const STRIPES: usize = 256;
pub(super) const WRITERS: usize = 4;

/// Stripe contents: version, writer and stripe number, then a pattern of them.
pub(super) fn stripe(version: u32, stripe: usize) -> Vec<u8> {
    tagged((u64::from(version) << 32) | stripe as u64, STRIPE)
}

/// Check one stripe as read: never written (zeros, or absent past EOF) or one whole
/// version; returns the version (0 for never written).
pub(super) fn stripe_version(data: &[u8], s: usize) -> u32 {
    if data.iter().all(|&b| b == 0) {
        return 0;
    }
    let tag = tag_of(data).unwrap_or_else(|| panic!("stripe {s}: torn or corrupt contents"));
    assert_eq!(
        tag & 0xFFFF_FFFF,
        s as u64,
        "stripe {s} holds another stripe's data"
    );
    (tag >> 32) as u32
}

#[test]
fn one_file_disjoint_writers_and_readers() {
    let test = "one_file_disjoint_writers_and_readers";
    if !common::require_tools(test, &["mkfs.ext4", "e2fsck"]) {
        return;
    }
    let _w = common::watchdog(test, 120);
    let seed = seed();
    println!("{test}: LANEFS_SEED={seed}");
    let td = tempfile::tempdir().expect("tempdir");
    let img = common::mkfs_image(td.path(), "hot.img", IMG_SIZE);
    let fs = mount(&img);
    let ino = fs
        .create(ROOT_INO, b"hot", 0o644, OWNER)
        .expect("create")
        .ino;
    let deadline = Instant::now() + Duration::from_secs(6);
    let start = Instant::now();
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let fs = fs.clone();
            let mut rng = StdRng::seed_from_u64(seed ^ t as u64);
            std::thread::spawn(move || {
                // Writers own the stripes s with s % WRITERS == t; the rest read.
                let mut versions = vec![0u32; STRIPES];
                let mut ops = 0;
                for i in 0..25_000 {
                    if Instant::now() > deadline {
                        break;
                    }
                    ops += 1;
                    if t < WRITERS {
                        let s = rng.gen_range(0..STRIPES / WRITERS) * WRITERS + t;
                        versions[s] += 1;
                        let n = fs
                            .write(ino, (s * STRIPE) as u64, &stripe(versions[s], s))
                            .expect("write");
                        assert_eq!(n, STRIPE);
                        if i % 500 == 499 {
                            fs.fsync(ino, false).expect("fsync");
                        }
                    } else {
                        // Reads of whole stripes: each is some whole version, never older
                        // than one this reader saw before.
                        let (a, n) = (rng.gen_range(0..STRIPES), rng.gen_range(1..9usize));
                        let n = n.min(STRIPES - a);
                        let mut buf = vec![0u8; n * STRIPE];
                        let got = fs.read(ino, (a * STRIPE) as u64, &mut buf).expect("read");
                        buf[got..].fill(0);
                        for k in 0..n {
                            let s = a + k;
                            let v = stripe_version(&buf[k * STRIPE..(k + 1) * STRIPE], s);
                            assert!(
                                v >= versions[s],
                                "stripe {s} went back from {} to {v}",
                                versions[s]
                            );
                            versions[s] = v;
                        }
                    }
                }
                (versions, ops)
            })
        })
        .collect();
    let mut latest = vec![0u32; STRIPES];
    let mut ops = 0;
    for (t, h) in handles.into_iter().enumerate() {
        let (v, n) = h.join().expect("thread panicked");
        ops += n;
        if t < WRITERS {
            for s in (t..STRIPES).step_by(WRITERS) {
                latest[s] = v[s];
            }
        }
    }
    println!(
        "{test}: {ops} operations in {:.1} s",
        start.elapsed().as_secs_f64()
    );
    let check = |fs: &Fs| {
        let data = read_all(fs, ino);
        for (s, &v) in latest.iter().enumerate() {
            let got = data.get(s * STRIPE..(s + 1) * STRIPE);
            let got = got.map_or(0, |d| stripe_version(d, s));
            assert_eq!(got, v, "stripe {s}: final version");
        }
    };
    check(&fs);
    fs.release(ino).expect("release");
    let fs = cycle(fs, &img);
    check(&fs);
    fs.unmount().expect("unmount");
}

// ---------------------------------------------------------------------------------------
// Test 3: fallocate and truncate loops (the fallocate2 workload) return every block.

#[test]
fn fallocate_truncate_loops_return_every_block() {
    let test = "fallocate_truncate_loops_return_every_block";
    if !common::require_tools(test, &["mkfs.ext4", "e2fsck"]) {
        return;
    }
    let _w = common::watchdog(test, 120);
    let seed = seed();
    println!("{test}: LANEFS_SEED={seed}");
    let td = tempfile::tempdir().expect("tempdir");
    let img = common::mkfs_image(td.path(), "falloc.img", IMG_SIZE);
    let fs = mount(&img);
    let st0 = fs.statfs().expect("statfs");
    let deadline = Instant::now() + Duration::from_secs(6);
    let start = Instant::now();
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let fs = fs.clone();
            let mut rng = StdRng::seed_from_u64(seed ^ t as u64);
            std::thread::spawn(move || {
                let dname = format!("f{t}");
                let d = fs
                    .mkdir(ROOT_INO, dname.as_bytes(), 0o755, OWNER)
                    .expect("mkdir")
                    .ino;
                let f = fs.create(d, b"file", 0o644, OWNER).expect("create").ino;
                let mut size = 0u64;
                let mut ops = 0;
                for i in 0..40_000u64 {
                    if Instant::now() > deadline {
                        break;
                    }
                    ops += 1;
                    // The next 8 KiB; at 1 MiB back to 0 (fallocate2).
                    if size >= 1 << 20 {
                        let set = SetAttr {
                            size: Some(0),
                            ..SetAttr::default()
                        };
                        assert_eq!(
                            fs.setattr(f, &set).expect("truncate").blocks,
                            0,
                            "blocks after truncate to 0"
                        );
                        size = 0;
                    }
                    let keep = i % 7 == 3;
                    let mode = FallocMode {
                        keep_size: keep,
                        punch_hole: false,
                        zero_range: false,
                    };
                    fs.fallocate(f, mode, size, 8192).expect("fallocate");
                    if !keep {
                        size += 8192;
                    }
                    if i % 11 == 5 && size > 0 {
                        let off = rng.gen_range(0..size);
                        let punch = FallocMode {
                            keep_size: true,
                            punch_hole: true,
                            zero_range: false,
                        };
                        fs.fallocate(f, punch, off, rng.gen_range(1..40_000))
                            .expect("punch");
                    }
                    if i % 13 == 7 && size > 0 {
                        fs.write(f, rng.gen_range(0..size), &[7u8; 300])
                            .expect("write");
                        size = fs.getattr(f).expect("getattr").size;
                    }
                    assert_eq!(
                        fs.getattr(f).expect("getattr").size,
                        size,
                        "thread {t}: size"
                    );
                }
                fs.release(f).expect("release");
                fs.unlink(d, b"file").expect("unlink");
                fs.rmdir(ROOT_INO, dname.as_bytes()).expect("rmdir");
                ops
            })
        })
        .collect();
    let ops: u64 = handles
        .into_iter()
        .map(|h| h.join().expect("thread panicked"))
        .sum();
    println!(
        "{test}: {ops} loop iterations in {:.1} s",
        start.elapsed().as_secs_f64()
    );
    let counts = |fs: &Fs| {
        let st = fs.statfs().expect("statfs");
        (st.free_blocks, st.free_inodes)
    };
    assert_eq!(
        counts(&fs),
        (st0.free_blocks, st0.free_inodes),
        "free blocks and inodes after deleting everything"
    );
    let fs = cycle(fs, &img);
    assert_eq!(
        counts(&fs),
        (st0.free_blocks, st0.free_inodes),
        "free counts after remount"
    );
    fs.unmount().expect("unmount");
}

/// Goal: a remove and a change of the same file never deadlock with a commit. The journal's
/// lock order is inode locks first, then the handle: a setattr holds the file's lock and
/// waits in `Journal::start` while a commit closes the running transaction, and that
/// commit waits for every open handle. A remove that started its handle before locking
/// the file (as a remove did for a while, to claim cold inodes) waited for the setattr's
/// lock while holding a handle the commit waited for. Method: commits every millisecond;
/// one thread unlinks 300 cached files of a directory while another chmods the file being
/// unlinked again and again, 40 rounds, under a watchdog; every file is gone after, and
/// the image is clean.
#[test]
fn removes_and_setattrs_of_one_file_race_commits() {
    let _w = common::watchdog("removes_and_setattrs_of_one_file_race_commits", 120);
    let td = tempfile::tempdir().unwrap();
    let img = common::mkfs_image(td.path(), "rs.img", 64 << 20);
    let o = MountOptions {
        commit_interval: Duration::from_millis(1),
        ..MountOptions::default()
    };
    let fs = Fs::mount_path(&img, o).unwrap();
    let own = Owner::default();
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, own).unwrap().ino;
    for round in 0..40 {
        let inos: Vec<Ino> = (0..300)
            .map(|i| {
                let a = fs
                    .create(d, format!("f{i}").as_bytes(), 0o644, own)
                    .unwrap();
                fs.release(a.ino).unwrap();
                a.ino
            })
            .collect();
        let at = AtomicUsize::new(0);
        std::thread::scope(|s| {
            s.spawn(|| {
                for i in 0..300 {
                    at.store(i, Ordering::Release);
                    fs.unlink(d, format!("f{i}").as_bytes()).unwrap();
                }
                at.store(300, Ordering::Release);
            });
            // The file being unlinked, again and again.
            s.spawn(|| {
                let set = SetAttr {
                    perm: Some(0o600),
                    ..SetAttr::default()
                };
                loop {
                    let i = at.load(Ordering::Acquire);
                    let Some(&ino) = inos.get(i) else { break };
                    match fs.setattr(ino, &set) {
                        Ok(_) | Err(Error::NotFound) => {}
                        Err(e) => panic!("round {round}: setattr {ino}: {e}"),
                    }
                }
            });
        });
        assert!(list(&fs, d).is_empty(), "round {round}");
    }
    fs.unmount().unwrap();
    common::assert_fsck_clean(&img);
}
