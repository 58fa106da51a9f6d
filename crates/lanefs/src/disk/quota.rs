//! Quota files: the kernel's quota tree (format v2, revision 1), which ext4's `quota`
//! feature keeps in hidden inodes (3 for users, 4 for groups, `s_prj_quota_inum` for
//! projects). lanefs only reads them, for `fsck` to compare the usage they record with
//! the usage it counts (as e2fsck does); it mounts quota images read-only.
//!
//! The file is 1 KiB blocks: block 0 holds the header (magic, version) and the info
//! (grace times, flags, the file's block count); block 1 is the root of a radix tree four
//! levels deep, each index block 256 little-endian block numbers indexed by one byte of
//! the id (most significant first); the fourth level names data blocks, each a 16-byte
//! header and 14 entries of 72 bytes. An all-zero entry is unused.

use super::{le32, le64};
use std::collections::HashSet;

/// Size of a quota file block.
pub const BLOCK: usize = 1024;
/// Magic of a user, group and project quota file (`INITQMAGICS`).
pub const MAGICS: [u32; 3] = [0xd9c0_1f11, 0xd9c0_1927, 0xd9c0_3f14];
const VERSION_R1: u32 = 1;
const TREE_ROOT: u32 = 1;
const TREE_DEPTH: usize = 4;
const DATA_HEADER: usize = 16;
const ENTRY: usize = 72;

/// What one entry records of an id's usage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Usage {
    /// The user, group or project.
    pub id: u32,
    /// Bytes charged (`dqb_curspace`).
    pub space: u64,
    /// Inodes charged (`dqb_curinodes`).
    pub inodes: u64,
}

/// Every used entry of quota file `file` (its bytes, holes as zeros) of type `qtype`
/// (0 user, 1 group, 2 project), in tree order; the reason when the file is not a quota
/// tree. Work and memory are bounded by the file: every block is read at most once (an
/// index block the tree names twice, or a block used both as index and data, is an
/// error; data blocks are shared by the ids they hold), so a crafted tree cannot fan out.
pub fn decode(file: &[u8], qtype: usize) -> std::result::Result<Vec<Usage>, String> {
    if file.len() < 2 * BLOCK {
        return Err(format!("{} bytes, too short for a quota tree", file.len()));
    }
    let magic = le32(file, 0);
    if MAGICS.get(qtype) != Some(&magic) {
        return Err(format!("bad magic {magic:#010x}"));
    }
    let version = le32(file, 4);
    if version != VERSION_R1 {
        return Err(format!("format version {version}, not 1"));
    }
    // dqi_blocks bounds the references as the kernel's check_reference does; blocks past
    // the file's end (a hole at its tail) read as zeros.
    let blocks = le32(file, 8 + 12);
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    let mut stack = vec![(TREE_ROOT, 0usize)];
    while let Some((blk, depth)) = stack.pop() {
        if blk >= blocks {
            return Err(format!("reference to block {blk} past the file's {blocks}"));
        }
        // Data blocks hold 14 entries each and are shared by the ids they hold; an index
        // block belongs to one place in the tree.
        debug_assert!(depth <= TREE_DEPTH, "tree walk below its data blocks");
        let first = seen.insert((blk, depth == TREE_DEPTH));
        if seen.contains(&(blk, depth != TREE_DEPTH)) || (!first && depth != TREE_DEPTH) {
            return Err(format!("block {blk} is named twice"));
        }
        if !first {
            continue;
        }
        let start = blk as usize * BLOCK;
        let zero = [0u8; BLOCK];
        let b = file.get(start..start + BLOCK).unwrap_or(&zero);
        if depth == TREE_DEPTH {
            for e in b[DATA_HEADER..].chunks_exact(ENTRY) {
                if e.iter().any(|&x| x != 0) {
                    out.push(Usage {
                        id: le32(e, 0),
                        inodes: le64(e, 24),
                        space: le64(e, 48),
                    });
                }
            }
            continue;
        }
        // Pushed in reverse so entries come out in id order.
        for i in (0..BLOCK / 4).rev() {
            let r = le32(b, i * 4);
            if r != 0 {
                stack.push((r, depth + 1));
            }
        }
    }
    Ok(out)
}

/// A quota file holding `entries` (id, space, inodes), as the kernel would write it:
/// for tests, and for fuzz seeds.
pub fn encode(qtype: usize, entries: &[(u32, u64, u64)]) -> Vec<u8> {
    debug_assert!(qtype < MAGICS.len(), "quota type {qtype}");
    let mut file = vec![0u8; 2 * BLOCK];
    file[0..4].copy_from_slice(&MAGICS[qtype].to_le_bytes());
    file[4..8].copy_from_slice(&VERSION_R1.to_le_bytes());
    let alloc = |file: &mut Vec<u8>| -> u32 {
        let n = (file.len() / BLOCK) as u32;
        file.resize(file.len() + BLOCK, 0);
        n
    };
    for &(id, space, inodes) in entries {
        let mut blk = TREE_ROOT;
        for depth in 0..TREE_DEPTH {
            let slot = blk as usize * BLOCK + ((id >> (24 - 8 * depth)) & 0xff) as usize * 4;
            let mut next = le32(&file, slot);
            if next == 0 {
                next = alloc(&mut file);
                file[slot..slot + 4].copy_from_slice(&next.to_le_bytes());
            }
            blk = next;
        }
        let base = blk as usize * BLOCK;
        let used = u16::from_le_bytes([file[base + 8], file[base + 9]]) as usize;
        assert!(
            used < (BLOCK - DATA_HEADER) / ENTRY,
            "one id per data block here"
        );
        let e = base + DATA_HEADER + used * ENTRY;
        file[e..e + 4].copy_from_slice(&id.to_le_bytes());
        file[e + 24..e + 32].copy_from_slice(&inodes.to_le_bytes());
        file[e + 48..e + 56].copy_from_slice(&space.to_le_bytes());
        // An entry that would read as unused keeps itime 1, as the kernel writes it.
        if space == 0 && inodes == 0 && id == 0 {
            file[e + 64..e + 72].copy_from_slice(&1u64.to_le_bytes());
        }
        file[base + 8..base + 10].copy_from_slice(&(used as u16 + 1).to_le_bytes());
    }
    let n = (file.len() / BLOCK) as u32;
    file[20..24].copy_from_slice(&n.to_le_bytes());
    file
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_tree_reads_back_in_id_order() {
        let f = encode(1, &[(1000, 8192, 3), (0, 4096, 2), (70_000, 0, 1)]);
        let got = decode(&f, 1).unwrap();
        let ids: Vec<(u32, u64, u64)> = got.iter().map(|u| (u.id, u.space, u.inodes)).collect();
        assert_eq!(ids, vec![(0, 4096, 2), (1000, 8192, 3), (70_000, 0, 1)]);
        assert!(decode(&f, 0).unwrap_err().contains("magic"));
    }

    #[test]
    fn a_tree_naming_one_block_twice_is_refused() {
        let mut f = encode(0, &[(5, 1024, 1)]);
        // The root's slot for id 0x01000000 names the same level-1 block as id 5's.
        let first = le32(&f, BLOCK);
        f[BLOCK + 4..BLOCK + 8].copy_from_slice(&first.to_le_bytes());
        assert!(decode(&f, 0).unwrap_err().contains("named twice"));
        let mut f = encode(0, &[(5, 1024, 1)]);
        f[BLOCK..BLOCK + 4].copy_from_slice(&999u32.to_le_bytes());
        assert!(decode(&f, 0).unwrap_err().contains("past the file"));
    }
}
