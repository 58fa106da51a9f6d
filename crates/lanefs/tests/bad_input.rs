//! Goal: nothing read from a device can panic lanefs or make it hang. A corrupt image gives a
//! typed error naming the damaged structure (or mounts and reports errors on the damaged
//! parts), `lanefs::fsck::check` reports instead of panicking, unknown features are refused
//! or mounted read-only as the kernel does, and a failing device gives `Error::Io` while
//! data committed before the failure stays readable.
//! Method: lanefs populates a 64 MiB `mkfs.ext4` image (two groups; files, symlinks, a
//! FIFO, nested directories, a 2000-entry htree directory, a file of 1500 extents with a
//! depth-2 tree), e2fsck checks it. Each case damages a copy in memory (truncation, field
//! values in the superblock, group descriptors, bitmaps, inodes, extent blocks, directory
//! and htree blocks, each with and without a recomputed checksum), then mounts it, walks
//! and modifies the whole tree, and runs fsck, in a thread with a 20 s limit.
//! `damage_on_1k_blocks` and `damage_on_ext3` build the same tree on a 1 KiB-block ext4
//! image and on an ext3 image (block maps, no checksums) and run a sample of the same
//! kinds of damage (all the indirect-block cases on ext3).

mod common;

use lanefs::internals::disk::dir::{self as dd, DX_ROOT_COUNT_OFF};
use lanefs::internals::disk::extent::{self, Node};
use lanefs::internals::disk::group::{bitmap_csum, GroupDesc};
use lanefs::internals::disk::inode::DiskInode;
use lanefs::internals::disk::superblock::Superblock;
use lanefs::internals::disk::{le16, le32, put16, put32};
use lanefs::{
    BlockDevice, Error, FileType, Fs, Ino, MemDevice, MountOptions, Owner, SetAttr, ROOT_INO,
};
use rand::rngs::StdRng;
use rand::{RngCore, SeedableRng};
use std::collections::HashSet;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

thread_local! {
    /// The block size of the image this thread damages (the default base: 4096). Set by
    /// each shape's test and by the workers that run its cases.
    static BLOCK_SIZE: std::cell::Cell<usize> = const { std::cell::Cell::new(4096) };
}

fn set_bs(bs: usize) {
    BLOCK_SIZE.with(|b| b.set(bs));
}

fn bs() -> usize {
    BLOCK_SIZE.with(|b| b.get())
}
const HTREE_ENTRIES: usize = 2000;
const FRAG_EXTENTS: u64 = 1500;
/// A case that runs longer than this is a hang.
const LIMIT: Duration = Duration::from_secs(20);
/// Never read more of one file than this (a corrupt size can claim petabytes of holes).
const READ_CAP: u64 = 64 << 20;

/// Words a mount error may use to name what is wrong.
const SB: &[&str] = &["superblock"];
const GD: &[&str] = &["group descriptor"];
const INODE: &[&str] = &["inode"];
const ANY: &[&str] = &[
    "superblock",
    "group descriptor",
    "inode",
    "extent",
    "directory",
    "bitmap",
    "journal",
    "feature",
    "block size",
    "symlink",
    "root",
    "block map",
    "indirect",
];

// ---------------------------------------------------------------------------------------
// The populated base image and where its structures live.

/// The clean image and the location of everything the cases damage.
struct Base {
    img: Vec<u8>,
    /// Block size.
    bs: usize,
    /// The first block of the group descriptor table.
    gdt_block: usize,
    /// Files are extent-mapped (else block maps: frag_index and frag_leaf are the
    /// indirect and double-indirect blocks of frag).
    extents: bool,
    seed: u32,
    desc_size: usize,
    ipg: u64,
    isz: usize,
    tables: Vec<u64>,
    block_bitmaps: Vec<u64>,
    inode_bitmaps: Vec<u64>,
    bpg: usize,
    /// Inode numbers by name.
    dir1: u64,
    dir2: u64,
    medium: u64,
    big: u64,
    frag: u64,
    htree: u64,
    ln_long: u64,
    /// Physical blocks.
    dir1_block: u64,
    htree_root: u64,
    htree_leaf: u64,
    frag_index: u64,
    frag_leaf: u64,
    big_data: u64,
}

impl Base {
    fn inode_off(&self, ino: u64) -> usize {
        let g = ((ino - 1) / self.ipg) as usize;
        self.tables[g] as usize * self.bs + ((ino - 1) % self.ipg) as usize * self.isz
    }
    fn inode(&self, img: &[u8], ino: u64) -> DiskInode {
        let o = self.inode_off(ino);
        DiskInode::from_bytes(&img[o..o + self.isz])
    }
    fn inode_seed(&self, img: &[u8], ino: u64) -> u32 {
        self.inode(img, ino).csum_seed(self.seed, ino as u32)
    }
    fn gd_off(&self, g: usize) -> usize {
        self.gdt_block * self.bs + g * self.desc_size
    }
}

/// An image shape a base is built on.
struct Shape {
    idx: usize,
    bs: usize,
    /// `mke2fs` arguments; empty: `mkfs.ext4 -b 4096 -g 8192` as always.
    mkfs: &'static [&'static str],
}

const EXT4_4K: Shape = Shape {
    idx: 0,
    bs: 4096,
    mkfs: &[],
};

/// ext4 with 1 KiB blocks (8 groups of 8 MiB).
const EXT4_1K: Shape = Shape {
    idx: 1,
    bs: 1024,
    mkfs: &["-t", "ext4", "-b", "1024"],
};

/// ext3: block maps, no checksums, a journal with 32-bit tags (two groups).
const EXT3: Shape = Shape {
    idx: 2,
    bs: 4096,
    mkfs: &["-t", "ext3", "-b", "4096", "-g", "8192"],
};

fn base(test: &str) -> Option<&'static Base> {
    base_of(test, &EXT4_4K)
}

fn base_of(test: &str, shape: &Shape) -> Option<&'static Base> {
    static BASE: [OnceLock<Option<Base>>; 3] = [OnceLock::new(), OnceLock::new(), OnceLock::new()];
    set_bs(shape.bs);
    let b = BASE[shape.idx].get_or_init(|| {
        if !common::have_tool("mkfs.ext4") || !common::have_tool("e2fsck") {
            return None;
        }
        Some(build_base(shape))
    });
    if b.is_none() {
        common::skip(test, "mkfs.ext4 or e2fsck not found");
    }
    b.as_ref()
}

fn block_pattern(k: u64) -> Vec<u8> {
    let mut rng = StdRng::seed_from_u64(k);
    let mut b = vec![0u8; bs()];
    rng.fill_bytes(&mut b);
    b
}

/// Extents (lblk, pblk) and tree blocks of an extent inode, read from raw bytes.
fn tree_of(img: &[u8], iblock: &[u8]) -> (Vec<(u32, u64)>, Vec<u64>) {
    let mut ext = Vec::new();
    let mut tree = Vec::new();
    let mut stack = vec![extent::decode_node(iblock, 0).expect("clean extent root")];
    while let Some(n) = stack.pop() {
        match n {
            Node::Leaf(v) => ext.extend(v.iter().map(|e| (e.lblk, e.pblk))),
            Node::Index(_, v) => {
                for ix in v.iter().rev() {
                    tree.push(ix.child);
                    let b = &img[ix.child as usize * bs()..(ix.child as usize + 1) * bs()];
                    stack.push(
                        extent::decode_node(&b[..bs() - 4], ix.child).expect("clean extent block"),
                    );
                }
            }
        }
    }
    ext.sort();
    (ext, tree)
}

/// Data blocks (lblk, pblk) and indirect blocks of a block-mapped inode, from raw bytes.
fn blockmap_of(img: &[u8], iblock: &[u8]) -> (Vec<(u32, u64)>, Vec<u64>) {
    let bs = bs();
    let per = (bs / 4) as u64;
    let mut data = Vec::new();
    let mut meta = Vec::new();
    fn walk(
        img: &[u8],
        bs: usize,
        blk: u64,
        level: u32,
        first: u64,
        data: &mut Vec<(u32, u64)>,
        meta: &mut Vec<u64>,
    ) {
        if blk == 0 {
            return;
        }
        if level == 0 {
            data.push((first as u32, blk));
            return;
        }
        meta.push(blk);
        let per = (bs / 4) as u64;
        let span = per.pow(level - 1);
        let b = &img[blk as usize * bs..(blk as usize + 1) * bs];
        for i in 0..per as usize {
            let p = u64::from(le32(b, 4 * i));
            walk(img, bs, p, level - 1, first + i as u64 * span, data, meta);
        }
    }
    for i in 0..12 {
        walk(
            img,
            bs,
            u64::from(le32(iblock, 4 * i)),
            0,
            i as u64,
            &mut data,
            &mut meta,
        );
    }
    let mut first = 12;
    for (k, level) in [(12usize, 1u32), (13, 2), (14, 3)] {
        walk(
            img,
            bs,
            u64::from(le32(iblock, 4 * k)),
            level,
            first,
            &mut data,
            &mut meta,
        );
        first += per.pow(level);
    }
    data.sort();
    (data, meta)
}

/// The inode's data blocks and mapping blocks, extents or block map.
fn map_of(img: &[u8], iblock: &[u8], extents: bool) -> (Vec<(u32, u64)>, Vec<u64>) {
    if extents {
        tree_of(img, iblock)
    } else {
        blockmap_of(img, iblock)
    }
}

