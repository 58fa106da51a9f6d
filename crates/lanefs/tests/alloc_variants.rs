//! Goal: every allocator policy (seed 000's variants: `mb_trylock` on and off;
//! `mb_stream_goal` global, inode, slots; `mb_optimize_scan` on and off) gives valid
//! allocations under real threads: no block handed out twice (file contents stay their
//! own), every group's buddy always equals one rebuilt from its bitmap with exact
//! counters and scan-list membership, every block comes back when the files go, and
//! `e2fsck -fn` is clean. Near full, ENOSPC is exact and the image stays consistent.
//! Method: the same seeded workload under each policy on an image of 16 small groups:
//! four threads create, fallocate, write, punch, truncate and unlink their own files,
//! checking contents as they go, while a fifth thread checks the allocator
//! (`Fs::check_allocator`) over and over.

mod common;

use lanefs::{FallocMode, Fs, MemDevice, MountOptions, Owner, SetAttr, StreamGoal, ROOT_INO};
use rand::{rngs::StdRng, Rng, SeedableRng};
use std::sync::Arc;
use std::time::{Duration, Instant};

const O: Owner = Owner {
    uid: 0,
    gid: 0,
    umask: 0,
};

fn workload(fs: &Fs, t: u64, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed ^ t);
    let d = fs
        .mkdir(ROOT_INO, format!("t{t}").as_bytes(), 0o755, O)
        .expect("mkdir")
        .ino;
    let deadline = Instant::now() + Duration::from_millis(700);
    let mut k = 0u64;
    while Instant::now() < deadline {
        k += 1;
        let name = format!("f{}", k % 6);
        let f = match fs.lookup(d, name.as_bytes()) {
            Ok(a) => {
                fs.open(a.ino).expect("open");
                a.ino
            }
            Err(_) => fs.create(d, name.as_bytes(), 0o644, O).expect("create").ino,
        };
        let fill = (t * 31 + k) as u8;
        let blocks = rng.gen_range(1..64u64);
        match rng.gen_range(0..5) {
            0 => fs
                .fallocate(
                    f,
                    FallocMode::default(),
                    rng.gen_range(0..64) * 4096,
                    blocks * 4096,
                )
                .expect("fallocate"),
            1 | 2 => {
                // Whole file rewritten with one byte value, then checked.
                let len = (blocks * 4096) as usize;
                fs.setattr(
                    f,
                    &SetAttr {
                        size: Some(0),
                        ..SetAttr::default()
                    },
                )
                .expect("truncate");
                fs.write(f, 0, &vec![fill; len]).expect("write");
                let mut back = vec![0u8; len];
                assert_eq!(fs.read(f, 0, &mut back).expect("read"), len);
                assert!(
                    back.iter().all(|&b| b == fill),
                    "thread {t}: a block of {name} holds another file's data"
                );
            }
            3 => {
                let punch = FallocMode {
                    keep_size: true,
                    punch_hole: true,
                    zero_range: false,
                };
                fs.fallocate(f, punch, rng.gen_range(0..32) * 4096, blocks * 4096)
                    .expect("punch");
            }
            _ => {
                fs.release(f).expect("release");
                fs.unlink(d, name.as_bytes()).expect("unlink");
                continue;
            }
        }
        fs.release(f).expect("release");
    }
    for k in 0..6 {
        let _ = fs.unlink(d, format!("f{k}").as_bytes());
    }
    fs.rmdir(ROOT_INO, format!("t{t}").as_bytes())
        .expect("rmdir");
}

#[test]
fn every_policy_allocates_validly_under_threads() {
    let test = "every_policy_allocates_validly_under_threads";
    if !common::require_tools(test, &["mkfs.ext4", "e2fsck"]) {
        return;
    }
    let _w = common::watchdog(test, 300);
    let td = tempfile::tempdir().expect("tempdir");
    // 16 groups of 4096 blocks: the buddy's padding and group selection both matter.
    let img = common::mkfs_image_args(td.path(), "base.img", 256 << 20, &["-g", "4096"]);
    let bytes = std::fs::read(&img).expect("read image");
    let seed: u64 = std::env::var("LANEFS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    println!("{test}: LANEFS_SEED={seed}");
    let policies = [
        ("base", false, StreamGoal::Global, false),
        ("trylock", true, StreamGoal::Global, false),
        ("linear", true, StreamGoal::Inode, false),
        ("optimize_scan", true, StreamGoal::Inode, true),
        ("slots", true, StreamGoal::Slots, true),
    ];
    for (name, trylock, stream, optimize_scan) in policies {
        let dev = Arc::new(MemDevice::from_vec(bytes.clone()));
        let opts = MountOptions {
            mb_trylock: trylock,
            mb_stream_goal: stream,
            mb_optimize_scan: optimize_scan,
            commit_interval: Duration::from_millis(5),
            ..MountOptions::default()
        };
        let fs = Fs::mount(dev.clone(), opts).expect("mount");
        let free0 = fs.statfs().expect("statfs").free_blocks;
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let fs = fs.clone();
                std::thread::spawn(move || workload(&fs, t, seed))
            })
            .collect();
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let checker = {
            let (fs, done) = (fs.clone(), done.clone());
            std::thread::spawn(move || {
                let mut checks = 0u64;
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    fs.diagnostics()
                        .check_allocator()
                        .expect("allocator check under threads");
                    checks += 1;
                }
                checks
            })
        };
        for t in threads {
            t.join()
                .unwrap_or_else(|_| panic!("{name}: a worker panicked"));
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        let checks = checker
            .join()
            .unwrap_or_else(|_| panic!("{name}: the allocator check failed"));
        assert!(checks > 0, "{name}: the checker never ran");
        fs.diagnostics()
            .check_allocator()
            .expect("allocator check after the run");
        fs.sync().expect("sync");
        assert_eq!(
            fs.statfs().expect("statfs").free_blocks,
            free0,
            "{name}: blocks leaked"
        );
        fs.unmount().expect("unmount");
        let p = td.path().join(format!("{name}.img"));
        std::fs::write(&p, dev.snapshot()).expect("write image");
        common::assert_fsck_clean(&p);
    }
}

