//! The sources of a copy in as given (each opened where it is, a final symlink not
//! followed), what they hold, and where each goes in the image.

use super::*;

/// What a host entry is (from `fstat` or `fstatat`).
#[derive(Clone, Copy)]
pub(super) struct Meta {
    pub(super) kind: HostType,
    pub(super) mode: u32,
    pub(super) uid: u32,
    pub(super) gid: u32,
    pub(super) nlink: u64,
    pub(super) dev: u64,
    pub(super) ino: u64,
    pub(super) rdev: u64,
    pub(super) size: u64,
    /// 512-byte blocks allocated (`st_blocks`).
    pub(super) blocks: u64,
    pub(super) atime: lanefs::Timespec,
    pub(super) mtime: lanefs::Timespec,
}

impl From<Stat> for Meta {
    fn from(st: Stat) -> Meta {
        Meta {
            kind: HostType::from_raw_mode(st.st_mode),
            mode: st.st_mode,
            uid: st.st_uid,
            gid: st.st_gid,
            nlink: st.st_nlink,
            dev: st.st_dev,
            ino: st.st_ino,
            rdev: st.st_rdev,
            size: st.st_size.max(0) as u64,
            blocks: st.st_blocks.max(0) as u64,
            atime: timespec(st.st_atime, st.st_atime_nsec as i64),
            mtime: timespec(st.st_mtime, st.st_mtime_nsec as i64),
        }
    }
}

impl Meta {
    /// The owner it gets in the image.
    pub(super) fn owner(&self) -> Owner {
        Owner {
            uid: self.uid,
            gid: self.gid,
            umask: 0,
        }
    }

    /// Its permission bits.
    pub(super) fn perm(&self) -> u16 {
        (self.mode & 0o7777) as u16
    }

    /// Whether `other` is the same host inode.
    pub(super) fn same(&self, other: &Meta) -> bool {
        (self.dev, self.ino) == (other.dev, other.ino)
    }
}

/// One source as given: the directory holding it and its name, or, for a path with no
/// last name (`.`, `..`, `/`, or ending in `/`), the directory itself. The directory is
/// opened again when the source's turn comes (a descriptor per source held from the start
/// would run out on `cp dir/* IMG:/`).
pub(super) struct Source {
    pub(super) path: PathBuf,
    pub(super) meta: Meta,
    pub(super) at: Option<(PathBuf, Vec<u8>)>,
}

impl Source {
    /// The directory holding the source, opened.
    pub(super) fn parent(&self) -> CmdResult<Option<(HostDir, &OsStr)>> {
        let Some((parent, name)) = &self.at else {
            return Ok(None);
        };
        let dir = HostDir::open_path(parent).ctx(parent.display())?;
        Ok(Some((dir, OsStr::from_bytes(name))))
    }
}

/// Each source opened where it is (a final symlink is not followed), refusing directories
/// without `-r`.
pub(super) fn host_sources(srcs: &[PathBuf], recursive: bool) -> CmdResult<Vec<Source>> {
    let mut found = Vec::with_capacity(srcs.len());
    for src in srcs {
        let shown = src.display();
        // A path ending in `/` (or `/.`) names what it leads to, as for `cp -a`: the
        // directory itself, a symlink to one followed.
        let bytes = src.as_os_str().as_bytes();
        let whole = bytes.ends_with(b"/") || bytes.ends_with(b"/.") || bytes == b".";
        let (meta, at) = match src.file_name().filter(|_| !whole) {
            Some(name) => {
                let parent = match src.parent() {
                    Some(p) if !p.as_os_str().is_empty() => p,
                    _ => Path::new("."),
                };
                let dir = HostDir::open_path(parent).ctx(parent.display())?;
                let meta = dir
                    .lstat(name)
                    .ctx(&shown)?
                    .ok_or_else(|| Failure::new(&shown, lanefs::Error::NotFound))?;
                let at = (parent.to_path_buf(), name.as_bytes().to_vec());
                (Meta::from(meta), Some(at))
            }
            None => {
                let dir = HostDir::open_path_readable(src).ctx(&shown)?;
                (Meta::from(dir.stat().ctx(&shown)?), None)
            }
        };
        if meta.kind == HostType::Directory && !recursive {
            return Err(Failure::new(shown, Error::msg("is a directory (use -r)")));
        }
        found.push(Source {
            path: src.clone(),
            meta,
            at,
        });
    }
    Ok(found)
}

/// Bytes of regular files under `src` (symlinks not followed; unreadable parts count 0).
pub(super) fn host_total(src: &Source) -> u64 {
    if src.meta.kind != HostType::Directory {
        return if src.meta.kind == HostType::RegularFile {
            src.meta.size
        } else {
            0
        };
    }
    let first = match src.parent() {
        Ok(Some((dir, name))) => dir.open_dir(name),
        Ok(None) => HostDir::open_path_readable(&src.path),
        Err(_) => return 0,
    };
    let (mut total, mut stack) = (0, first.into_iter().collect::<Vec<_>>());
    let mut seen = HashSet::new();
    while let Some(dir) = stack.pop() {
        let Ok(st) = dir.stat() else { continue };
        if !seen.insert((st.st_dev, st.st_ino)) {
            continue;
        }
        for name in dir.names().unwrap_or_default() {
            let name = OsStr::from_bytes(&name);
            match dir.lstat(name).ok().flatten().map(Meta::from) {
                Some(m) if m.kind == HostType::Directory => stack.extend(dir.open_dir(name).ok()),
                Some(m) if m.kind == HostType::RegularFile => total += m.size,
                _ => {}
            }
        }
    }
    total
}

/// The last component of host path `src`.
fn basename(src: &Path) -> CmdResult<Vec<u8>> {
    if let Some(name) = src.file_name() {
        return Ok(name.as_bytes().to_vec());
    }
    let real = std::fs::canonicalize(src).ctx(src.display())?;
    match real.file_name() {
        Some(name) => Ok(name.as_bytes().to_vec()),
        None => Err(Failure::new(
            src.display(),
            Error::msg("cannot copy the root directory"),
        )),
    }
}

/// Directory, name and display of where `src` goes for destination `dest`.
pub(super) fn place(dest: &Dest, src: &Path, dst: &ImageArg) -> CmdResult<(Ino, Vec<u8>, String)> {
    match dest {
        Dest::Exists(found) if found.attr.kind == FileType::Directory => {
            let name = basename(src)?;
            Ok((
                found.attr.ino,
                name.clone(),
                join_display(&dst.display(), &name),
            ))
        }
        Dest::Exists(found) => match &found.entry {
            Some((dir, name)) => Ok((*dir, name.clone(), dst.display())),
            None => Err(Failure::new(dst.display(), lanefs::Error::IsDir)),
        },
        Dest::New { dir, name } => Ok((*dir, name.clone(), dst.display())),
    }
}
