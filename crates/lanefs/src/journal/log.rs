//! The log area: where the journal's blocks live on the device, and the circular log
//! inside it (`first..maxlen`, wrapping back to `first`).

use crate::dev::BlockDevice;
use crate::disk::jbd2::JournalSuper;
use crate::error::{Error, Result};
use crate::extmap::{ExtentMap, Mapping};

/// The journal inode's blocks and its superblock.
pub struct LogArea {
    /// Physical runs of the journal: (first journal block, first device block, length).
    runs: Vec<(u32, u64, u32)>,
    /// The journal superblock as last written.
    pub js: JournalSuper,
    /// The rest of the superblock's block (past its 1024 bytes), rewritten as read.
    sb_rest: Vec<u8>,
    /// Device block of the journal superblock.
    pub sb_blk: u64,
    /// Block size.
    pub bs: usize,
}

impl LogArea {
    /// Map a journal inode's extents; `ino` only names it in errors.
    pub fn new(
        ext: &ExtentMap,
        ino: u64,
        dev_blocks: u64,
        read: impl Fn(u64) -> Result<Vec<u8>>,
        bs: usize,
    ) -> Result<LogArea> {
        let mut runs = Vec::new();
        let mut l = 0u32;
        while let Mapping::Mapped(p, _, left) = ext.map(l) {
            if p.checked_add(u64::from(left))
                .is_none_or(|e| e > dev_blocks)
            {
                return Err(Error::corrupt(
                    "journal inode",
                    ino,
                    "journal block outside the file system",
                ));
            }
            runs.push((l, p, left));
            l = l
                .checked_add(left)
                .ok_or_else(|| Error::corrupt("journal inode", ino, "journal extent overflows"))?;
        }
        // The journal is a file: no two of its blocks are one block of the device (a map
        // naming one block many times would make the log as long as 2^32 blocks).
        let mut phys: Vec<(u64, u32)> = runs.iter().map(|&(_, p, n)| (p, n)).collect();
        phys.sort_unstable();
        if phys.windows(2).any(|w| w[0].0 + u64::from(w[0].1) > w[1].0) {
            return Err(Error::corrupt(
                "journal inode",
                ino,
                "two journal blocks are one device block",
            ));
        }
        let Some(&(_, sb_blk, _)) = runs.first() else {
            return Err(Error::corrupt(
                "journal inode",
                ino,
                "journal has no first block",
            ));
        };
        let raw = read(sb_blk)?;
        let js = JournalSuper::decode(&raw)
            .map_err(|e| Error::corrupt("journal superblock", sb_blk, e))?;
        let area = LogArea {
            runs,
            js,
            sb_rest: raw[1024..].to_vec(),
            sb_blk,
            bs,
        };
        area.validate(l)?;
        Ok(area)
    }

    fn validate(&self, mapped: u32) -> Result<()> {
        let js = &self.js;
        let bad = |why: String| Err(Error::corrupt("journal superblock", self.sb_blk, why));
        if js.block_size() as usize != self.bs {
            return bad(format!(
                "journal block size {} differs from the file system's {}",
                js.block_size(),
                self.bs
            ));
        }
        if js.maxlen() > mapped {
            return bad(format!(
                "journal claims {} blocks but its inode maps {mapped}",
                js.maxlen()
            ));
        }
        if js.first() == 0 || js.first().saturating_add(2) >= js.maxlen() {
            return bad(format!(
                "log area {}..{} is empty or invalid",
                js.first(),
                js.maxlen()
            ));
        }
        let start = js.start();
        if start != 0 && (start < js.first() || start >= js.maxlen()) {
            return bad(format!("log start {start} outside the log area"));
        }
        if !js.checksum_ok() {
            return bad("checksum mismatch".into());
        }
        Ok(())
    }

