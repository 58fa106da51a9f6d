//! Checking one crash state: mount it (the journal replays), walk it and compare it with the
//! model, unmount, then `lanefs::fsck` and, when asked, `e2fsck -fn` on the image.

use super::*;

/// Every entry of a directory through the cursor, without "." and "..".
fn readdir_all(fs: &Fs, ino: Ino) -> Result<Vec<lanefs::DirEntry>, String> {
    let mut out = Vec::new();
    let mut pos = 0;
    for _ in 0..100_000 {
        let got = fs
            .readdir(ino, pos, 512)
            .map_err(|e| format!("readdir of inode {ino}: {e}"))?;
        let Some(last) = got.last() else {
            return Ok(out);
        };
        if last.next <= pos {
            return Err(format!(
                "readdir of inode {ino}: the cursor did not advance"
            ));
        }
        pos = last.next;
        out.extend(
            got.into_iter()
                .filter(|e| e.name != b"." && e.name != b".."),
        );
    }
    Err(format!("readdir of inode {ino} never ended"))
}

fn read_all(fs: &Fs, ino: Ino, size: u64) -> Result<Vec<u8>, String> {
    let mut out = vec![0u8; size as usize];
    let mut done = 0;
    while done < out.len() {
        let n = fs
            .read(ino, done as u64, &mut out[done..])
            .map_err(|e| format!("read of inode {ino} at {done}: {e}"))?;
        if n == 0 {
            return Err(format!("inode {ino}: read ended at {done}, size is {size}"));
        }
        done += n;
    }
    Ok(out)
}

/// Of the model's directories `cands` that inode `ino` may be, the first whose names
/// the image's directory matches (each name known to it, each name it must have there);
/// the first of them when none does (the walk then reports what differs).
fn pick_dir(fs: &Fs, m: &Model, cands: &[NodeId], ino: Ino) -> Result<NodeId, String> {
    if cands.len() < 2 {
        return Ok(cands[0]);
    }
    let names: BTreeSet<Vec<u8>> = readdir_all(fs, ino)?.into_iter().map(|e| e.name).collect();
    let matches = |c: NodeId| {
        names.iter().all(|n| m.slots.contains_key(&(c, n.clone())))
            && m.slots
                .range((c, Vec::new())..(c + 1, Vec::new()))
                .all(|((_, n), slot)| {
                    names.contains(n) || !slot.allowed().iter().all(Option::is_some)
                })
    };
    Ok(cands
        .iter()
        .copied()
        .find(|&c| matches(c))
        .unwrap_or(cands[0]))
}

/// Walk the mounted crash state and compare it with the model: every entry one of the
/// states its name went through since the last acknowledgement, every file one of its
/// contents since the last fsync.
fn check_tree(fs: &Fs, m: &Model) -> Result<u64, String> {
    let mut stack: Vec<(NodeId, Ino, String)> = vec![(ROOT, ROOT_INO, "/".into())];
    let mut entries = 0u64;
    while let Some((dn, dino, path)) = stack.pop() {
        let mut seen = BTreeSet::new();
        for e in readdir_all(fs, dino)? {
            entries += 1;
            let p = format!("{path}{}", String::from_utf8_lossy(&e.name));
            if !seen.insert(e.name.clone()) {
                return Err(format!("{p}: listed twice"));
            }
            let Some(slot) = m.slots.get(&(dn, e.name.clone())) else {
                return Err(format!(
                    "{p}: unexpected entry (inode {}, {:?}): the workload never made it",
                    e.ino, e.kind
                ));
            };
            let fits = |n: &NodeId| {
                let node = &m.nodes[*n];
                node.kind == e.kind && node.ino.is_none_or(|i| i == e.ino)
            };
            let mut cands: Vec<NodeId> = slot
                .allowed()
                .iter()
                .flatten()
                .copied()
                .filter(fits)
                .collect();
            cands.sort_by_key(|n| (m.nodes[*n].ino.is_none(), *n));
            cands.dedup();
            if cands.is_empty() {
                let allowed: Vec<String> = slot.allowed().iter().map(|&t| m.describe(t)).collect();
                return Err(format!(
                    "{p}: points to inode {} ({:?}); since the last ack it could only be: {}",
                    e.ino,
                    e.kind,
                    allowed.join(", ")
                ));
            }
            let a = fs
                .getattr(e.ino)
                .map_err(|err| format!("{p}: getattr of inode {}: {err}", e.ino))?;
            if a.kind != e.kind {
                return Err(format!(
                    "{p}: entry says {:?}, inode {} is {:?}",
                    e.kind, e.ino, a.kind
                ));
            }
            match e.kind {
                FileType::Directory => {
                    // Several directories may fit (a name removed and made again whose
                    // inode number came back): walk the one whose names the image shows.
                    let c = pick_dir(fs, m, &cands, e.ino)?;
                    stack.push((c, e.ino, format!("{p}/")));
                }
                FileType::Regular => {
                    if a.nlink != 1 {
                        return Err(format!("{p}: inode {} has {} links, not 1", e.ino, a.nlink));
                    }
                    let got = read_all(fs, e.ino, a.size)?;
                    let mut why = Vec::new();
                    let ok = cands.iter().any(|&c| {
                        let node = &m.nodes[c];
                        match content_allowed(&node.versions[node.floor..], &got) {
                            Ok(()) => true,
                            Err(w) => {
                                why.push(format!("as {}: {w}", node.label));
                                false
                            }
                        }
                    });
                    if !ok {
                        return Err(format!("{p} (inode {}): {}", e.ino, why.join("; ")));
                    }
                }
                k => return Err(format!("{p}: unexpected type {k:?}")),
            }
        }
        for ((_, name), slot) in m.slots.range((dn, Vec::new())..(dn + 1, Vec::new())) {
            if !seen.contains(name) && slot.allowed().iter().all(Option::is_some) {
                let allowed: Vec<String> = slot.allowed().iter().map(|&t| m.describe(t)).collect();
                return Err(format!(
                    "{path}{}: missing; acknowledged as {}",
                    String::from_utf8_lossy(name),
                    allowed.join(" or ")
                ));
            }
        }
    }
    Ok(entries)
}

