//! Goal: an unlink of an inode the inode cache does not hold (a cold inode), which frees
//! it and nothing else, frees it without caching it (`Fs::free_cold`) and stays exact
//! while other threads look the same inodes up by number and by name.
//!
//! Its own test binary: its three threads spin for the whole run, which starved the commit
//! thread of `icache_race::chmod_run_stays_under_the_limit` when they ran side by side.

mod common;

use lanefs::{Error, Fs, IcachePolicy, MountOptions, Owner, ROOT_INO};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

const OWNER: Owner = Owner {
    uid: 0,
    gid: 0,
    umask: 0,
};

/// Goal: an unlink of an inode the cache does not hold, which frees it and nothing else,
/// frees it without caching it (`Fs::free_cold`), and stays exact while other threads look
/// the same inodes up by number and by name. Files of four kinds, 3,000 in all, are made
/// and the image remounted, so every inode is cold: empty files (freed cold), files with
/// data, files with a second name (those two take the cached path), and empty files with
/// a mode of their own (fifos, freed cold too). One thread unlinks every name while one
/// looks up by number the inode being unlinked and one looks names up: a lookup sees the file whole (its kind,
/// size and links) or not found, never freed bytes; after, the second names still reach
/// their files, the free-inode count is back, and e2fsck and lanefs fsck are clean.
#[test]
fn cold_unlinks_race_lookups_by_number_and_name() {
    const FILES: usize = 3000;
    let _w = common::watchdog("cold_unlinks_race_lookups_by_number_and_name", 300);
    for icache in [
        IcachePolicy::Bucket,
        IcachePolicy::Global,
        IcachePolicy::Papaya,
    ] {
        let td = tempfile::tempdir().expect("tempdir");
        let img = common::mkfs_image(td.path(), "cold.img", 128 << 20);
        let o = MountOptions {
            icache,
            ..MountOptions::default()
        };
        let fs = Fs::mount_path(&img, o).expect("mount");
        let free_before = fs.statfs().expect("statfs").free_inodes;
        let dir = fs.mkdir(ROOT_INO, b"d", 0o755, OWNER).expect("mkdir").ino;
        let keep = fs
            .mkdir(ROOT_INO, b"keep", 0o755, OWNER)
            .expect("mkdir")
            .ino;
        let mut inos = Vec::with_capacity(FILES);
        for i in 0..FILES {
            let name = format!("f{i}");
            let a = if i % 4 == 3 {
                fs.mknod(dir, name.as_bytes(), 0o010644, 0, OWNER)
                    .expect("mknod")
            } else {
                let a = fs
                    .create(dir, name.as_bytes(), 0o644, OWNER)
                    .expect("create");
                if i % 4 == 1 {
                    fs.write(a.ino, 0, &[i as u8; 5000]).expect("write");
                }
                if i % 4 == 2 {
                    fs.link(a.ino, keep, name.as_bytes()).expect("link");
                }
                fs.release(a.ino).expect("release");
                a
            };
            inos.push(a.ino);
        }
        fs.unmount().expect("unmount");
        // A limit of a few dozen inodes: what the lookups cache goes again soon, so most
        // unlinks meet their inode cold.
        let o = MountOptions {
            icache,
            icache_limit: 32 << 10,
            ..MountOptions::default()
        };
        let fs = Fs::mount_path(&img, o).expect("remount");
        let dir = fs.lookup(ROOT_INO, b"d").expect("lookup d").ino;
        let keep = fs.lookup(ROOT_INO, b"keep").expect("lookup keep").ino;
        let done = AtomicBool::new(false);
        let at = AtomicUsize::new(0);
        let seen = |i: usize, r: Result<lanefs::Attr, Error>| match r {
            Ok(a) => {
                assert_eq!(a.ino, inos[i], "{icache:?}: f{i}");
                let (kind, size, links) = match i % 4 {
                    1 => (lanefs::FileType::Regular, 5000, 1..=1),
                    2 => (lanefs::FileType::Regular, 0, 1..=2),
                    3 => (lanefs::FileType::Fifo, 0, 1..=1),
                    _ => (lanefs::FileType::Regular, 0, 1..=1),
                };
                assert_eq!((a.kind, a.size), (kind, size), "{icache:?}: f{i}: {a:?}");
                assert!(links.contains(&a.nlink), "{icache:?}: f{i}: {a:?}");
            }
            Err(Error::NotFound) => {}
            Err(e) => panic!("{icache:?}: f{i}: {e}"),
        };
        let unlinked = |i: usize| match fs.getattr(inos[i]) {
            Ok(a) => {
                assert_eq!(i % 4, 2, "{icache:?}: f{i} survived its unlink: {a:?}");
                assert_eq!(a.nlink, 1, "{icache:?}: f{i}: {a:?}");
            }
            Err(Error::NotFound) => assert_ne!(i % 4, 2, "{icache:?}: f{i} lost"),
            Err(e) => panic!("{icache:?}: f{i}: {e}"),
        };
        std::thread::scope(|s| {
            s.spawn(|| {
                for i in 0..FILES {
                    at.store(i, Ordering::Release);
                    fs.unlink(dir, format!("f{i}").as_bytes()).expect("unlink");
                }
                done.store(true, Ordering::Release);
            });
            // By number: the inode being unlinked, and the one unlinked before it, which
            // must be gone (or, with its second name, down to one link).
            s.spawn(|| {
                while !done.load(Ordering::Acquire) {
                    let i = at.load(Ordering::Acquire);
                    seen(i, fs.getattr(inos[i]));
                    if i > 0 {
                        unlinked(i - 1);
                    }
                }
            });
            s.spawn(|| {
                while !done.load(Ordering::Acquire) {
                    for i in (0..FILES).step_by(7) {
                        seen(i, fs.lookup(dir, format!("f{i}").as_bytes()));
                    }
                }
            });
        });
        for (i, &ino) in inos.iter().enumerate() {
            unlinked(i);
            if i % 4 == 2 {
                let b = fs.lookup(keep, format!("f{i}").as_bytes()).expect("keep");
                assert_eq!(b.ino, ino);
            }
        }
        // What is left: the two directories and a quarter of the files.
        let free_after = fs.statfs().expect("statfs").free_inodes;
        assert_eq!(free_before - free_after, 2 + FILES as u64 / 4, "{icache:?}");
        fs.unmount().expect("unmount");
        common::assert_fsck_clean(&img);
        common::lanefs_fsck(&img).expect("lanefs fsck");
    }
}
