//! Requests received, by opcode, over every transport (lanefs patch): the daemon reports
//! them so that a benchmark can say how many requests each program cost.

use std::sync::atomic::{AtomicU64, Ordering};

/// One past the highest opcode counted (FUSE_TMPFILE is 51; CUSE_INIT is not counted).
pub const OPCODES: usize = 64;

static COUNTS: [AtomicU64; OPCODES] = [const { AtomicU64::new(0) }; OPCODES];

/// Count the request `data` (a `fuse_in_header` and its arguments).
pub(crate) fn count(data: &[u8]) {
    let Some(op) = data.get(4..8) else { return };
    let op = u32::from_ne_bytes([op[0], op[1], op[2], op[3]]) as usize;
    if let Some(c) = COUNTS.get(op) {
        c.fetch_add(1, Ordering::Relaxed);
    }
}

/// Requests received since the process started, indexed by opcode.
pub fn request_counts() -> [u64; OPCODES] {
    std::array::from_fn(|i| COUNTS[i].load(Ordering::Relaxed))
}

/// The protocol's name of `opcode` without its `FUSE_` prefix (`LOOKUP`), if known.
pub fn opcode_name(opcode: usize) -> Option<&'static str> {
    Some(match opcode {
        1 => "LOOKUP",
        2 => "FORGET",
        3 => "GETATTR",
        4 => "SETATTR",
        5 => "READLINK",
        6 => "SYMLINK",
        8 => "MKNOD",
        9 => "MKDIR",
        10 => "UNLINK",
        11 => "RMDIR",
        12 => "RENAME",
        13 => "LINK",
        14 => "OPEN",
        15 => "READ",
        16 => "WRITE",
        17 => "STATFS",
        18 => "RELEASE",
        20 => "FSYNC",
        21 => "SETXATTR",
        22 => "GETXATTR",
        23 => "LISTXATTR",
        24 => "REMOVEXATTR",
        25 => "FLUSH",
        26 => "INIT",
        27 => "OPENDIR",
        28 => "READDIR",
        29 => "RELEASEDIR",
        30 => "FSYNCDIR",
        31 => "GETLK",
        32 => "SETLK",
        33 => "SETLKW",
        34 => "ACCESS",
        35 => "CREATE",
        36 => "INTERRUPT",
        37 => "BMAP",
        38 => "DESTROY",
        39 => "IOCTL",
        40 => "POLL",
        41 => "NOTIFY_REPLY",
        42 => "BATCH_FORGET",
        43 => "FALLOCATE",
        44 => "READDIRPLUS",
        45 => "RENAME2",
        46 => "LSEEK",
        47 => "COPY_FILE_RANGE",
        48 => "SETUPMAPPING",
        49 => "REMOVEMAPPING",
        50 => "SYNCFS",
        51 => "TMPFILE",
        52 => "STATX",
        53 => "COPY_FILE_RANGE_64",
        _ => return None,
    })
}
