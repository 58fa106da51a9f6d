//! Goal: lanefs's jbd2 log and the kernel's are interchangeable. A log the kernel left
//! behind is replayed by lanefs exactly as e2fsck replays it; a log lanefs left behind is
//! replayed by e2fsck, by the kernel and by lanefs to the same tree, with every
//! fsync-acknowledged change present, the orphan list processed, and e2fsck clean.
//!
//! Method: (1) the kernel writes a tree, `sync`s, makes more changes that it commits with
//! fsync only (committed in the log, not yet written home), and is shut down with
//! `xfs_io -x -c shutdown` (with and without `-f`, the log flush). The image file is copied
//! while the dead file system is still mounted (unmounting would write the committed
//! buffers home through the block device): the copy is what a power cut leaves. e2fsck
//! replays one copy, lanefs another (and the kernel a third, for reference); all must give
//! the tree the kernel showed after its last fsync. (2) lanefs writes and fsyncs a tree on a `mkfs.ext4` image; the image file
//! is copied while lanefs is mounted (every device write held off during the copy, so the
//! copy is one instant); e2fsck, the kernel and lanefs each replay a copy. (3) a 4 MiB
//! log wrapped several times by fsync-ed metadata changes, copied mid-run and replayed by
//! the same three.
//!
//! Trees are compared by walking them (names, types, permissions, link counts, sizes and
//! a content hash) through a read-only `noload` kernel mount, which never replays on its
//! own; every difference is listed by path. Failures are collected and reported together
//! at the end of each test.
//!
//! Needs root, loop devices, e2fsprogs and `xfs_io` (xfsprogs); otherwise each test prints
//! `SKIP` (or fails when `LANEFS_REQUIRE_PRIVILEGED=1`).

mod common;

use common::{kernel_ready, run, KernelMount};
use lanefs::{BlockDevice, FileDevice, FileType, Fs, Ino, MountOptions, Owner, SetAttr, ROOT_INO};
use rand::rngs::StdRng;
use rand::{RngCore, SeedableRng};
use std::collections::BTreeMap;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

const BS: u64 = 4096;
/// Entries of the kernel's and lanefs's htree directories.
const HTREE: usize = 4000;

// ---------------------------------------------------------------------------------------
// Environment: skip rule, tools, kernel mounts.

/// A sparse image of `size` bytes formatted by mkfs.ext4 with 4 KiB blocks.
fn mkfs(path: &Path, size: u64, extra: &[&str]) {
    std::fs::File::create(path)
        .and_then(|f| f.set_len(size))
        .expect("create image");
    run(Command::new("mkfs.ext4")
        .args(["-q", "-F", "-b", "4096"])
        .args(extra)
        .arg(path))
    .expect("mkfs.ext4");
}

/// Copy an image file, keeping it sparse.
fn copy_image(src: &Path, dst: &Path) {
    run(Command::new("cp").arg("--sparse=always").arg(src).arg(dst))
        .unwrap_or_else(|e| panic!("copy {} to {}: {e}", src.display(), dst.display()));
}

fn secs(t: Instant) -> String {
    format!("{:.1} s", t.elapsed().as_secs_f64())
}

/// Deterministic content of `len` bytes.
fn content(seed: u64, len: usize) -> Vec<u8> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut v = vec![0u8; len];
    rng.fill_bytes(&mut v);
    v
}

fn hash_bytes(b: &[u8]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    b.hash(&mut h);
    h.finish()
}

/// A name in the htree directories; varying lengths spread records over blocks.
fn hname(i: usize) -> String {
    format!("entry_{i:05}_{}", "n".repeat(i % 29))
}

// ---------------------------------------------------------------------------------------
// Failures, collected so that one run reports everything that differs.

struct Failures {
    test: &'static str,
    list: Vec<String>,
}

impl Failures {
    fn new(test: &'static str) -> Failures {
        Failures {
            test,
            list: Vec::new(),
        }
    }

    fn add(&mut self, msg: String) {
        println!("{}: FAIL {msg}", self.test);
        self.list.push(msg);
    }

    fn check(&mut self, ok: bool, msg: impl FnOnce() -> String) {
        if !ok {
            self.add(msg());
        }
    }

    /// Record a list of tree differences under one heading.
    fn diffs(&mut self, what: &str, diffs: Vec<String>) {
        if diffs.is_empty() {
            return;
        }
        const MAX: usize = 25;
        let mut s = format!("{what}: {} difference(s):", diffs.len());
        for d in diffs.iter().take(MAX) {
            s.push_str("\n      ");
            s.push_str(d);
        }
        if diffs.len() > MAX {
            s.push_str(&format!("\n      ... and {} more", diffs.len() - MAX));
        }
        self.add(s);
    }

    fn finish(self) {
        if self.list.is_empty() {
            return;
        }
        let mut s = format!("{}: {} failure(s):", self.test, self.list.len());
        for (i, m) in self.list.iter().enumerate() {
            s.push_str(&format!("\n  {}. {m}", i + 1));
        }
        panic!("{s}");
    }
}

// ---------------------------------------------------------------------------------------
// Image inspection with e2fsprogs.

/// What `dumpe2fs -h` says about recovery and the orphan list.
#[derive(Debug, Clone)]
struct SbInfo {
    features: String,
    needs_recovery: bool,
    journal_start: u64,
    journal_seq: u64,
    first_orphan: Option<u64>,
    /// The journal part of the output, for messages.
    journal: String,
}

fn field<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    // The header ends where the per-group lines ("Group 0: ...") start.
    let group_line = |l: &str| {
        l.strip_prefix("Group ")
            .is_some_and(|r| r.starts_with(|c: char| c.is_ascii_digit()))
    };
    text.lines()
        .take_while(|l| !group_line(l))
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(str::trim)
}

fn num(s: Option<&str>) -> u64 {
    let s = s.unwrap_or("0");
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).unwrap_or(0),
        None => s.parse().unwrap_or(0),
    }
}

fn sb_info(img: &Path) -> Result<SbInfo, String> {
    let out = run(Command::new("dumpe2fs").arg("-h").arg(img))?;
    let features = field(&out, "Filesystem features").unwrap_or("").to_string();
    Ok(SbInfo {
        needs_recovery: features.split_whitespace().any(|f| f == "needs_recovery"),
        features,
        journal_start: num(field(&out, "Journal start")),
        journal_seq: num(field(&out, "Journal sequence")),
        first_orphan: field(&out, "First orphan inode").map(|s| num(Some(s))),
        journal: out
            .lines()
            .filter(|l| l.starts_with("Journal") || l.contains("journal"))
            .collect::<Vec<_>>()
            .join("; "),
    })
}

fn sb_info_or_panic(img: &Path) -> SbInfo {
    sb_info(img).unwrap_or_else(|e| panic!("dumpe2fs -h {}: {e}", img.display()))
}

/// Free blocks and inodes: the superblock's, and the sums over the group descriptors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Counts {
    sb_blocks: u64,
    sb_inodes: u64,
    group_blocks: u64,
    group_inodes: u64,
}

impl fmt::Display for Counts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "superblock {} free blocks / {} free inodes, groups {} / {}",
            self.sb_blocks, self.sb_inodes, self.group_blocks, self.group_inodes
        )
    }
}

fn counts(img: &Path) -> Result<Counts, String> {
    let out = run(Command::new("dumpe2fs").arg(img))?;
    let (mut gb, mut gi) = (0, 0);
    for l in out.lines() {
        // "  27283 free blocks, 8181 free inodes, 2 directories, 8179 unused inodes"
        let Some((b, rest)) = l.trim().split_once(" free blocks, ") else {
            continue;
        };
        let Some((i, _)) = rest.split_once(" free inodes") else {
            continue;
        };
        gb += b.trim().parse::<u64>().unwrap_or(0);
        gi += i.trim().parse::<u64>().unwrap_or(0);
    }
    Ok(Counts {
        sb_blocks: num(field(&out, "Free blocks")),
        sb_inodes: num(field(&out, "Free inodes")),
        group_blocks: gb,
        group_inodes: gi,
    })
}

