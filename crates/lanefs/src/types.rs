//! Plain data types of the public API.

/// An inode number.
pub type Ino = u64;

/// The root directory's inode number.
pub const ROOT_INO: Ino = crate::disk::inode::reserved::ROOT as Ino;

pub use crate::disk::inode::Timespec;

impl Timespec {
    /// The current wall-clock time.
    pub fn now() -> Timespec {
        let d = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        Timespec {
            sec: d.as_secs() as i64,
            nsec: d.subsec_nanos(),
        }
    }
}

/// The type of an inode, as stored in a directory entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileType {
    /// Regular file.
    Regular,
    /// Directory.
    Directory,
    /// Character device.
    CharDevice,
    /// Block device.
    BlockDevice,
    /// Named pipe.
    Fifo,
    /// Unix socket.
    Socket,
    /// Symbolic link.
    Symlink,
}

impl FileType {
    /// The type bits of `st_mode` (S_IFMT part) for this type.
    pub fn mode_bits(self) -> u16 {
        let bits = match self {
            FileType::Regular => 0o100000,
            FileType::Directory => 0o040000,
            FileType::CharDevice => 0o020000,
            FileType::BlockDevice => 0o060000,
            FileType::Fifo => 0o010000,
            FileType::Socket => 0o140000,
            FileType::Symlink => 0o120000,
        };
        debug_assert_eq!(FileType::from_mode(bits), Some(self), "mode bits {bits:#o}");
        bits
    }
    /// The type encoded in a full `st_mode`, if valid.
    pub fn from_mode(mode: u16) -> Option<FileType> {
        Some(match mode & 0o170000 {
            0o100000 => FileType::Regular,
            0o040000 => FileType::Directory,
            0o020000 => FileType::CharDevice,
            0o060000 => FileType::BlockDevice,
            0o010000 => FileType::Fifo,
            0o140000 => FileType::Socket,
            0o120000 => FileType::Symlink,
            _ => return None,
        })
    }
    /// The ext4 directory-entry file type code (1..=7).
    pub fn dirent_code(self) -> u8 {
        let code = match self {
            FileType::Regular => 1,
            FileType::Directory => 2,
            FileType::CharDevice => 3,
            FileType::BlockDevice => 4,
            FileType::Fifo => 5,
            FileType::Socket => 6,
            FileType::Symlink => 7,
        };
        debug_assert_eq!(
            FileType::from_dirent_code(code),
            Some(self),
            "type code {code}"
        );
        code
    }
    /// Decode an ext4 directory-entry file type code.
    pub fn from_dirent_code(c: u8) -> Option<FileType> {
        Some(match c {
            1 => FileType::Regular,
            2 => FileType::Directory,
            3 => FileType::CharDevice,
            4 => FileType::BlockDevice,
            5 => FileType::Fifo,
            6 => FileType::Socket,
            7 => FileType::Symlink,
            _ => return None,
        })
    }
}

/// Attributes of an inode (what `stat` shows).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attr {
    /// Inode number.
    pub ino: Ino,
    /// Type of the inode.
    pub kind: FileType,
    /// Permission bits (07777).
    pub perm: u16,
    /// Hard link count.
    pub nlink: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Size in bytes.
    pub size: u64,
    /// Allocated space in 512-byte sectors.
    pub blocks: u64,
    /// Last access.
    pub atime: Timespec,
    /// Last modification.
    pub mtime: Timespec,
    /// Last status change.
    pub ctime: Timespec,
    /// Creation.
    pub crtime: Timespec,
    /// Device number for device nodes (Linux `makedev` encoding).
    pub rdev: u32,
    /// Inode generation.
    pub generation: u32,
}

impl Attr {
    /// Full `st_mode`: type bits and permissions.
    pub fn mode(&self) -> u32 {
        (self.kind.mode_bits() | self.perm) as u32
    }
}

