//! mdtest `-F -C -r` (seed 001; KERNEL-NOTES 6.2): each thread creates N empty files
//! (create + close), then all threads remove them (unlink). Each phase lasts from the
//! common start until the last thread finishes. Two modes, two workload names:
//!
//! - `mdtest` (`-u`, the seed's command): each thread in its own directory.
//! - `mdtest-shared` (without `-u`): every thread in one directory, each with its own
//!   names, so all threads insert into and remove from the same directory (and, on ext4,
//!   allocate their inodes from the same group).

use super::{RunCtx, Workload, SEED_THREADS};
use crate::target::{Dir, Name};
use crate::timing::{phased, PhaseResult};
use crate::variant::Family;

/// The `mdtest` and `mdtest-shared` workloads.
pub struct Mdtest {
    /// Every thread works in one directory (`mdtest-shared`) instead of its own.
    pub shared: bool,
}

/// Workload name of the own-directory mode.
pub const NAME: &str = "mdtest";
/// Workload name of the shared-directory mode.
pub const SHARED_NAME: &str = "mdtest-shared";

/// Phases in order; `work` below matches on the index.
const PHASES: [&str; 2] = ["create", "remove"];

/// One thread's directory (its own, or `None` for the shared one) and names.
struct State {
    own: Option<Dir>,
    names: Vec<Name>,
}

impl Workload for Mdtest {
    fn name(&self) -> &'static str {
        if self.shared {
            SHARED_NAME
        } else {
            NAME
        }
    }

    fn family(&self) -> Family {
        Family::Inodes
    }

    fn default_threads(&self) -> &'static [usize] {
        SEED_THREADS
    }

    fn run(&self, ctx: &RunCtx<'_>) -> Result<Vec<PhaseResult>, String> {
        let b = ctx.backend;
        let shared = if self.shared {
            Some(b.mkdir(b.base(), &Name::new("mdtest.shared")?)?)
        } else {
            None
        };
        let setup = |i: usize| -> Result<State, String> {
            let own = match shared {
                Some(_) => None,
                None => Some(b.mkdir(b.base(), &Name::new(&format!("mdtest.{i}"))?)?),
            };
            let names = super::thread_names("mdtest", i, ctx.files)?;
            Ok(State { own, names })
        };
        let work = |s: &mut State, phase: usize| -> Result<u64, String> {
            let dir = s
                .own
                .as_ref()
                .or(shared.as_ref())
                .ok_or("mdtest thread has no directory")?;
            for name in &s.names {
                if phase == 0 {
                    let h = b.create(dir, name)?;
                    b.close(h)?;
                } else {
                    b.unlink(dir, name)?;
                }
            }
            Ok(s.names.len() as u64)
        };
        let probe = Some(ctx.backend);
        phased(
            self.name(),
            &PHASES,
            ctx.threads,
            probe,
            setup,
            work,
            |_| Ok(()),
        )
    }
}
