//! will-it-scale `fallocate2` (seed 000; docs/workloads.md): each thread allocates the next
//! 8 KiB of its own unlinked file and truncates it to zero every 1 MiB. One operation is
//! one fallocate call. After the run each thread completes its file to 1 MiB; the record
//! then carries the extents per file and, with every file still open, the free space's
//! fragmentation (engine targets).

use super::{RunCtx, Workload};
use crate::target::{Dir, Handle, Name};
use crate::timing::{timed_loop, PhaseResult};
use crate::variant::Family;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

/// Bytes allocated per call.
const CHUNK: u64 = 8 << 10;
/// Size at which the file is truncated back to zero.
const FILE_SIZE: u64 = 1 << 20;
/// The `fallocate2` workload.
pub struct Fallocate2;

/// The workload's name.
pub const NAME: &str = "fallocate2";

/// One thread's file: kept open after its name is removed, like mkstemp + unlink.
struct State {
    _dir: Dir,
    file: Option<Handle>,
    off: u64,
}

impl Workload for Fallocate2 {
    fn name(&self) -> &'static str {
        NAME
    }

    fn family(&self) -> Family {
        Family::Blocks
    }

    fn seed_variants(&self) -> &'static [&'static str] {
        &["base", "linear", "optimize_scan", "slots"]
    }
    fn about(&self) -> &'static str {
        "seed 000: 8 KiB fallocate calls to 1 MiB, then truncate, each thread in its own file (the block allocator)"
    }

    fn run(&self, ctx: &RunCtx<'_>) -> Result<Vec<PhaseResult>, String> {
        let b = ctx.backend;
        let setup = |i: usize| -> Result<State, String> {
            let dir = b.mkdir(b.base(), &Name::new(&format!("fallocate2.{i}"))?)?;
            let name = Name::new(&format!("willitscale.{i}"))?;
            let file = b.create(&dir, &name)?;
            if let Err(e) = b.unlink(&dir, &name) {
                let _ = b.close(file);
                return Err(e);
            }
            Ok(State {
                _dir: dir,
                file: Some(file),
                off: 0,
            })
        };
        let op = |s: &mut State| -> Result<(), String> {
            let Some(file) = &s.file else {
                return Err("file already closed".to_string());
            };
            b.fallocate(file, s.off, CHUNK)?;
            s.off += CHUNK;
            if s.off >= FILE_SIZE {
                b.truncate(file, 0)?;
                s.off = 0;
            }
            Ok(())
        };
        // After the run, each thread completes its file to 1 MiB in the same 8 KiB steps
        // and counts its extents: contiguity, not only speed. The files stay open until
        // every thread is done, so the free space is measured with all of them in place.
        let extents = AtomicU64::new(0);
        let files = AtomicU64::new(0);
        let kept: Mutex<Vec<Handle>> = Mutex::new(Vec::with_capacity(ctx.threads));
        let teardown = |mut s: State| -> Result<(), String> {
            let Some(f) = s.file.take() else {
                return Ok(());
            };
            let counted = (|| {
                while s.off < FILE_SIZE {
                    b.fallocate(&f, s.off, CHUNK)?;
                    s.off += CHUNK;
                }
                b.extents(&f)
            })();
            if let Ok(Some(n)) = counted {
                extents.fetch_add(n, Relaxed);
                files.fetch_add(1, Relaxed);
            }
            // A poisoned list only means a thread panicked; the handles in it are intact.
            kept.lock().unwrap_or_else(|e| e.into_inner()).push(f);
            counted.map(|_| ())
        };
        let result = timed_loop("fallocate", ctx.timed(), setup, op, teardown);
        let free = if result.is_ok() {
            b.free_space()
        } else {
            Ok(None)
        };
        let mut closed = Ok(());
        for f in kept.into_inner().unwrap_or_else(|e| e.into_inner()) {
            let c = b.close(f);
            closed = closed.and(c);
        }
        let mut r = result?;
        r.free_space = free?;
        closed?;
        let n = files.load(Relaxed);
        if n > 0 {
            r.extents_per_file = Some(extents.load(Relaxed) as f64 / n as f64);
        }
        Ok(vec![r])
    }
}
