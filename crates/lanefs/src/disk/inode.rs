//! On-disk inodes: raw bytes (inode_size long) with typed accessors.

use super::{crc32c_raw, le16, le32, put16, put32};

/// A point in time with nanoseconds, seconds since the Unix epoch, as inode times hold it
/// (`Timespec::now` reads the clock, outside this pure module).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Hash)]
pub struct Timespec {
    /// Seconds since 1970-01-01 (may be negative).
    pub sec: i64,
    /// Nanoseconds, 0..1_000_000_000.
    pub nsec: u32,
}

/// Inode flag: uses extents.
pub const FL_EXTENTS: u32 = 0x80000;
/// Offset of `i_dtime` (deletion time; an orphan's next link).
pub const I_DTIME: usize = 0x14;
/// Inode flag: hashed-indexed directory.
pub const FL_INDEX: u32 = 0x1000;
/// Inode flag: i_blocks is in file-system blocks, not sectors.
pub const FL_HUGE_FILE: u32 = 0x40000;
/// Inode flag: inline data.
pub const FL_INLINE_DATA: u32 = 0x10000000;
/// Inode flag: top of a directory hierarchy (Orlov).
pub const FL_TOPDIR: u32 = 0x20000;
/// Inode flag: large xattr value inode.
pub const FL_EA_INODE: u32 = 0x200000;
/// Inode flag: immutable (`chattr +i`): no name, link, attribute or data change.
pub const FL_IMMUTABLE: u32 = 0x10;
/// Inode flag: append-only (`chattr +a`): data only appended, names only added.
pub const FL_APPEND: u32 = 0x20;
/// Inode flag: reads leave the access time alone (`chattr +A`).
pub const FL_NOATIME: u32 = 0x80;
/// Inode flag: synchronous updates (`chattr +S`).
pub const FL_SYNC: u32 = 0x8;
/// Inode flag: not for dump(8) (`chattr +d`).
pub const FL_NODUMP: u32 = 0x40;
/// Inode flag: direct access to persistent memory (`chattr +x`).
pub const FL_DAX: u32 = 0x0200_0000;
/// Inode flag: directory updates are synchronous (`chattr +D`).
pub const FL_DIRSYNC: u32 = 0x10000;
/// Inode flag: case-insensitive directory (`chattr +F`).
pub const FL_CASEFOLD: u32 = 0x4000_0000;
/// Inode flag: new inodes inherit the directory's project (`chattr +P`).
pub const FL_PROJINHERIT: u32 = 0x2000_0000;
/// Inode flags `lsattr` sees (EXT4_FL_USER_VISIBLE).
pub const FL_USER_VISIBLE: u32 = 0x725B_DFFF;
/// Inode flags `chattr` may change (EXT4_FL_USER_MODIFIABLE); the rest keep their value.
pub const FL_USER_MODIFIABLE: u32 = 0x624B_C0FF;
/// Modifiable flags that are only recorded, with no mechanism to start or stop when they
/// change: secure deletion, undelete, compression, sync, immutable, append-only, no dump,
/// no atime, no tail merging, dirsync, top directory, project inheritance.
pub const FL_RECORDED: u32 = 0x1
    | 0x2
    | 0x4
    | FL_SYNC
    | FL_IMMUTABLE
    | FL_APPEND
    | FL_NODUMP
    | FL_NOATIME
    | 0x8000
    | FL_DIRSYNC
    | FL_TOPDIR
    | FL_PROJINHERIT;
/// Flags a regular file may carry (EXT4_REG_FLMASK): none of the directory-only ones.
pub const FL_REG_MASK: u32 = !(FL_DIRSYNC | FL_TOPDIR | FL_CASEFOLD | FL_PROJINHERIT);
/// Flags a special file or symlink may carry (EXT4_OTHER_FLMASK): no dump, no atime.
pub const FL_OTHER_MASK: u32 = FL_NODUMP | FL_NOATIME;

