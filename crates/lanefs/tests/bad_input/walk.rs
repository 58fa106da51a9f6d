//! Running the cases: one case runs fsck on the (possibly damaged) image, then mounts,
//! walks and modifies it, in a thread with a time limit, so a panic, a hang or a badly
//! named error is a failure; `run_cases` runs a list of cases on a few workers and reports
//! every failure.

use super::*;

// ---------------------------------------------------------------------------------------
// Running one case: mount, walk, modify, fsck; no panic, no hang.

/// Holds the mounted file system; leaks it instead of dropping it during a panic (its Drop
/// writes back, and a second panic there would abort the whole test binary).
struct Mounted(Option<Arc<Fs>>);

impl Drop for Mounted {
    fn drop(&mut self) {
        if std::thread::panicking() {
            std::mem::forget(self.0.take());
        }
    }
}

#[derive(Default)]
pub(super) struct Walk {
    pub(super) entries: usize,
    bytes: u64,
    pub(super) errors: Vec<String>,
    /// Engine misbehaviour that is not a panic (e.g. a readdir cursor that does not move).
    pub(super) bugs: Vec<String>,
    dirs: HashSet<Ino>,
}

impl Walk {
    fn err(&mut self, what: &str, e: Error) {
        let msg = e.to_string();
        if msg.trim().is_empty() {
            self.bugs
                .push(format!("{what}: empty error message ({e:?})"));
        }
        if self.errors.len() < 20 {
            self.errors.push(format!("{what}: {msg}"));
        }
    }
}

pub(super) fn walk_dir(fs: &Fs, dir: Ino, depth: usize, w: &mut Walk) {
    if depth > 40 || !w.dirs.insert(dir) || w.entries > 200_000 {
        return;
    }
    let mut pos = 0;
    for _ in 0..100_000 {
        let v = match fs.readdir(dir, pos, 256) {
            Ok(v) => v,
            Err(e) => return w.err(&format!("readdir {dir}"), e),
        };
        if v.is_empty() {
            return;
        }
        // A damaged index may list an entry twice, but the cursor must never go back and
        // every batch must move it forward, or a caller following it would loop forever.
        let start = pos;
        if v.last().is_some_and(|e| e.next <= start) {
            w.bugs.push(format!(
                "readdir {dir}: a batch from cursor {start} does not advance it"
            ));
            return;
        }
        for e in v {
            if e.next < pos {
                w.bugs.push(format!(
                    "readdir {dir}: cursor goes back from {pos} to {}",
                    e.next
                ));
                return;
            }
            pos = e.next;
            w.entries += 1;
            if e.name == b"." || e.name == b".." {
                continue;
            }
            visit(fs, dir, &e.name, depth, w);
        }
    }
    w.bugs
        .push(format!("readdir {dir}: more than 100000 batches"));
}

fn visit(fs: &Fs, dir: Ino, name: &[u8], depth: usize, w: &mut Walk) {
    let what = format!("{dir}/{}", String::from_utf8_lossy(name));
    let a = match fs.lookup(dir, name) {
        Ok(a) => a,
        Err(e) => return w.err(&format!("lookup {what}"), e),
    };
    if let Err(e) = fs.getattr(a.ino) {
        w.err(&format!("getattr {what}"), e);
    }
    match a.kind {
        FileType::Directory => walk_dir(fs, a.ino, depth + 1, w),
        FileType::Symlink => {
            if let Err(e) = fs.readlink(a.ino) {
                w.err(&format!("readlink {what}"), e);
            }
        }
        FileType::Regular => {
            let mut buf = vec![0u8; 1 << 20];
            let mut off = 0u64;
            while off < a.size.min(READ_CAP) {
                match fs.read(a.ino, off, &mut buf) {
                    Ok(0) => break,
                    Ok(n) => off += n as u64,
                    Err(e) => return w.err(&format!("read {what} at {off}"), e),
                }
            }
            w.bytes += off;
        }
        _ => {}
    }
}

