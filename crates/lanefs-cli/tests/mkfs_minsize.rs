//! `lanefs mkfs -d DIR --size min[+SLACK]`: the smallest image that holds the tree, sized
//! before the copy and built in one pass. Judged by the anchors: `e2fsck -fn` clean, the
//! kernel's ext4 reads back the tree (data, links, symlinks, xattrs), no larger than
//! `mke2fs -d` into a large image followed by `resize2fs -M`, reproducible builds
//! byte-identical; the slack is left free; a size too small says what the tree needs.
//! Kernel mounts print SKIP without root or loop devices (and fail under
//! `LANEFS_REQUIRE_PRIVILEGED=1`).

use std::fs;
use std::path::Path;
use std::process::Command;

mod cli_common;
use cli_common::*;

/// A tree with what sizing must count: small files, large ones, a sparse file, a
/// directory of 3000 names, long and short symlinks, hard links, xattrs too large for the
/// inode, a FIFO, empty files and directories.
fn make_tree(root: &Path) {
    fs::create_dir_all(root.join("big/dir")).unwrap();
    for i in 0..3000 {
        let name = format!("big/dir/a-file-with-a-longish-name-{i:05}");
        fs::write(root.join(name), noise(i, (i as usize * 37) % 3000)).unwrap();
    }
    for i in 0..6u64 {
        fs::write(
            root.join(format!("large{i}")),
            noise(100 + i, (1 << 20) * i as usize + 123),
        )
        .unwrap();
    }
    let sparse = fs::File::create(root.join("sparse")).unwrap();
    sparse.set_len(64 << 20).unwrap();
    use std::os::unix::fs::FileExt;
    sparse.write_at(&noise(7, 5000), 0).unwrap();
    sparse.write_at(&noise(8, 5000), 40 << 20).unwrap();
    fs::create_dir_all(root.join("links/empty")).unwrap();
    fs::write(root.join("links/empty-file"), b"").unwrap();
    fs::write(root.join("links/target"), noise(9, 10_000)).unwrap();
    for i in 0..3 {
        fs::hard_link(
            root.join("links/target"),
            root.join(format!("links/hard{i}")),
        )
        .unwrap();
    }
    std::os::unix::fs::symlink("target", root.join("links/short")).unwrap();
    let long = "x/".repeat(100) + "target";
    std::os::unix::fs::symlink(long, root.join("links/long")).unwrap();
    for i in 0..50 {
        let f = root.join(format!("links/xattr{i}"));
        fs::write(&f, b"x").unwrap();
        let value = "v".repeat(300 + i * 10);
        let st = Command::new("setfattr")
            .args(["-n", "user.big", "-v", &value])
            .arg(&f)
            .status();
        assert!(st.is_ok_and(|s| s.success()), "setfattr (package attr)");
    }
    let st = Command::new("mkfifo")
        .arg(root.join("links/fifo"))
        .status()
        .unwrap();
    assert!(st.success());
}

/// `dumpe2fs -h` field `name` of `image`, as a number.
fn field(image: &Path, name: &str) -> u64 {
    let out = Command::new("dumpe2fs")
        .arg("-h")
        .arg(image)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with(&format!("{name}:")))
        .unwrap_or_else(|| panic!("no {name} in dumpe2fs -h"));
    line.split(':').nth(1).unwrap().trim().parse().unwrap()
}

/// Bytes free in `image`.
fn free_bytes(image: &Path) -> u64 {
    field(image, "Free blocks") * field(image, "Block size")
}

/// The kernel reads back `tree` from `image` as it is on the host: `diff -r` of data,
/// symlinks and types, and every xattr (`getfattr -d`), lost+found left out.
fn kernel_reads_back(test: &str, image: &Path, tree: &Path) {
    let mnt = image.with_extension("mnt");
    if !kernel_mount(test, image, &mnt, "loop,ro") {
        return;
    }
    let diff = Command::new("diff")
        // diff calls two FIFOs a difference: the FIFO is looked at on its own.
        .args(["-r", "--no-dereference", "-x", "lost+found", "-x", "fifo"])
        .arg(tree)
        .arg(&mnt)
        .output()
        .unwrap();
    let dump = |root: &Path| {
        let out = Command::new("getfattr")
            .args(["-R", "-P", "-d", "-m", "user\\.", "--absolute-names", "."])
            .current_dir(root)
            .output()
            .unwrap();
        // One block per file, in the order of names (listing orders differ).
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let mut blocks: Vec<String> = text.split("\n\n").map(str::to_string).collect();
        blocks.sort();
        blocks
    };
    let (ours, theirs) = (dump(&mnt), dump(tree));
    let nlink = fs::symlink_metadata(mnt.join("links/hard2")).map(|m| {
        use std::os::unix::fs::MetadataExt;
        m.nlink()
    });
    let fifo = fs::symlink_metadata(mnt.join("links/fifo")).map(|m| {
        use std::os::unix::fs::FileTypeExt;
        m.file_type().is_fifo()
    });
    assert!(Command::new("umount").arg(&mnt).status().unwrap().success());
    assert!(
        diff.status.success(),
        "diff -r: {}",
        String::from_utf8_lossy(&diff.stdout)
    );
    assert_eq!(ours.len(), theirs.len(), "files with xattrs");
    let differ = ours.iter().zip(&theirs).find(|(a, b)| a != b);
    assert!(differ.is_none(), "xattrs differ at {:.200?}", differ);
    assert_eq!(nlink.unwrap(), 4, "hard links");
    assert!(fifo.unwrap(), "the FIFO");
}

