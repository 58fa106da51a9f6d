//! Records of runs, and the terminal table and JSON made from them.

use crate::variant::Family;
use crate::workloads::control;
use comfy_table::{presets, CellAlignment, Table};
use lanefs::internals::sync::LockStat;
use serde::{Deserialize, Serialize};
use std::path::Path;

pub mod chart;
pub mod compact;
mod pages;
pub(crate) mod rtfrag;
mod run;
pub mod saturation;
pub mod seeds;

/// A compare run's target names in records and tables (`lanefs bench --compare`), in
/// the order its runs interleave: lanefs's FUSE mount.
pub const LANEFS: &str = "lanefs-fuse";
/// lanefs's FUSE mount over /dev/fuse (`-o no_io_uring`), when the default transport is
/// FUSE-over-io_uring.
pub const LANEFS_DEV: &str = "lanefs-devfuse";
/// The FUSE ceiling: `lanefs memfs`, an in-memory file system behind the same frontend
/// and transport as [`LANEFS`].
pub const MEMFS: &str = "memfs";
/// The same over /dev/fuse, beside [`LANEFS_DEV`].
pub const MEMFS_DEV: &str = "memfs-devfuse";
/// fuse2fs (e2fsprogs' FUSE driver), the baseline of a compare run's ratios.
pub const FUSE2FS: &str = "fuse2fs";
/// The kernel's ext4 on a loop device.
pub const KERNEL: &str = "kernel-ext4";
/// Target name of a compare run's control loop records.
pub const CONTROL_TARGET: &str = "-";

/// One phase of one run: what ran where, and how fast.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// Workload name ("fallocate2", "mdtest", "mdtest-shared", "fsmark", "stat", "fsync",
    /// "bufio64k", "bufio", "rtfrag", "control").
    pub workload: String,
    /// Timed phase ("fallocate", "create", "remove", "lookup", "fsync", "write", "read",
    /// "loop"; bufio's and rtfrag's own: "alloc", "alloc-hint", "free", "realloc").
    pub phase: String,
    /// "lanefs" or "path:DIR".
    pub target: String,
    /// Variant name ("-" for a path target and for the control loop).
    pub variant: String,
    /// Worker threads.
    pub threads: usize,
    /// Repetition, from 1.
    pub rep: usize,
    /// Operations in the measured time, all threads together.
    pub ops: u64,
    /// Measured seconds.
    pub seconds: f64,
    /// Total operations per second.
    pub ops_per_sec: f64,
    /// Each thread's operations per second.
    pub per_thread_ops_per_sec: Vec<f64>,
    /// More threads than the machine has CPUs.
    pub oversubscribed: bool,
    /// Journal commits in the measured time (engine targets; `None` elsewhere).
    #[serde(default)]
    pub journal_commits: Option<u64>,
    /// Bytes written to the journal's log in the measured time (log blocks x block size).
    #[serde(default)]
    pub journal_log_bytes: Option<u64>,
    /// Journal commits per second of measured time.
    #[serde(default)]
    pub commits_per_s: Option<f64>,
    /// Journal log bytes per operation.
    #[serde(default)]
    pub journal_bytes_per_op: Option<f64>,
    /// Average extents per 1 MiB file after the run (fallocate2 on the engine).
    #[serde(default)]
    pub extents_per_file: Option<f64>,
    /// Maximal runs of free blocks after the run, with each thread's completed file still
    /// open (fallocate2 on the engine).
    #[serde(default)]
    pub free_extents: Option<u64>,
    /// Average run of free blocks after the run, in KiB (fallocate2 on the engine).
    #[serde(default)]
    pub avg_free_extent_kib: Option<f64>,
    /// CPU seconds (user + system) the target's FUSE daemon used in the measured time
    /// (`--compare`'s FUSE targets; `None` elsewhere).
    #[serde(default)]
    pub daemon_cpu_seconds: Option<f64>,
    /// The daemon's CPU time per operation, in microseconds.
    #[serde(default)]
    pub daemon_cpu_us_per_op: Option<f64>,
    /// CPU seconds (user + system, all threads) the bench process used in the measured
    /// time: the engine's whole work in-process; for a path target only the bench's side
    /// (its syscalls, not the kernel's background threads nor a FUSE daemon). `None` for
    /// the control loop.
    #[serde(default)]
    pub cpu_seconds: Option<f64>,
    /// `cpu_seconds` per operation, in microseconds.
    #[serde(default)]
    pub cpu_per_op_us: Option<f64>,
    /// Inodes in the engine's inode cache after the run (mdtest, fsmark and stat on the
    /// engine).
    #[serde(default)]
    pub icache_inodes: Option<u64>,
    /// Bytes those inodes account for in the cache.
    #[serde(default)]
    pub icache_bytes: Option<u64>,
    /// The most bytes the inode cache held at once since mount (setup included).
    #[serde(default)]
    pub icache_peak_bytes: Option<u64>,
    /// `icache_bytes / icache_inodes` (`None` when the cache is empty).
    #[serde(default)]
    pub icache_bytes_per_inode: Option<f64>,
    /// The inode cache's limit in bytes (`icache_limit=`; 0 from an engine that reports none).
    #[serde(default)]
    pub icache_limit: Option<u64>,
    /// Inodes the cache evicted since mount, i.e. during the run and its setup.
    #[serde(default)]
    pub icache_evictions: Option<u64>,
    /// Bytes of metadata blocks in the engine's buffer cache after the run.
    #[serde(default)]
    pub bufcache_bytes: Option<u64>,
    /// The buffer cache's limit in bytes (`bufcache_limit=`).
    #[serde(default)]
    pub bufcache_limit: Option<u64>,
    /// The bench process's peak resident set size during the run, setup included
    /// (`VmHWM`, reset before each run; engine targets).
    #[serde(default)]
    pub peak_rss_bytes: Option<u64>,
    /// File bytes read per operation (bufio; for its memcpy control, bytes copied).
    #[serde(default)]
    pub read_bytes_per_op: Option<f64>,
    /// File bytes written per operation (bufio).
    #[serde(default)]
    pub written_bytes_per_op: Option<f64>,
    /// Device reads the engine's page cache made in the measured time.
    #[serde(default)]
    pub device_reads: Option<u64>,
    /// Bytes those device reads read.
    #[serde(default)]
    pub device_read_bytes: Option<u64>,
    /// Realtime allocations in the measured time (rtfrag on the engine; `None` elsewhere).
    #[serde(default)]
    pub rt_allocations: Option<u64>,
    /// Realtime frees in the measured time (one per freed run).
    #[serde(default)]
    pub rt_frees: Option<u64>,
    /// Realtime bitmap blocks the allocations fetched in the measured time.
    #[serde(default)]
    pub rt_bitmap_reads: Option<u64>,
    /// Realtime summary blocks the allocations fetched in the measured time.
    #[serde(default)]
    pub rt_summary_reads: Option<u64>,
    /// `rt_bitmap_reads / rt_allocations` (`None` without allocations).
    #[serde(default)]
    pub rt_bitmap_reads_per_alloc: Option<f64>,
    /// `rt_summary_reads / rt_allocations` (`None` without allocations).
    #[serde(default)]
    pub rt_summary_reads_per_alloc: Option<f64>,
    /// The hash of every realtime allocation decision since mount, at the phase's end, as
    /// 16 hex digits (equal for every allocator policy given the same state and requests).
    #[serde(default)]
    pub rt_decisions: Option<String>,
    /// Free realtime extents at the phase's end.
    #[serde(default)]
    pub rt_free_extents: Option<u64>,
    /// Instructions per operation of the phase, counted under `valgrind --tool=callgrind`
    /// in a run of its own (rtfrag, where valgrind is installed; `None` when not measured).
    #[serde(default)]
    pub instructions_per_op: Option<f64>,
    /// The engine's lock class that waited longest in the run (`--lockstat` only; every
    /// phase of a run carries its run's), as `perf lock contention` ranks them.
    #[serde(default)]
    pub lock_top_class: Option<String>,
    /// That class's total wait in the run, all threads, in nanoseconds.
    #[serde(default)]
    pub lock_top_wait_ns: Option<u64>,
    /// That class's acquisitions that had to wait, in the run.
    #[serde(default)]
    pub lock_top_contended: Option<u64>,
    /// Each lock class's share of one thread's time spent holding it exclusively in the
    /// run: its hold time, all threads, over threads x the run's wall time (`--lockstat`
    /// only; every phase of a run carries its run's; classes never held are left out).
    #[serde(default)]
    pub lock_held_share: Option<Vec<(String, f64)>>,
}

