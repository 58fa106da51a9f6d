//! The raw image as the encoder reads it: only its data ranges (SEEK_DATA/SEEK_HOLE;
//! holes are zeros unread), and which of its blocks the file system uses (its block
//! bitmaps); and the scratch files the image is built and encoded in.
//!
//! A block that reads as zeros becomes DONT_CARE only where the file system marks it
//! free; where it uses it (the journal, inode tables, a file's zeros) it becomes FILL, so
//! a target that was not erased still reads zeros there. That also makes the encoding a
//! function of the image's bytes alone: whether a zero block is a hole of the scratch file
//! or was written (the journal's used blocks, wiped at unmount, depend on how the build's
//! transactions were batched) does not change it, so reproducible builds give the same
//! sparse file.

use super::lend::Placed;
use super::{Encoder, Out, Summary};
use lanefs::internals::disk::geometry::Geometry;
use lanefs::internals::disk::group::{uninit_block_bitmap, GroupDesc, BG_BLOCK_UNINIT};
use lanefs::internals::disk::superblock::{Superblock, SB_OFFSET, SB_SIZE};
use lanefs::internals::disk::{find_one, find_zero};
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Bytes read from the raw image at a time.
const WINDOW: usize = 4 << 20;
/// Bytes read from a source file at a time, and how many such windows may be in the
/// output's hands at once ([`Sources::window`]): few and small, as fresh memory costs.
const SOURCE_WINDOW: usize = 512 << 10;
const WINDOWS: usize = 6;

/// The raw image to encode: the file mkfs built (`len` bytes, an ext2/3/4 file system),
/// mapped whole when `map` is given, and the ranges of it that are bytes of source files
/// (`placed`, by offset, disjoint; see [`super::lend`]), which win over the file's own.
pub struct Image<'a> {
    pub raw: &'a File,
    pub map: Option<&'a [u8]>,
    pub len: u64,
    pub placed: &'a [(u64, Placed)],
}

impl<'a> Image<'a> {
    /// The raw image alone: `len` bytes of `raw`, read through a window.
    #[cfg(test)]
    pub fn plain(raw: &'a File, len: u64) -> Image<'a> {
        Image {
            raw,
            map: None,
            len,
            placed: &[],
        }
    }
}

/// Encode `image` into `out` in blocks of `blk` bytes, reading only its data: the raw
/// file's data ranges (SEEK_DATA) and the placed ranges of source files.
pub fn walk<O: Out>(image: &Image<'_>, blk: u32, out: O) -> io::Result<(O, Summary)> {
    let (raw, len, b) = (image.raw, image.len, u64::from(blk));
    if !len.is_multiple_of(b) {
        return Err(io::Error::other(format!(
            "{len} bytes are not whole {b}-byte blocks"
        )));
    }
    assert!(
        image.map.is_none_or(|m| m.len() as u64 == len),
        "a mapping of the whole image"
    );
    let mut used = UsedMap::read(raw, len, b)?;
    let mut enc = Encoder::new(out, blk, len / b)?;
    let mut buf = match image.map {
        Some(_) => Vec::new(),
        None => vec![0u8; WINDOW.min(len as usize).max(blk as usize)],
    };
    let mut sources = Sources::default();
    let mut ranges = DataRanges { raw, last: None };
    let mut placed = image.placed.iter().peekable();
    let mut pos = 0;
    while pos < len {
        let next_placed = placed.peek().map_or(len, |(k, _)| *k);
        assert!(
            next_placed >= pos && next_placed.is_multiple_of(b),
            "placed ranges in order, on sparse blocks"
        );
        // The raw file's next data before the next placed range, if any.
        let data = match ranges.at(pos)? {
            Some((d, h)) if d < next_placed => {
                let start = (d / b * b).clamp(pos, next_placed);
                Some((
                    start,
                    h.div_ceil(b).saturating_mul(b).clamp(start, next_placed),
                ))
            }
            _ => None,
        };
        let Some((start, end)) = data else {
            holes(&mut enc, &mut used, pos / b, next_placed / b)?;
            pos = next_placed;
            if let Some((k, p)) = placed.next() {
                sources.encode(&mut enc, &mut used, *k / b, p, blk)?;
                pos = k + p.len;
            }
            continue;
        };
        holes(&mut enc, &mut used, pos / b, start / b)?;
        let mut at = start;
        while at < end {
            let n = ((end - at) as usize).min(WINDOW);
            let bytes = match image.map {
                Some(m) => &m[at as usize..at as usize + n],
                None => {
                    raw.read_exact_at(&mut buf[..n], at)?;
                    &buf[..n]
                }
            };
            enc.data(at / b, bytes, &mut |k| used.care(k))?;
            at += n as u64;
        }
        debug_assert!(end > start, "a data range of whole blocks");
        pos = end;
    }
    enc.finish()
}

/// The windows the encoder reads source files into, each shared with the output until
/// it is done with it.
#[derive(Default)]
struct Sources {
    windows: Vec<Arc<Vec<u8>>>,
}

impl Sources {
    /// Encode placed range `p`, sparse blocks from `first` on, from its source, which must
    /// keep its size and times from before the first read to after the last.
    fn encode<O: Out>(
        &mut self,
        enc: &mut Encoder<O>,
        used: &mut UsedMap,
        first: u64,
        p: &Placed,
        blk: u32,
    ) -> io::Result<()> {
        assert!(p.len.is_multiple_of(u64::from(blk)), "whole sparse blocks");
        let file = p.src.file()?;
        let mut done = 0;
        while done < p.len {
            let n = ((p.len - done) as usize).min(SOURCE_WINDOW);
            let mut w = self.window();
            let bytes = &mut Arc::get_mut(&mut w).expect("a window no one else holds")[..n];
            file.read_exact_at(bytes, p.src_off + done).map_err(|e| {
                io::Error::new(e.kind(), format!("{}: {e}", p.src.path().display()))
            })?;
            enc.hold(&w);
            enc.data(first + done / u64::from(blk), &w[..n], &mut |k| {
                used.care(k)
            })?;
            self.windows.push(w);
            done += n as u64;
        }
        p.src.file().map(drop)
    }

