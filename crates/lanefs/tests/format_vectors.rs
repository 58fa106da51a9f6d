//! Goal: the `disk` decoders agree byte for byte with what Debian's mkfs.ext4 writes.
//! Method: format a 4 KiB-block image with the default features, then check the
//! superblock, group descriptor, root inode and root directory checksums.

use lanefs::internals::disk::{
    self, dir, group::GroupDesc, inode::DiskInode, superblock::Superblock,
};
use std::process::Command;

#[path = "common/skips.rs"]
mod skips;

fn mkfs_image() -> Option<(tempfile::TempDir, Vec<u8>)> {
    let td = tempfile::tempdir().ok()?;
    let p = td.path().join("t.img");
    std::fs::File::create(&p).ok()?.set_len(64 << 20).ok()?;
    let ok = Command::new("mkfs.ext4")
        .args(["-q", "-F", "-b", "4096"])
        .arg(&p)
        .status()
        .ok()?;
    if !ok.success() {
        return None;
    }
    let bytes = std::fs::read(&p).ok()?;
    Some((td, bytes))
}

#[test]
fn checksums_match_mkfs_ext4() {
    let Some((_td, img)) = mkfs_image() else {
        skips::report("checksums_match_mkfs_ext4", "mkfs.ext4 not available");
        return;
    };
    let sb = Superblock::decode(&img[1024..2048], img.len() as u64).expect("superblock");
    assert_eq!(sb.block_size(), 4096);
    assert!(sb.metadata_csum());
    let seed = sb.csum_seed();
    let ds = sb.desc_size() as usize;
    let gd = GroupDesc {
        raw: img[4096..4096 + ds].to_vec(),
    };
    assert_eq!(gd.checksum(), gd.compute_checksum(seed, 0));
    // Root inode: inode 2 is the second slot of group 0's table.
    let isz = usize::from(sb.inode_size());
    let it = gd.inode_table() as usize * 4096;
    let ino = DiskInode::from_bytes(&img[it + isz..it + 2 * isz]);
    assert_eq!(ino.checksum(), ino.compute_checksum(seed, 2));
    // Root directory block.
    let root = disk::extent::decode_node(ino.iblock(), 2).expect("root extents");
    let disk::extent::Node::Leaf(ext) = root else {
        panic!("root is not a leaf")
    };
    let b = ext[0].pblk as usize * 4096;
    let blk = &img[b..b + 4096];
    let iseed = ino.csum_seed(seed, 2);
    dir::verify_leaf_csum(iseed, blk, ext[0].pblk).expect("dir csum");
    let names: Vec<_> = dir::parse_block(blk, true, 0)
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(
        names,
        vec![b".".to_vec(), b"..".to_vec(), b"lost+found".to_vec()]
    );
    // Bitmap checksums of group 0.
    let bb = gd.block_bitmap() as usize * 4096;
    let bpg = sb.clusters_per_group() as usize / 8;
    let c = disk::group::bitmap_csum(seed, &img[bb..bb + 4096], bpg, true);
    assert_eq!(c, gd.block_bitmap_csum());
    let ib = gd.inode_bitmap() as usize * 4096;
    let ipg = sb.inodes_per_group() as usize / 8;
    assert_eq!(
        disk::group::bitmap_csum(seed, &img[ib..ib + 4096], ipg, true),
        gd.inode_bitmap_csum()
    );
}
