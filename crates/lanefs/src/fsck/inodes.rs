//! Pass 1: every in-use inode.

use super::xattr::{xattr_entries, XattrScan};
use super::*;

impl Checker<'_> {
    pub(super) fn pass_inodes(&mut self) -> Result<()> {
        debug_assert_eq!(
            self.groups.len(),
            self.geo.groups as usize,
            "groups checked"
        );
        self.load_inode_bitmaps()?;
        for g in 0..self.geo.groups {
            self.scan_group(g)?;
        }
        self.report_dups();
        self.check_xattr_refs();
        self.check_orphan_chain()?;
        self.check_stray_inode_numbers();
        self.check_bad_blocks_in_tables();
        Ok(())
    }

    /// Quota and orphan-file inode numbers left in the superblock without their feature:
    /// e2fsck still treats the inode they name as special, which breaks it if it is in use.
    pub(super) fn check_stray_inode_numbers(&mut self) {
        let mut v = Vec::new();
        if !self.sb.has_ro_compat(ro_compat::QUOTA) {
            // (A stray project quota number is accepted by e2fsck.)
            v.push(("SB_QUOTA_INODE", self.sb.usr_quota_inum()));
            v.push(("SB_QUOTA_INODE", self.sb.grp_quota_inum()));
        }
        if !self.sb.has_compat(COMPAT_ORPHAN_FILE) {
            v.push(("SB_ORPHAN_FILE", self.sb.orphan_file_inum()));
        }
        for (code, ino) in v {
            if ino >= self.geo.first_ino && self.inode_in_use(u64::from(ino)) {
                let msg = format!(
                    "superblock names in-use inode {ino} as a special inode without the feature"
                );
                self.out.add(code, msg);
            }
        }
    }

    /// Blocks the bad blocks inode lists where metadata lives, as e2fsck's
    /// `process_bad_block` judges them: the primary superblock or group descriptors (the
    /// file system cannot live without them), a group's block or inode bitmap (they must
    /// move), or an inode table block holding in-use inodes. A backup superblock or
    /// descriptor copy on the list is only a warning there, and so not reported here.
    pub(super) fn check_bad_blocks_in_tables(&mut self) {
        let runs = std::mem::take(&mut self.bad_blocks);
        if runs.is_empty() {
            return;
        }
        let hit = |s: u64, n: u64| runs.iter().find(|r| r.pblk < s + n && s < r.pblk + r.len);
        let parts = self.geo.base_meta_parts(0);
        for ((s, n), what) in [
            (parts.super_block, "the primary superblock"),
            (parts.descriptors, "the primary group descriptors"),
        ] {
            if let Some(r) = hit(s, n).filter(|_| n > 0) {
                let msg = format!("bad block {} lies in {what}", r.pblk.max(s));
                self.out.add("BADBLOCK_IN_PRIMARY", msg);
            }
        }
        for g in 0..self.geo.groups {
            let gi = &self.groups[g as usize];
            let mut found = Vec::new();
            if gi.bb_ok && hit(gi.desc.block_bitmap(), 1).is_some() {
                found.push(("BADBLOCK_IN_BITMAP", "block bitmap", gi.desc.block_bitmap()));
            }
            if gi.ib_ok && hit(gi.desc.inode_bitmap(), 1).is_some() {
                found.push(("BADBLOCK_IN_BITMAP", "inode bitmap", gi.desc.inode_bitmap()));
            }
            if gi.it_ok {
                // e2fsck takes every inode in such a block (below the watermark) as in use.
                let it = gi.desc.inode_table();
                let n = (self.initialized_inodes(g) * u64::from(self.geo.inode_size))
                    .div_ceil(self.geo.block_bytes());
                if let Some(r) = hit(it, n) {
                    found.push(("BADBLOCK_IN_ITABLE", "inode table", r.pblk.max(it)));
                }
            }
            for (code, what, b) in found {
                let msg = format!("group {g}: bad block {b} lies in the {what}");
                self.out.add(code, msg);
            }
        }
    }

    /// Read every initialized inode bitmap (in coalesced reads) and verify its checksum.
    pub(super) fn load_inode_bitmaps(&mut self) -> Result<()> {
        let mut want = Vec::new();
        for (g, gi) in self.groups.iter_mut().enumerate() {
            if gi.flags & BG_INODE_UNINIT != 0 {
                gi.ibitmap = Bitmap::Uninit;
            } else if gi.ib_ok {
                want.push((g, gi.desc.inode_bitmap()));
            }
        }
        for chunk in want.chunks(1024) {
            let blocks: Vec<u64> = chunk.iter().map(|&(_, b)| b).collect();
            let maps = read_scattered(self.dev, &self.geo, &blocks)?;
            debug_assert_eq!(maps.len(), chunk.len(), "bitmaps read");
            for (&(g, _), map) in chunk.iter().zip(maps) {
                self.verify_bitmap_csum(g as u32, &map, false);
                self.check_bitmap_padding(g as u32, &map, false);
                self.groups[g].ibitmap = Bitmap::Loaded(map);
            }
        }
        Ok(())
    }

    /// The bytes of a bitmap block past the group's bits must be 0xff (e2fsck 1.45+ checks
    /// this), and in the last group so must the bits of blocks past the end of the fs.
    pub(super) fn check_bitmap_padding(&mut self, g: u32, map: &[u8], block: bool) {
        let bits = if block {
            u64::from(self.geo.bpg)
        } else {
            u64::from(self.geo.ipg)
        } as usize;
        let tail_ok = map
            .get(bits / 8..)
            .is_some_and(|t| t.iter().all(|&b| b == 0xFF));
        let len = if block {
            u64::from(self.geo.group_len(g)) as usize
        } else {
            bits
        };
        debug_assert!(len <= bits, "group {g} longer than its bitmap");
        let end_ok = (len..bits).all(|i| test_bit(map, i));
        if !tail_ok || !end_ok {
            let (code, what) = if block {
                ("BLOCK_BITMAP_PADDING", "block")
            } else {
                ("INODE_BITMAP_PADDING", "inode")
            };
            self.out.add(
                code,
                format!("group {g}: padding at the end of the {what} bitmap is not set"),
            );
        }
    }

    pub(super) fn verify_bitmap_csum(&mut self, g: u32, map: &[u8], block: bool) {
        if !self.geo.csum {
            return;
        }
        let d = &self.groups[g as usize].desc;
        let wide = u64::from(self.geo.desc_size) >= 64;
        let (bytes, stored, what, code) = if block {
            (
                u64::from(self.geo.bpg) / 8,
                d.block_bitmap_csum(),
                "block",
                "BLOCK_BITMAP_CSUM",
            )
        } else {
            (
                u64::from(self.geo.ipg) / 8,
                d.inode_bitmap_csum(),
                "inode",
                "INODE_BITMAP_CSUM",
            )
        };
        let want = group::bitmap_csum(self.geo.seed, map, (bytes as usize).min(map.len()), wide);
        if want != stored {
            let at = if block {
                d.block_bitmap()
            } else {
                d.inode_bitmap()
            };
            self.out.add(code, format!("group {g}: {what} bitmap (block {at}) checksum {stored:#010x}, computed {want:#010x}"));
        }
    }

    /// Inodes of group `g` that the table may hold (the rest are known unused).
    pub(super) fn initialized_inodes(&self, g: u32) -> u64 {
        let gi = &self.groups[g as usize];
        if !self.geo.desc_csum.on() {
            u64::from(self.geo.ipg)
        } else if gi.flags & BG_INODE_UNINIT != 0 {
            0
        } else {
            u64::from(self.geo.ipg)
                - u64::from(gi.desc.itable_unused()).min(u64::from(self.geo.ipg))
        }
    }

    pub(super) fn bitmap_bit(&self, g: u32, idx: u64) -> bool {
        match &self.groups[g as usize].ibitmap {
            Bitmap::Loaded(m) => (idx as usize) < m.len() * 8 && test_bit(m, idx as usize),
            _ => false,
        }
    }

    /// Read group `g`'s inode table in large chunks and check each inode in it.
    pub(super) fn scan_group(&mut self, g: u32) -> Result<()> {
        let n_init = self.initialized_inodes(g);
        let base = u64::from(g) * u64::from(self.geo.ipg);
        debug_assert!(
            n_init <= u64::from(self.geo.ipg) && base + n_init < self.kind.len() as u64,
            "group {g}: {n_init} inodes past the inode table"
        );
        if !self.groups[g as usize].it_ok {
            for i in 0..n_init {
                if self.bitmap_bit(g, i) {
                    self.kind[(base + i + 1) as usize] = K_UNKNOWN;
                }
            }
            return Ok(());
        }
        let table = self.groups[g as usize].desc.inode_table();
        let isz = u64::from(self.geo.inode_size);
        let per_chunk = (READ_CHUNK / isz).max(1);
        let mut buf = Vec::new();
        let mut i = 0;
        while i < n_init {
            let n = per_chunk.min(n_init - i);
            buf.resize((n * isz) as usize, 0);
            self.dev
                .read_at(table * self.geo.block_bytes() + i * isz, &mut buf)?;
            for k in 0..n {
                let raw = &buf[(k * isz) as usize..((k + 1) * isz) as usize];
                self.scan_inode((base + i + k + 1) as u32, raw)?;
            }
            i += n;
        }
        Ok(())
    }

    /// Decide whether an inode is in use (as e2fsck: it has links) and check it if so.
    pub(super) fn scan_inode(&mut self, ino: u32, raw: &[u8]) -> Result<()> {
        debug_assert_eq!(raw.len(), self.geo.inode_size as usize, "inode {ino}");
        debug_assert_eq!(self.kind[ino as usize], K_FREE, "inode {ino} scanned twice");
        let inode = DiskInode::from_bytes(raw);
        self.check_inode_csum(ino, &inode);
        if self.is_low_dtime(&inode) {
            let msg = format!(
                "inode {ino} has dtime {} as if on a (lost) orphan list",
                inode.dtime()
            );
            self.out.add("ORPHAN_DTIME", msg);
        }
        if ino < self.geo.first_ino {
            return self.scan_reserved(ino, &inode);
        }
        if self.special.contains(&ino) {
            return self.check_special(ino, &inode);
        }
        // As e2fsck: an inode is in use when it has links, whatever the bitmap says (pass 5
        // reports the bitmap difference).
        if inode.links() == 0 {
            if inode.dtime() == 0 && inode.mode() != 0 {
                self.out.add(
                    "INODE_ZERO_DTIME",
                    format!("deleted inode {ino} has zero dtime"),
                );
            }
            return Ok(());
        }
        self.check_inode(ino, &inode)
    }

    /// A dtime smaller than the inode count is an orphan-list link, not a time.
    pub(super) fn is_low_dtime(&self, inode: &DiskInode) -> bool {
        let d = inode.dtime();
        self.low_dtime_check && d != 0 && u64::from(d) < self.geo.inodes()
    }

    /// Verify an inode slot's checksum. As e2fsck, every slot read is verified, in use or
    /// not, except one whose first 128 bytes are zero (never written).
    pub(super) fn check_inode_csum(&mut self, ino: u32, inode: &DiskInode) {
        if !self.geo.csum || inode.raw[..128].iter().all(|&b| b == 0) {
            return;
        }
        let (stored, want) = (inode.checksum(), inode.compute_checksum(self.geo.seed, ino));
        if stored != want {
            let msg = format!("inode {ino}: checksum {stored:#010x}, computed {want:#010x}");
            self.out.add("INODE_CHECKSUM", msg);
        }
    }

    /// Check an inode that is in use; records its kind, links and directory blocks.
    pub(super) fn check_inode(&mut self, ino: u32, inode: &DiskInode) -> Result<()> {
        self.links[ino as usize] = inode.links();
        let ibody = self.check_extra_isize(ino, inode);
        let Some(ft) = mode_ft(inode.mode()) else {
            self.out.add(
                "INODE_BAD_MODE",
                format!(
                    "inode {ino}: mode {:#o} has no valid file type",
                    inode.mode()
                ),
            );
            self.kind[ino as usize] = K_BAD_MODE;
            return Ok(());
        };
        self.kind[ino as usize] = ft;
        if inode.dtime() != 0 && !self.is_low_dtime(inode) {
            self.out.add(
                "INODE_DTIME_SET",
                format!("inode {ino} is in use but has dtime {} set", inode.dtime()),
            );
        }
        self.check_flags(ino, inode, ft);
        self.check_zero_fields(ino, inode);
        if inode.flags() & FL_EA_INODE != 0 && self.ea_inode_feature() {
            let legacy = inode.ctime_lo() == inode.atime_lo();
            self.ea_inodes.insert(ino, (inode.ea_inode_refs(), legacy));
        }
        let ea_before = self.quota.ea_inodes;
        let xattr = self.check_xattr_block(ino, inode)? + self.check_ea_refs(ino, &ibody.refs)?;
        let ea_inodes = self.quota.ea_inodes - ea_before;
        let inline = self.is_inline(inode) && matches!(ft, FT_REG | FT_DIR | FT_LNK);
        let mut inline_dir = None;
        let walk = match ft {
            _ if inline => {
                inline_dir = self.check_inline(ino, inode, ft, ibody.inline_data);
                Walk::default()
            }
            FT_REG | FT_DIR => self.walk_blocks(ino, inode, ft == FT_DIR)?,
            FT_LNK => self.check_symlink(ino, inode)?,
            _ => {
                self.check_device(ino, inode, ft);
                Walk::default()
            }
        };
        self.check_iblocks(ino, inode, walk.blocks + xattr);
        self.charge_quota(ino, inode, walk.blocks + xattr, 1 + ea_inodes);
        if !(inline && ft == FT_DIR) {
            self.check_size(ino, inode, ft, &walk);
        }
        if ft == FT_DIR {
            let seed = inode.csum_seed(self.geo.seed, ino);
            let indexed = inode.flags() & FL_INDEX != 0 && self.sb.has_compat(compat::DIR_INDEX);
            self.dirs.push(DirRec {
                ino,
                seed,
                indexed: indexed && !inline,
                runs: walk.runs,
                inline: inline_dir,
            });
        }
        Ok(())
    }

    /// Whether the inode keeps its data inline (the flag counts with the feature only).
    pub(super) fn is_inline(&self, inode: &DiskInode) -> bool {
        crate::disk::inline::is_inline(inode) && self.sb.has_incompat(incompat::INLINE_DATA)
    }

    /// An inline inode: no block map, its bytes in i_block and the `system.data` xattr
    /// (e2fsck: a directory's size must be 60 plus that value's length; a symlink's
    /// target must be all of its inline bytes). Returns a directory's areas for pass 2.
    pub(super) fn check_inline(
        &mut self,
        ino: u32,
        inode: &DiskInode,
        ft: u8,
        value: Option<Vec<u8>>,
    ) -> Option<crate::disk::inline::Dir> {
        use crate::disk::inline;
        if inode.flags() & FL_EXTENTS != 0 {
            let msg = format!("inode {ino}: both INLINE_DATA and EXTENTS flags are set");
            self.out.add("INODE_BAD_FLAGS", msg);
            return None;
        }
        let Some(value) = value else {
            let msg = format!("inode {ino}: inline data without a system.data attribute");
            self.out.add("INLINE_DATA_BAD", msg);
            return None;
        };
        let (size, have) = (inode.size(), (inline::MIN_SIZE + value.len()) as u64);
        match ft {
            FT_DIR if size == have => {
                return Some(inline::Dir {
                    parent: inode.iblock_ptr(0),
                    head: inode.iblock()[inline::DIR_PARENT_SIZE..].to_vec(),
                    tail: value,
                })
            }
            FT_DIR => {
                let msg = format!("inline directory inode {ino}: size {size}, {have} inline bytes");
                self.out.add("DIR_BAD_SIZE", msg);
            }
            FT_LNK if size != have => {
                let msg = format!("inline symlink inode {ino}: size {size}, {have} inline bytes");
                self.out.add("SYMLINK_BAD", msg);
            }
            // A file's size is checked as any file's (e2fsck does not compare it with the
            // inline bytes).
            _ => {}
        }
        None
    }

    /// i_extra_isize and the in-inode xattrs; returns what the xattrs hold (value inodes,
    /// inline data).
    pub(super) fn check_extra_isize(&mut self, ino: u32, inode: &DiskInode) -> XattrScan {
        let isz = u64::from(self.geo.inode_size);
        if isz <= 128 {
            return XattrScan::default();
        }
        let extra = u64::from(inode.extra_isize());
        // It must cover itself and i_checksum_hi (e2fsck allows 0).
        if (extra != 0 && extra < 4) || extra > isz - 128 || extra % 4 != 0 {
            self.out.add(
                "INODE_EXTRA_ISIZE",
                format!("inode {ino}: i_extra_isize {extra} invalid for {isz}-byte inodes"),
            );
            return XattrScan::default();
        }
        let Some(area) = inode.ibody_xattr_area() else {
            return XattrScan::default();
        };
        if area.len() < 8 || le32(area, 0) != crate::disk::xattr::MAGIC {
            return XattrScan::default();
        }
        let first = crate::disk::xattr::IBODY_HEADER;
        match xattr_entries(area, first, first, true, self.ea_inode_feature()) {
            Ok(scan) => scan,
            Err(why) => {
                self.out.add(
                    "XATTR_BAD_ENTRY",
                    format!("inode {ino}: in-inode extended attributes: {why}"),
                );
                XattrScan::default()
            }
        }
    }

    /// Fields e2fsck requires to be zero (its "process_bad_inode" checks).
    pub(super) fn check_zero_fields(&mut self, ino: u32, inode: &DiskInode) {
        let mut bad = Vec::new();
        // On an rt image, i_faddr holds the extent size hint.
        if inode.faddr() != 0 && self.rt.is_none() {
            bad.push(format!("i_faddr is {}", inode.faddr()));
        }
        if !self.sb.has_incompat(incompat::BIT64) && inode.file_acl_hi() != 0 {
            bad.push(format!(
                "i_file_acl_hi is {} without 64bit",
                inode.file_acl_hi()
            ));
        }
        if !self.sb.has_ro_compat(ro_compat::HUGE_FILE) && inode.blocks_hi() != 0 {
            bad.push(format!(
                "i_blocks_hi is {} without huge_file",
                inode.blocks_hi()
            ));
        }
        if !bad.is_empty() {
            self.out.add(
                "INODE_BAD_FIELD",
                format!("inode {ino}: {} (should be zero)", bad.join(", ")),
            );
        }
    }

    /// The xattr block number (the high half only counts with the 64bit feature).
    pub(super) fn file_acl(&self, inode: &DiskInode) -> u64 {
        let lo = u64::from(inode.file_acl_lo());
        if self.sb.has_incompat(incompat::BIT64) {
            lo | (u64::from(inode.file_acl_hi()) << 32)
        } else {
            lo
        }
    }

    pub(super) fn check_flags(&mut self, ino: u32, inode: &DiskInode, ft: u8) {
        let fl = inode.flags();
        let mut bad = Vec::new();
        if fl & FL_EXTENTS != 0 && !self.sb.has_incompat(incompat::EXTENTS) {
            bad.push("EXTENTS set without the extent feature");
        }
        if fl & FL_INDEX != 0 && ft != FT_DIR {
            bad.push("INDEX set on a non-directory");
        }
        if fl & FL_INDEX != 0 && ft == FT_DIR && !self.sb.has_compat(compat::DIR_INDEX) {
            bad.push("INDEX set without the dir_index feature");
        }
        if fl & FL_INLINE_DATA != 0 && !self.sb.has_incompat(incompat::INLINE_DATA) {
            bad.push("INLINE_DATA set without the inline_data feature");
        }
        if fl & FL_IMAGIC != 0 && !self.sb.has_compat(COMPAT_IMAGIC_INODES) {
            bad.push("IMAGIC set without the imagic_inodes feature");
        }
        // Images with these features are refused up front, so the flags are always stray.
        // (e2fsck 1.47 ignores stray VERITY and EA_INODE flags; so does this check.)
        if fl & (FL_ENCRYPT | FL_CASEFOLD) != 0 {
            bad.push("ENCRYPT or CASEFOLD set without the feature");
        }
        if !bad.is_empty() {
            self.out.add(
                "INODE_BAD_FLAGS",
                format!("inode {ino}: flags {fl:#x}: {}", bad.join(", ")),
            );
        }
    }

    /// `i_blocks` in 512-byte units as e2fsck reads it (high bits only with huge_file).
    pub(super) fn stored_iblocks(&self, inode: &DiskInode) -> u64 {
        let lo = u64::from(inode.blocks_lo());
        if !self.sb.has_ro_compat(ro_compat::HUGE_FILE) {
            return lo;
        }
        let n = lo | (u64::from(inode.blocks_hi()) << 32);
        if inode.flags() & FL_HUGE_FILE != 0 {
            n.saturating_mul(self.geo.block_bytes() / 512)
        } else {
            n
        }
    }

    pub(super) fn check_iblocks(&mut self, ino: u32, inode: &DiskInode, counted: u64) {
        let want = counted.saturating_mul(self.geo.block_bytes() / 512);
        let have = self.stored_iblocks(inode);
        if want != have {
            self.out.add(
                "INODE_BAD_IBLOCKS",
                format!("inode {ino}: i_blocks is {have}, counted {want} (512-byte units)"),
            );
        }
    }

    pub(super) fn check_size(&mut self, ino: u32, inode: &DiskInode, ft: u8, w: &Walk) {
        let (size, bs) = (inode.size(), self.geo.block_bytes());
        if ft == FT_DIR {
            let nblk = w.last_lblk.map_or(0, |l| l + 1);
            if size % bs != 0 || size != nblk.saturating_mul(bs) {
                self.out.add(
                    "DIR_BAD_SIZE",
                    format!("directory inode {ino}: size {size}, but {nblk} blocks are mapped"),
                );
            }
            return;
        }
        if ft != FT_REG {
            return;
        }
        if let Some(li) = w.last_init {
            if size < li.saturating_mul(bs) {
                self.out.add(
                    "INODE_BAD_SIZE",
                    format!("inode {ino}: size {size} ends before initialized block {li}"),
                );
                return;
            }
        }
        let per = bs / 4;
        let max = if inode.flags() & FL_EXTENTS != 0 {
            (bs << 32) - 1
        } else {
            (12 + per + per * per + per * per * per)
                .saturating_mul(bs)
                .min(bs << 32)
                - 1
        };
        if size > max {
            self.out.add(
                "INODE_BAD_SIZE",
                format!("inode {ino}: size {size} exceeds the largest mappable {max}"),
            );
        }
    }

    pub(super) fn check_device(&mut self, ino: u32, inode: &DiskInode, ft: u8) {
        let mut bad = Vec::new();
        if inode.flags() & (FL_INDEX | FL_EXTENTS | FL_INLINE_DATA) != 0 {
            bad.push("has INDEX/EXTENTS/INLINE_DATA flags".to_string());
        }
        // The kernel does not clear the rest of i_block for devices, so (as e2fsck) those
        // words only count when the immutable or append-only flag is set, which can never be
        // set on a device; the flag alone is reported but not counted, as e2fsck does.
        if inode.flags() & (FL_IMMUTABLE | FL_APPEND) != 0 {
            if inode.iblock()[16..].iter().any(|&b| b != 0) {
                bad.push("is immutable/append-only with data past the device number".to_string());
            }
            self.note_immutable(ino);
        }
        if inode.size() != 0 {
            bad.push(format!("size {} is not zero", inode.size()));
        }
        if !bad.is_empty() {
            self.out.add(
                "DEVICE_BAD",
                format!("{} inode {ino}: {}", ft_name(ft), bad.join(", ")),
            );
        }
    }

    pub(super) fn note_immutable(&mut self, ino: u32) {
        let msg = format!("special file inode {ino} has the immutable or append-only flag");
        self.out.note("SPECIAL_IMMUTABLE", msg);
    }

    pub(super) fn check_symlink(&mut self, ino: u32, inode: &DiskInode) -> Result<Walk> {
        let size = inode.size();
        if size > 0 && size < crate::disk::inode::IBLOCK_SIZE as u64 {
            let ib = inode.iblock();
            let len = ib.iter().position(|&c| c == 0).unwrap_or(ib.len()) as u64;
            if inode.flags() & (FL_IMMUTABLE | FL_APPEND) != 0 {
                self.note_immutable(ino);
            }
            if inode.flags() & FL_EXTENTS != 0 {
                self.out.add(
                    "SYMLINK_BAD",
                    format!("fast symlink inode {ino} has the EXTENTS flag"),
                );
            } else if len != size {
                self.out.add(
                    "SYMLINK_BAD",
                    format!("fast symlink inode {ino}: size {size}, target is {len} bytes"),
                );
            }
            return Ok(Walk::default());
        }
        let w = self.walk_blocks(ino, inode, true)?;
        if size == 0 || size >= self.geo.block_bytes() {
            self.out.add(
                "SYMLINK_BAD",
                format!("symlink inode {ino}: size {size} invalid"),
            );
            return Ok(w);
        }
        let single = w.runs.len() == 1 && w.runs[0].lblk == 0 && w.runs[0].len == 1;
        if !single || w.bad > 0 {
            self.out.add(
                "SYMLINK_BAD",
                format!("symlink inode {ino}: must map exactly block 0"),
            );
            return Ok(w);
        }
        debug_assert!(
            self.geo.in_fs(w.runs[0].pblk, 1),
            "walk kept an unchecked run"
        );
        let b = self.read_block(w.runs[0].pblk)?;
        let len = b.iter().position(|&c| c == 0).unwrap_or(b.len()) as u64;
        if len != size {
            self.out.add(
                "SYMLINK_BAD",
                format!("symlink inode {ino}: size {size}, target is {len} bytes"),
            );
        }
        Ok(w)
    }

    /// Check an inode that holds file-system data (journal, quota, orphan file).
    pub(super) fn check_special(&mut self, ino: u32, inode: &DiskInode) -> Result<()> {
        debug_assert!(self.special.contains(&ino), "inode {ino} is not special");
        self.kind[ino as usize] = K_RESERVED;
        self.check_reserved_flags(ino, inode, FL_ENCRYPT);
        let journal = self.sb.has_compat(compat::HAS_JOURNAL) && ino == self.sb.journal_inum();
        if mode_ft(inode.mode()) != Some(FT_REG) || inode.links() == 0 {
            let code = if journal {
                "JOURNAL_BAD_INODE"
            } else {
                "SPECIAL_INODE_BAD"
            };
            self.out.add(
                code,
                format!(
                    "inode {ino} (special) has mode {:#o}, links {}",
                    inode.mode(),
                    inode.links()
                ),
            );
            return Ok(());
        }
        let xattr = self.reserved_xattr_block(ino, inode)?;
        let rt_meta = self.rt.is_some() && matches!(ino, 9 | 10);
        let quota_file = self.is_quota_file(ino);
        let w = self.walk_blocks(ino, inode, journal || rt_meta || quota_file)?;
        self.check_iblocks(ino, inode, w.blocks + xattr);
        if quota_file {
            self.keep_quota_file(ino, inode, &w.runs);
        }
        self.check_size(ino, inode, FT_REG, &w);
        self.rt_keep_runs(ino, &w);
        if journal {
            self.check_journal_sb(ino, inode, &w)?;
        }
        Ok(())
    }
}
