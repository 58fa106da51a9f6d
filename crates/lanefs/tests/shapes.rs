//! Goal: lanefs reads and writes every image shape `mke2fs` makes, as the kernel and
//! e2fsprogs do: block sizes 1, 2, 4 and 64 KiB; ext2, ext3 and ext4; and ext4 with the
//! optional features users meet (inline_data, uninit_bg without metadata_csum, meta_bg,
//! no filetype, no dir_index, no flex_bg, no sparse_super, no large_file, 128-byte inodes,
//! mmp, ea_inode, quota, project, bigalloc), plus an ext3 image converted with
//! `tune2fs -O extent` (old files keep block maps, new files use extents).
//!
//! Method, per shape (one `#[test]` each, every failing phase of a shape reported at once):
//! (c) `lanefs fsck` must call the untouched `mke2fs` image clean;
//! (a) the kernel writes a tree through a loop mount (for 64 KiB blocks, and where the kernel
//!     refuses the image, the same tree is put in with `mke2fs -d`): small files (inline on
//!     inline_data), a file mapped through double-indirect blocks on ext2/ext3 (and a sparse
//!     file reaching triple-indirect blocks where the block size allows), a directory of 300
//!     entries (an htree where dir_index), fast and slow symlinks, hard links, odd modes and
//!     owners, xattrs (one over a block on ea_inode); lanefs reads it back identical
//!     (names, kinds, modes, owners, sizes, contents, link targets, link groups, xattrs);
//! (b) lanefs writes: new files and directories, appends growing a file across the
//!     direct -> indirect -> double-indirect boundaries, truncates back across them, unlinks,
//!     renames (over a file, of a directory across directories), mkdir/rmdir, small files
//!     and a directory outgrowing inline storage, 150 more entries in the big directory;
//!     then `e2fsck -fn` and lanefs fsck must be clean, and the kernel (loop mount, ro; or
//!     debugfs where the kernel cannot mount) must read exactly the expected tree. On
//!     ext2/ext3 grown files must keep their block maps; new files on extent images must
//!     use extents (judged by debugfs).
//!
//! Shapes with quota, project or bigalloc may mount read-only, but then the reason must
//! name the feature and a write must fail; every other shape must mount read-write.
//! `pristine_images_fsck_clean` runs (c) alone over a wider table (tiny images, default
//! mke2fs sizes), no root needed.
//!
//! Needs root, loop devices and e2fsprogs; otherwise each test prints `SKIP` (or fails when
//! `LANEFS_REQUIRE_PRIVILEGED=1`).

mod common;

use common::{debugfs, debugfs_bytes, lanefs_fsck, mke2fs_image, run, KernelMount};
use lanefs::{Error, FileType, Fs, Ino, MountOptions, Owner, SetAttr, XattrFlags, ROOT_INO};
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

/// The model's page size (independent of the file system's block size).
const PAGE: u64 = 4096;
/// Files up to this size are compared whole; bigger (sparse) ones around their data.
const WHOLE: u64 = 8 << 20;
/// Direct block pointers in an inode.
const NDIR: u64 = 12;
/// Entries of the big directory.
const MANY: usize = 300;

// ---------------------------------------------------------------------------------------
// The shapes.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// Must mount read-write.
    Rw,
    /// May mount read-only, then naming this feature; or read-write.
    RoOrRw(&'static str),
}

struct Shape {
    name: &'static str,
    bs: u64,
    size: u64,
    mkfs: &'static [&'static str],
    /// `tune2fs` arguments applied after the kernel's tree is written (empty: none).
    tune: &'static [&'static str],
    expect: Expect,
}

impl Shape {
    fn kind(&self) -> &'static str {
        let i = self
            .mkfs
            .iter()
            .position(|a| *a == "-t")
            .expect("-t in mkfs");
        self.mkfs[i + 1]
    }
    /// Files the kernel makes on this image are block-mapped.
    fn old_blockmap(&self) -> bool {
        self.kind() != "ext4"
    }
    /// New files must use extents.
    fn new_extents(&self) -> bool {
        self.kind() == "ext4" || self.tune.contains(&"extent")
    }
    fn has(&self, feature: &str) -> bool {
        self.mkfs.iter().any(|a| a.split(',').any(|f| f == feature))
    }
    fn inline(&self) -> bool {
        self.has("inline_data")
    }
    fn ea_inode(&self) -> bool {
        self.has("ea_inode")
    }
}

const M: u64 = 1 << 20;

/// Every shape of the matrix: each block size x ext2/ext3/ext4, then ext4 variants.
const SHAPES: &[Shape] = &[
    sh("ext2_1k", 1024, 64 * M, &["-t", "ext2", "-b", "1024"]),
    sh("ext2_2k", 2048, 64 * M, &["-t", "ext2", "-b", "2048"]),
    sh("ext2_4k", 4096, 128 * M, &["-t", "ext2", "-b", "4096"]),
    sh("ext2_64k", 65536, 256 * M, &["-t", "ext2", "-b", "65536"]),
    sh("ext3_1k", 1024, 64 * M, &["-t", "ext3", "-b", "1024"]),
    sh("ext3_2k", 2048, 64 * M, &["-t", "ext3", "-b", "2048"]),
    sh("ext3_4k", 4096, 128 * M, &["-t", "ext3", "-b", "4096"]),
    sh("ext3_64k", 65536, 256 * M, &["-t", "ext3", "-b", "65536"]),
    sh("ext4_1k", 1024, 64 * M, &["-t", "ext4", "-b", "1024"]),
    sh("ext4_2k", 2048, 64 * M, &["-t", "ext4", "-b", "2048"]),
    sh("ext4_4k", 4096, 128 * M, &["-t", "ext4", "-b", "4096"]),
    sh("ext4_64k", 65536, 256 * M, &["-t", "ext4", "-b", "65536"]),
    sh(
        "ext4_inline_data",
        4096,
        128 * M,
        &["-t", "ext4", "-b", "4096", "-O", "inline_data"],
    ),
    sh(
        "ext4_1k_inline_data",
        1024,
        64 * M,
        &["-t", "ext4", "-b", "1024", "-O", "inline_data"],
    ),
    sh(
        "ext4_uninit_bg",
        4096,
        128 * M,
        &["-t", "ext4", "-b", "4096", "-O", "^metadata_csum,uninit_bg"],
    ),
    sh(
        "ext4_1k_meta_bg",
        1024,
        256 * M,
        &["-t", "ext4", "-b", "1024", "-O", "meta_bg,^resize_inode"],
    ),
    sh(
        "ext4_no_filetype",
        4096,
        128 * M,
        &["-t", "ext4", "-b", "4096", "-O", "^filetype"],
    ),
    sh(
        "ext4_no_dir_index",
        4096,
        128 * M,
        &["-t", "ext4", "-b", "4096", "-O", "^dir_index"],
    ),
    sh(
        "ext4_no_flex_bg",
        1024,
        64 * M,
        &["-t", "ext4", "-b", "1024", "-O", "^flex_bg"],
    ),
    sh(
        "ext4_no_sparse_super",
        4096,
        256 * M,
        &[
            "-t",
            "ext4",
            "-b",
            "4096",
            "-O",
            "^sparse_super,^resize_inode",
        ],
    ),
    sh(
        "ext2_1k_no_large_file",
        1024,
        64 * M,
        &["-t", "ext2", "-b", "1024", "-O", "^large_file"],
    ),
    sh(
        "ext4_128_inodes",
        4096,
        128 * M,
        &["-t", "ext4", "-b", "4096", "-I", "128"],
    ),
    sh(
        "ext3_1k_128_inodes",
        1024,
        64 * M,
        &["-t", "ext3", "-b", "1024", "-I", "128"],
    ),
    sh(
        "ext4_mmp",
        4096,
        128 * M,
        &["-t", "ext4", "-b", "4096", "-O", "mmp"],
    ),
    sh(
        "ext4_ea_inode",
        4096,
        128 * M,
        &["-t", "ext4", "-b", "4096", "-O", "ea_inode"],
    ),
    Shape {
        expect: Expect::RoOrRw("quota"),
        ..sh(
            "ext4_quota",
            4096,
            128 * M,
            &["-t", "ext4", "-b", "4096", "-O", "quota"],
        )
    },
    Shape {
        expect: Expect::RoOrRw("project"),
        ..sh(
            "ext4_project",
            4096,
            128 * M,
            &["-t", "ext4", "-b", "4096", "-O", "project"],
        )
    },
    Shape {
        expect: Expect::RoOrRw("bigalloc"),
        ..sh(
            "ext4_bigalloc",
            4096,
            128 * M,
            &["-t", "ext4", "-b", "4096", "-O", "bigalloc", "-C", "16384"],
        )
    },
    sh(
        "ext2_4k_oldest",
        4096,
        128 * M,
        &[
            "-t",
            "ext2",
            "-b",
            "4096",
            "-I",
            "128",
            "-O",
            "^filetype,^dir_index,^sparse_super,^resize_inode,^large_file,^ext_attr",
        ],
    ),
    Shape {
        tune: &["-O", "extent"],
        ..sh(
            "ext3_4k_then_extent",
            4096,
            128 * M,
            &["-t", "ext3", "-b", "4096"],
        )
    },
];

