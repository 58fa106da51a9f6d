//! Goal: `disk::reseal` recomputes every checksum an image carries, so the fuzz targets'
//! mutations reach the checks behind the checksums.
//! Method: a populated metadata_csum image (an htree directory, a file with an extent
//! tree block, xattr blocks, a journal) at 1 KiB and 4 KiB blocks; every inode's mtime
//! changed and every checksum field (superblock, descriptors, bitmaps, inodes, directory
//! tails and htree tails, extent tails, xattr blocks, the journal superblock) overwritten
//! with garbage; after `reseal`, `e2fsck -fn` and lanefs fsck must find the image clean.

mod common;

use lanefs::internals::disk::{self, reseal::reseal};
use lanefs::mkfs::{format, MkfsOptions};
use lanefs::{FallocMode, Fs, MemDevice, MountOptions, Owner, ROOT_INO};
use std::sync::Arc;

/// A populated image's bytes.
fn populated(block_size: u32) -> Vec<u8> {
    let dev = Arc::new(MemDevice::new(32 << 20));
    let o = MkfsOptions {
        block_size: Some(block_size),
        ..MkfsOptions::default()
    };
    format(&*dev, &o).unwrap();
    let fs = Fs::mount(dev.clone(), MountOptions::default()).unwrap();
    let own = Owner::default();
    let d = fs.mkdir(ROOT_INO, b"big", 0o755, own).unwrap().ino;
    for i in 0..400 {
        let f = fs
            .create(d, format!("entry-{i:04}").as_bytes(), 0o644, own)
            .unwrap();
        fs.release(f.ino).unwrap();
    }
    let f = fs.create(ROOT_INO, b"frag", 0o644, own).unwrap().ino;
    // Every other block: more extents than the inode holds, so a tree block.
    for k in 0..300u64 {
        fs.write(f, k * 2 * u64::from(block_size), &[7u8; 100])
            .unwrap();
    }
    let mode = FallocMode::default();
    fs.fallocate(f, mode, 4 << 20, 1 << 20).unwrap();
    fs.release(f).unwrap();
    for n in 0..3 {
        let x = fs
            .create(ROOT_INO, format!("x{n}").as_bytes(), 0o644, own)
            .unwrap()
            .ino;
        fs.setxattr(x, b"user.big", &vec![n as u8; 700], Default::default())
            .unwrap();
        fs.release(x).unwrap();
    }
    fs.unmount().unwrap();
    dev.snapshot()
}

/// Overwrite every checksum `img` carries with garbage, and change every inode's mtime.
/// Returns how many directory leaves, extent blocks, xattr blocks and journal
/// superblocks it spoiled.
fn spoil(img: &mut [u8]) -> [usize; 4] {
    let mut hit = [0; 4];
    let sb = disk::superblock::Superblock::decode(&img[1024..2048], img.len() as u64).unwrap();
    let geo = disk::geometry::Geometry::from_superblock(&sb);
    let bs = geo.bs as usize;
    // The superblock's own checksum.
    img[1024 + 0x3FC..1024 + 0x400].copy_from_slice(&[0xAB; 4]);
    let dsz = geo.desc_size as usize;
    for g in 0..geo.groups {
        let loc = geo.gdt_block(g / geo.descs_per_block()) as usize * bs;
        let off = loc + (g % geo.descs_per_block()) as usize * dsz;
        let d = disk::group::GroupDesc {
            raw: img[off..off + dsz].to_vec(),
        };
        // Descriptor, block bitmap and inode bitmap checksums (lo and hi halves).
        for (at, n) in [(0x1E, 2), (0x18, 2), (0x1A, 2), (0x38, 2), (0x3A, 2)] {
            if at + n <= dsz {
                img[off + at..off + at + n].fill(0x5A);
            }
        }
        let it = d.inode_table() as usize * bs;
        let isz = geo.inode_size as usize;
        for i in 0..geo.ipg as usize {
            let s = &mut img[it + i * isz..it + (i + 1) * isz];
            if s.iter().any(|&b| b != 0) && s[0x1A] != 0 {
                // i_mtime, and the checksum's low half.
                s[0x10] ^= 0x01;
                s[0x7C] ^= 0xFF;
            }
        }
    }
    for b in img.chunks_mut(bs) {
        if disk::dir::has_tail(b) {
            let t = bs - 4;
            b[t..].fill(0x77);
            hit[0] += 1;
        } else if disk::le16(b, 0) == 0xF30A {
            // An extent tree block (the data written here is all 7s, never this magic).
            let off = 12 + 12 * usize::from(disk::le16(b, 4));
            if off + 4 <= bs {
                b[off..off + 4].fill(0x66);
                hit[1] += 1;
            }
        } else if disk::le32(b, 0) == disk::xattr::MAGIC {
            b[16..20].fill(0x55);
            hit[2] += 1;
        } else if disk::le32(b, 0) == 0xC03B_3998u32.swap_bytes()
            && matches!(u32::from_be_bytes(b[4..8].try_into().unwrap()), 3 | 4)
        {
            // The journal superblock (big-endian magic): its checksum at 0xFC.
            b[0xFC..0x100].fill(0x44);
            hit[3] += 1;
        }
    }
    hit
}

#[test]
fn reseal_restores_every_checksum() {
    let test = "reseal_restores_every_checksum";
    if !common::require_tools(test, &["e2fsck"]) {
        return;
    }
    let td = tempfile::tempdir().unwrap();
    for bs in [1024, 4096] {
        let mut img = populated(bs);
        let hit = spoil(&mut img);
        assert!(hit.iter().all(|&n| n > 0), "{bs}: spoiled {hit:?}");
        let p = td.path().join(format!("spoiled-{bs}.img"));
        std::fs::write(&p, &img).unwrap();
        assert!(
            common::e2fsck(&p).0 != 0,
            "{bs}: the spoiled image should fail e2fsck"
        );
        assert!(reseal(&mut img));
        std::fs::write(&p, &img).unwrap();
        common::assert_fsck_clean(&p);
        common::lanefs_fsck(&p).unwrap();
    }
}

#[test]
fn reseal_of_garbage_neither_panics_nor_loops() {
    // Bounded on anything: random bytes, a superblock over random bytes, an empty slice.
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for round in 0..20 {
        let mut img = vec![0u8; 1 << 20];
        for b in img.iter_mut() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = x as u8;
        }
        if round % 2 == 0 {
            let good = populated(1024);
            img[..4096].copy_from_slice(&good[..4096]);
        }
        let _ = reseal(&mut img);
    }
    assert!(!reseal(&mut []));
}
