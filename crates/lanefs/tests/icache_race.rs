//! Goal: inode allocation and the inode cache stay exact when threads race to create,
//! look up, write, unlink and re-create the same and different names, under every
//! `ialloc=` and `icache=` policy, with a cache limit so small that inodes are evicted
//! all the time: no inode number is handed out twice, a lookup never returns a
//! half-built or freed inode (its attributes and contents are the file's), link counts
//! and bitmaps stay exact (`e2fsck -fn` and lanefs fsck clean after), and nothing dirty is
//! lost to eviction (every file's contents survive a remount).
//!
//! Method: 4 real threads (2 cores: they interleave at every lock) for a bounded number
//! of operations. Each thread owns a private directory and keeps a model of it (name ->
//! contents); all threads also fight over 8 names of one shared directory, where only the
//! outcomes POSIX allows are accepted. After the threads join, every live name in every
//! directory must have an inode number of its own. `LANEFS_SEED` fixes the choices.

mod common;

use lanefs::{Error, Fs, IallocPolicy, IcachePolicy, Ino, MountOptions, Owner, ROOT_INO};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Barrier};
use std::time::Duration;

const THREADS: usize = 4;
const OPS: usize = 1500;
const OWNER: Owner = Owner {
    uid: 0,
    gid: 0,
    umask: 0,
};

