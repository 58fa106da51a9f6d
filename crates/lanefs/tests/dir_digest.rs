//! Goal: directory leaf digests (`leafdigest`) never change what a directory holds. A
//! create, unlink, rename or link found and placed through a digest leaves the same names
//! as the walk of every leaf (`dir_digest=0`), through leaf splits, remounts (leaves read
//! again into new buffers), and a digest budget so small that digests are dropped all the
//! time; the kernel and e2fsck read the result, and a directory the kernel made is edited
//! through digests and read back by the kernel.
//! Method: random operations on one large directory against a model (a map of names to
//! inodes), lookups of present and absent names after each, then readdir, e2fsck -fn and
//! (as root) a kernel mount compare with the model.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::Rng;
use lanefs::mkfs::{format, MkfsOptions};
use lanefs::{Error, FileDevice, Fs, Ino, MountOptions, Owner, ROOT_INO};

/// A name of 1 to 60 bytes: series names that differ at the end, and random ones.
fn name(rng: &mut Rng) -> Vec<u8> {
    match rng.below(3) {
        0 => format!("file.{}", rng.below(4000)).into_bytes(),
        1 => format!("{:0w$}", rng.below(100_000), w = 1 + rng.below(50) as usize).into_bytes(),
        _ => (0..1 + rng.below(60))
            .map(|_| b'a' + rng.below(26) as u8)
            .collect(),
    }
}

/// Every name of `dir` by readdir, without "." and "..".
fn listing(fs: &Fs, dir: Ino) -> BTreeMap<Vec<u8>, Ino> {
    let mut out = BTreeMap::new();
    let mut pos = 0;
    loop {
        let batch = fs.readdir(dir, pos, 512).unwrap();
        let Some(last) = batch.last() else {
            return out;
        };
        pos = last.next;
        for e in batch {
            if e.name != b"." && e.name != b".." {
                assert!(
                    out.insert(e.name.clone(), e.ino).is_none(),
                    "name listed twice"
                );
            }
        }
    }
}

/// Random operations on directory `d` of the image at `img`, remounting now and then;
/// returns the model (name -> inode).
fn churn(img: &Path, opts: &MountOptions, seed: u64, steps: usize) -> BTreeMap<Vec<u8>, Ino> {
    let o = Owner::default();
    let mut rng = Rng(seed);
    let mut fs = Fs::mount_path(img, opts.clone()).unwrap();
    let d = match fs.lookup(ROOT_INO, b"d") {
        Ok(a) => a.ino,
        Err(_) => fs.mkdir(ROOT_INO, b"d", 0o755, o).unwrap().ino,
    };
    let mut model = listing(&fs, d);
    for step in 0..steps {
        let n = name(&mut rng);
        match rng.below(10) {
            0..=4 => match fs.create(d, &n, 0o644, o) {
                Ok(a) => {
                    assert!(
                        model.insert(n.clone(), a.ino).is_none(),
                        "{step}: created twice"
                    );
                    fs.release(a.ino).unwrap();
                }
                Err(Error::Exists) => assert!(model.contains_key(&n), "{step}: phantom name"),
                Err(e) => panic!("{step}: create: {e}"),
            },
            5..=6 if !model.is_empty() => {
                let k = model
                    .keys()
                    .nth(rng.below(model.len() as u64) as usize)
                    .cloned();
                let k = k.unwrap();
                fs.unlink(d, &k).unwrap();
                model.remove(&k);
            }
            7 if !model.is_empty() => {
                // Rename within the directory, over an existing name half the time.
                let k = model
                    .keys()
                    .nth(rng.below(model.len() as u64) as usize)
                    .cloned();
                let k = k.unwrap();
                let to = if rng.below(2) == 0 {
                    model
                        .keys()
                        .nth(rng.below(model.len() as u64) as usize)
                        .cloned()
                        .unwrap()
                } else {
                    n.clone()
                };
                fs.rename(d, &k, d, &to).unwrap();
                // Two links of one file: rename does nothing (POSIX).
                if model.get(&to) != Some(&model[&k]) {
                    let ino = model.remove(&k).unwrap();
                    model.insert(to, ino);
                }
            }
            8 if !model.is_empty() => {
                // A second name for a file.
                let k = model
                    .keys()
                    .nth(rng.below(model.len() as u64) as usize)
                    .cloned();
                let ino = model[&k.unwrap()];
                match fs.link(ino, d, &n) {
                    Ok(_) => assert!(model.insert(n.clone(), ino).is_none()),
                    Err(Error::Exists) => assert!(model.contains_key(&n)),
                    Err(e) => panic!("{step}: link: {e}"),
                }
            }
            _ => {
                if rng.below(40) == 0 {
                    fs.unmount().unwrap();
                    fs = Fs::mount_path(img, opts.clone()).unwrap();
                }
            }
        }
        // A present name and an absent one.
        match model.get(&n) {
            Some(&ino) => assert_eq!(fs.lookup(d, &n).unwrap().ino, ino, "{step}"),
            None => assert_eq!(fs.lookup(d, &n), Err(Error::NotFound), "{step}"),
        }
        if let Some((k, &ino)) = model.iter().nth(rng.below(model.len() as u64) as usize) {
            assert_eq!(fs.lookup(d, k).unwrap().ino, ino, "{step}");
        }
    }
    assert_eq!(listing(&fs, d), model, "readdir against the model");
    fs.unmount().unwrap();
    model
}

