//! Writing one transaction to the log (step 3 of the module documentation): its revoke
//! blocks, then descriptor blocks each followed by the copies it tags (64-bit tags,
//! checksum v3, escaped when a copy starts with the magic), a flush, the commit block
//! and a flush. The blocks' byte layout is `disk::jbd2`'s.

use super::commit::Snapshot;
use super::{CommitState, Journal};
use crate::disk::jbd2::{self, JournalSuper, ZeroShift};
use crate::disk::seal::Prefix;
use crate::error::{Error, Result};
use std::borrow::Cow;
use std::sync::atomic::Ordering;

impl Journal {
    /// Write transaction `tid` to the log: revokes, descriptors with their copies, flush,
    /// commit block, flush. Checkpoints first when it would not fit. `known[i]` is the
    /// crc its seal computed of most of copy `i`, if any.
    pub(super) fn write_log(
        &self,
        cs: &mut CommitState,
        tid: u64,
        snaps: &[Snapshot],
        known: &[Option<Prefix>],
        revoked: &[u64],
    ) -> Result<()> {
        // The shift that turns a leaf seal's crc into the log's (32 crcs of zeros: made
        // once, kept for later commits).
        let csum_log = cs.log.as_ref().is_some_and(|l| l.js.csum());
        if let Some(p) = known.iter().flatten().next().filter(|_| csum_log) {
            if cs.shift.as_ref().map(ZeroShift::len) != Some(p.len) {
                cs.shift = Some(ZeroShift::new(p.len));
            }
        }
        let log = cs
            .log
            .as_ref()
            .ok_or_else(|| Error::io_other("committing", "no log"))?;
        let form = LogForm {
            js: &log.js,
            seed: log.js.csum_seed(),
            seq: cs.seq,
            bs: self.bs,
            shift: cs.shift.as_ref(),
        };
        // Snapshots go to the log as they are; only one starting with the magic is copied.
        let mut blocks: Vec<Cow<'_, [u8]>> =
            Vec::with_capacity(snaps.len() + snaps.len() / 16 + revoked.len() / 16 + 4);
        debug_assert!(
            (log.first()..log.end()).contains(&cs.head)
                && (log.first()..log.end()).contains(&cs.tail),
            "log head {} or tail {} outside the log {}..{}",
            cs.head,
            cs.tail,
            log.first(),
            log.end()
        );
        form.revoke_blocks(revoked, &mut blocks);
        form.descriptor_blocks(snaps, known, &mut blocks);
        self.write_run_and_commit(cs, tid, &blocks)
    }

    /// Write a transaction's `blocks` at the log head (checkpointing first when they
    /// would reach the tail), flush, then its commit block, flush, and move the head and
    /// the sequence past it. A transaction longer than the whole log is an error.
    fn write_run_and_commit(
        &self,
        cs: &mut CommitState,
        tid: u64,
        blocks: &[Cow<'_, [u8]>],
    ) -> Result<()> {
        let log = cs
            .log
            .as_ref()
            .ok_or_else(|| Error::io_other("committing", "no log"))?;
        let need = blocks.len() as u32 + 1;
        if need + 1 > log.len() {
            return Err(Error::io_other(
                format!("committing transaction {tid}"),
                format!(
                    "needs {need} log blocks but the journal holds {}",
                    log.len()
                ),
            ));
        }
        let used = log.distance(cs.tail, cs.head);
        if used + need + 1 > log.len() {
            self.checkpoint_locked(cs)?;
        }
        let log = cs
            .log
            .as_ref()
            .ok_or_else(|| Error::io_other("committing", "no log"))?;
        // Writing past the tail would overwrite transactions not yet checkpointed.
        assert!(
            log.distance(cs.tail, cs.head) + need < log.len(),
            "transaction {tid} of {need} blocks overruns the log tail"
        );
        let seq = cs.seq;
        let pos = log.write_run(&*self.dev, cs.head, blocks)?;
        self.flush()?;
        let mut c = vec![0u8; self.bs];
        let now = crate::types::Timespec::now();
        jbd2::put_commit(&log.js, &mut c, seq, now.sec as u64, now.nsec);
        let end = log.write_run(&*self.dev, pos, &[c])?;
        debug_assert_eq!(
            log.distance(cs.head, end),
            need,
            "transaction {tid}'s log blocks"
        );
        self.flush()?;
        cs.head = end;
        cs.seq = seq.wrapping_add(1);
        self.counters
            .log_blocks
            .fetch_add(u64::from(need), Ordering::Relaxed);
        Ok(())
    }
}

/// What every log block of one transaction is formatted with: the journal superblock
/// (features, uuid) and its checksum seed, the transaction's sequence number, the block size and
/// the shift that turns a leaf seal's crc into the log's checksum.
struct LogForm<'a> {
    js: &'a JournalSuper,
    /// The seed of every log checksum (`JournalSuper::csum_seed`, computed once).
    seed: u32,
    seq: u32,
    bs: usize,
    shift: Option<&'a ZeroShift>,
}

