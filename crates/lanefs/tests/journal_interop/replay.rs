//! Checks on one replayed copy: what every replayer must leave (e2fsck -fn clean, no recovery
//! pending, an empty orphan list with the orphans' inodes free, superblock and group free
//! counts that agree), each replayer's run (e2fsck -fy, a lanefs mount, a kernel mount), how
//! much of the tree only the log holds, and the replayers' trees and free counts compared.

use super::*;

// ---------------------------------------------------------------------------------------
// Checks on one replayed copy.

/// What every replayer must leave: e2fsck -fn clean, no recovery pending, an empty orphan
/// list, the orphans' inodes free. Returns the copy's tree through the kernel and its
/// counts.
pub(super) fn after_replay(
    td: &Path,
    img: &Path,
    who: &str,
    orphans: &[u64],
    f: &mut Failures,
) -> (Option<Tree>, Option<Counts>) {
    if let Err(e) = fsck_n(img) {
        f.add(format!("e2fsck -fn after {who} is not clean: {e}"));
    }
    match sb_info(img) {
        Ok(sb) => {
            f.check(!sb.needs_recovery, || {
                format!(
                    "after {who} the superblock still has needs_recovery (features: {})",
                    sb.features
                )
            });
            f.check(sb.first_orphan.is_none(), || {
                format!(
                    "after {who} the orphan list is not empty: first orphan inode {:?}",
                    sb.first_orphan
                )
            });
        }
        Err(e) => f.add(format!("dumpe2fs -h after {who}: {e}")),
    }
    for &ino in orphans {
        match inode_in_use(img, ino) {
            Ok(false) => {}
            Ok(true) => f.add(format!(
                "after {who} the open-unlinked inode {ino} is still marked in use (orphan list not processed)"
            )),
            Err(e) => f.add(format!("after {who}: {e}")),
        }
    }
    let c = match counts(img) {
        Ok(c) => {
            f.check(
                c.sb_blocks == c.group_blocks && c.sb_inodes == c.group_inodes,
                || {
                    format!(
                        "after {who} the superblock's free counts disagree with the groups': {c}"
                    )
                },
            );
            Some(c)
        }
        Err(e) => {
            f.add(format!("dumpe2fs after {who}: {e}"));
            None
        }
    };
    let t = match kernel_walk(img, &fresh_mnt(td)) {
        Ok(t) => Some(t),
        Err(e) => {
            f.add(format!(
                "the kernel cannot mount the image after {who} (ro,noload): {e}"
            ));
            None
        }
    };
    (t, c)
}

/// e2fsck -fy on `img`; `strict` also fails fixes beyond replay, lazy counters and
/// orphans (for logs lanefs wrote). Prints its exit code and output.
pub(super) fn replay_e2fsck(test: &str, img: &Path, who: &str, strict: bool, f: &mut Failures) {
    let t = Instant::now();
    let r = e2fsck_fy(img);
    println!(
        "{test}: e2fsck -fy on {who} exited {} in {}:\n{}",
        r.code,
        secs(t),
        indent(&r.output)
    );
    f.check(r.code == 0 || r.code == 1, || {
        format!(
            "e2fsck -fy on {who} exited {} (0 or 1 expected):\n{}",
            r.code,
            indent(&r.output)
        )
    });
    f.check(r.recovered, || {
        format!("e2fsck -fy on {who} found no journal to recover (no \"recovering journal\")")
    });
    if !r.journal_complaints.is_empty() {
        f.add(format!(
            "e2fsck -fy on {who} complained about the journal: {:?}",
            r.journal_complaints
        ));
    }
    if !r.extra_fixes.is_empty() {
        if strict {
            f.add(format!(
                "e2fsck -fy on {who} fixed more than replay, lazy free counters and orphans: {:?}",
                r.extra_fixes
            ));
        } else {
            println!(
                "{test}: note: e2fsck -fy on {who} also fixed {:?}",
                r.extra_fixes
            );
        }
    }
}