fn build_base(shape: &Shape) -> Base {
    let td = tempfile::tempdir().expect("tempdir");
    let path = if shape.mkfs.is_empty() {
        common::mkfs_image_args(td.path(), "base.img", 64 << 20, &["-g", "8192"])
    } else {
        common::mke2fs_image(td.path(), "base.img", 64 << 20, shape.mkfs).expect("mke2fs")
    };
    let fs = Fs::mount_path(&path, MountOptions::default()).expect("mount base");
    let o = Owner::default();
    let put = |dir: Ino, name: &str, data: &[u8]| {
        let a = fs.create(dir, name.as_bytes(), 0o644, o).expect("create");
        if !data.is_empty() {
            fs.write(a.ino, 0, data).expect("write");
        }
        fs.release(a.ino).expect("release");
        a.ino
    };
    let mut rng = StdRng::seed_from_u64(99);
    let mut big = vec![0u8; 1 << 20];
    rng.fill_bytes(&mut big);
    put(ROOT_INO, "small", b"hello, small file\n");
    put(ROOT_INO, "medium", &big[..50_000]);
    put(ROOT_INO, "big", &big);
    put(ROOT_INO, "empty", b"");
    let dir1 = fs.mkdir(ROOT_INO, b"dir1", 0o755, o).expect("mkdir");
    for i in 0..20 {
        put(
            dir1.ino,
            &format!("a{i}"),
            format!("file a{i}\n").as_bytes(),
        );
    }
    let dir2 = fs.mkdir(dir1.ino, b"dir2", 0o700, o).expect("mkdir");
    put(dir2.ino, "deep", b"deep file\n");
    let htree = fs.mkdir(ROOT_INO, b"htree", 0o755, o).expect("mkdir");
    for i in 0..HTREE_ENTRIES {
        let c = if i % 50 == 0 {
            format!("entry {i}\n")
        } else {
            String::new()
        };
        put(htree.ino, &format!("entry_{i:05}"), c.as_bytes());
    }
    let frag = fs.create(ROOT_INO, b"frag", 0o644, o).expect("create frag");
    for k in 0..FRAG_EXTENTS {
        fs.write(frag.ino, 2 * k * bs() as u64, &block_pattern(k))
            .expect("write frag");
    }
    fs.release(frag.ino).expect("release");
    fs.symlink(ROOT_INO, b"ln_short", b"dir1/a1", o)
        .expect("symlink");
    fs.symlink(
        ROOT_INO,
        b"ln_long",
        "dir1/../dir1/./a2".repeat(6).as_bytes(),
        o,
    )
    .expect("symlink");
    fs.mknod(ROOT_INO, b"fifo", 0o010644, 0, o).expect("mknod");
    fs.mknod(ROOT_INO, b"null", 0o020666, (1 << 8) | 3, o)
        .expect("mknod");
    fs.setattr(
        dir2.ino,
        &SetAttr {
            perm: Some(0o750),
            ..Default::default()
        },
    )
    .expect("setattr");
    let ino = |dir: Ino, name: &str| fs.lookup(dir, name.as_bytes()).expect("lookup").ino;
    let (medium, bigi, ln_long) = (
        ino(ROOT_INO, "medium"),
        ino(ROOT_INO, "big"),
        ino(ROOT_INO, "ln_long"),
    );
    fs.unmount().expect("unmount base");
    common::assert_fsck_clean(&path);
    let img = std::fs::read(&path).expect("read base image");

    let sb = Superblock::decode(&img[1024..2048], img.len() as u64).expect("base superblock");
    let desc_size = sb.desc_size() as usize;
    let groups = sb.group_count() as usize;
    let bs = bs();
    let gdt = (sb.first_data_block() as usize + 1) * bs;
    let gds: Vec<GroupDesc> = (0..groups)
        .map(|g| GroupDesc {
            raw: img[gdt + g * desc_size..gdt + (g + 1) * desc_size].to_vec(),
        })
        .collect();
    let extents = !shape.mkfs.contains(&"ext3");
    let mut b = Base {
        bs,
        gdt_block: gdt / bs,
        extents,
        seed: sb.csum_seed(),
        desc_size,
        ipg: u64::from(sb.inodes_per_group()),
        isz: usize::from(sb.inode_size()),
        tables: gds.iter().map(|d| d.inode_table()).collect(),
        block_bitmaps: gds.iter().map(|d| d.block_bitmap()).collect(),
        inode_bitmaps: gds.iter().map(|d| d.inode_bitmap()).collect(),
        bpg: sb.blocks_per_group() as usize,
        dir1: dir1.ino,
        dir2: dir2.ino,
        medium,
        big: bigi,
        frag: frag.ino,
        htree: htree.ino,
        ln_long,
        dir1_block: 0,
        htree_root: 0,
        htree_leaf: 0,
        frag_index: 0,
        frag_leaf: 0,
        big_data: 0,
        img,
    };
    assert!(groups >= 2, "base image should have two groups");
    let iblock = |b: &Base, ino: u64| b.inode(&b.img, ino).iblock().to_vec();
    b.dir1_block = map_of(&b.img, &iblock(&b, b.dir1), extents).0[0].1;
    let (hext, _) = map_of(&b.img, &iblock(&b, b.htree), extents);
    b.htree_root = hext[0].1;
    let root_blk = &b.img[b.htree_root as usize * bs..(b.htree_root as usize + 1) * bs];
    let first_leaf = le32(root_blk, DX_ROOT_COUNT_OFF + 4);
    // The extent (or mapped block) holding the first leaf.
    b.htree_leaf = hext
        .iter()
        .rev()
        .find(|e| e.0 <= first_leaf)
        .map(|e| e.1 + u64::from(first_leaf - e.0))
        .expect("htree leaf");
    let (fext, ftree) = map_of(&b.img, &iblock(&b, b.frag), extents);
    assert_eq!(fext.len() as u64, FRAG_EXTENTS);
    if extents {
        let depth = le16(&iblock(&b, b.frag), 6);
        assert!(depth >= 2, "frag tree depth {depth}, want 2");
    } else {
        // The indirect block, then the double-indirect one (blocks 12 .. 2 x 1500).
        assert!(
            ftree.len() >= 2,
            "frag maps through {ftree:?}, want IND and DIND"
        );
    }
    b.frag_index = ftree[0];
    b.frag_leaf = ftree[1];
    b.big_data = map_of(&b.img, &iblock(&b, b.big), extents).0[0].1;
    b
}

// ---------------------------------------------------------------------------------------
// Running one case: mount, walk, modify, fsck; no panic, no hang.

/// Holds the mounted file system; leaks it instead of dropping it during a panic (its Drop
/// writes back, and a second panic there would abort the whole test binary).
struct Mounted(Option<Arc<Fs>>);

impl Drop for Mounted {
    fn drop(&mut self) {
        if std::thread::panicking() {
            std::mem::forget(self.0.take());
        }
    }
}

#[derive(Default)]
struct Walk {
    entries: usize,
    bytes: u64,
    errors: Vec<String>,
    /// Engine misbehaviour that is not a panic (e.g. a readdir cursor that does not move).
    bugs: Vec<String>,
    dirs: HashSet<Ino>,
}

impl Walk {
    fn err(&mut self, what: &str, e: Error) {
        let msg = e.to_string();
        if msg.trim().is_empty() {
            self.bugs
                .push(format!("{what}: empty error message ({e:?})"));
        }
        if self.errors.len() < 20 {
            self.errors.push(format!("{what}: {msg}"));
        }
    }
}

fn walk_dir(fs: &Fs, dir: Ino, depth: usize, w: &mut Walk) {
    if depth > 40 || !w.dirs.insert(dir) || w.entries > 200_000 {
        return;
    }
    let mut pos = 0;
    for _ in 0..100_000 {
        let v = match fs.readdir(dir, pos, 256) {
            Ok(v) => v,
            Err(e) => return w.err(&format!("readdir {dir}"), e),
        };
        if v.is_empty() {
            return;
        }
        // A damaged index may list an entry twice, but the cursor must never go back and
        // every batch must move it forward, or a caller following it would loop forever.
        let start = pos;
        if v.last().is_some_and(|e| e.next <= start) {
            w.bugs.push(format!(
                "readdir {dir}: a batch from cursor {start} does not advance it"
            ));
            return;
        }
        for e in v {
            if e.next < pos {
                w.bugs.push(format!(
                    "readdir {dir}: cursor goes back from {pos} to {}",
                    e.next
                ));
                return;
            }
            pos = e.next;
            w.entries += 1;
            if e.name == b"." || e.name == b".." {
                continue;
            }
            visit(fs, dir, &e.name, depth, w);
        }
    }
    w.bugs
        .push(format!("readdir {dir}: more than 100000 batches"));
}

fn visit(fs: &Fs, dir: Ino, name: &[u8], depth: usize, w: &mut Walk) {
    let what = format!("{dir}/{}", String::from_utf8_lossy(name));
    let a = match fs.lookup(dir, name) {
        Ok(a) => a,
        Err(e) => return w.err(&format!("lookup {what}"), e),
    };
    if let Err(e) = fs.getattr(a.ino) {
        w.err(&format!("getattr {what}"), e);
    }
    match a.kind {
        FileType::Directory => walk_dir(fs, a.ino, depth + 1, w),
        FileType::Symlink => {
            if let Err(e) = fs.readlink(a.ino) {
                w.err(&format!("readlink {what}"), e);
            }
        }
        FileType::Regular => {
            let mut buf = vec![0u8; 1 << 20];
            let mut off = 0u64;
            while off < a.size.min(READ_CAP) {
                match fs.read(a.ino, off, &mut buf) {
                    Ok(0) => break,
                    Ok(n) => off += n as u64,
                    Err(e) => return w.err(&format!("read {what} at {off}"), e),
                }
            }
            w.bytes += off;
        }
        _ => {}
    }
}

