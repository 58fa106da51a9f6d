//! The ext4 superblock: 1024 bytes at byte offset 1024 (and backups in sparse groups).

use super::{crc32c_raw, le16, le32, put16, put32};
use crate::error::{Error, Result};

/// Byte offset of the primary superblock.
pub const SB_OFFSET: u64 = 1024;
/// Size of the superblock.
pub const SB_SIZE: usize = 1024;
/// The block holding the primary superblock and the superblock's offset in it, for a
/// file system of `block_size`-byte blocks (block 1 at offset 0 for 1 KiB blocks, block 0
/// at offset 1024 otherwise).
pub fn location(block_size: u32) -> (u64, usize) {
    let bs = u64::from(block_size.max(1));
    (SB_OFFSET / bs, (SB_OFFSET % bs) as usize)
}

/// ext2/3/4 magic.
pub const MAGIC: u16 = 0xEF53;

/// COMPAT features: unknown ones are harmless.
pub mod compat {
    /// has_journal
    pub const HAS_JOURNAL: u32 = 0x4;
    /// ext_attr
    pub const EXT_ATTR: u32 = 0x8;
    /// resize_inode
    pub const RESIZE_INODE: u32 = 0x10;
    /// dir_index
    pub const DIR_INDEX: u32 = 0x20;
    /// sparse_super2: backups only in the groups `s_backup_bgs` names.
    pub const SPARSE_SUPER2: u32 = 0x200;
    /// Names for messages and reports.
    pub const NAMES: &[(u32, &str)] = &[
        (0x1, "dir_prealloc"),
        (0x2, "imagic_inodes"),
        (0x4, "has_journal"),
        (0x8, "ext_attr"),
        (0x10, "resize_inode"),
        (0x20, "dir_index"),
        (0x40, "lazy_bg"),
        (0x80, "exclude_inode"),
        (0x100, "exclude_bitmap"),
        (0x200, "sparse_super2"),
        (0x400, "fast_commit"),
        (0x800, "stable_inodes"),
        (0x1000, "orphan_file"),
    ];
}

/// INCOMPAT features: an unknown one refuses the mount.
pub mod incompat {
    /// compression
    pub const COMPRESSION: u32 = 0x1;
    /// filetype
    pub const FILETYPE: u32 = 0x2;
    /// needs_recovery
    pub const RECOVER: u32 = 0x4;
    /// journal_dev
    pub const JOURNAL_DEV: u32 = 0x8;
    /// meta_bg
    pub const META_BG: u32 = 0x10;
    /// extent
    pub const EXTENTS: u32 = 0x40;
    /// 64bit
    pub const BIT64: u32 = 0x80;
    /// mmp
    pub const MMP: u32 = 0x100;
    /// flex_bg
    pub const FLEX_BG: u32 = 0x200;
    /// ea_inode
    pub const EA_INODE: u32 = 0x400;
    /// dirdata
    pub const DIRDATA: u32 = 0x1000;
    /// metadata_csum_seed
    pub const CSUM_SEED: u32 = 0x2000;
    /// large_dir
    pub const LARGEDIR: u32 = 0x4000;
    /// inline_data
    pub const INLINE_DATA: u32 = 0x8000;
    /// encrypt
    pub const ENCRYPT: u32 = 0x10000;
    /// casefold
    pub const CASEFOLD: u32 = 0x20000;
    /// lanefs's realtime data device (`disk::rtdev`): no other tool knows it, so the
    /// kernel and e2fsck refuse the image rather than misread it.
    pub const RTDEV: u32 = 0x4000_0000;
    /// What lanefs reads and writes.
    pub const SUPPORTED: u32 = FILETYPE
        | RECOVER
        | META_BG
        | EXTENTS
        | BIT64
        | MMP
        | FLEX_BG
        | EA_INODE
        | CSUM_SEED
        | INLINE_DATA
        | RTDEV;
    /// Names for messages.
    pub const NAMES: &[(u32, &str)] = &[
        (COMPRESSION, "compression"),
        (FILETYPE, "filetype"),
        (RECOVER, "needs_recovery"),
        (JOURNAL_DEV, "journal_dev"),
        (META_BG, "meta_bg"),
        (EXTENTS, "extent"),
        (BIT64, "64bit"),
        (MMP, "mmp"),
        (FLEX_BG, "flex_bg"),
        (EA_INODE, "ea_inode"),
        (DIRDATA, "dirdata"),
        (CSUM_SEED, "metadata_csum_seed"),
        (LARGEDIR, "large_dir"),
        (INLINE_DATA, "inline_data"),
        (ENCRYPT, "encrypt"),
        (CASEFOLD, "casefold"),
        (RTDEV, "lanefs_rtdev"),
    ];
}

