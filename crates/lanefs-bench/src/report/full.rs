//! The full tables (`--verbose`): every field of every run, and the inode cache after each
//! run that reports it.

use super::vs_base::FREE_LEGEND;
use super::*;

/// Records that differ only in their repetition.
pub(super) struct Group<'a> {
    pub(super) workload: &'a str,
    phase: &'a str,
    target: &'a str,
    variant: &'a str,
    pub(super) threads: usize,
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
pub(super) fn group(records: &[Record]) -> Vec<Group<'_>> {
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
pub(super) fn efficiency(groups: &[Group<'_>], g: &Group<'_>) -> Option<f64> {
    let base = groups
        .iter()
        .filter(|b| b.series() == g.series())
        .min_by_key(|b| b.threads)?;
    let base_rate = base.median() / base.threads as f64;
    (base_rate > 0.0).then(|| g.median() / g.threads as f64 / base_rate)
}

/// The control loop's efficiency at `threads` on `target`.
pub(super) fn control_efficiency(
    groups: &[Group<'_>],
    target: &str,
    threads: usize,
) -> Option<f64> {
    let c = groups
        .iter()
        .find(|c| c.workload == control::NAME && c.target == target && c.threads == threads)?;
    efficiency(groups, c)
}

fn fmt_eff(e: Option<f64>) -> String {
    e.map_or_else(|| "-".to_string(), |e| format!("{e:.2}"))
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
