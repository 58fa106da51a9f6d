//! Goal: `lanefs::fsck` finds no problem in images mkfs.ext4 and e2fsck consider clean, finds
//! each classic corruption with the right code, and never panics or hangs on random damage.
//! Method: build 64 MiB images with mkfs.ext4 (pre-populated from a host tree with `-d`,
//! directories indexed with `e2fsck -fyD`, special files added with debugfs), corrupt them
//! byte by byte through the `disk` layer, and compare with `e2fsck -fn`.

#[path = "../common/mod.rs"]
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
            common::skip($name, "mkfs.ext4 not found");
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

mod damage;
mod differential;
mod shapes;
