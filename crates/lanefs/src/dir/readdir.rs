//! Readdir: entries in hash order with cookies that stay valid while leaves split.
//!
//! The cursor of an entry is `3 + (major>>1)<<32 | minor` of its name's hash (0 = start,
//! 1 = after ".", 3 = after ".."), for linear and htree directories alike, so a listing
//! resumed after a directory became indexed (or moved out of its inode) loses and
//! repeats nothing.

use std::collections::BinaryHeap;

use super::DirCtx;
use crate::disk::dir::RawEntry;
use crate::error::{Error, Result};
use crate::inode::InodeState;
use crate::types::{DirEntry, FileType};
use crate::volume::Features;

impl DirCtx<'_> {
    /// Leaf logical blocks of the directory with the lowest hash each may hold, in
    /// hash order (every block but index blocks; linear directories: hash 0 each).
    pub(super) fn leaf_blocks(
        &self,
        ino: u64,
        st: &InodeState,
    ) -> Result<Box<dyn Iterator<Item = (u32, u32)>>> {
        if !self.is_htree(st) {
            return Ok(Box::new((0..self.nblocks(st)).map(|b| (0, b))));
        }
        Ok(Box::new(self.htree_leaves(ino, st)?.into_iter()))
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
        let leaves: Vec<(u32, u32)> = if self.is_htree(st) {
            self.htree_leaves(ino, st)?
        } else {
            Vec::new()
        };
        let mut all = Smallest::new(ino, max.saturating_sub(out.len()));
        let take = |all: &mut Smallest, entries: Vec<RawEntry>| -> Result<()> {
            for e in entries {
                if e.ino == 0 || e.name == b"." || e.name == b".." {
                    continue;
                }
                let key = self.readdir_key(&e.name, version);
                if key >= pos.max(3) {
                    all.push(key, e)?;
                }
            }
            Ok(())
        };
        if !self.is_htree(st) {
            // A linear directory's blocks hold any hashes: every block is read every time,
            // and only the `max` smallest cookies past `pos` are kept.
            for lblk in 0..self.nblocks(st) {
                take(
                    &mut all,
                    self.leaf_entries(ino, st, &*self.block(st, ino, lblk)?)?,
                )?;
            }
        } else {
            // Start at the last leaf whose range begins below the cursor's hash: earlier
            // leaves hold only smaller hashes. Stop once enough entries are collected and
            // the next leaf starts above everything collected.
            let major = (pos.saturating_sub(3) >> 32) << 1;
            let first = leaves
                .partition_point(|&(h, _)| u64::from(h) < major)
                .saturating_sub(1);
            for (k, &(_, lblk)) in leaves.iter().enumerate().skip(first) {
                take(
                    &mut all,
                    self.leaf_entries(ino, st, &*self.block(st, ino, lblk)?)?,
                )?;
                let next_start = leaves
                    .get(k + 1)
                    .map(|&(h, _)| 3 + ((u64::from(h) >> 1) << 32));
                if all.full() && next_start.is_some_and(|n| n > all.top()) {
                    break;
                }
            }
        }
        self.emit_sorted(all.into_vec(), max, &mut out);
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
                Some(k) if self.vol.has(Features::FILETYPE) => k,
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
        // Cookies grow along a listing: a resumed one neither repeats nor skips.
        debug_assert!(
            out.windows(2).all(|w| w[0].next <= w[1].next),
            "readdir cookies out of order"
        );
    }

    pub(super) fn def_version(&self) -> u8 {
        let v = self.vol.hash.version % 3;
        v + if self.vol.hash.unsigned { 3 } else { 0 }
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

/// The entries with the `want` smallest cookies seen, and every entry tying the largest
/// of them (a listing never splits one cookie between calls): memory per readdir call
/// is `want` entries plus the ties, whatever the directory's size.
pub(super) struct Smallest {
    ino: u64,
    want: usize,
    heap: BinaryHeap<Keyed>,
    /// Entries evicted from the heap whose cookie equals the heap's largest.
    ties: Vec<Keyed>,
}

/// Names sharing one cookie that a listing will hold at once. Distinct names collide on
/// a 63-bit cookie only by design; more than this many is a crafted directory (duplicate
/// names, say), refused as corrupt rather than collected without bound.
const MAX_TIES: usize = 4096;

struct Keyed(u64, RawEntry);

impl PartialEq for Keyed {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == std::cmp::Ordering::Equal
    }
}
impl Eq for Keyed {}
impl PartialOrd for Keyed {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Keyed {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.0, &self.1.name).cmp(&(o.0, &o.1.name))
    }
}

