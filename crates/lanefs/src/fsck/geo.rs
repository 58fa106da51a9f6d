//! Geometry derived from a validated superblock, and the raw reads it allows (shared with `info`).

use super::*;

/// The geometry of a superblock that passed [`Superblock::decode`]'s checks, refused when
/// the checker cannot walk it safely; an error means the superblock cannot be used at all.
pub(crate) fn geometry(sb: &Superblock, dev_size: u64) -> Result<Geometry> {
    check_layout(sb)?;
    let geo = Geometry::from_superblock(sb);
    debug_assert!(geo.cluster_ratio == 1, "bigalloc refused by check_layout");
    validate(&geo, dev_size)?;
    Ok(geo)
}

/// Layouts the checker does not model, and fields it cannot work without.
fn check_layout(sb: &Superblock) -> Result<()> {
    let bad = |d: String| Err(Error::corrupt("superblock", 0, d));
    refuse_bigalloc(sb)?;
    if sb.rev_level() > 1 {
        return bad(format!(
            "revision {} is newer than this checker",
            sb.rev_level()
        ));
    }
    let (bs, first_data) = (sb.block_size(), sb.first_data_block());
    if first_data != u32::from(bs == 1024) {
        return bad(format!(
            "first data block {first_data} invalid for {bs}-byte blocks"
        ));
    }
    let (bpg, ipg) = (sb.blocks_per_group(), sb.inodes_per_group());
    if bpg % 8 != 0 || ipg % 8 != 0 {
        return bad(format!(
            "blocks ({bpg}) or inodes ({ipg}) per group not a multiple of 8"
        ));
    }
    Ok(())
}

/// bigalloc allocates clusters of blocks: bitmaps count clusters, which the checker does
/// not model, so such images are refused by name (before their cluster-sized geometry
/// fails the block-based checks).
fn refuse_bigalloc(sb: &Superblock) -> Result<()> {
    if !sb.has_ro_compat(ro_compat::BIGALLOC) {
        return Ok(());
    }
    let ratio = 1u64
        .checked_shl(sb.log_cluster_size().saturating_sub(sb.log_block_size()))
        .unwrap_or(0);
    Err(Error::Unsupported(format!(
        "bigalloc file systems (clusters of {ratio} blocks) are not checked"
    )))
}

/// Refuse a geometry the checker cannot walk safely.
fn validate(geo: &Geometry, dev_size: u64) -> Result<()> {
    let bad = |d: String| Err(Error::corrupt("superblock", 0, d));
    let inodes = geo.inodes();
    if geo.groups == 0 || u64::from(geo.first_ino) > inodes {
        let (g, f) = (geo.groups, geo.first_ino);
        return bad(format!("{g} groups, first inode {f} of {inodes}"));
    }
    // The old-style descriptor table (all of it, or the part before first_meta_bg) and the
    // reserved GDT blocks must fit group 0 with room to spare.
    let old = if geo.meta_bg {
        geo.first_meta_bg.min(geo.gdt_blocks)
    } else {
        geo.gdt_blocks
    };
    let base = 1 + u64::from(old) + u64::from(geo.reserved_gdt);
    let first = u64::from(geo.first_data_block);
    if base >= u64::from(geo.bpg) || first + base > geo.blocks {
        let r = geo.reserved_gdt;
        return bad(format!(
            "{old} descriptor + {r} reserved blocks do not fit a group"
        ));
    }
    if inodes.saturating_mul(u64::from(geo.inode_size)) > dev_size {
        let s = geo.inode_size;
        return bad(format!(
            "inode tables ({inodes} x {s} bytes) exceed the device"
        ));
    }
    Ok(())
}

