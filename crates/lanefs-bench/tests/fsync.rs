//! Goal: the `fsync` workload runs on both kinds of target, counts write + fsync pairs, and
//! the engine's records carry the journal fields; without `--threads` it sweeps 1, 2, 4, 8
//! as fallocate2 and the inode workloads do, while bufio64k keeps 1, 2, 4.
//! Method: short runs (0.2 s or less, one repetition) on a temporary image and a temporary
//! directory. Nothing here depends on speed: the machine is shared and noisy.

use lanefs_bench::{render_table, run, BenchConfig, Record, TargetSpec};

fn fsync_only(target: TargetSpec) -> BenchConfig {
    BenchConfig {
        workloads: vec!["fsync".into()],
        threads: Some(vec![1, 2]),
        reps: 1,
        seconds: 0.2,
        warmup: 0.05,
        target,
        variants: vec![lanefs_bench::Variant::default()],
        verbose: true,
        ..BenchConfig::default()
    }
}

/// The fsync records of `records`: one per thread count, with work done by every thread.
fn fsync_records(records: &[Record], threads: &[usize]) -> Vec<Record> {
    let mine: Vec<Record> = records
        .iter()
        .filter(|r| r.workload == "fsync")
        .cloned()
        .collect();
    let got: Vec<usize> = mine.iter().map(|r| r.threads).collect();
    assert_eq!(got, threads, "{records:#?}");
    for r in &mine {
        assert_eq!(r.phase, "fsync");
        assert!(r.ops > 0, "{r:?}");
        assert!(r.ops_per_sec > 0.0, "{r:?}");
        assert_eq!(r.per_thread_ops_per_sec.len(), r.threads, "{r:?}");
        assert!(r.per_thread_ops_per_sec.iter().all(|&v| v > 0.0), "{r:?}");
    }
    mine
}

/// On the engine: the journal fields are present and consistent with each other, the lock
/// report names the journal classes and gives a share line per run, and the table shows
/// the journal columns.
#[test]
fn fsync_on_the_engine() {
    let json = tempfile::NamedTempFile::new().expect("json file");
    let cfg = BenchConfig {
        lockstat: true,
        json: Some(json.path().to_path_buf()),
        ..fsync_only(TargetSpec::default())
    };
    let mut out = Vec::new();
    let records = run(&cfg, &mut out).expect("bench run");
    for r in fsync_records(&records, &[1, 2]) {
        assert_eq!(r.target, "lanefs");
        assert_eq!(r.variant, "default");
        let (Some(commits), Some(bytes), Some(per_s), Some(per_op)) = (
            r.journal_commits,
            r.journal_log_bytes,
            r.commits_per_s,
            r.journal_bytes_per_op,
        ) else {
            panic!("journal fields missing: {r:?}");
        };
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b.abs().max(1.0);
        assert!(close(per_s, commits as f64 / r.seconds), "{r:?}");
        assert!(close(per_op, bytes as f64 / r.ops as f64), "{r:?}");
    }

    let text = std::fs::read_to_string(json.path()).expect("read json");
    let v: serde_json::Value = serde_json::from_str(&text).expect("parse json");
    let fsyncs: Vec<&serde_json::Value> = v
        .as_array()
        .expect("JSON array")
        .iter()
        .filter(|r| r["workload"] == "fsync")
        .collect();
    assert_eq!(fsyncs.len(), 2);
    for r in fsyncs {
        assert!(r["journal_commits"].is_u64(), "{r}");
        assert!(r["journal_log_bytes"].is_u64(), "{r}");
        assert!(r["commits_per_s"].is_number(), "{r}");
        assert!(r["journal_bytes_per_op"].is_number(), "{r}");
    }

    let printed = String::from_utf8(out).expect("utf-8 output");
    assert!(printed.contains("journal_commit"), "{printed}");
    for threads in [1, 2] {
        let line = format!("journal locks: fsync [default] threads {threads}, rep 1: ");
        assert!(printed.contains(&line), "{line:?} missing in\n{printed}");
    }
    assert!(printed.contains("contended acquisitions"), "{printed}");
    assert!(printed.contains("journal classes: journal"), "{printed}");
    let table = render_table(&records);
    for word in ["fsync", "commits/s", "journal B/op"] {
        assert!(table.contains(word), "{word} missing in\n{table}");
    }
}

/// On a host directory: real write + fsync, no journal fields, nothing left behind.
#[test]
fn fsync_on_a_directory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = fsync_only(TargetSpec::Path(dir.path().into()));
    let records = run(&cfg, &mut Vec::new()).expect("bench run");
    let label = format!("path:{}", dir.path().display());
    for r in fsync_records(&records, &[1, 2]) {
        assert_eq!(r.target, label);
        assert_eq!(r.variant, "-");
        assert_eq!(r.journal_commits, None);
        assert_eq!(r.journal_log_bytes, None);
        assert_eq!(r.commits_per_s, None);
        assert_eq!(r.journal_bytes_per_op, None);
    }
    let left: Vec<_> = std::fs::read_dir(dir.path()).expect("read_dir").collect();
    assert!(left.is_empty(), "run left {left:?}");
}

/// Without thread counts every workload sweeps the powers of two up to the CPUs (at
/// least 1 and 2, at most 8), with the control loop at every count of the sweep. Given
/// counts apply to all.
#[test]
fn fsync_sweeps_its_own_thread_counts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = BenchConfig {
        workloads: vec!["fallocate2".into(), "fsync".into()],
        threads: None,
        seconds: 0.05,
        warmup: 0.0,
        ..fsync_only(TargetSpec::Path(dir.path().into()))
    };
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    let want: Vec<usize> = [1, 2, 4, 8]
        .into_iter()
        .filter(|&n| n <= cpus.clamp(2, 8))
        .collect();
    assert_eq!(cfg.sweep(), want);
    for w in lanefs_bench::workload_names() {
        assert_eq!(cfg.threads_for(w), want, "{w}");
    }
    let mut out = Vec::new();
    let records = run(&cfg, &mut out).expect("bench run");
    let threads = |w: &str| -> Vec<usize> {
        records
            .iter()
            .filter(|r| r.workload == w)
            .map(|r| r.threads)
            .collect()
    };
    assert_eq!(threads("control"), want);
    assert_eq!(threads("fallocate2"), want);
    fsync_records(&records, &want);
    let printed = String::from_utf8(out).expect("utf-8 output");
    assert!(
        printed.contains(&format!("fallocate2+fsync x threads {want:?}")),
        "{printed}"
    );

    let given = BenchConfig {
        threads: Some(vec![2]),
        ..cfg
    };
    assert_eq!(given.sweep(), [2]);
    assert_eq!(given.threads_for("fsync"), [2]);
}
