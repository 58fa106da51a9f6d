//! `lanefs mkfs` gives an image root's owners, modes and device nodes without root, as
//! image builders need: `--all-root` (as `mksquashfs -all-root`), `-E root_owner` (as
//! mke2fs) and `--device-table` (makedevs format, as `genext2fs -D`). Built as the
//! unprivileged user `lanefs-a` (`setpriv`, when the tests run as root), read back by the
//! kernel's ext4, `e2fsck -fn` clean, reproducible builds byte-identical. Tests that need
//! root, the user or loop mounts print SKIP without them (and fail under
//! `LANEFS_REQUIRE_PRIVILEGED=1`).

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod cli_common;
use cli_common::*;

const UUID: &str = "0f8e1c2a-3b4d-4e5f-8a9b-0c1d2e3f4a5b";
const SEED: &str = "11111111-2222-3333-4444-555555555555";
const EPOCH: i64 = 1_700_000_000;

/// `lanefs ARGS...` with SOURCE_DATE_EPOCH unset.
fn lanefs_plain(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lanefs"))
        .args(args)
        .env_remove("SOURCE_DATE_EPOCH")
        .output()
        .expect("run lanefs")
}

fn umount(mnt: &Path) {
    assert!(Command::new("umount").arg(mnt).status().unwrap().success());
}

/// `e2fsck -fn` and `lanefs fsck` find nothing wrong with `image`.
fn clean(image: &Path) {
    e2fsck_clean(image);
    ok(lanefs(&["fsck", &s(image)]));
}

/// What the kernel (or the host) shows of one entry: its full mode, owner, and what it
/// holds (a file's checksum, a symlink's target, a device's numbers).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    mode: u32,
    uid: u32,
    gid: u32,
    holds: String,
}

/// Every entry under `root` by its image path (`/` the root itself; lost+found left out).
fn seen(root: &Path) -> BTreeMap<String, Seen> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(p) = stack.pop() {
        let rel = format!("/{}", p.strip_prefix(root).unwrap().display());
        if rel == "/lost+found" {
            continue;
        }
        let m = fs::symlink_metadata(&p).unwrap();
        let ft = m.file_type();
        let holds = holds(&p, &m, |data| format!("crc {:x}", crc(data)));
        if ft.is_dir() {
            stack.extend(fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
        }
        let entry = Seen {
            mode: m.mode(),
            uid: m.uid(),
            gid: m.gid(),
            holds,
        };
        out.insert(rel, entry);
    }
    out
}

/// `lanefs ARGS...` run by user `uid:gid` (no other group; `lanefs` a binary it may run),
/// with SOURCE_DATE_EPOCH `epoch` or none.
fn lanefs_as(user: (u32, u32), lanefs: &Path, epoch: Option<&str>, args: &[&str]) -> Output {
    let mut cmd = Command::new("setpriv");
    cmd.arg(format!("--reuid={}", user.0))
        .arg(format!("--regid={}", user.1))
        .arg("--clear-groups")
        .arg(lanefs)
        .args(args);
    match epoch {
        Some(e) => cmd.env("SOURCE_DATE_EPOCH", e),
        None => cmd.env_remove("SOURCE_DATE_EPOCH"),
    };
    cmd.output().expect("run setpriv")
}

/// Give `path` and everything below it to `user` (not following symlinks).
fn chown_tree(path: &Path, user: (u32, u32)) {
    std::os::unix::fs::lchown(path, Some(user.0), Some(user.1)).unwrap();
    if fs::symlink_metadata(path).unwrap().is_dir() {
        for e in fs::read_dir(path).unwrap() {
            chown_tree(&e.unwrap().path(), user);
        }
    }
}

