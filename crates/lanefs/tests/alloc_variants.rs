//! Goal: every allocator policy (`mb_trylock` on and off; `mb_stream_goal` global, inode,
//! slots) gives valid allocations under real threads: no block handed out twice (file
//! contents stay their own), every block comes back when the files go, and `e2fsck -fn`
//! is clean.
//! Method: the same seeded workload under each policy: four threads create, fallocate,
//! write, punch, truncate and unlink their own files; contents are checked as they go.

mod common;

use lanefs::{FallocMode, Fs, MemDevice, MountOptions, Owner, SetAttr, StreamGoal, ROOT_INO};
use rand::{rngs::StdRng, Rng, SeedableRng};
use std::sync::Arc;
use std::time::{Duration, Instant};

const O: Owner = Owner { uid: 0, gid: 0 };

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
    let img = common::mkfs_image(td.path(), "base.img", 256 << 20);
    let bytes = std::fs::read(&img).expect("read image");
    let seed: u64 = std::env::var("LANEFS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    println!("{test}: LANEFS_SEED={seed}");
    let policies = [
        ("base", false, StreamGoal::Global),
        ("trylock", true, StreamGoal::Global),
        ("linear", true, StreamGoal::Inode),
        ("slots", true, StreamGoal::Slots),
    ];
    for (name, trylock, stream) in policies {
        let dev = Arc::new(MemDevice::from_vec(bytes.clone()));
        let opts = MountOptions {
            mb_trylock: trylock,
            mb_stream_goal: stream,
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
        for t in threads {
            t.join()
                .unwrap_or_else(|_| panic!("{name}: a worker panicked"));
        }
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
