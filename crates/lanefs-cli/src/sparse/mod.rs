//! `mkfs --sparse-output`: the image in Android's sparse format, what `fastboot flash`
//! takes, `img2simg` makes and `simg2img` expands, encoded from the raw image mkfs built
//! in memory (or in a scratch file beside the output when it does not fit).
//!
//! The format, as AOSP's libsparse defines it (`sparse_format.h`) and writes it
//! (`output_file.cpp`), every field little-endian: a 28-byte file header (magic
//! 0xed26ff3a, version 1.0, header sizes 28 and 12, block size, blocks of the expanded
//! image, chunk count, image checksum), then chunks, each a 12-byte header (type, 0, blocks
//! it expands to, bytes it takes with its header) and its body: RAW (0xCAC1) its blocks,
//! FILL (0xCAC2) a 4-byte pattern repeated over its blocks, DONT_CARE (0xCAC3) nothing
//! (blocks the target may keep as they are; `simg2img` leaves zeros), CRC32 (0xCAC4, 0
//! blocks) the CRC-32 of everything before it expanded. libsparse writes 0 as the header's
//! checksum and checks only the CRC32 chunk; its reader (`sparse_read.cpp`, when asked to
//! check, as lpmake asks) takes the standard CRC-32 (zlib's, 0xedb88320 reflected) of the
//! whole expanded image, each DONT_CARE block as zeros and each FILL block whole. That is
//! what this writes. (libsparse's writer leaves DONT_CARE out of its own sum and adds only
//! one block of each FILL, so what it writes fails its reader's check whenever those
//! chunks appear; fastboot and simg2img do not check.) RAW and FILL chunks are split at
//! 64 MiB, as libsparse splits them for fastboot on 32-bit Windows.
//!
//! Hand-written: the one crate for the format (android-sparse 0.6, last released 2021)
//! reads every byte of the raw image, its holes too.

mod direct;
pub mod lend;
mod used;

pub use direct::DirectOut;

#[cfg(test)]
use used::Mapping;
pub use used::{walk, Image, Raw, Scratch};

use std::io;
use std::sync::Arc;

/// The file header's magic number.
pub const MAGIC: u32 = 0xed26_ff3a;
/// Chunk types.
pub const CHUNK_RAW: u16 = 0xcac1;
pub const CHUNK_FILL: u16 = 0xcac2;
pub const CHUNK_DONT_CARE: u16 = 0xcac3;
pub const CHUNK_CRC32: u16 = 0xcac4;
/// Header sizes of format version 1.0.
pub const FILE_HEADER: usize = 28;
pub const CHUNK_HEADER: usize = 12;
/// Largest RAW or FILL chunk, as libsparse splits them (`MAX_BACKED_BLOCK_SIZE`).
pub const MAX_CHUNK_BYTES: u64 = 64 << 20;

/// The block size of the sparse image for an image of `len` bytes: 4096, what fastboot
/// and img2simg use, or 2048 or 1024 when `len` is not a multiple of it (the format counts
/// whole blocks). `None` when none divides `len`, or the block count passes 32 bits.
pub fn block_size_for(len: u64) -> Option<u32> {
    [4096u32, 2048, 1024]
        .into_iter()
        .find(|&b| len > 0 && len.is_multiple_of(u64::from(b)))
        .filter(|&b| u32::try_from(len / u64::from(b)).is_ok())
}

/// Where the encoded image goes: appended in order, with headers patched afterwards.
pub trait Out {
    /// Append `b`.
    fn append(&mut self, b: &[u8]) -> io::Result<()>;
    /// Overwrite what was appended at `off` (a chunk header written before its size was
    /// known).
    fn patch(&mut self, off: u64, b: &[u8]) -> io::Result<()>;
    /// Bytes appended from now on may lie in `window`: an output that passes them on
    /// later (to another thread) may keep the window rather than copy them.
    fn hold(&mut self, window: &Arc<Vec<u8>>) {
        let _ = window;
    }
}

impl<O: Out + ?Sized> Out for &mut O {
    fn append(&mut self, b: &[u8]) -> io::Result<()> {
        (**self).append(b)
    }
    fn patch(&mut self, off: u64, b: &[u8]) -> io::Result<()> {
        (**self).patch(off, b)
    }
    fn hold(&mut self, window: &Arc<Vec<u8>>) {
        (**self).hold(window)
    }
}

