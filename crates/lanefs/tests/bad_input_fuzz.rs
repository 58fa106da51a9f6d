//! Goal: every input the fuzz targets (`fuzz/`) found to crash, hang or exhaust memory
//! stays fixed: each is rebuilt here as an image (or bytes) and must give a named error.
//! `bad_input.rs` holds the hand-written corruptions; this file, what the fuzzers found.
//! Method: a `lanefs mkfs` image in memory, the structure edited as the finding had it,
//! checksums resealed (`disk::reseal`), then mounted and checked.

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
