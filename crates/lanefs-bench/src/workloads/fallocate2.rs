//! will-it-scale `fallocate2` (seed 000; KERNEL-NOTES 6.1): each thread allocates the next
//! 8 KiB of its own unlinked file and truncates it to zero every 1 MiB. One operation is
//! one fallocate call.

use super::{RunCtx, Workload};
use crate::target::{Dir, Handle, Name};
use crate::timing::{timed_loop, PhaseResult};

/// Bytes allocated per call.
const CHUNK: u64 = 8 << 10;
/// Size at which the file is truncated back to zero.
const FILE_SIZE: u64 = 1 << 20;

/// The `fallocate2` workload.
pub struct Fallocate2;

/// One thread's file: kept open after its name is removed, like mkstemp + unlink.
struct State {
    _dir: Dir,
    file: Option<Handle>,
    off: u64,
}

impl Workload for Fallocate2 {
    fn name(&self) -> &'static str {
        "fallocate2"
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
        let teardown = |mut s: State| -> Result<(), String> {
            match s.file.take() {
                Some(f) => b.close(f),
                None => Ok(()),
            }
        };
        let r = timed_loop("fallocate", ctx.timed(), setup, op, teardown)?;
        Ok(vec![r])
    }
}
