//! Pass 2: directories: blocks, checksums, htree structure and hash order, entries.

use super::*;

impl Checker<'_> {
    pub(super) fn pass_directories(&mut self) -> Result<()> {
        let dirs = std::mem::take(&mut self.dirs);
        debug_assert!(
            dirs.iter().all(|d| self.kind[d.ino as usize] == FT_DIR),
            "a directory record for an inode not counted a directory"
        );
        for d in &dirs {
            self.check_dir(d)?;
        }
        self.dirs = dirs;
        Ok(())
    }

    /// Directory blocks parsed overall are bounded: in a sound file system each block has
    /// one owner, so more than twice the block count means directories share blocks (which
    /// pass 1 reported) and parsing them again would only cost time.
    pub(super) fn spend_dir_budget(&mut self, n: u64) -> bool {
        if let Some(left) = self.dir_budget.checked_sub(n) {
            self.dir_budget = left;
            return true;
        }
        if !self.dir_budget_spent {
            self.dir_budget_spent = true;
            let msg = "directories map more blocks than the file system holds; scan stopped";
            self.out.add("DIR_SCAN_LIMIT", msg.into());
        }
        false
    }

    pub(super) fn lookup(runs: &[Run], lblk: u64) -> Option<u64> {
        let i = runs.partition_point(|r| r.lblk + r.len <= lblk);
        runs.get(i)
            .filter(|r| r.lblk <= lblk)
            .map(|r| r.pblk + (lblk - r.lblk))
    }

    /// Check one directory, storing at most [`MAX_PROBLEMS_PER_DIR`] of its problems.
    pub(super) fn check_dir(&mut self, d: &DirRec) -> Result<()> {
        self.out.begin_scope(MAX_PROBLEMS_PER_DIR);
        let r = self.check_dir_blocks(d);
        let dropped = self.out.end_scope();
        if dropped > 0 {
            let msg = format!(
                "directory inode {}: {dropped} further problems not listed",
                d.ino
            );
            self.out.add("DIR_MORE_PROBLEMS", msg);
        }
        r
    }

    pub(super) fn check_dir_blocks(&mut self, d: &DirRec) -> Result<()> {
        if let Some(inl) = &d.inline {
            self.check_inline_dir(d, inl);
            return Ok(());
        }
        let nblocks = d.runs.iter().map(|r| r.lblk + r.len).max().unwrap_or(0);
        if nblocks == 0 {
            self.out.add(
                "DIR_NO_BLOCKS",
                format!("directory inode {} has no blocks", d.ino),
            );
            return Ok(());
        }
        let mut expect = 0;
        for r in &d.runs {
            if r.lblk > expect {
                self.out.add(
                    "DIR_HOLE",
                    format!("directory inode {} has a hole at block {expect}", d.ino),
                );
                break;
            }
            expect = r.lblk + r.len;
        }
        let ht = if d.indexed {
            self.scan_htree(d, nblocks)?
        } else {
            None
        };
        let mut st = DirScan::default();
        let per_read = (READ_CHUNK / self.geo.block_bytes()).max(1);
        for r in &d.runs {
            let mut k = 0;
            while k < r.len {
                let n = per_read.min(r.len - k);
                if !self.spend_dir_budget(n) {
                    return Ok(());
                }
                let buf = read_blocks(self.dev, &self.geo, r.pblk + k, n)?;
                debug_assert_eq!(buf.len() as u64, n * self.geo.block_bytes(), "short read");
                for (j, blk) in buf.chunks(self.geo.block_bytes() as usize).enumerate() {
                    let off = k + j as u64;
                    self.dir_block(d, &mut st, r.lblk + off, r.pblk + off, blk, ht.as_ref());
                }
                k += n;
            }
        }
        for (seen, name) in [(st.dot, "."), (st.dotdot, "..")] {
            if !seen {
                self.out.add(
                    "DIR_NO_DOT",
                    format!("directory inode {}: no '{name}' entry", d.ino),
                );
            }
        }
        Ok(())
    }

    /// An inline directory: "." is implied, ".." is the parent number at the start of
    /// i_block, and the entries fill i_block's other 56 bytes and the `system.data` value.
    pub(super) fn check_inline_dir(&mut self, d: &DirRec, inl: &crate::disk::inline::Dir) {
        let mut st = DirScan::default();
        let dot = Dot {
            i: 0,
            ino: d.ino,
            name: b".",
            pad: 0,
            ft: FT_DIR,
        };
        self.dot_entry(d, &mut st, dot);
        let dotdot = Dot {
            i: 1,
            ino: inl.parent,
            name: b"..",
            pad: 0,
            ft: FT_DIR,
        };
        self.dot_entry(d, &mut st, dotdot);
        for (what, area) in [("i_block", &inl.head), ("system.data", &inl.tail)] {
            if area.is_empty() {
                continue;
            }
            let (entries, err) = parse_entries(area, false);
            if let Some(e) = err {
                let msg = format!("inline directory inode {}, {what}: {e}", d.ino);
                self.out.add("DIR_BAD_ENTRY", msg);
            }
            for e in entries.iter().filter(|e| e.ino != 0) {
                self.dir_entry(d, &mut st, e, 0);
            }
        }
    }

    pub(super) fn dir_block(
        &mut self,
        d: &DirRec,
        st: &mut DirScan,
        lblk: u64,
        pblk: u64,
        b: &[u8],
        ht: Option<&Htree>,
    ) {
        debug_assert_eq!(b.len() as u64, self.geo.block_bytes(), "block {pblk}");
        if let Some(h) = ht {
            if h.nodes.contains(&lblk) {
                if lblk == 0 {
                    self.dx_root_dots(d, st, b);
                }
                return;
            }
        }
        let tail = self.geo.csum && self.leaf_tail(d, pblk, b);
        // The entries before any damage are kept, as e2fsck's salvage does, so one bad
        // record does not orphan everything else in the block.
        let (entries, err) = parse_entries(b, tail);
        if let Some(e) = err {
            self.out.add(
                "DIR_BAD_ENTRY",
                format!(
                    "directory inode {}, block {lblk} (block {pblk}): {e}",
                    d.ino
                ),
            );
        }
        let mut hashes: Option<(u32, u32)> = None;
        for (i, e) in entries.iter().enumerate() {
            if lblk == 0 && i < 2 {
                // The byte after the name ("." or "..") must be NUL.
                let pad = b.get(e.off + 8 + i + 1).copied().unwrap_or(0);
                let dot = Dot {
                    i,
                    ino: e.ino,
                    name: &e.name,
                    pad,
                    ft: e.ft,
                };
                self.dot_entry(d, st, dot);
                continue;
            }
            if e.ino == 0 {
                continue;
            }
            self.dir_entry(d, st, e, lblk);
            if let Some(h) = ht {
                let (hv, _) = hash::dirhash(&e.name, h.version, &self.sb.hash_seed());
                hashes = Some(hashes.map_or((hv, hv), |(a, b)| (a.min(hv), b.max(hv))));
            }
        }
        if let Some(h) = ht {
            self.check_leaf_hashes(d, h, lblk, hashes);
        }
    }

    /// An htree leaf must be referenced by the index, and its names must hash into the
    /// range its index entry gives it (inclusive at the top, for hash collisions).
    pub(super) fn check_leaf_hashes(
        &mut self,
        d: &DirRec,
        h: &Htree,
        lblk: u64,
        hashes: Option<(u32, u32)>,
    ) {
        let Some(&(lo, hi)) = h.leaves.get(&lblk) else {
            let msg = format!(
                "directory inode {}: block {lblk} is not referenced by the htree",
                d.ino
            );
            self.out.add("HTREE_UNREFERENCED", msg);
            return;
        };
        if let Some((mn, mx)) = hashes.filter(|&(mn, mx)| mn < lo || mx > hi) {
            let msg = format!(
                "directory inode {}: leaf block {lblk} holds hashes {mn:#x}..{mx:#x} outside its index range {lo:#x}..{hi:#x}",
                d.ino
            );
            self.out.add("HTREE_HASH_RANGE", msg);
        }
    }

    /// Verify a leaf's checksum tail; returns whether the tail is present.
    pub(super) fn leaf_tail(&mut self, d: &DirRec, pblk: u64, b: &[u8]) -> bool {
        if !dir::has_tail(b) {
            self.out.add(
                "DIR_MISSING_TAIL",
                format!(
                    "directory inode {}: block {pblk} has no checksum tail",
                    d.ino
                ),
            );
            return false;
        }
        if let Err(e) = dir::verify_leaf_csum(d.seed, b, pblk) {
            self.out
                .add("DIR_CHECKSUM", format!("directory inode {}: {e}", d.ino));
        }
        true
    }

    pub(super) fn dx_root_dots(&mut self, d: &DirRec, st: &mut DirScan, b: &[u8]) {
        let name = &b[8..8 + usize::from(b[6]).min(4)];
        self.dot_entry(
            d,
            st,
            Dot {
                i: 0,
                ino: le32(b, 0),
                name,
                pad: b[9],
                ft: b[7],
            },
        );
        let name = &b[20..20 + usize::from(b[18]).min(4)];
        self.dot_entry(
            d,
            st,
            Dot {
                i: 1,
                ino: le32(b, 12),
                name,
                pad: b[22],
                ft: b[19],
            },
        );
    }

    /// The first two entries of block 0: "." naming the directory, ".." naming its parent,
    /// both NUL terminated and typed as directories.
    pub(super) fn dot_entry(&mut self, d: &DirRec, st: &mut DirScan, e: Dot<'_>) {
        let want: &[u8] = if e.i == 0 { b"." } else { b".." };
        let at = format!("directory inode {}, entry {}", d.ino, show(want));
        if e.name == want {
            if e.pad != 0 {
                self.out
                    .add("DIR_BAD_DOT", format!("{at}: name is not NUL terminated"));
            }
            self.check_entry_type(&at, e.ft, FT_DIR);
        }
        if e.i == 0 {
            st.dot = true;
            if e.name != b"." || e.ino != d.ino {
                self.out.add(
                    "DIR_BAD_DOT",
                    format!(
                        "{at}: first entry is '{}' -> {}, not '.' -> itself",
                        show(e.name),
                        e.ino
                    ),
                );
                return;
            }
            self.bump_ref(d.ino);
            return;
        }
        st.dotdot = true;
        if e.name != b".." {
            self.out.add(
                "DIR_BAD_DOTDOT",
                format!("{at}: second entry is '{}'", show(e.name)),
            );
            return;
        }
        if e.ino == 0 || !self.inode_in_use(u64::from(e.ino)) {
            self.out.add(
                "DIR_BAD_DOTDOT",
                format!("{at}: points to unused inode {}", e.ino),
            );
            return;
        }
        self.dotdot.insert(d.ino, e.ino);
        self.bump_ref(e.ino);
    }

    pub(super) fn bump_ref(&mut self, ino: u32) {
        if let Some(r) = self.refs.get_mut(ino as usize) {
            *r = r.saturating_add(1);
        }
    }

    pub(super) fn dir_entry(&mut self, d: &DirRec, st: &mut DirScan, e: &dir::RawEntry, lblk: u64) {
        let (name, ino) = (show(&e.name), e.ino);
        let at = format!("directory inode {}, block {lblk}, entry '{name}'", d.ino);
        if e.name.is_empty() || e.name.contains(&b'/') || e.name.contains(&0) {
            self.out.add("DIR_BAD_NAME", format!("{at}: invalid name"));
        }
        if e.name == b"." || e.name == b".." {
            self.out
                .add("DIR_DUP_DOT", format!("{at}: extra '.' or '..' entry"));
            return;
        }
        if u64::from(ino) > self.geo.inodes()
            || ino < self.geo.first_ino
            || self.special.contains(&ino)
        {
            self.out.add(
                "DIR_ENTRY_BAD_INODE",
                format!("{at}: refers to reserved or invalid inode {ino}"),
            );
            return;
        }
        let kind = self.kind[ino as usize];
        if kind == K_FREE {
            self.out.add(
                "DIR_ENTRY_UNUSED_INODE",
                format!("{at}: refers to unused inode {ino}"),
            );
            return;
        }
        self.bump_ref(ino);
        self.check_entry_type(&at, e.ft, kind);
        if st.names.len() < MAX_NAMES_PER_DIR && !st.names.insert(e.name.clone()) {
            self.out
                .add("DIR_DUP_ENTRY", format!("{at}: duplicate name"));
        }
        if kind == FT_DIR {
            if let Some(p) = self.parent.get(&ino) {
                self.out.add(
                    "DIR_MULTIPLY_LINKED",
                    format!("{at}: directory {ino} is already linked from directory {p}"),
                );
            } else {
                self.parent.insert(ino, d.ino);
            }
        }
    }

    pub(super) fn check_entry_type(&mut self, at: &str, ft: u8, kind: u8) {
        let want = if !self.sb.has_incompat(incompat::FILETYPE) {
            0
        } else if (FT_REG..=FT_LNK).contains(&kind) {
            kind
        } else {
            return;
        };
        if ft == 0 && want != 0 {
            // e2fsck just sets a missing type ("Setting filetype"), not counted as an error.
            self.out
                .note("DIR_ENTRY_NO_TYPE", format!("{at}: no file type recorded"));
        } else if ft != want {
            self.out.add(
                "DIR_ENTRY_BAD_TYPE",
                format!(
                    "{at}: file type {ft}, inode is a {} (type {want})",
                    ft_name(kind)
                ),
            );
        }
    }

    /// Walk the htree index from the root (block 0) down to the leaves, checking each index
    /// block; returns the leaves' hash ranges, or None when the index is unusable.
    pub(super) fn scan_htree(&mut self, d: &DirRec, nblocks: u64) -> Result<Option<Htree>> {
        debug_assert!(nblocks >= 1, "htree scan of an empty directory");
        let Some(p0) = Self::lookup(&d.runs, 0) else {
            return Ok(None);
        };
        let root = self.read_block(p0)?;
        let info = match dir::decode_root_info(&root, p0) {
            Ok(i) => i,
            Err(e) => {
                self.out
                    .add("HTREE_BAD_ROOT", format!("directory inode {}: {e}", d.ino));
                return Ok(None);
            }
        };
        if let Some(why) = self.dx_root_info_error(&root, info) {
            let msg = format!("directory inode {}: htree root {why}", d.ino);
            self.out.add("HTREE_BAD_ROOT", msg);
            return Ok(None);
        }
        let Some(ents) = self.dx_block(d, &root, dir::DX_ROOT_COUNT_OFF, p0) else {
            return Ok(None);
        };
        let unsigned = self.sb.flags() & FLAG_UNSIGNED_HASH != 0 && info.hash_version <= hash::TEA;
        let version = info.hash_version + if unsigned { 3 } else { 0 };
        let mut ht = Htree {
            version,
            nodes: HashSet::from([0]),
            leaves: HashMap::new(),
        };
        let mut seen = HashSet::from([0u64]);
        let mut level = self.dx_children(d, &ents, (0, 0xFFFF_FFFE), nblocks, &mut seen);
        for _ in 0..info.indirect_levels {
            let mut next = Vec::new();
            for (lblk, range) in level {
                let Some(pb) = Self::lookup(&d.runs, lblk) else {
                    continue;
                };
                if !self.spend_dir_budget(1) {
                    return Ok(None);
                }
                let b = self.read_block(pb)?;
                if let Some(e) = self.dx_block(d, &b, dir::DX_NODE_COUNT_OFF, pb) {
                    ht.nodes.insert(lblk);
                    next.extend(self.dx_children(d, &e, range, nblocks, &mut seen));
                }
            }
            level = next;
        }
        ht.leaves.extend(level);
        Ok(Some(ht))
    }

    /// Root info fields e2fsck's handle_htree rejects beyond `dir::decode_root_info`.
    pub(super) fn dx_root_info_error(&self, root: &[u8], info: dir::DxRootInfo) -> Option<String> {
        let max_levels = if self.sb.has_incompat(incompat::LARGEDIR) {
            3
        } else {
            2
        };
        if le32(root, 0x18) != 0 {
            Some("reserved field is not zero".into())
        } else if info.hash_version > hash::TEA {
            Some(format!(
                "hash version {} is not legacy, half_md4 or tea",
                info.hash_version
            ))
        } else if info.indirect_levels >= max_levels {
            Some(format!("has {} indirect levels", info.indirect_levels))
        } else if root[0x1F] & 1 != 0 {
            Some("has an incompatible flag set".into())
        } else {
            None
        }
    }

    pub(super) fn dx_block(
        &mut self,
        d: &DirRec,
        b: &[u8],
        count_off: usize,
        pblk: u64,
    ) -> Option<Vec<(u32, u32)>> {
        if self.geo.csum {
            if let Err(e) = dir::verify_dx_csum(d.seed, b, count_off, pblk) {
                self.out
                    .add("HTREE_CHECKSUM", format!("directory inode {}: {e}", d.ino));
            }
        }
        match dir::decode_dx(b, count_off, self.geo.csum, pblk) {
            Ok(e) => Some(e.entries),
            Err(e) => {
                self.out
                    .add("HTREE_BAD_NODE", format!("directory inode {}: {e}", d.ino));
                None
            }
        }
    }

    /// Children of one index block with the hash range each may hold.
    pub(super) fn dx_children(
        &mut self,
        d: &DirRec,
        ents: &[(u32, u32)],
        range: (u32, u32),
        nblocks: u64,
        seen: &mut HashSet<u64>,
    ) -> Vec<(u64, (u32, u32))> {
        debug_assert!(range.0 <= range.1, "hash range {range:?}");
        let mut out = Vec::new();
        let mut prev = range.0;
        for (i, &(h, blk)) in ents.iter().enumerate() {
            let lo = if i == 0 { range.0 } else { h & !1 };
            let hi = ents.get(i + 1).map_or(range.1, |&(n, _)| n & !1);
            if lo < prev || lo < range.0 || lo > range.1 {
                self.out.add(
                    "HTREE_HASH_ORDER",
                    format!(
                        "directory inode {}: index entry {i} hash {lo:#x} out of order",
                        d.ino
                    ),
                );
            }
            prev = prev.max(lo);
            let blk = u64::from(blk & DX_BLOCK_MASK);
            if blk >= nblocks || !seen.insert(blk) {
                self.out.add("HTREE_BAD_NODE", format!("directory inode {}: index entry {i} points to block {blk} (outside the directory or referenced twice)", d.ino));
                continue;
            }
            out.push((blk, (lo, hi.max(lo))));
        }
        out
    }
}

