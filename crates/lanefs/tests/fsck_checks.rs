//! Goal: `lanefs::fsck` finds no problem in images mkfs.ext4 and e2fsck consider clean, finds
//! each classic corruption with the right code, and never panics or hangs on random damage.
//! Method: build 64 MiB images with mkfs.ext4 (pre-populated from a host tree with `-d`,
//! directories indexed with `e2fsck -fyD`, special files added with debugfs), corrupt them
//! byte by byte through the `disk` layer, and compare with `e2fsck -fn`.

mod common;

use lanefs::fsck::{self, FsckOptions, FsckReport};
use lanefs::internals::disk::{
    self, dir, extent, group::GroupDesc, inode::DiskInode, superblock::Superblock,
};
use lanefs::{BlockDevice, FileDevice, MemDevice};
use rand::{Rng, SeedableRng};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BS: usize = 4096;

fn tools_present() -> bool {
    ["mkfs.ext4", "debugfs", "e2fsck"].iter().all(|t| {
        Command::new(t)
            .arg("-V")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok()
    })
}

/// Skip (or fail, when privileged tests are required) if the e2fsprogs tools are missing.
macro_rules! require_tools {
    ($name:expr) => {
        if !tools_present() {
            assert!(
                std::env::var("LANEFS_REQUIRE_PRIVILEGED").as_deref() != Ok("1"),
                "{}: mkfs.ext4 required",
                $name
            );
            println!("SKIP {}: mkfs.ext4 not found", $name);
            return;
        }
    };
}

struct Img {
    _td: tempfile::TempDir,
    path: PathBuf,
}

fn run(cmd: &mut Command) -> i32 {
    let out = cmd.output().expect("spawn");
    out.status.code().unwrap_or(-1)
}

/// A host tree with files of several sizes, nested dirs, symlinks, a hard link and a
/// directory big enough (3000 entries) to need an htree.
fn populate_tree(root: &Path) {
    let w = |p: &str, n: usize| std::fs::write(root.join(p), vec![b'x'; n]).unwrap();
    std::fs::create_dir_all(root.join("sub/deeper")).unwrap();
    std::fs::create_dir_all(root.join("big")).unwrap();
    w("empty", 0);
    w("small.txt", 10);
    w("medium", 5000);
    w("large", 300 * 1024);
    w("sub/deeper/file", 123);
    std::os::unix::fs::symlink("small.txt", root.join("short_link")).unwrap();
    std::os::unix::fs::symlink("a".repeat(100), root.join("long_link")).unwrap();
    std::fs::hard_link(root.join("small.txt"), root.join("sub/hard")).unwrap();
    // Data in every other block: 200 extents, so the tree needs an index block.
    let f = std::fs::File::create(root.join("sparse")).unwrap();
    for i in 0..200u64 {
        std::os::unix::fs::FileExt::write_all_at(&f, &[b'z'; 4096], i * 2 * 4096).unwrap();
    }
    for i in 0..3000 {
        std::fs::write(root.join(format!("big/entry-{i:05}")), b"").unwrap();
    }
}

/// Debian-default ext4 image of 64 MiB with `extra` mkfs options, populated and indexed.
fn make_image(extra: &[&str], populate: bool) -> Img {
    let td = tempfile::tempdir().unwrap();
    let path = td.path().join("t.img");
    std::fs::File::create(&path)
        .unwrap()
        .set_len(64 << 20)
        .unwrap();
    let mut cmd = Command::new("mkfs.ext4");
    cmd.args(["-q", "-F", "-b", "4096"]).args(extra);
    if populate {
        let tree = td.path().join("tree");
        populate_tree(&tree);
        cmd.arg("-d").arg(&tree);
    }
    assert_eq!(run(cmd.arg(&path)), 0, "mkfs.ext4 failed");
    if populate {
        debugfs(
            &path,
            &[
                "mknod pipe p",
                "mknod chardev c 1 3",
                "mknod blockdev b 8 1",
            ],
        );
        debugfs(
            &path,
            &[
                "ea_set /medium user.big -f /etc/hostname",
                "ea_set /small.txt user.k v",
            ],
        );
        let big = format!("ea_set /large user.big {}", "v".repeat(300));
        debugfs(&path, &[big.as_str()]);
        // Index every directory (mke2fs -d writes linear ones).
        run(Command::new("e2fsck").args(["-fyD"]).arg(&path));
    }
    Img { _td: td, path }
}

fn debugfs(img: &Path, cmds: &[&str]) {
    let mut child = Command::new("debugfs")
        .args(["-w", "-f", "-"])
        .arg(img)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(cmds.join("\n").as_bytes())
        .unwrap();
    child.wait().unwrap();
}

fn e2fsck_rc(img: &Path) -> i32 {
    run(Command::new("e2fsck").args(["-fn"]).arg(img))
}

fn check(img: &Path) -> FsckReport {
    let dev = FileDevice::open(img, true).unwrap();
    fsck::check(&dev, &FsckOptions::default()).expect("check")
}

fn assert_clean(img: &Path) {
    let r = check(img);
    assert!(
        r.problems.is_empty(),
        "unexpected problems: {:#?}",
        r.problems
    );
    assert_eq!(r.exit_code(), 0);
    assert_eq!(
        e2fsck_rc(img),
        0,
        "e2fsck -fn disagrees: image is not clean"
    );
}

/// Check a corrupted image: `code` must be reported, and e2fsck must agree it is broken.
fn assert_detects(img: &Path, code: &str) -> FsckReport {
    let r = check(img);
    for p in &r.problems {
        println!("[{code}] {p}");
    }
    assert!(r.has(code), "{code} not reported; got {:#?}", r.problems);
    assert_eq!(r.exit_code(), 4);
    assert_ne!(e2fsck_rc(img), 0, "e2fsck -fn found no problem");
    r
}

/// An image's bytes plus the decoded structures the corruptions need.
struct Raw {
    bytes: Vec<u8>,
    sb: Superblock,
}