impl Record {
    /// Bytes moved per second (read + written) in GiB/s, where the record counts file bytes
    /// per operation (bufio, bufio64k).
    pub fn bandwidth_gib_s(&self) -> Option<f64> {
        Some(self.read_gib_s()? + self.written_gib_s().unwrap_or(0.0))
    }

    /// Bytes read (or copied) per second, in GiB/s, where the record has file bytes per
    /// operation.
    pub fn read_gib_s(&self) -> Option<f64> {
        self.read_bytes_per_op.map(|b| b * self.ops_per_sec / GIB)
    }

    /// Bytes written per second, in GiB/s, where the record has file bytes per operation.
    pub fn written_gib_s(&self) -> Option<f64> {
        self.written_bytes_per_op
            .map(|b| b * self.ops_per_sec / GIB)
    }

    /// The average device read in KiB, where the record counts device reads and has some.
    pub fn device_read_kib(&self) -> Option<f64> {
        match (self.device_reads, self.device_read_bytes) {
            (Some(n), Some(b)) if n > 0 => Some(b as f64 / n as f64 / 1024.0),
            _ => None,
        }
    }
}

/// Whether `workload`'s tables and charts count GiB/s rather than ops/s: the page-cache
/// workloads of 64 KiB calls (bufio, bufio64k).
pub(crate) fn is_bandwidth(workload: &str) -> bool {
    workload == crate::workloads::bufio::NAME || workload == crate::workloads::bufio64k::NAME
}

/// A record's rate in its workload's unit: for bufio and bufio64k GiB/s of their 64 KiB
/// calls (bytes read + written where the record counts them, as seed 002's tables; else
/// calls x 64 KiB), for every other ops/s.
pub(crate) fn rate(workload: &str, r: &Record) -> f64 {
    if !is_bandwidth(workload) {
        return r.ops_per_sec;
    }
    r.bandwidth_gib_s()
        .unwrap_or(r.ops_per_sec * crate::workloads::bufio::CHUNK as f64 / GIB)
}

/// Bytes in a GiB.
const GIB: f64 = (1u64 << 30) as f64;

/// Write `records` to `path` as a JSON array.
pub fn write_json(records: &[Record], path: &Path) -> Result<(), String> {
    let text = serde_json::to_string_pretty(records)
        .map_err(|e| format!("encoding records as JSON: {e}"))?;
    std::fs::write(path, text + "\n").map_err(|e| format!("writing {}: {e}", path.display()))
}

/// Read the records [`write_json`] wrote to `path`.
pub fn read_json(path: &Path) -> Result<Vec<Record>, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("decoding records of {}: {e}", path.display()))
}

/// Median, min and max of a non-empty sample; zeros for an empty one.
pub(crate) fn summary(mut v: Vec<f64>) -> (f64, f64, f64) {
    if v.is_empty() {
        return (0.0, 0.0, 0.0);
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let median = if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    };
    (median, v[0], v[n - 1])
}

/// Records that differ only in their repetition.
struct Group<'a> {
    workload: &'a str,
    phase: &'a str,
    target: &'a str,
    variant: &'a str,
    threads: usize,
    recs: Vec<&'a Record>,
}

impl Group<'_> {
    fn series(&self) -> (&str, &str, &str, &str) {
        (self.workload, self.phase, self.target, self.variant)
    }
    fn median(&self) -> f64 {
        summary(self.recs.iter().map(|r| r.ops_per_sec).collect()).0
    }
    /// Median of an optional field over the repetitions that have it.
    fn median_of(&self, field: impl Fn(&Record) -> Option<f64>) -> Option<f64> {
        let v: Vec<f64> = self.recs.iter().filter_map(|r| field(r)).collect();
        (!v.is_empty()).then(|| summary(v).0)
    }
}

/// Group records by series (first appearance order) and then by thread count (ascending).
fn group(records: &[Record]) -> Vec<Group<'_>> {
    let mut series: Vec<(&str, &str, &str, &str)> = Vec::new();
    let mut groups: Vec<Group<'_>> = Vec::new();
    for r in records {
        let key = (
            r.workload.as_str(),
            r.phase.as_str(),
            r.target.as_str(),
            r.variant.as_str(),
        );
        if !series.contains(&key) {
            series.push(key);
        }
        match groups
            .iter_mut()
            .find(|g| g.series() == key && g.threads == r.threads)
        {
            Some(g) => g.recs.push(r),
            None => groups.push(Group {
                workload: key.0,
                phase: key.1,
                target: key.2,
                variant: key.3,
                threads: r.threads,
                recs: vec![r],
            }),
        }
    }
    groups.sort_by_key(|g| (series.iter().position(|s| *s == g.series()), g.threads));
    groups
}

