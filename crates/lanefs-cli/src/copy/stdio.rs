//! `cp - IMAGE:/PATH` (standard input into a file) and `cp IMAGE:/PATH -` (a file to
//! standard output), as `-` means for `cp`-like tools that stream.

use super::{Flags, CHUNK};
use crate::error::{CmdResult, Context, Error, Failure};
use crate::imgpath::{parse_image_arg, resolve, resolve_dest, Dest};
use crate::session::with_fs;
use lanefs::{FileType, SetAttr};
use std::ffi::OsString;
use std::io::Read;

/// The copy when `-` is among the paths, or `None` when it is not.
pub fn copy(srcs: &[OsString], dst: &OsString, flags: Flags) -> Option<CmdResult<i32>> {
    let dash = |p: &OsString| p.as_encoded_bytes() == b"-";
    if dash(dst) {
        return Some(match srcs {
            [one] if !dash(one) => to_stdout(one),
            _ => Err(Failure::new(
                "-",
                Error::msg("standard output takes one source file"),
            )),
        });
    }
    if !srcs.iter().any(dash) {
        return None;
    }
    Some(match srcs {
        [_] => from_stdin(dst, flags),
        _ => Err(Failure::new(
            "-",
            Error::msg("standard input must be the only source"),
        )),
    })
}

/// Write the image file `src` to standard output.
fn to_stdout(src: &OsString) -> CmdResult<i32> {
    let arg = parse_image_arg(src)?;
    let what = arg.display();
    with_fs(&arg.image, true, |fs| {
        let found = resolve(fs, &arg.path, true).ctx(&what)?;
        match found.attr.kind {
            FileType::Regular => crate::browse::stream(fs, found.attr.ino, &what),
            FileType::Directory => Err(Failure::new(&what, lanefs::Error::IsDir)),
            _ => Err(Failure::new(&what, Error::msg("not a regular file"))),
        }
    })?;
    Ok(0)
}

/// Write standard input into the image file `dst` (made, or emptied first; kept as it is
/// with `-n`).
fn from_stdin(dst: &OsString, flags: Flags) -> CmdResult<i32> {
    let arg = parse_image_arg(dst)?;
    let what = arg.display();
    with_fs(&arg.image, false, |fs| {
        let dest = resolve_dest(fs, &arg.path).ctx(&what)?;
        let entry = match &dest {
            Dest::Exists(f) => f.entry.clone(),
            Dest::New { dir, name } => Some((*dir, name.clone())),
        };
        let ino = match dest {
            Dest::Exists(f) if f.attr.kind == FileType::Directory => {
                let msg = "is a directory: name the file standard input goes to (IMAGE:/DIR/NAME)";
                return Err(Failure::new(&what, Error::msg(msg)));
            }
            Dest::Exists(f) if f.attr.kind != FileType::Regular => {
                return Err(Failure::new(&what, Error::msg("not a regular file")));
            }
            Dest::Exists(_) if flags.no_clobber => return Ok(()),
            Dest::Exists(f) => {
                let ino = f.attr.ino;
                fs.open(ino).ctx(&what)?;
                let empty = SetAttr {
                    size: Some(0),
                    ..SetAttr::default()
                };
                if let Err(e) = fs.setattr(ino, &empty) {
                    let _ = fs.release(ino);
                    return Err(Failure::new(&what, e));
                }
                ino
            }
            Dest::New { dir, name } => {
                let perm = 0o666 & !crate::edit::process_umask();
                fs.create(dir, &name, perm, crate::modify::own_owner())
                    .ctx(&what)?
                    .ino
            }
        };
        flags.said("-", &what);
        let written = fill(fs, ino, &what);
        let released = fs.release(ino).ctx(&what);
        let result = written.and(released);
        if result.is_err() {
            // Emptied or new, and not filled: no file that looks complete stays.
            if let Some((dir, name)) = entry {
                if fs.lookup(dir, &name).is_ok_and(|a| a.ino == ino)
                    && fs.unlink(dir, &name).is_ok()
                {
                    crate::error::note(&format!(
                        "{what}: removed (standard input did not all fit)"
                    ));
                }
            }
        }
        result
    })?;
    Ok(0)
}

/// Copy all of standard input into open file `ino`.
fn fill(fs: &lanefs::Fs, ino: lanefs::Ino, what: &str) -> CmdResult<()> {
    let mut buf = vec![0u8; CHUNK];
    let mut input = std::io::stdin().lock();
    let mut off = 0u64;
    loop {
        let n = match input.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Failure::new("standard input", e)),
        };
        let mut done = 0;
        while done < n {
            let w = fs.write(ino, off, &buf[done..n]).ctx(what)?;
            if w == 0 {
                return Err(Failure::new(what, Error::msg("write made no progress")));
            }
            done += w;
            off += w as u64;
        }
    }
}
