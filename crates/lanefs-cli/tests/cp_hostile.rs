//! `lanefs cp -r` with hostile input never touches a host path outside its destination.
//!
//! Out of crafted images (no metadata_csum, so any tool can make them; names patched in
//! the directory blocks, directories hard-linked with debugfs): two entries of one name
//! in every type order (a symlink to a host directory by absolute and by relative target,
//! then a directory whose `passwd` would be written through it, and every other order),
//! entries named `.`, `..` or holding `/`, a directory linked twice and a directory
//! linked into itself: each copy fails in one line naming the path, and nothing outside
//! the destination changes. Names already in the destination (symlinks to outside files
//! and directories) are replaced or refused, never followed. Into an image: a source
//! tree whose directory is swapped for a symlink to a secret directory while copies run
//! never brings the secret in.
//!
//! Needs `debugfs` (e2fsprogs); without it, prints SKIP (a failure under
//! `LANEFS_REQUIRE_PRIVILEGED=1`).

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Command;

mod cli_common;
use cli_common::*;

/// Whether debugfs is here (prints SKIP, or panics when required, if not).
fn debugfs_ready(test: &str) -> bool {
    let here = Command::new("debugfs").arg("-V").output().is_ok();
    if !here {
        skip(test, "debugfs not installed (e2fsprogs)");
    }
    here
}

/// `debugfs [-w] -R CMD IMAGE`: its standard output.
fn debugfs(image: &Path, write: bool, cmd: &str) -> String {
    let mut c = Command::new("debugfs");
    if write {
        c.arg("-w");
    }
    let out = c.arg("-R").arg(cmd).arg(image).output().unwrap();
    assert!(out.status.success(), "debugfs {cmd}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A 64 MiB ext4 image without metadata_csum holding a copy of host tree `tree` at its
/// root.
fn image_of(dir: &Path, tree: &Path) -> PathBuf {
    let image = dir.join("crafted.img");
    ok(lanefs(&[
        "mkfs",
        &s(&image),
        "--size",
        "64M",
        "-b",
        "4096",
        "-O",
        "^metadata_csum",
    ]));
    for e in fs::read_dir(tree).unwrap() {
        let p = e.unwrap().path();
        ok(lanefs(&["cp", "-r", &s(&p), &at(&image, "/")]));
    }
    image
}

/// Replace name `from` by `to` (as long) in the directory blocks of image directory
/// `dir`: how a crafted image gets names no file system call makes.
fn rename_raw(image: &Path, dir: &str, from: &[u8], to: &[u8]) {
    assert_eq!(from.len(), to.len());
    let blocks = debugfs(image, false, &format!("blocks {dir}"));
    let mut bytes = fs::read(image).unwrap();
    let mut hits = 0;
    for b in blocks.split_whitespace() {
        let start = b.parse::<usize>().unwrap() * 4096;
        let block = &mut bytes[start..start + 4096];
        let mut i = 0;
        while i + from.len() <= block.len() {
            // A name sits 8 bytes into an entry whose name_len byte (offset 6) matches.
            if &block[i..i + from.len()] == from && i >= 8 && block[i - 2] as usize == from.len() {
                block[i..i + from.len()].copy_from_slice(to);
                hits += 1;
            }
            i += 1;
        }
    }
    assert_eq!(hits, 1, "{} in {dir}", String::from_utf8_lossy(from));
    fs::write(image, bytes).unwrap();
}

/// Everything under `dir`, with each file's bytes and each symlink's target, sorted.
fn snapshot(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let m = fs::symlink_metadata(&p).unwrap();
            let what = if m.is_dir() {
                stack.push(p.clone());
                "dir".to_string()
            } else if m.file_type().is_symlink() {
                format!("-> {}", fs::read_link(&p).unwrap().display())
            } else {
                format!("{:?}", fs::read(&p).unwrap())
            };
            out.push(format!("{} {what}", p.display()));
        }
    }
    out.sort();
    out
}

/// A scratch area: `outside` (a host directory holding one file that nothing may touch),
/// `tree` (the host tree an image is made from), and `out` (the destination).
struct Area {
    _t: tempfile::TempDir,
    root: PathBuf,
    outside: PathBuf,
    tree: PathBuf,
    out: PathBuf,
}

