//! `mkdir` and `rm`: changing the tree inside an image.

use crate::cli::{MkdirArgs, RealtimeArgs, RmArgs};
use crate::error::{CmdResult, Context, Error, Failure};
use crate::hostsys::{egid, euid};
use crate::imgpath::{components, parse_image_arg, resolve, resolve_dest, Dest, ImageArg};
use crate::session::{read_dir_all, with_fs};
use lanefs::{FileType, Fs, Ino, Owner};
use std::path::Path;

/// Permission bits of directories `mkdir` creates.
const DIR_PERM: u16 = 0o755;

/// The owner of inodes this process creates.
pub fn own_owner() -> Owner {
    Owner {
        uid: euid(),
        gid: egid(),
        umask: 0,
    }
}

/// Parse every argument; all must be in one image.
pub fn parse_all(targets: &[std::ffi::OsString]) -> CmdResult<(std::path::PathBuf, Vec<ImageArg>)> {
    let args = targets
        .iter()
        .map(|t| parse_image_arg(t))
        .collect::<CmdResult<Vec<_>>>()?;
    let image = args.first().map(|a| a.image.clone()).unwrap_or_default();
    if let Some(other) = args.iter().find(|a| a.image != image) {
        let msg = format!("all paths must be in one image ({})", image.display());
        return Err(Failure::new(other.display(), Error::msg(msg)));
    }
    Ok((image, args))
}

/// Run `each` on every argument inside one mount of their image.
pub fn for_each_in_image(
    targets: &[std::ffi::OsString],
    mut each: impl FnMut(&Fs, &ImageArg) -> CmdResult<()>,
) -> CmdResult<i32> {
    let (image, args) = parse_all(targets)?;
    with_fs(Path::new(&image), false, |fs| {
        args.iter().try_for_each(|a| each(fs, a))
    })?;
    Ok(0)
}

/// `lanefs realtime`: set (or clear) the realtime flag and the extent size hint, then
/// print each target's state.
pub fn realtime(args: &RealtimeArgs) -> CmdResult<i32> {
    let mut out = String::new();
    for_each_in_image(&args.targets, |fs, arg| {
        let ino = resolve(fs, &arg.path, true).ctx(arg.display())?.attr.ino;
        if !args.keep {
            fs.set_realtime(ino, !args.off).ctx(arg.display())?;
        }
        if let Some(n) = args.extsize {
            fs.set_extsize(ino, n).ctx(arg.display())?;
        }
        let (rt, hint) = fs.realtime(ino).ctx(arg.display())?;
        out += &format!(
            "{}: realtime {}, extent size hint {hint} blocks\n",
            arg.display(),
            if rt { "on" } else { "off" }
        );
        Ok(())
    })?;
    use std::io::Write;
    std::io::stdout()
        .write_all(out.as_bytes())
        .ctx("standard output")?;
    Ok(0)
}

/// `lanefs mkdir`.
pub fn mkdir(args: &MkdirArgs) -> CmdResult<i32> {
    for_each_in_image(&args.targets, |fs, arg| {
        let result = if args.parents {
            mkdir_parents(fs, &arg.path)
        } else {
            mkdir_one(fs, &arg.path)
        };
        result.ctx(arg.display())
    })
}

/// Create the directory `path`, whose parent must exist.
fn mkdir_one(fs: &Fs, path: &[u8]) -> Result<(), Error> {
    match resolve_dest(fs, path)? {
        Dest::Exists(_) => Err(lanefs::Error::Exists.into()),
        Dest::New { dir, name } => {
            fs.mkdir(dir, &name, DIR_PERM, own_owner())?;
            Ok(())
        }
    }
}

/// Create `path` and every missing parent; existing directories are fine.
fn mkdir_parents(fs: &Fs, path: &[u8]) -> Result<(), Error> {
    let comps = components(path);
    for i in 0..comps.len() {
        let prefix = join_path(&comps[..=i]);
        match resolve(fs, &prefix, true) {
            Ok(found) if found.attr.kind == FileType::Directory => {}
            Ok(_) => return Err(lanefs::Error::NotDir.into()),
            Err(e) if e.is_not_found() => {
                let parent = resolve(fs, &join_path(&comps[..i]), true)?;
                fs.mkdir(parent.attr.ino, &comps[i], DIR_PERM, own_owner())?;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// "/a/b/c" from components.
fn join_path(comps: &[Vec<u8>]) -> Vec<u8> {
    let mut p = b"/".to_vec();
    p.extend(comps.join(&b'/'));
    p
}

/// `lanefs rm`.
pub fn rm(args: &RmArgs) -> CmdResult<i32> {
    for_each_in_image(&args.targets, |fs, arg| rm_one(fs, arg, args))
}

/// Remove one argument.
fn rm_one(fs: &Fs, arg: &ImageArg, args: &RmArgs) -> CmdResult<()> {
    let what = arg.display();
    let found = match resolve(fs, &arg.path, false) {
        Ok(found) => found,
        Err(e) if e.is_not_found() && args.force => return Ok(()),
        Err(e) => return Err(Failure::new(what, e)),
    };
    let Some((dir, name)) = found.entry else {
        let msg = "refusing to remove '/', '.' or '..'";
        return Err(Failure::new(what, Error::msg(msg)));
    };
    if found.attr.kind != FileType::Directory {
        return fs.unlink(dir, &name).ctx(what);
    }
    if !args.recursive {
        return Err(Failure::new(what, Error::msg("is a directory (use -r)")));
    }
    remove_tree(fs, found.attr.ino, &what)?;
    fs.rmdir(dir, &name).ctx(what)
}

/// Remove everything inside directory `dir`, shown as `what` in messages. The walk keeps
/// its own stack (an image's depth costs heap, not the thread's stack), and a directory met
/// a second time (a hostile or corrupt image linking a directory into itself or twice)
/// stops it with an error naming the path, as `cp` does.
fn remove_tree(fs: &Fs, dir: Ino, what: &str) -> CmdResult<()> {
    /// A directory being emptied: its number, its name in its parent, how it is shown,
    /// and the entries left.
    struct Frame {
        ino: Ino,
        name: Vec<u8>,
        shown: String,
        entries: std::vec::IntoIter<lanefs::DirEntry>,
    }
    let mut seen = std::collections::HashSet::from([dir]);
    let mut stack = vec![Frame {
        ino: dir,
        name: Vec::new(),
        shown: what.to_string(),
        entries: read_dir_all(fs, dir).ctx(what)?.into_iter(),
    }];
    while let Some(top) = stack.last_mut() {
        let Some(entry) = top.entries.next() else {
            // Emptied: its name goes from its parent (the caller removes the first).
            let done = stack.pop().expect("a frame");
            if let Some(parent) = stack.last() {
                fs.rmdir(parent.ino, &done.name).ctx(&done.shown)?;
            }
            continue;
        };
        let child = crate::session::join_display(&top.shown, &entry.name);
        if entry.kind != FileType::Directory {
            fs.unlink(top.ino, &entry.name).ctx(&child)?;
            continue;
        }
        if !seen.insert(entry.ino) {
            let msg = "directory met twice (linked twice or into itself); \
                       the image is corrupt: run lanefs fsck";
            return Err(Failure::new(child, Error::msg(msg)));
        }
        let entries = read_dir_all(fs, entry.ino).ctx(&child)?.into_iter();
        stack.push(Frame {
            ino: entry.ino,
            name: entry.name,
            shown: child,
            entries,
        });
    }
    Ok(())
}
