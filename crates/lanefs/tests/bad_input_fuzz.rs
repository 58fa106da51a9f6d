//! Goal: every input the fuzz targets (`fuzz/`) found to crash, hang or exhaust memory
//! stays fixed: each is rebuilt here as an image (or bytes) and must give a named error.
//! `bad_input/` holds the hand-written corruptions; this file, what the fuzzers found.
//! Method: a `lanefs mkfs` image in memory, the structure edited as the finding had it,
//! checksums resealed (`disk::reseal`), then mounted and checked.

mod common;

use lanefs::internals::disk::{self, reseal::reseal, superblock::Superblock};
use lanefs::mkfs::{format, MkfsOptions};
use lanefs::{fsck, Error, Fs, MemDevice, MountOptions};
use std::sync::Arc;

fn image() -> Vec<u8> {
    let dev = MemDevice::new(8 << 20);
    format(&dev, &MkfsOptions::default()).unwrap();
    dev.snapshot()
}

/// The journal superblock's block, found through the journal inode's first extent.
fn journal_sb_block(img: &[u8]) -> usize {
    let sb = Superblock::decode(&img[1024..2048], img.len() as u64).unwrap();
    let geo = disk::geometry::Geometry::from_superblock(&sb);
    let bs = geo.bs as usize;
    let at = geo.gdt_block(0) as usize * bs;
    let desc = disk::group::GroupDesc {
        raw: img[at..at + geo.desc_size as usize].to_vec(),
    };
    let isz = geo.inode_size as usize;
    let off = desc.inode_table() as usize * bs + 7 * isz;
    let d = disk::inode::DiskInode::from_bytes(&img[off..off + isz]);
    match disk::extent::decode_node(d.iblock(), 0).unwrap() {
        disk::extent::Node::Leaf(e) => e[0].pblk as usize * bs,
        other => panic!("journal root {other:?}"),
    }
}

/// decode_jbd2: a journal superblock whose first log block is near 2^32 overflowed the
/// check of the log area (`first + 2 >= maxlen`); it is a named corruption.
#[test]
fn a_journal_log_starting_near_the_top_of_u32_is_named() {
    let mut img = image();
    let j = journal_sb_block(&img);
    // s_first, big-endian at 0x14.
    img[j + 0x14..j + 0x18].copy_from_slice(&u32::MAX.to_be_bytes());
    // The superblock says the journal needs recovery, so the log is read at mount.
    let sb_flags = 1024 + 0x60;
    let incompat = u32::from_le_bytes(img[sb_flags..sb_flags + 4].try_into().unwrap());
    img[sb_flags..sb_flags + 4].copy_from_slice(&(incompat | 0x4).to_le_bytes());
    assert!(reseal(&mut img));
    let dev = Arc::new(MemDevice::from_vec(img));
    match Fs::mount(dev.clone(), MountOptions::default()) {
        Err(Error::Corrupt { what, detail, .. }) => {
            assert!(what.contains("journal"), "{what}: {detail}");
        }
        Err(e) => panic!("unexpected error: {e}"),
        Ok(_) => panic!("mounted a journal whose log area is invalid"),
    }
    // fsck names it too, without a panic.
    let _ = fsck::check(&*dev, &fsck::FsckOptions::default());
}

/// decode_superblock: a first data block past the end of the file system (or above 1)
/// left group 0 starting beyond the last block; decode refuses it, as ext4 does.
#[test]
fn a_first_data_block_beyond_the_blocks_is_refused() {
    let img = image();
    for fdb in [2u32, 7, u32::MAX] {
        let mut sb = Superblock::decode(&img[1024..2048], img.len() as u64).unwrap();
        sb.set_first_data_block(fdb);
        sb.update_checksum();
        match Superblock::decode(&sb.raw[..], img.len() as u64) {
            Err(Error::Corrupt { detail, .. }) => {
                assert!(detail.contains("first data block"), "{detail}")
            }
            other => panic!("first data block {fdb}: {other:?}"),
        }
    }
}

/// The byte offset of inode `ino`'s slot in `img`.
fn inode_offset(img: &[u8], ino: u64) -> usize {
    let sb = Superblock::decode(&img[1024..2048], img.len() as u64).unwrap();
    let geo = disk::geometry::Geometry::from_superblock(&sb);
    let bs = geo.bs as usize;
    let grp = ((ino - 1) / u64::from(geo.ipg)) as u32;
    let at = geo.gdt_block(grp / geo.descs_per_block()) as usize * bs
        + (grp % geo.descs_per_block()) as usize * geo.desc_size as usize;
    let desc = disk::group::GroupDesc {
        raw: img[at..at + geo.desc_size as usize].to_vec(),
    };
    let isz = geo.inode_size as usize;
    desc.inode_table() as usize * bs + ((ino - 1) % u64::from(geo.ipg)) as usize * isz
}