fn area() -> Area {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().to_path_buf();
    let (outside, tree, out) = (root.join("outside"), root.join("tree"), root.join("out"));
    for d in [&outside, &tree, &out] {
        fs::create_dir(d).unwrap();
    }
    fs::write(outside.join("passwd"), b"root:x:0:0\n").unwrap();
    Area {
        _t: t,
        root,
        outside,
        tree,
        out,
    }
}

/// What one of the two entries of the same name is.
#[derive(Clone, Copy, Debug)]
enum Kind {
    File,
    Dir,
    /// A symlink to the outside directory by its absolute path.
    AbsLink,
    /// The same by a relative path (from the destination's `x`).
    RelLink,
}

/// Make `name` of `kind` in host directory `dir`.
fn make(a: &Area, dir: &Path, name: &str, kind: Kind) {
    let p = dir.join(name);
    match kind {
        Kind::File => fs::write(p, b"pwned\n").unwrap(),
        Kind::Dir => {
            fs::create_dir(&p).unwrap();
            fs::write(p.join("passwd"), b"pwned\n").unwrap();
        }
        Kind::AbsLink => symlink(&a.outside, p).unwrap(),
        Kind::RelLink => symlink("../outside", p).unwrap(),
    }
}

#[test]
fn names_twice_in_a_directory_are_refused_in_every_type_order() {
    let test = "names_twice_in_a_directory_are_refused_in_every_type_order";
    if !debugfs_ready(test) {
        return;
    }
    let kinds = [Kind::File, Kind::Dir, Kind::AbsLink, Kind::RelLink];
    for first in kinds {
        for second in kinds {
            let a = area();
            // At the root, and one level down (where a relative link names the outside
            // directory from the destination's subdirectory too).
            for dir in [a.tree.clone(), a.tree.join("sub")] {
                fs::create_dir_all(&dir).unwrap();
                make(&a, &dir, "x_twice_1", first);
                make(&a, &dir, "x_twice_2", second);
            }
            let image = image_of(&a.root, &a.tree);
            for img_dir in ["/", "/sub"] {
                rename_raw(&image, img_dir, b"x_twice_2", b"x_twice_1");
            }
            let before = snapshot(&a.outside);
            let cases = [
                (at(&image, "/"), s(&a.out)),
                (at(&image, "/sub"), s(&a.out.join("new"))),
                (at(&image, "/"), s(&a.root.join("fresh"))),
            ];
            for (src, dst) in cases {
                let line = one_line_failure(&lanefs(&["cp", "-r", &src, &dst]));
                assert!(
                    line.contains("x_twice_1") && line.contains("twice"),
                    "{first:?} then {second:?}: {line}"
                );
                assert_eq!(snapshot(&a.outside), before, "{first:?} then {second:?}");
            }
        }
    }
}

#[test]
fn names_that_are_not_one_component_are_refused() {
    let test = "names_that_are_not_one_component_are_refused";
    if !debugfs_ready(test) {
        return;
    }
    // Names holding '/'. (A second `.` or `..` entry never reaches the copy: the
    // engine's readdir gives `.` and `..` once, from the directory itself; see below.)
    for (made, patched, kind, why) in [
        ("outsideXpasswd", "outside/passwd", Kind::File, "'/'"),
        ("XoutsideXpasswd", "/outside/passwd", Kind::File, "'/'"),
        ("QQXQQXoutside", "../../outside", Kind::Dir, "'/'"),
    ] {
        let a = area();
        fs::create_dir(a.tree.join("d")).unwrap();
        make(&a, &a.tree.join("d"), made, kind);
        let image = image_of(&a.root, &a.tree);
        rename_raw(&image, "/d", made.as_bytes(), patched.as_bytes());
        let before = snapshot(&a.outside);
        for dst in [a.out.clone(), a.out.join("deeper")] {
            let line = one_line_failure(&lanefs(&["cp", "-r", &at(&image, "/d"), &s(&dst)]));
            assert!(line.contains(why), "{patched}: {line}");
            assert_eq!(snapshot(&a.outside), before, "{patched}");
        }
        // The walk of `ls` and a copy of a sibling still work.
        ok(lanefs(&["ls", "-a", &at(&image, "/d")]));
    }
    // A second `..` or `.` naming a directory that holds a file: readdir shows the
    // directory's own two once, so the copy makes neither and writes nothing outside.
    for (made, patched) in [("QQ", ".."), ("Q", ".")] {
        let a = area();
        fs::create_dir_all(a.tree.join("d").join(made)).unwrap();
        fs::write(a.tree.join("d").join(made).join("passwd"), b"pwned\n").unwrap();
        let image = image_of(&a.root, &a.tree);
        rename_raw(&image, "/d", made.as_bytes(), patched.as_bytes());
        let listing = ok(lanefs(&["ls", "-a", &at(&image, "/d")]));
        assert_eq!(String::from_utf8_lossy(&listing.stdout), ".\n..\n");
        let before = snapshot(&a.outside);
        ok(lanefs(&[
            "cp",
            "-r",
            &at(&image, "/d"),
            &s(&a.out.join("d")),
        ]));
        assert_eq!(
            snapshot(&a.out),
            vec![format!("{} dir", a.out.join("d").display())]
        );
        assert_eq!(snapshot(&a.outside), before, "{patched}");
    }
}