const fn sh(name: &'static str, bs: u64, size: u64, mkfs: &'static [&'static str]) -> Shape {
    Shape {
        name,
        bs,
        size,
        mkfs,
        tune: &[],
        expect: Expect::Rw,
    }
}

fn shape(name: &str) -> &'static Shape {
    SHAPES
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no shape {name}"))
}

/// Block-map geometry: where the direct, indirect, double- and triple-indirect reach ends.
#[derive(Debug, Clone, Copy)]
struct Geo {
    bs: u64,
    /// Pointers per indirect block.
    ind: u64,
}

impl Geo {
    fn new(bs: u64) -> Geo {
        Geo { bs, ind: bs / 4 }
    }
    /// First logical block mapped through the double-indirect block.
    fn dind_start(&self) -> u64 {
        NDIR + self.ind
    }
    /// First logical block mapped through the triple-indirect block, if a block-mapped file
    /// can reach it (i_blocks counts 512-byte sectors in 32 bits: 2 TiB).
    fn tind_start(&self) -> Option<u64> {
        let b = NDIR + self.ind + self.ind * self.ind;
        ((b + 8) * self.bs < (1u64 << 41)).then_some(b)
    }
    /// Dense files are written whole up to this many blocks (64 KiB blocks: sparse).
    fn dense(&self) -> bool {
        self.bs <= 4096
    }
}

// ---------------------------------------------------------------------------------------
// The model: what the tree must hold.

fn pattern(seed: u64, off: u64, len: usize) -> Vec<u8> {
    (0..len as u64)
        .map(|i| {
            let x = (off + i)
                .wrapping_add(seed.wrapping_mul(0x9E37_79B9))
                .wrapping_mul(0x9E37_79B9_7F4A_7C15);
            ((x >> 56) as u8) | 1
        })
        .collect()
}

/// A file's bytes: its size and its data by 4 KiB page (absent pages read as zeros).
#[derive(Debug, Clone, Default)]
struct Content {
    size: u64,
    pages: BTreeMap<u64, Vec<u8>>,
}

impl Content {
    fn write(&mut self, off: u64, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        let end = off + data.len() as u64;
        for p in off / PAGE..=(end - 1) / PAGE {
            let page = self
                .pages
                .entry(p)
                .or_insert_with(|| vec![0; PAGE as usize]);
            let s = (p * PAGE).max(off);
            let e = (p * PAGE + PAGE).min(end);
            page[(s - p * PAGE) as usize..(e - p * PAGE) as usize]
                .copy_from_slice(&data[(s - off) as usize..(e - off) as usize]);
        }
        self.size = self.size.max(end);
    }

    fn truncate(&mut self, size: u64) {
        if size < self.size {
            let keep = size.div_ceil(PAGE);
            self.pages.split_off(&keep);
            if let Some(p) = self.pages.get_mut(&(size / PAGE)) {
                p[(size % PAGE) as usize..].fill(0);
            }
        }
        self.size = size;
    }

    fn read(&self, off: u64, len: usize) -> Vec<u8> {
        let end = (off + len as u64).min(self.size);
        if off >= end {
            return Vec::new();
        }
        let mut out = vec![0u8; (end - off) as usize];
        for (&p, page) in self.pages.range(off / PAGE..=(end - 1) / PAGE) {
            let s = (p * PAGE).max(off);
            let e = (p * PAGE + PAGE).min(end);
            out[(s - off) as usize..(e - off) as usize]
                .copy_from_slice(&page[(s - p * PAGE) as usize..(e - p * PAGE) as usize]);
        }
        out
    }

    /// Ranges to compare: everything for small files; otherwise every data page, and the
    /// first and last page of every hole.
    fn ranges(&self) -> Vec<(u64, usize)> {
        if self.size <= WHOLE {
            let mut v = Vec::new();
            let mut off = 0;
            while off < self.size {
                let n = (self.size - off).min(1 << 20);
                v.push((off, n as usize));
                off += n;
            }
            return v;
        }
        let mut v = Vec::new();
        let mut next = 0u64; // first byte after the last data page seen
        let clip = |o: u64, size: u64| (o, (size - o).min(PAGE) as usize);
        for &p in self.pages.keys().filter(|&&p| p * PAGE < self.size) {
            let o = p * PAGE;
            if o > next {
                v.push(clip(next, self.size));
                v.push(clip(o - PAGE, self.size));
            }
            v.push(clip(o, self.size));
            next = o + PAGE;
        }
        if next < self.size {
            v.push(clip(next, self.size));
            let last = (self.size - 1) / PAGE * PAGE;
            v.push(clip(last.max(next), self.size));
        }
        v.sort_unstable();
        v.dedup();
        v
    }
}

#[derive(Debug, Clone)]
enum Body {
    Dir,
    File(Content),
    Link(Vec<u8>),
}

#[derive(Debug, Clone)]
struct Obj {
    perm: u32,
    uid: u32,
    gid: u32,
    body: Body,
    xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
}

#[derive(Debug, Clone, Default)]
struct Model {
    objs: Vec<Obj>,
    /// Path (relative, '/'-separated) -> object.
    paths: BTreeMap<String, usize>,
}

fn parent(p: &str) -> &str {
    p.rfind('/').map_or("", |i| &p[..i])
}

fn base(p: &str) -> &str {
    p.rfind('/').map_or(p, |i| &p[i + 1..])
}

impl Model {
    fn new() -> Model {
        let mut m = Model::default();
        m.add("lost+found", 0o700, Body::Dir);
        m
    }
    fn add(&mut self, p: &str, perm: u32, body: Body) {
        self.objs.push(Obj {
            perm,
            uid: 0,
            gid: 0,
            body,
            xattrs: BTreeMap::new(),
        });
        self.paths.insert(p.to_string(), self.objs.len() - 1);
    }
    fn obj(&mut self, p: &str) -> &mut Obj {
        let i = self.paths[p];
        &mut self.objs[i]
    }
    fn content(&mut self, p: &str) -> &mut Content {
        match &mut self.obj(p).body {
            Body::File(c) => c,
            _ => panic!("{p} is not a file in the model"),
        }
    }
    fn rename(&mut self, from: &str, to: &str) {
        self.paths.remove(to);
        let moved: Vec<String> = self
            .paths
            .keys()
            .filter(|k| *k == from || k.starts_with(&format!("{from}/")))
            .cloned()
            .collect();
        for k in moved {
            let id = self.paths.remove(&k).expect("moved path");
            self.paths.insert(format!("{to}{}", &k[from.len()..]), id);
        }
    }
    fn links(&self, id: usize) -> u64 {
        self.paths.values().filter(|&&i| i == id).count() as u64
    }
    fn subdirs(&self, dir: &str) -> u64 {
        self.paths
            .iter()
            .filter(|(p, &i)| parent(p) == dir && matches!(self.objs[i].body, Body::Dir))
            .count() as u64
    }
}

// ---------------------------------------------------------------------------------------
// Targets: the same operations on a host directory (a kernel mount, or a source tree for
// `mke2fs -d`) and on lanefs.

trait Target {
    fn mkdir(&mut self, p: &str) -> Result<(), String>;
    fn create(&mut self, p: &str) -> Result<(), String>;
    fn write(&mut self, p: &str, off: u64, data: &[u8]) -> Result<(), String>;
    fn truncate(&mut self, p: &str, size: u64) -> Result<(), String>;
    fn symlink(&mut self, p: &str, target: &[u8]) -> Result<(), String>;
    fn link(&mut self, from: &str, to: &str) -> Result<(), String>;
    fn unlink(&mut self, p: &str) -> Result<(), String>;
    fn rmdir(&mut self, p: &str) -> Result<(), String>;
    fn rename(&mut self, from: &str, to: &str) -> Result<(), String>;
    /// Owner, then permissions (not for symlinks).
    fn attrs(&mut self, p: &str, perm: u32, uid: u32, gid: u32) -> Result<(), String>;
    fn setxattr(&mut self, p: &str, name: &[u8], value: &[u8]) -> Result<(), String>;
}

struct HostTarget {
    root: PathBuf,
}

fn cpath(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).expect("path without NUL")
}

impl HostTarget {
    fn at(&self, p: &str) -> PathBuf {
        self.root.join(p)
    }
}

