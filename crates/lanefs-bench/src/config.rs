//! What a bench run does: workloads, thread counts, repetitions, target and variants.

use lanefs::MountOptions;
use std::path::PathBuf;
use std::time::Duration;

/// Block size the `lanefs` target formats its images with.
pub const DEFAULT_BLOCK_SIZE: u32 = 4096;

/// Size of the sparse image file the `lanefs` target formats for each run.
pub const DEFAULT_IMAGE_SIZE: u64 = 4 << 30;

pub use crate::target::PATH_VARIANT;

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
    /// `--compare`: real syscalls on three mounts of images `mkfs.ext4` made alike: `lanefs
    /// mount` (FUSE), fuse2fs (FUSE) and the kernel's ext4 on a loop device, run
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

/// One set of mount options to measure, under a name shown in reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Variant {
    /// Name in tables and records, e.g. "default" or "base".
    pub name: String,
    /// Mount options the engine runs with for this variant.
    pub opts: MountOptions,
}

impl Variant {
    /// A variant named `name` with mount options `opts`.
    pub fn new(name: impl Into<String>, opts: MountOptions) -> Variant {
        Variant {
            name: name.into(),
            opts,
        }
    }
}

/// Names [`Variant::named`] knows, in the order of seed 000's table.
pub const VARIANT_NAMES: &[&str] = &[
    "default",
    "base",
    "trylock",
    "linear",
    "optimize_scan",
    "slots",
];

impl Variant {
    /// A named variant of seed 000's reproduction (ext4 "better scalability for ext4 block
    /// allocation"), each one step further than the one before:
    ///
    /// | name | `mb_trylock` | `mb_stream_goal` | `mb_optimize_scan` |
    /// |---|---|---|---|
    /// | `base` | false | `Global` | false |
    /// | `trylock` | true | `Global` | false |
    /// | `linear` | true | `Inode` | false |
    /// | `optimize_scan` | true | `Inode` | true |
    /// | `slots` | true | `Slots` | true |
    ///
    /// `default` is `MountOptions::default()`. Every other mount option keeps its default.
    /// An unknown name is an error listing the known ones ([`VARIANT_NAMES`]).
    pub fn named(name: &str) -> Result<Variant, String> {
        use lanefs::StreamGoal;
        let o = |trylock: bool, stream: StreamGoal, optimize_scan: bool| MountOptions {
            mb_trylock: trylock,
            mb_stream_goal: stream,
            mb_optimize_scan: optimize_scan,
            ..MountOptions::default()
        };
        let opts = match name {
            "default" => MountOptions::default(),
            "base" => o(false, StreamGoal::Global, false),
            "trylock" => o(true, StreamGoal::Global, false),
            "linear" => o(true, StreamGoal::Inode, false),
            "optimize_scan" => o(true, StreamGoal::Inode, true),
            "slots" => o(true, StreamGoal::Slots, true),
            _ => {
                return Err(format!(
                    "unknown variant {name:?} (known: {})",
                    VARIANT_NAMES.join(", ")
                ))
            }
        };
        Ok(Variant::new(name, opts))
    }
}

impl Default for Variant {
    fn default() -> Self {
        Variant::new("default", MountOptions::default())
    }
}

/// Everything `run` needs. `BenchConfig::default()` is what a plain `lanefs bench` does.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchConfig {
    /// Workload names, in the order they run (see [`crate::workload_names`]).
    pub workloads: Vec<String>,
    /// Thread counts to sweep for every workload; `None` sweeps each workload's own
    /// ([`crate::workloads::Workload::default_threads`]: fallocate2 and fsync 1, 2, 4, 8;
    /// mdtest and bufio64k 1, 2, 4); a compare run sweeps [`COMPARE_THREADS`].
    pub threads: Option<Vec<usize>>,
    /// Repetitions of the whole sweep; reports show the median with min and max.
    pub reps: usize,
    /// Measured seconds per run of a duration-timed workload (fallocate2, fsync, control),
    /// per phase for bufio64k.
    pub seconds: f64,
    /// Seconds each duration-timed run spins before measuring starts.
    pub warmup: f64,
    /// Files per thread for mdtest.
    pub files: usize,
    /// Where the workloads run.
    pub target: TargetSpec,
    /// Mount-option variants, run interleaved (lanefs target only). The default variant
    /// mounts with `MountOptions::default()`: journal on (mkfs images have one), commit
    /// every 5 s as ext4's `commit=5`.
    pub variants: Vec<Variant>,
    /// Collect and print lock statistics for lanefs runs.
    pub lockstat: bool,
    /// Write all records as a JSON array to this file.
    pub json: Option<PathBuf>,
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
            seconds: 2.0,
            warmup: 0.3,
            files: 2000,
            target: TargetSpec::default(),
            variants: vec![Variant::default()],
            lockstat: false,
            json: None,
            lanefs_exe: None,
        }
    }
}

