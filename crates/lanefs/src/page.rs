//! Write-back cache of file data: one inode's dirty 4 KiB pages, each remembering the
//! physical block it belongs to (blocks are allocated at write time, so write-back never
//! needs the inode's metadata lock). Reads check it before going to the device. Seed 002's
//! folio cache replaces this with runs of pages.

use crate::dev::BlockDevice;
use crate::error::Result;
use std::collections::BTreeMap;

/// Dirty pages kept per inode before they are written back inline (64 MiB).
pub const PAGE_LIMIT: usize = 16384;

/// A dirty page.
pub struct Page {
    /// Physical block the page is written to.
    pub pblk: u64,
    /// Page bytes (one block).
    pub data: Box<[u8]>,
}

/// The dirty pages of one inode, by page index.
#[derive(Default)]
pub struct PageMap {
    pages: BTreeMap<u64, Page>,
}

impl PageMap {
    /// Whether nothing is dirty.
    pub fn is_empty(&self) -> bool {
        self.pages.is_empty()
    }
    /// Number of dirty pages.
    pub fn len(&self) -> usize {
        self.pages.len()
    }
    /// The dirty page at `idx`, if any.
    pub fn get(&self, idx: u64) -> Option<&Page> {
        self.pages.get(&idx)
    }
    /// Index of the first dirty page at or after `idx`.
    pub fn next_from(&self, idx: u64) -> Option<u64> {
        self.pages.range(idx..).next().map(|(&k, _)| k)
    }
    /// The page at `idx` for writing; `fill` supplies its current contents when new.
    pub fn get_mut_or(
        &mut self,
        idx: u64,
        pblk: u64,
        fill: impl FnOnce(&mut [u8]) -> Result<()>,
        bs: usize,
    ) -> Result<&mut Page> {
        if let Some(p) = self.pages.get(&idx) {
            debug_assert_eq!(p.pblk, pblk, "dirty page {idx} remapped");
        } else {
            let mut data = vec![0u8; bs].into_boxed_slice();
            fill(&mut data)?;
            self.pages.insert(idx, Page { pblk, data });
        }
        self.pages
            .get_mut(&idx)
            .ok_or_else(|| crate::error::Error::Io(format!("page {idx} vanished from the cache")))
    }
    /// Drop pages at or after `idx` (truncate).
    pub fn drop_from(&mut self, idx: u64) {
        self.pages.split_off(&idx);
    }
    /// Drop pages in `[a, b)` (punch hole).
    pub fn drop_range(&mut self, a: u64, b: u64) {
        let tail = self.pages.split_off(&a);
        let keep = tail.into_iter().filter(|(k, _)| *k >= b);
        self.pages.extend(keep);
    }
    /// Write every dirty page to the device (coalescing adjacent blocks) and forget them.
    pub fn write_back(&mut self, dev: &dyn BlockDevice, bs: usize) -> Result<()> {
        let pages = std::mem::take(&mut self.pages);
        let mut run: Vec<u8> = Vec::new();
        let mut run_start = 0u64;
        let mut run_next = u64::MAX;
        for (_, p) in pages {
            if p.pblk != run_next && !run.is_empty() {
                dev.write_at(run_start * bs as u64, &run)?;
                run.clear();
            }
            if run.is_empty() {
                run_start = p.pblk;
            }
            run.extend_from_slice(&p.data);
            run_next = p.pblk + 1;
            if run.len() >= 1 << 20 {
                dev.write_at(run_start * bs as u64, &run)?;
                run.clear();
            }
        }
        if !run.is_empty() {
            dev.write_at(run_start * bs as u64, &run)?;
        }
        Ok(())
    }
}
