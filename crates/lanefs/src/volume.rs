//! `Volume`: what a mount learns once and never changes while it lives (ext4 keeps the
//! same in `ext4_sb_info`): the geometry and block size, the superblock features the
//! layers act on, how directory names hash, and the mount's policies (read-only and why,
//! access times, the time clamp). `Fs` builds it at mount; the layers borrow it (the
//! directory code takes `&Volume`, not a copy of its fields per call).

use crate::alloc::Geometry;
use crate::disk::superblock::{self as sbm, compat, incompat, ro_compat, Superblock};
use crate::types::{AtimePolicy, Timespec};

bitflags::bitflags! {
    /// The superblock features the engine's layers act on, read once at mount
    /// (large_file, which a write may turn on, is not here: `Fs` keeps it).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub(crate) struct Features: u16 {
        /// dir_index: directories grow hashed indexes (htrees).
        const DIR_INDEX = 1 << 0;
        /// filetype: directory entries record their inode's type (else the byte is 0,
        /// the high byte of a 16-bit name length, as ext2 without filetype has it).
        const FILETYPE = 1 << 1;
        /// ext_attr: extended attributes may be stored.
        const EXT_ATTR = 1 << 2;
        /// extent: new files and directories are extent-mapped (else they use direct
        /// and indirect blocks, as ext2 and ext3 do).
        const EXTENTS = 1 << 3;
        /// huge_file: `i_blocks` has 48 bits, so files may be larger.
        const HUGE_FILE = 1 << 4;
        /// inline_data: small files and directories may live in their inode.
        const INLINE_DATA = 1 << 5;
        /// ea_inode: attribute values too large for a block live in inodes.
        const EA_INODE = 1 << 6;
    }
}

impl Features {
    /// The features `sb` has.
    pub(crate) fn of(sb: &Superblock) -> Features {
        let mut f = Features::empty();
        f.set(Features::DIR_INDEX, sb.has_compat(compat::DIR_INDEX));
        f.set(Features::FILETYPE, sb.has_incompat(incompat::FILETYPE));
        f.set(Features::EXT_ATTR, sb.has_compat(compat::EXT_ATTR));
        f.set(Features::EXTENTS, sb.has_incompat(incompat::EXTENTS));
        f.set(Features::HUGE_FILE, sb.has_ro_compat(ro_compat::HUGE_FILE));
        f.set(
            Features::INLINE_DATA,
            sb.has_incompat(incompat::INLINE_DATA),
        );
        f.set(Features::EA_INODE, sb.has_incompat(incompat::EA_INODE));
        f
    }
}

/// How directory names hash: the superblock's hash seed, the version new indexes use,
/// and whether the legacy hashes read names as unsigned chars.
#[derive(Clone, Copy, Debug)]
pub(crate) struct DirHash {
    /// `s_hash_seed`.
    pub seed: [u32; 4],
    /// `s_def_hash_version`: the hash of new indexes.
    pub version: u8,
    /// The superblock's unsigned-hash flag.
    pub unsigned: bool,
}

impl DirHash {
    /// The directory hash `sb` describes.
    pub(crate) fn of(sb: &Superblock) -> DirHash {
        DirHash {
            seed: sb.hash_seed(),
            version: sb.def_hash_version(),
            unsigned: sb.flags() & sbm::FLAG_UNSIGNED_HASH != 0,
        }
    }
}

/// Every fact a mount fixes: built once by `Fs`'s mount, read by every layer.
pub(crate) struct Volume {
    /// The file system's layout (block size, groups, inode size, checksum seed).
    pub geo: Geometry,
    /// The superblock features the engine acts on.
    pub features: Features,
    /// How directory names hash.
    pub hash: DirHash,
    /// Most bytes of leaf digests (`leafdigest`) one directory keeps; 0 searches every
    /// leaf by walking it (`dir_digest=0`).
    pub digest_budget: usize,
    /// Mounted read-only (asked, or forced: `ro_reason`).
    pub read_only: bool,
    /// Why the mount is read-only when the caller asked for read-write.
    pub ro_reason: Option<String>,
    /// The latest time the engine stamps (`MountOptions::clamp_time`).
    pub clamp_time: Option<i64>,
    /// When reads update access times (`Fs::touch_atime`).
    pub atime: AtimePolicy,
    /// Directories' access times are never updated.
    pub nodiratime: bool,
    /// The superblock's lifetime writes (KiB) when mounted; the clean unmount adds this
    /// mount's.
    pub kbytes_at_mount: u64,
}

impl Volume {
    /// The block size in bytes.
    pub(crate) fn bs(&self) -> u32 {
        // The superblock's decode admits 1 KiB to 64 KiB, powers of two.
        debug_assert!(self.geo.bs.is_power_of_two() && (1024..=65536).contains(&self.geo.bs));
        self.geo.bs
    }

    /// Whether the file system has all of `f`.
    pub(crate) fn has(&self, f: Features) -> bool {
        debug_assert!(!f.is_empty(), "asking for no feature is always true");
        self.features.contains(f)
    }

    /// The time to stamp: now, or the clamp if it is earlier (`MountOptions::clamp_time`).
    pub(crate) fn now(&self) -> Timespec {
        let t = Timespec::now();
        let stamped = match self.clamp_time {
            Some(c) if c < t.sec => Timespec { sec: c, nsec: 0 },
            _ => t,
        };
        debug_assert!(
            self.clamp_time.is_none_or(|c| stamped.sec <= c),
            "stamp past the clamp"
        );
        stamped
    }
}
