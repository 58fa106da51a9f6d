//! What the commands say about an image's state: after a crash (fsck names the journal
//! and `fsck -p` replays it), while another lanefs writes it (readers read on, with a
//! note; a repair is refused), and while the kernel has it mounted (info and fsck say so).

use super::kernel::loop_mount;
use super::*;
use lanefs::{mkfs, CrashDevice, Fs, MountOptions, Owner, ROOT_INO};
use std::sync::Arc;

/// An image file holding what a machine made durable before its power was cut: 30 files
/// committed to the journal, not yet written home.
fn crashed_image(dir: &Path) -> PathBuf {
    let dev = Arc::new(CrashDevice::new(64 << 20));
    mkfs::format(&*dev, &mkfs::MkfsOptions::mke2fs()).unwrap();
    let fs = Fs::mount(dev.clone(), MountOptions::default()).unwrap();
    for i in 0..30 {
        let f = fs
            .create(
                ROOT_INO,
                format!("f{i}").as_bytes(),
                0o644,
                Owner::default(),
            )
            .unwrap();
        fs.write(f.ino, 0, b"committed").unwrap();
        fs.release(f.ino).unwrap();
    }
    fs.sync().unwrap();
    dev.power_cut();
    drop(fs);
    let image = dir.join("crashed.img");
    fs::write(&image, dev.durable()).unwrap();
    image
}

