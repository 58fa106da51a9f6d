//! The process's peak resident set size (`VmHWM` in `/proc/self/status`), reset before
//! each engine run so that each run reports its own peak.

/// Give freed heap back to the system and reset the peak resident set size to the current
/// one (writing `5` to `/proc/self/clear_refs`, Linux 4.0 and later). False when the
/// reset failed: a peak read afterwards would then be the process's since it started.
pub fn reset_peak() -> bool {
    trim_heap();
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// The peak resident set size in bytes since the last [`reset_peak`] (or since the
/// process started).
pub fn peak() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    parse_hwm(&status)
}

/// `VmHWM:` of a `/proc/PID/status` text, in bytes.
fn parse_hwm(status: &str) -> Option<u64> {
    let line = status.lines().find_map(|l| l.strip_prefix("VmHWM:"))?;
    let kib = line.trim().strip_suffix("kB")?.trim().parse::<u64>().ok()?;
    kib.checked_mul(1024)
}

/// How the program's heap gives its free memory back, when it is not glibc's malloc (set
/// once by the program that chose the allocator: the `lanefs` command uses mimalloc,
/// which keeps freed pages resident for ten seconds before it purges them).
static HEAP_TRIM: std::sync::OnceLock<fn()> = std::sync::OnceLock::new();

/// Have [`reset_peak`] give freed heap back with `trim` instead of glibc's `malloc_trim`.
pub fn set_heap_trim(trim: fn()) {
    let _ = HEAP_TRIM.set(trim);
}

/// Return the allocator's free memory to the system, so that memory an earlier run freed
/// does not count in the next run's resident set.
fn trim_heap() {
    if let Some(trim) = HEAP_TRIM.get() {
        trim();
        return;
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists; any pad is valid.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hwm_parses_in_bytes() {
        let status = "Name:\tx\nVmPeak:\t  9000 kB\nVmHWM:\t    1560 kB\nVmRSS:\t 1500 kB\n";
        assert_eq!(parse_hwm(status), Some(1560 * 1024));
        assert_eq!(parse_hwm("VmHWM: lots\n"), None);
        assert_eq!(parse_hwm(""), None);
    }

    /// After a reset, touching 64 MiB more raises the peak by about that much.
    #[test]
    fn peak_follows_a_reset() {
        if !reset_peak() {
            return; // No clear_refs here (an old kernel or a locked /proc): nothing to test.
        }
        let after = peak().expect("VmHWM");
        let block = vec![1u8; 64 << 20];
        std::hint::black_box(&block);
        let touched = peak().expect("VmHWM");
        assert!(touched >= after + (48 << 20), "{after} then {touched}");
    }
}