/// Changes on the (possibly damaged) file system: errors are fine, panics are not.
fn modify(fs: &Fs, w: &mut Walk) {
    let o = Owner::default();
    let mut note = |what: &str, r: Result<(), Error>| {
        if let Err(e) = r {
            w.err(what, e);
        }
    };
    note(
        "create",
        fs.create(ROOT_INO, b"new_file", 0o644, o).and_then(|a| {
            fs.write(a.ino, 0, &vec![7u8; 100_000])?;
            fs.write(a.ino, 500_000, b"tail")?;
            fs.release(a.ino)
        }),
    );
    note(
        "mkdir",
        fs.mkdir(ROOT_INO, b"new_dir", 0o755, o).map(|_| ()),
    );
    for name in ["htree", "dir1"] {
        let r = fs.lookup(ROOT_INO, name.as_bytes()).and_then(|d| {
            for i in 0..40 {
                let a = fs.create(d.ino, format!("added_{i}").as_bytes(), 0o600, o)?;
                fs.release(a.ino)?;
            }
            fs.unlink(d.ino, b"added_3")?;
            fs.rename(d.ino, b"added_4", ROOT_INO, b"moved_4")
        });
        note(name, r);
    }
    note("unlink medium", fs.unlink(ROOT_INO, b"medium"));
    note(
        "append frag",
        fs.lookup(ROOT_INO, b"frag")
            .and_then(|a| fs.write(a.ino, a.size, &[1u8; 9000]).map(|_| ())),
    );
    note(
        "truncate big",
        fs.lookup(ROOT_INO, b"big").and_then(|a| {
            fs.setattr(
                a.ino,
                &SetAttr {
                    size: Some(1000),
                    ..Default::default()
                },
            )
            .map(|_| ())
        }),
    );
    note(
        "rmdir dir2",
        fs.lookup(ROOT_INO, b"dir1")
            .and_then(|d| fs.rmdir(d.ino, b"dir2")),
    );
    note("sync", fs.sync());
}

/// An image in memory that fsck and then the mount read without another copy.
struct VecDev(std::sync::RwLock<Vec<u8>>);

impl BlockDevice for VecDev {
    fn read_at(&self, off: u64, buf: &mut [u8]) -> lanefs::Result<()> {
        let d = self.0.read().expect("image lock");
        let end = off
            .checked_add(buf.len() as u64)
            .filter(|&e| e <= d.len() as u64);
        let end =
            end.ok_or_else(|| Error::Io(format!("read at {off} beyond the end ({})", d.len())))?;
        buf.copy_from_slice(&d[off as usize..end as usize]);
        Ok(())
    }
    fn write_at(&self, off: u64, buf: &[u8]) -> lanefs::Result<()> {
        let mut d = self.0.write().expect("image lock");
        let end = off
            .checked_add(buf.len() as u64)
            .filter(|&e| e <= d.len() as u64);
        let end =
            end.ok_or_else(|| Error::Io(format!("write at {off} beyond the end ({})", d.len())))?;
        d[off as usize..end as usize].copy_from_slice(buf);
        Ok(())
    }
    fn flush(&self) -> lanefs::Result<()> {
        Ok(())
    }
    fn size(&self) -> u64 {
        self.0.read().expect("image lock").len() as u64
    }
}

/// fsck, mount, walk and modify `img`. Ok(summary) or Err(why the case fails).
fn exercise(img: Vec<u8>, words: &[&str]) -> Result<String, String> {
    let mut summary = String::new();
    let mut bugs = Vec::new();
    let dev = Arc::new(VecDev(std::sync::RwLock::new(img)));
    match lanefs::fsck::check(&*dev, &lanefs::fsck::FsckOptions::default()) {
        Ok(r) => summary.push_str(&format!(
            "fsck: {} problems; ",
            r.problems.len() as u64 + r.problems_omitted
        )),
        Err(e) => {
            if e.to_string().trim().is_empty() {
                bugs.push(format!("fsck error with empty message {e:?}"));
            }
            summary.push_str(&format!("fsck: {e}; "));
        }
    }
    match Fs::mount(dev, MountOptions::default()) {
        Err(e) => {
            let msg = e.to_string();
            let lower = msg.to_lowercase();
            // Only these kinds describe damage; NotFound or Invalid would hide what is wrong
            // (and "no such file or directory" must not pass for naming a directory).
            let typed = matches!(
                e,
                Error::Corrupt { .. } | Error::Unsupported(_) | Error::Io(_)
            );
            if !typed
                || msg.trim().is_empty()
                || !words.iter().any(|w| lower.contains(&w.to_lowercase()))
            {
                bugs.push(format!(
                    "mount error {msg:?} ({e:?}) names none of {words:?}"
                ));
            }
            summary.push_str(&format!("mount: {msg}"));
        }
        Ok(fs) => {
            let m = Mounted(Some(fs));
            let fs = m.0.as_ref().expect("mounted");
            let mut w = Walk::default();
            walk_dir(fs, ROOT_INO, 0, &mut w);
            let walked = format!(
                "walk {} entries {} bytes, {} errors",
                w.entries,
                w.bytes,
                w.errors.len()
            );
            if fs.statfs().is_err() {
                w.bugs.push("statfs failed".into());
            }
            modify(fs, &mut w);
            let fs = m.0.clone().expect("mounted");
            drop(m);
            if let Err(e) = fs.unmount() {
                w.err("unmount", e);
            }
            summary.push_str(&format!(
                "mounted; {walked}; after changes {} errors",
                w.errors.len()
            ));
            if let Some(first) = w.errors.first() {
                summary.push_str(&format!(" (first: {first})"));
            }
            bugs.extend(w.bugs);
        }
    }
    if bugs.is_empty() {
        Ok(summary)
    } else {
        Err(bugs.join("; "))
    }
}

fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

/// Run `exercise` in a thread with a time limit; Err on panic, hang or bug.
fn run_case(img: Vec<u8>, words: &'static [&'static str]) -> Result<String, String> {
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("bad_input_case".into())
        .spawn(move || {
            let r = catch_unwind(AssertUnwindSafe(|| exercise(img, words)));
            let _ = tx.send(r.unwrap_or_else(|p| Err(format!("PANIC: {}", panic_text(&*p)))));
        })
        .expect("spawn case thread");
    match rx.recv_timeout(LIMIT) {
        Ok(r) => r,
        Err(_) => Err(format!("HANG: no result within {} s", LIMIT.as_secs())),
    }
}

// ---------------------------------------------------------------------------------------
// Corruptions.

type Mutate = Box<dyn Fn(&Base, &mut Vec<u8>) + Send + Sync>;

struct Case {
    name: String,
    mutate: Mutate,
    words: &'static [&'static str],
}

fn case(
    name: impl Into<String>,
    words: &'static [&'static str],
    f: impl Fn(&Base, &mut Vec<u8>) + Send + Sync + 'static,
) -> Case {
    Case {
        name: name.into(),
        mutate: Box::new(f),
        words,
    }
}

fn set(img: &mut [u8], off: usize, width: usize, v: u64) {
    match width {
        1 => img[off] = v as u8,
        2 => put16(img, off, v as u16),
        _ => put32(img, off, v as u32),
    }
}

fn fix_sb(img: &mut [u8]) {
    let mut sb = Superblock::zeroed();
    sb.raw.copy_from_slice(&img[1024..2048]);
    sb.update_checksum();
    img[1024..2048].copy_from_slice(&sb.raw[..]);
}

fn fix_gd(b: &Base, img: &mut [u8], g: usize) {
    let o = b.gd_off(g);
    let mut d = GroupDesc {
        raw: img[o..o + b.desc_size].to_vec(),
    };
    d.update_checksum(b.seed, g as u32);
    img[o..o + b.desc_size].copy_from_slice(&d.raw);
}

fn fix_inode(b: &Base, img: &mut [u8], ino: u64) {
    let o = b.inode_off(ino);
    let mut d = DiskInode::from_bytes(&img[o..o + b.isz]);
    d.update_checksum(b.seed, ino as u32);
    img[o..o + b.isz].copy_from_slice(&d.raw);
}

fn block_mut(img: &mut [u8], blk: u64) -> &mut [u8] {
    &mut img[blk as usize * bs()..(blk as usize + 1) * bs()]
}

/// Recompute the bitmap checksums of group `g` in its descriptor, then the descriptor's.
fn fix_bitmaps(b: &Base, img: &mut [u8], g: usize) {
    let o = b.gd_off(g);
    let mut d = GroupDesc {
        raw: img[o..o + b.desc_size].to_vec(),
    };
    let bb = b.block_bitmaps[g] as usize * bs();
    let ib = b.inode_bitmaps[g] as usize * bs();
    d.set_block_bitmap_csum(bitmap_csum(b.seed, &img[bb..bb + bs()], b.bpg / 8, true));
    d.set_inode_bitmap_csum(bitmap_csum(
        b.seed,
        &img[ib..ib + bs()],
        b.ipg as usize / 8,
        true,
    ));
    img[o..o + b.desc_size].copy_from_slice(&d.raw);
    fix_gd(b, img, g);
}

