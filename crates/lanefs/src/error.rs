//! Typed errors. Every variant maps to exactly one errno (`Error::errno`).

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

/// Result alias used across the engine.
pub type Result<T> = std::result::Result<T, Error>;

/// An engine error: what failed and where, with one errno.
///
/// A frontend returns [`Error::errno`] to its caller; its `Display` is one line, naming
/// the structure and block or inode for corruption, and the operation and the host's
/// own error for a failed device read, write or flush.
///
/// ```
/// use lanefs::Error;
/// use std::error::Error as _;
///
/// assert_eq!(Error::NotFound.errno(), 2); // ENOENT
/// let e = Error::corrupt("directory block", 1234, "bad checksum");
/// assert_eq!(e.errno(), 117); // EUCLEAN, as ext4 reports corruption
/// assert_eq!(e.to_string(), "corrupt directory block at 1234: bad checksum");
///
/// // A device error keeps the host's error, its kind and errno, under the operation.
/// let host = std::io::Error::from_raw_os_error(28); // ENOSPC: the image's file system is full
/// let e = Error::io("writing 4096 bytes at byte 8192", host);
/// assert_eq!(e.errno(), 5); // EIO, as ext4 on a loop device answers
/// let cause = e.source().and_then(|s| s.downcast_ref::<std::io::Error>()).unwrap();
/// assert_eq!(cause.raw_os_error(), Some(28));
/// assert!(e.to_string().starts_with("writing 4096 bytes at byte 8192: "));
/// ```
#[derive(Debug, Clone)]
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
    /// A device read, write or flush failed: the operation, and the host's error with
    /// its kind and errno (see [`Error::errno`] for what a caller is answered).
    Io {
        /// What was being done, e.g. "reading 4096 bytes at byte 8192", "flushing the
        /// device".
        op: Cow<'static, str>,
        /// The host's error (shared: [`Error`] is `Clone`); errors the engine finds
        /// itself (a read past the device's end, a power cut of
        /// [`CrashDevice`](crate::CrashDevice)) carry no errno.
        source: Arc<std::io::Error>,
    },
    /// The device holds no ext2/3/4 file system: its superblock's magic is wrong, or it
    /// is too small to hold a superblock (what is wrong, in words). EUCLEAN, as the
    /// corruption it was reported as before it had its own variant; told apart so that
    /// a caller does not offer to repair what was never a file system.
    NotExt4(String),
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
    ///
    /// A device error ([`Error::Io`]) is EIO whatever the host said, as ext4 answers on
    /// a loop device over an image file: the loop driver completes every failed read,
    /// write or flush of the backing file with EIO (a full host file system, ENOSPC, or
    /// an exceeded quota, EDQUOT, included), and a journal commit that cannot write is
    /// EIO too. The host's errno stays in the error ([`std::error::Error::source`], and
    /// `Display` names it) for logs and messages.
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
            Error::Io { .. } => libc::EIO,
            Error::NotExt4(_) => libc::EUCLEAN,
            Error::Unsupported(_) => libc::EOPNOTSUPP,
            Error::Busy(_) => libc::EBUSY,
            Error::NoData => libc::ENODATA,
            Error::Range => libc::ERANGE,
            Error::TooBig => libc::E2BIG,
            Error::AccessDenied => libc::EACCES,
            Error::ShutDown => libc::EIO,
        }
    }

    /// A device error: `op` (what was being done: "reading 4096 bytes at byte 8192")
    /// failed with the host's `source`.
    pub fn io(op: impl Into<Cow<'static, str>>, source: std::io::Error) -> Error {
        Error::Io {
            op: op.into(),
            source: Arc::new(source),
        }
    }

    /// A device error the engine finds itself, with no host error behind it: `op`
    /// failed because of `why` (kind [`std::io::ErrorKind::Other`], no errno).
    pub fn io_other(op: impl Into<Cow<'static, str>>, why: impl Into<String>) -> Error {
        Error::io(op, std::io::Error::other(why.into()))
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
            Error::Io { op, source } => write!(f, "{op}: {source}"),
            Error::NotExt4(s) => write!(f, "not an ext2/3/4 file system: {s}"),
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

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(&**source),
            _ => None,
        }
    }
}

