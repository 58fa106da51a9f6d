//! What a bench run does: workloads, thread counts, repetitions, target and variants.

use std::path::PathBuf;
use std::time::Duration;

/// Block size the `lanefs` target formats its images with.
pub const DEFAULT_BLOCK_SIZE: u32 = 4096;

/// Size of the sparse image file the `lanefs` target formats for each run.
pub const DEFAULT_IMAGE_SIZE: u64 = 4 << 30;

pub use crate::target::PATH_VARIANT;
pub use crate::variant::{parse_variants, Family, Variant, DEFAULT_VARIANT};

/// Where the workloads run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetSpec {
    /// Real syscalls in a directory of any mounted file system. Each run gets a fresh
    /// subdirectory, removed afterwards. Variants do not apply: every record of this target
    /// carries the variant name [`PATH_VARIANT`].
    Path(PathBuf),
    /// The engine in-process on an image file, formatted and mounted afresh for each run
    /// and deleted afterwards.
    Lanefs {
        /// Image file to use; `None` means a temporary file in a fresh temporary directory.
        image: Option<PathBuf>,
        /// Size of the (sparse) image in bytes.
        size: u64,
        /// Block size the image is formatted with (1024 to 65536).
        block_size: u32,
    },
    /// `--compare`: real syscalls on mounts of images `mkfs.ext4` made alike: `lanefs
    /// mount` (FUSE; also over /dev/fuse when io_uring is the default), `lanefs memfs`
    /// (the FUSE ceiling, no image), fuse2fs (FUSE) and the kernel's ext4 on a loop device, run
    /// interleaved (see the `compare` module). Needs root, /dev/fuse, fuse2fs and loop devices,
    /// and [`BenchConfig::lanefs_exe`].
    Compare {
        /// Size of each (sparse) image in bytes.
        size: u64,
    },
}

impl Default for TargetSpec {
    fn default() -> Self {
        TargetSpec::Lanefs {
            image: None,
            size: DEFAULT_IMAGE_SIZE,
            block_size: DEFAULT_BLOCK_SIZE,
        }
    }
}

/// Everything `run` needs. `BenchConfig::default()` is what a plain `lanefs bench` does.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchConfig {
    /// Workload names, in the order they run (see [`crate::workload_names`]).
    pub workloads: Vec<String>,
    /// Thread counts to sweep for every workload; `None` sweeps
    /// [`crate::workloads::default_threads`] (powers of two up to the CPUs: 1 and 2 on a
    /// 2-CPU machine); a compare run sweeps [`COMPARE_THREADS`].
    pub threads: Option<Vec<usize>>,
    /// Repetitions of the whole sweep; reports show the median with min and max.
    pub reps: usize,
    /// Measured seconds per run of a duration-timed workload (fallocate2, fsync, stat,
    /// control), per phase for bufio64k.
    pub seconds: f64,
    /// Seconds each duration-timed run spins before measuring starts.
    pub warmup: f64,
    /// Files per thread for mdtest, mdtest-shared and stat.
    pub files: usize,
    /// Files each thread of fsmark creates; `None` splits
    /// [`crate::workloads::fsmark::DEFAULT_TOTAL`] evenly between the threads.
    pub fsmark_files: Option<usize>,
    /// Bytes of file data bufio moves in each shape (one shared file, or split between the
    /// threads' files); `None` is [`crate::workloads::bufio::DEFAULT_SIZE`]. On the engine
    /// it is capped at a quarter of the page cache's limit, so both shapes stay cached.
    pub bufio_size: Option<u64>,
    /// The shape of rtfrag's fragmented realtime device and of its requests (the default
    /// is issue 14's: 1 TiB, about 200,000 holes).
    pub rtfrag: crate::workloads::rtfrag::Params,
    /// Where the workloads run.
    pub target: TargetSpec,
    /// Mount-option variants, run interleaved (lanefs target only). Each workload runs the
    /// ones that apply to its family ([`BenchConfig::variants_for`]); empty (the default)
    /// runs each workload with its seed's variants
    /// ([`crate::workloads::Workload::seed_variants`]). The `default` variant mounts with
    /// `MountOptions::default()`: journal on (mkfs images have one), commit every 5 s as
    /// ext4's `commit=5`.
    pub variants: Vec<Variant>,
    /// Collect and print lock statistics for lanefs runs.
    pub lockstat: bool,
    /// Write all records as a JSON array to this file.
    pub json: Option<PathBuf>,
    /// Write one SVG chart per workload into this directory (created if missing).
    pub svg: Option<PathBuf>,
    /// Write a Markdown report (every table, the charts when `svg` is set, the machine, the
    /// commit, what each variant means) to this file.
    pub report: Option<PathBuf>,
    /// Print a line for every timed run as it ends (the command line turns this off when
    /// it shows a progress bar instead).
    pub run_lines: bool,
    /// Print the full tables (every field of every run) and the seeds' detailed tables,
    /// not only the compact per-workload tables.
    pub verbose: bool,
    /// Pin a compare run's workload threads and programs to CPUs (`--pin`; the engine's
    /// runs always pin). Off by default: users' programs are not pinned.
    pub pin: bool,
    /// The archive `--compare`'s `programs` extracts and copies (`--tarball`); `None`
    /// builds one (the `compare` module's `programs.rs`).
    pub tarball: Option<PathBuf>,
    /// The `lanefs` executable a [`TargetSpec::Compare`] run mounts with (`lanefs mount
    /// -f`); the command line passes its own (`std::env::current_exe`).
    pub lanefs_exe: Option<PathBuf>,
}

