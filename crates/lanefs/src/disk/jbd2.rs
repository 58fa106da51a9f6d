//! jbd2 journal superblock (big-endian), enough to format and inspect a journal.

/// jbd2 magic number.
pub const JBD2_MAGIC: u32 = 0xC03B3998;
/// Block type: superblock v2.
pub const SUPERBLOCK_V2: u32 = 4;
/// Incompat: 64-bit block numbers.
pub const INCOMPAT_64BIT: u32 = 0x2;
/// Incompat: checksum v3.
pub const INCOMPAT_CSUM_V3: u32 = 0x10;

fn be32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_be_bytes());
}

fn get_be32(b: &[u8], off: usize) -> u32 {
    u32::from_be_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

/// Format a clean, empty v2 journal superblock into `b` (one block).
pub fn format_superblock(b: &mut [u8], block_size: u32, blocks: u32, uuid: [u8; 16]) {
    b.fill(0);
    be32(b, 0x0, JBD2_MAGIC);
    be32(b, 0x4, SUPERBLOCK_V2);
    be32(b, 0x8, 0);
    be32(b, 0xC, block_size);
    be32(b, 0x10, blocks);
    be32(b, 0x14, 1); // s_first: first log block
    be32(b, 0x18, 1); // s_sequence
    be32(b, 0x1C, 0); // s_start: 0 = clean
    b[0x30..0x40].copy_from_slice(&uuid);
    be32(b, 0x40, 1); // s_nr_users
    be32(b, 0x48, 0); // s_max_transaction
    be32(b, 0x4C, 0);
}

/// Whether the journal superblock says the log needs replay (s_start != 0).
pub fn needs_recovery(b: &[u8]) -> Option<bool> {
    if b.len() < 0x20 || get_be32(b, 0) != JBD2_MAGIC {
        return None;
    }
    Some(get_be32(b, 0x1C) != 0)
}
