//! Geometry derived from a validated superblock, and the raw reads it allows (shared with `info`).

use super::*;

/// Geometry derived from a superblock that passed [`Superblock::decode`]'s checks.
#[derive(Debug, Clone)]
pub(crate) struct Geo {
    pub(crate) bs: u64,
    pub(crate) blocks: u64,
    pub(crate) first_data: u64,
    pub(crate) bpg: u64,
    pub(crate) ipg: u64,
    pub(crate) isz: u64,
    pub(crate) groups: u32,
    pub(crate) desc_size: u64,
    pub(crate) inodes: u64,
    pub(crate) first_ino: u32,
    pub(crate) csum: bool,
    pub(crate) gdt_csum: bool,
    pub(crate) seed: u32,
    pub(crate) flex: bool,
    pub(crate) backups: group::Backups,
    pub(crate) gdt_blocks: u64,
    pub(crate) reserved_gdt: u64,
    pub(crate) itable_blocks: u64,
}

impl Geo {
    /// Derive the geometry; an error means the superblock cannot be used at all.
    pub(crate) fn from_sb(sb: &Superblock, dev_size: u64) -> Result<Geo> {
        Self::check_layout(sb)?;
        let geo = Self::compute(sb);
        geo.validate(sb, dev_size)?;
        Ok(geo)
    }

    /// Layouts the checker does not model, and fields it cannot work without.
    pub(super) fn check_layout(sb: &Superblock) -> Result<()> {
        let bad = |d: String| Err(Error::corrupt("superblock", 0, d));
        if sb.has_ro_compat(ro_compat::BIGALLOC) {
            return Err(Error::Unsupported(
                "bigalloc file systems are not checked".into(),
            ));
        }
        if sb.has_incompat(incompat::META_BG) {
            return Err(Error::Unsupported(
                "meta_bg file systems are not checked".into(),
            ));
        }
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

    /// Derive the geometry (every input is bounded by `Superblock::decode`).
    pub(super) fn compute(sb: &Superblock) -> Geo {
        let bs = u64::from(sb.block_size());
        let old = sb.rev_level() == 0;
        let isz = if old { 128 } else { u64::from(sb.inode_size()) };
        let ipg = u64::from(sb.inodes_per_group());
        let groups = sb.group_count();
        let desc_size = u64::from(sb.desc_size());
        let resize = sb.has_compat(compat::RESIZE_INODE);
        Geo {
            bs,
            blocks: sb.blocks_count(),
            first_data: u64::from(sb.first_data_block()),
            bpg: u64::from(sb.blocks_per_group()),
            ipg,
            isz,
            groups,
            desc_size,
            inodes: u64::from(sb.inodes_count()),
            first_ino: if old { 11 } else { sb.first_ino() },
            csum: sb.metadata_csum(),
            gdt_csum: sb.has_ro_compat(ro_compat::GDT_CSUM),
            seed: sb.csum_seed(),
            flex: sb.has_incompat(incompat::FLEX_BG),
            backups: sb.backups(),
            gdt_blocks: (u64::from(groups) * desc_size).div_ceil(bs),
            reserved_gdt: if resize {
                u64::from(sb.reserved_gdt_blocks())
            } else {
                0
            },
            itable_blocks: (ipg * isz).div_ceil(bs),
        }
    }

    /// Refuse a geometry the checker cannot walk safely.
    pub(super) fn validate(&self, sb: &Superblock, dev_size: u64) -> Result<()> {
        let bad = |d: String| Err(Error::corrupt("superblock", 0, d));
        if self.groups == 0 || u64::from(self.first_ino) > self.inodes {
            let (g, f, n) = (self.groups, self.first_ino, self.inodes);
            return bad(format!("{g} groups, first inode {f} of {n}"));
        }
        let base = 1 + self.gdt_blocks + self.reserved_gdt;
        if base >= self.bpg || self.first_data + base > sb.blocks_count() {
            let (d, r) = (self.gdt_blocks, self.reserved_gdt);
            return bad(format!(
                "{d} descriptor + {r} reserved blocks do not fit a group"
            ));
        }
        if self.inodes.saturating_mul(self.isz) > dev_size {
            let (n, s) = (self.inodes, self.isz);
            return bad(format!("inode tables ({n} x {s} bytes) exceed the device"));
        }
        Ok(())
    }

    /// First block of group `g`.
    pub(crate) fn group_first(&self, g: u32) -> u64 {
        self.first_data + u64::from(g) * self.bpg
    }

    /// Blocks in group `g` (the last group may be short).
    pub(crate) fn group_len(&self, g: u32) -> u64 {
        self.bpg
            .min(self.blocks.saturating_sub(self.group_first(g)))
    }

    /// Whether group descriptors carry checksums (and the UNINIT flags mean something).
    pub(crate) fn desc_csum(&self) -> bool {
        self.csum || self.gdt_csum
    }

    /// Whether `[start, start+len)` lies inside the file system.
    pub(crate) fn in_fs(&self, start: u64, len: u64) -> bool {
        start >= self.first_data && start.checked_add(len).is_some_and(|e| e <= self.blocks)
    }

    /// Superblock copy, descriptor blocks and reserved GDT blocks of group `g`.
    pub(crate) fn base_meta(&self, g: u32) -> Vec<(u64, u64, Owner)> {
        if !self.backups.has_super(g) {
            return Vec::new();
        }
        let s = self.group_first(g);
        let mut v = vec![
            (s, 1, Owner::Super(g)),
            (s + 1, self.gdt_blocks, Owner::Gdt(g)),
        ];
        if self.reserved_gdt > 0 {
            v.push((
                s + 1 + self.gdt_blocks,
                self.reserved_gdt,
                Owner::ReservedGdt(g),
            ));
        }
        v
    }

    /// Groups whose superblock backup (and reserved GDT copy) exists, group 0 excluded.
    pub(super) fn backup_groups(&self) -> impl Iterator<Item = u32> + '_ {
        (1..self.groups).filter(|&g| self.backups.has_super(g))
    }
}