impl Out for Vec<u8> {
    fn append(&mut self, b: &[u8]) -> io::Result<()> {
        self.extend_from_slice(b);
        Ok(())
    }
    fn patch(&mut self, off: u64, b: &[u8]) -> io::Result<()> {
        let off = off as usize;
        self[off..off + b.len()].copy_from_slice(b);
        Ok(())
    }
}

/// Bytes gathered before a write to the file.
const OUT_BUFFER: usize = 1 << 20;
/// Bytes written before the kernel is asked to start writing them back.
const WRITEBACK_STEP: u64 = 8 << 20;

/// An [`Out`] on a new file: appended through a buffer (larger pieces written as they
/// come), patched in the buffer or, once written, in the file. Its write-back starts
/// every few MiB (`sync_file_range`), so that the disk writes while the image is still
/// being encoded, and the flush at the end waits only for the last of it.
pub struct FileOut<'a> {
    file: &'a std::fs::File,
    buf: Vec<u8>,
    /// Bytes in the file.
    flushed: u64,
    /// Bytes whose write-back was started.
    started: u64,
}

impl<'a> FileOut<'a> {
    pub fn new(file: &'a std::fs::File) -> FileOut<'a> {
        FileOut {
            file,
            buf: Vec::with_capacity(OUT_BUFFER),
            flushed: 0,
            started: 0,
        }
    }

    /// Start the write-back of what was written since the last start, once it is
    /// [`WRITEBACK_STEP`] or more. Best effort: where the call fails, the flush at the
    /// end writes it all.
    fn start_writeback(&mut self) {
        use std::os::fd::AsRawFd;
        let n = self.flushed - self.started;
        if n >= WRITEBACK_STEP {
            // SAFETY: sync_file_range on a descriptor `self.file` keeps open; it reads no
            // memory of this process.
            unsafe {
                libc::sync_file_range(
                    self.file.as_raw_fd(),
                    self.started as libc::off64_t,
                    n as libc::off64_t,
                    libc::SYNC_FILE_RANGE_WRITE,
                )
            };
            self.started = self.flushed;
        }
    }

    /// Write what is gathered.
    pub fn flush(&mut self) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        self.file.write_all_at(&self.buf, self.flushed)?;
        self.flushed += self.buf.len() as u64;
        self.buf.clear();
        self.start_writeback();
        Ok(())
    }
}

impl Out for FileOut<'_> {
    fn append(&mut self, b: &[u8]) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        if self.buf.len() + b.len() > OUT_BUFFER {
            self.flush()?;
        }
        if b.len() >= OUT_BUFFER {
            self.file.write_all_at(b, self.flushed)?;
            self.flushed += b.len() as u64;
            self.start_writeback();
        } else {
            self.buf.extend_from_slice(b);
        }
        Ok(())
    }
    fn patch(&mut self, off: u64, b: &[u8]) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        // The part already in the file, then the part still in the buffer.
        let split = (self.flushed.saturating_sub(off) as usize).min(b.len());
        if split > 0 {
            self.file.write_all_at(&b[..split], off)?;
        }
        if split < b.len() {
            let at = (off + split as u64 - self.flushed) as usize;
            self.buf[at..at + b.len() - split].copy_from_slice(&b[split..]);
        }
        Ok(())
    }
}

/// What a [`Piped`] passes to its writer.
enum Piece {
    /// Bytes of the mapped image: their offset in it and length.
    Mapped(usize, usize),
    /// Bytes of a window the encoder read a source file into.
    Held(Arc<Vec<u8>>, usize, usize),
    /// Bytes made by the encoder (headers, patterns).
    Made(Vec<u8>),
    /// A patch at an offset of the output.
    Patch(u64, Vec<u8>),
}

/// An [`Out`] that hands what it is given to a writer thread, so that the disk's file
/// system copies the output in while the encoder goes on scanning and summing. Bytes of
/// the mapped image (`image`) or of the window held pass as where they are, not copied.
struct Piped<'m> {
    image: &'m [u8],
    held: Option<Arc<Vec<u8>>>,
    tx: std::sync::mpsc::SyncSender<Piece>,
}

