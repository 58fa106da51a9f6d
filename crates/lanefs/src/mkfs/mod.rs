//! `mkfs`: format a device as ext2, ext3 or ext4 the way e2fsprogs' mke2fs does.
//!
//! What to make is resolved as mke2fs resolves it (`params`): `-t` (ext2, ext3, ext4) and
//! `-T` usage types (or the device's size class: floppy, small, default, big, huge) pick
//! block size, inode size, inode ratio and features from Debian 12's mke2fs.conf, `-O`
//! edits the features, and `-b`, `-I`, `-i`, `-N` override the sizes. The shape is then
//! computed as ext2fs_initialize computes it (`layout::size`), written into a
//! `Superblock`, and every block is placed through the one `disk::geometry::Geometry`
//! derived from it (`layout::Plan`); `write` writes the files, the groups and the
//! superblock copies.
//!
//! Made as mke2fs makes them:
//! - each group's superblock and descriptor copies (`Geometry::base_meta`: sparse_super,
//!   sparse_super2, every group, meta_bg descriptor blocks) and reserved GDT blocks with
//!   the resize inode (inode 7) that maps them;
//! - the bitmaps and inode tables packed per flex group of 16 (flex_bg) or at the start of
//!   each group;
//! - root and lost+found (16 KiB and at least two blocks, at most 12) in the first free
//!   blocks, with extents or block maps; the journal (inode 8: extents from the middle of
//!   the file system, or a block map with its indirect blocks before the data they map);
//!   the MMP block (mmp) last;
//! - with descriptor checksums (uninit_bg's crc16 or metadata_csum's crc32c):
//!   BLOCK_UNINIT where a group holds only what the kernel would compute, INODE_UNINIT
//!   where it has no inode, ITABLE_ZEROED where mkfs zeroed the table (the groups holding
//!   the reserved inodes); without them no flags and every inode table zeroed.
//!
//! `MkfsOptions::default()` keeps lanefs's fixed shape (ext4 with 4 KiB blocks, one inode
//! per 16 KiB, no resize_inode), which the engine's tests rely on;
//! `MkfsOptions::mke2fs()` leaves every choice to the mke2fs rules, as `lanefs mkfs` does.

mod fit;
mod layout;
mod params;
mod write;

pub use fit::{capacity, min_size, Capacity, Fit, Slack, TreeNeeds};

use crate::dev::BlockDevice;
use crate::disk::geometry::Geometry;
use crate::disk::inode::DiskInode;
use crate::disk::superblock::{compat, incompat, ro_compat, Superblock, FLAG_SIGNED_HASH, MAGIC};
use crate::disk::{le32, mmp};
use crate::error::{Error, Result};
use crate::types::Timespec;

/// Smallest journal jbd2 accepts (and mke2fs makes).
const MIN_JOURNAL: u32 = 1024;
/// Largest journal mke2fs makes.
const MAX_JOURNAL: u32 = 10_240_000;
/// `s_def_hash_version`: half_md4.
const HASH_HALF_MD4: u8 = 1;
/// `s_default_mount_opts`: user_xattr (0x4) | acl (0x8).
const DEFM_USER_XATTR_ACL: u32 = 0x0C;
/// `s_jnl_backup_type`: EXT3_JNL_BACKUP_BLOCKS.
const JNL_BACKUP_BLOCKS: u8 = 1;
/// Bytes per zero-fill write.
const CHUNK: usize = 4 << 20;
use crate::disk::inode::reserved::JOURNAL as JOURNAL_INO;

