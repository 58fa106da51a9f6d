//! The compare tables: medians per cell, ratios to the kernel and to the FUSE ceiling, and
//! the goals each ratio is held to.

use super::*;

/// Records of one workload phase on one target at one thread count.
pub(super) fn cell<'a>(
    records: &'a [Record],
    w: &str,
    p: &str,
    t: &str,
    n: usize,
) -> Vec<&'a Record> {
    records
        .iter()
        .filter(|r| r.workload == w && r.phase == p && r.target == t && r.threads == n)
        .collect()
}

/// Median ops/s of a cell; `None` when it is empty.
pub(super) fn median(records: &[Record], w: &str, p: &str, t: &str, n: usize) -> Option<f64> {
    let c = cell(records, w, p, t, n);
    (!c.is_empty()).then(|| summary(c.iter().map(|r| r.ops_per_sec).collect()).0)
}

/// A table of the compare output with `header`.
pub(super) fn table_with(header: Vec<&str>) -> Table {
    let mut table = Table::new();
    table
        .load_style(presets::UTF8_FULL_CONDENSED)
        .set_header(header);
    table
}

/// Right-align the number columns `cols` of `table`.
pub(super) fn align_right(table: &mut Table, cols: std::ops::Range<usize>) {
    for i in cols {
        if let Some(col) = table.column_mut(i) {
            col.set_cell_alignment(CellAlignment::Right);
        }
    }
}

/// A goal's cell: `goal` and whether `v` meets it ("-" without a goal, "Nx: -" without
/// a value).
pub(super) fn verdict(goal: Option<f64>, v: Option<f64>) -> String {
    match (goal, v) {
        (Some(g), Some(v)) => format!("{g}x: {}", if v >= g { "met" } else { "missed" }),
        (Some(g), None) => format!("{g}x: -"),
        (None, _) => "-".to_string(),
    }
}

pub(super) fn fmt_x(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_string(), |v| format!("{v:.2}x"))
}

/// `a / b` when both are there and `b` is positive.
pub(super) fn div(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    a.zip(b).filter(|&(_, b)| b > 0.0).map(|(a, b)| a / b)
}

