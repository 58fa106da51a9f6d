//! `lanefs cp -r` behaves like `cp -a`, both ways: sparse files stay sparse and cost per
//! extent, hard links keep their identity, extended attributes and ACLs are kept; and an
//! image in use (mounted by the kernel, or written by another lanefs) is refused.
//! Tests that need root or loop mounts print SKIP without them (and fail under
//! `LANEFS_REQUIRE_PRIVILEGED=1`).

use lanefs::{Fs, MountOptions, Owner, ROOT_INO};
use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

mod cli_common;
use cli_common::*;
use std::sync::mpsc;
use std::time::Duration;

/// A 4 KiB-block image (the tests need ext4's 16 TiB files and 4 KiB xattr blocks; mkfs
/// would pick 1 KiB blocks below 512 MiB, as mke2fs does).
fn new_image(dir: &Path, name: &str, size: &str) -> PathBuf {
    let image = dir.join(name);
    ok(lanefs(&["mkfs", &s(&image), "--size", size, "-b", "4096"]));
    image
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// Ends the process if `secs` pass before it is dropped: a per-byte walk of a huge hole
/// must fail the run, not hang it.
struct Watchdog(#[allow(dead_code)] mpsc::Sender<()>);

fn watchdog(test: &'static str, secs: u64) -> Watchdog {
    let (tx, rx) = mpsc::channel::<()>();
    std::thread::spawn(move || {
        if rx.recv_timeout(Duration::from_secs(secs)) == Err(mpsc::RecvTimeoutError::Timeout) {
            eprintln!("{test}: still running after {secs} s: exiting");
            std::process::exit(101);
        }
    });
    Watchdog(tx)
}

/// Sparse files of 8 GiB (empty) and 15 TiB (three 4 KiB blocks) copy out in bounded
/// time, stay sparse on the host, and hold the right bytes; copied back in, they stay
/// sparse in the image too.
#[test]
fn sparse_files_copy_per_extent() {
    let _wd = watchdog("sparse_files_copy_per_extent", 60);
    let td = tempfile::tempdir().unwrap();
    let image = new_image(td.path(), "s.img", "64M");
    let tib = 1u64 << 40;
    {
        let fs = Fs::mount_path(&image, MountOptions::default()).unwrap();
        let me = Owner::default();
        let e = fs.create(ROOT_INO, b"empty8g", 0o644, me).unwrap();
        let set = lanefs::SetAttr {
            size: Some(8 << 30),
            ..lanefs::SetAttr::default()
        };
        fs.setattr(e.ino, &set).unwrap();
        fs.release(e.ino).unwrap();
        let h = fs.create(ROOT_INO, b"huge", 0o644, me).unwrap();
        for (off, byte) in [(0, 1u8), (7 * tib, 2), (15 * tib - 4096, 3)] {
            fs.write(h.ino, off, &[byte; 4096]).unwrap();
        }
        fs.release(h.ino).unwrap();
        fs.unmount().unwrap();
    }
    let out = td.path().join("out");
    fs::create_dir(&out).unwrap();
    ok(lanefs(&[
        "cp",
        &at(&image, "/empty8g"),
        &at(&image, "/huge"),
        &s(&out),
    ]));
    let e = fs::metadata(out.join("empty8g")).unwrap();
    assert_eq!((e.len(), e.blocks()), (8 << 30, 0));
    let h = fs::File::open(out.join("huge")).unwrap();
    let m = h.metadata().unwrap();
    assert_eq!(m.len(), 15 * tib);
    assert!(m.blocks() <= 3 * 8 * 4, "{} sectors allocated", m.blocks());
    for (off, byte) in [(0, 1u8), (7 * tib, 2), (15 * tib - 4096, 3), (3 * tib, 0)] {
        let mut b = [9u8; 4096];
        std::os::unix::fs::FileExt::read_exact_at(&h, &mut b, off).unwrap();
        assert!(b.iter().all(|&x| x == byte), "at {off}");
    }
    // And back in: the host file's holes are skipped, not read.
    let image2 = new_image(td.path(), "s2.img", "64M");
    ok(lanefs(&[
        "cp",
        &s(&out.join("huge")),
        &at(&image2, "/huge"),
    ]));
    let fs = Fs::mount_path(&image2, MountOptions::default()).unwrap();
    let a = fs.lookup(ROOT_INO, b"huge").unwrap();
    assert_eq!(a.size, 15 * tib);
    assert_eq!(fs.diagnostics().extent_count(a.ino).unwrap(), 3);
    drop(fs);
    e2fsck_clean(&image2);
}

/// (name -> inode) of every non-directory under `root`, and the link groups.
fn link_groups(root: &Path) -> Vec<Vec<String>> {
    let mut by_ino: BTreeMap<(u64, u64), Vec<String>> = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let m = fs::symlink_metadata(e.path()).unwrap();
            if m.is_dir() {
                stack.push(e.path());
            } else {
                let rel = e.path().strip_prefix(root).unwrap().display().to_string();
                by_ino.entry((m.dev(), m.ino())).or_default().push(rel);
            }
        }
    }
    let mut groups: Vec<Vec<String>> = by_ino
        .into_values()
        .map(|mut v| {
            v.sort();
            v
        })
        .collect();
    groups.sort();
    groups
}