fn io<T>(what: &str, p: &str, r: std::io::Result<T>) -> Result<T, String> {
    r.map_err(|e| format!("{what} {p}: {e}"))
}

impl Target for HostTarget {
    fn mkdir(&mut self, p: &str) -> Result<(), String> {
        io("mkdir", p, std::fs::create_dir(self.at(p)))
    }
    fn create(&mut self, p: &str) -> Result<(), String> {
        io(
            "create",
            p,
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(self.at(p))
                .map(drop),
        )
    }
    fn write(&mut self, p: &str, off: u64, data: &[u8]) -> Result<(), String> {
        let f = io(
            "open",
            p,
            std::fs::OpenOptions::new().write(true).open(self.at(p)),
        )?;
        io("write", p, f.write_all_at(data, off))
    }
    fn truncate(&mut self, p: &str, size: u64) -> Result<(), String> {
        let f = io(
            "open",
            p,
            std::fs::OpenOptions::new().write(true).open(self.at(p)),
        )?;
        io("truncate", p, f.set_len(size))
    }
    fn symlink(&mut self, p: &str, target: &[u8]) -> Result<(), String> {
        io(
            "symlink",
            p,
            std::os::unix::fs::symlink(std::ffi::OsStr::from_bytes(target), self.at(p)),
        )
    }
    fn link(&mut self, from: &str, to: &str) -> Result<(), String> {
        io("link", to, std::fs::hard_link(self.at(from), self.at(to)))
    }
    fn unlink(&mut self, p: &str) -> Result<(), String> {
        io("unlink", p, std::fs::remove_file(self.at(p)))
    }
    fn rmdir(&mut self, p: &str) -> Result<(), String> {
        io("rmdir", p, std::fs::remove_dir(self.at(p)))
    }
    fn rename(&mut self, from: &str, to: &str) -> Result<(), String> {
        io("rename", from, std::fs::rename(self.at(from), self.at(to)))
    }
    fn attrs(&mut self, p: &str, perm: u32, uid: u32, gid: u32) -> Result<(), String> {
        io(
            "chown",
            p,
            std::os::unix::fs::lchown(self.at(p), Some(uid), Some(gid)),
        )?;
        io(
            "chmod",
            p,
            std::fs::set_permissions(self.at(p), std::fs::Permissions::from_mode(perm)),
        )
    }
    fn setxattr(&mut self, p: &str, name: &[u8], value: &[u8]) -> Result<(), String> {
        let c = cpath(&self.at(p));
        let n = CString::new(name).expect("xattr name");
        // SAFETY: valid NUL-terminated strings and a value buffer of the given length.
        let r = unsafe {
            libc::lsetxattr(
                c.as_ptr(),
                n.as_ptr(),
                value.as_ptr().cast(),
                value.len(),
                0,
            )
        };
        if r == 0 {
            Ok(())
        } else {
            Err(format!(
                "setxattr {p} {}: {}",
                String::from_utf8_lossy(name),
                std::io::Error::last_os_error()
            ))
        }
    }
}

struct LanefsTarget {
    fs: Arc<Fs>,
}

fn resolve(fs: &Fs, p: &str) -> lanefs::Result<Ino> {
    let mut ino = ROOT_INO;
    for c in p.split('/').filter(|c| !c.is_empty()) {
        ino = fs.lookup(ino, c.as_bytes())?.ino;
    }
    Ok(ino)
}

fn le<T>(what: &str, p: &str, r: lanefs::Result<T>) -> Result<T, String> {
    r.map_err(|e| format!("lanefs {what} {p}: {e}"))
}

impl LanefsTarget {
    fn dir_and_name<'a>(&self, p: &'a str) -> Result<(Ino, &'a str), String> {
        let d = le("lookup", parent(p), resolve(&self.fs, parent(p)))?;
        Ok((d, base(p)))
    }
    fn ino(&self, p: &str) -> Result<Ino, String> {
        le("lookup", p, resolve(&self.fs, p))
    }
}

const ROOT_OWNER: Owner = Owner {
    uid: 0,
    gid: 0,
    umask: 0,
};

impl Target for LanefsTarget {
    fn mkdir(&mut self, p: &str) -> Result<(), String> {
        let (d, n) = self.dir_and_name(p)?;
        le(
            "mkdir",
            p,
            self.fs.mkdir(d, n.as_bytes(), 0o755, ROOT_OWNER).map(drop),
        )
    }
    fn create(&mut self, p: &str) -> Result<(), String> {
        let (d, n) = self.dir_and_name(p)?;
        let a = le(
            "create",
            p,
            self.fs.create(d, n.as_bytes(), 0o644, ROOT_OWNER),
        )?;
        le("release", p, self.fs.release(a.ino))
    }
    fn write(&mut self, p: &str, off: u64, data: &[u8]) -> Result<(), String> {
        let ino = self.ino(p)?;
        le("open", p, self.fs.open(ino))?;
        let mut done = 0;
        while done < data.len() {
            let n = le(
                &format!("write at {}", off + done as u64),
                p,
                self.fs.write(ino, off + done as u64, &data[done..]),
            )?;
            if n == 0 {
                return Err(format!("lanefs write {p}: wrote 0 bytes"));
            }
            done += n;
        }
        le("release", p, self.fs.release(ino))
    }
    fn truncate(&mut self, p: &str, size: u64) -> Result<(), String> {
        let ino = self.ino(p)?;
        let set = SetAttr {
            size: Some(size),
            ..SetAttr::default()
        };
        le(
            &format!("truncate to {size}"),
            p,
            self.fs.setattr(ino, &set),
        )
        .map(drop)
    }
    fn symlink(&mut self, p: &str, target: &[u8]) -> Result<(), String> {
        let (d, n) = self.dir_and_name(p)?;
        le(
            "symlink",
            p,
            self.fs
                .symlink(d, n.as_bytes(), target, ROOT_OWNER)
                .map(drop),
        )
    }
    fn link(&mut self, from: &str, to: &str) -> Result<(), String> {
        let ino = self.ino(from)?;
        let (d, n) = self.dir_and_name(to)?;
        le("link", to, self.fs.link(ino, d, n.as_bytes()).map(drop))
    }
    fn unlink(&mut self, p: &str) -> Result<(), String> {
        let (d, n) = self.dir_and_name(p)?;
        le("unlink", p, self.fs.unlink(d, n.as_bytes()))
    }
    fn rmdir(&mut self, p: &str) -> Result<(), String> {
        let (d, n) = self.dir_and_name(p)?;
        le("rmdir", p, self.fs.rmdir(d, n.as_bytes()))
    }
    fn rename(&mut self, from: &str, to: &str) -> Result<(), String> {
        let (d, n) = self.dir_and_name(from)?;
        let (nd, nn) = self.dir_and_name(to)?;
        le(
            &format!("rename to {to}"),
            from,
            self.fs.rename(d, n.as_bytes(), nd, nn.as_bytes()),
        )
    }
    fn attrs(&mut self, p: &str, perm: u32, uid: u32, gid: u32) -> Result<(), String> {
        let ino = self.ino(p)?;
        let set = SetAttr {
            perm: Some(perm as u16),
            uid: Some(uid),
            gid: Some(gid),
            ..SetAttr::default()
        };
        le("setattr", p, self.fs.setattr(ino, &set)).map(drop)
    }
    fn setxattr(&mut self, p: &str, name: &[u8], value: &[u8]) -> Result<(), String> {
        let ino = self.ino(p)?;
        le(
            "setxattr",
            p,
            self.fs.setxattr(ino, name, value, XattrFlags::Any),
        )
    }
}

/// Applies each operation to the target and, if it succeeds, to the model.
struct Driver<'a> {
    m: &'a mut Model,
    t: &'a mut dyn Target,
}

