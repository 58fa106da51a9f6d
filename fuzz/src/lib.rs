//! What the fuzz targets share: base images of every shape lanefs and mke2fs make, built
//! once per process; the mutation scripts that change their metadata; and the reseal that
//! recomputes their checksums, so a mutation reaches the checks behind the checksums.
//!
//! An input to the image targets is a script: its first byte picks the shape (and, in its
//! top bit, whether checksums are left stale), the rest are edits. Each edit names a
//! metadata block of the base image (by index into its list of metadata blocks: the
//! blocks that are neither zero nor file data), an offset in it, and bytes to XOR, set or
//! add there. Small inputs thus change structures, not file contents.

use lanefs::internals::disk::reseal::reseal;
use lanefs::mkfs::{format, MkfsOptions};
use lanefs::{Fs, Ino, MemDevice, MountOptions, Owner, ROOT_INO};
use std::sync::{Arc, OnceLock};

/// The byte every file's data is written with: blocks wholly of it are data, not metadata.
pub const DATA: u8 = 0xD5;

/// A base image and what may be mutated in it.
pub struct Base {
    /// The image's bytes.
    pub bytes: Vec<u8>,
    /// Block size.
    pub bs: usize,
    /// Metadata blocks: neither all zero nor all file data.
    pub meta: Vec<u64>,
    /// The journal's blocks, (first, count), when it has one.
    pub journal: Option<(u64, u64)>,
}

/// One shape: mkfs options and whether to leave a journal to replay.
struct Shape {
    block_size: u32,
    fs_type: &'static str,
    features: &'static str,
}

const SHAPES: &[Shape] = &[
    Shape {
        block_size: 1024,
        fs_type: "ext4",
        features: "",
    },
    Shape {
        block_size: 2048,
        fs_type: "ext4",
        features: "",
    },
    Shape {
        block_size: 4096,
        fs_type: "ext4",
        features: "",
    },
    Shape {
        block_size: 1024,
        fs_type: "ext4",
        features: "inline_data",
    },
    Shape {
        block_size: 4096,
        fs_type: "ext4",
        features: "^metadata_csum,uninit_bg",
    },
    Shape {
        block_size: 1024,
        fs_type: "ext3",
        features: "",
    },
    Shape {
        block_size: 4096,
        fs_type: "ext2",
        features: "",
    },
    Shape {
        block_size: 1024,
        fs_type: "ext4",
        features: "meta_bg,^resize_inode",
    },
];

/// How many shapes there are.
pub fn shapes() -> usize {
    SHAPES.len()
}

/// A populated tree: an htree directory, a fragmented file with an extent tree block (or
/// indirect blocks), holes, preallocation past the end, symlinks fast and slow, xattrs in
/// the inode and in a block, hard links, a device node, a FIFO, small (inline) files.
fn populate(fs: &Fs) -> lanefs::Result<()> {
    let o = Owner::default();
    let d = fs.mkdir(ROOT_INO, b"dir", 0o755, o)?.ino;
    for i in 0..150 {
        let f = fs.create(
            d,
            format!("name-{i:03}-padding-the-entry").as_bytes(),
            0o644,
            o,
        )?;
        fs.release(f.ino)?;
    }
    let sub = fs.mkdir(d, b"sub", 0o700, o)?.ino;
    let f = fs.create(sub, b"frag", 0o644, o)?.ino;
    for k in 0..40u64 {
        fs.write(f, k * 2 * 4096 + 13, &[DATA; 3000])?;
    }
    let pre = lanefs::FallocMode {
        keep_size: true,
        ..Default::default()
    };
    // Block-mapped files (ext2, ext3) have no preallocation.
    let _ = fs.fallocate(f, pre, 1 << 20, 64 << 10);
    fs.release(f)?;
    let small = fs.create(ROOT_INO, b"small", 0o600, o)?.ino;
    fs.write(small, 0, &[DATA; 40])?;
    fs.setxattr(small, b"user.in", b"inode", Default::default())?;
    fs.setxattr(small, b"user.block", &[DATA; 600], Default::default())?;
    fs.release(small)?;
    fs.link(small, d, b"hardlink")?;
    fs.symlink(ROOT_INO, b"fast", b"dir/sub/frag", o)?;
    fs.symlink(ROOT_INO, b"slow", &[b'a'; 200], o)?;
    fs.mknod(ROOT_INO, b"fifo", 0o010644, 0, o)?;
    fs.mknod(ROOT_INO, b"chr", 0o020644, 0x0103, o)?;
    Ok(())
}

