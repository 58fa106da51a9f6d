//! Goal: the unmount of a reproducible build (`clamp_time`) leaves the journal's log as
//! mkfs leaves it, every block zero, whether the device punches the log out (an image
//! file, a memory device) or can only be written (a device that cannot punch: the
//! blocks that are not zero are written over), and all three give the same bytes.
//! Method: the same single-threaded build on each device, with commits between the
//! batches so the log fills; the log is read back through debugfs's view of
//! the journal inode (`cat <8>`).

use lanefs::{mkfs, BlockDevice, FileDevice, Fs, MemDevice, MountOptions, Owner, ROOT_INO};
use std::sync::Arc;

/// A memory device that cannot punch holes: the journal's fallback path.
struct NoPunch(MemDevice);

impl BlockDevice for NoPunch {
    fn read_at(&self, off: u64, buf: &mut [u8]) -> lanefs::Result<()> {
        self.0.read_at(off, buf)
    }
    fn write_at(&self, off: u64, buf: &[u8]) -> lanefs::Result<()> {
        self.0.write_at(off, buf)
    }
    fn flush(&self) -> lanefs::Result<()> {
        self.0.flush()
    }
    fn size(&self) -> u64 {
        self.0.size()
    }
}

const SIZE: u64 = 64 << 20;

/// Format and fill `dev` as a reproducible build does, then unmount.
fn build(dev: Arc<dyn BlockDevice>) {
    let opts = mkfs::MkfsOptions {
        uuid: Some([7; 16]),
        hash_seed: Some([9; 16]),
        time: Some(lanefs::Timespec {
            sec: 1_700_000_000,
            nsec: 0,
        }),
        ..mkfs::MkfsOptions::mke2fs()
    };
    mkfs::format(&*dev, &opts).unwrap();
    let mount = MountOptions {
        clamp_time: Some(1_700_000_000),
        // Commits only where the build syncs, on every device alike.
        commit_interval: std::time::Duration::from_secs(3600),
        ..MountOptions::default()
    };
    let fs = Fs::mount(dev, mount).unwrap();
    let own = Owner::default();
    for batch in 0..12 {
        let dir = fs
            .mkdir(ROOT_INO, format!("d{batch}").as_bytes(), 0o755, own)
            .unwrap()
            .ino;
        for i in 0..150 {
            let ino = fs
                .create(dir, format!("f{i}").as_bytes(), 0o644, own)
                .unwrap()
                .ino;
            fs.write(ino, 0, &vec![(i % 251) as u8 + 1; 3000]).unwrap();
            fs.release(ino).unwrap();
        }
        fs.sync().unwrap();
    }
    fs.unmount().unwrap();
}

/// The journal inode's bytes, by debugfs.
fn journal_of(image: &std::path::Path) -> Vec<u8> {
    let out = std::process::Command::new("debugfs")
        .args(["-R", "cat <8>"])
        .arg(image)
        .output()
        .expect("debugfs (e2fsprogs) runs");
    assert!(out.status.success(), "{out:?}");
    out.stdout
}

#[test]
fn a_reproducible_unmount_leaves_the_log_zero_on_every_device() {
    let td = tempfile::tempdir().unwrap();
    let file = td.path().join("file.img");
    build(Arc::new(FileDevice::create(&file, SIZE).unwrap()));
    let mem = Arc::new(MemDevice::new(SIZE));
    build(mem.clone());
    let plain = Arc::new(NoPunch(MemDevice::new(SIZE)));
    build(plain.clone());

    let bytes = std::fs::read(&file).unwrap();
    let diff = |a: &[u8], b: &[u8]| {
        a.chunks(1024)
            .zip(b.chunks(1024))
            .enumerate()
            .filter(|(_, (x, y))| x != y)
            .map(|(k, _)| k)
            .take(10)
            .collect::<Vec<_>>()
    };
    assert!(
        bytes == mem.snapshot(),
        "the punched file differs from memory at KiB {:?}",
        diff(&bytes, &mem.snapshot())
    );
    assert!(bytes == plain.0.snapshot(), "the written-over log differs");

    let journal = journal_of(&file);
    let bs = block_size(&file);
    assert!(
        journal.len() >= 1 << 20,
        "journal of {} bytes",
        journal.len()
    );
    // Past its superblock (block 0), the log is zeros.
    let left: Vec<usize> = journal[bs..]
        .chunks(bs)
        .enumerate()
        .filter(|(_, c)| c.iter().any(|&b| b != 0))
        .map(|(k, _)| k + 1)
        .take(8)
        .collect();
    assert!(left.is_empty(), "log blocks not zero: {left:?}");
    // And the image file holds a hole there (mkfs makes the journal one extent).
    let first = debugfs(&file, "bmap <8> 1");
    let last = debugfs(&file, &format!("bmap <8> {}", journal.len() / bs - 1));
    assert_eq!(last - first + 2, (journal.len() / bs) as u64, "one extent");
    let f = std::fs::File::open(&file).unwrap();
    // The host file system's holes are whole pages: those the log covers.
    let (from, to) = (
        (first * bs as u64).next_multiple_of(4096),
        (last + 1) * bs as u64 / 4096 * 4096,
    );
    let data = rustix::fs::seek(&f, rustix::fs::SeekFrom::Data(from)).unwrap();
    assert!(
        data >= to,
        "data at {data} inside the log (blocks {first}..={last} of {bs} bytes)"
    );
}

/// The number debugfs prints for `req` (`bmap`).
fn debugfs(image: &std::path::Path, req: &str) -> u64 {
    let out = std::process::Command::new("debugfs")
        .args(["-R", req])
        .arg(image)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

/// The file system's block size, by dumpe2fs.
fn block_size(image: &std::path::Path) -> usize {
    let out = std::process::Command::new("dumpe2fs")
        .arg("-h")
        .arg(image)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.strip_prefix("Block size:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("dumpe2fs prints the block size")
}