/// What to format. `None` and empty fields leave the choice to the mke2fs rules.
#[derive(Debug, Clone)]
pub struct MkfsOptions {
    /// Volume label, at most 16 bytes (`-L`).
    pub label: String,
    /// `ext2`, `ext3` or `ext4` (`-t`; default ext4).
    pub fs_type: Option<String>,
    /// Usage types, comma separated (`-T`: small, floppy, default, big, huge, news,
    /// largefile, largefile4, hurd); default: the device's size class.
    pub usage_types: Option<String>,
    /// Feature edits applied last (`-O`), e.g. `"^has_journal,mmp"`.
    pub features: String,
    /// Block size in bytes (`-b`: a power of two from 1024 to 65536).
    pub block_size: Option<u32>,
    /// Inode size in bytes (`-I`: a power of two from 128 to the block size).
    pub inode_size: Option<u32>,
    /// Bytes of file system per inode (`-i`: 1024 ..= 64 MiB).
    pub inode_ratio: Option<u64>,
    /// Number of inodes (`-N`), rounded up to fill whole inode-table blocks.
    pub inodes: Option<u64>,
    /// Journal size in blocks (`-J`); `Some(0)` makes no journal; `None` picks mke2fs's
    /// default for the file system size.
    pub journal_blocks: Option<u32>,
    /// Percentage of blocks reserved for root (`-m`: 0 ..= 50).
    pub reserved_percent: u32,
    /// Device name recorded in the MMP block (mke2fs records the path it was given).
    pub device_name: String,
    /// The file system's UUID (`-U`); random when `None`.
    pub uuid: Option<[u8; 16]>,
    /// The directory hash seed (`-E hash_seed=`); random when `None`.
    pub hash_seed: Option<[u8; 16]>,
    /// The creation time recorded in the superblock and the first inodes; now when `None`
    /// (`SOURCE_DATE_EPOCH` for a reproducible image).
    pub time: Option<Timespec>,
    /// The device reads as zeros everywhere (an image file [`FileDevice::create`] just
    /// made): the inode tables and the journal are not cleared, as with mke2fs's `-E
    /// assume_storage_prezeroed=1`. Otherwise each is read and written where not zero.
    ///
    /// [`FileDevice::create`]: crate::FileDevice::create
    pub prezeroed: bool,
}

impl Default for MkfsOptions {
    /// lanefs's fixed shape: ext4, 4 KiB blocks, one inode per 16 KiB, no resize_inode,
    /// default journal, 5% reserved.
    fn default() -> MkfsOptions {
        MkfsOptions {
            block_size: Some(4096),
            inode_ratio: Some(16384),
            features: "^resize_inode".into(),
            ..MkfsOptions::mke2fs()
        }
    }
}

impl MkfsOptions {
    /// Every choice left to the mke2fs rules (ext4 with Debian 12's mke2fs.conf).
    pub fn mke2fs() -> MkfsOptions {
        MkfsOptions {
            label: String::new(),
            fs_type: None,
            usage_types: None,
            features: String::new(),
            block_size: None,
            inode_size: None,
            inode_ratio: None,
            inodes: None,
            journal_blocks: None,
            reserved_percent: 5,
            device_name: String::new(),
            uuid: None,
            hash_seed: None,
            time: None,
            prezeroed: false,
        }
    }
}

/// What `dev` holds already, by the signatures mke2fs asks about before it overwrites
/// them ("an xfs file system", "a DOS partition table", ...;
/// [`crate::disk::signature`]), or `None`.
pub fn existing_signature(dev: &dyn BlockDevice) -> Result<Option<String>> {
    let len = (crate::disk::signature::HEAD as u64).min(dev.size()) as usize;
    let mut head = vec![0u8; len];
    dev.read_at(0, &mut head)?;
    Ok(crate::disk::signature::identify(&head))
}

/// Zero what other formats keep at the ends of a device that [`format()`] may leave as
/// it was: the first 4 KiB (a boot sector, a partition table, the superblocks of xfs,
/// LUKS, MD RAID 1.1/1.2) and the last 64 KiB to 128 KiB (MD RAID 0.90/1.0, the GPT
/// backup header), as mke2fs zeroes them. A regular image file is better emptied
/// whole (punched) by its caller, which makes it read as zeros.
pub fn clear_ends(dev: &dyn BlockDevice) -> Result<()> {
    const REGION: u64 = 64 << 10;
    let size = dev.size();
    let head = size.min(4096);
    dev.write_at(0, &vec![0u8; head as usize])?;
    let tail = (size / REGION * REGION).saturating_sub(REGION).max(head);
    debug_assert!(
        head <= tail && tail <= size.max(head),
        "tail {tail} of {size} bytes"
    );
    if tail < size {
        dev.write_at(tail, &vec![0u8; (size - tail) as usize])?;
    }
    Ok(())
}

