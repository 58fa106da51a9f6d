//! Views: what a reader sees (lanefs, a kernel mount, debugfs), and the comparison of a
//! view with the model.

use super::*;

// ---------------------------------------------------------------------------------------
// Views: what a reader sees.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Dir,
    File,
    Link,
    Other,
}

#[derive(Debug, Clone)]
pub(super) struct Meta {
    pub(super) kind: Kind,
    pub(super) perm: u32,
    pub(super) uid: u32,
    pub(super) gid: u32,
    pub(super) size: u64,
    pub(super) ino: u64,
    /// None where the view cannot tell (debugfs walk).
    pub(super) nlink: Option<u64>,
    pub(super) target: Option<Vec<u8>>,
}

pub(super) trait View {
    fn who(&self) -> String;
    fn walk(&mut self) -> Result<BTreeMap<String, Meta>, String>;
    fn read(&mut self, p: &str, m: &Meta, off: u64, len: usize) -> Result<Vec<u8>, String>;
    /// None: the view does not read xattrs.
    fn xattr(&mut self, p: &str, m: &Meta, name: &[u8]) -> Option<Result<Vec<u8>, String>>;
}

pub(super) struct LanefsView<'a> {
    pub(super) fs: &'a Fs,
}

pub(super) fn kind_of(k: FileType) -> Kind {
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
pub(super) struct HostView {
    pub(super) root: PathBuf,
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
pub(super) struct DebugfsView {
    pub(super) img: PathBuf,
    pub(super) bs: u64,
    pub(super) cats: BTreeMap<String, Vec<u8>>,
}

impl DebugfsView {
    pub(super) fn bmap(&self, p: &str, lblk: u64) -> Result<u64, String> {
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
pub(super) fn compare(m: &Model, v: &mut dyn View) -> Vec<String> {
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
