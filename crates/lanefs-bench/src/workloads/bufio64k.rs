//! `bufio64k` (seed 002, after fio's buffered sequential 64 KiB IO; docs/workloads.md): each
//! thread works on its own 8 MiB file, written whole before the first phase (untimed). One
//! operation is one 64 KiB call, so ops/s x 64 KiB is the bandwidth. Two phases, each timed
//! like fallocate2 (warm-up, then the measured seconds):
//!
//! - `write`: sequential 64 KiB `pwrite` calls over the file, back to its start at the end
//!   (buffered overwrites in place, as fio's `rw=write` with `time_based`);
//! - `synced`: the same calls, with an `fsync` each time the pass reaches the file's end
//!   (inside the timed loop), so every 8 MiB written goes through write-back and a journal
//!   commit before the next pass: what a copy that ends in `fsync` costs (fio's
//!   `end_fsync`), where `write` alone measures little past the kernel's page cache;
//! - `read`: after the file is made durable (`fdatasync`, untimed), sequential 64 KiB
//!   `pread` calls over it. Each pass over the file starts by dropping the file's clean
//!   pages from the kernel's page cache (`POSIX_FADV_DONTNEED`, inside the timed loop, once
//!   per 128 reads), so the reads go through the file system (a FUSE daemon, or ext4 and its
//!   block device) instead of being served from what the pass before left in memory. The
//!   engine in-process drops its own page cache's copy the same way, so its reads come
//!   from the image too. Every read checks its first and last byte against the thread's
//!   fill byte.
//!
//! Seed 002's cached reads and write mixes, with the memory-copy ceiling, are `bufio`.

use super::{RunCtx, Workload};
use crate::target::{Handle, Name};
use crate::timing::{timed_loop, PhaseResult};
use crate::variant::Family;
use std::sync::{Mutex, MutexGuard};

/// Bytes per call.
const CHUNK: usize = 64 << 10;
/// Size of each thread's file.
const FILE_SIZE: u64 = 8 << 20;

/// The `bufio64k` workload.
pub struct Bufio64k;

/// Name on the command line and in records.
pub const NAME: &str = "bufio64k";

/// One thread's file, where it is in it, and its buffer.
struct State {
    thread: usize,
    file: Option<Handle>,
    off: u64,
    buf: Vec<u8>,
}

/// A byte per thread, never zero, so one thread's data is told from another's (and from a
/// hole).
fn fill_byte(thread: usize) -> u8 {
    (thread % 255) as u8 + 1
}

/// Each thread's open file between the phases.
struct Slots(Vec<Mutex<Option<Handle>>>);

impl Slots {
    fn slot(&self, i: usize) -> Result<MutexGuard<'_, Option<Handle>>, String> {
        let m = self
            .0
            .get(i)
            .ok_or_else(|| format!("no file slot for thread {i}"))?;
        // A poisoned slot only means a thread panicked; the handle in it is intact.
        Ok(m.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl Workload for Bufio64k {
    fn name(&self) -> &'static str {
        NAME
    }

    fn family(&self) -> Family {
        Family::Blocks
    }
    fn seed_variants(&self) -> &'static [&'static str] {
        &["base", "default"]
    }
    fn about(&self) -> &'static str {
        "buffered sequential 64 KiB writes and cold reads, each thread its own file (after fio)"
    }

    fn run(&self, ctx: &RunCtx<'_>) -> Result<Vec<PhaseResult>, String> {
        let b = ctx.backend;
        let slots = Slots((0..ctx.threads).map(|_| Mutex::new(None)).collect());
        let write_setup = |i: usize| -> Result<State, String> {
            let file = b.create(b.base(), &Name::new(&format!("{NAME}.{i}"))?)?;
            let buf = vec![fill_byte(i); CHUNK];
            let mut off = 0;
            while off < FILE_SIZE {
                if let Err(e) = b.write(&file, off, &buf) {
                    let _ = b.close(file);
                    return Err(e);
                }
                off += CHUNK as u64;
            }
            Ok(State {
                thread: i,
                file: Some(file),
                off: 0,
                buf,
            })
        };
        let write = |s: &mut State| -> Result<(), String> {
            let Some(file) = &s.file else {
                return Err("file already closed".to_string());
            };
            b.write(file, s.off, &s.buf)?;
            s.off += CHUNK as u64;
            if s.off >= FILE_SIZE {
                s.off = 0;
            }
            Ok(())
        };
        // Taken up where `write` left its file: `write`'s call, plus an fsync at each wrap.
        let synced_setup = |i: usize| -> Result<State, String> {
            let file = slots
                .slot(i)?
                .take()
                .ok_or_else(|| format!("thread {i}'s file is missing after the write phase"))?;
            Ok(State {
                thread: i,
                file: Some(file),
                off: 0,
                buf: vec![fill_byte(i); CHUNK],
            })
        };
        let synced = |s: &mut State| -> Result<(), String> {
            write(s)?;
            match &s.file {
                Some(file) if s.off == 0 => b.fsync(file, false),
                _ => Ok(()),
            }
        };
        let keep = |mut s: State| -> Result<(), String> {
            match s.file.take() {
                Some(f) => {
                    *slots.slot(s.thread)? = Some(f);
                    Ok(())
                }
                None => Ok(()),
            }
        };
        let read_setup = |i: usize| -> Result<State, String> {
            let file = slots
                .slot(i)?
                .take()
                .ok_or_else(|| format!("thread {i}'s file is missing after the write phase"))?;
            let ready = b.fsync(&file, true).and_then(|()| b.drop_cache(&file));
            if let Err(e) = ready {
                let _ = b.close(file);
                return Err(e);
            }
            Ok(State {
                thread: i,
                file: Some(file),
                off: 0,
                buf: vec![0; CHUNK],
            })
        };
        let read = |s: &mut State| -> Result<(), String> {
            let Some(file) = &s.file else {
                return Err("file already closed".to_string());
            };
            let n = b.read(file, s.off, &mut s.buf)?;
            if n != CHUNK {
                return Err(format!(
                    "short read at {} of an {FILE_SIZE}-byte file: {n} of {CHUNK} bytes",
                    s.off
                ));
            }
            let want = fill_byte(s.thread);
            if s.buf[0] != want || s.buf[CHUNK - 1] != want {
                return Err(format!(
                    "read at {} of thread {}'s file: bytes {:#04x}..{:#04x}, wrote {want:#04x}",
                    s.off,
                    s.thread,
                    s.buf[0],
                    s.buf[CHUNK - 1]
                ));
            }
            s.off += CHUNK as u64;
            if s.off >= FILE_SIZE {
                s.off = 0;
                b.drop_cache(file)?;
            }
            Ok(())
        };
        let close = |mut s: State| -> Result<(), String> {
            match s.file.take() {
                Some(f) => b.close(f),
                None => Ok(()),
            }
        };
        let written = timed_loop("write", ctx.timed(), write_setup, write, keep);
        let results = written.and_then(|w| {
            let f = timed_loop("synced", ctx.timed(), synced_setup, synced, keep)?;
            let r = timed_loop("read", ctx.timed(), read_setup, read, close)?;
            Ok(vec![w, f, r])
        });
        // Whatever a failed phase left open.
        let mut closed = Ok(());
        for m in slots.0 {
            if let Some(f) = m.into_inner().unwrap_or_else(|e| e.into_inner()) {
                closed = closed.and(b.close(f));
            }
        }
        let results = results?;
        closed?;
        Ok(results)
    }
}
