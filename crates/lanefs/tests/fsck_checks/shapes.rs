//! Every mkfs shape, filled by lanefs or the kernel, judged alike by both checkers; the
//! feature and bad-block checks.

use super::*;

/// Print `info::report` for the image named by LANEFS_FSCK_IMAGE (for manual use).
#[test]
#[ignore]
fn info_image_from_env() {
    let Ok(p) = std::env::var("LANEFS_FSCK_IMAGE") else {
        return;
    };
    let dev = FileDevice::open(Path::new(&p), true).unwrap();
    print!("{}", lanefs::info::report(&dev).unwrap());
}

/// Shapes `mke2fs` makes besides the default, each checked at every block size: ext2 and
/// ext3 (block maps, 32-bit journal tags), revision 0, uninit_bg instead of metadata_csum,
/// meta_bg, 128-byte inodes, no filetype / dir_index / flex_bg / sparse_super, inline
/// data, xattr values in inodes, mmp, quota and project quota.
const SHAPES: &[(&str, &[&str])] = &[
    ("ext2", &["-t", "ext2"]),
    ("ext3", &["-t", "ext3"]),
    ("ext4", &["-t", "ext4"]),
    ("rev0", &["-t", "ext2", "-r", "0"]),
    (
        "uninit_bg",
        &["-t", "ext4", "-O", "^metadata_csum,uninit_bg"],
    ),
    ("ext3_uninit_bg", &["-t", "ext3", "-O", "uninit_bg"]),
    ("meta_bg", &["-t", "ext4", "-O", "meta_bg,^resize_inode"]),
    (
        "ext3_meta_bg",
        &["-t", "ext3", "-O", "meta_bg,^resize_inode"],
    ),
    ("inode128", &["-t", "ext4", "-I", "128"]),
    ("no_filetype", &["-t", "ext4", "-O", "^filetype"]),
    ("no_dir_index", &["-t", "ext4", "-O", "^dir_index"]),
    ("no_flex_bg", &["-t", "ext4", "-O", "^flex_bg"]),
    (
        "no_sparse",
        &["-t", "ext4", "-O", "^sparse_super,^resize_inode"],
    ),
    ("inline", &["-t", "ext4", "-O", "inline_data"]),
    ("ea_inode", &["-t", "ext4", "-O", "ea_inode,inline_data"]),
    ("mmp", &["-t", "ext4", "-O", "mmp"]),
    ("quota", &["-t", "ext4", "-O", "quota,project", "-I", "256"]),
    (
        "quota_ea_inode",
        &["-t", "ext4", "-O", "quota,project,ea_inode", "-I", "256"],
    ),
];

/// A host tree for `mke2fs -d`: files of several sizes (inline-sized ones too), nested and
/// multi-block directories, short and long symlinks, a hard link, a sparse file.
fn shape_tree(root: &Path) {
    let w = |p: &str, n: usize| std::fs::write(root.join(p), vec![b'x'; n]).unwrap();
    std::fs::create_dir_all(root.join("sub/deeper")).unwrap();
    std::fs::create_dir_all(root.join("wide")).unwrap();
    for (name, n) in [
        ("empty", 0),
        ("tiny", 10),
        ("inline", 100),
        ("medium", 5000),
    ] {
        w(name, n);
    }
    w("large", 300 * 1024);
    w("sub/deeper/file", 123);
    std::os::unix::fs::symlink("tiny", root.join("short_link")).unwrap();
    std::os::unix::fs::symlink("a".repeat(100), root.join("long_link")).unwrap();
    std::os::unix::fs::symlink("b".repeat(500), root.join("longer_link")).unwrap();
    std::fs::hard_link(root.join("tiny"), root.join("sub/hard")).unwrap();
    let f = std::fs::File::create(root.join("sparse")).unwrap();
    for i in 0..20u64 {
        std::os::unix::fs::FileExt::write_all_at(&f, &[b'z'; 1000], i * 40_000).unwrap();
    }
    for i in 0..300 {
        std::fs::write(root.join(format!("wide/entry-{i:04}")), b"").unwrap();
    }
}