impl Raw {
    fn load(p: &Path) -> Raw {
        let bytes = std::fs::read(p).unwrap();
        let sb = Superblock::decode(&bytes[1024..2048], bytes.len() as u64).unwrap();
        Raw { bytes, sb }
    }
    fn save(&self, p: &Path) {
        std::fs::write(p, &self.bytes).unwrap();
    }
    fn gd(&self, g: usize) -> GroupDesc {
        let ds = self.sb.desc_size() as usize;
        GroupDesc {
            raw: self.bytes[BS + g * ds..BS + (g + 1) * ds].to_vec(),
        }
    }
    fn put_gd(&mut self, g: usize, mut d: GroupDesc) {
        d.update_checksum(self.sb.csum_seed(), g as u32);
        let ds = d.raw.len();
        self.bytes[BS + g * ds..BS + (g + 1) * ds].copy_from_slice(&d.raw);
    }
    fn inode_off(&self, ino: u32) -> usize {
        let ipg = self.sb.inodes_per_group();
        let g = ((ino - 1) / ipg) as usize;
        let isz = usize::from(self.sb.inode_size());
        self.gd(g).inode_table() as usize * BS + ((ino - 1) % ipg) as usize * isz
    }
    fn inode(&self, ino: u32) -> DiskInode {
        let o = self.inode_off(ino);
        DiskInode::from_bytes(&self.bytes[o..o + usize::from(self.sb.inode_size())])
    }
    fn put_inode(&mut self, ino: u32, mut i: DiskInode) {
        i.update_checksum(self.sb.csum_seed(), ino);
        let o = self.inode_off(ino);
        self.bytes[o..o + i.raw.len()].copy_from_slice(&i.raw);
    }
    /// Leaf extents of an inode whose tree fits in i_block.
    fn extents(&self, ino: u32) -> Vec<extent::Extent> {
        match extent::decode_node(self.inode(ino).iblock(), 0).unwrap() {
            extent::Node::Leaf(v) => v,
            extent::Node::Index(..) => panic!("inode {ino} has a deep tree"),
        }
    }
    /// Inode number of `name` in the root directory (root is linear or an htree leaf).
    /// The first physical blocks (at most 16) of an inode mapped by extents (leaf root) or by
    /// direct pointers.
    fn data_blocks(&self, ino: u32) -> Vec<u64> {
        let i = self.inode(ino);
        if i.flags() & disk::inode::FL_EXTENTS == 0 {
            let ib = i.iblock();
            return (0..12)
                .map(|k| u64::from(disk::le32(ib, 4 * k)))
                .filter(|&b| b != 0)
                .collect();
        }
        let ext = self.extents(ino);
        ext.iter()
            .flat_map(|e| (0..u64::from(e.len)).map(move |k| e.pblk + k))
            .take(16)
            .collect()
    }
    /// Inode number of `name` in the root directory (root is linear or an htree leaf).
    fn lookup_root(&self, name: &str) -> u32 {
        let csum = self.sb.metadata_csum();
        for b in self.data_blocks(2) {
            let o = b as usize * BS;
            let Ok(ents) = dir::parse_block(&self.bytes[o..o + BS], csum, 0) else {
                continue;
            };
            if let Some(x) = ents.iter().find(|x| x.name == name.as_bytes()) {
                return x.ino;
            }
        }
        panic!("{name} not found in /");
    }
    fn fix_block_bitmap_csum(&mut self, g: usize) {
        let mut d = self.gd(g);
        let o = d.block_bitmap() as usize * BS;
        let bytes = self.sb.clusters_per_group() as usize / 8;
        let c = disk::group::bitmap_csum(self.sb.csum_seed(), &self.bytes[o..o + BS], bytes, true);
        d.set_block_bitmap_csum(c);
        self.put_gd(g, d);
    }
}

#[test]
fn clean_images_have_no_problems() {
    require_tools!("clean_images_have_no_problems");
    for (extra, populate) in [
        (&[][..], false),
        (&[][..], true),
        (&["-g", "8192", "-N", "8192"][..], true),
        (&["-O", "^metadata_csum"][..], true),
        (&["-O", "^metadata_csum,uninit_bg", "-g", "8192"][..], true),
    ] {
        let img = make_image(extra, populate);
        assert_clean(&img.path);
        let r = check(&img.path);
        if populate {
            assert!(
                r.dirs >= 5 && r.files >= 3005 && r.symlinks == 2,
                "{}",
                r.summary()
            );
            assert_eq!(r.special_files, 3, "{}", r.summary());
        }
        println!("{extra:?}: {}", r.summary());
    }
}

#[test]
fn htree_directory_is_checked() {
    require_tools!("htree_directory_is_checked");
    let img = make_image(&[], true);
    let mut raw = Raw::load(&img.path);
    let big = raw.lookup_root("big");
    assert_ne!(
        raw.inode(big).flags() & disk::inode::FL_INDEX,
        0,
        "big is not indexed"
    );
    // Swap two leaf blocks' contents: every entry stays valid but lands outside the hash
    // range its new position is indexed for.
    let ext = raw.extents(big);
    let (a, b) = (
        (ext[0].pblk + 1) as usize * BS,
        (ext[0].pblk + 2) as usize * BS,
    );
    let (x, y) = (raw.bytes[a..a + BS].to_vec(), raw.bytes[b..b + BS].to_vec());
    raw.bytes[a..a + BS].copy_from_slice(&y);
    raw.bytes[b..b + BS].copy_from_slice(&x);
    // Leaf checksums do not depend on the block number, so they stay valid.
    raw.save(&img.path);
    assert_detects(&img.path, "HTREE_HASH_RANGE");
}

#[test]
fn flipped_block_bitmap_byte_fails_checksum() {
    require_tools!("flipped_block_bitmap_byte_fails_checksum");
    let img = make_image(&[], true);
    let mut raw = Raw::load(&img.path);
    let o = raw.gd(0).block_bitmap() as usize * BS + 100;
    raw.bytes[o] ^= 0x5A;
    raw.save(&img.path);
    assert_detects(&img.path, "BLOCK_BITMAP_CSUM");
}

#[test]
fn cleared_bitmap_bit_is_a_mismatch() {
    require_tools!("cleared_bitmap_bit_is_a_mismatch");
    let img = make_image(&[], true);
    let mut raw = Raw::load(&img.path);
    let ino = raw.lookup_root("large");
    let pblk = raw.extents(ino)[0].pblk as usize;
    let o = raw.gd(0).block_bitmap() as usize * BS;
    disk::clear_bit(&mut raw.bytes[o..o + BS], pblk);
    raw.fix_block_bitmap_csum(0);
    raw.save(&img.path);
    let r = assert_detects(&img.path, "BLOCK_BITMAP_MISMATCH");
    assert!(!r.has("BLOCK_BITMAP_CSUM"), "{:#?}", r.problems);
    assert!(
        r.problems
            .iter()
            .any(|p| p.message.contains(&format!("+{pblk}"))),
        "{:#?}",
        r.problems
    );
}

#[test]
fn wrong_link_count_is_found() {
    require_tools!("wrong_link_count_is_found");
    let img = make_image(&[], true);
    let mut raw = Raw::load(&img.path);
    let ino = raw.lookup_root("medium");
    let mut i = raw.inode(ino);
    i.set_links(5);
    raw.put_inode(ino, i);
    raw.save(&img.path);
    let r = assert_detects(&img.path, "LINK_COUNT");
    assert!(!r.has("INODE_CHECKSUM"));
}

#[test]
fn bad_rec_len_is_found() {
    require_tools!("bad_rec_len_is_found");
    let img = make_image(&[], true);
    let mut raw = Raw::load(&img.path);
    let sub = raw.lookup_root("sub");
    let pblk = raw.extents(sub)[0].pblk as usize;
    let blk = &mut raw.bytes[pblk * BS..(pblk + 1) * BS];
    // Second entry (".."): an odd record length.
    disk::put16(blk, 12 + 4, 13);
    let seed = raw.inode(sub).csum_seed(raw.sb.csum_seed(), sub);
    dir::set_leaf_csum(seed, &mut raw.bytes[pblk * BS..(pblk + 1) * BS]);
    raw.save(&img.path);
    let r = assert_detects(&img.path, "DIR_BAD_ENTRY");
    assert!(!r.has("DIR_CHECKSUM"));
}

/// The htree root's ".." spans the rest of the block; a shorter length (checksum fixed
/// up, so only the length is wrong) is "directory corrupted" to e2fsck and to us.
#[test]
fn htree_root_dotdot_length_is_checked() {
    require_tools!("htree_root_dotdot_length_is_checked");
    let img = make_image(&[], true);
    let mut raw = Raw::load(&img.path);
    let big = raw.lookup_root("big");
    let pblk = raw.extents(big)[0].pblk as usize;
    let blk = &mut raw.bytes[pblk * BS..(pblk + 1) * BS];
    disk::put16(blk, 12 + 4, (BS - 12 - 16) as u16);
    let seed = raw.inode(big).csum_seed(raw.sb.csum_seed(), big);
    dir::set_dx_csum(
        seed,
        &mut raw.bytes[pblk * BS..(pblk + 1) * BS],
        dir::DX_ROOT_COUNT_OFF,
    );
    raw.save(&img.path);
    let r = assert_detects(&img.path, "HTREE_BAD_ROOT");
    assert!(!r.has("DIR_CHECKSUM"), "{:#?}", r.problems);
}

