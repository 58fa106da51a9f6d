//! The realtime data device's on-disk format (lanefs's one extension; seed 003).
//!
//! File data of realtime inodes lives on a second device, allocated in *rt extents* of
//! `rextsize` file-system blocks, as XFS's realtime section is. Its free space is kept, as
//! XFS keeps it, in two files stored in reserved inodes of the ext4 image:
//!
//! - the **bitmap** ([`RT_BITMAP_INO`]): one bit per rt extent, 1 = free, in little-endian
//!   64-bit words (bit `i` of the word at byte `8 k` is extent `64 k + i`);
//! - the **summary** ([`RT_SUMMARY_INO`]): little-endian u32 counters; entry `[log][bbno]`
//!   counts the maximal free runs whose length is in `[2^log, 2^(log+1))` and whose first
//!   extent lies in bitmap block `bbno`, stored row-major by level (`log * bmblocks +
//!   bbno`), so one block's levels live in different summary blocks.
//!
//! The device is cut into **rt groups** (as XFS's rtgroups, Linux 6.13): each group has its
//! own run of bitmap blocks and its own summary rows, and a free run never crosses a group's
//! end, so groups are allocated under their own locks. Extent 0 of the device holds the
//! [`RtHeader`], which names the image the device belongs to.
//!
//! The image carries [`RTDEV_INCOMPAT`], an INCOMPAT bit no other tool knows, so the
//! kernel and e2fsck refuse it instead of misreading it, and the geometry in the
//! superblock's reserved words ([`RtSuper`]).

use super::{crc32c_raw, le32, le64, put32, put64};
use crate::error::{Error, Result};

/// The INCOMPAT bit of an image with a realtime data device (lanefs's own; unknown to the
/// kernel and e2fsprogs, which therefore refuse the image).
pub const RTDEV_INCOMPAT: u32 = super::superblock::incompat::RTDEV;
/// Reserved inode holding the rt bitmap (ext4's unused "exclude" inode).
pub const RT_BITMAP_INO: u32 = 9;
/// Reserved inode holding the rt summary (ext4's unused "replica" inode).
pub const RT_SUMMARY_INO: u32 = 10;
/// Inode flag of a realtime file, and on a directory of one whose new children are
/// realtime (XFS's `XFS_DIFLAG_REALTIME` and `RTINHERIT`): 0x0080_0000, a bit no ext4
/// flag uses (0x0040_0000 was EOFBLOCKS, 0x0100_0000 is SNAPFILE; 0x4000_0000 is CASEFOLD).
pub const RT_FL: u32 = 0x0080_0000;
/// Whether an inode of `mode` and `flags` is a realtime regular file: its data lives on
/// the rt device (on a directory, [`RT_FL`] only passes on to new children).
pub fn is_rt_file(mode: u16, flags: u32) -> bool {
    flags & RT_FL != 0 && mode & 0o170000 == 0o100000
}

/// Byte offset in the superblock of [`RtSuper`] (the end of `s_reserved`, before the
/// checksum at 0x3FC).
pub const RT_SUPER_OFFSET: usize = 0x3C0;
/// Size of [`RtSuper`] in the superblock.
pub const RT_SUPER_SIZE: usize = 0x3C;
/// Magic of [`RtSuper`] and [`RtHeader`].
pub const RT_MAGIC: u32 = 0x4C52_5444; // "LRTD"
/// Largest rt extent in file-system blocks.
pub const MAX_REXTSIZE: u32 = 1 << 20;

/// The realtime geometry as the superblock records it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RtSuper {
    /// File-system blocks per rt extent.
    pub rextsize: u32,
    /// Rt extents on the device (including extent 0, the header).
    pub rextents: u64,
    /// Bitmap blocks per full rt group (groups are whole bitmap blocks but the last).
    pub group_bmblocks: u32,
    /// The device's identity, also in its [`RtHeader`].
    pub uuid: [u8; 16],
}

impl RtSuper {
    /// Decode from a superblock's raw bytes; `None` when no rt device is recorded.
    pub fn decode(sb: &[u8]) -> Result<Option<RtSuper>> {
        debug_assert!(
            sb.len() >= RT_SUPER_OFFSET + RT_SUPER_SIZE,
            "superblock of {} bytes",
            sb.len()
        );
        let b = &sb[RT_SUPER_OFFSET..RT_SUPER_OFFSET + RT_SUPER_SIZE];
        if le32(b, 0) != RT_MAGIC {
            return Ok(None);
        }
        let mut uuid = [0u8; 16];
        uuid.copy_from_slice(&b[24..40]);
        let s = RtSuper {
            rextsize: le32(b, 4),
            rextents: le64(b, 8),
            group_bmblocks: le32(b, 16),
            uuid,
        };
        // The device's size in bytes must be a number (rextents x rextsize x block size).
        let bytes = s
            .rextents
            .checked_mul(u64::from(s.rextsize))
            .and_then(|b| b.checked_mul(65536));
        if s.rextsize == 0
            || s.rextsize > MAX_REXTSIZE
            || s.rextents < 2
            || s.group_bmblocks == 0
            || bytes.is_none()
        {
            return Err(Error::corrupt(
                "superblock",
                0,
                format!("realtime geometry out of range: {s:?}"),
            ));
        }
        Ok(Some(s))
    }

