//! jbd2 journal structures (big-endian): the journal superblock, block headers,
//! descriptor blocks with their tags, revoke blocks and commit blocks, and the checksums
//! of checksum v2/v3. Layouts follow include/linux/jbd2.h.

use super::crc32c_raw;

/// jbd2 magic number.
pub const JBD2_MAGIC: u32 = 0xC03B3998;
/// Block type: descriptor.
pub const DESCRIPTOR: u32 = 1;
/// Block type: commit.
pub const COMMIT: u32 = 2;
/// Block type: superblock v1.
pub const SUPERBLOCK_V1: u32 = 3;
/// Block type: superblock v2.
pub const SUPERBLOCK_V2: u32 = 4;
/// Block type: revoke.
pub const REVOKE: u32 = 5;

/// Compat: v1 commit-block checksums (crc32, not verified by lanefs).
pub const COMPAT_CHECKSUM: u32 = 0x1;
/// Incompat: revoke blocks.
pub const INCOMPAT_REVOKE: u32 = 0x1;
/// Incompat: 64-bit block numbers.
pub const INCOMPAT_64BIT: u32 = 0x2;
/// Incompat: asynchronous commit.
pub const INCOMPAT_ASYNC_COMMIT: u32 = 0x4;
/// Incompat: checksum v2.
pub const INCOMPAT_CSUM_V2: u32 = 0x8;
/// Incompat: checksum v3.
pub const INCOMPAT_CSUM_V3: u32 = 0x10;
/// Incompat: fast commits.
pub const INCOMPAT_FAST_COMMIT: u32 = 0x20;
/// Incompat features lanefs replays.
pub const INCOMPAT_KNOWN: u32 =
    INCOMPAT_REVOKE | INCOMPAT_64BIT | INCOMPAT_ASYNC_COMMIT | INCOMPAT_CSUM_V2 | INCOMPAT_CSUM_V3;

/// Tag flag: the block began with the magic, which was zeroed in the log.
pub const FLAG_ESCAPE: u32 = 1;
/// Tag flag: the UUID of the previous tag applies (no UUID follows).
pub const FLAG_SAME_UUID: u32 = 2;
/// Tag flag: last tag of the descriptor.
pub const FLAG_LAST_TAG: u32 = 8;

/// Checksum type crc32c in the superblock.
pub const CRC32C_CHKSUM: u8 = 4;

/// Bytes of the checksum tail at the end of descriptor and revoke blocks (v2/v3).
pub const TAIL: usize = 4;
/// Bytes of the common block header.
pub const HEADER: usize = 12;
/// Offset of the first record in a revoke block.
pub const REVOKE_HEADER: usize = 16;

fn be32(b: &[u8], off: usize) -> u32 {
    u32::from_be_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

fn put_be32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_be_bytes());
}

fn be16(b: &[u8], off: usize) -> u16 {
    u16::from_be_bytes([b[off], b[off + 1]])
}

fn be64(b: &[u8], off: usize) -> u64 {
    (u64::from(be32(b, off)) << 32) | u64::from(be32(b, off + 4))
}

/// The journal superblock, kept as its raw first 1024 bytes.
#[derive(Clone, Debug)]
pub struct JournalSuper {
    /// Raw bytes (the first 1024 bytes of the journal's block 0).
    pub raw: Vec<u8>,
}