#[test]
fn bad_extent_magic_is_found() {
    require_tools!("bad_extent_magic_is_found");
    let img = make_image(&[], true);
    let mut raw = Raw::load(&img.path);
    let ino = raw.lookup_root("large");
    let mut i = raw.inode(ino);
    disk::put16(i.iblock_mut(), 0, 0xBEEF);
    raw.put_inode(ino, i);
    raw.save(&img.path);
    assert_detects(&img.path, "EXTENT_BAD_HEADER");
}

#[test]
fn shared_block_names_both_owners() {
    require_tools!("shared_block_names_both_owners");
    let img = make_image(&[], true);
    let mut raw = Raw::load(&img.path);
    let (a, b) = (raw.lookup_root("large"), raw.lookup_root("medium"));
    let target = raw.extents(a)[0].pblk;
    let mut i = raw.inode(b);
    // First extent's physical start: ee_start_hi at 12+6, ee_start_lo at 12+8.
    disk::put16(i.iblock_mut(), 18, (target >> 32) as u16);
    disk::put32(i.iblock_mut(), 20, target as u32);
    raw.put_inode(b, i);
    raw.save(&img.path);
    let r = assert_detects(&img.path, "DUP_BLOCK");
    let p = r.problems.iter().find(|p| p.code == "DUP_BLOCK").unwrap();
    assert!(
        p.message.contains(&format!("inode {a}")) && p.message.contains(&format!("inode {b}")),
        "{p}"
    );
}

#[test]
fn wrong_group_free_count_is_found() {
    require_tools!("wrong_group_free_count_is_found");
    let img = make_image(&[], true);
    let mut raw = Raw::load(&img.path);
    let mut d = raw.gd(0);
    d.set_free_blocks(d.free_blocks() - 7);
    raw.put_gd(0, d);
    raw.save(&img.path);
    assert_detects(&img.path, "GROUP_FREE_BLOCKS");
}

#[test]
fn unlinked_file_is_unattached() {
    require_tools!("unlinked_file_is_unattached");
    let img = make_image(&[], true);
    debugfs(&img.path, &["unlink /medium"]);
    assert_detects(&img.path, "UNATTACHED_INODE");
}

#[test]
fn shared_xattr_block_refcount_is_checked() {
    require_tools!("shared_xattr_block_refcount_is_checked");
    let img = make_image(&[], true);
    let mut raw = Raw::load(&img.path);
    let (a, b) = (raw.lookup_root("large"), raw.lookup_root("empty"));
    let xb = raw.inode(a).file_acl();
    assert_ne!(xb, 0, "large has no xattr block");
    // Point a second inode at the same block: legal only once the refcount says 2.
    let mut i = raw.inode(b);
    i.set_file_acl(xb);
    let bs = raw.sb.block_size();
    i.set_blocks_512(i.blocks_512(bs) + 8, bs);
    raw.put_inode(b, i);
    raw.save(&img.path);
    assert_detects(&img.path, "XATTR_REFCOUNT");
    let o = xb as usize * BS;
    disk::put32(&mut raw.bytes[o..o + BS], 4, 2);
    let mut c = disk::crc32c_raw(raw.sb.csum_seed(), &xb.to_le_bytes());
    c = disk::crc32c_raw(c, &raw.bytes[o..o + 0x10]);
    c = disk::crc32c_raw(c, &[0; 4]);
    c = disk::crc32c_raw(c, &raw.bytes[o + 0x14..o + BS]);
    disk::put32(&mut raw.bytes[o..o + BS], 0x10, c);
    raw.save(&img.path);
    assert_clean(&img.path);
}

#[test]
fn info_report_lists_features_and_histogram() {
    require_tools!("info_report_lists_features_and_histogram");
    let img = make_image(&["-g", "8192"], true);
    let dev = FileDevice::open(&img.path, true).unwrap();
    let text = lanefs::info::report(&dev).unwrap();
    for want in [
        "has_journal",
        "metadata_csum",
        "extent",
        "64bit",
        "flex_bg",
        "dir_index",
    ] {
        assert!(text.contains(want), "missing {want}:\n{text}");
    }
    assert!(text.contains("HISTOGRAM OF FREE EXTENT SIZES"), "{text}");
    assert!(text.contains("Extent Size Range"), "{text}");
    assert_eq!(
        text.lines()
            .filter(|l| l.trim_start().starts_with("1 "))
            .count(),
        1,
        "{text}"
    );
    println!("{text}");
}

/// Byte ranges worth corrupting: superblock, descriptors, bitmaps, the first inode table
/// blocks, and directory blocks.
fn metadata_regions(raw: &Raw) -> Vec<(usize, usize)> {
    let mut v = vec![(1024, 1024), (BS, BS)];
    let groups = raw.sb.group_count() as usize;
    for g in 0..groups {
        let d = raw.gd(g);
        v.push((d.block_bitmap() as usize * BS, BS));
        v.push((d.inode_bitmap() as usize * BS, BS));
    }
    v.push((raw.gd(0).inode_table() as usize * BS, 4 * BS));
    for name in ["sub", "big", "large", "sparse", "long_link", "pipe"] {
        let ino = raw.lookup_root(name);
        v.push((raw.inode_off(ino) / BS * BS, BS));
    }
    for ino in [2, raw.lookup_root("sub"), raw.lookup_root("big")] {
        v.extend(
            raw.data_blocks(ino)
                .iter()
                .take(4)
                .map(|&b| (b as usize * BS, BS)),
        );
    }
    // The sparse file's extent index block, or its single indirect block.
    let sparse = raw.inode(raw.lookup_root("sparse"));
    if sparse.flags() & disk::inode::FL_EXTENTS != 0 {
        let extent::Node::Index(1, ix) = extent::decode_node(sparse.iblock(), 0).unwrap() else {
            panic!("sparse file has no extent index block");
        };
        v.extend(ix.iter().map(|i| (i.child as usize * BS, BS)));
    } else {
        v.push((disk::le32(sparse.iblock(), 48) as usize * BS, BS));
    }
    // Every htree leaf of "big" (the root is among its first blocks above), the block
    // xattrs of "large", the slow symlink's block, the journal superblock, and the root
    // inode's and the journal inode's table blocks.
    let big = raw.lookup_root("big");
    v.extend(raw.data_blocks(big).iter().map(|&b| (b as usize * BS, BS)));
    let acl = raw.inode(raw.lookup_root("large")).file_acl();
    if acl != 0 {
        v.push((acl as usize * BS, BS));
    }
    let link = raw.lookup_root("long_link");
    v.extend(raw.data_blocks(link).iter().map(|&b| (b as usize * BS, BS)));
    if let Some(&j) = raw.data_blocks(8).first() {
        v.push((j as usize * BS, 1024));
    }
    v.sort_unstable();
    v.dedup();
    v
}

fn dev_byte(dev: &MemDevice, off: usize) -> u8 {
    let mut b = [0u8; 1];
    dev.read_at(off as u64, &mut b).unwrap();
    b[0]
}