impl Default for BenchConfig {
    fn default() -> Self {
        BenchConfig {
            workloads: crate::workload_names()
                .into_iter()
                .map(String::from)
                .collect(),
            threads: None,
            reps: 3,
            seconds: 0.3,
            warmup: 0.05,
            files: 2000,
            fsmark_files: None,
            bufio_size: None,
            rtfrag: crate::workloads::rtfrag::Params::default(),
            target: TargetSpec::default(),
            variants: Vec::new(),
            lockstat: false,
            json: None,
            svg: None,
            report: None,
            run_lines: true,
            verbose: false,
            pin: false,
            tarball: None,
            lanefs_exe: None,
        }
    }
}

impl BenchConfig {
    /// `lanefs bench --quick`: every workload with its seed's variants once, in well under
    /// 30 seconds on a 2-CPU machine: one repetition of short runs (0.2 s after 0.05 s of
    /// warm-up), 500 files per thread, 10,000 fsmark files per thread, 32 MiB of bufio
    /// data, a tenth of rtfrag's holes and requests on a 64 GiB device, no callgrind. For a
    /// look at the shape, not for numbers to quote.
    pub fn quick() -> BenchConfig {
        let d = BenchConfig::default();
        BenchConfig {
            reps: 1,
            seconds: 0.2,
            warmup: 0.05,
            files: 500,
            fsmark_files: Some(10_000),
            bufio_size: Some(32 << 20),
            rtfrag: crate::workloads::rtfrag::Params {
                rt_bytes: d.rtfrag.rt_bytes / 16,
                fill_files: d.rtfrag.fill_files / 10,
                allocs: d.rtfrag.allocs / 10,
                hint_allocs: d.rtfrag.hint_allocs / 10,
                frees: d.rtfrag.frees / 10,
                ..d.rtfrag.clone()
            },
            ..d
        }
    }
}

/// Upper bounds that keep a typo from starting a run that never ends.
const MAX_THREADS: usize = 4096;

/// Thread counts a compare run (`--compare`) sweeps when none are named.
pub const COMPARE_THREADS: &[usize] = &[1, 2];
/// The name of `--compare`'s real-programs workload (`compare/programs.rs`).
pub const PROGRAMS: &str = "programs";
const MAX_REPS: usize = 1000;
const MAX_SECONDS: f64 = 24.0 * 3600.0;
const MAX_FILES: usize = 100_000_000;
const MAX_BUFIO_SIZE: u64 = 1 << 40;

