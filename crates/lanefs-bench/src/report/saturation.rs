//! Scaling past this machine, on paper (`--lockstat`): for each seed's workload, its
//! baseline and the engine's default, the lock classes a thread spends the largest share
//! of its time holding, and the thread count at which such a lock would be held all the
//! time (1 / share): Amdahl's bound for a lock every thread takes.
//!
//! The share is measured at the run's lowest thread count (1 in the main job), where a
//! hold is not stretched by contention: hold time of the class, all threads, over threads
//! x the run's wall time, median over repetitions. A class of many locks (one per group,
//! bucket, block or inode) saturates there only if every thread takes the same one; for a
//! class of one lock (`icache_global`, `stream_goal`, `journal_commit`) the count is the
//! ceiling itself.

use super::compact::{wrap, MAX_WIDTH};
use super::seeds::is_default;
use super::{baseline, comparison_table, summary, Record};
use crate::workloads::{bufio, fallocate2, fsmark, mdtest, rtfrag, stat};

/// The seeds' own workloads, in seed order.
const WORKLOADS: [(&str, &str); 6] = [
    ("000", fallocate2::NAME),
    ("001", mdtest::NAME),
    ("002", bufio::NAME),
    ("003", rtfrag::NAME),
    ("004", fsmark::NAME),
    ("004", stat::NAME),
];

/// Classes shown per workload and variant, the largest shares first.
const TOP: usize = 2;

/// The per-file class: its own column, out of the ranking. Every operation holds its
/// file's or directory's lock throughout, so it leads every ranking, yet the seeds'
/// workloads give each thread its own file or directory (`mdtest-shared` is the one that
/// shares one, and its table shows what that costs).
const PER_FILE: &str = "inode";

/// The saturation table of `records`, or empty when they carry no hold times (a run
/// without `--lockstat`).
pub fn render(records: &[Record]) -> String {
    let mut rows = Vec::new();
    let mut low_threads = None;
    for (seed, workload) in WORKLOADS {
        let recs: Vec<&Record> = records
            .iter()
            .filter(|r| r.workload == workload && r.lock_held_share.is_some())
            .collect();
        let Some(low) = recs.iter().map(|r| r.threads).min() else {
            continue;
        };
        low_threads.get_or_insert(low);
        let mut variants: Vec<&str> = Vec::new();
        for r in &recs {
            super::push_unique(&mut variants, r.variant.as_str());
        }
        let base = baseline(workload, &variants);
        let shown: Vec<&str> = variants
            .iter()
            .copied()
            .filter(|&v| Some(v) == base || is_default(workload, v))
            .collect();
        for v in shown {
            let runs: Vec<&Record> = recs
                .iter()
                .copied()
                .filter(|r| r.variant == v && r.threads == low)
                .collect();
            let mut row = vec![format!("{workload} ({seed})"), v.to_string()];
            let mut top = top_shares(&runs);
            let inode = top.iter().position(|(c, _)| c == PER_FILE);
            row.push(inode.map_or("-".to_string(), |i| fmt_share(top.remove(i).1)));
            for i in 0..TOP {
                row.push(top.get(i).map_or("-".to_string(), |(class, share)| {
                    format!("{class} {}: {}", fmt_share(*share), fmt_threads(*share))
                }));
            }
            rows.push(row);
        }
    }
    if rows.is_empty() {
        return String::new();
    }
    let header = [
        "workload (seed)",
        "variant",
        PER_FILE,
        "held longest: T",
        "next",
    ]
    .map(String::from)
    .to_vec();
    let low = low_threads.unwrap_or(1);
    let unit = if low == 1 { "thread" } else { "threads" };
    let title = format!(
        "lock saturation (--lockstat), at {low} {unit}: each seed's baseline and default, the \
         share of one thread's time it holds its files' locks, and the {TOP} other lock classes \
         it holds longest"
    );
    let legend = "class N%: T = the class's locks were held exclusively N% of one thread's \
                  time (hold time, all threads, over threads x the run's wall time; median of \
                  the repetitions), and T = 1 / share is the thread count at which one such lock \
                  would be held all the time; for a class of many locks (a group, bucket or \
                  block each) only if every thread took the same one; inode = the same share for \
                  the per-file lock, which these workloads' threads do not share";
    format!(
        "\n{}\n{}\n{}\n",
        wrap(&title, MAX_WIDTH),
        comparison_table(header, rows, 5),
        wrap(legend, MAX_WIDTH)
    )
}

