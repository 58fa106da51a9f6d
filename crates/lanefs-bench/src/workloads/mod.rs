//! The workloads, one module each. To add one: write a module with a type implementing
//! [`Workload`] and add it to [`REGISTRY`].

use crate::target::Backend;
use crate::timing::{PhaseResult, Timed};
use std::time::Duration;

pub mod bufio;
pub mod control;
pub mod fallocate2;
pub mod fsync;
pub mod mdtest;

/// Thread counts a workload sweeps when the run does not name any (`--threads`).
pub const DEFAULT_THREADS: &[usize] = &[1, 2, 4];

/// What one run of a workload gets.
pub struct RunCtx<'a> {
    /// The target's operations, on a fresh directory or image.
    pub backend: &'a dyn Backend,
    /// Worker threads.
    pub threads: usize,
    /// Warm-up before measuring (duration-timed workloads).
    pub warmup: Duration,
    /// Measured time (duration-timed workloads).
    pub duration: Duration,
    /// Files per thread (file-count workloads).
    pub files: usize,
}

impl RunCtx<'_> {
    /// This run as a duration-timed loop, with the backend as the journal probe.
    pub fn timed(&self) -> Timed<'_> {
        Timed {
            threads: self.threads,
            warmup: self.warmup,
            duration: self.duration,
            probe: Some(self.backend),
        }
    }
}

/// A workload: runs on any target and reports one result per timed phase.
pub trait Workload: Sync {
    /// Name on the command line and in records.
    fn name(&self) -> &'static str;
    /// Thread counts to sweep when the run does not name any.
    fn default_threads(&self) -> &'static [usize] {
        DEFAULT_THREADS
    }
    /// Run once on `ctx` with `ctx.threads` threads.
    fn run(&self, ctx: &RunCtx<'_>) -> Result<Vec<PhaseResult>, String>;
}

/// Every workload `lanefs bench` can run, by name. The control loop is not listed: it runs
/// with every sweep on its own.
pub static REGISTRY: &[&dyn Workload] = &[
    &fallocate2::Fallocate2,
    &mdtest::Mdtest,
    &fsync::Fsync,
    &bufio::Bufio,
];

/// The workload called `name`.
pub fn find(name: &str) -> Option<&'static dyn Workload> {
    REGISTRY.iter().copied().find(|w| w.name() == name)
}
