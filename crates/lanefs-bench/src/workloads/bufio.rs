//! `bufio` (seed 002, after its fio runs: buffered 64 KiB IO over files held in the page
//! cache; docs/page-cache.md). One operation is one 64 KiB call, so bandwidth is ops/s x 64 KiB
//! ([`PhaseResult::io`] says how many of those bytes are read and how many written).
//!
//! Before the timed phases (untimed) the run lays out its data: one shared file of `size`
//! bytes, and one file per thread of `size / threads` (both with 1 MiB writes), makes them
//! durable, drops their cached data and reads each once, so the cache holds what sequential
//! reads build (read-ahead's folios, as a fio read job's cache after its first pass). `size`
//! is `--bufio-size` (default [`DEFAULT_SIZE`], larger than this machine's last-level
//! cache), capped on the engine at a quarter of its page cache limit so that both shapes
//! stay cached. Then, each phase timed like fallocate2 (warm-up, then the measured seconds),
//! each thread sequential from its own starting offset and back to its start at the end:
//!
//! - `memcpy`: the control of a cached read: 64 KiB copies from one buffer of `size` bytes,
//!   each thread from offset `i x size / threads` on, as `shared-read` reads the file (the
//!   physical ceiling of a cached read on this machine, measured in the same run);
//! - `shared-read`, `shared-w10`, `shared-w30`, `shared-w50`: the seed's shape, every
//!   thread on the one shared file from offset `i x size / threads` on, reading, or with
//!   10, 30 or 50 % of the calls overwriting the 64 KiB in place (spread evenly: call k
//!   writes when `(k+1) x w / 100 > k x w / 100`);
//! - `files-read`, `files-w10`, `files-w30`, `files-w50`: the same on each thread's own file;
//! - `cold-read`: reads of each thread's own file, its cached data dropped at the start of
//!   every pass, so every read is a miss served from the device through read-ahead
//!   ([`PhaseResult::device_reads`] shows the device reads' size on the engine).
//!
//! The files are made durable (untimed) after every phase that writes, so each phase starts
//! with a clean cache. Every write writes [`FILL`] and every read checks its first and last
//! byte against it.

use super::{RunCtx, Workload};
use crate::target::{Backend, Handle, Name};
use crate::timing::{timed_loop, IoPerOp, PhaseResult};
use crate::variant::Family;
use std::hint::black_box;

/// Bytes per call.
pub const CHUNK: usize = 64 << 10;
/// Bytes of each shape's data when the run does not say: more than this machine's 260 MiB
/// last-level cache, so the copies come from memory as a large file's would.
pub const DEFAULT_SIZE: u64 = 384 << 20;
/// The least size a run may ask for: one call per thread's file at 16 threads.
pub const MIN_SIZE: u64 = 16 * CHUNK as u64;
/// Bytes of each layout write.
const LAYOUT_CHUNK: usize = 1 << 20;
/// The byte every file holds.
pub const FILL: u8 = 0x5a;

/// The `bufio` workload.
pub struct Bufio;

/// Name on the command line and in records.
pub const NAME: &str = "bufio";

/// Phase names, in the order they run.
pub const PHASES: [&str; 10] = [
    "memcpy",
    "shared-read",
    "shared-w10",
    "shared-w30",
    "shared-w50",
    "files-read",
    "files-w10",
    "files-w30",
    "files-w50",
    "cold-read",
];

/// The write percentages of the mixes, with their phases in each shape.
const MIXES: [(u32, &str, &str); 4] = [
    (0, "shared-read", "files-read"),
    (10, "shared-w10", "files-w10"),
    (30, "shared-w30", "files-w30"),
    (50, "shared-w50", "files-w50"),
];

/// Whether call `k` of a mix with `pct` % writes is a write: the writes spread evenly,
/// `floor(n x pct / 100)` of the first n calls.
fn is_write(k: u64, pct: u32) -> bool {
    let pct = u64::from(pct);
    (k + 1) * pct / 100 > k * pct / 100
}

/// One thread's place in its stream of calls.
struct Cursor {
    /// Byte offset of the next call.
    off: u64,
    /// Calls made.
    k: u64,
    /// Size of the file (or buffer) it wraps in.
    len: u64,
    buf: Vec<u8>,
}

impl Cursor {
    /// A cursor at `start` (rounded down to a call) in `len` bytes.
    fn new(start: u64, len: u64) -> Cursor {
        let chunk = CHUNK as u64;
        Cursor {
            off: (start / chunk * chunk) % len,
            k: 0,
            len,
            buf: vec![FILL; CHUNK],
        }
    }

    /// Move to the next call; true when that wrapped to the start.
    fn advance(&mut self) -> bool {
        self.k += 1;
        self.off += CHUNK as u64;
        if self.off + CHUNK as u64 > self.len {
            self.off = 0;
            return true;
        }
        false
    }
}

