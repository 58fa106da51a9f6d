//! Goal: `bufio` (seed 002) runs on both kinds of target and reports all of its phases,
//! each with bytes per call so bandwidth is known, every read checked against the fill byte;
//! on the engine it runs seed 002's variants side by side, counts the cold reads' device
//! reads, and prints the seed's tables (bandwidth against base, reads against the memcpy
//! control, cold reads' device IO size).
//! Method: tiny settings (0.1 s, threads 1 and 2, one repetition, 2 MiB per shape) on the
//! engine in-process (a small temporary image) and on a temporary directory of the host.

use lanefs_bench::workloads::bufio::{CHUNK, PHASES};
use lanefs_bench::{parse_variants, render_vs_base, run, BenchConfig, Record, TargetSpec};

fn tiny(target: TargetSpec) -> BenchConfig {
    BenchConfig {
        workloads: vec!["bufio".into()],
        threads: Some(vec![1, 2]),
        reps: 1,
        seconds: 0.1,
        warmup: 0.02,
        bufio_size: Some(2 << 20),
        target,
        ..BenchConfig::default()
    }
}

/// Every phase at each thread count for each variant, with work from every thread and the
/// bytes of its calls.
fn check(records: &[Record], target: &str, variants: &[&str]) {
    for &v in variants {
        for t in [1, 2] {
            let got: Vec<&str> = records
                .iter()
                .filter(|r| r.workload == "bufio" && r.variant == v && r.threads == t)
                .map(|r| r.phase.as_str())
                .collect();
            assert_eq!(got, PHASES, "{v} at {t} threads");
        }
    }
    for r in records.iter().filter(|r| r.workload == "bufio") {
        assert_eq!(r.target, target, "{r:?}");
        assert!(r.ops > 0 && r.ops_per_sec > 0.0, "{r:?}");
        assert_eq!(r.per_thread_ops_per_sec.len(), r.threads, "{r:?}");
        assert!(r.per_thread_ops_per_sec.iter().all(|&v| v > 0.0), "{r:?}");
        let (read, written) = (
            r.read_bytes_per_op.unwrap(),
            r.written_bytes_per_op.unwrap(),
        );
        assert_eq!(read + written, CHUNK as f64, "{r:?}");
        let pct = match r.phase.rsplit_once("-w") {
            Some((_, n)) => n.parse::<f64>().unwrap(),
            None => 0.0,
        };
        assert_eq!(written, CHUNK as f64 * pct / 100.0, "{r:?}");
        assert!(r.read_gib_s().unwrap() > 0.0, "{r:?}");
    }
}

/// On the engine, base against the default: the cold reads went to the device (in runs
/// of more than one block), the cached ones did not, and the tables are printed.
#[test]
fn bufio_on_the_engine() {
    let cfg = BenchConfig {
        variants: parse_variants("base,default").unwrap(),
        ..tiny(TargetSpec::Lanefs {
            image: None,
            size: 64 << 20,
            block_size: 4096,
        })
    };
    let mut out = Vec::new();
    let records = run(&cfg, &mut out).expect("bench run");
    check(&records, "lanefs", &["base", "default"]);
    for r in records.iter().filter(|r| r.workload == "bufio") {
        let reads = r.device_reads.expect("the engine counts device reads");
        match r.phase.as_str() {
            "cold-read" => {
                assert!(reads > 0, "{r:?}");
                assert!(r.device_read_kib().unwrap() > 4.0, "{r:?}");
            }
            // Both shapes fit the cache: cached phases never miss.
            _ => assert_eq!(reads, 0, "{r:?}"),
        }
    }
    let tables = render_vs_base(&records);
    for want in [
        "bufio on lanefs: GiB/s read + written",
        "shared-w30",
        "cached reads as a share of the memcpy control",
        "cold sequential reads",
        "avg device read KiB",
    ] {
        assert!(tables.contains(want), "{want} missing in\n{tables}");
    }
    assert!(String::from_utf8(out).unwrap().contains("bufio"));
}

/// On a host directory through syscalls; the run leaves nothing behind.
#[test]
fn bufio_on_a_path() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = tiny(TargetSpec::Path(dir.path().into()));
    let records = run(&cfg, &mut Vec::new()).expect("bench run");
    check(&records, &format!("path:{}", dir.path().display()), &["-"]);
    assert!(records.iter().all(|r| r.device_reads.is_none()));
    let left: Vec<_> = std::fs::read_dir(dir.path()).expect("read_dir").collect();
    assert!(left.is_empty(), "run left {left:?}");
}