/// The compare table of `records`: one row per workload phase, target and thread count,
/// with the median ops/s (min, max), the ratio against fuse2fs at the same thread count,
/// the scaling against the fewest threads, and the daemon's CPU time per operation; then
/// the legend, the control loop's scaling, and the goals at 2 threads.
pub fn render(records: &[Record]) -> String {
    let mut series: Vec<(&str, &str)> = Vec::new();
    let mut targets: Vec<&str> = Vec::new();
    let mut threads: Vec<usize> = Vec::new();
    let programs = render_programs(records);
    let records: Vec<Record> = records
        .iter()
        .filter(|r| r.workload != programs::NAME)
        .cloned()
        .collect();
    let records = &records[..];
    for r in records.iter().filter(|r| r.workload != control::NAME) {
        push_unique(&mut series, (r.workload.as_str(), r.phase.as_str()));
        push_unique(&mut targets, r.target.as_str());
        push_unique(&mut threads, r.threads);
    }
    if series.is_empty() {
        return programs;
    }
    threads.sort_unstable();
    let fewest = threads.first().copied().unwrap_or(1);
    let mut table = table_with(vec![
        "workload",
        "phase",
        "target",
        "threads",
        "ops/s median",
        "min",
        "max",
        "reps",
        "vs fuse2fs",
        format!("scaling vs {fewest}").as_str(),
        "daemon CPU/op",
    ]);
    for &(w, p) in &series {
        for &t in &targets {
            for &n in &threads {
                let c = cell(records, w, p, t, n);
                if c.is_empty() {
                    continue;
                }
                let (med, min, max) = summary(c.iter().map(|r| r.ops_per_sec).collect());
                let cpu: Vec<f64> = c.iter().filter_map(|r| r.daemon_cpu_us_per_op).collect();
                let cpu = if cpu.is_empty() {
                    "-".to_string()
                } else {
                    format!("{:.1} us", summary(cpu).0)
                };
                let scaling = if n == fewest {
                    "-".to_string()
                } else {
                    fmt_x(div(Some(med), median(records, w, p, t, fewest)))
                };
                let over = if c.iter().any(|r| r.oversubscribed) {
                    "*"
                } else {
                    ""
                };
                table.add_row(vec![
                    w.to_string(),
                    p.to_string(),
                    t.to_string(),
                    format!("{n}{over}"),
                    fmt_rate(med),
                    fmt_rate(min),
                    fmt_rate(max),
                    c.len().to_string(),
                    fmt_x(div(Some(med), median(records, w, p, FUSE2FS, n))),
                    scaling,
                    cpu,
                ]);
            }
        }
    }
    align_right(&mut table, 3..11);
    let mut out = table.to_string();
    out.push('\n');
    out.push_str(&format!(
        "{LANEFS} = lanefs mount -f -o allow_other (FUSE-over-io_uring where the kernel \
         offers it); {LANEFS_DEV} = the same with -o no_io_uring (/dev/fuse); {MEMFS}, \
         {MEMFS_DEV} = lanefs memfs, an in-memory file system behind the same frontend and \
         transport: the FUSE ceiling; {FUSE2FS} = fuse2fs -f -o allow_other; {KERNEL} = \
         mount -o loop; threads marked * are more than the CPUs\n\
         ops/s = total over threads, median of the reps; vs fuse2fs = median / fuse2fs's at \
         the same threads; scaling vs {fewest} = total ops/s / the total at {fewest} thread(s) \
         (above 1: the total rises)\n\
         daemon CPU/op = user + system CPU time of the FUSE daemon (all its threads: its \
         process CPU clock, utime + stime) in the measured time / ops; - for the kernel, \
         whose work is not one process\n\
         bufio64k: one op = one 64 KiB call (MiB/s = ops/s / 16); synced = write with an \
         fsync after each 8 MiB pass; each read pass drops the file's page cache first \
         (POSIX_FADV_DONTNEED)\n"
    ));
    let ctl = |n| median(records, control::NAME, control::PHASE, CONTROL_TARGET, n);
    for &n in threads.iter().filter(|&&n| n != fewest) {
        out.push_str(&format!(
            "control loop (shares no memory) scaling at {n} vs {fewest}: {}, the ceiling of \
             this machine in this run\n",
            fmt_x(div(ctl(n), ctl(fewest)))
        ));
    }
    if threads.contains(&1) && threads.contains(&2) {
        out.push_str(&render_goals(records, &series));
        out.push_str(&render_ceiling(records, &series));
    }
    programs + &out
}

/// Issue 43's goals at 2 threads: lanefs against the in-memory ceiling over the same
/// transport, and against the kernel's ext4, for each transport the run had.
pub(super) fn render_ceiling(records: &[Record], series: &[(&str, &str)]) -> String {
    let mut table = table_with(vec![
        "workload",
        "phase",
        "transport",
        "lanefs @1",
        "lanefs @2",
        "x ceiling @2",
        "goal",
        "x kernel @2",
        "goal",
    ]);
    // Without /dev/fuse rows the default transport was /dev/fuse itself.
    let both = records.iter().any(|r| r.target == LANEFS_DEV);
    let default = if both { "io_uring" } else { "/dev/fuse" };
    let mut rows = 0;
    for &(w, p) in series {
        let (cg, kg) = CEILING_GOALS
            .iter()
            .find(|g| g.0 == w && g.1 == p)
            .map_or((0.0, 0.0), |g| (g.2, g.3));
        for (lanefs, ceiling, transport) in [
            (LANEFS, MEMFS, default),
            (LANEFS_DEV, MEMFS_DEV, "/dev/fuse"),
        ] {
            let two = median(records, w, p, lanefs, 2);
            if two.is_none() {
                continue;
            }
            let x_ceiling = div(two, median(records, w, p, ceiling, 2));
            let x_kernel = div(two, median(records, w, p, KERNEL, 2));
            table.add_row(vec![
                w.to_string(),
                p.to_string(),
                transport.to_string(),
                median(records, w, p, lanefs, 1).map_or("-".into(), fmt_rate),
                fmt_rate(two.unwrap_or(0.0)),
                fmt_x(x_ceiling),
                verdict((cg > 0.0).then_some(cg), x_ceiling),
                fmt_x(x_kernel),
                verdict((kg > 0.0).then_some(kg), x_kernel),
            ]);
            rows += 1;
        }
    }
    if rows == 0 {
        return String::new();
    }
    align_right(&mut table, 3..9);
    format!(
        "issue 43's goals at 2 threads: lanefs against the FUSE ceiling ({MEMFS} over the \
         same transport) and against the kernel's ext4 in this run:\n{table}\n"
    )
}

