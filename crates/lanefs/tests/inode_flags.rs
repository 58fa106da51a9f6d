//! Goal: the rules of `chattr +i` and `chattr +a` hold for a library user, as the kernel
//! holds them for ext4 (EPERM, even for root), not only behind the FUSE frontend.
//! Method: through `Fs` alone, flag a file (and a directory) immutable or append-only,
//! try every change the VFS and ext4 refuse (write, truncate, a write open, fallocate,
//! unlink, rename, link, setattr, xattrs, other flags) and the ones they allow (reads,
//! appends at the end, a read-only open, O_APPEND opens, clearing the flag); what was
//! refused changed nothing.

use lanefs::{
    mkfs, Error, FallocMode, Fs, InodeFlags, MemDevice, MountOptions, OpenMode, Owner, SetAttr,
    Timespec, XattrFlags, ROOT_INO,
};
use std::sync::Arc;

fn mount() -> Arc<Fs> {
    let dev = Arc::new(MemDevice::new(32 << 20));
    mkfs::format(&*dev, &mkfs::MkfsOptions::default()).unwrap();
    Fs::mount(dev, MountOptions::default()).unwrap()
}

const READ: OpenMode = OpenMode {
    write: false,
    append: false,
    truncate: false,
};
const WRITE: OpenMode = OpenMode {
    write: true,
    append: false,
    truncate: false,
};
const APPEND: OpenMode = OpenMode {
    write: true,
    append: true,
    truncate: false,
};

fn eperm<T: std::fmt::Debug>(r: lanefs::Result<T>, what: &str) {
    assert_eq!(r.map(|_| ()), Err(Error::NotPermitted), "{what}");
}

/// `chattr +FLAG` (`on`) or `-FLAG`, as chattr does it: the whole word read, changed
/// and written back.
fn chattr(fs: &Fs, ino: u64, flag: InodeFlags, on: bool) -> lanefs::Result<()> {
    let mut f = fs.get_flags(ino)?;
    f.set(flag, on);
    fs.set_flags(ino, f).map(|_| ())
}

fn read_all(fs: &Fs, ino: u64) -> Vec<u8> {
    let mut b = vec![0u8; fs.getattr(ino).unwrap().size as usize];
    let n = fs.read(ino, 0, &mut b).unwrap();
    b.truncate(n);
    b
}

#[test]
fn immutable_file_refuses_every_change() {
    let fs = mount();
    let o = Owner::default();
    let f = fs.create(ROOT_INO, b"f", 0o644, o).unwrap().ino;
    fs.write(f, 0, b"keep me").unwrap();
    fs.setxattr(f, b"user.a", b"1", XattrFlags::default())
        .unwrap();
    chattr(&fs, f, InodeFlags::IMMUTABLE, true).unwrap();
    let before = fs.getattr(f).unwrap();
    assert!(fs.get_flags(f).unwrap().contains(InodeFlags::IMMUTABLE));

    // Data: no write anywhere, no truncate, no fallocate.
    eperm(fs.write(f, 0, b"x"), "write");
    eperm(fs.write(f, 7, b"x"), "write at the end");
    eperm(fs.write_direct(f, 0, b"x"), "direct write");
    let trunc = SetAttr {
        size: Some(0),
        ..SetAttr::default()
    };
    eperm(fs.setattr(f, &trunc), "truncate");
    eperm(fs.fallocate(f, FallocMode::default(), 0, 4096), "fallocate");
    // Opens: reading only.
    fs.may_open(f, READ).unwrap();
    eperm(fs.may_open(f, WRITE), "write open");
    eperm(fs.may_open(f, APPEND), "O_APPEND open");
    let rdonly_trunc = OpenMode {
        truncate: true,
        ..READ
    };
    eperm(fs.may_open(f, rdonly_trunc), "O_RDONLY|O_TRUNC open");
    // Attributes: chmod, chown, utimes, touch; xattrs.
    let chmod = SetAttr {
        perm: Some(0o600),
        ..SetAttr::default()
    };
    eperm(fs.setattr(f, &chmod), "chmod");
    let chown = SetAttr {
        uid: Some(1),
        ..SetAttr::default()
    };
    eperm(fs.setattr(f, &chown), "chown");
    let utimes = SetAttr {
        mtime: Some(Timespec { sec: 1, nsec: 0 }),
        ..SetAttr::default()
    };
    eperm(fs.setattr(f, &utimes), "utimes");
    eperm(fs.set_times_now(f, true, true), "touch");
    eperm(
        fs.setxattr(f, b"user.b", b"2", XattrFlags::default()),
        "setxattr",
    );
    eperm(fs.removexattr(f, b"user.a"), "removexattr");
    // Names: no unlink, rename, new link; the flags themselves stay but for `i`.
    eperm(fs.unlink(ROOT_INO, b"f"), "unlink");
    eperm(fs.rename(ROOT_INO, b"f", ROOT_INO, b"g"), "rename");
    eperm(fs.link(f, ROOT_INO, b"h"), "link");
    eperm(
        fs.set_flags(f, fs.get_flags(f).unwrap() | InodeFlags::NODUMP),
        "another flag while immutable",
    );

    assert_eq!(
        fs.getattr(f).unwrap(),
        before,
        "a refused change changed it"
    );
    assert_eq!(read_all(&fs, f), b"keep me");
    assert_eq!(fs.lookup(ROOT_INO, b"f").unwrap().ino, f);
    assert_eq!(fs.lookup(ROOT_INO, b"g"), Err(Error::NotFound));
    assert_eq!(fs.lookup(ROOT_INO, b"h"), Err(Error::NotFound));

    // `chattr -i`: everything is allowed again.
    chattr(&fs, f, InodeFlags::IMMUTABLE, false).unwrap();
    fs.may_open(f, WRITE).unwrap();
    fs.write(f, 0, b"changed").unwrap();
    assert_eq!(read_all(&fs, f), b"changed");
    fs.release(f).unwrap();
    fs.unlink(ROOT_INO, b"f").unwrap();
    fs.unmount().unwrap();
}