/// Scaling efficiency of `g` within its series: ops/s per thread at `g.threads` over ops/s
/// per thread at the series' smallest thread count (normally 1).
fn efficiency(groups: &[Group<'_>], g: &Group<'_>) -> Option<f64> {
    let base = groups
        .iter()
        .filter(|b| b.series() == g.series())
        .min_by_key(|b| b.threads)?;
    let base_rate = base.median() / base.threads as f64;
    (base_rate > 0.0).then(|| g.median() / g.threads as f64 / base_rate)
}

/// The control loop's efficiency at `threads` on `target`.
fn control_efficiency(groups: &[Group<'_>], target: &str, threads: usize) -> Option<f64> {
    let c = groups
        .iter()
        .find(|c| c.workload == control::NAME && c.target == target && c.threads == threads)?;
    efficiency(groups, c)
}

pub use crate::timing::fmt_rate;

/// Add `x` to `v` unless it is there (the variants, phases and thread counts of a run, in
/// the order they first appear).
pub(crate) fn push_unique<T: PartialEq>(v: &mut Vec<T>, x: T) {
    if !v.contains(&x) {
        v.push(x);
    }
}

fn fmt_eff(e: Option<f64>) -> String {
    e.map_or_else(|| "-".to_string(), |e| format!("{e:.2}"))
}

/// A rate or size that may be small (commits/s, bytes/op): one decimal below 100, "-" when
/// the target has no journal counters.
pub fn fmt_amount(v: Option<f64>) -> String {
    match v {
        None => "-".to_string(),
        Some(v) if v.abs() < 100.0 => format!("{v:.1}"),
        Some(v) => fmt_rate(v),
    }
}

/// A count that may be a median of two (free extents): whole numbers with separators,
/// others with one decimal; "-" when missing.
pub fn fmt_count(v: Option<f64>) -> String {
    match v {
        Some(v) if v.fract() != 0.0 => format!("{v:.1}"),
        Some(v) => fmt_rate(v),
        None => "-".to_string(),
    }
}

/// The terminal table: one row per workload, phase, variant and thread count, with the
/// median ops/s over repetitions, min, max, median per-thread ops/s, scaling efficiency,
/// the control loop's efficiency at the same thread count, and (when some record has
/// journal counters) the median journal commits/s and log bytes per operation, (when some
/// record has them) extents per file and free-space fragmentation; then the comparison
/// against base of [`render_vs_base`].
pub fn render_table(records: &[Record]) -> String {
    let groups = group(records);
    let show_journal = records.iter().any(|r| r.commits_per_s.is_some());
    let show_extents = records.iter().any(|r| r.extents_per_file.is_some());
    let show_free = records
        .iter()
        .any(|r| r.free_extents.is_some() || r.avg_free_extent_kib.is_some());
    let show_cpu = records.iter().any(|r| r.cpu_per_op_us.is_some());
    let mut targets: Vec<&str> = Vec::new();
    for g in &groups {
        if !targets.contains(&g.target) {
            targets.push(g.target);
        }
    }
    let show_target = targets.len() > 1;
    let mut header = vec!["workload", "phase"];
    if show_target {
        header.push("target");
    }
    header.extend([
        "variant",
        "threads",
        "ops/s median",
        "min",
        "max",
        "per thread",
        "reps",
        "efficiency",
        "control eff",
    ]);
    if show_journal {
        header.extend(["commits/s", "journal B/op"]);
    }
    if show_extents {
        header.push("extents/file");
    }
    if show_free {
        header.extend(["free extents", "avg free KiB"]);
    }
    if show_cpu {
        header.push("CPU us/op");
    }
    header.push("note");
    let mut table = Table::new();
    table
        .load_style(presets::UTF8_FULL_CONDENSED)
        .set_header(header);
    for g in &groups {
        let (median, min, max) = summary(g.recs.iter().map(|r| r.ops_per_sec).collect());
        let per_thread = summary(
            g.recs
                .iter()
                .flat_map(|r| r.per_thread_ops_per_sec.iter().copied())
                .collect(),
        )
        .0;
        let ctl = if g.workload == control::NAME {
            "-".to_string()
        } else {
            fmt_eff(control_efficiency(&groups, g.target, g.threads))
        };
        let over = g.recs.iter().any(|r| r.oversubscribed);
        let mut row = vec![g.workload.to_string(), g.phase.to_string()];
        if show_target {
            row.push(g.target.to_string());
        }
        row.extend([
            g.variant.to_string(),
            g.threads.to_string(),
            fmt_rate(median),
            fmt_rate(min),
            fmt_rate(max),
            fmt_rate(per_thread),
            g.recs.len().to_string(),
            fmt_eff(efficiency(&groups, g)),
            ctl,
        ]);
        if show_journal {
            row.push(fmt_amount(g.median_of(|r| r.commits_per_s)));
            row.push(fmt_amount(g.median_of(|r| r.journal_bytes_per_op)));
        }
        if show_extents {
            row.push(fmt_amount(g.median_of(|r| r.extents_per_file)));
        }
        if show_free {
            row.push(fmt_count(g.median_of(|r| r.free_extents.map(|n| n as f64))));
            row.push(fmt_amount(g.median_of(|r| r.avg_free_extent_kib)));
        }
        if show_cpu {
            row.push(fmt_amount(g.median_of(|r| r.cpu_per_op_us)));
        }
        row.push(if over { "oversubscribed" } else { "" }.to_string());
        table.add_row(row);
    }
    let first_num = if show_target { 4 } else { 3 };
    let numeric = 8
        + if show_journal { 2 } else { 0 }
        + usize::from(show_extents)
        + if show_free { 2 } else { 0 }
        + usize::from(show_cpu);
    for i in first_num..first_num + numeric {
        if let Some(col) = table.column_mut(i) {
            col.set_cell_alignment(CellAlignment::Right);
        }
    }
    let mut out = String::new();
    if !show_target {
        if let Some(t) = targets.first() {
            out.push_str(&format!("target: {t}\n"));
        }
    }
    out.push_str(&table.to_string());
    out.push('\n');
    out.push_str(
        "efficiency = ops/s at N threads / (N x ops/s at the fewest threads); \
         control eff = the same for a loop that shares no memory (the ceiling)\n",
    );
    if show_journal {
        out.push_str(
            "commits/s = journal commits per second of measured time; \
             journal B/op = bytes written to the journal's log per operation\n",
        );
    }
    if show_extents {
        out.push_str(
            "extents/file = extents mapping each thread's 1 MiB file after the run \
             (its last file completed in the workload's own 8 KiB steps)\n",
        );
    }
    if show_free {
        out.push_str(FREE_LEGEND);
        out.push('\n');
    }
    if show_cpu {
        out.push_str(CPU_LEGEND);
        out.push('\n');
    }
    out.push_str(&render_icache(records));
    out.push_str(&render_vs_base(records));
    out
}

/// Legend of the CPU columns.
const CPU_LEGEND: &str = "CPU us/op = CPU time (user + system, all threads) of the bench \
     process in the measured time, per operation: all of the engine's work in-process; for a \
     path target only the bench's side of the syscalls (not the kernel's background threads \
     nor a FUSE daemon)";

/// Bytes as MiB with one decimal; "-" when missing.
pub fn fmt_mib(v: Option<f64>) -> String {
    v.map_or_else(
        || "-".to_string(),
        |b| format!("{:.1} MiB", b / f64::from(1u32 << 20)),
    )
}

/// The inode cache after each run that reports it (fsmark and stat on the engine), with
/// the process's peak memory beside the cache's limit: one row per workload phase, target,
/// variant and thread count, medians over repetitions. Empty when no record has the figures.
pub fn render_icache(records: &[Record]) -> String {
    let groups: Vec<Group<'_>> = group(records)
        .into_iter()
        .filter(|g| g.recs.iter().any(|r| r.icache_inodes.is_some()))
        .collect();
    if groups.is_empty() {
        return String::new();
    }
    let header = [
        "workload",
        "phase",
        "target",
        "variant",
        "threads",
        "cached inodes",
        "B/inode",
        "cached",
        "peak",
        "limit",
        "evictions",
        "buffers",
        "buf limit",
        "peak RSS",
    ]
    .map(String::from)
    .to_vec();
    let rows = groups
        .iter()
        .map(|g| {
            let m = |f: fn(&Record) -> Option<u64>| g.median_of(|r| f(r).map(|v| v as f64));
            vec![
                g.workload.to_string(),
                g.phase.to_string(),
                g.target.to_string(),
                g.variant.to_string(),
                g.threads.to_string(),
                fmt_count(m(|r| r.icache_inodes)),
                fmt_amount(g.median_of(|r| r.icache_bytes_per_inode)),
                fmt_mib(m(|r| r.icache_bytes)),
                fmt_mib(m(|r| r.icache_peak_bytes)),
                fmt_mib(m(|r| r.icache_limit)),
                fmt_count(m(|r| r.icache_evictions)),
                fmt_mib(m(|r| r.bufcache_bytes)),
                fmt_mib(m(|r| r.bufcache_limit)),
                fmt_mib(m(|r| r.peak_rss_bytes)),
            ]
        })
        .collect();
    format!(
        "\ninode cache after the run, and the buffer cache (medians over reps)\n{}\n{ICACHE_LEGEND}\n",
        comparison_table(header, rows, 4)
    )
}

/// Legend of the inode cache table.
const ICACHE_LEGEND: &str = "cached inodes, B/inode, cached = the engine's inode cache after \
     the run and the bytes it accounts for; peak = the most bytes it held at once since \
     mount (setup included); limit = its icache_limit (0: the engine reports \
     none); evictions = inodes evicted since mount; buffers, buf limit = the metadata buffer \
     cache after the run (with the journal's copies awaiting checkpoint) and its bufcache_limit \
     (clean blocks are evicted past it, the journal checkpoints when dirty blocks and copies \
     pass half); peak RSS = the whole bench process's peak \
     resident memory during the run, setup included (VmHWM, reset before each run), to read \
     beside limit + buf limit";

/// Variant every other one is compared with in [`render_vs_base`].
pub const BASE_VARIANT: &str = "base";

/// Where the numbers come from, for the legends of the comparison tables.
pub(crate) const TARGET_LEGEND: &str =
    "lanefs = the engine in-process (function calls, no kernel); \
     path:<dir> (--path) = real syscalls into the kernel's file system";

/// Legend of the free-space columns.
const FREE_LEGEND: &str = "free extents = maximal runs of free blocks after the run, with \
     every thread's completed 1 MiB file still open; avg free KiB = free space / free extents";

/// One workload phase on one target, with every variant measured on it.
struct Series<'a> {
    workload: &'a str,
    phase: &'a str,
    target: &'a str,
    /// The variant the others are compared with (see [`baseline`]).
    baseline: &'a str,
    /// Variant names in first-appearance order.
    variants: Vec<&'a str>,
    /// Thread counts, ascending.
    threads: Vec<usize>,
    recs: Vec<&'a Record>,
}

impl<'a> Series<'a> {
    /// The records of `variant` at `threads`.
    fn cell(&self, variant: &str, threads: usize) -> Vec<&'a Record> {
        self.recs
            .iter()
            .copied()
            .filter(|r| r.variant == variant && r.threads == threads)
            .collect()
    }

    /// Median over repetitions of `field`, for `variant` at `threads`; `None` when no
    /// record there has it.
    fn median(
        &self,
        variant: &str,
        threads: usize,
        field: impl Fn(&Record) -> Option<f64>,
    ) -> Option<f64> {
        let v: Vec<f64> = self
            .cell(variant, threads)
            .into_iter()
            .filter_map(field)
            .collect();
        (!v.is_empty()).then(|| summary(v).0)
    }

    /// Median over repetitions of ops/s per thread (the seed's ops/s per container).
    fn per_thread(&self, variant: &str, threads: usize) -> Option<f64> {
        self.median(variant, threads, |r| {
            Some(ratio(r.ops_per_sec, r.threads as f64))
        })
    }

    /// Whether any record at `threads` ran with more threads than CPUs.
    fn oversubscribed(&self, threads: usize) -> bool {
        self.recs
            .iter()
            .any(|r| r.threads == threads && r.oversubscribed)
    }
}