/// A tree with 16 names in 4 link groups (and a lone file): copied in, the image has 5
/// inodes with the right link counts; copied out, the host tree has the same groups. With
/// root, the kernel reads the image's groups too.
#[test]
fn hard_links_keep_their_identity() {
    let td = tempfile::tempdir().unwrap();
    let src = td.path().join("src");
    fs::create_dir_all(src.join("a/b")).unwrap();
    fs::create_dir_all(src.join("c")).unwrap();
    fs::write(src.join("lone"), b"lone").unwrap();
    let dirs = ["", "a", "a/b", "c"];
    for g in 0..4 {
        let first = src.join(format!("g{g}-0"));
        fs::write(&first, format!("group {g}")).unwrap();
        for (k, d) in dirs.iter().enumerate().skip(1) {
            fs::hard_link(&first, src.join(d).join(format!("g{g}-{k}"))).unwrap();
        }
    }
    let want = link_groups(&src);
    assert_eq!(want.iter().filter(|g| g.len() == 4).count(), 4);
    let image = new_image(td.path(), "h.img", "64M");
    ok(lanefs(&["cp", "-r", &s(&src), &at(&image, "/t")]));
    {
        let fs = Fs::mount_path(
            &image,
            MountOptions {
                read_only: true,
                ..MountOptions::default()
            },
        )
        .unwrap();
        let t = fs.lookup(ROOT_INO, b"t").unwrap().ino;
        let g0 = fs.lookup(t, b"g0-0").unwrap();
        assert_eq!(g0.nlink, 4);
        let b = fs
            .lookup(fs.lookup(t, b"a").unwrap().ino, b"b")
            .unwrap()
            .ino;
        assert_eq!(fs.lookup(b, b"g0-2").unwrap().ino, g0.ino);
    }
    e2fsck_clean(&image);
    let out = td.path().join("out");
    ok(lanefs(&["cp", "-r", &at(&image, "/t"), &s(&out)]));
    assert_eq!(link_groups(&out), want);
    if !is_root() {
        skip("hard_links_keep_their_identity (kernel)", "not root");
        return;
    }
    let mnt = td.path().join("mnt");
    if !kernel_mount("hard_links_keep_their_identity", &image, &mnt, "loop,ro") {
        return;
    }
    let groups = link_groups(&mnt.join("t"));
    let _ = Command::new("umount").arg(&mnt).status();
    assert_eq!(groups, want);
}

/// `lanefs mkdir IMG:/d` while the kernel has IMG mounted read-write fails in one line
/// naming the mount, and the image stays clean; reading still works.
#[test]
fn kernel_mounted_image_is_refused() {
    if !is_root() {
        skip("kernel_mounted_image_is_refused", "not root");
        return;
    }
    let td = tempfile::tempdir().unwrap();
    let image = td.path().join("k.img");
    fs::File::create(&image).unwrap().set_len(64 << 20).unwrap();
    let made = Command::new("mkfs.ext4")
        .args(["-q", "-F", "-b", "4096"])
        .arg(&image)
        .status();
    if !made.is_ok_and(|s| s.success()) {
        skip("kernel_mounted_image_is_refused", "mkfs.ext4 failed");
        return;
    }
    let mnt = td.path().join("mnt");
    if !kernel_mount("kernel_mounted_image_is_refused", &image, &mnt, "loop") {
        return;
    }
    fs::write(mnt.join("k"), b"kernel").unwrap();
    let line = one_line_failure(&lanefs(&["mkdir", &at(&image, "/d")]));
    let read = lanefs(&["ls", &at(&image, "/")]);
    let _ = Command::new("umount").arg(&mnt).status();
    assert!(line.contains("mounted by the kernel"), "{line}");
    assert!(line.contains(&s(&mnt)), "{line}");
    ok(read);
    e2fsck_clean(&image);
    let ls = ok(lanefs(&["ls", &at(&image, "/")]));
    let text = String::from_utf8_lossy(&ls.stdout);
    assert!(text.contains('k') && !text.contains("\nd\n"), "{text}");
}

