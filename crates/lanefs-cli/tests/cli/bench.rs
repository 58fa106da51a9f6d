//! `lanefs bench`: help, unknown variants, the inode workloads with their variants, a small
//! sweep, the fsync workload's journal columns.

use super::*;

/// `bench --help` states each workload's default thread counts and the known variants of
/// each family; an unknown variant is a one-line error that lists them, and a variant of
/// another family than the chosen workloads' one that names the workloads it applies to.
#[test]
fn bench_help_and_unknown_variant() {
    let out = ok(lanefs(&["bench", "--help"]));
    let text = stdout(&out);
    for word in [
        "powers of two up to the CPUs, at most 8: 1,2 on a 2-CPU machine",
        "fsmark, stat global,bucket,papaya",
        "--quick",
        "--svg",
        "--report",
        "bufio (seed 002): base (folio_max_order=0), order2, order6",
        "--bufio-size",
        "fallocate2, fsync, bufio64k (seed 000): base, trylock, linear, optimize_scan, slots",
        "ialloc (optimistic + global), icache (locked + bucket), lanefs (optimistic + bucket), \
         global, bucket, papaya",
        "'x:ialloc=locked,icache=global'",
        "--fsmark-files",
    ] {
        assert!(text.contains(word), "{word} missing in\n{text}");
    }
    let line = one_line_failure(&lanefs(&["bench", "--variants", "base,fast"]));
    assert!(line.contains("unknown variant \"fast\""), "{line}");
    assert!(line.contains("optimize_scan, slots"), "{line}");
    assert!(line.contains("lanefs, global, bucket, papaya"), "{line}");
    let line = one_line_failure(&lanefs(&["bench", "mdtest", "--variants", "trylock"]));
    assert!(
        line.contains("variant \"trylock\" (seed 000's block allocator) applies to fallocate2"),
        "{line}"
    );
    let line = one_line_failure(&lanefs(&["bench", "--variants", "x:ialloc=maybe"]));
    assert!(line.contains("variant x: option ialloc=maybe"), "{line}");
}

/// The issue 12 workloads from the command line: mdtest-shared, fsmark and stat under the
/// seeds' variants and a raw spec, one thread, on a small image; the JSON carries the new
/// fields and the summary compares with base.
#[test]
fn bench_inode_workloads_with_variants() {
    let dir = tempdir();
    let json = dir.path().join("bench.json");
    let args = [
        "bench",
        "mdtest-shared",
        "fsmark",
        "stat",
        "--threads",
        "1",
        "--reps",
        "1",
        "--seconds",
        "0.1",
        "--warmup",
        "0",
        "--files",
        "20",
        "--fsmark-files",
        "200",
        "--size",
        "64M",
        "--variants",
        "base,lanefs,x:ialloc=locked,icache=papaya",
        "--verbose",
        "--json",
    ];
    let mut args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    args.push(s(&json));
    let out = ok(lanefs(&args));
    let text = stdout(&out);
    for word in [
        "x [mdtest-shared fsmark stat: ialloc=locked,icache=papaya]",
        "mdtest-shared create on lanefs: creates/s in total against base",
        "fsmark create on lanefs: files/s in total against base",
        "stat lookup on lanefs: CPU per lookup in us against base",
        "inode cache after the run",
    ] {
        assert!(text.contains(word), "{word} missing in\n{text}");
    }
    let records = lanefs_bench::read_json(&json).expect("records");
    // control + (2 mdtest-shared phases + fsmark + stat) x 3 variants.
    assert_eq!(records.len(), 1 + 4 * 3, "{records:?}");
    for r in records.iter().filter(|r| r.workload == "fsmark") {
        assert_eq!(r.ops, 200, "{r:?}");
        assert!(r.icache_inodes.is_some_and(|n| n >= 200), "{r:?}");
        assert!(
            r.icache_limit.is_some() && r.icache_evictions.is_some(),
            "{r:?}"
        );
        assert!(r.peak_rss_bytes.is_some_and(|b| b > 0), "{r:?}");
        assert!(r.cpu_per_op_us.is_some_and(|v| v > 0.0), "{r:?}");
        assert!(r.icache_bytes_per_inode.is_some_and(|v| v > 0.0), "{r:?}");
    }
    let text = std::fs::read_to_string(&json).expect("json text");
    for field in [
        "\"cpu_per_op_us\"",
        "\"icache_bytes_per_inode\"",
        "\"peak_rss_bytes\"",
    ] {
        assert!(text.contains(field), "{field} missing in {text}");
    }
}

#[test]
fn bench_runs_a_small_sweep() {
    let dir = tempdir();
    let json = dir.path().join("bench.json");
    let image = dir.path().join("bench.img");
    let args = [
        "bench",
        "mdtest",
        "--threads",
        "1,2",
        "--reps",
        "1",
        "--files",
        "20",
        "--size",
        "64M",
        "--image",
    ];
    let mut args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    args.extend([s(&image), "--json".to_string(), s(&json)]);
    let out = ok(lanefs(&args));
    assert!(stdout(&out).contains("mdtest"), "{}", stdout(&out));
    assert!(json.exists());
}

#[test]
fn bench_fsync_shows_journal_columns() {
    let dir = tempdir();
    let image = dir.path().join("bench.img");
    let args = [
        "bench",
        "fsync",
        "--threads",
        "1",
        "--reps",
        "1",
        "--seconds",
        "0.1",
        "--warmup",
        "0",
        "--size",
        "64M",
        "--lockstat",
        "--verbose",
        "--image",
    ];
    let mut args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    args.push(s(&image));
    let out = ok(lanefs(&args));
    let text = stdout(&out);
    for word in ["fsync", "commits/s", "journal B/op", "journal locks: fsync"] {
        assert!(text.contains(word), "{word} missing in\n{text}");
    }
}