/// Errors are equal when they are the same variant with equal fields; two device errors
/// when their operations, and their host errors' kinds and errnos, are.
impl PartialEq for Error {
    fn eq(&self, other: &Error) -> bool {
        use Error::*;
        match (self, other) {
            (Io { op, source }, Io { op: o, source: s }) => {
                op == o && source.kind() == s.kind() && source.raw_os_error() == s.raw_os_error()
            }
            (
                Corrupt { what, at, detail },
                Corrupt {
                    what: w,
                    at: a,
                    detail: d,
                },
            ) => (what, at, detail) == (w, a, d),
            (Invalid(a), Invalid(b))
            | (NotSupported(a), NotSupported(b))
            | (Unsupported(a), Unsupported(b))
            | (Busy(a), Busy(b))
            | (NotExt4(a), NotExt4(b)) => a == b,
            (
                Io { .. }
                | Corrupt { .. }
                | Invalid(_)
                | NotSupported(_)
                | Unsupported(_)
                | Busy(_)
                | NotExt4(_),
                _,
            ) => false,
            // The variants without fields (listed, so that a new variant must be placed).
            (
                NotFound | Exists | NotDir | IsDir | NotEmpty | NoSpace | NoInodes | NameTooLong
                | ReadOnly | TooManyLinks | FileTooBig | NotPermitted | NoData | Range | TooBig
                | AccessDenied | ShutDown,
                _,
            ) => std::mem::discriminant(self) == std::mem::discriminant(other),
        }
    }
}

impl Eq for Error {}

/// A host error met where no better operation is at hand; prefer [`Error::io`] with the
/// operation named.
impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Error {
        Error::io("host I/O", e)
    }
}

/// A mount option refused by name: which option, the value it was given, and what is
/// wrong with it. [`MountOptions::apply`](crate::MountOptions::apply) returns it for the
/// engine's options; a frontend may for its own. `Display` is one line, as `mount -o`'s
/// users read it.
///
/// ```
/// use lanefs::{MountOptions, OptionError, OptionProblem};
///
/// let e = MountOptions::default().apply("commit", Some("soon")).unwrap_err();
/// assert_eq!((e.name.as_str(), e.value.as_deref()), ("commit", Some("soon")));
/// assert_eq!(e.problem, OptionProblem::Expected("whole seconds".into()));
/// assert_eq!(e.to_string(), "option commit=soon: expected whole seconds");
/// let e = OptionError::new("bogus", None, OptionProblem::Unknown);
/// assert_eq!(e.to_string(), "unknown mount option \"bogus\"");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OptionError {
    /// The option's name, as given (`commit`).
    pub name: String,
    /// The value given after `=`, if any.
    pub value: Option<String>,
    /// What is wrong.
    pub problem: OptionProblem,
}

/// What is wrong with a mount option ([`OptionError`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OptionProblem {
    /// No option has this name.
    Unknown,
    /// The option takes a value and was given none (`commit`).
    NeedsValue,
    /// The option is a switch and was given a value (`ro=1`).
    TakesNoValue,
    /// The value is not one the option takes; what it takes ("0 or 1", "whole seconds").
    Expected(Cow<'static, str>),
    /// The value is malformed, and why (a size's parser says what a size looks like).
    Malformed(String),
}

impl OptionError {
    /// Option `name` (given `value`, if any) refused for `problem`.
    pub fn new(name: &str, value: Option<&str>, problem: OptionProblem) -> OptionError {
        OptionError {
            name: name.to_string(),
            value: value.map(str::to_string),
            problem,
        }
    }
}

impl fmt::Display for OptionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (name, value) = (&self.name, self.value.as_deref().unwrap_or(""));
        match &self.problem {
            OptionProblem::Unknown => write!(f, "unknown mount option {name:?}"),
            OptionProblem::NeedsValue => write!(f, "option {name} needs a value"),
            OptionProblem::TakesNoValue => {
                write!(f, "option {name} takes no value (got {name}={value})")
            }
            OptionProblem::Expected(what) => write!(f, "option {name}={value}: expected {what}"),
            OptionProblem::Malformed(why) => write!(f, "option {name}={value}: {why}"),
        }
    }
}