impl JournalSuper {
    /// Decode, or say what is wrong.
    pub fn decode(b: &[u8]) -> Result<JournalSuper, String> {
        if b.len() < 1024 {
            return Err("journal superblock shorter than 1024 bytes".into());
        }
        if be32(b, 0) != JBD2_MAGIC {
            return Err("bad jbd2 magic".into());
        }
        let t = be32(b, 4);
        if t != SUPERBLOCK_V1 && t != SUPERBLOCK_V2 {
            return Err(format!("block type {t} is not a journal superblock"));
        }
        Ok(JournalSuper {
            raw: b[..1024].to_vec(),
        })
    }
    /// Whether this is a v2 superblock (features valid).
    pub fn v2(&self) -> bool {
        be32(&self.raw, 4) == SUPERBLOCK_V2
    }
    /// Journal block size.
    pub fn block_size(&self) -> u32 {
        be32(&self.raw, 0xC)
    }
    /// Blocks in the journal.
    pub fn maxlen(&self) -> u32 {
        be32(&self.raw, 0x10)
    }
    /// First log block.
    pub fn first(&self) -> u32 {
        be32(&self.raw, 0x14)
    }
    /// First transaction expected in the log.
    pub fn sequence(&self) -> u32 {
        be32(&self.raw, 0x18)
    }
    /// Block of the log's start (0: the log is empty).
    pub fn start(&self) -> u32 {
        be32(&self.raw, 0x1C)
    }
    /// Error recorded by an aborted journal.
    pub fn errno(&self) -> i32 {
        be32(&self.raw, 0x20) as i32
    }
    /// Compat features.
    pub fn compat(&self) -> u32 {
        if self.v2() {
            be32(&self.raw, 0x24)
        } else {
            0
        }
    }
    /// Incompat features.
    pub fn incompat(&self) -> u32 {
        if self.v2() {
            be32(&self.raw, 0x28)
        } else {
            0
        }
    }
    /// Read-only compat features (jbd2 defines none).
    pub fn ro_compat(&self) -> u32 {
        if self.v2() {
            be32(&self.raw, 0x2C)
        } else {
            0
        }
    }
    /// File systems sharing the journal (`s_nr_users`; 1 for an internal journal).
    pub fn nr_users(&self) -> u32 {
        if self.v2() {
            be32(&self.raw, 0x40)
        } else {
            1
        }
    }
    /// What e2fsck's journal load refuses in a superblock whose magic and type are right:
    /// unknown incompat or read-only features, both checksum versions, a bad checksum, a
    /// log start or length out of range, too many users.
    pub fn problem(&self) -> Option<String> {
        let unknown = self.incompat() & !(INCOMPAT_KNOWN | INCOMPAT_FAST_COMMIT);
        if unknown != 0 {
            return Some(format!("unknown incompat features {unknown:#x}"));
        }
        if self.ro_compat() != 0 {
            return Some(format!(
                "unknown read-only features {:#x}",
                self.ro_compat()
            ));
        }
        let both = INCOMPAT_CSUM_V2 | INCOMPAT_CSUM_V3;
        if self.incompat() & both == both {
            return Some("both checksum v2 and v3".into());
        }
        if !self.checksum_ok() {
            return Some("checksum mismatch".into());
        }
        if self.first() == 0 || self.first() >= self.maxlen() || self.maxlen() < 1024 {
            return Some(format!(
                "log starts at {} of {} blocks",
                self.first(),
                self.maxlen()
            ));
        }
        if self.nr_users() > 48 {
            return Some(format!("{} users", self.nr_users()));
        }
        None
    }
    /// UUID.
    pub fn uuid(&self) -> [u8; 16] {
        let mut u = [0u8; 16];
        u.copy_from_slice(&self.raw[0x30..0x40]);
        u
    }
    /// Set the log start and the sequence of its first transaction.
    pub fn set_start(&mut self, start: u32, sequence: u32) {
        debug_assert!(
            start == 0 || (start >= self.first() && start < self.maxlen()),
            "log start {start} outside blocks {}..{}",
            self.first(),
            self.maxlen()
        );
        put_be32(&mut self.raw, 0x1C, start);
        put_be32(&mut self.raw, 0x18, sequence);
    }
    /// Set the incompat features (and the crc32c checksum type for checksum v3).
    pub fn set_incompat(&mut self, f: u32) {
        put_be32(&mut self.raw, 0x4, SUPERBLOCK_V2);
        put_be32(&mut self.raw, 0x28, f);
        if f & (INCOMPAT_CSUM_V2 | INCOMPAT_CSUM_V3) != 0 {
            self.raw[0x50] = CRC32C_CHKSUM;
            // v2/v3 checksums replace the v1 commit checksum.
            let c = be32(&self.raw, 0x24) & !COMPAT_CHECKSUM;
            put_be32(&mut self.raw, 0x24, c);
        }
    }
    /// Clear the v1 commit-block checksum (crc32), which lanefs does not write.
    pub fn clear_compat_checksum(&mut self) {
        if self.v2() {
            let c = be32(&self.raw, 0x24) & !COMPAT_CHECKSUM;
            put_be32(&mut self.raw, 0x24, c);
        }
    }
    /// The features lanefs writes a log with, as ext4 sets them at mount: revoke records,
    /// 64-bit block numbers when the file system has 64-bit blocks (kept once on), and
    /// checksum v3 exactly when the file system has metadata_csum (no checksums on ext3
    /// and uninit_bg images, as ext4 without `journal_checksum`).
    pub fn set_write_features(&mut self, bit64: bool, metadata_csum: bool) {
        let mut f =
            self.incompat() & !(INCOMPAT_CSUM_V2 | INCOMPAT_CSUM_V3 | INCOMPAT_ASYNC_COMMIT);
        f |= INCOMPAT_REVOKE;
        if bit64 {
            f |= INCOMPAT_64BIT;
        }
        if metadata_csum {
            f |= INCOMPAT_CSUM_V3;
        }
        self.set_incompat(f);
        self.clear_compat_checksum();
    }
    /// Whether checksum v2 or v3 is on.
    pub fn csum(&self) -> bool {
        self.incompat() & (INCOMPAT_CSUM_V2 | INCOMPAT_CSUM_V3) != 0
    }
    /// The seed of every log checksum: crc32c of the UUID.
    pub fn csum_seed(&self) -> u32 {
        crc32c_raw(!0, &self.raw[0x30..0x40])
    }
    /// Recompute the superblock checksum (v2/v3 only).
    pub fn update_checksum(&mut self) {
        if self.csum() {
            put_be32(&mut self.raw, 0xFC, 0);
            let c = crc32c_raw(!0, &self.raw);
            put_be32(&mut self.raw, 0xFC, c);
        }
    }
    /// Whether the stored checksum matches (true when checksums are off).
    pub fn checksum_ok(&self) -> bool {
        if !self.csum() {
            return true;
        }
        let mut r = self.raw.clone();
        put_be32(&mut r, 0xFC, 0);
        crc32c_raw(!0, &r) == be32(&self.raw, 0xFC)
    }
    /// Bytes of one descriptor tag under these features.
    pub fn tag_bytes(&self) -> usize {
        let f = self.incompat();
        if f & INCOMPAT_CSUM_V3 != 0 {
            return 16;
        }
        let mut sz = 12;
        if f & INCOMPAT_CSUM_V2 != 0 {
            sz += 2;
        }
        if f & INCOMPAT_64BIT != 0 {
            sz
        } else {
            sz - 4
        }
    }
    /// Bytes of one revoke record.
    pub fn revoke_record_bytes(&self) -> usize {
        if self.incompat() & INCOMPAT_64BIT != 0 {
            8
        } else {
            4
        }
    }
}