impl Driver<'_> {
    fn mkdir(&mut self, p: &str, perm: u32) -> Result<(), String> {
        self.t.mkdir(p)?;
        self.m.add(p, 0o755, Body::Dir);
        self.attrs(p, perm, 0, 0)
    }
    fn file(&mut self, p: &str, perm: u32, data: &[u8]) -> Result<(), String> {
        self.t.create(p)?;
        self.m.add(p, 0o644, Body::File(Content::default()));
        self.write(p, 0, data)?;
        self.attrs(p, perm, 0, 0)
    }
    fn write(&mut self, p: &str, off: u64, data: &[u8]) -> Result<(), String> {
        if data.is_empty() {
            return Ok(());
        }
        self.t.write(p, off, data)?;
        self.m.content(p).write(off, data);
        Ok(())
    }
    /// Append `blocks` file-system blocks of pattern data in chunks of at most 256 KiB.
    fn append(&mut self, p: &str, seed: u64, bytes: u64) -> Result<(), String> {
        let mut off = self.m.content(p).size;
        let end = off + bytes;
        while off < end {
            let n = (end - off).min(256 << 10);
            self.write(p, off, &pattern(seed, off, n as usize))?;
            off += n;
        }
        Ok(())
    }
    fn truncate(&mut self, p: &str, size: u64) -> Result<(), String> {
        self.t.truncate(p, size)?;
        self.m.content(p).truncate(size);
        Ok(())
    }
    fn symlink(&mut self, p: &str, target: &[u8]) -> Result<(), String> {
        self.t.symlink(p, target)?;
        self.m.add(p, 0o777, Body::Link(target.to_vec()));
        Ok(())
    }
    fn link(&mut self, from: &str, to: &str) -> Result<(), String> {
        self.t.link(from, to)?;
        let id = self.m.paths[from];
        self.m.paths.insert(to.to_string(), id);
        Ok(())
    }
    fn unlink(&mut self, p: &str) -> Result<(), String> {
        self.t.unlink(p)?;
        self.m.paths.remove(p);
        Ok(())
    }
    fn rmdir(&mut self, p: &str) -> Result<(), String> {
        self.t.rmdir(p)?;
        self.m.paths.remove(p);
        Ok(())
    }
    fn rename(&mut self, from: &str, to: &str) -> Result<(), String> {
        self.t.rename(from, to)?;
        self.m.rename(from, to);
        Ok(())
    }
    fn attrs(&mut self, p: &str, perm: u32, uid: u32, gid: u32) -> Result<(), String> {
        self.t.attrs(p, perm, uid, gid)?;
        let o = self.m.obj(p);
        (o.perm, o.uid, o.gid) = (perm, uid, gid);
        Ok(())
    }
    fn setxattr(&mut self, p: &str, name: &str, value: &[u8]) -> Result<(), String> {
        self.t.setxattr(p, name.as_bytes(), value)?;
        self.m
            .obj(p)
            .xattrs
            .insert(name.as_bytes().to_vec(), value.to_vec());
        Ok(())
    }
}

fn many_name(i: usize) -> String {
    format!("entry_with_a_longer_name_{i:04}")
}

/// Small-file sizes: around the 60 bytes of i_block (inline data) and beyond.
const SMALL: [u64; 10] = [0, 1, 40, 59, 60, 61, 100, 200, 1000, 3000];

/// The tree the kernel (or `mke2fs -d`) writes.
fn initial_tree(d: &mut Driver, s: &Shape) -> Result<(), String> {
    let g = Geo::new(s.bs);
    let bs = g.bs;
    d.mkdir("small", 0o755)?;
    for (i, &n) in SMALL.iter().enumerate() {
        d.file(
            &format!("small/s{i}"),
            0o644,
            &pattern(i as u64, 0, n as usize),
        )?;
    }
    d.setxattr("small/s8", "user.small", b"a small value")?;
    if s.ea_inode() {
        d.setxattr("small/s9", "user.big", &pattern(77, 0, 6000))?;
    }
    d.mkdir("tiny_dir", 0o755)?;
    d.file("tiny_dir/a", 0o644, b"tiny a\n")?;
    d.file("tiny_dir/b", 0o600, b"")?;
    d.mkdir("empty_dir", 0o700)?;
    d.mkdir("sticky", 0o1777)?;
    d.mkdir("many", 0o755)?;
    for i in 0..MANY {
        let data = if i % 50 == 0 {
            format!("entry {i}\n").into_bytes()
        } else {
            Vec::new()
        };
        d.file(&format!("many/{}", many_name(i)), 0o644, &data)?;
    }
    d.mkdir("dir1", 0o755)?;
    d.mkdir("dir1/dir2", 0o700)?;
    d.file("dir1/dir2/deep", 0o640, &pattern(5, 0, 5000))?;
    d.file("dir1/owned", 0o640, &pattern(6, 0, 100))?;
    d.attrs("dir1/owned", 0o640, 1000, 1000)?;
    d.attrs("dir1", 0o750, 1000, 100)?;
    d.file("suid", 0o644, &pattern(7, 0, 50))?;
    d.attrs("suid", 0o4755, 0, 0)?;
    d.file("odd_mode", 0o644, &pattern(8, 0, 10))?;
    d.attrs("odd_mode", 0o7000, 65534, 65534)?;
    // Hard links: three names of one inode.
    d.file("hl_a", 0o644, &pattern(9, 0, 3000))?;
    d.link("hl_a", "dir1/hl_b")?;
    d.link("hl_a", "dir1/dir2/hl_c")?;
    // Symlinks: fast (in the inode), slow (a block), to a directory, dangling.
    d.symlink("sym_fast", b"small/s1")?;
    d.symlink("sym_slow", format!("dir1/{}", "x".repeat(200)).as_bytes())?;
    d.symlink("sym_dir", b"dir1")?;
    d.symlink("sym_59", "y".repeat(59).as_bytes())?;
    d.symlink("sym_60", "z".repeat(60).as_bytes())?;
    // A file mapped through the double-indirect block: dense where it is cheap, else data
    // on both sides of every boundary.
    d.file("big", 0o644, b"")?;
    if g.dense() {
        d.append("big", 10, (g.dind_start() + 8) * bs)?;
    } else {
        d.write("big", 0, &pattern(10, 0, ((NDIR + 2) * bs) as usize))?;
        let o = (g.dind_start() - 2) * bs;
        d.write("big", o, &pattern(10, o, (4 * bs) as usize))?;
    }
    d.file("grow", 0o644, &pattern(11, 0, (2 * bs + 100) as usize))?;
    // A sparse file reaching the triple-indirect block where a block map can.
    d.file("sparse_high", 0o644, &pattern(12, 0, 777))?;
    let high = g.tind_start().unwrap_or(g.dind_start() + 5);
    let o = (high + 3) * bs + 100;
    d.write("sparse_high", o, &pattern(12, o, (3 * bs) as usize))?;
    Ok(())
}

/// What lanefs does to the tree.
fn lanefs_changes(d: &mut Driver, s: &Shape) -> Result<(), String> {
    let g = Geo::new(s.bs);
    let bs = g.bs;
    d.mkdir("new", 0o755)?;
    d.file("new/empty", 0o644, b"")?;
    d.file("new/tiny", 0o644, b"thirty bytes of tiny content!\n")?;
    d.attrs("new/tiny", 0o644, 1000, 1000)?;
    d.file("new/mid", 0o644, &pattern(20, 0, 5000))?;
    d.attrs("new/mid", 0o4755, 0, 0)?;
    d.setxattr("new/mid", "user.lanefs", &pattern(21, 0, 100))?;
    if s.ea_inode() {
        d.setxattr("new/mid", "user.big2", &pattern(22, 0, 7000))?;
    }
    d.file("new/dense", 0o644, b"")?;
    d.append("new/dense", 23, (NDIR + 3) * bs + 17)?;
    d.file("new/sparse", 0o644, b"")?;
    let o = (g.dind_start() + 1) * bs + 5;
    d.write("new/sparse", o, &pattern(24, o, 3000))?;
    // Grow a block-mapped file across direct -> indirect -> double indirect.
    let grow = |d: &mut Driver, to: u64| {
        let size = d.m.content("grow").size;
        d.append("grow", 11, to - size)
    };
    grow(d, 11 * bs + 500)?;
    grow(d, (NDIR + 5) * bs)?;
    if g.dense() {
        grow(d, (g.dind_start() + 3) * bs + 99)?;
    } else {
        let o = (g.dind_start() + 2) * bs;
        d.write("grow", o, &pattern(11, o, 5000))?;
    }
    // Shrink back across the boundaries, then map through the indirect block again.
    d.truncate("big", (g.dind_start() - 1) * bs + 100)?;
    d.truncate("big", 5 * bs + 7)?;
    let o = (NDIR + 2) * bs + 10;
    d.write("big", o, &pattern(25, o, 3000))?;
    let high = d.m.content("sparse_high").size;
    d.truncate("sparse_high", ((g.dind_start() + 4) * bs).min(high - 1))?;
    // Small files outgrowing inline storage, and shrinking.
    d.write("small/s2", 40, &pattern(26, 40, 5000))?;
    d.truncate("small/s6", 10)?;
    d.write("small/s4", 59, b"x")?;
    d.unlink("small/s3")?;
    d.unlink("hl_a")?;
    d.rename("dir1/dir2/deep", "moved_deep")?;
    d.rename("small/s4", "small/s5")?;
    d.rename("dir1/dir2", "dir2_moved")?;
    d.rename(&format!("many/{}", many_name(7)), "new/from_many")?;
    d.mkdir("made", 0o755)?;
    d.mkdir("made/sub", 0o750)?;
    d.mkdir("made/sub/subsub", 0o755)?;
    d.rmdir("made/sub/subsub")?;
    d.rmdir("empty_dir")?;
    for i in 0..60 {
        d.file(
            &format!("tiny_dir/grown_{i:02}"),
            0o644,
            format!("{i}").as_bytes(),
        )?;
    }
    for i in (0..60).step_by(2) {
        d.unlink(&format!("tiny_dir/grown_{i:02}"))?;
    }
    for i in 0..150 {
        d.file(&format!("many/added_{i:03}"), 0o644, b"")?;
    }
    for i in (0..MANY).step_by(3) {
        d.unlink(&format!("many/{}", many_name(i)))?;
    }
    d.symlink("new/lnk_fast", b"../small/s0")?;
    d.symlink("new/lnk_slow", "w".repeat(300).as_bytes())?;
    d.link("small/s0", "new/hl_new")?;
    d.attrs("sticky", 0o755, 1000, 1000)?;
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Views: what a reader sees.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Dir,
    File,
    Link,
    Other,
}

