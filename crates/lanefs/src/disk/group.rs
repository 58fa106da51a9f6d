//! Block group descriptors (32 or 64 bytes each, packed in the GDT after the superblock).

use super::{crc32c_raw, le16, le32, put16, put32};

/// Group flag: inode table and bitmap not initialized.
pub const BG_INODE_UNINIT: u16 = 0x1;
/// Group flag: block bitmap not initialized.
pub const BG_BLOCK_UNINIT: u16 = 0x2;
/// Group flag: inode table is zeroed.
pub const BG_INODE_ZEROED: u16 = 0x4;

/// Which checksum group descriptors carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DescCsum {
    /// None (ext2, ext3): the descriptor's flags and `itable_unused` are not trusted.
    None,
    /// uninit_bg (gdt_csum): crc16 over the UUID, the group number and the descriptor.
    Crc16([u8; 16]),
    /// metadata_csum: the low 16 bits of crc32c from the checksum seed.
    Crc32c(u32),
}

impl DescCsum {
    /// Whether descriptors are checksummed, so their UNINIT flags and `itable_unused`
    /// count (ext4_has_group_desc_csum).
    pub fn on(self) -> bool {
        self != DescCsum::None
    }
}

/// The crc16 (polynomial 0x8005, reflected) ext4 uses for uninit_bg descriptors.
pub fn crc16(mut crc: u16, data: &[u8]) -> u16 {
    for &b in data {
        crc ^= u16::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xA001
            } else {
                crc >> 1
            };
        }
    }
    crc
}

/// One group descriptor as raw bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupDesc {
    /// The descriptor bytes (desc_size long).
    pub raw: Vec<u8>,
}