/// Format a clean, empty v2 journal superblock into `b` (one block).
pub fn format_superblock(b: &mut [u8], block_size: u32, blocks: u32, uuid: [u8; 16]) {
    debug_assert!(
        b.len() >= 1024 && b.len() <= block_size as usize,
        "journal superblock buffer of {} bytes",
        b.len()
    );
    // The checker refuses a log shorter than 1024 blocks (jbd2's JBD2_MIN_JOURNAL_BLOCKS).
    debug_assert!(blocks >= 1024, "journal of {blocks} blocks");
    b.fill(0);
    put_be32(b, 0x0, JBD2_MAGIC);
    put_be32(b, 0x4, SUPERBLOCK_V2);
    put_be32(b, 0x8, 0);
    put_be32(b, 0xC, block_size);
    put_be32(b, 0x10, blocks);
    put_be32(b, 0x14, 1); // s_first: first log block
    put_be32(b, 0x18, 1); // s_sequence
    put_be32(b, 0x1C, 0); // s_start: 0 = clean
    b[0x30..0x40].copy_from_slice(&uuid);
    put_be32(b, 0x40, 1); // s_nr_users
    put_be32(b, 0x48, 0); // s_max_transaction
    put_be32(b, 0x4C, 0);
}

/// Whether the journal superblock says the log needs replay (s_start != 0).
pub fn needs_recovery(b: &[u8]) -> Option<bool> {
    if b.len() < 0x20 || be32(b, 0) != JBD2_MAGIC {
        return None;
    }
    Some(be32(b, 0x1C) != 0)
}

