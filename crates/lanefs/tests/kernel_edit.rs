//! Goal: lanefs edits, through every code path, the structures the Linux kernel builds, in
//! the shapes the kernel builds them, and the kernel edits what lanefs built; after every
//! step `e2fsck -fn` and lanefs fsck are clean, the kernel recorded no error, and a kernel
//! mount and lanefs both read back exactly what a model expects.
//!
//! Method: (1) a regression test: lanefs inserts into a 3,000-entry htree the kernel built
//! (the dx tail's reserved word, which the kernel leaves non-zero, used to be zeroed after
//! checksumming). (2) a seeded differential run: kernel and lanefs phases alternate on one
//! image; scripted steps make sure each structure reaches its shapes (htree leaf splits, a
//! full root growing a second index level and index node splits, each side doing either
//! to the other's tree; emptied leaves, renames within and across htree and linear
//! directories over existing targets, directories moved (their ".." in a dx root), rmdir
//! of htrees and renames over emptied ones; extent trees grown to depth 2 and shrunk back
//! by the other side; unwritten extents split by partial writes; holes; fast and slow
//! symlinks replaced; hard links dropped one at a time; files of a few bytes; device
//! nodes; names with bytes >= 0x80), and seeded random operations fill in between. A model
//! (path -> kind, mode, size, content, symlink target, device number, link count, hard
//! links sharing an inode) is compared with what a read-only kernel mount shows, and with
//! what lanefs shows, at every check. (3) shapes the run does not reach: TEA and legacy
//! hashes, the longest extents, trees at exact capacity, directories with an extent index,
//! the last logical block, the dir_nlink limit with and without the feature, other mkfs
//! layouts (sparse_super2 among them), and the kernel's immutable and append-only flags.
//! The one ignored test reproduces a missing feature: files the kernel maps with indirect
//! blocks (issue 10's ext2/ext3 work).
//!
//! `LANEFS_KERNEL_EDIT_SEED` picks the seed (printed), `LANEFS_KERNEL_EDIT_OPS` the number
//! of random lanefs operations. Needs root, loop devices, e2fsprogs and xfs_io; otherwise
//! each test prints `SKIP` (or fails when `LANEFS_REQUIRE_PRIVILEGED=1`).

mod common;

use common::{kernel_ready, mkfs_image, run, watchdog, KernelMount};
use lanefs::{FallocMode, FileType, Fs, Ino, MountOptions, Owner, SetAttr, ROOT_INO};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, RngCore, SeedableRng};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

/// `e2fsck -fn` must exit 0.
fn fsck_clean(img: &Path, when: &str) -> Result<(), String> {
    let (code, text) = common::e2fsck(img);
    if code == 0 {
        Ok(())
    } else {
        Err(format!(
            "e2fsck -fn {when} is not clean (exit {code}):\n{text}"
        ))
    }
}

/// lanefs's own checker (`lanefs::fsck`) must find the image clean too.
fn lanefs_fsck(img: &Path, when: &str) -> Result<(), String> {
    let dev = lanefs::FileDevice::open(img, true).map_err(|e| format!("open {when}: {e}"))?;
    let r = lanefs::fsck::check(&dev, &lanefs::fsck::FsckOptions::default())
        .map_err(|e| format!("lanefs fsck {when}: {e}"))?;
    if r.is_clean() {
        Ok(())
    } else {
        let list: Vec<String> = r
            .problems
            .iter()
            .take(10)
            .map(|p| format!("  {}: {}", p.code, p.message))
            .collect();
        Err(format!(
            "lanefs fsck {when}: {}\n{}",
            r.summary(),
            list.join("\n")
        ))
    }
}

/// An error the kernel recorded in the superblock (`s_state` error bit, `s_error_count`):
/// some inconsistencies it only logs and records, without failing any call.
fn recorded_errors(img: &Path) -> Result<(), String> {
    use std::os::unix::fs::FileExt;
    let mut sb = [0u8; 1024];
    std::fs::File::open(img)
        .and_then(|f| f.read_exact_at(&mut sb, 1024))
        .map_err(|e| format!("read superblock: {e}"))?;
    let state = u16::from_le_bytes([sb[0x3A], sb[0x3B]]);
    let count = u32::from_le_bytes([sb[0x194], sb[0x195], sb[0x196], sb[0x197]]);
    if state & 2 != 0 || count != 0 {
        let info = run(Command::new("dumpe2fs").arg("-h").arg(img)).unwrap_or_default();
        let lines: Vec<&str> = info
            .lines()
            .filter(|l| l.contains("error") || l.contains("Error") || l.contains("state"))
            .collect();
        return Err(format!(
            "the kernel recorded errors (state {state:#x}, count {count}):\n{}",
            lines.join("\n")
        ));
    }
    Ok(())
}

/// (indirect levels, root count) of an htree directory, from `debugfs htree_dump`;
/// None when the directory is not indexed.
fn htree_info(img: &Path, path: &str) -> Option<(u32, usize)> {
    let out = run(Command::new("debugfs")
        .arg("-R")
        .arg(format!("htree_dump {path}"))
        .arg(img))
    .ok()?;
    let field = |key: &str| {
        out.lines()
            .find_map(|l| l.trim().strip_prefix(key))
            .and_then(|v| v.trim().parse::<usize>().ok())
    };
    Some((
        field("Indirect levels:")? as u32,
        field("Number of entries (count):")?,
    ))
}

// ---------------------------------------------------------------------------------------
// (1) Regression: lanefs inserts into the kernel's htree.

#[test]
fn lanefs_inserts_into_kernel_htree() {
    let test = "lanefs_inserts_into_kernel_htree";
    let _wd = watchdog(test, 600);
    let td = tempfile::tempdir().expect("tempdir");
    if !kernel_ready(test, td.path(), &[]) {
        return;
    }
    let t0 = Instant::now();
    let img = mkfs_image(td.path(), "htree.img", 256 << 20);
    let mnt = td.path().join("mnt");
    let old: Vec<String> = (0..3000).map(|i| format!("file_{i:05}")).collect();
    {
        let km = KernelMount::mount(&img, &mnt, "").expect("kernel mount rw");
        std::fs::create_dir(mnt.join("x")).expect("mkdir /x");
        for n in &old {
            std::fs::write(mnt.join("x").join(n), b"x\n").expect("kernel create");
        }
        km.unmount().expect("kernel unmount");
    }
    fsck_clean(&img, "after the kernel built /x").unwrap_or_else(|e| panic!("{e}"));
    let (levels, count) = htree_info(&img, "/x").expect("the kernel indexed /x");
    assert!(count > 1, "kernel htree root has {count} entries");
    println!("{test}: kernel built /x: {count} leaves, {levels} indirect levels");

    let new: Vec<String> = (1000..1200).map(|i| format!("new_name_{i}")).collect();
    for (batch, names) in new.chunks(10).enumerate() {
        let fs = Fs::mount_path(&img, MountOptions::default()).expect("lanefs mount");
        let x = fs.lookup(ROOT_INO, b"x").expect("lookup /x").ino;
        for n in names {
            let a = fs
                .create(x, n.as_bytes(), 0o644, Owner::default())
                .unwrap_or_else(|e| panic!("lanefs create {n} in the kernel's htree: {e}"));
            fs.write(a.ino, 0, format!("{n}\n").as_bytes())
                .expect("lanefs write");
            fs.release(a.ino).expect("release");
        }
        fs.unmount().expect("lanefs unmount");
        fsck_clean(
            &img,
            &format!("after lanefs inserted {} names", (batch + 1) * 10),
        )
        .unwrap_or_else(|e| panic!("{e}"));
    }

    let km = KernelMount::mount(&img, &mnt, "ro").expect("kernel mount ro");
    let got: BTreeSet<String> = std::fs::read_dir(mnt.join("x"))
        .expect("the kernel lists /x")
        .map(|e| {
            e.expect("dir entry")
                .file_name()
                .into_string()
                .expect("utf8")
        })
        .collect();
    let want: BTreeSet<String> = old.iter().chain(&new).cloned().collect();
    assert_eq!(got.len(), 3200, "names the kernel lists in /x");
    assert!(got == want, "the kernel lists other names in /x");
    for n in &old {
        assert_eq!(std::fs::read(mnt.join("x").join(n)).expect("read"), b"x\n");
    }
    for n in &new {
        let data = std::fs::read(mnt.join("x").join(n)).expect("read");
        assert_eq!(data, format!("{n}\n").into_bytes(), "content of {n}");
    }
    km.unmount().expect("kernel unmount");
    println!(
        "{test}: 200 lanefs inserts, 20 e2fsck runs clean, kernel lists 3200 names ({:.1} s)",
        t0.elapsed().as_secs_f64()
    );
}

// ---------------------------------------------------------------------------------------
// (2) The class: every structure either side builds, edited by the other.
//
// Paths are absolute ("/h/name"); the root itself is not in the model, and "lost+found"
// is left out of both views.

const BS: u64 = 4096;
/// Largest size a random write, truncate or fallocate gives a file.
const MAX_SIZE: u64 = 24 << 20;
/// The most long names in /big and /big2 (a stop for the loops growing their index).
const BIG_LIMIT: usize = 20_000;

/// What the model expects at one path.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Node {
    Dir {
        perm: u16,
    },
    /// A regular file: its inode in `Model::files` (shared by hard links).
    File {
        fid: u64,
    },
    Symlink {
        target: Vec<u8>,
    },
    /// A FIFO (`rdev` 0) or a character or block device.
    Special {
        kind: FileType,
        rdev: u64,
        perm: u16,
    },
}

#[derive(Clone, Debug)]
struct FileObj {
    perm: u16,
    data: Vec<u8>,
    links: u32,
}

#[derive(Default)]
struct Model {
    tree: BTreeMap<String, Node>,
    files: BTreeMap<u64, FileObj>,
    next_fid: u64,
}

/// One operation, done by either side.
#[derive(Clone)]
enum Op {
    Create {
        path: String,
        perm: u16,
        data: Vec<u8>,
    },
    Mkdir {
        path: String,
        perm: u16,
    },
    Symlink {
        path: String,
        target: Vec<u8>,
    },
    Mknod {
        path: String,
        kind: FileType,
        rdev: u64,
        perm: u16,
    },
    Link {
        from: String,
        to: String,
    },
    Unlink {
        path: String,
    },
    Rmdir {
        path: String,
    },
    Rename {
        from: String,
        to: String,
    },
    Write {
        path: String,
        off: u64,
        data: Vec<u8>,
    },
    Truncate {
        path: String,
        size: u64,
    },
    /// fallocate: allocate (unwritten), with or without keeping the size, or punch.
    Falloc {
        path: String,
        off: u64,
        len: u64,
        keep_size: bool,
        punch: bool,
    },
    Chmod {
        path: String,
        perm: u16,
    },
    /// fsync of a file, or (no path) a whole-file-system sync; nothing the model sees.
    Sync {
        path: Option<String>,
    },
}

fn short(p: &str) -> String {
    let n = p.chars().count();
    if n > 40 {
        let head: String = p.chars().take(28).collect();
        let tail: String = p.chars().skip(n - 6).collect();
        format!("{head}..{tail}({}B)", p.len())
    } else {
        p.to_string()
    }
}

impl std::fmt::Debug for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Op::Create { path, perm, data } => {
                write!(f, "create {} {perm:o} {} B", short(path), data.len())
            }
            Op::Mkdir { path, perm } => write!(f, "mkdir {} {perm:o}", short(path)),
            Op::Symlink { path, target } => {
                write!(f, "symlink {} -> {} B", short(path), target.len())
            }
            Op::Mknod {
                path, kind, rdev, ..
            } => write!(f, "mknod {} {kind:?} {rdev:#x}", short(path)),
            Op::Link { from, to } => write!(f, "link {} {}", short(from), short(to)),
            Op::Unlink { path } => write!(f, "unlink {}", short(path)),
            Op::Rmdir { path } => write!(f, "rmdir {}", short(path)),
            Op::Rename { from, to } => write!(f, "rename {} {}", short(from), short(to)),
            Op::Write { path, off, data } => {
                write!(f, "write {} @{off} {} B", short(path), data.len())
            }
            Op::Truncate { path, size } => write!(f, "truncate {} {size}", short(path)),
            Op::Falloc {
                path,
                off,
                len,
                keep_size,
                punch,
            } => write!(
                f,
                "fallocate{}{} {} @{off} +{len}",
                if *punch { " punch" } else { "" },
                if *keep_size { " keep" } else { "" },
                short(path)
            ),
            Op::Chmod { path, perm } => write!(f, "chmod {} {perm:o}", short(path)),
            Op::Sync { path: Some(p) } => write!(f, "fsync {}", short(p)),
            Op::Sync { path: None } => write!(f, "sync"),
        }
    }
}

fn parent_of(path: &str) -> &str {
    &path[..path.rfind('/').expect("absolute path")]
}

fn name_of(path: &str) -> &str {
    &path[path.rfind('/').expect("absolute path") + 1..]
}

/// Whether `path` is `dir` or below it.
fn within(path: &str, dir: &str) -> bool {
    path == dir || (path.starts_with(dir) && path.as_bytes().get(dir.len()) == Some(&b'/'))
}

impl Model {
    fn get(&self, path: &str) -> Option<&Node> {
        self.tree.get(path)
    }
    fn is_dir(&self, path: &str) -> bool {
        path.is_empty() || matches!(self.tree.get(path), Some(Node::Dir { .. }))
    }
    fn file(&self, path: &str) -> &FileObj {
        match self.tree.get(path) {
            Some(Node::File { fid }) => &self.files[fid],
            other => panic!("model: {path} is not a file ({other:?})"),
        }
    }
    fn file_mut(&mut self, path: &str) -> &mut FileObj {
        match self.tree.get(path) {
            Some(Node::File { fid }) => self.files.get_mut(fid).expect("file object"),
            other => panic!("model: {path} is not a file ({other:?})"),
        }
    }
    fn size(&self, path: &str) -> u64 {
        self.file(path).data.len() as u64
    }
    /// Paths strictly below `dir` ("" for the root).
    fn below<'a>(&'a self, dir: &'a str) -> impl Iterator<Item = (&'a String, &'a Node)> + 'a {
        let prefix = format!("{dir}/");
        self.tree
            .range(prefix.clone()..)
            .take_while(move |(k, _)| k.starts_with(&prefix))
    }
    /// Names directly in `dir`.
    fn children<'a>(&'a self, dir: &'a str) -> impl Iterator<Item = (&'a String, &'a Node)> + 'a {
        let depth = dir.len() + 1;
        self.below(dir)
            .filter(move |(k, _)| !k[depth..].contains('/'))
    }
    fn is_empty_dir(&self, dir: &str) -> bool {
        self.below(dir).next().is_none()
    }
    fn drop_ref(&mut self, node: Node) {
        if let Node::File { fid } = node {
            let f = self.files.get_mut(&fid).expect("file object");
            f.links -= 1;
            if f.links == 0 {
                self.files.remove(&fid);
            }
        }
    }

