//! The compact tables a run ends with: one per workload and target, in the shape of its
//! seed's table (a row per variant and phase, a column per thread count, each cell with its
//! change against the baseline), then scaling against the control loop and, where lock
//! statistics were collected, the lock class that waited most. Every table fits
//! [`MAX_WIDTH`] columns; the same tables render as Markdown for `--report`.

use super::{baseline, family_of, fmt_change, push_unique, summary, Record};
use super::{FUSE2FS, KERNEL};
use crate::workloads::control;
use comfy_table::{presets, CellAlignment, Table};

/// Widest a compact table may be, in terminal columns.
pub const MAX_WIDTH: usize = 100;

/// One workload's compact table, as text cells.
#[derive(Debug, Clone, PartialEq)]
pub struct Compact {
    /// The workload.
    pub workload: String,
    /// What the table shows: workload, target, unit, the seed it reproduces, repetitions.
    pub title: String,
    /// Column names.
    pub header: Vec<String>,
    /// Cells, row by row.
    pub rows: Vec<Vec<String>>,
    /// Columns from the left that hold text (the rest are numbers, right-aligned).
    pub text_cols: usize,
    /// What the columns mean.
    pub legend: String,
}

impl Compact {
    /// The table for a terminal (UTF-8 box drawing), title and legend around it.
    pub fn terminal(&self) -> String {
        format!(
            "\n{}\n{}\n{}\n",
            self.title,
            boxed(&self.header, &self.rows, self.text_cols),
            self.legend
        )
    }

    /// The table as Markdown (a heading, a pipe table and the legend).
    pub fn markdown(&self) -> String {
        let mut out = format!("### {}\n\n", self.title);
        out.push_str(&format!("| {} |\n", self.header.join(" | ")));
        let align: Vec<&str> = (0..self.header.len())
            .map(|i| if i < self.text_cols { "---" } else { "---:" })
            .collect();
        out.push_str(&format!("|{}|\n", align.join("|")));
        for row in &self.rows {
            let cells: Vec<String> = row.iter().map(|c| c.replace('|', "\\|")).collect();
            out.push_str(&format!("| {} |\n", cells.join(" | ")));
        }
        out.push_str(&format!("\n{}\n\n", self.legend));
        out
    }
}

/// A table in the compact box style, every column but the first `text_cols` right-aligned.
fn boxed(header: &[String], rows: &[Vec<String>], text_cols: usize) -> String {
    let mut table = Table::new();
    table
        .load_style(presets::UTF8_FULL_CONDENSED)
        .set_header(header.to_vec());
    for row in rows {
        table.add_row(row.clone());
    }
    for i in text_cols..header.len() {
        if let Some(col) = table.column_mut(i) {
            col.set_cell_alignment(CellAlignment::Right);
        }
    }
    table.to_string()
}

/// Display width of a rendered table: its widest line, in characters.
pub fn width(text: &str) -> usize {
    text.lines().map(|l| l.chars().count()).max().unwrap_or(0)
}

/// The compact tables of `records`, one per workload and target in the order they first
/// appear (the control loop has none of its own: it is every table's ceiling).
pub fn tables(records: &[Record]) -> Vec<Compact> {
    let mut keys: Vec<(&str, &str)> = Vec::new();
    for r in records.iter().filter(|r| r.workload != control::NAME) {
        // A compare run's mounts are rows of one table, not tables of their own.
        let target = if is_compare(records) { "" } else { &r.target };
        push_unique(&mut keys, (r.workload.as_str(), target));
    }
    keys.into_iter()
        .map(|(w, t)| {
            let recs: Vec<&Record> = records
                .iter()
                .filter(|r| r.workload == w && (t.is_empty() || r.target == t))
                .collect();
            build(records, w, &recs)
        })
        .collect()
}

/// Every compact table for a terminal.
pub fn render(records: &[Record]) -> String {
    tables(records).iter().map(Compact::terminal).collect()
}

/// Whether `records` come from a compare run (the kernel's mount is a target).
fn is_compare(records: &[Record]) -> bool {
    records.iter().any(|r| r.target == KERNEL)
}

