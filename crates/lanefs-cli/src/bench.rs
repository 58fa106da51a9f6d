//! `bench`: the benchmark workloads through `lanefs_bench`, on the engine, a directory, or
//! (`--compare`) lanefs's FUSE mount beside fuse2fs and the kernel's ext4.

use crate::cli::BenchArgs;
use crate::error::{CmdResult, Error, Failure};
use crate::size::parse_size;
use lanefs_bench::{compare, BenchConfig, TargetSpec, DEFAULT_IMAGE_SIZE};
use std::io::IsTerminal;

/// The run the command line asks for; everything not given keeps its default.
pub fn config(args: &BenchArgs) -> CmdResult<BenchConfig> {
    let defaults = if args.quick {
        BenchConfig::quick()
    } else {
        BenchConfig::default()
    };
    let workloads = match (args.workloads.is_empty(), args.compare) {
        (false, _) => args.workloads.clone(),
        (true, false) => lanefs_bench::workload_names()
            .into_iter()
            .map(String::from)
            .collect(),
        (true, true) => compare::WORKLOADS.iter().map(|w| w.to_string()).collect(),
    };
    // Without --threads each workload sweeps its own counts (fallocate2 and fsync go to 8),
    // and a compare run sweeps 1 and 2.
    let threads = match (args.threads.is_empty(), args.compare) {
        (false, _) => Some(args.threads.clone()),
        (true, false) => None,
        (true, true) => Some(lanefs_bench::config::COMPARE_THREADS.to_vec()),
    };
    // A compare run mounts with this very binary (`lanefs mount -f`).
    let lanefs_exe = if args.compare {
        Some(
            std::env::current_exe()
                .map_err(|e| Failure::new("finding the lanefs executable", e))?,
        )
    } else {
        None
    };
    let variants = if args.variants.is_empty() {
        defaults.variants.clone()
    } else {
        let mut all = Vec::new();
        for list in &args.variants {
            let parsed = lanefs_bench::parse_variants(list)
                .map_err(|e| Failure::new("--variants", Error::Msg(e)))?;
            all.extend(parsed);
        }
        all
    };
    Ok(BenchConfig {
        workloads,
        threads,
        reps: args.reps.unwrap_or(defaults.reps),
        seconds: args.seconds.unwrap_or(defaults.seconds),
        warmup: args.warmup.unwrap_or(defaults.warmup),
        files: args.files.unwrap_or(defaults.files),
        fsmark_files: args.fsmark_files.or(defaults.fsmark_files),
        bufio_size: match &args.bufio_size {
            Some(s) => {
                Some(parse_size(s).map_err(|e| Failure::new("--bufio-size", Error::Msg(e)))?)
            }
            None => defaults.bufio_size,
        },
        // rtfrag counts instructions by running this binary under callgrind (not in a
        // quick run: it takes longer than the rest).
        rtfrag: lanefs_bench::workloads::rtfrag::Params {
            callgrind_exe: std::env::current_exe().ok().filter(|_| !args.quick),
            ..defaults.rtfrag
        },
        lockstat: args.lockstat,
        variants,
        json: args.json.clone(),
        svg: args.svg.clone(),
        report: args.report.clone(),
        run_lines: defaults.run_lines,
        verbose: args.verbose,
        pin: args.pin,
        tarball: args.tarball.clone(),
        target: target(args)?,
        lanefs_exe,
    })
}

/// Where to run: a host directory, or the engine on an image.
fn target(args: &BenchArgs) -> CmdResult<TargetSpec> {
    if let Some(dir) = &args.path {
        return Ok(TargetSpec::Path(dir.clone()));
    }
    let size = match &args.size {
        Some(s) => parse_size(s).map_err(|e| Failure::new("--size", Error::Msg(e)))?,
        None if args.compare => compare::IMAGE_SIZE,
        None => DEFAULT_IMAGE_SIZE,
    };
    if args.compare {
        return Ok(TargetSpec::Compare { size });
    }
    Ok(TargetSpec::Lanefs {
        image: args.image.clone(),
        size,
        block_size: args
            .block_size
            .unwrap_or(lanefs_bench::config::DEFAULT_BLOCK_SIZE),
    })
}