/// Whether `ino` is marked in use in the inode bitmap (`debugfs testi`).
fn inode_in_use(img: &Path, ino: u64) -> Result<bool, String> {
    let out = Command::new("debugfs")
        .arg("-R")
        .arg(format!("testi <{ino}>"))
        .arg(img)
        .output()
        .map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&out.stdout);
    if text.contains("is not in use") {
        Ok(false)
    } else if text.contains("is marked in use") {
        Ok(true)
    } else {
        Err(format!(
            "debugfs testi <{ino}>: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// Transactions in the log (`debugfs logdump`: commit blocks found).
fn log_commits(img: &Path) -> Result<usize, String> {
    // -c: a crash image's bitmaps may not match their checksums before replay.
    let out = Command::new("debugfs")
        .args(["-c", "-R", "logdump"])
        .arg(img)
        .output()
        .map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&out.stdout);
    if text.contains("Journal starts at") {
        Ok(text.matches("(commit block)").count())
    } else {
        Err(format!("{text}{}", String::from_utf8_lossy(&out.stderr)))
    }
}

/// Byte ranges of the journal inode's blocks after its superblock (`debugfs stat <8>`).
fn journal_log_ranges(img: &Path) -> Vec<(u64, u64)> {
    let out =
        run(Command::new("debugfs").arg("-R").arg("stat <8>").arg(img)).expect("debugfs stat <8>");
    let ext = out
        .split("EXTENTS:")
        .nth(1)
        .expect("journal inode has extents");
    let mut ranges = Vec::new();
    for tok in ext.split([',', '\n']).map(str::trim) {
        // "(0-4095):32801-36896" or "(7):1234"; "(ETB0):..." are index blocks.
        let Some((l, p)) = tok.strip_prefix('(').and_then(|t| t.split_once("):")) else {
            continue;
        };
        if l.starts_with("ETB") {
            continue;
        }
        let l0: u64 = l
            .split('-')
            .next()
            .and_then(|x| x.parse().ok())
            .unwrap_or(0);
        let mut ps = p.split('-').map(|x| x.trim().parse::<u64>());
        let (Some(Ok(p0)), p1) = (ps.next(), ps.next()) else {
            continue;
        };
        let p1 = match p1 {
            Some(Ok(p1)) => p1,
            _ => p0,
        };
        // Logical block 0 is the journal superblock, not the log.
        let p0 = if l0 == 0 { p0 + 1 } else { p0 };
        if p0 <= p1 {
            ranges.push((p0 * BS, (p1 + 1) * BS));
        }
    }
    assert!(!ranges.is_empty(), "no journal extents in:\n{out}");
    ranges
}

/// `e2fsck -fn` must exit 0 and answer no question.
fn fsck_n(img: &Path) -> Result<(), String> {
    let (code, text) = common::e2fsck(img);
    let asked = text.lines().any(|l| l.trim_end().ends_with("? no"));
    if code == 0 && !asked {
        Ok(())
    } else {
        Err(format!("exit {code}:\n{}", indent(&text)))
    }
}

/// Output lines, indented for a message; at most 60 of them.
fn indent(text: &str) -> String {
    const MAX: usize = 60;
    let lines: Vec<&str> = text.lines().collect();
    let mut s = lines
        .iter()
        .take(MAX)
        .map(|l| format!("        | {l}"))
        .collect::<Vec<_>>()
        .join("\n");
    if lines.len() > MAX {
        s.push_str(&format!("\n        | ... {} more lines", lines.len() - MAX));
    }
    s
}

/// What `e2fsck -fy` did.
struct Repair {
    code: i32,
    output: String,
    /// "recovering journal" was printed.
    recovered: bool,
    /// Problems it fixed, beyond the lazy superblock counters and orphan clearing.
    extra_fixes: Vec<String>,
    /// Lines about the journal other than "recovering journal".
    journal_complaints: Vec<String>,
}

fn e2fsck_fy(img: &Path) -> Repair {
    let out = Command::new("e2fsck")
        .arg("-fy")
        .arg(img)
        .output()
        .expect("run e2fsck -fy");
    let output = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = output.lines().map(str::trim).collect();
    let mut extra_fixes = Vec::new();
    for (k, l) in lines.iter().enumerate() {
        if !l.ends_with("? yes") {
            continue;
        }
        // "Fix? yes" alone follows its problem; otherwise the problem is on the line.
        let problem = if l.split_whitespace().count() <= 3 && k > 0 {
            let prev = lines[..k].iter().rev().find(|p| !p.is_empty());
            format!("{} {l}", prev.unwrap_or(&""))
        } else {
            l.to_string()
        };
        let lazy = problem.starts_with("Free blocks count wrong (")
            || problem.starts_with("Free inodes count wrong (");
        if !lazy {
            extra_fixes.push(problem);
        }
    }
    let journal_complaints = lines
        .iter()
        .filter(|l| l.to_lowercase().contains("journal") && !l.contains("recovering journal"))
        .map(|l| l.to_string())
        .collect();
    Repair {
        code: out.status.code().unwrap_or(-1),
        recovered: output.contains("recovering journal"),
        output,
        extra_fixes,
        journal_complaints,
    }
}

// ---------------------------------------------------------------------------------------
// Trees: what a walk sees, keyed by absolute path ("/" is the root).

#[derive(Debug, Clone, PartialEq, Eq)]
struct Node {
    kind: String,
    perm: u32,
    nlink: u64,
    size: u64,
    /// Hash of a file's bytes or a symlink's target; 0 otherwise.
    digest: u64,
}

impl fmt::Display for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {:04o} nlink {} size {}",
            self.kind, self.perm, self.nlink, self.size
        )?;
        if self.digest != 0 {
            write!(f, " hash {:016x}", self.digest)?;
        }
        Ok(())
    }
}

type Tree = BTreeMap<String, Node>;

fn child(key: &str, name: &str) -> String {
    if key == "/" {
        format!("/{name}")
    } else {
        format!("{key}/{name}")
    }
}

fn error_node(what: String) -> Node {
    Node {
        kind: what,
        perm: 0,
        nlink: 0,
        size: 0,
        digest: 0,
    }
}

/// Walk a directory through the host (a kernel mount). Errors become nodes.
fn walk_host(root: &Path) -> Tree {
    let mut t = Tree::new();
    walk_host_at(root, "/", &mut t);
    t
}

fn walk_host_at(p: &Path, key: &str, t: &mut Tree) {
    let md = match std::fs::symlink_metadata(p) {
        Ok(md) => md,
        Err(e) => {
            t.insert(key.into(), error_node(format!("(stat error: {e})")));
            return;
        }
    };
    let ft = md.file_type();
    let (kind, digest) = if ft.is_dir() {
        ("dir".to_string(), 0)
    } else if ft.is_symlink() {
        match std::fs::read_link(p) {
            Ok(l) => ("symlink".into(), hash_bytes(l.as_os_str().as_bytes())),
            Err(e) => (format!("symlink (readlink error: {e})"), 0),
        }
    } else if ft.is_file() {
        match std::fs::read(p) {
            Ok(b) => ("file".into(), hash_bytes(&b)),
            Err(e) => (format!("file (read error: {e})"), 0),
        }
    } else {
        ("other".into(), 0)
    };
    t.insert(
        key.into(),
        Node {
            kind,
            perm: md.mode() & 0o7777,
            nlink: md.nlink(),
            size: md.len(),
            digest,
        },
    );
    if ft.is_dir() {
        let entries = match std::fs::read_dir(p) {
            Ok(r) => r,
            Err(e) => {
                t.insert(
                    child(key, "(readdir)"),
                    error_node(format!("(readdir error: {e})")),
                );
                return;
            }
        };
        let mut names: Vec<_> = entries
            .filter_map(|e| e.ok())
            .map(|e| e.file_name())
            .collect();
        names.sort();
        for n in names {
            walk_host_at(&p.join(&n), &child(key, &n.to_string_lossy()), t);
        }
    }
}

