//! Goal: the harness runs every workload on both kinds of target and reports what it must.
//! Method: tiny settings (0.2 s, 50 files, threads 1 and 2, one repetition) so each test
//! takes about a second; the path target runs on a temporary directory of the host.

use lanefs_bench::{render_table, run, BenchConfig, Record, TargetSpec};

fn tiny(target: TargetSpec) -> BenchConfig {
    BenchConfig {
        workloads: vec!["fallocate2".into(), "mdtest".into()],
        threads: Some(vec![1, 2]),
        reps: 1,
        seconds: 0.2,
        warmup: 0.05,
        files: 50,
        target,
        variants: vec![lanefs_bench::Variant::default()],
        verbose: true,
        ..BenchConfig::default()
    }
}

/// control + fallocate2 one record per thread count, mdtest two (create, remove).
fn check_records(records: &[Record], target: &str, variant: &str) {
    assert_eq!(records.len(), 2 * (1 + 1 + 2), "{records:#?}");
    for r in records {
        assert!(r.ops > 0, "{r:?}");
        assert!(r.ops_per_sec > 0.0, "{r:?}");
        assert_eq!(r.per_thread_ops_per_sec.len(), r.threads, "{r:?}");
        assert!(r.per_thread_ops_per_sec.iter().all(|&v| v > 0.0), "{r:?}");
        assert_eq!(r.target, target);
        assert_eq!(r.rep, 1);
        if r.workload != "control" {
            assert_eq!(r.variant, variant);
        }
    }
    let phases = |w: &str| {
        let mut p: Vec<(String, usize)> = records
            .iter()
            .filter(|r| r.workload == w)
            .map(|r| (r.phase.clone(), r.threads))
            .collect();
        p.sort();
        p
    };
    assert_eq!(phases("control"), [("loop".into(), 1), ("loop".into(), 2)]);
    assert_eq!(
        phases("fallocate2"),
        [("fallocate".into(), 1), ("fallocate".into(), 2)]
    );
    assert_eq!(
        phases("mdtest"),
        [
            ("create".into(), 1),
            ("create".into(), 2),
            ("remove".into(), 1),
            ("remove".into(), 2)
        ]
    );
    for r in records.iter().filter(|r| r.workload == "mdtest") {
        assert_eq!(r.ops, 50 * r.threads as u64, "{r:?}");
    }
}

/// Both workloads on a host directory; the JSON parses back with the required fields,
/// the table renders, and the run leaves nothing behind.
#[test]
fn path_target_runs_both_workloads() {
    let dir = tempfile::tempdir().expect("tempdir");
    let json = tempfile::NamedTempFile::new().expect("json file");
    let cfg = BenchConfig {
        json: Some(json.path().to_path_buf()),
        ..tiny(TargetSpec::Path(dir.path().into()))
    };
    let mut out = Vec::new();
    let records = run(&cfg, &mut out).expect("bench run");
    let label = format!("path:{}", dir.path().display());
    check_records(&records, &label, "-");

    let left: Vec<_> = std::fs::read_dir(dir.path()).expect("read_dir").collect();
    assert!(left.is_empty(), "run left {left:?}");

    let text = std::fs::read_to_string(json.path()).expect("read json");
    let v: serde_json::Value = serde_json::from_str(&text).expect("parse json");
    let arr = v.as_array().expect("JSON array");
    assert_eq!(arr.len(), records.len());
    for r in arr {
        for field in ["workload", "phase", "target", "variant"] {
            assert!(r[field].is_string(), "{field} in {r}");
        }
        assert!(r["threads"].as_u64().is_some_and(|t| t >= 1), "{r}");
        assert!(r["ops_per_sec"].as_f64().is_some_and(|v| v > 0.0), "{r}");
        assert!(r["oversubscribed"].is_boolean(), "{r}");
        // A path target has no journal counters nor allocator figures: the fields are there,
        // as null.
        for field in [
            "journal_commits",
            "journal_log_bytes",
            "commits_per_s",
            "journal_bytes_per_op",
            "extents_per_file",
            "free_extents",
            "avg_free_extent_kib",
        ] {
            assert!(r.get(field).is_some_and(|v| v.is_null()), "{field} in {r}");
        }
        let per = r["per_thread_ops_per_sec"]
            .as_array()
            .expect("per-thread array");
        assert_eq!(per.len() as u64, r["threads"].as_u64().unwrap_or(0));
    }
    let back: Vec<Record> = serde_json::from_str(&text).expect("records from json");
    assert_eq!(back.len(), records.len());
    for (b, r) in back.iter().zip(&records) {
        assert_eq!(
            (&b.workload, &b.phase, b.threads, b.ops),
            (&r.workload, &r.phase, r.threads, r.ops)
        );
        assert!(
            (b.ops_per_sec - r.ops_per_sec).abs() <= 1e-9 * r.ops_per_sec,
            "{b:?} vs {r:?}"
        );
    }

    let table = render_table(&records);
    for word in [
        "fallocate2",
        "mdtest",
        "create",
        "remove",
        "control",
        "efficiency",
    ] {
        assert!(table.contains(word), "{word} missing in\n{table}");
    }
    assert!(
        !table.contains("commits/s"),
        "no journal columns for a path:\n{table}"
    );
    let printed = String::from_utf8(out).expect("utf-8 output");
    assert!(printed.contains(&table), "table not printed:\n{printed}");
    assert!(printed.contains("rep 1/1"), "{printed}");
}