/// An extent node header: magic, entries, max, depth.
fn header(b: &mut [u8], entries: u16, max: u16, depth: u16) {
    b[0..2].copy_from_slice(&0xF30Au16.to_le_bytes());
    b[2..4].copy_from_slice(&entries.to_le_bytes());
    b[4..6].copy_from_slice(&max.to_le_bytes());
    b[6..8].copy_from_slice(&depth.to_le_bytes());
}

/// Audit R1: an extent index whose every entry names one child, at every level, would
/// list 340^3 extents from three blocks (3.8 GB); the walk refuses extents out of logical
/// order before keeping them, so it fails at the second visit of the shared leaf.
#[test]
fn an_extent_tree_fanning_out_to_one_leaf_is_refused_at_once() {
    let dev = Arc::new(MemDevice::new(32 << 20));
    format(&*dev, &MkfsOptions::default()).unwrap();
    let fs = Fs::mount(dev.clone(), MountOptions::default()).unwrap();
    let o = lanefs::Owner::default();
    let f = fs.create(lanefs::ROOT_INO, b"f", 0o644, o).unwrap().ino;
    fs.write(f, 0, b"data").unwrap();
    fs.release(f).unwrap();
    fs.unmount().unwrap();
    let mut img = dev.snapshot();
    let bs = 4096;
    let nblocks = img.len() / bs;
    let (a, b, c, d) = (nblocks - 10, nblocks - 9, nblocks - 8, nblocks - 7);
    for (blk, depth, child) in [(a, 2u16, b), (b, 1, c)] {
        let x = &mut img[blk * bs..(blk + 1) * bs];
        x.fill(0);
        header(x, 340, 340, depth);
        for i in 0..340usize {
            let e = &mut x[12 + 12 * i..24 + 12 * i];
            e[0..4].copy_from_slice(&(i as u32).to_le_bytes());
            e[4..8].copy_from_slice(&(child as u32).to_le_bytes());
        }
    }
    let x = &mut img[c * bs..(c + 1) * bs];
    x.fill(0);
    header(x, 340, 340, 0);
    for i in 0..340usize {
        let e = &mut x[12 + 12 * i..24 + 12 * i];
        e[0..4].copy_from_slice(&(i as u32).to_le_bytes());
        e[4..6].copy_from_slice(&1u16.to_le_bytes());
        e[8..12].copy_from_slice(&(d as u32).to_le_bytes());
    }
    let off = inode_offset(&img, f);
    let ib = &mut img[off + 0x28..off + 0x28 + 60];
    ib.fill(0);
    header(ib, 4, 4, 3);
    for i in 0..4usize {
        let e = &mut ib[12 + 12 * i..24 + 12 * i];
        e[0..4].copy_from_slice(&(i as u32 * 1000).to_le_bytes());
        e[4..8].copy_from_slice(&(a as u32).to_le_bytes());
    }
    assert!(reseal(&mut img));
    let fs = Fs::mount(Arc::new(MemDevice::from_vec(img)), MountOptions::default()).unwrap();
    let start = std::time::Instant::now();
    let mut buf = [0u8; 16];
    match fs.read(f, 0, &mut buf) {
        Err(Error::Corrupt { detail, .. }) => assert!(detail.contains("overlapping"), "{detail}"),
        other => panic!("read of a fanned-out tree: {other:?}"),
    }
    assert!(start.elapsed().as_secs() < 5, "took {:?}", start.elapsed());
}

/// Audit R2: an htree index naming one block in every entry would have readdir list that
/// block's entries once per naming (10^8 pairs from two blocks at 4 KiB); a block named
/// twice is a corruption, found before anything is listed.
#[test]
fn an_htree_naming_one_block_twice_is_refused() {
    let dev = Arc::new(MemDevice::new(32 << 20));
    format(&*dev, &MkfsOptions::default()).unwrap();
    let fs = Fs::mount(dev.clone(), MountOptions::default()).unwrap();
    let o = lanefs::Owner::default();
    let d = fs.mkdir(lanefs::ROOT_INO, b"d", 0o755, o).unwrap().ino;
    for i in 0..300 {
        let name = format!("a-name-long-enough-to-fill-blocks-{i:04}");
        let f = fs.create(d, name.as_bytes(), 0o644, o).unwrap().ino;
        fs.release(f).unwrap();
    }
    fs.unmount().unwrap();
    let mut img = dev.snapshot();
    let off = inode_offset(&img, d);
    let inode = disk::inode::DiskInode::from_bytes(&img[off..off + 256]);
    assert!(inode.flags() & disk::inode::FL_INDEX != 0, "d is an htree");
    let root = match disk::extent::decode_node(inode.iblock(), d).unwrap() {
        disk::extent::Node::Leaf(e) => e[0].pblk as usize * 4096,
        other => panic!("{other:?}"),
    };
    let b = &mut img[root..root + 4096];
    // Root info: no index levels; entries: block 1 for hashes 0, 2 and 4.
    b[0x1E] = 0;
    b[0x22..0x24].copy_from_slice(&3u16.to_le_bytes());
    b[0x24..0x28].copy_from_slice(&1u32.to_le_bytes());
    for (i, h) in [2u32, 4].into_iter().enumerate() {
        let e = 0x28 + 8 * i;
        b[e..e + 4].copy_from_slice(&h.to_le_bytes());
        b[e + 4..e + 8].copy_from_slice(&1u32.to_le_bytes());
    }
    assert!(reseal(&mut img));
    let fs = Fs::mount(Arc::new(MemDevice::from_vec(img)), MountOptions::default()).unwrap();
    match fs.readdir(d, 0, 1000) {
        Err(Error::Corrupt { detail, .. }) => assert!(detail.contains("named twice"), "{detail}"),
        other => panic!("readdir of a fanned-out htree: {other:?}"),
    }
}

