//! Goal: an `Fs` dropped without `unmount` still leaves a clean image, even with an
//! unlinked file held open; and an unlinked open file keeps its data until released.
//! Method: do both on a fresh image, then let e2fsck and a remount judge.

mod common;

use lanefs::mkfs::{format, MkfsOptions};
use lanefs::{Error, FileDevice, Fs, MountOptions, Owner, ROOT_INO};

#[test]
fn unlinked_open_files_live_until_release_and_drop_writes_back() {
    let td = tempfile::tempdir().unwrap();
    let img = td.path().join("life.img");
    let dev = FileDevice::create(&img, 32 << 20).unwrap();
    format(&dev, &MkfsOptions::default()).unwrap();
    drop(dev);
    let fs = Fs::mount_path(&img, MountOptions::default()).unwrap();
    let free0 = fs.statfs().unwrap().free_blocks;
    let o = Owner::default();
    let a = fs.create(ROOT_INO, b"ghost", 0o644, o).unwrap();
    fs.write(a.ino, 0, &[7u8; 100_000]).unwrap();
    fs.unlink(ROOT_INO, b"ghost").unwrap();
    assert_eq!(fs.lookup(ROOT_INO, b"ghost"), Err(Error::NotFound));
    let mut buf = vec![0u8; 100_000];
    assert_eq!(
        fs.read(a.ino, 0, &mut buf).unwrap(),
        100_000,
        "data lives while open"
    );
    assert!(buf.iter().all(|&b| b == 7));
    assert!(fs.statfs().unwrap().free_blocks < free0);
    let kept = fs.create(ROOT_INO, b"kept", 0o644, o).unwrap();
    fs.write(kept.ino, 0, b"still here").unwrap();
    fs.release(kept.ino).unwrap();
    // Dropped while "ghost" is still open and nothing was synced.
    drop(fs);
    common::assert_fsck_clean(&img);
    let fs = Fs::mount_path(&img, MountOptions::default()).unwrap();
    assert_eq!(
        fs.statfs().unwrap().free_blocks,
        free0 - 1,
        "only kept's block is used"
    );
    let k = fs.lookup(ROOT_INO, b"kept").unwrap();
    let mut b = [0u8; 10];
    fs.read(k.ino, 0, &mut b).unwrap();
    assert_eq!(&b, b"still here");
    fs.unmount().unwrap();
}