#[test]
fn immutable_directory_keeps_its_entries() {
    let fs = mount();
    let o = Owner::default();
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, o).unwrap().ino;
    let f = fs.create(d, b"in", 0o644, o).unwrap().ino;
    fs.release(f).unwrap();
    chattr(&fs, d, InodeFlags::IMMUTABLE, true).unwrap();
    eperm(fs.create(d, b"new", 0o644, o), "create in it");
    eperm(fs.mkdir(d, b"sub", 0o755, o), "mkdir in it");
    eperm(fs.unlink(d, b"in"), "unlink in it");
    eperm(fs.rename(d, b"in", ROOT_INO, b"out"), "rename out of it");
    eperm(fs.link(f, d, b"again"), "link into it");
    eperm(fs.rmdir(ROOT_INO, b"d"), "rmdir it");
    // Its files themselves may change.
    fs.write(f, 0, b"data").unwrap();
    assert_eq!(fs.readdir(d, 0, 100).unwrap().len(), 3);
    chattr(&fs, d, InodeFlags::IMMUTABLE, false).unwrap();
    fs.unlink(d, b"in").unwrap();
    fs.rmdir(ROOT_INO, b"d").unwrap();
    fs.unmount().unwrap();
}

#[test]
fn append_only_file_takes_appends_only() {
    let fs = mount();
    let o = Owner::default();
    let f = fs.create(ROOT_INO, b"log", 0o644, o).unwrap().ino;
    fs.write(f, 0, b"one\n").unwrap();
    chattr(&fs, f, InodeFlags::APPEND, true).unwrap();

    // Opens: reading, and writing with O_APPEND without O_TRUNC.
    fs.may_open(f, READ).unwrap();
    fs.may_open(f, APPEND).unwrap();
    eperm(fs.may_open(f, WRITE), "write open without O_APPEND");
    let append_trunc = OpenMode {
        truncate: true,
        ..APPEND
    };
    eperm(fs.may_open(f, append_trunc), "O_APPEND|O_TRUNC open");

    // Data: at the end only.
    fs.write(f, 4, b"two\n").unwrap();
    eperm(fs.write(f, 0, b"ONE\n"), "overwrite");
    eperm(fs.write(f, 100, b"far"), "write past the end");
    let trunc = SetAttr {
        size: Some(0),
        ..SetAttr::default()
    };
    eperm(fs.setattr(f, &trunc), "truncate");
    let punch = FallocMode {
        punch_hole: true,
        keep_size: true,
        ..FallocMode::default()
    };
    eperm(fs.fallocate(f, punch, 0, 4096), "punch a hole");
    let zero = FallocMode {
        zero_range: true,
        ..FallocMode::default()
    };
    eperm(fs.fallocate(f, zero, 0, 4), "zero a range");
    let keep = FallocMode {
        keep_size: true,
        ..FallocMode::default()
    };
    fs.fallocate(f, keep, 0, 1 << 20).unwrap();

    // Names and attributes stay; touching the times to now is allowed.
    eperm(fs.unlink(ROOT_INO, b"log"), "unlink");
    eperm(fs.rename(ROOT_INO, b"log", ROOT_INO, b"old"), "rename");
    eperm(fs.link(f, ROOT_INO, b"again"), "link");
    let chmod = SetAttr {
        perm: Some(0o600),
        ..SetAttr::default()
    };
    eperm(fs.setattr(f, &chmod), "chmod");
    fs.set_times_now(f, true, true).unwrap();

    assert_eq!(read_all(&fs, f), b"one\ntwo\n");
    chattr(&fs, f, InodeFlags::APPEND, false).unwrap();
    fs.write(f, 0, b"ONE\n").unwrap();
    fs.release(f).unwrap();
    fs.unmount().unwrap();
}

#[test]
fn append_only_directory_gains_entries_only() {
    let fs = mount();
    let o = Owner::default();
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, o).unwrap().ino;
    let f = fs.create(d, b"a", 0o644, o).unwrap().ino;
    fs.release(f).unwrap();
    chattr(&fs, d, InodeFlags::APPEND, true).unwrap();
    let g = fs.create(d, b"b", 0o644, o).unwrap().ino;
    fs.release(g).unwrap();
    eperm(fs.unlink(d, b"a"), "unlink in it");
    eperm(fs.rename(d, b"a", d, b"c"), "rename in it");
    assert_eq!(fs.readdir(d, 0, 100).unwrap().len(), 4);
    fs.unmount().unwrap();
}

#[test]
fn flags_travel_as_raw_words() {
    let fs = mount();
    let f = fs
        .create(ROOT_INO, b"f", 0o644, Owner::default())
        .unwrap()
        .ino;
    // What FS_IOC_GETFLAGS reports of a new file: extents only.
    assert_eq!(fs.get_flags(f).unwrap(), InodeFlags::EXTENTS);
    // A bit with no name and no meaning is refused, as before, not dropped.
    let unknown = InodeFlags::from_bits_retain(0x0100_0000);
    assert!(matches!(
        fs.set_flags(f, unknown),
        Err(Error::NotSupported(_))
    ));
    let raw = (InodeFlags::EXTENTS | InodeFlags::NODUMP).bits();
    fs.set_flags(f, InodeFlags::from_bits_retain(raw)).unwrap();
    assert_eq!(fs.get_flags(f).unwrap().bits(), raw);
    fs.release(f).unwrap();
    fs.unmount().unwrap();
}