/// Format `dev` as an empty file system with `lost+found`.
///
/// Errors with `Error::Invalid` (one line, naming what is wrong) when an option or a
/// combination of features is refused, or when the device is too small or too big.
///
/// ```
/// use lanefs::{fsck, mkfs, MemDevice};
///
/// // lanefs's fixed shape: ext4, 4 KiB blocks, one inode per 16 KiB.
/// let dev = MemDevice::new(32 << 20);
/// mkfs::format(&dev, &mkfs::MkfsOptions::default())?;
///
/// // What `mke2fs -t ext3 -b 1024 -L old` makes (an ext3 journal, block maps).
/// let old = MemDevice::new(16 << 20);
/// let opts = mkfs::MkfsOptions {
///     fs_type: Some("ext3".into()),
///     block_size: Some(1024),
///     label: "old".into(),
///     ..mkfs::MkfsOptions::mke2fs()
/// };
/// mkfs::format(&old, &opts)?;
/// assert!(fsck::check(&old, &fsck::FsckOptions::default())?.is_clean());
///
/// // Refused as mke2fs refuses it.
/// let bad = mkfs::MkfsOptions { block_size: Some(3000), ..mkfs::MkfsOptions::default() };
/// assert!(matches!(mkfs::format(&dev, &bad), Err(lanefs::Error::Invalid(_))));
/// # Ok::<(), lanefs::Error>(())
/// ```
pub fn format(dev: &dyn BlockDevice, opts: &MkfsOptions) -> Result<()> {
    let Prepared {
        mut sb,
        geo,
        plan,
        now,
    } = prepare(opts, dev.size())?;
    let mut out = write::Out::new(dev, geo.bs, opts.prezeroed);
    let journal = write::files(&mut out, &geo, &plan, &sb, now, &opts.device_name)?;
    if let Some(j) = &journal {
        set_journal_backup(&mut sb, j);
    }
    let gdt = write::groups(&mut out, &geo, &plan, &mut sb)?;
    write::superblocks(&mut out, &geo, &mut sb, &gdt)?;
    dev.flush()
}

/// Whether [`format()`] would accept `opts` for a device of `size` bytes: every option,
/// feature combination and the geometry are checked, nothing is written. A caller that
/// clears the device first (as `lanefs mkfs` empties an image) asks this before it does.
pub fn validate(opts: &MkfsOptions, size: u64) -> Result<()> {
    prepare(opts, size).map(|_| ())
}

/// What [`format()`] writes, decided: the superblock, geometry and placement plan.
struct Prepared {
    sb: Superblock,
    geo: Geometry,
    plan: layout::Plan,
    now: Timespec,
}

/// Resolve `opts` for a device of `size` bytes into the file system to write.
fn prepare(opts: &MkfsOptions, size: u64) -> Result<Prepared> {
    check_options(opts)?;
    let p = params::resolve(opts, size)?;
    let sizes = layout::size(&p)?;
    let now = opts.time.unwrap_or_else(Timespec::now);
    let mut sb = Superblock::zeroed();
    layout::set_geometry(&mut sb, &p, &sizes);
    set_identity(&mut sb, opts);
    set_times(&mut sb, now);
    let journal_blocks = if sb.has_compat(compat::HAS_JOURNAL) {
        journal_blocks(sizes.blocks, opts)?
    } else {
        0
    };
    if journal_blocks == 0 {
        // mke2fs: "Filesystem too small for a journal", made without one.
        sb.set_feature_compat(sb.feature_compat() & !compat::HAS_JOURNAL);
    } else {
        sb.set_journal_inum(JOURNAL_INO);
        sb.set_jnl_backup_type(JNL_BACKUP_BLOCKS);
    }
    sb.set_r_blocks_count(sizes.blocks * u64::from(opts.reserved_percent) / 100);
    // What mkfs makes must pass the checks every reader applies.
    debug_assert!(
        {
            let mut c = sb.clone();
            c.update_checksum();
            Superblock::decode(&c.raw[..], size).is_ok()
        },
        "mkfs's own superblock does not decode: {sb:?}"
    );
    debug_assert!(sb.r_blocks_count() < sizes.blocks, "all blocks reserved");
    let geo = Geometry::from_superblock(&sb);
    let plan = layout::Plan::new(&geo, &sb, journal_blocks, opts.journal_blocks.is_some())?;
    if let Some(b) = plan.mmp {
        sb.set_mmp_block(b);
        sb.set_mmp_update_interval(mmp::UPDATE_INTERVAL);
    }
    set_large_file(&mut sb, &geo, &plan);
    Ok(Prepared { sb, geo, plan, now })
}