/// Reserved inode numbers (ext4's EXT4_*_INO), named once here.
pub mod reserved {
    /// The bad blocks inode.
    pub const BAD_BLOCKS: u32 = 1;
    /// The root directory.
    pub const ROOT: u32 = 2;
    /// The resize inode (reserved GDT blocks).
    pub const RESIZE: u32 = 7;
    /// The journal.
    pub const JOURNAL: u32 = 8;
    /// The first inode that is not reserved on revision-0 file systems.
    pub const GOOD_OLD_FIRST: u32 = 11;
}

/// Offset of the first byte past the classic 128-byte inode.
pub const GOOD_OLD_SIZE: usize = 128;
/// Size of i_block.
pub const IBLOCK_SIZE: usize = 60;

/// An inode's on-disk bytes.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct DiskInode {
    /// inode_size bytes as on disk.
    pub raw: Vec<u8>,
}

fn time_get(raw: &[u8], off: usize, extra: Option<usize>) -> Timespec {
    let lo = le32(raw, off) as i32 as i64;
    match extra {
        Some(e) => {
            let x = le32(raw, e);
            let epoch = i64::from(x & 3);
            Timespec {
                sec: lo + (epoch << 32),
                nsec: (x >> 2).min(999_999_999),
            }
        }
        None => Timespec { sec: lo, nsec: 0 },
    }
}

fn time_put(raw: &mut [u8], off: usize, extra: Option<usize>, t: Timespec) {
    // Encoding from the kernel: low 32 bits signed, epoch bits extend the range.
    let lo = t.sec as i32;
    put32(raw, off, lo as u32);
    if let Some(e) = extra {
        let epoch = ((t.sec - i64::from(lo)) >> 32) as u32 & 3;
        put32(raw, e, (t.nsec.min(999_999_999) << 2) | epoch);
    }
}