fn seed() -> u64 {
    std::env::var("LANEFS_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        })
}

/// Contents naming their file: the tag, repeated.
fn body(tag: u64, len: usize) -> Vec<u8> {
    tag.to_le_bytes()
        .iter()
        .copied()
        .cycle()
        .take(len)
        .collect()
}

fn opts(ialloc: IallocPolicy, icache: IcachePolicy) -> MountOptions {
    MountOptions {
        ialloc,
        icache,
        // A few inodes' worth: every insert past it sweeps.
        icache_limit: 8 << 10,
        commit_interval: Duration::from_millis(3),
        ..MountOptions::default()
    }
}

/// Read a whole file.
fn read_all(fs: &Fs, ino: Ino) -> Result<Vec<u8>, Error> {
    let size = fs.getattr(ino)?.size;
    let mut buf = vec![0u8; size as usize];
    let n = fs.read(ino, 0, &mut buf)?;
    buf.truncate(n);
    Ok(buf)
}

/// One worker: random operations on its own directory (checked against its model) and on
/// the shared one (checked for what a race allows). Returns its model.
fn worker(fs: &Fs, me: usize, own: Ino, shared: Ino, seed: u64) -> BTreeMap<String, Vec<u8>> {
    let mut rng = StdRng::seed_from_u64(seed ^ (me as u64).wrapping_mul(0x9E37_79B9));
    let mut model: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    for op in 0..OPS {
        let name = format!("f{}", rng.gen_range(0..24));
        let tag = ((me as u64) << 32) | op as u64;
        match rng.gen_range(0..10) {
            0..=2 => {
                let r = fs.create(own, name.as_bytes(), 0o644, OWNER);
                match (r, model.contains_key(&name)) {
                    (Ok(a), false) => {
                        let data = body(tag, 100 + (op % 7) * 700);
                        fs.write(a.ino, 0, &data).expect("write");
                        fs.release(a.ino).expect("release");
                        model.insert(name, data);
                    }
                    (Err(Error::Exists), true) => {}
                    (r, had) => panic!("create {name} (present: {had}): {r:?}"),
                }
            }
            3..=5 => match (fs.lookup(own, name.as_bytes()), model.get(&name)) {
                (Ok(a), Some(want)) => {
                    assert_eq!(a.nlink, 1, "{name}: link count");
                    let got = read_all(fs, a.ino).expect("read");
                    assert!(got == *want, "{name}: contents of another file");
                }
                (Err(Error::NotFound), None) => {}
                (r, want) => panic!("lookup {name} (present: {}): {r:?}", want.is_some()),
            },
            6 | 7 => match (fs.unlink(own, name.as_bytes()), model.remove(&name)) {
                (Ok(()), Some(_)) | (Err(Error::NotFound), None) => {}
                (r, had) => panic!("unlink {name} (present: {}): {r:?}", had.is_some()),
            },
            _ => shared_op(fs, shared, &mut rng, tag),
        }
    }
    model
}

/// A contended operation on the shared directory: any outcome a race allows, and a file
/// found there is whole (its contents name one writer's tag throughout).
fn shared_op(fs: &Fs, shared: Ino, rng: &mut StdRng, tag: u64) {
    let name = format!("s{}", rng.gen_range(0..8));
    match rng.gen_range(0..3) {
        0 => match fs.create(shared, name.as_bytes(), 0o644, OWNER) {
            Ok(a) => {
                fs.write(a.ino, 0, &body(tag, 64)).expect("write shared");
                fs.release(a.ino).expect("release shared");
            }
            Err(Error::Exists) => {}
            Err(e) => panic!("create shared {name}: {e:?}"),
        },
        1 => match fs.unlink(shared, name.as_bytes()) {
            Ok(()) | Err(Error::NotFound) => {}
            Err(e) => panic!("unlink shared {name}: {e:?}"),
        },
        _ => match fs.lookup(shared, name.as_bytes()) {
            Ok(a) => match read_all(fs, a.ino) {
                // Unlinked (and maybe freed) since the lookup: gone, never another file.
                Err(Error::NotFound) => {}
                Ok(d) => {
                    // Empty until its creator's write lands; else one tag throughout.
                    if let Some(first) = d.get(..8) {
                        let t = u64::from_le_bytes(first.try_into().expect("8 bytes"));
                        assert_eq!(d, body(t, d.len()), "shared {name}: torn contents");
                    }
                }
                Err(e) => panic!("read shared {name}: {e:?}"),
            },
            Err(Error::NotFound) => {}
            Err(e) => panic!("lookup shared {name}: {e:?}"),
        },
    }
}

/// Every name in the tree with its inode; panics if two names share an inode (nothing
/// here makes hard links).
fn all_names(fs: &Fs) -> HashMap<Ino, String> {
    let mut seen: HashMap<Ino, String> = HashMap::new();
    let mut todo = vec![(ROOT_INO, String::new())];
    while let Some((d, path)) = todo.pop() {
        for e in fs.readdir(d, 0, usize::MAX).expect("readdir") {
            if e.name == b"." || e.name == b".." {
                continue;
            }
            let p = format!("{path}/{}", String::from_utf8_lossy(&e.name));
            if let Some(other) = seen.insert(e.ino, p.clone()) {
                panic!("inode {} handed out twice: {other} and {p}", e.ino);
            }
            if e.kind == lanefs::FileType::Directory {
                todo.push((e.ino, p));
            }
        }
    }
    seen
}

fn race(ialloc: IallocPolicy, icache: IcachePolicy) {
    let td = tempfile::tempdir().expect("tempdir");
    let img = common::mkfs_image(td.path(), "race.img", 64 << 20);
    let seed = seed();
    eprintln!("{ialloc:?}/{icache:?}: LANEFS_SEED={seed}");
    let fs = Fs::mount_path(&img, opts(ialloc, icache)).expect("mount");
    let shared = fs
        .mkdir(ROOT_INO, b"shared", 0o755, OWNER)
        .expect("mkdir")
        .ino;
    let dirs: Vec<Ino> = (0..THREADS)
        .map(|t| {
            let n = format!("own{t}");
            fs.mkdir(ROOT_INO, n.as_bytes(), 0o755, OWNER)
                .expect("mkdir")
                .ino
        })
        .collect();
    let start = Arc::new(Barrier::new(THREADS));
    let models: Vec<BTreeMap<String, Vec<u8>>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..THREADS)
            .map(|t| {
                let (fs, start, own) = (&fs, start.clone(), dirs[t]);
                s.spawn(move || {
                    start.wait();
                    worker(fs, t, own, shared, seed)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("worker")).collect()
    });
    let stats = fs.diagnostics().icache_stats();
    assert!(
        stats.evictions > 0,
        "the tiny limit never evicted: {stats:?}"
    );
    all_names(&fs);
    fs.unmount().expect("unmount");
    common::assert_fsck_clean(&img);
    if let Err(e) = common::lanefs_fsck(&img) {
        panic!("lanefs fsck: {e}");
    }
    // Nothing was lost to eviction: a fresh mount reads every file as its owner left it.
    let fs = Fs::mount_path(&img, opts(ialloc, icache)).expect("remount");
    for (t, model) in models.iter().enumerate() {
        let names: Vec<String> = fs
            .readdir(dirs[t], 0, usize::MAX)
            .expect("readdir")
            .into_iter()
            .map(|e| String::from_utf8(e.name).expect("utf-8"))
            .filter(|n| n != "." && n != "..")
            .collect();
        let want: Vec<&String> = model.keys().collect();
        let mut got: Vec<&String> = names.iter().collect();
        got.sort();
        assert_eq!(got, want, "own{t}: names after remount");
        for (name, data) in model {
            let a = fs
                .lookup(dirs[t], name.as_bytes())
                .expect("lookup after remount");
            assert!(
                read_all(&fs, a.ino).expect("read") == *data,
                "own{t}/{name}"
            );
        }
    }
    fs.unmount().expect("unmount");
}

#[test]
fn optimistic_allocation_with_the_bucket_cache() {
    race(IallocPolicy::Optimistic, IcachePolicy::Bucket);
}

#[test]
fn locked_allocation_with_the_global_cache() {
    race(IallocPolicy::Locked, IcachePolicy::Global);
}

#[test]
fn optimistic_allocation_with_the_papaya_cache() {
    race(IallocPolicy::Optimistic, IcachePolicy::Papaya);
}

/// The same inodes looked up and written by many threads at once while the cache
/// evicts: each write lands in the one copy, so every byte is there after a remount (a
/// second in-memory copy would lose the other copy's writes and size).
#[test]
fn concurrent_lookups_of_one_inode_share_one_copy() {
    const FILES: usize = 16;
    const ROUNDS: usize = 64;
    let td = tempfile::tempdir().expect("tempdir");
    let img = common::mkfs_image(td.path(), "one.img", 32 << 20);
    for icache in [
        IcachePolicy::Bucket,
        IcachePolicy::Global,
        IcachePolicy::Papaya,
    ] {
        let fs = Fs::mount_path(&img, opts(IallocPolicy::Optimistic, icache)).expect("mount");
        let names: Vec<String> = (0..FILES).map(|i| format!("n{i}")).collect();
        for n in &names {
            let a = fs
                .create(ROOT_INO, n.as_bytes(), 0o644, OWNER)
                .expect("create");
            fs.release(a.ino).expect("release");
        }
        std::thread::scope(|s| {
            for t in 0..THREADS {
                let (fs, names) = (&fs, &names);
                s.spawn(move || {
                    for round in 0..ROUNDS {
                        for n in names {
                            let a = fs.lookup(ROOT_INO, n.as_bytes()).expect("lookup");
                            let off = ((round * THREADS + t) * 512) as u64;
                            fs.write(a.ino, off, &[t as u8 + 1]).expect("write");
                        }
                    }
                });
            }
        });
        assert!(
            fs.diagnostics().icache_stats().evictions > 0,
            "{icache:?}: nothing evicted"
        );
        fs.unmount().expect("unmount");
        common::assert_fsck_clean(&img);
        let fs = Fs::mount_path(&img, MountOptions::default()).expect("remount");
        for n in &names {
            let a = fs.lookup(ROOT_INO, n.as_bytes()).expect("lookup");
            let d = read_all(&fs, a.ino).expect("read");
            assert_eq!(
                d.len(),
                (ROUNDS * THREADS - 1) * 512 + 1,
                "{icache:?} {n}: size"
            );
            for round in 0..ROUNDS {
                for t in 0..THREADS {
                    let off = (round * THREADS + t) * 512;
                    assert_eq!(d[off], t as u8 + 1, "{icache:?} {n}: byte {off} lost");
                }
            }
            fs.unlink(ROOT_INO, n.as_bytes()).expect("unlink");
        }
        fs.unmount().expect("unmount");
    }
}

/// A fresh 128 MiB image (in the returned directory, which must outlive the mount)
/// mounted with `icache` and an inode cache of `limit` bytes.
fn mount_limited(
    icache: IcachePolicy,
    limit: u64,
) -> (tempfile::TempDir, std::path::PathBuf, Arc<Fs>) {
    let td = tempfile::tempdir().expect("tempdir");
    let img = common::mkfs_image(td.path(), "limited.img", 128 << 20);
    let o = MountOptions {
        icache,
        icache_limit: limit,
        ..MountOptions::default()
    };
    let fs = Fs::mount_path(&img, o).expect("mount");
    (td, img, fs)
}

/// Create `files` empty files `f0`, `f1`, ... in `dir`, closing each.
fn create_closed(fs: &Fs, dir: Ino, files: usize) {
    for i in 0..files {
        let a = fs
            .create(dir, format!("f{i}").as_bytes(), 0o644, OWNER)
            .expect("create");
        fs.release(a.ino).expect("release");
    }
}

/// Goal: a create run far larger than the inode cache stays under the cache's limit
/// (issue 12: "a create run stays under the configured cache limit"). Two threads each
/// create 12,000 empty files in their own directory under a 1 MiB limit (about 1,500
/// inodes); the cache's high-water mark, as its limit checks count it, may pass the limit
/// only by what those counts lag (1/16 of the limit) and the inodes in use at that moment.
#[test]
fn create_run_stays_under_the_limit() {
    const FILES: usize = 12_000;
    const LIMIT: u64 = 1 << 20;
    for icache in [
        IcachePolicy::Bucket,
        IcachePolicy::Global,
        IcachePolicy::Papaya,
    ] {
        let (_td, img, fs) = mount_limited(icache, LIMIT);
        let dirs: Vec<Ino> = (0..2)
            .map(|t| {
                let n = format!("d{t}");
                fs.mkdir(ROOT_INO, n.as_bytes(), 0o755, OWNER)
                    .expect("mkdir")
                    .ino
            })
            .collect();
        std::thread::scope(|s| {
            for &d in &dirs {
                let fs = &fs;
                s.spawn(move || create_closed(fs, d, FILES));
            }
        });
        let st = fs.diagnostics().icache_stats();
        assert!(st.evictions as usize > FILES, "{icache:?}: {st:?}");
        assert!(
            st.peak_bytes <= LIMIT + LIMIT / 8,
            "{icache:?}: the cache held {} bytes at its peak, limit {LIMIT}: {st:?}",
            st.peak_bytes
        );
        assert!(
            st.peak_bytes >= LIMIT / 2,
            "{icache:?}: peak not tracked: {st:?}"
        );
        fs.unmount().expect("unmount");
        common::assert_fsck_clean(&img);
    }
}

/// Inodes changed in a running transaction stay cached until it commits (their stores are
/// staged for the commit), but a run of changes to many inodes does not hold the cache
/// far past its limit: one thread chmods 12,000 files (8 MB of inodes) under a 1 MiB
/// limit (about 1,500 inodes) and a commit interval longer than the test. A sweep that
/// cannot get below the limit wakes the commit thread, whose commit makes the staged
/// inodes evictable; what the thread brings in while that commit runs is over the limit
/// (up to 0.4x of it in 15 runs here), so the bound checked is 2x. Without the wake-up
/// the whole run stayed cached (7.6x).
#[test]
fn chmod_run_stays_under_the_limit() {
    const FILES: usize = 12_000;
    const LIMIT: u64 = 1 << 20;
    let td = tempfile::tempdir().expect("tempdir");
    let img = common::mkfs_image(td.path(), "chmod.img", 128 << 20);
    let o = MountOptions {
        icache_limit: LIMIT,
        commit_interval: std::time::Duration::from_secs(3600),
        ..MountOptions::default()
    };
    let fs = Fs::mount_path(&img, o).expect("mount");
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, OWNER).expect("mkdir").ino;
    let mut inos = Vec::new();
    for i in 0..FILES {
        let a = fs
            .create(d, format!("f{i}").as_bytes(), 0o644, OWNER)
            .expect("create");
        fs.release(a.ino).expect("release");
        inos.push(a.ino);
    }
    fs.sync().expect("sync");
    let before = fs.diagnostics().icache_stats();
    for &ino in &inos {
        let set = lanefs::SetAttr {
            perm: Some(0o600),
            ..Default::default()
        };
        fs.setattr(ino, &set).expect("chmod");
    }
    let st = fs.diagnostics().icache_stats();
    assert!(st.evictions > before.evictions, "{st:?}");
    assert!(
        st.peak_bytes <= 2 * LIMIT,
        "the cache held {} bytes at its peak, limit {LIMIT}: {st:?}",
        st.peak_bytes
    );
    fs.unmount().expect("unmount");
    common::assert_fsck_clean(&img);
}