/// Upper bounds that keep a typo from starting a run that never ends.
const MAX_THREADS: usize = 4096;

/// Thread counts a compare run (`--compare`) sweeps when none are named.
pub const COMPARE_THREADS: &[usize] = &[1, 2];
const MAX_REPS: usize = 1000;
const MAX_SECONDS: f64 = 24.0 * 3600.0;
const MAX_FILES: usize = 100_000_000;

impl BenchConfig {
    /// Check every field; the error names the field and what is wrong with it.
    pub fn validate(&self) -> Result<(), String> {
        if self.workloads.is_empty() {
            return Err("no workload given".to_string());
        }
        for w in &self.workloads {
            if crate::workloads::find(w).is_none() {
                return Err(format!(
                    "unknown workload {w:?} (known: {})",
                    crate::workload_names().join(", ")
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
        if self.variants.is_empty() {
            return Err("no variant given".to_string());
        }
        for (i, v) in self.variants.iter().enumerate() {
            if v.name.is_empty() {
                return Err(format!("variant {} has an empty name", i + 1));
            }
            if self.variants[..i].iter().any(|u| u.name == v.name) {
                return Err(format!("variant name {:?} is given twice", v.name));
            }
        }
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
            TargetSpec::Compare { .. } => match &self.lanefs_exe {
                None => return Err("no lanefs executable given for --compare".to_string()),
                Some(exe) if !exe.is_file() => {
                    return Err(format!("lanefs executable {} is not a file", exe.display()))
                }
                Some(_) => {}
            },
        }
        Ok(())
    }

    /// Thread counts workload `name` runs at: the given ones, or the workload's own.
    pub fn threads_for(&self, name: &str) -> Vec<usize> {
        match (&self.threads, crate::workloads::find(name)) {
            (Some(t), _) => t.clone(),
            (None, Some(w)) => w.default_threads().to_vec(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use lanefs::StreamGoal;

    /// Each named variant sets the three allocator options of seed 000's table and leaves
    /// every other mount option at its default.
    #[test]
    fn named_variants_set_the_allocator_options() {
        let want = [
            ("base", false, StreamGoal::Global, false),
            ("trylock", true, StreamGoal::Global, false),
            ("linear", true, StreamGoal::Inode, false),
            ("optimize_scan", true, StreamGoal::Inode, true),
            ("slots", true, StreamGoal::Slots, true),
        ];
        for (name, trylock, stream, optimize_scan) in want {
            let v = Variant::named(name).expect(name);
            assert_eq!(v.name, name);
            let expected = MountOptions {
                mb_trylock: trylock,
                mb_stream_goal: stream,
                mb_optimize_scan: optimize_scan,
                ..MountOptions::default()
            };
            assert_eq!(v.opts, expected, "{name}");
        }
        assert_eq!(
            Variant::named("default").expect("default"),
            Variant::default()
        );
        for name in VARIANT_NAMES {
            assert!(Variant::named(name).is_ok(), "{name}");
        }
    }

    /// An unknown name is an error that names it and lists the known ones.
    #[test]
    fn unknown_variant_lists_the_known_ones() {
        let err = Variant::named("fast").expect_err("unknown variant");
        assert!(err.contains("\"fast\""), "{err}");
        assert!(
            err.contains("known: default, base, trylock, linear, optimize_scan, slots"),
            "{err}"
        );
        assert!(Variant::named("").is_err());
    }
}
