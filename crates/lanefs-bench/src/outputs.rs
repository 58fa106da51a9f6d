//! What a run leaves after its timed runs: the tables on `out` (compact, or every field with
//! `verbose`), and the files it was asked for: JSON records, SVG charts, a Markdown report.

use crate::config::{BenchConfig, TargetSpec};
use crate::markdown;
use crate::report::{self, chart, compact, Record};
use std::io::Write;

/// Print the tables of `records` to `out` and write the files `cfg` asks for.
pub(crate) fn write(
    cfg: &BenchConfig,
    records: &[Record],
    out: &mut dyn Write,
) -> Result<(), String> {
    let mut say = |text: &str| writeln!(out, "{text}").map_err(|e| format!("writing output: {e}"));
    let compare = matches!(cfg.target, TargetSpec::Compare { .. });
    if cfg.verbose && !compare {
        say(&format!("\n{}", report::render_table(records)))?;
    }
    say(&compact::render(records))?;
    // A compare run's full tables carry its goals already.
    let goals = match (compare, cfg.verbose) {
        (true, true) => String::new(),
        (true, false) => crate::compare::goals(records),
        (false, _) => report::seeds::render(records),
    };
    if !goals.is_empty() {
        say(goals.trim_end())?;
    }
    let saturation = report::saturation::render(records);
    if !saturation.is_empty() {
        say(saturation.trim_end())?;
    }
    if !cfg.verbose {
        say("(--verbose prints every field of every run; --json and --report keep them)")?;
    }
    if let Some(path) = &cfg.json {
        report::write_json(records, path)?;
        say(&format!(
            "wrote {} records to {}",
            records.len(),
            path.display()
        ))?;
    }
    let charts = match &cfg.svg {
        Some(dir) => {
            let written = chart::write_charts(records, dir)?;
            say(&format!(
                "wrote {} charts to {}",
                written.len(),
                dir.display()
            ))?;
            written
        }
        None => Vec::new(),
    };
    if let Some(path) = &cfg.report {
        let text = markdown::report(cfg, records, &charts, path);
        std::fs::write(path, text).map_err(|e| format!("writing {}: {e}", path.display()))?;
        say(&format!("wrote the report to {}", path.display()))?;
    }
    Ok(())
}