impl GroupDesc {
    /// A zeroed descriptor of `size` bytes.
    pub fn zeroed(size: usize) -> GroupDesc {
        debug_assert!(
            size == 32 || (size >= 64 && size.is_power_of_two()),
            "descriptor size {size}"
        );
        GroupDesc { raw: vec![0; size] }
    }
    fn wide(&self) -> bool {
        self.raw.len() >= 64
    }
    fn get_lohi32(&self, lo: usize, hi: usize) -> u64 {
        let h = if self.wide() { le32(&self.raw, hi) } else { 0 };
        u64::from(le32(&self.raw, lo)) | (u64::from(h) << 32)
    }
    fn set_lohi32(&mut self, lo: usize, hi: usize, v: u64) {
        // A block number cut to 32 bits would point a bitmap or table elsewhere.
        assert!(
            self.wide() || v <= u64::from(u32::MAX),
            "block {v} does not fit a 32-byte descriptor"
        );
        put32(&mut self.raw, lo, v as u32);
        if self.wide() {
            put32(&mut self.raw, hi, (v >> 32) as u32);
        }
    }
    fn get_lohi16(&self, lo: usize, hi: usize) -> u32 {
        let h = if self.wide() { le16(&self.raw, hi) } else { 0 };
        u32::from(le16(&self.raw, lo)) | (u32::from(h) << 16)
    }
    fn set_lohi16(&mut self, lo: usize, hi: usize, v: u32) {
        debug_assert!(
            self.raw.len() >= 32,
            "descriptor of {} bytes",
            self.raw.len()
        );
        put16(&mut self.raw, lo, v as u16);
        if self.wide() {
            put16(&mut self.raw, hi, (v >> 16) as u16);
        }
    }
    /// Block bitmap location.
    pub fn block_bitmap(&self) -> u64 {
        self.get_lohi32(0x0, 0x20)
    }
    /// Set block bitmap location.
    pub fn set_block_bitmap(&mut self, v: u64) {
        self.set_lohi32(0x0, 0x20, v)
    }
    /// Inode bitmap location.
    pub fn inode_bitmap(&self) -> u64 {
        self.get_lohi32(0x4, 0x24)
    }
    /// Set inode bitmap location.
    pub fn set_inode_bitmap(&mut self, v: u64) {
        self.set_lohi32(0x4, 0x24, v)
    }
    /// Inode table location.
    pub fn inode_table(&self) -> u64 {
        self.get_lohi32(0x8, 0x28)
    }
    /// Set inode table location.
    pub fn set_inode_table(&mut self, v: u64) {
        self.set_lohi32(0x8, 0x28, v)
    }
    /// Free blocks in the group.
    pub fn free_blocks(&self) -> u32 {
        self.get_lohi16(0xC, 0x2C)
    }
    /// Set free blocks.
    pub fn set_free_blocks(&mut self, v: u32) {
        debug_assert!(
            self.wide() || v <= 0xFFFF,
            "free blocks count {v} does not fit a 32-byte descriptor"
        );
        self.set_lohi16(0xC, 0x2C, v)
    }
    /// Free inodes in the group.
    pub fn free_inodes(&self) -> u32 {
        self.get_lohi16(0xE, 0x2E)
    }
    /// Set free inodes.
    pub fn set_free_inodes(&mut self, v: u32) {
        debug_assert!(
            self.wide() || v <= 0xFFFF,
            "free inodes count {v} does not fit a 32-byte descriptor"
        );
        self.set_lohi16(0xE, 0x2E, v)
    }
    /// Directories in the group.
    pub fn used_dirs(&self) -> u32 {
        self.get_lohi16(0x10, 0x30)
    }
    /// Set directories count.
    pub fn set_used_dirs(&mut self, v: u32) {
        debug_assert!(
            self.wide() || v <= 0xFFFF,
            "used dirs count {v} does not fit a 32-byte descriptor"
        );
        self.set_lohi16(0x10, 0x30, v)
    }
    /// Unused inodes at the end of the table.
    pub fn itable_unused(&self) -> u32 {
        self.get_lohi16(0x1C, 0x32)
    }
    /// Set unused inode count.
    pub fn set_itable_unused(&mut self, v: u32) {
        debug_assert!(
            self.wide() || v <= 0xFFFF,
            "itable unused count {v} does not fit a 32-byte descriptor"
        );
        self.set_lohi16(0x1C, 0x32, v)
    }
    /// Group flags (BG_*).
    pub fn flags(&self) -> u16 {
        le16(&self.raw, 0x12)
    }
    /// Set group flags.
    pub fn set_flags(&mut self, v: u16) {
        put16(&mut self.raw, 0x12, v)
    }
    /// Stored block bitmap checksum.
    pub fn block_bitmap_csum(&self) -> u32 {
        self.get_lohi16(0x18, 0x38)
    }
    /// Store the block bitmap checksum.
    pub fn set_block_bitmap_csum(&mut self, v: u32) {
        self.set_lohi16(0x18, 0x38, v)
    }
    /// Stored inode bitmap checksum.
    pub fn inode_bitmap_csum(&self) -> u32 {
        self.get_lohi16(0x1A, 0x3A)
    }
    /// Store the inode bitmap checksum.
    pub fn set_inode_bitmap_csum(&mut self, v: u32) {
        self.set_lohi16(0x1A, 0x3A, v)
    }
    /// Stored descriptor checksum.
    pub fn checksum(&self) -> u16 {
        le16(&self.raw, 0x1E)
    }
    /// Descriptor checksum for group `group`.
    pub fn compute_checksum(&self, csum_seed: u32, group: u32) -> u16 {
        debug_assert!(
            self.raw.len() >= 0x20,
            "descriptor of {} bytes",
            self.raw.len()
        );
        let mut c = crc32c_raw(csum_seed, &group.to_le_bytes());
        c = crc32c_raw(c, &self.raw[..0x1E]);
        c = crc32c_raw(c, &[0, 0]);
        if self.raw.len() > 0x20 {
            c = crc32c_raw(c, &self.raw[0x20..]);
        }
        (c & 0xFFFF) as u16
    }
    /// Recompute and store the checksum.
    pub fn update_checksum(&mut self, csum_seed: u32, group: u32) {
        let c = self.compute_checksum(csum_seed, group);
        put16(&mut self.raw, 0x1E, c);
    }
    /// The checksum of kind `k` for group `group` (`None` when descriptors carry none).
    pub fn checksum_of(&self, k: DescCsum, group: u32) -> Option<u16> {
        match k {
            DescCsum::None => None,
            DescCsum::Crc32c(seed) => Some(self.compute_checksum(seed, group)),
            DescCsum::Crc16(uuid) => {
                let mut c = crc16(0xFFFF, &uuid);
                c = crc16(c, &group.to_le_bytes());
                c = crc16(c, &self.raw[..0x1E]);
                if self.raw.len() > 0x20 {
                    c = crc16(c, &self.raw[0x20..]);
                }
                Some(c)
            }
        }
    }
    /// Whether the stored checksum is right (always, when there is none).
    pub fn verify(&self, k: DescCsum, group: u32) -> bool {
        self.checksum_of(k, group)
            .is_none_or(|c| c == self.checksum())
    }
    /// Store the checksum of kind `k` (nothing when there is none).
    pub fn seal(&mut self, k: DescCsum, group: u32) {
        if let Some(c) = self.checksum_of(k, group) {
            put16(&mut self.raw, 0x1E, c);
        }
    }
}

