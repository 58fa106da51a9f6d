//! Seed 003's table, from the records of rtfrag: per phase, variant and thread count the
//! allocations per second against `plain` (Linux 6.4's allocator), the bitmap and summary
//! blocks each allocation fetched, instructions per allocation where callgrind counted
//! them, and the hash of every decision, with whether it equals `plain`'s in the same
//! repetition; then issue 14's goals, each marked met or missed.

use super::run::Run;
use super::{comparison_table, fmt_amount, fmt_rate, Record};
use crate::variant::Family;
use crate::workloads::rtfrag;

impl Run<'_> {
    /// Median allocations (frees) per second, all threads together.
    fn rate(&self, phase: &str, variant: &str, threads: usize) -> Option<f64> {
        self.median(phase, variant, threads, |r| Some(r.ops_per_sec))
    }

    /// Median bitmap + summary blocks per allocation.
    fn reads(&self, phase: &str, variant: &str, threads: usize) -> Option<f64> {
        self.median(phase, variant, threads, reads_per_alloc)
    }

    /// How many repetitions of `variant` decided as `base` did in the same repetition,
    /// of how many both ran.
    pub(super) fn same_as(
        &self,
        phase: &str,
        variant: &str,
        base: &str,
        threads: usize,
    ) -> (usize, usize) {
        let theirs = self.cell(phase, base, threads);
        let mut n = (0, 0);
        for r in self.cell(phase, variant, threads) {
            let Some(b) = theirs.iter().find(|b| b.rep == r.rep) else {
                continue;
            };
            if r.rt_decisions.is_some() && b.rt_decisions.is_some() {
                n.1 += 1;
                n.0 += usize::from(r.rt_decisions == b.rt_decisions);
            }
        }
        n
    }
}

/// Bitmap + summary blocks per allocation, where the record counts them.
fn reads_per_alloc(r: &Record) -> Option<f64> {
    Some(r.rt_bitmap_reads_per_alloc? + r.rt_summary_reads_per_alloc?)
}

/// The runs of rtfrag, one per target.
fn runs(records: &[Record]) -> Vec<Run<'_>> {
    super::run::runs(records, |w| w == rtfrag::NAME)
}

/// Seed 003's table and issue 14's goals for every target rtfrag ran on (empty when it
/// did not run).
pub fn render(records: &[Record]) -> String {
    runs(records).iter().map(render_run).collect()
}

/// A ratio as "0.12x", with more digits when small.
fn fmt_x(v: f64) -> String {
    if v < 0.01 {
        format!("{v:.4}x")
    } else if v < 1.0 {
        format!("{v:.3}x")
    } else {
        format!("{v:.2}x")
    }
}

/// "met" or "missed".
fn verdict(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "**missed**"
    }
}