/// One row of a table: a phase and a variant (or a compare run's mount).
struct Row<'a> {
    phase: &'a str,
    label: &'a str,
    recs: Vec<&'a Record>,
}

impl Row<'_> {
    /// Median over repetitions of the table's unit at `threads`.
    fn median(&self, threads: usize, unit: Unit) -> Option<f64> {
        let v: Vec<f64> = self
            .recs
            .iter()
            .filter(|r| r.threads == threads)
            .filter_map(|r| unit.value(r))
            .collect();
        (!v.is_empty()).then(|| summary(v).0)
    }

    /// The lock class that waited most at `threads`, with its median wait: "group 12 ms".
    fn top_lock(&self, threads: usize) -> Option<String> {
        let at: Vec<&Record> = self
            .recs
            .iter()
            .copied()
            .filter(|r| r.threads == threads && r.lock_top_class.is_some())
            .collect();
        // The class named by the most repetitions, then its median wait among them.
        let mut classes: Vec<&str> = Vec::new();
        for r in &at {
            push_unique(&mut classes, r.lock_top_class.as_deref()?);
        }
        let class = classes.into_iter().max_by_key(|c| {
            at.iter()
                .filter(|r| r.lock_top_class.as_deref() == Some(c))
                .count()
        })?;
        let waits: Vec<f64> = at
            .iter()
            .filter(|r| r.lock_top_class.as_deref() == Some(class))
            .filter_map(|r| r.lock_top_wait_ns.map(|n| n as f64))
            .collect();
        let wait = summary(waits).0;
        Some(format!(
            "{class} {}",
            lanefs::internals::sync::format_ns(wait as u64)
        ))
    }
}

/// What a table's cells count.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Unit {
    /// Operations per second, all threads together.
    Ops,
    /// GiB/s read and written (the page-cache workloads).
    Gib,
}

impl Unit {
    fn of(workload: &str, recs: &[&Record]) -> Unit {
        let bytes = recs.iter().all(|r| r.bandwidth_gib_s().is_some());
        if bytes && (workload == crate::workloads::bufio::NAME || workload == "bufio64k") {
            Unit::Gib
        } else {
            Unit::Ops
        }
    }

    fn value(self, r: &Record) -> Option<f64> {
        match self {
            Unit::Ops => Some(r.ops_per_sec),
            Unit::Gib => r.bandwidth_gib_s(),
        }
    }

    fn fmt(self, v: f64) -> String {
        match self {
            Unit::Gib => format!("{v:.2}"),
            Unit::Ops => short(v),
        }
    }

    fn name(self, workload: &str, phases: &[&str]) -> String {
        match self {
            Unit::Gib => "GiB/s".to_string(),
            Unit::Ops if workload == crate::workloads::rtfrag::NAME => "allocs/s".to_string(),
            Unit::Ops if workload == crate::workloads::fsmark::NAME => "files/s".to_string(),
            Unit::Ops if phases.len() == 1 => format!("{} ops/s", phases[0]),
            Unit::Ops => "ops/s".to_string(),
        }
    }
}

/// A rate in three significant digits: "1.46M", "293k", "1,751" stays "1.75k".
pub fn short(v: f64) -> String {
    let a = v.abs();
    let (x, suffix) = if a >= 1e9 {
        (v / 1e9, "G")
    } else if a >= 1e6 {
        (v / 1e6, "M")
    } else if a >= 1e3 {
        (v / 1e3, "k")
    } else {
        (v, "")
    };
    let digits = match x.abs() {
        x if x >= 100.0 => 0,
        x if x >= 10.0 => 1,
        _ => 2,
    };
    let digits = if suffix.is_empty() && a >= 100.0 {
        0
    } else {
        digits
    };
    format!("{x:.digits$}{suffix}")
}