#[derive(Debug, Clone)]
struct Meta {
    kind: Kind,
    perm: u32,
    uid: u32,
    gid: u32,
    size: u64,
    ino: u64,
    /// None where the view cannot tell (debugfs walk).
    nlink: Option<u64>,
    target: Option<Vec<u8>>,
}

trait View {
    fn who(&self) -> String;
    fn walk(&mut self) -> Result<BTreeMap<String, Meta>, String>;
    fn read(&mut self, p: &str, m: &Meta, off: u64, len: usize) -> Result<Vec<u8>, String>;
    /// None: the view does not read xattrs.
    fn xattr(&mut self, p: &str, m: &Meta, name: &[u8]) -> Option<Result<Vec<u8>, String>>;
}

struct LanefsView<'a> {
    fs: &'a Fs,
}

fn kind_of(k: FileType) -> Kind {
    match k {
        FileType::Directory => Kind::Dir,
        FileType::Regular => Kind::File,
        FileType::Symlink => Kind::Link,
        _ => Kind::Other,
    }
}

impl View for LanefsView<'_> {
    fn who(&self) -> String {
        "lanefs".into()
    }
    fn walk(&mut self) -> Result<BTreeMap<String, Meta>, String> {
        let mut out = BTreeMap::new();
        let mut stack = vec![(String::new(), ROOT_INO)];
        while let Some((dir, ino)) = stack.pop() {
            let mut pos = 0;
            loop {
                let batch = self
                    .fs
                    .readdir(ino, pos, 64)
                    .map_err(|e| format!("lanefs readdir /{dir}: {e}"))?;
                let Some(last) = batch.last() else { break };
                if last.next <= pos {
                    return Err(format!("lanefs readdir /{dir}: cursor stuck at {pos}"));
                }
                pos = last.next;
                for e in batch {
                    if e.name == b"." || e.name == b".." {
                        continue;
                    }
                    let name = String::from_utf8_lossy(&e.name).into_owned();
                    let p = if dir.is_empty() {
                        name
                    } else {
                        format!("{dir}/{name}")
                    };
                    let a = self
                        .fs
                        .lookup(ino, &e.name)
                        .map_err(|err| format!("lanefs lookup /{p}: {err}"))?;
                    if a.ino != e.ino || a.kind != e.kind {
                        return Err(format!(
                            "lanefs readdir /{p}: entry says inode {} {:?}, lookup {} {:?}",
                            e.ino, e.kind, a.ino, a.kind
                        ));
                    }
                    let target = if a.kind == FileType::Symlink {
                        Some(
                            self.fs
                                .readlink(a.ino)
                                .map_err(|err| format!("lanefs readlink /{p}: {err}"))?,
                        )
                    } else {
                        None
                    };
                    if a.kind == FileType::Directory {
                        stack.push((p.clone(), a.ino));
                    }
                    if out.contains_key(&p) {
                        return Err(format!("lanefs readdir: /{p} listed twice"));
                    }
                    out.insert(
                        p,
                        Meta {
                            kind: kind_of(a.kind),
                            perm: u32::from(a.perm),
                            uid: a.uid,
                            gid: a.gid,
                            size: a.size,
                            ino: a.ino,
                            nlink: Some(u64::from(a.nlink)),
                            target,
                        },
                    );
                }
            }
        }
        Ok(out)
    }
    fn read(&mut self, p: &str, m: &Meta, off: u64, len: usize) -> Result<Vec<u8>, String> {
        let mut buf = vec![0u8; len];
        let mut got = 0;
        while got < len {
            let n = self
                .fs
                .read(m.ino, off + got as u64, &mut buf[got..])
                .map_err(|e| format!("lanefs read /{p} at {}: {e}", off + got as u64))?;
            if n == 0 {
                break;
            }
            got += n;
        }
        buf.truncate(got);
        Ok(buf)
    }
    fn xattr(&mut self, p: &str, m: &Meta, name: &[u8]) -> Option<Result<Vec<u8>, String>> {
        Some(
            self.fs
                .getxattr(m.ino, name)
                .map_err(|e| format!("lanefs getxattr /{p}: {e}")),
        )
    }
}

/// A host directory: the kernel's mount.
struct HostView {
    root: PathBuf,
}

