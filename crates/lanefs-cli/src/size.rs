//! Byte sizes on the command line: plain bytes or K/M/G/T suffixes (powers of 1024), parsed
//! as the engine parses its own size options (`lanefs::parse_size`).

pub use lanefs::parse_size;

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
