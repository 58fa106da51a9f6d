//! The seal before each commit: every changed group's bitmap block written from its live
//! bitmap, and its inode fields handed to the block allocator's descriptor copy.

use super::InodeAllocator;
use crate::alloc::{Allocator, InodeFields};
use crate::disk::group::bitmap_csum;
use crate::disk::put_bitmap_word;
use std::sync::atomic::Ordering;

impl InodeAllocator {
    /// Before a commit snapshots its buffers (no handle runs): write each changed group's
    /// bitmap block from its live bitmap, and hand its inode fields (and the bitmap's
    /// checksum) to the block allocator's descriptor copy.
    pub fn seal(&self, al: &Allocator) {
        for (g, grp) in self.groups.iter().enumerate() {
            if !grp.pending.swap(false, Ordering::AcqRel) {
                continue;
            }
            let st = grp.st.lock();
            // A pending group has its maps (a claim or free built them) unless uninit.
            let bitmap_csum = match (st.uninit, grp.maps.get(), grp.ibuf.get()) {
                (false, Some(m), Some(ib)) => {
                    debug_assert_eq!(
                        m.live.zeros(self.geo.ipg as usize) as i64
                            - i64::from(grp.free.load(Ordering::Relaxed)),
                        st.skew,
                        "group {g}: a claim or free moved the free count and the live bitmap apart"
                    );
                    let mut map = ib.write();
                    // Whole words from the map (whose bits past the group's last inode are
                    // set), then the block's padding: all set, as mke2fs leaves it.
                    for w in 0..map.len() / 8 {
                        put_bitmap_word(&mut map, w, m.live.word_or_full(w));
                    }
                    self.geo
                        .csum
                        .then(|| bitmap_csum(self.geo.seed, &map, self.geo.ipg as usize / 8, true))
                }
                _ => None,
            };
            al.set_inode_fields(
                g as u32,
                InodeFields {
                    free: grp.free.load(Ordering::Relaxed),
                    dirs: grp.dirs.load(Ordering::Relaxed),
                    itable_unused: st.itable_unused,
                    uninit: st.uninit,
                    bitmap_csum,
                },
            );
        }
    }
}
