//! Goal: issue 12's workloads (mdtest-shared, fsmark, stat) run on both kinds of target,
//! count what they must, carry the CPU, inode cache and memory figures where they apply,
//! and under seeds 001 and 004's variants print the seeds' tables against base (or
//! global); variant lists resolve per workload family and refuse what no workload takes.
//! Method: tiny settings (0.2 s, 40 files per thread, 300 fsmark files per thread, threads
//! 1 and 2, one repetition) on a small temporary image and a temporary directory. Nothing
//! here depends on speed: the machine is shared and noisy.

use lanefs_bench::{parse_variants, render_table, run, BenchConfig, Record, TargetSpec};

const FILES: usize = 40;
const FSMARK_FILES: usize = 300;

fn tiny(target: TargetSpec) -> BenchConfig {
    BenchConfig {
        workloads: vec!["mdtest-shared".into(), "fsmark".into(), "stat".into()],
        threads: Some(vec![1, 2]),
        reps: 1,
        seconds: 0.2,
        warmup: 0.05,
        files: FILES,
        fsmark_files: Some(FSMARK_FILES),
        target,
        variants: vec![lanefs_bench::Variant::default()],
        verbose: true,
        ..BenchConfig::default()
    }
}

/// A small engine image: the runs format one per variant and thread count.
fn small_image() -> TargetSpec {
    TargetSpec::Lanefs {
        image: None,
        size: 64 << 20,
        block_size: 4096,
    }
}

/// Per variant: at each thread count mdtest-shared's two phases, fsmark's create and
/// stat's lookup, each with every thread's work counted.
fn check_counts(records: &[Record], variants: &[&str]) {
    let work: Vec<&Record> = records.iter().filter(|r| r.workload != "control").collect();
    assert_eq!(work.len(), 2 * 4 * variants.len(), "{records:#?}");
    for r in &work {
        assert!(variants.contains(&r.variant.as_str()), "{r:?}");
        assert_eq!(r.per_thread_ops_per_sec.len(), r.threads, "{r:?}");
        assert!(r.per_thread_ops_per_sec.iter().all(|&v| v > 0.0), "{r:?}");
        let n = r.threads as u64;
        match (r.workload.as_str(), r.phase.as_str()) {
            ("mdtest-shared", "create" | "remove") => assert_eq!(r.ops, FILES as u64 * n),
            ("fsmark", "create") => assert_eq!(r.ops, FSMARK_FILES as u64 * n),
            ("stat", "lookup") => assert!(r.ops > 0, "{r:?}"),
            _ => panic!("unexpected record {r:?}"),
        }
        // Every workload run measures the process's CPU time; the control loop does not.
        let us = r.cpu_per_op_us.unwrap_or_else(|| panic!("no CPU in {r:?}"));
        assert!(us > 0.0 && r.cpu_seconds.is_some(), "{r:?}");
    }
    for r in records.iter().filter(|r| r.workload == "control") {
        assert_eq!((r.cpu_seconds, r.cpu_per_op_us), (None, None), "{r:?}");
    }
}