fn render_run(run: &Run<'_>) -> String {
    let base = Family::Realtime
        .baselines()
        .iter()
        .find_map(|b| run.variants.iter().copied().find(|v| v == b));
    let header = [
        "phase",
        "variant",
        "threads",
        "allocs/s",
        "vs plain",
        "bitmap/alloc",
        "summary/alloc",
        "reads vs plain",
        "instr/alloc",
        "decisions",
        "= plain",
    ]
    .map(String::from)
    .to_vec();
    let mut rows = Vec::new();
    for phase in rtfrag::PHASES {
        for &v in &run.variants {
            for &t in &run.threads {
                let recs = run.cell(phase, v, t);
                if recs.is_empty() {
                    continue;
                }
                let rate = run.rate(phase, v, t);
                let vs = |x: Option<f64>, b: Option<f64>| match (x, b) {
                    (Some(x), Some(b)) if Some(v) != base && b > 0.0 => fmt_x(x / b),
                    _ => "-".to_string(),
                };
                let base_rate = base.and_then(|b| run.rate(phase, b, t));
                let reads = run.reads(phase, v, t);
                let base_reads = base.and_then(|b| run.reads(phase, b, t));
                let hashes: Vec<&str> = recs
                    .iter()
                    .filter_map(|r| r.rt_decisions.as_deref())
                    .collect();
                let hash = match hashes.first() {
                    None => "-".to_string(),
                    Some(h) if hashes.iter().all(|x| x == h) => h.to_string(),
                    Some(_) => format!("{} differ", hashes.len()),
                };
                let same = match base {
                    Some(b) if b != v => {
                        let (n, of) = run.same_as(phase, v, b, t);
                        if of == 0 {
                            "-".to_string()
                        } else {
                            format!("{} {n}/{of}", if n == of { "yes" } else { "no" })
                        }
                    }
                    _ => "-".to_string(),
                };
                let per = |f: fn(&Record) -> Option<f64>| fmt_amount(run.median(phase, v, t, f));
                rows.push(vec![
                    phase.to_string(),
                    v.to_string(),
                    t.to_string(),
                    rate.map_or("-".to_string(), fmt_rate),
                    vs(rate, base_rate),
                    per(|r| r.rt_bitmap_reads_per_alloc),
                    per(|r| r.rt_summary_reads_per_alloc),
                    vs(reads, base_reads),
                    per(|r| r.instructions_per_op),
                    hash,
                    same,
                ]);
            }
        }
    }
    let mut out = format!(
        "\n{} on {}: seed 003's realtime allocator ({})\n{}\n",
        rtfrag::NAME,
        run.target,
        run.reps_text(),
        comparison_table(header, rows, 3)
    );
    out.push_str(
        "allocs/s = median allocations per second as the allocator counts them, all threads \
         (in free: freed runs per second); bitmap/alloc, summary/alloc = blocks the \
         allocations fetched (deterministic counters); vs plain = against plain at the same \
         thread count; instr/alloc = instructions per allocation (per freed run in free) of \
         the whole in-process call under valgrind's callgrind (1 thread, in a run of its own \
         making the first of each phase's calls); decisions = the hash of every allocation since \
         mount at the phase's end; = plain: repetitions whose hash equals plain's in the \
         same repetition\n",
    );
    if !run.recs.iter().any(|r| r.instructions_per_op.is_some()) {
        out.push_str(NO_INSTRUCTIONS);
    }
    out.push_str(&goals(run, base));
    out
}

/// Said when no record has instructions: the run says why before the table.
const NO_INSTRUCTIONS: &str = "instructions: not measured (no valgrind/perf counters, or no \
     1-thread run; the line before the table says why)\n";