impl BenchConfig {
    /// Check every field; the error names the field and what is wrong with it.
    pub fn validate(&self) -> Result<(), String> {
        if self.workloads.is_empty() {
            return Err("no workload given".to_string());
        }
        let compare = matches!(self.target, TargetSpec::Compare { .. });
        for w in &self.workloads {
            if w == PROGRAMS && !compare {
                return Err(format!(
                    "workload {w} runs only with --compare (real programs on mounts)"
                ));
            }
            if w != PROGRAMS && crate::workloads::find(w).is_none() {
                return Err(format!(
                    "unknown workload {w:?} (known: {}; with --compare also {})",
                    crate::workload_names().join(", "),
                    PROGRAMS
                ));
            }
        }
        if let Some(threads) = &self.threads {
            if threads.is_empty() {
                return Err("no thread count given".to_string());
            }
            if let Some(&t) = threads.iter().find(|&&t| t == 0 || t > MAX_THREADS) {
                return Err(format!("thread count {t} is outside 1..={MAX_THREADS}"));
            }
        }
        if self.reps == 0 || self.reps > MAX_REPS {
            return Err(format!(
                "repetitions {} is outside 1..={MAX_REPS}",
                self.reps
            ));
        }
        seconds_duration("seconds", self.seconds, false)?;
        seconds_duration("warm-up", self.warmup, true)?;
        if self.files == 0 || self.files > MAX_FILES {
            return Err(format!(
                "files per thread {} is outside 1..={MAX_FILES}",
                self.files
            ));
        }
        if let Some(n) = self.fsmark_files.filter(|&n| n == 0 || n > MAX_FILES) {
            return Err(format!(
                "fsmark files per thread {n} is outside 1..={MAX_FILES}"
            ));
        }
        if let Some(n) = self
            .bufio_size
            .filter(|&n| !(crate::workloads::bufio::MIN_SIZE..=MAX_BUFIO_SIZE).contains(&n))
        {
            return Err(format!(
                "bufio size {n} is outside {}..={MAX_BUFIO_SIZE} bytes",
                crate::workloads::bufio::MIN_SIZE
            ));
        }
        if self
            .workloads
            .iter()
            .any(|w| w == crate::workloads::rtfrag::NAME)
        {
            self.rtfrag.validate()?;
        }
        self.validate_variants()?;
        self.validate_target()
    }

    /// Every variant has a name and applies to some chosen workload, every chosen workload
    /// gets at least one variant, and no workload gets two variants of one name.
    fn validate_variants(&self) -> Result<(), String> {
        if let Some(i) = self.variants.iter().position(|v| v.name.is_empty()) {
            return Err(format!("variant {} has an empty name", i + 1));
        }
        let chosen: Vec<&dyn crate::workloads::Workload> = self
            .workloads
            .iter()
            .filter_map(|w| crate::workloads::find(w))
            .collect();
        // A name is fine when one of its families runs (`base` is in both).
        let runs = |name: &str| {
            self.variants
                .iter()
                .filter(|v| v.name == name)
                .any(|v| chosen.iter().any(|w| v.applies_to(w.family())))
        };
        for v in &self.variants {
            let Some(family) = v.family else {
                continue;
            };
            if !runs(&v.name) {
                return Err(format!(
                    "variant {:?} ({}) applies to {}, none of which runs here ({})",
                    v.name,
                    family.about(),
                    family.workloads().join(", "),
                    self.workloads.join(", ")
                ));
            }
        }
        for w in &chosen {
            let variants = self.variants_for(w.name());
            let names: Vec<&str> = variants.iter().map(|v| v.name.as_str()).collect();
            if names.is_empty() {
                return Err(format!(
                    "no variant given applies to {} (it takes {DEFAULT_VARIANT}, {} or \
                     NAME:OPTIONS)",
                    w.name(),
                    w.family().variant_names().join(", ")
                ));
            }
            let twice = (1..names.len()).find(|&i| names[..i].contains(&names[i]));
            if let Some(dup) = twice.map(|i| names[i]) {
                return Err(format!(
                    "variant name {dup:?} is given twice for {}",
                    w.name()
                ));
            }
        }
        Ok(())
    }