    /// A window no one else holds: a kept one the output is done with, a new one while
    /// there are fewer than [`WINDOWS`], else the first kept one once it is let go.
    fn window(&mut self) -> Arc<Vec<u8>> {
        loop {
            if let Some(i) = self.windows.iter().position(|w| Arc::strong_count(w) == 1) {
                return self.windows.swap_remove(i);
            }
            if self.windows.len() < WINDOWS {
                return Arc::new(vec![0u8; SOURCE_WINDOW]);
            }
            std::thread::sleep(std::time::Duration::from_micros(50));
        }
    }
}

/// Blocks `k..end`, holes of the image: FILL where the file system uses them, DONT_CARE
/// where it does not.
fn holes<O: Out>(enc: &mut Encoder<O>, used: &mut UsedMap, k: u64, end: u64) -> io::Result<()> {
    let mut k = k;
    while k < end {
        let care = used.care(k)?;
        let next = used.next_change(k, end, care)?;
        enc.zeros(next - k, care)?;
        k = next;
    }
    Ok(())
}

/// The raw file's data ranges, asked of increasing positions: the last answer serves
/// every position it still covers (a placed range between two asks changes nothing).
struct DataRanges<'a> {
    raw: &'a File,
    /// The position last asked, and the answer.
    last: Option<(u64, Option<(u64, u64)>)>,
}

impl DataRanges<'_> {
    /// The data range at or after `pos`, as [`next_data`] gives it.
    fn at(&mut self, pos: u64) -> io::Result<Option<(u64, u64)>> {
        if let Some((asked, known)) = self.last {
            if asked <= pos && known.is_none_or(|(_, h)| pos < h) {
                return Ok(known.map(|(d, h)| (d.max(pos), h)));
            }
        }
        let known = next_data(self.raw, pos)?;
        self.last = Some((pos, known));
        Ok(known)
    }
}

