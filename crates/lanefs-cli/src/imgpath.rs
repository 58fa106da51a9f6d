//! `IMAGE:/PATH` arguments and path resolution inside a mounted image.

use crate::error::{CmdResult, Error, Failure};
use lanefs::{Attr, FileType, Fs, Ino, ROOT_INO};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

/// Symbolic links followed while resolving one path before giving up (ELOOP).
pub const MAX_SYMLINK_HOPS: u32 = 40;

/// An argument naming a path inside an image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageArg {
    /// The image file or block device.
    pub image: PathBuf,
    /// The absolute path inside the image, as bytes.
    pub path: Vec<u8>,
}

impl ImageArg {
    /// How the argument is written: `IMAGE:/PATH`.
    pub fn display(&self) -> String {
        display_in(&self.image, &self.path)
    }
}

/// `IMAGE:/PATH` for `image` and `path`.
pub fn display_in(image: &Path, path: &[u8]) -> String {
    format!("{}:{}", image.display(), String::from_utf8_lossy(path))
}

/// Whether `p` names something that can hold an image: a file or block device.
fn is_image_file(p: &Path) -> bool {
    std::fs::metadata(p).is_ok_and(|m| m.is_file() || m.file_type().is_block_device())
}

/// Where `arg` splits into an existing image file and a path: at a ':' whose left side is
/// an image file (a regular file or block device). Of several, the first whose right side
/// is absolute (or empty) wins, so `./a:b.img:/x` names image `./a:b.img` and
/// `disk.img:/dir/a:b` names `/dir/a:b` inside `disk.img`.
fn image_split(arg: &[u8]) -> Option<usize> {
    let splits: Vec<usize> = (0..arg.len())
        .filter(|&i| {
            arg[i] == b':' && i > 0 && is_image_file(Path::new(OsStr::from_bytes(&arg[..i])))
        })
        .collect();
    let absolute = |&&i: &&usize| matches!(arg.get(i + 1), None | Some(b'/'));
    splits.iter().find(absolute).copied().or_else(|| {
        // A bare image whose name holds ':' is the image, not a relative path in another.
        if is_image_file(Path::new(OsStr::from_bytes(arg))) {
            None
        } else {
            splits.first().copied()
        }
    })
}

/// `arg` split as `IMAGE:PATH` when some ':' follows an existing image file (see
/// `image_split`); `None` means `arg` is a host path.
pub fn split_image_arg(arg: &OsStr) -> Option<ImageArg> {
    let b = arg.as_bytes();
    let i = image_split(b)?;
    Some(ImageArg {
        image: PathBuf::from(OsStr::from_bytes(&b[..i])),
        path: b[i + 1..].to_vec(),
    })
}

/// Parse an argument that must name a path inside an image. A bare image file means its
/// root directory.
pub fn parse_image_arg(arg: &OsStr) -> CmdResult<ImageArg> {
    let shown = arg.to_string_lossy();
    let b = arg.as_bytes();
    let (image, path): (&[u8], &[u8]) = match image_split(b) {
        Some(i) => (&b[..i], &b[i + 1..]),
        None if is_image_file(Path::new(arg)) => (b, b"/"),
        // Nothing names an image: report on the part before the first ':'.
        None => match b.iter().position(|&c| c == b':') {
            Some(i) => (&b[..i], &b[i + 1..]),
            None => return Err(Failure::new(shown, Error::msg("expected IMAGE:/PATH"))),
        },
    };
    if image.is_empty() {
        return Err(Failure::new(shown, Error::msg("expected IMAGE:/PATH")));
    }
    let image = PathBuf::from(OsStr::from_bytes(image));
    let meta = std::fs::metadata(&image).map_err(|e| Failure::new(image.display(), e))?;
    if meta.is_dir() {
        return Err(Failure::new(image.display(), lanefs::Error::IsDir));
    }
    let parsed = ImageArg {
        image,
        path: path.to_vec(),
    };
    check_absolute(&parsed)?;
    Ok(parsed)
}

/// Refuse relative paths inside an image.
pub fn check_absolute(arg: &ImageArg) -> CmdResult<()> {
    if arg.path.starts_with(b"/") {
        Ok(())
    } else {
        Err(Failure::new(
            arg.display(),
            Error::msg("path inside the image must be absolute"),
        ))
    }
}

/// The non-empty components of `path`.
pub fn components(path: &[u8]) -> Vec<Vec<u8>> {
    path.split(|&b| b == b'/')
        .filter(|c| !c.is_empty())
        .map(<[u8]>::to_vec)
        .collect()
}

/// Where a resolved path ended.
#[derive(Debug, Clone)]
pub struct Located {
    /// The inode's attributes.
    pub attr: Attr,
    /// Directory and name of the entry that led to it; `None` for the root and for paths
    /// ending in `.` or `..`.
    pub entry: Option<(Ino, Vec<u8>)>,
}

/// Resolution state: the chain of directories from the root and what is left to walk.
struct Walker<'a> {
    fs: &'a Fs,
    stack: Vec<Ino>,
    pending: Vec<Vec<u8>>,
    hops: u32,
}

