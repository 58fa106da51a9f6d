//! Errors: what ext4 refuses (and that a refusal changes nothing), block-mapped and inline
//! files, a full disk.

use super::*;

pub(super) fn errno(r: lanefs::Result<()>) -> i32 {
    r.map_or_else(|e| e.errno(), |()| 0)
}

/// A new file `name` in the root directory.
pub(super) fn new_file(fs: &Fs, name: &str) -> Ino {
    let owner = Owner::default();
    fs.create(ROOT_INO, name.as_bytes(), 0o644, owner)
        .unwrap()
        .ino
}

/// Every refusal ext4 makes, each with its errno, and the file untouched after it
/// (bytes, size, times); then a success changes mtime and ctime.
#[test]
fn errors_are_ext4s_and_change_nothing() {
    use libc::{EFBIG, EINVAL, EISDIR, ENOENT, EPERM, EROFS};
    let (dev, fs) = mem_fs(32 << 20, 4096, "");
    let bs = 4096u64;
    let f = new_file(&fs, "f");
    let data = pattern(1, 0, 16 * bs as usize);
    fs.write(f, 0, &data).unwrap();
    let before = fs.getattr(f).unwrap();
    let max = ((1u64 << 32) - 1) * bs;
    // (what, collapse (else insert), offset, length, errno)
    let cases = [
        ("collapse len 0", true, 0, 0, EINVAL),
        ("collapse unaligned off", true, 100, bs, EINVAL),
        ("collapse unaligned len", true, 0, 100, EINVAL),
        ("collapse to the end", true, 8 * bs, 8 * bs, EINVAL),
        ("collapse past the end", true, 8 * bs, 9 * bs, EINVAL),
        ("collapse whole file", true, 0, 16 * bs, EINVAL),
        ("collapse past s_maxbytes", true, 0, max + bs, EFBIG),
        ("collapse wrapping", true, u64::MAX - bs + 1, bs, EFBIG),
        ("insert len 0", false, 0, 0, EINVAL),
        ("insert unaligned", false, bs, 100, EINVAL),
        ("insert at the end", false, 16 * bs, bs, EINVAL),
        ("insert past the end", false, 20 * bs, bs, EINVAL),
        (
            "insert past the largest file",
            false,
            0,
            max - 8 * bs,
            EFBIG,
        ),
        ("insert past s_maxbytes", false, bs, max, EFBIG),
        // ext4 checks alignment before the size: EINVAL, not EFBIG.
        (
            "insert unaligned, too big",
            false,
            100,
            max - 8 * bs,
            EINVAL,
        ),
    ];
    for (what, collapse, off, len, want) in cases {
        let r = if collapse {
            fs.collapse_range(f, off, len)
        } else {
            fs.insert_range(f, off, len)
        };
        assert_eq!(errno(r), want, "{what}");
    }
    assert_eq!(fs.getattr(f).unwrap(), before, "a refused shift changed it");
    same(&read_all(&fs, f), &data, "errors");

    // Flags, then kinds of file.
    let plain = fs.get_flags(f).unwrap();
    for flag in [FL_IMMUTABLE, FL_APPEND] {
        fs.set_flags(f, plain | lanefs::InodeFlags::from_bits_retain(flag))
            .unwrap();
        let a = fs.getattr(f).unwrap();
        assert_eq!(errno(fs.collapse_range(f, 0, bs)), EPERM, "flag {flag:#x}");
        assert_eq!(errno(fs.insert_range(f, 0, bs)), EPERM, "flag {flag:#x}");
        assert_eq!(fs.getattr(f).unwrap(), a);
        fs.set_flags(f, plain).unwrap();
    }
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, Owner::default()).unwrap();
    assert_eq!(errno(fs.collapse_range(d.ino, 0, bs)), EISDIR);
    assert_eq!(errno(fs.insert_range(d.ino, 0, bs)), EISDIR);
    let l = fs.symlink(ROOT_INO, b"l", b"f", Owner::default()).unwrap();
    assert_eq!(errno(fs.insert_range(l.ino, 0, bs)), EINVAL);
    assert_eq!(errno(fs.collapse_range(999_999, 0, bs)), ENOENT);

    // Blocks mapped past the end must still fit below the last logical block.
    let keep = FallocMode {
        keep_size: true,
        ..FallocMode::default()
    };
    fs.fallocate(f, keep, max - 2 * bs, bs).unwrap();
    let a = fs.getattr(f).unwrap();
    assert_eq!(errno(fs.insert_range(f, 0, 2 * bs)), EINVAL);
    assert_eq!(fs.getattr(f).unwrap(), a);
    std::thread::sleep(Duration::from_millis(5));
    fs.insert_range(f, 0, bs).unwrap();
    let b = fs.getattr(f).unwrap();
    assert_eq!(b.size, 17 * bs);
    assert!(b.mtime > a.mtime && b.ctime > a.ctime, "{a:?} -> {b:?}");
    assert_eq!(b.blocks, a.blocks, "an insert allocated or freed data");
    std::thread::sleep(Duration::from_millis(5));
    fs.collapse_range(f, 0, bs).unwrap();
    let c = fs.getattr(f).unwrap();
    assert!(c.mtime > b.mtime && c.ctime > b.ctime);
    assert_eq!(
        (c.size, c.blocks),
        (16 * bs, a.blocks),
        "a hole's collapse freed data"
    );
    same(&read_all(&fs, f), &data, "errors");
    fs.unmount().unwrap();
    assert_clean(&*dev, "errors");

    // A read-only mount changes nothing.
    let ro = MountOptions {
        read_only: true,
        ..opts()
    };
    let fs = Fs::mount(dev.clone(), ro).unwrap();
    assert_eq!(errno(fs.collapse_range(f, 0, bs)), EROFS);
    assert_eq!(errno(fs.insert_range(f, 0, bs)), EROFS);
}