fn superblock_cases(out: &mut Vec<Case>) {
    let fields: &[(&str, usize, usize, &[u64])] = &[
        ("magic", 0x38, 2, &[0, 0xEF54]),
        ("inodes_count", 0x0, 4, &[0, 1, 0xFFFF_FFFF]),
        ("blocks_count", 0x4, 4, &[0, 1, 100, 0xFFFF_FFFF]),
        ("blocks_count_hi", 0x150, 4, &[1]),
        ("r_blocks_count", 0x8, 4, &[0xFFFF_FFFF]),
        ("first_data_block", 0x14, 4, &[1, 5000]),
        ("log_block_size", 0x18, 4, &[0, 1, 2, 6, 7, 31, 0xFFFF_FFFF]),
        (
            "blocks_per_group",
            0x20,
            4,
            &[0, 1, 8, 4096, 16384, 32768, 0xFFFF_FFFF],
        ),
        ("inodes_per_group", 0x28, 4, &[0, 1, 7, 16, 0xFFFF_FFFF]),
        ("inode_size", 0x58, 2, &[0, 127, 129, 512, 4096, 8192]),
        ("desc_size", 0xFE, 2, &[0, 16, 33, 128, 2048]),
        ("first_ino", 0x54, 4, &[0, 1, 0xFFFF_FFFF]),
        ("feature_compat", 0x5C, 4, &[0, 0xFFFF_FFFF]),
        ("feature_incompat", 0x60, 4, &[0, 0xFFFF_FFFF, 0x2C2, 0x242]),
        ("feature_ro_compat", 0x64, 4, &[0, 0xFFFF_FFFF, 0x07B]),
        ("rev_level", 0x4C, 4, &[0, 7]),
        ("journal_inum", 0xE0, 4, &[0, 2, 0xFFFF_FFFF]),
        ("reserved_gdt_blocks", 0xCE, 2, &[0xFFFF]),
        ("log_groups_per_flex", 0x174, 1, &[0, 31, 255]),
        ("def_hash_version", 0xFC, 1, &[7, 255]),
        ("hash_seed", 0xEC, 4, &[0xDEAD_BEEF]),
        ("state", 0x3A, 2, &[0xFFFF]),
        ("flags", 0x160, 4, &[0xFFFF_FFFF]),
        ("last_orphan", 0xE8, 4, &[12, 0xFFFF_FFFF]),
        ("min_extra_isize", 0x15C, 2, &[0xFFFF]),
        ("checksum", 0x3FC, 4, &[0]),
    ];
    for &(name, off, width, values) in fields {
        for &v in values {
            // Changed features change which checksums are checked (0x7b drops
            // metadata_csum and sets gdt_csum): the first mismatch may be elsewhere.
            let raw_words = if name.starts_with("feature") { ANY } else { SB };
            out.push(case(
                format!("sb {name}={v:#x}"),
                raw_words,
                move |_, img| set(img, 1024 + off, width, v),
            ));
            if name != "checksum" {
                let words = if name == "magic" { SB } else { ANY };
                out.push(case(
                    format!("sb {name}={v:#x} csum fixed"),
                    words,
                    move |_, img| {
                        set(img, 1024 + off, width, v);
                        fix_sb(img);
                    },
                ));
            }
        }
    }
    // Consistent but wrong: fewer inodes per group with a matching inode count.
    out.push(case("sb ipg=16 count=32 csum fixed", ANY, |_, img| {
        set(img, 1024 + 0x28, 4, 16);
        set(img, 1024, 4, 32);
        fix_sb(img);
    }));
    for off in (0..0x200).step_by(8) {
        out.push(case(
            format!("sb xor byte {off:#x} csum fixed"),
            ANY,
            move |_, img| {
                img[1024 + off] ^= 0xFF;
                fix_sb(img);
            },
        ));
    }
}

fn group_cases(out: &mut Vec<Case>) {
    let fields: &[(&str, usize, usize, &[u64])] = &[
        ("block_bitmap", 0x0, 4, &[0, 1, 0xFFFF_FFFF]),
        ("inode_bitmap", 0x4, 4, &[0, 0xFFFF_FFFF]),
        ("inode_table", 0x8, 4, &[0, 1, 16000, 0xFFFF_FFF0]),
        ("free_blocks", 0xC, 2, &[0, 0xFFFF]),
        ("free_inodes", 0xE, 2, &[0, 0xFFFF]),
        ("used_dirs", 0x10, 2, &[0xFFFF]),
        ("flags", 0x12, 2, &[1, 2, 3, 0xFFFF]),
        ("itable_unused", 0x1C, 2, &[0xFFFF]),
        ("block_bitmap_hi", 0x20, 4, &[1]),
        ("inode_table_hi", 0x28, 4, &[1]),
        ("free_blocks_hi", 0x2C, 2, &[0xFFFF]),
    ];
    for g in 0..2usize {
        for &(name, off, width, values) in fields {
            for &v in values {
                out.push(case(format!("gd{g} {name}={v:#x}"), GD, move |b, img| {
                    set(img, b.gd_off(g) + off, width, v)
                }));
                out.push(case(
                    format!("gd{g} {name}={v:#x} csum fixed"),
                    ANY,
                    move |b, img| {
                        set(img, b.gd_off(g) + off, width, v);
                        fix_gd(b, img, g);
                    },
                ));
            }
        }
        // The inode table moved onto the big file's data or onto the block bitmap.
        out.push(case(
            format!("gd{g} inode_table=big data csum fixed"),
            ANY,
            move |b, img| {
                set(img, b.gd_off(g) + 8, 4, b.big_data);
                fix_gd(b, img, g);
            },
        ));
        out.push(case(
            format!("gd{g} inode_table=block bitmap csum fixed"),
            ANY,
            move |b, img| {
                set(img, b.gd_off(g) + 8, 4, b.block_bitmaps[g]);
                fix_gd(b, img, g);
            },
        ));
    }
    out.push(case("gdt block zeroed", GD, |b, img| {
        block_mut(img, b.gdt_block as u64).fill(0)
    }));
}

fn bitmap_cases(out: &mut Vec<Case>) {
    for g in 0..2usize {
        for (kind, which) in [("block", 0), ("inode", 1)] {
            for (fill, pat) in [("zeroed", 0u8), ("all ones", 0xFF), ("garbage", 0x5A)] {
                for fixed in [false, true] {
                    out.push(case(
                        format!(
                            "{kind} bitmap {g} {fill}{}",
                            if fixed { " csum fixed" } else { "" }
                        ),
                        ANY,
                        move |b, img| {
                            let blk = if which == 0 {
                                b.block_bitmaps[g]
                            } else {
                                b.inode_bitmaps[g]
                            };
                            let m = block_mut(img, blk);
                            if pat == 0x5A {
                                let mut rng = StdRng::seed_from_u64(blk);
                                rng.fill_bytes(m);
                            } else {
                                m.fill(pat);
                            }
                            if fixed {
                                fix_bitmaps(b, img, g);
                            }
                        },
                    ));
                }
            }
        }
    }
}

fn inode_cases(out: &mut Vec<Case>) {
    type Pick = fn(&Base) -> u64;
    let targets: &[(&str, Pick)] = &[
        ("root", |_| 2),
        ("dir1", |b| b.dir1),
        ("dir2", |b| b.dir2),
        ("medium", |b| b.medium),
        ("frag", |b| b.frag),
        ("htree", |b| b.htree),
        ("ln_long", |b| b.ln_long),
        ("journal", |_| 8),
    ];
    let fields: &[(&str, usize, usize, &[u64])] = &[
        ("mode", 0x0, 2, &[0, 0o100644, 0o040755, 0o120777]),
        ("size", 0x4, 4, &[0, 4095, 0xFFFF_FFFF]),
        ("size_hi", 0x6C, 4, &[0xFFFF_FFFF]),
        ("links", 0x1A, 2, &[0, 0xFFFF]),
        ("blocks", 0x1C, 4, &[0xFFFF_FFFF]),
        (
            "flags",
            0x20,
            4,
            &[0, 0xFFFF_FFFF, 0x1008_0000, 0x0008_1000],
        ),
        ("extent magic", 0x28, 2, &[0]),
        ("extent entries", 0x2A, 2, &[5, 0xFFFF]),
        ("extent max", 0x2C, 2, &[0, 5]),
        ("extent depth", 0x2E, 2, &[1, 3, 6]),
        ("first extent lblk", 0x34, 4, &[0xFFFF_FFFF]),
        ("first extent len/child", 0x38, 4, &[0, 0x8000, 0xFFFF_FFFF]),
        ("first extent start", 0x3C, 4, &[0, 0xFFFF_FFFF]),
        ("file_acl", 0x68, 4, &[1, 0xFFFF_FFFF]),
        ("generation", 0x64, 4, &[0x1234_5678]),
        ("extra_isize", 0x80, 2, &[3, 0xFFFF]),
    ];
    for &(tname, pick) in targets {
        for &(fname, off, width, values) in fields {
            for (k, &v) in values.iter().enumerate() {
                // Without the checksum fixed every value fails the same check: try one.
                if k == 0 || tname == "root" {
                    let raw_words = if tname == "root" { INODE } else { ANY };
                    out.push(case(
                        format!("inode {tname} {fname}={v:#x}"),
                        raw_words,
                        move |b, img| {
                            let ino = pick(b);
                            set(img, b.inode_off(ino) + off, width, v);
                        },
                    ));
                }
                out.push(case(
                    format!("inode {tname} {fname}={v:#x} csum fixed"),
                    ANY,
                    move |b, img| {
                        let ino = pick(b);
                        set(img, b.inode_off(ino) + off, width, v);
                        fix_inode(b, img, ino);
                    },
                ));
            }
        }
        out.push(case(
            format!("inode {tname} zeroed csum fixed"),
            ANY,
            move |b, img| {
                let ino = pick(b);
                let o = b.inode_off(ino);
                img[o..o + b.isz].fill(0);
                fix_inode(b, img, ino);
            },
        ));
    }
    // Index child pointing at an inode table block or at the superblock.
    for (what, target) in [("inode table", 0usize), ("block 0", 1)] {
        out.push(case(
            format!("inode frag index child={what} csum fixed"),
            ANY,
            move |b, img| {
                let v = if target == 0 { b.tables[0] } else { 0 };
                set(img, b.inode_off(b.frag) + 0x38, 4, v);
                fix_inode(b, img, b.frag);
            },
        ));
    }
}