impl Smallest {
    pub(super) fn new(ino: u64, want: usize) -> Self {
        Smallest {
            ino,
            want: want.max(1),
            heap: BinaryHeap::new(),
            ties: Vec::new(),
        }
    }

    /// Whether `want` entries are held.
    fn full(&self) -> bool {
        self.heap.len() >= self.want
    }

    /// The largest cookie held (0 when empty).
    fn top(&self) -> u64 {
        self.heap.peek().map_or(0, |k| k.0)
    }

    pub(super) fn push(&mut self, key: u64, e: RawEntry) -> Result<()> {
        if !self.full() {
            self.heap.push(Keyed(key, e));
            return Ok(());
        }
        let top = self.top();
        if key > top {
            return Ok(());
        }
        if key == top {
            self.ties.push(Keyed(key, e));
        } else {
            self.heap.push(Keyed(key, e));
            let out = self.heap.pop().expect("heap holds want + 1 entries");
            if self.top() == out.0 {
                self.ties.push(out);
            } else {
                self.ties.clear();
            }
        }
        debug_assert!(
            self.heap.len() <= self.want && self.ties.iter().all(|t| t.0 == self.top()),
            "{} held of {}, ties off the largest cookie",
            self.heap.len(),
            self.want
        );
        if self.ties.len() > MAX_TIES {
            return Err(Error::corrupt(
                "directory",
                self.ino,
                "more than 4096 names share one readdir cookie",
            ));
        }
        Ok(())
    }

    pub(super) fn into_vec(self) -> Vec<(u64, RawEntry)> {
        self.heap
            .into_iter()
            .chain(self.ties)
            .map(|Keyed(k, e)| (k, e))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str) -> RawEntry {
        RawEntry {
            off: 0,
            ino: 12,
            rec_len: 12,
            ft: 1,
            name: name.as_bytes().to_vec(),
        }
    }

    fn keys(s: Smallest) -> Vec<(u64, String)> {
        let mut v: Vec<_> = s
            .into_vec()
            .into_iter()
            .map(|(k, e)| (k, String::from_utf8(e.name).unwrap()))
            .collect();
        v.sort();
        v
    }

    #[test]
    fn keeps_the_smallest_cookies_and_every_tie_of_the_largest() {
        let mut s = Smallest::new(2, 3);
        for (k, n) in [
            (50, "a"),
            (10, "b"),
            (40, "c"),
            (40, "d"),
            (30, "e"),
            (40, "f"),
        ] {
            s.push(k, entry(n)).unwrap();
        }
        // The three smallest are 10, 30 and one 40; the other 40s tie it.
        let got = keys(s);
        let want: Vec<(u64, String)> = [(10, "b"), (30, "e"), (40, "c"), (40, "d"), (40, "f")]
            .iter()
            .map(|&(k, n)| (k, n.to_string()))
            .collect();
        assert_eq!(got, want);

        // A smaller cookie arriving later pushes the ties out.
        let mut s = Smallest::new(2, 2);
        for (k, n) in [(40, "a"), (40, "b"), (40, "c"), (5, "d"), (6, "e")] {
            s.push(k, entry(n)).unwrap();
        }
        assert_eq!(keys(s), vec![(5, "d".to_string()), (6, "e".to_string())]);
    }

    #[test]
    fn a_crafted_pile_of_equal_cookies_is_refused_not_collected() {
        let mut s = Smallest::new(2, 1);
        let mut err = None;
        for i in 0..10_000 {
            if let Err(e) = s.push(7, entry(&format!("n{i}"))) {
                err = Some(e);
                break;
            }
        }
        let e = err.expect("the ties are bounded");
        assert!(e.to_string().contains("share one readdir cookie"), "{e}");
    }
}
