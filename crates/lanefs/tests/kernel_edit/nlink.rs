//! The dir_nlink limit: with the feature, a directory past 65,000 subdirectories has link
//! count 1 on both sides and keeps it back below the limit (e2fsck and `lanefs::fsck` accept
//! that); without it, a directory stops at 65,000 links (EMLINK) on both sides.

use super::*;

/// A directory at the dir_nlink limit: the kernel makes 64,997 subdirectories (link
/// count 64,999), lanefs adds the 64,998th (65,000: still exact, as in Linux and for
/// e2fsck) and the 64,999th (past 65,000: 1, "many"), and the kernel one more (stays 1).
#[test]
fn kernel_edit_dir_nlink_limit() {
    use std::os::unix::fs::MetadataExt;
    let test = "kernel_edit_dir_nlink_limit";
    let _wd = watchdog(test, 600);
    let td = tempfile::tempdir().expect("tempdir");
    if !kernel_ready(test, td.path(), &[]) {
        return;
    }
    let t0 = Instant::now();
    let img = common::mkfs_image_args(td.path(), "nlink.img", 1 << 30, &["-N", "140000"]);
    let mnt = td.path().join("mnt");
    let km = KernelMount::mount(&img, &mnt, "").expect("kernel mount");
    let p = mnt.join("p");
    std::fs::create_dir(&p).expect("mkdir /p");
    for i in 0..64_997 {
        std::fs::create_dir(p.join(format!("{i}"))).expect("kernel mkdir");
    }
    assert_eq!(std::fs::metadata(&p).expect("stat").nlink(), 64_999);
    km.unmount().expect("unmount");
    fsck_clean(&img, "after the kernel made 64,997 subdirectories")
        .unwrap_or_else(|e| panic!("{e}"));
    println!(
        "{test}: the kernel made 64,997 subdirectories ({:.1} s)",
        t0.elapsed().as_secs_f64()
    );
    for (name, want) in [("l1", 65_000u32), ("l2", 1)] {
        let fs = Fs::mount_path(&img, MountOptions::default()).expect("lanefs mount");
        let pi = fs.lookup(ROOT_INO, b"p").expect("lookup").ino;
        fs.mkdir(pi, name.as_bytes(), 0o755, Owner::default())
            .expect("lanefs mkdir");
        let got = fs.getattr(pi).expect("getattr").nlink;
        fs.unmount().expect("lanefs unmount");
        let when = format!("after lanefs made /p/{name}");
        fsck_clean(&img, &when)
            .and_then(|_| lanefs_fsck(&img, &when))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(got, want, "lanefs's link count of /p after {name}");
        let km = KernelMount::mount(&img, &mnt, "ro").expect("kernel mount");
        let n = std::fs::metadata(mnt.join("p")).expect("stat").nlink();
        km.unmount().expect("unmount");
        assert_eq!(
            n,
            u64::from(want),
            "the kernel's link count of /p after {name}"
        );
    }
    let km = KernelMount::mount(&img, &mnt, "").expect("kernel mount");
    std::fs::create_dir(mnt.join("p").join("k1")).expect("kernel mkdir");
    assert_eq!(std::fs::metadata(mnt.join("p")).expect("stat").nlink(), 1);
    km.unmount().expect("unmount");
    fsck_clean(&img, "after the kernel made one more").unwrap_or_else(|e| panic!("{e}"));
    // Back below the limit: the count stays 1 (Linux's ext4_dec_count), which e2fsck
    // accepts for an indexed directory.
    let fs = Fs::mount_path(&img, MountOptions::default()).expect("lanefs mount");
    let pi = fs.lookup(ROOT_INO, b"p").expect("lookup").ino;
    for name in ["l1", "l2", "k1", "0"] {
        fs.rmdir(pi, name.as_bytes()).expect("lanefs rmdir");
    }
    assert_eq!(fs.getattr(pi).expect("getattr").nlink, 1);
    fs.unmount().expect("lanefs unmount");
    fsck_clean(&img, "after lanefs removed four").unwrap_or_else(|e| panic!("{e}"));
    let km = KernelMount::mount(&img, &mnt, "").expect("kernel mount");
    std::fs::remove_dir(mnt.join("p").join("1")).expect("kernel rmdir");
    assert_eq!(std::fs::metadata(mnt.join("p")).expect("stat").nlink(), 1);
    km.unmount().expect("unmount");
    fsck_clean(&img, "after the kernel removed one").unwrap_or_else(|e| panic!("{e}"));
    println!("{test}: done ({:.1} s)", t0.elapsed().as_secs_f64());
}

