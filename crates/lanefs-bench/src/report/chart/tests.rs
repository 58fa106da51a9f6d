//! Tests of the charts: the SVG each chart makes parses and shows what it should.

use super::*;
use roxmltree::Document;

fn rec(workload: &str, phase: &str, target: &str, variant: &str, threads: usize) -> Record {
    Record {
        workload: workload.to_string(),
        phase: phase.to_string(),
        target: target.to_string(),
        variant: variant.to_string(),
        threads,
        oversubscribed: threads > 2,
        ..Record::default()
    }
}

/// Three reps of `base` and `default` at 1, 2 and 4 threads in two phases, and
/// (with `control`) the control loop on the same target.
fn records(workload: &str, control: bool) -> Vec<Record> {
    let mut out = Vec::new();
    for rep in 1..=3 {
        for threads in [1, 2, 4] {
            if control {
                let ops = [100.0, 190.0, 200.0][threads / 2] + rep as f64;
                let r = rec(control::NAME, control::PHASE, "lanefs", "-", threads);
                out.push(Record {
                    rep,
                    ops_per_sec: ops,
                    ..r
                });
            }
            for (phase, variant, per_thread) in [
                ("create", "base", 900.0),
                ("create", "default", 1000.0),
                ("remove", "base", 1800.0),
                ("remove", "default", 2000.0),
            ] {
                let ops = per_thread * threads as f64 + rep as f64;
                let r = rec(workload, phase, "lanefs", variant, threads);
                out.push(Record {
                    rep,
                    ops_per_sec: ops,
                    ..r
                });
            }
        }
    }
    out
}

/// The text of every `<text>` element of `svg`, which must parse as XML.
fn texts(svg: &str) -> Vec<String> {
    let doc = Document::parse(svg).unwrap_or_else(|e| panic!("not XML: {e}\n{svg}"));
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    let all = doc.descendants().filter(|n| n.has_tag_name("text"));
    all.map(|n| n.text().unwrap_or("").trim().to_string())
        .collect()
}

/// Every variant and the control ceiling are named at their line's end (and in the
/// legend); each phase is a panel; the title names the workload and its seed.
#[test]
fn chart_labels_variants_phases_and_ceiling() {
    let svg = chart_svg(&records("mdtest", true), "mdtest").expect("a chart");
    let t = texts(&svg);
    let count = |want: &str| t.iter().filter(|s| *s == want).count();
    // Each line is named in the legend and at its end in both panels.
    for want in ["base", "default", CEILING] {
        assert_eq!(count(want), 3, "{want} in {t:?}");
    }
    for (want, n) in [("create", 1), ("remove", 1), ("threads", 2), ("ops/s", 2)] {
        assert_eq!(count(want), n, "{want} in {t:?}");
    }
    assert!(t.iter().any(|s| s.starts_with("mdtest: seed 001")), "{t:?}");
    assert!(
        t.iter().any(|s| s == "4*"),
        "oversubscribed tick missing: {t:?}"
    );
    assert!(t.iter().any(|s| s == "1"), "{t:?}");
    assert_eq!(chart_svg(&records("mdtest", true), "fsmark"), None);
    assert_eq!(chart_svg(&records("mdtest", true), control::NAME), None);
}

/// ceiling(N) = the best median at 1 thread x control(N) / control(1).
#[test]
fn ceiling_follows_the_control_loops_scaling() {
    let c = chart(&records("mdtest", true), "mdtest").expect("a chart");
    let create = &c.panels[0];
    let ceil = create
        .lines
        .iter()
        .find(|l| l.label == CEILING)
        .expect("ceiling");
    // Medians: default at 1 thread 1002; control 102, 192, 202.
    let want = [
        (1, 1002.0),
        (2, 1002.0 * 192.0 / 102.0),
        (4, 1002.0 * 202.0 / 102.0),
    ];
    for ((n, v), (wn, wv)) in ceil.points.iter().zip(want) {
        assert_eq!(*n, wn);
        assert!((v - wv).abs() < 1e-9, "{n}: {v} against {wv}");
    }
}

