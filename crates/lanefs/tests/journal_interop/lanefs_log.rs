//! (2) lanefs's log: lanefs calls that panic on failure, a copy of the image taken while
//! lanefs is mounted (`Snap`) and its check (it must need recovery; e2fsck, the kernel and
//! lanefs each replay a copy), and the two phases of fsync-ed changes lanefs makes before
//! each copy.

use super::*;

// ---------------------------------------------------------------------------------------
// lanefs helpers.

const ME: Owner = Owner {
    uid: 0,
    gid: 0,
    umask: 0,
};

fn lwrite(fs: &Fs, ino: Ino, off: u64, data: &[u8]) {
    let mut done = 0;
    while done < data.len() {
        let end = (done + (1 << 20)).min(data.len());
        let n = fs
            .write(ino, off + done as u64, &data[done..end])
            .expect("lanefs write");
        assert!(n > 0, "lanefs wrote nothing");
        done += n;
    }
}

/// Create `name` in `dir` with `data`, fsync it if asked, release it. Returns its inode.
pub(super) fn lput(fs: &Fs, dir: Ino, name: &str, data: &[u8], perm: u16, fsync: bool) -> Ino {
    let a = fs
        .create(dir, name.as_bytes(), perm, ME)
        .unwrap_or_else(|e| panic!("lanefs create {name}: {e}"));
    lwrite(fs, a.ino, 0, data);
    if fsync {
        fs.fsync(a.ino, false).expect("lanefs fsync");
    }
    fs.release(a.ino).expect("lanefs release");
    a.ino
}

pub(super) fn lmkdir(fs: &Fs, dir: Ino, name: &str) -> Ino {
    fs.mkdir(dir, name.as_bytes(), 0o755, ME)
        .unwrap_or_else(|e| panic!("lanefs mkdir {name}: {e}"))
        .ino
}

pub(super) fn llook(fs: &Fs, path: &str) -> Ino {
    let mut ino = ROOT_INO;
    for c in path.split('/').filter(|c| !c.is_empty()) {
        ino = fs
            .lookup(ino, c.as_bytes())
            .unwrap_or_else(|e| panic!("lanefs lookup {path}: {e}"))
            .ino;
    }
    ino
}

// ---------------------------------------------------------------------------------------
// (2) lanefs's log, replayed by e2fsck, the kernel and lanefs.

/// One copy of a lanefs image taken while mounted, with what it must replay to.
pub(super) struct Snap {
    label: String,
    img: PathBuf,
    model: Tree,
    orphans: Vec<u64>,
}

pub(super) fn take_snap(
    test: &str,
    td: &Path,
    dev: &SnapDevice,
    fs: &Fs,
    label: &str,
    orphans: &[u64],
) -> Snap {
    let model = walk_lanefs(fs);
    let img = td.join(format!("{label}.img"));
    dev.snapshot(&img);
    println!(
        "{test}: copied the image at {label}: {} entries, {} log blocks written so far, journal_stats {:?}",
        model.len(),
        dev.log_blocks(),
        fs.diagnostics().journal_stats()
    );
    Snap {
        label: label.to_string(),
        img,
        model,
        orphans: orphans.to_vec(),
    }
}

/// The image lanefs left must need recovery: committed transactions in its log.
fn check_needs_recovery(f: &mut Failures, s: &Snap) -> Option<SbInfo> {
    match sb_info(&s.img) {
        Ok(sb) => {
            println!(
                "{}: needs_recovery {}, journal start {}, sequence {}, first orphan {:?}",
                s.label, sb.needs_recovery, sb.journal_start, sb.journal_seq, sb.first_orphan
            );
            f.check(sb.needs_recovery && sb.journal_start != 0, || {
                format!(
                    "{}: the copy taken while lanefs was mounted needs no recovery \
                     (needs_recovery {}, journal start {}; features: {}): lanefs left no committed log",
                    s.label, sb.needs_recovery, sb.journal_start, sb.features
                )
            });
            if !s.orphans.is_empty() {
                f.check(sb.first_orphan.is_some() || sb.needs_recovery, || {
                    format!(
                        "{}: open-unlinked inodes {:?} are neither on the on-disk orphan list nor in a log to replay",
                        s.label, s.orphans
                    )
                });
            }
            Some(sb)
        }
        Err(e) => {
            f.add(format!("{}: dumpe2fs -h: {e}", s.label));
            None
        }
    }
}

