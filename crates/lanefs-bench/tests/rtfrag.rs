//! Goal: `rtfrag` (seed 003) runs end to end on the engine, plain and the default decide
//! alike, and the default reads no more bitmap and summary blocks than plain.
//! Method: a small device (512 MiB of 4 KiB rt extents: 4 groups of 1 bitmap block, 8 fill
//! files with 40 holes each), 48 allocations per phase (hint: 4 blocks, so the 320 holes
//! hold enough runs for it), one repetition, with
//! the allocator checked after the setup and after every run.

use lanefs_bench::workloads::rtfrag::{self, Params};
use lanefs_bench::{parse_variants, run, BenchConfig, Record, TargetSpec};

fn tiny() -> BenchConfig {
    BenchConfig {
        workloads: vec![rtfrag::NAME.into()],
        threads: Some(vec![1, 2]),
        reps: 1,
        seconds: 0.1,
        warmup: 0.0,
        variants: parse_variants("plain,default").expect("variants"),
        rtfrag: Params {
            rt_bytes: 512 << 20,
            group_bmblocks: 1,
            fill_files: 8,
            holes_per_file: 40,
            allocs: 48,
            hint_allocs: 48,
            frees: 24,
            hint: 4,
            files: 8,
            check: true,
            ..Params::default()
        },
        ..BenchConfig::default()
    }
}

fn find<'a>(records: &'a [Record], phase: &str, variant: &str, threads: usize) -> &'a Record {
    records
        .iter()
        .find(|r| {
            r.workload == rtfrag::NAME
                && r.phase == phase
                && r.variant == variant
                && r.threads == threads
        })
        .unwrap_or_else(|| panic!("no {phase} [{variant}] at {threads}: {records:#?}"))
}

/// Every phase of both variants at 1 and 2 threads, equal decision hashes at 1 thread,
/// lean's reads at most plain's, and the report's table with its goals.
#[test]
fn plain_and_default_decide_alike() {
    let cfg = tiny();
    let mut out = Vec::new();
    let records = run(&cfg, &mut out).expect("bench run");
    let text = String::from_utf8(out).expect("utf-8");
    for phase in rtfrag::PHASES {
        for threads in [1, 2] {
            for variant in ["plain", "default"] {
                let r = find(&records, phase, variant, threads);
                assert!(r.ops > 0, "{r:?}");
                assert!(r.rt_decisions.is_some(), "{r:?}");
                if phase == "free" {
                    assert_eq!(r.ops, r.rt_frees.expect("frees"), "{r:?}");
                } else {
                    assert_eq!(r.ops, r.rt_allocations.expect("allocations"), "{r:?}");
                    assert!(r.ops >= 48, "{r:?}");
                }
            }
        }
        let (p, d) = (
            find(&records, phase, "plain", 1),
            find(&records, phase, "default", 1),
        );
        assert_eq!(p.rt_decisions, d.rt_decisions, "{phase}: {p:?}\n{d:?}");
        assert_eq!(p.ops, d.ops, "{phase}");
        if phase != "free" {
            let reads =
                |r: &Record| r.rt_bitmap_reads.expect("bm") + r.rt_summary_reads.expect("sum");
            assert!(
                reads(d) <= reads(p),
                "{phase}: lean {} > plain {}",
                reads(d),
                reads(p)
            );
            assert!(reads(p) > 0, "{phase}: {p:?}");
        }
    }
    assert!(text.contains("prepared its image"), "{text}");
    assert!(text.contains("decisions"), "{text}");
    assert!(text.contains("same decisions"), "{text}");
    // Called as a library, there is no lanefs binary to run under callgrind.
    assert!(
        text.contains("rtfrag: instructions per allocation not measured: no lanefs executable"),
        "{text}"
    );
    assert!(records.iter().all(|r| r.instructions_per_op.is_none()));
}

/// On a directory the workload is skipped with one line; alone, nothing is left to run.
#[test]
fn path_target_skips_rtfrag() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = BenchConfig {
        variants: BenchConfig::default().variants,
        target: TargetSpec::Path(dir.path().into()),
        ..tiny()
    };
    let mut out = Vec::new();
    let err = run(&cfg, &mut out).expect_err("nothing to run");
    let text = String::from_utf8(out).expect("utf-8");
    assert!(
        text.contains("rtfrag runs on the engine in-process only"),
        "{text}"
    );
    assert!(err.contains("nothing to run"), "{err}");
    let cfg = BenchConfig {
        workloads: vec!["fallocate2".into(), rtfrag::NAME.into()],
        seconds: 0.05,
        threads: Some(vec![1]),
        ..cfg
    };
    let mut out = Vec::new();
    let records = run(&cfg, &mut out).expect("fallocate2 runs");
    assert!(records.iter().all(|r| r.workload != rtfrag::NAME));
    assert!(records.iter().any(|r| r.workload == "fallocate2"));
}

/// A compare run refuses rtfrag with one line: no kernel mounts its image.
#[test]
fn compare_refuses_rtfrag() {
    let exe = std::env::current_exe().expect("current exe");
    let cfg = BenchConfig {
        target: TargetSpec::Compare { size: 1 << 30 },
        lanefs_exe: Some(exe),
        ..tiny()
    };
    let err = cfg.validate().expect_err("engine only");
    assert!(
        err.contains("rtfrag runs on the engine in-process only"),
        "{err}"
    );
    assert!(err.contains("--compare cannot run it"), "{err}");
}
