//! What a mount reads before it builds `Fs`: the superblock and which features it may
//! write, the group descriptors (each checked, none overlapping another's metadata), and
//! the journal's log with what replaying it would write.

use super::*;

/// What lanefs can do with a file system, in one line (`lanefs info`): read-write,
/// read-only and why, or refused and why.
pub(crate) fn access_summary(sb: &Superblock) -> String {
    match check_features(sb) {
        Ok(None) => "read-write".into(),
        Ok(Some(why)) => format!("read-only ({why})"),
        Err(e) => format!("none ({e})"),
    }
}

/// Refuse what lanefs cannot read; say why it must mount read-only, if it must.
pub(super) fn check_features(sb: &Superblock) -> Result<Option<String>> {
    let unknown = sb.feature_incompat() & !incompat::SUPPORTED;
    if unknown != 0 {
        let names = sbm::feature_names(unknown, incompat::NAMES);
        return Err(Error::Unsupported(format!(
            "lanefs cannot read images with {names} (INCOMPAT); the kernel's ext4 or fuse2fs may"
        )));
    }
    let unwritable = sb.feature_ro_compat() & !ro_compat::SUPPORTED;
    Ok((unwritable != 0).then(|| {
        let names = sbm::feature_names(unwritable, ro_compat::NAMES);
        format!("lanefs cannot write images with {names}: mounted read-only")
    }))
}

pub(super) fn read_super(dev: &dyn BlockDevice) -> Result<Superblock> {
    let mut raw = vec![0u8; sbm::SB_SIZE];
    if dev.size() < sbm::SB_OFFSET + sbm::SB_SIZE as u64 {
        let why = format!("{} bytes, too small to hold a superblock", dev.size());
        return Err(Error::NotExt4(why));
    }
    dev.read_at(sbm::SB_OFFSET, &mut raw)?;
    Superblock::decode(&raw, dev.size())
}

/// Find the journal's log (reading its inode through `bufs`) and, if it holds
/// transactions (a non-zero log start), what replaying them writes.
pub(super) fn open_journal(
    sb: &Superblock,
    dev: &Arc<dyn BlockDevice>,
    bufs: &Arc<BufCache>,
) -> Result<(Option<LogArea>, Option<Replay>)> {
    if !sb.has_compat(compat::HAS_JOURNAL) {
        if sb.has_incompat(incompat::RECOVER) {
            return Err(Error::corrupt(
                "superblock",
                0,
                "needs_recovery is set but the file system has no journal",
            ));
        }
        return Ok((None, None));
    }
    let jino = u64::from(sb.journal_inum());
    if jino == 0 {
        return Err(Error::Unsupported("external journal device".into()));
    }
    let geo = Geometry::from_superblock(sb);
    if jino > u64::from(geo.ipg) * u64::from(geo.groups) {
        return Err(Error::corrupt(
            "superblock",
            0,
            format!("journal inode {jino} out of range"),
        ));
    }
    let (descs, gdt) = read_gdt(&geo, bufs)?;
    let ial = InodeAllocator::new(
        geo.clone(),
        &descs,
        bufs.clone(),
        Default::default(),
        [0; 4],
    );
    let al = Allocator::new(geo, descs, gdt, bufs.clone());
    let d = inode::read_disk_inode(&ial, bufs, jino)?;
    let mut st = InodeState::from_disk(d);
    inode::load_extents(&al, None, bufs, jino, &mut st)?;
    let ext = st.ext.unwrap_or_default();
    let bs = sb.block_size() as usize;
    let read = |b: u64| -> Result<Vec<u8>> {
        let mut v = vec![0u8; bs];
        dev.read_at(b * bs as u64, &mut v)?;
        Ok(v)
    };
    let area = LogArea::new(&ext, jino, sb.blocks_count(), read, bs)?;
    // needs_recovery with an empty log (s_start 0) has nothing to replay.
    let replay = if area.js.start() != 0 {
        Some(journal::recover(&area, &**dev, sb.blocks_count())?)
    } else {
        None
    };
    Ok((Some(area), replay))
}

pub(super) fn read_gdt(geo: &Geometry, bufs: &BufCache) -> Result<(Vec<GroupDesc>, Vec<Arc<Buf>>)> {
    let mut gdt = Vec::new();
    for i in 0..geo.gdt_blocks {
        let blk = geo.gdt_block(i);
        if blk >= geo.blocks {
            return Err(Error::corrupt(
                "group descriptor table",
                blk,
                "descriptor block outside the file system",
            ));
        }
        gdt.push(bufs.get(blk)?);
    }
    let ds = geo.desc_size as usize;
    let per = geo.bs as usize / ds;
    let mut descs = Vec::with_capacity(geo.groups as usize);
    for g in 0..geo.groups {
        let b = gdt[g as usize / per].read();
        let off = (g as usize % per) * ds;
        let d = GroupDesc {
            raw: b[off..off + ds].to_vec(),
        };
        drop(b);
        validate_desc(geo, g, &d)?;
        descs.push(d);
    }
    check_no_overlap(geo, &descs)?;
    Ok((descs, gdt))
}

/// No two groups' bitmaps or inode tables share a block: an inode is then one table's
/// record only (its checksum, seeded with its number, is not checked again once read:
/// [`Buf::record_checked`]), and a bitmap block one group's.
pub(super) fn check_no_overlap(geo: &Geometry, descs: &[GroupDesc]) -> Result<()> {
    let itb = (u64::from(geo.ipg) * u64::from(geo.inode_size)).div_ceil(u64::from(geo.bs));
    let mut spans: Vec<(u64, u64, u32)> = Vec::with_capacity(descs.len() * 3);
    for (g, d) in (0u32..).zip(descs) {
        spans.push((d.block_bitmap(), 1, g));
        spans.push((d.inode_bitmap(), 1, g));
        spans.push((d.inode_table(), itb, g));
    }
    spans.sort_unstable();
    for w in spans.windows(2) {
        if w[0].0 + w[0].1 > w[1].0 {
            return Err(Error::corrupt(
                "group descriptor",
                u64::from(w[1].2),
                format!(
                    "bitmap or inode table at block {} overlaps group {}'s",
                    w[1].0, w[0].2
                ),
            ));
        }
    }
    Ok(())
}

pub(super) fn validate_desc(geo: &Geometry, g: u32, d: &GroupDesc) -> Result<()> {
    let at = u64::from(g);
    if !d.verify(geo.desc_csum, g) {
        return Err(Error::corrupt("group descriptor", at, "checksum mismatch"));
    }
    let itb = (u64::from(geo.ipg) * u64::from(geo.inode_size)).div_ceil(u64::from(geo.bs));
    let in_fs = |b: u64, n: u64| b > u64::from(geo.first_data_block) && b + n <= geo.blocks;
    if !in_fs(d.block_bitmap(), 1) || !in_fs(d.inode_bitmap(), 1) || !in_fs(d.inode_table(), itb) {
        return Err(Error::corrupt(
            "group descriptor",
            at,
            "bitmap or inode table outside the file system",
        ));
    }
    if d.free_blocks() > geo.bpg || d.free_inodes() > geo.ipg {
        return Err(Error::corrupt(
            "group descriptor",
            at,
            "free counts larger than the group",
        ));
    }
    // The allocator computes `ipg - itable_unused` and bumps used_dirs: keep both in range.
    if d.itable_unused() > geo.ipg || d.used_dirs() > geo.ipg {
        return Err(Error::corrupt(
            "group descriptor",
            at,
            "unused inode or directory count larger than the group",
        ));
    }
    Ok(())
}