/// Where `b` lies in `whole`, if it lies wholly inside it.
fn offset_in(whole: &[u8], b: &[u8]) -> Option<usize> {
    let (base, at) = (whole.as_ptr() as usize, b.as_ptr() as usize);
    (at >= base && at + b.len() <= base + whole.len() && !b.is_empty()).then(|| at - base)
}

impl Piped<'_> {
    fn send(&mut self, p: Piece) -> io::Result<()> {
        self.tx
            .send(p)
            .map_err(|_| io::Error::other("the output's writer stopped"))
    }
}

impl Out for Piped<'_> {
    fn append(&mut self, b: &[u8]) -> io::Result<()> {
        let held = |w: &Arc<Vec<u8>>| offset_in(w, b).map(|at| Piece::Held(w.clone(), at, b.len()));
        let piece = match offset_in(self.image, b) {
            Some(at) => Piece::Mapped(at, b.len()),
            None => self
                .held
                .as_ref()
                .and_then(held)
                .unwrap_or_else(|| Piece::Made(b.to_vec())),
        };
        self.send(piece)
    }
    fn patch(&mut self, off: u64, b: &[u8]) -> io::Result<()> {
        self.send(Piece::Patch(off, b.to_vec()))
    }
    fn hold(&mut self, window: &Arc<Vec<u8>>) {
        self.held = Some(window.clone());
    }
}

/// Encode as [`walk`] does, from `image` (its raw file mapped whole), with the output
/// written by a second thread: scanning and summing the image on one CPU, copying the
/// encoded bytes into the output file on another.
pub fn walk_mapped<O: Out + Send>(
    image: &Image<'_>,
    blk: u32,
    mut out: O,
) -> io::Result<(O, Summary)> {
    let mapped = image.map.expect("a mapped image");
    let (tx, rx) = std::sync::mpsc::sync_channel::<Piece>(64);
    std::thread::scope(|scope| {
        let writer = scope.spawn(move || -> io::Result<O> {
            for piece in rx {
                match piece {
                    Piece::Mapped(at, n) => out.append(&mapped[at..at + n])?,
                    Piece::Held(w, at, n) => out.append(&w[at..at + n])?,
                    Piece::Made(b) => out.append(&b)?,
                    Piece::Patch(off, b) => out.patch(off, &b)?,
                }
            }
            Ok(out)
        });
        let piped = Piped {
            image: mapped,
            held: None,
            tx,
        };
        let encoded = walk(image, blk, piped);
        // The channel closes with the encoder's end (dropped with `encoded`'s Piped), so
        // the writer ends; its error, when it stopped first, is the one to tell.
        let summary = encoded.map(|(_, sum)| sum);
        let written = writer
            .join()
            .map_err(|_| io::Error::other("the output's writer panicked"))?;
        let out = written?;
        Ok((out, summary?))
    })
}

/// Where `mkfs --sparse-output` writes: past the page cache where the output's file
/// system allows it ([`DirectOut`]), else through it ([`FileOut`]).
pub enum Sink<'a> {
    Direct(DirectOut<'a>),
    Cached(FileOut<'a>),
}

impl<'a> Sink<'a> {
    /// For `file`, new and empty at `path`.
    pub fn new(file: &'a std::fs::File, path: &std::path::Path) -> Sink<'a> {
        match DirectOut::new(file, path) {
            Some(d) => Sink::Direct(d),
            None => Sink::Cached(FileOut::new(file)),
        }
    }

    /// Write what is still gathered (the file is then flushed by its owner).
    pub fn finish(&mut self) -> io::Result<()> {
        match self {
            Sink::Direct(d) => d.finish(),
            Sink::Cached(c) => c.flush(),
        }
    }
}

impl Out for Sink<'_> {
    fn append(&mut self, b: &[u8]) -> io::Result<()> {
        match self {
            Sink::Direct(d) => d.append(b),
            Sink::Cached(c) => c.append(b),
        }
    }
    fn patch(&mut self, off: u64, b: &[u8]) -> io::Result<()> {
        match self {
            Sink::Direct(d) => d.patch(off, b),
            Sink::Cached(c) => c.patch(off, b),
        }
    }
}

/// What an encoded image holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Block size.
    pub blk_sz: u32,
    /// Blocks of the expanded image.
    pub total_blks: u32,
    /// Chunks, the CRC32 chunk included.
    pub chunks: u32,
    /// Blocks in RAW, FILL and DONT_CARE chunks.
    pub raw_blocks: u64,
    pub fill_blocks: u64,
    pub skip_blocks: u64,
    /// The CRC-32 of the expanded image.
    pub crc: u32,
    /// Bytes written.
    pub bytes: u64,
}

