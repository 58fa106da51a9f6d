//! `lanefs mkfs -d ARCHIVE`: a tar archive as the source, built by GNU tar and bsdtar
//! from a tree made here as root (owners, set-ID modes, nanosecond times, hard links,
//! symlinks, devices, a FIFO, user/trusted/security xattrs, ACLs, a sparse file), read by
//! mkfs run as the unprivileged user `lanefs-a`, and compared with the tree through the
//! kernel's ext4 (a read-only loop mount): owners, modes, times, xattrs, ACLs (getfacl),
//! link counts, symlink targets, device numbers, data, holes. Plain, gzip, zstd, xz and
//! standard input; GNU sparse old, 0.0, 0.1 and 1.0; reproducible builds byte-identical;
//! `--all-root`, `-E root_owner` and a device table as for a directory; hostile and
//! broken archives fail in one line naming the member and leave no image. Tests that
//! need root, the user or loop mounts print SKIP without them (and fail under
//! `LANEFS_REQUIRE_PRIVILEGED=1`).

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

mod cli_common;
use cli_common::*;

const UUID: &str = "0f8e1c2a-3b4d-4e5f-8a9b-0c1d2e3f4a5b";
const SEED: &str = "11111111-2222-3333-4444-555555555555";

/// Run `sh -ec SCRIPT` with `$1` = `arg`; panics on failure.
fn sh(script: &str, arg: &Path) {
    let out = Command::new("sh")
        .args(["-ec", script, "sh"])
        .arg(arg)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A directory the user owns for its images, and the `lanefs` binary as it can run it.
fn user_dir(td: &Path, user: (u32, u32)) -> (PathBuf, PathBuf) {
    let dir = td.join("work");
    fs::create_dir(&dir).unwrap();
    std::os::unix::fs::chown(&dir, Some(user.0), Some(user.1)).unwrap();
    let perm = std::os::unix::fs::PermissionsExt::from_mode(0o755);
    fs::set_permissions(td, perm).unwrap();
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_lanefs"));
    if as_user(user, &bin, None, &["--version"], None)
        .status
        .success()
    {
        return (dir, bin);
    }
    let copy = dir.join("lanefs");
    fs::copy(&bin, &copy).unwrap();
    (dir, copy)
}

/// `lanefs ARGS...` run as `user`, with SOURCE_DATE_EPOCH `epoch` or none, and `stdin`
/// (a file) as its standard input.
fn as_user(
    user: (u32, u32),
    bin: &Path,
    epoch: Option<&str>,
    args: &[&str],
    stdin: Option<&Path>,
) -> Output {
    let mut cmd = Command::new("setpriv");
    cmd.arg(format!("--reuid={}", user.0))
        .arg(format!("--regid={}", user.1))
        .arg("--clear-groups")
        .arg(bin)
        .args(args);
    match epoch {
        Some(e) => cmd.env("SOURCE_DATE_EPOCH", e),
        None => cmd.env_remove("SOURCE_DATE_EPOCH"),
    };
    if let Some(f) = stdin {
        cmd.stdin(fs::File::open(f).unwrap());
    }
    cmd.output().expect("run setpriv")
}

/// The source tree, made as root: every kind of entry, owners, set-ID and sticky modes,
/// xattrs in three namespaces, access and default ACLs (one naming lanefs-a), hard links
/// across directories, a sparse file with a hole at its end, a name past 100 bytes; then
/// every entry's times, to the nanosecond (access times ahead of now, so that reading
/// the tree to archive it changes none).
const TREE: &str = r#"
cd "$1"
mkdir -p d/sticky d/sgid links other dev acl "long/$(printf 'n%.0s' $(seq 1 120))"
head -c 5000 /dev/urandom > d/setuid
printf 'set group' > d/setgid
printf 'data' > d/owned
head -c 3000000 /dev/urandom > big
: > empty
printf 'linked' > links/a
ln links/a links/b
ln links/a other/c
printf 'x' > "long/$(printf 'n%.0s' $(seq 1 120))/file"
printf 'unicode' > "d/ünï"
truncate -s 10M sparse
printf 'head' | dd of=sparse conv=notrunc status=none
printf 'middle' | dd of=sparse bs=1 seek=6000000 conv=notrunc status=none
ln -s d/owned rel
ln -s /etc/passwd abs
ln -s nowhere dangling
mknod dev/null c 1 3
mknod dev/sda b 8 0
mknod dev/big c 4095 1048575
mkfifo dev/fifo
printf 'in sgid' > d/sgid/file
printf 'acl' > acl/file
chown 0:0 d/setuid; chmod 4755 d/setuid
chown 10:20 d/setgid; chmod 2711 d/setgid
chown 1234:5678 d/owned; chmod 640 d/owned
chown 4000000000:4000000001 big
chown -h 77:88 rel
chown 5:6 dev/fifo; chmod 620 dev/fifo
chmod 1777 d/sticky
chown 0:100 d/sgid; chmod 2775 d/sgid
chown 99:99 links/a; chmod 604 links/a
setfattr -n user.a -v one d/owned
setfattr -n trusted.t -v two d/owned
setfattr -n security.s -v three d/owned
setfattr -n user.bin -v 0x00ff0a3d d/owned
setfattr -n user.dir -v yes d
setfacl -m u:lanefs-a:rw,g:1600:r acl/file
setfacl -m u:1500:rx acl
setfacl -d -m u:1500:r,g:1600:rx acl
chmod 700 empty
find . -depth -print | {
  i=0
  while IFS= read -r p; do
    i=$((i+1))
    touch -h -m -d "@$((1600000000 + i)).$((123456789 - i))" "$p"
    touch -h -a -d "@$(( $(date +%s) + 86400 + i )).987654321" "$p"
  done
}
"#;

/// GNU tar's options for the archives: pax, xattrs of three namespaces (ACLs then only as
/// `SCHILY.acl.*` text), ACLs, holes.
const GNU_TAR: [&str; 7] = [
    "--format=pax",
    "--xattrs",
    "--xattrs-include=user.*",
    "--xattrs-include=trusted.*",
    "--xattrs-include=security.*",
    "--acls",
    "--sparse",
];

/// Make the tree at `tree` and GNU tar's archive of it at `archive`.
fn tree_and_tar(tree: &Path, archive: &Path) {
    fs::create_dir(tree).unwrap();
    sh(TREE, tree);
    let st = Command::new("tar")
        .args(GNU_TAR)
        .arg("-C")
        .arg(tree)
        .arg("-cf")
        .arg(archive)
        .arg(".")
        .status()
        .unwrap();
    assert!(st.success());
    fs::set_permissions(archive, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
}

/// What the kernel (or the host) shows of every entry under `root` (lost+found left out;
/// the root's link count too, which lost+found raises): mode, owner, link count, times in
/// nanoseconds, what it holds, and its xattrs (`getfattr`) and ACLs (`getfacl`).
fn view(root: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(p) = stack.pop() {
        let rel = format!("/{}", p.strip_prefix(root).unwrap().display());
        if rel == "/lost+found" {
            continue;
        }
        let m = fs::symlink_metadata(&p).unwrap();
        let ft = m.file_type();
        let holds = holds(&p, &m, |data| {
            format!("{} bytes crc {:x}", data.len(), crc(data))
        });
        if ft.is_dir() {
            stack.extend(fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
        }
        let nlink = if rel == "/" { 0 } else { m.nlink() };
        let attrs = tool("getfattr", &["-h", "-d", "-m", "-", "-e", "hex"], &p);
        let acl = if ft.is_symlink() {
            String::new()
        } else {
            tool("getfacl", &["-n", "-c"], &p)
        };
        let line = format!(
            "{:o} {}:{} n{nlink} m{}.{:09} a{}.{:09} {holds} | {attrs} | {acl}",
            m.mode(),
            m.uid(),
            m.gid(),
            m.mtime(),
            m.mtime_nsec(),
            m.atime(),
            m.atime_nsec(),
        );
        out.insert(rel, line);
    }
    out
}

/// `TOOL ARGS... PATH`'s output without its `# file:` line, one line.
fn tool(name: &str, args: &[&str], path: &Path) -> String {
    let out = Command::new(name).args(args).arg(path).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .filter(|l| !l.starts_with("# file:") && !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The kernel's view of `image` (after `e2fsck -fn` finds it clean), and the blocks the
/// sparse file takes; `None` after a SKIP line.
fn kernel_view(test: &str, image: &Path, mnt: &Path) -> Option<(BTreeMap<String, String>, u64)> {
    e2fsck_clean(image);
    if !kernel_mount(test, image, mnt, "loop,ro") {
        return None;
    }
    let got = view(mnt);
    let blocks = fs::symlink_metadata(mnt.join("sparse")).unwrap().blocks();
    assert!(Command::new("umount").arg(mnt).status().unwrap().success());
    Some((got, blocks))
}

/// The same views, entry by entry, for a readable failure.
fn same(got: &BTreeMap<String, String>, want: &BTreeMap<String, String>, what: &str) {
    for (path, w) in want {
        assert_eq!(got.get(path), Some(w), "{what}: {path}");
    }
    assert_eq!(
        got.len(),
        want.len(),
        "{what}: other names: {:?}",
        got.keys()
    );
}

/// Goal: an unprivileged user builds an image from GNU tar's pax archive of a tree only
/// root could make, plain and compressed three ways (one read from standard input), and
/// from bsdtar's; the kernel sees exactly the tree: owners, modes, nanosecond times,
/// xattrs, ACLs, links, targets, device numbers, data, and the sparse file's holes.
#[test]
fn a_tar_archive_gives_the_tree_it_holds() {
    let name = "a_tar_archive_gives_the_tree_it_holds";
    let Some(user) = builder(name) else { return };
    let td = tempfile::tempdir().unwrap();
    let (work, bin) = user_dir(td.path(), user);
    let tree = td.path().join("tree");
    let tar = td.path().join("a.tar");
    tree_and_tar(&tree, &tar);
    let want = view(&tree);
    let mnt = td.path().join("mnt");
    for (ext, filter, stdin) in [
        ("tar", None, false),
        ("tar.gz", Some("gzip"), false),
        ("tar.zst", Some("zstd"), true),
        ("tar.xz", Some("xz"), false),
    ] {
        let archive = td.path().join(format!("a.{ext}"));
        if let Some(f) = filter {
            let data = Command::new(f).arg("-c").arg(&tar).output().unwrap();
            assert!(data.status.success(), "{f}");
            fs::write(&archive, data.stdout).unwrap();
        }
        let image = work.join(format!("{ext}.img"));
        let (src, input) = match stdin {
            true => ("-".to_string(), Some(archive.as_path())),
            false => (s(&archive), None),
        };
        let args = ["mkfs", "--size", "64M", "-d", &src, &s(&image)];
        ok(as_user(user, &bin, None, &args, input));
        let Some((got, blocks)) = kernel_view(name, &image, &mnt) else {
            return;
        };
        same(&got, &want, ext);
        // 10 MiB with two short runs of data: a few blocks, not 10 MiB of them.
        assert!(
            blocks * 512 < 64 << 10,
            "{ext}: sparse file takes {blocks} sectors"
        );
    }
    // bsdtar: LIBARCHIVE.xattr.* (base64) and ACL text with ids.
    if Command::new("bsdtar").arg("--version").output().is_err() {
        skip(name, "bsdtar not installed (libarchive-tools)");
        return;
    }
    let bsd = td.path().join("b.tar");
    let st = Command::new("bsdtar")
        .args(["--format=pax", "-C"])
        .arg(&tree)
        .arg("-cf")
        .arg(&bsd)
        .arg(".")
        .status()
        .unwrap();
    assert!(st.success());
    let raw = fs::read(&bsd).unwrap();
    assert!(raw.windows(17).any(|w| w == b"LIBARCHIVE.xattr."));
    let image = work.join("bsd.img");
    ok(as_user(
        user,
        &bin,
        None,
        &["mkfs", "--size", "64M", "-d", &s(&bsd), &s(&image)],
        None,
    ));
    if let Some((got, _)) = kernel_view(name, &image, &mnt) {
        same(&got, &want, "bsdtar");
    }
}

/// Goal: every sparse format GNU tar writes (old GNU, pax 0.0, 0.1 and 1.0) gives the
/// sparse file's data with its holes left holes.
#[test]
fn gnu_sparse_formats_keep_holes() {
    let name = "gnu_sparse_formats_keep_holes";
    let Some(user) = builder(name) else { return };
    let td = tempfile::tempdir().unwrap();
    let (work, bin) = user_dir(td.path(), user);
    let tree = td.path().join("tree");
    fs::create_dir(&tree).unwrap();
    sh(
        "cd \"$1\"; truncate -s 20M sparse; printf 'start' | dd of=sparse conv=notrunc status=none; \
         printf 'mid' | dd of=sparse bs=1 seek=9000000 conv=notrunc status=none; \
         printf 'end' | dd of=sparse bs=1 seek=20971517 conv=notrunc status=none",
        &tree,
    );
    let want = fs::read(tree.join("sparse")).unwrap();
    let mnt = td.path().join("mnt");
    for (fmt, extra) in [
        ("gnu", None),
        ("pax", Some("--sparse-version=0.0")),
        ("pax", Some("--sparse-version=0.1")),
        ("pax", Some("--sparse-version=1.0")),
    ] {
        let archive = td.path().join("s.tar");
        let mut cmd = Command::new("tar");
        cmd.arg(format!("--format={fmt}")).arg("--sparse");
        cmd.args(extra);
        let st = cmd
            .arg("-C")
            .arg(&tree)
            .arg("-cf")
            .arg(&archive)
            .arg(".")
            .status();
        assert!(st.unwrap().success());
        fs::set_permissions(
            &archive,
            std::os::unix::fs::PermissionsExt::from_mode(0o644),
        )
        .unwrap();
        let image = work.join("s.img");
        let _ = fs::remove_file(&image);
        let args = ["mkfs", "--size", "64M", "-d", &s(&archive), &s(&image)];
        ok(as_user(user, &bin, None, &args, None));
        e2fsck_clean(&image);
        if !kernel_mount(name, &image, &mnt, "loop,ro") {
            return;
        }
        let got = fs::read(mnt.join("sparse")).unwrap();
        let blocks = fs::metadata(mnt.join("sparse")).unwrap().blocks();
        assert!(Command::new("umount").arg(&mnt).status().unwrap().success());
        assert!(got == want, "{fmt} {extra:?}: data differs");
        assert!(blocks * 512 < 64 << 10, "{fmt} {extra:?}: {blocks} sectors");
    }
}

/// Goal: the same archive gives the same image bytes, from a file or standard input,
/// with SOURCE_DATE_EPOCH, -U and -E hash_seed.
#[test]
fn reproducible_from_a_file_or_stdin() {
    let name = "reproducible_from_a_file_or_stdin";
    let Some(user) = builder(name) else { return };
    let td = tempfile::tempdir().unwrap();
    let (work, bin) = user_dir(td.path(), user);
    let tree = td.path().join("tree");
    let tar = td.path().join("a.tar");
    tree_and_tar(&tree, &tar);
    let gz = td.path().join("a.tar.gz");
    let data = Command::new("gzip").arg("-c").arg(&tar).output().unwrap();
    fs::write(&gz, data.stdout).unwrap();
    let seed = format!("hash_seed={SEED}");
    let mut sums = Vec::new();
    for (run, stdin) in [(0, false), (1, false), (2, true)] {
        let image = s(&work.join(format!("r{run}.img")));
        let src = if stdin { "-".to_string() } else { s(&gz) };
        let args = [
            "mkfs", "-s", "64M", "-U", UUID, "-E", &seed, "-d", &src, &image,
        ];
        let input = stdin.then_some(gz.as_path());
        ok(as_user(user, &bin, Some("1700000000"), &args, input));
        sums.push(crc(&fs::read(&image).unwrap()));
    }
    assert_eq!(sums[0], sums[1], "two builds from the file differ");
    assert_eq!(sums[0], sums[2], "the build from standard input differs");
    e2fsck_clean(&work.join("r0.img"));
}

/// Goal: `--all-root`, `-E root_owner` and a device table shape a tar source as they
/// shape a directory (table paths are archive paths).
#[test]
fn overrides_apply_to_an_archive() {
    let name = "overrides_apply_to_an_archive";
    let Some(user) = builder(name) else { return };
    let td = tempfile::tempdir().unwrap();
    let (work, bin) = user_dir(td.path(), user);
    let tree = td.path().join("tree");
    let tar = td.path().join("a.tar");
    tree_and_tar(&tree, &tar);
    let table = work.join("table");
    fs::write(
        &table,
        "/dev/console c 600 0 5 5 1\n/dev/null c 666 0 0 1 3\n/var d 755 0 0\n/var/log d 2750 0 4\n\
         /d/owned f 600 0 42\n",
    )
    .unwrap();
    let image = work.join("o.img");
    let args = [
        "mkfs",
        "-s",
        "64M",
        "--all-root",
        "-E",
        "root_owner=7:8",
        "--device-table",
        &s(&table),
        "-d",
        &s(&tar),
        &s(&image),
    ];
    ok(as_user(user, &bin, None, &args, None));
    let mnt = td.path().join("mnt");
    let Some((got, _)) = kernel_view(name, &image, &mnt) else {
        return;
    };
    let head = |p: &str| {
        let line = got.get(p).unwrap_or_else(|| panic!("{p} missing"));
        line.split(' ').take(2).collect::<Vec<_>>().join(" ")
    };
    assert_eq!(head("/"), "40755 7:8");
    assert_eq!(head("/d/setgid"), "102711 0:0");
    assert_eq!(head("/big"), "100644 0:0");
    assert_eq!(head("/d/owned"), "100600 0:42");
    assert_eq!(head("/dev/console"), "20600 0:5");
    assert_eq!(head("/dev/null"), "20666 0:0");
    assert_eq!(head("/var/log"), "42750 0:4");
    assert!(got["/dev/console"].contains(" 5,1 "));
    // A table line the archive contradicts fails in one line, leaving no image.
    fs::write(&table, "/big d 755 0 0\n").unwrap();
    let image = work.join("bad.img");
    let args = [
        "mkfs",
        "-s",
        "64M",
        "--device-table",
        &s(&table),
        "-d",
        &s(&tar),
        &s(&image),
    ];
    let line = one_line_failure(&as_user(user, &bin, None, &args, None));
    assert!(line.contains("/big"), "{line}");
    assert!(!image.exists());
}

/// A raw header (no checks on the name) of `kind` with `size` bytes of data.
fn header(name: &str, kind: u8, size: u64, link: &str) -> tar::Header {
    let mut h = tar::Header::new_ustar();
    h.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
    h.as_old_mut().linkname[..link.len()].copy_from_slice(link.as_bytes());
    h.as_old_mut().linkflag = [kind];
    h.set_mode(0o644);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(0);
    h.set_size(size);
    h.set_cksum();
    h
}

/// An archive of `(name, type, data, link target)` members, ended as tar ends one.
fn archive(members: &[(&str, u8, &[u8], &str)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, kind, data, link) in members {
        out.extend_from_slice(header(name, *kind, data.len() as u64, link).as_bytes());
        out.extend_from_slice(data);
        out.resize(out.len().div_ceil(512) * 512, 0);
    }
    out.resize(out.len() + 1024, 0);
    out
}

/// Goal: a member that would escape the root (`..`, an absolute name, a path through a
/// symlink the archive made), a hard link to a name not seen, a truncated archive,
/// garbage: each fails in one line naming the member (or the archive), and no image is
/// left behind. No privileges needed.
#[test]
fn hostile_archives_fail_in_one_line_and_leave_no_image() {
    let td = tempfile::tempdir().unwrap();
    let good = archive(&[("f", b'0', &[7u8; 3000], "")]);
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "dotdot",
            archive(&[("../x", b'0', b"x", "")]),
            "member \"../x\": escapes the root",
        ),
        (
            "abs",
            archive(&[("/abs", b'0', b"x", "")]),
            "member \"/abs\": escapes the root",
        ),
        (
            "deep",
            archive(&[("a/../../x", b'0', b"", "")]),
            "member \"a/../../x\": escapes the root",
        ),
        (
            "through",
            archive(&[("l", b'2', b"", "/etc"), ("l/passwd", b'0', b"root", "")]),
            "member \"l/passwd\": its path goes through the symlink \"l\"",
        ),
        (
            "link",
            archive(&[("h", b'1', b"", "nowhere")]),
            "member \"h\": a hard link to \"nowhere\", which the archive has not made",
        ),
        (
            "truncated",
            good[..512 + 1000].to_vec(),
            "member \"f\": truncated archive",
        ),
        (
            "garbage",
            noise(3, 10_000),
            "neither a directory nor a tar archive",
        ),
        (
            "empty",
            Vec::new(),
            "empty: neither a directory nor a tar archive",
        ),
    ];
    for (what, bytes, want) in cases {
        let path = td.path().join(format!("{what}.tar"));
        fs::write(&path, &bytes).unwrap();
        let image = td.path().join(format!("{what}.img"));
        let out = lanefs(&["mkfs", "--size", "16M", "-d", &s(&path), &s(&image)]);
        let line = one_line_failure(&out);
        let prefix = format!("lanefs: mkfs: {}: ", path.display());
        assert!(
            line.starts_with(&prefix) && line.contains(want),
            "{what}: {line}"
        );
        assert!(!image.exists(), "{what}: an image was left");
    }
    // The same through standard input, gzip-compressed.
    let image = td.path().join("stdin.img");
    let mut child = Command::new(env!("CARGO_BIN_EXE_lanefs"))
        .args(["mkfs", "--size", "16M", "-d", "-", &s(&image)])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&archive(&[("../x", b'0', b"x", "")])).unwrap();
    let bytes = gz.finish().unwrap();
    child.stdin.take().unwrap().write_all(&bytes).unwrap();
    let out = child.wait_with_output().unwrap();
    let line = one_line_failure(&out);
    assert_eq!(
        line,
        "lanefs: mkfs: standard input: member \"../x\": escapes the root"
    );
    assert!(!image.exists());
    // And a good archive still builds.
    let path = td.path().join("good.tar");
    fs::write(&path, &good).unwrap();
    ok(lanefs(&[
        "mkfs",
        "--size",
        "16M",
        "-d",
        &s(&path),
        &s(&image),
    ]));
    e2fsck_clean(&image);
}