/// Mount `img` with lanefs (which must replay), walk it, unmount. Returns lanefs's tree.
pub(super) fn replay_lanefs(test: &str, img: &Path, who: &str, f: &mut Failures) -> Option<Tree> {
    let t = Instant::now();
    // A panic in replay is one more failure: the other replayers are still compared.
    let r = std::panic::catch_unwind(|| -> Result<(Tree, Option<String>), String> {
        let fs = Fs::mount_path(img, MountOptions::default())
            .map_err(|e| format!("lanefs refuses to mount {who}: {e}"))?;
        let tree = walk_lanefs(&fs);
        let unmount = fs
            .unmount()
            .err()
            .map(|e| format!("lanefs unmount of {who} failed: {e}"));
        Ok((tree, unmount))
    });
    let tree = match r {
        Ok(Ok((tree, unmount))) => {
            if let Some(e) = unmount {
                f.add(e);
            }
            tree
        }
        Ok(Err(e)) => {
            f.add(e);
            return None;
        }
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            f.add(format!("lanefs panicked mounting or walking {who}: {msg}"));
            return None;
        }
    };
    println!(
        "{test}: lanefs mounted, walked and unmounted {who} in {}",
        secs(t)
    );
    Some(tree)
}

/// Mount `img` read-write with the kernel (which replays), compare its live view with
/// `model`, unmount, and check what it left.
pub(super) fn replay_kernel(
    td: &Path,
    img: &Path,
    who: &str,
    model: &Tree,
    orphans: &[u64],
    f: &mut Failures,
) -> (Option<Tree>, Option<Counts>) {
    let km = match KernelMount::mount(img, &fresh_mnt(td), "") {
        Ok(km) => km,
        Err(e) => {
            f.add(format!("{who}: the kernel refuses to mount: {e}"));
            return (None, None);
        }
    };
    let live = walk_host(&km.dir);
    f.diffs(
        &format!("{who}: the kernel's live view after its replay vs the last fsync"),
        diff_durable(model, "kernel", &live),
    );
    match km.unmount() {
        Ok(()) => after_replay(td, img, who, orphans, f),
        Err(e) => {
            f.add(format!("{who}: kernel unmount: {e}"));
            (None, None)
        }
    }
}

/// How much of `model` only the log holds: the unreplayed copy walked with `noload`.
/// Prints a warning when nothing is (replay would then be untested).
pub(super) fn log_evidence(test: &str, td: &Path, label: &str, model: &Tree, img: &Path) {
    let commits = match log_commits(img) {
        Ok(n) => n.to_string(),
        Err(e) => format!("? ({})", e.lines().last().unwrap_or("")),
    };
    match kernel_walk(img, &fresh_mnt(td)) {
        Ok(home) => {
            let n = diff_durable(model, "home", &home).len();
            println!(
                "{test}: {label}: the log holds {commits} committed transactions; {n} entries \
                 differ between the last fsync and the unreplayed home locations"
            );
            if n == 0 {
                println!(
                    "{test}: {label}: WARNING: every change was already written home before the \
                     copy; replay is not needed, so this copy only shows that replay breaks nothing"
                );
            }
        }
        Err(e) => println!(
            "{test}: {label}: the log holds {commits} committed transactions; the unreplayed \
             home locations do not mount (ro,noload): {e}"
        ),
    }
}

/// Trees from several replayers must each equal the model outside `/u`, and agree with
/// each other on `/u` (what survives of the changes no fsync covered); together that is
/// full equality.
pub(super) fn compare_all(
    f: &mut Failures,
    when: &str,
    model: &Tree,
    trees: &[(&str, Option<&Tree>)],
) {
    for (who, t) in trees {
        if let Some(t) = t {
            f.diffs(
                &format!("{when}: {who} vs the tree at the last fsync"),
                diff_durable(model, who, t),
            );
        }
    }
    let volatile = |t: &Tree| -> Tree {
        t.iter()
            .filter(|(p, _)| *p == "/u" || p.starts_with("/u/"))
            .map(|(p, n)| (p.clone(), n.clone()))
            .collect()
    };
    let present: Vec<(&str, Tree)> = trees
        .iter()
        .filter_map(|(w, t)| t.map(|t| (*w, volatile(t))))
        .collect();
    for w in present.windows(2) {
        f.diffs(
            &format!(
                "{when}: {} vs {} on /u (written after the last fsync)",
                w[0].0, w[1].0
            ),
            diff_trees(w[0].0, &w[0].1, w[1].0, &w[1].1),
        );
    }
}

pub(super) fn compare_counts(f: &mut Failures, when: &str, counts: &[(&str, Option<Counts>)]) {
    let present: Vec<(&str, Counts)> = counts
        .iter()
        .filter_map(|(w, c)| c.map(|c| (*w, c)))
        .collect();
    for w in present.windows(2) {
        f.check(w[0].1 == w[1].1, || {
            format!(
                "{when}: free counts differ: {}: {}; {}: {}",
                w[0].0, w[0].1, w[1].0, w[1].1
            )
        });
    }
}
