//! The reserved inodes: unused ones must be empty, the bad-blocks list, the root, the
//! journal's inode and superblock, and the resize inode's reserved descriptor blocks.

use super::*;

impl Checker<'_> {
    pub(super) fn scan_reserved(&mut self, ino: u32, inode: &DiskInode) -> Result<()> {
        debug_assert!(
            ino >= 1 && ino < self.geo.first_ino,
            "inode {ino} is not reserved"
        );
        self.kind[ino as usize] = K_RESERVED;
        if ino == BADBLOCKS_INO {
            return self.check_badblocks_inode(inode);
        }
        if ino == ROOT_INO {
            return self.check_root(inode);
        }
        if ino == RESIZE_INO && self.sb.has_compat(compat::RESIZE_INODE) {
            return self.check_resize_inode(inode);
        }
        if self.special.contains(&ino) {
            return self.check_special(ino, inode);
        }
        self.check_unused_reserved(ino, inode)
    }

    /// A reserved inode with no role in this file system, checked as e2fsck does: the
    /// quota and journal slots must be clear, the others must have no mode (5: not a
    /// directory; 7: regular), and whatever they map must agree with i_blocks and i_size.
    pub(super) fn check_unused_reserved(&mut self, ino: u32, inode: &DiskInode) -> Result<()> {
        self.check_reserved_flags(ino, inode, 0);
        if matches!(ino, 3 | 4 | JOURNAL_INO) {
            if inode.links() != 0 || inode.blocks_lo() != 0 || inode.iblock_ptr(0) != 0 {
                self.out.add(
                    "RESERVED_INODE_BAD",
                    format!("reserved inode {ino} is not in use but contains data"),
                );
            }
            return Ok(());
        }
        let mode = inode.mode();
        let bad_mode = match ino {
            5 => mode_ft(mode) == Some(FT_DIR),
            RESIZE_INO => mode != 0 && mode_ft(mode) != Some(FT_REG),
            _ => mode != 0,
        };
        if ino == RESIZE_INO && inode.iblock().iter().any(|&b| b != 0) {
            self.out.add(
                "RESIZE_INODE_INVALID",
                "resize inode 7 maps blocks without the resize_inode feature".into(),
            );
        }
        if bad_mode {
            self.out.add(
                "RESERVED_INODE_BAD",
                format!("reserved inode {ino} has mode {mode:#o}"),
            );
        }
        if inode.raw[..128].iter().all(|&b| b == 0) {
            return Ok(());
        }
        // e2fsck reports a bad xattr block number only for inodes some directory names.
        let xattr = self.reserved_xattr_block(ino, inode)?;
        // Only directories and regular files have block maps (ext2fs_inode_has_valid_blocks).
        let w = match mode_ft(mode) {
            Some(FT_REG | FT_DIR) => self.walk_blocks(ino, inode, false)?,
            _ => Walk::default(),
        };
        self.check_iblocks(ino, inode, w.blocks + xattr);
        self.check_size(ino, inode, FT_REG, &w);
        Ok(())
    }

    /// The xattr block of an inode no directory names: e2fsck reports an out-of-range
    /// number only for inodes reached from a directory, so it is ignored here.
    pub(super) fn reserved_xattr_block(&mut self, ino: u32, inode: &DiskInode) -> Result<u64> {
        if self.geo.in_fs(self.file_acl(inode), 1) {
            self.check_xattr_block(ino, inode)
        } else {
            Ok(0)
        }
    }

    /// Flags no reserved or special inode may carry (they are never directories), plus
    /// `extra` (e.g. ENCRYPT, which makes e2fsck reject a journal).
    pub(super) fn check_reserved_flags(&mut self, ino: u32, inode: &DiskInode, extra: u32) {
        if inode.flags() & (FL_INDEX | FL_CASEFOLD | extra) != 0 {
            let msg = format!(
                "reserved inode {ino} has invalid flags {:#x}",
                inode.flags()
            );
            self.out.add("INODE_BAD_FLAGS", msg);
        }
    }

    /// The bad blocks inode lists unusable blocks with a classic block map (usually none).
    /// As e2fsck: its owner fields must be clear, and a listed block may lie anywhere (even
    /// in metadata), so listed blocks are only marked used, never reported as shared.
    pub(super) fn check_badblocks_inode(&mut self, inode: &DiskInode) -> Result<()> {
        let ino = BADBLOCKS_INO;
        if inode.mode() != 0
            || inode.uid_lo() != 0
            || inode.gid_lo() != 0
            || inode.links() != 0
            || inode.flags() & FL_INLINE_DATA != 0
            || inode.file_acl_lo() != 0
        {
            self.out.add(
                "BADBLOCKS_INODE_INVALID",
                "bad blocks inode 1 has a mode, owner, links or xattr block".into(),
            );
        }
        if inode.iblock().iter().all(|&b| b == 0) {
            return Ok(());
        }
        let mut w = Walk {
            ino,
            collect: true,
            ..Walk::default()
        };
        self.walk_indirect(&mut w, inode)?;
        self.bad_blocks = w.runs;
        Ok(())
    }

    pub(super) fn check_root(&mut self, inode: &DiskInode) -> Result<()> {
        if inode.mode() == 0 || inode.links() == 0 {
            self.out
                .add("ROOT_MISSING", "root inode 2 is not in use".into());
            return Ok(());
        }
        if mode_ft(inode.mode()) != Some(FT_DIR) {
            self.out.add(
                "ROOT_NOT_DIR",
                format!("root inode 2 has mode {:#o}, not a directory", inode.mode()),
            );
            return Ok(());
        }
        self.check_inode(ROOT_INO, inode)
    }

    pub(super) fn check_journal_sb(&mut self, ino: u32, inode: &DiskInode, w: &Walk) -> Result<()> {
        let Some(first) = w.runs.first().filter(|r| r.lblk == 0) else {
            self.out.add(
                "JOURNAL_BAD_INODE",
                format!("journal inode {ino} does not map block 0"),
            );
            return Ok(());
        };
        debug_assert!(self.geo.in_fs(first.pblk, 1), "walk kept an unchecked run");
        let b = self.read_block(first.pblk)?;
        match jbd2::needs_recovery(&b) {
            None => self.out.add(
                "JOURNAL_BAD_SUPERBLOCK",
                format!("journal superblock (block {}) has bad magic", first.pblk),
            ),
            Some(true) => self.out.add(
                "JOURNAL_NEEDS_RECOVERY",
                "journal is not empty: it must be replayed".into(),
            ),
            Some(false) => {}
        }
        match jbd2::JournalSuper::decode(&b) {
            Err(why) if jbd2::needs_recovery(&b).is_some() => self.out.add(
                "JOURNAL_BAD_SUPERBLOCK",
                format!("journal superblock (block {}): {why}", first.pblk),
            ),
            Ok(js) => {
                if let Some(why) = js.problem() {
                    self.out.add(
                        "JOURNAL_BAD_SUPERBLOCK",
                        format!("journal superblock (block {}): {why}", first.pblk),
                    );
                }
            }
            Err(_) => {}
        }
        let Ok(js) = jbd2::JournalSuper::decode(&b) else {
            return Ok(());
        };
        let (jbs, maxlen) = (u64::from(js.block_size()), u64::from(js.maxlen()));
        let have = inode.size() / self.geo.block_bytes();
        if jbs != self.geo.block_bytes() || maxlen > have {
            self.out.add(
                "JOURNAL_BAD_SUPERBLOCK",
                format!("journal block size {jbs}, length {maxlen}, inode holds {have} blocks"),
            );
        }
        Ok(())
    }

    /// The resize inode: a double-indirect block whose entries are the primary reserved GDT
    /// blocks, each listing its backups (e2fsck's check_resize_inode). Only the double
    /// indirect block is claimed here; the reserved GDT blocks are claimed as metadata.
    pub(super) fn check_resize_inode(&mut self, inode: &DiskInode) -> Result<()> {
        self.check_reserved_flags(RESIZE_INO, inode, 0);
        // Its size only has to fit a block-mapped file (e2fsck's check_blocks).
        self.check_size(RESIZE_INO, inode, FT_REG, &Walk::default());
        if mode_ft(inode.mode()) != Some(FT_REG) {
            self.out.add(
                "RESIZE_INODE_INVALID",
                format!("resize inode 7 has mode {:#o}", inode.mode()),
            );
            return Ok(());
        }
        let dind = u64::from(inode.iblock_ptr(bmap::DIND_SLOT));
        let others = (0..bmap::IBLOCK_BYTES / 4)
            .filter(|&i| i != bmap::DIND_SLOT)
            .any(|i| inode.iblock_ptr(i) != 0);
        let reserved = u64::from(self.geo.reserved_gdt);
        // e2fsck accepts no double indirect block when no GDT blocks are reserved; mke2fs
        // still allocates one (small file systems reserve none).
        if dind == 0 && reserved == 0 && !others {
            return Ok(());
        }
        if others || !self.geo.in_fs(dind, 1) || inode.links() == 0 {
            self.out.add(
                "RESIZE_INODE_INVALID",
                format!("resize inode 7: block map invalid (double indirect {dind})"),
            );
            return Ok(());
        }
        self.claims.claim(dind, 1, Owner::Inode(RESIZE_INO));
        if let Some(bad) = self.resize_layout_error(dind)? {
            self.out
                .add("RESIZE_INODE_INVALID", format!("resize inode 7: {bad}"));
            return Ok(());
        }
        let backups = self.geo.backup_groups().count() as u64;
        let xattr = self.reserved_xattr_block(RESIZE_INO, inode)?;
        let counted = 1 + reserved * (1 + backups) + xattr;
        self.check_iblocks(RESIZE_INO, inode, counted);
        Ok(())
    }

    /// The double indirect block lists the primary reserved GDT blocks (from entry
    /// `gdt_blocks` on, wrapping), and each of those lists its copies in the backup groups.
    pub(super) fn resize_layout_error(&self, dind: u64) -> Result<Option<String>> {
        let g = &self.geo;
        let per = u64::from(g.bs / 4);
        let dbuf = self.read_block(dind)?;
        let (rstart, rn) = g.base_meta_parts(0).reserved;
        let reserved = u64::from(g.reserved_gdt);
        if rn != reserved {
            return Ok(Some(format!(
                "{reserved} reserved GDT blocks do not fit group 0"
            )));
        }
        let ind = read_blocks(self.dev, g, rstart, rn)?;
        debug_assert_eq!(
            ind.len() as u64,
            rn * g.block_bytes(),
            "reserved GDT blocks read"
        );
        for i in 0..reserved {
            let pblk = rstart + i;
            let slot = ((u64::from(g.gdt_blocks) + i) % per) as usize;
            if u64::from(le32(&dbuf, 4 * slot)) != pblk {
                return Ok(Some(format!(
                    "double indirect entry {slot} is not reserved GDT block {pblk}"
                )));
            }
            let at = (i * g.block_bytes()) as usize;
            let blk = &ind[at..at + g.bs as usize];
            for (k, bg) in g.backup_groups().enumerate() {
                let want = pblk + u64::from(bg) * u64::from(g.bpg);
                if k as u64 >= per || u64::from(le32(blk, 4 * k)) != want {
                    return Ok(Some(format!(
                        "reserved GDT block {pblk} does not list backup {want}"
                    )));
                }
            }
        }
        Ok(None)
    }
}
