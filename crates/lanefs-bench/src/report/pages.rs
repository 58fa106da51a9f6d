//! Seed 002's tables, from the records of the page-cache family's workloads (bufio): the
//! bandwidth of every phase and variant against the baseline, cached reads against the
//! memory-copy control of the same run, and the cold reads' device IO size.

use super::run::Run;
use super::{comparison_table, fmt_change, summary, Record, BASE_VARIANT};
use crate::variant::Family;
use crate::workloads::bufio;

impl Run<'_> {
    /// Median over repetitions of `phase`'s bandwidth over the memory-copy control's in
    /// the same run (same variant, thread count and repetition).
    fn of_memcpy(&self, phase: &str, variant: &str, threads: usize) -> Option<f64> {
        let v: Vec<f64> = self
            .cell(phase, variant, threads)
            .into_iter()
            .filter_map(|r| {
                let copy = self
                    .cell(bufio::PHASES[0], variant, threads)
                    .into_iter()
                    .find(|c| c.rep == r.rep)?;
                let c = copy.read_gib_s()?;
                (c > 0.0)
                    .then(|| r.bandwidth_gib_s().map(|b| b / c))
                    .flatten()
            })
            .collect();
        (!v.is_empty()).then(|| summary(v).0)
    }

    fn thread_header(&self, first: &[&str]) -> Vec<String> {
        let mut h: Vec<String> = first.iter().map(|s| s.to_string()).collect();
        for &t in &self.threads {
            let over = self.recs.iter().any(|r| r.threads == t && r.oversubscribed);
            let unit = if t == 1 { "thread" } else { "threads" };
            h.push(format!("{t} {unit}{}", if over { "*" } else { "" }));
        }
        h
    }
}

/// The runs of the page-cache family's workloads, one per workload and target.
fn runs(records: &[Record]) -> Vec<Run<'_>> {
    super::run::runs(records, |w| Family::Pages.workloads().contains(&w))
}

/// Seed 002's tables for every run of bufio in `records` (empty when there is none):
/// bandwidth per phase and variant against `base` (when it ran), cached reads as a share of
/// the memory-copy control, and cold reads with their device IO size.
pub fn render(records: &[Record]) -> String {
    let mut out = String::new();
    for run in runs(records) {
        out.push_str(&bandwidth_table(&run));
        out.push_str(&memcpy_table(&run));
        out.push_str(&cold_table(&run));
    }
    out
}

fn fmt_gib(v: f64) -> String {
    format!("{v:.2}")
}

/// GiB/s of every phase and variant, with each change against the baseline.
fn bandwidth_table(run: &Run<'_>) -> String {
    let base = run.variants.iter().copied().find(|&v| v == BASE_VARIANT);
    let rows = run
        .phases
        .iter()
        .flat_map(|&p| run.variants.iter().map(move |&v| (p, v)))
        .map(|(p, v)| {
            let mut row = vec![p.to_string(), v.to_string()];
            for &t in &run.threads {
                let x = run.median(p, v, t, Record::bandwidth_gib_s);
                let b = base.and_then(|b| run.median(p, b, t, Record::bandwidth_gib_s));
                row.push(match (x, b) {
                    (None, _) => "-".to_string(),
                    (Some(x), Some(b)) if Some(v) != base => match fmt_change(x, b) {
                        Some(c) => format!("{} ({c})", fmt_gib(x)),
                        None => fmt_gib(x),
                    },
                    (Some(x), _) => fmt_gib(x),
                });
            }
            row
        })
        .collect();
    let against = base.map_or(String::new(), |b| {
        format!(", (±N%) = its change against {b} at the same thread count")
    });
    format!(
        "\n{} on {}: GiB/s read + written, all threads ({})\n{}\ncell = median over reps of \
         the bytes the 64 KiB calls read and wrote per second{against}; memcpy = the same \
         copies from memory, no file system; -wN = N % of the calls write\n",
        run.workload,
        run.target,
        run.reps_text(),
        comparison_table(run.thread_header(&["phase", "variant"]), rows, 2)
    )
}