/// Mount `img` read-only without loading the journal (the kernel must not replay on its
/// own), walk it, unmount.
fn kernel_walk(img: &Path, mnt: &Path) -> Result<Tree, String> {
    let km = KernelMount::mount(img, mnt, "ro,noload")?;
    let t = walk_host(mnt);
    km.unmount()?;
    Ok(t)
}

fn kind_name(k: FileType) -> &'static str {
    match k {
        FileType::Regular => "file",
        FileType::Directory => "dir",
        FileType::Symlink => "symlink",
        _ => "other",
    }
}

fn lanefs_read_all(fs: &Fs, ino: Ino, size: u64) -> Result<Vec<u8>, String> {
    let mut out = vec![0u8; size as usize];
    let mut off = 0usize;
    while off < out.len() {
        let end = (off + (1 << 20)).min(out.len());
        let n = fs
            .read(ino, off as u64, &mut out[off..end])
            .map_err(|e| format!("read at {off}: {e}"))?;
        if n == 0 {
            return Err(format!("short read at {off} of {size}"));
        }
        off += n;
    }
    Ok(out)
}

/// Walk a mounted lanefs. Errors become nodes.
fn walk_lanefs(fs: &Fs) -> Tree {
    let mut t = Tree::new();
    match fs.getattr(ROOT_INO) {
        Ok(a) => {
            t.insert(
                "/".into(),
                Node {
                    kind: "dir".into(),
                    perm: u32::from(a.perm),
                    nlink: u64::from(a.nlink),
                    size: a.size,
                    digest: 0,
                },
            );
            walk_lanefs_dir(fs, ROOT_INO, "/", &mut t);
        }
        Err(e) => {
            t.insert("/".into(), error_node(format!("(getattr error: {e})")));
        }
    }
    t
}

fn walk_lanefs_dir(fs: &Fs, dir: Ino, key: &str, t: &mut Tree) {
    let mut pos = 0;
    let mut entries = Vec::new();
    loop {
        match fs.readdir(dir, pos, 512) {
            Ok(v) if v.is_empty() => break,
            Ok(v) => {
                for e in v {
                    pos = e.next;
                    if e.name != b"." && e.name != b".." {
                        entries.push(e);
                    }
                }
            }
            Err(e) => {
                t.insert(
                    child(key, "(readdir)"),
                    error_node(format!("(readdir error: {e})")),
                );
                break;
            }
        }
    }
    for e in entries {
        let k = child(key, &String::from_utf8_lossy(&e.name));
        let a = match fs.lookup(dir, &e.name) {
            Ok(a) => a,
            Err(err) => {
                t.insert(k, error_node(format!("(lookup error: {err})")));
                continue;
            }
        };
        let (kind, digest) = match a.kind {
            FileType::Regular => match lanefs_read_all(fs, a.ino, a.size) {
                Ok(b) => ("file".to_string(), hash_bytes(&b)),
                Err(err) => (format!("file ({err})"), 0),
            },
            FileType::Symlink => match fs.readlink(a.ino) {
                Ok(l) => ("symlink".into(), hash_bytes(&l)),
                Err(err) => (format!("symlink (readlink error: {err})"), 0),
            },
            k => (kind_name(k).to_string(), 0),
        };
        t.insert(
            k.clone(),
            Node {
                kind,
                perm: u32::from(a.perm),
                nlink: u64::from(a.nlink),
                size: a.size,
                digest,
            },
        );
        if a.kind == FileType::Directory {
            walk_lanefs_dir(fs, a.ino, &k, t);
        }
    }
}

/// Every path that differs between two trees, one line each.
fn diff_trees(an: &str, a: &Tree, bn: &str, b: &Tree) -> Vec<String> {
    let mut out = Vec::new();
    for (p, x) in a {
        match b.get(p) {
            None => out.push(format!("{p}: {an} has {x}, {bn} has nothing")),
            Some(y) if x != y => out.push(format!("{p}: {an} has {x}, {bn} has {y}")),
            _ => {}
        }
    }
    for (p, y) in b {
        if !a.contains_key(p) {
            out.push(format!("{p}: {an} has nothing, {bn} has {y}"));
        }
    }
    out
}

/// Differences between the tree at the last fsync and what `who` shows, outside `/u`.
fn diff_durable(model: &Tree, who: &str, t: &Tree) -> Vec<String> {
    diff_trees("the model", &durable(model), who, &durable(t))
}

/// The part of a tree that fsync made durable: `/u` holds the changes made after the last
/// fsync, which a crash may or may not keep (so its entries and size are not compared).
fn durable(t: &Tree) -> Tree {
    t.iter()
        .filter(|(p, _)| !p.starts_with("/u/"))
        .map(|(p, n)| {
            let mut n = n.clone();
            if p == "/u" {
                n.size = 0;
            }
            (p.clone(), n)
        })
        .collect()
}

static MNT_SEQ: AtomicUsize = AtomicUsize::new(0);

fn fresh_mnt(td: &Path) -> PathBuf {
    td.join(format!("mnt{}", MNT_SEQ.fetch_add(1, Ordering::Relaxed)))
}

// ---------------------------------------------------------------------------------------
// Checks on one replayed copy.

/// What every replayer must leave: e2fsck -fn clean, no recovery pending, an empty orphan
/// list, the orphans' inodes free. Returns the copy's tree through the kernel and its
/// counts.
fn after_replay(
    td: &Path,
    img: &Path,
    who: &str,
    orphans: &[u64],
    f: &mut Failures,
) -> (Option<Tree>, Option<Counts>) {
    if let Err(e) = fsck_n(img) {
        f.add(format!("e2fsck -fn after {who} is not clean: {e}"));
    }
    match sb_info(img) {
        Ok(sb) => {
            f.check(!sb.needs_recovery, || {
                format!(
                    "after {who} the superblock still has needs_recovery (features: {})",
                    sb.features
                )
            });
            f.check(sb.first_orphan.is_none(), || {
                format!(
                    "after {who} the orphan list is not empty: first orphan inode {:?}",
                    sb.first_orphan
                )
            });
        }
        Err(e) => f.add(format!("dumpe2fs -h after {who}: {e}")),
    }
    for &ino in orphans {
        match inode_in_use(img, ino) {
            Ok(false) => {}
            Ok(true) => f.add(format!(
                "after {who} the open-unlinked inode {ino} is still marked in use (orphan list not processed)"
            )),
            Err(e) => f.add(format!("after {who}: {e}")),
        }
    }
    let c = match counts(img) {
        Ok(c) => {
            f.check(
                c.sb_blocks == c.group_blocks && c.sb_inodes == c.group_inodes,
                || {
                    format!(
                        "after {who} the superblock's free counts disagree with the groups': {c}"
                    )
                },
            );
            Some(c)
        }
        Err(e) => {
            f.add(format!("dumpe2fs after {who}: {e}"));
            None
        }
    };
    let t = match kernel_walk(img, &fresh_mnt(td)) {
        Ok(t) => Some(t),
        Err(e) => {
            f.add(format!(
                "the kernel cannot mount the image after {who} (ro,noload): {e}"
            ));
            None
        }
    };
    (t, c)
}