    fn apply(&mut self, op: &Op) {
        match op {
            Op::Create { path, perm, data } => {
                self.next_fid += 1;
                let fid = self.next_fid;
                self.files.insert(
                    fid,
                    FileObj {
                        perm: *perm,
                        data: data.clone(),
                        links: 1,
                    },
                );
                self.tree.insert(path.clone(), Node::File { fid });
            }
            Op::Mkdir { path, perm } => {
                self.tree.insert(path.clone(), Node::Dir { perm: *perm });
            }
            Op::Symlink { path, target } => {
                self.tree.insert(
                    path.clone(),
                    Node::Symlink {
                        target: target.clone(),
                    },
                );
            }
            Op::Mknod {
                path,
                kind,
                rdev,
                perm,
            } => {
                let n = Node::Special {
                    kind: *kind,
                    rdev: *rdev,
                    perm: *perm,
                };
                self.tree.insert(path.clone(), n);
            }
            Op::Link { from, to } => {
                let n = self.tree[from].clone();
                if let Node::File { fid } = n {
                    self.files.get_mut(&fid).expect("file object").links += 1;
                }
                self.tree.insert(to.clone(), n);
            }
            Op::Unlink { path } | Op::Rmdir { path } => {
                let n = self.tree.remove(path).expect("model: path exists");
                self.drop_ref(n);
            }
            Op::Rename { from, to } => {
                let src = self.tree[from].clone();
                if let (Node::File { fid: a }, Some(Node::File { fid: b })) = (&src, self.get(to)) {
                    if a == b {
                        return; // two names of one inode: rename does nothing
                    }
                }
                if let Some(old) = self.tree.remove(to) {
                    self.drop_ref(old);
                }
                let moved: Vec<String> = self.below(from).map(|(k, _)| k.clone()).collect();
                self.tree.remove(from);
                self.tree.insert(to.clone(), src);
                for k in moved {
                    let n = self.tree.remove(&k).expect("moved path");
                    self.tree.insert(format!("{to}{}", &k[from.len()..]), n);
                }
            }
            Op::Write { path, off, data } => {
                let f = self.file_mut(path);
                let end = *off as usize + data.len();
                if f.data.len() < end {
                    f.data.resize(end, 0);
                }
                f.data[*off as usize..end].copy_from_slice(data);
            }
            Op::Truncate { path, size } => self.file_mut(path).data.resize(*size as usize, 0),
            Op::Falloc {
                path,
                off,
                len,
                keep_size,
                punch,
            } => {
                let f = self.file_mut(path);
                let size = f.data.len() as u64;
                if *punch {
                    let end = (off + len).min(size);
                    if *off < end {
                        f.data[*off as usize..end as usize].fill(0);
                    }
                } else if !keep_size && off + len > size {
                    f.data.resize((off + len) as usize, 0);
                }
            }
            Op::Chmod { path, perm } => match self.tree.get_mut(path) {
                Some(Node::Dir { perm: p }) | Some(Node::Special { perm: p, .. }) => *p = *perm,
                Some(Node::File { fid }) => {
                    let fid = *fid;
                    self.files.get_mut(&fid).expect("file object").perm = *perm;
                }
                other => panic!("model: chmod of {other:?}"),
            },
            Op::Sync { .. } => {}
        }
    }
}

// ---------------------------------------------------------------------------------------
// The two sides.

/// The kernel, through syscalls on a read-write loop mount.
fn kernel_apply(root: &Path, op: &Op) -> Result<(), String> {
    use std::os::unix::fs::{FileExt, PermissionsExt};
    let p = |s: &str| root.join(s.trim_start_matches('/'));
    let perm = |path: &Path, perm: u16| {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(u32::from(perm)))
    };
    let e = |what: &str, err: std::io::Error| format!("kernel {what}: {err}");
    match op {
        Op::Create {
            path,
            perm: m,
            data,
        } => {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(p(path))
                .map_err(|x| e("create", x))?;
            f.write_all_at(data, 0).map_err(|x| e("write", x))?;
            drop(f);
            perm(&p(path), *m).map_err(|x| e("chmod", x))
        }
        Op::Mkdir { path, perm: m } => {
            std::fs::create_dir(p(path)).map_err(|x| e("mkdir", x))?;
            perm(&p(path), *m).map_err(|x| e("chmod", x))
        }
        Op::Symlink { path, target } => {
            use std::os::unix::ffi::OsStrExt;
            std::os::unix::fs::symlink(std::ffi::OsStr::from_bytes(target), p(path))
                .map_err(|x| e("symlink", x))
        }
        Op::Mknod {
            path,
            kind,
            rdev,
            perm: m,
        } => {
            // mknod(1): no `unsafe` here.
            let mut c = Command::new("mknod");
            c.arg(p(path));
            match kind {
                FileType::Fifo => c.arg("p"),
                FileType::CharDevice => c.arg("c"),
                _ => c.arg("b"),
            };
            if *kind != FileType::Fifo {
                c.arg((rdev >> 8).to_string())
                    .arg((rdev & 0xff).to_string());
            }
            run(&mut c)?;
            perm(&p(path), *m).map_err(|x| e("chmod", x))
        }
        Op::Link { from, to } => std::fs::hard_link(p(from), p(to)).map_err(|x| e("link", x)),
        Op::Unlink { path } => std::fs::remove_file(p(path)).map_err(|x| e("unlink", x)),
        Op::Rmdir { path } => std::fs::remove_dir(p(path)).map_err(|x| e("rmdir", x)),
        Op::Rename { from, to } => std::fs::rename(p(from), p(to)).map_err(|x| e("rename", x)),
        Op::Write { path, off, data } => {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(p(path))
                .map_err(|x| e("open", x))?;
            f.write_all_at(data, *off).map_err(|x| e("write", x))
        }
        Op::Truncate { path, size } => std::fs::OpenOptions::new()
            .write(true)
            .open(p(path))
            .and_then(|f| f.set_len(*size))
            .map_err(|x| e("truncate", x)),
        Op::Falloc {
            path,
            off,
            len,
            keep_size,
            punch,
        } => {
            let cmd = if *punch {
                format!("fpunch {off} {len}")
            } else if *keep_size {
                format!("falloc -k {off} {len}")
            } else {
                format!("falloc {off} {len}")
            };
            xfs_io(&p(path), &[cmd])
        }
        Op::Chmod { path, perm: m } => perm(&p(path), *m).map_err(|x| e("chmod", x)),
        Op::Sync { path: Some(path) } => std::fs::File::open(p(path))
            .and_then(|f| f.sync_all())
            .map_err(|x| e("fsync", x)),
        Op::Sync { path: None } => run(Command::new("sync").arg("-f").arg(root)).map(|_| ()),
    }
}

/// Run `xfs_io` commands on a file of the kernel mount (fallocate without `unsafe`).
fn xfs_io(path: &Path, cmds: &[String]) -> Result<(), String> {
    let mut c = Command::new("xfs_io");
    for cmd in cmds {
        c.arg("-c").arg(cmd);
    }
    let out = run(c.arg(path))?;
    // xfs_io reports a failed command on stdout and still exits 0.
    if out.trim().is_empty() {
        Ok(())
    } else {
        Err(format!("xfs_io {}: {out}", path.display()))
    }
}

fn lanefs_path(fs: &Fs, path: &str) -> lanefs::Result<Ino> {
    let mut ino = ROOT_INO;
    for c in path.split('/').filter(|c| !c.is_empty()) {
        ino = fs.lookup(ino, c.as_bytes())?.ino;
    }
    Ok(ino)
}

/// lanefs, through its library calls.
fn lanefs_apply(fs: &Fs, op: &Op, open_first: bool) -> lanefs::Result<()> {
    let o = Owner::default();
    let at = |p: &str| -> lanefs::Result<(Ino, Vec<u8>)> {
        Ok((
            lanefs_path(fs, parent_of(p))?,
            name_of(p).as_bytes().to_vec(),
        ))
    };
    // Data calls with the file open (as a FUSE client does) or not.
    let with_open = |ino: Ino, f: &dyn Fn() -> lanefs::Result<()>| -> lanefs::Result<()> {
        if open_first {
            fs.open(ino)?;
            let r = f();
            fs.release(ino)?;
            r
        } else {
            f()
        }
    };
    match op {
        Op::Create { path, perm, data } => {
            let (d, n) = at(path)?;
            let a = fs.create(d, &n, *perm, o)?;
            let r = if data.is_empty() {
                Ok(())
            } else {
                fs.write(a.ino, 0, data).map(|_| ())
            };
            fs.release(a.ino)?;
            r
        }
        Op::Mkdir { path, perm } => {
            // As the kernel side: mkdir, then chmod to exactly `perm` (a set-group-ID
            // parent would otherwise pass its bit on).
            let (d, n) = at(path)?;
            let a = fs.mkdir(d, &n, *perm, o)?;
            let set = SetAttr {
                perm: Some(*perm),
                ..SetAttr::default()
            };
            fs.setattr(a.ino, &set).map(|_| ())
        }
        Op::Symlink { path, target } => {
            let (d, n) = at(path)?;
            fs.symlink(d, &n, target, o).map(|_| ())
        }
        Op::Mknod {
            path,
            kind,
            rdev,
            perm,
        } => {
            let (d, n) = at(path)?;
            let mode = u32::from(kind.mode_bits() | perm);
            fs.mknod(d, &n, mode, *rdev as u32, o).map(|_| ())
        }
        Op::Link { from, to } => {
            let ino = lanefs_path(fs, from)?;
            let (d, n) = at(to)?;
            fs.link(ino, d, &n).map(|_| ())
        }
        Op::Unlink { path } => {
            let (d, n) = at(path)?;
            fs.unlink(d, &n)
        }
        Op::Rmdir { path } => {
            let (d, n) = at(path)?;
            fs.rmdir(d, &n)
        }
        Op::Rename { from, to } => {
            let (d, n) = at(from)?;
            let (nd, nn) = at(to)?;
            fs.rename(d, &n, nd, &nn)
        }
        Op::Write { path, off, data } => {
            let ino = lanefs_path(fs, path)?;
            with_open(ino, &|| {
                let n = fs.write(ino, *off, data)?;
                assert_eq!(n, data.len(), "short lanefs write");
                Ok(())
            })
        }
        Op::Truncate { path, size } => {
            let ino = lanefs_path(fs, path)?;
            let set = SetAttr {
                size: Some(*size),
                ..Default::default()
            };
            with_open(ino, &|| fs.setattr(ino, &set).map(|_| ()))
        }
        Op::Falloc {
            path,
            off,
            len,
            keep_size,
            punch,
        } => {
            let ino = lanefs_path(fs, path)?;
            let mode = FallocMode {
                keep_size: *keep_size || *punch,
                punch_hole: *punch,
                zero_range: false,
            };
            with_open(ino, &|| fs.fallocate(ino, mode, *off, *len))
        }
        Op::Chmod { path, perm } => {
            let ino = lanefs_path(fs, path)?;
            let set = SetAttr {
                perm: Some(*perm),
                ..Default::default()
            };
            fs.setattr(ino, &set).map(|_| ())
        }
        Op::Sync { path: Some(path) } => fs.fsync(lanefs_path(fs, path)?, false),
        Op::Sync { path: None } => fs.sync(),
    }
}

// ---------------------------------------------------------------------------------------
// What each side shows, compared with the model.

#[derive(Debug, PartialEq, Eq)]
enum Seen {
    Dir {
        perm: u16,
        nlink: u64,
    },
    File {
        perm: u16,
        data: Vec<u8>,
        ino: u64,
        nlink: u64,
    },
    Symlink {
        target: Vec<u8>,
        perm: u16,
    },
    Special {
        kind: FileType,
        rdev: u64,
        perm: u16,
    },
}

fn kernel_view(root: &Path) -> Result<BTreeMap<String, Seen>, String> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    fn walk(dir: &Path, prefix: &str, out: &mut BTreeMap<String, Seen>) -> Result<(), String> {
        let rd = std::fs::read_dir(dir).map_err(|e| format!("kernel lists {prefix}/: {e}"))?;
        for e in rd {
            let e = e.map_err(|e| format!("kernel lists {prefix}/: {e}"))?;
            let name = String::from_utf8_lossy(e.file_name().as_bytes()).into_owned();
            if prefix.is_empty() && name == "lost+found" {
                continue;
            }
            let path = format!("{prefix}/{name}");
            let md = std::fs::symlink_metadata(e.path())
                .map_err(|x| format!("kernel stat {path}: {x}"))?;
            let perm = (md.mode() & 0o7777) as u16;
            let seen = if md.is_dir() {
                walk(&e.path(), &path, out)?;
                Seen::Dir {
                    perm,
                    nlink: md.nlink(),
                }
            } else if md.file_type().is_symlink() {
                let t = std::fs::read_link(e.path())
                    .map_err(|x| format!("kernel readlink {path}: {x}"))?;
                if t.as_os_str().len() as u64 != md.len() {
                    return Err(format!(
                        "kernel: symlink {path} size {} vs target",
                        md.len()
                    ));
                }
                Seen::Symlink {
                    target: t.as_os_str().as_bytes().to_vec(),
                    perm,
                }
            } else if !md.is_file() {
                let ft = md.file_type();
                let kind = if ft.is_fifo() {
                    FileType::Fifo
                } else if ft.is_char_device() {
                    FileType::CharDevice
                } else {
                    FileType::BlockDevice
                };
                Seen::Special {
                    kind,
                    rdev: md.rdev(),
                    perm,
                }
            } else {
                let data = if md.len() == 0 {
                    Vec::new()
                } else {
                    std::fs::read(e.path()).map_err(|x| format!("kernel reads {path}: {x}"))?
                };
                Seen::File {
                    perm,
                    data,
                    ino: md.ino(),
                    nlink: md.nlink(),
                }
            };
            if out.insert(path.clone(), seen).is_some() {
                return Err(format!("kernel lists {path} twice"));
            }
        }
        Ok(())
    }
    let mut out = BTreeMap::new();
    walk(root, "", &mut out)?;
    Ok(out)
}

fn lanefs_view(fs: &Fs) -> Result<BTreeMap<String, Seen>, String> {
    fn walk(
        fs: &Fs,
        dir: Ino,
        prefix: &str,
        out: &mut BTreeMap<String, Seen>,
    ) -> Result<(), String> {
        let mut pos = 0;
        let mut names = BTreeSet::new();
        loop {
            let batch = fs
                .readdir(dir, pos, 97)
                .map_err(|e| format!("lanefs readdir {prefix}/: {e}"))?;
            if batch.is_empty() {
                break;
            }
            for e in batch {
                if e.next <= pos {
                    return Err(format!("lanefs readdir {prefix}/: cursor went back"));
                }
                pos = e.next;
                if e.name == b"." || e.name == b".." {
                    continue;
                }
                let name = String::from_utf8_lossy(&e.name).into_owned();
                if prefix.is_empty() && name == "lost+found" {
                    continue;
                }
                if !names.insert(name.clone()) {
                    return Err(format!("lanefs readdir {prefix}/ returns {name} twice"));
                }
                let path = format!("{prefix}/{name}");
                let a = fs
                    .getattr(e.ino)
                    .map_err(|x| format!("lanefs getattr {path}: {x}"))?;
                if a.kind != e.kind {
                    return Err(format!(
                        "lanefs {path}: entry type {:?}, inode {:?}",
                        e.kind, a.kind
                    ));
                }
                let seen = match a.kind {
                    FileType::Directory => {
                        walk(fs, e.ino, &path, out)?;
                        Seen::Dir {
                            perm: a.perm,
                            nlink: u64::from(a.nlink),
                        }
                    }
                    FileType::Symlink => Seen::Symlink {
                        target: fs
                            .readlink(e.ino)
                            .map_err(|x| format!("lanefs readlink {path}: {x}"))?,
                        perm: a.perm,
                    },
                    FileType::Fifo | FileType::CharDevice | FileType::BlockDevice => {
                        Seen::Special {
                            kind: a.kind,
                            rdev: u64::from(a.rdev),
                            perm: a.perm,
                        }
                    }
                    _ => {
                        let mut data = vec![0u8; a.size as usize];
                        let mut off = 0;
                        while off < data.len() {
                            let end = (off + (4 << 20)).min(data.len());
                            let n = fs
                                .read(e.ino, off as u64, &mut data[off..end])
                                .map_err(|x| format!("lanefs read {path}: {x}"))?;
                            if n == 0 {
                                return Err(format!("lanefs read {path}: short at {off}"));
                            }
                            off += n;
                        }
                        Seen::File {
                            perm: a.perm,
                            data,
                            ino: e.ino,
                            nlink: u64::from(a.nlink),
                        }
                    }
                };
                out.insert(path, seen);
            }
        }
        Ok(())
    }
    let mut out = BTreeMap::new();
    walk(fs, ROOT_INO, "", &mut out)?;
    Ok(out)
}