/// Read the primary superblock. A checksum mismatch is returned as a problem; bad magic or
/// unusable geometry is an error.
pub(crate) fn load_superblock(dev: &dyn BlockDevice) -> Result<(Superblock, Vec<Problem>)> {
    if dev.size() < SB_OFFSET + SB_SIZE as u64 {
        let why = format!("{} bytes, too small to hold a superblock", dev.size());
        return Err(Error::NotExt4(why));
    }
    let mut sb = Superblock::zeroed();
    dev.read_at(SB_OFFSET, &mut sb.raw[..])?;
    sb.check_magic()?;
    refuse_bigalloc(&sb)?;
    let mut problems = Vec::new();
    if sb.metadata_csum() && sb.checksum() != sb.compute_checksum() {
        problems.push(Problem {
            code: "SB_CHECKSUM",
            message: format!(
                "superblock checksum {:#010x}, computed {:#010x}",
                sb.checksum(),
                sb.compute_checksum()
            ),
        });
    }
    // Validate the geometry on a copy with a good checksum, so a bad checksum alone is a
    // problem to report rather than a reason to stop.
    let mut fixed = sb.clone();
    fixed.update_checksum();
    if let Err(e) = Superblock::decode(&fixed.raw[..], dev.size()) {
        // A bad checksum too: the error names both, as a mount's does.
        return Err(match problems.is_empty() {
            true => e,
            false => Superblock::decode(&sb.raw[..], dev.size())
                .err()
                .unwrap_or(e),
        });
    }
    Ok((sb, problems))
}

/// Read the group descriptor table: every block where [`Geometry::gdt_block`] puts it
/// (after the superblock, or with meta_bg in the first groups of each meta group).
pub(crate) fn read_group_descs(dev: &dyn BlockDevice, geo: &Geometry) -> Result<Vec<GroupDesc>> {
    let blocks: Vec<u64> = (0..geo.gdt_blocks).map(|i| geo.gdt_block(i)).collect();
    let bufs = read_scattered(dev, geo, &blocks)?;
    let ds = geo.desc_size as usize;
    let per = geo.descs_per_block() as usize;
    let mut v = Vec::with_capacity(geo.groups as usize);
    for g in 0..geo.groups as usize {
        let off = (g % per) * ds;
        let raw = bufs
            .get(g / per)
            .and_then(|b| b.get(off..off + ds))
            .unwrap_or(&[]);
        if raw.len() != ds {
            return Err(Error::corrupt(
                "group descriptors",
                geo.gdt_block(0),
                "table shorter than group count",
            ));
        }
        v.push(GroupDesc { raw: raw.to_vec() });
    }
    debug_assert_eq!(v.len(), geo.groups as usize, "one descriptor per group");
    Ok(v)
}

/// Read `n` blocks from `start`; the range must lie inside the file system.
pub(crate) fn read_blocks(
    dev: &dyn BlockDevice,
    geo: &Geometry,
    start: u64,
    n: u64,
) -> Result<Vec<u8>> {
    let bs = geo.block_bytes();
    let bytes = n.checked_mul(bs).filter(|&b| b <= 1 << 31);
    let (Some(bytes), true) = (bytes, geo.in_fs(start, n)) else {
        return Err(Error::corrupt(
            "block range",
            start,
            format!("{n} blocks outside the file system"),
        ));
    };
    let mut buf = vec![0u8; bytes as usize];
    dev.read_at(start * bs, &mut buf)?;
    Ok(buf)
}

/// Read single blocks at scattered locations, coalescing neighbours into larger reads.
pub(crate) fn read_scattered(
    dev: &dyn BlockDevice,
    geo: &Geometry,
    blocks: &[u64],
) -> Result<Vec<Vec<u8>>> {
    let mut order: Vec<usize> = (0..blocks.len()).collect();
    order.sort_by_key(|&i| blocks[i]);
    let mut out = vec![Vec::new(); blocks.len()];
    let mut k = 0;
    while k < order.len() {
        let start = blocks[order[k]];
        let mut j = k + 1;
        while j < order.len()
            && blocks[order[j]] <= blocks[order[j - 1]] + 1
            && blocks[order[j]] - start < 256
        {
            j += 1;
        }
        let n = blocks[order[j - 1]] - start + 1;
        debug_assert!(n <= 256, "a read of {n} blocks");
        let buf = read_blocks(dev, geo, start, n)?;
        for &i in &order[k..j] {
            let off = ((blocks[i] - start) * geo.block_bytes()) as usize;
            out[i] = buf[off..off + geo.bs as usize].to_vec();
        }
        k = j;
    }
    Ok(out)
}
