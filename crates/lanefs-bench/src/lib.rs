//! lanefs-bench: the workloads of `lanefs bench` (see the repository's docs/workloads.md), run
//! with the same code against the engine in-process or against a directory of any mounted
//! file system, with a control loop at every thread count as the ceiling of the machine;
//! or ([`TargetSpec::Compare`], module [`compare`]) through mounts side by side: lanefs's
//! FUSE mount, the FUSE ceiling (`lanefs memfs`), fuse2fs and the kernel's ext4.
//!
//! Each workload runs its seed's variants ([`variant`]), baseline first. How to read the
//! tables, the variant families, raw mount-option specs and every `--json` field are in
//! the repository's `docs/bench.md`; each mechanism's page in `docs/` gives its measured
//! result and the command that reruns it.
//!
//! ```no_run
//! use lanefs_bench::{run, BenchConfig, TargetSpec};
//!
//! let cfg = BenchConfig {
//!     workloads: vec!["fallocate2".into(), "mdtest".into(), "fsync".into()],
//!     threads: Some(vec![1, 2]),
//!     reps: 1,
//!     seconds: 0.5,
//!     target: TargetSpec::Path("/tmp".into()),
//!     json: Some("/tmp/bench.json".into()),
//!     ..BenchConfig::default()
//! };
//! let records = run(&cfg, &mut std::io::stdout())?;
//! assert!(records.iter().all(|r| r.ops > 0));
//! # Ok::<(), String>(())
//! ```

pub mod compare;
pub mod config;
mod engine;
pub mod machine;
pub mod markdown;
mod outputs;
pub mod report;
pub mod rss;
pub mod target;
pub mod timing;
pub mod variant;
pub mod workloads;

pub use config::{BenchConfig, TargetSpec, DEFAULT_IMAGE_SIZE, PATH_VARIANT};
pub use report::{read_json, render_table, render_vs_base, write_json, Record, BASE_VARIANT};
pub use target::{Target, Template};
pub use variant::{parse_variants, Family, Variant, DEFAULT_VARIANT};

use lanefs::internals::sync::LockStat;
use std::io::Write;
use timing::PhaseResult;
use workloads::{control, RunCtx, Workload};

/// Names of the workloads `run` accepts, in registry order.
pub fn workload_names() -> Vec<&'static str> {
    workloads::REGISTRY.iter().map(|w| w.name()).collect()
}

/// Write a line to `out`, turning an I/O error into the crate's error string.
macro_rules! say {
    ($out:expr, $($arg:tt)*) => {
        writeln!($out, $($arg)*).map_err(|e| format!("writing output: {e}"))
    };
}

/// Turns engine lock statistics on for its lifetime, and off again even on an early return.
struct LockstatOn(bool);

impl LockstatOn {
    fn new(on: bool) -> LockstatOn {
        if on {
            engine::lockstat_enable(true);
        }
        LockstatOn(on)
    }
}

impl Drop for LockstatOn {
    fn drop(&mut self) {
        if self.0 {
            engine::lockstat_enable(false);
        }
    }
}

/// The per-run targets of workload `w`: one per variant that applies to it for lanefs, a
/// single one for a path.
fn targets(cfg: &BenchConfig, w: &dyn Workload) -> Vec<Target> {
    match &cfg.target {
        TargetSpec::Path(dir) => vec![Target::Path(dir.clone())],
        TargetSpec::Compare { .. } => Vec::new(),
        TargetSpec::Lanefs {
            image,
            size,
            block_size,
        } => cfg
            .variants_for(w.name())
            .into_iter()
            .map(|v| Target::Lanefs {
                image: image.clone(),
                size: *size,
                block_size: *block_size,
                variant: v.name,
                opts: v.opts,
            })
            .collect(),
    }
}

/// Where one result came from.
pub(crate) struct Origin<'a> {
    pub(crate) workload: &'a str,
    pub(crate) target: &'a str,
    pub(crate) variant: &'a str,
    pub(crate) threads: usize,
    pub(crate) rep: usize,
    pub(crate) oversubscribed: bool,
}

/// `num / den`, or zero when `den` is zero (as `PhaseResult::ops_per_sec`).
fn ratio(num: f64, den: f64) -> f64 {
    if den > 0.0 {
        num / den
    } else {
        0.0
    }
}