impl LogForm<'_> {
    /// Revoke blocks holding every record of `revoked`, appended to `blocks`.
    fn revoke_blocks(&self, revoked: &[u64], blocks: &mut Vec<Cow<'_, [u8]>>) {
        let mut rest = revoked;
        while !rest.is_empty() {
            let mut b = vec![0u8; self.bs];
            let n = jbd2::put_revoke(self.js, &mut b, self.seq, rest);
            debug_assert!(n > 0, "a revoke block holds no record");
            rest = &rest[n..];
            blocks.push(Cow::Owned(b));
        }
    }

    /// Descriptor blocks, each followed by the copies it tags (as many as fit one),
    /// appended to `blocks`: every copy of `snaps` once, in order.
    fn descriptor_blocks<'s>(
        &self,
        snaps: &'s [Snapshot],
        known: &[Option<Prefix>],
        blocks: &mut Vec<Cow<'s, [u8]>>,
    ) {
        let js = self.js;
        let room = self.bs - jbd2::HEADER - if js.csum() { jbd2::TAIL } else { 0 };
        let per_desc = (room - 16) / js.tag_bytes();
        debug_assert!(per_desc > 0, "a descriptor block holds no tag");
        for (chunk, known) in snaps.chunks(per_desc).zip(known.chunks(per_desc)) {
            let (d, copies) = self.descriptor(chunk, known);
            blocks.push(Cow::Owned(d));
            blocks.extend(copies);
        }
    }

    /// One descriptor block tagging the copies of `chunk` (the first tag followed by the
    /// journal's uuid, the last flagged last), and the copies as logged: escaped where
    /// one starts with the magic, borrowed otherwise.
    fn descriptor<'s>(
        &self,
        chunk: &'s [Snapshot],
        known: &[Option<Prefix>],
    ) -> (Vec<u8>, Vec<Cow<'s, [u8]>>) {
        let (js, bs) = (self.js, self.bs);
        let tb = js.tag_bytes();
        let mut d = vec![0u8; bs];
        jbd2::put_header(&mut d, jbd2::DESCRIPTOR, self.seq);
        let mut off = jbd2::HEADER;
        let mut copies = Vec::with_capacity(chunk.len());
        for (k, ((data, b), known)) in chunk.iter().zip(known).enumerate() {
            // A copy of another size would shift every log block after it.
            assert_eq!(data.len(), bs, "copy of block {} is not a block", b.blk);
            let mut copy = Cow::Borrowed(&data[..]);
            let mut flags = 0;
            if jbd2::needs_escape(&copy) {
                copy.to_mut()[..4].fill(0);
                flags |= jbd2::FLAG_ESCAPE;
            }
            let csum = self.tag_csum(&copy, known.as_ref(), flags & jbd2::FLAG_ESCAPE != 0, b.blk);
            if k > 0 {
                flags |= jbd2::FLAG_SAME_UUID;
            }
            if k + 1 == chunk.len() {
                flags |= jbd2::FLAG_LAST_TAG;
            }
            let tag = jbd2::Tag {
                blocknr: b.blk,
                flags,
                csum,
            };
            jbd2::put_tag(js, &mut d, off, &tag);
            off += tb;
            if k == 0 {
                d[off..off + 16].copy_from_slice(&js.uuid());
                off += 16;
            }
            copies.push(copy);
        }
        debug_assert!(
            off <= bs - if js.csum() { jbd2::TAIL } else { 0 },
            "descriptor tags overrun the block"
        );
        if js.csum() {
            jbd2::set_tail_csum(self.seed, &mut d);
        }
        (d, copies)
    }

    /// The tag's checksum of `copy` (block `blk`) as logged (escaped or not): from its
    /// seal's crc of most of it (`known`) through the shift when that fits, else over
    /// the whole copy; 0 in a log without checksums.
    fn tag_csum(&self, copy: &[u8], known: Option<&Prefix>, escaped: bool, blk: u64) -> u32 {
        let (seed, seq) = (self.seed, self.seq);
        // As jbd2: no checksum in the tags of a log without them; the copy's checksum
        // covers it as logged (escaped).
        match (known, self.shift) {
            _ if !self.js.csum() => 0,
            (Some(p), Some(z)) if !escaped && p.len == z.len() => {
                let c = jbd2::block_csum_after(seed, seq, copy, z, p.seed, p.crc);
                debug_assert_eq!(c, jbd2::block_csum(seed, seq, copy), "block {blk}");
                c
            }
            _ => jbd2::block_csum(seed, seq, copy),
        }
    }
}