/// Changes on the (possibly damaged) file system: errors are fine, panics are not.
fn modify(fs: &Fs, w: &mut Walk) {
    let o = Owner::default();
    let mut note = |what: &str, r: Result<(), Error>| {
        if let Err(e) = r {
            w.err(what, e);
        }
    };
    note(
        "create",
        fs.create(ROOT_INO, b"new_file", 0o644, o).and_then(|a| {
            fs.write(a.ino, 0, &vec![7u8; 100_000])?;
            fs.write(a.ino, 500_000, b"tail")?;
            fs.release(a.ino)
        }),
    );
    note(
        "mkdir",
        fs.mkdir(ROOT_INO, b"new_dir", 0o755, o).map(|_| ()),
    );
    for name in ["htree", "dir1"] {
        let r = fs.lookup(ROOT_INO, name.as_bytes()).and_then(|d| {
            for i in 0..40 {
                let a = fs.create(d.ino, format!("added_{i}").as_bytes(), 0o600, o)?;
                fs.release(a.ino)?;
            }
            fs.unlink(d.ino, b"added_3")?;
            fs.rename(d.ino, b"added_4", ROOT_INO, b"moved_4")
        });
        note(name, r);
    }
    note("unlink medium", fs.unlink(ROOT_INO, b"medium"));
    note(
        "append frag",
        fs.lookup(ROOT_INO, b"frag")
            .and_then(|a| fs.write(a.ino, a.size, &[1u8; 9000]).map(|_| ())),
    );
    note(
        "truncate big",
        fs.lookup(ROOT_INO, b"big").and_then(|a| {
            fs.setattr(
                a.ino,
                &SetAttr {
                    size: Some(1000),
                    ..Default::default()
                },
            )
            .map(|_| ())
        }),
    );
    note(
        "rmdir dir2",
        fs.lookup(ROOT_INO, b"dir1")
            .and_then(|d| fs.rmdir(d.ino, b"dir2")),
    );
    note("sync", fs.sync());
}

/// An image in memory that fsck and then the mount read without another copy.
struct VecDev(std::sync::RwLock<Vec<u8>>);

impl BlockDevice for VecDev {
    fn read_at(&self, off: u64, buf: &mut [u8]) -> lanefs::Result<()> {
        let d = self.0.read().expect("image lock");
        let end = off
            .checked_add(buf.len() as u64)
            .filter(|&e| e <= d.len() as u64);
        let end = end.ok_or_else(|| {
            Error::io_other(
                format!("reading at byte {off}"),
                format!("past the end ({})", d.len()),
            )
        })?;
        buf.copy_from_slice(&d[off as usize..end as usize]);
        Ok(())
    }
    fn write_at(&self, off: u64, buf: &[u8]) -> lanefs::Result<()> {
        let mut d = self.0.write().expect("image lock");
        let end = off
            .checked_add(buf.len() as u64)
            .filter(|&e| e <= d.len() as u64);
        let end = end.ok_or_else(|| {
            Error::io_other(
                format!("writing at byte {off}"),
                format!("past the end ({})", d.len()),
            )
        })?;
        d[off as usize..end as usize].copy_from_slice(buf);
        Ok(())
    }
    fn flush(&self) -> lanefs::Result<()> {
        Ok(())
    }
    fn size(&self) -> u64 {
        self.0.read().expect("image lock").len() as u64
    }
}