/// The compact table of workload `w` from its records `recs` (`all` gives the control loop).
fn build(all: &[Record], w: &str, recs: &[&Record]) -> Compact {
    let compare = is_compare(all);
    let mut phases: Vec<&str> = Vec::new();
    let mut labels: Vec<&str> = Vec::new();
    let mut threads: Vec<usize> = Vec::new();
    for r in recs {
        push_unique(&mut phases, &r.phase);
        push_unique(&mut labels, if compare { &r.target } else { &r.variant });
        push_unique(&mut threads, r.threads);
    }
    threads.sort_unstable();
    let unit = Unit::of(w, recs);
    // bufio's memcpy phase is its control, shown as a row like the others.
    let base = if compare {
        labels.iter().copied().find(|&l| l == FUSE2FS)
    } else {
        baseline(w, &labels)
    };
    let rows: Vec<Row<'_>> = phases
        .iter()
        .flat_map(|&phase| {
            labels.iter().map(move |&label| Row {
                phase,
                label,
                recs: recs
                    .iter()
                    .copied()
                    .filter(|r| {
                        r.phase == phase && (if compare { &r.target } else { &r.variant }) == label
                    })
                    .collect(),
            })
        })
        .filter(|row| !row.recs.is_empty())
        .collect();
    let top = threads.last().copied().unwrap_or(1);
    let low = threads.first().copied().unwrap_or(1);
    let control_eff = control_efficiency(all, low, top);
    let has_locks = recs.iter().any(|r| r.lock_top_class.is_some());
    let reps = recs.iter().map(|r| r.rep).max().unwrap_or(1);
    let target = recs.first().map_or("", |r| r.target.as_str());
    let about = family_of(w).map_or("", |f| f.about());
    let title = format!(
        "{w}{}: {}{}, {}",
        if compare {
            " through the kernel (syscalls)".to_string()
        } else {
            format!(" on {target}")
        },
        unit.name(w, &phases),
        if about.is_empty() {
            String::new()
        } else {
            format!(" ({about})")
        },
        if reps == 1 {
            "1 rep".to_string()
        } else {
            format!("median of {reps} reps")
        }
    );
    // The widest shape that fits: changes in every cell, else one change column at the top
    // thread count; the lock column last to go.
    let mut chosen = None;
    let shapes = [
        (true, false, has_locks),
        (false, false, has_locks),
        (false, true, has_locks),
        (false, true, false),
    ];
    for (inline, terse, locks) in shapes {
        let (header, cells) = shape(
            &rows,
            &threads,
            unit,
            base,
            (inline, terse, locks),
            control_eff,
        );
        let text_cols = if phases.len() > 1 { 2 } else { 1 };
        let fits = width(&boxed(&header, &cells, text_cols)) <= MAX_WIDTH;
        chosen = Some((header, cells, text_cols, inline, locks));
        if fits {
            break;
        }
    }
    let (mut header, mut cells, text_cols, inline, locks) = chosen.expect("one shape at least");
    if compare {
        header[1] = "mount".to_string();
    }
    if phases.len() == 1 {
        for row in &mut cells {
            row.remove(0);
        }
    }
    let header = if phases.len() == 1 {
        header[1..].to_vec()
    } else {
        header
    };
    let legend = legend(
        compare,
        base,
        inline,
        locks,
        has_locks,
        top,
        low,
        threads.len(),
    );
    Compact {
        workload: w.to_string(),
        title,
        header,
        rows: cells,
        text_cols,
        legend,
    }
}

/// The control loop's efficiency from `low` to `top` threads: its ops/s per thread at `top`
/// over that at `low`, the ceiling of the machine.
fn control_efficiency(all: &[Record], low: usize, top: usize) -> Option<f64> {
    let at = |t: usize| {
        let v: Vec<f64> = all
            .iter()
            .filter(|r| r.workload == control::NAME && r.threads == t)
            .map(|r| r.ops_per_sec / t as f64)
            .collect();
        (!v.is_empty()).then(|| summary(v).0)
    };
    let (l, t) = (at(low)?, at(top)?);
    (l > 0.0).then(|| t / l)
}

