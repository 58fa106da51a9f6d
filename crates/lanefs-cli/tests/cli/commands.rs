//! The commands on images: mkfs (refusing to overwrite, then fsck and e2fsck clean), cp
//! both ways (trees, single files, symlinks), ls, stat, cat, mkdir, rm, and the engine's
//! errors in one line.

use super::*;

#[test]
fn mkfs_refuses_to_overwrite_ext4_without_force() {
    let dir = tempdir();
    let image = dir.path().join("old.img");
    let mut bytes = vec![0u8; 4096];
    bytes[1080..1082].copy_from_slice(&0xEF53u16.to_le_bytes());
    write_file(&image, &bytes, 0o644);
    let line = one_line_failure(&lanefs(&["mkfs", &s(&image), "--size", "64M"]));
    assert!(line.contains("--force"), "{line}");
    assert_eq!(lmeta(&image).len(), 4096, "the refused image was changed");
}

/// mkfs over a file of data (no signature: a gzip stream) formats it and keeps none of
/// its bytes, the first 1024 included; over a file holding another file system (an xfs
/// magic) or a partition table it refuses without --force when it cannot ask (standard
/// input not a terminal), naming what is there, and leaves the file as it was.
#[test]
fn mkfs_clears_data_and_asks_before_other_file_systems() {
    let dir = tempdir();
    let image = dir.path().join("v.tgz");
    let mut x = 7u64;
    let mut data: Vec<u8> = (0..2 << 20)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 56) as u8
        })
        .collect();
    data[..4].copy_from_slice(&[0x1f, 0x8b, 8, 0]);
    write_file(&image, &data, 0o644);
    // A refused option clears nothing.
    for bad in [
        &["-b", "3000"][..],
        &["-O", "bogus"],
        &["-N", "99999999999"],
    ] {
        let mut args = vec!["mkfs"];
        args.extend_from_slice(bad);
        let path = s(&image);
        args.push(&path);
        one_line_failure(&lanefs(&args));
        assert!(
            std::fs::read(&image).unwrap() == data,
            "{bad:?} changed the file"
        );
    }
    let out = Command::new(env!("CARGO_BIN_EXE_lanefs"))
        .args(["mkfs", &s(&image)])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    ok(out);
    let now = std::fs::read(&image).unwrap();
    assert_eq!(now.len(), data.len());
    assert!(
        now[..1024].iter().all(|&b| b == 0),
        "the boot block kept old data"
    );
    let kept = now
        .chunks(4096)
        .zip(data.chunks(4096))
        .filter(|(a, b)| a == b)
        .count();
    assert_eq!(kept, 0, "blocks of the old data are still in the image");
    ok(lanefs(&["fsck", &s(&image)]));

    for (what, off, magic) in [
        ("an xfs file system", 0usize, &b"XFSB"[..]),
        ("a DOS partition table", 510, &[0x55, 0xAA][..]),
    ] {
        let mut bytes = vec![0u8; 1 << 20];
        bytes[off..off + magic.len()].copy_from_slice(magic);
        bytes[446 + 4] = 0x83;
        write_file(&image, &bytes, 0o644);
        let out = Command::new(env!("CARGO_BIN_EXE_lanefs"))
            .args(["mkfs", &s(&image)])
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let line = one_line_failure(&out);
        assert!(line.contains(what) && line.contains("--force"), "{line}");
        assert_eq!(
            std::fs::read(&image).unwrap(),
            bytes,
            "a refused mkfs wrote"
        );
        ok(lanefs(&["mkfs", "-F", &s(&image)]));
        ok(lanefs(&["fsck", &s(&image)]));
    }
}

#[test]
fn mkfs_then_fsck_and_e2fsck_are_clean() {
    let dir = tempdir();
    let image = dir.path().join("disk.img");
    let out = ok(lanefs(&[
        "mkfs",
        &s(&image),
        "--size",
        "64M",
        "--label",
        "test",
    ]));
    assert!(stdout(&out).contains("64.0 MiB"), "{}", stdout(&out));
    assert_eq!(lmeta(&image).len(), 64 << 20);
    assert!(
        lmeta(&image).blocks() * 512 < 64 << 20,
        "image is not sparse"
    );
    assert_clean(&image);
    let info = stdout(&ok(lanefs(&["info", &s(&image)])));
    assert!(!info.trim().is_empty());
    one_line_failure(&lanefs(&["mkfs", &s(&image)]));
    ok(lanefs(&[
        "mkfs",
        &s(&image),
        "--force",
        "--inode-ratio",
        "8K",
    ]));
    assert_clean(&image);
}

