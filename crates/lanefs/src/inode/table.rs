//! Inodes in their table: reading an inode's bytes (checksum verified once per read of
//! its block) and writing them back with a fresh checksum.

use crate::buf::{Buf, BufCache};
use crate::disk::inode::DiskInode;
use crate::error::{Error, Result};
use crate::ialloc::InodeAllocator;
use crate::journal::Handle;
use std::sync::Arc;

/// Read inode `ino` from its table and verify its checksum (unless it was checked since
/// its block was read, or written here: [`crate::buf::Buf::record_checked`]).
pub fn read_disk_inode(ial: &InodeAllocator, bufs: &BufCache, ino: u64) -> Result<DiskInode> {
    Ok(read_disk_inode_in(ial, bufs, ino)?.0)
}

/// Inode `ino`'s bytes as its table block holds them now, unverified: for a field that
/// never changes once set (an EA inode's flag and type), read without taking the inode's
/// lock. Its checksum may be stale (a cached inode's later stores reach the block only at
/// commit), so nothing else read this way is to be trusted.
pub fn peek_disk_inode(ial: &InodeAllocator, bufs: &BufCache, ino: u64) -> Result<DiskInode> {
    let loc = ial.inode_loc(ino)?;
    let isz = ial.geo().inode_size as usize;
    let b = bufs.get(loc.blk)?;
    let r = b.read();
    Ok(DiskInode::from_bytes(&r[loc.off..loc.off + isz]))
}

/// [`read_disk_inode`], and the table block's buffer with the inode's offset in it (for
/// a write back without a second lookup, [`store_inode_at`]).
pub fn read_disk_inode_in(
    ial: &InodeAllocator,
    bufs: &BufCache,
    ino: u64,
) -> Result<(DiskInode, Arc<Buf>, usize)> {
    let loc = ial.inode_loc(ino)?;
    let geo = ial.geo();
    let b = bufs.get(loc.blk)?;
    // An inode checked since its block was read, or written here with its checksum, is
    // not checked again (a large directory's unlinks read back inodes the cache evicted).
    // Mark and bytes are read, checked and marked under one guard: a write that drops
    // the marks cannot come between.
    let rec = loc.off / geo.inode_size as usize;
    let d = {
        let r = b.read();
        let d = DiskInode::from_bytes(&r[loc.off..loc.off + geo.inode_size as usize]);
        if geo.csum && !b.record_checked(rec) {
            if d.checksum() != d.compute_checksum(geo.seed, ino as u32) {
                return Err(Error::corrupt("inode", ino, "checksum mismatch"));
            }
            b.set_record_checked(rec);
        }
        d
    };
    let extra = usize::from(d.extra_isize());
    if d.raw.len() > 128 && (128 + extra > d.raw.len() || extra % 4 != 0) {
        return Err(Error::corrupt(
            "inode",
            ino,
            format!("extra_isize {extra} invalid"),
        ));
    }
    Ok((d, b, loc.off))
}

/// Write the inode's bytes (with a fresh checksum) into its table block. With
/// `keep_dtime`, the `dtime` already on disk is kept (an orphan's list link).
pub fn store_inode(
    ial: &InodeAllocator,
    bufs: &BufCache,
    h: &Handle,
    ino: u64,
    d: &mut DiskInode,
    keep_dtime: bool,
) -> Result<()> {
    let loc = ial.inode_loc(ino)?;
    let b = bufs.get(loc.blk)?;
    store_inode_at(ial, h, &b, loc.off, ino, d, keep_dtime);
    Ok(())
}

/// [`store_inode`] into `b`, the inode's table block, at `off` (as
/// [`read_disk_inode_in`] found them).
pub fn store_inode_at(
    ial: &InodeAllocator,
    h: &Handle,
    b: &Arc<Buf>,
    off: usize,
    ino: u64,
    d: &mut DiskInode,
    keep_dtime: bool,
) {
    let geo = ial.geo();
    debug_assert_eq!(
        ial.inode_loc(ino).ok().map(|l| (l.blk, l.off)),
        Some((b.blk, off))
    );
    // A record of another size would overwrite the next inode of the table block (or
    // leave part of this one stale).
    assert_eq!(
        d.raw.len(),
        geo.inode_size as usize,
        "inode {ino}: bytes of another inode size"
    );
    {
        let mut w = b.write_records();
        if keep_dtime {
            d.set_dtime(crate::disk::le32(&w, off + crate::disk::inode::I_DTIME));
        }
        if geo.csum {
            d.update_checksum(geo.seed, ino as u32);
        }
        w[off..off + d.raw.len()].copy_from_slice(&d.raw);
        b.set_record_checked(off / d.raw.len());
    }
    h.dirty(b);
}