/// On the engine under seeds 001/004's names: the inode and buffer cache figures after
/// every inode workload (after fsmark and stat at least every file made, bytes per inode
/// positive), the run's peak memory, the
/// lock classes of the inode work, and the seeds' tables against base.
#[test]
fn engine_runs_the_inode_workloads_under_the_seeds_variants() {
    let cfg = BenchConfig {
        variants: parse_variants("base,lanefs").expect("variants"),
        lockstat: true,
        ..tiny(small_image())
    };
    let mut out = Vec::new();
    let records = run(&cfg, &mut out).expect("bench run");
    check_counts(&records, &["base", "lanefs"]);
    for r in records.iter().filter(|r| r.workload != "control") {
        assert!(r.icache_inodes.is_some(), "{r:?}");
        assert!(r.icache_limit.is_some(), "{r:?}");
        assert!(r.icache_evictions.is_some(), "{r:?}");
        assert!(r.bufcache_bytes.is_some_and(|b| b > 0), "{r:?}");
        let limit = lanefs::MountOptions::default().bufcache_limit;
        assert_eq!(r.bufcache_limit, Some(limit), "{r:?}");
        // mdtest removed what it made: its cache holds what is left after the run.
        if let Some(n) = r
            .icache_inodes
            .filter(|_| !r.workload.starts_with("mdtest"))
        {
            let made = (if r.workload == "fsmark" {
                FSMARK_FILES
            } else {
                FILES
            }) * r.threads;
            assert!(n >= made as u64, "{r:?}");
            let per = r.icache_bytes_per_inode.expect("bytes per inode");
            assert!(per > 0.0, "{r:?}");
            assert_eq!(
                r.icache_bytes,
                Some((per * n as f64).round() as u64),
                "{r:?}"
            );
        }
        assert!(r.peak_rss_bytes.is_some_and(|b| b > 0), "{r:?}");
        assert!(r.journal_commits.is_some(), "{r:?}");
    }
    let printed = String::from_utf8(out).expect("utf-8 output");
    // The header says what each variant means for the workloads it runs with.
    assert!(
        printed.contains("base [mdtest-shared fsmark stat: ialloc=locked,icache=global]"),
        "{printed}"
    );
    assert!(
        printed.contains("lanefs [mdtest-shared fsmark stat: defaults]"),
        "{printed}"
    );
    assert!(
        !printed.contains("mb_trylock=0"),
        "seed 000's base does not run:\n{printed}"
    );
    // Hold times: every run's shares, the global inode cache lock among base's, and the
    // saturation table for the seeds' workloads.
    for r in records.iter().filter(|r| r.workload != "control") {
        let shares = r
            .lock_held_share
            .as_ref()
            .expect("--lockstat gives hold shares");
        assert!(shares.iter().any(|(c, _)| c == "inode"), "{r:?}");
        assert!(
            shares.iter().all(|(_, s)| s.is_finite() && *s > 0.0),
            "{r:?}"
        );
        // (Not its absence elsewhere: the counters are the process's, and tests beside
        // this one run the global table too.)
        if r.variant == "base" {
            assert!(shares.iter().any(|(c, _)| c == "icache_global"), "{r:?}");
        }
    }
    assert!(
        printed.contains("lock saturation (--lockstat)"),
        "{printed}"
    );
    for row in ["fsmark (004)", "stat (004)"] {
        assert!(
            printed
                .lines()
                .any(|l| l.contains(row) && l.contains("base")),
            "{row:?} [base] missing in\n{printed}"
        );
    }
    // Lock statistics list every class, the inode cache's among them.
    let line = "lock statistics: fsmark [base] threads 2, rep 1";
    assert!(printed.contains(line), "{line:?} missing in\n{printed}");
    assert!(
        printed.lines().any(|l| l.starts_with("icache")),
        "{printed}"
    );
    for title in [
        "mdtest-shared create on lanefs: creates/s in total against base (1 rep)",
        "mdtest-shared remove on lanefs: removes/s in total against base",
        "fsmark create on lanefs: files/s in total against base",
        "fsmark create on lanefs: CPU per file in us against base",
        "stat lookup on lanefs: lookups/s in total against base",
        "stat lookup on lanefs: CPU per lookup in us against base",
        "inode cache after the run",
    ] {
        assert!(printed.contains(title), "{title:?} missing in\n{printed}");
    }
    // mdtest-shared reports the caches too, so it has a CPU table of its own.
    assert!(
        printed.contains("mdtest-shared create on lanefs: CPU per create in us against base"),
        "{printed}"
    );
    let table = render_table(&records);
    assert!(table.contains("CPU us/op"), "{table}");
    assert!(table.contains("peak RSS"), "{table}");
}

/// Seed 004's names alone: the tables compare with global.
#[test]
fn seed_004_variants_compare_against_global() {
    let cfg = BenchConfig {
        workloads: vec!["fsmark".into()],
        threads: Some(vec![1]),
        variants: parse_variants("global,bucket,papaya").expect("variants"),
        ..tiny(small_image())
    };
    let mut out = Vec::new();
    let records = run(&cfg, &mut out).expect("bench run");
    let names: Vec<&str> = records.iter().map(|r| r.variant.as_str()).collect();
    assert_eq!(names, ["-", "global", "bucket", "papaya"]);
    let printed = String::from_utf8(out).expect("utf-8 output");
    assert!(
        printed.contains("fsmark create on lanefs: files/s in total against global"),
        "{printed}"
    );
    assert!(
        printed.contains("CPU per file in us against global"),
        "{printed}"
    );
}

