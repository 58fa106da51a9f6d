//! `lanefs fsck`: check an image (`-n`, the default), or repair what a mount itself
//! repairs (`-p`, `-y`).
//!
//! The check is the engine's (`lanefs::fsck`): every inconsistency e2fsck would fix,
//! with the same exit codes (0 clean, 1 repaired, 4 problems left, 8 could not check).
//! A repair is what is safe without asking, as `e2fsck -p` does it: the journal's
//! committed transactions written home, the orphan list finished, the superblock's free
//! counts rewritten: exactly what a read-write mount does, so the repair is one
//! read-write mount and unmount by the engine, then the check again. Anything else
//! found (a bitmap that disagrees with the inodes, a damaged directory) is named and
//! left to `e2fsck -fy`: lanefs does not guess at damage.

use crate::cli::FsckArgs;
use crate::error::{CmdResult, Error, Failure};
use crate::format::open_device;
use lanefs::fsck::{check, FsckOptions, FsckReport};
use std::io::Write;
use std::path::Path;

/// fsck exit code for operational errors (image unreadable).
pub const FSCK_OPERATIONAL: i32 = 8;

/// e2fsck's exit code for "errors corrected".
const FSCK_REPAIRED: i32 = 1;

/// The findings a read-write mount repairs (each is reported only with nothing else
/// wrong, or after a crash, when the journal must be replayed before anything else can
/// be judged).
const MOUNT_REPAIRS: [(&str, &str); 5] = [
    ("JOURNAL_NEEDS_RECOVERY", "replayed the journal"),
    ("ORPHAN_LIST", "finished the orphan list"),
    ("SB_NOT_CLEAN", "marked the file system clean"),
    ("SB_FREE_BLOCKS", "rewrote the free block count"),
    ("SB_FREE_INODES", "rewrote the free inode count"),
];

/// `lanefs fsck`.
pub fn fsck(args: &FsckArgs) -> CmdResult<i32> {
    let image = &args.image;
    let op = |e: Error| Failure::new(image.display(), e).with_code(FSCK_OPERATIONAL);
    let repair = args.preen || args.yes;
    if repair {
        if let Some(who) = lanefs::sharing_note(image) {
            let msg = format!(
                "is {who}: unmount it first (the mount would overwrite a repair); \
                 `lanefs fsck -n` checks it as it is"
            );
            return Err(op(Error::msg(msg)));
        }
    }
    if let Some(block) = args.superblock {
        return from_backup(image, args, block);
    }
    let mut report = check_image(image, args).map_err(|e| op(superblock_hint(e, image)))?;
    if !repair && lanefs::sharing_note(image).is_some() {
        // Mounted: needs_recovery and a full journal are the mount at work, not damage
        // (e2fsck -n on a mounted device skips the journal too).
        let (live, rest) = report
            .problems
            .drain(..)
            .partition(|p| p.code == "JOURNAL_NEEDS_RECOVERY");
        report.problems = rest;
        if !Vec::is_empty(&live) {
            crate::error::note("its journal is in use by the mount: not counted as a problem");
        }
    }
    if !repair || !repairable(&report) {
        print(&fsck_text(&report, args.verbose, image, repair)).map_err(|e| op(e.into()))?;
        return Ok(report.exit_code());
    }
    let done: Vec<&str> = MOUNT_REPAIRS
        .iter()
        .filter(|(code, _)| has(&report, code))
        .map(|(_, what)| *what)
        .collect();
    // One read-write mount and unmount: the engine replays, finishes orphans and
    // writes the counts back, as the kernel's mount would.
    // Not counted as a mount (the mount count says how often it was mounted for use).
    let opts = lanefs::MountOptions {
        count_mount: false,
        ..crate::session::mount_options(false)
    };
    let mounted = lanefs::Fs::mount_path(image, opts).and_then(|fs| fs.unmount());
    if let Err(lanefs::Error::Busy(why)) = mounted {
        // In use (a read-only lanefs mount, a device another program holds): no advice
        // to repair under it.
        let msg = format!("{why}; unmount it first");
        return Err(Failure::new(image.display(), Error::msg(msg)).with_code(FSCK_OPERATIONAL));
    }
    if let Err(e) = mounted {
        let msg = format!(
            "{e}; lanefs cannot repair this: run e2fsck -fy {}",
            image.display()
        );
        return Err(Failure::new(image.display(), Error::msg(msg)).with_code(4));
    }
    let after = check_image(image, args).map_err(op)?;
    let mut text = format!("{}: {}\n", image.display(), done.join(", "));
    text += &fsck_text(&after, args.verbose, image, repair);
    print(&text).map_err(|e| op(e.into()))?;
    // As e2fsck: 1 repaired, 4 problems left, both bits when both.
    let repaired = if done.is_empty() { 0 } else { FSCK_REPAIRED };
    Ok(after.exit_code() | repaired)
}