/// Two writers at once: the second is refused in one line naming the holder's pid while
/// the first holds the image, and the first's tree is whole afterwards.
#[test]
fn second_writer_is_refused() {
    let td = tempfile::tempdir().unwrap();
    let image = new_image(td.path(), "w.img", "64M");
    let fs = Fs::mount_path(&image, MountOptions::default()).unwrap();
    fs.mkdir(ROOT_INO, b"first", 0o755, Owner::default())
        .unwrap();
    let src = td.path().join("src");
    fs::create_dir(&src).unwrap();
    fs::write(src.join("f"), b"second").unwrap();
    let line = one_line_failure(&lanefs(&["cp", "-r", &s(&src), &at(&image, "/second")]));
    assert!(line.contains("in use by another lanefs"), "{line}");
    assert!(
        line.contains(&format!("open in pid {}", std::process::id())),
        "{line}"
    );
    fs.unmount().unwrap();
    ok(lanefs(&["cp", "-r", &s(&src), &at(&image, "/second")]));
    let ls = ok(lanefs(&["ls", &at(&image, "/")]));
    let text = String::from_utf8_lossy(&ls.stdout);
    assert!(text.contains("first") && text.contains("second"), "{text}");
    e2fsck_clean(&image);
}

/// Arguments are OS strings: a host path and an image path that are not UTF-8 work in
/// every direction, and an image whose name holds ':' is named as it is.
#[test]
fn non_utf8_paths_and_colon_image_names() {
    use std::ffi::{OsStr, OsString};
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    let td = tempfile::tempdir().unwrap();
    let name = OsStr::from_bytes(b"caf\xe9");
    let host = td.path().join(name);
    fs::write(&host, b"latin-1 name").unwrap();
    let image = new_image(td.path(), "a:b.img", "64M");
    let img_arg = |path: &[u8]| {
        let mut v = image.as_os_str().as_bytes().to_vec();
        v.push(b':');
        v.extend_from_slice(path);
        OsString::from_vec(v)
    };
    let cp = |a: &OsStr, b: &OsStr| lanefs(&[OsStr::new("cp"), a, b]);
    ok(cp(host.as_os_str(), &img_arg(b"/")));
    ok(lanefs(&[OsStr::new("mkdir"), &img_arg(b"/d\xff:x")]));
    ok(cp(host.as_os_str(), &img_arg(b"/d\xff:x/")));
    let cat = ok(lanefs(&[OsStr::new("cat"), &img_arg(b"/d\xff:x/caf\xe9")]));
    assert_eq!(cat.stdout, b"latin-1 name");
    let ls = ok(lanefs(&[OsStr::new("ls"), &img_arg(b"/")]));
    assert!(ls.stdout.windows(4).any(|w| w == b"caf\xe9"));
    let out = td.path().join(OsStr::from_bytes(b"out\xfe"));
    ok(cp(&img_arg(b"/caf\xe9"), out.as_os_str()));
    assert_eq!(fs::read(&out).unwrap(), b"latin-1 name");
    // The bare image (no path) is its root.
    ok(lanefs(&[OsStr::new("ls"), image.as_os_str()]));
    e2fsck_clean(&image);
}