/// The cached-read phases' bandwidth over the memory-copy control's in the same run.
fn memcpy_table(run: &Run<'_>) -> String {
    let reads = ["shared-read", "files-read"];
    let rows: Vec<Vec<String>> = reads
        .iter()
        .filter(|p| run.phases.contains(p))
        .flat_map(|&p| run.variants.iter().map(move |&v| (p, v)))
        .map(|(p, v)| {
            let mut row = vec![p.to_string(), v.to_string()];
            for &t in &run.threads {
                row.push(
                    run.of_memcpy(p, v, t)
                        .map_or("-".to_string(), |x| format!("{x:.2}")),
                );
            }
            row
        })
        .collect();
    if rows.is_empty() {
        return String::new();
    }
    format!(
        "\n{} on {}: cached reads as a share of the memcpy control ({})\n{}\ncell = median \
         over reps of the phase's GiB/s over memcpy's GiB/s in the same run (1.00 = reads as \
         fast as copying the bytes from memory)\n",
        run.workload,
        run.target,
        run.reps_text(),
        comparison_table(run.thread_header(&["phase", "variant"]), rows, 2)
    )
}

/// Cold reads: bandwidth and the average device read.
fn cold_table(run: &Run<'_>) -> String {
    let p = "cold-read";
    if !run.phases.contains(&p) {
        return String::new();
    }
    let mut rows = Vec::new();
    for &v in &run.variants {
        for &t in &run.threads {
            let Some(gib) = run.median(p, v, t, Record::bandwidth_gib_s) else {
                continue;
            };
            let reads = run.median(p, v, t, |r| r.device_reads.map(|n| n as f64));
            let kib = run.median(p, v, t, Record::device_read_kib);
            rows.push(vec![
                v.to_string(),
                t.to_string(),
                fmt_gib(gib),
                reads.map_or("-".to_string(), |n| format!("{n:.0}")),
                kib.map_or("-".to_string(), |k| format!("{k:.0}")),
            ]);
        }
    }
    let header = [
        "variant",
        "threads",
        "GiB/s",
        "device reads",
        "avg device read KiB",
    ]
    .map(String::from)
    .to_vec();
    format!(
        "\n{} on {}: cold sequential reads, each pass after dropping the file's cache ({})\n{}\n\
         device reads = reads the page cache made to fill misses in the measured time (the \
         engine; - elsewhere); their average size is the read-ahead's IO size\n",
        run.workload,
        run.target,
        run.reps_text(),
        comparison_table(header, rows, 2)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(phase: &str, variant: &str, threads: usize, rep: usize, ops: f64) -> Record {
        Record {
            workload: bufio::NAME.to_string(),
            phase: phase.to_string(),
            target: "lanefs".to_string(),
            variant: variant.to_string(),
            threads,
            rep,
            ops_per_sec: ops,
            read_bytes_per_op: Some(bufio::CHUNK as f64),
            written_bytes_per_op: Some(0.0),
            ..Record::default()
        }
    }

    /// The bandwidth table compares with base; the memcpy table divides each run's read
    /// rate by the same run's copy rate; the cold table shows the device reads' size.
    #[test]
    fn tables_compare_with_base_and_memcpy() {
        // 16,384 calls of 64 KiB per second = 1 GiB/s.
        let g = 16_384.0;
        let mut records = vec![
            rec("memcpy", "base", 1, 1, 10.0 * g),
            rec("shared-read", "base", 1, 1, 4.0 * g),
            rec("memcpy", "default", 1, 1, 8.0 * g),
            rec("shared-read", "default", 1, 1, 6.0 * g),
        ];
        let mut cold = rec("cold-read", "default", 1, 1, g);
        cold.device_reads = Some(4);
        cold.device_read_bytes = Some(8 << 20);
        records.push(cold);
        let text = render(&records);
        assert!(text.contains("GiB/s read + written"), "{text}");
        assert!(text.contains("6.00 (+50.0%)"), "{text}");
        // 4/10 and 6/8: each against its own run's copy, not the other variant's.
        assert!(text.contains("0.40") && text.contains("0.75"), "{text}");
        assert!(text.contains("2048"), "{text}");
        assert!(render(&[rec("x", "base", 1, 1, g)]).contains("x"));
        let other = Record {
            workload: "fsync".to_string(),
            ..rec("fsync", "base", 1, 1, g)
        };
        assert_eq!(render(&[other]), "");
    }
}