fn extent_block_cases(out: &mut Vec<Case>) {
    type Pick = fn(&Base) -> u64;
    let blocks: &[(&str, Pick)] = &[("index", |b| b.frag_index), ("leaf", |b| b.frag_leaf)];
    let fields: &[(&str, usize, usize, &[u64])] = &[
        ("magic", 0, 2, &[0, 0x1234]),
        ("entries", 2, 2, &[0, 341, 0xFFFF]),
        ("max", 4, 2, &[0, 1, 341, 0xFFFF]),
        ("depth", 6, 2, &[0, 1, 2, 5, 0xFFFF]),
        ("first lblk", 12, 4, &[0xFFFF_FFFF, 7]),
        ("first len/child", 16, 4, &[0, 1, 0x8000, 0xFFFF_FFFF]),
        ("first start", 20, 4, &[0, 1, 0xFFFF_FFFF]),
        ("second lblk", 24, 4, &[0]),
    ];
    for &(bname, pick) in blocks {
        for &(fname, off, width, values) in fields {
            for &v in values {
                for fixed in [false, true] {
                    let name = format!(
                        "extent {bname} block {fname}={v:#x}{}",
                        if fixed { " csum fixed" } else { "" }
                    );
                    out.push(case(name, ANY, move |b, img| {
                        let blk = pick(b);
                        set(block_mut(img, blk), off, width, v);
                        // The tail sits after `max` entries: only a max that leaves room
                        // for it can carry a checksum at all.
                        if fixed && 12 + 12 * usize::from(le16(block_mut(img, blk), 4)) + 4 <= bs()
                        {
                            let seed = b.inode_seed(img, b.frag);
                            extent::set_block_csum(seed, block_mut(img, blk));
                        }
                    }));
                }
            }
        }
        // A child pointing at its own block, an inode table block, the other tree block.
        for (what, t) in [
            ("itself", 0usize),
            ("inode table", 1),
            ("sibling tree block", 2),
        ] {
            out.push(case(
                format!("extent {bname} block child={what} csum fixed"),
                ANY,
                move |b, img| {
                    let blk = pick(b);
                    let v = match t {
                        0 => blk,
                        1 => b.tables[0],
                        _ => {
                            if blk == b.frag_index {
                                b.frag_leaf
                            } else {
                                b.frag_index
                            }
                        }
                    };
                    set(block_mut(img, blk), 16, 4, v);
                    let seed = b.inode_seed(img, b.frag);
                    extent::set_block_csum(seed, block_mut(img, blk));
                },
            ));
        }
        out.push(case(
            format!("extent {bname} block garbage csum fixed"),
            ANY,
            move |b, img| {
                let blk = pick(b);
                let mut rng = StdRng::seed_from_u64(blk);
                rng.fill_bytes(block_mut(img, blk));
                set(block_mut(img, blk), 0, 2, u64::from(extent::EXT_MAGIC));
                set(block_mut(img, blk), 4, 2, 340);
                let seed = b.inode_seed(img, b.frag);
                extent::set_block_csum(seed, block_mut(img, blk));
            },
        ));
    }
}

/// Offset of entry `name` in a linear directory block.
fn entry_off(block: &[u8], name: &[u8]) -> usize {
    dd::parse_block(block, true, 0)
        .or_else(|_| dd::parse_block(block, false, 0))
        .expect("clean dir block")
        .iter()
        .find(|e| e.name == name)
        .expect("entry")
        .off
}

fn dir_cases(out: &mut Vec<Case>) {
    type Edit = fn(&Base, &mut [u8]);
    // Linear directory dir1: offsets relative to the block.
    let linear: &[(&str, Edit)] = &[
        ("dot rec_len=0", |_, d| put16(d, 4, 0)),
        ("dot rec_len past end", |_, d| put16(d, 4, 0xFFFC)),
        ("dot rec_len unaligned", |_, d| put16(d, 4, 13)),
        ("dot rec_len=8", |_, d| put16(d, 4, 8)),
        ("dot name_len=255", |_, d| d[6] = 255),
        ("dotdot ino huge", |_, d| put32(d, 12, 0xFFFF_FFFF)),
        ("dotdot rec_len=0", |_, d| put16(d, 16, 0)),
        ("entry a1 ino huge", |_, d| {
            let o = entry_off(d, b"a1");
            put32(d, o, 0xFFFF_FFF0)
        }),
        ("entry a1 ino=1", |_, d| {
            let o = entry_off(d, b"a1");
            put32(d, o, 1)
        }),
        ("entry a1 free inode", |_, d| {
            let o = entry_off(d, b"a1");
            put32(d, o, 5000)
        }),
        ("entry a1 ft=9", |_, d| {
            let o = entry_off(d, b"a1");
            d[o + 7] = 9
        }),
        ("entry a1 ft=dir", |_, d| {
            let o = entry_off(d, b"a1");
            d[o + 7] = 2
        }),
        ("entry a1 rec_len=0", |_, d| {
            let o = entry_off(d, b"a1");
            put16(d, o + 4, 0)
        }),
        ("entry a1 rec_len=4096", |_, d| {
            let o = entry_off(d, b"a1");
            put16(d, o + 4, 4096)
        }),
        ("entry a1 name_len=255", |_, d| {
            let o = entry_off(d, b"a1");
            d[o + 6] = 255
        }),
        ("entry a1 name_len=0", |_, d| {
            let o = entry_off(d, b"a1");
            d[o + 6] = 0
        }),
        ("dir2 entry -> root (cycle)", |_, d| {
            let o = entry_off(d, b"dir2");
            put32(d, o, 2)
        }),
        ("a1 entry -> dir1 itself", |b, d| {
            let o = entry_off(d, b"a1");
            put32(d, o, b.dir1 as u32);
            d[o + 7] = 2
        }),
        ("tail garbage", |_, d| d[bs() - 12..].fill(0xAB)),
        ("whole block garbage", |b, d| {
            StdRng::seed_from_u64(b.dir1_block).fill_bytes(d)
        }),
    ];
    for &(name, edit) in linear {
        for fixed in [false, true] {
            out.push(case(
                format!(
                    "dir1 block {name}{}",
                    if fixed { " csum fixed" } else { "" }
                ),
                ANY,
                move |b, img| {
                    edit(b, block_mut(img, b.dir1_block));
                    if fixed {
                        let seed = b.inode_seed(img, b.dir1);
                        dd::set_leaf_csum(seed, block_mut(img, b.dir1_block));
                    }
                },
            ));
        }
    }
    let root_edits: &[(&str, Edit)] = &[
        ("hash_version=9", |_, d| d[0x1C] = 9),
        ("hash_version=255", |_, d| d[0x1C] = 255),
        ("info_length=0", |_, d| d[0x1D] = 0),
        ("info_length=255", |_, d| d[0x1D] = 255),
        ("indirect_levels=1", |_, d| d[0x1E] = 1),
        ("indirect_levels=3", |_, d| d[0x1E] = 3),
        ("indirect_levels=255", |_, d| d[0x1E] = 255),
        ("unused_flags=255", |_, d| d[0x1F] = 255),
        ("limit=0", |_, d| put16(d, 0x20, 0)),
        ("limit=1", |_, d| put16(d, 0x20, 1)),
        ("limit=0xffff", |_, d| put16(d, 0x20, 0xFFFF)),
        ("count=0", |_, d| put16(d, 0x22, 0)),
        ("count=0xffff", |_, d| put16(d, 0x22, 0xFFFF)),
        ("count=limit+1", |_, d| {
            let l = le16(d, 0x20);
            put16(d, 0x22, l + 1)
        }),
        ("first block=0 (itself)", |_, d| put32(d, 0x24, 0)),
        ("first block=5000", |_, d| put32(d, 0x24, 5000)),
        ("first block=0xffffffff", |_, d| put32(d, 0x24, 0xFFFF_FFFF)),
        ("second hash=0", |_, d| put32(d, 0x28, 0)),
        ("second hash=max", |_, d| put32(d, 0x28, 0xFFFF_FFFF)),
        ("second block=0", |_, d| put32(d, 0x2C, 0)),
        ("second block=first", |_, d| {
            let f = le32(d, 0x24);
            put32(d, 0x2C, f)
        }),
        ("entries reversed", |_, d| {
            let n = usize::from(le16(d, 0x22));
            let mut v: Vec<(u32, u32)> = (1..n)
                .map(|i| (le32(d, 0x20 + 8 * i), le32(d, 0x24 + 8 * i)))
                .collect();
            v.reverse();
            for (i, (h, blk)) in v.into_iter().enumerate() {
                put32(d, 0x28 + 8 * i, h);
                put32(d, 0x2C + 8 * i, blk);
            }
        }),
        ("dot rec_len=0", |_, d| put16(d, 4, 0)),
        ("dotdot name_len=0", |_, d| d[12 + 6] = 0),
    ];
    for &(name, edit) in root_edits {
        for fixed in [false, true] {
            out.push(case(
                format!(
                    "htree root {name}{}",
                    if fixed { " csum fixed" } else { "" }
                ),
                ANY,
                move |b, img| {
                    edit(b, block_mut(img, b.htree_root));
                    // The dx tail sits after `limit` entries: only a sane count/limit has one.
                    let d = block_mut(img, b.htree_root);
                    let (limit, count) = (usize::from(le16(d, 0x20)), usize::from(le16(d, 0x22)));
                    if fixed && count <= limit && DX_ROOT_COUNT_OFF + 8 * limit + 8 <= bs() {
                        let seed = b.inode_seed(img, b.htree);
                        dd::set_dx_csum(seed, block_mut(img, b.htree_root), DX_ROOT_COUNT_OFF);
                    }
                },
            ));
        }
    }
    let leaf_edits: &[(&str, Edit)] = &[
        ("first rec_len=0", |_, d| put16(d, 4, 0)),
        ("first rec_len past end", |_, d| put16(d, 4, 0xFFFC)),
        ("first name_len=255", |_, d| d[6] = 255),
        ("first ino huge", |_, d| put32(d, 0, 0xFFFF_FFFF)),
        ("first ino -> htree dir", |b, d| {
            put32(d, 0, b.htree as u32);
            d[7] = 2
        }),
        ("tail missing", |_, d| d[bs() - 12..].fill(0)),
        ("garbage", |b, d| {
            StdRng::seed_from_u64(b.htree_leaf).fill_bytes(d)
        }),
    ];
    for &(name, edit) in leaf_edits {
        for fixed in [false, true] {
            out.push(case(
                format!(
                    "htree leaf {name}{}",
                    if fixed { " csum fixed" } else { "" }
                ),
                ANY,
                move |b, img| {
                    edit(b, block_mut(img, b.htree_leaf));
                    if fixed {
                        let seed = b.inode_seed(img, b.htree);
                        dd::set_leaf_csum(seed, block_mut(img, b.htree_leaf));
                    }
                },
            ));
        }
    }
}