/// Compare a side's view with the model: names, kinds, modes, sizes, contents, targets,
/// link counts, and hard links sharing (only) their inode.
fn compare(model: &Model, seen: &BTreeMap<String, Seen>, who: &str) -> Result<(), String> {
    let want: BTreeSet<&String> = model.tree.keys().collect();
    let got: BTreeSet<&String> = seen.keys().collect();
    if want != got {
        let missing: Vec<String> = want.difference(&got).take(8).map(|p| short(p)).collect();
        let extra: Vec<String> = got.difference(&want).take(8).map(|p| short(p)).collect();
        return Err(format!(
            "{who}: {} paths, model {}; missing {} {missing:?}; unexpected {} {extra:?}",
            got.len(),
            want.len(),
            want.difference(&got).count(),
            got.difference(&want).count()
        ));
    }
    let mut inos: BTreeMap<u64, u64> = BTreeMap::new();
    for (path, node) in &model.tree {
        let s = &seen[path];
        let p = short(path);
        match (node, s) {
            (Node::Dir { perm }, Seen::Dir { perm: sp, nlink }) => {
                let subdirs = model
                    .children(path)
                    .filter(|(_, n)| matches!(n, Node::Dir { .. }))
                    .count() as u64;
                if perm != sp || *nlink != 2 + subdirs {
                    return Err(format!(
                        "{who}: dir {p}: mode {sp:o} nlink {nlink}, model {perm:o} nlink {}",
                        2 + subdirs
                    ));
                }
            }
            (Node::Symlink { target }, Seen::Symlink { target: t, perm }) => {
                if target != t || *perm != 0o777 {
                    return Err(format!(
                        "{who}: symlink {p}: target {} B {:?}.. mode {perm:o}, model {} B {:?}..",
                        t.len(),
                        String::from_utf8_lossy(&t[..t.len().min(20)]),
                        target.len(),
                        String::from_utf8_lossy(&target[..target.len().min(20)])
                    ));
                }
            }
            (
                Node::File { fid },
                Seen::File {
                    perm,
                    data,
                    ino,
                    nlink,
                },
            ) => {
                let f = &model.files[fid];
                if f.perm != *perm || u64::from(f.links) != *nlink {
                    return Err(format!(
                        "{who}: file {p}: mode {perm:o} nlink {nlink}, model {:o} {}",
                        f.perm, f.links
                    ));
                }
                if f.data != *data {
                    let at = f
                        .data
                        .iter()
                        .zip(data.iter())
                        .position(|(a, b)| a != b)
                        .unwrap_or(f.data.len().min(data.len()));
                    return Err(format!(
                        "{who}: file {p}: size {}, model {}; first difference at byte {at} \
                         (block {}): {:?} vs model {:?}",
                        data.len(),
                        f.data.len(),
                        at as u64 / BS,
                        &data[at.min(data.len())..(at + 8).min(data.len())],
                        &f.data[at.min(f.data.len())..(at + 8).min(f.data.len())]
                    ));
                }
                match inos.get(fid) {
                    Some(i) if i != ino => {
                        return Err(format!("{who}: {p} is a hard link but inode {ino} != {i}"))
                    }
                    _ => {
                        inos.insert(*fid, *ino);
                    }
                }
            }
            (
                Node::Special { kind, rdev, perm },
                Seen::Special {
                    kind: k,
                    rdev: r,
                    perm: sp,
                },
            ) => {
                if (kind, rdev, perm) != (k, r, sp) {
                    return Err(format!(
                        "{who}: {p}: {k:?} {r:#x} mode {sp:o}, model {kind:?} {rdev:#x} {perm:o}"
                    ));
                }
            }
            (n, s) => {
                return Err(format!(
                    "{who}: {p} kind: {}, model {n:?}",
                    match s {
                        Seen::Dir { .. } => "directory",
                        Seen::File { .. } => "file",
                        Seen::Symlink { .. } => "symlink",
                        Seen::Special { .. } => "special file",
                    }
                ))
            }
        }
    }
    let distinct: BTreeSet<u64> = inos.values().copied().collect();
    if distinct.len() != inos.len() {
        return Err(format!("{who}: two model files share one inode"));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// The run: one image, the model, and whichever side has it mounted.

enum Side {
    None,
    Kernel(KernelMount),
    Lanefs(Arc<Fs>),
}

struct World {
    img: PathBuf,
    /// Read-write kernel mount point (kernel phases).
    mnt: PathBuf,
    /// Read-only kernel mount point (checks).
    ro: PathBuf,
    seed: u64,
    rng: StdRng,
    model: Model,
    side: Side,
    /// Operations since the last clean check (printed on failure).
    log: Vec<String>,
    checks: usize,
    lanefs_ops: usize,
    kernel_ops: usize,
    random_ops: usize,
    since_check: usize,
    check_every: usize,
    /// Paths random operations neither move nor remove (nor their ancestors).
    pinned: BTreeSet<String>,
    /// Subtrees random operations leave alone entirely (scripted steps own them).
    frozen: BTreeSet<String>,
    /// Directories random operations favour.
    hot: Vec<String>,
    t0: Instant,
}

impl World {
    fn new(td: &Path, img: PathBuf, seed: u64, ops: usize) -> World {
        let pinned = [
            "/h",
            "/big",
            "/big2",
            "/big3",
            "/lin1",
            "/lin2",
            "/lin3",
            "/lin4",
            "/ext",
            "/sym",
            "/links",
            "/tiny",
            "/links/a",
            "/links/b",
            "/lin2/sub",
            "/lin3/empty",
            "/hx",
            "/hy",
        ];
        World {
            img,
            mnt: td.join("mnt"),
            ro: td.join("ro"),
            seed,
            rng: StdRng::seed_from_u64(seed),
            model: Model::default(),
            side: Side::None,
            log: Vec::new(),
            checks: 0,
            lanefs_ops: 0,
            kernel_ops: 0,
            random_ops: 0,
            since_check: 0,
            check_every: (ops / 50).max(10),
            pinned: pinned.iter().map(|s| s.to_string()).collect(),
            frozen: ["/ext", "/sym", "/links", "/tiny", "/hx", "/hy"]
                .iter()
                .map(|s| s.to_string())
                .collect(),
            hot: [
                "/h", "/big", "/big2", "/big3", "/lin1", "/lin2", "/lin3", "/lin4",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect(),
            t0: Instant::now(),
        }
    }

    fn side_name(&self) -> &'static str {
        match self.side {
            Side::None => "none",
            Side::Kernel(_) => "kernel",
            Side::Lanefs(_) => "lanefs",
        }
    }

    /// Unmount whatever is mounted (no checks).
    fn unmount(&mut self) -> Result<(), String> {
        match std::mem::replace(&mut self.side, Side::None) {
            Side::None => Ok(()),
            Side::Kernel(km) => km.unmount(),
            Side::Lanefs(fs) => fs.unmount().map_err(|e| format!("lanefs unmount: {e}")),
        }
    }

    /// Stop: keep the image for a look, and report the seed and the operations since the
    /// last clean check.
    fn fail(&mut self, msg: String) -> ! {
        let _ = self.unmount();
        let keep = std::env::temp_dir().join(format!("lanefs-kernel-edit-{}.img", self.seed));
        let kept = run(Command::new("cp")
            .arg("--sparse=always")
            .arg(&self.img)
            .arg(&keep))
        .is_ok();
        let tail: Vec<&String> = self.log.iter().rev().take(60).collect();
        let mut ops = String::new();
        for l in tail.iter().rev() {
            ops.push_str("  ");
            ops.push_str(l);
            ops.push('\n');
        }
        panic!(
            "kernel_edit (LANEFS_KERNEL_EDIT_SEED={}) after {} checks: {msg}\nimage kept: {}\n\
             last {} of {} operations since the last clean check:\n{ops}",
            self.seed,
            self.checks,
            if kept {
                keep.display().to_string()
            } else {
                "no".into()
            },
            tail.len(),
            self.log.len(),
        );
    }

    fn mount_kernel(&mut self) {
        if let Err(e) = self.unmount() {
            self.fail(e);
        }
        match KernelMount::mount(&self.img, &self.mnt, "") {
            Ok(km) => self.side = Side::Kernel(km),
            Err(e) => self.fail(format!("the kernel refuses to mount: {e}")),
        }
    }

    fn mount_lanefs(&mut self) {
        if let Err(e) = self.unmount() {
            self.fail(e);
        }
        match Fs::mount_path(&self.img, MountOptions::default()) {
            Ok(fs) => self.side = Side::Lanefs(fs),
            Err(e) => self.fail(format!("lanefs refuses to mount: {e}")),
        }
    }

    /// Do `op` on the mounted side and in the model.
    fn op(&mut self, op: Op) {
        let open_first = self.rng.gen_bool(0.5);
        let line = format!("{} {op:?}", self.side_name());
        self.log.push(line.clone());
        let r = match &self.side {
            Side::Kernel(km) => kernel_apply(&km.dir, &op),
            Side::Lanefs(fs) => {
                let fs = fs.clone();
                match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    lanefs_apply(&fs, &op, open_first)
                })) {
                    Ok(r) => r.map_err(|e| format!("lanefs: {e} (errno {})", e.errno())),
                    Err(_) => Err("lanefs panicked".to_string()),
                }
            }
            Side::None => Err("nothing mounted".into()),
        };
        if let Err(e) = r {
            self.fail(format!("{line}: {e}"));
        }
        match self.side {
            Side::Kernel(_) => self.kernel_ops += 1,
            _ => self.lanefs_ops += 1,
        }
        self.model.apply(&op);
    }

    /// Unmount, `e2fsck -fn`, compare the kernel's (read-only mount) and lanefs's views
    /// with the model, run `inspect` on the image, and mount the same side again.
    fn check_with<T>(&mut self, label: &str, inspect: impl FnOnce(&Path) -> T) -> T {
        let was = self.side_name();
        if let Side::Lanefs(fs) = &self.side {
            let r = lanefs_view(fs).and_then(|v| compare(&self.model, &v, "lanefs"));
            if let Err(e) = r {
                self.fail(format!("{label}: {e}"));
            }
        }
        if let Err(e) = self.unmount() {
            self.fail(format!("{label}: {e}"));
        }
        if let Err(e) = fsck_clean(&self.img, label).and_then(|_| lanefs_fsck(&self.img, label)) {
            self.fail(e);
        }
        if was != "lanefs" {
            // lanefs reads what the kernel wrote.
            let ro = MountOptions {
                read_only: true,
                ..Default::default()
            };
            let r = Fs::mount_path(&self.img, ro)
                .map_err(|e| format!("lanefs read-only mount: {e}"))
                .and_then(|fs| {
                    let r = lanefs_view(&fs).and_then(|v| compare(&self.model, &v, "lanefs"));
                    let _ = fs.unmount();
                    r
                });
            if let Err(e) = r {
                self.fail(format!("{label}: {e}"));
            }
        }
        let r = KernelMount::mount(&self.img, &self.ro, "ro")
            .map_err(|e| format!("the kernel refuses to mount: {e}"))
            .and_then(|km| {
                let r = kernel_view(&km.dir).and_then(|v| compare(&self.model, &v, "kernel"));
                km.unmount().and(r)
            })
            .and_then(|_| recorded_errors(&self.img));
        if let Err(e) = r {
            self.fail(format!("{label}: {e}"));
        }
        let out = inspect(&self.img);
        match was {
            "kernel" => self.mount_kernel(),
            "lanefs" => self.mount_lanefs(),
            _ => {}
        }
        self.checks += 1;
        self.since_check = 0;
        self.log.clear();
        out
    }

    fn check(&mut self, label: &str) {
        self.check_with(label, |_| ());
    }

    fn note(&self, what: &str) {
        println!(
            "kernel_edit: [{:6.1} s] {what}",
            self.t0.elapsed().as_secs_f64()
        );
    }

    /// Bytes of file data the model holds (holes included).
    fn data_bytes(&self) -> u64 {
        self.model.files.values().map(|f| f.data.len() as u64).sum()
    }

    // -----------------------------------------------------------------------------------
    // Random operations.

    fn rand_name(&mut self, dir: &str) -> String {
        loop {
            let len = match self.rng.gen_range(0..10) {
                0..=2 => self.rng.gen_range(1..12),
                3..=6 => self.rng.gen_range(12..60),
                _ => self.rng.gen_range(150..=255),
            };
            let name = rand_chars(&mut self.rng, len);
            if name != "." && name != ".." && self.model.get(&format!("{dir}/{name}")).is_none() {
                return name;
            }
        }
    }

    fn rand_data(&mut self, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.rng.fill_bytes(&mut v);
        v
    }

    fn is_frozen(&self, path: &str) -> bool {
        self.frozen.iter().any(|f| within(path, f))
    }

    /// Whether random operations may move or remove `path`.
    fn movable(&self, path: &str) -> bool {
        !self.is_frozen(path) && !self.pinned.iter().any(|p| within(p, path))
    }

    fn pick_dir(&mut self) -> String {
        if self.rng.gen_bool(0.4) {
            let hot: Vec<String> = self
                .hot
                .iter()
                .filter(|d| self.model.is_dir(d) && !self.is_frozen(d))
                .cloned()
                .collect();
            if let Some(d) = hot.choose(&mut self.rng) {
                return d.clone();
            }
        }
        let mut dirs: Vec<String> = self
            .model
            .tree
            .iter()
            .filter(|(k, n)| matches!(n, Node::Dir { .. }) && !self.is_frozen(k))
            .map(|(k, _)| k.clone())
            .collect();
        dirs.push(String::new());
        dirs.choose(&mut self.rng).cloned().expect("a directory")
    }

    fn pick(&mut self, f: impl Fn(&Model, &str, &Node) -> bool) -> Option<String> {
        let v: Vec<&String> = self
            .model
            .tree
            .iter()
            .filter(|(k, n)| !self.is_frozen(k) && f(&self.model, k, n))
            .map(|(k, _)| k)
            .collect();
        v.choose(&mut self.rng).map(|s| (*s).clone())
    }

    /// A file for a data operation: half the time one with data, else any.
    fn pick_file(&mut self) -> Option<String> {
        if self.rng.gen_bool(0.5) {
            let big = self.pick(|m, _, n| match n {
                Node::File { fid } => m.files[fid].data.len() > 8192,
                _ => false,
            });
            if big.is_some() {
                return big;
            }
        }
        self.pick(|_, _, n| matches!(n, Node::File { .. }))
    }

    fn rand_write(&mut self, path: String) -> Op {
        let size = self.model.size(&path);
        let (off, len) = match self.rng.gen_range(0..10) {
            0..=3 => {
                let max = [100, 20_000, 200_000][self.rng.gen_range(0..3)];
                (self.rng.gen_range(0..=size), self.rng.gen_range(1..=max))
            }
            4 | 5 => (size, self.rng.gen_range(1..50_000)),
            6 | 7 => (
                size + self.rng.gen_range(1..300_000),
                self.rng.gen_range(1..30_000),
            ),
            _ => (
                self.rng.gen_range(0..=size / BS + 2) * BS,
                self.rng.gen_range(1..=16) * BS as usize,
            ),
        };
        let off = off.min(MAX_SIZE - 1);
        let len = len.min((MAX_SIZE - off) as usize);
        let data = self.rand_data(len);
        Op::Write { path, off, data }
    }

    fn rand_falloc(&mut self, path: String) -> Op {
        let size = self.model.size(&path);
        let aligned = self.rng.gen_bool(0.5);
        let mut off = self.rng.gen_range(0..=size + 64 * 1024);
        let mut len = self.rng.gen_range(1..=(size / 2).max(8192) + 8192);
        if aligned {
            off -= off % BS;
            len = len.div_ceil(BS) * BS;
        }
        let off = off.min(MAX_SIZE - BS);
        let len = len.min(MAX_SIZE - off);
        let (punch, keep_size) = match self.rng.gen_range(0..4) {
            0 | 1 => (true, true),
            2 => (false, true),
            _ => (false, false),
        };
        Op::Falloc {
            path,
            off,
            len,
            keep_size,
            punch,
        }
    }

    fn rand_target(&mut self) -> Vec<u8> {
        let len = if self.rng.gen_bool(0.5) {
            self.rng.gen_range(1..60)
        } else {
            let max = if self.rng.gen_bool(0.8) { 300 } else { 4095 };
            self.rng.gen_range(60..=max)
        };
        rand_chars(&mut self.rng, len).into_bytes()
    }

    fn rand_rename(&mut self) -> Option<Op> {
        let from = self.pick(|_, k, _| !k.is_empty())?;
        if !self.movable(&from) {
            return None;
        }
        let src_dir = self.model.is_dir(&from);
        let dir = if self.rng.gen_bool(0.4) {
            parent_of(&from).to_string()
        } else {
            self.pick_dir()
        };
        if self.is_frozen(&dir) || (src_dir && within(&dir, &from)) {
            return None;
        }
        if self.rng.gen_bool(0.4) {
            // Over an existing, compatible entry.
            let m = &self.model;
            let targets: Vec<String> = m
                .children(&dir)
                .filter(|(k, n)| {
                    **k != from
                        && match n {
                            Node::Dir { .. } => src_dir && m.is_empty_dir(k),
                            _ => !src_dir,
                        }
                })
                .map(|(k, _)| k.clone())
                .filter(|k| self.movable(k))
                .collect();
            if let Some(to) = targets.choose(&mut self.rng) {
                return Some(Op::Rename {
                    from,
                    to: to.clone(),
                });
            }
        }
        let to = format!("{dir}/{}", self.rand_name(&dir));
        Some(Op::Rename { from, to })
    }

    /// A random operation the model says must succeed (None: no candidate this time).
    fn rand_op(&mut self) -> Option<Op> {
        if self.data_bytes() > 120 << 20 && self.rng.gen_bool(0.5) {
            // Long runs: keep the 256 MiB image from filling up (holes count here).
            let path = self.pick(|m, _, n| match n {
                Node::File { fid } => m.files[fid].data.len() > 1 << 20,
                _ => false,
            })?;
            let size = self.rng.gen_range(0..=self.model.size(&path) / 4);
            return Some(Op::Truncate { path, size });
        }
        let perms = [0o644u16, 0o600, 0o755, 0o000, 0o4755, 0o2750, 0o1777, 0o444];
        let perm = perms[self.rng.gen_range(0..perms.len())];
        Some(match self.rng.gen_range(0..100) {
            0..=21 => {
                let dir = self.pick_dir();
                let path = format!("{dir}/{}", self.rand_name(&dir));
                let len = match self.rng.gen_range(0..20) {
                    0..=9 => self.rng.gen_range(0..=60),
                    10..=16 => self.rng.gen_range(61..16_384),
                    _ => self.rng.gen_range(16_384..300_000),
                };
                let data = self.rand_data(len);
                Op::Create { path, perm, data }
            }
            22..=25 => {
                let dir = self.pick_dir();
                let path = format!("{dir}/{}", self.rand_name(&dir));
                Op::Mkdir {
                    path,
                    perm: perm | 0o700,
                }
            }
            26..=31 => {
                let dir = self.pick_dir();
                let path = format!("{dir}/{}", self.rand_name(&dir));
                let target = self.rand_target();
                Op::Symlink { path, target }
            }
            32..=35 => {
                let from = self.pick(|m, _, n| match n {
                    Node::File { fid } => m.files[fid].links < 8,
                    _ => false,
                })?;
                let dir = self.pick_dir();
                let to = format!("{dir}/{}", self.rand_name(&dir));
                Op::Link { from, to }
            }
            36..=49 => {
                let path = self.pick(|_, _, n| !matches!(n, Node::Dir { .. }))?;
                if !self.movable(&path) {
                    return None;
                }
                Op::Unlink { path }
            }
            50..=52 => {
                let path =
                    self.pick(|m, k, n| matches!(n, Node::Dir { .. }) && m.is_empty_dir(k))?;
                if !self.movable(&path) {
                    return None;
                }
                Op::Rmdir { path }
            }
            53..=66 => self.rand_rename()?,
            67..=80 => {
                let path = self.pick_file()?;
                self.rand_write(path)
            }
            81..=86 => {
                let path = self.pick_file()?;
                let size = self.model.size(&path);
                let size = match self.rng.gen_range(0..5) {
                    0 | 1 => self.rng.gen_range(0..=size),
                    2 => self.rng.gen_range(0..=size / BS) * BS,
                    _ => (size + self.rng.gen_range(1..600_000)).min(MAX_SIZE),
                };
                Op::Truncate { path, size }
            }
            87..=95 => {
                let path = self.pick_file()?;
                self.rand_falloc(path)
            }
            96 => {
                let path = self.pick_file();
                Op::Sync {
                    path: path.filter(|_| self.rng.gen_bool(0.8)),
                }
            }
            97 => {
                let dir = self.pick_dir();
                let path = format!("{dir}/{}", self.rand_name(&dir));
                let (kind, rdev) = match self.rng.gen_range(0..3) {
                    0 => (FileType::Fifo, 0),
                    1 => (FileType::CharDevice, self.rng.gen_range(1..0xffff)),
                    _ => (FileType::BlockDevice, self.rng.gen_range(1..0xffff)),
                };
                Op::Mknod {
                    path,
                    kind,
                    rdev,
                    perm,
                }
            }
            _ => {
                let path = self.pick(|_, _, n| !matches!(n, Node::Symlink { .. }))?;
                let perm = if self.model.is_dir(&path) {
                    perm | 0o700
                } else {
                    perm
                };
                Op::Chmod { path, perm }
            }
        })
    }

    /// `n` random operations on the mounted side, checking every `check_every` on lanefs
    /// (every 3 x that on the kernel).
    fn random_ops(&mut self, n: usize, label: &str) {
        let lanefs = matches!(self.side, Side::Lanefs(_));
        let every = if lanefs {
            self.check_every
        } else {
            3 * self.check_every
        };
        let mut done = 0;
        while done < n {
            let Some(op) = self.rand_op() else {
                continue;
            };
            self.op(op);
            done += 1;
            if lanefs {
                self.random_ops += 1;
            }
            self.since_check += 1;
            if self.since_check >= every {
                self.check(&format!("{label}: after {done} random operations"));
            }
        }
        self.check(&format!("{label}: end of {n} random operations"));
    }
}