/// A file created and closed is not referenced for the sweep (only lookups mark an inode,
/// as the kernel's `iput` puts a new inode on its LRU without `I_REFERENCED`): the sweep
/// evicts it at its first visit, so inspections stay about one per eviction. (When a
/// close marked the inode, every such file took two visits.)
#[test]
fn created_and_closed_files_go_at_the_first_visit() {
    const FILES: usize = 8_000;
    for icache in [
        IcachePolicy::Bucket,
        IcachePolicy::Global,
        IcachePolicy::Papaya,
    ] {
        let (_td, _img, fs) = mount_limited(icache, 1 << 20);
        let d = fs.mkdir(ROOT_INO, b"d", 0o755, OWNER).expect("mkdir").ino;
        create_closed(&fs, d, FILES);
        let st = fs.diagnostics().icache_stats();
        assert!(st.evictions as usize > FILES / 2, "{icache:?}: {st:?}");
        assert!(
            st.inspections <= st.evictions + st.evictions / 4 + 64,
            "{icache:?}: {} inspections for {} evictions",
            st.inspections,
            st.evictions
        );
        fs.unmount().expect("unmount");
    }
}

/// A file's extent map loaded by a read is charged to the inode cache when it is loaded
/// (before, only a store charged what an inode grew, so a file read and never changed
/// stayed charged as the bare inode it was when its lookup cached it): after a remount,
/// reading a file of 1,500 extents raises the cache's bytes by at least 16 bytes an
/// extent.
#[test]
fn extent_maps_loaded_by_reads_are_charged() {
    const EXTENTS: u64 = 1_500;
    let (_td, img, fs) = mount_limited(IcachePolicy::Bucket, 64 << 20);
    let f = fs.create(ROOT_INO, b"frag", 0o644, OWNER).expect("create");
    for k in 0..EXTENTS {
        // Every other block: each written block is an extent of its own.
        fs.write(f.ino, k * 2 * 4096, &[0xa5; 4096]).expect("write");
    }
    fs.release(f.ino).expect("release");
    fs.unmount().expect("unmount");
    let fs = Fs::mount_path(&img, MountOptions::default()).expect("remount");
    let ino = fs.lookup(ROOT_INO, b"frag").expect("lookup").ino;
    let before = fs.diagnostics().icache_stats().bytes;
    let mut buf = vec![0u8; 4096];
    assert_eq!(fs.read(ino, 0, &mut buf).expect("read"), 4096);
    assert_eq!(buf, vec![0xa5; 4096]);
    let after = fs.diagnostics().icache_stats().bytes;
    assert!(
        after >= before + 16 * EXTENTS,
        "{before} bytes charged before the read, {after} after"
    );
    fs.unmount().expect("unmount");
    common::assert_fsck_clean(&img);
}