/// e2fsck (A), optionally the kernel (B), and lanefs (C) each replay a copy of `s`.
pub(super) fn verify_snap(test: &'static str, td: &Path, s: &Snap, f: &mut Failures) {
    let t0 = Instant::now();
    check_needs_recovery(f, s);
    let l = &s.label;
    log_evidence(test, td, l, &s.model, &s.img);

    let a = td.join(format!("{l}_a_e2fsck.img"));
    copy_image(&s.img, &a);
    replay_e2fsck(test, &a, &format!("{l} (copy A)"), true, f);
    let (ta, ca) = after_replay(td, &a, &format!("{l}: e2fsck -fy (copy A)"), &s.orphans, f);

    let b = td.join(format!("{l}_b_kernel.img"));
    copy_image(&s.img, &b);
    let (tb, cb) = replay_kernel(
        td,
        &b,
        &format!("{l}: kernel mount (copy B)"),
        &s.model,
        &s.orphans,
        f,
    );

    let c = td.join(format!("{l}_c_lanefs.img"));
    copy_image(&s.img, &c);
    let (tc, cc) = match replay_lanefs(test, &c, &format!("{l} (copy C)"), f) {
        Some(lt) => {
            f.diffs(
                &format!("{l}: lanefs's own view after replay vs lanefs at the copy"),
                diff_durable(&s.model, "lanefs", &lt),
            );
            after_replay(
                td,
                &c,
                &format!("{l}: lanefs replay (copy C)"),
                &s.orphans,
                f,
            )
        }
        None => (None, None),
    };
    compare_all(
        f,
        l,
        &s.model,
        &[
            ("e2fsck (A)", ta.as_ref()),
            ("kernel (B)", tb.as_ref()),
            ("lanefs (C)", tc.as_ref()),
        ],
    );
    compare_counts(
        f,
        l,
        &[("e2fsck (A)", ca), ("kernel (B)", cb), ("lanefs (C)", cc)],
    );
    println!("{test}: {l} verified in {}", secs(t0));
}

/// Files, symlinks, a hard link, an htree directory and renames, all fsync-ed; then a
/// few changes in /u that no fsync covers.
pub(super) fn lanefs_phase1(fs: &Fs) -> Ino {
    let a = lmkdir(fs, ROOT_INO, "a");
    let ab = lmkdir(fs, a, "b");
    let e = lmkdir(fs, ROOT_INO, "e");
    let h = lmkdir(fs, ROOT_INO, "h");
    let u = lmkdir(fs, ROOT_INO, "u");
    for (di, d) in [a, ab, e].into_iter().enumerate() {
        for (k, &sz) in SIZES.iter().enumerate() {
            let seed = (di * 100 + k) as u64;
            lput(
                fs,
                d,
                &format!("f{k}"),
                &content(seed, sz),
                PERMS[k % PERMS.len()] as u16,
                true,
            );
        }
    }
    fs.symlink(e, b"short", b"a/b", ME).expect("symlink");
    fs.symlink(e, b"long", "l".repeat(300).as_bytes(), ME)
        .expect("symlink");
    let f0 = fs.lookup(a, b"f0").expect("lookup").ino;
    fs.link(f0, ab, b"hl").expect("link");
    for i in 0..HTREE {
        let data = if i % 10 == 0 {
            format!("htree {i}\n").into_bytes()
        } else {
            Vec::new()
        };
        lput(fs, h, &hname(i), &data, 0o644, false);
    }
    fs.rename(a, b"f3", e, b"f3_renamed").expect("rename");
    let victim = lput(fs, a, "victim", &content(77, 2 << 20), 0o644, true);
    for d in [ROOT_INO, a, ab, e, h, u] {
        fs.fsync(d, false).expect("fsync dir");
    }
    for i in 0..20u64 {
        lput(
            fs,
            u,
            &format!("p1_{i}"),
            &content(3000 + i, 3000),
            0o644,
            false,
        );
    }
    victim
}