/// fsck, mount, walk and modify `img`. Ok(summary) or Err(why the case fails).
fn exercise(img: Vec<u8>, words: &[&str]) -> Result<String, String> {
    let mut summary = String::new();
    let mut bugs = Vec::new();
    let dev = Arc::new(VecDev(std::sync::RwLock::new(img)));
    match lanefs::fsck::check(&*dev, &lanefs::fsck::FsckOptions::default()) {
        Ok(r) => summary.push_str(&format!(
            "fsck: {} problems; ",
            r.problems.len() as u64 + r.problems_omitted
        )),
        Err(e) => {
            if e.to_string().trim().is_empty() {
                bugs.push(format!("fsck error with empty message {e:?}"));
            }
            summary.push_str(&format!("fsck: {e}; "));
        }
    }
    match Fs::mount(dev, MountOptions::default()) {
        Err(e) => {
            let msg = e.to_string();
            let lower = msg.to_lowercase();
            // Only these kinds describe damage; NotFound or Invalid would hide what is wrong
            // (and "no such file or directory" must not pass for naming a directory).
            let typed = matches!(
                e,
                Error::Corrupt { .. }
                    | Error::NotExt4(_)
                    | Error::Unsupported(_)
                    | Error::Io { .. }
            );
            if !typed
                || msg.trim().is_empty()
                || !words.iter().any(|w| lower.contains(&w.to_lowercase()))
            {
                bugs.push(format!(
                    "mount error {msg:?} ({e:?}) names none of {words:?}"
                ));
            }
            summary.push_str(&format!("mount: {msg}"));
        }
        Ok(fs) => {
            let m = Mounted(Some(fs));
            let fs = m.0.as_ref().expect("mounted");
            let mut w = Walk::default();
            walk_dir(fs, ROOT_INO, 0, &mut w);
            let walked = format!(
                "walk {} entries {} bytes, {} errors",
                w.entries,
                w.bytes,
                w.errors.len()
            );
            if fs.statfs().is_err() {
                w.bugs.push("statfs failed".into());
            }
            modify(fs, &mut w);
            let fs = m.0.clone().expect("mounted");
            drop(m);
            if let Err(e) = fs.unmount() {
                w.err("unmount", e);
            }
            summary.push_str(&format!(
                "mounted; {walked}; after changes {} errors",
                w.errors.len()
            ));
            if let Some(first) = w.errors.first() {
                summary.push_str(&format!(" (first: {first})"));
            }
            bugs.extend(w.bugs);
        }
    }
    if bugs.is_empty() {
        Ok(summary)
    } else {
        Err(bugs.join("; "))
    }
}

fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

/// Run `exercise` in a thread with a time limit; Err on panic, hang or bug.
fn run_case(img: Vec<u8>, words: &'static [&'static str]) -> Result<String, String> {
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("bad_input_case".into())
        .spawn(move || {
            let r = catch_unwind(AssertUnwindSafe(|| exercise(img, words)));
            let _ = tx.send(r.unwrap_or_else(|p| Err(format!("PANIC: {}", panic_text(&*p)))));
        })
        .expect("spawn case thread");
    match rx.recv_timeout(LIMIT) {
        Ok(r) => r,
        Err(_) => Err(format!("HANG: no result within {} s", LIMIT.as_secs())),
    }
}

/// Run every case; fail with the list of panics, hangs and badly named errors.
pub(super) fn run_cases(test: &str, cases: Vec<Case>, b: &'static Base) {
    let t0 = Instant::now();
    let n = cases.len();
    let failures = Mutex::new(Vec::new());
    let mounted = AtomicU64::new(0);
    let queue = Mutex::new(cases.into_iter().collect::<std::collections::VecDeque<_>>());
    let workers = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .clamp(1, 4);
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                set_bs(b.bs);
                let Some(c) = queue.lock().expect("queue").pop_front() else {
                    return;
                };
                let mut img = b.img.clone();
                (c.mutate)(b, &mut img);
                let r = run_case(img, c.words);
                match r {
                    Ok(summary) => {
                        if summary.contains("; mounted") {
                            mounted.fetch_add(1, Ordering::Relaxed);
                        }
                        println!("ok   {}: {summary}", c.name);
                    }
                    Err(why) => {
                        println!("FAIL {}: {why}", c.name);
                        failures
                            .lock()
                            .expect("failures")
                            .push(format!("{}: {why}", c.name));
                    }
                }
            });
        }
    });
    let failures = failures.into_inner().expect("failures");
    println!(
        "{test}: {n} cases ({} mounted) in {:.1} s, {} failed",
        mounted.load(Ordering::Relaxed),
        t0.elapsed().as_secs_f64(),
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{test}: {} of {n} cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