/// `mke2fs -q -F -b BS ARGS [-d TREE]` on a sparse file of `mib` MiB; None when mke2fs
/// refuses the combination.
fn mke2fs_image(path: &Path, mib: u64, bs: u32, args: &[&str], tree: Option<&Path>) -> bool {
    let f = std::fs::File::create(path).unwrap();
    f.set_len(mib << 20).unwrap();
    drop(f);
    let mut cmd = Command::new("mke2fs");
    cmd.args(["-q", "-F", "-b", &bs.to_string()]).args(args);
    if let Some(t) = tree {
        cmd.arg("-d").arg(t);
    }
    cmd.arg(path).stdout(Stdio::null()).stderr(Stdio::null());
    cmd.status().is_ok_and(|s| s.success())
}

/// Whether lanefs fsck and `e2fsck -fn` agree on `img` (clean or not); a description of
/// the disagreement otherwise.
fn disagreement(img: &Path, what: &str) -> Option<String> {
    let (rc, text) = common::e2fsck(img);
    let dev = FileDevice::open(img, true).unwrap();
    let r = match fsck::check(&dev, &FsckOptions::default()) {
        Ok(r) => r,
        Err(e) => {
            return Some(format!(
                "{what}: lanefs fsck failed: {e}\ne2fsck {rc}:\n{text}"
            ))
        }
    };
    (r.is_clean() != (rc == 0)).then(|| {
        format!(
            "{what}: lanefs {} ({:?}), e2fsck exit {rc}:\n{text}",
            r.summary(),
            r.problems
        )
    })
}

/// Goal: lanefs fsck agrees with `e2fsck -fn` on every image shape mke2fs makes, at every
/// block size (1, 2, 4 and 64 KiB). Method: each shape, empty and filled from a host tree
/// with `mke2fs -d`, then the same image with one planted fault per shape (a bitmap bit
/// and a link count, through debugfs), which both must find. Filled quota images get
/// their usage from `e2fsck -fy` (`mke2fs -d` leaves it stale; this kernel mounts no
/// quota image), then must be clean for both, and a file's owner changed behind quota's
/// back must be found by both. bigalloc is refused by name.
#[test]
fn shapes_agree_with_e2fsck() {
    if !common::require_tools("shapes_agree_with_e2fsck", &["mke2fs", "e2fsck", "debugfs"]) {
        return;
    }
    let td = tempfile::tempdir().unwrap();
    let tree = td.path().join("tree");
    shape_tree(&tree);
    let img = td.path().join("shape.img");
    let mut bad = Vec::new();
    let mut checked = 0;
    for bs in [1024u32, 2048, 4096, 65536] {
        let mib = if bs == 65536 { 256 } else { 64 };
        for &(name, args) in SHAPES {
            for fill in [false, true] {
                let what = format!(
                    "{name}, {bs}-byte blocks{}",
                    if fill { ", filled" } else { "" }
                );
                if !mke2fs_image(&img, mib, bs, args, fill.then_some(tree.as_path())) {
                    bad.push(format!("{what}: mke2fs refused"));
                    continue;
                }
                checked += 1;
                let quota = name.starts_with("quota");
                if fill && quota {
                    // mke2fs -d leaves the usage stale; e2fsck -fy counts it (value
                    // inodes too), and then both must call it clean.
                    run(Command::new("e2fsck").args(["-fy"]).arg(&img));
                    if !check(&img).is_clean() {
                        bad.push(format!("{what}: lanefs disagrees with e2fsck's quota"));
                    }
                }
                bad.extend(disagreement(&img, &what));
                if fill && quota {
                    // A planted fault: a file given to another user behind quota's back.
                    let img2 = td.path().join("quota2.img");
                    std::fs::copy(&img, &img2).unwrap();
                    debugfs(&img2, &["sif /medium uid 4242"]);
                    if !check(&img2).has("QUOTA_USAGE") || e2fsck_rc(&img2) == 0 {
                        bad.push(format!("{what}: planted quota owner not found by both"));
                    }
                }
                if fill {
                    // A planted fault: a file's link count off by one.
                    debugfs(&img, &["sif /medium links_count 7"]);
                    let r = check(&img);
                    if r.is_clean() || e2fsck_rc(&img) == 0 {
                        bad.push(format!("{what}: planted link count not found by both"));
                    }
                }
            }
        }
    }
    assert!(
        bad.is_empty(),
        "{checked} images, disagreements:\n{}",
        bad.join("\n")
    );
    assert!(mke2fs_image(
        &img,
        64,
        4096,
        &["-t", "ext4", "-O", "bigalloc"],
        None
    ));
    let dev = FileDevice::open(&img, true).unwrap();
    let e = fsck::check(&dev, &FsckOptions::default()).expect_err("bigalloc is refused");
    assert!(e.to_string().contains("bigalloc"), "{e}");
}