    /// Encode into a superblock's raw bytes (the caller reseals the superblock).
    pub fn encode(&self, sb: &mut [u8]) {
        // What decode refuses must never be written.
        debug_assert!(
            (1..=MAX_REXTSIZE).contains(&self.rextsize)
                && self.rextents >= 2
                && self.group_bmblocks >= 1,
            "realtime geometry out of range: {self:?}"
        );
        let b = &mut sb[RT_SUPER_OFFSET..RT_SUPER_OFFSET + RT_SUPER_SIZE];
        b.fill(0);
        put32(b, 0, RT_MAGIC);
        put32(b, 4, self.rextsize);
        put64(b, 8, self.rextents);
        put32(b, 16, self.group_bmblocks);
        b[24..40].copy_from_slice(&self.uuid);
    }
}

/// The first block of the rt device: which image it belongs to and its size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RtHeader {
    /// The image's rt identity ([`RtSuper::uuid`]).
    pub uuid: [u8; 16],
    /// Rt extents on the device.
    pub rextents: u64,
    /// File-system blocks per rt extent.
    pub rextsize: u32,
}

/// Bytes of the header (checksummed).
pub const RT_HEADER_SIZE: usize = 64;

impl RtHeader {
    /// Encode into the first `RT_HEADER_SIZE` bytes of `b`.
    pub fn encode(&self, b: &mut [u8]) {
        debug_assert!(
            self.rextsize >= 1 && self.rextents >= 2,
            "realtime header {self:?}"
        );
        let b = &mut b[..RT_HEADER_SIZE];
        b.fill(0);
        put32(b, 0, RT_MAGIC);
        put32(b, 4, self.rextsize);
        put64(b, 8, self.rextents);
        b[16..32].copy_from_slice(&self.uuid);
        let c = crc32c_raw(!0, &b[..60]);
        put32(b, 60, c);
    }

    /// Decode the header at the start of `b`, checking magic and checksum.
    pub fn decode(b: &[u8]) -> Result<RtHeader> {
        if b.len() < RT_HEADER_SIZE || le32(b, 0) != RT_MAGIC {
            return Err(Error::Invalid(
                "the realtime device has no lanefs header (not made by `lanefs mkfs --rtdev`)"
                    .into(),
            ));
        }
        if crc32c_raw(!0, &b[..60]) != le32(b, 60) {
            return Err(Error::corrupt(
                "realtime device header",
                0,
                "checksum mismatch",
            ));
        }
        let mut uuid = [0u8; 16];
        uuid.copy_from_slice(&b[16..32]);
        Ok(RtHeader {
            uuid,
            rextents: le64(b, 8),
            rextsize: le32(b, 4),
        })
    }
}

/// Where everything of the rt device lives: extents, groups, bitmap and summary blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RtGeometry {
    /// File-system block size in bytes.
    pub block_size: u32,
    /// File-system blocks per rt extent.
    pub rextsize: u32,
    /// Rt extents on the device.
    pub rextents: u64,
    /// Bitmap blocks of a full group.
    pub group_bmblocks: u32,
}

impl RtGeometry {
    /// The geometry of `s` on `block_size`-byte blocks.
    pub fn new(block_size: u32, s: &RtSuper) -> RtGeometry {
        debug_assert!(
            block_size >= 1024 && block_size.is_power_of_two(),
            "block size {block_size}"
        );
        RtGeometry {
            block_size,
            rextsize: s.rextsize,
            rextents: s.rextents,
            group_bmblocks: s.group_bmblocks,
        }
    }

    /// Bits (rt extents) one bitmap block holds.
    pub fn bits_per_block(&self) -> u64 {
        u64::from(self.block_size) * 8
    }

    /// log2 of [`bits_per_block`](Self::bits_per_block) (XFS's `m_blkbit_log`).
    pub fn blkbit_log(&self) -> u32 {
        self.bits_per_block().trailing_zeros()
    }

    /// Rt extents of a full group.
    pub fn group_extents(&self) -> u64 {
        u64::from(self.group_bmblocks) * self.bits_per_block()
    }

