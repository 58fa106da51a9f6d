//! Goal: rtfrag's instructions per allocation are counted under callgrind by running this
//! very `lanefs` binary as the bench's child, and land in the 1-thread records.
//! Method: the library's run with a small device (512 MiB, 8 fill files with 400 holes
//! each, 480 allocations per phase, a tenth of them under callgrind) and `callgrind_exe`
//! set to the built binary; skipped
//! with a line when valgrind is not installed.

use lanefs_bench::workloads::rtfrag::{self, Params};
use lanefs_bench::{parse_variants, run, BenchConfig};

#[path = "../../lanefs/tests/common/skips.rs"]
mod skips;

#[test]
fn instructions_are_counted_under_callgrind() {
    if !rtfrag::valgrind_available() {
        // CI installs it (.ci/run): there a missing valgrind is a failure, not a skip.
        let test = "instructions_are_counted_under_callgrind";
        skips::report(test, "valgrind is not installed");
        return;
    }
    let cfg = BenchConfig {
        workloads: vec![rtfrag::NAME.into()],
        threads: Some(vec![1]),
        reps: 1,
        seconds: 0.05,
        warmup: 0.0,
        variants: parse_variants("plain,default").expect("variants"),
        rtfrag: Params {
            rt_bytes: 512 << 20,
            group_bmblocks: 1,
            fill_files: 8,
            holes_per_file: 400,
            allocs: 480,
            hint_allocs: 480,
            frees: 240,
            hint: 4,
            files: 8,
            callgrind_exe: Some(env!("CARGO_BIN_EXE_lanefs").into()),
            ..Params::default()
        },
        ..BenchConfig::default()
    };
    let mut out = Vec::new();
    let records = run(&cfg, &mut out).expect("bench run");
    let text = String::from_utf8(out).expect("utf-8");
    assert!(
        text.contains("instructions per operation under callgrind, plain"),
        "{text}"
    );
    assert!(
        text.contains("instructions per operation under callgrind, default"),
        "{text}"
    );
    for phase in rtfrag::PHASES {
        for variant in ["plain", "default"] {
            let r = records
                .iter()
                .find(|r| r.workload == rtfrag::NAME && r.phase == phase && r.variant == variant)
                .unwrap_or_else(|| panic!("no {phase} [{variant}]"));
            let n = r.instructions_per_op.unwrap_or_else(|| panic!("{r:?}"));
            // A call through the engine is thousands of instructions, not a handful.
            assert!(n > 1000.0, "{phase} [{variant}]: {n}");
        }
    }
    // The seed 003 line compares them with plain's (wrapped at 100 columns).
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(flat.contains("x the instructions per allocation"), "{text}");
}