/// `num / den`, or zero when `den` is zero.
fn ratio(num: f64, den: f64) -> f64 {
    if den > 0.0 {
        num / den
    } else {
        0.0
    }
}

/// The series that have two or more variants, one of them a baseline (see [`baseline`]),
/// in first-appearance order.
fn vs_base_series(records: &[Record]) -> Vec<Series<'_>> {
    let mut all: Vec<Series<'_>> = Vec::new();
    for r in records {
        let key = (r.workload.as_str(), r.phase.as_str(), r.target.as_str());
        let s = match all
            .iter_mut()
            .position(|s| (s.workload, s.phase, s.target) == key)
        {
            Some(i) => &mut all[i],
            None => {
                all.push(Series {
                    workload: key.0,
                    phase: key.1,
                    target: key.2,
                    baseline: "",
                    variants: Vec::new(),
                    threads: Vec::new(),
                    recs: Vec::new(),
                });
                let last = all.len() - 1;
                &mut all[last]
            }
        };
        push_unique(&mut s.variants, &r.variant);
        push_unique(&mut s.threads, r.threads);
        s.recs.push(r);
    }
    for s in &mut all {
        s.baseline = baseline(s.workload, &s.variants).unwrap_or("");
        s.threads.sort_unstable();
    }
    all.retain(|s| s.variants.len() >= 2 && !s.baseline.is_empty());
    all
}