/// Read one call at `c.off` of `file` and check it holds [`FILL`].
fn read_checked(b: &dyn Backend, file: &Handle, c: &mut Cursor) -> Result<(), String> {
    let n = b.read(file, c.off, &mut c.buf)?;
    if n != CHUNK {
        return Err(format!(
            "short read at {} of a {}-byte file: {n} of {CHUNK} bytes",
            c.off, c.len
        ));
    }
    if c.buf[0] != FILL || c.buf[CHUNK - 1] != FILL {
        return Err(format!(
            "read at {}: bytes {:#04x}..{:#04x}, every write wrote {FILL:#04x}",
            c.off,
            c.buf[0],
            c.buf[CHUNK - 1]
        ));
    }
    Ok(())
}

/// Create `name` and write `len` bytes of [`FILL`] into it.
fn lay_out(b: &dyn Backend, name: &str, len: u64) -> Result<Handle, String> {
    let file = b.create(b.base(), &Name::new(name)?)?;
    let buf = vec![FILL; LAYOUT_CHUNK];
    let mut off = 0;
    while off < len {
        let n = (len - off).min(LAYOUT_CHUNK as u64) as usize;
        if let Err(e) = b.write(&file, off, &buf[..n]) {
            let _ = b.close(file);
            return Err(format!("laying out {name}: {e}"));
        }
        off += n as u64;
    }
    Ok(file)
}

/// Make `file` durable, drop its cached data and read it once, sequentially: the cache
/// then holds what read-ahead builds.
fn settle(b: &dyn Backend, file: &Handle, len: u64) -> Result<(), String> {
    b.fsync(file, true)?;
    b.drop_cache(file)?;
    let mut c = Cursor::new(0, len);
    loop {
        read_checked(b, file, &mut c)?;
        if c.advance() {
            return Ok(());
        }
    }
}

/// The files of one run: the shared one and each thread's own, with their sizes.
struct Files {
    shared: Vec<Handle>,
    shared_len: u64,
    own: Vec<Handle>,
    own_len: u64,
}

impl Files {
    fn close(self, b: &dyn Backend) -> Result<(), String> {
        let mut closed = Ok(());
        for f in self.shared.into_iter().chain(self.own) {
            closed = closed.and(b.close(f));
        }
        closed
    }
}

/// The bytes of each shape for a run asking for `want` (or the default) on `b`.
fn shape_size(b: &dyn Backend, want: Option<u64>) -> u64 {
    let size = want.unwrap_or(DEFAULT_SIZE);
    match b.cache_limit() {
        Some(limit) => size.min(limit / 4).max(MIN_SIZE),
        None => size,
    }
}

impl Workload for Bufio {
    fn name(&self) -> &'static str {
        NAME
    }

    fn family(&self) -> Family {
        Family::Pages
    }
    fn seed_variants(&self) -> &'static [&'static str] {
        &["base", "default"]
    }
    fn about(&self) -> &'static str {
        "seed 002: buffered 64 KiB reads and write mixes over cached files"
    }

    fn run(&self, ctx: &RunCtx<'_>) -> Result<Vec<PhaseResult>, String> {
        let b = ctx.backend;
        let chunk = CHUNK as u64;
        let size = shape_size(b, ctx.bufio_size) / chunk * chunk;
        let own_len = (size / ctx.threads as u64 / chunk).max(1) * chunk;
        let mut files = Files {
            shared: Vec::new(),
            shared_len: size,
            own: Vec::new(),
            own_len,
        };
        let laid = (|| {
            files
                .shared
                .push(lay_out(b, &format!("{NAME}.shared"), size)?);
            for i in 0..ctx.threads {
                files.own.push(lay_out(b, &format!("{NAME}.{i}"), own_len)?);
            }
            for f in &files.shared {
                settle(b, f, size)?;
            }
            for f in &files.own {
                settle(b, f, own_len)?;
            }
            Ok::<(), String>(())
        })();
        let results = laid.and_then(|()| phases(ctx, &files));
        let closed = files.close(b);
        let results = results?;
        closed?;
        Ok(results)
    }
}