#[test]
fn directories_met_twice_are_refused_by_cp_and_rm() {
    let test = "directories_met_twice_are_refused_by_cp_and_rm";
    if !debugfs_ready(test) {
        return;
    }
    // The path named is where the walk meets the directory the second time: either name
    // of a directory linked twice (readdir order decides), the loop's own name.
    let cases: [(&str, &[&str]); 2] = [
        ("link /d1 /d2/again", &["/d2/again", "/d1:"]),
        ("link /d1 /d1/loop", &["/d1/loop"]),
    ];
    for (link, shown) in cases {
        let a = area();
        for d in ["d1", "d2"] {
            fs::create_dir(a.tree.join(d)).unwrap();
            fs::write(a.tree.join(d).join("f"), b"data").unwrap();
        }
        let image = image_of(&a.root, &a.tree);
        debugfs(&image, true, link);
        let before = snapshot(&a.outside);
        let start = std::time::Instant::now();
        let line = one_line_failure(&lanefs(&["cp", "-r", &at(&image, "/"), &s(&a.out)]));
        assert!(
            shown.iter().any(|n| line.contains(n)) && line.contains("met twice"),
            "{link}: {line}"
        );
        assert!(
            start.elapsed().as_secs() < 30,
            "{link}: took {:?}",
            start.elapsed()
        );
        assert_eq!(snapshot(&a.outside), before);
        // `rm -r` walks the same tree: it stops at the second meeting too, in bounded
        // time and memory (it used to recurse until the stack overflowed).
        if link.contains("loop") {
            let start = std::time::Instant::now();
            let line = one_line_failure(&lanefs(&["rm", "-r", &at(&image, "/d1")]));
            assert!(
                line.contains("/d1/loop") && line.contains("met twice"),
                "{line}"
            );
            assert!(
                start.elapsed().as_secs() < 30,
                "rm -r: {:?}",
                start.elapsed()
            );
        }
    }
}