fn fresh(td: &Path, name: &str, block_size: u32) -> std::path::PathBuf {
    fresh_sized(td, name, block_size, 64 << 20)
}

/// [`fresh`] of `size` bytes.
fn fresh_sized(td: &Path, name: &str, block_size: u32, size: u64) -> std::path::PathBuf {
    let img = td.join(name);
    let dev = FileDevice::create(&img, size).unwrap();
    let opts = MkfsOptions {
        block_size: Some(block_size),
        ..MkfsOptions::default()
    };
    format(&dev, &opts).unwrap();
    img
}

#[test]
fn digests_keep_a_large_directory_exact() {
    let td = tempfile::tempdir().unwrap();
    let tiny = MountOptions {
        // A quarter of this is each directory's digest budget: a few leaves' worth.
        icache_limit: 16 << 10,
        ..MountOptions::default()
    };
    let off = MountOptions {
        dir_digest: false,
        ..MountOptions::default()
    };
    for (i, (opts, bs)) in [
        (MountOptions::default(), 4096),
        (MountOptions::default(), 1024),
        (tiny, 1024),
        (off.clone(), 4096),
    ]
    .into_iter()
    .enumerate()
    {
        let img = fresh(td.path(), &format!("d{i}.img"), bs);
        let model = churn(&img, &opts, 0x5eed + i as u64, 6000);
        assert!(model.len() > 1000, "the directory grew to several leaves");
        common::assert_fsck_clean(&img);
        // The other setting reads the same directory.
        let other = if opts.dir_digest {
            off.clone()
        } else {
            MountOptions::default()
        };
        let fs = Fs::mount_path(&img, other).unwrap();
        let d = fs.lookup(ROOT_INO, b"d").unwrap().ino;
        assert_eq!(listing(&fs, d), model);
        fs.unmount().unwrap();
    }
}

/// The kernel makes a large htree directory; lanefs removes, creates, renames and links
/// in it through digests; e2fsck and the kernel read the result.
#[test]
fn digests_edit_a_kernel_made_directory() {
    let test = "digests_edit_a_kernel_made_directory";
    let td = tempfile::tempdir().unwrap();
    if !common::kernel_ready(test, td.path(), &[]) {
        return;
    }
    let img = common::mkfs_image(td.path(), "k.img", 64 << 20);
    let mnt = td.path().join("mnt");
    {
        let km = common::KernelMount::mount(&img, &mnt, "").expect("kernel mount rw");
        std::fs::create_dir(mnt.join("d")).unwrap();
        let mut rng = Rng(77);
        for _ in 0..3000 {
            let n = String::from_utf8(name(&mut rng)).unwrap();
            std::fs::write(mnt.join("d").join(n), b"").unwrap();
        }
        km.unmount().unwrap();
    }
    let model = churn(&img, &MountOptions::default(), 99, 4000);
    common::assert_fsck_clean(&img);
    let km = common::KernelMount::mount(&img, &mnt, "ro").expect("kernel mount ro");
    let mut seen: Vec<Vec<u8>> = std::fs::read_dir(mnt.join("d"))
        .unwrap()
        .map(|e| {
            use std::os::unix::ffi::OsStrExt;
            e.unwrap().file_name().as_bytes().to_vec()
        })
        .collect();
    seen.sort();
    let want: Vec<Vec<u8>> = model.keys().cloned().collect();
    km.unmount().unwrap();
    assert_eq!(seen, want, "the kernel lists what lanefs left");
}