/// Which attributes `setattr` changes; `None` leaves one as it is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SetAttr {
    /// New permission bits (07777); the type cannot change.
    pub perm: Option<u16>,
    /// New owner.
    pub uid: Option<u32>,
    /// New group.
    pub gid: Option<u32>,
    /// New size: truncate down or extend with a hole.
    pub size: Option<u64>,
    /// New access time.
    pub atime: Option<Timespec>,
    /// New modification time.
    pub mtime: Option<Timespec>,
    /// New change time (otherwise set to now when anything changes).
    pub ctime: Option<Timespec>,
}

/// One directory entry returned by `readdir`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    /// Inode the entry points to.
    pub ino: Ino,
    /// Type from the entry.
    pub kind: FileType,
    /// Name bytes.
    pub name: Vec<u8>,
    /// Cursor to pass to `readdir` to continue after this entry.
    pub next: u64,
}

/// File-system-wide counters (what `statfs` shows).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatFs {
    /// Block size in bytes.
    pub block_size: u32,
    /// Total blocks.
    pub blocks: u64,
    /// Free blocks.
    pub free_blocks: u64,
    /// Free blocks available to unprivileged users.
    pub avail_blocks: u64,
    /// Total inodes.
    pub inodes: u64,
    /// Free inodes.
    pub free_inodes: u64,
    /// Longest name.
    pub name_max: u32,
}

/// One run of a file's block map, as FIEMAP reports it ([`Fs::extents`](crate::Fs::extents)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileExtent {
    /// First logical block.
    pub logical: u64,
    /// First device block (of the realtime device for a realtime file).
    pub physical: u64,
    /// Length in blocks.
    pub len: u32,
    /// Allocated but not written: reads as zeros.
    pub unwritten: bool,
}

/// `fallocate` modes. FALLOC_FL_COLLAPSE_RANGE and FALLOC_FL_INSERT_RANGE, which combine
/// with no other flag, are calls of their own: `Fs::collapse_range` and `Fs::insert_range`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FallocMode {
    /// Do not change the file size (FALLOC_FL_KEEP_SIZE).
    pub keep_size: bool,
    /// Deallocate the range (FALLOC_FL_PUNCH_HOLE, implies keep_size).
    pub punch_hole: bool,
    /// Zero the range and leave it allocated, as unwritten extents
    /// (FALLOC_FL_ZERO_RANGE; may extend the size unless keep_size).
    pub zero_range: bool,
}

/// How a file is being opened, for the rules of its `chattr` flags ([`Fs::may_open`]):
/// open(2)'s access mode and its O_APPEND and O_TRUNC flags.
///
/// [`Fs::may_open`]: crate::Fs::may_open
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OpenMode {
    /// Opened for writing (O_WRONLY or O_RDWR).
    pub write: bool,
    /// Writes go to the end (O_APPEND).
    pub append: bool,
    /// Truncated at open (O_TRUNC).
    pub truncate: bool,
}

impl OpenMode {
    /// The mode of open(2) flags `flags` (`O_ACCMODE`, `O_APPEND`, `O_TRUNC`).
    pub fn from_open_flags(flags: i32) -> OpenMode {
        OpenMode {
            write: flags & libc::O_ACCMODE != libc::O_RDONLY,
            append: flags & libc::O_APPEND != 0,
            truncate: flags & libc::O_TRUNC != 0,
        }
    }
}

/// How `Fs::rename_with` treats an existing target (renameat2(2)'s flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RenameMode {
    /// Replace a compatible target (plain rename).
    #[default]
    Replace,
    /// Fail with `Error::Exists` if the target exists (RENAME_NOREPLACE).
    NoReplace,
    /// Swap source and target, both of which must exist (RENAME_EXCHANGE).
    Exchange,
    /// Rename, and leave a whiteout in the source's place (RENAME_WHITEOUT, which
    /// overlayfs uses): a character device 0:0 with permission bits 0, owned by `owner`
    /// as any new inode in the source directory. With `noreplace`, an existing target
    /// fails with `Error::Exists` (RENAME_NOREPLACE too).
    Whiteout {
        /// Also RENAME_NOREPLACE.
        noreplace: bool,
        /// Who renames: the whiteout's owner.
        owner: Owner,
    },
}

