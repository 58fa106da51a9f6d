//! `bench`: the benchmark workloads through `lanefs_bench`.

use crate::cli::BenchArgs;
use crate::error::{CmdResult, Error, Failure};
use crate::size::parse_size;
use lanefs_bench::{BenchConfig, TargetSpec, DEFAULT_IMAGE_SIZE};

/// The run the command line asks for; everything not given keeps its default.
pub fn config(args: &BenchArgs) -> CmdResult<BenchConfig> {
    let defaults = BenchConfig::default();
    let workloads = if args.workloads.is_empty() {
        lanefs_bench::workload_names()
            .into_iter()
            .map(String::from)
            .collect()
    } else {
        args.workloads.clone()
    };
    // Without --threads each workload sweeps its own counts (fallocate2 and fsync go to 8).
    let threads = (!args.threads.is_empty()).then(|| args.threads.clone());
    let variants = if args.variants.is_empty() {
        defaults.variants.clone()
    } else {
        args.variants
            .iter()
            .map(|v| lanefs_bench::Variant::named(v))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| Failure::new("--variants", Error::Msg(e)))?
    };
    Ok(BenchConfig {
        workloads,
        threads,
        reps: args.reps.unwrap_or(defaults.reps),
        seconds: args.seconds.unwrap_or(defaults.seconds),
        warmup: args.warmup.unwrap_or(defaults.warmup),
        files: args.files.unwrap_or(defaults.files),
        lockstat: args.lockstat,
        variants,
        json: args.json.clone(),
        target: target(args)?,
    })
}

/// Where to run: a host directory, or the engine on an image.
fn target(args: &BenchArgs) -> CmdResult<TargetSpec> {
    if let Some(dir) = &args.path {
        return Ok(TargetSpec::Path(dir.clone()));
    }
    let size = match &args.size {
        Some(s) => parse_size(s).map_err(|e| Failure::new("--size", Error::Msg(e)))?,
        None => DEFAULT_IMAGE_SIZE,
    };
    Ok(TargetSpec::Lanefs {
        image: args.image.clone(),
        size,
        block_size: args
            .block_size
            .unwrap_or(lanefs_bench::config::DEFAULT_BLOCK_SIZE),
    })
}

/// `lanefs bench`.
pub fn bench(args: &BenchArgs) -> CmdResult<i32> {
    let cfg = config(args)?;
    let mut out = std::io::stdout().lock();
    lanefs_bench::run(&cfg, &mut out).map_err(|e| Failure::new("", Error::Msg(e)))?;
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

    /// A plain `lanefs bench` is `BenchConfig::default()`, and the help states those
    /// defaults.
    #[test]
    fn help_states_the_defaults() {
        let cfg = config(&bench_args(&[])).expect("config");
        let d = BenchConfig::default();
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
            "(default: default)".to_string(),
        ] {
            assert!(help.contains(&want), "{want} missing in\n{help}");
        }
    }

    /// `--variants` takes the seed's names; an unknown one names the option and the name.
    #[test]
    fn variants_by_name() {
        let cfg = config(&bench_args(&["--variants", "base,optimize_scan,slots"])).expect("config");
        let names: Vec<&str> = cfg.variants.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(names, ["base", "optimize_scan", "slots"]);
        assert!(!cfg.variants[0].opts.mb_optimize_scan);
        assert!(cfg.variants[2].opts.mb_optimize_scan);
        let err = config(&bench_args(&["--variants", "base,nope"])).expect_err("unknown");
        assert_eq!(err.what, "--variants");
        let Error::Msg(text) = &err.error else {
            panic!("not a worded error: {err:?}");
        };
        assert!(text.starts_with("unknown variant \"nope\""), "{text}");
    }
}
