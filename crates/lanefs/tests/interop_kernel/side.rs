//! lanefs helpers: a host tree copied into lanefs, lanefs listings and reads, and lanefs
//! compared with a host tree.

use super::*;

// ---------------------------------------------------------------------------------------
// lanefs helpers.

pub(super) fn ts(md: &std::fs::Metadata) -> Timespec {
    Timespec {
        sec: md.mtime(),
        nsec: md.mtime_nsec() as u32,
    }
}

/// Copy the host tree `src` into lanefs directory `dir`. Zero blocks become holes.
pub(super) fn copy_into_lanefs(fs: &Fs, src: &Path, dir: Ino) {
    for name in host_names(src) {
        let s = src.join(OsStr::from_bytes(&name));
        let ms = std::fs::symlink_metadata(&s).expect("meta");
        let owner = Owner {
            uid: ms.uid(),
            gid: ms.gid(),
            umask: 0,
        };
        let perm = (ms.mode() & 0o7777) as u16;
        let kind = kind_of(ms.file_type());
        let a = match kind {
            FileType::Directory => {
                let a = fs.mkdir(dir, &name, perm, owner).expect("lanefs mkdir");
                copy_into_lanefs(fs, &s, a.ino);
                a
            }
            FileType::Regular => {
                let a = fs.create(dir, &name, perm, owner).expect("lanefs create");
                let mut f = std::fs::File::open(&s).expect("open src");
                let mut buf = vec![0u8; 1 << 20];
                let mut off = 0u64;
                loop {
                    let n = f.read(&mut buf).expect("read src");
                    if n == 0 {
                        break;
                    }
                    for (i, chunk) in buf[..n].chunks(BS as usize).enumerate() {
                        if chunk.iter().any(|&b| b != 0) {
                            let at = off + i as u64 * BS;
                            assert_eq!(
                                fs.write(a.ino, at, chunk).expect("lanefs write"),
                                chunk.len()
                            );
                        }
                    }
                    off += n as u64;
                }
                if fs.getattr(a.ino).expect("getattr").size != off {
                    fs.setattr(
                        a.ino,
                        &SetAttr {
                            size: Some(off),
                            ..Default::default()
                        },
                    )
                    .expect("extend");
                }
                fs.release(a.ino).expect("release");
                a
            }
            FileType::Symlink => {
                let t = std::fs::read_link(&s).expect("readlink");
                fs.symlink(dir, &name, t.as_os_str().as_bytes(), owner)
                    .expect("lanefs symlink")
            }
            _ => fs
                .mknod(dir, &name, ms.mode(), ms.rdev() as u32, owner)
                .expect("lanefs mknod"),
        };
        let set = SetAttr {
            perm: (kind != FileType::Symlink).then_some(perm),
            uid: Some(owner.uid),
            gid: Some(owner.gid),
            mtime: Some(ts(&ms)),
            atime: Some(ts(&ms)),
            ..Default::default()
        };
        let back = fs.setattr(a.ino, &set).expect("lanefs setattr");
        assert_eq!(back.mtime, ts(&ms), "setattr mtime round trip");
    }
}

/// Every entry of a lanefs directory, read with the resumable cursor in batches.
pub(super) fn lanefs_list(fs: &Fs, dir: Ino, batch: usize) -> Vec<lanefs::DirEntry> {
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    let mut pos = 0;
    loop {
        let v = fs.readdir(dir, pos, batch).expect("readdir");
        if v.is_empty() {
            break;
        }
        for e in v {
            assert!(
                seen.insert(e.name.clone()),
                "readdir returned {:?} twice",
                String::from_utf8_lossy(&e.name)
            );
            assert!(e.next > pos, "readdir cursor went backwards");
            pos = e.next;
            out.push(e);
        }
    }
    out
}

pub(super) fn lanefs_read_all(fs: &Fs, ino: Ino) -> Vec<u8> {
    let size = fs.getattr(ino).expect("getattr").size;
    let mut out = vec![0u8; size as usize];
    let mut off = 0usize;
    while off < out.len() {
        let n = fs
            .read(
                ino,
                off as u64,
                &mut out[off..(off + (1 << 20)).min(size as usize)],
            )
            .expect("lanefs read");
        assert!(n > 0, "short read at {off} of {size}");
        off += n;
    }
    let mut extra = [0u8; 16];
    assert_eq!(fs.read(ino, size, &mut extra).expect("read at eof"), 0);
    out
}