/// An `Error::Invalid` with `msg`.
fn invalid(msg: impl Into<String>) -> Error {
    Error::Invalid(msg.into())
}

/// Reject options mke2fs would reject (the rest is checked where it is resolved).
fn check_options(opts: &MkfsOptions) -> Result<()> {
    if opts.label.len() > 16 {
        return Err(invalid(format!(
            "label {:?} is longer than 16 bytes",
            opts.label
        )));
    }
    if opts.reserved_percent > 50 {
        return Err(invalid(format!(
            "reserved percentage {} above 50",
            opts.reserved_percent
        )));
    }
    Ok(())
}

/// mke2fs's default journal sizes: below each count of file system blocks, the journal's
/// blocks (the largest, 262144, above the last).
const JOURNAL_SIZES: [(u64, u32); 8] = [
    (2048, 0),
    (32768, 1024),
    (256 << 10, 4096),
    (512 << 10, 8192),
    (4096 << 10, 16384),
    (8192 << 10, 32768),
    (16384 << 10, 65536),
    (32768 << 10, 131072),
];

/// mke2fs's default journal size in blocks for a file system of `blocks` blocks (0: too
/// small for one).
fn default_journal_blocks(blocks: u64) -> u32 {
    let j = JOURNAL_SIZES
        .iter()
        .find(|(limit, _)| blocks < *limit)
        .map_or(262144, |&(_, j)| j);
    debug_assert!(
        j == 0 || (MIN_JOURNAL..=MAX_JOURNAL).contains(&j),
        "default journal of {j} blocks"
    );
    j
}

/// The journal size: the requested one (checked against mke2fs's limits) or the default.
fn journal_blocks(blocks: u64, opts: &MkfsOptions) -> Result<u32> {
    match opts.journal_blocks {
        None => Ok(default_journal_blocks(blocks)),
        Some(n) if !(MIN_JOURNAL..=MAX_JOURNAL).contains(&n) => Err(invalid(format!(
            "journal of {n} blocks out of range {MIN_JOURNAL}..={MAX_JOURNAL}"
        ))),
        Some(n) => Ok(n),
    }
}

/// mke2fs (ext2fs_inode_size_set) turns large_file on for a file of 2 GiB or more: the
/// resize inode on 4 KiB blocks, or a big journal.
fn set_large_file(sb: &mut Superblock, geo: &Geometry, plan: &layout::Plan) {
    let resize = plan
        .resize_dind
        .map_or(0, |_| write::resize_inode_size(geo.bs));
    let journal = u64::from(plan.journal_blocks) * u64::from(geo.bs);
    if resize.max(journal) >= 1 << 31 {
        sb.set_feature_ro_compat(sb.feature_ro_compat() | ro_compat::LARGE_FILE);
    }
}

/// Magic, state, policies, UUID, hash seed, checksum seed and label.
fn set_identity(sb: &mut Superblock, opts: &MkfsOptions) {
    sb.set_magic(MAGIC);
    sb.set_state(1); // clean
    sb.set_errors(1); // continue
    sb.set_max_mnt_count(0xFFFF);
    sb.set_creator_os(0);
    sb.set_default_mount_opts(DEFM_USER_XATTR_ACL);
    sb.set_flags(FLAG_SIGNED_HASH);
    sb.set_def_hash_version(HASH_HALF_MD4);
    let rnd = random_bytes();
    sb.set_uuid(opts.uuid.unwrap_or_else(|| uuid_v4(&rnd[..16])));
    let seed = opts.hash_seed.unwrap_or_else(|| uuid_v4(&rnd[16..]));
    sb.set_hash_seed([0, 1, 2, 3].map(|i| le32(&seed, 4 * i)));
    if sb.has_incompat(incompat::CSUM_SEED) {
        sb.set_checksum_seed(crate::disk::crc32c_raw(!0, &sb.uuid()));
    }
    // s_volume_name: 16 bytes at 0x78, NUL padded (no setter in `disk`); the length was
    // checked by check_options.
    let label = opts.label.as_bytes();
    debug_assert!(label.len() <= 16, "label checked by check_options");
    let n = label.len().min(16);
    sb.raw[0x78..0x78 + n].copy_from_slice(&label[..n]);
}

