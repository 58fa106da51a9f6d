//! Typed errors. Every variant maps to exactly one errno (`Error::errno`).

use std::fmt;

/// Result alias used across the engine.
pub type Result<T> = std::result::Result<T, Error>;

/// An engine error: what failed and where, with one errno.
///
/// A frontend returns [`Error::errno`] to its caller; its `Display` is one line, naming
/// the structure and block or inode for corruption.
///
/// ```
/// use lanefs::Error;
///
/// assert_eq!(Error::NotFound.errno(), 2); // ENOENT
/// let e = Error::corrupt("directory block", 1234, "bad checksum");
/// assert_eq!(e.errno(), 117); // EUCLEAN, as ext4 reports corruption
/// assert_eq!(e.to_string(), "corrupt directory block at 1234: bad checksum");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// No such file or directory.
    NotFound,
    /// The name already exists.
    Exists,
    /// A path component or target is not a directory.
    NotDir,
    /// The target is a directory where a non-directory was required.
    IsDir,
    /// The directory is not empty.
    NotEmpty,
    /// No free blocks left (or a directory index or an inode's xattr room is full).
    NoSpace,
    /// No free inodes left (ENOSPC, as for blocks; told apart in messages, as `df -i`
    /// tells them apart).
    NoInodes,
    /// A name longer than 255 bytes.
    NameTooLong,
    /// An invalid argument, with what was wrong.
    Invalid(String),
    /// The file system is mounted read-only.
    ReadOnly,
    /// Too many links to one inode.
    TooManyLinks,
    /// A file would exceed the largest size ext4 can map.
    FileTooBig,
    /// The operation is not supported on this object.
    NotSupported(String),
    /// Operation not permitted (e.g. hard link to a directory).
    NotPermitted,
    /// On-disk structure is corrupt: which structure, where, and what is wrong.
    Corrupt {
        /// The structure, e.g. "superblock", "extent block", "directory block".
        what: &'static str,
        /// Block or inode number the structure was read from.
        at: u64,
        /// What is wrong with it.
        detail: String,
    },
    /// A device read or write failed.
    Io(String),
    /// The image uses something lanefs does not implement (refused at mount).
    Unsupported(String),
    /// The image or device is in use: mounted by the kernel or open by another writer.
    Busy(String),
    /// No such extended attribute.
    NoData,
    /// A name or buffer out of range (an xattr name over 255 bytes).
    Range,
    /// An argument too large (an xattr value over 64 KiB).
    TooBig,
    /// Permission denied (a default ACL on a non-directory).
    AccessDenied,
    /// The file system was shut down ([`Fs::shutdown`](crate::Fs::shutdown), ext4's
    /// `FS_IOC_SHUTDOWN`): nothing more is written to the image; EIO, as ext4 answers.
    ShutDown,
}

impl Error {
    /// The errno this error maps to.
    pub fn errno(&self) -> i32 {
        match self {
            Error::NotFound => libc::ENOENT,
            Error::Exists => libc::EEXIST,
            Error::NotDir => libc::ENOTDIR,
            Error::IsDir => libc::EISDIR,
            Error::NotEmpty => libc::ENOTEMPTY,
            Error::NoSpace | Error::NoInodes => libc::ENOSPC,
            Error::NameTooLong => libc::ENAMETOOLONG,
            Error::Invalid(_) => libc::EINVAL,
            Error::ReadOnly => libc::EROFS,
            Error::TooManyLinks => libc::EMLINK,
            Error::FileTooBig => libc::EFBIG,
            Error::NotSupported(_) => libc::EOPNOTSUPP,
            Error::NotPermitted => libc::EPERM,
            Error::Corrupt { .. } => libc::EUCLEAN,
            Error::Io(_) => libc::EIO,
            Error::Unsupported(_) => libc::EOPNOTSUPP,
            Error::Busy(_) => libc::EBUSY,
            Error::NoData => libc::ENODATA,
            Error::Range => libc::ERANGE,
            Error::TooBig => libc::E2BIG,
            Error::AccessDenied => libc::EACCES,
            Error::ShutDown => libc::EIO,
        }
    }

    /// Shorthand for a corruption error.
    pub fn corrupt(what: &'static str, at: u64, detail: impl Into<String>) -> Error {
        Error::Corrupt {
            what,
            at,
            detail: detail.into(),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NotFound => write!(f, "no such file or directory"),
            Error::Exists => write!(f, "file exists"),
            Error::NotDir => write!(f, "not a directory"),
            Error::IsDir => write!(f, "is a directory"),
            Error::NotEmpty => write!(f, "directory not empty"),
            Error::NoSpace => write!(f, "no space left on device"),
            Error::NoInodes => write!(f, "no free inodes left on device"),
            Error::NameTooLong => write!(f, "file name too long"),
            Error::Invalid(s) => write!(f, "invalid argument: {s}"),
            Error::ReadOnly => write!(f, "read-only file system"),
            Error::TooManyLinks => write!(f, "too many links"),
            Error::FileTooBig => write!(f, "file too large"),
            Error::NotSupported(s) => write!(f, "operation not supported: {s}"),
            Error::NotPermitted => write!(f, "operation not permitted"),
            Error::Corrupt { what, at, detail } => {
                write!(f, "corrupt {what} at {at}: {detail}")
            }
            Error::Io(s) => write!(f, "I/O error: {s}"),
            Error::Unsupported(s) => write!(f, "unsupported: {s}"),
            Error::Busy(s) => write!(f, "busy: {s}"),
            Error::NoData => write!(f, "no such attribute"),
            Error::Range => write!(f, "name out of range"),
            Error::TooBig => write!(f, "argument list too long"),
            Error::AccessDenied => write!(f, "permission denied"),
            Error::ShutDown => write!(
                f,
                "the file system was shut down (FS_IOC_SHUTDOWN): nothing more is written \
                 to the image; the next mount replays its journal"
            ),
        }
    }
}

impl std::error::Error for Error {}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Error {
        Error::Io(e.to_string())
    }
}
