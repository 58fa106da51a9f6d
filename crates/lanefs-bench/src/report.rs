//! Records of runs, and the terminal table and JSON made from them.

use crate::workloads::control;
use comfy_table::{presets, CellAlignment, Table};
use lanefs::sync::LockStat;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// One phase of one run: what ran where, and how fast.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// Workload name ("fallocate2", "mdtest", "fsync", "control").
    pub workload: String,
    /// Timed phase ("fallocate", "create", "remove", "fsync", "loop").
    pub phase: String,
    /// "lanefs" or "path:<dir>".
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
}

/// Write `records` to `path` as a JSON array.
pub fn write_json(records: &[Record], path: &Path) -> Result<(), String> {
    let text = serde_json::to_string_pretty(records)
        .map_err(|e| format!("encoding records as JSON: {e}"))?;
    std::fs::write(path, text + "\n").map_err(|e| format!("writing {}: {e}", path.display()))
}

/// Median, min and max of a non-empty sample; zeros for an empty one.
fn summary(mut v: Vec<f64>) -> (f64, f64, f64) {
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

/// A count with thousands separators, rounded to an integer.
pub fn fmt_rate(v: f64) -> String {
    if !v.is_finite() {
        return v.to_string();
    }
    let digits = format!("{:.0}", v.abs());
    let mut out = String::with_capacity(digits.len() + digits.len() / 3 + 1);
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    if v < 0.0 && digits != "0" {
        out.insert(0, '-');
    }
    out
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

/// The terminal table: one row per workload, phase, variant and thread count, with the
/// median ops/s over repetitions, min, max, median per-thread ops/s, scaling efficiency,
/// the control loop's efficiency at the same thread count, and (when some record has
/// journal counters) the median journal commits/s and log bytes per operation.
pub fn render_table(records: &[Record]) -> String {
    let groups = group(records);
    let show_journal = records.iter().any(|r| r.commits_per_s.is_some());
    let show_extents = records.iter().any(|r| r.extents_per_file.is_some());
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
        row.push(if over { "oversubscribed" } else { "" }.to_string());
        table.add_row(row);
    }
    let first_num = if show_target { 4 } else { 3 };
    let numeric = 8 + if show_journal { 2 } else { 0 } + usize::from(show_extents);
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
        fmt_wait(wait),
        fmt_wait(wait_all),
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

/// A wait in nanoseconds, in the unit the lock statistics table uses for it.
fn fmt_wait(ns: u64) -> String {
    let f = ns as f64;
    match ns {
        0..=999 => format!("{ns} ns"),
        1_000..=999_999 => format!("{:.2} us", f / 1e3),
        1_000_000..=999_999_999 => format!("{:.2} ms", f / 1e6),
        _ => format!("{:.2} s", f / 1e9),
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
}