impl View for HostView {
    fn who(&self) -> String {
        "kernel".into()
    }
    fn walk(&mut self) -> Result<BTreeMap<String, Meta>, String> {
        let mut out = BTreeMap::new();
        let mut stack = vec![String::new()];
        while let Some(dir) = stack.pop() {
            let rd = std::fs::read_dir(self.root.join(&dir))
                .map_err(|e| format!("kernel readdir /{dir}: {e}"))?;
            for e in rd {
                let e = e.map_err(|e| format!("kernel readdir /{dir}: {e}"))?;
                let name = e.file_name().to_string_lossy().into_owned();
                let p = if dir.is_empty() {
                    name
                } else {
                    format!("{dir}/{name}")
                };
                let full = self.root.join(&p);
                let md = std::fs::symlink_metadata(&full)
                    .map_err(|e| format!("kernel lstat /{p}: {e}"))?;
                let ft = md.file_type();
                let kind = if ft.is_dir() {
                    stack.push(p.clone());
                    Kind::Dir
                } else if ft.is_file() {
                    Kind::File
                } else if ft.is_symlink() {
                    Kind::Link
                } else {
                    Kind::Other
                };
                let target = if kind == Kind::Link {
                    let t = std::fs::read_link(&full)
                        .map_err(|e| format!("kernel readlink /{p}: {e}"))?;
                    Some(t.as_os_str().as_bytes().to_vec())
                } else {
                    None
                };
                out.insert(
                    p,
                    Meta {
                        kind,
                        perm: md.mode() & 0o7777,
                        uid: md.uid(),
                        gid: md.gid(),
                        size: md.size(),
                        ino: md.ino(),
                        nlink: Some(md.nlink()),
                        target,
                    },
                );
            }
        }
        Ok(out)
    }
    fn read(&mut self, p: &str, _m: &Meta, off: u64, len: usize) -> Result<Vec<u8>, String> {
        let f =
            std::fs::File::open(self.root.join(p)).map_err(|e| format!("kernel open /{p}: {e}"))?;
        let mut buf = vec![0u8; len];
        let mut got = 0;
        while got < len {
            let n = f
                .read_at(&mut buf[got..], off + got as u64)
                .map_err(|e| format!("kernel read /{p} at {off}: {e}"))?;
            if n == 0 {
                break;
            }
            got += n;
        }
        buf.truncate(got);
        Ok(buf)
    }
    fn xattr(&mut self, p: &str, _m: &Meta, name: &[u8]) -> Option<Result<Vec<u8>, String>> {
        let c = cpath(&self.root.join(p));
        let n = CString::new(name).expect("xattr name");
        let mut buf = vec![0u8; 65536];
        // SAFETY: valid NUL-terminated strings and a buffer of the given length.
        let r =
            unsafe { libc::lgetxattr(c.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        Some(if r < 0 {
            Err(format!(
                "kernel getxattr /{p}: {}",
                std::io::Error::last_os_error()
            ))
        } else {
            buf.truncate(r as usize);
            Ok(buf)
        })
    }
}

/// e2fsprogs' reading, for images the kernel cannot mount: `debugfs ls -p` for the tree,
/// `stat` and `cat` for symlinks, `cat` for small files, `bmap` plus the raw image for
/// big sparse ones.
struct DebugfsView {
    img: PathBuf,
    bs: u64,
    cats: BTreeMap<String, Vec<u8>>,
}

impl DebugfsView {
    fn bmap(&self, p: &str, lblk: u64) -> Result<u64, String> {
        let out = debugfs(&self.img, &format!("bmap \"/{p}\" {lblk}"))?;
        out.trim()
            .parse()
            .map_err(|_| format!("debugfs bmap /{p} {lblk}: {out:?}"))
    }
}

impl View for DebugfsView {
    fn who(&self) -> String {
        "debugfs".into()
    }
    fn walk(&mut self) -> Result<BTreeMap<String, Meta>, String> {
        let mut out = BTreeMap::new();
        let mut stack = vec![String::new()];
        while let Some(dir) = stack.pop() {
            let text = debugfs(&self.img, &format!("ls -p \"/{dir}\""))?;
            for line in text.lines().filter(|l| l.starts_with('/')) {
                // /ino/mode/uid/gid/name/size/
                let f: Vec<&str> = line.split('/').collect();
                if f.len() < 7 {
                    return Err(format!("debugfs ls -p /{dir}: {line:?}"));
                }
                let name = f[5..f.len() - 2].join("/");
                if name == "." || name == ".." || name.is_empty() {
                    continue;
                }
                let num = |s: &str, radix| {
                    u64::from_str_radix(s, radix).map_err(|_| format!("debugfs ls -p: {line:?}"))
                };
                let (ino, mode) = (num(f[1], 10)?, num(f[2], 8)? as u32);
                let (uid, gid) = (num(f[3], 10)? as u32, num(f[4], 10)? as u32);
                let size = if f[f.len() - 2].is_empty() {
                    0
                } else {
                    num(f[f.len() - 2], 10)?
                };
                let p = if dir.is_empty() {
                    name
                } else {
                    format!("{dir}/{name}")
                };
                let kind = match mode & 0o170000 {
                    0o040000 => Kind::Dir,
                    0o100000 => Kind::File,
                    0o120000 => Kind::Link,
                    _ => Kind::Other,
                };
                let target = if kind == Kind::Link {
                    let st = debugfs(&self.img, &format!("stat \"/{p}\""))?;
                    match st.split_once("Fast link dest: \"") {
                        Some((_, rest)) => Some(
                            rest.rsplit_once('"')
                                .map_or(rest, |(t, _)| t)
                                .as_bytes()
                                .to_vec(),
                        ),
                        None => Some(debugfs_bytes(&self.img, &format!("cat \"/{p}\""))?),
                    }
                } else {
                    None
                };
                if kind == Kind::Dir {
                    stack.push(p.clone());
                }
                out.insert(
                    p,
                    Meta {
                        kind,
                        perm: mode & 0o7777,
                        uid,
                        gid,
                        size,
                        ino,
                        nlink: None,
                        target,
                    },
                );
            }
        }
        Ok(out)
    }
    fn read(&mut self, p: &str, m: &Meta, off: u64, len: usize) -> Result<Vec<u8>, String> {
        let end = (off + len as u64).min(m.size);
        if off >= end {
            return Ok(Vec::new());
        }
        if m.size <= WHOLE {
            if !self.cats.contains_key(p) {
                let b = debugfs_bytes(&self.img, &format!("cat \"/{p}\""))?;
                self.cats.insert(p.to_string(), b);
            }
            let b = &self.cats[p];
            return Ok(b[(off as usize).min(b.len())..(end as usize).min(b.len())].to_vec());
        }
        let img = std::fs::File::open(&self.img).map_err(|e| e.to_string())?;
        let mut out = Vec::new();
        let mut o = off;
        while o < end {
            let lblk = o / self.bs;
            let n = ((lblk + 1) * self.bs).min(end) - o;
            let pblk = self.bmap(p, lblk)?;
            let mut buf = vec![0u8; n as usize];
            if pblk != 0 {
                img.read_exact_at(&mut buf, pblk * self.bs + o % self.bs)
                    .map_err(|e| format!("read image block {pblk}: {e}"))?;
            }
            out.extend_from_slice(&buf);
            o += n;
        }
        Ok(out)
    }
    fn xattr(&mut self, _p: &str, _m: &Meta, _name: &[u8]) -> Option<Result<Vec<u8>, String>> {
        None
    }
}

/// Every difference between the model and a view (at most 20).
fn compare(m: &Model, v: &mut dyn View) -> Vec<String> {
    let who = v.who();
    let seen = match v.walk() {
        Ok(s) => s,
        Err(e) => return vec![format!("{who}: walk: {e}")],
    };
    let mut errs = Vec::new();
    let want: BTreeSet<&String> = m.paths.keys().collect();
    let got: BTreeSet<&String> = seen.keys().collect();
    for p in want.difference(&got).take(10) {
        errs.push(format!("{who}: /{p} missing"));
    }
    for p in got.difference(&want).take(10) {
        errs.push(format!("{who}: /{p} unexpected"));
    }
    let mut ino_of: BTreeMap<usize, u64> = BTreeMap::new();
    for (p, &id) in &m.paths {
        if errs.len() >= 20 {
            break;
        }
        let Some(s) = seen.get(p) else { continue };
        let o = &m.objs[id];
        let kind = match o.body {
            Body::Dir => Kind::Dir,
            Body::File(_) => Kind::File,
            Body::Link(_) => Kind::Link,
        };
        if s.kind != kind {
            errs.push(format!("{who}: /{p} is {:?}, want {kind:?}", s.kind));
            continue;
        }
        if kind != Kind::Link && (s.perm, s.uid, s.gid) != (o.perm, o.uid, o.gid) {
            errs.push(format!(
                "{who}: /{p} mode {:o} owner {}:{}, want {:o} {}:{}",
                s.perm, s.uid, s.gid, o.perm, o.uid, o.gid
            ));
        }
        if let Some(prev) = ino_of.insert(id, s.ino) {
            if prev != s.ino {
                errs.push(format!(
                    "{who}: /{p} is inode {}, its hard link is inode {prev}",
                    s.ino
                ));
            }
        }
        let want_links = match o.body {
            Body::Dir => 2 + m.subdirs(p),
            _ => m.links(id),
        };
        if let Some(n) = s.nlink {
            if n != want_links {
                errs.push(format!("{who}: /{p} has {n} links, want {want_links}"));
            }
        }
        match &o.body {
            Body::Dir => {}
            Body::Link(t) => {
                if s.target.as_deref() != Some(t.as_slice()) {
                    errs.push(format!(
                        "{who}: /{p} -> {:?}, want {:?}",
                        s.target.as_deref().map(String::from_utf8_lossy),
                        String::from_utf8_lossy(t)
                    ));
                }
            }
            Body::File(c) => {
                if s.size != c.size {
                    errs.push(format!("{who}: /{p} size {}, want {}", s.size, c.size));
                    continue;
                }
                for (off, len) in c.ranges() {
                    match v.read(p, s, off, len) {
                        Err(e) => {
                            errs.push(format!("{who}: {e}"));
                            break;
                        }
                        Ok(b) => {
                            let w = c.read(off, len);
                            if b != w {
                                let at = b
                                    .iter()
                                    .zip(&w)
                                    .position(|(x, y)| x != y)
                                    .unwrap_or(b.len().min(w.len()));
                                errs.push(format!(
                                    "{who}: /{p} differs at byte {}: {:?}, want {:?} \
                                     (reading {len} bytes at {off}: got {})",
                                    off + at as u64,
                                    b.get(at),
                                    w.get(at),
                                    b.len()
                                ));
                                break;
                            }
                        }
                    }
                }
            }
        }
        for (name, val) in &o.xattrs {
            match v.xattr(p, s, name) {
                None => {}
                Some(Err(e)) => errs.push(format!("{who}: {e}")),
                Some(Ok(got)) if &got != val => errs.push(format!(
                    "{who}: /{p} xattr {} is {} bytes, want {} (differs)",
                    String::from_utf8_lossy(name),
                    got.len(),
                    val.len()
                )),
                Some(Ok(_)) => {}
            }
        }
    }
    errs.truncate(20);
    errs
}

// ---------------------------------------------------------------------------------------
// One shape end to end.

/// Whether root, loop mounts and e2fsprogs are here (probed once; SKIP printed per test).
fn ready(test: &str) -> bool {
    static READY: OnceLock<Result<(), String>> = OnceLock::new();
    let r = READY.get_or_init(|| {
        for t in ["mke2fs", "tune2fs", "e2fsck", "debugfs"] {
            if !common::have_tool(t) {
                return Err(format!("{t} not found"));
            }
        }
        if !common::is_root() {
            return Err("not root (loop mounts need privilege)".into());
        }
        let td = tempfile::tempdir().map_err(|e| e.to_string())?;
        let img = common::mkfs_image(td.path(), "probe.img", 16 << 20);
        let m = KernelMount::mount(&img, &td.path().join("probe"), "ro")
            .map_err(|e| format!("cannot loop-mount a fresh image: {e}"))?;
        m.unmount()
    });
    match r {
        Ok(()) => true,
        Err(e) => {
            common::skip(test, e);
            false
        }
    }
}

/// How the file system's blocks map a file, per debugfs: "extents", "blocks" or "inline".
fn map_form(img: &Path, p: &str) -> Result<&'static str, String> {
    let st = debugfs(img, &format!("stat \"/{p}\""))?;
    if st.contains("Size of inline data") {
        Ok("inline")
    } else if st.contains("EXTENTS:") {
        Ok("extents")
    } else if st.contains("BLOCKS:") {
        Ok("blocks")
    } else {
        Err(format!("debugfs stat /{p}: no map shown:\n{st}"))
    }
}

fn run_shape(name: &str) {
    let test = format!("shapes::{name}");
    if !ready(&test) {
        return;
    }
    let s = shape(name);
    let _dog = common::watchdog(&test, 600);
    let start = Instant::now();
    let td = tempfile::tempdir().expect("tempdir");
    let mut fails: Vec<String> = Vec::new();
    let img = mke2fs_image(td.path(), "shape.img", s.size, s.mkfs)
        .unwrap_or_else(|e| panic!("{test}: {e}"));
    // (c) lanefs fsck on the untouched image.
    if let Err(e) = pristine_fsck(name, &img) {
        fails.push(format!("(c) pristine image: {e}"));
    }
    // (a) the kernel writes the tree (or mke2fs -d where it cannot mount the image).
    let mnt = td.path().join("mnt");
    let mut model = Model::new();
    let kernel = match KernelMount::mount(&img, &mnt, "") {
        Ok(km) => {
            let mut host = HostTarget { root: mnt.clone() };
            let r = initial_tree(
                &mut Driver {
                    m: &mut model,
                    t: &mut host,
                },
                s,
            );
            km.unmount().expect("unmount after the kernel's tree");
            r.unwrap_or_else(|e| panic!("{test}: the kernel's tree: {e}"));
            true
        }
        Err(e) => {
            println!(
                "{test}: the kernel does not mount it ({}); mke2fs -d",
                first_line(&e)
            );
            let src = td.path().join("src");
            std::fs::create_dir(&src).expect("mkdir src");
            let mut host = HostTarget { root: src.clone() };
            initial_tree(
                &mut Driver {
                    m: &mut model,
                    t: &mut host,
                },
                s,
            )
            .unwrap_or_else(|e| panic!("{test}: the source tree: {e}"));
            let mut args: Vec<&str> = s.mkfs.to_vec();
            let src_s = src.to_str().expect("utf-8 temp path").to_string();
            args.extend(["-d", &src_s]);
            mke2fs_image(td.path(), "shape.img", s.size, &args)
                .unwrap_or_else(|e| panic!("{test}: {e}"));
            // mke2fs -d leaves the quota files' usage at zero: e2fsck -fy updates them.
            let _ = Command::new("e2fsck").arg("-fy").arg(&img).output();
            false
        }
    };
    if !s.tune.is_empty() {
        run(Command::new("tune2fs").args(s.tune).arg(&img))
            .unwrap_or_else(|e| panic!("{test}: tune2fs: {e}"));
    }
    let (code, text) = common::e2fsck(&img);
    assert_eq!(code, 0, "{test}: the tree as written is not clean:\n{text}");
    if s.inline() && map_form(&img, "small/s2").ok() != Some("inline") {
        fails.push("setup: small/s2 (40 bytes) is not inline on an inline_data image".into());
    }
    if s.old_blockmap() && map_form(&img, "big").ok() != Some("blocks") {
        fails.push("setup: /big is not block-mapped".into());
    }
    let fs = match Fs::mount_path(&img, MountOptions::default()) {
        Ok(fs) => fs,
        Err(e) => {
            fails.push(format!("(a) lanefs mount: {e}"));
            return finish(&test, s, start, model.paths.len(), fails);
        }
    };
    for e in compare(&model, &mut LanefsView { fs: &fs }) {
        fails.push(format!("(a) {e}"));
    }
    // (b) lanefs writes, or refuses by name.
    let writable = match (fs.read_only_reason(), s.expect) {
        (None, _) => true,
        (Some(r), Expect::RoOrRw(feature)) => {
            if !r.contains(feature) {
                fails.push(format!(
                    "(b) read-only, but the reason does not name {feature}: {r}"
                ));
            }
            match fs.mkdir(ROOT_INO, b"refused", 0o755, ROOT_OWNER) {
                Err(Error::ReadOnly) => {}
                other => fails.push(format!(
                    "(b) read-only mount ({r}): mkdir gave {other:?}, want ReadOnly"
                )),
            }
            false
        }
        (Some(r), Expect::Rw) => {
            fails.push(format!("(b) lanefs mounts it read-only: {r}"));
            false
        }
    };
    let mut wrote = Ok(());
    if writable {
        let mut t = LanefsTarget { fs: fs.clone() };
        wrote = lanefs_changes(
            &mut Driver {
                m: &mut model,
                t: &mut t,
            },
            s,
        );
        if let Err(e) = &wrote {
            fails.push(format!("(b) {e}"));
        }
    }
    if let Err(e) = fs.unmount() {
        fails.push(format!("(b) lanefs unmount: {e}"));
    }
    let (code, text) = common::e2fsck(&img);
    if code != 0 {
        let text: Vec<&str> = text.lines().take(30).collect();
        fails.push(format!("(b) e2fsck -fn exit {code}:\n{}", text.join("\n")));
    }
    if !writable || wrote.is_err() {
        return finish(&test, s, start, model.paths.len(), fails);
    }
    if let Err(e) = lanefs_fsck(&img) {
        fails.push(format!("(b) after lanefs's changes: {e}"));
    }
    // Map forms: grown block-mapped files stay so; new files use extents where they can.
    if s.old_blockmap() {
        match map_form(&img, "grow") {
            Ok("blocks") => {}
            other => fails.push(format!(
                "(b) /grow grown by lanefs: map {other:?}, want blocks"
            )),
        }
    }
    let want_new = if s.new_extents() { "extents" } else { "blocks" };
    for p in ["new/dense", "new/sparse"] {
        match map_form(&img, p) {
            Ok(f) if f == want_new => {}
            other => fails.push(format!(
                "(b) /{p} made by lanefs: map {other:?}, want {want_new}"
            )),
        }
    }
    // The expected tree, read by the kernel (or debugfs), then by lanefs again.
    if kernel {
        match KernelMount::mount(&img, &mnt, "ro") {
            Ok(km) => {
                for e in compare(&model, &mut HostView { root: mnt.clone() }) {
                    fails.push(format!("(b) {e}"));
                }
                km.unmount().expect("unmount");
            }
            Err(e) => fails.push(format!("(b) the kernel does not mount lanefs's image: {e}")),
        }
    } else {
        let mut v = DebugfsView {
            img: img.clone(),
            bs: s.bs,
            cats: BTreeMap::new(),
        };
        for e in compare(&model, &mut v) {
            fails.push(format!("(b) {e}"));
        }
    }
    let ro = MountOptions {
        read_only: true,
        ..MountOptions::default()
    };
    match Fs::mount_path(&img, ro) {
        Ok(fs) => {
            for e in compare(&model, &mut LanefsView { fs: &fs }) {
                fails.push(format!("(b) remounted: {e}"));
            }
        }
        Err(e) => fails.push(format!("(b) lanefs remount: {e}")),
    }
    finish(&test, s, start, model.paths.len(), fails)
}

fn finish(test: &str, s: &Shape, start: Instant, paths: usize, fails: Vec<String>) {
    println!(
        "{test}: {:.1} s, {paths} paths, {} problem(s)",
        start.elapsed().as_secs_f64(),
        fails.len()
    );
    if !fails.is_empty() {
        panic!("{test} ({:?}):\n{}", s.mkfs, fails.join("\n"));
    }
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}

macro_rules! shape_tests {
    ($($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                run_shape(stringify!($name));
            }
        )*
        /// Every shape of the table has its test.
        #[test]
        fn every_shape_has_a_test() {
            let tests: &[&str] = &[$(stringify!($name)),*];
            for s in SHAPES {
                assert!(tests.contains(&s.name), "shape {} has no test", s.name);
            }
        }
    };
}