/// `lanefs bench`; or, with `LANEFS_BENCH_RTFRAG_CALLGRIND` set (by the bench itself, which
/// runs this binary under callgrind to count rtfrag's instructions), that child's work.
pub fn bench(args: &BenchArgs) -> CmdResult<i32> {
    use lanefs_bench::workloads::rtfrag;
    if let Some(spec) = std::env::var_os(rtfrag::CHILD_ENV) {
        rtfrag::callgrind_child(std::path::Path::new(&spec))
            .map_err(|e| Failure::new("rtfrag callgrind child", Error::Msg(e)))?;
        return Ok(0);
    }
    let mut cfg = config(args)?;
    // The bar on a terminal; a line per run with --verbose, or when the output goes to a
    // log or a pipe (the bar would not be seen beside it).
    let bar = if args.verbose || !std::io::stdout().is_terminal() {
        None
    } else {
        crate::progress::BenchBar::new()
    };
    cfg.run_lines = bar.is_none();
    let result = match &bar {
        Some(bar) => {
            let mut out = bar.writer(std::io::stdout().lock());
            let mut obs = bar;
            let result = lanefs_bench::run_with(&cfg, &mut out, &mut obs);
            if result.is_ok() {
                bar.finish();
            }
            result
        }
        None => lanefs_bench::run(&cfg, &mut std::io::stdout().lock()),
    };
    result.map_err(|e| Failure::new("", Error::Msg(e)))?;
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use clap::{CommandFactory, Parser};

    fn bench_args(args: &[&str]) -> BenchArgs {
        let cli = Cli::try_parse_from(["lanefs", "bench"].iter().chain(args))
            .unwrap_or_else(|e| panic!("parsing {args:?}: {e}"));
        match cli.command {
            Command::Bench(a) => a,
            other => panic!("parsed as {}", other.name()),
        }
    }

    /// Whether `lanefs bench ARGS` parses.
    fn bench_args_result(args: &[&str]) -> Result<(), String> {
        Cli::try_parse_from(["lanefs", "bench"].iter().chain(args))
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    /// A plain `lanefs bench` is `BenchConfig::default()`, and the help states those
    /// defaults.
    #[test]
    fn help_states_the_defaults() {
        let cfg = config(&bench_args(&[])).expect("config");
        let d = BenchConfig::default();
        // The one difference: rtfrag may run this binary under callgrind.
        assert_eq!(
            cfg.rtfrag.callgrind_exe,
            Some(std::env::current_exe().expect("current exe"))
        );
        let cfg = BenchConfig {
            rtfrag: lanefs_bench::workloads::rtfrag::Params {
                callgrind_exe: None,
                ..cfg.rtfrag
            },
            ..cfg
        };
        assert_eq!(cfg, d);
        let mut cmd = Cli::command();
        let help = cmd
            .find_subcommand_mut("bench")
            .expect("bench subcommand")
            .render_help()
            .to_string();
        let TargetSpec::Lanefs { size, .. } = d.target else {
            panic!("default target is not the engine: {:?}", d.target);
        };
        assert_eq!(size, 4 << 30);
        for want in [
            format!("(default: {})", d.reps),
            format!("(default: {})", d.seconds),
            format!("(default: {})", d.warmup),
            format!("(default: {})", d.files),
            "(default: 4G)".to_string(),
            "(default: each workload its seed's".to_string(),
            "(default: powers of two up to the CPUs".to_string(),
            format!(
                "(default: {} in total",
                lanefs_bench::workloads::fsmark::DEFAULT_TOTAL
            ),
        ] {
            assert!(help.contains(&want), "{want} missing in\n{help}");
        }
    }

    /// `--bufio-size` takes a size with a unit; a bad one names the option.
    #[test]
    fn bufio_size_parses() {
        let cfg = config(&bench_args(&["bufio", "--bufio-size", "64M"])).expect("config");
        assert_eq!(cfg.bufio_size, Some(64 << 20));
        assert_eq!(config(&bench_args(&[])).expect("config").bufio_size, None);
        let err = config(&bench_args(&["--bufio-size", "12Q"])).expect_err("bad size");
        assert_eq!(err.what, "--bufio-size");
    }

    /// `--variants` takes the seeds' names, resolved per workload family: `base` is one
    /// variant per family. An unknown one names the option and the name.
    #[test]
    fn variants_by_name() {
        use lanefs_bench::Family;
        let cfg = config(&bench_args(&["--variants", "base,optimize_scan,slots"])).expect("config");
        let names: Vec<(&str, Option<Family>)> = cfg
            .variants
            .iter()
            .map(|v| (v.name.as_str(), v.family))
            .collect();
        assert_eq!(
            names,
            [
                ("base", Some(Family::Blocks)),
                ("base", Some(Family::Inodes)),
                ("base", Some(Family::Pages)),
                ("optimize_scan", Some(Family::Blocks)),
                ("slots", Some(Family::Blocks)),
            ]
        );
        assert!(!cfg.variants[0].opts.mb_optimize_scan);
        assert_eq!(cfg.variants[2].opts.folio_max_order, 0);
        assert!(cfg.variants[4].opts.mb_optimize_scan);
        assert_eq!(cfg.variants[1].opts.ialloc, lanefs::IallocPolicy::Locked);
        let err = config(&bench_args(&["--variants", "base,nope"])).expect_err("unknown");
        assert_eq!(err.what, "--variants");
        let Error::Msg(text) = &err.error else {
            panic!("not a worded error: {err:?}");
        };
        assert!(text.starts_with("unknown variant \"nope\""), "{text}");
    }

    /// A raw spec keeps its comma-separated options (clap does not split the list), and
    /// `--variants` may be repeated; `--fsmark-files` sets fsmark's files per thread.
    #[test]
    fn raw_variants_and_fsmark_files() {
        let args = bench_args(&[
            "fsmark",
            "--variants",
            "global,x:ialloc=locked,icache=papaya",
            "--variants",
            "lanefs",
            "--fsmark-files",
            "1234",
        ]);
        let cfg = config(&args).expect("config");
        let names: Vec<&str> = cfg.variants.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(names, ["global", "x", "lanefs"]);
        let x = &cfg.variants[1].opts;
        assert_eq!(x.ialloc, lanefs::IallocPolicy::Locked);
        assert_eq!(x.icache, lanefs::IcachePolicy::Papaya);
        assert_eq!(cfg.fsmark_files, Some(1234));
        assert_eq!(cfg.workloads, ["fsmark"]);
        let err = config(&bench_args(&["--variants", "x:icache=huge"])).expect_err("bad option");
        let Error::Msg(text) = &err.error else {
            panic!("not a worded error: {err:?}");
        };
        assert!(text.starts_with("variant x: option icache=huge"), "{text}");
    }

    /// `--compare` defaults to the programs, fallocate2, mdtest and bufio64k at 1 and 2
    /// threads on 1 GiB images, unpinned, mounting with this binary; workloads, threads,
    /// size, `--pin` and `--tarball` can be given; the options of the other targets
    /// conflict with it, and `--pin`, `--tarball` and `programs` need it.
    #[test]
    fn compare_defaults_and_conflicts() {
        let cfg = config(&bench_args(&["--compare"])).expect("config");
        assert_eq!(
            cfg.workloads,
            ["programs", "fallocate2", "mdtest", "bufio64k"]
        );
        assert!(!cfg.pin);
        assert_eq!(cfg.tarball, None);
        let cfg =
            config(&bench_args(&["--compare", "--pin", "--tarball", "t.tar"])).expect("config");
        assert!(cfg.pin);
        assert_eq!(cfg.tarball.as_deref(), Some(std::path::Path::new("t.tar")));
        assert!(bench_args_result(&["--pin"]).is_err());
        assert!(bench_args_result(&["--tarball", "t.tar"]).is_err());
        let engine = config(&bench_args(&["programs"])).expect("config");
        let e = engine.validate().expect_err("programs needs --compare");
        assert!(e.contains("only with --compare"), "{e}");
        let cfg = config(&bench_args(&["--compare"])).expect("config");
        assert_eq!(cfg.threads, Some(vec![1, 2]));
        assert_eq!(cfg.target, TargetSpec::Compare { size: 1 << 30 });
        assert_eq!(
            cfg.lanefs_exe,
            Some(std::env::current_exe().expect("current exe"))
        );
        let cfg = config(&bench_args(&[
            "--compare",
            "mdtest",
            "--threads",
            "1,2,4",
            "--size",
            "2G",
        ]))
        .expect("config");
        assert_eq!(cfg.workloads, ["mdtest"]);
        assert_eq!(cfg.threads, Some(vec![1, 2, 4]));
        assert_eq!(cfg.target, TargetSpec::Compare { size: 2 << 30 });
        assert_eq!(config(&bench_args(&[])).expect("config").lanefs_exe, None);
        for other in [
            &["--path", "/tmp"][..],
            &["--image", "x.img"],
            &["--block-size", "4096"],
            &["--lockstat"],
            &["--variants", "base"],
        ] {
            let args = ["lanefs", "bench", "--compare"].iter().chain(other);
            assert!(Cli::try_parse_from(args).is_err(), "{other:?}");
        }
    }
}