fn truncation_cases(out: &mut Vec<Case>, len: usize) {
    for cut in [0, 1000, 2048, 4096, 3 * bs(), len / 2, len - 4096] {
        out.push(case(format!("truncated to {cut}"), SB, move |_, img| {
            img.truncate(cut)
        }));
    }
}

/// Run every case; fail with the list of panics, hangs and badly named errors.
fn run_cases(test: &str, cases: Vec<Case>, b: &'static Base) {
    let t0 = Instant::now();
    let n = cases.len();
    let failures = Mutex::new(Vec::new());
    let mounted = AtomicU64::new(0);
    let queue = Mutex::new(cases.into_iter().collect::<std::collections::VecDeque<_>>());
    let workers = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .clamp(1, 4);
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                set_bs(b.bs);
                let Some(c) = queue.lock().expect("queue").pop_front() else {
                    return;
                };
                let mut img = b.img.clone();
                (c.mutate)(b, &mut img);
                let r = run_case(img, c.words);
                match r {
                    Ok(summary) => {
                        if summary.contains("; mounted") {
                            mounted.fetch_add(1, Ordering::Relaxed);
                        }
                        println!("ok   {}: {summary}", c.name);
                    }
                    Err(why) => {
                        println!("FAIL {}: {why}", c.name);
                        failures
                            .lock()
                            .expect("failures")
                            .push(format!("{}: {why}", c.name));
                    }
                }
            });
        }
    });
    let failures = failures.into_inner().expect("failures");
    println!(
        "{test}: {n} cases ({} mounted) in {:.1} s, {} failed",
        mounted.load(Ordering::Relaxed),
        t0.elapsed().as_secs_f64(),
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{test}: {} of {n} cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn clean_base_walks_without_errors() {
    let Some(b) = base("clean_base_walks_without_errors") else {
        return;
    };
    let fs = Fs::mount(
        Arc::new(MemDevice::from_vec(b.img.clone())),
        MountOptions::default(),
    )
    .expect("mount base");
    let mut w = Walk::default();
    walk_dir(&fs, ROOT_INO, 0, &mut w);
    assert!(
        w.errors.is_empty() && w.bugs.is_empty(),
        "clean image: {:?} {:?}",
        w.errors,
        w.bugs
    );
    assert!(
        w.entries > HTREE_ENTRIES,
        "walked only {} entries",
        w.entries
    );
    let frag = fs.lookup(ROOT_INO, b"frag").expect("frag");
    let mut blk = vec![0u8; bs()];
    for k in [0u64, 1, 700, FRAG_EXTENTS - 1] {
        fs.read(frag.ino, 2 * k * bs() as u64, &mut blk)
            .expect("read frag");
        assert!(blk == block_pattern(k), "frag block {k}");
    }
    fs.unmount().expect("unmount");
    let r = lanefs::fsck::check(&MemDevice::from_vec(b.img.clone()), &Default::default())
        .expect("fsck base");
    assert!(
        r.is_clean(),
        "lanefs fsck on the clean base: {:?}",
        r.problems
    );
}

#[test]
fn superblock_and_truncation_damage() {
    let Some(b) = base("superblock_and_truncation_damage") else {
        return;
    };
    let mut cases = Vec::new();
    truncation_cases(&mut cases, b.img.len());
    superblock_cases(&mut cases);
    run_cases("superblock_and_truncation_damage", cases, b);
}

#[test]
fn group_and_bitmap_damage() {
    let Some(b) = base("group_and_bitmap_damage") else {
        return;
    };
    let mut cases = Vec::new();
    group_cases(&mut cases);
    bitmap_cases(&mut cases);
    run_cases("group_and_bitmap_damage", cases, b);
}

/// Two groups whose descriptors (checksums intact) name one inode table, inode bitmap or
/// block bitmap: the mount names the overlap. An inode's checksum, seeded with its number,
/// is checked once per cached table block, so one record read as two inodes would not be
/// caught later.
#[test]
fn groups_sharing_a_table_or_bitmap_are_refused() {
    let Some(b) = base("groups_sharing_a_table_or_bitmap_are_refused") else {
        return;
    };
    let picks: [(&str, usize, &[u64]); 3] = [
        ("inode table", 8, &b.tables),
        ("inode bitmap", 4, &b.inode_bitmaps),
        ("block bitmap", 0, &b.block_bitmaps),
    ];
    for (what, off, blocks) in picks {
        let mut img = b.img.clone();
        set(&mut img, b.gd_off(1) + off, 4, blocks[0]);
        fix_gd(b, &mut img, 1);
        let dev = Arc::new(MemDevice::from_vec(img));
        match Fs::mount(dev, MountOptions::default()) {
            Ok(_) => panic!("group 1's {what} on group 0's: mounted"),
            Err(e) => assert!(
                e.to_string().contains("overlaps group 0"),
                "group 1's {what} on group 0's: {e}"
            ),
        }
    }
}

/// A descriptor (checksum intact) counting every inode of its group free while files
/// live there: unlinking one is refused as a corrupt descriptor, not a counter past the
/// group's size (nor, in a debug build, a panic).
#[test]
fn a_free_count_of_the_whole_group_refuses_an_unlink() {
    let Some(b) = base("a_free_count_of_the_whole_group_refuses_an_unlink") else {
        return;
    };
    let mut img = b.img.clone();
    set(&mut img, b.gd_off(0) + 0xE, 2, b.ipg);
    fix_gd(b, &mut img, 0);
    let fs = Fs::mount(Arc::new(MemDevice::from_vec(img)), MountOptions::default())
        .expect("the count is within the group: mounted");
    match fs.unlink(ROOT_INO, b"small") {
        Ok(()) => panic!("unlinked with every inode of the group counted free"),
        Err(e) => assert!(e.to_string().contains("group descriptor"), "unlink: {e}"),
    }
}

#[test]
fn inode_damage() {
    let Some(b) = base("inode_damage") else {
        return;
    };
    let mut cases = Vec::new();
    inode_cases(&mut cases);
    run_cases("inode_damage", cases, b);
}

#[test]
fn extent_and_directory_damage() {
    let Some(b) = base("extent_and_directory_damage") else {
        return;
    };
    let mut cases = Vec::new();
    extent_block_cases(&mut cases);
    dir_cases(&mut cases);
    run_cases("extent_and_directory_damage", cases, b);
}

/// Damage to the indirect and double-indirect blocks of a block-mapped file (ext3).
fn indirect_block_cases(out: &mut Vec<Case>) {
    type Pick = fn(&Base) -> u64;
    let blocks: &[(&str, Pick)] = &[("ind", |b| b.frag_index), ("dind", |b| b.frag_leaf)];
    type Val = fn(&Base, u64) -> u64;
    let values: &[(&str, Val)] = &[
        ("0xffffffff", |_, _| 0xFFFF_FFFF),
        ("past the end", |b, _| (b.img.len() / b.bs) as u64 + 10),
        ("block 0 (superblock)", |_, _| 0),
        ("block 1", |_, _| 1),
        ("itself", |_, blk| blk),
        ("inode table", |b, _| b.tables[0]),
        ("block bitmap", |b, _| b.block_bitmaps[0]),
        ("big's data (shared)", |b, _| b.big_data),
        ("the other map block", |b, blk| {
            if blk == b.frag_index {
                b.frag_leaf
            } else {
                b.frag_index
            }
        }),
    ];
    for &(bname, pick) in blocks {
        for &(vname, val) in values {
            for slot in [0usize, 1, 200] {
                out.push(case(
                    format!("{bname} block pointer {slot} = {vname}"),
                    ANY,
                    move |b, img| {
                        let blk = pick(b);
                        let v = val(b, blk);
                        set(block_mut(img, blk), 4 * slot, 4, v);
                    },
                ));
            }
        }
        out.push(case(
            format!("{bname} block garbage"),
            ANY,
            move |b, img| {
                let blk = pick(b);
                StdRng::seed_from_u64(blk).fill_bytes(block_mut(img, blk));
            },
        ));
        out.push(case(
            format!("{bname} block all ones"),
            ANY,
            move |b, img| {
                block_mut(img, pick(b)).fill(0xFF);
            },
        ));
        out.push(case(format!("{bname} block zeroed"), ANY, move |b, img| {
            block_mut(img, pick(b)).fill(0);
        }));
    }
    // The inode's own pointers: IND, DIND and TIND slots.
    for (slot, what) in [(12usize, "ind"), (13, "dind"), (14, "tind")] {
        for (vname, v) in [("0xffffffff", 0xFFFF_FFFFu64), ("superblock", 0), ("1", 1)] {
            out.push(case(
                format!("inode frag i_block[{slot}] ({what}) = {vname}"),
                ANY,
                move |b, img| {
                    set(img, b.inode_off(b.frag) + 0x28 + 4 * slot, 4, v);
                },
            ));
        }
        out.push(case(
            format!("inode frag i_block[{slot}] ({what}) = inode table"),
            ANY,
            move |b, img| {
                set(img, b.inode_off(b.frag) + 0x28 + 4 * slot, 4, b.tables[0]);
            },
        ));
    }
}

/// Every kind of damage on another shape, thinned to about `keep` cases (every Nth, so
/// each kind is still represented).
fn shape_damage(test: &str, shape: &Shape, keep: usize) {
    let Some(b) = base_of(test, shape) else {
        return;
    };
    let mut all = Vec::new();
    let csum = Superblock::decode(&b.img[1024..2048], b.img.len() as u64)
        .expect("base superblock")
        .metadata_csum();
    // Without checksums nothing names the damaged structure first: it surfaces wherever
    // it is met, and any structure's name will do.
    let run_cases = |test: &str, mut cases: Vec<Case>, b: &'static Base| {
        if !csum {
            for c in &mut cases {
                c.words = ANY;
            }
        }
        run_cases(test, cases, b)
    };
    truncation_cases(&mut all, b.img.len());
    superblock_cases(&mut all);
    group_cases(&mut all);
    bitmap_cases(&mut all);
    inode_cases(&mut all);
    if b.extents {
        extent_block_cases(&mut all);
    } else {
        let mut ind = Vec::new();
        indirect_block_cases(&mut ind);
        // Block-map damage is what this shape adds: every case of it, then the sample.
        let step = (all.len() / keep.saturating_sub(ind.len()).max(1)).max(1);
        let sampled: Vec<Case> = all.into_iter().step_by(step).collect();
        let mut cases = ind;
        cases.extend(sampled);
        let mut dirs = Vec::new();
        dir_cases(&mut dirs);
        cases.extend(dirs.into_iter().step_by(step));
        return run_cases(test, cases, b);
    }
    dir_cases(&mut all);
    let step = (all.len() / keep).max(1);
    run_cases(test, all.into_iter().step_by(step).collect(), b);
}