/// The chunk being gathered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Raw,
    Fill(u32),
    Skip,
}

/// Encodes an image block by block, in order, into `out`.
pub struct Encoder<O: Out> {
    out: O,
    blk: u32,
    total: u64,
    /// The open chunk: its kind, blocks, and (RAW) where its header was appended.
    open: Option<(Kind, u64, u64)>,
    /// Most blocks of a RAW or FILL chunk.
    cap: u64,
    written: u64,
    sum: Summary,
    crc: Crc,
}

impl<O: Out> Encoder<O> {
    /// Start an image of `total` blocks of `blk` bytes (a multiple of 4).
    pub fn new(mut out: O, blk: u32, total: u64) -> io::Result<Encoder<O>> {
        let total_blks = u32::try_from(total).map_err(|_| invalid("over 2^32 blocks"))?;
        if blk == 0 || !blk.is_multiple_of(4) {
            return Err(invalid("the block size is not a multiple of 4"));
        }
        out.append(&[0; FILE_HEADER])?;
        let sum = Summary {
            blk_sz: blk,
            total_blks,
            ..Summary::default()
        };
        Ok(Encoder {
            out,
            blk,
            total,
            open: None,
            cap: MAX_CHUNK_BYTES / u64::from(blk),
            written: FILE_HEADER as u64,
            sum,
            crc: Crc::default(),
        })
    }

    /// The bytes given next may lie in `window` (see [`Out::hold`]).
    pub fn hold(&mut self, window: &Arc<Vec<u8>>) {
        self.out.hold(window);
    }

    /// Blocks given so far.
    pub fn blocks(&self) -> u64 {
        self.sum.raw_blocks + self.sum.fill_blocks + self.sum.skip_blocks
    }

    /// `n` blocks known to read as zeros (a hole of the image): FILL when the file system
    /// needs them (`care`), else DONT_CARE.
    pub fn zeros(&mut self, n: u64, care: bool) -> io::Result<()> {
        self.crc.zeros(n * u64::from(self.blk));
        let kind = if care { Kind::Fill(0) } else { Kind::Skip };
        let mut left = n;
        while left > 0 {
            if self.room(kind) == 0 {
                self.close()?;
            }
            let k = left.min(self.room(kind));
            self.extend(kind, k)?;
            left -= k;
        }
        Ok(())
    }

    /// Whole blocks read from the image, from block `first` on: each becomes FILL when it
    /// repeats one 4-byte pattern (DONT_CARE when that is zero and `care(block)` says the
    /// file system does not need it), else RAW.
    pub fn data(
        &mut self,
        first: u64,
        buf: &[u8],
        care: &mut dyn FnMut(u64) -> io::Result<bool>,
    ) -> io::Result<()> {
        let bs = self.blk as usize;
        debug_assert!(buf.len().is_multiple_of(bs));
        // A run of RAW blocks is hashed and appended as one slice.
        let mut raw_from = None;
        for (i, block) in buf.chunks_exact(bs).enumerate() {
            let kind = match fill_pattern(block) {
                None => Kind::Raw,
                Some(0) if !care(first + i as u64)? => Kind::Skip,
                Some(v) => Kind::Fill(v),
            };
            if kind == Kind::Raw {
                if self.room(Kind::Raw) == 0 {
                    self.raw_slice(buf, &mut raw_from, i)?;
                }
                self.extend(Kind::Raw, 1)?;
                raw_from.get_or_insert(i);
                continue;
            }
            self.raw_slice(buf, &mut raw_from, i)?;
            match kind {
                Kind::Fill(0) | Kind::Skip => self.crc.zeros(bs as u64),
                _ => self.crc.update(block),
            }
            self.extend(kind, 1)?;
        }
        self.raw_slice(buf, &mut raw_from, buf.len() / bs)
    }