/// On a host directory: the same counts and CPU per operation (the bench's side), no
/// engine figures (null in the JSON), and nothing left behind.
#[test]
fn path_target_runs_the_inode_workloads() {
    let dir = tempfile::tempdir().expect("tempdir");
    let json = tempfile::NamedTempFile::new().expect("json file");
    let cfg = BenchConfig {
        json: Some(json.path().to_path_buf()),
        ..tiny(TargetSpec::Path(dir.path().into()))
    };
    let records = run(&cfg, &mut Vec::new()).expect("bench run");
    check_counts(&records, &["-"]);
    for r in &records {
        assert_eq!(r.icache_inodes, None, "{r:?}");
        assert_eq!(r.peak_rss_bytes, None, "{r:?}");
        assert_eq!(r.journal_commits, None, "{r:?}");
    }
    let left: Vec<_> = std::fs::read_dir(dir.path()).expect("read_dir").collect();
    assert!(left.is_empty(), "run left {left:?}");
    let text = std::fs::read_to_string(json.path()).expect("read json");
    let v: serde_json::Value = serde_json::from_str(&text).expect("parse json");
    for r in v.as_array().expect("JSON array") {
        let control = r["workload"] == "control";
        assert_eq!(r["cpu_per_op_us"].is_null(), control, "{r}");
        assert_eq!(r["cpu_seconds"].is_null(), control, "{r}");
        for field in [
            "icache_inodes",
            "icache_bytes",
            "icache_bytes_per_inode",
            "icache_limit",
            "icache_evictions",
            "icache_peak_bytes",
            "peak_rss_bytes",
        ] {
            assert!(r.get(field).is_some_and(|v| v.is_null()), "{field} in {r}");
        }
    }
}

/// fsmark refuses, before it starts, an image without an inode for every file.
#[test]
fn fsmark_checks_free_inodes_first() {
    let cfg = BenchConfig {
        workloads: vec!["fsmark".into()],
        threads: Some(vec![2]),
        fsmark_files: Some(100_000),
        target: TargetSpec::Lanefs {
            image: None,
            size: 32 << 20,
            block_size: 4096,
        },
        ..tiny(small_image())
    };
    let err = run(&cfg, &mut Vec::new()).expect_err("too few inodes");
    assert!(err.contains("free inodes, fsmark needs 200064"), "{err}");
    assert!(err.contains("--fsmark-files"), "{err}");
}

/// Variant lists apply per workload: a family's names go to its workloads only, and a
/// name no chosen workload takes, a workload no variant applies to, or a name given twice
/// for one workload is an error that says so.
#[test]
fn variants_resolve_per_workload_family() {
    let both = BenchConfig {
        workloads: vec!["fallocate2".into(), "mdtest".into()],
        variants: parse_variants("base,trylock,ialloc").expect("variants"),
        ..tiny(small_image())
    };
    both.validate()
        .expect("each workload has its family's variants");
    let names = |w: &str| -> Vec<String> {
        both.variants_for(w)
            .iter()
            .map(|v| format!("{} {:?}", v.name, v.family))
            .collect()
    };
    assert_eq!(
        names("fallocate2"),
        ["base Some(Blocks)", "trylock Some(Blocks)"]
    );
    assert_eq!(
        names("mdtest"),
        ["base Some(Inodes)", "ialloc Some(Inodes)"]
    );

    let with = |workloads: &[&str], variants: &str| BenchConfig {
        workloads: workloads.iter().map(|w| w.to_string()).collect(),
        variants: parse_variants(variants).expect("variants"),
        ..tiny(small_image())
    };
    let cases = [
        (
            with(&["mdtest", "stat"], "trylock"),
            "variant \"trylock\" (seed 000's block allocator) applies to fallocate2, fsync, \
             bufio64k, none of which runs here (mdtest, stat)",
        ),
        (
            with(&["fallocate2"], "papaya"),
            "applies to mdtest, mdtest-shared, fsmark, stat",
        ),
        (
            with(&["fallocate2", "fsmark"], "trylock"),
            "no variant given applies to fsmark",
        ),
        (
            with(&["fsmark"], "lanefs,lanefs:icache=papaya"),
            "variant name \"lanefs\" is given twice for fsmark",
        ),
    ];
    for (cfg, want) in cases {
        let err = cfg.validate().expect_err(want);
        assert!(err.contains(want), "{err:?} should say {want:?}");
    }
    // Raw specs and default apply to every workload.
    with(&["fallocate2", "fsmark"], "default,x:icache=global")
        .validate()
        .expect("raw specs apply everywhere");
}

/// fsmark's default splits its total evenly between the threads.
#[test]
fn fsmark_default_total_is_split() {
    use lanefs_bench::workloads::fsmark::{files_per_thread, DEFAULT_TOTAL};
    assert_eq!(files_per_thread(None, 1), DEFAULT_TOTAL);
    assert_eq!(files_per_thread(None, 8), DEFAULT_TOTAL / 8);
    assert!(files_per_thread(None, 3) * 3 >= DEFAULT_TOTAL);
    assert_eq!(files_per_thread(Some(7), 3), 7);
}