    /// First log block.
    pub fn first(&self) -> u32 {
        self.js.first()
    }
    /// One past the last log block.
    pub fn end(&self) -> u32 {
        self.js.maxlen()
    }
    /// Blocks in the circular log (never zero: `validate` refuses an empty log area).
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> u32 {
        self.end() - self.first()
    }
    /// The log position after `pos`, wrapping.
    pub fn next(&self, pos: u32) -> u32 {
        debug_assert!(self.contains(pos), "log position {pos} outside the log");
        if pos + 1 >= self.end() {
            self.first()
        } else {
            pos + 1
        }
    }
    /// Blocks from `from` up to `to` going forward (wrapping).
    pub fn distance(&self, from: u32, to: u32) -> u32 {
        debug_assert!(
            self.contains(from) && self.contains(to),
            "log positions {from}, {to} outside the log"
        );
        if to >= from {
            to - from
        } else {
            self.len() - (from - to)
        }
    }
    /// Whether `pos` is a position of the circular log.
    fn contains(&self, pos: u32) -> bool {
        (self.first()..self.end()).contains(&pos)
    }
    /// Device block of journal block `pos`.
    pub fn phys(&self, pos: u32) -> u64 {
        // Mapped by `runs` (validated at mount: the log area lies inside the journal's
        // mapped blocks).
        debug_assert!(self.contains(pos), "log position {pos} outside the log");
        let i = self.runs.partition_point(|r| r.0 <= pos) - 1;
        let (l, p, _) = self.runs[i];
        p + u64::from(pos - l)
    }
    /// Read journal block `pos`.
    pub fn read(&self, dev: &dyn BlockDevice, pos: u32) -> Result<Vec<u8>> {
        let mut b = vec![0u8; self.bs];
        dev.read_at(self.phys(pos) * self.bs as u64, &mut b)?;
        Ok(b)
    }
    /// Write `blocks` to consecutive log positions from `pos` (wrapping), coalescing
    /// physically contiguous runs; returns the position after the last.
    pub fn write_run<B: AsRef<[u8]>>(
        &self,
        dev: &dyn BlockDevice,
        mut pos: u32,
        blocks: &[B],
    ) -> Result<u32> {
        // A run longer than the log would overwrite its own start.
        debug_assert!(
            blocks.len() as u64 <= u64::from(self.len()),
            "a write longer than the log"
        );
        // At most all of them in one run: sized once, not grown by doubling.
        let mut run: Vec<&[u8]> = Vec::with_capacity(blocks.len());
        let mut run_start = 0u64;
        for b in blocks {
            let p = self.phys(pos);
            if !run.is_empty() && run_start + run.len() as u64 != p {
                dev.write_log_at(run_start * self.bs as u64, &run)?;
                run.clear();
            }
            if run.is_empty() {
                run_start = p;
            }
            run.push(b.as_ref());
            pos = self.next(pos);
        }
        dev.write_log_at(run_start * self.bs as u64, &run)?;
        Ok(pos)
    }
    /// Make every log block read as zeros, as mkfs leaves a journal: each physical run
    /// of the log punched out where the device can (an image file: nothing written, and
    /// nothing left for the flush), else read in large pieces and its blocks that are not
    /// zero written over with zeros (a block never written stays unwritten).
    pub fn wipe(&self, dev: &dyn BlockDevice) -> Result<()> {
        let bs = self.bs as u64;
        let (first, end) = (self.first(), self.end());
        for &(l, p, n) in &self.runs {
            let (from, to) = (l.max(first), (l + n).min(end));
            if from >= to {
                continue;
            }
            let (start, blocks) = (p + u64::from(from - l), u64::from(to - from));
            if !dev.punch_zeros(start * bs, blocks * bs)? {
                self.zero_written(dev, start, blocks)?;
            }
        }
        Ok(())
    }

    /// Write zeros over the blocks of `start..start + blocks` (device blocks of the log)
    /// that are not zero, read 256 at a time.
    fn zero_written(&self, dev: &dyn BlockDevice, start: u64, blocks: u64) -> Result<()> {
        const STEP: u64 = 256;
        let bs = self.bs;
        let mut buf = vec![0u8; STEP as usize * bs];
        let zero = vec![0u8; STEP as usize * bs];
        let mut at = 0;
        while at < blocks {
            let n = (blocks - at).min(STEP) as usize;
            dev.read_at((start + at) * bs as u64, &mut buf[..n * bs])?;
            // Runs of blocks that are not zero, each written over in one write.
            let mut i = 0;
            while i < n {
                let dirty = |k: usize| buf[k * bs..(k + 1) * bs].iter().any(|&b| b != 0);
                if !dirty(i) {
                    i += 1;
                    continue;
                }
                let j = (i..n).find(|&k| !dirty(k)).unwrap_or(n);
                dev.write_at((start + at + i as u64) * bs as u64, &zero[..(j - i) * bs])?;
                i = j;
            }
            at += n as u64;
        }
        Ok(())
    }

    /// Write the journal superblock (with a fresh checksum) in place.
    pub fn write_super(&mut self, dev: &dyn BlockDevice) -> Result<()> {
        self.js.update_checksum();
        let mut b = self.js.raw.clone();
        b.extend_from_slice(&self.sb_rest);
        dev.write_at(self.sb_blk * self.bs as u64, &b)
    }
}