impl DiskInode {
    /// A zeroed inode of `size` bytes with i_extra_isize set as ext4 wants (32).
    pub fn new(size: usize) -> DiskInode {
        debug_assert!(
            size >= GOOD_OLD_SIZE && size.is_power_of_two(),
            "inode size {size}"
        );
        let mut raw = vec![0; size];
        if size > GOOD_OLD_SIZE {
            put16(&mut raw, 0x80, 32);
        }
        DiskInode { raw }
    }
    /// Wrap bytes read from an inode table.
    pub fn from_bytes(b: &[u8]) -> DiskInode {
        debug_assert!(b.len() >= GOOD_OLD_SIZE, "inode of {} bytes", b.len());
        DiskInode { raw: b.to_vec() }
    }
    /// Whether a field at `off` of `len` bytes lies inside the extra area in use.
    fn fits(&self, off: usize, len: usize) -> bool {
        self.raw.len() > GOOD_OLD_SIZE
            && off + len <= GOOD_OLD_SIZE + usize::from(self.extra_isize())
            && off + len <= self.raw.len()
    }
    /// i_mode.
    pub fn mode(&self) -> u16 {
        le16(&self.raw, 0x0)
    }
    /// Set i_mode.
    pub fn set_mode(&mut self, v: u16) {
        put16(&mut self.raw, 0x0, v)
    }
    /// Owner uid (32 bits).
    pub fn uid(&self) -> u32 {
        u32::from(le16(&self.raw, 0x2)) | (u32::from(le16(&self.raw, 0x78)) << 16)
    }
    /// Set uid.
    pub fn set_uid(&mut self, v: u32) {
        put16(&mut self.raw, 0x2, v as u16);
        put16(&mut self.raw, 0x78, (v >> 16) as u16);
    }
    /// Group gid (32 bits).
    pub fn gid(&self) -> u32 {
        u32::from(le16(&self.raw, 0x18)) | (u32::from(le16(&self.raw, 0x7A)) << 16)
    }
    /// Set gid.
    pub fn set_gid(&mut self, v: u32) {
        put16(&mut self.raw, 0x18, v as u16);
        put16(&mut self.raw, 0x7A, (v >> 16) as u16);
    }
    /// Project id (`i_projid`), 0 when the inode's extra space does not reach it.
    pub fn projid(&self) -> u32 {
        const END: usize = 0x9C + 4;
        if GOOD_OLD_SIZE + usize::from(self.extra_isize()) >= END && self.raw.len() >= END {
            le32(&self.raw, 0x9C)
        } else {
            0
        }
    }
    /// Size in bytes.
    pub fn size(&self) -> u64 {
        u64::from(le32(&self.raw, 0x4)) | (u64::from(le32(&self.raw, 0x6C)) << 32)
    }
    /// Set size.
    pub fn set_size(&mut self, v: u64) {
        debug_assert!(v <= i64::MAX as u64, "size {v} past i64::MAX");
        put32(&mut self.raw, 0x4, v as u32);
        put32(&mut self.raw, 0x6C, (v >> 32) as u32);
    }
    /// Access time.
    pub fn atime(&self) -> Timespec {
        time_get(&self.raw, 0x8, self.fits(0x8C, 4).then_some(0x8C))
    }
    /// Set access time.
    pub fn set_atime(&mut self, t: Timespec) {
        let e = self.fits(0x8C, 4).then_some(0x8C);
        time_put(&mut self.raw, 0x8, e, t)
    }
    /// Change time.
    pub fn ctime(&self) -> Timespec {
        time_get(&self.raw, 0xC, self.fits(0x84, 4).then_some(0x84))
    }
    /// Set change time.
    pub fn set_ctime(&mut self, t: Timespec) {
        let e = self.fits(0x84, 4).then_some(0x84);
        time_put(&mut self.raw, 0xC, e, t)
    }
    /// Modification time.
    pub fn mtime(&self) -> Timespec {
        time_get(&self.raw, 0x10, self.fits(0x88, 4).then_some(0x88))
    }
    /// Set modification time.
    pub fn set_mtime(&mut self, t: Timespec) {
        let e = self.fits(0x88, 4).then_some(0x88);
        time_put(&mut self.raw, 0x10, e, t)
    }
    /// Creation time (zero when the inode has no room for it).
    pub fn crtime(&self) -> Timespec {
        if self.fits(0x90, 8) {
            time_get(&self.raw, 0x90, Some(0x94))
        } else {
            Timespec::default()
        }
    }
    /// Set creation time (ignored when there is no room).
    pub fn set_crtime(&mut self, t: Timespec) {
        if self.fits(0x90, 8) {
            time_put(&mut self.raw, 0x90, Some(0x94), t)
        }
    }
    /// Deletion time (or orphan-list link).
    pub fn dtime(&self) -> u32 {
        le32(&self.raw, I_DTIME)
    }
    /// Set deletion time.
    pub fn set_dtime(&mut self, v: u32) {
        put32(&mut self.raw, I_DTIME, v)
    }
    /// Hard link count.
    pub fn links(&self) -> u16 {
        le16(&self.raw, 0x1A)
    }
    /// Set link count.
    pub fn set_links(&mut self, v: u16) {
        put16(&mut self.raw, 0x1A, v)
    }
    /// Allocated 512-byte sectors (handles huge_file's block units).
    pub fn blocks_512(&self, block_size: u32) -> u64 {
        let n = u64::from(le32(&self.raw, 0x1C)) | (u64::from(le16(&self.raw, 0x74)) << 32);
        if self.flags() & FL_HUGE_FILE != 0 {
            n * u64::from(block_size / 512)
        } else {
            n
        }
    }
    /// Set allocated sectors; switches to block units (huge_file) only when needed.
    pub fn set_blocks_512(&mut self, sectors: u64, block_size: u32) {
        debug_assert!(block_size >= 1024, "block size {block_size}");
        let mut v = sectors;
        let mut fl = self.flags() & !FL_HUGE_FILE;
        if v >= 1 << 48 {
            v = sectors / u64::from(block_size / 512);
            fl |= FL_HUGE_FILE;
        }
        // i_blocks is 48 bits: a count cut short would free blocks still in use on fsck.
        assert!(v < 1 << 48, "{sectors} sectors do not fit i_blocks");
        self.set_flags(fl);
        put32(&mut self.raw, 0x1C, v as u32);
        put16(&mut self.raw, 0x74, (v >> 32) as u16);
    }
    /// i_flags.
    pub fn flags(&self) -> u32 {
        le32(&self.raw, 0x20)
    }
    /// Set i_flags.
    pub fn set_flags(&mut self, v: u32) {
        put32(&mut self.raw, 0x20, v)
    }
    /// The 60-byte i_block area (extent root, symlink text or device numbers).
    pub fn iblock(&self) -> &[u8] {
        &self.raw[0x28..0x28 + IBLOCK_SIZE]
    }
    /// Mutable i_block area.
    pub fn iblock_mut(&mut self) -> &mut [u8] {
        &mut self.raw[0x28..0x28 + IBLOCK_SIZE]
    }
    /// Whether the inode owns no block: none counted in `i_blocks`, no xattr block, not
    /// inline, and an empty block map (an extent root of no entries, or no block pointer
    /// in a block-mapped inode). Freeing such an inode frees no block.
    pub fn owns_no_block(&self) -> bool {
        if le32(&self.raw, 0x1C) != 0 || le16(&self.raw, 0x74) != 0 || self.file_acl() != 0 {
            return false;
        }
        let fl = self.flags();
        if fl & FL_INLINE_DATA != 0 {
            return false;
        }
        let root = self.iblock();
        if fl & FL_EXTENTS != 0 {
            le16(root, 0) == super::extent::EXT_MAGIC && le16(root, 2) == 0
        } else {
            root.iter().all(|&b| b == 0)
        }
    }
    /// Generation number.
    pub fn generation(&self) -> u32 {
        le32(&self.raw, 0x64)
    }
    /// Set generation.
    pub fn set_generation(&mut self, v: u32) {
        put32(&mut self.raw, 0x64, v)
    }
    /// Extended attribute block (0 if none).
    pub fn file_acl(&self) -> u64 {
        u64::from(le32(&self.raw, 0x68)) | (u64::from(le16(&self.raw, 0x76)) << 32)
    }
    /// Set the xattr block.
    pub fn set_file_acl(&mut self, v: u64) {
        assert!(v < 1 << 48, "xattr block {v} past 48 bits");
        put32(&mut self.raw, 0x68, v as u32);
        put16(&mut self.raw, 0x76, (v >> 32) as u16);
    }
    /// i_extra_isize (0 for 128-byte inodes).
    pub fn extra_isize(&self) -> u16 {
        if self.raw.len() > GOOD_OLD_SIZE {
            le16(&self.raw, 0x80)
        } else {
            0
        }
    }
    /// Device number for device inodes (old or new encoding in i_block).
    pub fn rdev(&self) -> u32 {
        let old = le32(&self.raw, 0x28);
        if old != 0 {
            // Old 16-bit encoding: major in high byte, minor in low byte.
            let (maj, min) = ((old >> 8) & 0xff, old & 0xff);
            (maj << 8) | min
        } else {
            // New encoding in i_block[1]: minor low 8 | major 12 | minor high 12.
            le32(&self.raw, 0x2C)
        }
    }
    /// Store a device number (new encoding, as the kernel does for large numbers).
    pub fn set_rdev(&mut self, rdev: u32) {
        let (maj, min) = (
            (rdev >> 8) & 0xfff,
            (rdev & 0xff) | ((rdev >> 12) & 0xfff00),
        );
        if maj < 256 && min < 256 {
            put32(&mut self.raw, 0x28, (maj << 8) | min);
            put32(&mut self.raw, 0x2C, 0);
        } else {
            put32(&mut self.raw, 0x28, 0);
            put32(&mut self.raw, 0x2C, rdev);
        }
    }

