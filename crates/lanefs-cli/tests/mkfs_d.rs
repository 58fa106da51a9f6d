//! `lanefs mkfs -d DIR` populates a new image as `mke2fs -d` does, and reproducibly when
//! asked: with SOURCE_DATE_EPOCH, `-U` and `-E hash_seed`, the same tree gives the same
//! bytes, which `e2fsck -fn` calls clean and the kernel reads as the tree it came from.
//! Tests that need root or loop mounts print SKIP without them (and fail under
//! `LANEFS_REQUIRE_PRIVILEGED=1`).

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod cli_common;
use cli_common::*;

const UUID: &str = "0f8e1c2a-3b4d-4e5f-8a9b-0c1d2e3f4a5b";
const SEED: &str = "11111111-2222-3333-4444-555555555555";
const EPOCH: i64 = 1_700_000_000;

/// `lanefs ARGS...` with SOURCE_DATE_EPOCH set to `epoch`, or unset.
fn lanefs_at(epoch: Option<&str>, args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lanefs"));
    cmd.args(args);
    match epoch {
        Some(e) => cmd.env("SOURCE_DATE_EPOCH", e),
        None => cmd.env_remove("SOURCE_DATE_EPOCH"),
    };
    cmd.output().expect("run lanefs")
}

/// A tree with what `cp -a` keeps: small and multi-megabyte files, a sparse file with
/// data segments far apart, an all-zero file, a 300-entry directory, hard links, short
/// and long symlinks, a fifo, a device node (as root), xattrs, modes, owners, and times
/// both before and after the epoch the reproducible builds clamp to.
fn make_tree(root: &Path) {
    fs::create_dir_all(root.join("a/b/c")).unwrap();
    fs::create_dir_all(root.join("big")).unwrap();
    fs::create_dir_all(root.join("many")).unwrap();
    fs::write(root.join("big/r12m"), noise(1, 12 << 20)).unwrap();
    fs::write(root.join("big/r300k"), noise(2, 300 << 10)).unwrap();
    fs::write(root.join("big/r5000"), noise(3, 5000)).unwrap();
    let f = fs::File::create(root.join("big/sparse")).unwrap();
    f.set_len(40 << 20).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, &noise(4, 2 << 20), 8 << 20).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, &noise(5, 1 << 20), 30 << 20).unwrap();
    fs::write(root.join("zeros"), vec![0u8; 9000]).unwrap();
    for i in 0..300 {
        fs::write(root.join(format!("many/n{i:03}")), format!("entry {i}\n")).unwrap();
    }
    fs::write(root.join("a/one"), b"one\n").unwrap();
    fs::hard_link(root.join("a/one"), root.join("a/b/one-again")).unwrap();
    std::os::unix::fs::symlink("one", root.join("a/short")).unwrap();
    std::os::unix::fs::symlink("l".repeat(120), root.join("a/long")).unwrap();
    Command::new("mkfifo")
        .arg(root.join("a/fifo"))
        .status()
        .unwrap();
    let _ = Command::new("mknod")
        .arg(root.join("a/null"))
        .args(["c", "1", "3"])
        .status();
    let _ = Command::new("setfattr")
        .args(["-n", "user.note", "-v", "kept"])
        .arg(root.join("a/one"))
        .status();
    let _ = Command::new("setfattr")
        .args(["-n", "user.dir", "-v", "too"])
        .arg(root.join("a/b"))
        .status();
    fs::set_permissions(
        root.join("a/b/c"),
        std::os::unix::fs::PermissionsExt::from_mode(0o750),
    )
    .unwrap();
    let _ = std::os::unix::fs::lchown(root.join("many/n007"), Some(1234), Some(5678));
    // One time before the epoch (kept), the rest now (after it: clamped).
    Command::new("touch")
        .args(["-h", "-d", "@1000000000"])
        .arg(root.join("a/one"))
        .status()
        .unwrap();
}

/// Format `image` (256 MiB, `extra` options) from `tree`.
fn build(image: &Path, tree: &Path, epoch: Option<&str>, extra: &[&str]) -> Output {
    let _ = fs::remove_file(image);
    let mut args = vec!["mkfs", "-s", "256M", "-d"];
    let (t, i) = (s(tree), s(image));
    args.push(&t);
    args.extend_from_slice(extra);
    args.push(&i);
    lanefs_at(epoch, &args)
}