#[test]
fn min_holds_the_tree_in_no_more_than_mke2fs_and_resize2fs() {
    let td = tempfile::tempdir().unwrap();
    let tree = td.path().join("tree");
    make_tree(&tree);
    let img = td.path().join("min.img");
    let out = ok(lanefs(&[
        "mkfs",
        &s(&img),
        "-d",
        &s(&tree),
        "--size",
        "min",
    ]));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.starts_with("sized it to hold the tree: "), "{said}");
    e2fsck_clean(&img);
    ok(lanefs(&["fsck", &s(&img)]));
    let size = fs::metadata(&img).unwrap().len();
    // Little is left: the estimate is an upper bound, not a guess with room.
    let free = free_bytes(&img);
    assert!(free <= size / 20 + (1 << 20), "{free} of {size} bytes free");
    kernel_reads_back("min_holds_the_tree", &img, &tree);

    // The two steps image builders take today: into a generous image, then shrunk.
    let anchor = td.path().join("anchor.img");
    fs::File::create(&anchor).unwrap().set_len(2 << 30).unwrap();
    let mke2fs = Command::new("mke2fs")
        .args(["-q", "-F", "-t", "ext4", "-d"])
        .arg(&tree)
        .arg(&anchor)
        .status();
    if !mke2fs.is_ok_and(|s| s.success()) {
        skip("min_holds_the_tree", "mke2fs -d not available");
        return;
    }
    let resized = Command::new("resize2fs")
        .arg("-M")
        .arg(&anchor)
        .output()
        .unwrap();
    assert!(
        resized.status.success(),
        "{}",
        String::from_utf8_lossy(&resized.stderr)
    );
    let shrunk = field(&anchor, "Block count") * field(&anchor, "Block size");
    assert!(size <= shrunk, "min {size} bytes, resize2fs -M {shrunk}");
}

#[test]
fn slack_is_free_and_a_new_image_gets_ten_percent() {
    let td = tempfile::tempdir().unwrap();
    let tree = td.path().join("tree");
    make_tree(&tree);
    let min = td.path().join("min.img");
    ok(lanefs(&[
        "mkfs",
        &s(&min),
        "-d",
        &s(&tree),
        "--size",
        "min",
    ]));
    let min_size = fs::metadata(&min).unwrap().len();

    let more = td.path().join("more.img");
    ok(lanefs(&[
        "mkfs",
        &s(&more),
        "-d",
        &s(&tree),
        "--size",
        "min+32M",
    ]));
    assert!(
        free_bytes(&more) >= 32 << 20,
        "min+32M leaves {}",
        free_bytes(&more)
    );
    e2fsck_clean(&more);

    // No --size with -d on a new image: min+10%.
    let dflt = td.path().join("default.img");
    ok(lanefs(&["mkfs", &s(&dflt), "-d", &s(&tree)]));
    assert!(
        free_bytes(&dflt) >= min_size / 10,
        "default leaves {}",
        free_bytes(&dflt)
    );
    let dflt_size = fs::metadata(&dflt).unwrap().len();
    assert!(
        dflt_size < min_size + min_size / 5,
        "{dflt_size} against min {min_size}"
    );
    e2fsck_clean(&dflt);
    kernel_reads_back("slack_is_free", &dflt, &tree);
}

#[test]
fn a_reproducible_min_build_is_byte_identical() {
    let td = tempfile::tempdir().unwrap();
    let tree = td.path().join("tree");
    make_tree(&tree);
    let build = |name: &str| {
        let img = td.path().join(name);
        let out = Command::new(env!("CARGO_BIN_EXE_lanefs"))
            .args(["mkfs", &s(&img), "-d", &s(&tree), "--size", "min+1M"])
            .args(["-U", "0f8e1c2a-3b4d-4e5f-8a9b-0c1d2e3f4a5b"])
            .args(["-E", "hash_seed=11111111-2222-3333-4444-555555555555"])
            .env("SOURCE_DATE_EPOCH", "1700000000")
            .output()
            .unwrap();
        ok(out);
        fs::read(img).unwrap()
    };
    let (a, b) = (build("a.img"), build("b.img"));
    assert_eq!(a.len(), b.len());
    assert!(a == b, "two builds of the same tree differ");
}

