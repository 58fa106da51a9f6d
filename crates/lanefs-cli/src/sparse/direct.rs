//! The sparse file written past the page cache (`O_DIRECT`): an encoding of a few hundred
//! MiB copied into the kernel's cache would take as many fresh pages, which cost more to
//! fill (and to write back at the flush) than the disk takes to write them straight
//! from one reused buffer.

use super::Out;
use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

/// What `O_DIRECT` wants aligned: memory, file offsets and lengths.
const ALIGN: usize = 4096;
/// Bytes gathered before a write.
const BUFFER: usize = 8 << 20;

/// An [`Out`] on a new, empty file through a second descriptor opened `O_DIRECT`: appended
/// into an aligned buffer written whole; a patch in the buffer is made there, one of
/// bytes already written rewrites their aligned blocks. [`DirectOut::finish`] writes the
/// last partial block through the file's own descriptor.
pub struct DirectOut<'a> {
    file: &'a File,
    direct: File,
    /// The buffer, of `BUFFER` bytes from `start` (aligned).
    mem: Vec<u8>,
    start: usize,
    /// Bytes in the buffer, and the file offset of its first (a multiple of `ALIGN`).
    len: usize,
    base: u64,
}

impl<'a> DirectOut<'a> {
    /// For `file` (new and empty, at `path`), or `None` where its file system refuses
    /// `O_DIRECT`.
    pub fn new(file: &'a File, path: &Path) -> Option<DirectOut<'a>> {
        let direct = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_DIRECT)
            .open(path)
            .ok()?;
        let mem = vec![0u8; BUFFER + ALIGN];
        let start = mem.as_ptr().align_offset(ALIGN);
        assert!(
            start < ALIGN,
            "a byte buffer can be aligned within {ALIGN} bytes"
        );
        Some(DirectOut {
            file,
            direct,
            mem,
            start,
            len: 0,
            base: 0,
        })
    }

    fn buf(&mut self) -> &mut [u8] {
        &mut self.mem[self.start..self.start + BUFFER]
    }

    /// Write the buffer's first `n` bytes (a multiple of `ALIGN`) and keep the rest.
    fn write_out(&mut self, n: usize) -> io::Result<()> {
        debug_assert!(n.is_multiple_of(ALIGN) && n <= self.len);
        let (start, base, len) = (self.start, self.base, self.len);
        self.direct
            .write_all_at(&self.mem[start..start + n], base)?;
        self.mem.copy_within(start + n..start + len, start);
        self.len -= n;
        self.base += n as u64;
        Ok(())
    }

    /// Write what is left: the whole blocks past the cache, the last partial one
    /// through the file's own descriptor (it is flushed with the file).
    pub fn finish(&mut self) -> io::Result<()> {
        let whole = self.len / ALIGN * ALIGN;
        if whole > 0 {
            self.write_out(whole)?;
        }
        let (start, len, base) = (self.start, self.len, self.base);
        self.file
            .write_all_at(&self.mem[start..start + len], base)?;
        self.base += len as u64;
        self.len = 0;
        Ok(())
    }

    /// Rewrite bytes already written: their aligned blocks read, changed and written.
    fn patch_written(&mut self, off: u64, b: &[u8]) -> io::Result<()> {
        let from = off / ALIGN as u64 * ALIGN as u64;
        let to = (off + b.len() as u64).next_multiple_of(ALIGN as u64);
        let n = (to - from) as usize;
        let mut tmp = vec![0u8; n + ALIGN];
        let s = tmp.as_ptr().align_offset(ALIGN);
        let block = &mut tmp[s..s + n];
        self.direct.read_exact_at(block, from)?;
        let at = (off - from) as usize;
        block[at..at + b.len()].copy_from_slice(b);
        self.direct.write_all_at(block, from)
    }
}

impl Out for DirectOut<'_> {
    fn append(&mut self, mut b: &[u8]) -> io::Result<()> {
        while !b.is_empty() {
            let k = (BUFFER - self.len).min(b.len());
            let len = self.len;
            self.buf()[len..len + k].copy_from_slice(&b[..k]);
            self.len += k;
            b = &b[k..];
            if self.len == BUFFER {
                self.write_out(BUFFER)?;
            }
        }
        Ok(())
    }
    fn patch(&mut self, off: u64, b: &[u8]) -> io::Result<()> {
        // The part already written, then the part still in the buffer.
        let split = (self.base.saturating_sub(off) as usize).min(b.len());
        if split > 0 {
            self.patch_written(off, &b[..split])?;
        }
        if split < b.len() {
            let at = (off + split as u64 - self.base) as usize;
            assert!(
                at + b.len() - split <= self.len,
                "a patch past what was appended"
            );
            let end = at + b.len() - split;
            self.buf()[at..end].copy_from_slice(&b[split..]);
        }
        Ok(())
    }
}