fn e2fsck_clean(image: &Path) {
    let out = Command::new("e2fsck")
        .arg("-fn")
        .arg(image)
        .output()
        .expect("e2fsck");
    assert_eq!(
        out.status.code(),
        Some(0),
        "e2fsck -fn {}: {}",
        image.display(),
        String::from_utf8_lossy(&out.stdout)
    );
    ok(lanefs(&["fsck", &s(image)]));
}

/// Everything `cp -a` keeps of each entry under `root`, by relative path: kind, mode,
/// owner, size, link count, content (or target), xattrs, and mtime (clamped to `clamp`
/// when given, as the build clamps it). lost+found is left out.
fn describe(root: &Path, clamp: Option<i64>) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(root).unwrap().to_path_buf();
            if rel == Path::new("lost+found") {
                continue;
            }
            let m = fs::symlink_metadata(&p).unwrap();
            let ft = m.file_type();
            let body = if ft.is_file() {
                format!("{:x}", crc(&fs::read(&p).unwrap()))
            } else if ft.is_symlink() {
                fs::read_link(&p).unwrap().display().to_string()
            } else if ft.is_char_device() {
                format!("rdev {}", m.rdev())
            } else {
                String::new()
            };
            if ft.is_dir() {
                stack.push(p.clone());
            }
            let xattrs = Command::new("getfattr")
                .args(["-h", "-d", "--absolute-names"])
                .arg(&p)
                .output()
                .map(|o| {
                    String::from_utf8_lossy(&o.stdout)
                        .lines()
                        .filter(|l| l.starts_with("user."))
                        .collect::<Vec<_>>()
                        .join(",")
                })
                .unwrap_or_default();
            let mtime = clamp.map_or(m.mtime(), |c| m.mtime().min(c));
            let size = if ft.is_dir() { 0 } else { m.size() };
            let links = if ft.is_dir() { 0 } else { m.nlink() };
            let line = format!(
                "{:o} {}:{} size {size} links {links} mtime {mtime} {body} [{xattrs}]",
                m.mode(),
                m.uid(),
                m.gid(),
            );
            out.insert(rel, line);
        }
    }
    out
}

/// A checksum of file contents (crc32c, as the engine already links it).
fn crc(data: &[u8]) -> u32 {
    lanefs::internals::disk::crc32c_raw(!0, data)
}

fn umount(mnt: &Path) {
    assert!(Command::new("umount").arg(mnt).status().unwrap().success());
}

/// Goal: with SOURCE_DATE_EPOCH, -U and -E hash_seed, `mkfs -d` is byte-identical from
/// run to run (the workers writing data in parallel), at 1 KiB blocks (ext4), 4 KiB
/// blocks and ext3 (block maps: the walk writes every file); the image is clean for
/// e2fsck and lanefs fsck; the kernel reads the tree it came from, times clamped to the
/// epoch and the root carrying the directory's attributes.
#[test]
fn reproducible_builds_are_byte_identical_and_read_back() {
    let name = "reproducible_builds_are_byte_identical_and_read_back";
    let td = tempfile::tempdir().unwrap();
    let tree = td.path().join("tree");
    make_tree(&tree);
    let epoch = EPOCH.to_string();
    let want = describe(&tree, Some(EPOCH));
    for shape in [&[][..], &["-b", "4096"][..], &["-t", "ext3"][..]] {
        let mut extra = vec!["-U", UUID, "-E", &format!("hash_seed={SEED}")]
            .into_iter()
            .map(String::from)
            .collect::<Vec<_>>();
        extra.extend(shape.iter().map(|x| x.to_string()));
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        let mut sums = Vec::new();
        for run in 0..3 {
            let image = td.path().join(format!("r{run}.img"));
            ok(build(&image, &tree, Some(&epoch), &extra));
            sums.push(crc(&fs::read(&image).unwrap()));
        }
        assert!(
            sums.windows(2).all(|w| w[0] == w[1]),
            "{shape:?}: three builds differ: {sums:x?}"
        );
        let image = td.path().join("r0.img");
        e2fsck_clean(&image);
        let dumpe2fs = Command::new("dumpe2fs")
            .arg("-h")
            .arg(&image)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&dumpe2fs.stdout).to_string();
        assert!(text.contains(UUID), "{shape:?}: UUID not set:\n{text}");
        assert!(text.contains(SEED), "{shape:?}: hash seed not set:\n{text}");
        let mnt = td.path().join("mnt");
        if !kernel_mount(name, &image, &mnt, "loop,ro") {
            return;
        }
        let got = describe(&mnt, None);
        let root = fs::metadata(&mnt).unwrap();
        let root_mode = root.mode();
        let max_time = [root.mtime(), root.ctime()];
        umount(&mnt);
        assert_eq!(got, want, "{shape:?}: the kernel reads another tree");
        assert_eq!(root_mode, fs::metadata(&tree).unwrap().mode(), "{shape:?}");
        assert!(
            max_time.iter().all(|&t| t <= EPOCH),
            "{shape:?}: {max_time:?}"
        );
    }
}