#[test]
fn a_size_too_small_says_what_the_tree_needs() {
    let td = tempfile::tempdir().unwrap();
    let tree = td.path().join("tree");
    make_tree(&tree);
    let img = td.path().join("small.img");
    let out = lanefs(&["mkfs", &s(&img), "-d", &s(&tree), "--size", "12M"]);
    let line = String::from_utf8_lossy(&out.stderr)
        .lines()
        .last()
        .unwrap_or("")
        .to_string();
    assert!(!out.status.success());
    assert!(line.contains("the tree needs at least"), "{line}");
    assert!(line.contains("--size min"), "{line}");
    assert!(!img.exists(), "a failed build leaves its image");
    for bad in ["min+", "min5M", "min+x%", "mini"] {
        let out = lanefs(&["mkfs", &s(&img), "-d", &s(&tree), "--size", bad]);
        let line = one_line_failure(&out);
        assert!(line.contains("--size"), "{bad}: {line}");
        assert!(!img.exists());
    }
}

#[test]
fn min_with_a_device_table_and_no_tree() {
    let td = tempfile::tempdir().unwrap();
    let table = td.path().join("table");
    fs::write(&table, "/dev d 755 0 0\n/dev/tty c 620 0 5 4 1 0 1 200\n").unwrap();
    let img = td.path().join("t.img");
    ok(lanefs(&[
        "mkfs",
        &s(&img),
        "--size",
        "min",
        "--device-table",
        &s(&table),
    ]));
    e2fsck_clean(&img);
    assert!(field(&img, "Inode count") >= 200 + 12);
}

#[test]
fn a_tar_archive_is_sized_from_a_file_and_from_standard_input() {
    let td = tempfile::tempdir().unwrap();
    let tree = td.path().join("tree");
    make_tree(&tree);
    let tar = td.path().join("tree.tar.gz");
    let st = Command::new("tar")
        .args(["--xattrs", "--xattrs-include=user.*", "--sparse", "-czf"])
        .arg(&tar)
        .arg("-C")
        .arg(&tree)
        .arg(".")
        .status()
        .unwrap();
    assert!(st.success());
    let from_file = td.path().join("file.img");
    ok(lanefs(&[
        "mkfs",
        &s(&from_file),
        "-d",
        &s(&tar),
        "--size",
        "min",
    ]));
    e2fsck_clean(&from_file);
    let free = free_bytes(&from_file);
    let size = fs::metadata(&from_file).unwrap().len();
    assert!(free <= size / 20 + (1 << 20), "{free} of {size} bytes free");
    kernel_reads_back("a_tar_archive_is_sized", &from_file, &tree);

    // Piped in: counted from a kept copy, then built; the same size.
    let from_stdin = td.path().join("stdin.img");
    let out = Command::new(env!("CARGO_BIN_EXE_lanefs"))
        .args(["mkfs", &s(&from_stdin), "-d", "-", "--size", "min"])
        .stdin(fs::File::open(&tar).unwrap())
        .output()
        .unwrap();
    ok(out);
    e2fsck_clean(&from_stdin);
    assert_eq!(fs::metadata(&from_stdin).unwrap().len(), size);

    // Too small for it: the hint names what it needs.
    let small = td.path().join("small.img");
    let out = lanefs(&["mkfs", &s(&small), "-d", &s(&tar), "--size", "12M"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("the tree needs at least"), "{err}");
    assert!(!small.exists());
}

#[test]
fn too_few_inodes_and_a_fifo_archive() {
    let td = tempfile::tempdir().unwrap();
    let tree = td.path().join("tree");
    fs::create_dir_all(tree.join("d")).unwrap();
    for i in 0..20 {
        fs::write(tree.join(format!("d/f{i}")), noise(i, 5000)).unwrap();
    }
    // -N below what the tree needs: refused in one line naming -N, nothing made.
    let img = td.path().join("n.img");
    let out = lanefs(&[
        "mkfs",
        &s(&img),
        "-d",
        &s(&tree),
        "--size",
        "min",
        "-N",
        "5",
    ]);
    let line = one_line_failure(&out);
    assert!(line.contains("-N 5"), "{line}");
    assert!(!img.exists());

    // An archive through a FIFO (read once only) is kept, counted, then built.
    let fifo = td.path().join("pipe");
    let st = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(st.success());
    let writer = Command::new("tar")
        .arg("-C")
        .arg(&tree)
        .arg("-cf")
        .arg(&fifo)
        .arg(".")
        .spawn()
        .unwrap();
    let img = td.path().join("fifo.img");
    ok(lanefs(&["mkfs", &s(&img), "-d", &s(&fifo)]));
    assert!(writer.wait_with_output().unwrap().status.success());
    e2fsck_clean(&img);
    let listed = ok(lanefs(&["ls", &at(&img, "/d")]));
    assert_eq!(String::from_utf8_lossy(&listed.stdout).lines().count(), 20);
}