pub(crate) fn record(o: &Origin<'_>, p: PhaseResult) -> Record {
    let j = p.journal;
    let per_op = |secs: Option<f64>| secs.filter(|_| p.ops > 0).map(|s| s * 1e6 / p.ops as f64);
    let ic = p.icache;
    Record {
        workload: o.workload.to_string(),
        phase: p.phase.to_string(),
        target: o.target.to_string(),
        variant: o.variant.to_string(),
        threads: o.threads,
        rep: o.rep,
        ops: p.ops,
        seconds: p.seconds,
        ops_per_sec: p.ops_per_sec(),
        per_thread_ops_per_sec: p.per_thread_ops_per_sec,
        oversubscribed: o.oversubscribed,
        journal_commits: j.map(|j| j.commits),
        journal_log_bytes: j.map(|j| j.log_bytes),
        commits_per_s: j.map(|j| ratio(j.commits as f64, p.seconds)),
        journal_bytes_per_op: j.map(|j| ratio(j.log_bytes as f64, p.ops as f64)),
        extents_per_file: p.extents_per_file,
        free_extents: p.free_space.map(|f| f.extents),
        avg_free_extent_kib: p.free_space.map(|f| f.avg_extent_kib),
        daemon_cpu_seconds: p.daemon_cpu,
        daemon_cpu_us_per_op: per_op(p.daemon_cpu),
        fuse_requests: None,
        cpu_seconds: p.cpu,
        cpu_per_op_us: per_op(p.cpu),
        icache_inodes: ic.map(|c| c.inodes),
        icache_bytes: ic.map(|c| c.bytes),
        icache_peak_bytes: ic.map(|c| c.peak_bytes),
        icache_bytes_per_inode: ic
            .filter(|c| c.inodes > 0)
            .map(|c| c.bytes as f64 / c.inodes as f64),
        icache_limit: ic.map(|c| c.limit),
        icache_evictions: ic.map(|c| c.evictions),
        bufcache_bytes: p.bufcache.map(|c| c.bytes),
        bufcache_limit: p.bufcache.map(|c| c.limit),
        peak_rss_bytes: p.peak_rss,
        read_bytes_per_op: p.io.map(|io| io.read),
        written_bytes_per_op: p.io.map(|io| io.written),
        device_reads: p.device_reads.map(|d| d.reads),
        device_read_bytes: p.device_reads.map(|d| d.bytes),
        rt_allocations: p.rt.map(|w| w.allocations),
        rt_frees: p.rt.map(|w| w.frees),
        rt_bitmap_reads: p.rt.map(|w| w.bitmap_reads),
        rt_summary_reads: p.rt.map(|w| w.summary_reads),
        rt_bitmap_reads_per_alloc: p
            .rt
            .filter(|w| w.allocations > 0)
            .map(|w| w.bitmap_reads as f64 / w.allocations as f64),
        rt_summary_reads_per_alloc: p
            .rt
            .filter(|w| w.allocations > 0)
            .map(|w| w.summary_reads as f64 / w.allocations as f64),
        rt_decisions: p.rt.map(|w| format!("{:016x}", w.decisions)),
        rt_free_extents: p.rt.map(|w| w.free_extents),
        instructions_per_op: p.instructions_per_op,
        lock_top_class: None,
        lock_top_wait_ns: None,
        lock_top_contended: None,
        lock_held_share: None,
    }
}

/// One timed run as an [`Observer`] sees it.
#[derive(Debug, Clone, Copy)]
pub struct Step<'a> {
    /// Workload name (or "control").
    pub workload: &'a str,
    /// Variant (or target, for a compare run).
    pub variant: &'a str,
    /// Worker threads.
    pub threads: usize,
    /// Repetition, from 1.
    pub rep: usize,
    /// Repetitions in all.
    pub reps: usize,
}