/// A record length as stored: blocks of 64 KiB and more keep the high bits in the low two
/// bits, and 65535 or 0 stands for a whole 64 KiB block (ext2fs_get_rec_len).
pub(super) fn rec_len(stored: u16, block_size: usize) -> usize {
    let len = usize::from(stored);
    if block_size < 65536 {
        len
    } else if stored == u16::MAX || stored == 0 {
        block_size
    } else {
        (len & 65532) | ((len & 3) << 16)
    }
}

/// The entries of a leaf block up to the first bad record (as `dir::parse_block`, with
/// record lengths decoded for every block size), and what was wrong with that record.
pub(super) fn parse_entries(b: &[u8], csum: bool) -> (Vec<dir::RawEntry>, Option<String>) {
    let end = dir::entries_end(b.len(), csum);
    let mut out = Vec::new();
    let mut off = 0;
    while off < end {
        if off + 8 > end {
            return (out, Some(format!("entry at {off} truncated")));
        }
        let rec_len = rec_len(le16(b, off + 4), b.len());
        let name_len = usize::from(b[off + 6]);
        if rec_len < 8
            || !rec_len.is_multiple_of(4)
            || off + rec_len > end
            || 8 + name_len > rec_len
        {
            let why = format!("entry at offset {off}: rec_len {rec_len}, name_len {name_len}");
            return (out, Some(why));
        }
        out.push(dir::RawEntry {
            off,
            ino: le32(b, off),
            rec_len,
            ft: b[off + 7],
            name: b[off + 8..off + 8 + name_len].to_vec(),
        });
        off += rec_len;
    }
    debug_assert_eq!(off, end, "records past the entries' end");
    (out, None)
}
