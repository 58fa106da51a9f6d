//! Targets: the same operations on a host directory (a kernel mount, or a source tree for
//! `mke2fs -d`) and on lanefs.

use super::*;

// ---------------------------------------------------------------------------------------
// Targets: the same operations on a host directory (a kernel mount, or a source tree for
// `mke2fs -d`) and on lanefs.

pub(super) trait Target {
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

pub(super) struct HostTarget {
    pub(super) root: PathBuf,
}

pub(super) fn cpath(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).expect("path without NUL")
}

impl HostTarget {
    pub(super) fn at(&self, p: &str) -> PathBuf {
        self.root.join(p)
    }
}

pub(super) fn io<T>(what: &str, p: &str, r: std::io::Result<T>) -> Result<T, String> {
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

pub(super) struct LanefsTarget {
    pub(super) fs: Arc<Fs>,
}

pub(super) fn resolve(fs: &Fs, p: &str) -> lanefs::Result<Ino> {
    let mut ino = ROOT_INO;
    for c in p.split('/').filter(|c| !c.is_empty()) {
        ino = fs.lookup(ino, c.as_bytes())?.ino;
    }
    Ok(ino)
}

pub(super) fn le<T>(what: &str, p: &str, r: lanefs::Result<T>) -> Result<T, String> {
    r.map_err(|e| format!("lanefs {what} {p}: {e}"))
}

impl LanefsTarget {
    pub(super) fn dir_and_name<'a>(&self, p: &'a str) -> Result<(Ino, &'a str), String> {
        let d = le("lookup", parent(p), resolve(&self.fs, parent(p)))?;
        Ok((d, base(p)))
    }
    pub(super) fn ino(&self, p: &str) -> Result<Ino, String> {
        le("lookup", p, resolve(&self.fs, p))
    }
}

pub(super) const ROOT_OWNER: Owner = Owner {
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