    /// The target exists and its size and block size are sane.
    fn validate_target(&self) -> Result<(), String> {
        match &self.target {
            TargetSpec::Path(dir) => {
                if !dir.is_dir() {
                    return Err(format!("path target {} is not a directory", dir.display()));
                }
            }
            TargetSpec::Lanefs {
                size, block_size, ..
            } => {
                if *size < (16 << 20) {
                    return Err(format!("image size {size} is smaller than 16 MiB"));
                }
                if !block_size.is_power_of_two() || !(1024..=65536).contains(block_size) {
                    return Err(format!(
                        "block size {block_size} is not a power of two from 1024 to 65536"
                    ));
                }
            }
            // The image size is checked by the compare run, which knows what it needs.
            TargetSpec::Compare { .. } => {
                let engine_only: Vec<&str> = self
                    .workloads
                    .iter()
                    .filter_map(|w| crate::workloads::find(w))
                    .filter(|w| w.engine_only())
                    .map(|w| w.name())
                    .collect();
                if !engine_only.is_empty() {
                    return Err(format!(
                        "{} runs on the engine in-process only (its image has a realtime \
                         device no kernel mounts); --compare cannot run it",
                        engine_only.join(", ")
                    ));
                }
                match &self.lanefs_exe {
                    None => return Err("no lanefs executable given for --compare".to_string()),
                    Some(exe) if !exe.is_file() => {
                        return Err(format!("lanefs executable {} is not a file", exe.display()))
                    }
                    Some(_) => {}
                }
            }
        }
        Ok(())
    }

    /// The variants workload `name` runs with, in the order given: those of its family,
    /// `default` and raw specs; with none given, its seed's
    /// ([`crate::workloads::Workload::seed_variants`]). Empty for an unknown workload.
    pub fn variants_for(&self, name: &str) -> Vec<Variant> {
        let Some(w) = crate::workloads::find(name) else {
            return Vec::new();
        };
        if self.variants.is_empty() {
            return w
                .seed_variants()
                .iter()
                .map(|n| {
                    // The names are the code's own; a test resolves every one.
                    Variant::named_in(w.family(), n)
                        .unwrap_or_else(|e| panic!("{}'s seed variants: {e}", w.name()))
                })
                .collect();
        }
        self.variants
            .iter()
            .filter(|v| v.applies_to(w.family()))
            .cloned()
            .collect()
    }

    /// Thread counts workload `name` runs at: the given ones, or the workload's own.
    pub fn threads_for(&self, name: &str) -> Vec<usize> {
        match (&self.threads, crate::workloads::find(name)) {
            (Some(t), _) => t.clone(),
            (None, Some(_)) => crate::workloads::default_threads(),
            (None, None) => Vec::new(),
        }
    }

    /// Every thread count of the run, in sweep order: the given ones as given, or the
    /// union of the workloads' own in increasing order.
    pub fn sweep(&self) -> Vec<usize> {
        if let Some(t) = &self.threads {
            return t.clone();
        }
        let mut all: Vec<usize> = self
            .workloads
            .iter()
            .flat_map(|w| self.threads_for(w))
            .collect();
        all.sort_unstable();
        all.dedup();
        all
    }

    /// Measured duration of a duration-timed run.
    pub fn duration(&self) -> Result<Duration, String> {
        seconds_duration("seconds", self.seconds, false)
    }

    /// Warm-up before measuring a duration-timed run.
    pub fn warmup_duration(&self) -> Result<Duration, String> {
        seconds_duration("warm-up", self.warmup, true)
    }
}

/// `secs` as a Duration, refusing NaN, negative, absurd and (unless `zero_ok`) zero values.
fn seconds_duration(what: &str, secs: f64, zero_ok: bool) -> Result<Duration, String> {
    let ok = secs.is_finite() && secs <= MAX_SECONDS && (secs > 0.0 || (zero_ok && secs == 0.0));
    if !ok {
        return Err(format!(
            "{what} {secs} is outside the range (0, {MAX_SECONDS}]"
        ));
    }
    Duration::try_from_secs_f64(secs).map_err(|e| format!("{what} {secs}: {e}"))
}
