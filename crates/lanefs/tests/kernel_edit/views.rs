//! What each side shows, compared with the model: `kernel_view` walks a kernel mount and
//! `lanefs_view` a mounted lanefs into `Seen` entries, and `compare` checks a view against
//! the model (names, kinds, modes, sizes, contents, symlink targets, link counts, and hard
//! links sharing only their inode).

use super::*;

// ---------------------------------------------------------------------------------------
// What each side shows, compared with the model.

#[derive(Debug, PartialEq, Eq)]
pub(super) enum Seen {
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

pub(super) fn kernel_view(root: &Path) -> Result<BTreeMap<String, Seen>, String> {
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

pub(super) fn lanefs_view(fs: &Fs) -> Result<BTreeMap<String, Seen>, String> {
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
pub(super) fn compare(
    model: &Model,
    seen: &BTreeMap<String, Seen>,
    who: &str,
) -> Result<(), String> {
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
