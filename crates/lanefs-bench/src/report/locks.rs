//! The journal's share of a run's lock contention (`--lockstat`'s per-run line).

use super::*;

/// Whether lock class `name` belongs to the journal: `journal*` or `tx_list`.
pub fn is_journal_class(name: &str) -> bool {
    name.starts_with("journal") || name == "tx_list"
}

/// The journal lock classes' share of one run's contention: contended acquisitions of the
/// journal classes over all contended acquisitions, and the same for wait time. Lists the
/// journal classes it counted, so a reader sees which ones the engine has.
pub fn journal_lock_share(stats: &[LockStat]) -> String {
    let total = |journal_only: bool, field: fn(&LockStat) -> u64| {
        stats
            .iter()
            .filter(|s| !journal_only || is_journal_class(s.name))
            .map(field)
            .fold(0u64, u64::saturating_add)
    };
    let (contended, contended_all) = (total(true, |s| s.contended), total(false, |s| s.contended));
    let (wait, wait_all) = (
        total(true, |s| s.wait_total_ns),
        total(false, |s| s.wait_total_ns),
    );
    let names: Vec<&str> = stats
        .iter()
        .map(|s| s.name)
        .filter(|n| is_journal_class(n))
        .collect();
    format!(
        "{contended} of {contended_all} contended acquisitions ({}), wait {} of {} ({}); \
         journal classes: {}",
        fmt_share(contended, contended_all),
        lanefs::internals::sync::format_ns(wait),
        lanefs::internals::sync::format_ns(wait_all),
        fmt_share(wait, wait_all),
        if names.is_empty() {
            "none".to_string()
        } else {
            names.join(" ")
        }
    )
}

/// `part / whole` as a percentage, or "-" when `whole` is zero.
fn fmt_share(part: u64, whole: u64) -> String {
    if whole == 0 {
        "-".to_string()
    } else {
        format!("{:.1} %", part as f64 * 100.0 / whole as f64)
    }
}
