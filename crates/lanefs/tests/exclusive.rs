//! Goal: lanefs never writes an image the kernel has mounted or another writer holds.
//! Method: the kernel loop-mounts an image read-write and lanefs tries to mount it
//! read-write (refused, naming the mount), read-only (allowed); a loop device attached to
//! the image is held by lanefs so the kernel cannot mount it meanwhile; the block device
//! itself, mounted, is refused; a second writer is refused. e2fsck judges the image after.

mod common;

use common::{assert_fsck_clean, kernel_ready, mkfs_image, run, KernelMount};
use lanefs::{Error, Fs, MountOptions, Owner, ROOT_INO};
use std::path::Path;
use std::process::Command;

fn ro() -> MountOptions {
    MountOptions {
        read_only: true,
        ..MountOptions::default()
    }
}

fn busy(r: lanefs::Result<std::sync::Arc<Fs>>, want: &str) -> String {
    match r {
        Err(e @ Error::Busy(_)) => {
            let text = e.to_string();
            assert!(text.contains(want), "{text:?} lacks {want:?}");
            text
        }
        Err(e) => panic!("expected busy ({want}), got {e}"),
        Ok(_) => panic!("expected busy ({want}), mounted"),
    }
}

/// Attach `img` to a free loop device; its path.
fn losetup(img: &Path) -> String {
    run(Command::new("losetup").args(["-f", "--show"]).arg(img))
        .unwrap()
        .trim()
        .to_string()
}

struct Loop(String);
impl Drop for Loop {
    fn drop(&mut self) {
        let _ = Command::new("losetup").args(["-d", &self.0]).status();
    }
}

#[test]
fn kernel_mounted_image_is_not_written() {
    let td = tempfile::tempdir().unwrap();
    if !kernel_ready(
        "kernel_mounted_image_is_not_written",
        td.path(),
        &["losetup"],
    ) {
        return;
    }
    let img = mkfs_image(td.path(), "k.img", 64 << 20);
    let mnt = td.path().join("mnt");
    let m = KernelMount::mount(&img, &mnt, "").unwrap();
    std::fs::write(mnt.join("kernel-file"), b"from the kernel").unwrap();
    let text = busy(
        Fs::mount_path(&img, MountOptions::default()),
        "mounted by the kernel",
    );
    assert!(text.contains(&mnt.display().to_string()), "{text}");
    // Reading is allowed (as debugfs allows it); nothing is written.
    let fs = Fs::mount_path(&img, ro()).unwrap();
    assert!(fs.lookup(ROOT_INO, b"lost+found").is_ok());
    drop(fs);
    m.unmount().unwrap();
    assert_fsck_clean(&img);
    // Unmounted: lanefs may write again, and the kernel's file is there.
    let fs = Fs::mount_path(&img, MountOptions::default()).unwrap();
    assert!(fs.lookup(ROOT_INO, b"kernel-file").is_ok());
    fs.mkdir(ROOT_INO, b"d", 0o755, Owner::default()).unwrap();
    // A second writer and a reader are refused while this one holds it; a snapshot
    // reads what it has made durable, and is told who writes.
    busy(
        Fs::mount_path(&img, MountOptions::default()),
        "in use by another lanefs",
    );
    busy(Fs::mount_path(&img, ro()), "open for writing");
    let snapshot = MountOptions {
        snapshot: true,
        ..MountOptions::default()
    };
    let reader = Fs::mount_path(&img, snapshot).expect("a snapshot beside a writer");
    assert!(reader.lookup(ROOT_INO, b"kernel-file").is_ok());
    drop(reader);
    assert_eq!(
        lanefs::sharing_note(&img).as_deref(),
        Some("open for writing by another lanefs")
    );
    fs.unmount().unwrap();
    assert_fsck_clean(&img);
}