/// A directory whose subdirectories went past 65,000 and back below keeps link count 1 in
/// Linux (ext4_dec_count never raises it again) and in lanefs alike; e2fsck accepts that
/// for an indexed directory ("previously exceeded, but no longer is"), and so must
/// `lanefs::fsck` (it reported LINK_COUNT before its pass 4 learnt this).
#[test]
fn kernel_dir_nlink_back_below_limit_lanefs_fsck() {
    let test = "kernel_dir_nlink_back_below_limit_lanefs_fsck";
    let td = tempfile::tempdir().expect("tempdir");
    if !kernel_ready(test, td.path(), &[]) {
        return;
    }
    let img = common::mkfs_image_args(td.path(), "nlink.img", 1 << 30, &["-N", "140000"]);
    let mnt = td.path().join("mnt");
    let km = KernelMount::mount(&img, &mnt, "").expect("kernel mount");
    let p = mnt.join("p");
    std::fs::create_dir(&p).expect("mkdir /p");
    for i in 0..64_999 {
        std::fs::create_dir(p.join(format!("{i}"))).expect("kernel mkdir");
    }
    // 65,001 links: 1 from now on, also after the next rmdir (65,000 counted).
    std::fs::remove_dir(p.join("0")).expect("kernel rmdir");
    km.unmount().expect("unmount");
    fsck_clean(&img, "with /p back at 65,000").unwrap_or_else(|e| panic!("{e}"));
    lanefs_fsck(&img, "with /p back at 65,000").unwrap_or_else(|e| panic!("{e}"));
}

/// Without dir_nlink a directory stops at 65,000 links (Linux's EXT4_DIR_LINK_MAX): the
/// kernel makes 64,998 subdirectories and refuses one more; lanefs's mkdir and a
/// directory moved in fail with EMLINK too, while a file moved in, a subdirectory renamed
/// within, and a directory moved over an empty one still work.
#[test]
fn kernel_edit_no_dir_nlink_limit() {
    use std::os::unix::fs::MetadataExt;
    let test = "kernel_edit_no_dir_nlink_limit";
    let _wd = watchdog(test, 600);
    let td = tempfile::tempdir().expect("tempdir");
    if !kernel_ready(test, td.path(), &[]) {
        return;
    }
    let img = common::mkfs_image_args(
        td.path(),
        "nonlink.img",
        1 << 30,
        &["-N", "140000", "-O", "^dir_nlink"],
    );
    let mnt = td.path().join("mnt");
    let km = KernelMount::mount(&img, &mnt, "").expect("kernel mount");
    let p = mnt.join("p");
    std::fs::create_dir(&p).expect("mkdir /p");
    for i in 0..64_998 {
        std::fs::create_dir(p.join(format!("{i}"))).expect("kernel mkdir");
    }
    for d in ["q", "q2"] {
        std::fs::create_dir(mnt.join(d)).expect("mkdir");
    }
    std::fs::write(mnt.join("f"), b"f").expect("create");
    let e = std::fs::create_dir(p.join("x")).expect_err("the kernel's 65,001st link");
    assert_eq!(e.raw_os_error(), Some(libc::EMLINK));
    km.unmount().expect("unmount");

    let fs = Fs::mount_path(&img, MountOptions::default()).expect("lanefs mount");
    let pi = fs.lookup(ROOT_INO, b"p").expect("lookup").ino;
    let o = Owner::default();
    let e = fs
        .mkdir(pi, b"l1", 0o755, o)
        .expect_err("lanefs mkdir past the limit");
    assert_eq!(e.errno(), libc::EMLINK, "mkdir: {e}");
    let e = fs
        .rename(ROOT_INO, b"q", pi, b"q")
        .expect_err("lanefs moves a directory in past the limit");
    assert_eq!(e.errno(), libc::EMLINK, "rename: {e}");
    fs.rename(ROOT_INO, b"f", pi, b"f")
        .expect("a file moves in");
    fs.rename(pi, b"0", pi, b"zero")
        .expect("a subdirectory renamed within");
    fs.rename(ROOT_INO, b"q2", pi, b"1")
        .expect("a directory over an empty one");
    assert_eq!(fs.getattr(pi).expect("getattr").nlink, 65_000);
    fs.unmount().expect("lanefs unmount");
    fsck_clean(&img, "after lanefs edited /p")
        .and_then(|_| lanefs_fsck(&img, "after lanefs edited /p"))
        .unwrap_or_else(|e| panic!("{e}"));
    let km = KernelMount::mount(&img, &mnt, "ro").expect("kernel mount");
    assert_eq!(std::fs::metadata(&p).expect("stat").nlink(), 65_000);
    for n in ["f", "zero", "1"] {
        assert!(p.join(n).exists(), "/p/{n}");
    }
    assert!(mnt.join("q").is_dir() && !p.join("0").exists() && !mnt.join("q2").exists());
    km.unmount().expect("unmount");
}