    /// Append (and hash) the RAW blocks `from..to` of `buf` gathered so far.
    fn raw_slice(&mut self, buf: &[u8], from: &mut Option<usize>, to: usize) -> io::Result<()> {
        if let Some(i) = from.take() {
            let bs = self.blk as usize;
            let bytes = &buf[i * bs..to * bs];
            self.crc.update(bytes);
            self.out.append(bytes)?;
            self.written += bytes.len() as u64;
        }
        Ok(())
    }

    /// Blocks the open chunk may still take if the next is of `kind` (0: close it first).
    fn room(&self, kind: Kind) -> u64 {
        let cap = match kind {
            Kind::Skip => u64::from(u32::MAX),
            _ => self.cap,
        };
        match self.open {
            Some((k, n, _)) if k == kind => cap - n,
            _ => cap,
        }
    }

    /// Add `n` blocks of `kind` (at most `room(kind)`), closing the open chunk first when
    /// it is of another kind or full.
    fn extend(&mut self, kind: Kind, n: u64) -> io::Result<()> {
        match self.open {
            Some((k, have, at)) if k == kind && self.room(kind) >= n => {
                self.open = Some((k, have + n, at));
            }
            _ => {
                self.close()?;
                let at = self.written;
                if kind == Kind::Raw {
                    // Its size is patched in when it closes.
                    self.out.append(&[0; CHUNK_HEADER])?;
                    self.written += CHUNK_HEADER as u64;
                }
                self.open = Some((kind, n, at));
            }
        }
        match kind {
            Kind::Raw => self.sum.raw_blocks += n,
            Kind::Fill(_) => self.sum.fill_blocks += n,
            Kind::Skip => self.sum.skip_blocks += n,
        }
        Ok(())
    }

    /// Write the open chunk's header (and FILL its pattern).
    fn close(&mut self) -> io::Result<()> {
        let Some((kind, n, at)) = self.open.take() else {
            return Ok(());
        };
        let blocks = n as u32;
        self.sum.chunks += 1;
        match kind {
            Kind::Raw => {
                let bytes = CHUNK_HEADER as u64 + n * u64::from(self.blk);
                self.out
                    .patch(at, &chunk_header(CHUNK_RAW, blocks, bytes as u32))?;
            }
            Kind::Fill(v) => {
                let mut c = chunk_header(CHUNK_FILL, blocks, CHUNK_HEADER as u32 + 4).to_vec();
                c.extend_from_slice(&v.to_le_bytes());
                self.append(&c)?;
            }
            Kind::Skip => {
                self.append(&chunk_header(CHUNK_DONT_CARE, blocks, CHUNK_HEADER as u32))?;
            }
        }
        Ok(())
    }

    fn append(&mut self, b: &[u8]) -> io::Result<()> {
        self.out.append(b)?;
        self.written += b.len() as u64;
        Ok(())
    }

    /// Close the last chunk, add the CRC32 chunk and write the file header: the image is
    /// complete once every block was given.
    pub fn finish(mut self) -> io::Result<(O, Summary)> {
        if self.blocks() != self.total {
            let msg = format!("encoded {} of {} blocks", self.blocks(), self.total);
            return Err(io::Error::other(msg));
        }
        self.close()?;
        let crc = self.crc.value();
        let mut c = chunk_header(CHUNK_CRC32, 0, CHUNK_HEADER as u32 + 4).to_vec();
        c.extend_from_slice(&crc.to_le_bytes());
        self.append(&c)?;
        self.sum.chunks += 1;
        self.sum.crc = crc;
        self.sum.bytes = self.written;
        self.out.patch(0, &file_header(&self.sum))?;
        Ok((self.out, self.sum))
    }
}

fn invalid(msg: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg.to_string())
}