/// Run every phase on the laid-out `files`.
fn phases(ctx: &RunCtx<'_>, files: &Files) -> Result<Vec<PhaseResult>, String> {
    let b = ctx.backend;
    let threads = ctx.threads as u64;
    let mut out = Vec::with_capacity(PHASES.len());
    out.push(memcpy(ctx, files.shared_len)?);
    // The seed's shape: each thread starts at its share of the one file.
    let shared = &files.shared[0];
    let len = files.shared_len;
    for (pct, phase, _) in MIXES {
        let start = |i: usize| Ok(Cursor::new(i as u64 * (len / threads), len));
        out.push(mixed(ctx, phase, pct, start, |_| shared)?);
        if pct > 0 {
            b.fsync(shared, true)?;
        }
    }
    let own = |i: usize| &files.own[i];
    let own_len = files.own_len;
    for (pct, _, phase) in MIXES {
        out.push(mixed(
            ctx,
            phase,
            pct,
            |_| Ok(Cursor::new(0, own_len)),
            own,
        )?);
        if pct > 0 {
            for f in &files.own {
                b.fsync(f, true)?;
            }
        }
    }
    out.push(cold(ctx, files)?);
    Ok(out)
}

/// `bytes` per call as [`IoPerOp`] for a mix with `pct` % writes.
fn io(pct: u32) -> IoPerOp {
    let w = f64::from(pct) / 100.0;
    IoPerOp {
        read: (1.0 - w) * CHUNK as f64,
        written: w * CHUNK as f64,
    }
}

/// One mixed phase: thread i works on `file(i)` from `start(i)`.
fn mixed<'f>(
    ctx: &RunCtx<'_>,
    phase: &'static str,
    pct: u32,
    start: impl Fn(usize) -> Result<Cursor, String> + Sync,
    file: impl Fn(usize) -> &'f Handle + Sync,
) -> Result<PhaseResult, String> {
    let b = ctx.backend;
    let setup = |i: usize| Ok((file(i), start(i)?));
    let op = |(f, c): &mut (&Handle, Cursor)| {
        if is_write(c.k, pct) {
            b.write(f, c.off, &c.buf)?;
        } else {
            read_checked(b, f, c)?;
        }
        c.advance();
        Ok(())
    };
    let r = timed_loop(phase, ctx.timed(), setup, op, |_| Ok(()))?;
    Ok(PhaseResult {
        io: Some(io(pct)),
        ..r
    })
}

/// The memory-copy control: 64 KiB copies from one buffer of `len` bytes, each thread from
/// its share on, as `shared-read` reads the shared file.
fn memcpy(ctx: &RunCtx<'_>, len: u64) -> Result<PhaseResult, String> {
    let src = vec![FILL; len as usize];
    let share = len / ctx.threads as u64;
    let setup = |i: usize| Ok(Cursor::new(i as u64 * share, len));
    let op = |c: &mut Cursor| {
        let at = c.off as usize;
        c.buf.copy_from_slice(&src[at..at + CHUNK]);
        black_box(&mut c.buf);
        c.advance();
        Ok(())
    };
    let r = timed_loop("memcpy", ctx.timed(), setup, op, |_| Ok(()))?;
    // A copy is the control of a read: its bytes count as read.
    Ok(PhaseResult {
        io: Some(io(0)),
        ..r
    })
}

/// Cold reads: each thread reads its own file, dropping its cached data at the start of
/// every pass.
fn cold(ctx: &RunCtx<'_>, files: &Files) -> Result<PhaseResult, String> {
    let b = ctx.backend;
    let setup = |i: usize| {
        let f = &files.own[i];
        b.drop_cache(f)?;
        Ok((f, Cursor::new(0, files.own_len)))
    };
    let op = |(f, c): &mut (&Handle, Cursor)| {
        read_checked(b, f, c)?;
        if c.advance() {
            b.drop_cache(f)?;
        }
        Ok(())
    };
    let r = timed_loop("cold-read", ctx.timed(), setup, op, |_| Ok(()))?;
    Ok(PhaseResult {
        io: Some(io(0)),
        ..r
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A mix writes `floor(n x pct / 100)` of its first n calls, spread evenly.
    #[test]
    fn mixes_write_their_share_evenly() {
        for pct in [0, 10, 30, 50] {
            for n in [1u64, 7, 10, 100, 1001] {
                let writes = (0..n).filter(|&k| is_write(k, pct)).count() as u64;
                assert_eq!(writes, n * u64::from(pct) / 100, "{pct}% of {n}");
            }
        }
        // Half: every other call, never two writes in a row.
        let w: Vec<bool> = (0..6).map(|k| is_write(k, 50)).collect();
        assert_eq!(w, [false, true, false, true, false, true]);
    }

    /// Cursors start at a call boundary inside the file and wrap to the start.
    #[test]
    fn cursors_start_aligned_and_wrap() {
        let len = 4 * CHUNK as u64;
        let mut c = Cursor::new(CHUNK as u64 * 3 + 5, len);
        assert_eq!(c.off, 3 * CHUNK as u64);
        assert!(c.advance());
        assert_eq!((c.off, c.k), (0, 1));
        assert!(!c.advance());
        assert_eq!(Cursor::new(len, len).off, 0);
    }
}