/// e2fsck -fy on `img`; `strict` also fails fixes beyond replay, lazy counters and
/// orphans (for logs lanefs wrote). Prints its exit code and output.
fn replay_e2fsck(test: &str, img: &Path, who: &str, strict: bool, f: &mut Failures) {
    let t = Instant::now();
    let r = e2fsck_fy(img);
    println!(
        "{test}: e2fsck -fy on {who} exited {} in {}:\n{}",
        r.code,
        secs(t),
        indent(&r.output)
    );
    f.check(r.code == 0 || r.code == 1, || {
        format!(
            "e2fsck -fy on {who} exited {} (0 or 1 expected):\n{}",
            r.code,
            indent(&r.output)
        )
    });
    f.check(r.recovered, || {
        format!("e2fsck -fy on {who} found no journal to recover (no \"recovering journal\")")
    });
    if !r.journal_complaints.is_empty() {
        f.add(format!(
            "e2fsck -fy on {who} complained about the journal: {:?}",
            r.journal_complaints
        ));
    }
    if !r.extra_fixes.is_empty() {
        if strict {
            f.add(format!(
                "e2fsck -fy on {who} fixed more than replay, lazy free counters and orphans: {:?}",
                r.extra_fixes
            ));
        } else {
            println!(
                "{test}: note: e2fsck -fy on {who} also fixed {:?}",
                r.extra_fixes
            );
        }
    }
}

/// Mount `img` with lanefs (which must replay), walk it, unmount. Returns lanefs's tree.
fn replay_lanefs(test: &str, img: &Path, who: &str, f: &mut Failures) -> Option<Tree> {
    let t = Instant::now();
    // A panic in replay is one more failure: the other replayers are still compared.
    let r = std::panic::catch_unwind(|| -> Result<(Tree, Option<String>), String> {
        let fs = Fs::mount_path(img, MountOptions::default())
            .map_err(|e| format!("lanefs refuses to mount {who}: {e}"))?;
        let tree = walk_lanefs(&fs);
        let unmount = fs
            .unmount()
            .err()
            .map(|e| format!("lanefs unmount of {who} failed: {e}"));
        Ok((tree, unmount))
    });
    let tree = match r {
        Ok(Ok((tree, unmount))) => {
            if let Some(e) = unmount {
                f.add(e);
            }
            tree
        }
        Ok(Err(e)) => {
            f.add(e);
            return None;
        }
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            f.add(format!("lanefs panicked mounting or walking {who}: {msg}"));
            return None;
        }
    };
    println!(
        "{test}: lanefs mounted, walked and unmounted {who} in {}",
        secs(t)
    );
    Some(tree)
}

/// Mount `img` read-write with the kernel (which replays), compare its live view with
/// `model`, unmount, and check what it left.
fn replay_kernel(
    td: &Path,
    img: &Path,
    who: &str,
    model: &Tree,
    orphans: &[u64],
    f: &mut Failures,
) -> (Option<Tree>, Option<Counts>) {
    let km = match KernelMount::mount(img, &fresh_mnt(td), "") {
        Ok(km) => km,
        Err(e) => {
            f.add(format!("{who}: the kernel refuses to mount: {e}"));
            return (None, None);
        }
    };
    let live = walk_host(&km.dir);
    f.diffs(
        &format!("{who}: the kernel's live view after its replay vs the last fsync"),
        diff_durable(model, "kernel", &live),
    );
    match km.unmount() {
        Ok(()) => after_replay(td, img, who, orphans, f),
        Err(e) => {
            f.add(format!("{who}: kernel unmount: {e}"));
            (None, None)
        }
    }
}

/// How much of `model` only the log holds: the unreplayed copy walked with `noload`.
/// Prints a warning when nothing is (replay would then be untested).
fn log_evidence(test: &str, td: &Path, label: &str, model: &Tree, img: &Path) {
    let commits = match log_commits(img) {
        Ok(n) => n.to_string(),
        Err(e) => format!("? ({})", e.lines().last().unwrap_or("")),
    };
    match kernel_walk(img, &fresh_mnt(td)) {
        Ok(home) => {
            let n = diff_durable(model, "home", &home).len();
            println!(
                "{test}: {label}: the log holds {commits} committed transactions; {n} entries \
                 differ between the last fsync and the unreplayed home locations"
            );
            if n == 0 {
                println!(
                    "{test}: {label}: WARNING: every change was already written home before the \
                     copy; replay is not needed, so this copy only shows that replay breaks nothing"
                );
            }
        }
        Err(e) => println!(
            "{test}: {label}: the log holds {commits} committed transactions; the unreplayed \
             home locations do not mount (ro,noload): {e}"
        ),
    }
}

/// Trees from several replayers must each equal the model outside `/u`, and agree with
/// each other on `/u` (what survives of the changes no fsync covered); together that is
/// full equality.
fn compare_all(f: &mut Failures, when: &str, model: &Tree, trees: &[(&str, Option<&Tree>)]) {
    for (who, t) in trees {
        if let Some(t) = t {
            f.diffs(
                &format!("{when}: {who} vs the tree at the last fsync"),
                diff_durable(model, who, t),
            );
        }
    }
    let volatile = |t: &Tree| -> Tree {
        t.iter()
            .filter(|(p, _)| *p == "/u" || p.starts_with("/u/"))
            .map(|(p, n)| (p.clone(), n.clone()))
            .collect()
    };
    let present: Vec<(&str, Tree)> = trees
        .iter()
        .filter_map(|(w, t)| t.map(|t| (*w, volatile(t))))
        .collect();
    for w in present.windows(2) {
        f.diffs(
            &format!(
                "{when}: {} vs {} on /u (written after the last fsync)",
                w[0].0, w[1].0
            ),
            diff_trees(w[0].0, &w[0].1, w[1].0, &w[1].1),
        );
    }
}

fn compare_counts(f: &mut Failures, when: &str, counts: &[(&str, Option<Counts>)]) {
    let present: Vec<(&str, Counts)> = counts
        .iter()
        .filter_map(|(w, c)| c.map(|c| (*w, c)))
        .collect();
    for w in present.windows(2) {
        f.check(w[0].1 == w[1].1, || {
            format!(
                "{when}: free counts differ: {}: {}; {}: {}",
                w[0].0, w[0].1, w[1].0, w[1].1
            )
        });
    }
}

// ---------------------------------------------------------------------------------------
// (1) The kernel's log, replayed by e2fsck and by lanefs.

fn host_write(p: &Path, data: &[u8], perm: u32, fsync: bool) -> std::fs::File {
    let mut fh = std::fs::File::create(p).unwrap_or_else(|e| panic!("create {}: {e}", p.display()));
    fh.write_all(data)
        .unwrap_or_else(|e| panic!("write {}: {e}", p.display()));
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(perm))
        .unwrap_or_else(|e| panic!("chmod {}: {e}", p.display()));
    if fsync {
        fh.sync_all()
            .unwrap_or_else(|e| panic!("fsync {}: {e}", p.display()));
    }
    fh
}

fn fsync_path(p: &Path) {
    std::fs::File::open(p)
        .and_then(|f| f.sync_all())
        .unwrap_or_else(|e| panic!("fsync {}: {e}", p.display()));
}

const SIZES: [usize; 9] = [0, 1, 100, 4095, 4096, 4097, 65536, 300_000, 1_500_000];
const PERMS: [u32; 5] = [0o644, 0o600, 0o755, 0o4755, 0o640];