/// When reads update an inode's access time (the mount's atime flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AtimePolicy {
    /// Only when the access time is not after the modification or change time, or is a
    /// day old (`relatime`, Linux's default).
    #[default]
    Relative,
    /// On every read (`strictatime`).
    Strict,
    /// Never (`noatime`).
    Never,
}

/// How a free inode bit is claimed in the chosen group (seed 001; `ialloc=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IallocPolicy {
    /// Find a free bit without the group's inode lock, test-and-set it under the lock;
    /// after one lost race, find and set the bit with the lock held (Linux 4.14 on,
    /// `ialloc=optimistic`).
    #[default]
    Optimistic,
    /// The loop before seed 001: every lost race drops the lock and searches again
    /// without it from the next bit (`ialloc=locked`).
    Locked,
}

/// The inode cache's table (seed 004; `icache=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IcachePolicy {
    /// Buckets each with their own lock for inserts and removals, lookups without any
    /// lock (`icache=bucket`, the seed's hash-bl design). The default: it won the
    /// two-thread lookups by 13 to 24 % and tied creates and removes on the 2-CPU machine
    /// lanefs is measured on (`docs/inode-allocation-and-cache.md`).
    #[default]
    Bucket,
    /// One lock for the whole table, taken by every lookup, insert and removal, as the
    /// VFS's `inode_hash_lock` (`icache=global`, the seed's baseline).
    Global,
    /// The `papaya` crate's lock-free hash map under the same semantics
    /// (`icache=papaya`).
    Papaya,
}

/// The inode cache's size and contents, for reports (`Diagnostics::icache_stats`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IcacheStats {
    /// Inodes in the cache.
    pub inodes: u64,
    /// Bytes the cached inodes hold (the inode, its on-disk copy, extent map and
    /// directory index), as the cache accounts them.
    pub bytes: u64,
    /// The limit clean, unused inodes are evicted under (`icache_limit=`).
    pub limit: u64,
    /// The most bytes the cache held at once since mount, as its limit checks count
    /// them (per-thread counts are folded in batches of 1/256 of the limit, so this
    /// is low by at most 1/16 of the limit).
    pub peak_bytes: u64,
    /// Inodes evicted since mount.
    pub evictions: u64,
    /// Cached inodes the eviction sweep looked at since mount (evicted or passed over:
    /// referenced since its last visit, or in use). One per eviction when every inode
    /// can go at the sweep's first visit.
    pub inspections: u64,
}

/// The metadata buffer cache's size, for reports (`Diagnostics::bufcache_stats`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BufCacheStats {
    /// Bytes of blocks cached, with the journal's committed copies awaiting checkpoint.
    pub bytes: u64,
    /// Bytes of those that are dirty (pinned until checkpoint).
    pub dirty_bytes: u64,
    /// The limit clean blocks are evicted under (`bufcache_limit=`).
    pub limit: u64,
    /// Blocks evicted since mount.
    pub evicted: u64,
}

/// Who is asking: owner of newly created inodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Owner {
    /// User id.
    pub uid: u32,
    /// Group id.
    pub gid: u32,
    /// The caller's umask, applied to a new inode's permission bits when its directory
    /// has no default ACL (posix_acl_create); a default ACL masks them instead. Callers
    /// that apply their umask themselves pass 0.
    pub umask: u16,
}

/// How `Fs::setxattr` treats an existing attribute (setxattr(2)'s flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum XattrFlags {
    /// Create or replace.
    #[default]
    Any,
    /// Fail with `Error::Exists` if the attribute exists (XATTR_CREATE).
    Create,
    /// Fail with `Error::NoData` if it does not (XATTR_REPLACE).
    Replace,
}

