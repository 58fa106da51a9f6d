//! Goal: FALLOC_FL_COLLAPSE_RANGE and FALLOC_FL_INSERT_RANGE do what the kernel's ext4
//! does, step for step: the same bytes, sizes and errors; the image lanefs leaves is
//! clean for `e2fsck -fn` and reads back the same through the kernel and the mount.
//!
//! Method: one sequence of steps (writes, `xfs_io -c "fcollapse OFF LEN"` and
//! `"finsert OFF LEN"` over extents, holes and preallocated blocks past the end, punches,
//! truncations, dirty data shifted before any write-back, an inline file, and the errors:
//! unaligned ranges, ranges reaching the end, EFBIG, append-only and immutable files)
//! runs on a kernel ext4 loop mount of a `mkfs.ext4` image and on a copy of the image
//! through lanefs; after each step the result (the error text), the size and a hash of
//! the bytes are one line, and the lines must be equal. `e2fsck -fn` then checks both
//! images, the kernel mounts lanefs's and reads the files, and `lanefs mount` serves them.
//!
//! Linux's FUSE (fuse_file_fallocate, up to 6.18 at least) answers both modes EOPNOTSUPP
//! itself and never sends them to a daemon, so `xfs_io` on a lanefs mount cannot shift.
//! Where the kernel refuses them, the sequence runs through the engine (the calls
//! `lanefs mount` makes for the modes) on the image, and the mount is checked to refuse
//! them and change nothing; where a kernel sends them, the same sequence runs through the
//! mount too and its lines must equal the kernel's.

mod fuse_common;

use fuse_common::*;
use lanefs::{FallocMode, Fs, Ino, MountOptions, Owner, SetAttr, ROOT_INO};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::Command;

const K: u64 = 4096;
/// ext4's s_maxbytes at 4 KiB blocks: 2^32 - 1 blocks.
const MAX: u64 = ((1 << 32) - 1) * K;

/// `FS_APPEND_FL` and `FS_IMMUTABLE_FL`.
const FL_APPEND: u32 = 0x20;
const FL_IMMUTABLE: u32 = 0x10;