/// The goals table of [`render`] alone (the compact output's), when `records` have 1 and 2
/// threads; empty otherwise.
pub fn goals(records: &[Record]) -> String {
    let mut series: Vec<(&str, &str)> = Vec::new();
    let mut threads: Vec<usize> = Vec::new();
    let programs = render_programs(records);
    let filtered = records
        .iter()
        .filter(|r| r.workload != control::NAME && r.workload != programs::NAME);
    for r in filtered {
        push_unique(&mut series, (r.workload.as_str(), r.phase.as_str()));
        push_unique(&mut threads, r.threads);
    }
    if threads.contains(&1) && threads.contains(&2) {
        programs + &render_goals(records, &series) + &render_ceiling(records, &series)
    } else {
        programs
    }
}

/// Issue 56's goals for the programs: lanefs's time against the kernel's ext4 and
/// fuse2fs's (their time / lanefs's: above 1 is faster), and the most requests per entry.
const PROGRAM_GOALS: &[(&str, f64, f64, Option<f64>)] = &[
    ("tar-x", 0.5, 8.0, Some(6.0)),
    ("cp-a", 0.6, 8.0, Some(6.0)),
    ("rm-rf", 0.7, 8.0, None),
    ("find-ls", 0.8, 8.0, None),
    ("tar-c", 0.9, 4.0, None),
];

/// Median seconds of a program on a target.
fn program_seconds(records: &[Record], p: &str, t: &str) -> Option<f64> {
    let c = cell(records, programs::NAME, p, t, 1);
    (!c.is_empty()).then(|| summary(c.iter().map(|r| r.seconds).collect()).0)
}

/// Median requests per entry of a program on a target (lanefs's and the ceiling's).
fn requests_per_entry(records: &[Record], p: &str, t: &str) -> Option<f64> {
    let per: Vec<f64> = cell(records, programs::NAME, p, t, 1)
        .iter()
        .filter_map(|r| {
            let total: u64 = r.fuse_requests.as_ref()?.iter().map(|(_, n)| n).sum();
            Some(total as f64 / r.ops.max(1) as f64)
        })
        .collect();
    (!per.is_empty()).then(|| summary(per).0)
}