impl std::error::Error for OptionError {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;
    use std::io::ErrorKind;

    /// A device error keeps the host's error whole: its kind, its errno, as `source()`,
    /// and in the one line `Display` gives after the operation.
    #[test]
    fn io_keeps_the_host_error_and_names_the_operation() {
        let e = Error::io(
            "writing 4096 bytes at byte 8192",
            std::io::Error::from_raw_os_error(libc::ENOSPC),
        );
        let Error::Io { op, source } = &e else {
            panic!("{e:?}");
        };
        assert_eq!(op, "writing 4096 bytes at byte 8192");
        assert_eq!(source.kind(), ErrorKind::StorageFull);
        assert_eq!(source.raw_os_error(), Some(libc::ENOSPC));
        let cause = e.source().expect("source");
        let host = cause.downcast_ref::<std::io::Error>().expect("io::Error");
        assert_eq!(host.raw_os_error(), Some(libc::ENOSPC));
        let host_text = std::io::Error::from_raw_os_error(libc::ENOSPC).to_string();
        assert_eq!(
            e.to_string(),
            format!("writing 4096 bytes at byte 8192: {host_text}")
        );
        assert!(!e.to_string().contains('\n'));
        // A clone shares the host error.
        let c = e.clone();
        assert_eq!(c, e);
        assert_eq!(c.to_string(), e.to_string());
        // An error the engine finds itself: no errno, the reason as the cause.
        let own = Error::io_other("flushing the device", "power cut");
        assert_eq!(own.to_string(), "flushing the device: power cut");
        let Error::Io { source, .. } = &own else {
            panic!("{own:?}");
        };
        assert_eq!(
            (source.kind(), source.raw_os_error()),
            (ErrorKind::Other, None)
        );
        // `?` on a host error, where no operation was named.
        let from: Error = std::io::Error::from_raw_os_error(libc::EACCES).into();
        assert!(matches!(&from, Error::Io { op, source }
            if op == "host I/O" && source.raw_os_error() == Some(libc::EACCES)));
        // Other errors have no source.
        assert!(Error::NotFound.source().is_none());
        assert!(Error::corrupt("inode", 12, "bad").source().is_none());
    }

    /// Device errors are equal when their operations, kinds and errnos are.
    #[test]
    fn io_errors_compare_by_operation_kind_and_errno() {
        let os = |n| std::io::Error::from_raw_os_error(n);
        assert_eq!(
            Error::io("reading", os(libc::EIO)),
            Error::io("reading", os(libc::EIO))
        );
        assert_ne!(
            Error::io("reading", os(libc::EIO)),
            Error::io("writing", os(libc::EIO))
        );
        assert_ne!(
            Error::io("reading", os(libc::EIO)),
            Error::io("reading", os(libc::ENXIO))
        );
        assert_ne!(
            Error::io("reading", os(libc::EIO)),
            Error::io_other("reading", "EIO")
        );
        assert_ne!(Error::io("reading", os(libc::EIO)), Error::ShutDown);
        assert_eq!(Error::ShutDown, Error::ShutDown);
        assert_ne!(Error::NoSpace, Error::NoInodes);
        assert_eq!(Error::Invalid("x".into()), Error::Invalid("x".into()));
        assert_ne!(Error::Invalid("x".into()), Error::Busy("x".into()));
    }