/// `len` bytes of name or target characters; some are UTF-8 sequences (bytes >= 0x80 hash
/// differently with signed and unsigned chars).
fn rand_chars(rng: &mut StdRng, len: usize) -> String {
    const CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789_-.ABCDEFGHIJKLMNOPQRSTUVWXYZ";
    const WIDE: &[char] = &['é', 'ß', 'Ω', 'ж', '日', '本', '€', '\u{1F600}'];
    let mut s = String::with_capacity(len);
    while s.len() < len {
        let c = WIDE[rng.gen_range(0..WIDE.len())];
        if rng.gen_bool(0.1) && s.len() + c.len_utf8() <= len {
            s.push(c);
        } else {
            s.push(CHARS[rng.gen_range(0..CHARS.len())] as char);
        }
    }
    s
}

/// Leaf extents and depth of a file's extent tree, from `debugfs -R "ex PATH"`.
fn extent_shape(img: &Path, path: &str) -> (usize, u32) {
    let Ok(out) = run(Command::new("debugfs")
        .arg("-R")
        .arg(format!("ex {path}"))
        .arg(img))
    else {
        return (0, 0);
    };
    let (mut leaves, mut depth) = (0, 0);
    for line in out.lines().skip(1) {
        // " 1/ 2   1/  5     0 -   679  33849   680": level/depth first.
        let Some((lvl, rest)) = line.trim().split_once('/') else {
            continue;
        };
        let Some(d) = rest.split_whitespace().next() else {
            continue;
        };
        let (Ok(l), Ok(d)) = (lvl.trim().parse::<u32>(), d.parse::<u32>()) else {
            continue;
        };
        depth = d;
        if l == d {
            leaves += 1;
        }
    }
    (leaves, depth)
}

/// htree root limit with 4 KiB blocks and metadata_csum.
const ROOT_LIMIT: usize = 507;

impl World {
    /// Unmount, run `f` on the image, mount the same side again (no checks).
    fn inspect<T>(&mut self, f: impl FnOnce(&Path) -> T) -> T {
        let was = self.side_name();
        if let Err(e) = self.unmount() {
            self.fail(e);
        }
        let out = f(&self.img);
        match was {
            "kernel" => self.mount_kernel(),
            "lanefs" => self.mount_lanefs(),
            _ => {}
        }
        out
    }

    fn create(&mut self, path: String, len: usize) {
        let data = self.rand_data(len);
        self.op(Op::Create {
            path,
            perm: 0o644,
            data,
        });
    }

    fn mkdir(&mut self, path: &str) {
        self.op(Op::Mkdir {
            path: path.into(),
            perm: 0o755,
        });
    }

    /// A new name of 200 to 255 bytes in `dir`.
    fn long_name(&mut self, dir: &str) -> String {
        loop {
            let len = self.rng.gen_range(200..=255);
            let p = format!("{dir}/{}", rand_chars(&mut self.rng, len));
            if self.model.get(&p).is_none() {
                return p;
            }
        }
    }

    fn long_creates(&mut self, dir: &str, n: usize) {
        for _ in 0..n {
            let p = self.long_name(dir);
            let len = if self.rng.gen_bool(0.1) { 5 } else { 0 };
            self.create(p, len);
        }
    }

    fn names_in(&self, dir: &str) -> Vec<String> {
        self.model.children(dir).map(|(k, _)| k.clone()).collect()
    }

    /// Unlink `n` random non-directories of `dir`.
    fn unlink_some(&mut self, dir: &str, n: usize) {
        let mut v: Vec<String> = self
            .model
            .children(dir)
            .filter(|(_, n)| !matches!(n, Node::Dir { .. }))
            .map(|(k, _)| k.clone())
            .collect();
        v.shuffle(&mut self.rng);
        for path in v.into_iter().take(n) {
            self.op(Op::Unlink { path });
        }
    }

    fn htree(&mut self, label: &str, dir: &str) -> (u32, usize) {
        let d = dir.to_string();
        self.check_with(label, |img| htree_info(img, &d))
            .unwrap_or((0, 1))
    }

    fn shape(&mut self, label: &str, path: &str) -> (usize, u32) {
        let p = path.to_string();
        let s = self.check_with(label, |img| extent_shape(img, &p));
        self.note(&format!(
            "{label}: {path} has {} leaf extents, depth {}",
            s.0, s.1
        ));
        s
    }

    /// The htree shape of `dir`: after a full check on lanefs, a plain unmount on the
    /// kernel (its own growth needs no check at every step).
    /// (levels, root count) of `dir`'s index; with `full`, behind a full check.
    fn dx_info(&mut self, label: &str, dir: &str, full: bool) -> Option<(u32, usize)> {
        let d = dir.to_string();
        let f = move |img: &Path| htree_info(img, &d);
        if full {
            self.check_with(label, f)
        } else {
            self.inspect(f)
        }
    }

    /// As `dx_info`; a full check whenever lanefs is the side that edits.
    fn dx_shape(&mut self, label: &str, dir: &str) -> (u32, usize) {
        let full = matches!(self.side, Side::Lanefs(_));
        self.dx_info(label, dir, full).unwrap_or((0, 1))
    }

    /// Long names into `dir` until its root index has at most `room` free slots (and
    /// still one level): a leaf split adds at most one root entry per insert, so each
    /// batch is sized to stay below the limit.
    fn fill_root(&mut self, dir: &str, room: usize) {
        let mut n = 0;
        loop {
            // Growing its own index is every side's everyday path: no check at each step.
            let (levels, count) = self.dx_info("", dir, false).unwrap_or((0, 1));
            assert_eq!(
                levels, 0,
                "{dir} got a second index level while filling its root"
            );
            let free = ROOT_LIMIT - count;
            if free <= room {
                self.check(&format!("{} filled {dir}'s root index", self.side_name()));
                self.note(&format!(
                    "{} filled {dir}'s root index to {count}/{ROOT_LIMIT} ({n} names)",
                    self.side_name()
                ));
                return;
            }
            let batch = if free > 100 {
                free * 3
            } else {
                free - room / 2
            };
            self.long_creates(dir, batch);
            n += batch;
            if n > BIG_LIMIT {
                self.fail(format!("{dir}'s root index stays at {count} entries"));
            }
        }
    }

    /// Long names into `dir` (root nearly full) in small batches until it has a second
    /// index level: the root's entries move to a new index node.
    fn add_level(&mut self, dir: &str) {
        let mut n = 0;
        loop {
            let label = format!("{} grows {dir} to two levels", self.side_name());
            let (levels, count) = self.dx_shape(&label, dir);
            if levels > 0 {
                self.note(&format!(
                    "{} added {dir}'s second index level ({n} names)",
                    self.side_name()
                ));
                return;
            }
            let batch = ((ROOT_LIMIT - count) * 4).clamp(4, 100);
            self.long_creates(dir, batch);
            n += batch;
            if n > BIG_LIMIT {
                self.fail(format!("{dir} never gets a second index level"));
            }
        }
    }

    /// Long names into two-level `dir` until its (first) index node splits in two.
    fn split_node(&mut self, dir: &str) {
        let mut n = 0;
        loop {
            let label = format!("{} splits {dir}'s index node", self.side_name());
            let (levels, count) = self.dx_shape(&label, dir);
            assert_eq!(levels, 1, "{dir} is not a two-level htree");
            if count >= 2 {
                self.note(&format!(
                    "{} split {dir}'s index node ({n} names)",
                    self.side_name()
                ));
                return;
            }
            self.long_creates(dir, 10);
            n += 10;
            if n > BIG_LIMIT {
                self.fail(format!("{dir}'s index node never splits"));
            }
        }
    }

    /// Names into linear `dir` until it becomes an htree.
    fn make_indexed(&mut self, dir: &str) {
        let mut n = 0;
        loop {
            for _ in 0..5 {
                let p = format!("{dir}/{}", self.rand_name(dir));
                self.create(p, 3);
            }
            n += 5;
            let label = format!("{} fills {dir}", self.side_name());
            let full = matches!(self.side, Side::Lanefs(_));
            if self.dx_info(&label, dir, full).is_some() {
                self.note(&format!("{} indexed {dir} ({n} names)", self.side_name()));
                return;
            }
        }
    }

    /// Size in blocks of a model file.
    fn blocks(&self, path: &str) -> u64 {
        self.model.size(path).div_ceil(BS)
    }

    /// Write every other block from block `from` for `n` blocks: `n` extents.
    fn alternate_blocks(&mut self, path: &str, from: u64, n: u64) {
        for k in 0..n {
            let data = self.rand_data(BS as usize);
            self.op(Op::Write {
                path: path.into(),
                off: (from + 2 * k) * BS,
                data,
            });
        }
    }