    /// Number of rt groups.
    pub fn groups(&self) -> u32 {
        self.rextents.div_ceil(self.group_extents()) as u32
    }

    /// Rt extents in group `g`.
    pub fn extents_in(&self, g: u32) -> u64 {
        debug_assert!(g < self.groups(), "rt group {g} of {}", self.groups());
        let first = u64::from(g) * self.group_extents();
        (self.rextents - first).min(self.group_extents())
    }

    /// Bitmap blocks of group `g`.
    pub fn bmblocks_in(&self, g: u32) -> u32 {
        self.extents_in(g).div_ceil(self.bits_per_block()) as u32
    }

    /// Summary levels of group `g`: log2 of its extents, plus one.
    pub fn levels_in(&self, g: u32) -> u32 {
        highbit64(self.extents_in(g)) + 1
    }

    /// Summary levels of a full group (the layout reserves this many rows per group).
    pub fn levels(&self) -> u32 {
        highbit64(self.group_extents().min(self.rextents)) + 1
    }

    /// Summary blocks a full group reserves.
    pub fn group_sumblocks(&self) -> u32 {
        let words = u64::from(self.levels()) * u64::from(self.group_bmblocks);
        (words * 4).div_ceil(u64::from(self.block_size)) as u32
    }

    /// Blocks of the bitmap file.
    pub fn bitmap_blocks(&self) -> u64 {
        self.rextents.div_ceil(self.bits_per_block())
    }

    /// Blocks of the summary file.
    pub fn summary_blocks(&self) -> u64 {
        u64::from(self.groups()) * u64::from(self.group_sumblocks())
    }

    /// The bitmap file's block holding group `g`'s bitmap block `bbno`.
    pub fn bitmap_fblock(&self, g: u32, bbno: u32) -> u64 {
        debug_assert!(
            bbno < self.group_bmblocks,
            "bitmap block {bbno} of a group of {}",
            self.group_bmblocks
        );
        u64::from(g) * u64::from(self.group_bmblocks) + u64::from(bbno)
    }

    /// The summary file's block and byte offset of group `g`'s counter `[log][bbno]`.
    pub fn summary_at(&self, g: u32, log: u32, bbno: u32) -> (u64, usize) {
        // A counter outside its group's rows would count another group's runs.
        debug_assert!(
            log < self.levels() && bbno < self.group_bmblocks,
            "summary [{log}][{bbno}] outside {} levels x {} blocks",
            self.levels(),
            self.group_bmblocks
        );
        let word = u64::from(log) * u64::from(self.group_bmblocks) + u64::from(bbno);
        let byte = word * 4;
        let bs = u64::from(self.block_size);
        (
            u64::from(g) * u64::from(self.group_sumblocks()) + byte / bs,
            (byte % bs) as usize,
        )
    }

    /// The device's size in bytes this geometry needs.
    pub fn device_bytes(&self) -> u64 {
        self.rextents * u64::from(self.rextsize) * u64::from(self.block_size)
    }

    /// Bytes of one rt extent.
    pub fn extent_bytes(&self) -> u64 {
        u64::from(self.rextsize) * u64::from(self.block_size)
    }
}

/// The geometry for a device of `bytes`: whole rt extents, groups of `group_bmblocks`
/// bitmap blocks (0: one group for the whole device, as XFS before rtgroups).
pub fn geometry_for(
    block_size: u32,
    bytes: u64,
    rextsize: u32,
    group_bmblocks: u32,
) -> Result<RtGeometry> {
    if rextsize == 0 || rextsize > MAX_REXTSIZE {
        return Err(Error::Invalid(format!(
            "rt extent size {rextsize} blocks is out of range (1..={MAX_REXTSIZE})"
        )));
    }
    let ext = u64::from(rextsize) * u64::from(block_size);
    let rextents = bytes / ext;
    if rextents < 2 {
        return Err(Error::Invalid(format!(
            "the realtime device ({bytes} bytes) holds fewer than two rt extents of {ext} bytes"
        )));
    }
    let bits = u64::from(block_size) * 8;
    let all = rextents.div_ceil(bits);
    let gb = if group_bmblocks == 0 {
        all
    } else {
        u64::from(group_bmblocks).min(all)
    };
    debug_assert!(gb >= 1, "rt groups of no bitmap block");
    Ok(RtGeometry {
        block_size,
        rextsize,
        rextents,
        group_bmblocks: u32::try_from(gb).map_err(|_| {
            Error::Invalid("the realtime device is too large for one rt group".into())
        })?,
    })
}

/// Index of the highest set bit (`x` > 0), XFS's `xfs_highbit64`.
#[inline]
pub fn highbit64(x: u64) -> u32 {
    debug_assert!(x > 0);
    63 - x.leading_zeros()
}

