//! Byte sizes on the command line: plain bytes or K/M/G/T suffixes (powers of 1024), parsed
//! as the engine parses its own size options (`lanefs::parse_size`).

pub use lanefs::parse_size;

/// `mkfs --size`: a size, or the smallest that holds the `-d` tree with a slack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SizeArg {
    /// This many bytes.
    Bytes(u64),
    /// `min`, `min+SIZE` or `min+PERCENT%`.
    Min(lanefs::mkfs::Slack),
}

/// The slack `mkfs -d` leaves without `--size` on an image it creates: `min+10%`.
pub const DEFAULT_SLACK: lanefs::mkfs::Slack = lanefs::mkfs::Slack::Percent(10);

/// Parse `--size`: `4G`, `min`, `min+64M`, `min+10%`.
pub fn parse_size_arg(text: &str) -> Result<SizeArg, String> {
    use lanefs::mkfs::Slack;
    let Some(rest) = text.strip_prefix("min") else {
        return parse_size(text).map(SizeArg::Bytes);
    };
    if rest.is_empty() {
        return Ok(SizeArg::Min(Slack::Bytes(0)));
    }
    let bad = || format!("invalid size '{text}' (min, min+SIZE such as min+64M, or min+PERCENT%)");
    let slack = rest.strip_prefix('+').ok_or_else(bad)?;
    if let Some(pct) = slack.strip_suffix('%') {
        let p: u32 = pct.parse().map_err(|_| bad())?;
        if p > 10_000 {
            return Err(format!("invalid size '{text}': at most min+10000%"));
        }
        return Ok(SizeArg::Min(Slack::Percent(p)));
    }
    parse_size(slack)
        .map(|b| SizeArg::Min(Slack::Bytes(b)))
        .map_err(|_| bad())
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
    fn min_sizes_parse() {
        use lanefs::mkfs::Slack;
        assert_eq!(parse_size_arg("4G"), Ok(SizeArg::Bytes(4 << 30)));
        assert_eq!(parse_size_arg("min"), Ok(SizeArg::Min(Slack::Bytes(0))));
        assert_eq!(
            parse_size_arg("min+64M"),
            Ok(SizeArg::Min(Slack::Bytes(64 << 20)))
        );
        assert_eq!(
            parse_size_arg("min+10%"),
            Ok(SizeArg::Min(Slack::Percent(10)))
        );
        for bad in ["min64M", "min+", "min+x%", "min+-1%", "minimum", "min+10%%"] {
            assert!(parse_size_arg(bad).is_err(), "{bad}");
        }
    }

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