/// Write an image sparsely (only non-zero 64 KiB chunks).
pub(super) fn write_image(path: &Path, img: &[u8]) {
    let f = std::fs::File::create(path).expect("create image file");
    f.set_len(img.len() as u64).expect("size image file");
    const CHUNK: usize = 64 << 10;
    static ZERO: [u8; CHUNK] = [0; CHUNK];
    for (i, c) in img.chunks(CHUNK).enumerate() {
        // A slice comparison is a memcmp: fast even in the test profile.
        if c != &ZERO[..c.len()] {
            f.write_all_at(c, (i * CHUNK) as u64).expect("write image");
        }
    }
}

fn e2fsck_image(img: &[u8]) -> Result<(), String> {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("state.img");
    write_image(&path, img);
    let (code, text) = common::e2fsck(&path);
    if code == 0 {
        Ok(())
    } else {
        let text: String = text.lines().take(40).collect::<Vec<_>>().join("\n");
        Err(format!("e2fsck -fn exited {code}:\n{text}"))
    }
}

/// e2fsck runs so far, across the workload tests (to sample every Nth state).
pub(super) static STATES_SEEN: AtomicU64 = AtomicU64::new(0);

/// Check one crash state: mount (replay), compare with the model, unmount, lanefs fsck,
/// and e2fsck when asked (or when something else failed, for the message). All problems
/// found, or Ok. The image's buffer goes back to the pool.
pub(super) fn check_state(img: Vec<u8>, m: &Model, e2fsck: bool) -> Result<(), String> {
    let dev = Arc::new(CrashDevice::from_vec(img));
    let mut errs = Vec::new();
    match Fs::mount(dev.clone(), opts()) {
        Ok(fs) => {
            if let Err(e) = check_tree(&fs, m) {
                errs.push(format!("model: {e}"));
            }
            if let Err(e) = fs.unmount() {
                errs.push(format!("unmount: {e}"));
            }
            match fsck::check(&*dev, &FsckOptions::default()) {
                Ok(r) if r.is_clean() => {}
                Ok(r) => {
                    let mut s = format!("lanefs fsck: {}", r.summary());
                    for p in r.problems.iter().take(12) {
                        let _ = write!(s, "\n  {p}");
                    }
                    errs.push(s);
                }
                Err(e) => errs.push(format!("lanefs fsck: {e}")),
            }
        }
        Err(e) => errs.push(format!("mount (replay) failed: {e}")),
    }
    let img = device_bytes(dev);
    if e2fsck || !errs.is_empty() {
        if let Err(e) = e2fsck_image(&img) {
            errs.push(e);
        }
    }
    give_buf(img);
    if errs.is_empty() {
        Ok(())
    } else {
        Err(errs.join("\n"))
    }
}