fn build(s: &Shape) -> Base {
    // 3,072 blocks, a third of them the smallest journal jbd2 allows (ext2: none).
    let dev = Arc::new(MemDevice::new(3072 * u64::from(s.block_size)));
    let opts = MkfsOptions {
        block_size: Some(s.block_size),
        fs_type: Some(s.fs_type.into()),
        features: s.features.into(),
        journal_blocks: (s.fs_type != "ext2").then_some(1024),
        ..MkfsOptions::default()
    };
    format(&*dev, &opts).expect("mkfs of a base shape");
    let fs = Fs::mount(dev.clone(), MountOptions::default()).expect("mount of a base shape");
    populate(&fs).expect("populating a base shape");
    fs.unmount().expect("unmount of a base shape");
    let bytes = dev.snapshot();
    let bs = s.block_size as usize;
    let meta = bytes
        .chunks(bs)
        .enumerate()
        .filter(|(_, b)| !b.iter().all(|&x| x == 0) && !b.iter().all(|&x| x == DATA))
        .map(|(i, _)| i as u64)
        .collect();
    let journal = journal_extent(&bytes, bs);
    Base {
        bytes,
        bs,
        meta,
        journal,
    }
}

/// The journal inode's first extent, read with the disk decoders.
fn journal_extent(img: &[u8], bs: usize) -> Option<(u64, u64)> {
    use lanefs::internals::disk::superblock::Superblock;
    use lanefs::internals::disk::{extent, geometry::Geometry, group::GroupDesc, inode::DiskInode};
    let sb = Superblock::decode(&img[1024..2048], img.len() as u64).ok()?;
    let j = sb.journal_inum();
    if j == 0 {
        return None;
    }
    let geo = Geometry::from_superblock(&sb);
    let grp = (j - 1) / geo.ipg;
    let dsz = geo.desc_size as usize;
    let at = geo.gdt_block(grp / geo.descs_per_block()) as usize * bs
        + (grp % geo.descs_per_block()) as usize * dsz;
    let it = GroupDesc {
        raw: img.get(at..at + dsz)?.to_vec(),
    }
    .inode_table() as usize;
    let isz = geo.inode_size as usize;
    let off = it * bs + ((j - 1) % geo.ipg) as usize * isz;
    let d = DiskInode::from_bytes(img.get(off..off + isz)?);
    match extent::decode_node(d.iblock(), 0).ok()? {
        extent::Node::Leaf(e) => e.first().map(|e| (e.pblk, u64::from(e.len))),
        extent::Node::Index(..) => None,
    }
}

/// The base image of shape `i` (mod the number of shapes), built on first use.
pub fn base(i: usize) -> &'static Base {
    static BASES: OnceLock<Vec<OnceLock<Base>>> = OnceLock::new();
    let all = BASES.get_or_init(|| SHAPES.iter().map(|_| OnceLock::new()).collect());
    let i = i % SHAPES.len();
    all[i].get_or_init(|| build(&SHAPES[i]))
}

/// Apply the edits of `script` to `img` (a copy of `b.bytes`) within the blocks `pick`
/// chooses from; at most 64 edits of at most 16 bytes each.
pub fn mutate(img: &mut [u8], b: &Base, blocks: &[u64], script: &[u8]) {
    if blocks.is_empty() {
        return;
    }
    let mut s = script;
    for _ in 0..64 {
        if s.len() < 5 {
            return;
        }
        let which = usize::from(u16::from_le_bytes([s[0], s[1]])) % blocks.len();
        let off = usize::from(u16::from_le_bytes([s[2], s[3]])) % b.bs;
        let op = s[4];
        let n = (usize::from(op >> 2) % 16 + 1).min(s.len() - 5);
        let bytes = &s[5..5 + n];
        s = &s[5 + n..];
        let start = blocks[which] as usize * b.bs + off;
        for (k, &v) in bytes.iter().enumerate() {
            let Some(x) = img.get_mut(start + k) else {
                break;
            };
            *x = match op & 3 {
                0 => *x ^ v,
                1 => v,
                2 => x.wrapping_add(v),
                _ => x.wrapping_sub(v),
            };
        }
    }
}