    /// Checksum for inode number `ino` with the file system's seed.
    pub fn compute_checksum(&self, csum_seed: u32, ino: u32) -> u32 {
        // The checksum fields count as zeros (no copy of the inode is made). Short runs
        // are joined in small arrays: each crc32c call costs more than its bytes here.
        debug_assert!(ino != 0, "inode checksum for inode 0");
        debug_assert!(
            self.raw.len() >= GOOD_OLD_SIZE,
            "inode of {} bytes",
            self.raw.len()
        );
        let mut head = [0u8; 8];
        head[..4].copy_from_slice(&ino.to_le_bytes());
        head[4..].copy_from_slice(&self.generation().to_le_bytes());
        let r = &self.raw;
        let c = crc32c_raw(crc32c_raw(csum_seed, &head), &r[..0x7C]);
        if self.fits(0x82, 2) {
            // checksum_lo (zeros), extra_isize and checksum_hi (zeros).
            let mut mid = [0u8; 8];
            mid[2..6].copy_from_slice(&r[0x7E..0x82]);
            crc32c_raw(crc32c_raw(c, &mid), &r[0x84..])
        } else {
            crc32c_raw(crc32c_raw(c, &[0, 0]), &r[0x7E..]) & 0xFFFF
        }
    }
    /// Stored checksum.
    pub fn checksum(&self) -> u32 {
        let lo = u32::from(le16(&self.raw, 0x7C));
        if self.fits(0x82, 2) {
            lo | (u32::from(le16(&self.raw, 0x82)) << 16)
        } else {
            lo
        }
    }
    /// Recompute and store the checksum.
    pub fn update_checksum(&mut self, csum_seed: u32, ino: u32) {
        let c = self.compute_checksum(csum_seed, ino);
        put16(&mut self.raw, 0x7C, c as u16);
        if self.fits(0x82, 2) {
            put16(&mut self.raw, 0x82, (c >> 16) as u16);
        }
    }
    /// Seed for checksums of blocks owned by this inode (extent and directory blocks).
    pub fn csum_seed(&self, fs_seed: u32, ino: u32) -> u32 {
        let mut head = [0u8; 8];
        head[..4].copy_from_slice(&ino.to_le_bytes());
        head[4..].copy_from_slice(&self.generation().to_le_bytes());
        crc32c_raw(fs_seed, &head)
    }
}