/// Written and then made durable with `sync`.
fn kernel_phase1(m: &Path) {
    for d in ["a", "a/b", "a/b/c", "e", "h", "u"] {
        std::fs::create_dir(m.join(d)).expect("mkdir");
    }
    for (di, d) in ["a", "a/b", "a/b/c", "e"].iter().enumerate() {
        for (k, &sz) in SIZES.iter().enumerate() {
            let seed = (di * 100 + k) as u64;
            host_write(
                &m.join(d).join(format!("f{k}")),
                &content(seed, sz),
                PERMS[k % PERMS.len()],
                false,
            );
        }
    }
    std::os::unix::fs::symlink("a/b", m.join("e/short")).expect("symlink");
    std::os::unix::fs::symlink("l".repeat(300), m.join("e/long")).expect("symlink");
    std::fs::hard_link(m.join("a/f0"), m.join("a/b/hl")).expect("link");
    for i in 0..HTREE {
        let data = if i % 10 == 0 {
            format!("htree {i}\n").into_bytes()
        } else {
            Vec::new()
        };
        host_write(&m.join("h").join(hname(i)), &data, 0o644, false);
    }
    std::fs::rename(m.join("a/f3"), m.join("e/f3_renamed")).expect("rename");
    // Allocated and written home now, unlinked while open later: only the log frees it.
    host_write(&m.join("a/orphan_old"), &content(77, 8 << 20), 0o644, false);
}

/// Changes after the `sync`, committed by fsync only. Returns the open-unlinked files.
fn kernel_phase2(m: &Path) -> Vec<(u64, std::fs::File)> {
    let old = std::fs::File::open(m.join("a/orphan_old")).expect("open orphan_old");
    let old_ino = old.metadata().expect("fstat").ino();
    std::fs::create_dir(m.join("late")).expect("mkdir late");
    std::fs::create_dir(m.join("late/sub")).expect("mkdir late/sub");
    for i in 0..150usize {
        let len = (i * 997) % 20_000 + 1;
        host_write(
            &m.join(format!("late/l{i}")),
            &content(1000 + i as u64, len),
            0o644,
            true,
        );
    }
    for i in (0..HTREE).step_by(4) {
        std::fs::remove_file(m.join("h").join(hname(i))).expect("unlink htree entry");
    }
    for i in 0..1000 {
        let data = if i % 7 == 0 {
            format!("new {i}\n").into_bytes()
        } else {
            Vec::new()
        };
        host_write(
            &m.join(format!("h/new_{i:04}")),
            &data,
            0o644,
            !data.is_empty(),
        );
    }
    for k in 0..4 {
        std::fs::rename(
            m.join(format!("a/b/c/f{k}")),
            m.join(format!("late/sub/c{k}")),
        )
        .expect("rename into late/sub");
    }
    std::fs::rename(m.join("e"), m.join("late/e_moved")).expect("rename dir");
    std::fs::remove_file(m.join("a/f1")).expect("unlink a/f1");
    let fh = std::fs::OpenOptions::new()
        .write(true)
        .open(m.join("a/b/f7"))
        .expect("open a/b/f7");
    fh.set_len(1000).expect("truncate");
    fh.sync_all().expect("fsync");
    let fh = std::fs::OpenOptions::new()
        .write(true)
        .open(m.join("a/f7"))
        .expect("open a/f7");
    std::os::unix::fs::FileExt::write_all_at(&fh, b"overwritten in place", 1000)
        .expect("overwrite");
    fh.sync_all().expect("fsync");
    std::fs::set_permissions(m.join("a/f2"), std::fs::Permissions::from_mode(0o600))
        .expect("chmod");
    std::fs::hard_link(m.join("a/b/f5"), m.join("late/hl2")).expect("link");
    let new = host_write(
        &m.join("late/orphan_new"),
        &content(78, 1 << 20),
        0o644,
        true,
    );
    let new_ino = new.metadata().expect("fstat").ino();
    std::fs::remove_file(m.join("late/orphan_new")).expect("unlink orphan_new");
    std::fs::remove_file(m.join("a/orphan_old")).expect("unlink orphan_old");
    for d in [
        "",
        "a",
        "a/b",
        "a/b/c",
        "late",
        "late/sub",
        "late/e_moved",
        "h",
        "u",
    ] {
        fsync_path(&m.join(d));
    }
    vec![(old_ino, old), (new_ino, new)]
}

/// Changes after the last fsync: a crash may keep them or not.
fn kernel_phase3(m: &Path) {
    for i in 0..40u64 {
        host_write(
            &m.join(format!("u/x{i}")),
            &content(5000 + i, 5000),
            0o644,
            false,
        );
    }
}

/// Shut the mounted file system down with xfs_io (`-f`: flush the log first).
fn shutdown(m: &Path, flush_log: bool) {
    let cmd = if flush_log { "shutdown -f" } else { "shutdown" };
    let out = Command::new("xfs_io")
        .args(["-x", "-c", cmd])
        .arg(m)
        .output()
        .expect("run xfs_io");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && err.trim().is_empty(),
        "xfs_io -x -c '{cmd}' {} failed ({:?}): {}{err}",
        m.display(),
        out.status.code(),
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        std::fs::write(m.join("after_shutdown"), b"x").is_err(),
        "xfs_io -x -c '{cmd}' {}: the file system still accepts writes",
        m.display()
    );
}

fn kernel_case(test: &'static str, td: &Path, flush_log: bool, f: &mut Failures) {
    let t0 = Instant::now();
    let name = if flush_log { "logflush" } else { "nologflush" };
    let img = td.join(format!("{name}.img"));
    mkfs(&img, 256 << 20, &[]);
    let mnt = td.join(format!("{name}_mnt"));
    let crash = td.join(format!("{name}_crash.img"));

    let km = KernelMount::mount(&img, &mnt, "").expect("kernel mount rw");
    kernel_phase1(&mnt);
    // SAFETY: sync has no preconditions.
    unsafe { libc::sync() };
    let holders = kernel_phase2(&mnt);
    let orphans: Vec<u64> = holders.iter().map(|h| h.0).collect();
    let model = walk_host(&mnt);
    kernel_phase3(&mnt);
    shutdown(&mnt, flush_log);
    // The dead file system's committed buffers are still dirty in the loop device's cache;
    // unmounting writes them home. The image file now is what a power cut leaves.
    copy_image(&img, &crash);
    drop(holders);
    km.unmount().expect("unmount after shutdown");
    println!(
        "{test} [{name}]: kernel wrote {} entries, shut down ({}) in {}",
        model.len(),
        if flush_log {
            "xfs_io shutdown -f: log flushed"
        } else {
            "xfs_io shutdown: log not flushed"
        },
        secs(t0)
    );

    // Preconditions: the kernel left a log to replay.
    for (what, p) in [("after unmount", &img), ("at the crash", &crash)] {
        let sb = sb_info_or_panic(p);
        println!(
            "{test} [{name}]: {what}: needs_recovery {}, journal start {}, sequence {}, first orphan {:?}",
            sb.needs_recovery, sb.journal_start, sb.journal_seq, sb.first_orphan
        );
        assert!(
            sb.needs_recovery && sb.journal_start != 0,
            "{test} [{name}]: precondition: the kernel's image {what} needs no recovery \
             (features: {}; journal start {}): the shutdown did not leave a log ({})",
            sb.features,
            sb.journal_start,
            sb.journal
        );
    }
    log_evidence(test, td, &format!("[{name}]"), &model, &crash);

    // A: e2fsck replays and fixes.
    let a = td.join(format!("{name}_a_e2fsck.img"));
    copy_image(&crash, &a);
    replay_e2fsck(
        test,
        &a,
        &format!("[{name}] the kernel's log (copy A)"),
        false,
        f,
    );
    let (ta, ca) = after_replay(
        td,
        &a,
        &format!("[{name}] e2fsck -fy (copy A)"),
        &orphans,
        f,
    );

    // B: lanefs replays on mount.
    let b = td.join(format!("{name}_b_lanefs.img"));
    copy_image(&crash, &b);
    let who_b = format!("[{name}] lanefs replay (copy B)");
    let (tb, cb) = match replay_lanefs(
        test,
        &b,
        &format!("[{name}] the kernel's crash image (copy B)"),
        f,
    ) {
        Some(lt) => {
            f.diffs(
                &format!("[{name}] lanefs's own view after replay vs the kernel's last fsync"),
                diff_durable(&model, "lanefs", &lt),
            );
            after_replay(td, &b, &who_b, &orphans, f)
        }
        None => (None, None),
    };
    // C: the kernel replays its own log, for reference.
    let c = td.join(format!("{name}_c_kernel.img"));
    copy_image(&crash, &c);
    let (tc, cc) = replay_kernel(
        td,
        &c,
        &format!("[{name}] kernel mount (copy C)"),
        &model,
        &orphans,
        f,
    );
    compare_all(
        f,
        &format!("[{name}]"),
        &model,
        &[
            ("e2fsck (A)", ta.as_ref()),
            ("lanefs (B)", tb.as_ref()),
            ("kernel (C)", tc.as_ref()),
        ],
    );
    compare_counts(
        f,
        &format!("[{name}]"),
        &[("e2fsck (A)", ca), ("lanefs (B)", cb), ("kernel (C)", cc)],
    );
    let kept = |t: &Option<Tree>| match t {
        Some(t) => t
            .keys()
            .filter(|p| p.starts_with("/u/"))
            .count()
            .to_string(),
        None => "-".into(),
    };
    println!(
        "{test} [{name}]: /u files written after the last fsync (40) kept: e2fsck {}, lanefs {}, kernel {}",
        kept(&ta),
        kept(&tb),
        kept(&tc)
    );
    println!("{test} [{name}]: case done in {}", secs(t0));
}