#[test]
fn random_corruption_never_panics() {
    require_tools!("random_corruption_never_panics");
    // LANEFS_FUZZ_MKFS picks other 4 KiB layouts, e.g. "-O ^metadata_csum,^extent".
    let opts = std::env::var("LANEFS_FUZZ_MKFS").unwrap_or("-g 8192 -N 8192".into());
    let img = make_image(&opts.split_whitespace().collect::<Vec<_>>(), true);
    let raw = Raw::load(&img.path);
    let regions = metadata_regions(&raw);
    let dev = MemDevice::from_vec(raw.bytes.clone());
    let seed = std::env::var("LANEFS_FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x1a9e_f5c4);
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let start = Instant::now();
    let (mut errs, mut dirty, mut slowest) = (0, 0, Duration::ZERO);
    let mut err_kinds = std::collections::BTreeMap::<String, usize>::new();
    let iters: usize = std::env::var("LANEFS_FUZZ_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    for iter in 0..iters {
        let mut saved = Vec::new();
        // Mostly 1-16 flipped bytes, as the brief asks; with LANEFS_FUZZ_HEAVY also random
        // aligned words (counts, lengths, block numbers) and whole blocks of garbage.
        let heavy = std::env::var("LANEFS_FUZZ_HEAVY").is_ok();
        for _ in 0..rng.gen_range(1..=16) {
            let (base, len) = regions[rng.gen_range(0..regions.len())];
            let off = base + rng.gen_range(0..len);
            let mode = if heavy { rng.gen_range(0..10) } else { 0 };
            let new: Vec<u8> = match mode {
                0..=5 => vec![dev_byte(&dev, off) ^ rng.gen_range(1..=255u8)],
                6..=8 => (rng.gen::<u32>() >> rng.gen_range(0..32))
                    .to_le_bytes()
                    .to_vec(),
                _ => (0..BS).map(|_| rng.gen()).collect(),
            };
            let off = match mode {
                0..=5 => off,
                6..=8 => (off & !3).min(base + len - 4),
                _ => off / BS * BS,
            } as u64;
            let mut old = vec![0u8; new.len()];
            dev.read_at(off, &mut old).unwrap();
            saved.push((off, old));
            dev.write_at(off, &new).unwrap();
        }
        let t = Instant::now();
        match fsck::check(&dev, &FsckOptions::default()) {
            Ok(r) => dirty += usize::from(!r.is_clean()),
            Err(e) => {
                errs += 1;
                let kind: String = e.to_string().chars().take(36).collect();
                *err_kinds.entry(kind).or_insert(0) += 1;
            }
        }
        slowest = slowest.max(t.elapsed());
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "iteration {iter} took {:?}",
            t.elapsed()
        );
        for (off, b) in saved.into_iter().rev() {
            dev.write_at(off, &b).unwrap();
        }
    }
    println!(
        "{iters} iterations: {dirty} with problems, {errs} errors, slowest {slowest:?}, total {:?}",
        start.elapsed()
    );
    println!("errors by kind: {err_kinds:#?}");
    assert!(
        dirty + errs >= iters * 3 / 4,
        "too few corruptions detected: {dirty} + {errs}"
    );
    let budget = Duration::from_secs(120 * (iters as u64).div_ceil(200));
    assert!(start.elapsed() < budget);
}

/// Timing on a large image: 4 GiB with 100,000 files. Run with
/// `cargo test --release --test fsck_checks -- --ignored --nocapture large_image_timing`.
#[test]
#[ignore]
fn large_image_timing() {
    require_tools!("large_image_timing");
    let td = tempfile::tempdir().unwrap();
    let tree = td.path().join("tree");
    for d in 0..100 {
        let dir = tree.join(format!("d{d:03}"));
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..1000 {
            std::fs::write(dir.join(format!("f{f:04}")), vec![b'y'; (f % 7) * 1500]).unwrap();
        }
    }
    let path = td.path().join("big.img");
    std::fs::File::create(&path)
        .unwrap()
        .set_len(4 << 30)
        .unwrap();
    let t = Instant::now();
    let rc = run(Command::new("mkfs.ext4")
        .args(["-q", "-F", "-b", "4096", "-d"])
        .arg(&tree)
        .arg(&path));
    assert_eq!(rc, 0);
    println!("mkfs.ext4 -d: {:?}", t.elapsed());
    run(Command::new("e2fsck").args(["-fyD"]).arg(&path));
    let t = Instant::now();
    let dev = FileDevice::open(&path, true).unwrap();
    let r = fsck::check(&dev, &FsckOptions { verbose: true }).unwrap();
    let ours = t.elapsed();
    for n in &r.notes {
        println!("{n}");
    }
    let t = Instant::now();
    let e2 = e2fsck_rc(&path);
    println!(
        "lanefs fsck: {ours:?} ({}); e2fsck -fn: {:?} (rc {e2})",
        r.summary(),
        t.elapsed()
    );
    assert!(r.problems.is_empty(), "{:#?}", r.problems);
    assert_eq!(e2, 0);
}

/// Whether loop mounts work here (root and a loop device).
fn mount_loop(img: &Path, dir: &Path) -> bool {
    std::fs::create_dir_all(dir).unwrap();
    run(Command::new("mount")
        .arg("-o")
        .arg("loop")
        .arg(img)
        .arg(dir))
        == 0
}

/// Punch a hole (keeping the size), to split one extent into many.
#[allow(unsafe_code)]
fn punch(f: &std::fs::File, off: i64, len: i64) {
    use std::os::fd::AsRawFd;
    let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
    // SAFETY: plain syscall on a valid open descriptor.
    let rc = unsafe { libc::fallocate(f.as_raw_fd(), mode, off, len) };
    assert_eq!(rc, 0, "fallocate punch failed");
}

/// Preallocate beyond EOF (unwritten extents past i_size).
#[allow(unsafe_code)]
fn prealloc_keep_size(f: &std::fs::File, off: i64, len: i64) {
    use std::os::fd::AsRawFd;
    // SAFETY: plain syscall on a valid open descriptor.
    let rc = unsafe { libc::fallocate(f.as_raw_fd(), libc::FALLOC_FL_KEEP_SIZE, off, len) };
    assert_eq!(rc, 0, "fallocate keep-size failed");
}

