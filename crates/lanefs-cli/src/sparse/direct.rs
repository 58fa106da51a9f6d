//! The sparse file written past the page cache (`O_DIRECT`): an encoding of a few hundred
//! MiB copied into the kernel's cache would take as many fresh pages, which cost more to
//! fill (and to write back at the flush) than the disk takes to write them straight
//! from a few reused buffers. Up to [`DEPTH`] buffers are written at once, by threads of
//! their own, so that the disk has more than one request to work on.

use super::Out;
use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};

/// What `O_DIRECT` wants aligned: memory, file offsets and lengths.
const ALIGN: usize = 4096;
/// Bytes of one buffer, written in one request, and buffers being written at once: here
/// `fio` wrote 300 MB in 0.26 s with 1 MiB requests 4 at a time, 0.22 s with 8 MiB ones
/// (0.30 s and 0.25 s one at a time), but every MiB of buffer is memory to fault in and
/// clear, which after a command that filled the page cache (img2simg reading a 4 GiB image)
/// cost this VM about 2.5 ms a MiB: with 1 MiB by 4 or 2 MiB by 3 the sparse build took
/// 0.66-0.82 s there, with 8 MiB by 3 0.74-0.99 s (2 MiB by 4, between them, is what
/// docs/bench.md's sparse row measures).
const BUFFER: usize = 2 << 20;
const DEPTH: usize = 4;

/// `BUFFER` bytes aligned to `ALIGN` inside a vector.
struct Block {
    mem: Vec<u8>,
    start: usize,
}

impl Block {
    fn new() -> Block {
        let mem = vec![0u8; BUFFER + ALIGN];
        let start = mem.as_ptr().align_offset(ALIGN);
        assert!(
            start < ALIGN,
            "a byte buffer can be aligned within {ALIGN} bytes"
        );
        Block { mem, start }
    }
    fn bytes(&self) -> &[u8] {
        &self.mem[self.start..self.start + BUFFER]
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.mem[self.start..self.start + BUFFER]
    }
}

/// The output file through its `O_DIRECT` descriptor, and through a plain one for what
/// the direct one refuses as unaligned (EINVAL): a file system may take the flag at open
/// and want a larger alignment than [`ALIGN`] of the requests.
struct Twin {
    direct: File,
    plain: File,
}

impl Twin {
    fn write_all_at(&self, b: &[u8], at: u64) -> io::Result<()> {
        match self.direct.write_all_at(b, at) {
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => self.plain.write_all_at(b, at),
            r => r,
        }
    }

    fn read_exact_at(&self, b: &mut [u8], at: u64) -> io::Result<()> {
        match self.direct.read_exact_at(b, at) {
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => self.plain.read_exact_at(b, at),
            r => r,
        }
    }
}

/// A full buffer to write at a file offset.
type Job = (Block, u64);

