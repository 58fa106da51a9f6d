//! Device tables (`mkfs --device-table FILE`): the makedevs format genext2fs (`-D`),
//! Buildroot's makedevs, mkfs.jffs2 and mkfs.ubifs read, one entry a line:
//!
//! ```text
//! # path       type mode uid gid major minor start increment count
//! /dev         d    755  0   0   -     -     -     -         -
//! /dev/console c    600  0   0   5     1     -     -         -
//! /dev/tty     c    666  0   0   4     0     0     1         6
//! /etc/shadow  f    600  0   0   -     -     -     -         -
//! ```
//!
//! `#` starts a comment (anywhere on a line, as genext2fs reads it); blank lines are
//! skipped. The first three fields are required, the rest may be left out or written
//! `-`: uid and gid 0, major and minor 0, start 0, increment 1, count 0. The mode is
//! octal and only its permission bits (07777) are kept, as genext2fs keeps them; the
//! other numbers are decimal. Types: `f` regular file, `d` directory, `c` character
//! device, `b` block device, `p` fifo, `s` socket. A `c`, `b`, `p` or `s` line with a
//! count makes `count` entries named PATH`start` .. PATH`start+count-1`, the n-th with
//! minor `minor + n * increment`, as makedevs, mkfs.jffs2 and genext2fs's manual say
//! (genext2fs's code stops the series at `count` itself when `start` is not 0).
//!
//! Paths are taken from the image's root (a leading `/` or not). A later line for the
//! same path replaces an earlier one of the same type. Every problem is an error naming
//! the file and line: a line lanefs cannot read, a type or number it does not take, a
//! path listed as two types, a path below a non-directory.

use crate::error::{CmdResult, Context, Error, Failure};
use lanefs::FileType;
use std::collections::BTreeMap;
use std::path::Path;

/// Largest major number an ext4 inode (Linux's `new_encode_dev`) holds.
const MAX_MAJOR: u64 = 0xfff;
/// Largest minor number.
const MAX_MINOR: u64 = 0xf_ffff;
/// Most entries one line's series makes.
const MAX_SERIES: u64 = 1 << 20;

/// One entry of the table: what its path must be in the image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Line {
    /// Its line number in the table (from 1).
    pub no: usize,
    pub kind: FileType,
    /// Permission bits (07777).
    pub perm: u16,
    pub uid: u32,
    pub gid: u32,
    /// Major and minor numbers (character and block devices).
    pub major: u32,
    pub minor: u32,
}

impl Line {
    /// Its device number in ext4's encoding (Linux `new_encode_dev`); 0 for other types.
    pub fn rdev(&self) -> u32 {
        if !matches!(self.kind, FileType::CharDevice | FileType::BlockDevice) {
            return 0;
        }
        crate::hostsys::ext4_rdev(self.major, self.minor)
    }
}

/// A path of the table: its own line, if listed, and the paths below it.
#[derive(Debug, Default)]
pub struct Node {
    pub line: Option<Line>,
    /// The first line that names this path or one below it (for messages about a
    /// directory the table needs but does not list).
    pub first: usize,
    pub children: BTreeMap<Vec<u8>, Node>,
}

/// A parsed device table.
#[derive(Debug)]
pub struct Table {
    /// The file as given, for messages.
    pub name: String,
    /// The image's root directory.
    pub root: Node,
}

/// The file type of a table's type letter.
fn type_letter(t: &[u8]) -> Result<FileType, String> {
    Ok(match t {
        b"f" => FileType::Regular,
        b"d" => FileType::Directory,
        b"c" => FileType::CharDevice,
        b"b" => FileType::BlockDevice,
        b"p" => FileType::Fifo,
        b"s" => FileType::Socket,
        t => {
            let t = String::from_utf8_lossy(t);
            return Err(format!("type '{t}' is not one of f, d, c, b, p, s"));
        }
    })
}