/// Raw fields the checker validates as e2fsck does (each names its `ext4_inode` field).
impl DiskInode {
    /// i_block word `i` (a block pointer of a block-mapped inode: 12 direct, then the
    /// single, double and triple indirect blocks).
    pub fn iblock_ptr(&self, i: usize) -> u32 {
        debug_assert!(i < IBLOCK_SIZE / 4, "i_block slot {i}");
        le32(self.iblock(), 4 * i)
    }
    /// Low 16 bits of the owner (i_uid).
    pub fn uid_lo(&self) -> u16 {
        le16(&self.raw, 0x2)
    }
    /// Low 16 bits of the group (i_gid).
    pub fn gid_lo(&self) -> u16 {
        le16(&self.raw, 0x18)
    }
    /// Low 32 bits of i_blocks.
    pub fn blocks_lo(&self) -> u32 {
        le32(&self.raw, 0x1C)
    }
    /// High 16 bits of i_blocks (l_i_blocks_high, huge_file only).
    pub fn blocks_hi(&self) -> u16 {
        le16(&self.raw, 0x74)
    }
    /// Low 32 bits of the xattr block (i_file_acl).
    pub fn file_acl_lo(&self) -> u32 {
        le32(&self.raw, 0x68)
    }
    /// High 16 bits of the xattr block (l_i_file_acl_high, 64bit only).
    pub fn file_acl_hi(&self) -> u16 {
        le16(&self.raw, 0x76)
    }
    /// The obsolete fragment address (i_faddr), which must be zero in ext4. On an image
    /// with a realtime device it is the extent size hint ([`DiskInode::extsize`]).
    pub fn faddr(&self) -> u32 {
        le32(&self.raw, 0x70)
    }
    /// The extent size hint in blocks of a realtime file or directory (0: none), kept in
    /// i_faddr on images with a realtime device (`disk::rtdev`), as XFS's `di_extsize`.
    pub fn extsize(&self) -> u32 {
        le32(&self.raw, 0x70)
    }
    /// Set the extent size hint ([`DiskInode::extsize`]).
    pub fn set_extsize(&mut self, blocks: u32) {
        put32(&mut self.raw, 0x70, blocks);
    }
    /// Low 32 bits of i_version (osd1's l_i_version); an ea_inode keeps the low half of
    /// its reference count here.
    pub fn version_lo(&self) -> u32 {
        le32(&self.raw, 0x24)
    }
    /// An ea_inode's reference count: i_ctime seconds high, l_i_version low
    /// (ext2fs_get_ea_inode_ref).
    pub fn ea_inode_refs(&self) -> u64 {
        (u64::from(le32(&self.raw, 0xC)) << 32) | u64::from(self.version_lo())
    }
    /// Set the low 32 bits of i_version.
    pub fn set_version_lo(&mut self, v: u32) {
        put32(&mut self.raw, 0x24, v)
    }
    /// Set an ea_inode's reference count (ext2fs_set_ea_inode_ref): high half in i_ctime
    /// seconds, low half in l_i_version.
    pub fn set_ea_inode_refs(&mut self, refs: u64) {
        put32(&mut self.raw, 0xC, (refs >> 32) as u32);
        self.set_version_lo(refs as u32);
    }
    /// An ea_inode's value hash (kept in i_atime seconds).
    pub fn ea_inode_hash(&self) -> u32 {
        le32(&self.raw, 0x8)
    }
    /// Raw i_atime seconds (low 32 bits).
    pub fn atime_lo(&self) -> u32 {
        le32(&self.raw, 0x8)
    }
    /// Raw i_ctime seconds (low 32 bits).
    pub fn ctime_lo(&self) -> u32 {
        le32(&self.raw, 0xC)
    }
    /// Raw i_mtime seconds (low 32 bits).
    pub fn mtime_lo(&self) -> u32 {
        le32(&self.raw, 0x10)
    }
    /// The in-inode xattr area after i_extra_isize (magic first), or None when the inode
    /// is 128 bytes or i_extra_isize leaves no room.
    pub fn ibody_xattr_area(&self) -> Option<&[u8]> {
        let start = GOOD_OLD_SIZE + usize::from(self.extra_isize());
        self.raw.get(start..).filter(|a| a.len() >= 4)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The checksum as the kernel's `ext4_inode_csum` defines it: crc32c of the inode
    /// number, the generation and a copy of the inode with its checksum fields zeroed
    /// (only the low 16 bits for an inode without room for the high half).
    fn csum_by_copy(d: &DiskInode, seed: u32, ino: u32) -> u32 {
        let mut copy = d.raw.clone();
        copy[0x7C..0x7E].fill(0);
        let hi = d.fits(0x82, 2);
        if hi {
            copy[0x82..0x84].fill(0);
        }
        let c = crc32c_raw(seed, &ino.to_le_bytes());
        let c = crc32c_raw(crc32c_raw(c, &d.generation().to_le_bytes()), &copy);
        if hi {
            c
        } else {
            c & 0xFFFF
        }
    }

    #[test]
    fn checksum_equals_the_kernels_definition() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for (size, extra) in [(128usize, 0u16), (256, 32), (256, 0), (512, 32), (1024, 4)] {
            for round in 0..50u32 {
                let mut raw = vec![0u8; size];
                for b in raw.iter_mut() {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    *b = x as u8;
                }
                if size > 128 {
                    put16(&mut raw, 0x80, extra);
                }
                let d = DiskInode { raw };
                let (seed, ino) = (round.wrapping_mul(0x0101_0101), 11 + round);
                assert_eq!(
                    d.compute_checksum(seed, ino),
                    csum_by_copy(&d, seed, ino),
                    "{size}-byte inode, extra_isize {extra}"
                );
                let mut e = DiskInode { raw: d.raw.clone() };
                e.update_checksum(seed, ino);
                assert_eq!(e.checksum(), csum_by_copy(&d, seed, ino));
            }
        }
    }

    #[test]
    fn times_round_trip_with_epoch_bits() {
        let mut i = DiskInode::new(256);
        for t in [
            Timespec { sec: 0, nsec: 1 },
            Timespec {
                sec: -5,
                nsec: 999_999_999,
            },
            Timespec {
                sec: 1 << 33,
                nsec: 12,
            },
            Timespec {
                sec: 1_700_000_000,
                nsec: 500,
            },
        ] {
            i.set_mtime(t);
            assert_eq!(i.mtime(), t);
        }
    }

    #[test]
    fn rdev_round_trip() {
        let mut i = DiskInode::new(256);
        for r in [
            0x0801u32,
            (259 << 8) | 7,
            (8 << 8) | 300 & 0xff | ((300 & !0xff) << 12),
        ] {
            i.set_rdev(r);
            assert_eq!(i.rdev(), r);
        }
    }
}
