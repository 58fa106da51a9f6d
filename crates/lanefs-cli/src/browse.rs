//! `ls`, `stat` and `cat`: reading inside an image.

use crate::cli::{LsArgs, PathArg};
use crate::error::{CmdResult, Context, Error, Failure};
use crate::imgpath::{parse_image_arg, resolve, Located};
use crate::session::{read_dir_all, with_fs};
use crate::show::{full_time, mode_string, shell_quoted, short_time, type_name};
use crate::xattr::{acl_text, hex, xattr_value};
use lanefs::{Attr, FileType, Fs, Ino};
use std::io::Write;

/// Bytes `cat` reads per call.
const CAT_CHUNK: usize = 1 << 20;

/// One line of a listing: name, attributes, symlink target, owner and group as shown,
/// and whether it has an ACL (`+` after the mode, as ls marks it).
struct Row {
    name: Vec<u8>,
    attr: Attr,
    target: Option<Vec<u8>>,
    owner: String,
    group: String,
    acl: bool,
}

/// Write `bytes` to standard output.
fn emit(bytes: &[u8]) -> CmdResult<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(bytes)
        .and_then(|()| out.flush())
        .ctx("standard output")
}

/// `lanefs ls`.
pub fn ls(args: &LsArgs) -> CmdResult<i32> {
    let arg = parse_image_arg(&args.target)?;
    let what = arg.display();
    let text = with_fs(&arg.image, true, |fs| {
        let found = resolve(fs, &arg.path, !args.long).ctx(&what)?;
        let names = if found.attr.kind == FileType::Directory {
            dir_names(fs, &found, args.all).ctx(&what)?
        } else {
            vec![(arg.path.clone(), found.attr.ino)]
        };
        // On a terminal names are quoted as GNU ls quotes them; piped, they are bytes.
        let quote = std::io::IsTerminal::is_terminal(&std::io::stdout());
        let shown = |n: &[u8]| match quote {
            true => shell_quoted(n),
            false => n.to_vec(),
        };
        if !args.long {
            return Ok(short_listing(&names, shown));
        }
        let accounts = args.names.then(|| crate::accounts::Accounts::of(fs));
        let rows = long_rows(fs, names, accounts.as_ref()).ctx(&what)?;
        Ok(format_rows(&rows, shown))
    })?;
    emit(&text)?;
    Ok(0)
}

/// Names and inodes in directory `dir`, sorted by name; with `all`, also hidden names
/// and `.` and `..`.
fn dir_names(fs: &Fs, dir: &Located, all: bool) -> Result<Vec<(Vec<u8>, Ino)>, Error> {
    let ino = dir.attr.ino;
    let mut names = Vec::new();
    if all {
        let parent = fs.lookup(ino, b"..").map(|a| a.ino).unwrap_or(ino);
        names.push((b".".to_vec(), ino));
        names.push((b"..".to_vec(), parent));
    }
    for entry in read_dir_all(fs, ino)? {
        if all || !entry.name.starts_with(b".") {
            names.push((entry.name, entry.ino));
        }
    }
    names.sort();
    Ok(names)
}

/// One name per line.
fn short_listing(names: &[(Vec<u8>, Ino)], shown: impl Fn(&[u8]) -> Vec<u8>) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, _) in names {
        out.extend_from_slice(&shown(name));
        out.push(b'\n');
    }
    out
}

/// Rows with attributes and symlink targets for a long listing.
fn long_rows(
    fs: &Fs,
    names: Vec<(Vec<u8>, Ino)>,
    accounts: Option<&crate::accounts::Accounts>,
) -> Result<Vec<Row>, Error> {
    let mut rows = Vec::with_capacity(names.len());
    for (name, ino) in names {
        let attr = fs.getattr(ino)?;
        let target = match attr.kind {
            FileType::Symlink => Some(fs.readlink(ino)?),
            _ => None,
        };
        let (owner, group) = match accounts {
            Some(a) => (a.user_name(attr.uid), a.group_name(attr.gid)),
            None => (attr.uid.to_string(), attr.gid.to_string()),
        };
        let acl = fs.listxattr(ino).unwrap_or_default().iter().any(|n| {
            n.as_slice() == b"system.posix_acl_access"
                || n.as_slice() == b"system.posix_acl_default"
        });
        rows.push(Row {
            name,
            attr,
            target,
            owner,
            group,
            acl,
        });
    }
    Ok(rows)
}

/// The size column: bytes, or "major, minor" for device nodes.
fn size_field(attr: &Attr) -> String {
    match attr.kind {
        FileType::CharDevice | FileType::BlockDevice => {
            let (major, minor) = crate::hostsys::split_rdev(attr.rdev);
            format!("{major}, {minor}")
        }
        _ => attr.size.to_string(),
    }
}