/// The clean 1 KiB and ext3 bases walk without errors and are clean for lanefs fsck.
#[test]
fn clean_shape_bases_walk_without_errors() {
    for (test, shape) in [
        ("clean_shape_bases_walk_without_errors (1k)", &EXT4_1K),
        ("clean_shape_bases_walk_without_errors (ext3)", &EXT3),
    ] {
        let Some(b) = base_of(test, shape) else {
            return;
        };
        let fs = Fs::mount(
            Arc::new(MemDevice::from_vec(b.img.clone())),
            MountOptions::default(),
        )
        .unwrap_or_else(|e| panic!("{test}: mount base: {e}"));
        let mut w = Walk::default();
        walk_dir(&fs, ROOT_INO, 0, &mut w);
        assert!(
            w.errors.is_empty() && w.bugs.is_empty(),
            "{test}: {:?} {:?}",
            w.errors,
            w.bugs
        );
        fs.unmount().expect("unmount");
        let r = lanefs::fsck::check(&MemDevice::from_vec(b.img.clone()), &Default::default())
            .expect("fsck base");
        assert!(r.is_clean(), "{test}: lanefs fsck: {:?}", r.problems);
    }
}

/// About 100 corruptions of a 1 KiB-block ext4 image (superblock in block 1, descriptors
/// in block 2, 1 KiB extent, directory and htree blocks).
#[test]
fn damage_on_1k_blocks() {
    shape_damage("damage_on_1k_blocks", &EXT4_1K, 100);
}

/// About 100 corruptions of an ext3 image, with every indirect-block case (pointers out
/// of range, into metadata, shared, cyclic; garbage blocks; the inode's IND, DIND and TIND
/// slots).
#[test]
fn damage_on_ext3() {
    shape_damage("damage_on_ext3", &EXT3, 100);
}

// ---------------------------------------------------------------------------------------
// Feature bits.

fn with_features(b: &Base, incompat_or: u32, ro_or: u32) -> Vec<u8> {
    let mut img = b.img.clone();
    let i = le32(&img, 1024 + 0x60) | incompat_or;
    let r = le32(&img, 1024 + 0x64) | ro_or;
    put32(&mut img, 1024 + 0x60, i);
    put32(&mut img, 1024 + 0x64, r);
    fix_sb(&mut img);
    img
}

#[test]
fn unknown_and_recovery_features() {
    let Some(b) = base("unknown_and_recovery_features") else {
        return;
    };
    // Unknown INCOMPAT: refused, naming the bit.
    let img = with_features(b, 0x8000_0000, 0);
    let e = Fs::mount(Arc::new(MemDevice::from_vec(img)), MountOptions::default())
        .err()
        .expect("unknown INCOMPAT must be refused");
    let msg = e.to_string();
    assert!(
        msg.contains("INCOMPAT") && msg.contains("0x80000000"),
        "message: {msg}"
    );
    // A known but unsupported INCOMPAT feature (encrypt) is refused by name too.
    let img = with_features(b, 0x10000, 0);
    let e = Fs::mount(Arc::new(MemDevice::from_vec(img)), MountOptions::default())
        .err()
        .expect("encrypt must be refused");
    assert!(e.to_string().contains("encrypt"), "message: {e}");
    // needs_recovery with an empty log: nothing to replay; it mounts, and a clean unmount
    // clears the flag (as the kernel does).
    let img = with_features(b, 0x4, 0);
    let dev = Arc::new(MemDevice::from_vec(img));
    let fs = Fs::mount(dev.clone(), MountOptions::default())
        .expect("needs_recovery with an empty log mounts");
    fs.unmount().expect("unmount");
    assert_eq!(
        le32(&dev.snapshot(), 1024 + 0x60) & 0x4,
        0,
        "needs_recovery still set after a clean unmount"
    );
    // needs_recovery without a journal: refused by name.
    let mut img = with_features(b, 0x4, 0);
    let c = le32(&img, 1024 + 0x5C) & !0x4;
    put32(&mut img, 1024 + 0x5C, c);
    fix_sb(&mut img);
    let e = Fs::mount(Arc::new(MemDevice::from_vec(img)), MountOptions::default())
        .err()
        .expect("needs_recovery without a journal must be refused");
    let msg = e.to_string().to_lowercase();
    assert!(
        msg.contains("journal") && msg.contains("recovery"),
        "message: {msg}"
    );
    // Unknown RO_COMPAT: mounts read-only; reads work, every change is ReadOnly, no byte moves.
    let img = with_features(b, 0, 0x8000_0000);
    let dev = Arc::new(MemDevice::from_vec(img.clone()));
    let fs = Fs::mount(dev.clone(), MountOptions::default())
        .expect("unknown RO_COMPAT mounts read-only");
    let o = Owner::default();
    let big = fs.lookup(ROOT_INO, b"big").expect("lookup big");
    let mut buf = vec![0u8; 1000];
    assert_eq!(fs.read(big.ino, 0, &mut buf).expect("read"), 1000);
    assert_eq!(
        fs.create(ROOT_INO, b"x", 0o644, o).err(),
        Some(Error::ReadOnly)
    );
    assert_eq!(
        fs.mkdir(ROOT_INO, b"x", 0o755, o).err(),
        Some(Error::ReadOnly)
    );
    assert_eq!(fs.write(big.ino, 0, b"zz").err(), Some(Error::ReadOnly));
    assert_eq!(fs.unlink(ROOT_INO, b"big").err(), Some(Error::ReadOnly));
    assert_eq!(
        fs.rename(ROOT_INO, b"big", ROOT_INO, b"big2").err(),
        Some(Error::ReadOnly)
    );
    assert_eq!(
        fs.setattr(
            big.ino,
            &SetAttr {
                perm: Some(0o600),
                ..Default::default()
            }
        )
        .err(),
        Some(Error::ReadOnly)
    );
    assert_eq!(
        fs.symlink(ROOT_INO, b"l", b"t", o).err(),
        Some(Error::ReadOnly)
    );
    fs.unmount().expect("unmount read-only");
    assert!(dev.snapshot() == img, "a read-only mount changed the image");
    // Unknown COMPAT: harmless, mounts read-write.
    let img = with_features(b, 0, 0);
    let mut img2 = img.clone();
    let c = le32(&img2, 1024 + 0x5C) | 0x8000_0000;
    put32(&mut img2, 1024 + 0x5C, c);
    fix_sb(&mut img2);
    let fs = Fs::mount(Arc::new(MemDevice::from_vec(img2)), MountOptions::default())
        .expect("unknown COMPAT mounts");
    let a = fs
        .create(ROOT_INO, b"fine", 0o644, o)
        .expect("create with unknown COMPAT");
    fs.release(a.ino).expect("release");
    fs.unmount().expect("unmount");
}

