//! mdtest `-F -C -r -u` (seed 001; KERNEL-NOTES 6.2): each thread creates N empty files in
//! its own directory (create + close), then all threads remove them (unlink). Each phase
//! lasts from the common start until the last thread finishes.

use super::{RunCtx, Workload};
use crate::target::{Dir, Name};
use crate::timing::{phased, PhaseResult};

/// The `mdtest` workload.
pub struct Mdtest;

/// Phases in order; `work` below matches on the index.
const PHASES: [&str; 2] = ["create", "remove"];

struct State {
    dir: Dir,
    names: Vec<Name>,
}

impl Workload for Mdtest {
    fn name(&self) -> &'static str {
        "mdtest"
    }

    fn run(&self, ctx: &RunCtx<'_>) -> Result<Vec<PhaseResult>, String> {
        let b = ctx.backend;
        let setup = |i: usize| -> Result<State, String> {
            let dir = b.mkdir(b.base(), &Name::new(&format!("mdtest.{i}"))?)?;
            let names = (0..ctx.files)
                .map(|n| Name::new(&format!("file.mdtest.{i}.{n}")))
                .collect::<Result<Vec<_>, _>>()?;
            Ok(State { dir, names })
        };
        let work = |s: &mut State, phase: usize| -> Result<u64, String> {
            for name in &s.names {
                if phase == 0 {
                    let h = b.create(&s.dir, name)?;
                    b.close(h)?;
                } else {
                    b.unlink(&s.dir, name)?;
                }
            }
            Ok(s.names.len() as u64)
        };
        let probe = Some(ctx.backend);
        phased("mdtest", &PHASES, ctx.threads, probe, setup, work, |_| {
            Ok(())
        })
    }
}
