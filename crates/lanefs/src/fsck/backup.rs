//! `fsck -b`: the check through a backup superblock and the descriptor table copy after
//! it, as `e2fsck -b` reads them when the primary superblock is damaged. The device is
//! seen through [`BackupView`], which serves the backup's bytes where the primary
//! superblock and descriptor table are, so the whole checker runs unchanged. Nothing is
//! written: restoring the primary from a backup (whose descriptor copy holds the counts
//! and flags of when it was written) takes e2fsck's full repair. As e2fsck does with a
//! backup, no group is read as uninitialised and every inode table as used to its end;
//! the counts and bitmap checksums of the copy are still those of when it was written,
//! and are reported as such.

use super::{check, FsckOptions, FsckReport};
use crate::dev::BlockDevice;
use crate::disk::geometry::Geometry;
use crate::disk::group::{GroupDesc, BG_BLOCK_UNINIT, BG_INODE_UNINIT};
use crate::disk::superblock::{self as sbm, Superblock};
use crate::error::{Error, Result};

/// A device whose primary superblock and descriptor table read as a backup's copies.
pub struct BackupView<'a> {
    inner: &'a dyn BlockDevice,
    /// (primary byte offset, the bytes read there instead).
    maps: Vec<(u64, Vec<u8>)>,
}

impl BlockDevice for BackupView<'_> {
    fn read_at(&self, off: u64, buf: &mut [u8]) -> Result<()> {
        self.inner.read_at(off, buf)?;
        let end = off + buf.len() as u64;
        for (at, bytes) in &self.maps {
            let (lo, hi) = ((*at).max(off), (at + bytes.len() as u64).min(end));
            if lo < hi {
                let dst = &mut buf[(lo - off) as usize..(hi - off) as usize];
                dst.copy_from_slice(&bytes[(lo - at) as usize..(hi - at) as usize]);
            }
        }
        Ok(())
    }
    fn write_at(&self, _off: u64, _buf: &[u8]) -> Result<()> {
        Err(Error::ReadOnly)
    }
    fn flush(&self) -> Result<()> {
        Ok(())
    }
    fn size(&self) -> u64 {
        self.inner.size()
    }
}

/// The backup superblock at block `block` of `block_size` bytes (each size from 1 KiB
/// to 64 KiB tried when `None`, as e2fsck -b tries them): the superblock and its block
/// size.
fn find_backup(
    dev: &dyn BlockDevice,
    block: u64,
    block_size: Option<u32>,
) -> Result<(Superblock, u32)> {
    let sizes: Vec<u32> = match block_size {
        Some(bs) => vec![bs],
        None => (10..=16).map(|l| 1u32 << l).collect(),
    };
    let mut last = None;
    for bs in sizes {
        let Some(off) = block.checked_mul(u64::from(bs)) else {
            continue;
        };
        if off + sbm::SB_SIZE as u64 > dev.size() {
            continue;
        }
        let mut raw = vec![0u8; sbm::SB_SIZE];
        dev.read_at(off, &mut raw)?;
        match Superblock::decode(&raw, dev.size()) {
            Ok(sb) if sb.block_size() == bs && block > 0 => return Ok((sb, bs)),
            Ok(_) => {}
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        Error::Invalid(format!("no superblock at block {block} for any block size"))
    }))
    .map_err(|e| match e {
        Error::Corrupt { detail, .. } | Error::NotExt4(detail) => Error::Invalid(format!(
            "no usable backup superblock at block {block}: {detail}"
        )),
        e => e,
    })
}

/// Check `dev` through the backup superblock at `block` (of `block_size` bytes, or each
/// size tried) and the descriptor table copy that follows it. Returns the report and the
/// group the backup belongs to.
pub fn check_backup(
    dev: &dyn BlockDevice,
    block: u64,
    block_size: Option<u32>,
    opts: &FsckOptions,
) -> Result<(FsckReport, u32)> {
    let (sb, bs) = find_backup(dev, block, block_size)?;
    let geo = Geometry::from_superblock(&sb);
    if geo.meta_bg {
        return Err(Error::Unsupported(
            "a backup of a meta_bg file system (its descriptors are spread over the groups): e2fsck -b reads it"
                .into(),
        ));
    }
    let bsz = u64::from(bs);
    let mut sb_bytes = vec![0u8; sbm::SB_SIZE];
    dev.read_at(block * bsz, &mut sb_bytes)?;
    let mut gdt = vec![0u8; geo.gdt_blocks as usize * bs as usize];
    dev.read_at((block + 1) * bsz, &mut gdt)?;
    // As e2fsck does with a backup: its descriptors are from when it was written, so no
    // group is taken as uninitialised and every inode table as in use up to its end.
    let ds = geo.desc_size as usize;
    debug_assert!(
        gdt.len() >= geo.groups as usize * ds,
        "table shorter than the groups"
    );
    for g in 0..geo.groups {
        let at = g as usize * ds;
        let mut d = GroupDesc {
            raw: gdt[at..at + ds].to_vec(),
        };
        d.set_flags(d.flags() & !(BG_BLOCK_UNINIT | BG_INODE_UNINIT));
        d.set_itable_unused(0);
        d.seal(geo.desc_csum, g);
        gdt[at..at + ds].copy_from_slice(&d.raw);
    }
    let maps = vec![(sbm::SB_OFFSET, sb_bytes), (geo.gdt_block(0) * bsz, gdt)];
    let view = BackupView { inner: dev, maps };
    let report = check(&view, opts)?;
    Ok((report, u32::from(sb.block_group_nr())))
}