/// Issue 14's goals for every variant against `base`, where both ran.
fn goals(run: &Run<'_>, base: Option<&str>) -> String {
    let Some(base) = base else {
        return "goals: need plain beside the default (--variants plain,default) to compare\n"
            .to_string();
    };
    let allocating = ["alloc", "alloc-hint", "realloc"];
    let mut out = String::new();
    for &v in run.variants.iter().filter(|&&v| v != base) {
        out.push_str(&format!("goals, {v} against {base}:\n"));
        // Same decisions: every phase, every repetition, at one thread; at more, reported.
        for &t in &run.threads {
            let (mut n, mut of) = (0, 0);
            for phase in rtfrag::PHASES {
                let (a, b) = run.same_as(phase, v, base, t);
                n += a;
                of += b;
            }
            if of == 0 {
                continue;
            }
            if t == 1 {
                out.push_str(&format!(
                    "  same decisions at 1 thread: equal hashes in {n} of {of} phase runs: {}\n",
                    verdict(n == of)
                ));
            } else {
                out.push_str(&format!(
                    "  same decisions at {t} threads: equal hashes in {n} of {of} phase runs \
                     (threads interleave differently from run to run, so the allocator sees \
                     the requests in another order: not comparable, not a goal)\n"
                ));
            }
        }
        for &t in &run.threads {
            let mut reads = Vec::new();
            let mut rates = Vec::new();
            for phase in allocating {
                let r = run.reads(phase, v, t).zip(run.reads(phase, base, t));
                if let Some((x, b)) = r.filter(|(_, b)| *b > 0.0) {
                    reads.push((phase, x / b));
                }
                let r = run.rate(phase, v, t).zip(run.rate(phase, base, t));
                if let Some((x, b)) = r.filter(|(_, b)| *b > 0.0) {
                    rates.push((phase, x / b));
                }
            }
            let list = |v: &[(&str, f64)]| {
                v.iter()
                    .map(|(p, x)| format!("{p} {}", fmt_x(*x)))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let unit = if t == 1 { "thread" } else { "threads" };
            if !reads.is_empty() {
                out.push_str(&format!(
                    "  bitmap + summary reads per allocation at most 0.2x {base}'s, {t} {unit}: \
                     {}: {}\n",
                    list(&reads),
                    verdict(reads.iter().all(|(_, x)| *x <= 0.2))
                ));
            }
            if !rates.is_empty() {
                out.push_str(&format!(
                    "  allocations/s at least 3x {base}'s, {t} {unit}: {}: {}\n",
                    list(&rates),
                    verdict(rates.iter().all(|(_, x)| *x >= 3.0))
                ));
            }
        }
        let instr: Vec<String> = rtfrag::PHASES
            .iter()
            .filter_map(|&p| {
                let f = |v: &str| run.median(p, v, 1, |r| r.instructions_per_op);
                let (x, b) = f(v).zip(f(base))?;
                (b > 0.0).then(|| format!("{p} {}", fmt_x(x / b)))
            })
            .collect();
        if !instr.is_empty() {
            out.push_str(&format!(
                "  instructions per operation against {base}'s, 1 thread (seed 003 measured \
                 about 0.9x CPU in production; not a goal here): {}\n",
                instr.join(", ")
            ));
        }
        let (one, two) = (1, 2);
        if run.threads.contains(&one) && run.threads.contains(&two) {
            let mut scale = Vec::new();
            for phase in allocating {
                let r = run.rate(phase, v, two).zip(run.rate(phase, v, one));
                if let Some((x, b)) = r.filter(|(_, b)| *b > 0.0) {
                    scale.push((phase, x / b));
                }
            }
            let ok = !scale.is_empty() && scale.iter().all(|(_, x)| *x >= 1.8);
            let scale: Vec<String> = scale
                .iter()
                .map(|(p, x)| format!("{p} {}", fmt_x(*x)))
                .collect();
            out.push_str(&format!(
                "  2 threads at least 1.8x 1 thread's allocations/s ({v}): {}: {}\n",
                scale.join(", "),
                verdict(ok)
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[allow(clippy::too_many_arguments)]
    fn rec(
        phase: &str,
        variant: &str,
        threads: usize,
        rep: usize,
        rate: f64,
        bitmap: f64,
        summary: f64,
        hash: &str,
    ) -> Record {
        Record {
            workload: rtfrag::NAME.to_string(),
            phase: phase.to_string(),
            target: "lanefs".to_string(),
            variant: variant.to_string(),
            threads,
            rep,
            ops_per_sec: rate,
            rt_bitmap_reads_per_alloc: Some(bitmap),
            rt_summary_reads_per_alloc: Some(summary),
            rt_decisions: Some(hash.to_string()),
            ..Record::default()
        }
    }

    /// The table compares with plain and the goals say met or missed.
    #[test]
    fn table_compares_with_plain() {
        let records = vec![
            rec("alloc", "plain", 1, 1, 1000.0, 90.0, 10.0, "aa"),
            rec("alloc", "default", 1, 1, 4000.0, 5.0, 5.0, "aa"),
            rec("alloc", "plain", 2, 1, 1500.0, 90.0, 10.0, "bb"),
            rec("alloc", "default", 2, 1, 7600.0, 5.0, 5.0, "cc"),
        ];
        let text = render(&records);
        assert!(text.contains("4.00x"), "{text}");
        assert!(text.contains("0.100x"), "{text}");
        assert!(text.contains("yes 1/1"), "{text}");
        assert!(text.contains("no 0/1"), "{text}");
        assert!(
            text.contains("same decisions at 1 thread: equal hashes in 1 of 1 phase runs: met"),
            "{text}"
        );
        assert!(text.contains("2 threads at least 1.8x"), "{text}");
        assert!(text.contains("alloc 1.90x: met"), "{text}");
        assert!(text.contains("not measured"), "{text}");
        let alone = render(&records[1..2]);
        assert!(alone.contains("need plain"), "{alone}");
        assert_eq!(render(&[]), "");
    }
}