/// What a run tells a progress display as it goes. Every method has an empty default.
pub trait Observer {
    /// The run will make `total` timed runs (control loops and rtfrag's callgrind runs
    /// included).
    fn plan(&mut self, _total: usize) {}
    /// A timed run starts.
    fn start(&mut self, _step: &Step<'_>) {}
    /// The timed run started last has finished.
    fn finish(&mut self) {}
}

/// An observer that shows nothing ([`run`]'s).
pub struct NoProgress;

impl Observer for NoProgress {}

fn progress(cfg: &BenchConfig, out: &mut dyn Write, r: &Record) -> Result<(), String> {
    if !cfg.run_lines {
        return Ok(());
    }
    let reps = cfg.reps;
    let per: Vec<String> = r
        .per_thread_ops_per_sec
        .iter()
        .map(|&v| report::fmt_rate(v))
        .collect();
    let journal = match (r.journal_commits, r.commits_per_s, r.journal_bytes_per_op) {
        (Some(n), Some(per_s), Some(per_op)) => format!(
            "; journal {n} commits, {} commits/s, {} B/op",
            report::fmt_amount(Some(per_s)),
            report::fmt_amount(Some(per_op))
        ),
        _ => String::new(),
    };
    let cpu = r
        .cpu_per_op_us
        .map(|us| format!("; CPU {} us/op", report::fmt_amount(Some(us))))
        .unwrap_or_default();
    let icache = match (r.icache_inodes, r.icache_evictions) {
        (Some(n), Some(ev)) => format!("; icache {n} inodes, {ev} evictions"),
        _ => String::new(),
    };
    say!(
        out,
        "rep {}/{reps} threads {}{}: {} {} [{}] {} ops/s ({} ops in {:.2} s; per thread \
         {}{journal}{cpu}{icache})",
        r.rep,
        r.threads,
        if r.oversubscribed {
            " (oversubscribed)"
        } else {
            ""
        },
        r.workload,
        r.phase,
        r.variant,
        report::fmt_rate(r.ops_per_sec),
        r.ops,
        r.seconds,
        per.join(" ")
    )
}

/// Run one workload once on a fresh instance of `target`; returns its records and, when
/// `lockstat` is on, the lock statistics of the run.
pub(crate) fn run_one(
    cfg: &BenchConfig,
    w: &dyn Workload,
    target: &Target,
    template: Option<&Template>,
    threads: usize,
    origin: &Origin<'_>,
    lockstat: bool,
) -> Result<(Vec<Record>, Option<Vec<LockStat>>), String> {
    let inst = target
        .prepare_from(template)
        .map_err(|e| format!("{} on {}: {e}", w.name(), target.label()))?;
    let location = inst.backend().location();
    if lockstat {
        engine::lockstat_reset();
    }
    let span = std::time::Instant::now();
    let ctx = RunCtx {
        backend: inst.backend(),
        threads,
        warmup: cfg.warmup_duration()?,
        duration: cfg.duration()?,
        files: cfg.files,
        fsmark_files: cfg.fsmark_files,
        bufio_size: cfg.bufio_size,
        rtfrag: &cfg.rtfrag,
    };
    // The engine's memory is this process's: its peak is the run's when the reset worked.
    let rss_reset = matches!(target, Target::Lanefs { .. }) && rss::reset_peak();
    let result = w.run(&ctx);
    let peak_rss = if rss_reset { rss::peak() } else { None };
    let locks = lockstat.then(engine::lockstat_snapshot);
    let span = span.elapsed().as_secs_f64();
    let finished = inst.finish();
    let phases = result.map_err(|e| format!("{} on {location}: {e}", w.name()))?;
    finished.map_err(|e| format!("{} on {location}: {e}", w.name()))?;
    let top = locks.as_deref().and_then(|l| {
        l.iter()
            .filter(|s| s.contended > 0)
            .max_by_key(|s| s.wait_total_ns)
    });
    let shares = locks.as_deref().map(|l| {
        let thread_ns = threads as f64 * span * 1e9;
        l.iter()
            .filter(|s| s.held_ns > 0 && thread_ns > 0.0)
            .map(|s| (s.name.to_string(), s.held_ns as f64 / thread_ns))
            .collect::<Vec<_>>()
    });
    let records = phases
        .into_iter()
        .map(|p| {
            let mut r = record(origin, timing::PhaseResult { peak_rss, ..p });
            if let Some(t) = top {
                r.lock_top_class = Some(t.name.to_string());
                r.lock_top_wait_ns = Some(t.wait_total_ns);
                r.lock_top_contended = Some(t.contended);
            }
            r.lock_held_share.clone_from(&shares);
            r
        })
        .collect();
    Ok((records, locks))
}

/// The thread counts of the header line: the given ones, or the default sweep (every
/// workload runs the same).
fn threads_text(cfg: &BenchConfig) -> String {
    format!("{:?}", cfg.sweep())
}

/// The engine variants, the workloads each runs with and its options where they differ
/// from the defaults, for the header line.
fn variants_text(cfg: &BenchConfig) -> String {
    if !matches!(cfg.target, TargetSpec::Lanefs { .. }) {
        return String::new();
    }
    // (name, options, workloads) in the order variants first appear.
    let mut each: Vec<(String, String, Vec<&str>)> = Vec::new();
    for w in &cfg.workloads {
        for v in cfg.variants_for(w) {
            let opts = v.options_text();
            match each.iter_mut().find(|(n, o, _)| *n == v.name && *o == opts) {
                Some((_, _, runs)) => runs.push(w),
                None => each.push((v.name, opts, vec![w])),
            }
        }
    }
    let each: Vec<String> = each
        .into_iter()
        .map(|(name, opts, runs)| format!("{name} [{}: {opts}]", runs.join(" ")))
        .collect();
    format!(", variants {}", each.join(" "))
}

/// The fsmark file counts, for the header line (empty when fsmark does not run).
fn fsmark_text(cfg: &BenchConfig) -> String {
    if !cfg.workloads.iter().any(|w| w == workloads::fsmark::NAME) {
        return String::new();
    }
    match cfg.fsmark_files {
        Some(n) => format!(", fsmark {n} files per thread"),
        None => format!(
            ", fsmark {} files in total split between the threads",
            workloads::fsmark::DEFAULT_TOTAL
        ),
    }
}

/// rtfrag's shape, for the header line (empty when rtfrag does not run).
fn rtfrag_text(cfg: &BenchConfig, chosen: &[&dyn Workload]) -> String {
    if !chosen.iter().any(|w| w.name() == workloads::rtfrag::NAME) {
        return String::new();
    }
    format!(", {}", cfg.rtfrag.text())
}

/// The templates of the chosen workloads that need one on this target, each built once
/// (untimed) and announced with the time it took.
fn build_templates(
    cfg: &BenchConfig,
    chosen: &[&dyn Workload],
    out: &mut dyn Write,
) -> Result<Vec<(&'static str, Template)>, String> {
    let TargetSpec::Lanefs { block_size, .. } = cfg.target else {
        return Ok(Vec::new());
    };
    let mut built = Vec::new();
    for &w in chosen {
        let t0 = std::time::Instant::now();
        let Some(t) = w.template(cfg, block_size) else {
            continue;
        };
        let t = t.map_err(|e| format!("{}: preparing its image: {e}", w.name()))?;
        say!(
            out,
            "{}: prepared its image in {:.1} s (untimed; every run starts from a copy): {}",
            w.name(),
            t0.elapsed().as_secs_f64(),
            t.about
        )?;
        built.push((w.name(), t));
    }
    Ok(built)
}

/// Why rtfrag's instructions per allocation cannot be counted in this run, or `None` when
/// they can.
fn callgrind_why_not(cfg: &BenchConfig) -> Option<&'static str> {
    use workloads::rtfrag;
    if cfg.rtfrag.callgrind_exe.is_none() {
        Some("no lanefs executable to run under valgrind (--quick, or the library was called directly)")
    } else if !cfg.threads_for(rtfrag::NAME).contains(&1) {
        Some("they are counted at 1 thread, which this run does not measure")
    } else if !rtfrag::valgrind_available() {
        Some("no valgrind/perf counters (valgrind is not installed; the bench reads no perf counters)")
    } else {
        None
    }
}