/// Bad input is an error naming what is wrong, never a panic.
#[test]
fn bad_config_is_an_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ok = tiny(TargetSpec::Path(dir.path().into()));
    let cases: Vec<(BenchConfig, &str)> = vec![
        (
            BenchConfig {
                workloads: vec!["nope".into()],
                ..ok.clone()
            },
            "unknown workload",
        ),
        (
            BenchConfig {
                threads: Some(vec![1, 0]),
                ..ok.clone()
            },
            "thread count 0",
        ),
        (
            BenchConfig {
                threads: Some(vec![]),
                ..ok.clone()
            },
            "thread count",
        ),
        (
            BenchConfig {
                reps: 0,
                ..ok.clone()
            },
            "repetitions",
        ),
        (
            BenchConfig {
                seconds: f64::NAN,
                ..ok.clone()
            },
            "seconds",
        ),
        (
            BenchConfig {
                seconds: -1.0,
                ..ok.clone()
            },
            "seconds",
        ),
        (
            BenchConfig {
                files: 0,
                ..ok.clone()
            },
            "files",
        ),
        (
            BenchConfig {
                variants: vec![lanefs_bench::Variant::new(
                    "",
                    lanefs::MountOptions::default(),
                )],
                ..ok.clone()
            },
            "empty name",
        ),
        (
            BenchConfig {
                target: TargetSpec::Path(dir.path().join("missing")),
                ..ok.clone()
            },
            "not a directory",
        ),
    ];
    for (cfg, want) in cases {
        let err = run(&cfg, &mut Vec::new()).expect_err(want);
        assert!(err.contains(want), "{err:?} should mention {want:?}");
    }
}

/// Both workloads on the engine with a temporary image.
#[test]
fn lanefs_target_runs_both_workloads() {
    let cfg = BenchConfig {
        lockstat: true,
        ..tiny(TargetSpec::default())
    };
    let mut out = Vec::new();
    let records = run(&cfg, &mut out).expect("bench run");
    check_records(&records, "lanefs", "default");
    // Every engine record carries journal counters of its measured time (zero until the
    // journal writes a log); the control loop has none.
    for r in &records {
        let engine = r.workload != "control";
        assert_eq!(r.journal_commits.is_some(), engine, "{r:?}");
        assert_eq!(r.journal_log_bytes.is_some(), engine, "{r:?}");
        assert_eq!(r.commits_per_s.is_some(), engine, "{r:?}");
        assert_eq!(r.journal_bytes_per_op.is_some(), engine, "{r:?}");
        // fallocate2 counts the extents of each thread's completed 1 MiB file.
        let fa = r.workload == "fallocate2";
        assert_eq!(r.extents_per_file.is_some(), fa, "{r:?}");
        if let Some(e) = r.extents_per_file {
            assert!((1.0..=256.0).contains(&e), "{r:?}");
        }
        // ... and the free space's fragmentation with those files still open.
        assert_eq!(r.free_extents.is_some(), fa, "{r:?}");
        assert_eq!(r.avg_free_extent_kib.is_some(), fa, "{r:?}");
        if let (Some(n), Some(kib)) = (r.free_extents, r.avg_free_extent_kib) {
            assert!(n >= 1, "{r:?}");
            assert!(kib > 0.0, "{r:?}");
        }
    }
    let printed = String::from_utf8(out).expect("utf-8 output");
    assert!(printed.contains("lock statistics"), "{printed}");
    assert!(printed.contains("journal_commit"), "{printed}");
    // One journal share line per engine run: 2 workloads x 2 thread counts.
    assert_eq!(printed.matches("journal locks: ").count(), 4, "{printed}");
    let table = render_table(&records);
    assert!(table.contains("commits/s"), "{table}");
    assert!(table.contains("journal B/op"), "{table}");
    assert!(table.contains("extents/file"), "{table}");
    assert!(table.contains("free extents"), "{table}");
    // One variant only: no comparison against base.
    assert!(!table.contains("against base"), "{table}");
}