#[test]
fn cp_tree_in_and_out_round_trips() {
    let dir = tempdir();
    let image = new_image(dir.path());
    let tree = dir.path().join("tree");
    build_tree(&tree);
    ok(lanefs(&["cp", "-r", &s(&tree), &at(&image, "/dst")]));
    assert_clean(&image);
    let listing = stdout(&ok(lanefs(&["ls", &at(&image, "/dst")])));
    assert_eq!(listing, "a\ndangling\nlink\nrun.sh\n");
    let out = dir.path().join("out");
    ok(lanefs(&["cp", "-r", &at(&image, "/dst"), &s(&out)]));
    assert_same_tree(&tree, &out);

    // Into an existing directory: under the source's name.
    ok(lanefs(&["mkdir", &at(&image, "/into")]));
    ok(lanefs(&["cp", "-r", &s(&tree), &at(&image, "/into")]));
    let again = dir.path().join("again");
    make_dir(&again, 0o755);
    ok(lanefs(&["cp", "-r", &at(&image, "/into/tree"), &s(&again)]));
    assert_same_tree(&tree, &again.join("tree"));
    assert_clean(&image);
}

/// A destination the user named that exists and is not a directory is written into as
/// `cp` writes it: through a symlink (the symlink stays), into `/dev/stdout` (a pipe
/// here: the bytes come out and `/dev/stdout` stays what it was), over a regular file
/// (emptied first, given the copy's mode); a dangling symlink is refused in one line.
#[test]
fn cp_out_writes_through_an_existing_destination() {
    let dir = tempdir();
    let image = new_image(dir.path());
    let src = dir.path().join("src");
    write_file(&src, b"from the image\n", 0o640);
    ok(lanefs(&["cp", &s(&src), &at(&image, "/f")]));
    let target = dir.path().join("target");
    write_file(&target, b"an older and longer text\n", 0o600);
    let link = dir.path().join("link");
    make_symlink("target", &link);
    ok(lanefs(&["cp", &at(&image, "/f"), &s(&link)]));
    assert!(lmeta(&link).file_type().is_symlink());
    assert_eq!(fs::read(&target).unwrap(), b"from the image\n");
    assert_eq!(lmeta(&target).permissions().mode() & 0o7777, 0o640);
    let stdout_before = fs::symlink_metadata("/dev/stdout").map(|m| m.file_type());
    let out = ok(lanefs(&["cp", &at(&image, "/f"), "/dev/stdout"]));
    assert_eq!(stdout(&out), "from the image\n");
    assert_eq!(
        fs::symlink_metadata("/dev/stdout")
            .map(|m| m.file_type())
            .ok(),
        stdout_before.ok()
    );
    let dangling = dir.path().join("dangling");
    make_symlink("nowhere", &dangling);
    let out = lanefs(&["cp", &at(&image, "/f"), &s(&dangling)]);
    assert!(
        one_line_failure(&out).contains("dangling symlink"),
        "{out:?}"
    );
    assert!(!dir.path().join("nowhere").exists());
    assert_clean(&image);
}

