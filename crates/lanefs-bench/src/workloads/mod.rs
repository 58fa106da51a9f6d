//! The workloads, one module each. To add one: write a module with a type implementing
//! [`Workload`] and add it to [`REGISTRY`].

use crate::target::{Backend, Template};
use crate::timing::{PhaseResult, Timed};
use crate::variant::Family;
use std::time::Duration;

pub mod bufio;
pub mod bufio64k;
pub mod control;
pub mod fallocate2;
pub mod fsmark;
pub mod fsync;
pub mod mdtest;
pub mod rtfrag;
pub mod stat;

/// Most threads a default sweep goes to (the seeds' tables go further, on machines with
/// the CPUs for it).
pub const MAX_DEFAULT_THREADS: usize = 8;

/// Thread counts a workload sweeps when the run does not name any (`--threads`): powers of
/// two from 1 up to the CPUs of this machine (at least 1 and 2, at most
/// [`MAX_DEFAULT_THREADS`]). More threads than CPUs measure the scheduler, not the engine:
/// on the 2-CPU machine this is developed on, 1 and 2.
pub fn default_threads() -> Vec<usize> {
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    let top = cpus.clamp(2, MAX_DEFAULT_THREADS);
    std::iter::successors(Some(1), |&n| Some(n * 2))
        .take_while(|&n| n <= top)
        .collect()
}

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
    /// Files per thread (mdtest, mdtest-shared, stat).
    pub files: usize,
    /// Files per thread of fsmark, when given (`None`: its default total, split).
    pub fsmark_files: Option<usize>,
    /// Bytes of file data per shape of bufio, when given (`None`: its default).
    pub bufio_size: Option<u64>,
    /// The shape of rtfrag's device and requests.
    pub rtfrag: &'a rtfrag::Params,
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
    /// Which seeds' variants it takes.
    fn family(&self) -> Family;
    /// The variants of its family a default run (no `--variants`) measures it with, the
    /// baseline first: the rows of its seed's table.
    fn seed_variants(&self) -> &'static [&'static str];
    /// What it measures, in one line for titles (which seed, what one operation is).
    fn about(&self) -> &'static str;
    /// Whether it runs on the engine only: a path target skips it with one line, and a
    /// compare run refuses it.
    fn engine_only(&self) -> bool {
        false
    }
    /// The image every engine run of it starts from when that is not a fresh mkfs of the
    /// target's size: built once per bench run before its first run, untimed. `None`
    /// (the default): a fresh mkfs.
    fn template(
        &self,
        _cfg: &crate::BenchConfig,
        _block_size: u32,
    ) -> Option<Result<Template, String>> {
        None
    }
    /// Run once on `ctx` with `ctx.threads` threads.
    fn run(&self, ctx: &RunCtx<'_>) -> Result<Vec<PhaseResult>, String>;
}

/// Every workload `lanefs bench` can run, by name. The control loop is not listed: it runs
/// with every sweep on its own.
pub static REGISTRY: &[&dyn Workload] = &[
    &fallocate2::Fallocate2,
    &mdtest::Mdtest { shared: false },
    &mdtest::Mdtest { shared: true },
    &fsmark::Fsmark,
    &stat::Stat,
    &fsync::Fsync,
    &bufio64k::Bufio64k,
    &bufio::Bufio,
    &rtfrag::Rtfrag,
];

/// Thread `thread`'s `n` file names for workload `workload`: `file.WORKLOAD.THREAD.N`.
pub fn thread_names(
    workload: &str,
    thread: usize,
    n: usize,
) -> Result<Vec<crate::target::Name>, String> {
    let prefix = name_prefix(workload, thread);
    (0..n)
        .map(|i| crate::target::Name::new(&format!("{prefix}{i}")))
        .collect()
}

/// What the names of `thread` in `workload` start with (the file's number follows).
pub fn name_prefix(workload: &str, thread: usize) -> String {
    format!("file.{workload}.{thread}.")
}

/// The workload called `name`.
pub fn find(name: &str) -> Option<&'static dyn Workload> {
    REGISTRY.iter().copied().find(|w| w.name() == name)
}

#[cfg(test)]
mod tests {
    use super::REGISTRY;
    use crate::variant::Family;

    /// Every workload's seed variants are names of its family (or `default`), baseline
    /// first, none twice: a default run resolves them all.
    #[test]
    fn seed_variants_resolve() {
        for w in REGISTRY {
            let names = w.seed_variants();
            assert!(names.len() >= 2, "{}", w.name());
            assert!(w.family().baselines().contains(&names[0]), "{}", w.name());
            for (i, n) in names.iter().enumerate() {
                assert!(!names[..i].contains(n), "{} twice in {}", n, w.name());
                crate::Variant::named_in(w.family(), n)
                    .unwrap_or_else(|e| panic!("{}: {e}", w.name()));
            }
        }
    }

    /// Each family's list of workloads is the registry's workloads of that family, in
    /// registry order.
    #[test]
    fn families_list_the_registered_workloads() {
        for f in Family::ALL {
            let registered: Vec<&str> = REGISTRY
                .iter()
                .filter(|w| w.family() == f)
                .map(|w| w.name())
                .collect();
            assert_eq!(f.workloads(), &registered[..], "{f:?}");
        }
    }
}