    /// Appends, overwrites, punches and writes into holes of a fragmented file.
    fn edit_frag(&mut self, path: &str, n: usize) {
        for i in 0..n {
            let blocks = self.blocks(path).max(1);
            let op = match i % 5 {
                0 => {
                    // Append whole blocks (contiguous with the last extent, or not).
                    let gap = self.rng.gen_range(0..2);
                    let k = self.rng.gen_range(1..=8);
                    let data = self.rand_data((k * BS) as usize);
                    Op::Write {
                        path: path.into(),
                        off: (blocks + gap) * BS,
                        data,
                    }
                }
                1 => {
                    let off = self.rng.gen_range(0..blocks * BS);
                    let len = self.rng.gen_range(1..=3 * BS as usize);
                    let data = self.rand_data(len);
                    Op::Write {
                        path: path.into(),
                        off,
                        data,
                    }
                }
                2 => {
                    // Punch: part of a block, whole blocks, or a run of many extents.
                    let (off, len) = match self.rng.gen_range(0..3) {
                        0 => (
                            self.rng.gen_range(0..blocks * BS),
                            self.rng.gen_range(1..BS),
                        ),
                        1 => (
                            self.rng.gen_range(0..blocks) * BS,
                            self.rng.gen_range(1..=4) * BS,
                        ),
                        _ => (
                            self.rng.gen_range(0..blocks) * BS + self.rng.gen_range(0..BS),
                            self.rng.gen_range(1..=blocks / 10 + 1) * BS,
                        ),
                    };
                    Op::Falloc {
                        path: path.into(),
                        off,
                        len,
                        keep_size: true,
                        punch: true,
                    }
                }
                3 => {
                    // Into a hole (odd blocks), whole or in part.
                    let b = (self.rng.gen_range(0..blocks) | 1).min(blocks);
                    let inb = if self.rng.gen_bool(0.5) {
                        0
                    } else {
                        self.rng.gen_range(0..BS)
                    };
                    let len = self.rng.gen_range(1..=(BS - inb) as usize);
                    let data = self.rand_data(len);
                    Op::Write {
                        path: path.into(),
                        off: b * BS + inb,
                        data,
                    }
                }
                _ => {
                    let off = self.rng.gen_range(0..blocks) * BS;
                    let len = self.rng.gen_range(1..=16) * BS;
                    Op::Falloc {
                        path: path.into(),
                        off,
                        len,
                        keep_size: self.rng.gen_bool(0.5),
                        punch: false,
                    }
                }
            };
            self.op(op);
        }
    }

    /// Writes of a few bytes into the unwritten extents of /ext/unw (3 unwritten blocks
    /// then one hole, repeated): each splits its extent in two or three.
    fn write_unwritten(&mut self, path: &str, groups: u64, n: usize) {
        for i in 0..n {
            let g = self.rng.gen_range(0..groups);
            let (off, len) = if i % 7 == 6 {
                // Across several extents and the holes between them.
                (
                    g * 4 * BS + self.rng.gen_range(0..4 * BS),
                    self.rng.gen_range(BS as usize..12 * BS as usize),
                )
            } else {
                let inb = self.rng.gen_range(0..BS);
                (
                    (g * 4 + self.rng.gen_range(0..3)) * BS + inb,
                    self.rng.gen_range(1..=(BS - inb) as usize),
                )
            };
            let data = self.rand_data(len);
            self.op(Op::Write {
                path: path.into(),
                off,
                data,
            });
        }
    }

    /// fallocate through one `xfs_io` run on the kernel mount, mirrored in the model.
    fn kernel_xfs_io(&mut self, path: &str, ops: Vec<Op>) {
        let Side::Kernel(km) = &self.side else {
            panic!("kernel_xfs_io without the kernel")
        };
        let file = km.dir.join(path.trim_start_matches('/'));
        let cmds: Vec<String> = ops
            .iter()
            .map(|op| match op {
                Op::Falloc {
                    off,
                    len,
                    punch: true,
                    ..
                } => format!("fpunch {off} {len}"),
                Op::Falloc {
                    off,
                    len,
                    keep_size,
                    ..
                } => format!("falloc{} {off} {len}", if *keep_size { " -k" } else { "" }),
                _ => panic!("not an fallocate: {op:?}"),
            })
            .collect();
        self.log.push(format!(
            "kernel xfs_io {path}: {} fallocate calls",
            cmds.len()
        ));
        if let Err(e) = xfs_io(&file, &cmds) {
            self.fail(e);
        }
        self.kernel_ops += ops.len();
        for op in &ops {
            self.model.apply(op);
        }
    }

    // -----------------------------------------------------------------------------------
    // Scripted steps, by round.

    /// The kernel builds every structure.
    fn kernel_builds(&mut self) {
        self.mount_kernel();
        // A 2,000-entry htree of files of a few bytes.
        self.mkdir("/h");
        for i in 0..2000 {
            let extra = self.rng.gen_range(0..30);
            let p = format!("/h/k{i:05}{}", rand_chars(&mut self.rng, extra));
            let len = self.rng.gen_range(0..=60);
            self.create(p, len);
        }
        // Linear directories.
        for d in ["/lin1", "/lin2", "/lin3"] {
            self.mkdir(d);
            for _ in 0..self.rng.gen_range(3..10) {
                let p = format!("{d}/{}", self.rand_name(d));
                let len = self.rng.gen_range(0..3000);
                self.create(p, len);
            }
        }
        self.mkdir("/lin2/sub");
        self.create("/lin2/sub/inner".into(), 10);
        self.mkdir("/lin3/empty");
        // Files of 0 to 60 bytes.
        self.mkdir("/tiny");
        for i in 0..=60 {
            self.create(format!("/tiny/t{i:02}"), i);
        }
        // Fast (in the inode) and slow (a block) symlinks.
        self.mkdir("/sym");
        for len in [1usize, 2, 30, 58, 59, 60, 61, 100, 1000, 4000, 4095] {
            let target = rand_chars(&mut self.rng, len).into_bytes();
            self.op(Op::Symlink {
                path: format!("/sym/s{len}"),
                target,
            });
        }
        // An htree emptied again (lanefs renames a directory over it).
        self.mkdir("/hx");
        for _ in 0..800 {
            let p = format!("/hx/{}", self.rand_name("/hx"));
            self.create(p, 0);
        }
        self.unlink_some("/hx", 800);
        // Hard links across directories.
        for d in ["/links", "/links/a", "/links/b"] {
            self.mkdir(d);
        }
        for i in 0..10 {
            let from = format!("/links/a/l{i}");
            let len = self.rng.gen_range(0..5000);
            self.create(from.clone(), len);
            for _ in 0..self.rng.gen_range(1..=4) {
                let dir = ["/links/a", "/links/b", "/h", "/lin1"][self.rng.gen_range(0..4)];
                let to = format!("{dir}/{}", self.rand_name(dir));
                self.op(Op::Link {
                    from: from.clone(),
                    to,
                });
            }
        }
        // Extent trees.
        self.mkdir("/ext");
        self.create("/ext/kfrag".into(), 0);
        self.alternate_blocks("/ext/kfrag", 0, 1500);
        // 1,500 unwritten extents of 3 blocks (fallocate, then punch every 4th block).
        self.create("/ext/unw".into(), 0);
        let mut ops = vec![Op::Falloc {
            path: "/ext/unw".into(),
            off: 0,
            len: 6000 * BS,
            keep_size: false,
            punch: false,
        }];
        for g in 0..1500 {
            ops.push(Op::Falloc {
                path: "/ext/unw".into(),
                off: (4 * g + 3) * BS,
                len: BS,
                keep_size: true,
                punch: true,
            });
        }
        self.kernel_xfs_io("/ext/unw", ops);
        // Holes: a sparse file.
        self.create("/ext/sparse".into(), 10);
        self.op(Op::Truncate {
            path: "/ext/sparse".into(),
            size: 20 << 20,
        });
        for _ in 0..3 {
            let off = self.rng.gen_range(0..20 << 20);
            let len = self.rng.gen_range(1..100_000);
            let data = self.rand_data(len);
            self.op(Op::Write {
                path: "/ext/sparse".into(),
                off,
                data,
            });
        }
        // Unwritten blocks past the end of the file, and one long unwritten extent.
        self.create("/ext/keep".into(), 10_000);
        self.create("/ext/unw1".into(), 0);
        let ops = vec![Op::Falloc {
            path: "/ext/keep".into(),
            off: 8192,
            len: 2 << 20,
            keep_size: true,
            punch: false,
        }];
        self.kernel_xfs_io("/ext/keep", ops);
        let ops = vec![Op::Falloc {
            path: "/ext/unw1".into(),
            off: 0,
            len: 64 * BS,
            keep_size: false,
            punch: false,
        }];
        self.kernel_xfs_io("/ext/unw1", ops);
        self.check("the kernel built the tree");
        let (levels, count) = self.htree("kernel /h", "/h");
        assert!(count > 1, "the kernel did not index /h");
        self.note(&format!("kernel /h: {count} leaves, {levels} levels"));
        for f in ["/ext/kfrag", "/ext/unw"] {
            let (_, depth) = self.shape("kernel built", f);
            assert_eq!(depth, 2, "the kernel's {f} is not a depth-2 tree");
        }

        // Long names: /big's root index filled nearly full (lanefs adds the level), /big3
        // grown by the kernel to two levels (lanefs splits the kernel's index node).
        for d in ["/big", "/big3"] {
            self.mkdir(d);
            self.fill_root(d, 24);
        }
        self.add_level("/big3");
        self.check("the kernel filled /big's root index and grew /big3");
        let (_, count) = self.htree("kernel /big3", "/big3");
        if count > 1 {
            self.note("NOTE: the kernel split /big3's index node itself");
        }
    }

    /// lanefs grows the kernel's /big to two index levels and splits an index node; builds
    /// its own two-level /big2 and depth-2 /ext/lfrag; edits the kernel's extent trees.
    fn lanefs_round0(&mut self) {
        self.mount_lanefs();
        self.add_level("/big");
        self.split_node("/big");
        self.split_node("/big3");
        // lanefs's own two-level index, left just after the level is added: the kernel
        // splits its index node next.
        self.mkdir("/big2");
        self.fill_root("/big2", 24);
        self.add_level("/big2");
        self.mkdir("/lin4");
        for _ in 0..5 {
            let p = format!("/lin4/{}", self.rand_name("/lin4"));
            self.create(p, 20);
        }
        self.make_indexed("/lin1");

        self.create("/ext/lfrag".into(), 0);
        self.alternate_blocks("/ext/lfrag", 0, 1500);
        let (_, depth) = self.shape("lanefs built", "/ext/lfrag");
        assert_eq!(depth, 2, "lanefs's /ext/lfrag is not a depth-2 tree");

        for k in 0..4 {
            self.edit_frag("/ext/kfrag", 25);
            self.shape(
                &format!("lanefs edits the kernel's tree ({k})"),
                "/ext/kfrag",
            );
        }
        for k in 0..4 {
            self.write_unwritten("/ext/unw", 1500, 20);
            self.shape(
                &format!("lanefs writes into unwritten extents ({k})"),
                "/ext/unw",
            );
        }
        for (off, len) in [(10 * BS + 1000, 100), (0, 10), (63 * BS + 4000, 96)] {
            let data = self.rand_data(len);
            self.op(Op::Write {
                path: "/ext/unw1".into(),
                off,
                data,
            });
            self.shape("lanefs splits an unwritten extent", "/ext/unw1");
        }
        // Into the unwritten blocks past the end of /ext/keep, and into /ext/sparse's holes.
        for off in [20_000u64, 12_288, 1 << 20] {
            let data = self.rand_data(5000);
            self.op(Op::Write {
                path: "/ext/keep".into(),
                off,
                data,
            });
        }
        for _ in 0..10 {
            let op = {
                let path = "/ext/sparse".to_string();
                if self.rng.gen_bool(0.7) {
                    self.rand_write(path)
                } else {
                    self.rand_falloc(path)
                }
            };
            self.op(op);
        }
        self.check("lanefs wrote into holes and unwritten blocks");
    }

    /// The kernel edits lanefs's two-level /big2 and depth-2 /ext/lfrag.
    fn kernel_round1(&mut self) {
        self.mount_kernel();
        self.split_node("/big2");
        self.long_creates("/big2", 300);
        self.unlink_some("/big2", 300);
        self.make_indexed("/lin4");
        // The kernel moves lanefs's htree across directories (its ".." in the dx root).
        self.op(Op::Rename {
            from: "/big2".into(),
            to: "/lin3/big2_moved".into(),
        });
        self.check("the kernel edited and moved /big2");
        self.op(Op::Rename {
            from: "/lin3/big2_moved".into(),
            to: "/big2".into(),
        });

        let size = self.model.size("/ext/lfrag");
        self.op(Op::Truncate {
            path: "/ext/lfrag".into(),
            size: size * 2 / 3 + 1234,
        });
        self.shape("the kernel truncates lanefs's tree", "/ext/lfrag");
        let blocks = self.blocks("/ext/lfrag");
        let mut ops = Vec::new();
        for _ in 0..40 {
            ops.push(Op::Falloc {
                path: "/ext/lfrag".into(),
                off: self.rng.gen_range(0..blocks) * BS,
                len: self.rng.gen_range(1..=20) * BS,
                keep_size: true,
                punch: true,
            });
        }
        self.kernel_xfs_io("/ext/lfrag", ops);
        self.shape("the kernel punches lanefs's tree", "/ext/lfrag");
        let blocks = self.blocks("/ext/lfrag");
        self.alternate_blocks("/ext/lfrag", blocks + 1, 100);
        self.edit_frag("/ext/lfrag", 30);
        self.shape("the kernel appends to lanefs's tree", "/ext/lfrag");

        self.unlink_some("/big", 200);
        self.long_creates("/big", 200);
        self.check("the kernel edited lanefs's /big");
    }