#[allow(unsafe_code)]
fn set_xattr(p: &Path, name: &str, value: &[u8]) {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
    let name = std::ffi::CString::new(name).unwrap();
    // SAFETY: valid NUL-terminated strings and a live buffer.
    let rc = unsafe {
        libc::setxattr(
            path.as_ptr(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    assert_eq!(rc, 0, "setxattr failed");
}

/// A workload the kernel writes: htree directory, deletions, renames, hard and symbolic
/// links, xattrs, a deep extent tree (punched holes), preallocation past EOF.
fn kernel_workload(m: &Path) {
    std::fs::create_dir_all(m.join("a/b/c")).unwrap();
    std::fs::create_dir(m.join("many")).unwrap();
    for i in 0..5000 {
        std::fs::write(m.join(format!("many/file-{i}")), vec![b'k'; i % 3 * 700]).unwrap();
    }
    for i in (0..5000).step_by(2) {
        std::fs::remove_file(m.join(format!("many/file-{i}"))).unwrap();
    }
    for i in (1..200).step_by(2) {
        std::fs::rename(
            m.join(format!("many/file-{i}")),
            m.join(format!("a/b/moved-{i}")),
        )
        .unwrap();
    }
    std::fs::hard_link(m.join("many/file-201"), m.join("a/hard")).unwrap();
    std::os::unix::fs::symlink("many/file-203", m.join("short")).unwrap();
    std::os::unix::fs::symlink("x".repeat(200), m.join("a/long")).unwrap();
    run(Command::new("mkfifo").arg(m.join("a/fifo")));
    let deep = std::fs::File::create(m.join("deep")).unwrap();
    deep.set_len(8 << 20).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&deep, &vec![1u8; 8 << 20], 0).unwrap();
    deep.sync_all().unwrap();
    for i in 0..1024 {
        punch(&deep, i * 8192, 4096);
    }
    let pre = std::fs::File::create(m.join("prealloc")).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&pre, b"data", 0).unwrap();
    prealloc_keep_size(&pre, 0, 1 << 20);
    set_xattr(&m.join("a/b/c"), "user.small", b"v");
    set_xattr(&m.join("deep"), "user.large", &[b'q'; 2000]);
    std::fs::write(m.join("a/b/c/truncated"), vec![7u8; 100_000]).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(m.join("a/b/c/truncated"))
        .unwrap()
        .set_len(5000)
        .unwrap();
}

#[test]
fn kernel_written_image_is_clean() {
    require_tools!("kernel_written_image_is_clean");
    let img = make_image(&["-g", "8192"], false);
    let mnt = img._td.path().join("mnt");
    if !mount_loop(&img.path, &mnt) {
        assert!(
            std::env::var("LANEFS_REQUIRE_PRIVILEGED").as_deref() != Ok("1"),
            "loop mount required"
        );
        println!("SKIP kernel_written_image_is_clean: cannot loop-mount (needs root)");
        return;
    }
    kernel_workload(&mnt);
    run(&mut Command::new("sync"));
    // A copy taken while mounted still has needs_recovery set.
    let live = img._td.path().join("live.img");
    std::fs::copy(&img.path, &live).unwrap();
    assert_eq!(run(Command::new("umount").arg(&mnt)), 0, "umount failed");
    let r = check(&live);
    assert!(r.has("JOURNAL_NEEDS_RECOVERY"), "{:#?}", r.problems);
    let deep = {
        let raw = Raw::load(&img.path);
        let ino = raw.lookup_root("deep");
        extent::decode_node(raw.inode(ino).iblock(), 0).unwrap()
    };
    assert!(
        matches!(deep, extent::Node::Index(..)),
        "deep file has no index node"
    );
    let raw = Raw::load(&img.path);
    let many = raw.inode(raw.lookup_root("many"));
    assert_ne!(
        many.flags() & disk::inode::FL_INDEX,
        0,
        "kernel did not index 'many'"
    );
    let r = check(&img.path);
    println!("{}", r.summary());
    assert_clean(&img.path);
}

/// Check an arbitrary image named by LANEFS_FSCK_IMAGE (for manual use).
#[test]
#[ignore]
fn check_image_from_env() {
    let Ok(p) = std::env::var("LANEFS_FSCK_IMAGE") else {
        return;
    };
    let dev = FileDevice::open(Path::new(&p), true).unwrap();
    let r = fsck::check(&dev, &FsckOptions { verbose: true }).unwrap();
    for p in r.problems.iter().chain(&r.notes) {
        println!("{p}");
    }
    println!("{}", r.summary());
}

/// What a metadata block is, for fixing its checksum after a corruption.
#[derive(Clone, Copy, Debug)]
enum Meta {
    /// A directory block of inode `ino`: block 0 of an htree directory when `root`.
    Dir { ino: u32, root: bool },
    /// An extent tree block of inode `ino`.
    Extent(u32),
    /// The journal superblock.
    JournalSuper,
}

/// The metadata blocks `metadata_regions` covers whose type is not found by position.
fn meta_blocks(raw: &Raw) -> std::collections::HashMap<u64, Meta> {
    let mut m = std::collections::HashMap::new();
    for ino in [2, raw.lookup_root("sub"), raw.lookup_root("big")] {
        let indexed = raw.inode(ino).flags() & disk::inode::FL_INDEX != 0;
        for (k, b) in raw.data_blocks(ino).into_iter().enumerate() {
            m.insert(
                b,
                Meta::Dir {
                    ino,
                    root: indexed && k == 0,
                },
            );
        }
    }
    let sparse = raw.lookup_root("sparse");
    if let Ok(extent::Node::Index(1, ix)) = extent::decode_node(raw.inode(sparse).iblock(), 0) {
        m.extend(ix.iter().map(|i| (i.child, Meta::Extent(sparse))));
    }
    if let Some(&j) = raw.data_blocks(8).first() {
        m.insert(j, Meta::JournalSuper);
    }
    m
}

/// Recompute the checksum covering byte `off` of `raw`, as a corruption that knows the
/// format would; returns the blocks it rewrote (besides `off`'s own).
fn fix_checksum(
    raw: &mut Raw,
    meta: &std::collections::HashMap<u64, Meta>,
    off: usize,
) -> Vec<usize> {
    let seed = raw.sb.csum_seed();
    let groups = raw.sb.group_count() as usize;
    let ds = raw.sb.desc_size() as usize;
    let blk = off / BS;
    if (1024..2048).contains(&off) {
        let mut sb = Superblock::zeroed();
        sb.raw.copy_from_slice(&raw.bytes[1024..2048]);
        sb.update_checksum();
        raw.bytes[1024..2048].copy_from_slice(&sb.raw[..]);
        return vec![];
    }
    if off >= BS && off < BS + groups * ds {
        for g in 0..groups {
            let d = raw.gd(g);
            raw.put_gd(g, d);
        }
        return vec![];
    }
    let ipg = raw.sb.inodes_per_group() as usize;
    let isz = usize::from(raw.sb.inode_size());
    for g in 0..groups {
        let d = raw.gd(g);
        if blk as u64 == d.block_bitmap() || blk as u64 == d.inode_bitmap() {
            let (bb, ib) = (
                d.block_bitmap() as usize * BS,
                d.inode_bitmap() as usize * BS,
            );
            let mut d = d;
            let bpg = raw.sb.clusters_per_group() as usize;
            d.set_block_bitmap_csum(disk::group::bitmap_csum(
                seed,
                &raw.bytes[bb..bb + BS],
                bpg / 8,
                true,
            ));
            d.set_inode_bitmap_csum(disk::group::bitmap_csum(
                seed,
                &raw.bytes[ib..ib + BS],
                ipg / 8,
                true,
            ));
            raw.put_gd(g, d);
            return vec![BS];
        }
        let it = d.inode_table() as usize * BS;
        if off >= it && off < it + ipg * isz {
            let ino = (g * ipg + (off - it) / isz + 1) as u32;
            let i = raw.inode(ino);
            raw.put_inode(ino, i);
            return vec![];
        }
    }
    let b = &mut raw.bytes[blk * BS..(blk + 1) * BS];
    match meta.get(&(blk as u64)) {
        Some(&Meta::Dir { ino, root }) => {
            let iseed =
                DiskInode::from_bytes(&raw.bytes[raw.inode_off(ino)..][..isz]).csum_seed(seed, ino);
            let b = &mut raw.bytes[blk * BS..(blk + 1) * BS];
            if root {
                dir::set_dx_csum(iseed, b, dir::DX_ROOT_COUNT_OFF);
            } else if disk::le32(b, 0) == 0 && usize::from(disk::le16(b, 4)) == BS {
                dir::set_dx_csum(iseed, b, dir::DX_NODE_COUNT_OFF);
            } else if dir::has_tail(b) {
                dir::set_leaf_csum(iseed, b);
            }
        }
        Some(&Meta::Extent(ino)) => {
            let iseed = raw.inode(ino).csum_seed(seed, ino);
            let b = &mut raw.bytes[blk * BS..(blk + 1) * BS];
            if 12 + 12 * usize::from(disk::le16(b, 4)) + 4 <= BS {
                extent::set_block_csum(iseed, b);
            }
        }
        Some(Meta::JournalSuper) => {
            if let Ok(mut js) = lanefs::internals::disk::jbd2::JournalSuper::decode(&b[..1024]) {
                js.update_checksum();
                b[..1024].copy_from_slice(&js.raw);
            }
        }
        None => {}
    }
    vec![]
}

/// Differential run against `e2fsck -fn` on randomly corrupted images: 1 to 4 bytes of
/// metadata flipped, and in half the cases every checksum over them recomputed (as a
/// corruption that knows the format would), so the checks behind the checksums are
/// judged too. lanefs fsck and e2fsck must agree on clean or not in every case (a problem
/// e2fsck finds and asks about but exits 0 for counts as found). The image has a fixed
/// UUID and hash seed, so a seed replays the same cases (`LANEFS_FUZZ_MKFS` overrides).
/// `LANEFS_FUZZ_ITERS` (300), `LANEFS_FUZZ_SEED`, `LANEFS_FUZZ_MKFS` ("-g 8192 -N 8192").
#[test]
fn differential_against_e2fsck() {
    require_tools!("differential_against_e2fsck");
    // A fixed UUID and hash seed: the same seed corrupts the same bytes of the same layout.
    let opts = std::env::var("LANEFS_FUZZ_MKFS").unwrap_or(
        "-g 8192 -N 8192 -U 6b1d1a4e-3c2f-4f0e-9a55-0c9e2b7d4f11 -E hash_seed=1f2e3d4c-5b6a-4798-8a9b-0c1d2e3f4a5b".into(),
    );
    let img = make_image(&opts.split_whitespace().collect::<Vec<_>>(), true);
    let pristine = Raw::load(&img.path);
    let regions = metadata_regions(&pristine);
    let meta = meta_blocks(&pristine);
    let mut raw = Raw::load(&img.path);
    let dev = FileDevice::open(&img.path, false).unwrap();
    let seed = std::env::var("LANEFS_FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    println!("LANEFS_FUZZ_SEED={seed}");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let iters: usize = std::env::var("LANEFS_FUZZ_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let mut tally = [[0usize; 2]; 2];
    let mut disagree = Vec::new();
    for it in 0..iters {
        let fixed = rng.gen_bool(0.5);
        let mut touched = std::collections::BTreeSet::new();
        let mut flips = Vec::new();
        for _ in 0..rng.gen_range(1..=4) {
            let (base, len) = regions[rng.gen_range(0..regions.len())];
            let off = base + rng.gen_range(0..len);
            raw.bytes[off] ^= rng.gen_range(1..=255u8);
            flips.push(off);
            touched.insert(off / BS);
            if fixed {
                touched.extend(
                    fix_checksum(&mut raw, &meta, off)
                        .into_iter()
                        .map(|o| o / BS),
                );
            }
        }
        for &b in &touched {
            dev.write_at((b * BS) as u64, &raw.bytes[b * BS..(b + 1) * BS])
                .unwrap();
        }
        let ours = match fsck::check(&dev, &FsckOptions::default()) {
            Ok(r) => r,
            Err(e) => {
                println!("ERR {e}");
                FsckReport {
                    problems_omitted: 1,
                    ..FsckReport::default()
                }
            }
        };
        let out = Command::new("e2fsck")
            .arg("-fn")
            .arg(&img.path)
            .output()
            .unwrap();
        let theirs = out.status.code() != Some(0);
        tally[usize::from(!ours.is_clean())][usize::from(theirs)] += 1;
        // e2fsck exits 0 for a few problems it finds but calls harmless (an extent tree
        // "could be more shallow" at a depth the kernel refuses to read): it still asks
        // "...? no", and lanefs reporting them is agreement, not a false alarm.
        let theirs_noted = String::from_utf8_lossy(&out.stdout).contains("? no");
        let agree = if ours.is_clean() {
            !theirs
        } else {
            theirs || theirs_noted
        };
        if !agree {
            let what: Vec<String> = ours
                .problems
                .iter()
                .take(4)
                .map(|p| p.to_string())
                .collect();
            let text = String::from_utf8_lossy(&out.stdout);
            let e2: Vec<&str> = text
                .lines()
                .filter(|l| !l.starts_with("Pass "))
                .take(6)
                .collect();
            println!(
                "DISAGREE #{it} ours={} e2fsck={theirs} fixed={fixed} flips={flips:?}: {what:#?} e2fsck: {e2:#?}",
                !ours.is_clean()
            );
            disagree.push(it);
        }
        for &b in &touched {
            raw.bytes[b * BS..(b + 1) * BS].copy_from_slice(&pristine.bytes[b * BS..(b + 1) * BS]);
            dev.write_at((b * BS) as u64, &raw.bytes[b * BS..(b + 1) * BS])
                .unwrap();
        }
    }
    println!(
        "ours clean/e2fsck clean {}, ours clean/e2fsck dirty {}",
        tally[0][0], tally[0][1]
    );
    println!(
        "ours dirty/e2fsck clean {}, ours dirty/e2fsck dirty {}",
        tally[1][0], tally[1][1]
    );
    assert!(
        disagree.is_empty(),
        "lanefs fsck and e2fsck disagree on cases {disagree:?} (seed {seed})"
    );
}

/// Goal: hostile but well-formed structures stay cheap. Method: turn 300 empty files into
/// directories that all map the same 16,000 blocks (metadata included); without a bound,
/// pass 2 would parse 19 GB of directory blocks. check() must finish fast and report it.
#[test]
fn hostile_shared_directory_maps_stay_bounded() {
    require_tools!("hostile_shared_directory_maps_stay_bounded");
    let img = make_image(&[], true);
    let mut raw = Raw::load(&img.path);
    let empty: Vec<u32> = (12..4000)
        .filter(|&i| {
            let n = raw.inode(i);
            n.mode() & 0xF000 == 0x8000 && n.size() == 0 && n.links() == 1
        })
        .take(300)
        .collect();
    assert_eq!(empty.len(), 300);
    for &ino in &empty {
        let mut i = raw.inode(ino);
        i.set_mode(0o40755);
        i.set_size(16000 * 4096);
        i.set_flags(disk::inode::FL_EXTENTS);
        let e = extent::Extent {
            lblk: 0,
            len: 16000,
            pblk: 100,
            unwritten: false,
        };
        extent::encode_node(i.iblock_mut(), &extent::Node::Leaf(vec![e]));
        raw.put_inode(ino, i);
    }
    raw.save(&img.path);
    let t = Instant::now();
    let r = check(&img.path);
    assert!(
        t.elapsed() < Duration::from_secs(20),
        "took {:?}",
        t.elapsed()
    );
    let codes: std::collections::BTreeSet<_> = r.problems.iter().map(|p| p.code).collect();
    println!("codes: {codes:?}");
    assert!(
        r.has("DIR_SCAN_LIMIT") && r.has("BLOCK_IS_METADATA"),
        "{codes:?}"
    );
    println!(
        "{} problems in {:?}",
        r.problems.len() as u64 + r.problems_omitted,
        t.elapsed()
    );
}

/// Print `info::report` for the image named by LANEFS_FSCK_IMAGE (for manual use).
#[test]
#[ignore]
fn info_image_from_env() {
    let Ok(p) = std::env::var("LANEFS_FSCK_IMAGE") else {
        return;
    };
    let dev = FileDevice::open(Path::new(&p), true).unwrap();
    print!("{}", lanefs::info::report(&dev).unwrap());
}

/// Shapes `mke2fs` makes besides the default, each checked at every block size: ext2 and
/// ext3 (block maps, 32-bit journal tags), revision 0, uninit_bg instead of metadata_csum,
/// meta_bg, 128-byte inodes, no filetype / dir_index / flex_bg / sparse_super, inline
/// data, xattr values in inodes, mmp, quota and project quota.
const SHAPES: &[(&str, &[&str])] = &[
    ("ext2", &["-t", "ext2"]),
    ("ext3", &["-t", "ext3"]),
    ("ext4", &["-t", "ext4"]),
    ("rev0", &["-t", "ext2", "-r", "0"]),
    (
        "uninit_bg",
        &["-t", "ext4", "-O", "^metadata_csum,uninit_bg"],
    ),
    ("ext3_uninit_bg", &["-t", "ext3", "-O", "uninit_bg"]),
    ("meta_bg", &["-t", "ext4", "-O", "meta_bg,^resize_inode"]),
    (
        "ext3_meta_bg",
        &["-t", "ext3", "-O", "meta_bg,^resize_inode"],
    ),
    ("inode128", &["-t", "ext4", "-I", "128"]),
    ("no_filetype", &["-t", "ext4", "-O", "^filetype"]),
    ("no_dir_index", &["-t", "ext4", "-O", "^dir_index"]),
    ("no_flex_bg", &["-t", "ext4", "-O", "^flex_bg"]),
    (
        "no_sparse",
        &["-t", "ext4", "-O", "^sparse_super,^resize_inode"],
    ),
    ("inline", &["-t", "ext4", "-O", "inline_data"]),
    ("ea_inode", &["-t", "ext4", "-O", "ea_inode,inline_data"]),
    ("mmp", &["-t", "ext4", "-O", "mmp"]),
    ("quota", &["-t", "ext4", "-O", "quota,project", "-I", "256"]),
    (
        "quota_ea_inode",
        &["-t", "ext4", "-O", "quota,project,ea_inode", "-I", "256"],
    ),
];

/// A host tree for `mke2fs -d`: files of several sizes (inline-sized ones too), nested and
/// multi-block directories, short and long symlinks, a hard link, a sparse file.
fn shape_tree(root: &Path) {
    let w = |p: &str, n: usize| std::fs::write(root.join(p), vec![b'x'; n]).unwrap();
    std::fs::create_dir_all(root.join("sub/deeper")).unwrap();
    std::fs::create_dir_all(root.join("wide")).unwrap();
    for (name, n) in [
        ("empty", 0),
        ("tiny", 10),
        ("inline", 100),
        ("medium", 5000),
    ] {
        w(name, n);
    }
    w("large", 300 * 1024);
    w("sub/deeper/file", 123);
    std::os::unix::fs::symlink("tiny", root.join("short_link")).unwrap();
    std::os::unix::fs::symlink("a".repeat(100), root.join("long_link")).unwrap();
    std::os::unix::fs::symlink("b".repeat(500), root.join("longer_link")).unwrap();
    std::fs::hard_link(root.join("tiny"), root.join("sub/hard")).unwrap();
    let f = std::fs::File::create(root.join("sparse")).unwrap();
    for i in 0..20u64 {
        std::os::unix::fs::FileExt::write_all_at(&f, &[b'z'; 1000], i * 40_000).unwrap();
    }
    for i in 0..300 {
        std::fs::write(root.join(format!("wide/entry-{i:04}")), b"").unwrap();
    }
}

/// `mke2fs -q -F -b BS ARGS [-d TREE]` on a sparse file of `mib` MiB; None when mke2fs
/// refuses the combination.
fn mke2fs_image(path: &Path, mib: u64, bs: u32, args: &[&str], tree: Option<&Path>) -> bool {
    let f = std::fs::File::create(path).unwrap();
    f.set_len(mib << 20).unwrap();
    drop(f);
    let mut cmd = Command::new("mke2fs");
    cmd.args(["-q", "-F", "-b", &bs.to_string()]).args(args);
    if let Some(t) = tree {
        cmd.arg("-d").arg(t);
    }
    cmd.arg(path).stdout(Stdio::null()).stderr(Stdio::null());
    cmd.status().is_ok_and(|s| s.success())
}

/// Whether lanefs fsck and `e2fsck -fn` agree on `img` (clean or not); a description of
/// the disagreement otherwise.
fn disagreement(img: &Path, what: &str) -> Option<String> {
    let (rc, text) = common::e2fsck(img);
    let dev = FileDevice::open(img, true).unwrap();
    let r = match fsck::check(&dev, &FsckOptions::default()) {
        Ok(r) => r,
        Err(e) => {
            return Some(format!(
                "{what}: lanefs fsck failed: {e}\ne2fsck {rc}:\n{text}"
            ))
        }
    };
    (r.is_clean() != (rc == 0)).then(|| {
        format!(
            "{what}: lanefs {} ({:?}), e2fsck exit {rc}:\n{text}",
            r.summary(),
            r.problems
        )
    })
}

/// Goal: lanefs fsck agrees with `e2fsck -fn` on every image shape mke2fs makes, at every
/// block size (1, 2, 4 and 64 KiB). Method: each shape, empty and filled from a host tree
/// with `mke2fs -d`, then the same image with one planted fault per shape (a bitmap bit
/// and a link count, through debugfs), which both must find. Filled quota images get
/// their usage from `e2fsck -fy` (`mke2fs -d` leaves it stale; this kernel mounts no
/// quota image), then must be clean for both, and a file's owner changed behind quota's
/// back must be found by both. bigalloc is refused by name.
#[test]
fn shapes_agree_with_e2fsck() {
    if !common::require_tools("shapes_agree_with_e2fsck", &["mke2fs", "e2fsck", "debugfs"]) {
        return;
    }
    let td = tempfile::tempdir().unwrap();
    let tree = td.path().join("tree");
    shape_tree(&tree);
    let img = td.path().join("shape.img");
    let mut bad = Vec::new();
    let mut checked = 0;
    for bs in [1024u32, 2048, 4096, 65536] {
        let mib = if bs == 65536 { 256 } else { 64 };
        for &(name, args) in SHAPES {
            for fill in [false, true] {
                let what = format!(
                    "{name}, {bs}-byte blocks{}",
                    if fill { ", filled" } else { "" }
                );
                if !mke2fs_image(&img, mib, bs, args, fill.then_some(tree.as_path())) {
                    bad.push(format!("{what}: mke2fs refused"));
                    continue;
                }
                checked += 1;
                let quota = name.starts_with("quota");
                if fill && quota {
                    // mke2fs -d leaves the usage stale; e2fsck -fy counts it (value
                    // inodes too), and then both must call it clean.
                    run(Command::new("e2fsck").args(["-fy"]).arg(&img));
                    if !check(&img).is_clean() {
                        bad.push(format!("{what}: lanefs disagrees with e2fsck's quota"));
                    }
                }
                bad.extend(disagreement(&img, &what));
                if fill && quota {
                    // A planted fault: a file given to another user behind quota's back.
                    let img2 = td.path().join("quota2.img");
                    std::fs::copy(&img, &img2).unwrap();
                    debugfs(&img2, &["sif /medium uid 4242"]);
                    if !check(&img2).has("QUOTA_USAGE") || e2fsck_rc(&img2) == 0 {
                        bad.push(format!("{what}: planted quota owner not found by both"));
                    }
                }
                if fill {
                    // A planted fault: a file's link count off by one.
                    debugfs(&img, &["sif /medium links_count 7"]);
                    let r = check(&img);
                    if r.is_clean() || e2fsck_rc(&img) == 0 {
                        bad.push(format!("{what}: planted link count not found by both"));
                    }
                }
            }
        }
    }
    assert!(
        bad.is_empty(),
        "{checked} images, disagreements:\n{}",
        bad.join("\n")
    );
    assert!(mke2fs_image(
        &img,
        64,
        4096,
        &["-t", "ext4", "-O", "bigalloc"],
        None
    ));
    let dev = FileDevice::open(&img, true).unwrap();
    let e = fsck::check(&dev, &FsckOptions::default()).expect_err("bigalloc is refused");
    assert!(e.to_string().contains("bigalloc"), "{e}");
}

/// setxattr that may fail (a value too large for a shape without ea_inode).
#[allow(unsafe_code)]
fn try_set_xattr(p: &Path, name: &str, value: &[u8]) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
    let name = std::ffi::CString::new(name).unwrap();
    // SAFETY: valid NUL-terminated strings and a live buffer.
    let rc = unsafe {
        libc::setxattr(
            path.as_ptr(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    rc == 0
}

/// What the kernel writes on every shape: a directory growing past one block (htree where
/// indexed), deletions, hard and symbolic links, a fifo, small, block and inode-sized
/// xattrs (the last only fits with ea_inode, and is shared by two files there), files
/// truncated down.
fn shape_workload(m: &Path) {
    std::fs::create_dir_all(m.join("k/a/b")).unwrap();
    for i in 0..400 {
        std::fs::write(m.join(format!("k/a/b/n{i:04}")), vec![b'n'; i % 5 * 40]).unwrap();
    }
    for i in (0..400).step_by(3) {
        std::fs::remove_file(m.join(format!("k/a/b/n{i:04}"))).unwrap();
    }
    for i in 0..40usize {
        std::fs::write(m.join(format!("k/f{i}")), vec![b'f'; i * 397]).unwrap();
    }
    std::fs::hard_link(m.join("k/f1"), m.join("k/a/hard")).unwrap();
    std::os::unix::fs::symlink("k/f2", m.join("short")).unwrap();
    std::os::unix::fs::symlink("x".repeat(200), m.join("k/long")).unwrap();
    run(Command::new("mkfifo").arg(m.join("k/fifo")));
    for f in ["k/f1", "k/f2", "k/f4"] {
        try_set_xattr(&m.join(f), "user.small", b"s");
        try_set_xattr(&m.join(f), "user.block", &[b'b'; 700]);
        try_set_xattr(&m.join(f), "user.huge", &[b'h'; 9000]);
    }
    std::fs::write(m.join("k/trunc"), vec![7u8; 100_000]).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(m.join("k/trunc"))
        .unwrap()
        .set_len(5000)
        .unwrap();
}

/// Goal: lanefs fsck agrees with `e2fsck -fn` on images of every shape the kernel has
/// written (block sizes up to 4 KiB, which the kernel mounts here). Method: mke2fs each
/// shape, loop-mount it, run a workload, unmount, compare both checkers.
#[test]
fn kernel_filled_shapes_agree_with_e2fsck() {
    let name = "kernel_filled_shapes_agree_with_e2fsck";
    let td = tempfile::tempdir().unwrap();
    if !common::kernel_ready(name, td.path(), &["mke2fs"]) {
        return;
    }
    let img = td.path().join("k.img");
    let mnt = td.path().join("mnt");
    let mut bad = Vec::new();
    for bs in [1024u32, 2048, 4096] {
        for &(shape, args) in SHAPES {
            let what = format!("{shape}, {bs}-byte blocks, kernel-filled");
            if !mke2fs_image(&img, 64, bs, args, None) {
                bad.push(format!("{what}: mke2fs refused"));
                continue;
            }
            let m = match common::KernelMount::mount(&img, &mnt, "") {
                Ok(m) => m,
                // A kernel built without quota support refuses quota images.
                Err(e) if shape.starts_with("quota") => {
                    println!("{what}: not mounted (kernel without quota support?): {e}");
                    continue;
                }
                Err(e) => {
                    bad.push(format!("{what}: the kernel refuses to mount it: {e}"));
                    continue;
                }
            };
            shape_workload(&m.dir);
            m.unmount().expect("unmount");
            bad.extend(disagreement(&img, &what));
        }
    }
    assert!(bad.is_empty(), "disagreements:\n{}", bad.join("\n"));
}

/// Goal: features whose structures the checker does not parse are named, not misread.
/// Method: a populated image with `shared_blocks` or `verity` set (debugfs `feature`),
/// and one with a read-only-compatible bit nobody defined; `check` must refuse each with
/// `Unsupported` naming the feature (the CLI's exit 8), instead of reporting duplicate
/// blocks or bad sizes.
#[test]
fn unchecked_ro_compat_features_are_named() {
    require_tools!("unchecked_ro_compat_features_are_named");
    for (feature, named) in [
        ("shared_blocks", "shared_blocks"),
        ("verity", "verity"),
        ("0x80000000", "0x80000000"),
    ] {
        let img = make_image(&[], true);
        if feature.starts_with("0x") {
            let mut raw = std::fs::read(&img.path).unwrap();
            let mut s = lanefs::internals::disk::superblock::Superblock::decode(
                &raw[1024..2048],
                raw.len() as u64,
            )
            .unwrap();
            // s_feature_ro_compat, at 0x64.
            let v = u32::from_le_bytes(s.raw[0x64..0x68].try_into().unwrap()) | 0x8000_0000;
            s.raw[0x64..0x68].copy_from_slice(&v.to_le_bytes());
            s.update_checksum();
            raw[1024..2048].copy_from_slice(&s.raw[..]);
            std::fs::write(&img.path, raw).unwrap();
        } else {
            debugfs(&img.path, &[&format!("feature {feature}")]);
        }
        let dev = FileDevice::open(&img.path, true).unwrap();
        match fsck::check(&dev, &FsckOptions::default()) {
            Err(lanefs::Error::Unsupported(m)) => assert!(m.contains(named), "{feature}: {m}"),
            other => panic!("{feature}: {other:?}"),
        }
    }
}

/// Goal: a bad block list naming metadata is found, as e2fsck's `process_bad_block`
/// finds it: the primary superblock and descriptors, and a group's bitmaps. Method: a
/// 1 KiB-block image whose bad blocks inode (1) is pointed by debugfs at each in turn;
/// a list naming a free data block stays clean for both.
#[test]
fn bad_block_list_naming_metadata_is_found() {
    if !common::require_tools(
        "bad_block_list_naming_metadata_is_found",
        &["mke2fs", "e2fsck", "debugfs"],
    ) {
        return;
    }
    let td = tempfile::tempdir().unwrap();
    let path = td.path().join("bb.img");
    assert!(mke2fs_image(&path, 8, 1024, &["-t", "ext4"], None));
    let sb = {
        let dev = FileDevice::open(&path, true).unwrap();
        let mut b = vec![0u8; 1024];
        dev.read_at(1024, &mut b).unwrap();
        Superblock::decode(&b, 8 << 20).unwrap()
    };
    let bitmap = {
        let out = Command::new("dumpe2fs").arg(&path).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let line = text
            .lines()
            .find(|l| l.contains("Block bitmap at"))
            .expect("dumpe2fs names group 0's block bitmap");
        let n: String = line
            .split("Block bitmap at ")
            .nth(1)
            .unwrap()
            .chars()
            .take_while(|c| c.is_ascii_digit())
            .collect();
        n.parse::<u64>().unwrap()
    };
    let free_block = sb.blocks_count() - 10;
    for (block, code) in [
        (1, Some("BADBLOCK_IN_PRIMARY")),
        (2, Some("BADBLOCK_IN_PRIMARY")),
        (bitmap, Some("BADBLOCK_IN_BITMAP")),
        (free_block, None),
    ] {
        let img = td.path().join(format!("bb-{block}.img"));
        std::fs::copy(&path, &img).unwrap();
        let b = format!("sif <1> block[0] {block}");
        debugfs(&img, &[b.as_str(), "sif <1> blocks 2", "sif <1> size 1024"]);
        if code.is_none() {
            // e2fsck marks the listed block in use and counts it; then both call it clean.
            run(Command::new("e2fsck").args(["-fy"]).arg(&img));
            assert_clean(&img);
            continue;
        }
        assert_detects(&img, code.unwrap());
    }
}
