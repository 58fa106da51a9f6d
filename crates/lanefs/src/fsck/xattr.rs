//! Pass 1: xattr blocks and in-inode xattrs, duplicate blocks, the orphan chain.

use super::*;
use crate::disk::inline;

impl Checker<'_> {
    /// Account the inode's xattr block; returns the blocks to count in i_blocks (0 or 1).
    pub(super) fn check_xattr_block(&mut self, ino: u32, inode: &DiskInode) -> Result<u64> {
        let b = self.file_acl(inode);
        if b == 0 {
            return Ok(0);
        }
        if !self.sb.has_compat(compat::EXT_ATTR) {
            self.out.add(
                "XATTR_BAD_BLOCK",
                format!("inode {ino}: xattr block {b} without the ext_attr feature"),
            );
            return Ok(0);
        }
        if !self.geo.in_fs(b, 1) {
            self.out.add(
                "XATTR_BAD_BLOCK",
                format!("inode {ino}: xattr block {b} is outside the file system"),
            );
            return Ok(0);
        }
        if let Some(r) = self.xattrs.get_mut(&b) {
            r.refs += 1;
            self.quota.ea_inodes += r.ea_inodes;
            return Ok(1 + r.ea_blocks);
        }
        self.claims.claim(b, 1, Owner::Xattr(ino));
        let buf = self.read_block(b)?;
        let before = self.quota.ea_inodes;
        let (valid, ea_blocks) = self.check_xattr_contents(ino, b, &buf)?;
        let ea_inodes = self.quota.ea_inodes - before;
        self.xattrs.insert(
            b,
            XattrRef {
                refs: 1,
                stored: crate::disk::xattr::refcount(&buf),
                valid,
                first: ino,
                ea_blocks,
                ea_inodes,
            },
        );
        Ok(1 + ea_blocks)
    }

    /// Check an xattr block's header, checksum and entries; returns whether it is an
    /// xattr block and the blocks its value inodes charge to each user's i_blocks.
    pub(super) fn check_xattr_contents(
        &mut self,
        ino: u32,
        b: u64,
        buf: &[u8],
    ) -> Result<(bool, u64)> {
        if le32(buf, 0) != crate::disk::xattr::MAGIC || le32(buf, 8) != 1 {
            self.out.add(
                "XATTR_BAD_BLOCK",
                format!(
                    "inode {ino}: xattr block {b} has magic {:#010x}, h_blocks {}",
                    le32(buf, 0),
                    le32(buf, 8)
                ),
            );
            return Ok((false, 0));
        }
        if self.geo.csum {
            let c = crate::disk::xattr::block_csum(self.geo.seed, b, buf);
            if c != le32(buf, 0x10) {
                self.out.add(
                    "XATTR_CHECKSUM",
                    format!(
                        "xattr block {b} (inode {ino}): checksum {:#010x}, computed {c:#010x}",
                        le32(buf, 0x10)
                    ),
                );
            }
        }
        let ea_blocks = match xattr_entries(buf, 32, 0, false, self.ea_inode_feature()) {
            Ok(scan) => self.check_ea_refs(ino, &scan.refs)?,
            Err(why) => {
                self.out.add(
                    "XATTR_BAD_ENTRY",
                    format!("xattr block {b} (inode {ino}): {why}"),
                );
                0
            }
        };
        Ok((true, ea_blocks))
    }

    pub(super) fn ea_inode_feature(&self) -> bool {
        self.sb.has_incompat(incompat::EA_INODE)
    }

    /// Check the entries of `parent` whose values live in inodes, as e2fsck's
    /// check_large_ea_inode: the inode number in range, the entry's hash matching the value
    /// inode's (or an old Lustre-style reference, whose inode names its parent in i_mtime),
    /// and the value inode carrying EA_INODE. Counts each value inode's references and
    /// returns the blocks the values charge to the parent's i_blocks (as the kernel's quota
    /// charge does: the value's size in blocks, none for Lustre-style references).
    pub(super) fn check_ea_refs(&mut self, parent: u32, refs: &[EaRef]) -> Result<u64> {
        let mut charged = 0u64;
        for r in refs {
            let ino = r.value_inum;
            let at = format!("inode {parent}: xattr value in inode {ino}");
            if ino < self.geo.first_ino || u64::from(ino) > self.geo.inodes() {
                self.out
                    .add("XATTR_EA_INODE", format!("{at}: inode number invalid"));
                continue;
            }
            let Some(v) = self.read_inode(ino)? else {
                continue;
            };
            let h = v.ea_inode_hash();
            let hash_ok = r.hash == ea_inode_entry_hash(r.name_hash.0, h)
                || r.hash == ea_inode_entry_hash(r.name_hash.1, h);
            let flagged = v.flags() & FL_EA_INODE != 0;
            if !hash_ok {
                let lustre = v.mtime_lo() == parent
                    && self
                        .read_inode(parent)?
                        .is_some_and(|p| p.generation() == v.generation());
                if lustre {
                    *self.ea_counts.entry(ino).or_insert(0) += 1;
                    continue;
                }
                let why = if flagged {
                    format!("{at}: entry hash {:#010x} does not match", r.hash)
                } else {
                    format!("{at}: not an xattr value inode")
                };
                self.out.add("XATTR_EA_INODE", why);
                continue;
            }
            if !flagged {
                let msg = format!("{at}: the inode lacks the EA_INODE flag");
                self.out.add("XATTR_EA_INODE", msg);
                continue;
            }
            charged += u64::from(r.value_size).div_ceil(self.geo.block_bytes());
            self.quota.ea_inodes += 1;
            *self.ea_counts.entry(ino).or_insert(0) += 1;
        }
        Ok(charged)
    }

    pub(super) fn check_xattr_refs(&mut self) {
        let mut v: Vec<_> = self
            .xattrs
            .iter()
            .filter(|(_, r)| r.valid && r.refs != u64::from(r.stored))
            .map(|(&b, r)| (b, r.refs, r.stored, r.first))
            .collect();
        v.sort_unstable();
        for (b, refs, stored, first) in v {
            self.out.add("XATTR_REFCOUNT", format!("xattr block {b} (first used by inode {first}): refcount {stored}, referenced by {refs} inodes"));
        }
    }

    pub(super) fn report_dups(&mut self) {
        if self.claims.dups.len() > MAX_DUP_CLAIMS {
            let msg = format!(
                "{} overlapping claims; only the first {MAX_DUP_CLAIMS} are resolved",
                self.claims.dups.len()
            );
            self.out.add("DUP_BLOCK", msg);
        }
        let (shared, truncated) = self.claims.resolve();
        if truncated {
            self.out
                .add("DUP_BLOCK", "too many overlaps to name every owner".into());
        }
        for (owner, sh) in shared {
            let (meta, files): (Vec<Owner>, Vec<Owner>) =
                sh.others.iter().partition(|o| o.is_meta());
            let more = if sh.more > 0 {
                format!(" and {} more", sh.more)
            } else {
                String::new()
            };
            for (list, code) in [(meta, "BLOCK_IS_METADATA"), (files, "DUP_BLOCK")] {
                if list.is_empty() {
                    continue;
                }
                let code = if owner.is_meta() {
                    "GROUP_META_OVERLAP"
                } else {
                    code
                };
                let names: Vec<String> = list.iter().map(|o| o.to_string()).collect();
                let msg = format!(
                    "{owner}: {} block(s) from {} also claimed by {}{more}",
                    sh.blocks,
                    sh.first,
                    names.join(", ")
                );
                self.out.add(code, msg);
            }
        }
    }

    pub(super) fn read_inode(&self, ino: u32) -> Result<Option<DiskInode>> {
        debug_assert!(
            ino >= 1 && u64::from(ino) <= self.geo.inodes(),
            "read of inode {ino}"
        );
        let idx = u64::from(ino) - 1;
        let g = (idx / u64::from(self.geo.ipg)) as usize;
        let Some(gi) = self.groups.get(g).filter(|gi| gi.it_ok) else {
            return Ok(None);
        };
        let mut raw = vec![0u8; u64::from(self.geo.inode_size) as usize];
        let off = gi.desc.inode_table() * self.geo.block_bytes()
            + (idx % u64::from(self.geo.ipg)) * u64::from(self.geo.inode_size);
        self.dev.read_at(off, &mut raw)?;
        Ok(Some(DiskInode { raw }))
    }

    /// Follow the orphan chain (head in the superblock, next in each inode's dtime).
    pub(super) fn check_orphan_chain(&mut self) -> Result<()> {
        let mut ino = self.sb.last_orphan();
        let mut seen = HashSet::new();
        while ino != 0 && seen.len() < MAX_ORPHANS {
            if ino < self.geo.first_ino || u64::from(ino) > self.geo.inodes() || !seen.insert(ino) {
                self.out.note(
                    "ORPHAN_LIST",
                    format!("orphan list reaches invalid or repeated inode {ino}"),
                );
                break;
            }
            match self.read_inode(ino)? {
                Some(i) => ino = i.dtime(),
                None => break,
            }
        }
        Ok(())
    }
}