/// RO_COMPAT features: an unknown one mounts read-only.
pub mod ro_compat {
    /// sparse_super
    pub const SPARSE_SUPER: u32 = 0x1;
    /// large_file
    pub const LARGE_FILE: u32 = 0x2;
    /// huge_file
    pub const HUGE_FILE: u32 = 0x8;
    /// uninit_bg (gdt_csum)
    pub const GDT_CSUM: u32 = 0x10;
    /// dir_nlink
    pub const DIR_NLINK: u32 = 0x20;
    /// extra_isize
    pub const EXTRA_ISIZE: u32 = 0x40;
    /// quota
    pub const QUOTA: u32 = 0x100;
    /// bigalloc
    pub const BIGALLOC: u32 = 0x200;
    /// metadata_csum
    pub const METADATA_CSUM: u32 = 0x400;
    /// readonly
    pub const READONLY: u32 = 0x1000;
    /// project
    pub const PROJECT: u32 = 0x2000;
    /// shared_blocks (blocks shared between files, from e2fsprogs' `-E share_blocks`)
    pub const SHARED_BLOCKS: u32 = 0x4000;
    /// verity (fs-verity's Merkle trees past the end of files)
    pub const VERITY: u32 = 0x8000;
    /// orphan_present
    pub const ORPHAN_PRESENT: u32 = 0x10000;
    /// What lanefs writes correctly.
    pub const SUPPORTED: u32 =
        SPARSE_SUPER | LARGE_FILE | HUGE_FILE | GDT_CSUM | DIR_NLINK | EXTRA_ISIZE | METADATA_CSUM;
    /// Names for messages.
    pub const NAMES: &[(u32, &str)] = &[
        (SPARSE_SUPER, "sparse_super"),
        (LARGE_FILE, "large_file"),
        (HUGE_FILE, "huge_file"),
        (GDT_CSUM, "uninit_bg"),
        (DIR_NLINK, "dir_nlink"),
        (EXTRA_ISIZE, "extra_isize"),
        (QUOTA, "quota"),
        (BIGALLOC, "bigalloc"),
        (METADATA_CSUM, "metadata_csum"),
        (READONLY, "readonly"),
        (PROJECT, "project"),
        (SHARED_BLOCKS, "shared_blocks"),
        (VERITY, "verity"),
        (ORPHAN_PRESENT, "orphan_present"),
    ];
}

/// Names of the bits of `mask` not in `known`, e.g. "inline_data, 0x80000000".
pub fn feature_names(mask: u32, names: &[(u32, &str)]) -> String {
    let mut out = Vec::new();
    for bit in 0..32 {
        let b = 1u32 << bit;
        if mask & b != 0 {
            match names.iter().find(|(v, _)| *v == b) {
                Some((_, n)) => out.push((*n).to_string()),
                None => out.push(format!("{b:#x}")),
            }
        }
    }
    out.join(", ")
}

/// `s_flags` bit: directory hashes use signed chars.
pub const FLAG_SIGNED_HASH: u32 = 0x1;
/// `s_flags` bit: directory hashes use unsigned chars.
pub const FLAG_UNSIGNED_HASH: u32 = 0x2;

macro_rules! field32 {
    ($get:ident, $set:ident, $off:expr) => {
        #[doc = concat!("`", stringify!($get), "` (u32 at ", stringify!($off), ").")]
        pub fn $get(&self) -> u32 {
            le32(&self.raw[..], $off)
        }
        #[doc = concat!("Set `", stringify!($get), "`.")]
        pub fn $set(&mut self, v: u32) {
            put32(&mut self.raw[..], $off, v)
        }
    };
}
macro_rules! field16 {
    ($get:ident, $set:ident, $off:expr) => {
        #[doc = concat!("`", stringify!($get), "` (u16 at ", stringify!($off), ").")]
        pub fn $get(&self) -> u16 {
            le16(&self.raw[..], $off)
        }
        #[doc = concat!("Set `", stringify!($get), "`.")]
        pub fn $set(&mut self, v: u16) {
            put16(&mut self.raw[..], $off, v)
        }
    };
}