/// The data range at or after `pos`: (start, end of it), or `None` past the last.
fn next_data(f: &File, pos: u64) -> io::Result<Option<(u64, u64)>> {
    use rustix::fs::{seek, SeekFrom};
    let d = match seek(f, SeekFrom::Data(pos)) {
        Ok(d) => d,
        Err(rustix::io::Errno::NXIO) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let h = seek(f, SeekFrom::Hole(d))?;
    Ok(Some((d, h)))
}

/// Which file-system blocks are in use, from the block bitmaps (one group's at a time),
/// asked of sparse-image blocks in increasing order.
struct UsedMap<'a> {
    raw: &'a File,
    /// Bytes of a sparse-image block and of a file-system block.
    blk: u64,
    bs: u64,
    /// `None`: every block counts as used (bigalloc, whose bitmaps count clusters).
    geo: Option<Geometry>,
    descs: Vec<GroupDesc>,
    /// The group whose bitmap was read last, and the bitmap (`None`: all used).
    cached: Option<(u32, Option<Vec<u8>>)>,
}

impl<'a> UsedMap<'a> {
    fn read(raw: &'a File, len: u64, blk: u64) -> io::Result<UsedMap<'a>> {
        let fs_err = |e: lanefs::Error| io::Error::other(format!("reading the image: {e}"));
        let mut sb_raw = vec![0u8; SB_SIZE];
        raw.read_exact_at(&mut sb_raw, SB_OFFSET)?;
        let sb = Superblock::decode(&sb_raw, len).map_err(fs_err)?;
        let geo = Geometry::from_superblock(&sb);
        let bs = u64::from(geo.bs);
        let mut map = UsedMap {
            raw,
            blk,
            bs,
            geo: None,
            descs: Vec::new(),
            cached: None,
        };
        if geo.cluster_ratio != 1 {
            return Ok(map);
        }
        let ds = geo.desc_size as usize;
        let mut block = vec![0u8; bs as usize];
        for i in 0..geo.gdt_blocks {
            raw.read_exact_at(&mut block, geo.gdt_block(i) * bs)?;
            for d in block.chunks_exact(ds) {
                if map.descs.len() < geo.groups as usize {
                    map.descs.push(GroupDesc { raw: d.to_vec() });
                }
            }
        }
        map.geo = Some(geo);
        Ok(map)
    }

    /// The file-system blocks sparse block `k` overlaps.
    fn fs_range(&self, k: u64) -> (u64, u64) {
        (
            k * self.blk / self.bs,
            ((k + 1) * self.blk).div_ceil(self.bs),
        )
    }

    /// The sparse block holding the start of file-system block `b`.
    fn sparse_of(&self, b: u64) -> u64 {
        b * self.bs / self.blk
    }

    /// Whether the file system uses any block sparse block `k` overlaps.
    fn care(&mut self, k: u64) -> io::Result<bool> {
        let (a, e) = self.fs_range(k);
        Ok(self.next_with(a, e, true)?.is_some())
    }

    /// The first sparse block after `k` and before `end` whose `care` is not `care`
    /// (`end` if none).
    fn next_change(&mut self, k: u64, end: u64, care: bool) -> io::Result<u64> {
        let limit = self.fs_range(end - 1).1;
        if !care {
            // Every file-system block of `k` is free: the next used one decides.
            let from = self.fs_range(k).1;
            return Ok(match self.next_with(from, limit, true)? {
                Some(u) => self.sparse_of(u).clamp(k + 1, end),
                None => end,
            });
        }
        let mut j = k + 1;
        while j < end {
            let Some(f) = self.next_with(self.fs_range(j).0, limit, false)? else {
                return Ok(end);
            };
            j = j.max(self.sparse_of(f));
            if j >= end || !self.care(j)? {
                break;
            }
            j += 1;
        }
        Ok(j.min(end))
    }

    /// The first file-system block in `from..to` that is used (`want_used`) or free.
    /// Blocks before the first group (the boot block of 1 KiB-block systems) count as
    /// used, those past the last as free.
    fn next_with(&mut self, from: u64, to: u64, want_used: bool) -> io::Result<Option<u64>> {
        let Some(geo) = &self.geo else {
            return Ok((want_used && from < to).then_some(from));
        };
        let (first_data, blocks) = (u64::from(geo.first_data_block), geo.blocks);
        let mut b = from;
        while b < to {
            if b < first_data {
                if want_used {
                    return Ok(Some(b));
                }
                b = first_data;
                continue;
            }
            if b >= blocks {
                return Ok((!want_used).then_some(b));
            }
            let geo = self.geo.as_ref().expect("checked above");
            let g = geo.group_of_block(b);
            let (first, len) = (geo.group_first(g), u64::from(geo.group_len(g)));
            let (lo, hi) = ((b - first) as usize, (to.min(first + len) - first) as usize);
            let found = match self.group_map(g)? {
                None => want_used.then_some(lo),
                Some(m) if want_used => find_one(m, lo, hi),
                Some(m) => find_zero(m, lo, hi),
            };
            if let Some(i) = found {
                return Ok(Some(first + i as u64));
            }
            b = first + len;
        }
        Ok(None)
    }

    /// Group `g`'s block bitmap: read, or for a BLOCK_UNINIT group computed as the
    /// kernel computes it; `None` (all used) where its location is not in the file system.
    fn group_map(&mut self, g: u32) -> io::Result<Option<&[u8]>> {
        if self.cached.as_ref().is_none_or(|(c, _)| *c != g) {
            let geo = self
                .geo
                .as_ref()
                .expect("a bitmap is asked for only with a geometry");
            let d = &self.descs[g as usize];
            let map = if d.flags() & BG_BLOCK_UNINIT != 0 && geo.desc_csum.on() {
                Some(uninit_block_bitmap(geo, g, d))
            } else if geo.in_fs(d.block_bitmap(), 1) {
                let mut m = vec![0u8; geo.bs as usize];
                self.raw.read_exact_at(&mut m, d.block_bitmap() * self.bs)?;
                Some(m)
            } else {
                None
            };
            self.cached = Some((g, map));
        }
        Ok(self.cached.as_ref().and_then(|(_, m)| m.as_deref()))
    }
}

/// A file beside the output under a hidden name (`.NAME.lanefs-TAG-PID-N`), removed when
/// this is dropped unless it was published: the image is built in one and encoded into
/// another, so a failed mkfs leaves neither (as a plain mkfs removes an image it made), and
/// an existing output is replaced only by a complete one.
pub struct Scratch {
    file: File,
    path: PathBuf,
    /// Whether the hidden name is still there to remove.
    named: bool,
}

impl Scratch {
    /// A new empty scratch file beside `output`; `tag` says what it holds.
    pub fn new(output: &Path, tag: &str) -> io::Result<Scratch> {
        let (file, path) = hidden(output, tag, |p| {
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(p)
        })?;
        Ok(Scratch {
            file,
            path,
            named: true,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn file(&self) -> &File {
        &self.file
    }

    /// Name the finished file `dest`, replacing what is there in one step.
    pub fn publish(mut self, dest: &Path) -> io::Result<()> {
        std::fs::rename(&self.path, dest)?;
        self.named = false;
        Ok(())
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if self.named {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Where the raw image of a sparse build is made: in memory (a memfd) when the whole
/// image could be held in a quarter of the memory available, else a scratch file beside
/// the output. In memory, nothing of it reaches a disk: no writeback, no flush, and no
/// blocks to free when it goes (deleting a large scratch file on a discard-mounted disk
/// costs as much as the encoding).
pub enum Raw {
    Memory { file: File, path: PathBuf },
    Disk(Scratch),
}

impl Raw {
    /// The raw image's home for an image of `size` bytes to be written as `output`.
    pub fn new(output: &Path, size: u64) -> io::Result<Raw> {
        let room = mem_available()
            .unwrap_or(0)
            .min(cgroup_room().unwrap_or(u64::MAX));
        if size <= room / 4 {
            let fd = rustix::fs::memfd_create("lanefs-raw", rustix::fs::MemfdFlags::CLOEXEC)
                .map_err(io::Error::from)?;
            let file = File::from(fd);
            // The engine opens the image by path: the memfd's own, in /proc.
            let path = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
            return Ok(Raw::Memory { file, path });
        }
        Scratch::new(output, "raw").map(Raw::Disk)
    }

    pub fn path(&self) -> &Path {
        match self {
            Raw::Memory { path, .. } => path,
            Raw::Disk(s) => s.path(),
        }
    }

    pub fn file(&self) -> &File {
        match self {
            Raw::Memory { file, .. } => file,
            Raw::Disk(s) => s.file(),
        }
    }

    /// The finished image in memory mapped whole (read-only), for the encoder to read
    /// without copying it out; `None` for a scratch file on disk, read through a window.
    /// Only once the build is done: nothing writes the image while it is mapped.
    pub fn map(&self, len: u64) -> io::Result<Option<Mapping>> {
        match self {
            // SAFETY: the raw image's memfd, which only this process holds (close-on-exec,
            // never passed on), and which nothing writes once the build is done.
            Raw::Memory { file, .. } if len > 0 => unsafe { Mapping::new(file, len) }.map(Some),
            _ => Ok(None),
        }
    }
}

/// A file mapped read-only and shared, unmapped when dropped.
pub struct Mapping {
    ptr: *mut libc::c_void,
    len: usize,
}

impl Mapping {
    /// `len` bytes of `file` from its start (which must hold them).
    ///
    /// # Safety
    ///
    /// Nothing may write or truncate the file while the mapping lives: [`Mapping::bytes`]
    /// hands out a slice that must not change under its reader.
    pub unsafe fn new(file: &File, len: u64) -> io::Result<Mapping> {
        let len = usize::try_from(len).map_err(|_| io::Error::other("image too large to map"))?;
        // SAFETY: a fresh mapping chosen by the kernel (null address) of an open
        // descriptor; it overlaps nothing of this process's own memory.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping { ptr, len })
    }

    pub fn bytes(&self) -> &[u8] {
        // SAFETY: `ptr` maps `len` readable bytes for as long as `self` lives, and they do
        // not change under the slice: nothing writes or truncates the file while it is
        // mapped, as the caller of `new` promised.
        unsafe { std::slice::from_raw_parts(self.ptr.cast::<u8>(), self.len) }
    }
}

// SAFETY: a mapping belongs to the process, not to a thread: any thread may read it or
// unmap it, and `Mapping` hands out only shared slices borrowed from it.
unsafe impl Send for Mapping {}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `ptr` and `len` are the mapping made in `new`; no slice of it outlives
        // `self` (`bytes` borrows it).
        unsafe { libc::munmap(self.ptr, self.len) };
    }
}

/// `MemAvailable` of /proc/meminfo, in bytes.
fn mem_available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// What this process's cgroup (v2) may still take: `memory.max` less `memory.current`
/// (`None` without a limit, or without cgroup v2): a memfd's pages count against it.
fn cgroup_room() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let rel = text.lines().find_map(|l| l.strip_prefix("0::"))?;
    let dir = Path::new("/sys/fs/cgroup").join(rel.trim_start_matches('/'));
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).ok();
    let max: u64 = read("memory.max")?.trim().parse().ok()?; // "max": no limit
    let current: u64 = read("memory.current")?.trim().parse().ok()?;
    Some(max.saturating_sub(current))
}

/// The directory `p` is in.
fn parent(p: &Path) -> &Path {
    match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// Make something under a hidden name beside `output` (`.NAME.lanefs-TAG-PID-N`), the
/// first N that `make` does not find taken.
fn hidden<T>(
    output: &Path,
    tag: &str,
    mut make: impl FnMut(&Path) -> io::Result<T>,
) -> io::Result<(T, PathBuf)> {
    let name = output.file_name().unwrap_or_default().to_string_lossy();
    let mut n = 0;
    loop {
        let p = parent(output).join(format!(".{name}.lanefs-{tag}-{}-{n}", std::process::id()));
        match make(&p) {
            Ok(t) => return Ok((t, p)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && n < 1000 => n += 1,
            Err(e) => return Err(e),
        }
    }
}
