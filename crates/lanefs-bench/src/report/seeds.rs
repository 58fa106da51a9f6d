//! What each seed's patch series published, beside what this run measured of the same
//! mechanism: the lines the main job ends with. A seed's numbers come from its own
//! machine (16 to 64 cores, real disks) and workload scale; this run's from the records,
//! as ratios between variants of one run (median over repetitions, at the top thread
//! count the workload ran at, and at 1 thread where the seed published it). A seed whose
//! workload did not run prints nothing. Every line fits [`MAX_WIDTH`] columns.

use super::compact::{wrap, MAX_WIDTH};
use super::run::{runs, Run};
use super::{baseline, family_of, fmt_change, rate, Record};
use crate::variant::Variant;
use crate::workloads::{bufio, fallocate2, fsmark, mdtest, rtfrag, stat};
use lanefs::MountOptions;

/// One seed: what it changed, what its authors measured, and how to read this run.
struct Seed {
    id: &'static str,
    what: &'static str,
    published: &'static str,
    here: fn(&[Record]) -> Option<String>,
}

/// The five seeds, in number order (the repository's docs/seeds.md).
const SEEDS: [Seed; 5] = [
    Seed {
        id: "000",
        what: "ext4 block allocation",
        published: "will-it-scale fallocate2 in 64 containers on 64 cores, per container: \
                    linear -3.0% at 1, +74% at 2, +549% at 64; mb_optimize_scan -0.9%, +89%, \
                    +191%",
        here: here_000,
    },
    Seed {
        id: "001",
        what: "ext4 inode allocation",
        published: "mdtest, 48 processes each in its own directory: creates 10.2x (80k to \
                    812k/s), removes 1.04x",
        here: here_001,
    },
    Seed {
        id: "002",
        what: "large folios",
        published: "fio, 4 x 252 jobs of 64 KiB buffered IO on NVMe: reads 3x, 10% writes \
                    3x, 30% and 50% writes 1.15-1.5x",
        here: here_002,
    },
    Seed {
        id: "003",
        what: "XFS realtime allocator",
        published: "~10% less CPU in production, the same decisions",
        here: here_003,
    },
    Seed {
        id: "004",
        what: "inode hash",
        published: "fsmark creates on ext4: 0.96x at 2 threads, 1.20x at 16, 1.21x at 32, \
                    with half the CPU at 16 and 32",
        here: here_004,
    },
];

/// The seeds' lines for `records`, or empty when none of their workloads ran.
pub fn render(records: &[Record]) -> String {
    let mut out = String::new();
    for seed in &SEEDS {
        let Some(here) = (seed.here)(records) else {
            continue;
        };
        let head = format!(
            "seed {} ({}), published: {}",
            seed.id, seed.what, seed.published
        );
        out.push_str(&hanging("", &head));
        out.push_str(&hanging("  here: ", &here));
    }
    if out.is_empty() {
        return out;
    }
    let title = "each seed's published result, and this run's (ratios against the seed's \
                 baseline variant, medians; the seeds ran on 16-64 cores, this run on its CPUs)";
    format!("\n{}\n{out}", wrap(title, MAX_WIDTH))
}

/// `first` then `text`, wrapped at [`MAX_WIDTH`], continuation lines indented four
/// spaces.
fn hanging(first: &str, text: &str) -> String {
    let body = wrap(text, MAX_WIDTH - first.len().max(4));
    let mut out = String::new();
    for (i, line) in body.lines().enumerate() {
        out.push_str(if i == 0 { first } else { "    " });
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// The first run of `workload` (one per target) with its baseline and another variant.
fn run_of<'a>(records: &'a [Record], workload: &str) -> Option<(Run<'a>, &'a str)> {
    runs(records, |w| w == workload)
        .into_iter()
        .find_map(|run| {
            let base = baseline(workload, &run.variants)?;
            (run.variants.len() >= 2).then_some((run, base))
        })
}

/// Median rate of `phase`, `variant` at `threads`, in the workload's unit.
fn rate_of(run: &Run<'_>, phase: &str, variant: &str, threads: usize) -> Option<f64> {
    let w = run.workload;
    run.median(phase, variant, threads, |r| Some(rate(w, r)))
}

/// `variant` against `base` in `phase` at `threads`, as a ratio.
fn ratio(run: &Run<'_>, phase: &str, variant: &str, base: &str, threads: usize) -> Option<f64> {
    let (v, b) = rate_of(run, phase, variant, threads).zip(rate_of(run, phase, base, threads))?;
    (b > 0.0).then(|| v / b)
}

/// A ratio as the seeds print changes: "+53.4%".
fn pct(x: f64) -> String {
    fmt_change(x, 1.0).unwrap_or_else(|| "-".to_string())
}

/// A ratio as "1.43x".
fn times(x: f64) -> String {
    format!("{x:.2}x")
}

/// Ratios as a range: "1.13-1.31x", or one ratio when they agree to two digits.
fn range(v: &[f64]) -> Option<String> {
    let lo = v.iter().copied().reduce(f64::min)?;
    let hi = v.iter().copied().reduce(f64::max)?;
    let (a, b) = (format!("{lo:.2}"), format!("{hi:.2}"));
    Some(if a == b {
        format!("{a}x")
    } else {
        format!("{a}-{b}x")
    })
}

/// Whether `variant` of `workload` mounts with the engine's default options.
pub(crate) fn is_default(workload: &str, variant: &str) -> bool {
    family_of(workload)
        .and_then(|f| Variant::named_in(f, variant).ok())
        .is_some_and(|v| v.opts == MountOptions::default())
}

/// `variant`, marked when it is the engine's default.
fn label(workload: &str, variant: &str) -> String {
    if variant != crate::variant::DEFAULT_VARIANT && is_default(workload, variant) {
        format!("{variant} (default)")
    } else {
        variant.to_string()
    }
}

/// "at 2 threads" / "at 1 thread".
fn at(threads: usize) -> String {
    if threads == 1 {
        "at 1 thread".to_string()
    } else {
        format!("at {threads} threads")
    }
}

/// The variants of `run` other than `base`.
fn others<'a>(run: &Run<'a>, base: &str) -> Vec<&'a str> {
    run.variants
        .iter()
        .copied()
        .filter(|&v| v != base)
        .collect()
}

