//! ext4's multi-mount protection (MMP) block: `struct mmp_struct` of the kernel's
//! fs/ext4/ext4.h and e2fsprogs' lib/ext2fs/mmp.c. One block at `s_mmp_block`; its first
//! 1024 bytes hold the structure, the rest is zero.
//!
//! Layout (little-endian):
//!
//! | offset | field | |
//! |---|---|---|
//! | 0x00 | `mmp_magic` u32 | 0x004D4D50 |
//! | 0x04 | `mmp_seq` u32 | a counter, or CLEAN / FSCK |
//! | 0x08 | `mmp_time` u64 | seconds of the last update |
//! | 0x10 | `mmp_nodename` [u8; 64] | host that last updated it |
//! | 0x50 | `mmp_bdevname` [u8; 32] | device it was updated through |
//! | 0x70 | `mmp_check_interval` u16 | seconds between checks |
//! | 0x72 | `mmp_pad1` u16, `mmp_pad2` [u32; 226] | zero |
//! | 0x3FC | `mmp_checksum` u32 | crc32c(fs checksum seed, bytes 0..0x3FC), metadata_csum only |
//!
//! The protocol (kernel `ext4_multi_mount_protect`): a mounter reads the block; CLEAN means
//! nobody has it; FSCK means e2fsck has it; any other sequence below MAX means a node may
//! be using it, so the mounter waits twice the check interval and reads again, and only
//! if the sequence did not move writes a fresh random sequence, waits, and checks nobody
//! overwrote it. While mounted, the owner bumps the sequence every update interval and
//! writes CLEAN at unmount.

use super::{crc32c_raw, le16, le32, le64, put16, put32, put64};

/// `mmp_magic`.
pub const MAGIC: u32 = 0x004D_4D50;
/// `mmp_seq` of a file system nobody has open (EXT4_MMP_SEQ_CLEAN).
pub const SEQ_CLEAN: u32 = 0xFF4D_4D50;
/// `mmp_seq` while e2fsck has the file system (EXT4_MMP_SEQ_FSCK).
pub const SEQ_FSCK: u32 = 0xE24D_4D50;
/// Largest sequence a mounted file system uses (EXT4_MMP_SEQ_MAX); above it only the two
/// special values are valid.
pub const SEQ_MAX: u32 = 0xE24D_4D4F;
/// Default `s_mmp_update_interval` in seconds (EXT4_MMP_UPDATE_INTERVAL).
pub const UPDATE_INTERVAL: u16 = 5;
/// Smallest `mmp_check_interval` (EXT4_MMP_MIN_CHECK_INTERVAL).
pub const MIN_CHECK_INTERVAL: u16 = 5;
/// Largest `s_mmp_update_interval` e2fsprogs accepts (EXT4_MMP_MAX_UPDATE_INTERVAL).
pub const MAX_UPDATE_INTERVAL: u16 = 300;
/// Bytes of the structure (the rest of the block is zero).
pub const SIZE: usize = 1024;
/// Offset of `mmp_checksum`, which covers every byte before it.
pub const CSUM_OFF: usize = 0x3FC;
/// Bytes of `mmp_nodename`.
pub const NODENAME_LEN: usize = 64;
/// Bytes of `mmp_bdevname`.
pub const BDEVNAME_LEN: usize = 32;

const OFF_SEQ: usize = 0x04;
const OFF_TIME: usize = 0x08;
const OFF_NODENAME: usize = 0x10;
const OFF_BDEVNAME: usize = 0x50;
const OFF_INTERVAL: usize = 0x70;

/// What a sequence number says about who holds the file system.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SeqState {
    /// Nobody (unmounted cleanly).
    Clean,
    /// e2fsck is checking it.
    Fsck,
    /// A node may have it mounted (the sequence moves while it does).
    InUse(u32),
    /// Above SEQ_MAX but neither special value: corrupt.
    Invalid(u32),
}

/// Classify a sequence number.
pub fn seq_state(seq: u32) -> SeqState {
    match seq {
        SEQ_CLEAN => SeqState::Clean,
        SEQ_FSCK => SeqState::Fsck,
        s if s <= SEQ_MAX => SeqState::InUse(s),
        s => SeqState::Invalid(s),
    }
}

/// The MMP structure, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mmp {
    /// `mmp_seq`.
    pub seq: u32,
    /// `mmp_time`: seconds since the epoch of the last update.
    pub time: u64,
    /// `mmp_nodename`, NUL padded.
    pub nodename: [u8; NODENAME_LEN],
    /// `mmp_bdevname`, NUL padded.
    pub bdevname: [u8; BDEVNAME_LEN],
    /// `mmp_check_interval` in seconds.
    pub check_interval: u16,
}

