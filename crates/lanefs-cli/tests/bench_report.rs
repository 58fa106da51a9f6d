//! Goal: issue 15's outputs of `lanefs bench`, from the command line. A short run writes one
//! SVG chart per workload that parses as XML and names every variant that ran, a Markdown
//! report whose tables have the right columns and link the charts, and JSON records; on
//! standard output the compact tables fit 100 columns, and when nothing is a terminal no
//! progress escape codes appear (a line per run instead). On a terminal (a pty from
//! `script`) the progress bar replaces the lines.

use std::path::Path;
use std::process::{Command, Output};

#[path = "../../lanefs/tests/common/skips.rs"]
mod skips;

const LANEFS: &str = env!("CARGO_BIN_EXE_lanefs");

/// The short run every check here uses: two workloads with their seeds' variants (and
/// bufio's GiB/s), 1 and 2 threads, one repetition.
const SHORT: &[&str] = &[
    "bench",
    "mdtest",
    "fallocate2",
    "bufio",
    "--threads",
    "1,2",
    "--reps",
    "1",
    "--seconds",
    "0.05",
    "--warmup",
    "0",
    "--files",
    "50",
    "--bufio-size",
    "1M",
    "--size",
    "64M",
];

fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().expect("run lanefs");
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    out
}

/// Every variant name each workload ran with.
const VARIANTS: &[(&str, &[&str])] = &[
    ("mdtest", &["base", "ialloc", "icache", "lanefs"]),
    ("fallocate2", &["base", "linear", "optimize_scan", "slots"]),
    ("bufio", &["base", "default"]),
];

fn check_svg(path: &Path, variants: &[&str]) {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    let doc = roxmltree::Document::parse(&text).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    let texts: Vec<&str> = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text())
        .collect();
    for v in variants {
        assert!(
            texts.iter().any(|t| t.trim() == *v),
            "{v} not drawn in {path:?}: {texts:?}"
        );
    }
    assert!(
        texts.iter().any(|t| t.contains("control ceiling")),
        "no ceiling in {path:?}"
    );
}

/// The pipe tables of a Markdown text: (header cells, rows of cells).
fn md_tables(md: &str) -> Vec<(Vec<String>, Vec<Vec<String>>)> {
    let cells = |l: &str| -> Vec<String> {
        let inner = l.trim().trim_start_matches('|').trim_end_matches('|');
        inner.split(" | ").map(|c| c.trim().to_string()).collect()
    };
    let mut tables = Vec::new();
    let mut lines = md.lines().peekable();
    while let Some(line) = lines.next() {
        if !line.starts_with('|') {
            continue;
        }
        let header = cells(line);
        let sep = lines.next().unwrap_or_default();
        assert!(sep.starts_with("|---") || sep.starts_with("|:--"), "{sep}");
        assert_eq!(sep.matches('|').count(), header.len() + 1, "{line}\n{sep}");
        let mut rows = Vec::new();
        while let Some(l) = lines.next_if(|l| l.starts_with('|')) {
            rows.push(cells(l));
        }
        tables.push((header, rows));
    }
    tables
}