/// The table the owner tests build with: every type, a series of each numbering, the
/// largest device numbers ext4 holds, directories the tree lacks (one inside another),
/// entries the tree has (a directory, files, a hard-linked file, a fifo), comments.
const TABLE: &str = "\
# path          type mode uid gid major minor start inc count
/dev            d    755  0   0   -     -     -     -   -
/dev/console    c    600  0   5   5     1     -     -   -   # the console
/dev/null       c    666  0   0   1     3
/dev/tty        c    620  0   5   4     1     1     1   3
/dev/hd         b    640  0   6   3     0     0     64  2
/dev/big        c    600  0   0   4095  1048575
/dev/pts        d    755  0   0
/dev/pts/sock   s    600  0   0
/etc            d    755  0   0
/etc/shadow     f    600  0   42
/etc/hosts      f    640  0   7
/bin/su         f    4755 0   0
/run/fifo       p    620  0   5
/run/new        p    600  1   1
/var            d    755  0   0
/var/log        d    2750 0   4
";

/// What TABLE makes or sets, by path: mode, owner and device numbers.
fn table_says() -> Vec<(&'static str, u32, u32, u32, &'static str)> {
    vec![
        ("/dev", 0o40755, 0, 0, ""),
        ("/dev/console", 0o20600, 0, 5, "5,1"),
        ("/dev/null", 0o20666, 0, 0, "1,3"),
        ("/dev/tty1", 0o20620, 0, 5, "4,1"),
        ("/dev/tty2", 0o20620, 0, 5, "4,2"),
        ("/dev/tty3", 0o20620, 0, 5, "4,3"),
        ("/dev/hd0", 0o60640, 0, 6, "3,0"),
        ("/dev/hd1", 0o60640, 0, 6, "3,64"),
        ("/dev/big", 0o20600, 0, 0, "4095,1048575"),
        ("/dev/pts", 0o40755, 0, 0, ""),
        ("/dev/pts/sock", 0o140600, 0, 0, ""),
        ("/etc", 0o40755, 0, 0, ""),
        ("/etc/shadow", 0o100600, 0, 42, ""),
        ("/etc/hosts", 0o100640, 0, 7, ""),
        ("/etc/hosts.again", 0o100640, 0, 7, ""),
        ("/bin/su", 0o104755, 0, 0, ""),
        ("/run/fifo", 0o10620, 0, 5, ""),
        ("/run/new", 0o10600, 1, 1, ""),
        ("/var", 0o40755, 0, 0, ""),
        ("/var/log", 0o42750, 0, 4, ""),
    ]
}

/// A small root file system as an unprivileged user has it: every file its own, the
/// top directory root's.
fn make_rootfs(tree: &Path, user: (u32, u32)) {
    for d in ["bin", "etc", "home/user", "run"] {
        fs::create_dir_all(tree.join(d)).unwrap();
    }
    fs::write(tree.join("bin/sh"), noise(7, 70_000)).unwrap();
    fs::write(tree.join("bin/su"), noise(8, 3000)).unwrap();
    fs::write(tree.join("etc/shadow"), b"root:*:19000::::::\n").unwrap();
    fs::write(tree.join("etc/passwd"), b"root:x:0:0::/root:/bin/sh\n").unwrap();
    fs::write(tree.join("etc/hosts"), b"127.0.0.1 localhost\n").unwrap();
    fs::hard_link(tree.join("etc/hosts"), tree.join("etc/hosts.again")).unwrap();
    fs::write(tree.join("home/user/notes"), b"mine\n").unwrap();
    std::os::unix::fs::symlink("bin/sh", tree.join("sh")).unwrap();
    let fifo = Command::new("mkfifo")
        .arg(tree.join("run/fifo"))
        .status()
        .unwrap();
    assert!(fifo.success());
    let mode = |p: &str, m: u32| {
        let perm = std::os::unix::fs::PermissionsExt::from_mode(m);
        fs::set_permissions(tree.join(p), perm).unwrap();
    };
    mode("bin/sh", 0o755);
    mode("bin/su", 0o755);
    mode("home/user", 0o700);
    chown_tree(tree, user);
    std::os::unix::fs::chown(tree, Some(0), Some(0)).unwrap();
    mode(".", 0o755);
}