/// Renames, unlinks, truncation, an overwrite, htree churn and two open-unlinked files,
/// all fsync-ed; then more changes in /u. Returns the orphans, still open.
pub(super) fn lanefs_phase2(fs: &Fs, victim: Ino) -> Vec<Ino> {
    let a = llook(fs, "/a");
    let ab = llook(fs, "/a/b");
    let h = llook(fs, "/h");
    let u = llook(fs, "/u");
    let late = lmkdir(fs, ROOT_INO, "late");
    let sub = lmkdir(fs, late, "sub");
    for i in 0..200usize {
        let len = (i * 997) % 20_000 + 1;
        lput(
            fs,
            late,
            &format!("l{i}"),
            &content(1000 + i as u64, len),
            0o644,
            true,
        );
    }
    for i in (0..HTREE).step_by(4) {
        fs.unlink(h, hname(i).as_bytes())
            .expect("unlink htree entry");
    }
    for i in 0..1000 {
        let data = if i % 7 == 0 {
            format!("new {i}\n").into_bytes()
        } else {
            Vec::new()
        };
        lput(
            fs,
            h,
            &format!("new_{i:04}"),
            &data,
            0o644,
            !data.is_empty(),
        );
    }
    for k in 0..4 {
        fs.rename(
            ab,
            format!("f{k}").as_bytes(),
            sub,
            format!("c{k}").as_bytes(),
        )
        .expect("rename into late/sub");
    }
    fs.rename(ROOT_INO, b"e", late, b"e_moved")
        .expect("rename dir");
    fs.unlink(a, b"f1").expect("unlink a/f1");
    let f7 = fs.lookup(ab, b"f7").expect("lookup").ino;
    fs.setattr(
        f7,
        &SetAttr {
            size: Some(1000),
            ..Default::default()
        },
    )
    .expect("truncate");
    fs.fsync(f7, false).expect("fsync");
    let af7 = fs.lookup(a, b"f7").expect("lookup").ino;
    lwrite(fs, af7, 1000, b"overwritten in place");
    fs.fsync(af7, false).expect("fsync");
    let f2 = fs.lookup(a, b"f2").expect("lookup").ino;
    fs.setattr(
        f2,
        &SetAttr {
            perm: Some(0o600),
            ..Default::default()
        },
    )
    .expect("chmod");
    let f5 = fs.lookup(ab, b"f5").expect("lookup").ino;
    fs.link(f5, late, b"hl2").expect("link");
    // Open-unlinked: one opened after it was written and synced, one held since create.
    fs.open(victim).expect("open victim");
    fs.unlink(a, b"victim").expect("unlink victim");
    fs.fsync(a, false).expect("fsync a");
    let tmp = fs
        .create(late, b"tmp_orphan", 0o644, ME)
        .expect("create tmp_orphan");
    lwrite(fs, tmp.ino, 0, &content(78, 1 << 20));
    fs.fsync(tmp.ino, false).expect("fsync tmp_orphan");
    fs.unlink(late, b"tmp_orphan").expect("unlink tmp_orphan");
    fs.fsync(late, false).expect("fsync late");
    for d in [ROOT_INO, a, ab, late, sub, h] {
        fs.fsync(d, false).expect("fsync dir");
    }
    for i in 0..20u64 {
        lput(
            fs,
            u,
            &format!("p2_{i}"),
            &content(4000 + i, 3000),
            0o644,
            false,
        );
    }
    vec![victim, tmp.ino]
}