    /// lanefs shrinks the kernel's tree, edits its own tree the kernel edited, empties
    /// htree leaves, replaces symlinks, drops hard links, edits tiny files, renames.
    fn lanefs_round1(&mut self) {
        self.mount_lanefs();
        for blocks in [2100u64, 1200, 700, 300, 7, 0] {
            let size = (blocks * BS).min(self.model.size("/ext/kfrag"));
            self.op(Op::Truncate {
                path: "/ext/kfrag".into(),
                size,
            });
            self.shape(
                &format!("lanefs truncates the kernel's tree to {blocks} blocks"),
                "/ext/kfrag",
            );
        }
        self.alternate_blocks("/ext/kfrag", 0, 10);
        for k in 0..3 {
            self.edit_frag("/ext/lfrag", 25);
            self.shape(&format!("lanefs edits its tree again ({k})"), "/ext/lfrag");
        }

        // Empty most leaves of the kernel's /h, then fill them again.
        let mut names: Vec<String> = self
            .model
            .children("/h")
            .filter(|(_, n)| !matches!(n, Node::Dir { .. }))
            .map(|(k, _)| k.clone())
            .collect();
        names.shuffle(&mut self.rng);
        let n = names.len() * 19 / 20;
        for (i, path) in names.into_iter().take(n).enumerate() {
            self.op(Op::Unlink { path });
            if i % 400 == 399 {
                self.check("lanefs empties /h's leaves");
            }
        }
        self.check("lanefs emptied most of /h");
        for _ in 0..300 {
            let p = format!("/h/{}", self.rand_name("/h"));
            let len = self.rng.gen_range(0..100);
            self.create(p, len);
        }
        self.check("lanefs refills /h");

        // Symlinks: replaced in place or by a rename over them, fast <-> slow.
        let links: Vec<(String, usize)> = self
            .model
            .children("/sym")
            .filter_map(|(k, n)| match n {
                Node::Symlink { target } => Some((k.clone(), target.len())),
                _ => None,
            })
            .collect();
        for (i, (path, len)) in links.into_iter().enumerate() {
            let new_len = if len < 60 {
                self.rng.gen_range(60..4096)
            } else {
                self.rng.gen_range(1..60)
            };
            let target = rand_chars(&mut self.rng, new_len).into_bytes();
            if i % 2 == 0 {
                self.op(Op::Unlink { path: path.clone() });
                self.op(Op::Symlink { path, target });
            } else {
                let tmp = format!("/sym/{}", self.rand_name("/sym"));
                self.op(Op::Symlink {
                    path: tmp.clone(),
                    target,
                });
                self.op(Op::Rename {
                    from: tmp,
                    to: path,
                });
            }
        }
        self.check("lanefs replaced the kernel's symlinks");

        // Hard links: one at a time until each file is gone.
        let mut linked: Vec<String> = self
            .model
            .tree
            .iter()
            .filter(|(_, n)| match n {
                Node::File { fid } => self.model.files[fid].links > 1,
                _ => false,
            })
            .map(|(k, _)| k.clone())
            .collect();
        linked.shuffle(&mut self.rng);
        for (i, path) in linked.into_iter().enumerate() {
            if !self.is_frozen(&path) && self.model.get(&path).is_some() {
                self.op(Op::Unlink { path });
            }
            if i % 6 == 5 {
                self.check("lanefs drops hard links");
            }
        }
        self.check("lanefs dropped every hard link");

        // Tiny files: appended, overwritten, cut, grown.
        for i in 0..=60 {
            let path = format!("/tiny/t{i:02}");
            if self.model.get(&path).is_none() {
                continue;
            }
            let size = self.model.size(&path);
            let op = match i % 4 {
                0 => Op::Write {
                    path,
                    off: size,
                    data: self.rand_data(7),
                },
                1 => Op::Truncate { path, size: 0 },
                2 => Op::Write {
                    path,
                    off: 0,
                    data: self.rand_data(3),
                },
                _ => Op::Truncate {
                    path,
                    size: size + 100,
                },
            };
            self.op(op);
        }
        self.check("lanefs edited tiny files");

        // Renames: within the htree over existing names, across htree and linear
        // directories (over existing targets too), directories into an htree, a directory
        // over an empty one.
        for i in 0..40 {
            let (a, b) = [
                ("/h", "/h"),
                ("/h", "/lin1"),
                ("/lin1", "/h"),
                ("/lin2", "/big"),
                ("/big", "/lin3"),
                ("/big2", "/h"),
                ("/lin3", "/lin3"),
                ("/h", "/big2"),
            ][i % 8];
            let Some(from) = self
                .model
                .children(a)
                .filter(|(_, n)| !matches!(n, Node::Dir { .. }))
                .map(|(k, _)| k.clone())
                .collect::<Vec<_>>()
                .choose(&mut self.rng)
                .cloned()
            else {
                continue;
            };
            let over: Vec<String> = self
                .model
                .children(b)
                .filter(|(k, n)| !matches!(n, Node::Dir { .. }) && **k != from)
                .map(|(k, _)| k.clone())
                .collect();
            let to = match over.choose(&mut self.rng) {
                Some(t) if i % 3 != 0 => t.clone(),
                _ => format!("{b}/{}", self.rand_name(b)),
            };
            self.op(Op::Rename { from, to });
        }
        // A linear directory into the htree and on over an empty directory; a directory
        // out of the two-level htree into a linear one.
        let into_h = format!("/h/{}", self.rand_name("/h"));
        self.op(Op::Rename {
            from: "/lin2/sub".into(),
            to: into_h.clone(),
        });
        let to = if self.model.is_empty_dir("/lin3/empty") {
            "/lin3/empty".to_string()
        } else {
            format!("/lin3/{}", self.rand_name("/lin3"))
        };
        self.op(Op::Rename { from: into_h, to });
        // A directory over the kernel's emptied htree; lanefs's own emptied htree for the
        // kernel to rename over.
        self.mkdir("/lin1/over_hx");
        self.create("/lin1/over_hx/f".into(), 9);
        self.op(Op::Rename {
            from: "/lin1/over_hx".into(),
            to: "/hx".into(),
        });
        self.mkdir("/hy");
        for _ in 0..800 {
            let p = format!("/hy/{}", self.rand_name("/hy"));
            self.create(p, 0);
        }
        self.unlink_some("/hy", 800);
        let in_big = format!("/big/{}", self.rand_name("/big"));
        self.mkdir(&in_big);
        let to = format!("/lin1/{}", self.rand_name("/lin1"));
        self.op(Op::Rename { from: in_big, to });
        self.check("lanefs renamed within and across directories");
        // lanefs moves the kernel's htree across directories and back (".." in its root).
        self.op(Op::Rename {
            from: "/h".into(),
            to: "/lin2/h_moved".into(),
        });
        self.check("lanefs moved the kernel's /h");
        self.op(Op::Rename {
            from: "/lin2/h_moved".into(),
            to: "/h".into(),
        });
    }

    /// The kernel fills /h's emptied leaves and appends to the tree lanefs shrank.
    fn kernel_round2(&mut self) {
        self.mount_kernel();
        for _ in 0..500 {
            let p = format!("/h/{}", self.rand_name("/h"));
            let len = self.rng.gen_range(0..100);
            self.create(p, len);
        }
        self.unlink_some("/h", 100);
        self.mkdir("/lin3/over_hy");
        self.op(Op::Rename {
            from: "/lin3/over_hy".into(),
            to: "/hy".into(),
        });
        let blocks = self.blocks("/ext/kfrag");
        self.alternate_blocks("/ext/kfrag", blocks + 3, 400);
        self.check("the kernel refilled /h and appended to /ext/kfrag");
        // The kernel shrinks lanefs's tree back to the inode, lanefs grows it again later.
        for blocks in [600u64, 5] {
            let size = (blocks * BS).min(self.model.size("/ext/lfrag"));
            self.op(Op::Truncate {
                path: "/ext/lfrag".into(),
                size,
            });
            self.shape(
                &format!("the kernel truncates lanefs's tree to {blocks} blocks"),
                "/ext/lfrag",
            );
        }
    }

    /// Remove everything below `dir` and `dir` itself, deepest first.
    fn remove_tree(&mut self, dir: &str) {
        let mut paths: Vec<(String, bool)> = self
            .model
            .below(dir)
            .map(|(k, n)| (k.clone(), matches!(n, Node::Dir { .. })))
            .collect();
        paths.sort_by_key(|(k, _)| std::cmp::Reverse(k.matches('/').count()));
        for (path, is_dir) in paths {
            self.op(if is_dir {
                Op::Rmdir { path }
            } else {
                Op::Unlink { path }
            });
        }
        self.op(Op::Rmdir { path: dir.into() });
    }

    /// lanefs removes the kernel's htree /h entirely, and half of /big2.
    fn lanefs_round2(&mut self) {
        self.mount_lanefs();
        self.pinned.remove("/h");
        self.remove_tree("/h");
        self.check("lanefs removed the kernel's htree /h");
        self.pinned.remove("/big3");
        self.remove_tree("/big3");
        self.check("lanefs removed the kernel's two-level htree /big3");
        self.unlink_some("/big2", self.names_in("/big2").len() / 2);
        self.check("lanefs emptied half of /big2");
        let blocks = self.blocks("/ext/lfrag");
        self.alternate_blocks("/ext/lfrag", blocks + 1, 1400);
        self.shape("lanefs grows the tree the kernel shrank", "/ext/lfrag");
    }

    /// The kernel removes /big, which lanefs grew to two levels.
    fn kernel_round3(&mut self) {
        self.mount_kernel();
        self.pinned.remove("/big");
        self.remove_tree("/big");
        self.check("the kernel removed /big");
    }
}

#[test]
fn kernel_and_lanefs_edit_each_other() {
    let test = "kernel_and_lanefs_edit_each_other";
    let _wd = watchdog(test, 1500);
    let td = tempfile::tempdir().expect("tempdir");
    if !kernel_ready(test, td.path(), &["xfs_io"]) {
        return;
    }
    let seed = std::env::var("LANEFS_KERNEL_EDIT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64 % 1_000_000)
        });
    let ops: usize = std::env::var("LANEFS_KERNEL_EDIT_OPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2400);
    println!("{test}: LANEFS_KERNEL_EDIT_SEED={seed} LANEFS_KERNEL_EDIT_OPS={ops}");
    let img = mkfs_image(td.path(), "edit.img", 256 << 20);
    let mut w = World::new(td.path(), img, seed, ops);
    let share = ops / 6;
    let kshare = ops / 10;

    w.kernel_builds();
    w.note("round 0: the kernel built everything");
    w.lanefs_round0();
    w.random_ops(share, "round 0 lanefs");
    w.note("round 0: lanefs edited");

    w.kernel_round1();
    w.random_ops(kshare, "round 1 kernel");
    w.note("round 1: the kernel edited");
    w.lanefs_round1();
    w.random_ops(share, "round 1 lanefs");
    w.note("round 1: lanefs edited");

    w.kernel_round2();
    w.random_ops(kshare, "round 2 kernel");
    // From here on random operations may touch everything.
    w.frozen.clear();
    w.lanefs_round2();
    w.random_ops(share, "round 2 lanefs");
    w.note("round 2: lanefs edited");

    w.kernel_round3();
    w.pinned.clear();
    w.random_ops(kshare, "round 3 kernel");
    let mut round = 3;
    while w.random_ops < ops {
        w.mount_lanefs();
        let n = (ops - w.random_ops).min(ops / 8 + 1);
        w.random_ops(n, &format!("round {round} lanefs"));
        w.mount_kernel();
        w.random_ops(kshare, &format!("round {round} kernel"));
        w.note(&format!(
            "round {round} done: {} paths, {} MiB of file data",
            w.model.tree.len(),
            w.data_bytes() >> 20
        ));
        round += 1;
    }
    if let Err(e) = w.unmount() {
        w.fail(e);
    }
    w.note(&format!(
        "{test}: seed {seed}: {} lanefs operations ({} random), {} kernel operations, {} checks \
         (e2fsck + kernel + lanefs views), {} paths at the end",
        w.lanefs_ops,
        w.random_ops,
        w.kernel_ops,
        w.checks,
        w.model.tree.len()
    ));
}

/// Shapes the main run does not reach: htrees hashed with TEA and with the legacy hash
/// (`tune2fs -E hash_alg=`), extents at their longest (32,768 written blocks, 32,767
/// unwritten), and directories whose own extent tree has an index level.
#[test]
fn kernel_edit_edge_shapes() {
    let test = "kernel_edit_edge_shapes";
    let _wd = watchdog(test, 900);
    let td = tempfile::tempdir().expect("tempdir");
    if !kernel_ready(test, td.path(), &["xfs_io", "tune2fs"]) {
        return;
    }
    let t0 = Instant::now();
    for alg in ["tea", "legacy"] {
        let img = mkfs_image(td.path(), &format!("{alg}.img"), 256 << 20);
        run(Command::new("tune2fs")
            .arg("-E")
            .arg(format!("hash_alg={alg}"))
            .arg(&img))
        .expect("tune2fs -E hash_alg");
        let mut w = World::new(td.path(), img, 11, 100);
        w.mount_kernel();
        w.mkdir("/k");
        for _ in 0..3000 {
            let p = format!("/k/{}", w.rand_name("/k"));
            w.create(p, 3);
        }
        let (_, count) = w.htree(&format!("{alg}: the kernel built /k"), "/k");
        assert!(count > 1, "{alg}: the kernel did not index /k");
        w.mount_lanefs();
        for k in 0..5 {
            for _ in 0..100 {
                let p = format!("/k/{}", w.rand_name("/k"));
                w.create(p, 3);
            }
            w.unlink_some("/k", 30);
            w.check(&format!("{alg}: lanefs edits the kernel's htree ({k})"));
        }
        w.mkdir("/l");
        for _ in 0..3000 {
            let p = format!("/l/{}", w.rand_name("/l"));
            w.create(p, 3);
        }
        w.mount_kernel();
        w.long_creates("/l", 500);
        w.unlink_some("/l", 500);
        w.check(&format!("{alg}: the kernel edits lanefs's htree"));
        w.mount_lanefs();
        w.remove_tree("/k");
        w.check(&format!("{alg}: lanefs removes the kernel's htree"));
        w.note(&format!("{test}: {alg} htrees both ways"));
    }

    // The longest extents: the kernel fallocates 140 MiB (unwritten extents of 32,767
    // blocks) and writes 130 MiB (written extents of 32,768); lanefs writes and punches at
    // and around their ends, then fallocates over the lot.
    let img = mkfs_image(td.path(), "long.img", 1 << 30);
    let mut w = World::new(td.path(), img, 12, 100);
    w.mount_kernel();
    w.create("/u".into(), 0);
    w.kernel_xfs_io(
        "/u",
        vec![Op::Falloc {
            path: "/u".into(),
            off: 0,
            len: 140 << 20,
            keep_size: false,
            punch: false,
        }],
    );
    w.create("/w".into(), 0);
    let data = w.rand_data(130 << 20);
    w.op(Op::Write {
        path: "/w".into(),
        off: 0,
        data,
    });
    w.shape("the kernel's longest extents", "/u");
    w.shape("the kernel's longest extents", "/w");
    w.mount_lanefs();
    for (off, len) in [
        (32767 * BS - 10, 100),
        (10, 10),
        (32767 * BS, 5),
        (100 << 20, 1 << 20),
        ((140 << 20) - 1, 1),
    ] {
        let data = w.rand_data(len);
        w.op(Op::Write {
            path: "/u".into(),
            off,
            data,
        });
        w.shape("lanefs writes into the longest unwritten extents", "/u");
    }
    for (off, len) in [(32768 * BS - 10, 100), (10, 10), (100 << 20, 1 << 20)] {
        let data = w.rand_data(len);
        w.op(Op::Write {
            path: "/w".into(),
            off,
            data,
        });
        for punch in [true, false] {
            w.op(Op::Falloc {
                path: "/w".into(),
                off: off + 3 * BS,
                len: 2 * BS,
                keep_size: true,
                punch,
            });
        }
        w.shape("lanefs edits the longest written extents", "/w");
    }
    for (off, len, punch) in [
        (0, 140 << 20, false),
        (5 * BS, 100 << 20, true),
        (0, 150 << 20, false),
    ] {
        w.op(Op::Falloc {
            path: "/u".into(),
            off,
            len,
            keep_size: false,
            punch,
        });
    }
    w.shape("lanefs fallocates over punched extents", "/u");
    w.mount_kernel();
    w.op(Op::Falloc {
        path: "/u".into(),
        off: 3 * BS,
        len: 40000 * BS,
        keep_size: true,
        punch: true,
    });
    w.op(Op::Truncate {
        path: "/w".into(),
        size: 33000 * BS + 7,
    });
    w.shape("the kernel punches and truncates after lanefs", "/u");
    w.note(&format!("{test}: longest extents"));

    // Extent trees at their exact capacities, a full root in the inode (4 extents) and a
    // full depth-1 tree (4 leaves of 340): one side builds, the other adds the extent
    // that needs a new level, then one in the middle of a full leaf.
    let img = mkfs_image(td.path(), "cap.img", 256 << 20);
    let mut w = World::new(td.path(), img, 14, 100);
    for (builder, n) in [
        ("kernel", 4u64),
        ("kernel", 1360),
        ("lanefs", 4),
        ("lanefs", 1360),
    ] {
        let path = format!("/{builder}_{n}");
        if builder == "kernel" {
            w.mount_kernel();
        } else {
            w.mount_lanefs();
        }
        w.create(path.clone(), 0);
        w.alternate_blocks(&path, 0, n);
        let (leaves, depth) = w.shape(&format!("{builder} fills a tree to capacity"), &path);
        assert_eq!((leaves, depth), (n as usize, u32::from(n > 4)), "{path}");
        if builder == "kernel" {
            w.mount_lanefs();
        } else {
            w.mount_kernel();
        }
        w.alternate_blocks(&path, 2 * n, 1);
        let (_, depth) = w.shape("the other side adds one extent", &path);
        assert_eq!(depth, if n > 4 { 2 } else { 1 }, "{path}");
        w.alternate_blocks(&path, 1, 1);
        w.shape("the other side inserts into a full leaf", &path);
    }
    w.note(&format!("{test}: trees at capacity"));

    // Directories with an extent index: lanefs interleaves directory growth with file
    // data, the kernel grows the directory further, lanefs removes it.
    let img = mkfs_image(td.path(), "dirs.img", 256 << 20);
    let mut w = World::new(td.path(), img, 13, 100);
    w.mount_lanefs();
    w.mkdir("/s");
    w.mkdir("/d");
    for i in 0..80 {
        w.long_creates("/d", 16);
        w.create(format!("/s/l{i}"), 8192);
    }
    let (leaves, depth) = w.shape("lanefs fragments a directory", "/d");
    assert!(depth >= 1, "/d has {leaves} extents at depth {depth}");
    w.mount_kernel();
    for i in 0..40 {
        w.long_creates("/d", 16);
        w.create(format!("/s/k{i}"), 8192);
        if i % 8 == 7 {
            w.check("the kernel grows lanefs's fragmented directory");
        }
    }
    w.mount_lanefs();
    w.unlink_some("/d", 1000);
    w.check("lanefs empties the fragmented directory");
    w.remove_tree("/d");
    w.check("lanefs removes the fragmented directory");
    w.note(&format!(
        "{test}: done ({:.1} s)",
        t0.elapsed().as_secs_f64()
    ));
}