/// Block-mapped files (an ext3 image): EOPNOTSUPP before any other check of ext4's own,
/// as ext4 answers (xfstests takes a collapse of (0, 1) failing so to mean "no support").
#[test]
fn block_mapped_files_are_not_supported() {
    let dev = Arc::new(MemDevice::new(32 << 20));
    let mk = MkfsOptions {
        fs_type: Some("ext3".into()),
        ..mkfs_opts(4096, "")
    };
    format(&*dev, &mk).unwrap();
    let fs = Fs::mount(dev.clone(), opts()).unwrap();
    let f = new_file(&fs, "f");
    fs.write(f, 0, &pattern(3, 0, 40000)).unwrap();
    for r in [
        fs.collapse_range(f, 0, 1),
        fs.collapse_range(f, 0, 4096),
        fs.insert_range(f, 0, 1),
        fs.insert_range(f, 4096, 4096),
    ] {
        assert!(matches!(r, Err(Error::NotSupported(_))), "{r:?}");
    }
    assert_eq!(read_all(&fs, f), pattern(3, 0, 40000));
    fs.unmount().unwrap();
    assert_clean(&*dev, "ext3");
}

/// An inline file moves to a block first, as ext4_fallocate converts it before the
/// mode's checks: an insert at 0 works on it, a refused collapse leaves it converted.
#[test]
fn inline_files_move_to_a_block_first() {
    let (dev, fs) = mem_fs(32 << 20, 4096, "inline_data");
    let f = new_file(&fs, "small");
    fs.write(f, 0, b"tiny file").unwrap();
    assert_eq!(
        fs.getattr(f).unwrap().blocks,
        0,
        "not inline: the test shows nothing"
    );
    fs.insert_range(f, 0, 4096).unwrap();
    let mut want = vec![0u8; 4096];
    want.extend_from_slice(b"tiny file");
    same(&read_all(&fs, f), &want, "full disk");
    let g = new_file(&fs, "other");
    fs.write(g, 0, b"inline too").unwrap();
    assert!(matches!(
        fs.collapse_range(g, 0, 4096),
        Err(Error::Invalid(_))
    ));
    assert_eq!(
        fs.getattr(g).unwrap().blocks,
        8,
        "ext4 converts before refusing"
    );
    assert_eq!(read_all(&fs, g), b"inline too");
    fs.unmount().unwrap();
    assert_clean(&*dev, "inline");
}

/// On a full disk, an insert that cuts an extent of a file whose four extents fill its
/// inode needs a leaf block: ENOSPC, and the file and the free counts are as before.
/// Once space is back it works. Mounted with no reserve, so that data takes every block
/// (with ext4's reserve the leaf comes from it, as ext4's no-fail splits do).
#[test]
fn full_disk_refuses_the_cut_whole() {
    let dev = Arc::new(MemDevice::new(16 << 20));
    format(&*dev, &mkfs_opts(4096, "")).unwrap();
    let no_reserve = MountOptions {
        reserved_blocks: Some(0),
        ..opts()
    };
    let fs = Fs::mount(dev.clone(), no_reserve).unwrap();
    let bs = 4096u64;
    let f = new_file(&fs, "four");
    for k in 0..4u64 {
        fs.write(f, 8 * k * bs, &pattern(k, 0, 4 * bs as usize))
            .unwrap();
    }
    let want = read_all(&fs, f);
    let fill = new_file(&fs, "fill");
    let chunk = vec![7u8; 256 << 10];
    let mut off = 0u64;
    loop {
        match fs.write(fill, off, &chunk) {
            Ok(_) => off += chunk.len() as u64,
            Err(Error::NoSpace) => break,
            Err(e) => panic!("fill: {e}"),
        }
    }
    // Single blocks until none is left.
    while fs.write(fill, off, &chunk[..bs as usize]).is_ok() {
        off += bs;
    }
    fs.sync().unwrap();
    let free = fs.statfs().unwrap().free_blocks;
    let a = fs.getattr(f).unwrap();
    assert!(matches!(
        fs.insert_range(f, 2 * bs, bs),
        Err(Error::NoSpace)
    ));
    assert!(matches!(fs.collapse_range(f, bs, bs), Err(Error::NoSpace)));
    assert_eq!(fs.getattr(f).unwrap(), a);
    same(&read_all(&fs, f), &want, "full disk");
    fs.sync().unwrap();
    assert_eq!(
        fs.statfs().unwrap().free_blocks,
        free,
        "a refused shift kept blocks"
    );
    fs.unmount().unwrap();
    assert_clean(&*dev, "full disk");

    let fs = Fs::mount(dev.clone(), opts()).unwrap();
    fs.unlink(ROOT_INO, b"fill").unwrap();
    fs.insert_range(f, 2 * bs, bs).unwrap();
    let mut m = want;
    m.splice(2 * bs as usize..2 * bs as usize, vec![0u8; bs as usize]);
    same(&read_all(&fs, f), &m, "rt");
    fs.unmount().unwrap();
    assert_clean(&*dev, "full disk, then room");
}