/// A log block's header: (block type, sequence), or None without the magic.
pub fn header(b: &[u8]) -> Option<(u32, u32)> {
    if b.len() < HEADER || be32(b, 0) != JBD2_MAGIC {
        return None;
    }
    Some((be32(b, 4), be32(b, 8)))
}

/// Write a block header.
pub fn put_header(b: &mut [u8], kind: u32, seq: u32) {
    debug_assert!(
        (DESCRIPTOR..=REVOKE).contains(&kind) && b.len() >= HEADER,
        "header of kind {kind}"
    );
    put_be32(b, 0, JBD2_MAGIC);
    put_be32(b, 4, kind);
    put_be32(b, 8, seq);
}

/// Whether a data block must be escaped (it starts with the magic).
pub fn needs_escape(b: &[u8]) -> bool {
    be32(b, 0) == JBD2_MAGIC
}

/// Restore an escaped block's magic.
pub fn unescape(b: &mut [u8]) {
    put_be32(b, 0, JBD2_MAGIC);
}

/// Set the checksum tail of a descriptor or revoke block.
pub fn set_tail_csum(seed: u32, b: &mut [u8]) {
    let n = b.len();
    debug_assert!(n >= HEADER + TAIL, "log block of {n} bytes");
    put_be32(b, n - TAIL, 0);
    let c = crc32c_raw(seed, b);
    put_be32(b, n - TAIL, c);
}

/// Verify the checksum tail of a descriptor or revoke block.
pub fn tail_csum_ok(seed: u32, b: &[u8]) -> bool {
    let n = b.len();
    let mut c = b.to_vec();
    put_be32(&mut c, n - TAIL, 0);
    crc32c_raw(seed, &c) == be32(b, n - TAIL)
}

/// The v3 checksum of a logged block (as stored in the log) for transaction `seq`.
pub fn block_csum(seed: u32, seq: u32, data: &[u8]) -> u32 {
    let c = crc32c_raw(seed, &seq.to_be_bytes());
    crc32c_raw(c, data)
}

/// The raw crc32c register after `len` zero bytes from each one-bit seed: with it, a crc
/// of some bytes from one seed gives the crc of the same bytes from another without
/// reading them again (the register update is linear: from seeds `a` and `b` the two
/// results differ by the update of `a ^ b` over zeros).
pub struct ZeroShift {
    len: usize,
    bits: [u32; 32],
}

impl ZeroShift {
    /// The shift over `len` bytes (32 crcs of `len` zero bytes: made once per commit).
    pub fn new(len: usize) -> ZeroShift {
        let zeros = vec![0u8; len];
        ZeroShift {
            len,
            bits: std::array::from_fn(|i| crc32c_raw(1 << i, &zeros)),
        }
    }

    /// How many bytes it spans.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it spans no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The register after the zeros from seed `x`.
    fn apply(&self, x: u32) -> u32 {
        (0..32)
            .filter(|i| x >> i & 1 != 0)
            .fold(0, |acc, i| acc ^ self.bits[i])
    }
}

/// [`block_csum`] of `data` when the crc of its first `z.len()` bytes from `known_seed`
/// is already known (`known`, as a seal computes it): one pass over the rest only.
pub fn block_csum_after(
    seed: u32,
    seq: u32,
    data: &[u8],
    z: &ZeroShift,
    known_seed: u32,
    known: u32,
) -> u32 {
    debug_assert!(z.len <= data.len(), "known prefix longer than the block");
    let start = crc32c_raw(seed, &seq.to_be_bytes());
    let mid = known ^ z.apply(start ^ known_seed);
    crc32c_raw(mid, &data[z.len..])
}

/// One descriptor tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tag {
    /// Home block.
    pub blocknr: u64,
    /// FLAG_* bits.
    pub flags: u32,
    /// Block checksum (v2: low 16 bits; v3: 32 bits).
    pub csum: u32,
}

