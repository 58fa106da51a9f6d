//! Readdir: entries in hash order with cookies that stay valid while leaves split.
//!
//! The cursor of an entry is `3 + (major>>1)<<32 | minor` of its name's hash (0 = start,
//! 1 = after ".", 3 = after ".."), for linear and htree directories alike, so a listing
//! resumed after a directory became indexed (or moved out of its inode) loses and
//! repeats nothing.

use super::DirCtx;
use crate::disk::dir::RawEntry;
use crate::error::Result;
use crate::inode::InodeState;
use crate::types::{DirEntry, FileType};

impl DirCtx<'_> {
    /// Leaf logical blocks of the directory with the lowest hash each may hold, in
    /// hash order (every block but index blocks; linear directories: hash 0 each).
    pub(super) fn leaf_blocks(&self, ino: u64, st: &InodeState) -> Result<Vec<(u32, u32)>> {
        if !self.is_htree(st) {
            return Ok((0..self.nblocks(st)).map(|b| (0, b)).collect());
        }
        self.htree_leaves(ino, st)
    }

    pub fn readdir(
        &self,
        ino: u64,
        st: &InodeState,
        pos: u64,
        max: usize,
    ) -> Result<Vec<DirEntry>> {
        if self.is_inline(st) {
            return self.inline_readdir(ino, st, pos, max);
        }
        let mut out = Vec::new();
        if pos <= 1 {
            dots(ino, self.dotdot(ino, st)?, pos, &mut out);
        }
        let version = if self.is_htree(st) {
            self.htree_version(ino, st)?
        } else {
            self.def_version()
        };
        let leaves = self.leaf_blocks(ino, st)?;
        // In an htree, start at the last leaf whose range begins below the cursor's hash:
        // earlier leaves hold only smaller hashes. Stop once enough entries are collected
        // and the next leaf starts above everything collected. A linear directory's
        // blocks hold any hashes: every block is read every time.
        let major = (pos.saturating_sub(3) >> 32) << 1;
        let first = if self.is_htree(st) {
            leaves
                .partition_point(|&(h, _)| u64::from(h) < major)
                .saturating_sub(1)
        } else {
            0
        };
        let mut all: Vec<(u64, RawEntry)> = Vec::new();
        for (k, &(_, lblk)) in leaves.iter().enumerate().skip(first) {
            let entries = self.leaf_entries(ino, st, &*self.block(st, ino, lblk)?)?;
            for e in entries {
                if e.ino == 0 || e.name == b"." || e.name == b".." {
                    continue;
                }
                let key = self.readdir_key(&e.name, version);
                if key >= pos.max(3) {
                    all.push((key, e));
                }
            }
            let top = all.iter().map(|x| x.0).max().unwrap_or(0);
            let next_start = leaves
                .get(k + 1)
                .map(|&(h, _)| 3 + ((u64::from(h) >> 1) << 32));
            if out.len() + all.len() >= max
                && next_start.is_some_and(|n| n > top)
                && self.is_htree(st)
            {
                break;
            }
        }
        self.emit_sorted(all, max, &mut out);
        Ok(out)
    }

    /// A name's readdir cookie: its hash key, above "." (0) and ".." (1).
    pub(super) fn readdir_key(&self, name: &[u8], version: u8) -> u64 {
        let (a, m) = self.hash(name, version);
        3 + ((u64::from(a) >> 1) << 32 | u64::from(m))
    }

    /// Append `all` to `out` in cookie order, stopping past `max` entries at a change of
    /// cookie (entries with equal cookies are never split between calls).
    pub(super) fn emit_sorted(
        &self,
        mut all: Vec<(u64, RawEntry)>,
        max: usize,
        out: &mut Vec<DirEntry>,
    ) {
        all.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.name.cmp(&b.1.name)));
        let mut last = None;
        for (key, e) in all {
            if out.len() >= max && last != Some(key) {
                break;
            }
            let kind = match FileType::from_dirent_code(e.ft) {
                Some(k) if self.filetype => k,
                // No type in the entry: the inode's mode says it.
                _ => crate::inode::read_disk_inode(self.ial, self.bufs, u64::from(e.ino))
                    .ok()
                    .and_then(|d| FileType::from_mode(d.mode()))
                    .unwrap_or(FileType::Regular),
            };
            out.push(DirEntry {
                ino: u64::from(e.ino),
                kind,
                name: e.name,
                next: key + 1,
            });
            last = Some(key);
        }
    }

    pub(super) fn def_version(&self) -> u8 {
        let v = self.def_hash % 3;
        v + if self.unsigned { 3 } else { 0 }
    }
}

/// "." (cookie 0) and ".." (cookie 1) as readdir returns them after cursor `pos`.
pub(super) fn dots(ino: u64, parent: u64, pos: u64, out: &mut Vec<DirEntry>) {
    let dot = |name: &[u8], ino, next| DirEntry {
        ino,
        kind: FileType::Directory,
        name: name.to_vec(),
        next,
    };
    if pos == 0 {
        out.push(dot(b".", ino, 1));
    }
    if pos <= 1 {
        out.push(dot(b"..", parent, 3));
    }
}