/// Run `f` on its own thread; panics if it does not finish within 20 s (a deadlock).
fn within_20s<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(std::time::Duration::from_secs(20))
        .unwrap_or_else(|_| panic!("{what}: no answer in 20 s (a deadlock?)"))
}

/// Audit R4: an attribute whose EA inode is its own owner made unlink, chmod and reads
/// re-take the owner's lock (a deadlock), and one naming the directory an unlink holds
/// did the same; every reference is checked against the EA inode's table bytes first.
#[test]
fn an_ea_inode_reference_to_its_owner_or_a_directory_is_refused() {
    let test = "an_ea_inode_reference_to_its_owner_or_a_directory_is_refused";
    if !common::require_tools(test, &["mkfs.ext4"]) {
        return;
    }
    let td = tempfile::tempdir().unwrap();
    // lanefs mkfs does not make ea_inode images; mke2fs does.
    let made = common::mkfs_image_args(td.path(), "ea.img", 32 << 20, &["-O", "ea_inode"]);
    let fresh = std::fs::read(made).unwrap();
    for target in ["self", "parent"] {
        let dev = Arc::new(MemDevice::from_vec(fresh.clone()));
        let fs = Fs::mount(dev.clone(), MountOptions::default()).unwrap();
        let o = lanefs::Owner::default();
        let d = fs.mkdir(lanefs::ROOT_INO, b"d", 0o755, o).unwrap().ino;
        let f = fs.create(d, b"f", 0o644, o).unwrap().ino;
        fs.setxattr(f, b"user.big", &vec![7u8; 9000], Default::default())
            .unwrap();
        fs.release(f).unwrap();
        fs.unmount().unwrap();
        let mut img = dev.snapshot();
        let off = inode_offset(&img, f);
        let extra = usize::from(u16::from_le_bytes([img[off + 128], img[off + 129]]));
        let body = off + 128 + extra;
        assert_eq!(&img[body..body + 4], &0xEA02_0000u32.to_le_bytes());
        let inum = &mut img[body + 4 + 4..body + 4 + 8];
        assert_ne!(inum, &[0; 4], "the value is in an EA inode");
        let to = if target == "self" { f } else { d } as u32;
        inum.copy_from_slice(&to.to_le_bytes());
        assert!(reseal(&mut img));
        let fs = Fs::mount(Arc::new(MemDevice::from_vec(img)), MountOptions::default()).unwrap();
        let fs2 = fs.clone();
        let read = within_20s("getxattr", move || fs2.getxattr(f, b"user.big"));
        assert!(
            matches!(read, Err(Error::Corrupt { .. })),
            "{target}: {read:?}"
        );
        let fs2 = fs.clone();
        let gone = within_20s("unlink", move || fs2.unlink(d, b"f"));
        assert!(
            matches!(gone, Err(Error::Corrupt { .. })),
            "{target}: {gone:?}"
        );
    }
}

/// Audit R7: xattr values that overlap the entry table (every entry's value spanning the
/// whole block made each read copy area x entries bytes); a value must start past the
/// table's end, as the kernel's check_xattrs requires.
#[test]
fn xattr_values_overlapping_the_entry_table_are_refused() {
    let block = |voff: u16| {
        let mut b = vec![0u8; 1024];
        b[0..4].copy_from_slice(&disk::xattr::MAGIC.to_le_bytes());
        b[4..8].copy_from_slice(&1u32.to_le_bytes()); // refcount
        b[8..12].copy_from_slice(&1u32.to_le_bytes()); // h_blocks
        let e = &mut b[32..52];
        e[0] = 1; // name_len
        e[1] = 1; // user.
        e[2..4].copy_from_slice(&voff.to_le_bytes());
        e[8..12].copy_from_slice(&16u32.to_le_bytes()); // value size
        e[16] = b'a';
        b
    };
    assert!(disk::xattr::decode_block(&block(1000), 9, None).is_ok());
    for voff in [0u16, 32, 40] {
        match disk::xattr::decode_block(&block(voff), 9, None) {
            Err(Error::Corrupt { detail, .. }) => assert!(detail.contains("overlaps"), "{detail}"),
            other => panic!("value at {voff}: {other:?}"),
        }
    }
}

