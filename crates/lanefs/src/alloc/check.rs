//! The allocator's self-check (`fs.diagnostics().check_allocator()`): every group's in-memory state
//! against its bitmap, for tests and `lanefs fsck`-style diagnostics; safe to call while
//! other threads allocate (each group is checked under its own lock).

use super::buddy::Buddy;
use super::lists::avg_order;
use super::Allocator;
use crate::disk::group::BG_BLOCK_UNINIT;
use crate::disk::{set_bit, test_bit};
use crate::error::{Error, Result};
use std::sync::atomic::Ordering;

impl Allocator {
    /// Check every group's in-memory state against its bitmap: the buddy equals one
    /// rebuilt from bitmap + pending frees + preallocations, the counters and scan-list
    /// membership match it, the descriptor's free count matches the bitmap, and no
    /// preallocated block is in use. Takes each group's lock in turn.
    pub fn check(&self) -> Result<()> {
        let bad = |g: u32, what: String| Err(Error::corrupt("allocator group", u64::from(g), what));
        for grp in &self.groups {
            let g = grp.no;
            let bm = self.block_buf(g)?;
            let st = grp.desc.lock();
            let mut map = bm.read().to_vec();
            if st.d.flags() & BG_BLOCK_UNINIT != 0 {
                self.init_block_bitmap(g, &mut map);
            }
            let len = self.geo.group_len(g) as usize;
            let zeros = (0..len).filter(|&i| !test_bit(&map, i)).count() as u32;
            if zeros != st.d.free_blocks() || zeros != grp.free_blocks.load(Ordering::Relaxed) {
                return bad(
                    g,
                    format!("bitmap has {zeros} free, descriptor {}", st.d.free_blocks()),
                );
            }
            let Some(b) = st.buddy.as_ref() else { continue };
            for i in len..map.len() * 8 {
                set_bit(&mut map, i);
            }
            for &(o, n, _) in &st.busy_blocks {
                for i in o..o + n {
                    set_bit(&mut map, i as usize);
                }
            }
            for pa in &st.pas {
                for i in pa.off..pa.off + pa.left {
                    if test_bit(&map, i as usize) {
                        return bad(g, format!("preallocated block {i} is in use"));
                    }
                    set_bit(&mut map, i as usize);
                }
            }
            if *b != Buddy::build(&map, self.orders) {
                return bad(g, "buddy differs from one rebuilt from the bitmap".into());
            }
            if grp.avail.load(Ordering::Relaxed) != b.nfree()
                || grp.frags.load(Ordering::Relaxed) != b.fragments()
            {
                return bad(g, "unlocked counters differ from the buddy".into());
            }
            if self.opts.optimize_scan {
                let largest = b.largest_order().map(|o| o as u8);
                let avg = (b.nfree() > 0).then(|| avg_order(b.avg_fragment(), self.orders) as u8);
                if st.listed != (largest, avg) {
                    return bad(
                        g,
                        format!("listed {:?}, buddy says {:?}", st.listed, (largest, avg)),
                    );
                }
                for o in 0..self.orders {
                    if self.lists.largest[o].contains(g) != (largest == Some(o as u8))
                        || self.lists.avg[o].contains(g) != (avg == Some(o as u8))
                    {
                        return bad(g, format!("scan-list membership wrong at order {o}"));
                    }
                }
            }
        }
        Ok(())
    }
}