#[test]
fn cp_single_files_and_symlinks() {
    let dir = tempdir();
    let image = new_image(dir.path());
    let file = dir.path().join("hello.txt");
    write_file(&file, b"hello world\n", 0o640);
    set_past_time(&file);
    ok(lanefs(&["mkdir", &at(&image, "/d")]));
    ok(lanefs(&["cp", &s(&file), &at(&image, "/d/")]));
    ok(lanefs(&["cp", &s(&file), &at(&image, "/d/renamed")]));
    // Overwriting an existing file replaces its contents.
    let shorter = dir.path().join("short");
    write_file(&shorter, b"bye\n", 0o600);
    ok(lanefs(&["cp", &s(&shorter), &at(&image, "/d/renamed")]));
    assert_eq!(
        stdout(&ok(lanefs(&["cat", &at(&image, "/d/renamed")]))),
        "bye\n"
    );
    assert_eq!(
        stdout(&ok(lanefs(&["cat", &at(&image, "/d/hello.txt")]))),
        "hello world\n"
    );
    // Several sources into a directory; a symlink is copied as a symlink.
    let link = dir.path().join("ln");
    make_symlink("hello.txt", &link);
    ok(lanefs(&["cp", &s(&link), &s(&shorter), &at(&image, "/d")]));
    let long = stdout(&ok(lanefs(&["ls", "-l", &at(&image, "/d")])));
    assert!(
        long.lines().any(|l| l.ends_with(" ln -> hello.txt")),
        "{long}"
    );
    let back = dir.path().join("back");
    ok(lanefs(&["cp", &at(&image, "/d/hello.txt"), &s(&back)]));
    let copied = fs::read(&back).unwrap_or_default();
    assert!(
        copied == b"hello world\n",
        "copied back {} bytes",
        copied.len()
    );
    assert_eq!(lmeta(&back).mtime_nsec(), PAST_NSEC);
    assert_eq!(lmeta(&back).mode() & 0o7777, 0o640);
    assert_clean(&image);
}

#[test]
fn ls_stat_cat_mkdir_rm_outputs() {
    let dir = tempdir();
    let image = new_image(dir.path());
    ok(lanefs(&["mkdir", "-p", &at(&image, "/x/y/z")]));
    ok(lanefs(&["mkdir", "-p", &at(&image, "/x/y/z")]));
    one_line_failure(&lanefs(&["mkdir", &at(&image, "/x")]));
    ok(lanefs(&["mkdir", &at(&image, "/x/w")]));
    assert_eq!(stdout(&ok(lanefs(&["ls", &at(&image, "/x")]))), "w\ny\n");
    let root = stdout(&ok(lanefs(&["ls", &s(&image)])));
    assert!(
        root.lines().any(|l| l == "lost+found") && root.lines().any(|l| l == "x"),
        "{root}"
    );
    let all = stdout(&ok(lanefs(&["ls", "-a", &at(&image, "/x/y")])));
    assert_eq!(all, ".\n..\nz\n");

    let file = dir.path().join("f.txt");
    write_file(&file, b"0123456789\n", 0o640);
    set_past_time(&file);
    ok(lanefs(&["cp", &s(&file), &at(&image, "/x/y/f.txt")]));
    let link = dir.path().join("abs");
    make_symlink("/x/y", &link);
    ok(lanefs(&["cp", &s(&link), &at(&image, "/x/abs")]));

    // Paths with ".", ".." and symlinks in the middle.
    let cat = stdout(&ok(lanefs(&["cat", &at(&image, "/x/./w/../abs/f.txt")])));
    assert_eq!(cat, "0123456789\n");
    assert_eq!(
        stdout(&ok(lanefs(&["ls", &at(&image, "/x/y/f.txt")]))),
        "/x/y/f.txt\n"
    );
    let long = stdout(&ok(lanefs(&["ls", "-l", &at(&image, "/x/y")])));
    let line = long
        .lines()
        .find(|l| l.ends_with(" f.txt"))
        .unwrap_or_default();
    assert!(line.starts_with("-rw-r----- 1 "), "{long}");
    assert!(line.contains(" 11 2017-07-14 02:40 f.txt"), "{long}");
    let long = stdout(&ok(lanefs(&["ls", "-l", &at(&image, "/x")])));
    assert!(
        long.lines()
            .any(|l| l.starts_with('l') && l.ends_with(" abs -> /x/y")),
        "{long}"
    );
    assert!(
        long.lines()
            .any(|l| l.starts_with("drwxr-xr-x") && l.ends_with(" w")),
        "{long}"
    );

    let st = stdout(&ok(lanefs(&["stat", &at(&image, "/x/y/f.txt")])));
    for want in [
        "File: /x/y/f.txt",
        "Size: 11",
        "(0640/-rw-r-----)",
        "Type: regular file",
    ] {
        assert!(st.contains(want), "{want} missing:\n{st}");
    }
    assert!(
        st.contains("Modify: 2017-07-14 02:40:00.123456789 +0000"),
        "{st}"
    );
    let st = stdout(&ok(lanefs(&["stat", &at(&image, "/x/abs")])));
    assert!(
        st.contains("File: /x/abs -> /x/y") && st.contains("symbolic link"),
        "{st}"
    );

    one_line_failure(&lanefs(&["rm", &at(&image, "/x/y")]));
    ok(lanefs(&["rm", &at(&image, "/x/abs")]));
    one_line_failure(&lanefs(&["rm", &at(&image, "/nope")]));
    ok(lanefs(&["rm", "-f", &at(&image, "/nope")]));
    one_line_failure(&lanefs(&["rm", "-r", &at(&image, "/")]));
    ok(lanefs(&["rm", "-r", &at(&image, "/x")]));
    let root = stdout(&ok(lanefs(&["ls", &at(&image, "/")])));
    assert!(!root.lines().any(|l| l == "x"), "{root}");
    assert_clean(&image);
}

