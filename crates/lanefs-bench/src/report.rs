//! Records of runs, and the terminal table and JSON made from them.

use crate::variant::Family;
use crate::workloads::control;
use comfy_table::{presets, CellAlignment, Table};
use lanefs::internals::sync::LockStat;
use serde::{Deserialize, Serialize};
use std::path::Path;

pub mod chart;
pub mod compact;
mod full;
mod locks;
mod pages;
pub(crate) mod rtfrag;
mod run;
pub mod saturation;
pub mod seeds;
mod vs_base;

pub use full::{fmt_mib, render_icache, render_table};
pub use locks::{is_journal_class, journal_lock_share};
pub use vs_base::{render_vs_base, BASE_VARIANT};

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
    /// Requests the FUSE daemon received in the measured time, by opcode, most first
    /// (`--compare`'s `programs` on lanefs's and the ceiling's mounts).
    #[serde(default)]
    pub fuse_requests: Option<Vec<(String, u64)>>,
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

pub use crate::timing::fmt_rate;

/// Add `x` to `v` unless it is there (the variants, phases and thread counts of a run, in
/// the order they first appear).
pub(crate) fn push_unique<T: PartialEq>(v: &mut Vec<T>, x: T) {
    if !v.contains(&x) {
        v.push(x);
    }
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

#[cfg(test)]
mod tests {
    use super::full::{control_efficiency, efficiency, group};
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