#[test]
fn names_already_in_the_destination_are_replaced_never_followed() {
    let a = area();
    fs::write(a.tree.join("x"), b"image file\n").unwrap();
    fs::create_dir(a.tree.join("d")).unwrap();
    fs::write(a.tree.join("d").join("passwd"), b"pwned\n").unwrap();
    fs::write(a.tree.join("h1"), b"linked\n").unwrap();
    fs::hard_link(a.tree.join("h1"), a.tree.join("h2")).unwrap();
    let image = a.root.join("plain.img");
    ok(lanefs(&["mkfs", &s(&image), "--size", "64M", "-b", "4096"]));
    let srcs = ["d", "h1", "h2", "x"].map(|n| s(&a.tree.join(n)));
    ok(lanefs(&[
        "cp",
        "-r",
        &srcs[0],
        &srcs[1],
        &srcs[2],
        &srcs[3],
        &at(&image, "/"),
    ]));
    // The destination already holds symlinks where the image has a file, a hard link's
    // second name, and (separately) a directory.
    symlink(a.outside.join("passwd"), a.out.join("x")).unwrap();
    symlink(a.outside.join("passwd"), a.out.join("h2")).unwrap();
    let before = snapshot(&a.outside);
    let srcs = ["/x", "/h1", "/h2"].map(|n| at(&image, n));
    ok(lanefs(&[
        "cp",
        "-r",
        &srcs[0],
        &srcs[1],
        &srcs[2],
        &s(&a.out),
    ]));
    assert_eq!(snapshot(&a.outside), before);
    let m = fs::symlink_metadata(a.out.join("x")).unwrap();
    assert!(m.is_file());
    assert_eq!(fs::read(a.out.join("x")).unwrap(), b"image file\n");
    use std::os::unix::fs::MetadataExt;
    let (h1, h2) = (
        fs::symlink_metadata(a.out.join("h1")).unwrap(),
        fs::symlink_metadata(a.out.join("h2")).unwrap(),
    );
    assert!(h2.is_file() && h1.ino() == h2.ino(), "h2 is a link to h1");
    // Symlinks and FIFOs are made and finished in a private directory, then renamed into
    // place over what was there: no private directory is left behind.
    let image2 = a.root.join("special.img");
    ok(lanefs(&[
        "mkfs",
        &s(&image2),
        "--size",
        "64M",
        "-b",
        "4096",
    ]));
    let special = a.root.join("special");
    fs::create_dir(&special).unwrap();
    symlink("target", special.join("sl")).unwrap();
    assert!(Command::new("mkfifo")
        .arg("-m")
        .arg("640")
        .arg(special.join("fifo"))
        .status()
        .unwrap()
        .success());
    ok(lanefs(&["cp", "-r", &s(&special), &at(&image2, "/")]));
    symlink(a.outside.join("passwd"), a.out.join("fifo")).unwrap();
    let srcs = ["/special/sl", "/special/fifo"].map(|n| at(&image2, n));
    ok(lanefs(&["cp", "-r", &srcs[0], &srcs[1], &s(&a.out)]));
    assert_eq!(
        fs::read_link(a.out.join("sl")).unwrap(),
        Path::new("target")
    );
    let fifo = fs::symlink_metadata(a.out.join("fifo")).unwrap();
    use std::os::unix::fs::FileTypeExt;
    assert!(
        fifo.file_type().is_fifo() && fifo.mode() & 0o7777 == 0o640,
        "{:o}",
        fifo.mode()
    );
    // One directory inside another source is copied with each (directories met twice
    // are counted per source), and a trailing slash names a symlinked directory.
    let merged = a.root.join("merged");
    fs::create_dir(&merged).unwrap();
    let srcs = ["/special", "/"].map(|n| at(&image2, n));
    ok(lanefs(&["cp", "-r", &srcs[0], &srcs[1], &s(&merged)]));
    assert!(merged.join("special").join("fifo").exists());
    symlink(&special, a.root.join("via")).unwrap();
    ok(lanefs(&[
        "cp",
        "-r",
        &format!("{}/", s(&a.root.join("via"))),
        &at(&image2, "/"),
    ]));
    ok(lanefs(&["stat", &at(&image2, "/via/fifo")]));
    let left: Vec<_> = fs::read_dir(&a.out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".lanefs"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    assert_eq!(snapshot(&a.outside), before);
    // A directory over a symlink to a directory: refused, nothing written through.
    symlink(&a.outside, a.out.join("d")).unwrap();
    let line = one_line_failure(&lanefs(&["cp", "-r", &at(&image, "/d"), &s(&a.out)]));
    assert!(line.contains("cannot overwrite a non-directory"), "{line}");
    let line = one_line_failure(&lanefs(&["cp", "-r", &at(&image, "/"), &s(&a.out)]));
    assert!(line.contains("cannot overwrite a non-directory"), "{line}");
    assert_eq!(snapshot(&a.outside), before);
}

#[test]
fn host_directories_swapped_for_symlinks_during_copy_in_are_not_followed() {
    let a = area();
    let src = a.tree.join("src");
    let (real, link) = (src.join("d"), a.tree.join("link"));
    fs::create_dir_all(&real).unwrap();
    // The outside directory holds the same names as `src/d`, with a secret in each.
    fs::write(a.outside.join("secret"), b"the secret\n").unwrap();
    for i in 0..40 {
        fs::write(src.join(format!("f{i}")), b"public\n").unwrap();
        fs::write(real.join(format!("g{i}")), b"public\n").unwrap();
        fs::write(a.outside.join(format!("g{i}")), b"the secret\n").unwrap();
    }
    symlink(&a.outside, &link).unwrap();
    let image = a.root.join("in.img");
    ok(lanefs(&["mkfs", &s(&image), "--size", "64M", "-b", "4096"]));
    // One thread exchanges `src/d` with a symlink to `outside` (atomically: `d` is always
    // one or the other) while copies run. Whatever a copy meets, no secret enters the
    // image: neither a name listed through the symlink nor data read through it.
    // (Before copy-in opened names by descriptor, its workers opened `src/d/gN` by path
    // long after the walk, and read the secret about half the time.)
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let swapper = {
        let (stop, real, link) = (stop.clone(), real.clone(), link.clone());
        std::thread::spawn(move || {
            let cwd = rustix::fs::CWD;
            let exchange = rustix::fs::RenameFlags::EXCHANGE;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                rustix::fs::renameat_with(cwd, &real, cwd, &link, exchange).unwrap();
            }
        })
    };
    let mut copied = 0;
    for round in 0..20 {
        let out = lanefs(&["cp", "-r", &s(&src), &at(&image, &format!("/r{round}"))]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "{err}");
        copied += usize::from(out.status.success());
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    swapper.join().unwrap();
    println!("{copied} of 20 copies completed while the swaps ran");
    ok(lanefs(&["fsck", &s(&image)]));
    let back = a.root.join("back");
    ok(lanefs(&["cp", "-r", &at(&image, "/"), &s(&back)]));
    let leaked: Vec<String> = snapshot(&back)
        .into_iter()
        .filter(|l| l.contains("secret") || l.contains(&format!("{:?}", b"the secret\n")))
        .collect();
    assert!(leaked.is_empty(), "secrets came in: {leaked:?}");
}

/// A tree deeper than the usual 1024 open descriptors copies out and back in: the walks
/// hold a descriptor per level (and `cp` raises its soft limit to the hard one), and
/// keep their stack on the heap.
#[test]
fn trees_deeper_than_the_descriptor_limit_copy_both_ways() {
    const DEPTH: usize = 1500;
    let a = area();
    let image = a.root.join("deep.img");
    ok(lanefs(&["mkfs", &s(&image), "--size", "64M", "-b", "4096"]));
    {
        let fs = lanefs::Fs::mount_path(&image, lanefs::MountOptions::default()).unwrap();
        let owner = lanefs::Owner {
            uid: 0,
            gid: 0,
            umask: 0o022,
        };
        let mut dir = lanefs::ROOT_INO;
        for _ in 0..DEPTH {
            dir = fs.mkdir(dir, b"a", 0o755, owner).unwrap().ino;
        }
        fs.create(dir, b"bottom", 0o644, owner).unwrap();
        fs.unmount().unwrap();
    }
    // Started with a soft limit of 512 descriptors, below the depth.
    let low = |args: &[&str]| {
        Command::new("sh")
            .arg("-c")
            .arg("ulimit -Sn 512 && exec \"$0\" \"$@\"")
            .arg(env!("CARGO_BIN_EXE_lanefs"))
            .args(args)
            .output()
            .unwrap()
    };
    let out = a.out.join("copy");
    ok(low(&["cp", "-r", &at(&image, "/a"), &s(&out)]));
    let mut p = out.clone();
    for _ in 1..DEPTH {
        p.push("a");
    }
    assert!(
        p.join("bottom").is_file(),
        "the bottom of the tree came out"
    );
    ok(low(&["cp", "-r", &s(&out), &at(&image, "/back")]));
    let bottom = format!("/back{}/bottom", "/a".repeat(DEPTH - 1));
    ok(lanefs(&["stat", &at(&image, &bottom)]));
    ok(lanefs(&["fsck", &s(&image)]));
}

/// Two sources of one name are refused, not copied one over the other (as GNU cp's
/// "will not overwrite just-created"), both ways.
#[test]
fn sources_of_one_name_do_not_replace_each_other() {
    let a = area();
    for d in ["a", "b"] {
        fs::create_dir(a.tree.join(d)).unwrap();
        fs::write(a.tree.join(d).join("f"), d.as_bytes()).unwrap();
    }
    let image = a.root.join("names.img");
    ok(lanefs(&["mkfs", &s(&image), "--size", "64M", "-b", "4096"]));
    let (fa, fb) = (a.tree.join("a").join("f"), a.tree.join("b").join("f"));
    let line = one_line_failure(&lanefs(&["cp", &s(&fa), &s(&fb), &at(&image, "/")]));
    assert!(line.contains("just-created"), "{line}");
    ok(lanefs(&[
        "cp",
        "-r",
        &s(&a.tree.join("a")),
        &s(&a.tree.join("b")),
        &at(&image, "/"),
    ]));
    let (ia, ib) = (at(&image, "/a/f"), at(&image, "/b/f"));
    let line = one_line_failure(&lanefs(&["cp", &ia, &ib, &s(&a.out)]));
    assert!(line.contains("just-created"), "{line}");
    assert_eq!(fs::read(a.out.join("f")).unwrap(), b"a");
}