/// The superblock as raw bytes with typed accessors.
#[derive(Clone, PartialEq, Eq)]
pub struct Superblock {
    /// The 1024 on-disk bytes.
    pub raw: Box<[u8; SB_SIZE]>,
}

impl std::fmt::Debug for Superblock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Superblock")
            .field("blocks", &self.blocks_count())
            .field("inodes", &self.inodes_count())
            .field("block_size", &self.block_size())
            .finish()
    }
}

impl Superblock {
    /// An all-zero superblock (mkfs fills it).
    pub fn zeroed() -> Superblock {
        Superblock {
            raw: Box::new([0; SB_SIZE]),
        }
    }

    field32!(inodes_count, set_inodes_count, 0x0);
    field32!(r_blocks_count_lo, set_r_blocks_count_lo, 0x8);
    field32!(free_inodes_count, set_free_inodes_count, 0x10);
    field32!(first_data_block, set_first_data_block, 0x14);
    field32!(log_block_size, set_log_block_size, 0x18);
    field32!(log_cluster_size, set_log_cluster_size, 0x1C);
    field32!(blocks_per_group, set_blocks_per_group, 0x20);
    field32!(clusters_per_group, set_clusters_per_group, 0x24);
    field32!(inodes_per_group, set_inodes_per_group, 0x28);
    field32!(mtime, set_mtime, 0x2C);
    field32!(wtime, set_wtime, 0x30);
    field16!(mnt_count, set_mnt_count, 0x34);
    field16!(max_mnt_count, set_max_mnt_count, 0x36);
    field16!(magic, set_magic, 0x38);
    field16!(state, set_state, 0x3A);
    field16!(errors, set_errors, 0x3C);
    field32!(lastcheck, set_lastcheck, 0x40);
    field32!(creator_os, set_creator_os, 0x48);
    field32!(rev_level, set_rev_level, 0x4C);
    field32!(first_ino, set_first_ino, 0x54);
    field16!(inode_size, set_inode_size, 0x58);
    field16!(block_group_nr, set_block_group_nr, 0x5A);
    field32!(feature_compat, set_feature_compat, 0x5C);
    field32!(feature_incompat, set_feature_incompat, 0x60);
    field32!(feature_ro_compat, set_feature_ro_compat, 0x64);
    field16!(reserved_gdt_blocks, set_reserved_gdt_blocks, 0xCE);
    field32!(journal_inum, set_journal_inum, 0xE0);
    field32!(last_orphan, set_last_orphan, 0xE8);
    field16!(desc_size_raw, set_desc_size_raw, 0xFE);
    field32!(default_mount_opts, set_default_mount_opts, 0x100);
    field32!(mkfs_time, set_mkfs_time, 0x108);
    field16!(min_extra_isize, set_min_extra_isize, 0x15C);
    field16!(want_extra_isize, set_want_extra_isize, 0x15E);
    field32!(flags, set_flags, 0x160);
    field32!(checksum_seed, set_checksum_seed, 0x270);
    field32!(first_meta_bg, set_first_meta_bg, 0x104);
    field16!(mmp_update_interval, set_mmp_update_interval, 0x166);
    field32!(backup_bg0, set_backup_bg0, 0x24C);
    field32!(backup_bg1, set_backup_bg1, 0x250);

    /// `s_mmp_block`: the multi-mount protection block.
    pub fn mmp_block(&self) -> u64 {
        super::le64(&self.raw[..], 0x168)
    }
    /// Set `s_mmp_block`.
    pub fn set_mmp_block(&mut self, v: u64) {
        super::put64(&mut self.raw[..], 0x168, v)
    }
    /// Inode size (128 on revision 0 file systems, which do not record it).
    pub fn inode_size_or_default(&self) -> u32 {
        if self.rev_level() == 0 {
            128
        } else {
            u32::from(self.inode_size())
        }
    }
    /// First non-reserved inode (11 on revision 0 file systems).
    pub fn first_ino_or_default(&self) -> u32 {
        if self.rev_level() == 0 {
            11
        } else {
            self.first_ino()
        }
    }

    /// Which groups hold superblock and descriptor backups.
    pub fn backups(&self) -> crate::disk::group::Backups {
        use crate::disk::group::Backups;
        if self.has_compat(compat::SPARSE_SUPER2) {
            Backups::Listed([self.backup_bg0(), self.backup_bg1()])
        } else if self.has_ro_compat(ro_compat::SPARSE_SUPER) {
            Backups::Sparse
        } else {
            Backups::Every
        }
    }