impl Walker<'_> {
    /// The directory the walk is in.
    fn dir(&self) -> Ino {
        self.stack.last().copied().unwrap_or(ROOT_INO)
    }

    /// Replace the symlink just met by its target's components.
    fn follow(&mut self, link: Ino) -> Result<(), Error> {
        self.hops += 1;
        if self.hops > MAX_SYMLINK_HOPS {
            return Err(Error::Loop);
        }
        let target = self.fs.readlink(link)?;
        if target.is_empty() {
            return Err(lanefs::Error::NotFound.into());
        }
        if target.starts_with(b"/") {
            self.stack.truncate(1);
        }
        self.pending.extend(components(&target).into_iter().rev());
        Ok(())
    }

    /// Walk all pending components.
    fn run(&mut self, follow_last: bool) -> Result<Located, Error> {
        while let Some(name) = self.pending.pop() {
            if name == b"." {
                continue;
            }
            if name == b".." {
                if self.stack.len() > 1 {
                    self.stack.pop();
                }
                continue;
            }
            let dir = self.dir();
            let attr = self.fs.lookup(dir, &name)?;
            let last = self.pending.is_empty();
            if attr.kind == FileType::Symlink && (!last || follow_last) {
                self.follow(attr.ino)?;
                continue;
            }
            if last {
                return Ok(Located {
                    attr,
                    entry: Some((dir, name)),
                });
            }
            if attr.kind != FileType::Directory {
                return Err(lanefs::Error::NotDir.into());
            }
            self.stack.push(attr.ino);
        }
        Ok(Located {
            attr: self.fs.getattr(self.dir())?,
            entry: None,
        })
    }
}

/// Resolve absolute `path` from the root, following symlinks in intermediate components
/// and, if `follow_last`, in the final one. A trailing '/' forces following and requires
/// a directory.
pub fn resolve(fs: &Fs, path: &[u8], follow_last: bool) -> Result<Located, Error> {
    let trailing = path.len() > 1 && path.ends_with(b"/");
    let mut walker = Walker {
        fs,
        stack: vec![ROOT_INO],
        pending: components(path).into_iter().rev().collect(),
        hops: 0,
    };
    let found = walker.run(follow_last || trailing)?;
    if trailing && found.attr.kind != FileType::Directory {
        return Err(lanefs::Error::NotDir.into());
    }
    Ok(found)
}

/// The directory holding the last component of `path` and that component, when the
/// last component is a plain name (not `.`/`..`, not the root).
pub fn split_last(path: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
    let mut comps = components(path);
    let last = comps.pop()?;
    if last == b"." || last == b".." {
        return None;
    }
    let mut parent = b"/".to_vec();
    parent.extend(comps.join(&b'/'));
    Some((parent, last))
}

/// What a destination path names.
#[derive(Debug, Clone)]
pub enum Dest {
    /// An existing inode (symlinks followed).
    Exists(Located),
    /// Nothing yet: a new entry `name` in directory `dir`.
    New {
        /// Directory to create in.
        dir: Ino,
        /// Name to create.
        name: Vec<u8>,
    },
}

/// Resolve a path that may not exist yet, as a place to create something.
pub fn resolve_dest(fs: &Fs, path: &[u8]) -> Result<Dest, Error> {
    match resolve(fs, path, true) {
        Ok(found) => Ok(Dest::Exists(found)),
        Err(e) if e.is_not_found() && !path.ends_with(b"/") => {
            let Some((parent, name)) = split_last(path) else {
                return Err(e);
            };
            let dir = resolve(fs, &parent, true)?;
            if dir.attr.kind != FileType::Directory {
                return Err(lanefs::Error::NotDir.into());
            }
            Ok(Dest::New {
                dir: dir.attr.ino,
                name,
            })
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn components_drop_empty_parts() {
        assert_eq!(
            components(b"//a/./b//"),
            vec![b"a".to_vec(), b".".to_vec(), b"b".to_vec()]
        );
        assert!(components(b"/").is_empty());
    }

    #[test]
    fn split_last_gives_parent_and_name() {
        assert_eq!(
            split_last(b"/a/b/c/"),
            Some((b"/a/b".to_vec(), b"c".to_vec()))
        );
        assert_eq!(split_last(b"/x"), Some((b"/".to_vec(), b"x".to_vec())));
        assert_eq!(split_last(b"/"), None);
        assert_eq!(split_last(b"/a/.."), None);
    }

    #[test]
    fn image_args_need_an_existing_file() {
        let dir = std::env::temp_dir();
        let arg = format!("{}:/x", dir.display());
        assert_eq!(
            split_image_arg(OsStr::new(&arg)),
            None,
            "a directory is not an image"
        );
        assert_eq!(split_image_arg(OsStr::new("/no/such/image.img:/x")), None);
        let exe = std::env::current_exe().unwrap_or_default();
        let arg = format!("{}:/a:b", exe.display());
        let got = split_image_arg(OsStr::new(&arg));
        assert_eq!(got.map(|a| a.path), Some(b"/a:b".to_vec()));
    }

    #[test]
    fn image_names_may_hold_colons() {
        let td = tempfile::tempdir().unwrap();
        let img = td.path().join("a:b.img");
        std::fs::write(&img, b"").unwrap();
        let arg = format!("{}:/x:y", img.display());
        let got = split_image_arg(OsStr::new(&arg)).unwrap();
        assert_eq!((got.image, got.path), (img.clone(), b"/x:y".to_vec()));
        // A file named like the first part does not steal the split: its right side is
        // not absolute.
        std::fs::write(td.path().join("a"), b"").unwrap();
        let got = split_image_arg(OsStr::new(&arg)).unwrap();
        assert_eq!(got.image, img);
        let bare = parse_image_arg(img.as_os_str()).unwrap();
        assert_eq!(bare.path, b"/".to_vec());
    }

    #[test]
    fn image_paths_must_be_absolute() {
        let exe = std::env::current_exe().unwrap_or_default();
        let parse = |a: &str| parse_image_arg(OsStr::new(a));
        assert!(parse(&format!("{}:rel", exe.display())).is_err());
        assert!(parse(&format!("{}:/", exe.display())).is_ok());
        assert!(parse("/no/such/image.img:/x").is_err());
        assert!(parse("plain").is_err());
    }
}
