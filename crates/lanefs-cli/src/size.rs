//! Byte sizes on the command line: plain bytes or K/M/G/T suffixes (powers of 1024).

/// Parse "4G", "512M", "64k", "1T", "4096" or "4096B" into bytes.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let bad = || format!("invalid size {text:?} (a number with an optional K, M, G or T suffix)");
    let t = text.trim();
    let t = t.strip_suffix(['B', 'b']).unwrap_or(t);
    let t = t.strip_suffix(['i', 'I']).unwrap_or(t);
    let (digits, shift) = match t.chars().last() {
        Some(c) if c.is_ascii_digit() => (t, 0),
        Some('K' | 'k') => (&t[..t.len() - 1], 10),
        Some('M' | 'm') => (&t[..t.len() - 1], 20),
        Some('G' | 'g') => (&t[..t.len() - 1], 30),
        Some('T' | 't') => (&t[..t.len() - 1], 40),
        _ => return Err(bad()),
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_ascii_digit()) {
        return Err(bad());
    }
    let n: u64 = digits.parse().map_err(|_| bad())?;
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| format!("size {text:?} is too large"))
}

/// `bytes` for people: "4.0 GiB", "512 B".
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut v = bytes as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suffixes_are_powers_of_1024() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("4K"), Ok(4096));
        assert_eq!(parse_size("3m"), Ok(3 << 20));
        assert_eq!(parse_size("4G"), Ok(4 << 30));
        assert_eq!(parse_size("2T"), Ok(2 << 40));
        assert_eq!(parse_size("4GiB"), Ok(4 << 30));
        assert_eq!(parse_size("100B"), Ok(100));
    }

    #[test]
    fn bad_sizes_are_refused() {
        for s in [
            "",
            "G",
            "4X",
            "-1",
            "1.5G",
            "4 G",
            "99999999999999999999",
            "16777216T",
        ] {
            assert!(parse_size(s).is_err(), "{s:?} accepted");
        }
    }

    #[test]
    fn human_sizes() {
        assert_eq!(human(512), "512 B");
        assert_eq!(human(4 << 30), "4.0 GiB");
    }
}