/// What the image built from `tree` must show: the tree's entries, owned by root with
/// `all_root`, the root owned by `root_owner`, then TABLE's lines.
fn expected(tree: &Path, all_root: bool, root_owner: (u32, u32)) -> BTreeMap<String, Seen> {
    let mut want = seen(tree);
    for s in want.values_mut().filter(|_| all_root) {
        (s.uid, s.gid) = (0, 0);
    }
    let root = want.get_mut("/").unwrap();
    (root.uid, root.gid) = root_owner;
    for (path, mode, uid, gid, dev) in table_says() {
        let old = want.get(path).map(|s| s.holds.clone());
        let holds = old.unwrap_or_else(|| dev.to_string());
        let entry = Seen {
            mode,
            uid,
            gid,
            holds,
        };
        want.insert(path.to_string(), entry);
    }
    want
}

/// The image's entries as the kernel's ext4 reads them, or `None` after a SKIP line.
fn kernel_sees(test: &str, image: &Path, mnt: &Path) -> Option<BTreeMap<String, Seen>> {
    if !kernel_mount(test, image, mnt, "loop,ro") {
        return None;
    }
    let got = seen(mnt);
    umount(mnt);
    Some(got)
}

/// A directory `user` owns (mode 755) for its images and table, and the `lanefs` binary
/// as it can run it (a copy there when the build is out of its reach).
fn user_dir(td: &Path, user: (u32, u32)) -> (PathBuf, PathBuf) {
    let dir = td.join("work");
    fs::create_dir(&dir).unwrap();
    std::os::unix::fs::chown(&dir, Some(user.0), Some(user.1)).unwrap();
    let perm = std::os::unix::fs::PermissionsExt::from_mode(0o755);
    fs::set_permissions(td, perm).unwrap();
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_lanefs"));
    let probe = lanefs_as(user, &bin, None, &["--version"]);
    if probe.status.success() {
        return (dir, bin);
    }
    let copy = dir.join("lanefs");
    fs::copy(&bin, &copy).unwrap();
    (dir, copy)
}

/// Goal: an unprivileged user builds a root file system image with root's owners, device
/// nodes, set-ID modes and a set-group-ID directory, as image builders need: with
/// `--all-root`, `-E root_owner=UID:GID` and `--device-table`, reproducibly (two builds
/// byte-identical); without `--all-root`, the user's own owners stay and `-E root_owner`
/// with no value gives the root directory to the user running mkfs. The kernel reads
/// back exactly the owners, modes and device numbers; `e2fsck -fn` calls it clean.
#[test]
fn owners_and_devices_without_root() {
    let name = "owners_and_devices_without_root";
    let Some(user) = builder(name) else { return };
    let td = tempfile::tempdir().unwrap();
    let (work, bin) = user_dir(td.path(), user);
    let tree = td.path().join("rootfs");
    make_rootfs(&tree, user);
    let table = work.join("devices.txt");
    fs::write(&table, TABLE).unwrap();
    let (t, d) = (s(&tree), s(&table));
    let epoch = EPOCH.to_string();
    let seed = format!("hash_seed={SEED}");
    let mnt = td.path().join("mnt");

    // Reproducible, everything root's but the root directory.
    let mut sums = Vec::new();
    for run in 0..2 {
        let image = s(&work.join(format!("r{run}.img")));
        let args = [
            "mkfs",
            "-s",
            "64M",
            "-U",
            UUID,
            "-E",
            &seed,
            "-E",
            "root_owner=123:456",
            "-d",
            &t,
            "--all-root",
            "--device-table",
            &d,
            &image,
        ];
        ok(lanefs_as(user, &bin, Some(&epoch), &args));
        sums.push(crc(&fs::read(&image).unwrap()));
    }
    assert_eq!(sums[0], sums[1], "two builds differ");
    let image = work.join("r0.img");
    clean(&image);
    let want = expected(&tree, true, (123, 456));
    match kernel_sees(name, &image, &mnt) {
        Some(got) => assert_eq!(got, want, "--all-root build"),
        None => return,
    }

    // The user's own owners, and the root directory the user's (root_owner, no value).
    let image = s(&work.join("plain.img"));
    let args = [
        "mkfs",
        "-s",
        "64M",
        "-E",
        "root_owner",
        "-d",
        &t,
        "--devtable",
        &d,
        &image,
    ];
    ok(lanefs_as(user, &bin, None, &args));
    clean(Path::new(&image));
    let want = expected(&tree, false, user);
    assert_eq!(want["/bin/sh"].uid, user.0, "the tree is the user's");
    let got = kernel_sees(name, Path::new(&image), &mnt).unwrap();
    assert_eq!(got, want, "build keeping the user's owners");
}