/// Seed 000: fallocate2's variants against base, at 1 thread and at the top count.
fn here_000(records: &[Record]) -> Option<String> {
    let (run, base) = run_of(records, fallocate2::NAME)?;
    let top = *run.threads.last()?;
    let phase = *run.phases.first()?;
    let mut parts = Vec::new();
    for v in others(&run, base) {
        let mut cells = Vec::new();
        for t in [1, top] {
            if t == 1 && top == 1 && !cells.is_empty() {
                break;
            }
            if let Some(x) = ratio(&run, phase, v, base, t) {
                cells.push(format!("{} {}", pct(x), at(t)));
            }
        }
        if !cells.is_empty() {
            parts.push(format!("{} {}", label(run.workload, v), cells.join(", ")));
        }
    }
    (!parts.is_empty()).then(|| format!("fallocate2 against {base}: {}", parts.join("; ")))
}

/// Seed 001: mdtest's creates and removes, the seed's change alone (`ialloc`) and the
/// default, against base at the top count.
fn here_001(records: &[Record]) -> Option<String> {
    let (run, base) = run_of(records, mdtest::NAME)?;
    let top = *run.threads.last()?;
    let mut parts = Vec::new();
    for v in others(&run, base) {
        if v != "ialloc" && !is_default(run.workload, v) {
            continue;
        }
        let cells: Vec<String> = ["create", "remove"]
            .iter()
            .filter_map(|&p| Some(format!("{p}s {}", times(ratio(&run, p, v, base, top)?))))
            .collect();
        if !cells.is_empty() {
            parts.push(format!("{} {}", label(run.workload, v), cells.join(", ")));
        }
    }
    (!parts.is_empty()).then(|| format!("mdtest against {base} {}: {}", at(top), parts.join("; ")))
}

/// Seed 002: bufio on one shared file, the default against base at the top count.
fn here_002(records: &[Record]) -> Option<String> {
    let (run, base) = run_of(records, bufio::NAME)?;
    let top = *run.threads.last()?;
    let v = others(&run, base)
        .into_iter()
        .find(|&v| is_default(run.workload, v))?;
    let phases = [
        ("shared-read", "reads"),
        ("shared-w10", "10% writes"),
        ("shared-w30", "30%"),
        ("shared-w50", "50%"),
        ("cold-read", "cold reads"),
    ];
    let cells: Vec<String> = phases
        .iter()
        .filter_map(|&(p, name)| Some(format!("{name} {}", times(ratio(&run, p, v, base, top)?))))
        .collect();
    (!cells.is_empty()).then(|| {
        format!(
            "bufio on one shared file, {} against {base} {}: {}",
            label(run.workload, v),
            at(top),
            cells.join(", ")
        )
    })
}