/// The classes of `runs` (one per repetition) by median share, largest first; a class
/// missing from a repetition counts 0 there.
fn top_shares(runs: &[&Record]) -> Vec<(String, f64)> {
    let mut classes: Vec<&str> = Vec::new();
    for r in runs {
        for (c, _) in r.lock_held_share.iter().flatten() {
            super::push_unique(&mut classes, c.as_str());
        }
    }
    let mut shares: Vec<(String, f64)> = classes
        .into_iter()
        .map(|c| {
            let v: Vec<f64> = runs
                .iter()
                .map(|r| {
                    r.lock_held_share
                        .iter()
                        .flatten()
                        .find(|(n, _)| n == c)
                        .map_or(0.0, |(_, s)| *s)
                })
                .collect();
            (c.to_string(), summary(v).0)
        })
        .filter(|(_, s)| *s > 0.0)
        .collect();
    shares.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    shares
}

/// A share as a percentage with two significant digits or more.
fn fmt_share(s: f64) -> String {
    let p = s * 100.0;
    if p >= 10.0 {
        format!("{p:.0}%")
    } else if p >= 1.0 {
        format!("{p:.1}%")
    } else if p >= 0.01 {
        format!("{p:.2}%")
    } else {
        "<0.01%".to_string()
    }
}

/// 1 / `share` as a thread count: 1 when a thread already holds it all the time.
fn fmt_threads(share: f64) -> String {
    let n = 1.0 / share;
    if n < 1.5 {
        "1".to_string()
    } else if n >= 9_950.0 {
        ">10k".to_string()
    } else if n >= 999.5 {
        format!("{:.1}k", n / 1000.0)
    } else {
        format!("{n:.0}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(w: &str, variant: &str, threads: usize, rep: usize, shares: &[(&str, f64)]) -> Record {
        Record {
            workload: w.to_string(),
            phase: "p".to_string(),
            target: "lanefs".to_string(),
            variant: variant.to_string(),
            threads,
            rep,
            lock_held_share: Some(shares.iter().map(|(c, s)| (c.to_string(), *s)).collect()),
            ..Record::default()
        }
    }

    /// Baseline and default rows, top classes by median share, 1 / share as the count.
    #[test]
    fn shares_and_saturation() {
        let records = vec![
            rec(
                "stat",
                "global",
                1,
                1,
                &[("icache_global", 0.25), ("inode", 0.01)],
            ),
            rec("stat", "global", 1, 2, &[("icache_global", 0.15)]),
            rec("stat", "global", 2, 1, &[("icache_global", 0.9)]),
            rec("stat", "bucket", 1, 1, &[("icache_bucket", 0.002)]),
            rec("stat", "papaya", 1, 1, &[("inode", 0.5)]),
            rec(
                "fallocate2",
                "optimize_scan",
                1,
                1,
                &[
                    ("journal_commit", 0.000_53),
                    ("inode_stage", 0.000_52),
                    ("inode", 0.92),
                ],
            ),
        ];
        let text = render(&records);
        let row = |class: &str| {
            text.lines()
                .find(|l| l.contains(class))
                .unwrap_or_else(|| panic!("no {class} in\n{text}"))
                .to_string()
        };
        assert!(
            row("icache_global").contains("icache_global 20%: 5 "),
            "{text}"
        );
        assert!(
            row("icache_global").contains(" 0.50% "),
            "inode's column: {text}"
        );
        assert!(
            row("icache_bucket").contains("icache_bucket 0.20%: 500 "),
            "{text}"
        );
        assert!(
            !text.contains("papaya"),
            "neither baseline nor default: {text}"
        );
        assert!(text.contains("at 1 thread"), "{text}");
        assert!(
            text.lines().all(|l| l.chars().count() <= MAX_WIDTH),
            "{text}"
        );
        assert_eq!(render(&[rec("stat", "global", 1, 1, &[])][..0]), "");
    }

    #[test]
    fn counts() {
        assert_eq!(fmt_threads(1.5), "1");
        assert_eq!(fmt_threads(1.0 / 0.87), "1");
        assert_eq!(fmt_threads(0.5), "2");
        assert_eq!(fmt_threads(0.0004), "2.5k");
        assert_eq!(fmt_threads(1e-6), ">10k");
        assert_eq!(fmt_share(0.00001), "<0.01%");
    }
}