/// What `kind` is called in messages.
pub fn kind_name(kind: FileType) -> &'static str {
    match kind {
        FileType::Regular => "regular file",
        FileType::Directory => "directory",
        FileType::CharDevice => "character device",
        FileType::BlockDevice => "block device",
        FileType::Fifo => "fifo",
        FileType::Socket => "socket",
        FileType::Symlink => "symlink",
    }
}

/// A number field: decimal digits, or `-` (or absent) for `default`.
fn number(field: Option<&[u8]>, what: &str, default: u64, radix: u32) -> Result<u64, String> {
    let Some(f) = field.filter(|f| *f != b"-") else {
        return Ok(default);
    };
    let text = String::from_utf8_lossy(f);
    let digits = |c: &u8| c.is_ascii_digit() && (radix == 10 || *c < b'8');
    if f.is_empty() || !f.iter().all(digits) {
        let how = if radix == 8 { "an octal" } else { "a decimal" };
        return Err(format!("{what} '{text}' is not {how} number"));
    }
    u64::from_str_radix(&text, radix).map_err(|_| format!("{what} '{text}' is too large"))
}

/// Split a table path into its names; the root has none.
fn names(path: &[u8]) -> Result<Vec<&[u8]>, String> {
    let mut out = Vec::new();
    for n in path.split(|&c| c == b'/').filter(|n| !n.is_empty()) {
        if n == b"." || n == b".." {
            return Err("a path holding . or .. (paths are taken from the image's root)".into());
        }
        if n.len() > 255 {
            return Err("a name longer than 255 bytes".into());
        }
        out.push(n);
    }
    Ok(out)
}

impl Table {
    /// Read and parse the table at `path`.
    pub fn read(path: &Path) -> CmdResult<Table> {
        let text = std::fs::read(path).ctx(path.display())?;
        Table::parse(&path.display().to_string(), &text)
    }

    /// `FILE:LINE`, what a message about line `no` names.
    pub fn at(&self, no: usize) -> String {
        format!("{}:{no}", self.name)
    }

    /// Parse table text; `name` is how messages name it.
    pub fn parse(name: &str, text: &[u8]) -> CmdResult<Table> {
        let mut table = Table {
            name: name.to_string(),
            root: Node::default(),
        };
        for (i, raw) in text.split(|&c| c == b'\n').enumerate() {
            let no = i + 1;
            let line = raw.split(|&c| c == b'#').next().unwrap_or_default();
            table
                .add_line(no, line)
                .map_err(|e| Failure::new(table.at(no), Error::msg(e)))?;
        }
        Ok(table)
    }