    /// UUID of the file system.
    pub fn uuid(&self) -> [u8; 16] {
        self.raw[0x68..0x78].try_into().unwrap_or([0; 16])
    }
    /// Set the UUID.
    pub fn set_uuid(&mut self, u: [u8; 16]) {
        self.raw[0x68..0x78].copy_from_slice(&u);
    }
    /// Volume label bytes (NUL padded).
    pub fn volume_name(&self) -> String {
        let n = &self.raw[0x78..0x88];
        let end = n.iter().position(|&c| c == 0).unwrap_or(16);
        String::from_utf8_lossy(&n[..end]).into_owned()
    }
    /// Directory hash seed (4 words).
    pub fn hash_seed(&self) -> [u32; 4] {
        [0, 1, 2, 3].map(|i| le32(&self.raw[..], 0xEC + 4 * i))
    }
    /// Set the directory hash seed.
    pub fn set_hash_seed(&mut self, s: [u32; 4]) {
        for (i, w) in s.iter().enumerate() {
            put32(&mut self.raw[..], 0xEC + 4 * i, *w);
        }
    }
    /// Default directory hash version.
    pub fn def_hash_version(&self) -> u8 {
        self.raw[0xFC]
    }
    /// Set the default directory hash version.
    pub fn set_def_hash_version(&mut self, v: u8) {
        self.raw[0xFC] = v;
    }
    /// `s_jnl_backup_type`.
    pub fn set_jnl_backup_type(&mut self, v: u8) {
        self.raw[0xFD] = v;
    }
    /// `s_jnl_blocks[i]` (i < 17): backup of the journal inode's i_block and size.
    pub fn set_jnl_block(&mut self, i: usize, v: u32) {
        debug_assert!(i < 17, "s_jnl_blocks[{i}]");
        put32(&mut self.raw[..], 0x10C + 4 * i, v);
    }
    /// `s_log_groups_per_flex`.
    pub fn log_groups_per_flex(&self) -> u8 {
        self.raw[0x174]
    }
    /// Set `s_log_groups_per_flex`.
    pub fn set_log_groups_per_flex(&mut self, v: u8) {
        debug_assert!(v < 32, "2^{v} groups per flex group");
        self.raw[0x174] = v;
    }
    /// `s_checksum_type` (1 = crc32c).
    pub fn set_checksum_type(&mut self, v: u8) {
        self.raw[0x175] = v;
    }
    /// `s_kbytes_written`.
    pub fn kbytes_written(&self) -> u64 {
        super::le64(&self.raw[..], 0x178)
    }
    /// Set `s_kbytes_written`.
    pub fn set_kbytes_written(&mut self, v: u64) {
        super::put64(&mut self.raw[..], 0x178, v);
    }

    /// Whether a 64-bit feature word is set.
    pub fn has_incompat(&self, f: u32) -> bool {
        self.feature_incompat() & f != 0
    }
    /// Whether an RO_COMPAT feature is set.
    pub fn has_ro_compat(&self, f: u32) -> bool {
        self.feature_ro_compat() & f != 0
    }
    /// Whether a COMPAT feature is set.
    pub fn has_compat(&self, f: u32) -> bool {
        self.feature_compat() & f != 0
    }
    /// Whether metadata checksums are on.
    pub fn metadata_csum(&self) -> bool {
        self.has_ro_compat(ro_compat::METADATA_CSUM)
    }

    /// Total blocks (64-bit).
    pub fn blocks_count(&self) -> u64 {
        self.lohi(0x4, 0x150)
    }
    /// Set total blocks.
    pub fn set_blocks_count(&mut self, v: u64) {
        self.set_lohi(0x4, 0x150, v)
    }
    /// Reserved blocks (64-bit).
    pub fn r_blocks_count(&self) -> u64 {
        self.lohi(0x8, 0x154)
    }
    /// Set reserved blocks.
    pub fn set_r_blocks_count(&mut self, v: u64) {
        self.set_lohi(0x8, 0x154, v)
    }
    /// Free blocks (64-bit).
    pub fn free_blocks_count(&self) -> u64 {
        self.lohi(0xC, 0x158)
    }
    /// Set free blocks.
    pub fn set_free_blocks_count(&mut self, v: u64) {
        self.set_lohi(0xC, 0x158, v)
    }
    fn lohi(&self, lo: usize, hi: usize) -> u64 {
        let h = if self.has_incompat(incompat::BIT64) {
            le32(&self.raw[..], hi)
        } else {
            0
        };
        u64::from(le32(&self.raw[..], lo)) | (u64::from(h) << 32)
    }
    fn set_lohi(&mut self, lo: usize, hi: usize, v: u64) {
        // Without 64bit the high word is not there: a count past 2^32 would be cut.
        assert!(
            self.has_incompat(incompat::BIT64) || v <= u64::from(u32::MAX),
            "block count {v} without the 64bit feature"
        );
        put32(&mut self.raw[..], lo, v as u32);
        if self.has_incompat(incompat::BIT64) {
            put32(&mut self.raw[..], hi, (v >> 32) as u32);
        }
    }