#[test]
fn engine_errors_are_one_line() {
    let dir = tempdir();
    let image = new_image(dir.path());
    let line = one_line_failure(&lanefs(&["cat", &at(&image, "/a/b")]));
    assert_eq!(
        line,
        format!(
            "lanefs: cat: {}: no such file or directory",
            at(&image, "/a/b")
        )
    );
    let line = one_line_failure(&lanefs(&["cat", &at(&image, "/")]));
    assert!(line.ends_with("is a directory"), "{line}");
    one_line_failure(&lanefs(&["ls", &at(&image, "/lost+found/nothing")]));
    one_line_failure(&lanefs(&["stat", &at(&image, "relative")]));

    // A symlink loop gives up instead of hanging.
    let l1 = dir.path().join("l1");
    make_symlink("/l2", &l1);
    let l2 = dir.path().join("l2");
    make_symlink("/l1", &l2);
    ok(lanefs(&["cp", &s(&l1), &s(&l2), &at(&image, "/")]));
    let line = one_line_failure(&lanefs(&["cat", &at(&image, "/l1")]));
    assert!(line.contains("symbolic links"), "{line}");

    // A directory without -r.
    let sub = dir.path().join("sub");
    make_dir(&sub, 0o755);
    let line = one_line_failure(&lanefs(&["cp", &s(&sub), &at(&image, "/")]));
    assert!(line.contains("-r"), "{line}");

    // Too small for any ext4 (too few inodes, as mke2fs says): refused, and the half-made
    // image is removed.
    let small = dir.path().join("small.img");
    one_line_failure(&lanefs(&["mkfs", &s(&small), "--size", "60K"]));
    assert!(!small.exists());

    // fsck of something that is not ext4 is an operational error.
    let junk = dir.path().join("junk.img");
    write_file(&junk, &vec![0u8; 1 << 20], 0o644);
    let out = lanefs(&["fsck", &s(&junk)]);
    one_line_failure(&out);
    assert_eq!(out.status.code(), Some(8));
}

/// Errors that name what is wrong: `mkfs` into a directory that does not exist names the
/// directory; a file too small to hold a superblock is said to be no ext2/3/4 file system.
#[test]
fn errors_name_the_missing_directory_and_the_non_image() {
    let dir = tempdir();
    let missing = dir.path().join("nosuchdir");
    let img = missing.join("x.img");
    let line = one_line_failure(&lanefs(&["mkfs", &s(&img), "--size", "16M"]));
    assert!(
        line.contains(&format!("directory {} does not exist", missing.display())),
        "{line}"
    );
    assert!(!missing.exists());
    let small = dir.path().join("small");
    write_file(&small, b"not an image\n", 0o644);
    let line = one_line_failure(&lanefs(&["ls", &at(&small, "/")]));
    assert!(line.contains("not an ext2/3/4 file system"), "{line}");
    assert!(line.contains("13 bytes"), "{line}");
}