    /// Add line `no` (its comment cut off) to the table.
    fn add_line(&mut self, no: usize, line: &[u8]) -> Result<(), String> {
        let fields: Vec<&[u8]> = line
            .split(|c| c.is_ascii_whitespace())
            .filter(|f| !f.is_empty())
            .collect();
        if fields.is_empty() {
            return Ok(());
        }
        if fields.len() < 3 || fields.len() > 10 {
            return Err(format!(
                "{} fields: a line is PATH TYPE MODE [UID GID MAJOR MINOR START INCREMENT COUNT]",
                fields.len()
            ));
        }
        let path = fields[0];
        let shown = String::from_utf8_lossy(path).into_owned();
        let kind = type_letter(fields[1]).map_err(|e| format!("{shown}: {e}"))?;
        let num = |i: usize, what: &str, default: u64, radix: u32| {
            number(fields.get(i).copied(), what, default, radix)
                .map_err(|e| format!("{shown}: {e}"))
        };
        let id = |i: usize, what: &str| -> Result<u32, String> {
            let n = num(i, what, 0, 10)?;
            u32::try_from(n).map_err(|_| format!("{shown}: {what} {n} is more than 32 bits"))
        };
        if fields[2] == b"-" {
            return Err(format!("{shown}: the mode is required"));
        }
        // Only the permission bits, as genext2fs keeps them (a table may give 40755).
        let perm = (num(2, "mode", 0, 8)? & 0o7777) as u16;
        let (uid, gid) = (id(3, "uid")?, id(4, "gid")?);
        let major = num(5, "major", 0, 10)?;
        let minor = num(6, "minor", 0, 10)?;
        let start = num(7, "start", 0, 10)?;
        let increment = num(8, "increment", 1, 10)?;
        let count = num(9, "count", 0, 10)?;
        let device = matches!(kind, FileType::CharDevice | FileType::BlockDevice);
        if count > 0 && matches!(kind, FileType::Regular | FileType::Directory) {
            return Err(format!(
                "{shown}: a count (a series of entries) is for c, b, p and s lines"
            ));
        }
        if count > MAX_SERIES {
            return Err(format!(
                "{shown}: count {count} is more than one line makes ({MAX_SERIES})"
            ));
        }
        let minor_at = |n: u64| minor.saturating_add(n.saturating_mul(increment));
        let last_minor = minor_at(count.saturating_sub(1));
        if device && major > MAX_MAJOR {
            return Err(format!(
                "{shown}: major {major} is more than ext4 holds ({MAX_MAJOR})"
            ));
        }
        if device && last_minor > MAX_MINOR {
            return Err(format!(
                "{shown}: minor {last_minor} is more than ext4 holds ({MAX_MINOR})"
            ));
        }
        let names = names(path).map_err(|e| format!("{shown}: {e}"))?;
        let make = |minor: u64| Line {
            no,
            kind,
            perm,
            uid,
            gid,
            major: if device { major as u32 } else { 0 },
            minor: if device { minor as u32 } else { 0 },
        };
        if count == 0 {
            return self.insert(&names, make(minor), &shown);
        }
        self.insert_series(&names, (start, count), |n| make(minor_at(n)), &shown)
    }

    /// Put the `count` entries of a series at `names` with the numbers `start`,
    /// `start + 1`, ... appended to the last name; entry `n` is `line(n)`.
    fn insert_series(
        &mut self,
        names: &[&[u8]],
        (start, count): (u64, u64),
        line: impl Fn(u64) -> Line,
        shown: &str,
    ) -> Result<(), String> {
        let Some((last, dirs)) = names.split_last() else {
            return Err("the root must be a directory (d)".into());
        };
        if start.checked_add(count).is_none() {
            return Err(format!("{shown}: start {start} is too large"));
        }
        for n in 0..count {
            let mut name = last.to_vec();
            name.extend_from_slice((start + n).to_string().as_bytes());
            let shown = format!("{shown}{}", start + n);
            if name.len() > 255 {
                return Err(format!("{shown}: a name longer than 255 bytes"));
            }
            let mut path: Vec<&[u8]> = dirs.to_vec();
            path.push(&name);
            self.insert(&path, line(n), &shown)?;
        }
        Ok(())
    }

    /// Put `line` at `path` (its names), shown as `shown`.
    fn insert(&mut self, path: &[&[u8]], line: Line, shown: &str) -> Result<(), String> {
        if path.is_empty() && line.kind != FileType::Directory {
            return Err("the root must be a directory (d)".into());
        }
        let mut node = &mut self.root;
        let mut walked = Vec::new();
        for name in path {
            if let Some(up) = node.line.as_ref().filter(|l| l.kind != FileType::Directory) {
                let dir = String::from_utf8_lossy(&walked.join(&b'/')).into_owned();
                return Err(format!(
                    "{shown}: /{dir} is a {} (line {}), not a directory",
                    kind_name(up.kind),
                    up.no
                ));
            }
            if node.first == 0 {
                node.first = line.no;
            }
            walked.push(name.to_vec());
            node = node.children.entry(name.to_vec()).or_default();
        }
        if node.first == 0 {
            node.first = line.no;
        }
        if let Some(old) = &node.line {
            if old.kind != line.kind {
                return Err(format!(
                    "{shown}: listed as a {} on line {}, here as a {}",
                    kind_name(old.kind),
                    old.no,
                    kind_name(line.kind)
                ));
            }
        }
        if line.kind != FileType::Directory {
            if let Some(below) = node.children.values().next() {
                return Err(format!(
                    "{shown}: a {} here, but line {} puts entries below it",
                    kind_name(line.kind),
                    below.first
                ));
            }
        }
        node.line = Some(line);
        Ok(())
    }