    /// Block size in bytes.
    pub fn block_size(&self) -> u32 {
        1024u32.checked_shl(self.log_block_size()).unwrap_or(0)
    }
    /// Group descriptor size in bytes.
    pub fn desc_size(&self) -> u32 {
        if self.has_incompat(incompat::BIT64) {
            u32::from(self.desc_size_raw())
        } else {
            32
        }
    }
    /// Number of block groups.
    pub fn group_count(&self) -> u32 {
        let per = u64::from(self.blocks_per_group().max(1));
        let data = self
            .blocks_count()
            .saturating_sub(u64::from(self.first_data_block()));
        data.div_ceil(per) as u32
    }
    /// Seed for all metadata checksums.
    pub fn csum_seed(&self) -> u32 {
        if self.has_incompat(incompat::CSUM_SEED) {
            self.checksum_seed()
        } else {
            crc32c_raw(!0, &self.uuid())
        }
    }
    /// Stored superblock checksum.
    pub fn checksum(&self) -> u32 {
        le32(&self.raw[..], 0x3FC)
    }
    /// Checksum the superblock should carry.
    pub fn compute_checksum(&self) -> u32 {
        crc32c_raw(!0, &self.raw[..0x3FC])
    }
    /// Recompute and store the checksum (when metadata_csum is on).
    pub fn update_checksum(&mut self) {
        if self.metadata_csum() {
            let c = self.compute_checksum();
            put32(&mut self.raw[..], 0x3FC, c);
        }
    }

    /// Refuse anything that is not an ext2/3/4 superblock.
    pub fn check_magic(&self) -> Result<()> {
        if self.magic() != MAGIC {
            let detail = format!("bad superblock magic {:#06x}", self.magic());
            return Err(Error::NotExt4(detail));
        }
        Ok(())
    }

    /// Decode and validate the superblock bytes read from the device.
    ///
    /// Checks the magic, the checksum and every geometry field lanefs relies on, so a
    /// corrupt superblock gives an error naming the field, never a panic later.
    pub fn decode(bytes: &[u8], device_size: u64) -> Result<Superblock> {
        if bytes.len() < SB_SIZE {
            return Err(Error::corrupt("superblock", 0, "short read"));
        }
        let mut raw = Box::new([0u8; SB_SIZE]);
        raw.copy_from_slice(&bytes[..SB_SIZE]);
        let sb = Superblock { raw };
        sb.check_magic()?;
        if sb.metadata_csum() && sb.checksum() != sb.compute_checksum() {
            // Name what else is wrong too, so every reader of a damaged superblock
            // (a mount, fsck) says the same.
            let mut fixed = Superblock {
                raw: sb.raw.clone(),
            };
            fixed.update_checksum();
            let also = match fixed.check_geometry(device_size) {
                Err(Error::Corrupt { detail, .. }) => format!("; {detail}"),
                _ => String::new(),
            };
            return Err(Error::corrupt(
                "superblock",
                0,
                format!(
                    "checksum mismatch (stored {:#010x}, computed {:#010x}){also}",
                    sb.checksum(),
                    sb.compute_checksum()
                ),
            ));
        }
        sb.check_geometry(device_size)?;
        Ok(sb)
    }