/// After the timed runs, rtfrag's instructions per allocation: each of its variants once
/// at one thread under callgrind (see [`workloads::rtfrag::count_instructions`]), the
/// figures put into the 1-thread records of that variant. Says why when it cannot.
fn rtfrag_instructions(
    cfg: &BenchConfig,
    obs: &mut dyn Observer,
    chosen: &[&dyn Workload],
    templates: &[(&'static str, Template)],
    records: &mut [Record],
    out: &mut dyn Write,
) -> Result<(), String> {
    use workloads::rtfrag;
    let Some(&w) = chosen.iter().find(|w| w.name() == rtfrag::NAME) else {
        return Ok(());
    };
    let Some((_, template)) = templates.iter().find(|(n, _)| *n == rtfrag::NAME) else {
        return Ok(());
    };
    let why_not = callgrind_why_not(cfg);
    let Some(exe) = cfg
        .rtfrag
        .callgrind_exe
        .as_deref()
        .filter(|_| why_not.is_none())
    else {
        let text = format!(
            "{}: instructions per allocation not measured: {}",
            rtfrag::NAME,
            why_not.unwrap_or_default()
        );
        return say!(
            out,
            "{}",
            report::compact::wrap(&text, report::compact::MAX_WIDTH)
        );
    };
    for target in targets(cfg, w) {
        let Target::Lanefs { variant, opts, .. } = &target else {
            continue;
        };
        let policy = opts.rt_alloc;
        obs.start(&Step {
            workload: "rtfrag under callgrind",
            variant,
            threads: 1,
            rep: 1,
            reps: 1,
        });
        let counted = rtfrag::count_instructions(exe, template, policy, &cfg.rtfrag);
        obs.finish();
        match counted {
            Ok((counts, secs)) => {
                let text: Vec<String> = counts
                    .iter()
                    .map(|(p, x)| format!("{p} {}", report::fmt_rate(*x)))
                    .collect();
                let line = format!(
                    "{}: instructions per operation under callgrind, {variant} (rt_alloc={}, 1 \
                     thread, the first 1/{} of each phase's calls, {secs:.0} s): {}",
                    rtfrag::NAME,
                    policy.name(),
                    cfg.rtfrag.callgrind_divisor,
                    text.join(", ")
                );
                say!(
                    out,
                    "{}",
                    report::compact::wrap(&line, report::compact::MAX_WIDTH)
                )?;
                for r in records.iter_mut().filter(|r| {
                    r.workload == rtfrag::NAME && r.variant == *variant && r.threads == 1
                }) {
                    r.instructions_per_op =
                        counts.iter().find(|(p, _)| *p == r.phase).map(|(_, x)| *x);
                }
            }
            Err(e) => say!(
                out,
                "{}: instructions per allocation of {variant} not measured: {e}",
                rtfrag::NAME
            )?,
        }
    }
    Ok(())
}

/// Run the benchmark `cfg` describes: for every repetition, every thread count of the sweep,
/// the control loop and then every workload that runs at that count (see
/// [`BenchConfig::threads_for`]) with every variant interleaved, each run on a fresh
/// directory or freshly formatted image. Prints a line per run (when `cfg.run_lines`) and
/// the tables to `out`, writes `cfg.json`, `cfg.svg` and `cfg.report` if set, and returns
/// every record.
pub fn run(cfg: &BenchConfig, out: &mut dyn Write) -> Result<Vec<Record>, String> {
    run_with(cfg, out, &mut NoProgress)
}

/// [`run`], telling `obs` about every timed run as it starts and finishes (the command
/// line's progress bar).
pub fn run_with(
    cfg: &BenchConfig,
    out: &mut dyn Write,
    obs: &mut dyn Observer,
) -> Result<Vec<Record>, String> {
    cfg.validate()?;
    let records = match cfg.target {
        TargetSpec::Compare { size } => compare::run(cfg, size, out, obs)?,
        _ => run_sweep(cfg, out, obs)?,
    };
    outputs::write(cfg, &records, out)?;
    Ok(records)
}

/// The chosen workloads that run on this target (a path target skips the engine-only
/// ones, each with a line) and the target's label.
fn runnable(
    cfg: &BenchConfig,
    out: &mut dyn Write,
) -> Result<(Vec<&'static dyn Workload>, String), String> {
    let chosen: Vec<&'static dyn Workload> = cfg
        .workloads
        .iter()
        .filter_map(|n| workloads::find(n))
        .collect();
    let label = chosen
        .first()
        .and_then(|&w| targets(cfg, w).first().map(Target::label))
        .unwrap_or_default();
    if matches!(cfg.target, TargetSpec::Lanefs { .. }) {
        return Ok((chosen, label));
    }
    let (skip, keep): (Vec<_>, Vec<_>) = chosen.into_iter().partition(|w| w.engine_only());
    for w in &skip {
        say!(
            out,
            "{} runs on the engine in-process only (its image has a realtime device); \
             skipping it on {label}",
            w.name()
        )?;
    }
    if keep.is_empty() {
        return Err(format!("nothing to run on {label}"));
    }
    Ok((keep, label))
}

/// The run's header line: target, variants, workloads, thread counts, repetitions, times
/// and shapes.
fn header_text(cfg: &BenchConfig, chosen: &[&dyn Workload], label: &str, cpus: usize) -> String {
    let names: Vec<&str> = chosen.iter().map(|w| w.name()).collect();
    let engine = matches!(cfg.target, TargetSpec::Lanefs { .. });
    let variants = if cfg.verbose || !cfg.variants.is_empty() || !engine {
        variants_text(cfg)
    } else {
        ", each workload with its seed's variants (--verbose or --report lists their options)"
            .to_string()
    };
    format!(
        "lanefs bench on {label}{variants}: {} x threads {} x {} reps, {} s per timed run ({} s \
         warm-up), {} files per thread{}{}, {cpus} CPUs",
        names.join("+"),
        threads_text(cfg),
        cfg.reps,
        cfg.seconds,
        cfg.warmup,
        cfg.files,
        fsmark_text(cfg),
        rtfrag_text(cfg, chosen),
    )
}

/// The timed runs the sweep will make: per repetition and thread count the control loop
/// and each workload's variants there, then rtfrag's callgrind runs.
fn planned_runs(cfg: &BenchConfig, chosen: &[&dyn Workload]) -> usize {
    let per_rep: usize = cfg
        .sweep()
        .iter()
        .map(|&t| {
            1 + chosen
                .iter()
                .filter(|w| cfg.threads_for(w.name()).contains(&t))
                .map(|&w| targets(cfg, w).len())
                .sum::<usize>()
        })
        .sum();
    let callgrind_runs = chosen
        .iter()
        .find(|w| w.name() == workloads::rtfrag::NAME && callgrind_why_not(cfg).is_none())
        .map_or(0, |&w| targets(cfg, w).len());
    per_rep * cfg.reps + callgrind_runs
}

/// A run's lock statistics: its journal share as a line (with the run lines), and after
/// the last repetition the whole table.
fn say_locks(
    cfg: &BenchConfig,
    out: &mut dyn Write,
    run: &str,
    last_rep: bool,
    stats: &[LockStat],
) -> Result<(), String> {
    if cfg.run_lines {
        say!(
            out,
            "journal locks: {run}: {}",
            report::journal_lock_share(stats)
        )?;
    }
    if last_rep {
        let table = engine::lockstat_table(stats);
        say!(out, "lock statistics: {run}\n{table}")?;
    }
    Ok(())
}

/// The timed runs of an engine or path target, in sweep order.
fn run_sweep(
    cfg: &BenchConfig,
    out: &mut dyn Write,
    obs: &mut dyn Observer,
) -> Result<Vec<Record>, String> {
    let (warmup, duration) = (cfg.warmup_duration()?, cfg.duration()?);
    let (chosen, label) = runnable(cfg, out)?;
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    let lockstat = cfg.lockstat && matches!(cfg.target, TargetSpec::Lanefs { .. });
    if cfg.lockstat && !lockstat {
        say!(
            out,
            "lock statistics apply to the lanefs target only; ignoring --lockstat"
        )?;
    }
    let _lockstat_on = LockstatOn::new(lockstat);
    say!(out, "{}", header_text(cfg, &chosen, &label, cpus))?;
    obs.plan(planned_runs(cfg, &chosen));
    let templates = build_templates(cfg, &chosen, out)?;
    let mut records = Vec::new();
    for rep in 1..=cfg.reps {
        for threads in cfg.sweep() {
            let oversubscribed = threads > cpus;
            obs.start(&Step {
                workload: control::NAME,
                variant: PATH_VARIANT,
                threads,
                rep,
                reps: cfg.reps,
            });
            let ctl = control::run(threads, warmup, duration)
                .map_err(|e| format!("control loop at {threads} threads: {e}"))?;
            obs.finish();
            let o = Origin {
                workload: control::NAME,
                target: &label,
                variant: PATH_VARIANT,
                threads,
                rep,
                oversubscribed,
            };
            let r = record(&o, ctl);
            progress(cfg, out, &r)?;
            records.push(r);
            for &w in &chosen {
                if !cfg.threads_for(w.name()).contains(&threads) {
                    continue;
                }
                let template = templates
                    .iter()
                    .find(|(n, _)| *n == w.name())
                    .map(|(_, t)| t);
                for target in &targets(cfg, w) {
                    let o = Origin {
                        workload: w.name(),
                        variant: target.variant(),
                        ..o
                    };
                    obs.start(&Step {
                        workload: w.name(),
                        variant: o.variant,
                        threads,
                        rep,
                        reps: cfg.reps,
                    });
                    let (recs, locks) = run_one(cfg, w, target, template, threads, &o, lockstat)?;
                    obs.finish();
                    for r in recs {
                        progress(cfg, out, &r)?;
                        records.push(r);
                    }
                    if let Some(stats) = locks {
                        let run =
                            format!("{} [{}] threads {threads}, rep {rep}", w.name(), o.variant);
                        say_locks(cfg, out, &run, rep == cfg.reps, &stats)?;
                    }
                }
            }
        }
    }
    rtfrag_instructions(cfg, obs, &chosen, &templates, &mut records, out)?;
    Ok(records)
}