/// The family of workload `name`, when it is a registered workload.
pub(crate) fn family_of(name: &str) -> Option<Family> {
    crate::workloads::find(name).map(|w| w.family())
}

/// The variant of `variants` a seed table compares the others with: the first of the
/// workload family's baselines that ran (`base`; for the inode workloads `base`, else
/// `global`), or [`BASE_VARIANT`] for a workload of no family.
pub(crate) fn baseline<'a>(workload: &str, variants: &[&'a str]) -> Option<&'a str> {
    let wanted = family_of(workload).map_or(&[BASE_VARIANT][..], Family::baselines);
    wanted
        .iter()
        .find_map(|b| variants.iter().copied().find(|v| v == b))
}

/// A change of `v` against `base` as the seed prints it: "+74.2%", "-3.0%"; `None`
/// when `base` is not a positive rate.
pub(crate) fn fmt_change(v: f64, base: f64) -> Option<String> {
    if !(base > 0.0 && v.is_finite() && base.is_finite()) {
        return None;
    }
    // Round first so that a tiny loss prints as +0.0%, not -0.0%.
    let pct = ((v / base - 1.0) * 1000.0).round() / 10.0;
    let pct = if pct == 0.0 { 0.0 } else { pct };
    Some(format!("{pct:+.1}%"))
}

/// A table with the compact style and every column but the first `text_cols` right-aligned.
fn comparison_table(header: Vec<String>, rows: Vec<Vec<String>>, text_cols: usize) -> String {
    let width = header.len();
    let mut table = Table::new();
    table
        .load_style(presets::UTF8_FULL_CONDENSED)
        .set_header(header);
    for row in rows {
        table.add_row(row);
    }
    for i in text_cols..width {
        if let Some(col) = table.column_mut(i) {
            col.set_cell_alignment(CellAlignment::Right);
        }
    }
    table.to_string()
}

/// A seed's table for one series: one row per variant, one column per thread count, each
/// cell `value(variant, threads)` formatted by `fmt`, with its change against the series'
/// baseline at the same thread count (not in the baseline's own row).
fn render_changes(
    s: &Series<'_>,
    value: impl Fn(&str, usize) -> Option<f64>,
    fmt: impl Fn(f64) -> String,
) -> String {
    let mut header = vec!["variant".to_string()];
    for &t in &s.threads {
        let unit = if t == 1 { "thread" } else { "threads" };
        let over = if s.oversubscribed(t) { "*" } else { "" };
        header.push(format!("{t} {unit}{over}"));
    }
    let rows = s
        .variants
        .iter()
        .map(|&v| {
            let mut row = vec![v.to_string()];
            for &t in &s.threads {
                let base = value(s.baseline, t);
                row.push(match value(v, t) {
                    None => "-".to_string(),
                    Some(x) if v == s.baseline => fmt(x),
                    Some(x) => match base.and_then(|b| fmt_change(x, b)) {
                        Some(change) => format!("{} ({change})", fmt(x)),
                        None => fmt(x),
                    },
                });
            }
            row
        })
        .collect();
    comparison_table(header, rows, 1)
}

/// Fragmentation per variant and thread count, or `None` when no record of the series
/// has extents or free-space figures.
fn render_fragmentation(s: &Series<'_>) -> Option<String> {
    let any = s.recs.iter().any(|r| {
        r.extents_per_file.is_some() || r.free_extents.is_some() || r.avg_free_extent_kib.is_some()
    });
    if !any {
        return None;
    }
    let header = [
        "variant",
        "threads",
        "extents/file",
        "free extents",
        "avg free KiB",
    ]
    .map(String::from)
    .to_vec();
    let mut rows = Vec::new();
    for &v in &s.variants {
        for &t in &s.threads {
            if s.cell(v, t).is_empty() {
                continue;
            }
            rows.push(vec![
                v.to_string(),
                t.to_string(),
                fmt_amount(s.median(v, t, |r| r.extents_per_file)),
                fmt_count(s.median(v, t, |r| r.free_extents.map(|n| n as f64))),
                fmt_amount(s.median(v, t, |r| r.avg_free_extent_kib)),
            ]);
        }
    }
    Some(comparison_table(header, rows, 1))
}

/// The seed-shaped summaries: for every workload phase and target with two or more
/// variants, one of them a baseline (the family's first that ran), a table of each variant against
/// the baseline per thread count. For the inode workloads (seeds 001 and 004) a cell is
/// the median total rate (creates/s, removes/s, files/s, lookups/s), and where the records
/// carry the inode cache's figures (fsmark, stat) a second table gives the CPU time per
/// operation. For the others (seed 000) a cell is the median ops/s per thread, followed,
/// when the records carry them, by a table of extents per file and free-space
/// fragmentation. The page-cache workloads (seed 002: bufio) get one set of tables per
/// target, with every phase, even of one variant (see `pages::render`), and so does the
/// realtime allocator's (seed 003: rtfrag, with issue 14's goals; see `rtfrag::render`).
/// Empty when no series qualifies.
pub fn render_vs_base(records: &[Record]) -> String {
    let mut out = String::new();
    for s in vs_base_series(records) {
        match family_of(s.workload) {
            Some(Family::Inodes) => out.push_str(&render_inodes_series(&s)),
            Some(Family::Pages | Family::Realtime) => {}
            _ => out.push_str(&render_blocks_series(&s)),
        }
    }
    out.push_str(&pages::render(records));
    out.push_str(&rtfrag::render(records));
    out
}

/// "1 rep" or "median of N reps", for the tables' titles.
fn reps_text(s: &Series<'_>) -> String {
    match s.recs.iter().map(|r| r.rep).max().unwrap_or(0) {
        1 => "1 rep".to_string(),
        n => format!("median of {n} reps"),
    }
}