#[test]
fn loop_devices_and_block_devices_are_claimed() {
    let td = tempfile::tempdir().unwrap();
    if !kernel_ready(
        "loop_devices_and_block_devices_are_claimed",
        td.path(),
        &["losetup"],
    ) {
        return;
    }
    let img = mkfs_image(td.path(), "b.img", 64 << 20);
    let dev = Loop(losetup(&img));
    let mnt = td.path().join("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    // lanefs holds the idle loop device: the kernel cannot mount it meanwhile.
    let fs = Fs::mount_path(&img, MountOptions::default()).unwrap();
    fs.mkdir(ROOT_INO, b"by-lanefs", 0o755, Owner::default())
        .unwrap();
    let refused = run(Command::new("mount").arg(&dev.0).arg(&mnt));
    assert!(
        refused.is_err(),
        "the kernel mounted {} under lanefs",
        dev.0
    );
    fs.unmount().unwrap();
    // Now the kernel mounts it: lanefs refuses both the image and the device for writing.
    run(Command::new("mount").arg(&dev.0).arg(&mnt)).unwrap();
    let guard = MountedDev(mnt.clone());
    assert!(mnt.join("by-lanefs").is_dir());
    busy(
        Fs::mount_path(&img, MountOptions::default()),
        "mounted by the kernel",
    );
    busy(
        Fs::mount_path(Path::new(&dev.0), MountOptions::default()),
        "in use",
    );
    let fs = Fs::mount_path(Path::new(&dev.0), ro()).unwrap();
    assert!(fs.lookup(ROOT_INO, b"by-lanefs").is_ok());
    drop(fs);
    drop(guard);
    // Unmounted: the device itself can be written through.
    let fs = Fs::mount_path(Path::new(&dev.0), MountOptions::default()).unwrap();
    fs.mkdir(ROOT_INO, b"via-device", 0o755, Owner::default())
        .unwrap();
    fs.unmount().unwrap();
    drop(dev);
    assert_fsck_clean(&img);
}

struct MountedDev(std::path::PathBuf);
impl Drop for MountedDev {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// The MMP block of `img`: where it is, its bytes' checksum seed, and its decoded form.
fn mmp_read(img: &Path) -> (u64, Option<u32>, lanefs::internals::disk::mmp::Mmp) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open(img).unwrap();
    let mut raw = vec![0u8; 1024];
    f.read_exact_at(&mut raw, 1024).unwrap();
    let sb =
        lanefs::internals::disk::superblock::Superblock::decode(&raw, f.metadata().unwrap().len())
            .unwrap();
    let off = sb.mmp_block() * u64::from(sb.block_size());
    let mut b = vec![0u8; 1024];
    f.read_exact_at(&mut b, off).unwrap();
    let seed = sb.metadata_csum().then(|| sb.csum_seed());
    (
        off,
        seed,
        lanefs::internals::disk::mmp::Mmp::decode(&b).unwrap(),
    )
}

/// Write sequence `seq` and node name `node` into `img`'s MMP block, as another host would.
fn mmp_write(img: &Path, seq: u32, node: &[u8]) {
    use std::os::unix::fs::FileExt;
    let (off, seed, mut m) = mmp_read(img);
    m.seq = seq;
    m.nodename = [0; 64];
    m.nodename[..node.len()].copy_from_slice(node);
    let mut b = vec![0u8; 1024];
    m.encode(&mut b, seed);
    let f = std::fs::OpenOptions::new().write(true).open(img).unwrap();
    f.write_all_at(&b, off).unwrap();
    f.sync_all().unwrap();
}

/// Goal: multi-mount protection as ext4's. Method: on an `mke2fs -O mmp` image, a
/// lanefs read-write mount claims the block (a live sequence naming this host) and
/// unmount marks it clean; with the block marked as e2fsck's, a read-write mount is
/// refused naming e2fsck and a read-only one works; with another "node" moving the
/// sequence during the check interval, the read-write mount is refused naming it;
/// e2fsck is clean at the end.
#[test]
fn mmp_claims_and_refuses() {
    use lanefs::internals::disk::mmp::{SEQ_CLEAN, SEQ_FSCK};
    let test = "mmp_claims_and_refuses";
    if !common::require_tools(test, &["mke2fs", "e2fsck"]) {
        return;
    }
    let td = tempfile::tempdir().unwrap();
    let img = common::mkfs_image_args(td.path(), "mmp.img", 64 << 20, &["-O", "mmp"]);
    assert_eq!(mmp_read(&img).2.seq, SEQ_CLEAN);
    let fs = Fs::mount_path(&img, MountOptions::default()).unwrap();
    let held = mmp_read(&img).2;
    assert!(
        held.seq < SEQ_FSCK,
        "sequence {:#x} while mounted",
        held.seq
    );
    fs.mkdir(ROOT_INO, b"d", 0o755, Owner::default()).unwrap();
    fs.unmount().unwrap();
    assert_eq!(mmp_read(&img).2.seq, SEQ_CLEAN);

    mmp_write(&img, SEQ_FSCK, b"checker");
    busy(Fs::mount_path(&img, MountOptions::default()), "e2fsck");
    let r = Fs::mount_path(&img, ro()).unwrap();
    r.lookup(ROOT_INO, b"d").unwrap();
    drop(r);

    // Another node holds it: its sequence moves while lanefs waits the check interval.
    mmp_write(&img, 1000, b"othernode");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mover = {
        let (img, stop) = (img.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut seq = 1001;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                std::thread::sleep(std::time::Duration::from_millis(500));
                mmp_write(&img, seq, b"othernode");
                seq += 1;
            }
        })
    };
    let text = busy(
        Fs::mount_path(&img, MountOptions::default()),
        "another node",
    );
    assert!(text.contains("othernode"), "{text}");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    mover.join().unwrap();
    mmp_write(&img, SEQ_CLEAN, b"othernode");
    assert_fsck_clean(&img);
}
