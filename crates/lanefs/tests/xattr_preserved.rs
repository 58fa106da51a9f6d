//! Goal: what lanefs does not interpret survives its rewrites. Extended attributes stay
//! intact, both in the inode and in an external block shared by two inodes. Deleting an
//! inode releases its xattr block by refcount.
//! Method: the kernel writes files with xattrs (loop mount), lanefs modifies and deletes
//! some of them, then e2fsck and the kernel check the result.

use lanefs::{Fs, MountOptions, SetAttr, ROOT_INO};
use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "common/skips.rs"]
mod skips;

fn require(reason: &str) -> bool {
    skips::report("xattr_preserved", reason);
    false
}

fn run(cmd: &str, args: &[&str]) -> bool {
    Command::new(cmd)
        .args(args)
        .status()
        .is_ok_and(|s| s.success())
}

struct Mount(PathBuf);
impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

fn kernel_mount(img: &Path, dir: &Path, opts: &str) -> Option<Mount> {
    std::fs::create_dir_all(dir).ok()?;
    let img_s = img.to_str()?;
    run("mount", &["-o", opts, img_s, dir.to_str()?]).then(|| Mount(dir.to_path_buf()))
}

fn getfattr(p: &Path, name: &str) -> Option<Vec<u8>> {
    let out = Command::new("getfattr")
        .args(["--only-values", "-n", name])
        .arg(p)
        .output()
        .ok()?;
    out.status.success().then_some(out.stdout)
}

fn e2fsck_clean(img: &Path) {
    let out = Command::new("e2fsck")
        .arg("-fn")
        .arg(img)
        .output()
        .expect("e2fsck runs");
    assert!(
        out.status.success(),
        "e2fsck -fn failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn xattrs_survive_rewrites_and_shared_blocks_are_refcounted() {
    let td = tempfile::tempdir().unwrap();
    let img = td.path().join("x.img");
    std::fs::File::create(&img)
        .unwrap()
        .set_len(64 << 20)
        .unwrap();
    if !run(
        "mkfs.ext4",
        &["-q", "-F", "-b", "4096", img.to_str().unwrap()],
    ) {
        require("mkfs.ext4 not available");
        return;
    }
    if !run("setfattr", &["--version"]) {
        require("setfattr not installed (package attr)");
        return;
    }
    let mnt = td.path().join("mnt");
    // "big" has a private xattr block; the two sharers hold one block with refcount 2
    // (the kernel deduplicates identical xattr blocks).
    let big = "b".repeat(3000);
    let private = "p".repeat(3000);
    {
        let Some(_m) = kernel_mount(&img, &mnt, "loop") else {
            require("cannot loop-mount (not root?)");
            return;
        };
        for f in ["small", "big", "shared1", "shared2"] {
            std::fs::write(mnt.join(f), format!("data of {f}\n")).unwrap();
        }
        assert!(run(
            "setfattr",
            &[
                "-n",
                "user.small",
                "-v",
                "x",
                mnt.join("small").to_str().unwrap()
            ]
        ));
        for f in ["big", "shared1", "shared2"] {
            let p = mnt.join(f);
            let v = if f == "big" { &private } else { &big };
            assert!(run(
                "setfattr",
                &["-n", "user.big", "-v", v, p.to_str().unwrap()]
            ));
        }
    }
    e2fsck_clean(&img);

    // lanefs rewrites every inode (data, mode, times) and deletes one sharer.
    let fs = Fs::mount_path(&img, MountOptions::default()).unwrap();
    for f in ["small", "big", "shared2"] {
        let a = fs.lookup(ROOT_INO, f.as_bytes()).unwrap();
        fs.write(a.ino, a.size, b"appended by lanefs\n").unwrap();
        fs.setattr(
            a.ino,
            &SetAttr {
                perm: Some(0o600),
                ..Default::default()
            },
        )
        .unwrap();
    }
    fs.unlink(ROOT_INO, b"shared1").unwrap();
    fs.unmount().unwrap();
    e2fsck_clean(&img);
    {
        let _m = kernel_mount(&img, &mnt, "loop,ro").expect("kernel mounts lanefs output");
        assert_eq!(getfattr(&mnt.join("small"), "user.small").unwrap(), b"x");
        for f in ["big", "shared2"] {
            let v = if f == "big" { &private } else { &big };
            assert_eq!(getfattr(&mnt.join(f), "user.big").unwrap(), v.as_bytes());
            let text = std::fs::read_to_string(mnt.join(f)).unwrap();
            assert_eq!(text, format!("data of {f}\nappended by lanefs\n"));
        }
        assert!(!mnt.join("shared1").exists());
    }

    // Deleting the last sharer and the private xattr block frees both blocks.
    let fs = Fs::mount_path(&img, MountOptions::default()).unwrap();
    let before = fs.statfs().unwrap().free_blocks;
    fs.unlink(ROOT_INO, b"shared2").unwrap();
    fs.unlink(ROOT_INO, b"big").unwrap();
    let after = fs.statfs().unwrap().free_blocks;
    // Each file had one data block and one xattr block.
    assert_eq!(after - before, 4, "data and xattr blocks are released");
    fs.unmount().unwrap();
    e2fsck_clean(&img);
}