/// Goal: without SOURCE_DATE_EPOCH, `mkfs -d` copies the same tree (times as they are),
/// clean for e2fsck, and a second build differs (a random UUID).
#[test]
fn plain_build_copies_the_tree() {
    let name = "plain_build_copies_the_tree";
    let td = tempfile::tempdir().unwrap();
    let tree = td.path().join("tree");
    make_tree(&tree);
    let image = td.path().join("p.img");
    let out = ok(build(&image, &tree, None, &[]));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("copied"), "{text}");
    e2fsck_clean(&image);
    // Filling the image was no mount (as with mke2fs -d), and its writes are counted.
    let info =
        String::from_utf8_lossy(&ok(lanefs_at(None, &["info", &s(&image)])).stdout).into_owned();
    let field = |key: &str| {
        let line = info
            .lines()
            .find(|l| l.starts_with(key))
            .unwrap_or_default();
        line[key.len()..].trim().to_string()
    };
    assert!(field("Mount count:").starts_with("0 "), "{info}");
    let kib: u64 = field("Lifetime writes:")
        .trim_end_matches(" KiB")
        .parse()
        .unwrap_or(0);
    let tree_bytes: u64 = walk_bytes(&tree);
    assert!(
        kib * 1024 >= tree_bytes,
        "lifetime writes {kib} KiB < {tree_bytes} bytes\n{info}"
    );
    let mnt = td.path().join("mnt");
    if !kernel_mount(name, &image, &mnt, "loop,ro") {
        return;
    }
    let got = describe(&mnt, None);
    umount(&mnt);
    assert_eq!(got, describe(&tree, None));
}

/// Goal: wrong arguments fail in one line naming what is wrong, and leave no image behind.
#[test]
fn bad_arguments_fail_in_one_line() {
    let td = tempfile::tempdir().unwrap();
    let file = td.path().join("plain-file");
    fs::write(&file, b"x").unwrap();
    let image = td.path().join("bad.img");
    let cases: [(Option<&str>, Vec<String>, &str); 5] = [
        (
            None,
            vec!["-d".into(), s(&file)],
            "neither a directory nor a tar archive",
        ),
        (
            None,
            vec!["-d".into(), s(&td.path().join("missing"))],
            "missing",
        ),
        (None, vec!["-U".into(), "not-a-uuid".into()], "-U"),
        (None, vec!["-E".into(), "stride=4".into()], "stride=4"),
        (Some("yesterday"), vec![], "SOURCE_DATE_EPOCH"),
    ];
    for (epoch, args, needle) in cases {
        let mut all = vec!["mkfs".to_string(), "-s".into(), "64M".into()];
        all.extend(args);
        all.push(s(&image));
        let all: Vec<&str> = all.iter().map(String::as_str).collect();
        let line = one_line_failure(&lanefs_at(epoch, &all));
        assert!(line.contains(needle), "{all:?}: {line}");
        assert!(!image.exists(), "{all:?} left {}", image.display());
    }
}

/// Bytes the regular files under `root` hold (allocated: holes do not count).
fn walk_bytes(root: &Path) -> u64 {
    let mut total = 0;
    for e in fs::read_dir(root).unwrap().flatten() {
        let m = e.metadata().unwrap();
        if m.is_dir() {
            total += walk_bytes(&e.path());
        } else if m.is_file() {
            total += m.blocks() * 512;
        }
    }
    total
}