/// Header and cells of one shape of the table: `(inline, terse, locks)` = changes in every
/// cell (else one column at the top thread count), short headers, the lock column.
fn shape(
    rows: &[Row<'_>],
    threads: &[usize],
    unit: Unit,
    base: Option<&str>,
    (inline, terse, locks): (bool, bool, bool),
    control_eff: Option<f64>,
) -> (Vec<String>, Vec<Vec<String>>) {
    let (low, top) = (threads[0], threads[threads.len() - 1]);
    let mut header = vec!["phase".to_string(), "variant".to_string()];
    for &t in threads {
        header.push(match (t, terse) {
            (_, true) => format!("{t} thr"),
            (1, false) => "1 thread".to_string(),
            (_, false) => format!("{t} threads"),
        });
    }
    let at = |what: &str| {
        if terse {
            what.to_string()
        } else {
            format!("{what} @{top}")
        }
    };
    let with_base = base.is_some();
    if with_base && !inline {
        header.push(at(&format!("vs {}", base.unwrap_or_default())));
    }
    if top > low {
        header.push(at("eff"));
        header.push("ctl".to_string());
    }
    if locks {
        header.push(at("waits most"));
    }
    let base_row = |phase: &str| {
        rows.iter()
            .find(|r| r.phase == phase && Some(r.label) == base)
    };
    let cells = rows
        .iter()
        .map(|row| {
            let mut cells = vec![row.phase.to_string(), row.label.to_string()];
            let is_base = Some(row.label) == base;
            let change = |t: usize| -> Option<String> {
                let b = base_row(row.phase)?.median(t, unit)?;
                fmt_change(row.median(t, unit)?, b)
            };
            for &t in threads {
                let v = row.median(t, unit).map_or("-".to_string(), |v| unit.fmt(v));
                match change(t).filter(|_| inline && !is_base) {
                    Some(c) => cells.push(format!("{v} {c}")),
                    None => cells.push(v),
                }
            }
            if with_base && !inline {
                cells.push(if is_base {
                    "-".to_string()
                } else {
                    change(top).unwrap_or_else(|| "-".to_string())
                });
            }
            if top > low {
                let eff = match (row.median(top, unit), row.median(low, unit)) {
                    (Some(t), Some(l)) if l > 0.0 => {
                        format!("{:.2}", t / top as f64 / (l / low as f64))
                    }
                    _ => "-".to_string(),
                };
                cells.push(eff);
                cells.push(control_eff.map_or("-".to_string(), |e| format!("{e:.2}")));
            }
            if locks {
                cells.push(row.top_lock(top).unwrap_or_else(|| "-".to_string()));
            }
            cells
        })
        .collect();
    (header, cells)
}

/// What the columns mean, in one or two lines.
#[allow(clippy::too_many_arguments)]
fn legend(
    compare: bool,
    base: Option<&str>,
    inline: bool,
    locks: bool,
    had_locks: bool,
    top: usize,
    low: usize,
    counts: usize,
) -> String {
    let mut parts = Vec::new();
    match (base, inline) {
        (Some(b), true) => parts.push(format!("(+N%) = change against {b} at the same threads")),
        (Some(b), false) => parts.push(format!("vs {b} = change against {b} at {top} threads")),
        (None, _) => {}
    }
    if counts > 1 && top > low {
        parts.push(format!(
            "eff = ops/s per thread at {top} threads over that at {low}; ctl = the same for \
             a loop that shares nothing (the machine's ceiling)"
        ));
    }
    if locks {
        parts.push(
            "waits most = the engine's lock class with the longest total wait (--lockstat)"
                .to_string(),
        );
    } else if had_locks {
        parts.push("(lock column dropped to fit; --verbose shows every field)".to_string());
    }
    if compare {
        parts.push(format!(
            "rows are mounts: lanefs-fuse and {FUSE2FS} through FUSE, {KERNEL} the kernel's own"
        ));
    }
    parts.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(w: &str, phase: &str, variant: &str, threads: usize, rep: usize, ops: f64) -> Record {
        Record {
            workload: w.to_string(),
            phase: phase.to_string(),
            target: "lanefs".to_string(),
            variant: variant.to_string(),
            threads,
            rep,
            ops_per_sec: ops,
            ..Record::default()
        }
    }

    fn run(variants: &[&str], threads: &[usize], locks: bool) -> Vec<Record> {
        let mut all = Vec::new();
        for rep in 1..=3 {
            for &t in threads {
                all.push(rec(control::NAME, "loop", "-", t, rep, 100.0 * t as f64));
                for (i, v) in variants.iter().enumerate() {
                    for phase in ["create", "remove"] {
                        let mut r = rec(
                            "mdtest",
                            phase,
                            v,
                            t,
                            rep,
                            1000.0 * (i + 1) as f64 * t as f64,
                        );
                        if locks {
                            r.lock_top_class = Some("icache_global".to_string());
                            r.lock_top_wait_ns = Some(12_000_000);
                        }
                        all.push(r);
                    }
                }
            }
        }
        all
    }

    /// The seeds' shape: a row per phase and variant, a column per thread count, the change
    /// against base in every cell but base's; efficiency against the control loop.
    #[test]
    fn seed_shape_with_changes() {
        let t = tables(&run(&["base", "ialloc", "icache", "lanefs"], &[1, 2], true));
        assert_eq!(t.len(), 1);
        let c = &t[0];
        assert_eq!(
            c.header,
            [
                "phase",
                "variant",
                "1 thread",
                "2 threads",
                "eff @2",
                "ctl",
                "waits most @2"
            ]
        );
        assert_eq!(c.rows.len(), 8);
        assert_eq!(c.rows[0][..4], ["create", "base", "1.00k", "2.00k"]);
        assert_eq!(c.rows[1][2], "2.00k +100.0%");
        assert_eq!(c.rows[1][4], "1.00");
        assert_eq!(c.rows[1][5], "1.00");
        assert_eq!(c.rows[1][6], "icache_global 12.00 ms");
        assert!(
            c.title.starts_with("mdtest on lanefs: ops/s"),
            "{}",
            c.title
        );
        assert!(c.title.ends_with("median of 3 reps"), "{}", c.title);
    }

    /// Many thread counts and variants still fit 100 columns: the changes move to one
    /// column, then the lock column goes.
    #[test]
    fn fits_the_width() {
        for threads in [&[1, 2][..], &[1, 2, 4, 8], &[1, 2, 4, 8, 16, 32]] {
            for locks in [false, true] {
                let recs = run(
                    &["base", "ialloc", "icache", "lanefs", "papaya"],
                    threads,
                    locks,
                );
                for c in tables(&recs) {
                    let text = c.terminal();
                    let table_width = text
                        .lines()
                        .filter(|l| l.starts_with(['┌', '│', '╞', '├', '└']))
                        .map(|l| l.chars().count())
                        .max()
                        .unwrap_or(0);
                    assert!(table_width <= MAX_WIDTH, "{threads:?} {locks}\n{text}");
                }
            }
        }
    }

    /// A single-phase workload drops the phase column; Markdown has the same columns.
    #[test]
    fn single_phase_and_markdown() {
        let recs: Vec<Record> = (1..=2)
            .flat_map(|t| {
                [
                    rec("fallocate2", "fallocate", "base", t, 1, 100.0),
                    rec("fallocate2", "fallocate", "slots", t, 1, 150.0),
                ]
            })
            .collect();
        let c = &tables(&recs)[0];
        assert_eq!(c.header[0], "variant");
        assert_eq!(c.rows[1][0], "slots");
        assert_eq!(c.rows[1][1], "150 +50.0%");
        let md = c.markdown();
        let lines: Vec<&str> = md.lines().filter(|l| l.starts_with('|')).collect();
        assert_eq!(lines.len(), 2 + c.rows.len());
        for l in &lines {
            assert_eq!(l.matches('|').count(), c.header.len() + 1, "{l}");
        }
    }

    #[test]
    fn short_rates() {
        assert_eq!(short(1_463_000.0), "1.46M");
        assert_eq!(short(293_397.0), "293k");
        assert_eq!(short(1751.0), "1.75k");
        assert_eq!(short(42.0), "42.0");
        assert_eq!(short(420.0), "420");
    }
}