/// One step on file `f`.
#[derive(Debug, Clone, Copy)]
enum Step {
    /// A buffered write of a pattern.
    Data(&'static str, u64, u64, u64),
    /// An `xfs_io` fallocate command: `fcollapse`, `finsert`, `fpunch`, `falloc -k`.
    Io(&'static str, &'static str, u64, u64),
    Truncate(&'static str, u64),
    /// `chattr` with `+a`, `-a`, `+i`, `-i`.
    Chattr(&'static str, &'static str),
    Fsync(&'static str),
}

#[rustfmt::skip]
const STEPS: &[Step] = &[
    // One file of 64 blocks: an extent of 32, a hole, single blocks with holes between.
    Step::Data("f", 0, 32 * K, 1),
    Step::Data("f", 40 * K, K, 2),
    Step::Data("f", 42 * K, K, 3),
    Step::Data("f", 44 * K, K, 4),
    Step::Data("f", 46 * K, K, 5),
    Step::Data("f", 48 * K, 16 * K, 6),
    Step::Fsync("f"),
    Step::Io("f", "fcollapse", 8 * K, 4 * K),
    Step::Io("f", "finsert", 4 * K, 3 * K),
    Step::Io("f", "fcollapse", 0, K),
    Step::Io("f", "finsert", 0, 2 * K),
    Step::Io("f", "fcollapse", 30 * K, 12 * K),
    Step::Io("f", "fpunch", 10 * K, 5 * K),
    Step::Io("f", "fcollapse", 9 * K, 7 * K),
    Step::Io("f", "finsert", 20 * K, 64 * K),
    // Dirty data shifted before any write-back, then preallocated blocks past the end.
    Step::Data("f", 2 * K, 10 * K, 7),
    Step::Io("f", "fcollapse", 4 * K, 2 * K),
    Step::Data("f", 60 * K, 3 * K, 8),
    Step::Io("f", "finsert", 58 * K, 4 * K),
    Step::Io("f", "falloc -k", 200 * K, 8 * K),
    Step::Io("f", "fcollapse", 16 * K, 8 * K),
    Step::Io("f", "finsert", 16 * K, 8 * K),
    Step::Truncate("f", 150 * K),
    Step::Io("f", "finsert", 149 * K, K),
    // Refusals.
    Step::Io("f", "fcollapse", 100, K),
    Step::Io("f", "fcollapse", 0, K - 1),
    Step::Io("f", "fcollapse", K, 150 * K),
    Step::Io("f", "fcollapse", 149 * K, 2 * K),
    Step::Io("f", "fcollapse", 0, MAX + K),
    Step::Io("f", "finsert", 151 * K, K),
    Step::Io("f", "finsert", 152 * K, K),
    Step::Io("f", "finsert", 100, K),
    Step::Io("f", "finsert", 0, MAX),
    Step::Io("f", "finsert", K, MAX - 150 * K),
    Step::Io("f", "finsert", 100, MAX - 200 * K),
    Step::Chattr("f", "+a"),
    Step::Io("f", "fcollapse", 0, K),
    Step::Io("f", "finsert", 0, K),
    Step::Chattr("f", "-a"),
    Step::Chattr("f", "+i"),
    Step::Io("f", "fcollapse", 0, K),
    Step::Io("f", "finsert", 0, K),
    Step::Chattr("f", "-i"),
    Step::Io("f", "fcollapse", 0, K),
    // An inline file (the image has inline_data): it moves to a block first.
    Step::Data("small", 0, 40, 9),
    Step::Io("small", "finsert", 0, K),
    Step::Data("tiny", 0, 30, 10),
    Step::Io("tiny", "fcollapse", 0, K),
    Step::Fsync("small"),
];

/// A step's line: what it was, its result, then the file's size, 512-byte blocks and
/// bytes' hash. Not the blocks after a buffered write: ext4 counts what its delayed
/// allocation reserved, and maps the blocks (and the tree block they may need) at
/// write-back; after a shift, which writes back first, the counts must agree.
fn line(step: &Step, result: &str, data: &[u8], blocks: u64) -> String {
    let (size, hash) = (data.len(), fnv(data));
    let blocks = match step {
        Step::Data(..) => "-".to_string(),
        _ => blocks.to_string(),
    };
    format!("{step:?}: {result}; size {size} blocks {blocks} hash {hash:016x}")
}

/// The text of an errno, as `perror` prints it.
fn strerror(errno: i32) -> String {
    let s = std::io::Error::from_raw_os_error(errno).to_string();
    s.split(" (os error").next().unwrap_or(&s).to_string()
}

fn pattern(seed: u64, len: u64) -> Vec<u8> {
    (0..len)
        .map(|k| ((k.wrapping_mul(2654435761) ^ seed.wrapping_mul(97)) >> 3) as u8 | 1)
        .collect()
}

/// Run the steps on a mounted directory (the kernel's ext4, or a lanefs mount) with
/// `xfs_io` and `chattr`: one line each.
fn run_on_dir(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for step in STEPS {
        let (name, result) = match *step {
            Step::Data(name, off, len, seed) => {
                let f = std::fs::OpenOptions::new()
                    .create(true)
                    .write(true)
                    .truncate(false)
                    .open(dir.join(name))
                    .unwrap();
                let r = f.write_all_at(&pattern(seed, len), off);
                (
                    name,
                    r.map_or_else(
                        |e| strerror(e.raw_os_error().unwrap_or(0)),
                        |()| "ok".into(),
                    ),
                )
            }
            Step::Io(name, cmd, off, len) => (
                name,
                tool(dir, "xfs_io", &["-c", &format!("{cmd} {off} {len}"), name]),
            ),
            Step::Truncate(name, size) => (
                name,
                tool(dir, "xfs_io", &["-c", &format!("truncate {size}"), name]),
            ),
            Step::Chattr(name, flag) => (name, tool(dir, "chattr", &[flag, name])),
            Step::Fsync(name) => (name, tool(dir, "xfs_io", &["-c", "fsync", name])),
        };
        let mut data = std::fs::read(dir.join(name)).unwrap();
        if name != "f" && matches!(step, Step::Io(..)) {
            // Linux 6.18's ext4 reads a file that was inline as zeros after an insert
            // (the inode in memory still says inline) until the inode leaves its cache;
            // the image is right. Read what it stored.
            let fresh = fresh_read(&dir.join(name));
            if fresh != data {
                println!("NOTE {step:?}: the kernel read zeros until its inode cache was dropped");
            }
            data = fresh;
        }
        use std::os::unix::fs::MetadataExt;
        let blocks = std::fs::metadata(dir.join(name)).unwrap().blocks();
        out.push(line(step, &result, &data, blocks));
    }
    out
}

/// `path`'s bytes read after `sync` and `drop_caches` (the inode read again).
fn fresh_read(path: &Path) -> Vec<u8> {
    let _ = run(&mut Command::new("sync"));
    std::fs::write("/proc/sys/vm/drop_caches", "3").unwrap();
    std::fs::read(path).unwrap()
}

/// Run a tool in `dir`: "ok", or its message's text after the last ": " (`perror`'s).
fn tool(dir: &Path, prog: &str, args: &[&str]) -> String {
    let o = run(Command::new(prog).args(args).current_dir(dir));
    let err = String::from_utf8_lossy(&o.stderr).trim().to_string();
    if o.status.success() && err.is_empty() {
        return "ok".into();
    }
    err.rsplit(": ").next().unwrap_or(&err).to_string()
}

/// Run the steps on `img` through the engine, as `lanefs mount` calls it for each.
fn run_on_engine(img: &Path) -> Vec<String> {
    let fs = Fs::mount_path(img, MountOptions::default()).unwrap();
    let mut out = Vec::new();
    for step in STEPS {
        let name = match *step {
            Step::Data(n, ..) | Step::Io(n, ..) | Step::Truncate(n, _) => n,
            Step::Chattr(n, _) | Step::Fsync(n) => n,
        };
        let ino = match fs.lookup(ROOT_INO, name.as_bytes()) {
            Ok(a) => a.ino,
            Err(_) => {
                fs.create(ROOT_INO, name.as_bytes(), 0o644, Owner::default())
                    .unwrap()
                    .ino
            }
        };
        let r = engine_step(&fs, ino, step);
        let result = r.map_or_else(|e| strerror(e.errno()), |()| "ok".into());
        let blocks = fs.getattr(ino).unwrap().blocks;
        out.push(line(step, &result, &read_all(&fs, ino), blocks));
    }
    fs.unmount().unwrap();
    out
}

fn engine_step(fs: &Fs, ino: Ino, step: &Step) -> lanefs::Result<()> {
    match *step {
        Step::Data(_, off, len, seed) => fs.write(ino, off, &pattern(seed, len)).map(|_| ()),
        Step::Io(_, "fcollapse", off, len) => fs.collapse_range(ino, off, len),
        Step::Io(_, "finsert", off, len) => fs.insert_range(ino, off, len),
        Step::Io(_, cmd, off, len) => {
            let mode = FallocMode {
                keep_size: true,
                punch_hole: cmd == "fpunch",
                ..FallocMode::default()
            };
            assert!(cmd == "fpunch" || cmd == "falloc -k", "{cmd}");
            fs.fallocate(ino, mode, off, len)
        }
        Step::Truncate(_, size) => {
            let set = SetAttr {
                size: Some(size),
                ..SetAttr::default()
            };
            fs.setattr(ino, &set).map(|_| ())
        }
        Step::Chattr(_, flag) => {
            let bit = if flag.ends_with('a') {
                FL_APPEND
            } else {
                FL_IMMUTABLE
            };
            let now = fs.get_flags(ino)?.bits();
            let new = if flag.starts_with('+') {
                now | bit
            } else {
                now & !bit
            };
            fs.set_flags(ino, lanefs::InodeFlags::from_bits_retain(new))
                .map(|_| ())
        }
        Step::Fsync(_) => fs.fsync(ino, false),
    }
}

fn read_all(fs: &Fs, ino: Ino) -> Vec<u8> {
    let mut b = vec![0u8; fs.getattr(ino).unwrap().size as usize];
    let mut n = 0;
    while n < b.len() {
        let k = fs.read(ino, n as u64, &mut b[n..]).unwrap();
        assert!(k > 0);
        n += k;
    }
    b
}

/// Hashes of the files the steps touch, under `dir`.
fn hashes(dir: &Path) -> Vec<String> {
    let mut names: Vec<&str> = STEPS
        .iter()
        .map(|s| match *s {
            Step::Data(n, ..) | Step::Io(n, ..) | Step::Truncate(n, _) => n,
            Step::Chattr(n, _) | Step::Fsync(n) => n,
        })
        .collect();
    names.sort_unstable();
    names.dedup();
    names
        .iter()
        .map(|n| {
            let d = std::fs::read(dir.join(n)).unwrap();
            format!("{n} {} {:016x}", d.len(), fnv(&d))
        })
        .collect()
}

/// `mkfs.ext4` with 4 KiB blocks and inline_data.
fn mkfs_ext4(img: &Path) {
    std::fs::File::create(img)
        .unwrap()
        .set_len(64 << 20)
        .unwrap();
    let out = run(Command::new("mkfs.ext4")
        .args(["-q", "-F", "-b", "4096", "-O", "inline_data"])
        .arg(img));
    assert!(
        out.status.success(),
        "mkfs.ext4: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Mount `img` read-write with the kernel's ext4, run `f` on it, unmount.
fn on_kernel<T>(img: &Path, dir: &Path, f: impl FnOnce(&Path) -> T) -> T {
    kernel_mount_with(img, dir, "loop", f)
}

fn ready(test: &str) -> bool {
    if !fuse_ready(test) {
        return false;
    }
    for t in ["xfs_io", "mkfs.ext4", "chattr"] {
        let ok = Command::new("sh")
            .arg("-c")
            .arg(format!("command -v {t}"))
            .output();
        if !ok.is_ok_and(|o| o.status.success()) {
            return skip(test, &format!("{t} not installed (xfsprogs, e2fsprogs)"));
        }
    }
    true
}

/// Whether this kernel's FUSE sends FALLOC_FL_COLLAPSE_RANGE to the daemon: a collapse
/// of one block of a two-block file on the mount at `dir`, checked by its effect.
fn fuse_sends_shifts(dir: &Path) -> bool {
    let p = dir.join("probe");
    std::fs::write(&p, [[1u8; 4096], [2u8; 4096]].concat()).unwrap();
    let r = tool(dir, "xfs_io", &["-c", "fcollapse 0 4096", "probe"]);
    let after = std::fs::read(&p).unwrap();
    std::fs::remove_file(&p).unwrap();
    if r == "ok" {
        assert_eq!(after, vec![2u8; 4096], "a collapse through the mount");
        return true;
    }
    assert_eq!(r, strerror(libc::EOPNOTSUPP), "the kernel's refusal");
    assert_eq!(after.len(), 8192, "a refused collapse changed the file");
    false
}

#[test]
fn shifts_match_kernel_ext4() {
    let test = "shifts_match_kernel_ext4";
    if !ready(test) {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let (img, kimg) = (t.path().join("l.img"), t.path().join("k.img"));
    mkfs_ext4(&kimg);
    std::fs::copy(&kimg, &img).unwrap();

    let want = on_kernel(&kimg, &t.path().join("k"), run_on_dir);
    e2fsck_clean(&kimg);
    let got = run_on_engine(&img);
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(
            g, w,
            "step {k}: lanefs (left) and kernel ext4 (right) differ"
        );
    }
    assert_eq!(got.len(), want.len());
    e2fsck_clean(&img);
    assert!(want
        .iter()
        .any(|l| l.contains("Io(\"f\", \"fcollapse\"") && l.contains(": ok;")));

    // What lanefs stored, as the kernel and the mount read it.
    let kernel_view = with_kernel_mount(&kimg, &t.path().join("kr"), hashes);
    let lanefs_view = with_kernel_mount(&img, &t.path().join("lr"), hashes);
    assert_eq!(
        lanefs_view, kernel_view,
        "the kernel reads lanefs's image differently"
    );
    let m = Mount::new(&img, &t.path().join("mnt"), "");
    assert_eq!(
        hashes(&m.dir),
        kernel_view,
        "the mount reads its image differently"
    );

    // Through the mount: where the kernel sends the modes, the whole sequence again on a
    // fresh image; where it refuses them, nothing reaches the file.
    let sends = fuse_sends_shifts(&m.dir);
    m.umount();
    e2fsck_clean(&img);
    if !sends {
        println!(
            "NOTE {test}: this kernel's FUSE refuses FALLOC_FL_COLLAPSE_RANGE and \
             FALLOC_FL_INSERT_RANGE before asking the daemon (EOPNOTSUPP): the sequence ran \
             through the engine"
        );
        return;
    }
    let fimg = t.path().join("f.img");
    std::fs::copy(&kimg, &fimg).unwrap();
    let m = Mount::new(&fimg, &t.path().join("fmnt"), "");
    let through = run_on_dir(&m.dir);
    m.umount();
    for (k, (g, w)) in through.iter().zip(&want).enumerate() {
        assert_eq!(
            g, w,
            "step {k}: the mount (left) and kernel ext4 (right) differ"
        );
    }
    e2fsck_clean(&fimg);
}

/// Blocks preallocated near the last logical block: an insert that would move them past
/// it is EINVAL on both. The kernel's ext4 grows the size before its shift fails and keeps
/// the growth ("Expand file to avoid data loss if there is error while shifting", as its
/// shift may stop half way); lanefs shifts in one transaction and changes nothing.
#[test]
fn insert_past_the_last_block_is_einval() {
    let test = "insert_past_the_last_block_is_einval";
    if !ready(test) {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let (img, kimg) = (t.path().join("l.img"), t.path().join("k.img"));
    mkfs_ext4(&kimg);
    std::fs::copy(&kimg, &img).unwrap();
    let near_end = MAX - 2 * K;
    let kernel = on_kernel(&kimg, &t.path().join("k"), |d| {
        std::fs::write(d.join("g"), pattern(1, 16 * K)).unwrap();
        let a = tool(
            d,
            "xfs_io",
            &["-c", &format!("falloc -k {near_end} {K}"), "g"],
        );
        let b = tool(d, "xfs_io", &["-c", &format!("finsert 0 {}", 2 * K), "g"]);
        let c = tool(d, "xfs_io", &["-c", &format!("finsert 0 {K}"), "g"]);
        (a, b, c, std::fs::metadata(d.join("g")).unwrap().len())
    });
    e2fsck_clean(&kimg);
    let fs = Fs::mount_path(&img, MountOptions::default()).unwrap();
    let g = fs
        .create(ROOT_INO, b"g", 0o644, Owner::default())
        .unwrap()
        .ino;
    fs.write(g, 0, &pattern(1, 16 * K)).unwrap();
    let keep = FallocMode {
        keep_size: true,
        ..FallocMode::default()
    };
    fs.fallocate(g, keep, near_end, K).unwrap();
    let b = fs
        .insert_range(g, 0, 2 * K)
        .map_err(|e| strerror(e.errno()));
    assert_eq!(
        fs.getattr(g).unwrap().size,
        16 * K,
        "a refused insert changed the size"
    );
    fs.insert_range(g, 0, K).unwrap();
    let size = fs.getattr(g).unwrap().size;
    fs.release(g).unwrap();
    fs.unmount().unwrap();
    e2fsck_clean(&img);
    assert_eq!((kernel.0.as_str(), kernel.2.as_str()), ("ok", "ok"));
    assert_eq!(b, Err(kernel.1.clone()), "the refusal");
    assert_eq!(kernel.1, strerror(libc::EINVAL));
    // The kernel's size: 16 blocks, 2 more from the failed insert, 1 from the good one.
    println!("{test}: kernel size {} (lanefs {size})", kernel.3);
    assert_eq!(size, 17 * K);
    assert!(
        kernel.3 == 17 * K || kernel.3 == 19 * K,
        "kernel size {}",
        kernel.3
    );
}