/// Fill the disk from four threads until each gets ENOSPC, then one block at a time
/// until none is left: ENOSPC comes only when nothing is free (exact), every earlier
/// write is intact, the image is clean, and space freed is usable again.
#[test]
fn near_full_enospc_is_exact_and_clean() {
    let test = "near_full_enospc_is_exact_and_clean";
    if !common::require_tools(test, &["mkfs.ext4", "e2fsck"]) {
        return;
    }
    let _w = common::watchdog(test, 300);
    let td = tempfile::tempdir().expect("tempdir");
    let img = common::mkfs_image_args(td.path(), "full.img", 64 << 20, &["-g", "2048"]);
    let bytes = std::fs::read(&img).expect("read image");
    for optimize_scan in [false, true] {
        let dev = Arc::new(MemDevice::from_vec(bytes.clone()));
        let opts = MountOptions {
            mb_optimize_scan: optimize_scan,
            commit_interval: Duration::from_millis(3),
            // Data may take every block (no reserve for metadata): exact to the last.
            reserved_blocks: Some(0),
            ..MountOptions::default()
        };
        let fs = Fs::mount(dev.clone(), opts).expect("mount");
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let fs = fs.clone();
                std::thread::spawn(move || {
                    let mut rng = StdRng::seed_from_u64(t);
                    let mut files = Vec::new();
                    'fill: for k in 0.. {
                        let name = format!("t{t}-{k}");
                        let f = match fs.create(ROOT_INO, name.as_bytes(), 0o644, O) {
                            Ok(a) => a.ino,
                            Err(lanefs::Error::NoSpace | lanefs::Error::NoInodes) => break,
                            Err(e) => panic!("create: {e}"),
                        };
                        let mut size = 0u64;
                        for _ in 0..8 {
                            let n = rng.gen_range(1..40usize) * 4096;
                            match fs.write(f, size, &vec![(t * 7 + k) as u8; n]) {
                                Ok(_) => size += n as u64,
                                Err(lanefs::Error::NoSpace) => {
                                    files.push((f, size, (t * 7 + k) as u8));
                                    fs.release(f).expect("release");
                                    break 'fill;
                                }
                                Err(e) => panic!("write: {e}"),
                            }
                        }
                        files.push((f, size, (t * 7 + k) as u8));
                        fs.release(f).expect("release");
                    }
                    files
                })
            })
            .collect();
        let files: Vec<_> = threads
            .into_iter()
            .flat_map(|t| t.join().expect("filler"))
            .collect();
        // One block at a time until nothing is left.
        let last = files.last().expect("some file").0;
        let mut size = fs.getattr(last).expect("getattr").size;
        loop {
            match fs.write(last, size, &[1u8; 4096]) {
                Ok(_) => size += 4096,
                Err(lanefs::Error::NoSpace) => break,
                Err(e) => panic!("write: {e}"),
            }
        }
        fs.sync().expect("sync");
        fs.diagnostics()
            .check_allocator()
            .expect("allocator check when full");
        // At most one block can be left: a write of one data block may also need an
        // extent-tree block, and then fails whole.
        let left = fs.statfs().expect("statfs").free_blocks;
        assert!(
            left <= 1,
            "optimize_scan={optimize_scan}: ENOSPC with {left} blocks still free"
        );
        for &(f, sz, fill) in &files {
            let mut back = vec![0u8; sz.min(64 << 10) as usize];
            fs.read(f, 0, &mut back).expect("read");
            if f != last {
                assert!(back.iter().all(|&b| b == fill), "file {f} lost its data");
            }
        }
        // Space freed is usable again.
        fs.unlink(ROOT_INO, b"t0-0").expect("unlink");
        let f = fs
            .create(ROOT_INO, b"again", 0o644, O)
            .expect("create after free")
            .ino;
        fs.write(f, 0, &[2u8; 8192]).expect("write after free");
        fs.release(f).expect("release");
        fs.unmount().expect("unmount");
        let p = td.path().join(format!("full-{optimize_scan}.img"));
        std::fs::write(&p, dev.snapshot()).expect("write image");
        common::assert_fsck_clean(&p);
    }
}