    fn check_geometry(&self, device_size: u64) -> Result<()> {
        let bad = |d: String| Err(Error::corrupt("superblock", 0, d));
        if self.log_block_size() > 6 {
            return bad(format!(
                "block size log {} out of range",
                self.log_block_size()
            ));
        }
        let bs = u64::from(self.block_size());
        // bigalloc: bitmaps count clusters, so a group spans cluster-ratio times more.
        let ratio = if self.has_ro_compat(ro_compat::BIGALLOC) {
            if self.log_cluster_size() < self.log_block_size() || self.log_cluster_size() > 16 {
                return bad(format!(
                    "cluster size log {} invalid",
                    self.log_cluster_size()
                ));
            }
            1u64 << (self.log_cluster_size() - self.log_block_size())
        } else {
            1
        };
        if self.blocks_per_group() == 0 || u64::from(self.blocks_per_group()) > bs * 8 * ratio {
            return bad(format!(
                "blocks per group {} invalid",
                self.blocks_per_group()
            ));
        }
        if self.inodes_per_group() == 0 || u64::from(self.inodes_per_group()) > bs * 8 {
            return bad(format!(
                "inodes per group {} invalid",
                self.inodes_per_group()
            ));
        }
        // A 32-byte descriptor counts a group's free blocks and inodes in 16 bits: a
        // group holding more could not be counted (mke2fs caps both below 65536).
        let per_group_blocks = u64::from(self.blocks_per_group()) / ratio;
        if self.desc_size() < 64 && per_group_blocks.max(u64::from(self.inodes_per_group())) > 65535
        {
            return bad(format!(
                "{} blocks and {} inodes per group: more than 32-byte group descriptors count",
                self.blocks_per_group(),
                self.inodes_per_group()
            ));
        }
        let isz = u32::from(self.inode_size());
        if self.rev_level() >= 1 && (isz < 128 || !isz.is_power_of_two() || u64::from(isz) > bs) {
            return bad(format!("inode size {isz} invalid"));
        }
        if self.blocks_count() == 0 || self.blocks_count() > device_size / bs.max(1) {
            return bad(format!(
                "block count {} does not fit the device ({} bytes)",
                self.blocks_count(),
                device_size
            ));
        }
        // As ext4_check_geometry: the first data block is inside the file system (and is
        // block 0, or 1 when 1 KiB blocks put the superblock in block 1).
        if self.first_data_block() > 1 || u64::from(self.first_data_block()) >= self.blocks_count()
        {
            return bad(format!(
                "first data block {} invalid for {} blocks",
                self.first_data_block(),
                self.blocks_count()
            ));
        }
        // Group numbers are 32 bits (the kernel: "groups count too large").
        let data = self.blocks_count() - u64::from(self.first_data_block());
        let groups = data.div_ceil(u64::from(self.blocks_per_group()));
        if groups > u64::from(u32::MAX) {
            return bad(format!("{groups} block groups: more than 2^32"));
        }
        if u64::from(self.inodes_count()) != groups * u64::from(self.inodes_per_group()) {
            return bad(format!(
                "inode count {} != {} groups x {} inodes",
                self.inodes_count(),
                groups,
                self.inodes_per_group()
            ));
        }
        let ds = self.desc_size();
        if self.has_incompat(incompat::BIT64)
            && (!(32..=1024).contains(&ds) || !ds.is_power_of_two())
        {
            return bad(format!("group descriptor size {ds} invalid"));
        }
        if self.rev_level() >= 1 && self.first_ino() < 11 {
            return bad(format!("first inode {} below 11", self.first_ino()));
        }
        Ok(())
    }
}

/// Fields the checker and the report read that the engine does not (each names its
/// `ext4_super_block` field).
impl Superblock {
    /// `s_checksum_type` (1 is crc32c).
    pub fn checksum_type(&self) -> u8 {
        self.raw[0x175]
    }
    /// `s_usr_quota_inum`.
    pub fn usr_quota_inum(&self) -> u32 {
        le32(&self.raw[..], 0x240)
    }
    /// `s_grp_quota_inum`.
    pub fn grp_quota_inum(&self) -> u32 {
        le32(&self.raw[..], 0x244)
    }
    /// `s_prj_quota_inum`.
    pub fn prj_quota_inum(&self) -> u32 {
        le32(&self.raw[..], 0x26C)
    }
    /// `s_orphan_file_inum` (orphan_file).
    pub fn orphan_file_inum(&self) -> u32 {
        le32(&self.raw[..], 0x280)
    }
    /// `s_journal_uuid`: set when the journal is external.
    pub fn journal_uuid(&self) -> [u8; 16] {
        let mut u = [0u8; 16];
        u.copy_from_slice(&self.raw[0xD0..0xE0]);
        u
    }
}