/// Read the primary superblock. A checksum mismatch is returned as a problem; bad magic or
/// unusable geometry is an error.
pub(crate) fn load_superblock(dev: &dyn BlockDevice) -> Result<(Superblock, Vec<Problem>)> {
    if dev.size() < SB_OFFSET + SB_SIZE as u64 {
        return Err(Error::corrupt(
            "superblock",
            0,
            "device too small for a superblock",
        ));
    }
    let mut sb = Superblock::zeroed();
    dev.read_at(SB_OFFSET, &mut sb.raw[..])?;
    sb.check_magic()?;
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
    Superblock::decode(&fixed.raw[..], dev.size())?;
    Ok((sb, problems))
}

/// Read the group descriptor table.
pub(crate) fn read_group_descs(dev: &dyn BlockDevice, geo: &Geo) -> Result<Vec<GroupDesc>> {
    let buf = read_blocks(dev, geo, geo.first_data + 1, geo.gdt_blocks)?;
    let ds = geo.desc_size as usize;
    let mut v = Vec::with_capacity(geo.groups as usize);
    for g in 0..geo.groups as usize {
        let raw = buf.get(g * ds..(g + 1) * ds).unwrap_or(&[]);
        if raw.len() != ds {
            return Err(Error::corrupt(
                "group descriptors",
                1,
                "table shorter than group count",
            ));
        }
        v.push(GroupDesc { raw: raw.to_vec() });
    }
    Ok(v)
}

/// Read `n` blocks from `start`; the range must lie inside the file system.
pub(crate) fn read_blocks(dev: &dyn BlockDevice, geo: &Geo, start: u64, n: u64) -> Result<Vec<u8>> {
    let bytes = n.checked_mul(geo.bs).filter(|&b| b <= 1 << 31);
    let (Some(bytes), true) = (bytes, geo.in_fs(start, n)) else {
        return Err(Error::corrupt(
            "block range",
            start,
            format!("{n} blocks outside the file system"),
        ));
    };
    let mut buf = vec![0u8; bytes as usize];
    dev.read_at(start * geo.bs, &mut buf)?;
    Ok(buf)
}

/// Read single blocks at scattered locations, coalescing neighbours into larger reads.
pub(crate) fn read_scattered(
    dev: &dyn BlockDevice,
    geo: &Geo,
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
        let buf = read_blocks(dev, geo, start, n)?;
        for &i in &order[k..j] {
            let off = ((blocks[i] - start) * geo.bs) as usize;
            out[i] = buf[off..off + geo.bs as usize].to_vec();
        }
        k = j;
    }
    Ok(out)
}

/// The block bitmap the kernel assumes for a BLOCK_UNINIT group (`ext4_init_block_bitmap`):
/// only the group's superblock copy, descriptors and its own bitmaps and table are used.
pub(crate) fn uninit_block_bitmap(geo: &Geo, g: u32, d: &GroupDesc) -> Vec<u8> {
    let mut map = vec![0u8; geo.bs as usize];
    let first = geo.group_first(g);
    let len = geo.group_len(g);
    let mut mark = |start: u64, n: u64| {
        for b in start..start.saturating_add(n) {
            if b >= first && b - first < len {
                crate::disk::set_bit(&mut map, (b - first) as usize);
            }
        }
    };
    for (s, n, _) in geo.base_meta(g) {
        mark(s, n);
    }
    mark(d.block_bitmap(), 1);
    mark(d.inode_bitmap(), 1);
    mark(d.inode_table(), geo.itable_blocks);
    map
}

/// The uninit_bg (gdt_csum) descriptor checksum: crc16 over uuid, group and descriptor.
pub(super) fn gdt_crc16(uuid: &[u8], g: u32, raw: &[u8]) -> u16 {
    pub(super) fn crc16(mut crc: u16, data: &[u8]) -> u16 {
        for &b in data {
            crc ^= u16::from(b);
            for _ in 0..8 {
                crc = if crc & 1 != 0 {
                    (crc >> 1) ^ 0xA001
                } else {
                    crc >> 1
                };
            }
        }
        crc
    }
    let mut c = crc16(0xFFFF, uuid);
    c = crc16(c, &g.to_le_bytes());
    c = crc16(c, &raw[..0x1E]);
    if raw.len() > 0x20 {
        c = crc16(c, &raw[0x20..]);
    }
    c
}