/// Seed 003: rtfrag's default against plain: the same decisions at 1 thread, the
/// instructions per allocation where callgrind counted them, and the allocation rates.
fn here_003(records: &[Record]) -> Option<String> {
    let (run, base) = run_of(records, rtfrag::NAME)?;
    let v = others(&run, base)
        .into_iter()
        .find(|&v| is_default(run.workload, v))?;
    let allocating = ["alloc", "alloc-hint", "realloc"];
    let mut parts = Vec::new();
    let (same, of) = rtfrag::PHASES
        .iter()
        .map(|p| run.same_as(p, v, base, 1))
        .fold((0, 0), |(a, b), (x, y)| (a + x, b + y));
    if of > 0 {
        let verdict = if same == of { "the same" } else { "different" };
        parts.push(format!(
            "{verdict} decisions at 1 thread ({same} of {of} phase runs)"
        ));
    }
    let instr: Vec<f64> = allocating
        .iter()
        .filter_map(|&p| {
            let f = |x: &str| run.median(p, x, 1, |r| r.instructions_per_op);
            let (a, b) = f(v).zip(f(base))?;
            (b > 0.0).then(|| a / b)
        })
        .collect();
    if let Some(r) = range(&instr) {
        parts.push(format!("{r} the instructions per allocation"));
    }
    for &t in &run.threads {
        let rates: Vec<f64> = allocating
            .iter()
            .filter_map(|&p| ratio(&run, p, v, base, t))
            .collect();
        if let Some(r) = range(&rates) {
            parts.push(format!("{r} the allocations/s {}", at(t)));
        }
    }
    (!parts.is_empty()).then(|| {
        format!(
            "rtfrag, {} against {base}: {}",
            label(run.workload, v),
            parts.join(", ")
        )
    })
}

/// Seed 004: fsmark's creates and stat's lookups, every cache against `global`, at the top
/// count.
fn here_004(records: &[Record]) -> Option<String> {
    let mut parts = Vec::new();
    for (workload, what) in [(fsmark::NAME, "fsmark creates"), (stat::NAME, "lookups")] {
        let Some((run, base)) = run_of(records, workload) else {
            continue;
        };
        let (Some(&top), Some(&phase)) = (run.threads.last(), run.phases.first()) else {
            continue;
        };
        let cells: Vec<String> = others(&run, base)
            .into_iter()
            .filter_map(|v| {
                let x = ratio(&run, phase, v, base, top)?;
                Some(format!("{} {}", label(workload, v), times(x)))
            })
            .collect();
        if !cells.is_empty() {
            parts.push(format!(
                "{what} against {base} {}: {}",
                at(top),
                cells.join(", ")
            ));
        }
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(w: &str, phase: &str, variant: &str, threads: usize, ops: f64) -> Record {
        Record {
            workload: w.to_string(),
            phase: phase.to_string(),
            target: "lanefs".to_string(),
            variant: variant.to_string(),
            threads,
            rep: 1,
            ops_per_sec: ops,
            ..Record::default()
        }
    }

    /// Each seed that ran gets its published line and this run's ratios, within the width.
    #[test]
    fn seeds_beside_this_run() {
        let mut records = Vec::new();
        for (v, one, two) in [("base", 100.0, 100.0), ("optimize_scan", 97.0, 153.4)] {
            records.push(rec("fallocate2", "fallocate", v, 1, one));
            records.push(rec("fallocate2", "fallocate", v, 2, two));
        }
        for (v, c, r) in [
            ("base", 100.0, 100.0),
            ("ialloc", 140.0, 90.0),
            ("lanefs", 150.0, 200.0),
        ] {
            records.push(rec("mdtest", "create", v, 2, c));
            records.push(rec("mdtest", "remove", v, 2, r));
        }
        for (v, x) in [("global", 100.0), ("bucket", 148.0)] {
            records.push(rec("stat", "lookup", v, 2, x));
        }
        for (v, hash) in [("plain", "aa"), ("default", "aa")] {
            let mut r = rec(
                "rtfrag",
                "alloc",
                v,
                1,
                if v == "plain" { 100.0 } else { 131.0 },
            );
            r.rt_decisions = Some(hash.to_string());
            records.push(r);
        }
        let wrapped = render(&records);
        for line in wrapped.lines() {
            assert!(
                line.chars().count() <= MAX_WIDTH,
                "{} columns: {line}",
                line.len()
            );
        }
        // The sentences, whatever the wrapping.
        let text = wrapped.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            text.contains("seed 000 (ext4 block allocation), published"),
            "{text}"
        );
        assert!(
            text.contains("optimize_scan (default) -3.0% at 1 thread, +53.4% at 2 threads"),
            "{text}"
        );
        assert!(
            text.contains("ialloc creates 1.40x, removes 0.90x"),
            "{text}"
        );
        assert!(
            text.contains("lanefs (default) creates 1.50x, removes 2.00x"),
            "{text}"
        );
        assert!(!text.contains("seed 002"), "bufio did not run: {text}");
        assert!(
            text.contains("the same decisions at 1 thread (1 of 1 phase runs)"),
            "{text}"
        );
        assert!(
            text.contains("1.31x the allocations/s at 1 thread"),
            "{text}"
        );
        assert!(text.contains("lookups against global at 2 threads: bucket (default) 1.48x"));
        assert!(!text.contains("missed"), "{text}");
        assert_eq!(render(&[]), "");
    }

    #[test]
    fn ranges() {
        assert_eq!(range(&[1.131, 1.31, 1.2]).as_deref(), Some("1.13-1.31x"));
        assert_eq!(range(&[0.9, 0.901]).as_deref(), Some("0.90x"));
        assert_eq!(range(&[]), None);
        assert_eq!(pct(0.9995), "+0.0%");
    }
}