#[test]
fn kernel_log_replayed_by_lanefs_like_e2fsck() {
    let test = "kernel_log_replayed_by_lanefs_like_e2fsck";
    let td = tempfile::tempdir().expect("tempdir");
    if !kernel_ready(test, td.path(), &["xfs_io"]) {
        return;
    }
    let _wd = common::watchdog(test, 900);
    let t0 = Instant::now();
    let mut f = Failures::new(test);
    kernel_case(test, td.path(), false, &mut f);
    kernel_case(test, td.path(), true, &mut f);
    println!("{test}: total {}", secs(t0));
    f.finish();
}

// ---------------------------------------------------------------------------------------
// A device that counts log writes and takes instant copies.

/// The image file under lanefs: writes pass straight through (pwrite), but a copy holds
/// every write off while it runs, so it is one instant of the device (what a power cut
/// leaves when every write issued so far has landed). Also counts bytes written into the
/// journal's log area.
struct SnapDevice {
    inner: FileDevice,
    path: PathBuf,
    gate: RwLock<()>,
    log: Vec<(u64, u64)>,
    log_bytes: AtomicU64,
}

impl SnapDevice {
    fn open(path: &Path) -> Arc<SnapDevice> {
        Arc::new(SnapDevice {
            inner: FileDevice::open(path, false).expect("open image"),
            path: path.to_path_buf(),
            gate: RwLock::new(()),
            log: journal_log_ranges(path),
            log_bytes: AtomicU64::new(0),
        })
    }

    fn log_blocks(&self) -> u64 {
        self.log_bytes.load(Ordering::Relaxed) / BS
    }

    fn log_len(&self) -> u64 {
        self.log.iter().map(|(a, b)| (b - a) / BS).sum()
    }

    fn snapshot(&self, dst: &Path) {
        let _g = self.gate.write().unwrap_or_else(|e| e.into_inner());
        copy_image(&self.path, dst);
    }
}

impl BlockDevice for SnapDevice {
    fn read_at(&self, off: u64, buf: &mut [u8]) -> lanefs::Result<()> {
        self.inner.read_at(off, buf)
    }
    fn write_at(&self, off: u64, buf: &[u8]) -> lanefs::Result<()> {
        let _g = self.gate.read().unwrap_or_else(|e| e.into_inner());
        let end = off + buf.len() as u64;
        let n: u64 = self
            .log
            .iter()
            .map(|&(a, b)| end.min(b).saturating_sub(off.max(a)))
            .sum();
        self.log_bytes.fetch_add(n, Ordering::Relaxed);
        self.inner.write_at(off, buf)
    }
    fn flush(&self) -> lanefs::Result<()> {
        let _g = self.gate.read().unwrap_or_else(|e| e.into_inner());
        self.inner.flush()
    }
    fn size(&self) -> u64 {
        self.inner.size()
    }
}

fn mount_snap(dev: &Arc<SnapDevice>) -> Arc<Fs> {
    let d: Arc<dyn BlockDevice> = dev.clone();
    Fs::mount(
        d,
        MountOptions {
            commit_interval: Duration::ZERO,
            ..Default::default()
        },
    )
    .expect("lanefs mount")
}

// ---------------------------------------------------------------------------------------
// lanefs helpers.

const ME: Owner = Owner {
    uid: 0,
    gid: 0,
    umask: 0,
};

fn lwrite(fs: &Fs, ino: Ino, off: u64, data: &[u8]) {
    let mut done = 0;
    while done < data.len() {
        let end = (done + (1 << 20)).min(data.len());
        let n = fs
            .write(ino, off + done as u64, &data[done..end])
            .expect("lanefs write");
        assert!(n > 0, "lanefs wrote nothing");
        done += n;
    }
}

/// Create `name` in `dir` with `data`, fsync it if asked, release it. Returns its inode.
fn lput(fs: &Fs, dir: Ino, name: &str, data: &[u8], perm: u16, fsync: bool) -> Ino {
    let a = fs
        .create(dir, name.as_bytes(), perm, ME)
        .unwrap_or_else(|e| panic!("lanefs create {name}: {e}"));
    lwrite(fs, a.ino, 0, data);
    if fsync {
        fs.fsync(a.ino, false).expect("lanefs fsync");
    }
    fs.release(a.ino).expect("lanefs release");
    a.ino
}

fn lmkdir(fs: &Fs, dir: Ino, name: &str) -> Ino {
    fs.mkdir(dir, name.as_bytes(), 0o755, ME)
        .unwrap_or_else(|e| panic!("lanefs mkdir {name}: {e}"))
        .ino
}

fn llook(fs: &Fs, path: &str) -> Ino {
    let mut ino = ROOT_INO;
    for c in path.split('/').filter(|c| !c.is_empty()) {
        ino = fs
            .lookup(ino, c.as_bytes())
            .unwrap_or_else(|e| panic!("lanefs lookup {path}: {e}"))
            .ino;
    }
    ino
}

// ---------------------------------------------------------------------------------------
// (2) lanefs's log, replayed by e2fsck, the kernel and lanefs.

/// One copy of a lanefs image taken while mounted, with what it must replay to.
struct Snap {
    label: String,
    img: PathBuf,
    model: Tree,
    orphans: Vec<u64>,
}

fn take_snap(
    test: &str,
    td: &Path,
    dev: &SnapDevice,
    fs: &Fs,
    label: &str,
    orphans: &[u64],
) -> Snap {
    let model = walk_lanefs(fs);
    let img = td.join(format!("{label}.img"));
    dev.snapshot(&img);
    println!(
        "{test}: copied the image at {label}: {} entries, {} log blocks written so far, journal_stats {:?}",
        model.len(),
        dev.log_blocks(),
        fs.journal_stats()
    );
    Snap {
        label: label.to_string(),
        img,
        model,
        orphans: orphans.to_vec(),
    }
}

