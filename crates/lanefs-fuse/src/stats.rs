//! The daemon's request counts, read through the mount: `ioctl(fd, IOC_REQUEST_COUNTS,
//! buf)` on any file or directory of a lanefs or memfs mount fills `buf` with the number
//! of requests the daemon has received since it started, a `u64` per opcode (index =
//! FUSE opcode, [`fuser::counts::opcode_name`]). `lanefs bench --compare` reads them
//! before and after each program to say how many requests it cost, by opcode. The ioctl
//! itself is one IOCTL request (and the open of the file one LOOKUP at most).

use std::os::fd::AsRawFd;
use std::path::Path;

/// Opcodes counted (the length of the answer, in `u64`s).
pub const OPCODES: usize = fuser::counts::OPCODES;

/// `_IOR('L', 0x71, [u64; OPCODES])`: the kernel's FUSE client copies out as many bytes
/// as the command's size says (a restricted ioctl).
pub const IOC_REQUEST_COUNTS: u32 =
    (2 << 30) | (((OPCODES * 8) as u32) << 16) | ((b'L' as u32) << 8) | 0x71;

/// The answer to [`IOC_REQUEST_COUNTS`]: this process's counts, in native byte order.
pub fn counts_reply() -> Vec<u8> {
    fuser::counts::request_counts()
        .iter()
        .flat_map(|c| c.to_ne_bytes())
        .collect()
}

/// Read the counts of the daemon serving `path` (a file or directory on its mount).
pub fn read(path: &Path) -> std::io::Result<[u64; OPCODES]> {
    let f = std::fs::File::open(path)?;
    let mut buf = [0u64; OPCODES];
    // SAFETY: the command's size is `OPCODES * 8` bytes, exactly `buf`, which lives across
    // the call and is only written by it.
    let r = unsafe { libc::ioctl(f.as_raw_fd(), IOC_REQUEST_COUNTS as _, buf.as_mut_ptr()) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(buf)
}

/// The name of opcode `i` (`LOOKUP`), or its number.
pub fn opcode_name(i: usize) -> String {
    fuser::counts::opcode_name(i).map_or_else(|| format!("opcode {i}"), str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_number_encodes_a_read_of_the_counts() {
        assert_eq!(IOC_REQUEST_COUNTS >> 30, 2, "_IOC_READ");
        assert_eq!((IOC_REQUEST_COUNTS >> 16) & 0x3fff, 512);
        assert_eq!(counts_reply().len(), 512);
        assert_eq!(opcode_name(1), "LOOKUP");
        assert_eq!(opcode_name(63), "opcode 63");
    }
}
