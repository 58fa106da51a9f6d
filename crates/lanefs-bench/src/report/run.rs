//! One workload's records on one target, grouped: what seed 002's and seed 003's tables
//! (`pages`, `rtfrag`) are drawn from.

use super::{push_unique, summary, Record};

/// One workload on one target: its records, phases, variants and thread counts in
/// first-appearance order (thread counts ascending).
pub(crate) struct Run<'a> {
    pub(crate) workload: &'a str,
    pub(crate) target: &'a str,
    pub(crate) phases: Vec<&'a str>,
    pub(crate) variants: Vec<&'a str>,
    pub(crate) threads: Vec<usize>,
    pub(crate) recs: Vec<&'a Record>,
}

impl<'a> Run<'a> {
    /// The records of `phase` and `variant` at `threads`, one per repetition.
    pub(crate) fn cell(&self, phase: &str, variant: &str, threads: usize) -> Vec<&'a Record> {
        self.recs
            .iter()
            .copied()
            .filter(|r| r.phase == phase && r.variant == variant && r.threads == threads)
            .collect()
    }

    /// Median over repetitions of `field` of `phase`, `variant` at `threads`; `None` when
    /// no record there has it.
    pub(crate) fn median(
        &self,
        phase: &str,
        variant: &str,
        threads: usize,
        field: impl Fn(&Record) -> Option<f64>,
    ) -> Option<f64> {
        let v: Vec<f64> = self
            .cell(phase, variant, threads)
            .into_iter()
            .filter_map(field)
            .collect();
        (!v.is_empty()).then(|| summary(v).0)
    }

    /// "1 rep" or "median of N reps", for titles.
    pub(crate) fn reps_text(&self) -> String {
        match self.recs.iter().map(|r| r.rep).max().unwrap_or(0) {
            1 => "1 rep".to_string(),
            n => format!("median of {n} reps"),
        }
    }
}

/// The runs of the workloads `keep` accepts, one per workload and target, in
/// first-appearance order.
pub(crate) fn runs(records: &[Record], keep: impl Fn(&str) -> bool) -> Vec<Run<'_>> {
    let mut all: Vec<Run<'_>> = Vec::new();
    for r in records.iter().filter(|r| keep(&r.workload)) {
        let i = match all
            .iter()
            .position(|s| s.workload == r.workload && s.target == r.target)
        {
            Some(i) => i,
            None => {
                all.push(Run {
                    workload: &r.workload,
                    target: &r.target,
                    phases: Vec::new(),
                    variants: Vec::new(),
                    threads: Vec::new(),
                    recs: Vec::new(),
                });
                all.len() - 1
            }
        };
        let s = &mut all[i];
        push_unique(&mut s.phases, &r.phase);
        push_unique(&mut s.variants, &r.variant);
        push_unique(&mut s.threads, r.threads);
        s.recs.push(r);
    }
    for s in &mut all {
        s.threads.sort_unstable();
    }
    all
}