/// Checksum of a bitmap's first `bytes` bytes, as stored in the descriptor.
pub fn bitmap_csum(csum_seed: u32, map: &[u8], bytes: usize, wide: bool) -> u32 {
    debug_assert!(
        bytes <= map.len(),
        "checksum over {bytes} bytes of a {}-byte bitmap",
        map.len()
    );
    let c = crc32c_raw(csum_seed, &map[..bytes]);
    if wide {
        c
    } else {
        c & 0xFFFF
    }
}

/// Which groups hold a superblock and descriptor backup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backups {
    /// Every group (no sparse_super).
    Every,
    /// Groups 0, 1 and powers of 3, 5 and 7 (sparse_super).
    Sparse,
    /// Group 0 and the (at most) two groups `s_backup_bgs` names (sparse_super2).
    Listed([u32; 2]),
}

impl Backups {
    /// Whether group `g` holds a superblock (ext4_bg_has_super).
    pub fn has_super(self, g: u32) -> bool {
        match self {
            Backups::Every => true,
            Backups::Sparse => has_super(g, true),
            Backups::Listed(l) => g == 0 || l.contains(&g),
        }
    }
}

/// Whether group `g` holds a superblock backup (sparse_super rule: 0, 1, powers of 3, 5, 7).
pub fn has_super(g: u32, sparse: bool) -> bool {
    if !sparse || g <= 1 {
        return true;
    }
    if g.is_multiple_of(2) {
        return false;
    }
    [3u32, 5, 7].iter().any(|&b| {
        let mut p = b;
        while p < g {
            match p.checked_mul(b) {
                Some(n) => p = n,
                None => return false,
            }
        }
        p == g
    })
}

/// The block bitmap the kernel assumes for a BLOCK_UNINIT group (`ext4_init_block_bitmap`):
/// only the group's superblock copy, descriptors and its own bitmaps and table are used.
pub fn uninit_block_bitmap(geo: &super::geometry::Geometry, g: u32, d: &GroupDesc) -> Vec<u8> {
    debug_assert!(g < geo.groups, "group {g} of {}", geo.groups);
    let mut map = vec![0u8; geo.bs as usize];
    let first = geo.group_first(g);
    let len = u64::from(geo.group_len(g));
    let mut mark = |start: u64, n: u64| {
        for b in start..start.saturating_add(n) {
            if b >= first && b - first < len {
                super::set_bit(&mut map, (b - first) as usize);
            }
        }
    };
    let parts = geo.base_meta_parts(g);
    for (s, n) in [parts.super_block, parts.descriptors, parts.reserved] {
        mark(s, n);
    }
    mark(d.block_bitmap(), 1);
    mark(d.inode_bitmap(), 1);
    mark(d.inode_table(), geo.itable_blocks());
    map
}
