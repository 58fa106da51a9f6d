//! Records of runs, and the terminal table and JSON made from them.

use crate::workloads::control;
use comfy_table::{presets, CellAlignment, Table};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// One phase of one run: what ran where, and how fast.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// Workload name ("fallocate2", "mdtest", "control").
    pub workload: String,
    /// Timed phase ("fallocate", "create", "remove", "loop").
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

/// The terminal table: one row per workload, phase, variant and thread count, with the
/// median ops/s over repetitions, min, max, median per-thread ops/s, scaling efficiency
/// and the control loop's efficiency at the same thread count.
pub fn render_table(records: &[Record]) -> String {
    let groups = group(records);
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
        "note",
    ]);
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
            if over { "oversubscribed" } else { "" }.to_string(),
        ]);
        table.add_row(row);
    }
    let first_num = if show_target { 4 } else { 3 };
    for i in first_num..first_num + 8 {
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
    out
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
