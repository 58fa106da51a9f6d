//! Lock statistics: the switch, the counters' snapshot and the table, like `perf lock
//! contention`.

use super::all_classes;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

/// Global switch for lock statistics, read with one relaxed load per acquisition.
static LOCKSTAT: AtomicBool = AtomicBool::new(false);

/// Turn lock statistics on or off for every class.
pub fn set_lockstat(on: bool) {
    LOCKSTAT.store(on, Relaxed);
}

/// Whether lock statistics are on (inlined: every acquisition asks).
#[inline]
pub fn lockstat_enabled() -> bool {
    LOCKSTAT.load(Relaxed)
}

/// Zero the counters of every class in [`all_classes`].
pub fn lockstat_reset() {
    for class in all_classes() {
        class.reset();
    }
}

/// The statistics of one lock class at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockStat {
    /// Class name.
    pub name: &'static str,
    /// Successful acquisitions, contended or not (failed try-locks are not counted).
    pub acquisitions: u64,
    /// Acquisitions that found the lock held and had to wait.
    pub contended: u64,
    /// Total time spent waiting, in nanoseconds.
    pub wait_total_ns: u64,
    /// Longest single wait, in nanoseconds.
    pub wait_max_ns: u64,
    /// Total time the class's locks were held exclusively (a mutex, a write lock), all
    /// threads together, in nanoseconds; a condition-variable wait does not count. Shared
    /// (read) holds are not timed: readers do not exclude each other.
    pub held_ns: u64,
}

/// The statistics of every class in [`all_classes`], in the same order.
#[must_use]
pub fn lockstat_snapshot() -> Vec<LockStat> {
    all_classes().iter().map(|class| class.stat()).collect()
}

/// A plain-text table of `stats` with aligned columns, most total wait first.
///
/// ```
/// use lanefs::internals::sync::{lockstat_snapshot, lockstat_table};
///
/// let table = lockstat_table(&lockstat_snapshot());
/// assert!(table.starts_with("class"));
/// assert!(table.contains("journal_commit"));
/// ```
pub fn lockstat_table(stats: &[LockStat]) -> String {
    let mut sorted: Vec<&LockStat> = stats.iter().collect();
    sorted.sort_by(|a, b| {
        (b.wait_total_ns, b.contended, b.acquisitions)
            .cmp(&(a.wait_total_ns, a.contended, a.acquisitions))
            .then(a.name.cmp(b.name))
    });
    let header = [
        "class",
        "acquired",
        "contended",
        "total wait",
        "max wait",
        "avg wait",
        "held",
    ];
    let mut rows = vec![header.map(String::from)];
    rows.extend(sorted.into_iter().map(table_row));
    let mut widths = [0usize; 7];
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.len());
        }
    }
    rows.iter().map(|row| table_line(row, &widths)).collect()
}

fn table_row(s: &LockStat) -> [String; 7] {
    let avg = match s.wait_total_ns.checked_div(s.contended) {
        Some(avg) => format_ns(avg),
        None => "-".to_string(),
    };
    [
        s.name.to_string(),
        s.acquisitions.to_string(),
        s.contended.to_string(),
        format_ns(s.wait_total_ns),
        format_ns(s.wait_max_ns),
        avg,
        format_ns(s.held_ns),
    ]
}

/// One table line: the name column left-aligned, the numbers right-aligned.
fn table_line(row: &[String; 7], widths: &[usize; 7]) -> String {
    let mut line = format!("{:<w$}", row[0], w = widths[0]);
    for (cell, width) in row.iter().zip(widths).skip(1) {
        // Writing to a String cannot fail.
        let _ = write!(line, "  {cell:>width$}");
    }
    line.push('\n');
    line
}

/// A duration in nanoseconds with a unit a reader takes in at a glance.
pub fn format_ns(ns: u64) -> String {
    // Precision loss above 2^53 ns (104 days) does not matter for display.
    let f = ns as f64;
    match ns {
        0..=999 => format!("{ns} ns"),
        1_000..=999_999 => format!("{:.2} us", f / 1e3),
        1_000_000..=999_999_999 => format!("{:.2} ms", f / 1e6),
        _ => format!("{:.2} s", f / 1e9),
    }
}