/// A directory's digests are charged to the inode cache as they grow (the cache's limit
/// bounds them with everything else): the same creates with digests on hold more bytes in
/// the cache than with them off, by at least the digests' four bytes a name.
#[test]
fn digests_are_charged_to_the_inode_cache() {
    let td = tempfile::tempdir().unwrap();
    let mut charged = Vec::new();
    for (i, on) in [true, false].into_iter().enumerate() {
        let img = fresh(td.path(), &format!("c{i}.img"), 4096);
        let opts = MountOptions {
            dir_digest: on,
            ..MountOptions::default()
        };
        let fs = Fs::mount_path(&img, opts).unwrap();
        let d = fs
            .mkdir(ROOT_INO, b"d", 0o755, Owner::default())
            .unwrap()
            .ino;
        let n = 3_000;
        for k in 0..n {
            let f = fs
                .create(d, format!("file.{k}").as_bytes(), 0o644, Owner::default())
                .unwrap();
            fs.release(f.ino).unwrap();
        }
        let st = fs.diagnostics().icache_stats();
        assert_eq!(st.evictions, 0, "the default limit holds every inode here");
        charged.push(st.bytes);
        fs.unmount().unwrap();
    }
    assert!(
        charged[0] >= charged[1] + 4 * 3_000,
        "digests on {} bytes charged, off {}",
        charged[0],
        charged[1]
    );
}

/// A directory holds its htree index blocks (root and nodes) with its digests, and a probe
/// takes them from there. Goal: that changes nothing a two-level htree holds, through
/// node splits, a buffer cache so small that every other block is evicted all the time
/// (the held ones cannot be), and a remount. Method: a 1 KiB-block image, names of about
/// 200 bytes (four to a leaf, so a few hundred names fill the root and the tree grows a
/// second level); 2,500 creates, every third name unlinked, lookups of every name after,
/// then the listing, the kernel's view through debugfs (two index levels) and e2fsck.
#[test]
fn held_index_blocks_keep_a_two_level_htree_exact() {
    let td = tempfile::tempdir().unwrap();
    let img = fresh(td.path(), "two.img", 1024);
    let o = Owner::default();
    let opts = MountOptions {
        bufcache_limit: 256 << 10,
        ..MountOptions::default()
    };
    let long = |i: usize| format!("{i:06}-{}", "n".repeat(190)).into_bytes();
    let mut model = BTreeMap::new();
    {
        let fs = Fs::mount_path(&img, opts.clone()).unwrap();
        let d = fs.mkdir(ROOT_INO, b"d", 0o755, o).unwrap().ino;
        for i in 0..2500 {
            let a = fs.create(d, &long(i), 0o644, o).unwrap();
            fs.release(a.ino).unwrap();
            model.insert(long(i), a.ino);
        }
        for i in (0..2500).step_by(3) {
            fs.unlink(d, &long(i)).unwrap();
            model.remove(&long(i));
        }
        for i in 0..2500 {
            match model.get(&long(i)) {
                Some(&ino) => assert_eq!(fs.lookup(d, &long(i)).unwrap().ino, ino, "{i}"),
                None => assert_eq!(fs.lookup(d, &long(i)), Err(Error::NotFound), "{i}"),
            }
        }
        assert_eq!(listing(&fs, d), model);
        fs.unmount().unwrap();
    }
    let htree = common::debugfs(&img, "htree d").expect("debugfs htree");
    assert!(
        htree.contains("Indirect levels: 1"),
        "a two-level tree: {}",
        htree.lines().take(8).collect::<Vec<_>>().join("\n")
    );
    common::assert_fsck_clean(&img);
    let fs = Fs::mount_path(&img, opts).unwrap();
    let d = fs.lookup(ROOT_INO, b"d").unwrap().ino;
    assert_eq!(listing(&fs, d), model);
    fs.unmount().unwrap();
}