impl World {
    /// A command on a path of the kernel mount (`chattr`).
    fn kernel_cmd(&mut self, prog: &str, args: &[&str], path: &str) {
        let Side::Kernel(km) = &self.side else {
            panic!("kernel_cmd without the kernel")
        };
        let file = km.dir.join(path.trim_start_matches('/'));
        if let Err(e) = run(Command::new(prog).args(args).arg(file)) {
            self.fail(e);
        }
    }

    /// `op` on lanefs must fail with `errno` and change nothing.
    fn refused(&mut self, op: Op, errno: i32) {
        let Side::Lanefs(fs) = &self.side else {
            panic!("refused without lanefs")
        };
        let line = format!("lanefs {op:?} (must fail with errno {errno})");
        self.log.push(line.clone());
        match lanefs_apply(fs, &op, false) {
            Err(e) if e.errno() == errno => {}
            Err(e) => self.fail(format!("{line}: {e} (errno {})", e.errno())),
            Ok(()) => self.fail(format!("{line}: succeeded")),
        }
    }
}

/// Files and directories the kernel marked immutable (`chattr +i`) or append-only
/// (`chattr +a`): lanefs refuses, as the kernel does (EPERM), to unlink, rename, link or
/// change them, to add or remove names in an immutable directory, and to remove names
/// from an append-only one; what stays allowed works.
#[test]
fn kernel_inode_flags_bind_lanefs() {
    let test = "kernel_inode_flags_bind_lanefs";
    let _wd = watchdog(test, 300);
    let td = tempfile::tempdir().expect("tempdir");
    if !kernel_ready(test, td.path(), &["chattr"]) {
        return;
    }
    let img = mkfs_image(td.path(), "flags.img", 256 << 20);
    let mut w = World::new(td.path(), img, 15, 100);
    w.mount_kernel();
    for d in ["/d", "/idir", "/adir"] {
        w.mkdir(d);
    }
    for f in [
        "/d/imm",
        "/d/app",
        "/d/plain",
        "/d/plain2",
        "/idir/f",
        "/adir/f",
    ] {
        w.create(f.into(), 100);
    }
    w.mkdir("/d/imm_dir");
    for (flag, path) in [
        ("+i", "/d/imm"),
        ("+a", "/d/app"),
        ("+i", "/d/imm_dir"),
        ("+i", "/idir"),
        ("+a", "/adir"),
    ] {
        w.kernel_cmd("chattr", &[flag], path);
    }
    w.check("the kernel set the flags");
    w.mount_lanefs();
    let eperm = libc::EPERM;
    let set = |path: &str| Op::Chmod {
        path: path.into(),
        perm: 0o600,
    };
    for path in ["/d/imm", "/d/app"] {
        w.refused(Op::Unlink { path: path.into() }, eperm);
        w.refused(
            Op::Rename {
                from: path.into(),
                to: "/d/moved".into(),
            },
            eperm,
        );
        w.refused(
            Op::Rename {
                from: "/d/plain".into(),
                to: path.into(),
            },
            eperm,
        );
        w.refused(
            Op::Link {
                from: path.into(),
                to: "/d/link".into(),
            },
            eperm,
        );
        w.refused(set(path), eperm);
        w.refused(
            Op::Truncate {
                path: path.into(),
                size: 3,
            },
            eperm,
        );
    }
    w.refused(
        Op::Rmdir {
            path: "/d/imm_dir".into(),
        },
        eperm,
    );
    w.refused(
        Op::Rename {
            from: "/d/imm_dir".into(),
            to: "/adir/moved".into(),
        },
        eperm,
    );
    // The immutable directory: no name added or removed, nothing moved in or out.
    w.refused(
        Op::Create {
            path: "/idir/new".into(),
            perm: 0o644,
            data: Vec::new(),
        },
        eperm,
    );
    w.refused(
        Op::Mkdir {
            path: "/idir/sub".into(),
            perm: 0o755,
        },
        eperm,
    );
    w.refused(
        Op::Symlink {
            path: "/idir/ln".into(),
            target: b"x".to_vec(),
        },
        eperm,
    );
    w.refused(
        Op::Link {
            from: "/d/plain".into(),
            to: "/idir/link".into(),
        },
        eperm,
    );
    w.refused(
        Op::Unlink {
            path: "/idir/f".into(),
        },
        eperm,
    );
    w.refused(
        Op::Rename {
            from: "/idir/f".into(),
            to: "/d/f".into(),
        },
        eperm,
    );
    w.refused(
        Op::Rename {
            from: "/d/plain".into(),
            to: "/idir/p".into(),
        },
        eperm,
    );
    w.refused(set("/idir"), eperm);
    // The append-only directory: names come in, none go.
    w.refused(
        Op::Unlink {
            path: "/adir/f".into(),
        },
        eperm,
    );
    w.refused(
        Op::Rename {
            from: "/adir/f".into(),
            to: "/d/f".into(),
        },
        eperm,
    );
    w.refused(
        Op::Rename {
            from: "/d/plain".into(),
            to: "/adir/f".into(),
        },
        eperm,
    );
    w.op(Op::Create {
        path: "/adir/new".into(),
        perm: 0o644,
        data: b"new".to_vec(),
    });
    w.op(Op::Rename {
        from: "/d/plain2".into(),
        to: "/adir/moved_in".into(),
    });
    w.op(Op::Link {
        from: "/d/plain".into(),
        to: "/adir/link".into(),
    });
    // Reading stays allowed; a plain file beside them is unaffected.
    w.op(Op::Rename {
        from: "/d/plain".into(),
        to: "/d/plain_renamed".into(),
    });
    w.check("lanefs kept to the kernel's inode flags");
    w.mount_kernel();
    for (flag, path) in [("-i", "/d/imm"), ("-a", "/d/app"), ("-i", "/idir")] {
        w.kernel_cmd("chattr", &[flag], path);
    }
    w.mount_lanefs();
    w.op(Op::Unlink {
        path: "/d/imm".into(),
    });
    w.op(Op::Truncate {
        path: "/d/app".into(),
        size: 3,
    });
    w.op(Op::Unlink {
        path: "/idir/f".into(),
    });
    w.check("lanefs edits once the kernel cleared the flags");
}

/// lanefs must not write, fallocate or punch a file the kernel marked immutable, nor
/// write an append-only file anywhere but at its end: the kernel refuses both with EPERM
/// (an immutable file cannot be opened for writing; an append-only one only with
/// O_APPEND; `vfs_fallocate` refuses an immutable file, and a punch of an append-only one).
#[test]
fn kernel_inode_flags_bind_lanefs_data() {
    let test = "kernel_inode_flags_bind_lanefs_data";
    let td = tempfile::tempdir().expect("tempdir");
    if !kernel_ready(test, td.path(), &["chattr"]) {
        return;
    }
    let img = mkfs_image(td.path(), "flags.img", 256 << 20);
    let mut w = World::new(td.path(), img, 16, 100);
    w.mount_kernel();
    w.create("/imm".into(), 100);
    w.create("/app".into(), 100);
    w.kernel_cmd("chattr", &["+i"], "/imm");
    w.kernel_cmd("chattr", &["+a"], "/app");
    w.mount_lanefs();
    let eperm = libc::EPERM;
    for path in ["/imm", "/app"] {
        w.refused(
            Op::Write {
                path: path.into(),
                off: 0,
                data: b"zz".to_vec(),
            },
            eperm,
        );
        w.refused(
            Op::Falloc {
                path: path.into(),
                off: 0,
                len: 10,
                keep_size: true,
                punch: true,
            },
            eperm,
        );
    }
    w.refused(
        Op::Falloc {
            path: "/imm".into(),
            off: 0,
            len: 1 << 20,
            keep_size: false,
            punch: false,
        },
        eperm,
    );
    // Appending to the append-only file stays allowed.
    w.op(Op::Write {
        path: "/app".into(),
        off: 100,
        data: b"tail".to_vec(),
    });
    w.check("lanefs kept to the flags on the data path");
}

/// The last logical blocks a file can have (`s_maxbytes` is (2^32 - 1) blocks): the kernel
/// writes the very last one, lanefs reads it, writes and punches beside it, truncates,
/// and the kernel reads every byte back. (The model cannot hold a 16 TiB file; the bytes
/// are checked at their offsets.)
#[test]
fn kernel_edit_last_logical_blocks() {
    use std::os::unix::fs::FileExt;
    let test = "kernel_edit_last_logical_blocks";
    let _wd = watchdog(test, 300);
    let td = tempfile::tempdir().expect("tempdir");
    if !kernel_ready(test, td.path(), &[]) {
        return;
    }
    let img = mkfs_image(td.path(), "max.img", 256 << 20);
    let mnt = td.path().join("mnt");
    let last = ((1u64 << 32) - 2) * BS; // offset of the last block
    let km = KernelMount::mount(&img, &mnt, "").expect("kernel mount");
    let f = std::fs::File::create(mnt.join("f")).expect("create");
    f.write_all_at(b"kernel's last block", last + 100)
        .expect("kernel writes the last block");
    f.write_all_at(b"head", 0).expect("kernel writes block 0");
    drop(f);
    km.unmount().expect("unmount");
    fsck_clean(&img, "after the kernel wrote the last block").unwrap_or_else(|e| panic!("{e}"));

    let fs = Fs::mount_path(&img, MountOptions::default()).expect("lanefs mount");
    let ino = fs.lookup(ROOT_INO, b"f").expect("lookup").ino;
    let size = last + 100 + 19;
    assert_eq!(fs.getattr(ino).expect("getattr").size, size);
    let mut buf = [0u8; 19];
    assert_eq!(fs.read(ino, last + 100, &mut buf).expect("read"), 19);
    assert_eq!(&buf, b"kernel's last block");
    fs.write(ino, last - 3 * BS, b"lanefs three before")
        .expect("lanefs writes near the end");
    fs.write(ino, last - BS + 4000, &[7u8; 200])
        .expect("lanefs writes across into the last block");
    let punch = FallocMode {
        keep_size: true,
        punch_hole: true,
        zero_range: false,
    };
    fs.fallocate(ino, punch, last - 3 * BS, BS)
        .expect("lanefs punches near the end");
    let alloc = FallocMode {
        keep_size: true,
        punch_hole: false,
        zero_range: false,
    };
    fs.fallocate(ino, alloc, last - 10 * BS, 5 * BS)
        .expect("lanefs fallocates near the end");
    fs.unmount().expect("lanefs unmount");
    fsck_clean(&img, "after lanefs edited the last blocks").unwrap_or_else(|e| panic!("{e}"));

    let km = KernelMount::mount(&img, &mnt, "").expect("kernel mount");
    let f = std::fs::File::open(mnt.join("f")).expect("open");
    assert_eq!(f.metadata().expect("stat").len(), size);
    let mut got = vec![0u8; (3 * BS + 119) as usize];
    f.read_exact_at(&mut got, last - 3 * BS)
        .expect("kernel reads");
    let mut want = vec![0u8; got.len()];
    want[(3 * BS + 100) as usize..(3 * BS + 119) as usize].copy_from_slice(b"kernel's last block");
    // lanefs's 200 bytes of 7 came after, over the first 4 bytes of the kernel's.
    want[(2 * BS + 4000) as usize..(3 * BS + 104) as usize].fill(7);
    assert!(
        got == want,
        "the kernel reads other bytes in the last blocks"
    );
    drop(f);
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(mnt.join("f"))
        .expect("open");
    f.set_len(last - 5 * BS + 1).expect("kernel truncates");
    drop(f);
    km.unmount().expect("unmount");
    fsck_clean(&img, "after the kernel truncated").unwrap_or_else(|e| panic!("{e}"));

    let fs = Fs::mount_path(&img, MountOptions::default()).expect("lanefs mount");
    let ino = fs.lookup(ROOT_INO, b"f").expect("lookup").ino;
    let mut head = [0u8; 4];
    fs.read(ino, 0, &mut head).expect("read");
    assert_eq!(&head, b"head");
    fs.setattr(
        ino,
        &SetAttr {
            size: Some(BS),
            ..Default::default()
        },
    )
    .expect("lanefs truncates");
    fs.unmount().expect("lanefs unmount");
    fsck_clean(&img, "after lanefs truncated").unwrap_or_else(|e| panic!("{e}"));
}

/// Known limitation, not fixed here: a file the kernel moved back to indirect block
/// maps (`chattr -e`, which Linux allows for a file of at most 12 blocks; it then grows
/// with indirect blocks) cannot be read, written, truncated or even unlinked by lanefs
/// ("uses indirect block maps"), so neither can its directory be removed. Nothing is
/// corrupted. A fix would load indirect maps into the extent map (`inode::load_extents`,
/// the indirect blocks as the old tree's blocks) and convert the file to extents on its
/// first change, as the kernel's own migration does.
#[test]
#[ignore = "lanefs refuses files with indirect block maps (inode::load_extents)"]
fn kernel_indirect_block_maps() {
    let test = "kernel_indirect_block_maps";
    let td = tempfile::tempdir().expect("tempdir");
    if !kernel_ready(test, td.path(), &["chattr"]) {
        return;
    }
    let img = mkfs_image(td.path(), "ind.img", 256 << 20);
    let mut w = World::new(td.path(), img, 17, 100);
    w.mount_kernel();
    w.mkdir("/d");
    for f in ["/d/small", "/d/big"] {
        w.create(f.into(), 5 * BS as usize);
        w.op(Op::Sync {
            path: Some(f.into()),
        });
        w.kernel_cmd("chattr", &["-e"], f);
    }
    // Past 12 blocks: an indirect block, past 1,036 a double-indirect one.
    let data = w.rand_data(3000 * BS as usize);
    w.op(Op::Write {
        path: "/d/big".into(),
        off: 5 * BS,
        data,
    });
    w.check("the kernel wrote files with indirect block maps");
    w.mount_lanefs();
    w.op(Op::Write {
        path: "/d/small".into(),
        off: 100,
        data: b"lanefs".to_vec(),
    });
    w.op(Op::Truncate {
        path: "/d/big".into(),
        size: 2000 * BS + 1,
    });
    w.op(Op::Unlink {
        path: "/d/small".into(),
    });
    w.remove_tree("/d");
    w.check("lanefs edited and removed them");
}