/// Goal: without `-d`, `-E root_owner` and a device table still apply to the empty
/// image (mke2fs sets root_owner on an empty file system too), reproducibly; the table's
/// `/` line, applied last, sets the root's mode and owner, and a line may set lost+found's.
#[test]
fn device_table_without_a_tree() {
    let name = "device_table_without_a_tree";
    let Some(user) = builder(name) else { return };
    let td = tempfile::tempdir().unwrap();
    let (work, bin) = user_dir(td.path(), user);
    let table = work.join("devices.txt");
    let text = "/dev d 755 0 0\n/dev/null c 666 0 0 1 3\n/lost+found d 700 9 9\n";
    fs::write(&table, text).unwrap();
    let owned = work.join("owned.txt");
    fs::write(&owned, format!("{text}/ d 0711 3 4\n")).unwrap();
    let epoch = EPOCH.to_string();
    let seed = format!("hash_seed={SEED}");
    let mnt = td.path().join("mnt");
    let mut sums = Vec::new();
    for (run, t) in [&table, &table, &owned].iter().enumerate() {
        let image = s(&work.join(format!("e{run}.img")));
        let args = [
            "mkfs",
            "-s",
            "32M",
            "-U",
            UUID,
            "-E",
            &seed,
            "-E",
            "root_owner=7:8",
            "--device-table",
            &s(t),
            &image,
        ];
        let out = ok(lanefs_as(user, &bin, Some(&epoch), &args));
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(text.contains("applied the device table"), "{text}");
        sums.push(crc(&fs::read(&image).unwrap()));
    }
    assert_eq!(sums[0], sums[1], "two builds differ");
    for (image, root) in [("e0.img", (0o40755, 7, 8)), ("e2.img", (0o40711, 3, 4))] {
        let image = work.join(image);
        clean(&image);
        let Some(got) = kernel_sees(name, &image, &mnt) else {
            return;
        };
        let entry = |mode, uid, gid, holds: &str| Seen {
            mode,
            uid,
            gid,
            holds: holds.to_string(),
        };
        let want = BTreeMap::from([
            ("/".to_string(), entry(root.0, root.1, root.2, "")),
            ("/dev".to_string(), entry(0o40755, 0, 0, "")),
            ("/dev/null".to_string(), entry(0o20666, 0, 0, "1,3")),
        ]);
        assert_eq!(got, want, "{}", image.display());
        mount_lost_found(name, &image, &mnt);
    }
}

/// lost+found as the table set it (0700, 9:9).
fn mount_lost_found(test: &str, image: &Path, mnt: &Path) {
    if !kernel_mount(test, image, mnt, "loop,ro") {
        return;
    }
    let m = fs::symlink_metadata(mnt.join("lost+found")).unwrap();
    umount(mnt);
    assert_eq!((m.mode(), m.uid(), m.gid()), (0o40700, 9, 9));
}