/// "; * = more threads than CPUs" when some thread count of `s` was oversubscribed.
fn over_text(s: &Series<'_>) -> &'static str {
    if s.threads.iter().any(|&t| s.oversubscribed(t)) {
        "; * = more threads than CPUs"
    } else {
        ""
    }
}

/// Seed 000's shape for one series: ops/s per thread against the baseline, then
/// contiguity when the records have it.
fn render_blocks_series(s: &Series<'_>) -> String {
    let base = s.baseline;
    let mut out = format!(
        "\n{} {} on {}: ops/s per thread against {base} ({})\n",
        s.workload,
        s.phase,
        s.target,
        reps_text(s)
    );
    out.push_str(&render_changes(s, |v, t| s.per_thread(v, t), fmt_rate));
    out.push_str(&format!(
        "\ncell = median over reps of ops/s / threads (the seed's ops/s per container), \
         (±N%) = its change against {base} at the same thread count{}; {TARGET_LEGEND}\n",
        over_text(s)
    ));
    if let Some(t) = render_fragmentation(s) {
        out.push_str(&format!(
            "\n{} {} on {}: contiguity after the run (medians over reps)\n{t}\n",
            s.workload, s.phase, s.target
        ));
        out.push_str(&format!(
            "extents/file = extents of each thread's file completed to 1 MiB after the \
             run; {FREE_LEGEND}; {TARGET_LEGEND}\n"
        ));
    }
    out
}

/// What one operation of `workload`'s `phase` is, as a rate's unit and a noun.
fn op_unit(workload: &str, phase: &str) -> (&'static str, &'static str) {
    match (workload, phase) {
        (crate::workloads::fsmark::NAME, _) => ("files/s", "file"),
        (_, "create") => ("creates/s", "create"),
        (_, "remove") => ("removes/s", "remove"),
        (_, "lookup") => ("lookups/s", "lookup"),
        _ => ("ops/s", "op"),
    }
}

/// Seeds 001 and 004's shape for one series: total rate against the baseline, then, when
/// the records carry the inode cache's figures, the CPU time per operation against it.
fn render_inodes_series(s: &Series<'_>) -> String {
    let base = s.baseline;
    let (unit, noun) = op_unit(s.workload, s.phase);
    let total = |v: &str, t: usize| s.median(v, t, |r| Some(r.ops_per_sec));
    let mut out = format!(
        "\n{} {} on {}: {unit} in total against {base} ({})\n",
        s.workload,
        s.phase,
        s.target,
        reps_text(s)
    );
    out.push_str(&render_changes(s, total, fmt_rate));
    out.push_str(&format!(
        "\ncell = median over reps of {unit}, all threads together (as the seeds report), \
         (±N%) = its change against {base} at the same thread count{}; {TARGET_LEGEND}\n",
        over_text(s)
    ));
    let has_icache = s.recs.iter().any(|r| r.icache_inodes.is_some());
    if has_icache && s.recs.iter().any(|r| r.cpu_per_op_us.is_some()) {
        let cpu = |v: &str, t: usize| s.median(v, t, |r| r.cpu_per_op_us);
        out.push_str(&format!(
            "\n{} {} on {}: CPU per {noun} in us against {base} ({})\n",
            s.workload,
            s.phase,
            s.target,
            reps_text(s)
        ));
        out.push_str(&render_changes(s, cpu, |us| format!("{us:.1}")));
        out.push_str(&format!(
            "\ncell = median over reps of the process's CPU time (user + system, all \
             threads) in the measured time per {noun}; a negative change is less CPU\n"
        ));
    }
    out
}

/// Whether lock class `name` belongs to the journal: `journal*` or `tx_list`.
pub fn is_journal_class(name: &str) -> bool {
    name.starts_with("journal") || name == "tx_list"
}

/// The journal lock classes' share of one run's contention: contended acquisitions of the
/// journal classes over all contended acquisitions, and the same for wait time. Lists the
/// journal classes it counted, so a reader sees which ones the engine has.
pub fn journal_lock_share(stats: &[LockStat]) -> String {
    let total = |journal_only: bool, field: fn(&LockStat) -> u64| {
        stats
            .iter()
            .filter(|s| !journal_only || is_journal_class(s.name))
            .map(field)
            .fold(0u64, u64::saturating_add)
    };
    let (contended, contended_all) = (total(true, |s| s.contended), total(false, |s| s.contended));
    let (wait, wait_all) = (
        total(true, |s| s.wait_total_ns),
        total(false, |s| s.wait_total_ns),
    );
    let names: Vec<&str> = stats
        .iter()
        .map(|s| s.name)
        .filter(|n| is_journal_class(n))
        .collect();
    format!(
        "{contended} of {contended_all} contended acquisitions ({}), wait {} of {} ({}); \
         journal classes: {}",
        fmt_share(contended, contended_all),
        lanefs::internals::sync::format_ns(wait),
        lanefs::internals::sync::format_ns(wait_all),
        fmt_share(wait, wait_all),
        if names.is_empty() {
            "none".to_string()
        } else {
            names.join(" ")
        }
    )
}

/// `part / whole` as a percentage, or "-" when `whole` is zero.
fn fmt_share(part: u64, whole: u64) -> String {
    if whole == 0 {
        "-".to_string()
    } else {
        format!("{:.1} %", part as f64 * 100.0 / whole as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(workload: &str, variant: &str, threads: usize, rep: usize, ops_per_sec: f64) -> Record {
        Record {
            workload: workload.to_string(),
            phase: "p".to_string(),
            target: "lanefs".to_string(),
            variant: variant.to_string(),
            threads,
            rep,
            ops: ops_per_sec as u64,
            seconds: 1.0,
            ops_per_sec,
            per_thread_ops_per_sec: vec![ops_per_sec / threads as f64; threads],
            oversubscribed: threads > 2,
            journal_commits: None,
            journal_log_bytes: None,
            commits_per_s: None,
            journal_bytes_per_op: None,
            extents_per_file: None,
            free_extents: None,
            avg_free_extent_kib: None,
            daemon_cpu_seconds: None,
            daemon_cpu_us_per_op: None,
            ..Record::default()
        }
    }

    #[test]
    fn rates_format_with_separators() {
        assert_eq!(fmt_rate(0.0), "0");
        assert_eq!(fmt_rate(999.4), "999");
        assert_eq!(fmt_rate(1234.0), "1,234");
        assert_eq!(fmt_rate(1234567.0), "1,234,567");
        assert_eq!(fmt_rate(-1234.0), "-1,234");
    }

    fn stat(name: &'static str, contended: u64, wait_total_ns: u64) -> LockStat {
        LockStat {
            name,
            acquisitions: contended * 2,
            contended,
            wait_total_ns,
            wait_max_ns: wait_total_ns,
            held_ns: 0,
        }
    }

    /// `journal*` and `tx_list` count as journal classes; `orphan` and the rest do not.
    #[test]
    fn journal_share_counts_journal_classes() {
        let stats = [
            stat("journal_commit", 30, 3_000_000),
            stat("journal_state", 10, 1_000_000),
            stat("tx_list", 10, 1_000_000),
            stat("orphan", 25, 2_500_000),
            stat("buffer", 25, 2_500_000),
        ];
        let line = journal_lock_share(&stats);
        assert!(
            line.starts_with("50 of 100 contended acquisitions (50.0 %)"),
            "{line}"
        );
        assert!(line.contains("wait 5.00 ms of 10.00 ms (50.0 %)"), "{line}");
        assert!(
            line.ends_with("journal classes: journal_commit journal_state tx_list"),
            "{line}"
        );
        let idle = journal_lock_share(&[stat("inode", 0, 0)]);
        assert_eq!(
            idle,
            "0 of 0 contended acquisitions (-), wait 0 ns of 0 ns (-); journal classes: none"
        );
    }

    #[test]
    fn amounts_format_small_and_missing() {
        assert_eq!(fmt_amount(None), "-");
        assert_eq!(fmt_amount(Some(0.26)), "0.3");
        assert_eq!(fmt_amount(Some(12.34)), "12.3");
        assert_eq!(fmt_amount(Some(20480.0)), "20,480");
    }

    #[test]
    fn counts_format_whole_or_with_a_decimal() {
        assert_eq!(fmt_count(None), "-");
        assert_eq!(fmt_count(Some(33.0)), "33");
        assert_eq!(fmt_count(Some(33.5)), "33.5");
        assert_eq!(fmt_count(Some(12345.0)), "12,345");
    }

    #[test]
    fn summary_takes_median_min_max() {
        assert_eq!(summary(vec![3.0, 1.0, 2.0]), (2.0, 1.0, 3.0));
        assert_eq!(summary(vec![4.0, 1.0, 2.0, 3.0]), (2.5, 1.0, 4.0));
        assert_eq!(summary(vec![]), (0.0, 0.0, 0.0));
    }

    /// Efficiency is relative to one thread, and the control's is shown beside it.
    #[test]
    fn table_shows_efficiency_and_control() {
        let records = vec![
            rec("control", "-", 1, 1, 100.0),
            rec("control", "-", 2, 1, 190.0),
            rec("w", "default", 1, 1, 1000.0),
            rec("w", "default", 1, 2, 1200.0),
            rec("w", "default", 1, 3, 800.0),
            rec("w", "default", 2, 1, 1000.0),
            rec("w", "default", 4, 1, 400.0),
        ];
        let groups = group(&records);
        assert_eq!(groups.len(), 5);
        let w2 = groups
            .iter()
            .find(|g| g.workload == "w" && g.threads == 2)
            .expect("w at 2");
        assert_eq!(efficiency(&groups, w2), Some(0.5));
        assert_eq!(control_efficiency(&groups, "lanefs", 2), Some(0.95));
        let t = render_table(&records);
        assert!(t.contains("0.50"), "{t}");
        assert!(t.contains("0.95"), "{t}");
        assert!(t.contains("oversubscribed"), "{t}");
        assert!(t.contains("1,000"), "{t}");
    }

    /// The trimmed cells of a table line.
    fn cells(line: &str) -> Vec<&str> {
        line.split(['│', '┆'])
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .collect()
    }

    /// Changes print as the seed does, with one decimal and a sign, and never "-0.0%".
    #[test]
    fn changes_format_like_the_seed() {
        assert_eq!(fmt_change(123_102.0, 70_665.0).as_deref(), Some("+74.2%"));
        assert_eq!(fmt_change(286_328.0, 295_287.0).as_deref(), Some("-3.0%"));
        assert_eq!(fmt_change(999.9996, 1000.0).as_deref(), Some("+0.0%"));
        assert_eq!(fmt_change(5.0, 0.0), None);
        assert_eq!(fmt_change(f64::NAN, 1.0), None);
    }

    /// `rec` with the fragmentation fields of fallocate2 on the engine.
    fn frag(variant: &str, threads: usize, rep: usize, ops_per_sec: f64, free: u64) -> Record {
        Record {
            workload: "fallocate2".to_string(),
            phase: "fallocate".to_string(),
            extents_per_file: Some(threads as f64),
            free_extents: Some(free),
            avg_free_extent_kib: Some(4096.0 / free as f64),
            ..rec("fallocate2", variant, threads, rep, ops_per_sec)
        }
    }

    /// One row per variant, one column per thread count; each cell is the median over reps
    /// of ops/s per thread, with the change against base beside it (not in base's own row).
    #[test]
    fn vs_base_table_has_the_seeds_shape() {
        let records = vec![
            rec("control", "-", 1, 1, 100.0),
            frag("base", 1, 1, 1000.0, 10),
            frag("base", 1, 2, 1200.0, 12),
            frag("base", 1, 3, 800.0, 14),
            frag("base", 2, 1, 1000.0, 20),
            frag("base", 4, 1, 400.0, 40),
            frag("linear", 1, 1, 970.0, 11),
            frag("linear", 2, 1, 1742.0, 21),
            frag("linear", 4, 1, 800.0, 41),
            frag("slots", 1, 1, 1000.0, 9),
        ];
        let out = render_vs_base(&records);
        assert!(
            out.contains("fallocate2 fallocate on lanefs: ops/s per thread against base"),
            "{out}"
        );
        assert!(out.contains("1 thread"), "{out}");
        assert!(out.contains("2 threads"), "{out}");
        // rec() marks more than 2 threads oversubscribed.
        assert!(out.contains("4 threads*"), "{out}");
        assert!(out.contains("* = more threads than CPUs"), "{out}");
        let row = |name: &str| -> String {
            out.lines()
                .find(|l| cells(l).first() == Some(&name))
                .unwrap_or_else(|| panic!("no {name} row in\n{out}"))
                .to_string()
        };
        let base = row("base");
        // Median of 1000, 1200, 800 at one thread; 1000 / 2 and 400 / 4 per thread.
        for cell in ["1,000", "500", "100"] {
            assert!(base.contains(cell), "{cell} missing in {base}");
        }
        assert!(!base.contains('%'), "{base}");
        let linear = row("linear");
        for cell in ["970 (-3.0%)", "871 (+74.2%)", "200 (+100.0%)"] {
            assert!(linear.contains(cell), "{cell} missing in {linear}");
        }
        let slots = row("slots");
        assert!(slots.contains("1,000 (+0.0%)"), "{slots}");
        assert_eq!(cells(&slots)[2..], ["-", "-"], "{slots}");
        assert!(out.contains("the engine in-process"), "{out}");
        assert!(out.contains("real syscalls"), "{out}");

        // The fragmentation table: one row per variant and thread count, medians over reps.
        assert!(out.contains("contiguity after the run"), "{out}");
        for word in ["extents/file", "free extents", "avg free KiB"] {
            assert!(out.contains(word), "{word} missing in\n{out}");
        }
        let base1: Vec<&str> = out
            .lines()
            .map(cells)
            .find(|c| c.len() == 5 && c[0] == "base" && c[1] == "1")
            .unwrap_or_else(|| panic!("no base/1 fragmentation row in\n{out}"));
        // Extents 1 per file; free extents 10, 12, 14 -> 12; average free 4096 / 12 KiB.
        assert_eq!(base1[2..], ["1.0", "12", "341"], "{out}");
        let slots_rows = out.lines().filter(|l| cells(l).first() == Some(&"slots"));
        assert_eq!(slots_rows.count(), 2, "{out}");

        // The main table carries the summary after it.
        let table = render_table(&records);
        assert!(table.ends_with(&out), "{table}");
        assert!(table.contains("free extents"), "{table}");
    }

    /// `rec` of an inode workload, with CPU per op and, for fsmark and stat, cache figures.
    fn inode_rec(workload: &str, phase: &str, variant: &str, threads: usize, rate: f64) -> Record {
        let cached = workload != "mdtest";
        Record {
            phase: phase.to_string(),
            cpu_per_op_us: Some(1e6 / rate),
            icache_inodes: cached.then_some(1000),
            icache_bytes: cached.then_some(500_000),
            icache_peak_bytes: cached.then_some(600_000),
            icache_bytes_per_inode: cached.then_some(500.0),
            icache_limit: cached.then_some(64 << 20),
            icache_evictions: cached.then_some(7),
            bufcache_bytes: cached.then_some(50 << 20),
            bufcache_limit: cached.then_some(256 << 20),
            peak_rss_bytes: cached.then_some(100 << 20),
            ..rec(workload, variant, threads, 1, rate)
        }
    }

    /// Seeds 001/004's tables: total rates (not per thread) against base, a CPU table only
    /// where the cache figures are, and global as the baseline when base did not run.
    #[test]
    fn inode_series_compare_totals() {
        let records = vec![
            inode_rec("mdtest", "create", "base", 1, 1000.0),
            inode_rec("mdtest", "create", "base", 2, 1000.0),
            inode_rec("mdtest", "create", "lanefs", 1, 1000.0),
            inode_rec("mdtest", "create", "lanefs", 2, 4000.0),
            inode_rec("fsmark", "create", "global", 2, 2000.0),
            inode_rec("fsmark", "create", "bucket", 2, 2500.0),
        ];
        let out = render_vs_base(&records);
        assert!(
            out.contains("mdtest create on lanefs: creates/s in total against base (1 rep)"),
            "{out}"
        );
        let lanefs = out
            .lines()
            .map(cells)
            .find(|c| c.first() == Some(&"lanefs"))
            .unwrap_or_else(|| panic!("no lanefs row in\n{out}"));
        // Totals: 4,000 at 2 threads, +300% against base's 1,000.
        assert_eq!(
            lanefs,
            ["lanefs", "1,000 (+0.0%)", "4,000 (+300.0%)"],
            "{out}"
        );
        assert!(!out.contains("mdtest create on lanefs: CPU"), "{out}");
        assert!(
            out.contains("fsmark create on lanefs: files/s in total against global"),
            "{out}"
        );
        assert!(out.contains("2,500 (+25.0%)"), "{out}");
        assert!(out.contains("CPU per file in us against global"), "{out}");
        // 400 us per file against 500: 20 % less CPU.
        assert!(out.contains("400.0 (-20.0%)"), "{out}");

        let table = render_table(&records);
        assert!(table.contains("CPU us/op"), "{table}");
        let icache = render_icache(&records);
        assert!(icache.contains("inode cache after the run"), "{icache}");
        let row = icache
            .lines()
            .map(cells)
            .find(|c| c.first() == Some(&"fsmark") && c.get(3) == Some(&"bucket"))
            .unwrap_or_else(|| panic!("no fsmark bucket row in\n{icache}"));
        assert_eq!(
            row[4..],
            [
                "2",
                "1,000",
                "500",
                "0.5 MiB",
                "0.6 MiB",
                "64.0 MiB",
                "7",
                "50.0 MiB",
                "256.0 MiB",
                "100.0 MiB"
            ],
            "{icache}"
        );
        assert!(!icache.contains("mdtest"), "{icache}");
        assert_eq!(render_icache(&[rec("w", "a", 1, 1, 1.0)]), "");
    }

    /// No summary without a base, with base alone, or for a path target's "-" variant;
    /// no fragmentation table when the records have no such figures.
    #[test]
    fn vs_base_needs_base_and_another_variant() {
        let no_base = vec![rec("w", "a", 1, 1, 10.0), rec("w", "b", 1, 1, 20.0)];
        assert_eq!(render_vs_base(&no_base), "");
        let base_alone = vec![rec("w", "base", 1, 1, 10.0), rec("w", "base", 2, 1, 20.0)];
        assert_eq!(render_vs_base(&base_alone), "");
        let path = vec![rec("w", "-", 1, 1, 10.0)];
        assert_eq!(render_vs_base(&path), "");

        let plain = vec![rec("w", "base", 1, 1, 10.0), rec("w", "trylock", 1, 1, 5.0)];
        let out = render_vs_base(&plain);
        assert!(out.contains("5 (-50.0%)"), "{out}");
        assert!(!out.contains("extents/file"), "{out}");
        // A base with no rate leaves the other variants without a change.
        let zero = vec![rec("w", "base", 1, 1, 0.0), rec("w", "trylock", 1, 1, 5.0)];
        let out = render_vs_base(&zero);
        let row = out
            .lines()
            .map(cells)
            .find(|c| c.first() == Some(&"trylock"))
            .unwrap_or_else(|| panic!("no trylock row in\n{out}"));
        assert_eq!(row, ["trylock", "5"], "{out}");
    }
}