/// The default variant mounts like `mount -t ext4` with no options: journal on, commit=5.
/// A default run gives each workload its seed's variants, the baseline first.
#[test]
fn default_variant_mounts_with_default_options() {
    let cfg = BenchConfig::default();
    assert!(cfg.variants.is_empty());
    let names =
        |w: &str| -> Vec<String> { cfg.variants_for(w).into_iter().map(|v| v.name).collect() };
    assert_eq!(
        names("fallocate2"),
        ["base", "linear", "optimize_scan", "slots"]
    );
    assert_eq!(names("mdtest"), ["base", "ialloc", "icache", "lanefs"]);
    assert_eq!(names("fsmark"), ["global", "bucket", "papaya"]);
    assert_eq!(names("bufio"), ["base", "default"]);
    assert_eq!(names("rtfrag"), ["plain", "default"]);
    let fsync = cfg.variants_for("fsync");
    let v = &fsync[1];
    assert_eq!(v.name, "default");
    assert_eq!(v.opts, lanefs::MountOptions::default());
    assert!(!v.opts.read_only);
    assert_eq!(v.opts.commit_interval, std::time::Duration::from_secs(5));
    assert_eq!(cfg.threads, None);
    assert!(cfg.workloads.iter().any(|w| w == "fsync"), "{cfg:?}");
}

/// Two variants interleave: every (workload, threads) runs once per variant.
#[test]
fn lanefs_variants_interleave() {
    let variants = vec![
        lanefs_bench::Variant::new("a", lanefs::MountOptions::default()),
        lanefs_bench::Variant::new("b", lanefs::MountOptions::default()),
    ];
    let cfg = BenchConfig {
        workloads: vec!["fallocate2".into()],
        threads: Some(vec![1]),
        variants,
        ..tiny(TargetSpec::default())
    };
    let records = run(&cfg, &mut Vec::new()).expect("bench run");
    let names: Vec<&str> = records.iter().map(|r| r.variant.as_str()).collect();
    assert_eq!(names, ["-", "a", "b"]);
}

/// The seed's variants by name: base and linear run interleaved, the summary compares
/// linear with base per thread count, and the lock statistics come per variant and run.
#[test]
fn seed_variants_compare_against_base() {
    // `base` is one variant per family; fallocate2 runs seed 000's.
    let variants = lanefs_bench::parse_variants("base,linear").expect("named variants");
    let cfg = BenchConfig {
        workloads: vec!["fallocate2".into()],
        variants,
        lockstat: true,
        ..tiny(TargetSpec::default())
    };
    let mut out = Vec::new();
    let records = run(&cfg, &mut out).expect("bench run");
    let names: Vec<(&str, usize)> = records
        .iter()
        .map(|r| (r.variant.as_str(), r.threads))
        .collect();
    assert_eq!(
        names,
        [
            ("-", 1),
            ("base", 1),
            ("linear", 1),
            ("-", 2),
            ("base", 2),
            ("linear", 2)
        ]
    );
    let printed = String::from_utf8(out).expect("utf-8 output");
    for variant in ["base", "linear"] {
        for threads in [1, 2] {
            let line = format!("lock statistics: fallocate2 [{variant}] threads {threads}, rep 1");
            assert!(printed.contains(&line), "{line:?} missing in\n{printed}");
        }
    }
    assert!(
        printed.contains("fallocate2 fallocate on lanefs: ops/s per thread against base"),
        "{printed}"
    );
    assert!(printed.contains("contiguity after the run"), "{printed}");
    let linear_row = printed
        .lines()
        .find(|l| l.contains("linear") && l.contains('%'))
        .unwrap_or_else(|| panic!("no linear row with a change in\n{printed}"));
    assert_eq!(linear_row.matches('%').count(), 2, "{linear_row}");
}