/// Encode a tag at `off` (tag layout of `js`).
pub fn put_tag(js: &JournalSuper, b: &mut [u8], off: usize, t: &Tag) {
    // A home block number cut to 32 bits would replay the block over another one.
    assert!(
        js.incompat() & INCOMPAT_64BIT != 0 || t.blocknr < 1 << 32,
        "block {} in a 32-bit journal tag",
        t.blocknr
    );
    debug_assert!(
        off + js.tag_bytes() <= b.len(),
        "tag at {off} past the block"
    );
    put_be32(b, off, t.blocknr as u32);
    if js.incompat() & INCOMPAT_CSUM_V3 != 0 {
        put_be32(b, off + 4, t.flags);
        put_be32(b, off + 8, (t.blocknr >> 32) as u32);
        put_be32(b, off + 12, t.csum);
    } else {
        b[off + 4..off + 6].copy_from_slice(&(t.csum as u16).to_be_bytes());
        b[off + 6..off + 8].copy_from_slice(&(t.flags as u16).to_be_bytes());
        if js.incompat() & INCOMPAT_64BIT != 0 {
            put_be32(b, off + 8, (t.blocknr >> 32) as u32);
        }
    }
}

/// The tags of a descriptor block, in order (stops at the last tag or the usable end).
pub fn tags(js: &JournalSuper, b: &[u8]) -> Vec<Tag> {
    let tb = js.tag_bytes();
    let end = b.len() - if js.csum() { TAIL } else { 0 };
    let v3 = js.incompat() & INCOMPAT_CSUM_V3 != 0;
    let big = js.incompat() & INCOMPAT_64BIT != 0;
    let mut out = Vec::new();
    let mut off = HEADER;
    while off + tb <= end {
        let lo = u64::from(be32(b, off));
        // The flags' low 16 bits sit at offset 6 in every layout.
        let flags = u32::from(be16(b, off + 6));
        let hi = if big { u64::from(be32(b, off + 8)) } else { 0 };
        let csum = if v3 {
            be32(b, off + 12)
        } else {
            u32::from(be16(b, off + 4))
        };
        out.push(Tag {
            blocknr: lo | (hi << 32),
            flags,
            csum,
        });
        off += tb;
        if flags & FLAG_SAME_UUID == 0 {
            off += 16;
        }
        if flags & FLAG_LAST_TAG != 0 {
            break;
        }
    }
    out
}

/// The block numbers of a revoke block, or None if its count is impossible.
pub fn revoke_records(js: &JournalSuper, b: &[u8]) -> Option<Vec<u64>> {
    let count = be32(b, 12) as usize;
    let tail = if js.csum() { TAIL } else { 0 };
    if count < REVOKE_HEADER || count > b.len() - tail {
        return None;
    }
    let rb = js.revoke_record_bytes();
    let mut out = Vec::new();
    let mut off = REVOKE_HEADER;
    while off + rb <= count {
        out.push(if rb == 8 {
            be64(b, off)
        } else {
            u64::from(be32(b, off))
        });
        off += rb;
    }
    Some(out)
}

/// Fill a revoke block with `records` (as many as fit); returns how many were taken.
pub fn put_revoke(js: &JournalSuper, b: &mut [u8], seq: u32, records: &[u64]) -> usize {
    b.fill(0);
    put_header(b, REVOKE, seq);
    let rb = js.revoke_record_bytes();
    let tail = if js.csum() { TAIL } else { 0 };
    let room = (b.len() - tail - REVOKE_HEADER) / rb;
    let n = room.min(records.len());
    let mut off = REVOKE_HEADER;
    for &r in &records[..n] {
        // A record cut to 32 bits would revoke (skip on replay) some other block.
        assert!(
            rb == 8 || r < 1 << 32,
            "block {r} in a 32-bit revoke record"
        );
        if rb == 8 {
            put_be32(b, off, (r >> 32) as u32);
            put_be32(b, off + 4, r as u32);
        } else {
            put_be32(b, off, r as u32);
        }
        off += rb;
    }
    debug_assert!(off + tail <= b.len(), "revoke records past the tail");
    put_be32(b, 12, off as u32);
    if js.csum() {
        set_tail_csum(js.csum_seed(), b);
    }
    n
}