impl Mmp {
    /// The block mke2fs writes (ext2fs_mmp_reset): CLEAN, this host and device,
    /// `update_interval` as the check interval (at least MIN_CHECK_INTERVAL). `time` is 0:
    /// the writer stamps it, as ext2fs_mmp_write does.
    pub fn clean(nodename: &[u8], bdevname: &[u8], update_interval: u16) -> Mmp {
        Mmp {
            seq: SEQ_CLEAN,
            time: 0,
            nodename: padded(nodename),
            bdevname: padded(bdevname),
            check_interval: update_interval.max(MIN_CHECK_INTERVAL),
        }
    }

    /// `mmp_nodename` up to its first NUL.
    pub fn nodename_str(&self) -> String {
        until_nul(&self.nodename)
    }

    /// `mmp_bdevname` up to its first NUL.
    pub fn bdevname_str(&self) -> String {
        until_nul(&self.bdevname)
    }

    /// Decode the first SIZE bytes of `b`, or say what is wrong (short buffer, bad magic).
    /// The checksum is checked separately (`checksum_ok`), since it applies only with
    /// metadata_csum.
    pub fn decode(b: &[u8]) -> Result<Mmp, String> {
        if b.len() < SIZE {
            return Err(format!("MMP block shorter than {SIZE} bytes ({})", b.len()));
        }
        let magic = le32(b, 0);
        if magic != MAGIC {
            return Err(format!("bad MMP magic {magic:#010x} (want {MAGIC:#010x})"));
        }
        let mut nodename = [0u8; NODENAME_LEN];
        nodename.copy_from_slice(&b[OFF_NODENAME..OFF_NODENAME + NODENAME_LEN]);
        let mut bdevname = [0u8; BDEVNAME_LEN];
        bdevname.copy_from_slice(&b[OFF_BDEVNAME..OFF_BDEVNAME + BDEVNAME_LEN]);
        Ok(Mmp {
            seq: le32(b, OFF_SEQ),
            time: le64(b, OFF_TIME),
            nodename,
            bdevname,
            check_interval: le16(b, OFF_INTERVAL),
        })
    }

    /// Encode into `b` (at least SIZE bytes; a whole block is zeroed past the structure),
    /// with the checksum from `csum_seed` when given (metadata_csum), else a zero checksum.
    pub fn encode(&self, b: &mut [u8], csum_seed: Option<u32>) {
        assert!(b.len() >= SIZE, "MMP buffer of {} bytes", b.len());
        b.fill(0);
        put32(b, 0, MAGIC);
        put32(b, OFF_SEQ, self.seq);
        put64(b, OFF_TIME, self.time);
        b[OFF_NODENAME..OFF_NODENAME + NODENAME_LEN].copy_from_slice(&self.nodename);
        b[OFF_BDEVNAME..OFF_BDEVNAME + BDEVNAME_LEN].copy_from_slice(&self.bdevname);
        put16(b, OFF_INTERVAL, self.check_interval);
        if let Some(seed) = csum_seed {
            set_checksum(seed, b);
        }
        debug_assert!(Mmp::decode(b).as_ref() == Ok(self));
    }
}

/// crc32c of the structure before `mmp_checksum`, from the fs checksum seed
/// (ext4_mmp_csum).
pub fn checksum(csum_seed: u32, b: &[u8]) -> u32 {
    debug_assert!(b.len() >= SIZE, "MMP block of {} bytes", b.len());
    crc32c_raw(csum_seed, &b[..CSUM_OFF])
}

/// Store the checksum in `b`.
pub fn set_checksum(csum_seed: u32, b: &mut [u8]) {
    let c = checksum(csum_seed, b);
    put32(b, CSUM_OFF, c);
}

/// Whether the stored checksum matches.
pub fn checksum_ok(csum_seed: u32, b: &[u8]) -> bool {
    b.len() >= SIZE && le32(b, CSUM_OFF) == checksum(csum_seed, b)
}

/// `s` cut or NUL padded to N bytes (as strncpy: a name that fills the field has no NUL).
fn padded<const N: usize>(s: &[u8]) -> [u8; N] {
    let mut out = [0u8; N];
    let n = s.len().min(N);
    out[..n].copy_from_slice(&s[..n]);
    out
}