/// An [`Out`] on a new, empty file through a second descriptor opened `O_DIRECT`: appended
/// into an aligned buffer, each full one written whole by a writer thread; a patch in the
/// buffer is made there, one of bytes already written (once every write has ended)
/// rewrites their aligned blocks. [`DirectOut::finish`] writes the rest, its last partial
/// block through the file's own descriptor.
pub struct DirectOut<'a> {
    file: &'a File,
    direct: Arc<Twin>,
    cur: Block,
    /// Bytes in `cur`, and the file offset of its first (a multiple of `ALIGN`).
    len: usize,
    base: u64,
    /// Buffers not in use, and the writes under way.
    spare: Vec<Block>,
    in_flight: usize,
    jobs: Option<Sender<Job>>,
    done: Receiver<io::Result<Block>>,
    writers: Vec<std::thread::JoinHandle<()>>,
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
        let direct = Arc::new(Twin {
            direct,
            plain: file.try_clone().ok()?,
        });
        let (jobs, queue) = channel::<Job>();
        let (done_tx, done) = channel();
        let queue = Arc::new(Mutex::new(queue));
        let writers = (0..DEPTH)
            .map(|_| {
                let (queue, done_tx, direct) = (queue.clone(), done_tx.clone(), direct.clone());
                std::thread::spawn(move || loop {
                    let job = queue.lock().unwrap_or_else(|e| e.into_inner()).recv();
                    let Ok((block, at)) = job else {
                        return;
                    };
                    let r = direct.write_all_at(block.bytes(), at).map(|()| block);
                    if done_tx.send(r).is_err() {
                        return;
                    }
                })
            })
            .collect();
        Some(DirectOut {
            file,
            direct,
            cur: Block::new(),
            len: 0,
            base: 0,
            spare: Vec::new(),
            in_flight: 0,
            jobs: Some(jobs),
            done,
            writers,
        })
    }

    /// Wait for one write under way to end; its buffer is spare again.
    fn reap(&mut self) -> io::Result<()> {
        let block = self
            .done
            .recv()
            .map_err(|_| io::Error::other("the sparse file's writers stopped"))??;
        self.in_flight -= 1;
        self.spare.push(block);
        Ok(())
    }

    /// Wait for every write under way.
    fn drain(&mut self) -> io::Result<()> {
        while self.in_flight > 0 {
            self.reap()?;
        }
        Ok(())
    }

    /// Hand the full buffer to a writer and go on in another.
    fn send_full(&mut self) -> io::Result<()> {
        debug_assert_eq!(self.len, BUFFER);
        if self.in_flight >= DEPTH {
            self.reap()?;
        }
        let next = self.spare.pop().unwrap_or_else(Block::new);
        let full = std::mem::replace(&mut self.cur, next);
        let jobs = self.jobs.as_ref().expect("jobs close only when dropped");
        jobs.send((full, self.base))
            .map_err(|_| io::Error::other("the sparse file's writers stopped"))?;
        self.in_flight += 1;
        self.base += BUFFER as u64;
        self.len = 0;
        Ok(())
    }

    /// Write what is left: the whole blocks past the cache, the last partial one
    /// through the file's own descriptor (it is flushed with the file).
    pub fn finish(&mut self) -> io::Result<()> {
        self.drain()?;
        let whole = self.len / ALIGN * ALIGN;
        self.direct
            .write_all_at(&self.cur.bytes()[..whole], self.base)?;
        let tail = &self.cur.bytes()[whole..self.len];
        self.file.write_all_at(tail, self.base + whole as u64)?;
        self.base += self.len as u64;
        self.len = 0;
        Ok(())
    }

    /// Rewrite bytes already handed to the writers: once their writes have ended, their
    /// aligned blocks read, changed and written.
    fn patch_written(&mut self, off: u64, b: &[u8]) -> io::Result<()> {
        self.drain()?;
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
            self.cur.bytes_mut()[len..len + k].copy_from_slice(&b[..k]);
            self.len += k;
            b = &b[k..];
            if self.len == BUFFER {
                self.send_full()?;
            }
        }
        Ok(())
    }
    fn patch(&mut self, off: u64, b: &[u8]) -> io::Result<()> {
        // The part already handed out, then the part still in the buffer.
        let split = (self.base.saturating_sub(off) as usize).min(b.len());
        if split > 0 {
            self.patch_written(off, &b[..split])?;
        }
        if split < b.len() {
            let at = (off + split as u64 - self.base) as usize;
            let end = at + b.len() - split;
            assert!(end <= self.len, "a patch past what was appended");
            self.cur.bytes_mut()[at..end].copy_from_slice(&b[split..]);
        }
        Ok(())
    }
}

impl Drop for DirectOut<'_> {
    fn drop(&mut self) {
        // The writers end once the queue closes and they have finished their writes.
        self.jobs = None;
        for w in self.writers.drain(..) {
            let _ = w.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: what the direct descriptor refuses as unaligned goes through the plain one,
    /// and reads back the same.
    #[test]
    fn unaligned_requests_go_through_the_plain_descriptor() {
        let td = tempfile::tempdir().unwrap();
        let path = td.path().join("out");
        let plain = File::create_new(&path).unwrap();
        let direct = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_DIRECT)
            .open(&path)
            .expect("O_DIRECT on the test's own file system");
        let twin = Twin {
            direct,
            plain: std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(&path)
                .unwrap(),
        };
        drop(plain);
        let mut mem = vec![0u8; 3 * ALIGN];
        let at = mem.as_ptr().align_offset(ALIGN) + 1;
        let bytes: Vec<u8> = (0..ALIGN).map(|i| (i * 7 + 3) as u8).collect();
        mem[at..at + ALIGN].copy_from_slice(&bytes);
        // Memory one byte off alignment: EINVAL on the direct descriptor.
        let refused = twin.direct.write_at(&mem[at..at + ALIGN], 0).unwrap_err();
        assert_eq!(refused.raw_os_error(), Some(libc::EINVAL));
        twin.write_all_at(&mem[at..at + ALIGN], 0).unwrap();
        let mut back = vec![0u8; 3 * ALIGN];
        twin.read_exact_at(&mut back[at..at + ALIGN], 0).unwrap();
        assert!(back[at..at + ALIGN] == bytes[..]);
        assert_eq!(std::fs::read(&path).unwrap(), bytes);
    }
}