/// Test extent bit `i` of a bitmap block.
#[inline]
pub fn bit(b: &[u8], i: usize) -> bool {
    b[i / 8] & (1 << (i % 8)) != 0
}

/// The 64-bit word `w` of a bitmap block, and its store: any little-endian bitmap's.
pub use super::{bitmap_word as word, put_bitmap_word as set_word};

/// The summary counter at byte `off` of a summary block.
#[inline]
pub fn counter(b: &[u8], off: usize) -> u32 {
    le32(b, off)
}

/// Store the summary counter at byte `off`.
#[inline]
pub fn set_counter(b: &mut [u8], off: usize, v: u32) {
    debug_assert!(off.is_multiple_of(4), "summary counter at byte {off}");
    put32(b, off, v);
}

/// The bitmap and summary files of a device whose free space is `free` (maximal runs
/// (start, len) of device extents, each separated from the next by an allocated extent):
/// each file as its blocks.
pub fn build_files(geo: &RtGeometry, free: &[(u64, u64)]) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let bs = geo.block_size as usize;
    let mut bitmap = vec![vec![0u8; bs]; geo.bitmap_blocks() as usize];
    let mut summary = vec![vec![0u8; bs]; geo.summary_blocks() as usize];
    let bits = geo.bits_per_block();
    let gext = geo.group_extents();
    let mut count = |g: u32, s: u64, l: u64| {
        let (f, off) = geo.summary_at(g, highbit64(l), (s / bits) as u32);
        let b = &mut summary[f as usize];
        let v = counter(b, off) + 1;
        set_counter(b, off, v);
    };
    debug_assert!(
        free.windows(2).all(|w| w[0].0 + w[0].1 <= w[1].0),
        "free runs overlap or are out of order"
    );
    for &(start, len) in free {
        debug_assert!(start + len <= geo.rextents);
        let mut x = start;
        while x < start + len {
            let g = (x / gext) as u32;
            let local = x % gext;
            let f = geo.bitmap_fblock(g, (local / bits) as u32);
            let i = (local % bits) as usize;
            if i.is_multiple_of(8) && x + 8 <= start + len {
                bitmap[f as usize][i / 8] = 0xFF;
                x += 8;
            } else {
                bitmap[f as usize][i / 8] |= 1 << (i % 8);
                x += 1;
            }
        }
        // A run crossing a group's end is two runs.
        let mut x = start;
        while x < start + len {
            let g = (x / gext) as u32;
            let local = x % gext;
            let n = (start + len - x).min(gext - local);
            count(g, local, n);
            x += n;
        }
    }
    (bitmap, summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn super_and_header_round_trip() {
        let s = RtSuper {
            rextsize: 16,
            rextents: 1 << 28,
            group_bmblocks: 1024,
            uuid: [7; 16],
        };
        let mut sb = vec![0u8; 1024];
        assert_eq!(RtSuper::decode(&sb).unwrap(), None);
        s.encode(&mut sb);
        assert_eq!(RtSuper::decode(&sb).unwrap(), Some(s));
        let h = RtHeader {
            uuid: [3; 16],
            rextents: 99,
            rextsize: 4,
        };
        let mut b = vec![0u8; 4096];
        h.encode(&mut b);
        assert_eq!(RtHeader::decode(&b).unwrap(), h);
        b[20] ^= 1;
        assert!(RtHeader::decode(&b).is_err());
    }

    #[test]
    fn geometry_places_groups_and_summary_rows() {
        // 1 TiB of 4 KiB extents: 2^28 extents, 8192 bitmap blocks, groups of 1024.
        let g = geometry_for(4096, 1 << 40, 1, 1024).unwrap();
        assert_eq!(g.rextents, 1 << 28);
        assert_eq!(g.bitmap_blocks(), 8192);
        assert_eq!(g.groups(), 8);
        assert_eq!(g.blkbit_log(), 15);
        assert_eq!(g.levels(), 26); // 2^25 extents per group
        assert_eq!(g.group_sumblocks(), 26);
        assert_eq!(g.summary_at(1, 0, 0), (26, 0));
        assert_eq!(g.summary_at(0, 1, 0), (1, 0));
        assert_eq!(g.summary_at(0, 0, 1023), (0, 4092));
        // One group for the whole device, a partial last bitmap block.
        let g = geometry_for(1024, 10_000 * 1024, 1, 0).unwrap();
        assert_eq!(g.groups(), 1);
        assert_eq!(g.bmblocks_in(0), 2);
        assert_eq!(g.levels_in(0), 14);
        assert!(geometry_for(4096, 4096, 1, 0).is_err());
    }
}
