//! Pass 0: the superblock, group descriptors and fixed metadata.

use super::*;

impl Checker<'_> {
    pub(super) fn pass_superblock(&mut self) {
        self.check_features();
        let mut p = self.superblock_field_problems();
        p.extend(self.superblock_geometry_problems());
        self.check_journal_fields(&mut p);
        for (code, msg) in p {
            self.out.add(code, msg);
        }
        self.superblock_notes();
        self.collect_special_inodes();
    }

    /// Flags and fields whose values are simply invalid.
    pub(super) fn superblock_field_problems(&self) -> Vec<(&'static str, String)> {
        let sb = &self.sb;
        let mut p: Vec<(&'static str, String)> = Vec::new();
        if sb.has_incompat(incompat::RECOVER) {
            let msg = "superblock has needs_recovery set: the journal must be replayed";
            p.push(("JOURNAL_NEEDS_RECOVERY", msg.into()));
        }
        if sb.metadata_csum() && sb.checksum_type() != 1 {
            let msg = format!("checksum type {} is not crc32c", sb.checksum_type());
            p.push(("SB_CHECKSUM_TYPE", msg));
        }
        if sb.metadata_csum() && sb.has_ro_compat(ro_compat::GDT_CSUM) {
            p.push((
                "SB_FEATURES",
                "both metadata_csum and uninit_bg are set".into(),
            ));
        }
        let orphan_ino = sb.orphan_file_inum();
        let names_inode =
            orphan_ino >= self.geo.first_ino && u64::from(orphan_ino) <= self.geo.inodes();
        if sb.has_compat(COMPAT_ORPHAN_FILE) && !names_inode {
            let msg = "orphan_file feature is set but the orphan file inode number is invalid";
            p.push(("SB_ORPHAN_FILE", msg.into()));
        }
        if sb.def_hash_version() > 5 {
            let msg = format!("default hash version {} unknown", sb.def_hash_version());
            p.push(("SB_GEOMETRY", msg));
        }
        p
    }

    /// Geometry fields e2fsck validates beyond what the checker itself needs.
    pub(super) fn superblock_geometry_problems(&self) -> Vec<(&'static str, String)> {
        let sb = &self.sb;
        let mut bad = Vec::new();
        if sb.r_blocks_count() > sb.blocks_count() {
            bad.push(format!(
                "reserved blocks {} exceed block count",
                sb.r_blocks_count()
            ));
        }
        if sb.log_cluster_size() != sb.log_block_size() {
            let (c, b) = (sb.log_cluster_size(), sb.log_block_size());
            bad.push(format!(
                "cluster size log {c} != block size log {b} without bigalloc"
            ));
        }
        let ds = sb.desc_size_raw();
        if ds > 1024 || (ds != 0 && !ds.is_power_of_two()) {
            bad.push(format!("group descriptor size field {ds} invalid"));
        }
        let rgdt = u64::from(sb.reserved_gdt_blocks());
        if rgdt > self.geo.block_bytes() / 4 {
            bad.push(format!(
                "reserved GDT blocks {rgdt} exceed {}",
                self.geo.block_bytes() / 4
            ));
        }
        if sb.clusters_per_group() != sb.blocks_per_group() {
            let (c, b) = (sb.clusters_per_group(), sb.blocks_per_group());
            bad.push(format!("clusters per group {c} != blocks per group {b}"));
        }
        if sb.log_groups_per_flex() > 31 {
            bad.push(format!(
                "log groups per flex {} too large",
                sb.log_groups_per_flex()
            ));
        }
        bad.into_iter().map(|m| ("SB_GEOMETRY", m)).collect()
    }

    /// Findings e2fsck does not count as errors.
    pub(super) fn superblock_notes(&mut self) {
        let sb = &self.sb;
        let mut n: Vec<(&'static str, String)> = Vec::new();
        // e2fsck processes orphans as part of recovery and does not count a non-empty list
        // as an error; what the orphans leave behind (zero links, low dtimes, bitmap
        // differences) is reported by the inode and bitmap checks.
        if sb.last_orphan() != 0 {
            n.push((
                "ORPHAN_LIST",
                format!("orphan list is not empty (head inode {})", sb.last_orphan()),
            ));
        }
        if sb.has_ro_compat(ro_compat::ORPHAN_PRESENT) {
            let msg = "orphan_present is set: the orphan file holds inodes to clean up";
            n.push(("ORPHAN_LIST", msg.into()));
        }
        if sb.state() & STATE_ERROR != 0 {
            n.push((
                "SB_ERROR_STATE",
                "superblock records that the kernel found errors".into(),
            ));
        }
        if sb.state() & STATE_VALID == 0 {
            n.push((
                "SB_NOT_CLEAN",
                "file system was not cleanly unmounted".into(),
            ));
        }
        for (code, msg) in n {
            self.out.note(code, msg);
        }
    }

    pub(super) fn check_features(&mut self) {
        let known = |names: &[(u32, &str)]| names.iter().fold(0u32, |a, (b, _)| a | b);
        let inc = self.sb.feature_incompat() & !known(incompat::NAMES);
        let ro = self.sb.feature_ro_compat() & !known(ro_compat::NAMES);
        if inc != 0 {
            let n = crate::disk::superblock::feature_names(inc, &[]);
            self.out.add(
                "SB_UNKNOWN_FEATURE",
                format!("unknown incompat features: {n}"),
            );
        }
        if ro != 0 {
            let n = crate::disk::superblock::feature_names(ro, &[]);
            self.out.add(
                "SB_UNKNOWN_FEATURE",
                format!("unknown ro_compat features: {n}"),
            );
        }
        // e2fsck also refuses COMPAT bits it does not know (and lazy_bg, exclude_inode,
        // exclude_bitmap, which it never supported).
        let cp = self.sb.feature_compat() & !COMPAT_KNOWN;
        if cp != 0 {
            let n =
                crate::disk::superblock::feature_names(cp, crate::disk::superblock::compat::NAMES);
            self.out.add(
                "SB_UNKNOWN_FEATURE",
                format!("unsupported compat features: {n}"),
            );
        }
    }

    pub(super) fn check_journal_fields(&self, p: &mut Vec<(&'static str, String)>) {
        let sb = &self.sb;
        let inum = sb.journal_inum();
        if sb.has_compat(compat::HAS_JOURNAL) {
            // e2fsck takes a set journal UUID to mean an external journal.
            let external = sb.journal_uuid().iter().any(|&b| b != 0);
            if external && inum != 0 {
                p.push((
                    "JOURNAL_BAD_INODE",
                    format!("superblock names both journal inode {inum} and an external journal"),
                ));
            } else if inum != JOURNAL_INO && !external {
                p.push((
                    "JOURNAL_BAD_INODE",
                    format!("journal inode number is {inum}, expected {JOURNAL_INO}"),
                ));
            }
        } else if inum != 0 {
            p.push((
                "JOURNAL_BAD_INODE",
                format!("no has_journal feature but journal inode {inum} set"),
            ));
        }
    }

    /// Inodes that hold file-system data and are never linked from a directory.
    pub(super) fn collect_special_inodes(&mut self) {
        let sb = &self.sb;
        let mut v = Vec::new();
        if sb.has_compat(compat::HAS_JOURNAL) && sb.journal_inum() != 0 {
            v.push(sb.journal_inum());
        }
        if sb.has_ro_compat(ro_compat::QUOTA) {
            v.extend([sb.usr_quota_inum(), sb.grp_quota_inum()]);
        }
        if sb.has_ro_compat(ro_compat::PROJECT) || sb.has_ro_compat(ro_compat::QUOTA) {
            v.push(sb.prj_quota_inum());
        }
        if sb.has_compat(COMPAT_ORPHAN_FILE) {
            v.push(sb.orphan_file_inum());
        }
        for ino in v {
            if ino != 0 && u64::from(ino) <= self.geo.inodes() && ino != ROOT_INO {
                self.special.insert(ino);
            }
        }
        self.rt_special();
    }

    // Pass 0: group descriptors and fixed metadata.

    pub(super) fn pass_groups(&mut self) -> Result<()> {
        let descs = read_group_descs(self.dev, &self.geo)?;
        for (g, desc) in descs.into_iter().enumerate() {
            let info = self.check_desc(g as u32, desc);
            self.groups.push(info);
        }
        debug_assert_eq!(
            self.groups.len(),
            self.geo.groups as usize,
            "one entry per group"
        );
        self.claim_fixed_metadata();
        self.check_mmp()?;
        Ok(())
    }

    /// The MMP block (mmp): e2fsck marks it used when it lies inside the file system, and
    /// refuses one outside it or without its magic (checksum with metadata_csum).
    pub(super) fn check_mmp(&mut self) -> Result<()> {
        if !self.sb.has_incompat(incompat::MMP) {
            return Ok(());
        }
        let b = self.sb.mmp_block();
        if b <= u64::from(self.geo.first_data_block) || !self.geo.in_fs(b, 1) {
            self.out.add(
                "MMP_BAD_BLOCK",
                format!("MMP block {b} is outside the file system"),
            );
            return Ok(());
        }
        self.claims.claim(b, 1, Owner::Mmp);
        let buf = self.read_block(b)?;
        let why = match mmp::Mmp::decode(&buf) {
            Err(why) => Some(why),
            Ok(_) if self.geo.csum && !mmp::checksum_ok(self.geo.seed, &buf) => {
                Some("checksum mismatch".into())
            }
            Ok(m) => {
                if !matches!(
                    mmp::seq_state(m.seq),
                    mmp::SeqState::Clean | mmp::SeqState::Fsck
                ) {
                    let msg = format!("MMP block {b}: the file system may be in use elsewhere");
                    self.out.note("MMP_IN_USE", msg);
                }
                None
            }
        };
        if let Some(why) = why {
            self.out
                .add("MMP_BAD_BLOCK", format!("MMP block {b}: {why}"));
        }
        Ok(())
    }

    pub(super) fn check_desc(&mut self, g: u32, desc: GroupDesc) -> GroupInfo {
        debug_assert_eq!(
            g as usize,
            self.groups.len(),
            "descriptors checked in order"
        );
        self.check_desc_csum(g, &desc);
        let raw_flags = desc.flags();
        let uninit = BG_INODE_UNINIT | BG_BLOCK_UNINIT;
        let flags = if self.geo.desc_csum.on() {
            raw_flags
        } else {
            raw_flags & !uninit
        };
        // e2fsck offers to fix these two but does not count them as errors.
        if !self.geo.desc_csum.on() && raw_flags & uninit != 0 {
            self.out.note(
                "GROUP_DESC_FLAGS",
                format!("group {g}: UNINIT flags {raw_flags:#x} without descriptor checksums"),
            );
        }
        if g + 1 == self.geo.groups && flags & BG_BLOCK_UNINIT != 0 {
            self.out.note(
                "GROUP_DESC_FLAGS",
                format!("group {g}: last group has BLOCK_UNINIT set"),
            );
        }
        self.check_desc_counts(g, &desc);
        let bb_ok = self.check_location(g, "block bitmap", desc.block_bitmap(), 1);
        let ib_ok = self.check_location(g, "inode bitmap", desc.inode_bitmap(), 1);
        let it_ok = self.check_location(
            g,
            "inode table",
            desc.inode_table(),
            self.geo.itable_blocks(),
        );
        GroupInfo {
            desc,
            flags,
            bb_ok,
            ib_ok,
            it_ok,
            ibitmap: Bitmap::Unreadable,
        }
    }

    pub(super) fn check_desc_csum(&mut self, g: u32, d: &GroupDesc) {
        let Some(want) = d.checksum_of(self.geo.desc_csum, g) else {
            return;
        };
        if d.checksum() != want {
            self.out.add(
                "GROUP_DESC_CHECKSUM",
                format!(
                    "group {g}: descriptor checksum {:#06x}, computed {want:#06x}",
                    d.checksum()
                ),
            );
        }
    }

    pub(super) fn check_desc_counts(&mut self, g: u32, d: &GroupDesc) {
        let (ipg, len) = (u64::from(self.geo.ipg), u64::from(self.geo.group_len(g)));
        let mut bad = Vec::new();
        if u64::from(d.free_blocks()) > len {
            bad.push(format!("free blocks {} > {len} blocks", d.free_blocks()));
        }
        if u64::from(d.free_inodes()) > ipg {
            bad.push(format!("free inodes {} > {ipg} inodes", d.free_inodes()));
        }
        if u64::from(d.used_dirs()) > ipg {
            bad.push(format!("directories {} > {ipg} inodes", d.used_dirs()));
        }
        if self.geo.desc_csum.on() && d.itable_unused() > d.free_inodes() {
            bad.push(format!(
                "unused inodes {} > free inodes {}",
                d.itable_unused(),
                d.free_inodes()
            ));
        }
        if !bad.is_empty() {
            self.out.add(
                "GROUP_DESC_COUNTS",
                format!("group {g}: {}", bad.join(", ")),
            );
        }
    }

    /// Whether a bitmap or table at `start` (`n` blocks) lies where it may.
    pub(super) fn check_location(&mut self, g: u32, what: &str, start: u64, n: u64) -> bool {
        debug_assert!(n >= 1 && g < self.geo.groups, "{what} of group {g}");
        if !self.geo.in_fs(start, n) {
            self.out.add(
                "GROUP_META_RANGE",
                format!(
                    "group {g}: {what} at block {start} ({n} blocks) is outside the file system"
                ),
            );
            return false;
        }
        let first = self.geo.group_first(g);
        let inside = start >= first && start + n <= first + u64::from(self.geo.group_len(g));
        if !self.sb.has_incompat(incompat::FLEX_BG) && !inside {
            self.out.add(
                "GROUP_META_RANGE",
                format!("group {g}: {what} at block {start} is not in its group"),
            );
            return false;
        }
        true
    }

    pub(super) fn claim_fixed_metadata(&mut self) {
        for g in 0..self.geo.groups {
            let parts = self.geo.base_meta_parts(g);
            for ((s, n), owner) in [
                (parts.super_block, Owner::Super(g)),
                (parts.descriptors, Owner::Gdt(g)),
                (parts.reserved, Owner::ReservedGdt(g)),
            ] {
                if n > 0 && self.geo.in_fs(s, n) {
                    self.claims.claim(s, n, owner);
                }
            }
        }
        for g in 0..self.geo.groups as usize {
            let gi = &self.groups[g];
            let (d, g32) = (&gi.desc, g as u32);
            let mut v = Vec::new();
            if gi.bb_ok {
                v.push((d.block_bitmap(), 1, Owner::BlockBitmap(g32)));
            }
            if gi.ib_ok {
                v.push((d.inode_bitmap(), 1, Owner::InodeBitmap(g32)));
            }
            if gi.it_ok {
                v.push((
                    d.inode_table(),
                    self.geo.itable_blocks(),
                    Owner::InodeTable(g32),
                ));
            }
            for (s, n, owner) in v {
                debug_assert!(self.geo.in_fs(s, n), "{owner} not range-checked");
                self.claims.claim(s, n, owner);
            }
        }
    }
}
