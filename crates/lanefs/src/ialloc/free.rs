//! Freeing an inode: its bit leaves the live bitmap at once and the search bitmap when
//! its transaction commits (at once if the same transaction allocated it), so nothing
//! reuses it before the free is durable.

use super::searchmap::BitLine;
use super::InodeAllocator;
use crate::alloc::Allocator;
use crate::error::{Error, Result};
use crate::journal::Handle;
use std::sync::atomic::Ordering;

impl InodeAllocator {
    /// Release inode `ino` (its bit becomes reusable once `h`'s transaction commits,
    /// or at once if the same transaction allocated it).
    pub fn free(&self, h: &Handle, al: &Allocator, ino: u64, is_dir: bool) -> Result<()> {
        debug_assert!(
            ino >= 1 && ino <= self.geo.inodes(),
            "free of inode {ino} out of range"
        );
        let g = self.geo.group_of_inode(ino);
        let grp = &self.groups[g as usize];
        let maps = self.maps(g)?;
        let used = &maps.used;
        let ib = self.ibuf(g)?;
        h.dirty(ib);
        al.dirty_desc(h, g);
        let bit = ((ino - 1) % u64::from(self.geo.ipg)) as usize;
        let mut st = grp.st.lock();
        if st.uninit || !maps.live.test(bit) {
            return Err(Error::corrupt(
                "inode bitmap",
                grp.bitmap,
                format!("inode {ino} already free"),
            ));
        }
        let free = grp.free.load(Ordering::Relaxed);
        if free >= self.geo.ipg {
            // A descriptor counting every inode free while the bitmap has this one in use.
            return Err(Error::corrupt(
                "group descriptor",
                u64::from(g),
                format!("free inode count {free} with inode {ino} in use"),
            ));
        }
        maps.live.clear(bit);
        debug_assert!(
            used.test(bit),
            "inode {ino}: in use on disk but free in the search bitmap"
        );
        grp.free.store(free + 1, Ordering::Relaxed);
        if free == 0 {
            grp.has_free.store(true, Ordering::Relaxed);
        }
        if is_dir {
            let dirs = grp.dirs.load(Ordering::Relaxed);
            grp.dirs.store(dirs.saturating_sub(1), Ordering::Relaxed);
        }
        let tid = h.tid();
        let same_tx = match &mut st.fresh {
            Some((t, map)) if *t == tid => {
                let (w, m) = BitLine::locate(map, bit);
                let was = *w & m != 0;
                *w &= !m;
                was
            }
            _ => false,
        };
        if same_tx {
            used.clear(bit);
        } else {
            st.busy.push((bit as u32, tid));
            grp.has_busy.store(true, Ordering::Release);
        }
        grp.pending.store(true, Ordering::Release);
        Ok(())
    }

    /// Transaction `tid` committed: the inodes it freed are free for everyone.
    pub fn release_committed(&self, tid: u64) {
        for grp in &self.groups {
            if !grp.has_busy.load(Ordering::Acquire) {
                continue;
            }
            let mut st = grp.st.lock();
            if let Some(m) = grp.maps.get() {
                for &(bit, _) in st.busy.iter().filter(|b| b.1 <= tid) {
                    let bit = bit as usize;
                    debug_assert!(!m.live.test(bit), "inode bit {bit} busy and live");
                    m.used.clear(bit);
                }
            }
            st.busy.retain(|b| b.1 > tid);
            if st.busy.is_empty() {
                grp.has_busy.store(false, Ordering::Release);
            }
            // A big transaction of removes leaves a big list: give its memory back.
            if st.busy.capacity() > 4096 && st.busy.len() < st.busy.capacity() / 4 {
                let keep = st.busy.len() * 2;
                st.busy.shrink_to(keep);
            }
        }
    }
}