/// `fsck -b BLOCK`: the check through a backup superblock; what it finds goes to
/// `e2fsck -b BLOCK -fy`, which restores the primary from it.
fn from_backup(image: &Path, args: &FsckArgs, block: u64) -> CmdResult<i32> {
    let op = |e: Error| Failure::new(image.display(), e).with_code(FSCK_OPERATIONAL);
    let dev = open_device(image).map_err(op)?;
    let opts = FsckOptions {
        verbose: args.verbose,
    };
    let (report, group) = lanefs::fsck::check_backup(&dev, block, args.block_size, &opts)
        .map_err(|e| op(e.into()))?;
    let mut text =
        format!("checked through the backup superblock at block {block} (group {group})\n");
    text += &fsck_text(&report, args.verbose, image, true)
        .replace("run e2fsck -fy", &format!("run e2fsck -b {block} -fy"));
    const STALE: [&str; 5] = [
        "GROUP_FREE_BLOCKS",
        "GROUP_FREE_INODES",
        "GROUP_DIRS_COUNT",
        "BLOCK_BITMAP_CSUM",
        "INODE_BITMAP_CSUM",
    ];
    if !report.is_clean() && report.problems.iter().all(|p| STALE.contains(&p.code)) {
        text += "Only counts and bitmap checksums differ: a backup's descriptor copy keeps \
                 those of when it was written, so the rest of the file system is whole as \
                 far as this check sees.\n";
    }
    print(&text).map_err(|e| op(e.into()))?;
    Ok(report.exit_code())
}

/// A damaged primary superblock stops the check; e2fsck repairs one from its backups.
/// (An image that is no ext2/3/4 file system, `lanefs::Error::NotExt4`, gets no hint.)
fn superblock_hint(e: Error, image: &Path) -> Error {
    match e {
        Error::Fs(lanefs::Error::Corrupt {
            what: "superblock", ..
        }) => Error::msg(format!(
            "{e}; `lanefs fsck -b 32768 {0}` (8193 for 1 KiB blocks) checks the rest through a backup, e2fsck -fy {0} repairs it from one",
            image.display()
        )),
        e => e,
    }
}

/// Check `image` read-only.
fn check_image(image: &Path, args: &FsckArgs) -> Result<FsckReport, Error> {
    let dev = open_device(image)?;
    let opts = FsckOptions {
        verbose: args.verbose,
    };
    Ok(check(&dev, &opts)?)
}

/// Whether `code` was found, as a problem or as a note.
fn has(report: &FsckReport, code: &str) -> bool {
    report.has(code) || report.notes.iter().any(|n| n.code == code)
}

/// Whether a mount repairs what `report` found: something it repairs is there, and
/// every problem is one it repairs, unless the journal must be replayed first (after a
/// crash the rest is judged only once it is).
fn repairable(report: &FsckReport) -> bool {
    let mine = |code: &str| MOUNT_REPAIRS.iter().any(|(c, _)| *c == code);
    let any = MOUNT_REPAIRS.iter().any(|(c, _)| has(report, c));
    let only_mine = report.problems_omitted == 0 && report.problems.iter().all(|p| mine(p.code));
    any && (only_mine || report.has("JOURNAL_NEEDS_RECOVERY"))
}

fn print(text: &str) -> std::io::Result<()> {
    std::io::stdout().write_all(text.as_bytes())
}

/// What `fsck` prints for `report`: problems, notes when verbose, the summary, and what
/// to do about what is left.
fn fsck_text(report: &FsckReport, verbose: bool, image: &Path, repaired: bool) -> String {
    let mut text = String::new();
    for p in &report.problems {
        text += &format!("{p}\n");
    }
    if report.problems_omitted > 0 {
        text += &format!("... and {} more problem(s)\n", report.problems_omitted);
    }
    if verbose {
        for n in &report.notes {
            text += &format!("note: {n}\n");
        }
    }
    text += &format!("{}\n", report.summary().trim_end());
    if report.is_clean() {
        return text;
    }
    let shown = image.display();
    if !repaired && repairable(report) {
        if report.has("JOURNAL_NEEDS_RECOVERY") {
            text += "The journal holds committed changes not yet written to their places \
                     (a crash or a live mount): any read-write open replays them (lanefs \
                     mount, a lanefs command that writes, the kernel's mount).\n";
        }
        text += &format!("`lanefs fsck -p {shown}` repairs this.\n");
    } else {
        text += &format!("lanefs does not repair this: run e2fsck -fy {shown}\n");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A damaged superblock gets the backup and e2fsck hint; an image that is no
    /// ext2/3/4 file system at all, or any other error, does not.
    #[test]
    fn superblock_hint_only_for_a_damaged_superblock() {
        let img = Path::new("disk.img");
        let damaged = lanefs::Error::corrupt("superblock", 0, "checksum mismatch");
        let text = superblock_hint(damaged.into(), img).to_string();
        assert!(text.contains("lanefs fsck -b 32768 disk.img"), "{text}");
        assert!(text.contains("e2fsck -fy disk.img"), "{text}");
        let alien = lanefs::Error::NotExt4("bad superblock magic 0x0000".into());
        let text = superblock_hint(alien.into(), img).to_string();
        assert_eq!(
            text,
            "not an ext2/3/4 file system: bad superblock magic 0x0000"
        );
        let other = lanefs::Error::corrupt("inode", 12, "bad");
        assert!(!superblock_hint(other.into(), img)
            .to_string()
            .contains("e2fsck"));
    }
}