/// Every xattr of host path `p` through getfattr (names and hex values), or None when the
/// tool is missing.
fn getfattr_dump(p: &Path) -> String {
    let out = Command::new("getfattr")
        .args(["-h", "-d", "-m", "-", "-e", "hex", "--absolute-names"])
        .arg(p)
        .output()
        .expect("getfattr");
    // Drop the "# file:" header, which names the path.
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.starts_with("# file:") && !l.is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

/// `cp -r` keeps user, trusted and security attributes and access and default ACLs, in
/// both directions; the kernel reads the image's copy the same.
#[test]
fn xattrs_and_acls_are_copied_both_ways() {
    if !is_root() {
        skip(
            "xattrs_and_acls_are_copied_both_ways",
            "not root (trusted.* and loop mounts)",
        );
        return;
    }
    let have = |t: &str| Command::new(t).arg("--version").output().is_ok();
    if !have("setfacl") || !have("getfattr") {
        skip(
            "xattrs_and_acls_are_copied_both_ways",
            "setfacl/getfattr not installed",
        );
        return;
    }
    let td = tempfile::tempdir().unwrap();
    let src = td.path().join("src");
    fs::create_dir_all(src.join("d")).unwrap();
    fs::write(src.join("f"), b"file").unwrap();
    fs::write(src.join("d/g"), b"inner").unwrap();
    std::os::unix::fs::symlink("f", src.join("link")).unwrap();
    let setfattr = |args: &[&str], p: &Path| {
        let st = Command::new("setfattr").args(args).arg(p).status().unwrap();
        assert!(st.success(), "setfattr {args:?}");
    };
    setfattr(&["-n", "user.small", "-v", "v"], &src.join("f"));
    setfattr(
        &["-n", "user.big", "-v", &format!("0x{}", "ab".repeat(1500))],
        &src.join("f"),
    );
    setfattr(&["-n", "trusted.t", "-v", "trusted value"], &src.join("f"));
    setfattr(&["-n", "security.test", "-v", "sec"], &src.join("d/g"));
    setfattr(&["-n", "user.dir", "-v", "on a dir"], &src.join("d"));
    let setfacl = |args: &[&str], p: &Path| {
        let st = Command::new("setfacl").args(args).arg(p).status().unwrap();
        assert!(st.success(), "setfacl {args:?}");
    };
    setfacl(&["-m", "u:1234:rw,g:55:r"], &src.join("f"));
    setfacl(&["-d", "-m", "u:1234:rwx"], &src.join("d"));
    let paths = ["f", "d", "d/g", "link"];
    let want: Vec<String> = paths.iter().map(|p| getfattr_dump(&src.join(p))).collect();
    assert!(want[0].contains("system.posix_acl_access") && want[1].contains("posix_acl_default"));
    let image = new_image(td.path(), "x.img", "64M");
    ok(lanefs(&["cp", "-r", &s(&src), &at(&image, "/t")]));
    e2fsck_clean(&image);
    let mnt = td.path().join("mnt");
    if !kernel_mount(
        "xattrs_and_acls_are_copied_both_ways",
        &image,
        &mnt,
        "loop,ro",
    ) {
        return;
    }
    let in_kernel: Vec<String> = paths
        .iter()
        .map(|p| getfattr_dump(&mnt.join("t").join(p)))
        .collect();
    let mode = fs::metadata(mnt.join("t/f")).unwrap().mode();
    let _ = Command::new("umount").arg(&mnt).status();
    assert_eq!(in_kernel, want, "the kernel reads what lanefs copied in");
    assert_eq!(
        mode & 0o777,
        fs::metadata(src.join("f")).unwrap().mode() & 0o777
    );
    let out = td.path().join("out");
    ok(lanefs(&["cp", "-r", &at(&image, "/t"), &s(&out)]));
    let back: Vec<String> = paths.iter().map(|p| getfattr_dump(&out.join(p))).collect();
    assert_eq!(back, want, "copied back out");
}

/// An image with features lanefs reads but cannot write (quota, project) is mounted
/// read-only; a command that writes says so, naming them, in one line; reading works.
#[test]
fn unwritable_features_are_named() {
    let td = tempfile::tempdir().unwrap();
    let image = td.path().join("q.img");
    fs::File::create(&image).unwrap().set_len(64 << 20).unwrap();
    let made = Command::new("mkfs.ext4")
        .args(["-q", "-F", "-b", "4096", "-O", "quota,project"])
        .arg(&image)
        .status();
    if !made.is_ok_and(|s| s.success()) {
        skip(
            "unwritable_features_are_named",
            "mkfs.ext4 -O quota,project failed",
        );
        return;
    }
    let line = one_line_failure(&lanefs(&["mkdir", &at(&image, "/d")]));
    assert!(
        line.contains("quota") && line.contains("project") && line.contains("read-only"),
        "{line}"
    );
    ok(lanefs(&["ls", &at(&image, "/")]));
    // `lanefs info` says the same.
    let info = lanefs(&["info", &s(&image)]);
    let text = String::from_utf8_lossy(&info.stdout);
    let access = text
        .lines()
        .find(|l| l.starts_with("lanefs access:"))
        .unwrap_or_else(|| panic!("no access line in:\n{text}"));
    assert!(
        access.contains("read-only") && access.contains("quota"),
        "{access}"
    );
    e2fsck_clean(&image);
}