/// setxattr that may fail (a value too large for a shape without ea_inode).
#[allow(unsafe_code)]
fn try_set_xattr(p: &Path, name: &str, value: &[u8]) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
    let name = std::ffi::CString::new(name).unwrap();
    // SAFETY: valid NUL-terminated strings and a live buffer.
    let rc = unsafe {
        libc::setxattr(
            path.as_ptr(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    rc == 0
}

/// What the kernel writes on every shape: a directory growing past one block (htree where
/// indexed), deletions, hard and symbolic links, a fifo, small, block and inode-sized
/// xattrs (the last only fits with ea_inode, and is shared by two files there), files
/// truncated down.
fn shape_workload(m: &Path) {
    std::fs::create_dir_all(m.join("k/a/b")).unwrap();
    for i in 0..400 {
        std::fs::write(m.join(format!("k/a/b/n{i:04}")), vec![b'n'; i % 5 * 40]).unwrap();
    }
    for i in (0..400).step_by(3) {
        std::fs::remove_file(m.join(format!("k/a/b/n{i:04}"))).unwrap();
    }
    for i in 0..40usize {
        std::fs::write(m.join(format!("k/f{i}")), vec![b'f'; i * 397]).unwrap();
    }
    std::fs::hard_link(m.join("k/f1"), m.join("k/a/hard")).unwrap();
    std::os::unix::fs::symlink("k/f2", m.join("short")).unwrap();
    std::os::unix::fs::symlink("x".repeat(200), m.join("k/long")).unwrap();
    run(Command::new("mkfifo").arg(m.join("k/fifo")));
    for f in ["k/f1", "k/f2", "k/f4"] {
        try_set_xattr(&m.join(f), "user.small", b"s");
        try_set_xattr(&m.join(f), "user.block", &[b'b'; 700]);
        try_set_xattr(&m.join(f), "user.huge", &[b'h'; 9000]);
    }
    std::fs::write(m.join("k/trunc"), vec![7u8; 100_000]).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(m.join("k/trunc"))
        .unwrap()
        .set_len(5000)
        .unwrap();
}

/// Goal: lanefs fsck agrees with `e2fsck -fn` on images of every shape the kernel has
/// written (block sizes up to 4 KiB, which the kernel mounts here). Method: mke2fs each
/// shape, loop-mount it, run a workload, unmount, compare both checkers.
#[test]
fn kernel_filled_shapes_agree_with_e2fsck() {
    let name = "kernel_filled_shapes_agree_with_e2fsck";
    let td = tempfile::tempdir().unwrap();
    if !common::kernel_ready(name, td.path(), &["mke2fs"]) {
        return;
    }
    let img = td.path().join("k.img");
    let mnt = td.path().join("mnt");
    let mut bad = Vec::new();
    for bs in [1024u32, 2048, 4096] {
        for &(shape, args) in SHAPES {
            let what = format!("{shape}, {bs}-byte blocks, kernel-filled");
            if !mke2fs_image(&img, 64, bs, args, None) {
                bad.push(format!("{what}: mke2fs refused"));
                continue;
            }
            let m = match common::KernelMount::mount(&img, &mnt, "") {
                Ok(m) => m,
                // A kernel built without quota support refuses quota images.
                Err(e) if shape.starts_with("quota") => {
                    println!("{what}: not mounted (kernel without quota support?): {e}");
                    continue;
                }
                Err(e) => {
                    bad.push(format!("{what}: the kernel refuses to mount it: {e}"));
                    continue;
                }
            };
            shape_workload(&m.dir);
            m.unmount().expect("unmount");
            bad.extend(disagreement(&img, &what));
        }
    }
    assert!(bad.is_empty(), "disagreements:\n{}", bad.join("\n"));
}

/// Goal: features whose structures the checker does not parse are named, not misread.
/// Method: a populated image with `shared_blocks` or `verity` set (debugfs `feature`),
/// and one with a read-only-compatible bit nobody defined; `check` must refuse each with
/// `Unsupported` naming the feature (the CLI's exit 8), instead of reporting duplicate
/// blocks or bad sizes.
#[test]
fn unchecked_ro_compat_features_are_named() {
    require_tools!("unchecked_ro_compat_features_are_named");
    for (feature, named) in [
        ("shared_blocks", "shared_blocks"),
        ("verity", "verity"),
        ("0x80000000", "0x80000000"),
    ] {
        let img = make_image(&[], true);
        if feature.starts_with("0x") {
            let mut raw = std::fs::read(&img.path).unwrap();
            let mut s = lanefs::internals::disk::superblock::Superblock::decode(
                &raw[1024..2048],
                raw.len() as u64,
            )
            .unwrap();
            // s_feature_ro_compat, at 0x64.
            let v = u32::from_le_bytes(s.raw[0x64..0x68].try_into().unwrap()) | 0x8000_0000;
            s.raw[0x64..0x68].copy_from_slice(&v.to_le_bytes());
            s.update_checksum();
            raw[1024..2048].copy_from_slice(&s.raw[..]);
            std::fs::write(&img.path, raw).unwrap();
        } else {
            debugfs(&img.path, &[&format!("feature {feature}")]);
        }
        let dev = FileDevice::open(&img.path, true).unwrap();
        match fsck::check(&dev, &FsckOptions::default()) {
            Err(lanefs::Error::Unsupported(m)) => assert!(m.contains(named), "{feature}: {m}"),
            other => panic!("{feature}: {other:?}"),
        }
    }
}

/// Goal: a bad block list naming metadata is found, as e2fsck's `process_bad_block`
/// finds it: the primary superblock and descriptors, and a group's bitmaps. Method: a
/// 1 KiB-block image whose bad blocks inode (1) is pointed by debugfs at each in turn;
/// a list naming a free data block stays clean for both.
#[test]
fn bad_block_list_naming_metadata_is_found() {
    if !common::require_tools(
        "bad_block_list_naming_metadata_is_found",
        &["mke2fs", "e2fsck", "debugfs"],
    ) {
        return;
    }
    let td = tempfile::tempdir().unwrap();
    let path = td.path().join("bb.img");
    assert!(mke2fs_image(&path, 8, 1024, &["-t", "ext4"], None));
    let sb = {
        let dev = FileDevice::open(&path, true).unwrap();
        let mut b = vec![0u8; 1024];
        dev.read_at(1024, &mut b).unwrap();
        Superblock::decode(&b, 8 << 20).unwrap()
    };
    let bitmap = {
        let out = Command::new("dumpe2fs").arg(&path).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let line = text
            .lines()
            .find(|l| l.contains("Block bitmap at"))
            .expect("dumpe2fs names group 0's block bitmap");
        let n: String = line
            .split("Block bitmap at ")
            .nth(1)
            .unwrap()
            .chars()
            .take_while(|c| c.is_ascii_digit())
            .collect();
        n.parse::<u64>().unwrap()
    };
    let free_block = sb.blocks_count() - 10;
    for (block, code) in [
        (1, Some("BADBLOCK_IN_PRIMARY")),
        (2, Some("BADBLOCK_IN_PRIMARY")),
        (bitmap, Some("BADBLOCK_IN_BITMAP")),
        (free_block, None),
    ] {
        let img = td.path().join(format!("bb-{block}.img"));
        std::fs::copy(&path, &img).unwrap();
        let b = format!("sif <1> block[0] {block}");
        debugfs(&img, &[b.as_str(), "sif <1> blocks 2", "sif <1> size 1024"]);
        if code.is_none() {
            // e2fsck marks the listed block in use and counts it; then both call it clean.
            run(Command::new("e2fsck").args(["-fy"]).arg(&img));
            assert_clean(&img);
            continue;
        }
        assert_detects(&img, code.unwrap());
    }
}