shape_tests!(
    ext2_1k,
    ext2_2k,
    ext2_4k,
    ext2_64k,
    ext3_1k,
    ext3_2k,
    ext3_4k,
    ext3_64k,
    ext4_1k,
    ext4_2k,
    ext4_4k,
    ext4_64k,
    ext4_inline_data,
    ext4_1k_inline_data,
    ext4_uninit_bg,
    ext4_1k_meta_bg,
    ext4_no_filetype,
    ext4_no_dir_index,
    ext4_no_flex_bg,
    ext4_no_sparse_super,
    ext2_1k_no_large_file,
    ext4_128_inodes,
    ext3_1k_128_inodes,
    ext4_mmp,
    ext4_ea_inode,
    ext4_quota,
    ext4_project,
    ext4_bigalloc,
    ext3_4k_then_extent,
    ext2_4k_oldest,
);

// ---------------------------------------------------------------------------------------
// (c) alone, over a wider table: no root needed.

/// lanefs fsck must call every untouched mke2fs image clean, including tiny ones (one
/// group, a resize inode reserving more than the group has) and mke2fs's default sizes.
#[test]
fn pristine_images_fsck_clean() {
    let test = "shapes::pristine_images_fsck_clean";
    if !common::require_tools(test, &["mke2fs"]) {
        return;
    }
    let td = tempfile::tempdir().expect("tempdir");
    let mut table: Vec<(String, u64, Vec<&str>)> = SHAPES
        .iter()
        .map(|s| (s.name.to_string(), s.size, s.mkfs.to_vec()))
        .collect();
    let extra: &[(&str, u64, &[&str])] = &[
        ("ext4_4k_512_blocks", 2 * M, &["-t", "ext4", "-b", "4096"]),
        ("ext4_1k_2m", 2 * M, &["-t", "ext4", "-b", "1024"]),
        ("ext2_1k_1m", M, &["-t", "ext2", "-b", "1024"]),
        ("ext3_1k_8m", 8 * M, &["-t", "ext3", "-b", "1024"]),
        ("ext4_default_16m", 16 * M, &["-t", "ext4"]),
        ("ext4_default_600m", 600 * M, &["-t", "ext4"]),
        ("ext3_default_600m", 600 * M, &["-t", "ext3"]),
        ("ext2_default_600m", 600 * M, &["-t", "ext2"]),
        (
            "ext4_2k_many_groups",
            64 * M,
            &["-t", "ext4", "-b", "2048", "-g", "2048"],
        ),
        ("ext4_64k_1g", 1024 * M, &["-t", "ext4", "-b", "65536"]),
        ("ext2_64k_small", 16 * M, &["-t", "ext2", "-b", "65536"]),
        (
            "ext4_1k_no_journal",
            32 * M,
            &["-t", "ext4", "-b", "1024", "-O", "^has_journal"],
        ),
        ("ext4_no_64bit", 64 * M, &["-t", "ext4", "-O", "^64bit"]),
        (
            "ext4_sparse_super2",
            256 * M,
            &["-t", "ext4", "-O", "sparse_super2"],
        ),
    ];
    for (n, size, args) in extra {
        table.push((n.to_string(), *size, args.to_vec()));
    }
    let mut fails = Vec::new();
    for (i, (name, size, args)) in table.iter().enumerate() {
        let img = match mke2fs_image(td.path(), &format!("p{i}.img"), *size, args) {
            Ok(p) => p,
            Err(e) => {
                fails.push(format!("{name}: {e}"));
                continue;
            }
        };
        if let Err(e) = pristine_fsck(name, &img) {
            fails.push(format!("{name} ({args:?}, {} MiB): {e}", size / M));
        }
        let _ = std::fs::remove_file(&img);
    }
    assert!(
        fails.is_empty(),
        "{test}: {} of {} untouched images not clean:\n{}",
        fails.len(),
        table.len(),
        fails.join("\n")
    );
}