/// Goal: a device table or root_owner that cannot be applied fails in one line naming
/// the table file and line (or the option), and leaves no image; an image file that was
/// there already is left as it was when the table fails before formatting. Runs as any
/// user.
#[test]
fn device_table_errors_fail_in_one_line() {
    let td = tempfile::tempdir().unwrap();
    let tree = td.path().join("tree");
    fs::create_dir_all(tree.join("bin")).unwrap();
    fs::create_dir_all(tree.join("etc")).unwrap();
    fs::write(tree.join("bin/sh"), b"sh").unwrap();
    fs::write(tree.join("one"), b"1").unwrap();
    fs::hard_link(tree.join("one"), tree.join("two")).unwrap();
    let image = td.path().join("bad.img");
    let table = td.path().join("t.txt");
    let cases: [(&str, &str); 9] = [
        ("/dev d 755\n\n/dev/x q 600\n", "t.txt:3: /dev/x: type 'q'"),
        ("# only\n/dev d\n", "t.txt:2: 2 fields"),
        ("/dev/x c 600 0 0 4096 0\n", "t.txt:1: /dev/x: major 4096"),
        ("/dev d 755 zero\n", "t.txt:1: /dev: uid 'zero'"),
        (
            "/etc/passwd f 644 0 0\n",
            "t.txt:1: /etc/passwd: no such regular file",
        ),
        (
            "/bin/sh d 755\n",
            "t.txt:1: /bin/sh: the source tree has a regular file there",
        ),
        (
            "/x d 700\n/x/y/z p 600\n",
            "t.txt:2: /x/y: no such directory",
        ),
        (
            "/bin/sh/x c 600 0 0 1 3\n",
            "t.txt:1: /bin/sh: the source tree has a regular file",
        ),
        (
            "/dev d 755\n/dev c 600 0 0 1 1\n",
            "t.txt:2: /dev: listed as a directory on line 1",
        ),
    ];
    // mkfs with `first` options, then the tree and the table, into the image.
    let (tree_s, table_s, i) = (s(&tree), s(&table), s(&image));
    let with_table = |first: &[&str]| {
        let mut args = vec!["mkfs"];
        args.extend_from_slice(first);
        args.extend(["-d", &tree_s, "--device-table", &table_s, &i]);
        lanefs_plain(&args)
    };
    for (text, needle) in cases {
        fs::write(&table, text).unwrap();
        let line = one_line_failure(&with_table(&["-s", "32M"]));
        assert!(line.contains(needle), "{text:?}: {line}");
        assert!(!image.exists(), "{text:?} left {}", image.display());
    }
    // The hard link's case fails as the walk meets its second name, naming both.
    fs::write(&table, "/two f 600 5 5\n").unwrap();
    let line = one_line_failure(&with_table(&["-s", "32M"]));
    assert!(line.contains("t.txt:1: "), "{line}");
    assert!(
        line.contains("/two: a hard link of a file copied already"),
        "{line}"
    );
    assert!(!image.exists(), "a failed copy left {}", image.display());
    // An image that is there stays as it was when the table fails before formatting.
    let old = noise(9, 1 << 20);
    fs::write(&image, &old).unwrap();
    fs::write(&table, "/etc/passwd f 644 0 0\n").unwrap();
    one_line_failure(&with_table(&["-F"]));
    assert!(
        fs::read(&image).unwrap() == old,
        "the old image was changed"
    );
    fs::remove_file(&image).unwrap();
    for (opt, needle) in [
        ("root_owner=1", "-E root_owner: '1' is not UID:GID"),
        ("root_owner=-1:0", "-E root_owner: '-1:0'"),
        ("root_owner=4294967296:0", "-E root_owner"),
    ] {
        let args = ["mkfs", "-s", "32M", "-E", opt, &i];
        let line = one_line_failure(&lanefs_plain(&args));
        assert!(line.contains(needle), "{opt}: {line}");
        assert!(!image.exists(), "{opt} left {}", image.display());
    }
    let missing = s(&td.path().join("missing.txt"));
    let args = ["mkfs", "-s", "32M", "--device-table", &missing, &i];
    let line = one_line_failure(&lanefs_plain(&args));
    assert!(line.contains("missing.txt"), "{line}");
    assert!(!image.exists());
}