/// A directory at the dir_nlink limit: the kernel makes 64,997 subdirectories (link
/// count 64,999), lanefs adds the 64,998th (65,000: still exact, as in Linux and for
/// e2fsck) and the 64,999th (past 65,000: 1, "many"), and the kernel one more (stays 1).
#[test]
fn kernel_edit_dir_nlink_limit() {
    use std::os::unix::fs::MetadataExt;
    let test = "kernel_edit_dir_nlink_limit";
    let _wd = watchdog(test, 600);
    let td = tempfile::tempdir().expect("tempdir");
    if !kernel_ready(test, td.path(), &[]) {
        return;
    }
    let t0 = Instant::now();
    let img = common::mkfs_image_args(td.path(), "nlink.img", 1 << 30, &["-N", "140000"]);
    let mnt = td.path().join("mnt");
    let km = KernelMount::mount(&img, &mnt, "").expect("kernel mount");
    let p = mnt.join("p");
    std::fs::create_dir(&p).expect("mkdir /p");
    for i in 0..64_997 {
        std::fs::create_dir(p.join(format!("{i}"))).expect("kernel mkdir");
    }
    assert_eq!(std::fs::metadata(&p).expect("stat").nlink(), 64_999);
    km.unmount().expect("unmount");
    fsck_clean(&img, "after the kernel made 64,997 subdirectories")
        .unwrap_or_else(|e| panic!("{e}"));
    println!(
        "{test}: the kernel made 64,997 subdirectories ({:.1} s)",
        t0.elapsed().as_secs_f64()
    );
    for (name, want) in [("l1", 65_000u32), ("l2", 1)] {
        let fs = Fs::mount_path(&img, MountOptions::default()).expect("lanefs mount");
        let pi = fs.lookup(ROOT_INO, b"p").expect("lookup").ino;
        fs.mkdir(pi, name.as_bytes(), 0o755, Owner::default())
            .expect("lanefs mkdir");
        let got = fs.getattr(pi).expect("getattr").nlink;
        fs.unmount().expect("lanefs unmount");
        let when = format!("after lanefs made /p/{name}");
        fsck_clean(&img, &when)
            .and_then(|_| lanefs_fsck(&img, &when))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(got, want, "lanefs's link count of /p after {name}");
        let km = KernelMount::mount(&img, &mnt, "ro").expect("kernel mount");
        let n = std::fs::metadata(mnt.join("p")).expect("stat").nlink();
        km.unmount().expect("unmount");
        assert_eq!(
            n,
            u64::from(want),
            "the kernel's link count of /p after {name}"
        );
    }
    let km = KernelMount::mount(&img, &mnt, "").expect("kernel mount");
    std::fs::create_dir(mnt.join("p").join("k1")).expect("kernel mkdir");
    assert_eq!(std::fs::metadata(mnt.join("p")).expect("stat").nlink(), 1);
    km.unmount().expect("unmount");
    fsck_clean(&img, "after the kernel made one more").unwrap_or_else(|e| panic!("{e}"));
    // Back below the limit: the count stays 1 (Linux's ext4_dec_count), which e2fsck
    // accepts for an indexed directory.
    let fs = Fs::mount_path(&img, MountOptions::default()).expect("lanefs mount");
    let pi = fs.lookup(ROOT_INO, b"p").expect("lookup").ino;
    for name in ["l1", "l2", "k1", "0"] {
        fs.rmdir(pi, name.as_bytes()).expect("lanefs rmdir");
    }
    assert_eq!(fs.getattr(pi).expect("getattr").nlink, 1);
    fs.unmount().expect("lanefs unmount");
    fsck_clean(&img, "after lanefs removed four").unwrap_or_else(|e| panic!("{e}"));
    let km = KernelMount::mount(&img, &mnt, "").expect("kernel mount");
    std::fs::remove_dir(mnt.join("p").join("1")).expect("kernel rmdir");
    assert_eq!(std::fs::metadata(mnt.join("p")).expect("stat").nlink(), 1);
    km.unmount().expect("unmount");
    fsck_clean(&img, "after the kernel removed one").unwrap_or_else(|e| panic!("{e}"));
    println!("{test}: done ({:.1} s)", t0.elapsed().as_secs_f64());
}

/// A directory whose subdirectories went past 65,000 and back below keeps link count 1 in
/// Linux (ext4_dec_count never raises it again) and in lanefs alike; e2fsck accepts that
/// for an indexed directory ("previously exceeded, but no longer is"), and so must
/// `lanefs::fsck` (it reported LINK_COUNT before its pass 4 learnt this).
#[test]
fn kernel_dir_nlink_back_below_limit_lanefs_fsck() {
    let test = "kernel_dir_nlink_back_below_limit_lanefs_fsck";
    let td = tempfile::tempdir().expect("tempdir");
    if !kernel_ready(test, td.path(), &[]) {
        return;
    }
    let img = common::mkfs_image_args(td.path(), "nlink.img", 1 << 30, &["-N", "140000"]);
    let mnt = td.path().join("mnt");
    let km = KernelMount::mount(&img, &mnt, "").expect("kernel mount");
    let p = mnt.join("p");
    std::fs::create_dir(&p).expect("mkdir /p");
    for i in 0..64_999 {
        std::fs::create_dir(p.join(format!("{i}"))).expect("kernel mkdir");
    }
    // 65,001 links: 1 from now on, also after the next rmdir (65,000 counted).
    std::fs::remove_dir(p.join("0")).expect("kernel rmdir");
    km.unmount().expect("unmount");
    fsck_clean(&img, "with /p back at 65,000").unwrap_or_else(|e| panic!("{e}"));
    lanefs_fsck(&img, "with /p back at 65,000").unwrap_or_else(|e| panic!("{e}"));
}

impl World {
    /// A compact round trip: the kernel builds a 3,000-entry directory, a depth-1 extent
    /// tree and symlinks; lanefs inserts, deletes, renames, edits the tree and does random
    /// operations; the kernel does random operations; lanefs removes the directory.
    fn compact_round_trip(&mut self, label: &str) {
        // lanefs fills most of the disk (every group's bitmap gets initialized), then
        // the kernel, each checked and removed.
        self.mount_lanefs();
        self.fill(label, 150);
        self.mount_kernel();
        self.fill(label, 150);
        self.mkdir("/d");
        for _ in 0..3000 {
            let p = format!("/d/{}", self.rand_name("/d"));
            let len = self.rng.gen_range(0..=60);
            self.create(p, len);
        }
        self.create("/f".into(), 0);
        self.alternate_blocks("/f", 0, 400);
        for len in [10usize, 59, 60, 700] {
            let target = rand_chars(&mut self.rng, len).into_bytes();
            self.op(Op::Symlink {
                path: format!("/s{len}"),
                target,
            });
        }
        self.check(&format!("{label}: the kernel built"));
        self.mount_lanefs();
        for _ in 0..300 {
            let p = format!("/d/{}", self.rand_name("/d"));
            self.create(p, 5);
        }
        self.unlink_some("/d", 1000);
        for i in 0..20 {
            let from = self.names_in("/d")[i * 7].clone();
            let to = if i % 2 == 0 {
                format!("/d/{}", self.rand_name("/d"))
            } else {
                format!("/{}", self.rand_name(""))
            };
            self.op(Op::Rename { from, to });
        }
        self.edit_frag("/f", 40);
        self.op(Op::Unlink {
            path: "/s60".into(),
        });
        self.check(&format!("{label}: lanefs edited"));
        self.frozen.clear();
        self.pinned = ["/d".to_string()].into();
        self.hot = vec!["/d".into()];
        self.random_ops(250, &format!("{label}: lanefs"));
        self.mount_kernel();
        self.random_ops(120, &format!("{label}: kernel"));
        self.mount_lanefs();
        self.pinned.clear();
        self.remove_tree("/d");
        self.check(&format!("{label}: lanefs removed /d"));
        if let Err(e) = self.unmount() {
            self.fail(e);
        }
    }
}

impl World {
    /// Files of `mib` MiB in all, written in 1 MiB pieces, checked, then removed.
    fn fill(&mut self, label: &str, mib: usize) {
        for f in 0..mib / 30 {
            let path = format!("/fill{f}");
            self.create(path.clone(), 0);
            for k in 0..30u64 {
                let data = self.rand_data(1 << 20);
                self.op(Op::Write {
                    path: path.clone(),
                    off: k << 20,
                    data,
                });
            }
        }
        self.check(&format!("{label}: {} filled {mib} MiB", self.side_name()));
        for f in 0..mib / 30 {
            self.op(Op::Unlink {
                path: format!("/fill{f}"),
            });
        }
    }
}

/// The same structures on images `mkfs.ext4` makes with other options lanefs accepts: no
/// dir_index (the kernel's directories stay linear over many blocks), 32-byte group
/// descriptors (no 64bit), no flex_bg, a checksum seed kept across a UUID change
/// (metadata_csum_seed), 128-byte inodes, and no metadata_csum.
#[test]
fn kernel_edit_mkfs_variants() {
    let test = "kernel_edit_mkfs_variants";
    let _wd = watchdog(test, 900);
    let td = tempfile::tempdir().expect("tempdir");
    if !kernel_ready(test, td.path(), &["xfs_io", "tune2fs"]) {
        return;
    }
    let t0 = Instant::now();
    let variants: [(&str, &[&str]); 10] = [
        ("many_groups", &["-g", "4096"]),
        (
            "no_sparse_super",
            &["-O", "^sparse_super,^resize_inode", "-g", "4096"],
        ),
        ("no_resize_inode", &["-O", "^resize_inode", "-g", "4096"]),
        ("no_journal", &["-O", "^has_journal"]),
        ("no_dir_index", &["-O", "^dir_index"]),
        ("no_64bit", &["-O", "^64bit"]),
        ("no_flex_bg", &["-O", "^flex_bg"]),
        ("csum_seed", &["-O", "metadata_csum_seed"]),
        ("inode128", &["-I", "128"]),
        ("no_metadata_csum", &["-O", "^metadata_csum"]),
    ];
    for (k, (name, args)) in variants.iter().enumerate() {
        let img = common::mkfs_image_args(td.path(), &format!("{name}.img"), 256 << 20, args);
        if *name == "csum_seed" {
            run(Command::new("tune2fs").args(["-U", "random"]).arg(&img))
                .expect("tune2fs -U random");
        }
        let mut w = World::new(td.path(), img, 20 + k as u64, 1000);
        w.compact_round_trip(name);
        w.note(&format!("{test}: {name}: {} checks", w.checks));
    }
    println!("{test}: done ({:.1} s)", t0.elapsed().as_secs_f64());
}

/// On a `sparse_super2` image the backup superblocks live only in the two groups
/// `s_backup_bgs` names (Linux's ext4_bg_has_super). Placing them by the `sparse_super`
/// rule (groups 0, 1 and powers of 3, 5, 7), as lanefs once did, made an uninitialized
/// group's bitmap mark blocks used that nothing owns (e2fsck: "Block bitmap differences:
/// -(12288--12544) -(20480--20736) -(36864--37120)", groups 3, 5 and 9 of 16) and could
/// leave the last group's backup superblock free to allocate.
#[test]
fn kernel_sparse_super2_backups() {
    let test = "kernel_sparse_super2_backups";
    let _wd = watchdog(test, 300);
    let td = tempfile::tempdir().expect("tempdir");
    if !kernel_ready(test, td.path(), &["xfs_io"]) {
        return;
    }
    let img = common::mkfs_image_args(
        td.path(),
        "ss2.img",
        256 << 20,
        &["-O", "sparse_super2", "-g", "4096"],
    );
    let mut w = World::new(td.path(), img, 21, 1000);
    w.mount_lanefs();
    w.fill("sparse_super2", 150);
}

/// Without dir_nlink a directory stops at 65,000 links (Linux's EXT4_DIR_LINK_MAX): the
/// kernel makes 64,998 subdirectories and refuses one more; lanefs's mkdir and a
/// directory moved in fail with EMLINK too, while a file moved in, a subdirectory renamed
/// within, and a directory moved over an empty one still work.
#[test]
fn kernel_edit_no_dir_nlink_limit() {
    use std::os::unix::fs::MetadataExt;
    let test = "kernel_edit_no_dir_nlink_limit";
    let _wd = watchdog(test, 600);
    let td = tempfile::tempdir().expect("tempdir");
    if !kernel_ready(test, td.path(), &[]) {
        return;
    }
    let img = common::mkfs_image_args(
        td.path(),
        "nonlink.img",
        1 << 30,
        &["-N", "140000", "-O", "^dir_nlink"],
    );
    let mnt = td.path().join("mnt");
    let km = KernelMount::mount(&img, &mnt, "").expect("kernel mount");
    let p = mnt.join("p");
    std::fs::create_dir(&p).expect("mkdir /p");
    for i in 0..64_998 {
        std::fs::create_dir(p.join(format!("{i}"))).expect("kernel mkdir");
    }
    for d in ["q", "q2"] {
        std::fs::create_dir(mnt.join(d)).expect("mkdir");
    }
    std::fs::write(mnt.join("f"), b"f").expect("create");
    let e = std::fs::create_dir(p.join("x")).expect_err("the kernel's 65,001st link");
    assert_eq!(e.raw_os_error(), Some(libc::EMLINK));
    km.unmount().expect("unmount");

    let fs = Fs::mount_path(&img, MountOptions::default()).expect("lanefs mount");
    let pi = fs.lookup(ROOT_INO, b"p").expect("lookup").ino;
    let o = Owner::default();
    let e = fs
        .mkdir(pi, b"l1", 0o755, o)
        .expect_err("lanefs mkdir past the limit");
    assert_eq!(e.errno(), libc::EMLINK, "mkdir: {e}");
    let e = fs
        .rename(ROOT_INO, b"q", pi, b"q")
        .expect_err("lanefs moves a directory in past the limit");
    assert_eq!(e.errno(), libc::EMLINK, "rename: {e}");
    fs.rename(ROOT_INO, b"f", pi, b"f")
        .expect("a file moves in");
    fs.rename(pi, b"0", pi, b"zero")
        .expect("a subdirectory renamed within");
    fs.rename(ROOT_INO, b"q2", pi, b"1")
        .expect("a directory over an empty one");
    assert_eq!(fs.getattr(pi).expect("getattr").nlink, 65_000);
    fs.unmount().expect("lanefs unmount");
    fsck_clean(&img, "after lanefs edited /p")
        .and_then(|_| lanefs_fsck(&img, "after lanefs edited /p"))
        .unwrap_or_else(|e| panic!("{e}"));
    let km = KernelMount::mount(&img, &mnt, "ro").expect("kernel mount");
    assert_eq!(std::fs::metadata(&p).expect("stat").nlink(), 65_000);
    for n in ["f", "zero", "1"] {
        assert!(p.join(n).exists(), "/p/{n}");
    }
    assert!(mnt.join("q").is_dir() && !p.join("0").exists() && !mnt.join("q2").exists());
    km.unmount().expect("unmount");
}