    /// Whether the entry at `node` (shown as `shown`) may be what the source tree has
    /// there (`host`: its type, `None` when the tree has nothing there). `Ok` when the
    /// entry is to be copied with the line's owner and mode, or made from the line.
    pub fn judge(&self, node: &Node, shown: &str, host: Option<FileType>) -> CmdResult<()> {
        let fail = |no: usize, why: String| Err(Failure::new(self.at(no), Error::msg(why)));
        match (&node.line, host) {
            (Some(l), None) if l.kind == FileType::Regular => fail(
                l.no,
                format!(
                    "{shown}: no such regular file in the source tree (a table makes \
                     directories, devices, fifos and sockets, not files)"
                ),
            ),
            (Some(l), Some(h)) if h != l.kind => fail(
                l.no,
                format!(
                    "{shown}: the source tree has a {} there, the table a {}",
                    kind_name(h),
                    kind_name(l.kind)
                ),
            ),
            (Some(_), _) => Ok(()),
            (None, None) => fail(
                node.first,
                format!(
                    "{shown}: no such directory in the source tree (list it as a d line to \
                     make it)"
                ),
            ),
            (None, Some(FileType::Directory)) => Ok(()),
            (None, Some(h)) => fail(
                node.first,
                format!(
                    "{shown}: the source tree has a {} there, not a directory",
                    kind_name(h)
                ),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> CmdResult<Table> {
        Table::parse("t", text.as_bytes())
    }

    fn line<'a>(t: &'a Table, path: &[&str]) -> Option<&'a Line> {
        let mut node = &t.root;
        for n in path {
            node = node.children.get(n.as_bytes())?;
        }
        node.line.as_ref()
    }

    fn error(text: &str) -> String {
        parse(text).expect_err(text).line("mkfs")
    }

    #[test]
    fn fields_default_and_dashes() {
        let t = parse(
            "# comment\n\n/dev d 755 0 0 - - - - -\n/dev/console c 600 1 2 5 1 # trailing\n\
             etc\td\t40750\n/etc/shadow f 600 0 42\n/ d 0711 7 8\n",
        )
        .unwrap();
        let dev = line(&t, &["dev"]).unwrap();
        assert_eq!(
            (dev.kind, dev.perm, dev.uid, dev.no),
            (FileType::Directory, 0o755, 0, 3)
        );
        let c = line(&t, &["dev", "console"]).unwrap();
        assert_eq!(
            (c.perm, c.uid, c.gid, c.major, c.minor),
            (0o600, 1, 2, 5, 1)
        );
        assert_eq!(c.rdev(), (5 << 8) | 1);
        assert_eq!(line(&t, &["etc"]).unwrap().perm, 0o750);
        assert_eq!(line(&t, &["etc", "shadow"]).unwrap().gid, 42);
        let root = t.root.line.as_ref().unwrap();
        assert_eq!((root.perm, root.uid, root.gid), (0o711, 7, 8));
    }

    #[test]
    fn series_follow_makedevs() {
        let t = parse("/dev d 755\n/dev/hda b 640 0 0 3 1 1 1 15\n/dev/tty c 666 0 0 4 0 0 2 3\n")
            .unwrap();
        assert!(line(&t, &["dev", "hda0"]).is_none());
        assert_eq!(line(&t, &["dev", "hda1"]).unwrap().minor, 1);
        assert_eq!(line(&t, &["dev", "hda15"]).unwrap().minor, 15);
        assert!(line(&t, &["dev", "hda16"]).is_none());
        let minors: Vec<u32> = ["tty0", "tty1", "tty2"]
            .iter()
            .map(|n| line(&t, &["dev", n]).unwrap().minor)
            .collect();
        assert_eq!(minors, [0, 2, 4]);
        assert!(line(&t, &["dev", "tty3"]).is_none());
        // Big minors take ext4's split encoding.
        let t = parse("/x c 600 0 0 4095 1048575\n").unwrap();
        let l = line(&t, &["x"]).unwrap();
        assert_eq!(l.rdev(), 0xff | (0xfff << 8) | (0xfff00 << 12));
    }

    #[test]
    fn later_lines_replace_earlier_ones() {
        let t = parse("/a d 755 1 1\n/a d 700 2 2\n").unwrap();
        let a = line(&t, &["a"]).unwrap();
        assert_eq!((a.perm, a.uid, a.no), (0o700, 2, 2));
    }

    #[test]
    fn bad_lines_name_file_and_line() {
        for (text, want) in [
            ("/a d\n", "t:1: 2 fields"),
            ("\n/a d 755 0 0 0 0 0 1 0 9\n", "t:2: 11 fields"),
            ("/a x 755\n", "t:1: /a: type 'x'"),
            ("/a d 9\n", "t:1: /a: mode '9' is not an octal"),
            ("/a d -\n", "t:1: /a: the mode is required"),
            ("/a d 755 root 0\n", "t:1: /a: uid 'root' is not a decimal"),
            ("/a d 755 4294967296\n", "more than 32 bits"),
            ("/a c 600 0 0 4096 0\n", "major 4096"),
            ("/a c 600 0 0 1 1048570 0 1 7\n", "minor 1048576"),
            ("/a d 755 0 0 0 0 0 1 3\n", "a count"),
            (
                "/a p 600 0 0 0 0 18446744073709551615 1 2\n",
                "start 18446744073709551615",
            ),
            (
                "/a p 600 0 0 0 99999999999999999999\n",
                "minor '99999999999999999999' is too large",
            ),
            ("/a/../b d 755\n", ". or .."),
            ("/ c 755\n", "the root must be a directory"),
            (
                "/a c 600 0 0 1 1\n/a/b d 755\n",
                "t:2: /a/b: /a is a character device (line 1)",
            ),
            (
                "/a/b d 755\n/a f 600\n",
                "t:2: /a: a regular file here, but line 1",
            ),
            (
                "/a d 755\n/a p 600\n",
                "t:2: /a: listed as a directory on line 1",
            ),
        ] {
            let got = error(text);
            assert!(got.contains(want), "{text:?}: {got}");
            assert_eq!(got.lines().count(), 1, "{got}");
        }
    }

    #[test]
    fn judged_against_the_tree() {
        let t = parse("/etc/shadow f 600\n/dev d 755\n/run/x p 600\n").unwrap();
        let node = |p: &[&str]| {
            let mut n = &t.root;
            for x in p {
                n = &n.children[x.as_bytes()];
            }
            n
        };
        let shadow = node(&["etc", "shadow"]);
        assert!(t
            .judge(shadow, "/etc/shadow", Some(FileType::Regular))
            .is_ok());
        let missing = t
            .judge(shadow, "/etc/shadow", None)
            .unwrap_err()
            .line("mkfs");
        assert!(
            missing.contains("t:1: /etc/shadow: no such regular file"),
            "{missing}"
        );
        let clash = t.judge(node(&["dev"]), "/dev", Some(FileType::Symlink));
        assert!(clash
            .unwrap_err()
            .line("mkfs")
            .contains("t:2: /dev: the source tree has a symlink"));
        assert!(t.judge(node(&["dev"]), "/dev", None).is_ok());
        let run = t
            .judge(node(&["run"]), "/run", None)
            .unwrap_err()
            .line("mkfs");
        assert!(run.contains("t:3: /run: no such directory"), "{run}");
        assert!(t
            .judge(node(&["run"]), "/run", Some(FileType::Directory))
            .is_ok());
    }
}
