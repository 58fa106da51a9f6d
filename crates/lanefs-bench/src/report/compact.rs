//! The compact tables a run ends with: one per workload and target, in the shape of its
//! seed's table (a row per variant and phase, a column per thread count, each cell with its
//! change against the baseline), then scaling against the control loop and, where lock
//! statistics were collected, the lock class that waited most. Every table fits
//! [`MAX_WIDTH`] columns; the same tables render as Markdown for `--report`.

use super::{baseline, fmt_change, push_unique, summary, Record};
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
    /// The table for a terminal (UTF-8 box drawing), title and legend around it, wrapped
    /// at [`MAX_WIDTH`].
    pub fn terminal(&self) -> String {
        format!(
            "\n{}\n{}\n{}\n",
            wrap(&self.title, MAX_WIDTH),
            boxed(&self.header, &self.rows, self.text_cols),
            wrap(&self.legend, MAX_WIDTH)
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
    let compare = is_compare(records);
    for r in records.iter().filter(|r| r.workload != control::NAME) {
        // A compare run's mounts are rows of one table, not tables of their own.
        let target = if compare { "" } else { &r.target };
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
    workload: &'a str,
    recs: Vec<&'a Record>,
}

impl Row<'_> {
    /// Median over repetitions of the row's rate ([`super::rate`]) at `threads`.
    fn median(&self, threads: usize) -> Option<f64> {
        let v: Vec<f64> = self
            .recs
            .iter()
            .filter(|r| r.threads == threads)
            .map(|r| super::rate(self.workload, r))
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
    /// GiB/s read and written (the page-cache workloads), as [`super::rate`] counts them.
    Gib,
}

impl Unit {
    fn of(workload: &str) -> Unit {
        if super::is_bandwidth(workload) {
            Unit::Gib
        } else {
            Unit::Ops
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

/// A rate in three significant digits: "1.46M", "293k", 1751 as "1.75k", 420 as "420".
pub fn short(v: f64) -> String {
    let a = v.abs();
    // The suffix of the value as it will print: 999,999 rounds to "1.00M", not "1000k".
    let (scale, suffix) = if a >= 999_500.0 * 1e3 {
        (1e9, "G")
    } else if a >= 999_500.0 {
        (1e6, "M")
    } else if a >= 999.5 {
        (1e3, "k")
    } else {
        (1.0, "")
    };
    let x = v / scale;
    let digits = match x.abs() {
        x if x >= 99.95 => 0,
        x if x >= 9.995 => 1,
        _ => 2,
    };
    let digits = if suffix.is_empty() && a >= 99.95 {
        0
    } else {
        digits
    };
    format!("{x:.digits$}{suffix}")
}

/// `text` broken at spaces into lines of at most `width` characters (a longer word stays
/// whole on its own line).
pub(crate) fn wrap(text: &str, width: usize) -> String {
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in text.split(' ') {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    lines.push(line);
    lines.join("\n")
}

/// The facts one workload's table is built from.
struct Facts<'a> {
    rows: Vec<Row<'a>>,
    phases: Vec<&'a str>,
    threads: Vec<usize>,
    unit: Unit,
    base: Option<&'a str>,
    compare: bool,
    has_locks: bool,
}

/// One way to lay a table out, widest first (see [`SHAPES`]).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Shape {
    /// Changes against the baseline in every cell (else one column at the top count).
    inline: bool,
    /// Short headers ("2 thr", "eff").
    terse: bool,
    /// The lock column, where the records have lock statistics.
    locks: bool,
    /// The efficiency column.
    eff: bool,
    /// A row per thread count instead of a column per thread count: as wide whatever the
    /// thread counts, the layout of last resort.
    long: bool,
}

/// The layouts tried in turn until one fits [`MAX_WIDTH`].
#[rustfmt::skip]
const SHAPES: [Shape; 6] = [
    Shape { inline: true, terse: false, locks: true, eff: true, long: false },
    Shape { inline: false, terse: false, locks: true, eff: true, long: false },
    Shape { inline: false, terse: true, locks: true, eff: true, long: false },
    Shape { inline: false, terse: true, locks: false, eff: true, long: false },
    Shape { inline: false, terse: true, locks: false, eff: false, long: false },
    Shape { inline: true, terse: true, locks: true, eff: true, long: true },
];

/// The compact table of workload `w` from its records `recs` (`all` gives the control loop).
fn build(all: &[Record], w: &str, recs: &[&Record]) -> Compact {
    let facts = facts(all, w, recs);
    let low = facts.threads.first().copied().unwrap_or(1);
    let top = facts.threads.last().copied().unwrap_or(1);
    let control_eff = control_efficiency(all, low, top);
    let text_cols = if facts.phases.len() > 1 { 2 } else { 1 };
    let mut chosen = None;
    for shape in SHAPES {
        let (header, rows) = shape_cells(&facts, shape);
        let fits = width(&boxed(&header, &rows, text_cols)) <= MAX_WIDTH;
        chosen = Some((shape, header, rows));
        if fits {
            break;
        }
    }
    let (shape, header, rows) = chosen.expect("SHAPES is not empty");
    let text_cols = if shape.long { text_cols + 1 } else { text_cols };
    let title = title(&facts, w, recs, top, control_eff);
    let legend = legend(&facts, shape, low, top);
    Compact {
        workload: w.to_string(),
        title,
        header,
        rows,
        text_cols,
        legend,
    }
}

/// The rows, phases, thread counts, unit and baseline of workload `w`.
fn facts<'a>(all: &[Record], w: &'a str, recs: &[&'a Record]) -> Facts<'a> {
    let compare = is_compare(all);
    let label = |r: &'a Record| {
        if compare {
            r.target.as_str()
        } else {
            r.variant.as_str()
        }
    };
    let mut phases: Vec<&str> = Vec::new();
    let mut labels: Vec<&str> = Vec::new();
    let mut threads: Vec<usize> = Vec::new();
    for &r in recs {
        push_unique(&mut phases, &r.phase);
        push_unique(&mut labels, label(r));
        push_unique(&mut threads, r.threads);
    }
    threads.sort_unstable();
    let base = if compare {
        labels.iter().copied().find(|&l| l == FUSE2FS)
    } else {
        baseline(w, &labels)
    };
    let rows = phases
        .iter()
        .flat_map(|&phase| {
            labels.iter().map(move |&l| Row {
                phase,
                label: l,
                workload: w,
                recs: recs
                    .iter()
                    .copied()
                    .filter(|&r| r.phase == phase && label(r) == l)
                    .collect(),
            })
        })
        .filter(|row| !row.recs.is_empty())
        .collect();
    Facts {
        rows,
        phases,
        threads,
        unit: Unit::of(w),
        base,
        compare,
        has_locks: recs.iter().any(|r| r.lock_top_class.is_some()),
    }
}

/// "mdtest on lanefs: ops/s (seed 001's ...), median of 3 reps; the control loop's
/// efficiency at 2 threads: 0.99".
fn title(facts: &Facts<'_>, w: &str, recs: &[&Record], top: usize, ctl: Option<f64>) -> String {
    let reps = recs.iter().map(|r| r.rep).max().unwrap_or(1);
    let target = recs.first().map_or("", |r| r.target.as_str());
    let about = crate::workloads::find(w).map_or(String::new(), |w| format!(" ({})", w.about()));
    let place = if facts.compare {
        " through the kernel (syscalls)".to_string()
    } else {
        format!(" on {target}")
    };
    let reps = if reps == 1 {
        "1 rep".to_string()
    } else {
        format!("median of {reps} reps")
    };
    let ctl = match ctl {
        Some(e) if facts.threads.len() > 1 => {
            format!("; the control loop's efficiency at {top} threads: {e:.2}")
        }
        _ => String::new(),
    };
    format!(
        "{w}{place}: {}{about}, {reps}{ctl}",
        facts.unit.name(w, &facts.phases)
    )
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

/// Header and cells of one shape of the table.
fn shape_cells(facts: &Facts<'_>, shape: Shape) -> (Vec<String>, Vec<Vec<String>>) {
    let threads = &facts.threads;
    let (low, top) = (threads[0], threads[threads.len() - 1]);
    let unit = facts.unit;
    let phase_col = facts.phases.len() > 1;
    let at = |what: &str| {
        if shape.terse {
            what.to_string()
        } else {
            format!("{what} @{top}")
        }
    };
    let base_name = facts.base.unwrap_or_default();
    let with_base = facts.base.is_some();
    let eff = shape.eff && top > low;
    let locks = shape.locks && facts.has_locks;
    let mut header = Vec::new();
    if phase_col {
        header.push("phase".to_string());
    }
    header.push(if facts.compare { "mount" } else { "variant" }.to_string());
    if shape.long {
        header.extend(["threads".to_string(), unit.name("", &[])]);
        if with_base {
            header.push(format!("vs {base_name}"));
        }
        header.push("eff".to_string());
        if locks {
            header.push("waits most".to_string());
        }
    } else {
        for &t in threads {
            header.push(match (t, shape.terse) {
                (_, true) => format!("{t} thr"),
                (1, false) => "1 thread".to_string(),
                (_, false) => format!("{t} threads"),
            });
        }
        if with_base && !shape.inline {
            header.push(at(&format!("vs {base_name}")));
        }
        if eff {
            header.push(at("eff"));
        }
        if locks {
            header.push(at("waits most"));
        }
    }
    let base_row = |phase: &str| {
        facts
            .rows
            .iter()
            .find(|r| r.phase == phase && Some(r.label) == facts.base)
    };
    let mut cells = Vec::new();
    for row in &facts.rows {
        let is_base = Some(row.label) == facts.base;
        let change = |t: usize| -> Option<String> {
            let b = base_row(row.phase)?.median(t)?;
            fmt_change(row.median(t)?, b)
        };
        let value = |t: usize| row.median(t).map_or("-".to_string(), |v| unit.fmt(v));
        let efficiency = |t: usize| match (row.median(t), row.median(low)) {
            (Some(v), Some(l)) if l > 0.0 => format!("{:.2}", v / t as f64 / (l / low as f64)),
            _ => "-".to_string(),
        };
        let lock = |t: usize| row.top_lock(t).unwrap_or_else(|| "-".to_string());
        let mut first = Vec::new();
        if phase_col {
            first.push(row.phase.to_string());
        }
        first.push(row.label.to_string());
        if shape.long {
            for &t in threads {
                let mut line = first.clone();
                line.extend([t.to_string(), value(t)]);
                if with_base {
                    line.push(if is_base {
                        "-".to_string()
                    } else {
                        change(t).unwrap_or_else(|| "-".to_string())
                    });
                }
                line.push(efficiency(t));
                if locks {
                    line.push(lock(t));
                }
                cells.push(line);
            }
            continue;
        }
        let mut line = first;
        for &t in threads {
            match change(t).filter(|_| shape.inline && !is_base) {
                Some(c) => line.push(format!("{} {c}", value(t))),
                None => line.push(value(t)),
            }
        }
        if with_base && !shape.inline {
            line.push(if is_base {
                "-".to_string()
            } else {
                change(top).unwrap_or_else(|| "-".to_string())
            });
        }
        if eff {
            line.push(efficiency(top));
        }
        if locks {
            line.push(lock(top));
        }
        cells.push(line);
    }
    (header, cells)
}

/// What the columns of `shape` mean.
fn legend(facts: &Facts<'_>, shape: Shape, low: usize, top: usize) -> String {
    let mut parts = Vec::new();
    let at = if shape.long || shape.inline {
        "the same threads".to_string()
    } else {
        format!("{top} threads")
    };
    if let Some(b) = facts.base {
        if shape.inline && !shape.long {
            parts.push(format!("(+N%) = change against {b} at {at}"));
        } else {
            parts.push(format!("vs {b} = change against {b} at {at}"));
        }
    }
    if (shape.eff || shape.long) && top > low {
        parts.push(format!(
            "eff = the rate per thread over that at {low} thread{} (1.00 = perfect scaling; \
             the control loop's, in the title, is the machine's ceiling)",
            if low == 1 { "" } else { "s" }
        ));
    }
    if facts.has_locks && (shape.locks || shape.long) {
        parts.push(
            "waits most = the engine's lock class with the longest total wait (--lockstat)"
                .to_string(),
        );
    } else if facts.has_locks {
        parts.push("(the lock column did not fit; --verbose shows every field)".to_string());
    }
    if facts.compare {
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
                "waits most @2"
            ]
        );
        assert_eq!(c.rows.len(), 8);
        assert_eq!(c.rows[0][..4], ["create", "base", "1.00k", "2.00k"]);
        assert_eq!(c.rows[1][2], "2.00k +100.0%");
        assert_eq!(c.rows[1][4], "1.00");
        assert_eq!(c.rows[1][5], "icache_global 12.00 ms");
        let title = &c.title;
        assert!(title.starts_with("mdtest on lanefs: ops/s"), "{title}");
        let end = "median of 3 reps; the control loop's efficiency at 2 threads: 1.00";
        assert!(title.ends_with(end), "{title}");
    }

    /// Many thread counts and variants still fit 100 columns: the changes move to one
    /// column, then the lock column goes.
    #[test]
    fn fits_the_width() {
        let many: Vec<usize> = (1..=8).collect();
        for threads in [&[1, 2][..], &[1, 2, 4, 8], &[1, 2, 4, 8, 16, 32], &many] {
            for locks in [false, true] {
                for variants in [
                    &["base", "ialloc", "icache", "lanefs", "papaya"][..],
                    &["base", "a-raw-spec-named-long"],
                ] {
                    let recs = run(variants, threads, locks);
                    for c in tables(&recs) {
                        let text = c.terminal();
                        assert!(width(&text) <= MAX_WIDTH, "{threads:?} {locks}\n{text}");
                        // Every thread count is in the table, as a column or as rows.
                        for t in threads {
                            assert!(text.contains(&format!(" {t} ")), "{t}\n{text}");
                        }
                    }
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
        assert_eq!(short(999_999.0), "1.00M");
        assert_eq!(short(99_999.0), "100k");
        assert_eq!(short(9_999.0), "10.0k");
    }
}
