//! `fsync` (the journal issue's measurement): each thread appends 4 KiB to its own file and
//! fsyncs it, as a database appends to its log. One operation is one write plus one
//! `fsync` (not `fdatasync`), so ops/s are fsyncs/s. Every append allocates a block and
//! grows the file, so every fsync has metadata to commit. At 16 MiB the file is truncated
//! to zero and appending starts over, which keeps a long run bounded (one truncate per 4096
//! operations). With group commit one journal commit serves every thread waiting in fsync,
//! so total fsyncs/s should rise with threads, even oversubscribed.

use super::{RunCtx, Workload};
use crate::target::{Handle, Name};
use crate::timing::{timed_loop, PhaseResult};
use crate::variant::Family;

/// Bytes written before each fsync.
const CHUNK: usize = 4096;
/// Size at which the file is truncated back to zero.
const FILE_SIZE: u64 = 16 << 20;
/// The `fsync` workload.
pub struct Fsync;

/// One thread's file, its append offset and the block it writes.
struct State {
    file: Option<Handle>,
    off: u64,
    block: Vec<u8>,
}

impl Workload for Fsync {
    fn name(&self) -> &'static str {
        "fsync"
    }

    fn family(&self) -> Family {
        Family::Blocks
    }

    fn seed_variants(&self) -> &'static [&'static str] {
        &["base", "default"]
    }
    fn about(&self) -> &'static str {
        "4 KiB appends, each followed by fsync (journal group commit)"
    }

    fn run(&self, ctx: &RunCtx<'_>) -> Result<Vec<PhaseResult>, String> {
        let b = ctx.backend;
        let setup = |i: usize| -> Result<State, String> {
            let file = b.create(b.base(), &Name::new(&format!("fsync.{i}"))?)?;
            // A byte per thread, never zero, so a block of one thread is told from another's.
            let fill = (i % 255) as u8 + 1;
            Ok(State {
                file: Some(file),
                off: 0,
                block: vec![fill; CHUNK],
            })
        };
        let op = |s: &mut State| -> Result<(), String> {
            let Some(file) = &s.file else {
                return Err("file already closed".to_string());
            };
            b.write(file, s.off, &s.block)?;
            b.fsync(file, false)?;
            s.off += CHUNK as u64;
            if s.off >= FILE_SIZE {
                b.truncate(file, 0)?;
                s.off = 0;
            }
            Ok(())
        };
        let teardown = |mut s: State| -> Result<(), String> {
            match s.file.take() {
                Some(f) => b.close(f),
                None => Ok(()),
            }
        };
        let r = timed_loop("fsync", ctx.timed(), setup, op, teardown)?;
        Ok(vec![r])
    }
}
