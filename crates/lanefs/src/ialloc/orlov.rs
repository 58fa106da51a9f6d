//! Group choice for a new inode, as ext4's: directories by Orlov over flex groups
//! (`find_group_orlov`), other inodes near their parent (`find_group_other`).

use super::{InodeAllocator, Want, NO_GROUP};
use crate::alloc::Allocator;
use crate::disk::hash;
use std::sync::atomic::Ordering;

impl InodeAllocator {
    /// Free inodes, free blocks and directories of flex group `f` (ext4's orlov_stats).
    fn flex_stats(&self, f: u32, al: &Allocator) -> (u64, u64, u64) {
        let size = 1u32 << self.geo.flex_log;
        let (mut fi, mut fb, mut dirs) = (0, 0, 0);
        for g in f * size..((f + 1) * size).min(self.geo.groups) {
            let grp = &self.groups[g as usize];
            fi += u64::from(grp.free.load(Ordering::Relaxed));
            dirs += u64::from(grp.dirs.load(Ordering::Relaxed));
            fb += u64::from(al.groups()[g as usize].free_blocks.load(Ordering::Relaxed));
        }
        (fi, fb, dirs)
    }

    /// The first group of flex group `f` with a free inode.
    fn first_free_in_flex(&self, f: u32) -> Option<u32> {
        let size = 1u32 << self.geo.flex_log;
        (f * size..((f + 1) * size).min(self.geo.groups))
            .find(|&g| self.groups[g as usize].has_free.load(Ordering::Relaxed))
    }

    /// A group for a new directory: ext4's `find_group_orlov`.
    pub(super) fn find_group_orlov(&self, want: &Want<'_>, al: &Allocator) -> Option<u32> {
        let flex = self.geo.flex_log;
        let real = self.geo.groups;
        let nflex = real.div_ceil(1 << flex);
        let freei = self.free_inodes();
        let freeb = al.free_blocks();
        let avefreei = freei / u64::from(nflex);
        let avefreeb = freeb / u64::from(nflex);
        if want.top {
            // Spread top-level directories: from a hash of the name, the flex group with
            // the fewest directories among those with at least average free space.
            let start = hash::dirhash(want.name, hash::HALF_MD4, &self.hash_seed).0 % nflex;
            let mut best: Option<(u32, u64)> = None;
            for i in 0..nflex {
                let f = (start + i) % nflex;
                let (fi, fb, dirs) = self.flex_stats(f, al);
                if fi == 0 || fi < avefreei || fb < avefreeb {
                    continue;
                }
                if best.is_none_or(|(_, d)| dirs < d) {
                    best = Some((f, dirs));
                }
            }
            if let Some(g) = best.and_then(|(f, _)| self.first_free_in_flex(f)) {
                return Some(g);
            }
        } else {
            let ipf = u64::from(self.geo.ipg) << flex;
            let bpf = u64::from(self.geo.bpg) << flex;
            let max_dirs = self.used_dirs() / u64::from(nflex) + u64::from(self.geo.ipg) / 16;
            let min_inodes = avefreei.saturating_sub(ipf / 4).max(1);
            let min_blocks = avefreeb.saturating_sub(bpf / 4);
            let hint = want.last.load(Ordering::Relaxed);
            let start = if hint != NO_GROUP && hint < real {
                hint
            } else {
                want.parent_group
            } >> flex;
            for i in 0..nflex {
                let f = (start + i) % nflex;
                let (fi, fb, dirs) = self.flex_stats(f, al);
                if dirs >= max_dirs || fi < min_inodes || fb < min_blocks {
                    continue;
                }
                if let Some(g) = self.first_free_in_flex(f) {
                    return Some(g);
                }
            }
        }
        // Fallback: the first group with at least the average free inodes, then any.
        let avg = freei / u64::from(real);
        for floor in [avg, 0] {
            for i in 0..real {
                let g = (want.parent_group + i) % real;
                let fi = u64::from(self.groups[g as usize].free.load(Ordering::Relaxed));
                if fi > 0 && fi >= floor {
                    return Some(g);
                }
            }
        }
        None
    }

    /// A group for a new non-directory: ext4's `find_group_other`.
    pub(super) fn find_group_other(&self, want: &Want<'_>, al: &Allocator) -> Option<u32> {
        let n = self.geo.groups;
        let free_i = |g: u32| self.groups[g as usize].has_free.load(Ordering::Relaxed);
        let free_b = |g: u32| al.groups()[g as usize].free_blocks.load(Ordering::Relaxed) > 0;
        if self.geo.flex_log > 0 {
            if let Some(g) = self.first_free_in_flex(want.parent_group >> self.geo.flex_log) {
                return Some(g);
            }
            let hint = want.last.load(Ordering::Relaxed);
            if hint != NO_GROUP && hint < n {
                if let Some(g) = self.first_free_in_flex(hint >> self.geo.flex_log) {
                    return Some(g);
                }
            }
            // Orlov's search for another flex group, from the next one, as for a
            // directory below the root.
            let next = ((want.parent_group >> self.geo.flex_log) + 1) << self.geo.flex_log;
            let other = Want {
                parent_group: if next >= n { 0 } else { next },
                top: false,
                ..*want
            };
            return self.find_group_orlov(&other, al);
        }
        let pg = want.parent_group % n;
        if free_i(pg) && free_b(pg) {
            return Some(pg);
        }
        // Files of one directory land together, other directories' elsewhere: start the
        // quadratic probe at the parent group plus the directory's inode number.
        let mut g = ((u64::from(pg) + want.parent_ino) % u64::from(n)) as u32;
        let mut step = 1u32;
        while step < n {
            g = ((u64::from(g) + u64::from(step)) % u64::from(n)) as u32;
            if free_i(g) && free_b(g) {
                return Some(g);
            }
            step <<= 1;
        }
        (1..=n).map(|i| (pg + i) % n).find(|&g| free_i(g))
    }
}