/// The long listing text, with aligned columns.
fn format_rows(rows: &[Row], shown: impl Fn(&[u8]) -> Vec<u8>) -> Vec<u8> {
    let mut out = Vec::new();
    let cols: Vec<[String; 4]> = rows
        .iter()
        .map(|r| {
            let a = &r.attr;
            [
                a.nlink.to_string(),
                r.owner.clone(),
                r.group.clone(),
                size_field(a),
            ]
        })
        .collect();
    let width = |i: usize| cols.iter().map(|c| c[i].len()).max().unwrap_or(0);
    let w = [width(0), width(1), width(2), width(3)];
    let any_acl = rows.iter().any(|r| r.acl);
    for (row, c) in rows.iter().zip(&cols) {
        let a = &row.attr;
        let mode = mode_string(a.kind, a.perm) + if row.acl { "+" } else { "" };
        let line = format!(
            "{mode:<mw$} {:>w0$} {:<w1$} {:<w2$} {:>w3$} {} ",
            c[0],
            c[1],
            c[2],
            c[3],
            short_time(a.mtime),
            w0 = w[0],
            w1 = w[1],
            w2 = w[2],
            w3 = w[3],
            mw = if any_acl { 11 } else { 10 },
        );
        out.extend_from_slice(line.as_bytes());
        out.extend_from_slice(&shown(&row.name));
        if let Some(t) = &row.target {
            out.extend_from_slice(b" -> ");
            out.extend_from_slice(&shown(t));
        }
        out.push(b'\n');
    }
    out
}

/// `lanefs stat`.
pub fn stat(args: &PathArg) -> CmdResult<i32> {
    let arg = parse_image_arg(&args.target)?;
    let what = arg.display();
    let text = with_fs(&arg.image, true, |fs| {
        let found = resolve(fs, &arg.path, false).ctx(&what)?;
        let ino = found.attr.ino;
        let target = match found.attr.kind {
            FileType::Symlink => Some(fs.readlink(ino).ctx(&what)?),
            _ => None,
        };
        let mut xattrs = Vec::new();
        for name in fs.listxattr(ino).ctx(&what)? {
            let value = fs.getxattr(ino, &name).ctx(&what)?;
            xattrs.push((name, value));
        }
        Ok(stat_text(
            &arg.path,
            &found.attr,
            target.as_deref(),
            &xattrs,
        ))
    })?;
    emit(&text)?;
    Ok(0)
}

/// What `stat` prints for `attr` and its extended attributes: the name's bytes as they
/// are (as `ls` prints them), ACLs in `getfacl`'s short form, other values as text
/// when they are printable and in hex (`getfattr -e hex`) otherwise.
fn stat_text(
    path: &[u8],
    a: &Attr,
    target: Option<&[u8]>,
    xattrs: &[(Vec<u8>, Vec<u8>)],
) -> Vec<u8> {
    let mut out = b"  File: ".to_vec();
    out.extend_from_slice(path);
    if let Some(t) = target {
        out.extend_from_slice(b" -> ");
        out.extend_from_slice(t);
    }
    out.push(b'\n');
    let (major, minor) = crate::hostsys::split_rdev(a.rdev);
    let mut s = String::new();
    s += &format!("  Type: {}\n", type_name(a.kind));
    s += &format!(
        "  Size: {:<12} Blocks: {:<10} Links: {}\n",
        a.size, a.blocks, a.nlink
    );
    s += &format!(" Inode: {:<12} Generation: {}\n", a.ino, a.generation);
    s += &format!(
        "Access: ({:04o}/{})  Uid: {}  Gid: {}\n",
        a.perm,
        mode_string(a.kind, a.perm),
        a.uid,
        a.gid
    );
    s += &format!("Device type: {major},{minor} (rdev {:#x})\n", a.rdev);
    s += &format!("Access: {}\n", full_time(a.atime));
    s += &format!("Modify: {}\n", full_time(a.mtime));
    s += &format!("Change: {}\n", full_time(a.ctime));
    s += &format!(" Birth: {}\n", full_time(a.crtime));
    for (name, value) in xattrs {
        let key = String::from_utf8_lossy(name);
        let shown = match name.as_slice() {
            b"system.posix_acl_access" | b"system.posix_acl_default" => {
                acl_text(value).unwrap_or_else(|| hex(value))
            }
            _ => xattr_value(value),
        };
        let label = match name.as_slice() {
            b"system.posix_acl_access" => "   ACL".to_string(),
            b"system.posix_acl_default" => "Default ACL".to_string(),
            _ => format!(" Xattr: {key}"),
        };
        s += &format!("{label}: {shown}\n");
    }
    out.extend_from_slice(s.as_bytes());
    out
}