/// The bytes of an xattr area already reserved, one bit each: a reservation costs its
/// length, so checking a table is linear in the area (a list of regions was quadratic in
/// the entries: 4,096 in a 64 KiB block).
pub(super) struct Reserved {
    bits: Vec<u64>,
    area: usize,
}

impl Reserved {
    pub(super) fn new(area: usize) -> Reserved {
        Reserved {
            bits: vec![0; area.div_ceil(64)],
            area,
        }
    }

    /// Reserve `[start, start+n)`; false if it leaves the area or overlaps an earlier
    /// reservation (e2fsck's "allocation collision"), and then nothing is reserved.
    pub(super) fn take(&mut self, start: usize, n: usize) -> bool {
        let Some(end) = start.checked_add(n).filter(|&e| e <= self.area) else {
            return false;
        };
        if (start..end).any(|i| self.bits[i / 64] & (1 << (i % 64)) != 0) {
            return false;
        }
        debug_assert!(end <= self.bits.len() * 64, "area map too short");
        for i in start..end {
            self.bits[i / 64] |= 1 << (i % 64);
        }
        true
    }
}

/// One xattr entry whose value lives in an inode (ea_inode), to be checked once every
/// inode has been scanned.
pub(super) struct EaRef {
    /// The inode holding the value.
    pub(super) value_inum: u32,
    /// The entry's stored hash.
    pub(super) hash: u32,
    /// The entry's name hash, unsigned and signed (combined with the value inode's hash).
    pub(super) name_hash: (u32, u32),
    /// The value's length.
    pub(super) value_size: u32,
}