fn until_nul(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_block_round_trips_with_checksum() {
        let m = Mmp::clean(b"host-a", b"/dev/loop3", UPDATE_INTERVAL);
        let mut b = vec![0xAAu8; 4096];
        m.encode(&mut b, Some(0x1234_5678));
        assert_eq!(le32(&b, 0), MAGIC);
        assert_eq!(le32(&b, 4), SEQ_CLEAN);
        assert_eq!(le16(&b, 0x70), 5);
        assert!(
            b[SIZE..].iter().all(|&x| x == 0),
            "tail of the block zeroed"
        );
        assert!(checksum_ok(0x1234_5678, &b));
        assert!(!checksum_ok(0x1234_5679, &b));
        let d = Mmp::decode(&b).unwrap();
        assert_eq!(d, m);
        assert_eq!(d.nodename_str(), "host-a");
        assert_eq!(d.bdevname_str(), "/dev/loop3");
        b[0x20] ^= 1;
        assert!(!checksum_ok(0x1234_5678, &b));
    }

    #[test]
    fn checksum_covers_all_bytes_before_it() {
        let mut b = vec![0u8; 1024];
        Mmp::clean(b"", b"", 0).encode(&mut b, Some(7));
        let c0 = le32(&b, CSUM_OFF);
        b[CSUM_OFF - 1] = 1;
        assert_ne!(checksum(7, &b), c0);
        // Without metadata_csum the field stays zero.
        Mmp::clean(b"", b"", 0).encode(&mut b, None);
        assert_eq!(le32(&b, CSUM_OFF), 0);
    }

    #[test]
    fn check_interval_has_a_floor_and_names_are_cut() {
        let long = [b'x'; 100];
        let m = Mmp::clean(&long, &long, 1);
        assert_eq!(m.check_interval, MIN_CHECK_INTERVAL);
        assert_eq!(m.nodename_str().len(), NODENAME_LEN);
        assert_eq!(m.bdevname_str().len(), BDEVNAME_LEN);
        assert_eq!(Mmp::clean(b"h", b"d", 60).check_interval, 60);
    }

    #[test]
    fn decode_refuses_bad_input() {
        assert!(Mmp::decode(&[0u8; 100]).unwrap_err().contains("shorter"));
        assert!(Mmp::decode(&[0u8; 1024]).unwrap_err().contains("magic"));
    }

    #[test]
    fn sequence_states() {
        assert_eq!(seq_state(SEQ_CLEAN), SeqState::Clean);
        assert_eq!(seq_state(SEQ_FSCK), SeqState::Fsck);
        assert_eq!(seq_state(1), SeqState::InUse(1));
        assert_eq!(seq_state(SEQ_MAX), SeqState::InUse(SEQ_MAX));
        assert_eq!(seq_state(SEQ_FSCK), seq_state(SEQ_MAX + 1));
        assert_eq!(seq_state(SEQ_MAX + 2), SeqState::Invalid(SEQ_MAX + 2));
        // The special values lie above every in-use sequence.
        const { assert!(SEQ_CLEAN > SEQ_MAX && SEQ_FSCK > SEQ_MAX) };
    }

    /// A block `mke2fs -O mmp` (e2fsprogs 1.47, 1 KiB blocks, UUID
    /// 01234567-89ab-cdef-0123-456789abcdef, host "vm", device "mmpv.img") wrote: its
    /// bytes and checksum are what `encode` gives.
    #[test]
    fn matches_a_block_mke2fs_wrote() {
        let uuid = [
            0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab,
            0xcd, 0xef,
        ];
        let seed = crc32c_raw(!0, &uuid);
        let mut m = Mmp::clean(b"vm", b"mmpv.img", UPDATE_INTERVAL);
        m.time = 0x6b06_3da6;
        let mut b = vec![0u8; 1024];
        m.encode(&mut b, Some(seed));
        assert_eq!(&b[..16], b"PMM\0PMM\xff\xa6\x3d\x06\x6b\0\0\0\0");
        assert_eq!(le32(&b, CSUM_OFF), 0x48ac_f794);
    }

    #[test]
    fn field_offsets_match_mmp_struct() {
        assert_eq!(OFF_NODENAME + NODENAME_LEN, OFF_BDEVNAME);
        assert_eq!(OFF_BDEVNAME + BDEVNAME_LEN, OFF_INTERVAL);
        // mmp_pad1 (u16) + mmp_pad2[226] (u32) end at the checksum.
        assert_eq!(OFF_INTERVAL + 2 + 2 + 226 * 4, CSUM_OFF);
        assert_eq!(CSUM_OFF + 4, SIZE);
    }
}