/// The programs' table (empty without `programs` records): a row per program and target
/// with the median time of the reps, the kernel's and fuse2fs's time over it, and for
/// this binary's daemons the requests per entry and the opcodes that made most of them
/// (first repetition); then issue 56's goals for lanefs over its default transport.
pub(super) fn render_programs(records: &[Record]) -> String {
    let mut phases: Vec<&str> = Vec::new();
    let mut targets: Vec<&str> = Vec::new();
    for r in records.iter().filter(|r| r.workload == programs::NAME) {
        push_unique(&mut phases, r.phase.as_str());
        push_unique(&mut targets, r.target.as_str());
    }
    if phases.is_empty() {
        return String::new();
    }
    let mut table = table_with(vec![
        "program",
        "target",
        "seconds",
        "min",
        "max",
        "x kernel",
        "x fuse2fs",
        "daemon CPU s",
        "requests/entry",
        "most requests (rep 1)",
    ]);
    for &p in &phases {
        for &t in &targets {
            let c = cell(records, programs::NAME, p, t, 1);
            if c.is_empty() {
                continue;
            }
            let (med, min, max) = summary(c.iter().map(|r| r.seconds).collect());
            let cpu: Vec<f64> = c.iter().filter_map(|r| r.daemon_cpu_seconds).collect();
            let top = c
                .iter()
                .min_by_key(|r| r.rep)
                .and_then(|r| r.fuse_requests.as_ref())
                .map(|ops| {
                    let entries = c[0].ops.max(1) as f64;
                    ops.iter()
                        .take(4)
                        .map(|(n, k)| format!("{n} {:.1}", *k as f64 / entries))
                        .collect::<Vec<_>>()
                        .join(", ")
                })
                .unwrap_or_else(|| "-".to_string());
            table.add_row(vec![
                p.to_string(),
                t.to_string(),
                format!("{med:.3}"),
                format!("{min:.3}"),
                format!("{max:.3}"),
                fmt_x(div(program_seconds(records, p, KERNEL), Some(med))),
                fmt_x(div(program_seconds(records, p, FUSE2FS), Some(med))),
                if cpu.is_empty() {
                    "-".to_string()
                } else {
                    format!("{:.2}", summary(cpu).0)
                },
                requests_per_entry(records, p, t)
                    .map_or_else(|| "-".to_string(), |v| format!("{v:.1}")),
                top,
            ]);
        }
    }
    align_right(&mut table, 2..9);
    let mut goals = table_with(vec![
        "program",
        "lanefs x kernel",
        "goal",
        "lanefs x fuse2fs",
        "goal",
        "requests/entry",
        "goal",
    ]);
    for &(p, vs_kernel, vs_fuse2fs, most) in PROGRAM_GOALS {
        let lanefs = program_seconds(records, p, LANEFS);
        if lanefs.is_none() {
            continue;
        }
        let k = div(program_seconds(records, p, KERNEL), lanefs);
        let f = div(program_seconds(records, p, FUSE2FS), lanefs);
        let rpe = requests_per_entry(records, p, LANEFS);
        let rpe_goal = match (most, rpe) {
            (Some(g), Some(v)) => format!("at most {g}: {}", if v <= g { "met" } else { "missed" }),
            (Some(g), None) => format!("at most {g}: -"),
            (None, _) => "-".to_string(),
        };
        goals.add_row(vec![
            p.to_string(),
            fmt_x(k),
            verdict(Some(vs_kernel), k),
            fmt_x(f),
            verdict(Some(vs_fuse2fs), f),
            rpe.map_or_else(|| "-".to_string(), |v| format!("{v:.1}")),
            rpe_goal,
        ]);
    }
    align_right(&mut goals, 1..6);
    format!(
        "programs (one process each, whole commands; x kernel = the kernel's ext4 time / \
         this one's, above 1 is faster; requests/entry = requests the daemon received / \
         entries in the archive):\n{table}\n\
         issue 56's goals for the programs ({LANEFS}):\n{goals}\n"
    )
}

/// The goals at 2 threads: lanefs against fuse2fs, and whether lanefs's total
/// rises from 1 to 2 threads (beside fuse2fs's).
pub(super) fn render_goals(records: &[Record], series: &[(&str, &str)]) -> String {
    let mut table = table_with(vec![
        "workload",
        "phase",
        "lanefs/fuse2fs @2",
        "goal",
        "lanefs 2/1",
        "fuse2fs 2/1",
        "rises",
    ]);
    for &(w, p) in series {
        let vs = div(
            median(records, w, p, LANEFS, 2),
            median(records, w, p, FUSE2FS, 2),
        );
        let goal = GOALS.iter().find(|g| g.0 == w && g.1 == p).map(|g| g.2);
        let goal_text = verdict(goal, vs);
        let scale = |t| div(median(records, w, p, t, 2), median(records, w, p, t, 1));
        let lanefs = scale(LANEFS);
        let rises = match lanefs {
            Some(s) if s > 1.0 => "yes",
            Some(_) => "no",
            None => "-",
        };
        table.add_row(vec![
            w.to_string(),
            p.to_string(),
            fmt_x(vs),
            goal_text,
            fmt_x(lanefs),
            fmt_x(scale(FUSE2FS)),
            rises.to_string(),
        ]);
    }
    align_right(&mut table, 2..7);
    format!("issue 11's goals at 2 threads against fuse2fs in this run:\n{table}\n")
}