/// Without the control loop the chart still draws, with no ceiling.
#[test]
fn no_control_no_ceiling() {
    let t = texts(&chart_svg(&records("mdtest", false), "mdtest").expect("a chart"));
    assert!(t.iter().any(|s| s == "default"), "{t:?}");
    assert!(!t.iter().any(|s| s.contains(CEILING)), "{t:?}");
}

/// A `--compare` run: a line per target, the kernel as "kernel ext4", the control loop
/// on its own target still giving the ceiling.
#[test]
fn compare_draws_each_target_and_the_kernel() {
    let mut recs = Vec::new();
    for threads in [1, 2] {
        let c = rec(
            control::NAME,
            control::PHASE,
            crate::report::CONTROL_TARGET,
            "-",
            threads,
        );
        recs.push(Record {
            rep: 1,
            ops_per_sec: 100.0 * threads as f64,
            ..c
        });
        for (target, ops) in [
            (crate::report::LANEFS, 30e3),
            (crate::report::FUSE2FS, 20e3),
            (crate::report::KERNEL, 4e5),
        ] {
            let r = rec("fallocate2", "fallocate", target, PATH_VARIANT, threads);
            recs.push(Record {
                rep: 1,
                ops_per_sec: ops * threads as f64,
                ..r
            });
        }
    }
    let t = texts(&chart_svg(&recs, "fallocate2").expect("a chart"));
    for want in [
        "kernel ext4",
        crate::report::LANEFS,
        crate::report::FUSE2FS,
        CEILING,
    ] {
        assert!(t.iter().any(|s| s == want), "{want} missing in {t:?}");
    }
    assert!(
        t.iter().any(|s| s.contains("(log)")),
        "20x apart: a log axis {t:?}"
    );
}

/// One file per workload, named for it, in first-appearance order.
#[test]
fn write_charts_writes_one_file_per_workload() {
    let mut recs = records("mdtest", true);
    recs.extend(records("fsmark", false));
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("charts");
    let paths = write_charts(&recs, &out).expect("written");
    assert_eq!(paths, [out.join("mdtest.svg"), out.join("fsmark.svg")]);
    for p in &paths {
        texts(&std::fs::read_to_string(p).expect("read"));
    }
    assert_eq!(std::fs::read_dir(&out).expect("dir").count(), 2);
    assert_eq!(
        write_charts(&[], &out).expect("nothing"),
        Vec::<PathBuf>::new()
    );
}

/// bufio: GiB/s of the 64 KiB calls, memcpy drawn as a ceiling and not as a panel.
#[test]
fn bufio_in_gib_with_memcpy_ceiling() {
    let g = 16_384.0;
    let mut recs = Vec::new();
    for (phase, ops) in [
        ("memcpy", 10.0 * g),
        ("shared-read", 4.0 * g),
        ("cold-read", g),
    ] {
        for variant in ["base", "default"] {
            let r = rec(bufio::NAME, phase, "lanefs", variant, 1);
            let io = Some(bufio::CHUNK as f64);
            recs.push(Record {
                rep: 1,
                ops_per_sec: ops,
                read_bytes_per_op: io,
                ..r
            });
        }
    }
    let c = chart(&recs, bufio::NAME).expect("a chart");
    let phases: Vec<&str> = c.panels.iter().map(|p| p.phase.as_str()).collect();
    assert_eq!(phases, ["shared-read", "cold-read"]);
    assert_eq!(c.panels[0].unit, "GiB/s");
    assert_eq!(c.panels[0].lines[0].points, [(1, 4.0)]);
    assert!(c.panels[0].lines.iter().any(|l| l.label == MEMCPY_LABEL));
    assert!(!c.panels[1].lines.iter().any(|l| l.label == MEMCPY_LABEL));
    texts(&render(&c).expect("drawn"));
}