/// Creation, write and last-check times (with their high bytes).
fn set_times(sb: &mut Superblock, now: Timespec) {
    let (lo, hi) = (now.sec as u32, ((now.sec >> 32) & 0xFF) as u8);
    sb.set_mkfs_time(lo);
    sb.set_wtime(lo);
    sb.set_lastcheck(lo);
    // s_wtime_hi (0x274), s_mkfs_time_hi (0x276), s_lastcheck_hi (0x277).
    sb.raw[0x274] = hi;
    sb.raw[0x276] = hi;
    sb.raw[0x277] = hi;
}

/// `s_jnl_blocks`: the journal inode's i_block words, then i_size high and low.
fn set_journal_backup(sb: &mut Superblock, journal: &DiskInode) {
    // write::files hands back inode 8 with or without a journal (then all zeros).
    debug_assert!(
        journal.size() > 0 || sb.journal_inum() == 0,
        "the superblock names journal inode {} of size 0",
        sb.journal_inum()
    );
    for i in 0..15 {
        sb.set_jnl_block(i, le32(journal.iblock(), 4 * i));
    }
    sb.set_jnl_block(15, (journal.size() >> 32) as u32);
    sb.set_jnl_block(16, journal.size() as u32);
}

/// 32 random bytes from /dev/urandom, or mixed from the clock and process if unavailable.
fn random_bytes() -> [u8; 32] {
    use std::io::Read;
    let mut b = [0u8; 32];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        if f.read_exact(&mut b).is_ok() {
            return b;
        }
    }
    let now = Timespec::now();
    let mut x =
        ((now.sec as u64) << 30) ^ u64::from(now.nsec) ^ (u64::from(std::process::id()) << 40);
    x ^= &b as *const _ as u64;
    for chunk in b.chunks_mut(8) {
        // splitmix64
        x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        chunk.copy_from_slice(&(z ^ (z >> 31)).to_le_bytes());
    }
    b
}

/// Stamp RFC 4122 version 4 bits on 16 random bytes.
fn uuid_v4(b: &[u8]) -> [u8; 16] {
    debug_assert!(b.len() >= 16, "{} random bytes for a UUID", b.len());
    let mut u = [0u8; 16];
    u.copy_from_slice(&b[..16]);
    u[6] = (u[6] & 0x0F) | 0x40;
    u[8] = (u[8] & 0x3F) | 0x80;
    u
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dev::MemDevice;

    #[test]
    fn default_journal_sizes_follow_mke2fs() {
        assert_eq!(default_journal_blocks(1440), 0);
        assert_eq!(default_journal_blocks(8192), 1024);
        assert_eq!(default_journal_blocks(76800), 4096);
        assert_eq!(default_journal_blocks(1 << 20), 16384);
        assert_eq!(default_journal_blocks(5 << 20), 32768);
        assert_eq!(default_journal_blocks(1 << 30), 262144);
    }

    /// The fixed default shape formats in memory and its superblock decodes.
    #[test]
    fn default_shape_in_memory() {
        let dev = MemDevice::new(64 << 20);
        format(&dev, &MkfsOptions::default()).unwrap();
        let img = dev.snapshot();
        let sb = Superblock::decode(&img[1024..2048], img.len() as u64).unwrap();
        assert_eq!((sb.block_size(), sb.blocks_count()), (4096, 16384));
        assert!(!sb.has_compat(compat::RESIZE_INODE));
        assert_eq!(sb.free_inodes_count(), sb.inodes_count() - 11);
    }
}