/// lanefs fsck on an untouched image: clean, except that bigalloc images are not checked
/// and must be refused naming the feature.
fn pristine_fsck(name: &str, img: &std::path::Path) -> Result<(), String> {
    match lanefs_fsck(img) {
        Err(e) if name.contains("bigalloc") => {
            if e.contains("bigalloc") && e.contains("not checked") {
                Ok(())
            } else {
                Err(format!("bigalloc must be refused by name: {e}"))
            }
        }
        Ok(_) if name.contains("bigalloc") => {
            Err("bigalloc checked, but fsck is meant to refuse it by name".into())
        }
        r => r.map(|_| ()),
    }
}

/// The harness itself: a model differing from the tree in one byte, one mode, one link
/// target or one name is caught, on a lanefs image (so passing shapes mean something).
#[test]
fn compare_catches_differences() {
    let test = "shapes::compare_catches_differences";
    if !common::require_tools(test, &["mkfs.ext4"]) {
        return;
    }
    let td = tempfile::tempdir().expect("tempdir");
    let img = common::mkfs_image(td.path(), "c.img", 32 * M);
    let fs = Fs::mount_path(&img, MountOptions::default()).expect("mount");
    let mut m = Model::new();
    let mut t = LanefsTarget { fs: fs.clone() };
    let mut d = Driver {
        m: &mut m,
        t: &mut t,
    };
    d.mkdir("d", 0o755).unwrap();
    d.file("d/f", 0o644, &pattern(1, 0, 10_000)).unwrap();
    d.file("sparse", 0o644, b"").unwrap();
    d.write("sparse", 20 << 20, b"tail").unwrap();
    d.symlink("l", b"d/f").unwrap();
    d.link("d/f", "g").unwrap();
    assert_eq!(
        compare(&m, &mut LanefsView { fs: &fs }),
        Vec::<String>::new()
    );
    let caught = |m: &Model, what: &str| {
        let e = compare(m, &mut LanefsView { fs: &fs });
        assert!(!e.is_empty(), "{what} not caught");
        e.join("\n")
    };
    let mut m1 = m.clone();
    m1.content("d/f").write(4000, b"X");
    assert!(caught(&m1, "a byte").contains("differs at byte 4000"));
    let mut m2 = m.clone();
    m2.content("sparse").write(10 << 20, b"Y");
    assert!(caught(&m2, "data in a hole").contains("/sparse differs"));
    let mut m3 = m.clone();
    m3.obj("d").perm = 0o700;
    assert!(caught(&m3, "a mode").contains("mode"));
    let mut m4 = m.clone();
    m4.obj("l").body = Body::Link(b"d/g".to_vec());
    assert!(caught(&m4, "a target").contains("/l ->"));
    let mut m5 = m.clone();
    m5.paths.remove("g");
    let e = caught(&m5, "a name");
    assert!(e.contains("/g unexpected") && e.contains("links"), "{e}");
    fs.unmount().expect("unmount");
}

/// Goal: a file past 2 GiB on an image without large_file turns the feature on, as ext4
/// does, so e2fsck accepts the size. Method: an ext2 image with large_file cleared by
/// debugfs; lanefs writes one byte at 3 GiB into a block-mapped file and unmounts;
/// dumpe2fs shows large_file, e2fsck -fn is clean, debugfs maps the byte where it is.
#[test]
fn large_file_turns_on_past_2_gib() {
    let test = "shapes::large_file_turns_on_past_2_gib";
    if !common::require_tools(test, &["mke2fs", "debugfs", "dumpe2fs", "e2fsck"]) {
        return;
    }
    let td = tempfile::tempdir().expect("tempdir");
    let img = mke2fs_image(td.path(), "lf.img", 64 * M, &["-t", "ext2", "-b", "4096"])
        .unwrap_or_else(|e| panic!("{test}: {e}"));
    debugfs_w(&img, "feature -large_file");
    let features = |img: &Path| {
        run(Command::new("dumpe2fs").arg("-h").arg(img))
            .expect("dumpe2fs")
            .lines()
            .find(|l| l.starts_with("Filesystem features:"))
            .unwrap_or_default()
            .to_string()
    };
    assert!(!features(&img).contains("large_file"), "{}", features(&img));
    let fs = Fs::mount_path(&img, MountOptions::default()).expect("mount");
    let f = fs
        .create(ROOT_INO, b"big", 0o644, Owner::default())
        .expect("create")
        .ino;
    fs.write(f, 3 << 30, b"x").expect("write at 3 GiB");
    fs.release(f).expect("release");
    fs.unmount().expect("unmount");
    assert!(features(&img).contains("large_file"), "{}", features(&img));
    common::assert_fsck_clean(&img);
    // debugfs finds the byte's block where lanefs put it (no 3 GiB read).
    let blk = debugfs(&img, &format!("bmap /big {}", (3u64 << 30) / 4096)).expect("bmap");
    let blk: u64 = blk
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("bmap said {blk:?}"));
    let mut b = [0u8; 1];
    std::fs::File::open(&img)
        .and_then(|f| f.read_exact_at(&mut b, blk * 4096))
        .expect("read the block");
    assert_eq!(&b, b"x");
    let stat = debugfs(&img, "stat /big").expect("stat");
    assert!(
        stat.contains(&format!("Size: {}", (3u64 << 30) + 1)),
        "{stat}"
    );
}

/// `debugfs -w -R CMD IMAGE`, panicking on failure.
fn debugfs_w(img: &Path, cmd: &str) {
    run(Command::new("debugfs")
        .arg("-w")
        .arg("-R")
        .arg(cmd)
        .arg(img))
    .unwrap_or_else(|e| panic!("debugfs -w {cmd}: {e}"));
}
