//! The seed-shaped summaries of the full output: for every workload phase and target with
//! two or more variants, each variant against the baseline (`render_vs_base`).

use super::*;

/// Variant every other one is compared with in [`render_vs_base`].
pub const BASE_VARIANT: &str = "base";

/// Where the numbers come from, for the legends of the comparison tables.
const TARGET_LEGEND: &str = "lanefs = the engine in-process (function calls, no kernel); \
     path:<dir> (--path) = real syscalls into the kernel's file system";

/// Legend of the free-space columns.
pub(super) const FREE_LEGEND: &str =
    "free extents = maximal runs of free blocks after the run, with \
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