/// Parse a byte size: "4G", "512M", "64k", "1T", "4096", "4096B" or "4GiB" (powers of
/// 1024), as the command line and size mount options (`icache_limit=`) spell them.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let bad = || format!("invalid size {text:?} (a number with an optional K, M, G or T suffix)");
    let t = text.trim();
    let t = t.strip_suffix(['B', 'b']).unwrap_or(t);
    let t = t.strip_suffix(['i', 'I']).unwrap_or(t);
    let (digits, shift) = match t.chars().last() {
        Some(c) if c.is_ascii_digit() => (t, 0),
        Some('K' | 'k') => (&t[..t.len() - 1], 10),
        Some('M' | 'm') => (&t[..t.len() - 1], 20),
        Some('G' | 'g') => (&t[..t.len() - 1], 30),
        Some('T' | 't') => (&t[..t.len() - 1], 40),
        _ => return Err(bad()),
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_ascii_digit()) {
        return Err(bad());
    }
    let n: u64 = digits.parse().map_err(|_| bad())?;
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| format!("size {text:?} is too large"))
}

bitflags::bitflags! {
    /// An inode's flags as `lsattr` shows them and `chattr` sets them (FS_IOC_GETFLAGS
    /// and FS_IOC_SETFLAGS carry the same bits: ext4's `EXT4_*_FL`). Bits without a name
    /// here travel as they are ([`InodeFlags::from_bits_retain`]); [`Fs::set_flags`]
    /// decides which it accepts.
    ///
    /// [`Fs::set_flags`]: crate::Fs::set_flags
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct InodeFlags: u32 {
        /// Secure deletion (`chattr +s`; recorded, not acted on).
        const SECRM = 0x1;
        /// Undelete (`chattr +u`; recorded, not acted on).
        const UNRM = 0x2;
        /// Compress (`chattr +c`).
        const COMPR = 0x4;
        /// Synchronous updates (`chattr +S`).
        const SYNC = 0x8;
        /// Immutable (`chattr +i`): no write, truncate, name, link or attribute change.
        const IMMUTABLE = 0x10;
        /// Append-only (`chattr +a`): data only appended, names only added.
        const APPEND = 0x20;
        /// Not for dump(8) (`chattr +d`).
        const NODUMP = 0x40;
        /// Reads leave the access time alone (`chattr +A`).
        const NOATIME = 0x80;
        /// Encrypted (fscrypt).
        const ENCRYPT = 0x800;
        /// Hash-indexed directory.
        const INDEX = 0x1000;
        /// Data journalling (`chattr +j`).
        const JOURNAL_DATA = 0x4000;
        /// No tail merging (`chattr +t`).
        const NOTAIL = 0x8000;
        /// Synchronous directory updates (`chattr +D`).
        const DIRSYNC = 0x1_0000;
        /// Top of a directory hierarchy (`chattr +T`, Orlov).
        const TOPDIR = 0x2_0000;
        /// Extent-mapped (`chattr +e`).
        const EXTENTS = 0x8_0000;
        /// fs-verity protected.
        const VERITY = 0x10_0000;
        /// Direct access to persistent memory (`chattr +x`).
        const DAX = 0x200_0000;
        /// Data in the inode.
        const INLINE_DATA = 0x1000_0000;
        /// New inodes inherit the directory's project (`chattr +P`).
        const PROJINHERIT = 0x2000_0000;
        /// Case-insensitive directory (`chattr +F`).
        const CASEFOLD = 0x4000_0000;
    }
}

impl InodeFlags {
    /// The flags `lsattr` sees (EXT4_FL_USER_VISIBLE).
    pub const USER_VISIBLE: InodeFlags = InodeFlags::from_bits_retain(0x725B_DFFF);
    /// The flags `chattr` may change (EXT4_FL_USER_MODIFIABLE); the rest keep their value.
    pub const USER_MODIFIABLE: InodeFlags = InodeFlags::from_bits_retain(0x624B_C0FF);
}