/// `lanefs cat`.
pub fn cat(args: &PathArg) -> CmdResult<i32> {
    let arg = parse_image_arg(&args.target)?;
    let what = arg.display();
    with_fs(&arg.image, true, |fs| {
        let found = resolve(fs, &arg.path, true).ctx(&what)?;
        match found.attr.kind {
            FileType::Regular => stream(fs, found.attr.ino, &what),
            FileType::Directory => Err(Failure::new(&what, lanefs::Error::IsDir)),
            _ => Err(Failure::new(&what, Error::msg("not a regular file"))),
        }
    })?;
    Ok(0)
}

/// Copy the data of `ino` to standard output in 1 MiB chunks.
pub fn stream(fs: &Fs, ino: lanefs::Ino, what: &str) -> CmdResult<()> {
    let mut buf = vec![0u8; CAT_CHUNK];
    let mut out = std::io::stdout().lock();
    let mut off = 0u64;
    loop {
        let n = fs.read(ino, off, &mut buf).ctx(what)?;
        if n == 0 {
            break;
        }
        out.write_all(&buf[..n]).ctx("standard output")?;
        off += n as u64;
    }
    out.flush().ctx("standard output")
}

#[cfg(test)]
mod tests {
    use super::*;
    use lanefs::Timespec;

    /// A regular-looking inode with a fixed mtime.
    fn attr(kind: FileType, perm: u16, size: u64) -> Attr {
        let t = Timespec {
            sec: 1_234_567_890,
            nsec: 1,
        };
        Attr {
            ino: 12,
            kind,
            perm,
            nlink: 1,
            uid: 0,
            gid: 0,
            size,
            blocks: 0,
            atime: t,
            mtime: t,
            ctime: t,
            crtime: t,
            rdev: 0,
            generation: 0,
        }
    }

    #[test]
    fn long_rows_align_and_show_targets() {
        let rows = vec![
            Row {
                name: b"big".to_vec(),
                attr: attr(FileType::Regular, 0o640, 3 << 20),
                target: None,
                owner: "0".into(),
                group: "0".into(),
                acl: false,
            },
            Row {
                name: b"l".to_vec(),
                attr: attr(FileType::Symlink, 0o777, 3),
                target: Some(b"big".to_vec()),
                owner: "0".into(),
                group: "0".into(),
                acl: false,
            },
        ];
        let text = String::from_utf8(format_rows(&rows, |n| n.to_vec())).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "-rw-r----- 1 0 0 3145728 2009-02-13 23:31 big");
        assert_eq!(
            lines[1],
            "lrwxrwxrwx 1 0 0       3 2009-02-13 23:31 l -> big"
        );
        let mut acl = rows;
        acl[0].acl = true;
        acl[0].owner = "root".into();
        let text = String::from_utf8(format_rows(&acl, |n| n.to_vec())).unwrap_or_default();
        assert!(text.starts_with("-rw-r-----+ 1 root 0 3145728"), "{text}");
        assert!(text.contains("\nlrwxrwxrwx  1 0    0       3"), "{text}");
    }

    #[test]
    fn stat_shows_nanoseconds() {
        let text = stat_text(b"/f", &attr(FileType::Regular, 0o644, 5), None, &[]);
        let text = String::from_utf8(text).unwrap();
        assert!(
            text.contains("Modify: 2009-02-13 23:31:30.000000001 +0000"),
            "{text}"
        );
        assert!(text.contains("(0644/-rw-r--r--)"), "{text}");
    }

    /// A name that is not UTF-8 prints as its bytes; xattrs and ACLs are shown.
    #[test]
    fn stat_shows_raw_names_xattrs_and_acls() {
        let mut acl = 2u32.to_le_bytes().to_vec();
        for (tag, perm, id) in [
            (1u16, 6u16, 0u32),
            (2, 4, 1000),
            (4, 4, 0),
            (0x10, 4, 0),
            (0x20, 0, 0),
        ] {
            acl.extend_from_slice(&tag.to_le_bytes());
            acl.extend_from_slice(&perm.to_le_bytes());
            acl.extend_from_slice(&id.to_le_bytes());
        }
        let xattrs = vec![
            (b"user.note".to_vec(), b"hello".to_vec()),
            (b"user.bin".to_vec(), vec![0, 1, 0xff]),
            (b"system.posix_acl_access".to_vec(), acl),
        ];
        let text = stat_text(
            b"/\xff\xfe",
            &attr(FileType::Regular, 0o644, 5),
            None,
            &xattrs,
        );
        assert!(text.starts_with(b"  File: /\xff\xfe\n"));
        let text = String::from_utf8_lossy(&text);
        assert!(text.contains(" Xattr: user.note: \"hello\"\n"), "{text}");
        assert!(text.contains(" Xattr: user.bin: 0x0001ff\n"), "{text}");
        assert!(
            text.contains("   ACL: user::rw-,user:1000:r--,group::r--,mask::r--,other::---\n"),
            "{text}"
        );
    }
}
