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
    // Without --threads each workload sweeps its own counts (fsync goes to 8).
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
    })
}

/// `lanefs bench`.
pub fn bench(args: &BenchArgs) -> CmdResult<i32> {
    let cfg = config(args)?;
    let mut out = std::io::stdout().lock();
    lanefs_bench::run(&cfg, &mut out).map_err(|e| Failure::new("", Error::Msg(e)))?;
    Ok(0)
}