/// What an xattr entry table holds that other checks need.
#[derive(Default)]
pub(super) struct XattrScan {
    /// Entries whose values live in inodes.
    pub(super) refs: Vec<EaRef>,
    /// The `system.data` value (inline data), when present and stored in place.
    pub(super) inline_data: Option<Vec<u8>>,
}

/// Validate an xattr entry table (e2fsck's check_ext_attr and check_ea_in_inode): entries
/// from `first`, values at `value_base + e_value_offs`, nothing overlapping, names indexed,
/// hashes matching. `in_inode` allows the zero hash old in-inode entries carry. With
/// ea_inode, an entry may keep its value in an inode: those are returned, to be checked
/// against the inode once it has been scanned; without the feature they are errors.
pub(super) fn xattr_entries(
    area: &[u8],
    first: usize,
    value_base: usize,
    in_inode: bool,
    ea_inode: bool,
) -> std::result::Result<XattrScan, String> {
    debug_assert!(
        first + 4 <= area.len(),
        "xattr area of {} bytes",
        area.len()
    );
    let mut regions = Reserved::new(area.len());
    regions.take(0, first.min(area.len()));
    let mut off = first;
    let mut scan = XattrScan::default();
    while off + 16 <= area.len() && le32(area, off) != 0 {
        let (name_len, index) = (usize::from(area[off]), area[off + 1]);
        let value_offs = usize::from(le16(area, off + 2));
        let (value_inum, value_size) = (le32(area, off + 4), le32(area, off + 8) as usize);
        let len = (16 + name_len + 3) & !3;
        if !regions.take(off, len) {
            return Err(format!("entry at {off} overlaps or leaves the area"));
        }
        if index == 0 && !in_inode {
            return Err(format!("entry at {off} has name index 0"));
        }
        let name = &area[off + 16..off + 16 + name_len];
        let stored = le32(area, off + 12);
        if value_inum != 0 {
            if !ea_inode {
                return Err(format!(
                    "entry at {off} keeps its value in inode {value_inum}"
                ));
            }
            scan.refs.push(EaRef {
                value_inum,
                value_size: value_size as u32,
                hash: stored,
                name_hash: (
                    crate::disk::xattr::entry_hash(name, &[]),
                    crate::disk::xattr::entry_hash_signed(name, &[]),
                ),
            });
            off += len;
            continue;
        }
        let (vstart, vlen) = (value_base + value_offs, (value_size + 3) & !3);
        if value_size > 0 && !regions.take(vstart, vlen) {
            return Err(format!(
                "entry at {off}: value {value_offs}+{value_size} overlaps or leaves the area"
            ));
        }
        let value = area
            .get(vstart..vstart + if value_size > 0 { vlen } else { 0 })
            .unwrap_or(&[]);
        let ok = (in_inode && stored == 0)
            || stored == crate::disk::xattr::entry_hash(name, value)
            || stored == crate::disk::xattr::entry_hash_signed(name, value);
        if !ok {
            return Err(format!(
                "entry at {off}: hash {stored:#010x} does not match"
            ));
        }
        if in_inode && index == crate::disk::xattr::INDEX_SYSTEM && name == inline::XATTR_NAME {
            scan.inline_data = Some(value.get(..value_size).unwrap_or(&[]).to_vec());
        }
        off += len;
    }
    if !regions.take(off, 4) {
        return Err(format!("end marker at {off} overlaps or leaves the area"));
    }
    Ok(scan)
}

/// The hash an entry whose value lives in an inode carries: the name's hash folded with
/// the value inode's own hash (ext2fs_ext_attr_hash_entry3).
pub(super) fn ea_inode_entry_hash(name_hash: u32, value_hash: u32) -> u32 {
    (name_hash << 16) ^ (name_hash >> 16) ^ value_hash
}