/// Audit: a group count past 2^32 (64bit, one block per group) was truncated, and a
/// block past the last truncated group indexed out of range; decode refuses it.
#[test]
fn more_than_2_to_the_32_groups_are_refused() {
    let img = image();
    let mut sb = Superblock::decode(&img[1024..2048], img.len() as u64).unwrap();
    let blocks = (1u64 << 32) + (1 << 16);
    sb.set_blocks_count(blocks);
    sb.set_blocks_per_group(1);
    sb.set_feature_incompat(sb.feature_incompat() | 0x80); // 64bit
    sb.update_checksum();
    match Superblock::decode(&sb.raw[..], blocks * 4096) {
        Err(Error::Corrupt { detail, .. }) => {
            assert!(detail.contains("more than 2^32"), "{detail}")
        }
        other => panic!("{other:?}"),
    }
}

/// Audit R8: a journal inode mapping one device block many times made the log as long as
/// its map (up to 2^32 blocks), and an uncommitted tail of revoke blocks was kept whole;
/// the journal's blocks must be distinct device blocks.
#[test]
fn a_journal_mapping_one_block_twice_is_refused() {
    let mut img = image();
    let off = inode_offset(&img, 8);
    let ib = off + 0x28;
    // The journal's root: one leaf extent (lblk 0, len L, start P); a second one after it
    // maps the same blocks again.
    assert_eq!(
        u16::from_le_bytes([img[ib + 2], img[ib + 3]]),
        1,
        "one extent"
    );
    let first: Vec<u8> = img[ib + 12..ib + 24].to_vec();
    let len = u16::from_le_bytes([first[4], first[5]]);
    let mut second = first.clone();
    second[0..4].copy_from_slice(&u32::from(len).to_le_bytes());
    img[ib + 24..ib + 36].copy_from_slice(&second);
    img[ib + 2..ib + 4].copy_from_slice(&2u16.to_le_bytes());
    assert!(reseal(&mut img));
    match Fs::mount(Arc::new(MemDevice::from_vec(img)), MountOptions::default()) {
        Err(Error::Corrupt { detail, .. }) => {
            assert!(detail.contains("one device block"), "{detail}")
        }
        Err(e) => panic!("unexpected error: {e}"),
        Ok(_) => panic!("mounted a journal mapping one block twice"),
    }
}

/// Audit R3: a linear directory whose extents name its blocks many times listed those
/// entries once per naming on every readdir (gigabytes from a few blocks); a directory's
/// blocks must be distinct device blocks.
#[test]
fn a_directory_mapping_one_block_twice_is_refused() {
    let dev = Arc::new(MemDevice::new(32 << 20));
    format(&*dev, &MkfsOptions::default()).unwrap();
    let fs = Fs::mount(dev.clone(), MountOptions::default()).unwrap();
    let o = lanefs::Owner::default();
    let d = fs.mkdir(lanefs::ROOT_INO, b"d", 0o755, o).unwrap().ino;
    let f = fs.create(d, b"f", 0o644, o).unwrap().ino;
    fs.release(f).unwrap();
    fs.unmount().unwrap();
    let mut img = dev.snapshot();
    let off = inode_offset(&img, d);
    let ib = off + 0x28;
    assert_eq!(
        u16::from_le_bytes([img[ib + 2], img[ib + 3]]),
        1,
        "one extent"
    );
    let mut second: Vec<u8> = img[ib + 12..ib + 24].to_vec();
    second[0..4].copy_from_slice(&1u32.to_le_bytes());
    img[ib + 24..ib + 36].copy_from_slice(&second);
    img[ib + 2..ib + 4].copy_from_slice(&2u16.to_le_bytes());
    // i_size: two blocks.
    img[off + 4..off + 8].copy_from_slice(&8192u32.to_le_bytes());
    assert!(reseal(&mut img));
    let fs = Fs::mount(Arc::new(MemDevice::from_vec(img)), MountOptions::default()).unwrap();
    match fs.readdir(d, 0, 100) {
        Err(Error::Corrupt { detail, .. }) => assert!(detail.contains("mapped twice"), "{detail}"),
        other => panic!("readdir: {other:?}"),
    }
}
