//! Goal: `bufio64k` runs on both kinds of target and reports a write, a synced (write with
//! an fsync per pass) and a read phase with every thread's 64 KiB calls counted (each read checked against what its thread wrote).
//! Method: tiny settings (0.2 s, threads 1 and 2, one repetition) on the engine in-process
//! (a small temporary image) and on a temporary directory of the host.

use lanefs_bench::{run, BenchConfig, Record, TargetSpec};

fn tiny(target: TargetSpec) -> BenchConfig {
    BenchConfig {
        workloads: vec!["bufio64k".into()],
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

/// Control plus a write, a synced and a read phase at each thread count, each with work from every
/// thread.
fn check(records: &[Record], target: &str) {
    let mut got: Vec<(String, String, usize)> = records
        .iter()
        .map(|r| (r.workload.clone(), r.phase.clone(), r.threads))
        .collect();
    got.sort();
    let want: Vec<(String, String, usize)> = [
        ("bufio64k", "read", 1),
        ("bufio64k", "read", 2),
        ("bufio64k", "synced", 1),
        ("bufio64k", "synced", 2),
        ("bufio64k", "write", 1),
        ("bufio64k", "write", 2),
        ("control", "loop", 1),
        ("control", "loop", 2),
    ]
    .iter()
    .map(|&(w, p, t)| (w.to_string(), p.to_string(), t))
    .collect();
    assert_eq!(got, want, "{records:#?}");
    for r in records {
        assert_eq!(r.target, target, "{r:?}");
        assert!(r.ops > 0 && r.ops_per_sec > 0.0, "{r:?}");
        assert_eq!(r.per_thread_ops_per_sec.len(), r.threads, "{r:?}");
        assert!(r.per_thread_ops_per_sec.iter().all(|&v| v > 0.0), "{r:?}");
        // No daemon serves these targets.
        assert_eq!(r.daemon_cpu_seconds, None, "{r:?}");
        assert_eq!(r.daemon_cpu_us_per_op, None, "{r:?}");
    }
}

/// On the engine: every phase, with the journal's counters (the engine has them); the
/// synced phase's fsyncs commit the journal.
#[test]
fn bufio64k_on_the_engine() {
    let cfg = tiny(TargetSpec::Lanefs {
        image: None,
        size: 256 << 20,
        block_size: 4096,
    });
    let mut out = Vec::new();
    let records = run(&cfg, &mut out).expect("bench run");
    check(&records, "lanefs");
    for r in records.iter().filter(|r| r.workload == "bufio64k") {
        assert!(r.journal_commits.is_some(), "{r:?}");
        if r.phase == "synced" {
            assert!(r.journal_commits > Some(0), "{r:?}");
        }
    }
    let text = String::from_utf8(out).expect("utf-8 output");
    assert!(text.contains("bufio64k"), "{text}");
}

/// On a host directory through syscalls (pwrite, fdatasync, posix_fadvise, pread); the run
/// leaves nothing behind.
#[test]
fn bufio64k_on_a_path() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = tiny(TargetSpec::Path(dir.path().into()));
    let records = run(&cfg, &mut Vec::new()).expect("bench run");
    check(&records, &format!("path:{}", dir.path().display()));
    let left: Vec<_> = std::fs::read_dir(dir.path()).expect("read_dir").collect();
    assert!(left.is_empty(), "run left {left:?}");
}