// ---------------------------------------------------------------------------------------
// A failing device.

/// A memory device that fails writes after a budget and reads of chosen blocks.
struct FailDev {
    inner: MemDevice,
    writes: AtomicU64,
    refused: AtomicU64,
    budget: AtomicU64,
    bad_reads: Mutex<Vec<u64>>,
}

impl FailDev {
    fn new(img: Vec<u8>) -> Arc<FailDev> {
        Arc::new(FailDev {
            inner: MemDevice::from_vec(img),
            writes: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            budget: AtomicU64::new(u64::MAX),
            bad_reads: Mutex::new(Vec::new()),
        })
    }
    /// Allow `n` more writes, then fail every write.
    fn fail_writes_after(&self, n: u64) {
        self.budget
            .store(self.writes.load(Ordering::SeqCst) + n, Ordering::SeqCst);
    }
    fn fail_reads_of(&self, blk: u64) {
        self.bad_reads.lock().expect("bad_reads").push(blk);
    }
}

impl BlockDevice for FailDev {
    fn read_at(&self, off: u64, buf: &mut [u8]) -> lanefs::Result<()> {
        let (first, last) = (
            off / bs() as u64,
            (off + buf.len().max(1) as u64 - 1) / bs() as u64,
        );
        if self
            .bad_reads
            .lock()
            .expect("bad_reads")
            .iter()
            .any(|b| (first..=last).contains(b))
        {
            return Err(Error::Io(format!("injected read error at byte {off}")));
        }
        self.inner.read_at(off, buf)
    }
    fn write_at(&self, off: u64, buf: &[u8]) -> lanefs::Result<()> {
        if self.writes.fetch_add(1, Ordering::SeqCst) >= self.budget.load(Ordering::SeqCst) {
            self.refused.fetch_add(1, Ordering::SeqCst);
            return Err(Error::Io(format!("injected write error at byte {off}")));
        }
        self.inner.write_at(off, buf)
    }
    fn flush(&self) -> lanefs::Result<()> {
        self.inner.flush()
    }
    fn size(&self) -> u64 {
        self.inner.size()
    }
}

fn is_io_or_ro(e: &Error) -> bool {
    matches!(e, Error::Io(_) | Error::ReadOnly)
}

#[test]
fn failing_writes_give_io_errors_and_keep_committed_data() {
    let Some(b) = base("failing_writes_give_io_errors_and_keep_committed_data") else {
        return;
    };
    let committed: Vec<u8> = (0..300_000u32).map(|i| (i % 253) as u8).collect();
    for budget in [0u64, 1, 2, 3, 5, 10, 30, 100, 300] {
        let dev = FailDev::new(b.img.clone());
        let r = catch_unwind(AssertUnwindSafe(|| {
            let fs = Fs::mount(dev.clone(), MountOptions::default()).expect("mount");
            let o = Owner::default();
            let a = fs
                .create(ROOT_INO, b"committed", 0o644, o)
                .expect("create committed");
            fs.write(a.ino, 0, &committed).expect("write committed");
            fs.release(a.ino).expect("release");
            fs.sync().expect("sync committed");
            dev.fail_writes_after(budget);
            let mut io = 0;
            let mut ok_after_io = 0;
            let mut other = Vec::new();
            let mut note = |r: lanefs::Result<()>| match r {
                Ok(()) => ok_after_io += usize::from(io > 0),
                Err(e) if is_io_or_ro(&e) => io += 1,
                Err(e) => other.push(e),
            };
            for i in 0..50 {
                note(
                    fs.create(ROOT_INO, format!("late{i}").as_bytes(), 0o644, o)
                        .and_then(|a| {
                            fs.write(a.ino, 0, &vec![i as u8; 70_000])?;
                            fs.release(a.ino)
                        }),
                );
                if i % 10 == 9 {
                    note(fs.sync());
                }
            }
            note(fs.mkdir(ROOT_INO, b"late_dir", 0o755, o).map(|_| ()));
            note(fs.unlink(ROOT_INO, b"medium"));
            note(fs.sync());
            note(fs.unmount());
            assert!(other.is_empty(), "budget {budget}: non-IO errors {other:?}");
            let refused = dev.refused.load(Ordering::SeqCst);
            assert!(
                refused == 0 || io > 0,
                "budget {budget}: {refused} writes refused, no operation reported it"
            );
            // A device error turns the mount read-only: nothing may succeed afterwards.
            assert_eq!(
                ok_after_io, 0,
                "budget {budget}: changes accepted after a device error"
            );
            println!(
                "budget {budget}: {refused} writes refused, {io} operations failed with Io/ReadOnly, {ok_after_io} succeeded after the first failure"
            );
        }));
        assert!(r.is_ok(), "budget {budget}: panic on a failing device");
        // What was committed before the failure is still there.
        let fs = Fs::mount(
            Arc::new(MemDevice::from_vec(dev.inner.snapshot())),
            MountOptions {
                read_only: true,
                ..MountOptions::default()
            },
        )
        .unwrap_or_else(|e| panic!("budget {budget}: remount after failure: {e}"));
        let a = fs
            .lookup(ROOT_INO, b"committed")
            .expect("committed file after failure");
        let mut back = vec![0u8; committed.len() + 10];
        let mut off = 0;
        while off < back.len() {
            let n = fs
                .read(a.ino, off as u64, &mut back[off..])
                .expect("read committed");
            if n == 0 {
                break;
            }
            off += n;
        }
        assert_eq!(off, committed.len(), "budget {budget}: committed size");
        assert!(
            back[..off] == committed[..],
            "budget {budget}: committed bytes"
        );
        let big = fs.lookup(ROOT_INO, b"big").expect("big after failure");
        let mut buf = vec![0u8; 1 << 20];
        assert_eq!(fs.read(big.ino, 0, &mut buf).expect("read big"), 1 << 20);
    }
    // Failing the very first write: the read-write mount itself reports Io.
    let dev = FailDev::new(b.img.clone());
    dev.fail_writes_after(0);
    match Fs::mount(dev, MountOptions::default()) {
        Err(Error::Io(m)) => assert!(!m.is_empty()),
        Err(e) => panic!("mount on a device failing writes: unexpected {e:?}"),
        Ok(fs) => {
            let r = fs
                .create(ROOT_INO, b"x", 0o644, Owner::default())
                .and_then(|a| fs.release(a.ino))
                .and_then(|_| fs.sync());
            assert!(
                matches!(r, Err(Error::Io(_))),
                "writes on a failing device: {r:?}"
            );
        }
    }
}

#[test]
fn failing_reads_give_io_errors() {
    let Some(b) = base("failing_reads_give_io_errors") else {
        return;
    };
    let io = |r: lanefs::Result<()>, what: &str| match r {
        Err(Error::Io(m)) => assert!(!m.is_empty(), "{what}: empty message"),
        other => panic!("{what}: expected Error::Io, got {other:?}"),
    };
    let mount = |blk: u64| {
        let dev = FailDev::new(b.img.clone());
        dev.fail_reads_of(blk);
        Fs::mount(dev, MountOptions::default())
    };
    // Metadata the mount needs.
    io(mount(1).map(|_| ()), "GDT block unreadable");
    io(
        mount(b.inode_off(2) as u64 / bs() as u64).map(|_| ()),
        "root inode block unreadable",
    );
    // The frag file's extent leaf: that file fails, others read.
    let fs = mount(b.frag_leaf).expect("mount with a bad extent block");
    let frag = fs.lookup(ROOT_INO, b"frag").expect("lookup frag");
    let mut buf = vec![0u8; bs()];
    io(
        fs.read(frag.ino, 0, &mut buf).map(|_| ()),
        "read through a bad extent block",
    );
    let small = fs.lookup(ROOT_INO, b"small").expect("lookup small");
    assert!(fs.read(small.ino, 0, &mut buf).expect("read small") > 0);
    fs.unmount().expect("unmount");
    // A data block of big.
    let fs = mount(b.big_data).expect("mount with a bad data block");
    let big = fs.lookup(ROOT_INO, b"big").expect("lookup big");
    io(
        fs.read(big.ino, 0, &mut buf).map(|_| ()),
        "read of a bad data block",
    );
    assert!(
        fs.read(big.ino, 1 << 19, &mut buf).is_ok(),
        "other blocks of big still read"
    );
    fs.unmount().expect("unmount");
    // A directory block.
    let fs = mount(b.dir1_block).expect("mount with a bad directory block");
    let dir1 = fs.lookup(ROOT_INO, b"dir1").expect("lookup dir1");
    io(
        fs.readdir(dir1.ino, 0, 100).map(|_| ()),
        "readdir of a bad directory block",
    );
    io(
        fs.lookup(dir1.ino, b"a1").map(|_| ()),
        "lookup in a bad directory block",
    );
    io(
        fs.create(dir1.ino, b"new", 0o644, Owner::default())
            .map(|_| ()),
        "create in a bad directory block",
    );
    fs.unmount().expect("unmount");
    // The htree root.
    let fs = mount(b.htree_root).expect("mount with a bad htree root");
    let h = fs.lookup(ROOT_INO, b"htree").expect("lookup htree");
    io(
        fs.lookup(h.ino, b"entry_00001").map(|_| ()),
        "lookup through a bad htree root",
    );
    fs.unmount().expect("unmount");
}
