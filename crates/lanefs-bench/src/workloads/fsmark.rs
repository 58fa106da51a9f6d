//! fs_mark-style concurrent create (seed 004, "inode cache conversion to hash-bl"; its
//! figures are a 32-way fs_mark of 51.2 M empty files): each thread creates empty files
//! (create + close) in its own directory, so the threads share nothing but the file
//! system's inode allocator and inode cache. The run makes enough inodes that the engine's
//! inode cache fills past its limit and must evict while the threads insert. One phase,
//! `create`, timed from the common start until the last thread finishes; one operation is
//! one file. The files stay until the run's directory or image is discarded. On the engine
//! the record carries the inode cache's figures after the run.

use super::{RunCtx, Workload};
use crate::target::{Backend, Dir, Name};
use crate::timing::{phased, PhaseResult};
use crate::variant::Family;
use std::fmt::Write;

/// The `fsmark` workload.
pub struct Fsmark;

/// Workload name.
pub const NAME: &str = "fsmark";

/// Files a run creates in total when the files per thread are not given: split evenly
/// between the threads, so every thread count does the same work. At the 648 bytes per
/// cached empty file the engine accounted in a default run (November 2026) that is 93 MiB,
/// 1.45 times the default 64 MiB inode cache, so the cache must evict; and it fits in the
/// 262,144 inodes of the default 4 GiB image (one per 16 KiB). (250,000 until the default
/// `lanefs bench` had to fit in 3 minutes.)
pub const DEFAULT_TOTAL: usize = 150_000;

/// Inodes a run needs beside its files: each thread's directory, and slack.
const EXTRA_INODES: u64 = 64;

/// Files each of `threads` threads creates: `given`, or [`DEFAULT_TOTAL`] split evenly
/// (rounded up).
pub fn files_per_thread(given: Option<usize>, threads: usize) -> usize {
    given.unwrap_or_else(|| DEFAULT_TOTAL.div_ceil(threads.max(1)))
}

/// One thread's directory, the prefix of its names and a buffer to build them in.
struct State {
    dir: Dir,
    prefix: String,
    name: String,
}

/// Refuse a target without room for `files` more inodes, before the run starts.
fn check_inodes(b: &dyn Backend, files: u64) -> Result<(), String> {
    let need = files.saturating_add(EXTRA_INODES);
    match b.free_inodes()? {
        Some(free) if free < need => Err(format!(
            "{} has {free} free inodes, fsmark needs {need}: give a larger --size (one inode \
             per 16 KiB) or fewer --fsmark-files",
            b.location()
        )),
        _ => Ok(()),
    }
}

impl Workload for Fsmark {
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
        "seed 004: concurrent creates of empty files, more than the inode cache holds"
    }

    fn run(&self, ctx: &RunCtx<'_>) -> Result<Vec<PhaseResult>, String> {
        let b = ctx.backend;
        let per_thread = files_per_thread(ctx.fsmark_files, ctx.threads);
        check_inodes(b, (per_thread as u64).saturating_mul(ctx.threads as u64))?;
        let setup = |i: usize| -> Result<State, String> {
            let dir = b.mkdir(b.base(), &Name::new(&format!("fsmark.{i}"))?)?;
            Ok(State {
                dir,
                prefix: format!("f.{i}."),
                name: String::with_capacity(32),
            })
        };
        // Names are built as the files are made, not beforehand: a list of hundreds of
        // thousands of names would sit in the memory the run measures.
        let work = |s: &mut State, _phase: usize| -> Result<u64, String> {
            for n in 0..per_thread {
                s.name.clear();
                write!(s.name, "{}{n}", s.prefix).map_err(|e| format!("file name: {e}"))?;
                let h = b.create(&s.dir, &Name::new(&s.name)?)?;
                b.close(h)?;
            }
            Ok(per_thread as u64)
        };
        let probe = Some(ctx.backend);
        let mut results = phased(NAME, &["create"], ctx.threads, probe, setup, work, |_| {
            Ok(())
        })?;
        let (icache, bufcache) = (b.icache(), b.bufcache());
        for r in &mut results {
            r.icache = icache;
            r.bufcache = bufcache;
        }
        Ok(results)
    }
}