/// After a crash: `fsck` finds the journal to replay, says what replays it and exits 4;
/// `fsck -p` replays it (exit 1, "errors corrected"), after which the image checks clean
/// here and in e2fsck, and holds the committed files.
#[test]
fn fsck_names_the_journal_after_a_crash_and_p_replays_it() {
    let dir = tempdir();
    let image = crashed_image(dir.path());
    let out = lanefs(&["fsck", &s(&image)]);
    assert_eq!(out.status.code(), Some(4), "{}", stdout(&out));
    let text = stdout(&out);
    assert!(text.contains("JOURNAL_NEEDS_RECOVERY"), "{text}");
    assert!(text.contains("any read-write open replays"), "{text}");
    assert!(text.contains("lanefs fsck -p"), "{text}");
    let out = lanefs(&["fsck", "-p", &s(&image)]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(
        stdout(&out).contains("replayed the journal"),
        "{}",
        stdout(&out)
    );
    ok(lanefs(&["fsck", &s(&image)]));
    assert_clean(&image);
    let listed = stdout(&ok(lanefs(&["ls", &at(&image, "/")])));
    assert!(listed.lines().any(|l| l == "f29"), "{listed}");
    // Nothing left to do: exit 0.
    assert_eq!(lanefs(&["fsck", "-p", &s(&image)]).status.code(), Some(0));
}

/// While a lanefs writer holds the image, `ls`, `cat`, `info` and `fsck -n` read what it
/// has made durable, each with a one-line note; `fsck -p` is refused (exit 8).
#[test]
fn readers_read_beside_a_writer_with_a_note() {
    let dir = tempdir();
    let image = new_image(dir.path());
    ok(lanefs(&["mkdir", &at(&image, "/kept")]));
    let writer = Fs::mount_path(&image, MountOptions::default()).unwrap();
    for args in [
        vec!["ls".to_string(), at(&image, "/")],
        vec!["info".to_string(), s(&image)],
        vec!["fsck".to_string(), s(&image)],
    ] {
        let out = ok(lanefs(&args));
        let err = stderr(&out);
        let note = format!("lanefs: {}: note: ", args[0]);
        assert!(
            err.lines().all(|l| l.starts_with(&note))
                && err.contains("open for writing by another lanefs"),
            "{args:?}: {err}"
        );
    }
    assert!(stdout(&ok(lanefs(&["ls", &at(&image, "/")]))).contains("kept"));
    let line = one_line_failure(&lanefs(&["fsck", "-p", &s(&image)]));
    assert!(line.contains("unmount it first"), "{line}");
    assert_eq!(lanefs(&["fsck", "-p", &s(&image)]).status.code(), Some(8));
    writer.unmount().unwrap();
    let out = ok(lanefs(&["ls", &at(&image, "/")]));
    assert_eq!(stderr(&out), "", "no note once the writer is gone");
}

/// While the kernel has the image mounted: `info` says lanefs may only read it now,
/// `fsck` notes the mount and does not count its live journal as a problem, and
/// `fsck -p` is refused.
#[test]
fn info_and_fsck_say_the_kernel_has_it_mounted() {
    let dir = tempdir();
    let image = new_image(dir.path());
    let mnt = dir.path().join("mnt");
    let Some(m) = loop_mount(&image, &mnt, "loop") else {
        return;
    };
    fs::write(mnt.join("by-kernel"), b"x").unwrap();
    let info = ok(lanefs(&["info", &s(&image)]));
    let access = stdout(&info)
        .lines()
        .find(|l| l.starts_with("lanefs access:"))
        .unwrap_or_default()
        .to_string();
    assert!(
        access.contains("read-only now (mounted by the kernel at"),
        "{access}"
    );
    let out = lanefs(&["fsck", &s(&image)]);
    assert!(
        stderr(&out).contains("mounted by the kernel"),
        "{}",
        stderr(&out)
    );
    assert!(
        !stdout(&out).contains("JOURNAL_NEEDS_RECOVERY"),
        "{}",
        stdout(&out)
    );
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert_eq!(lanefs(&["fsck", "-p", &s(&image)]).status.code(), Some(8));
    drop(m);
    assert_clean(&image);
}

/// One damaged byte in the superblock (its blocks-per-group field) reads the same to
/// every command: the checksum mismatch and the field it makes invalid; `fsck` exits 8
/// and sends the user to e2fsck, which repairs from a backup superblock.
#[test]
fn a_damaged_superblock_reads_the_same_everywhere() {
    let dir = tempdir();
    let image = new_image(dir.path());
    ok(lanefs(&[
        "mkdir",
        "-p",
        &at(&image, "/a/b"),
        &at(&image, "/c"),
    ]));
    let mut bytes = fs::read(&image).unwrap();
    bytes[1024 + 0x20] ^= 0x42;
    fs::write(&image, &bytes).unwrap();
    let ls = one_line_failure(&lanefs(&["ls", &at(&image, "/")]));
    let out = lanefs(&["fsck", &s(&image)]);
    assert_eq!(out.status.code(), Some(8));
    let fsck = one_line_failure(&out);
    let info = one_line_failure(&lanefs(&["info", &s(&image)]));
    for line in [&ls, &fsck, &info] {
        assert!(
            line.contains("checksum mismatch") && line.contains("blocks per group"),
            "{line}"
        );
    }
    assert!(fsck.contains("e2fsck -fy"), "{fsck}");
    // Through the first backup (1 KiB blocks: block 8193) the rest checks whole.
    // (Its descriptor copy is mkfs's: only counts and bitmap checksums differ.)
    let out = lanefs(&["fsck", "-b", "8193", &s(&image)]);
    let text = stdout(&out);
    assert!(
        text.starts_with("checked through the backup superblock at block 8193 (group 1)\n")
            && (text.contains("clean: ")
                || text.contains("Only counts and bitmap checksums differ"))
            && !text.contains("DIR_ENTRY"),
        "{text}"
    );
    let line = one_line_failure(&lanefs(&["fsck", "-b", "7", &s(&image)]));
    assert!(
        line.contains("no usable backup superblock at block 7"),
        "{line}"
    );
}

/// `fsck -p` leaves alone what a mount does not repair: a block marked in use that no
/// file holds (set with debugfs) is named, sent to e2fsck (exit 4), and the image is
/// unchanged; e2fsck -fy then repairs it and both checkers agree it is clean.
#[test]
fn fsck_p_changes_nothing_it_cannot_repair() {
    let dir = tempdir();
    let image = new_image(dir.path());
    ok(lanefs(&["mkdir", &at(&image, "/d")]));
    let Some(debugfs) = ["/sbin/debugfs", "/usr/sbin/debugfs"]
        .into_iter()
        .find(|p| Path::new(p).exists())
    else {
        crate::skips::report("fsck_p_changes_nothing_it_cannot_repair", "no debugfs");
        return;
    };
    let set = Command::new(debugfs)
        .args(["-w", "-R", "setb 60000"])
        .arg(&image)
        .output()
        .unwrap();
    assert!(set.status.success(), "{set:?}");
    let before = fs::read(&image).unwrap();
    let out = lanefs(&["fsck", "-p", &s(&image)]);
    assert_eq!(out.status.code(), Some(4), "{}", stdout(&out));
    let text = stdout(&out);
    assert!(text.contains("BLOCK_BITMAP_MISMATCH"), "{text}");
    assert!(text.contains("run e2fsck -fy"), "{text}");
    assert!(
        fs::read(&image).unwrap() == before,
        "fsck -p changed the image"
    );
    let fixed = Command::new("e2fsck")
        .arg("-fy")
        .arg(&image)
        .output()
        .unwrap();
    assert!(fixed.status.code().is_some_and(|c| c <= 1), "{fixed:?}");
    ok(lanefs(&["fsck", &s(&image)]));
    assert_clean(&image);
}