#[test]
fn short_run_writes_charts_report_and_json() {
    let dir = tempfile::tempdir().expect("tempdir");
    let svg = dir.path().join("svg");
    let report = dir.path().join("report.md");
    let json = dir.path().join("records.json");
    let out = run(Command::new(LANEFS)
        .args(SHORT)
        .arg("--svg")
        .arg(&svg)
        .arg("--report")
        .arg(&report)
        .arg("--json")
        .arg(&json));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Not a terminal: a plain line per run and no escape codes anywhere.
    assert!(
        !stdout.contains('\x1b') && !stderr.contains('\x1b'),
        "{stdout}{stderr}"
    );
    assert!(
        stdout.contains("rep 1/1 threads 2: mdtest create [icache]"),
        "{stdout}"
    );
    // The compact tables, at most 100 columns; the full table only with --verbose.
    for (w, _) in VARIANTS {
        assert!(
            stdout.contains(&format!("\n{w} on lanefs: ")),
            "{w}: {stdout}"
        );
    }
    // Everything after the runs' lines (the tables, their titles and legends) fits 100
    // columns; the header line before the runs may be longer.
    let after_runs: Vec<&str> = stdout
        .lines()
        .skip(1)
        .filter(|l| !l.starts_with("rep "))
        .collect();
    assert!(
        after_runs.iter().any(|l| l.starts_with('┌')),
        "no table:\n{stdout}"
    );
    for line in after_runs {
        assert!(line.chars().count() <= 100, "too wide: {line}\n{stdout}");
    }
    assert!(
        !stdout.contains("ops/s median"),
        "full table without --verbose"
    );
    // One chart per workload.
    for (w, variants) in VARIANTS {
        check_svg(&svg.join(format!("{w}.svg")), variants);
    }
    // The report: machine, commit, variants, one results table per workload with its
    // chart, every table well formed.
    let md = std::fs::read_to_string(&report).expect("report written");
    for want in [
        "# lanefs bench report",
        "CPUs",
        "Linux",
        "## The variants",
        "## Results",
        "## Every field",
        "![mdtest chart](svg/mdtest.svg)",
        "![bufio chart](svg/bufio.svg)",
    ] {
        assert!(md.contains(want), "{want} missing in\n{md}");
    }
    let tables = md_tables(&md);
    for (header, rows) in &tables {
        for row in rows {
            assert_eq!(row.len(), header.len(), "{header:?} vs {row:?}");
        }
    }
    let variants = &tables[0];
    assert_eq!(
        variants.0,
        ["workload", "variant", "what it is", "mount options"]
    );
    let results: Vec<_> = tables
        .iter()
        .filter(|(h, _)| h.contains(&"eff @2".to_string()))
        .collect();
    assert_eq!(results.len(), VARIANTS.len(), "{md}");
    assert!(
        md.contains("the control loop's efficiency at 2 threads: "),
        "{md}"
    );
    for (header, rows) in results {
        for col in ["variant", "1 thread", "2 threads", "eff @2"] {
            assert!(header.iter().any(|h| h == col), "{col} missing: {header:?}");
        }
        assert!(rows.len() >= 2, "{rows:?}");
    }
    // The JSON keeps its documented fields.
    let text = std::fs::read_to_string(&json).expect("json");
    for field in [
        "\"workload\"",
        "\"ops_per_sec\"",
        "\"variant\"",
        "\"lock_top_class\"",
    ] {
        assert!(text.contains(field), "{field} missing");
    }
}

/// On a terminal the bar shows the runs and the lines go away; `--verbose` brings them
/// back with the full table.
#[test]
fn terminal_gets_a_bar_and_verbose_gets_lines() {
    let have_script = Command::new("script").arg("--version").output().is_ok();
    if !have_script {
        let test = "terminal_gets_a_bar_and_verbose_gets_lines";
        skips::report(test, "no script(1) for a pty (package util-linux)");
        return;
    }
    let line: Vec<String> = std::iter::once(LANEFS.to_string())
        .chain(SHORT.iter().map(|a| a.to_string()))
        .collect();
    let out = run(Command::new("script")
        .args(["-qec", &line.join(" "), "/dev/null"])
        .env("TERM", "xterm"));
    let tty = String::from_utf8_lossy(&out.stdout);
    assert!(tty.contains(" runs, "), "no bar:\n{tty}");
    assert!(
        !tty.contains("rep 1/1 threads 1: "),
        "plain lines on a terminal:\n{tty}"
    );
    assert!(tty.contains("mdtest on lanefs: "), "{tty}");
    let verbose = run(Command::new(LANEFS).args(SHORT).arg("--verbose"));
    let text = String::from_utf8_lossy(&verbose.stdout);
    assert!(text.contains("rep 1/1 threads 1: "), "{text}");
    assert!(text.contains("ops/s median"), "no full table:\n{text}");
}