/// Fill a commit block for transaction `seq`.
pub fn put_commit(js: &JournalSuper, b: &mut [u8], seq: u32, sec: u64, nsec: u32) {
    debug_assert!(
        b.len() >= 64 && nsec < 1_000_000_000,
        "commit block of {} bytes at {sec}.{nsec}",
        b.len()
    );
    b.fill(0);
    put_header(b, COMMIT, seq);
    put_be32(b, 48, (sec >> 32) as u32);
    put_be32(b, 52, sec as u32);
    put_be32(b, 56, nsec);
    if js.csum() {
        let c = crc32c_raw(js.csum_seed(), b);
        put_be32(b, 16, c);
    }
}

/// Whether a commit block's checksum holds (true without v2/v3 checksums).
pub fn commit_csum_ok(js: &JournalSuper, b: &[u8]) -> bool {
    if !js.csum() {
        return true;
    }
    let mut c = b.to_vec();
    put_be32(&mut c, 16, 0);
    crc32c_raw(js.csum_seed(), &c) == be32(b, 16)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn js() -> JournalSuper {
        let mut b = vec![0u8; 4096];
        format_superblock(&mut b, 4096, 1024, [7; 16]);
        let mut j = JournalSuper::decode(&b).unwrap();
        j.set_incompat(INCOMPAT_64BIT | INCOMPAT_CSUM_V3 | INCOMPAT_REVOKE);
        j.update_checksum();
        j
    }

    /// The log's checksum of a sealed leaf from the seal's crc equals the one computed
    /// over the whole block, for every block size, seed and sequence tried.
    #[test]
    fn block_csum_after_a_prefix_matches_a_full_pass() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        for bs in [1024usize, 2048, 4096, 65536] {
            let z = ZeroShift::new(bs - 12);
            for _ in 0..20 {
                let mut b = vec![0u8; bs];
                rng.fill(&mut b[..]);
                let (lseed, jseed, seq) = (rng.gen::<u32>(), rng.gen::<u32>(), rng.gen::<u32>());
                let known = crate::disk::dir::set_leaf_csum(lseed, &mut b);
                assert_eq!(
                    block_csum_after(jseed, seq, &b, &z, lseed, known),
                    block_csum(jseed, seq, &b),
                    "bs {bs}"
                );
            }
        }
    }

    #[test]
    fn superblock_checksum_round_trip() {
        let mut j = js();
        assert!(j.checksum_ok());
        j.set_start(5, 9);
        assert!(!j.checksum_ok());
        j.update_checksum();
        assert!(j.checksum_ok());
        assert_eq!((j.start(), j.sequence(), j.tag_bytes()), (5, 9, 16));
    }

    #[test]
    fn tags_round_trip() {
        let j = js();
        let mut b = vec![0u8; 4096];
        put_header(&mut b, DESCRIPTOR, 3);
        let t1 = Tag {
            blocknr: 0x1_0000_0005,
            flags: FLAG_ESCAPE,
            csum: 0xdead_beef,
        };
        let t2 = Tag {
            blocknr: 9,
            flags: FLAG_SAME_UUID | FLAG_LAST_TAG,
            csum: 1,
        };
        put_tag(&j, &mut b, HEADER, &t1);
        put_tag(&j, &mut b, HEADER + 16 + 16, &t2);
        set_tail_csum(j.csum_seed(), &mut b);
        assert!(tail_csum_ok(j.csum_seed(), &b));
        assert_eq!(tags(&j, &b), vec![t1, t2]);
    }

    #[test]
    fn revoke_and_commit_round_trip() {
        let j = js();
        let mut b = vec![0u8; 4096];
        let recs: Vec<u64> = (0..1000).map(|i| i * 3 + (1 << 33)).collect();
        let n = put_revoke(&j, &mut b, 4, &recs);
        assert_eq!(n, (4096 - 4 - 16) / 8);
        assert!(tail_csum_ok(j.csum_seed(), &b));
        assert_eq!(revoke_records(&j, &b).unwrap(), recs[..n].to_vec());
        put_commit(&j, &mut b, 4, 1_700_000_000, 5);
        assert!(commit_csum_ok(&j, &b));
        assert_eq!(header(&b), Some((COMMIT, 4)));
        b[100] ^= 1;
        assert!(!commit_csum_ok(&j, &b));
    }
}