/// Leaves found through their digests' hints without the shard's lock
/// (`BufCache::get_hinted`) while other threads' work evicts them: three
/// threads create, unlink and look up names in their own directories of 1 KiB blocks under
/// the smallest buffer cache (1,024 blocks, whatever the limit asks; about 1,500 inode
/// table blocks in use), with commits every millisecond and a fourth thread syncing (a
/// synced leaf is clean, so evictable). A create or unlink written into a leaf that had
/// left the cache would be lost at the next read of the block: each thread checks every
/// name of its model after each round, then the listings, a remount and e2fsck. The race
/// itself (a hint's upgrade between an eviction's pick and its compare-exchange, a few
/// instructions) is too narrow for a run to hit; the unit test
/// `buf::tests::an_eviction_puts_back_a_block_taken_since_its_pick` puts a hint there.
#[test]
fn hinted_leaves_stay_exact_while_other_threads_evict() {
    let td = tempfile::tempdir().unwrap();
    // 16,384 inodes (mkfs's default ratio at 256 MiB), room for the threads' 9,000 names.
    let img = fresh_sized(td.path(), "evict.img", 1024, 256 << 20);
    let o = Owner::default();
    let opts = MountOptions {
        bufcache_limit: 256 << 10,
        commit_interval: std::time::Duration::from_millis(1),
        ..MountOptions::default()
    };
    let fs = Fs::mount_path(&img, opts.clone()).unwrap();
    let dirs: Vec<Ino> = (0..3)
        .map(|t| {
            fs.mkdir(ROOT_INO, format!("d{t}").as_bytes(), 0o755, o)
                .unwrap()
                .ino
        })
        .collect();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let models: Vec<BTreeMap<Vec<u8>, Ino>> = std::thread::scope(|s| {
        let syncer = s.spawn(|| {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                fs.sync().unwrap();
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
        });
        let workers: Vec<_> = dirs
            .iter()
            .enumerate()
            .map(|(t, &d)| {
                let fs = &fs;
                s.spawn(move || {
                    let mut rng = Rng(0x5eed + t as u64);
                    let mut model = BTreeMap::new();
                    for round in 0..10 {
                        for _ in 0..400 {
                            let n = format!("{t}-{:05}-{}", rng.below(3000), "x".repeat(40));
                            let n = n.into_bytes();
                            match model.get(&n) {
                                Some(_) if rng.below(2) == 0 => {
                                    fs.unlink(d, &n).unwrap();
                                    model.remove(&n);
                                }
                                Some(&ino) => assert_eq!(fs.lookup(d, &n).unwrap().ino, ino),
                                None => {
                                    let a = fs.create(d, &n, 0o644, o).unwrap();
                                    fs.release(a.ino).unwrap();
                                    model.insert(n, a.ino);
                                }
                            }
                        }
                        for (n, &ino) in &model {
                            assert_eq!(fs.lookup(d, n).unwrap().ino, ino, "round {round}");
                        }
                    }
                    model
                })
            })
            .collect();
        // Every worker joined before the syncer is stopped and any panic passed on (a
        // panic passed on first would leave the scope waiting for the syncer forever).
        let joined: Vec<_> = workers.into_iter().map(|w| w.join()).collect();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        syncer.join().unwrap();
        joined.into_iter().map(|m| m.unwrap()).collect()
    });
    assert!(
        fs.diagnostics().bufcache_stats().evicted > 0,
        "the buffer cache never evicted: the test checks nothing"
    );
    for (d, model) in dirs.iter().zip(&models) {
        assert_eq!(&listing(&fs, *d), model);
    }
    fs.unmount().unwrap();
    common::assert_fsck_clean(&img);
    let fs = Fs::mount_path(&img, opts).unwrap();
    for (t, model) in models.iter().enumerate() {
        let d = fs.lookup(ROOT_INO, format!("d{t}").as_bytes()).unwrap().ino;
        assert_eq!(&listing(&fs, d), model);
    }
    fs.unmount().unwrap();
}
