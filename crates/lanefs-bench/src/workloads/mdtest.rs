//! mdtest `-F -C -r` (seed 001; docs/workloads.md): each thread creates N empty files
//! (create + close), then all threads remove them (unlink). Each phase lasts from the
//! common start until the last thread finishes. Two modes, two workload names:
//!
//! - `mdtest` (`-u`, the seed's command): each thread in its own directory.
//! - `mdtest-shared` (without `-u`): every thread in one directory, each with its own
//!   names, so all threads insert into and remove from the same directory (and, on ext4,
//!   allocate their inodes from the same group).

use super::{RunCtx, Workload};
use crate::target::{Dir, Name};
use crate::timing::{phased, PhaseResult};
use crate::variant::Family;
use std::fmt::Write;

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

/// One thread's directory (its own, or `None` for the shared one), the prefix of its
/// names and a buffer to build them in (built per operation, not kept: two million names
/// held in memory would be the bench's, not the file system's, resident memory).
struct State {
    own: Option<Dir>,
    prefix: String,
    name: String,
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

    fn seed_variants(&self) -> &'static [&'static str] {
        &["base", "ialloc", "icache", "lanefs"]
    }
    fn about(&self) -> &'static str {
        if self.shared {
            "seed 001: empty-file creates and removes, every thread in one directory"
        } else {
            "seed 001: empty-file creates and removes, each thread in its own directory"
        }
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
            Ok(State {
                own,
                prefix: super::name_prefix("mdtest", i),
                name: String::new(),
            })
        };
        let work = |s: &mut State, phase: usize| -> Result<u64, String> {
            let dir = s
                .own
                .as_ref()
                .or(shared.as_ref())
                .ok_or("mdtest thread has no directory")?;
            for n in 0..ctx.files {
                s.name.clear();
                write!(s.name, "{}{n}", s.prefix).map_err(|e| format!("file name: {e}"))?;
                let name = Name::new(&s.name)?;
                if phase == 0 {
                    let h = b.create(dir, &name)?;
                    b.close(h)?;
                } else {
                    b.unlink(dir, &name)?;
                }
            }
            Ok(ctx.files as u64)
        };
        let probe = Some(ctx.backend);
        let mut results = phased(
            self.name(),
            &PHASES,
            ctx.threads,
            probe,
            setup,
            work,
            |_| Ok(()),
        )?;
        let (icache, bufcache) = (b.icache(), b.bufcache());
        for r in &mut results {
            r.icache = icache;
            r.bufcache = bufcache;
        }
        Ok(results)
    }
}