/// The 28-byte file header. The image checksum is 0, as libsparse writes it (its
/// readers check the CRC32 chunk, never this field).
fn file_header(s: &Summary) -> [u8; FILE_HEADER] {
    let mut h = [0u8; FILE_HEADER];
    h[0..4].copy_from_slice(&MAGIC.to_le_bytes());
    h[4..6].copy_from_slice(&1u16.to_le_bytes());
    h[6..8].copy_from_slice(&0u16.to_le_bytes());
    h[8..10].copy_from_slice(&(FILE_HEADER as u16).to_le_bytes());
    h[10..12].copy_from_slice(&(CHUNK_HEADER as u16).to_le_bytes());
    h[12..16].copy_from_slice(&s.blk_sz.to_le_bytes());
    h[16..20].copy_from_slice(&s.total_blks.to_le_bytes());
    h[20..24].copy_from_slice(&s.chunks.to_le_bytes());
    h
}

/// A 12-byte chunk header.
fn chunk_header(kind: u16, blocks: u32, bytes: u32) -> [u8; CHUNK_HEADER] {
    let mut h = [0u8; CHUNK_HEADER];
    h[0..2].copy_from_slice(&kind.to_le_bytes());
    h[4..8].copy_from_slice(&blocks.to_le_bytes());
    h[8..12].copy_from_slice(&bytes.to_le_bytes());
    h
}

/// The 4-byte pattern `block` repeats, if it repeats one (as libsparse compares its
/// 32-bit words).
fn fill_pattern(block: &[u8]) -> Option<u32> {
    let first: [u8; 4] = block.get(..4)?.try_into().ok()?;
    // Compare 8 bytes at a time: the pattern twice.
    let twice = u64::from_le_bytes([
        first[0], first[1], first[2], first[3], first[0], first[1], first[2], first[3],
    ]);
    let mut words = block.chunks_exact(8);
    let same = words
        .by_ref()
        .all(|w| u64::from_le_bytes(w.try_into().expect("8 bytes")) == twice)
        && words.remainder().chunks(4).all(|w| w == first);
    same.then(|| u32::from_le_bytes(first))
}

/// The running CRC-32 of the expanded image; runs of zeros are added in O(log n) steps,
/// so a mostly empty image costs nothing to sum.
#[derive(Default)]
struct Crc {
    crc: u32,
    /// Zero bytes not yet added.
    zeros: u64,
}

impl Crc {
    fn update(&mut self, b: &[u8]) {
        self.flush_zeros();
        let mut h = crc32fast::Hasher::new_with_initial(self.crc);
        h.update(b);
        self.crc = h.finalize();
    }
    fn zeros(&mut self, n: u64) {
        self.zeros += n;
    }
    fn flush_zeros(&mut self) {
        if self.zeros > 0 {
            self.crc = crc32_zeros(self.crc, self.zeros);
            self.zeros = 0;
        }
    }
    fn value(&mut self) -> u32 {
        self.flush_zeros();
        self.crc
    }
}

/// The reflected CRC-32 polynomial (zlib's, IEEE 802.3).
const POLY: u32 = 0xedb8_8320;

/// `a * b` modulo the polynomial, both in the reflected form (bit 31 is x^0).
fn mul_mod(a: u32, mut b: u32) -> u32 {
    let mut p = 0;
    for i in (0..32).rev() {
        if a & (1 << i) != 0 {
            p ^= b;
        }
        b = if b & 1 != 0 { (b >> 1) ^ POLY } else { b >> 1 };
    }
    p
}

/// x^(8n) modulo the polynomial: the squares x^(2^k) multiplied in for each bit of 8n.
fn x8n_mod(n: u64) -> u32 {
    let mut p = 1u32 << 31; // x^0
    let mut sq = 1u32 << 30; // x^1, then x^2, x^4, ...
    for _ in 0..3 {
        sq = mul_mod(sq, sq);
    }
    let mut n = n;
    while n != 0 {
        if n & 1 != 0 {
            p = mul_mod(sq, p);
        }
        sq = mul_mod(sq, sq);
        n >>= 1;
    }
    p
}

/// The CRC-32 of the bytes `crc` sums followed by `n` zeros: a zero byte multiplies the
/// (uncomplemented) register by x^8.
fn crc32_zeros(crc: u32, n: u64) -> u32 {
    !mul_mod(x8n_mod(n), !crc)
}

#[cfg(test)]
mod tests;