/// The image lanefs left must need recovery: committed transactions in its log.
fn check_needs_recovery(f: &mut Failures, s: &Snap) -> Option<SbInfo> {
    match sb_info(&s.img) {
        Ok(sb) => {
            println!(
                "{}: needs_recovery {}, journal start {}, sequence {}, first orphan {:?}",
                s.label, sb.needs_recovery, sb.journal_start, sb.journal_seq, sb.first_orphan
            );
            f.check(sb.needs_recovery && sb.journal_start != 0, || {
                format!(
                    "{}: the copy taken while lanefs was mounted needs no recovery \
                     (needs_recovery {}, journal start {}; features: {}): lanefs left no committed log",
                    s.label, sb.needs_recovery, sb.journal_start, sb.features
                )
            });
            if !s.orphans.is_empty() {
                f.check(sb.first_orphan.is_some() || sb.needs_recovery, || {
                    format!(
                        "{}: open-unlinked inodes {:?} are neither on the on-disk orphan list nor in a log to replay",
                        s.label, s.orphans
                    )
                });
            }
            Some(sb)
        }
        Err(e) => {
            f.add(format!("{}: dumpe2fs -h: {e}", s.label));
            None
        }
    }
}

/// e2fsck (A), optionally the kernel (B), and lanefs (C) each replay a copy of `s`.
fn verify_snap(test: &'static str, td: &Path, s: &Snap, f: &mut Failures) {
    let t0 = Instant::now();
    check_needs_recovery(f, s);
    let l = &s.label;
    log_evidence(test, td, l, &s.model, &s.img);

    let a = td.join(format!("{l}_a_e2fsck.img"));
    copy_image(&s.img, &a);
    replay_e2fsck(test, &a, &format!("{l} (copy A)"), true, f);
    let (ta, ca) = after_replay(td, &a, &format!("{l}: e2fsck -fy (copy A)"), &s.orphans, f);

    let b = td.join(format!("{l}_b_kernel.img"));
    copy_image(&s.img, &b);
    let (tb, cb) = replay_kernel(
        td,
        &b,
        &format!("{l}: kernel mount (copy B)"),
        &s.model,
        &s.orphans,
        f,
    );

    let c = td.join(format!("{l}_c_lanefs.img"));
    copy_image(&s.img, &c);
    let (tc, cc) = match replay_lanefs(test, &c, &format!("{l} (copy C)"), f) {
        Some(lt) => {
            f.diffs(
                &format!("{l}: lanefs's own view after replay vs lanefs at the copy"),
                diff_durable(&s.model, "lanefs", &lt),
            );
            after_replay(
                td,
                &c,
                &format!("{l}: lanefs replay (copy C)"),
                &s.orphans,
                f,
            )
        }
        None => (None, None),
    };
    compare_all(
        f,
        l,
        &s.model,
        &[
            ("e2fsck (A)", ta.as_ref()),
            ("kernel (B)", tb.as_ref()),
            ("lanefs (C)", tc.as_ref()),
        ],
    );
    compare_counts(
        f,
        l,
        &[("e2fsck (A)", ca), ("kernel (B)", cb), ("lanefs (C)", cc)],
    );
    println!("{test}: {l} verified in {}", secs(t0));
}

/// Files, symlinks, a hard link, an htree directory and renames, all fsync-ed; then a
/// few changes in /u that no fsync covers.
fn lanefs_phase1(fs: &Fs) -> Ino {
    let a = lmkdir(fs, ROOT_INO, "a");
    let ab = lmkdir(fs, a, "b");
    let e = lmkdir(fs, ROOT_INO, "e");
    let h = lmkdir(fs, ROOT_INO, "h");
    let u = lmkdir(fs, ROOT_INO, "u");
    for (di, d) in [a, ab, e].into_iter().enumerate() {
        for (k, &sz) in SIZES.iter().enumerate() {
            let seed = (di * 100 + k) as u64;
            lput(
                fs,
                d,
                &format!("f{k}"),
                &content(seed, sz),
                PERMS[k % PERMS.len()] as u16,
                true,
            );
        }
    }
    fs.symlink(e, b"short", b"a/b", ME).expect("symlink");
    fs.symlink(e, b"long", "l".repeat(300).as_bytes(), ME)
        .expect("symlink");
    let f0 = fs.lookup(a, b"f0").expect("lookup").ino;
    fs.link(f0, ab, b"hl").expect("link");
    for i in 0..HTREE {
        let data = if i % 10 == 0 {
            format!("htree {i}\n").into_bytes()
        } else {
            Vec::new()
        };
        lput(fs, h, &hname(i), &data, 0o644, false);
    }
    fs.rename(a, b"f3", e, b"f3_renamed").expect("rename");
    let victim = lput(fs, a, "victim", &content(77, 2 << 20), 0o644, true);
    for d in [ROOT_INO, a, ab, e, h, u] {
        fs.fsync(d, false).expect("fsync dir");
    }
    for i in 0..20u64 {
        lput(
            fs,
            u,
            &format!("p1_{i}"),
            &content(3000 + i, 3000),
            0o644,
            false,
        );
    }
    victim
}

/// Renames, unlinks, truncation, an overwrite, htree churn and two open-unlinked files,
/// all fsync-ed; then more changes in /u. Returns the orphans, still open.
fn lanefs_phase2(fs: &Fs, victim: Ino) -> Vec<Ino> {
    let a = llook(fs, "/a");
    let ab = llook(fs, "/a/b");
    let h = llook(fs, "/h");
    let u = llook(fs, "/u");
    let late = lmkdir(fs, ROOT_INO, "late");
    let sub = lmkdir(fs, late, "sub");
    for i in 0..200usize {
        let len = (i * 997) % 20_000 + 1;
        lput(
            fs,
            late,
            &format!("l{i}"),
            &content(1000 + i as u64, len),
            0o644,
            true,
        );
    }
    for i in (0..HTREE).step_by(4) {
        fs.unlink(h, hname(i).as_bytes())
            .expect("unlink htree entry");
    }
    for i in 0..1000 {
        let data = if i % 7 == 0 {
            format!("new {i}\n").into_bytes()
        } else {
            Vec::new()
        };
        lput(
            fs,
            h,
            &format!("new_{i:04}"),
            &data,
            0o644,
            !data.is_empty(),
        );
    }
    for k in 0..4 {
        fs.rename(
            ab,
            format!("f{k}").as_bytes(),
            sub,
            format!("c{k}").as_bytes(),
        )
        .expect("rename into late/sub");
    }
    fs.rename(ROOT_INO, b"e", late, b"e_moved")
        .expect("rename dir");
    fs.unlink(a, b"f1").expect("unlink a/f1");
    let f7 = fs.lookup(ab, b"f7").expect("lookup").ino;
    fs.setattr(
        f7,
        &SetAttr {
            size: Some(1000),
            ..Default::default()
        },
    )
    .expect("truncate");
    fs.fsync(f7, false).expect("fsync");
    let af7 = fs.lookup(a, b"f7").expect("lookup").ino;
    lwrite(fs, af7, 1000, b"overwritten in place");
    fs.fsync(af7, false).expect("fsync");
    let f2 = fs.lookup(a, b"f2").expect("lookup").ino;
    fs.setattr(
        f2,
        &SetAttr {
            perm: Some(0o600),
            ..Default::default()
        },
    )
    .expect("chmod");
    let f5 = fs.lookup(ab, b"f5").expect("lookup").ino;
    fs.link(f5, late, b"hl2").expect("link");
    // Open-unlinked: one opened after it was written and synced, one held since create.
    fs.open(victim).expect("open victim");
    fs.unlink(a, b"victim").expect("unlink victim");
    fs.fsync(a, false).expect("fsync a");
    let tmp = fs
        .create(late, b"tmp_orphan", 0o644, ME)
        .expect("create tmp_orphan");
    lwrite(fs, tmp.ino, 0, &content(78, 1 << 20));
    fs.fsync(tmp.ino, false).expect("fsync tmp_orphan");
    fs.unlink(late, b"tmp_orphan").expect("unlink tmp_orphan");
    fs.fsync(late, false).expect("fsync late");
    for d in [ROOT_INO, a, ab, late, sub, h] {
        fs.fsync(d, false).expect("fsync dir");
    }
    for i in 0..20u64 {
        lput(
            fs,
            u,
            &format!("p2_{i}"),
            &content(4000 + i, 3000),
            0o644,
            false,
        );
    }
    vec![victim, tmp.ino]
}

