//! Goal: `Fs::touch_atime` updates access times as Linux's `atime_needs_update` does under
//! each atime mount option, and never on a read-only mount.
//! Method: set an inode's times through `setattr` (ctime included, which only the engine
//! API can set) so that each arm of the relatime rule decides alone, then touch it.

use lanefs::mkfs::{format, MkfsOptions};
use lanefs::{AtimePolicy, FileDevice, Fs, MountOptions, Owner, SetAttr, Timespec, ROOT_INO};
use std::path::Path;
use std::sync::Arc;

fn image(dir: &Path) -> std::path::PathBuf {
    let img = dir.join("a.img");
    let dev = FileDevice::create(&img, 32 << 20).unwrap();
    format(&dev, &MkfsOptions::default()).unwrap();
    img
}

fn ago(secs: i64) -> Timespec {
    let n = Timespec::now();
    Timespec {
        sec: n.sec - secs,
        nsec: 0,
    }
}

/// Give `ino` these times, touch it, and say whether its atime moved.
fn touched(fs: &Arc<Fs>, ino: u64, atime: i64, mtime: i64, ctime: i64) -> bool {
    let set = SetAttr {
        atime: Some(ago(atime)),
        mtime: Some(ago(mtime)),
        ctime: Some(ago(ctime)),
        ..SetAttr::default()
    };
    fs.setattr(ino, &set).unwrap();
    fs.touch_atime(ino).unwrap();
    fs.getattr(ino).unwrap().atime != ago(atime)
}

#[test]
fn relatime_strictatime_noatime_as_linux() {
    let td = tempfile::tempdir().unwrap();
    let img = image(td.path());
    let me = Owner::default();
    let hour = 3600;

    let fs = Fs::mount_path(&img, MountOptions::default()).unwrap();
    let f = fs.create(ROOT_INO, b"f", 0o644, me).unwrap().ino;
    fs.release(f).unwrap();
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, me).unwrap().ino;
    // relatime: atime after mtime and ctime and under a day old: left alone.
    assert!(!touched(&fs, f, hour, 2 * hour, 2 * hour));
    // Each arm alone: mtime not before atime, ctime not before atime, a day old.
    assert!(touched(&fs, f, 2 * hour, hour, 3 * hour));
    assert!(touched(&fs, f, 2 * hour, 3 * hour, hour));
    assert!(touched(&fs, f, 25 * hour, 26 * hour, 26 * hour));
    assert!(touched(&fs, d, 2 * hour, hour, 3 * hour));
    fs.unmount().unwrap();

    let opts = |policy, nodiratime| MountOptions {
        atime: policy,
        nodiratime,
        ..MountOptions::default()
    };
    let fs = Fs::mount_path(&img, opts(AtimePolicy::Strict, true)).unwrap();
    assert!(touched(&fs, f, hour, 2 * hour, 2 * hour), "strictatime");
    assert!(!touched(&fs, d, 2 * hour, hour, hour), "nodiratime");
    fs.unmount().unwrap();

    let fs = Fs::mount_path(&img, opts(AtimePolicy::Never, false)).unwrap();
    assert!(!touched(&fs, f, 2 * hour, hour, hour), "noatime");
    fs.unmount().unwrap();

    // Read-only: nothing is written, whatever the policy.
    let ro = MountOptions {
        read_only: true,
        atime: AtimePolicy::Strict,
        ..MountOptions::default()
    };
    let before = std::fs::read(&img).unwrap();
    let fs = Fs::mount_path(&img, ro).unwrap();
    fs.touch_atime(f).unwrap();
    fs.unmount().unwrap();
    assert!(std::fs::read(&img).unwrap() == before);
}