/// Shape `s` as a crash leaves it: mounted, changed (files written and fsynced, a name
/// removed, a directory renamed and fsynced), and its device taken while the changes are
/// committed to the journal but not written home. None for a shape without a journal.
pub fn crash_image(s: usize) -> Option<Base> {
    let b = base(s);
    b.journal?;
    let dev = Arc::new(MemDevice::from_vec(b.bytes.clone()));
    let fs = Fs::mount(dev.clone(), opts(false)).expect("mount a base shape");
    let o = Owner::default();
    for n in 0..3u8 {
        let f = fs
            .create(ROOT_INO, &[b'j', b'0' + n], 0o644, o)
            .expect("create")
            .ino;
        fs.write(f, 0, &[n; 5000]).expect("write");
        fs.fsync(f, false).expect("fsync");
        fs.release(f).expect("release");
    }
    fs.unlink(ROOT_INO, b"small").expect("unlink");
    fs.rename(ROOT_INO, b"dir", ROOT_INO, b"moved")
        .expect("rename");
    let d = fs.lookup(ROOT_INO, b"moved").expect("lookup").ino;
    fs.fsync(d, false).expect("fsync of a directory");
    let bytes = dev.snapshot();
    // The crash: this mount never writes again (no timer runs; it is never dropped).
    std::mem::forget(fs);
    Some(Base {
        bytes,
        bs: b.bs,
        meta: b.meta.clone(),
        journal: b.journal,
    })
}

/// An image from an input: the shape its first byte picks, its metadata blocks edited by
/// the rest, then resealed unless the first byte's top bit asks for stale checksums.
pub fn image(data: &[u8]) -> Option<Vec<u8>> {
    let (&first, script) = data.split_first()?;
    let b = base(usize::from(first & 0x7F));
    let mut img = b.bytes.clone();
    mutate(&mut img, b, &b.meta, script);
    if first & 0x80 == 0 {
        reseal(&mut img);
    }
    Some(img)
}

/// Read everything reachable from the root of a mounted image, within bounds: at most
/// 2,000 entries and 16 levels, 256 KiB of each file, every symlink, every xattr.
pub fn walk(fs: &Fs) {
    let mut stack: Vec<(Ino, u32)> = vec![(ROOT_INO, 0)];
    let mut seen = std::collections::HashSet::new();
    let mut budget = 2000usize;
    let mut buf = vec![0u8; 64 << 10];
    while let Some((dir, depth)) = stack.pop() {
        if !seen.insert(dir) || depth > 16 {
            continue;
        }
        let mut pos = 0;
        while let Ok(entries) = fs.readdir(dir, pos, 64) {
            let Some(last) = entries.last() else {
                break;
            };
            pos = last.next;
            for e in &entries {
                budget = budget.saturating_sub(1);
                if budget == 0 {
                    return;
                }
                if e.name == b"." || e.name == b".." {
                    continue;
                }
                let Ok(a) = fs.lookup(dir, &e.name) else {
                    continue;
                };
                let _ = fs.listxattr(a.ino).map(|names| {
                    for n in names {
                        let _ = fs.getxattr(a.ino, &n);
                    }
                });
                match a.kind {
                    lanefs::FileType::Directory => stack.push((a.ino, depth + 1)),
                    lanefs::FileType::Symlink => {
                        let _ = fs.readlink(a.ino);
                    }
                    lanefs::FileType::Regular => {
                        for k in 0..4u64 {
                            if fs.read(a.ino, k * buf.len() as u64, &mut buf).is_err() {
                                break;
                            }
                        }
                    }
                    _ => {}
                }
            }
        }
    }
}

/// Mount options for the targets: no background commit timer (each input is one short
/// life of a mount), as the tests use.
pub fn opts(read_only: bool) -> MountOptions {
    MountOptions {
        read_only,
        commit_interval: std::time::Duration::ZERO,
        ..MountOptions::default()
    }
}