#[test]
fn lanefs_log_replayed_by_kernel_and_e2fsck() {
    let test = "lanefs_log_replayed_by_kernel_and_e2fsck";
    let td = tempfile::tempdir().expect("tempdir");
    if !kernel_ready(test, td.path(), &[]) {
        return;
    }
    let _wd = common::watchdog(test, 900);
    let t0 = Instant::now();
    let td = td.path();
    let img = td.join("lanefs.img");
    mkfs(&img, 256 << 20, &[]);
    let dev = SnapDevice::open(&img);
    let fs = mount_snap(&dev);
    let victim = lanefs_phase1(&fs);
    let s1 = take_snap(test, td, &dev, &fs, "snap1_tree", &[]);
    let orphans = lanefs_phase2(&fs, victim);
    let s2 = take_snap(test, td, &dev, &fs, "snap2_orphans", &orphans);
    for o in orphans {
        fs.release(o).expect("release orphan");
    }
    fs.unmount().expect("lanefs unmount");
    println!("{test}: lanefs wrote both phases in {}", secs(t0));

    let mut f = Failures::new(test);
    verify_snap(test, td, &s1, &mut f);
    verify_snap(test, td, &s2, &mut f);
    println!("{test}: total {}", secs(t0));
    f.finish();
}

// ---------------------------------------------------------------------------------------
// (3) A small log wrapped several times.

/// Wraps of the 1024-block log at which a copy is taken (mid-wrap).
const WRAP_POINTS: [f64; 3] = [1.5, 2.5, 3.5];
/// Stop once the log has wrapped this often (and every copy is taken).
const WRAPS: f64 = 4.0;
/// Give up after this many iterations.
const MAX_ITERS: usize = 1500;
/// If no log block was written after this many iterations, lanefs writes no log.
const NO_LOG_ITERS: usize = 300;

#[test]
fn lanefs_log_wraps() {
    let test = "lanefs_log_wraps";
    let td = tempfile::tempdir().expect("tempdir");
    if !kernel_ready(test, td.path(), &[]) {
        return;
    }
    let _wd = common::watchdog(test, 900);
    let t0 = Instant::now();
    let td = td.path();
    let img = td.join("wrap.img");
    mkfs(&img, 128 << 20, &["-J", "size=4"]);
    let dev = SnapDevice::open(&img);
    let jlen = dev.log_len();
    println!("{test}: journal log area {jlen} blocks");
    let mut f = Failures::new(test);
    let fs = mount_snap(&dev);

    let dirs: Vec<Ino> = (0..4)
        .map(|k| lmkdir(&fs, ROOT_INO, &format!("w{k}")))
        .collect();
    lmkdir(&fs, ROOT_INO, "u");
    fs.fsync(ROOT_INO, false).expect("fsync root");
    // Live files: name -> directory index.
    let mut live: BTreeMap<String, usize> = BTreeMap::new();
    let mut subdirs: Vec<(usize, String)> = Vec::new();
    let mut snaps = Vec::new();
    let mut fsyncs = 0u64;
    let mut iters = 0;
    for i in 0..MAX_ITERS {
        iters = i + 1;
        let d = i % dirs.len();
        let name = format!("f{i:05}");
        lput(
            &fs,
            dirs[d],
            &name,
            &content(i as u64, 50 + (i * 37) % 6000),
            0o644,
            true,
        );
        fsyncs += 1;
        live.insert(name, d);
        if i % 3 == 0 && i >= 10 {
            let old = format!("f{:05}", i - 10);
            if let Some(od) = live.remove(&old) {
                fs.unlink(dirs[od], old.as_bytes()).expect("unlink");
                fs.fsync(dirs[od], false).expect("fsync dir");
                fsyncs += 1;
            }
        }
        if i % 7 == 0 && i >= 5 {
            let old = format!("f{:05}", i - 5);
            if let Some(od) = live.remove(&old) {
                let nd = (od + 1) % dirs.len();
                let new = format!("r{i:05}");
                fs.rename(dirs[od], old.as_bytes(), dirs[nd], new.as_bytes())
                    .expect("rename");
                fs.fsync(dirs[nd], false).expect("fsync dir");
                fsyncs += 1;
                live.insert(new, nd);
            }
        }
        if i % 11 == 0 {
            let s = format!("s{i:05}");
            lmkdir(&fs, dirs[d], &s);
            fs.fsync(dirs[d], false).expect("fsync dir");
            fsyncs += 1;
            subdirs.push((d, s));
        }
        if i % 13 == 0 && subdirs.len() > 2 {
            let (sd, s) = subdirs.remove(0);
            fs.rmdir(dirs[sd], s.as_bytes()).expect("rmdir");
            fs.fsync(dirs[sd], false).expect("fsync dir");
            fsyncs += 1;
        }
        let wraps = dev.log_blocks() as f64 / jlen as f64;
        if snaps.len() < WRAP_POINTS.len() && wraps >= WRAP_POINTS[snaps.len()] {
            // A change no fsync covers, then the copy.
            lput(
                &fs,
                llook(&fs, "/u"),
                &format!("x{i}"),
                b"unsynced",
                0o644,
                false,
            );
            let label = format!("wrap{:.1}", wraps);
            snaps.push(take_snap(test, td, &dev, &fs, &label, &[]));
        }
        if snaps.len() == WRAP_POINTS.len() && wraps >= WRAPS {
            break;
        }
        if i + 1 == NO_LOG_ITERS && dev.log_blocks() == 0 {
            f.add(format!(
                "lanefs wrote no block into the journal's log area after {iters} iterations ({fsyncs} fsyncs)"
            ));
            break;
        }
    }
    let wraps = dev.log_blocks() as f64 / jlen as f64;
    println!(
        "{test}: {iters} iterations, {fsyncs} fsyncs, {} log blocks = {wraps:.2} wraps of {jlen}, journal_stats {:?}, in {}",
        dev.log_blocks(),
        fs.journal_stats(),
        secs(t0)
    );
    f.check(wraps >= WRAPS, || {
        format!(
            "the log wrapped only {wraps:.2} times ({} log blocks into a {jlen}-block log over {fsyncs} fsyncs; {WRAPS} wanted)",
            dev.log_blocks()
        )
    });
    if snaps.is_empty() {
        // Still check what a crash at the end leaves.
        snaps.push(take_snap(test, td, &dev, &fs, "end", &[]));
    }
    fs.unmount().expect("lanefs unmount");
    for s in &snaps {
        verify_snap(test, td, s, &mut f);
    }
    println!("{test}: total {}", secs(t0));
    f.finish();
}