pub(super) fn check_attr(a: &Attr, ms: &std::fs::Metadata, what: &str) {
    let kind = kind_of(ms.file_type());
    assert_eq!(a.kind, kind, "type of {what}");
    assert_eq!((a.uid, a.gid), (ms.uid(), ms.gid()), "owner of {what}");
    assert_eq!(a.mtime, ts(ms), "mtime of {what}");
    if kind != FileType::Symlink {
        assert_eq!(
            u32::from(a.perm),
            ms.mode() & 0o7777,
            "permissions of {what}"
        );
    }
    if matches!(kind, FileType::Regular | FileType::Symlink) {
        assert_eq!(a.size, ms.len(), "size of {what}");
    }
    if matches!(kind, FileType::CharDevice | FileType::BlockDevice) {
        assert_eq!(u64::from(a.rdev), ms.rdev(), "rdev of {what}");
    }
}

/// Compare a lanefs directory with the host source tree.
pub(super) fn compare_lanefs(fs: &Fs, src: &Path, dir: Ino, top: bool, checked: &mut usize) {
    let list = lanefs_list(fs, dir, 3);
    let mut got: BTreeMap<Vec<u8>, (Ino, FileType)> = list
        .into_iter()
        .map(|e| (e.name, (e.ino, e.kind)))
        .collect();
    assert_eq!(got.remove(&b"."[..]).map(|x| x.0), Some(dir), ". entry");
    assert!(got.remove(&b".."[..]).is_some(), ".. entry");
    if top {
        got.remove(&b"lost+found"[..]);
    }
    let want = host_names(src);
    assert_eq!(
        got.keys()
            .map(|n| String::from_utf8_lossy(n).into_owned())
            .collect::<Vec<_>>(),
        want.iter()
            .map(|n| String::from_utf8_lossy(n).into_owned())
            .collect::<Vec<_>>(),
        "names differ in {}",
        src.display()
    );
    for (name, (ino, kind)) in got {
        let s = src.join(OsStr::from_bytes(&name));
        let what = s.display().to_string();
        let ms = std::fs::symlink_metadata(&s).expect("meta");
        let a = fs.lookup(dir, &name).expect("lanefs lookup");
        assert_eq!(a.ino, ino, "lookup and readdir disagree on {what}");
        assert_eq!(a.kind, kind, "dirent type of {what}");
        check_attr(&a, &ms, &what);
        match a.kind {
            FileType::Regular => {
                assert!(
                    lanefs_read_all(fs, ino) == std::fs::read(&s).expect("read src"),
                    "bytes of {what} differ"
                );
            }
            FileType::Symlink => {
                let t = std::fs::read_link(&s).expect("readlink");
                assert_eq!(
                    fs.readlink(ino).expect("lanefs readlink"),
                    t.as_os_str().as_bytes(),
                    "target of {what}"
                );
            }
            FileType::Directory => compare_lanefs(fs, &s, ino, false, checked),
            _ => {}
        }
        *checked += 1;
    }
}

pub(super) fn many_name(i: usize) -> String {
    // Varying lengths exercise record packing and leaf splits.
    format!("f{i:06}{}", "x".repeat(i % 23))
}

pub(super) fn many_content(i: usize) -> Option<Vec<u8>> {
    i.is_multiple_of(10)
        .then(|| format!("tiny {i}\n").into_bytes())
}

/// The 4 KiB block `k` of the fragmented files.
pub(super) fn block_pattern(k: u64) -> Vec<u8> {
    let mut rng = StdRng::seed_from_u64(0xF7A6 ^ k);
    let mut b = vec![0u8; BS as usize];
    rng.fill_bytes(&mut b);
    b
}

/// Leaf extents and depth of a file's extent tree, from `debugfs -R "ex PATH"`.
pub(super) fn debugfs_extents(img: &Path, path: &str) -> (usize, u32) {
    let out = run(Command::new("debugfs")
        .arg("-R")
        .arg(format!("ex {path}"))
        .arg(img))
    .expect("debugfs ex");
    let mut leaves = 0;
    let mut depth = 0;
    for line in out.lines().skip(1) {
        // " 1/ 2   1/  5     0 -   679  33849   680": level/depth first.
        let Some((lvl, rest)) = line.trim().split_once('/') else {
            continue;
        };
        let Some(d) = rest.split_whitespace().next() else {
            continue;
        };
        let (Ok(l), Ok(d)) = (lvl.trim().parse::<u32>(), d.parse::<u32>()) else {
            continue;
        };
        depth = d;
        if l == d {
            leaves += 1;
        }
    }
    (leaves, depth)
}

pub(super) fn secs(t: Instant) -> String {
    format!("{:.1} s", t.elapsed().as_secs_f64())
}
