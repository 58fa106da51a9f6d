//! A copy into an image that fills up: every error is reported, running out of inodes is
//! told apart from running out of blocks, and no file in the image claims to be a
//! complete copy when its data did not all fit (docs/commands.md, "When a copy fails").

use std::fs;
use std::path::{Path, PathBuf};

mod cli_common;
use cli_common::*;

/// A host tree of `n` files of `size` bytes each (distinct contents), in `dir/src`.
fn tree(dir: &Path, n: usize, size: usize) -> PathBuf {
    let src = dir.join("src");
    fs::create_dir_all(src.join("sub")).unwrap();
    for i in 0..n {
        let at = if i % 2 == 0 { "" } else { "sub/" };
        fs::write(src.join(format!("{at}f{i:04}")), noise(i as u64 + 1, size)).unwrap();
    }
    src
}

/// Every regular file under `got` (copied back out of the image) is byte for byte the
/// host file at the same place under `src`; returns how many there are.
fn all_whole(got: &Path, src: &Path) -> usize {
    let mut n = 0;
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        for e in fs::read_dir(got.join(&rel)).unwrap().flatten() {
            let rel = rel.join(e.file_name());
            if e.file_type().unwrap().is_dir() {
                stack.push(rel);
                continue;
            }
            let (a, b) = (fs::read(got.join(&rel)).unwrap(), fs::read(src.join(&rel)));
            assert_eq!(
                Ok(a),
                b.map_err(|e| e.kind()),
                "{} is not whole",
                rel.display()
            );
            n += 1;
        }
    }
    n
}

/// A copy of 400 files of 24 KiB into a 4 MiB image: it fails with "no space left", its
/// last line says how many errors and how many unfinished files it removed, and every
/// file left in the image is a whole copy; e2fsck finds the image clean.
#[test]
fn a_copy_that_does_not_fit_leaves_only_whole_files() {
    let t = tempfile::tempdir().unwrap();
    let src = tree(t.path(), 400, 24 << 10);
    let img = t.path().join("small.img");
    ok(lanefs(&["mkfs", &s(&img), "--size", "4M"]));
    let out = lanefs(&["cp", "-r", &s(&src), &at(&img, "/dst")]);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(err.contains("no space left on device"), "{err}");
    let last = err.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("lanefs: cp: stopped after ") && last.contains("removed"),
        "{err}"
    );
    e2fsck_clean(&img);
    let back = t.path().join("back");
    ok(lanefs(&["cp", "-r", &at(&img, "/dst"), &s(&back)]));
    let whole = all_whole(&back, &src);
    assert!(whole > 0 && whole < 400, "{whole} files copied whole");
}

/// Out of inodes is said so, not "no space left": 16 inodes for 40 files.
#[test]
fn running_out_of_inodes_is_named() {
    let t = tempfile::tempdir().unwrap();
    let src = tree(t.path(), 40, 100);
    let img = t.path().join("few.img");
    ok(lanefs(&["mkfs", &s(&img), "--size", "16M", "-N", "16"]));
    let out = lanefs(&["cp", "-r", &s(&src), &at(&img, "/dst")]);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("no free inodes left on device"), "{err}");
    assert!(!err.contains("no space left"), "{err}");
    e2fsck_clean(&img);
    let back = t.path().join("back");
    ok(lanefs(&["cp", "-r", &at(&img, "/dst"), &s(&back)]));
    all_whole(&back, &src);
}

/// Copying over existing files that does not fit: every existing file ends with its old
/// or its new contents whole, or is gone because its own copy failed (each such file is
/// one of the copy's errors), and e2fsck finds the image clean.
#[test]
fn an_overwrite_that_does_not_fit_loses_no_file_it_did_not_reach() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    fs::create_dir_all(&src).unwrap();
    let name = |i: usize| format!("f{i:04}");
    for i in 0..600 {
        fs::write(src.join(name(i)), format!("old {i}")).unwrap();
    }
    let img = t.path().join("over.img");
    ok(lanefs(&["mkfs", &s(&img), "--size", "8M"]));
    ok(lanefs(&["cp", "-r", &s(&src), &at(&img, "/")]));
    for i in 0..600 {
        fs::write(src.join(name(i)), format!("new {i}")).unwrap();
    }
    fs::write(src.join(name(5)), noise(5, 16 << 20)).unwrap();
    let out = lanefs(&["cp", "-r", &s(&src), &at(&img, "/")]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    // "stopped after N error(s)": each removed file failed, so at most N are gone.
    let errors: usize = err
        .lines()
        .last()
        .and_then(|l| l.split("stopped after ").nth(1))
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(1);
    e2fsck_clean(&img);
    let back = t.path().join("back");
    ok(lanefs(&["cp", "-r", &at(&img, "/src"), &s(&back)]));
    let mut gone = 0;
    for i in 0..600 {
        match fs::read_to_string(back.join(name(i))) {
            Ok(got) => assert!(
                got == format!("old {i}") || got == format!("new {i}"),
                "{}: {got:?}",
                name(i)
            ),
            Err(_) => gone += 1,
        }
    }
    assert!(
        !back.join(name(5)).exists(),
        "the emptied file that did not fit stays"
    );
    assert!(
        gone <= errors,
        "{gone} files gone after {errors} errors: {err}"
    );
}