    /// Every variant's errno; a device error is EIO whatever the host said, as ext4 on
    /// a loop device answers (a full host file system or quota included).
    #[test]
    fn errno_mapping() {
        let os = |n| {
            Error::io(
                "writing 4096 bytes at byte 0",
                std::io::Error::from_raw_os_error(n),
            )
        };
        for host in [
            libc::EIO,
            libc::ENOSPC,
            libc::EDQUOT,
            libc::EROFS,
            libc::ENXIO,
        ] {
            assert_eq!(os(host).errno(), libc::EIO, "host errno {host}");
        }
        assert_eq!(
            Error::io_other("flushing the device", "power cut").errno(),
            libc::EIO
        );
        let s = || String::from("why");
        for (e, errno) in [
            (Error::NotFound, libc::ENOENT),
            (Error::Exists, libc::EEXIST),
            (Error::NotDir, libc::ENOTDIR),
            (Error::IsDir, libc::EISDIR),
            (Error::NotEmpty, libc::ENOTEMPTY),
            (Error::NoSpace, libc::ENOSPC),
            (Error::NoInodes, libc::ENOSPC),
            (Error::NameTooLong, libc::ENAMETOOLONG),
            (Error::Invalid(s()), libc::EINVAL),
            (Error::ReadOnly, libc::EROFS),
            (Error::TooManyLinks, libc::EMLINK),
            (Error::FileTooBig, libc::EFBIG),
            (Error::NotSupported(s()), libc::EOPNOTSUPP),
            (Error::NotPermitted, libc::EPERM),
            (Error::corrupt("inode", 12, s()), libc::EUCLEAN),
            (Error::NotExt4(s()), libc::EUCLEAN),
            (Error::Unsupported(s()), libc::EOPNOTSUPP),
            (Error::Busy(s()), libc::EBUSY),
            (Error::NoData, libc::ENODATA),
            (Error::Range, libc::ERANGE),
            (Error::TooBig, libc::E2BIG),
            (Error::AccessDenied, libc::EACCES),
            (Error::ShutDown, libc::EIO),
        ] {
            assert_eq!(e.errno(), errno, "{e:?}");
        }
    }

    /// A refused mount option names itself, the value it was given and what is wrong,
    /// in one line, as the engine's parser reports it.
    #[test]
    fn option_errors_name_the_option() {
        use crate::MountOptions;
        let apply = |k: &str, v: Option<&str>| MountOptions::default().apply(k, v);
        let cases: [(&str, Option<&str>, OptionProblem, &str); 8] = [
            (
                "commit",
                None,
                OptionProblem::NeedsValue,
                "option commit needs a value",
            ),
            (
                "ro",
                Some("1"),
                OptionProblem::TakesNoValue,
                "option ro takes no value (got ro=1)",
            ),
            (
                "noatime",
                Some(""),
                OptionProblem::TakesNoValue,
                "option noatime takes no value (got noatime=)",
            ),
            (
                "mb_trylock",
                Some("2"),
                OptionProblem::Expected("0 or 1".into()),
                "option mb_trylock=2: expected 0 or 1",
            ),
            (
                "icache",
                Some("lru"),
                OptionProblem::Expected("bucket, global or papaya".into()),
                "option icache=lru: expected bucket, global or papaya",
            ),
            (
                "folio_max_order",
                Some("7"),
                OptionProblem::Expected("0 to 6".into()),
                "option folio_max_order=7: expected 0 to 6",
            ),
            (
                "rtdev",
                Some(""),
                OptionProblem::Expected("a path".into()),
                "option rtdev=: expected a path",
            ),
            (
                "clamp_time",
                Some("-1"),
                OptionProblem::Expected("seconds since 1970".into()),
                "option clamp_time=-1: expected seconds since 1970",
            ),
        ];
        for (name, value, problem, text) in cases {
            let e = apply(name, value).unwrap_err();
            let want = OptionError::new(name, value, problem);
            assert_eq!(e, want);
            assert_eq!(e.to_string(), text);
        }
        // A size's parser says what a size looks like.
        let e = apply("icache_limit", Some("big")).unwrap_err();
        assert!(matches!(&e.problem, OptionProblem::Malformed(why) if why.contains("K, M, G")));
        assert!(
            e.to_string()
                .starts_with("option icache_limit=big: invalid size"),
            "{e}"
        );
        // Not the engine's: no error, the frontend decides.
        assert_eq!(apply("allow_other", None), Ok(false));
        assert_eq!(apply("allow_other", Some("1")), Ok(false));
        let e = OptionError::new("bogus", Some("1"), OptionProblem::Unknown);
        assert_eq!(e.to_string(), "unknown mount option \"bogus\"");
        let dyn_error: &dyn std::error::Error = &e;
        assert!(dyn_error.source().is_none());
    }
}
