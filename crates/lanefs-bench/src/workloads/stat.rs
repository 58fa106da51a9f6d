//! Concurrent lookups of cached inodes (seed 004's read path: its commit message reports
//! both file systems scaling poorly "on concurrent lookup or create workloads"). Setup,
//! untimed: each thread creates N empty files in its own directory and looks each one up
//! once, so every inode is in the cache. The timed phase, `lookup`, is duration-timed like
//! fallocate2: each thread looks its names up round and round. One operation is one name:
//! `Fs::lookup` then `Fs::getattr` on the engine (what a FUSE LOOKUP and GETATTR do),
//! `fstatat` on a path target. On the engine the record carries the inode cache's figures
//! after the run.

use super::{RunCtx, Workload};
use crate::target::{Dir, Name};
use crate::timing::{timed_loop, PhaseResult};
use crate::variant::Family;

/// The `stat` workload.
pub struct Stat;

/// Workload name.
pub const NAME: &str = "stat";

/// One thread's directory, its files' names and the next one to look up.
struct State {
    dir: Dir,
    names: Vec<Name>,
    next: usize,
}

impl Workload for Stat {
    fn name(&self) -> &'static str {
        NAME
    }

    fn family(&self) -> Family {
        Family::Inodes
    }

    fn seed_variants(&self) -> &'static [&'static str] {
        &["global", "bucket", "papaya"]
    }
    fn about(&self) -> &'static str {
        "seed 004: lookups and getattr of cached files"
    }

    fn run(&self, ctx: &RunCtx<'_>) -> Result<Vec<PhaseResult>, String> {
        let b = ctx.backend;
        let setup = |i: usize| -> Result<State, String> {
            let dir = b.mkdir(b.base(), &Name::new(&format!("stat.{i}"))?)?;
            let names = super::thread_names("stat", i, ctx.files)?;
            for name in &names {
                let h = b.create(&dir, name)?;
                b.close(h)?;
            }
            for name in &names {
                b.stat(&dir, name)?;
            }
            Ok(State {
                dir,
                names,
                next: 0,
            })
        };
        let op = |s: &mut State| -> Result<(), String> {
            let name = s.names.get(s.next).ok_or("stat thread has no files")?;
            b.stat(&s.dir, name)?;
            s.next = (s.next + 1) % s.names.len();
            Ok(())
        };
        let mut r = timed_loop("lookup", ctx.timed(), setup, op, |_| Ok(()))?;
        r.icache = b.icache();
        r.bufcache = b.bufcache();
        Ok(vec![r])
    }
}
