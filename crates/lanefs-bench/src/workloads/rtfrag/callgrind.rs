//! The callgrind child: `lanefs bench` run again under valgrind to count the instructions
//! of each phase (`counted_phase` calls), and the counts read back from its dumps.

use super::*;

/// The environment variable that makes `lanefs bench` the child of [`count_instructions`]:
/// its value is the path of the child's [`ChildSpec`] (see [`callgrind_child`]).
pub const CHILD_ENV: &str = "LANEFS_BENCH_RTFRAG_CALLGRIND";

/// The function whose calls callgrind counts (`--toggle-collect`), one per phase, each
/// followed by a dump of its own (`--dump-after`, which takes the exact demangled name).
pub(super) const COUNTED_FN: &str = "lanefs_bench::workloads::rtfrag::counted_phase";

/// What the callgrind child does: mount `image` with `rtdev`, run every phase at one
/// thread with `params`, and write each phase's allocator counts to `counts`.
#[derive(Debug, Serialize, Deserialize)]
pub struct ChildSpec {
    image: PathBuf,
    rtdev: PathBuf,
    /// The variant's `rt_alloc` (every other mount option keeps its default).
    rt_alloc: String,
    params: Params,
    counts: PathBuf,
}

/// One phase of a child, as its allocator counted it.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct ChildPhase {
    pub(super) phase: String,
    /// Allocations (frees in `free`).
    pub(super) ops: u64,
}

/// Whether `valgrind` runs here.
pub fn valgrind_available() -> bool {
    Command::new("valgrind")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The child's side (`lanefs bench` with [`CHILD_ENV`] set, under callgrind): read the
/// spec at `spec`, run the phases at one thread, write the counts.
pub fn callgrind_child(spec: &Path) -> Result<(), String> {
    let text = std::fs::read_to_string(spec).map_err(|e| format!("{}: {e}", spec.display()))?;
    let spec: ChildSpec =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", spec.display()))?;
    let rt_alloc = RtAllocPolicy::parse(&spec.rt_alloc)
        .ok_or_else(|| format!("rt_alloc {:?}: expected lean or plain", spec.rt_alloc))?;
    let opts = MountOptions {
        rt_alloc,
        ..MountOptions::default()
    };
    let inst = Instance::lanefs_rt(spec.image.clone(), spec.rtdev.clone(), &opts)?;
    let b = inst.backend();
    let counted = (|| {
        let bs = b.block_size().ok_or("no block size")?;
        let shape = Shape {
            p: &spec.params,
            bs,
            threads: 1,
        };
        let mut st = thread_state(b, &spec.params, 0, 1)?;
        let mut out = Vec::new();
        let ran = (|| {
            for phase in RUN_PHASES {
                if phase == "sync" {
                    shape.work(b, &mut st, phase)?;
                    continue;
                }
                let before = b.rt_stats().ok_or("no realtime allocator")?;
                counted_phase(&mut || shape.work(b, &mut st, phase))?;
                let after = b.rt_stats().ok_or("no realtime allocator")?;
                let w = RtWork::between(before, after);
                let ops = if phase == "free" {
                    w.frees
                } else {
                    w.allocations
                };
                out.push(ChildPhase {
                    phase: phase.to_string(),
                    ops,
                });
            }
            Ok::<(), String>(())
        })();
        let closed = close_all(b, st);
        ran?;
        closed?;
        Ok::<Vec<ChildPhase>, String>(out)
    })();
    let finished = inst.finish();
    let counts = counted?;
    finished?;
    let text = serde_json::to_string(&counts).map_err(|e| e.to_string())?;
    std::fs::write(&spec.counts, text).map_err(|e| format!("{}: {e}", spec.counts.display()))
}

/// A figure per reported phase: (phase, value).
pub type PhaseFigures = Vec<(&'static str, f64)>;

/// Instructions per operation of every reported phase at one thread, counted by running
/// `exe` (a `lanefs` binary) as [`callgrind_child`] under `valgrind --tool=callgrind` on a
/// copy of `template`, with `rt_alloc` and `p` (its phases' calls divided by
/// [`Params::callgrind_divisor`]: the same requests as a timed run's first ones, so the
/// same decisions for every policy): callgrind collects only inside
/// [`counted_phase`] and dumps after each call, so each dump's total is one phase's
/// instructions (the whole in-process fallocate or punch path, allocator included);
/// divided by the allocations (frees) the allocator counted in it. Returns the phases'
/// figures and the seconds the child took.
pub fn count_instructions(
    exe: &Path,
    template: &Template,
    rt_alloc: RtAllocPolicy,
    p: &Params,
) -> Result<(PhaseFigures, f64), String> {
    let t0 = Instant::now();
    let dir = tempfile::Builder::new()
        .prefix("lanefs-rtfrag-callgrind.")
        .tempdir()
        .map_err(|e| format!("creating a temporary directory: {e}"))?;
    let image = dir.path().join("run.img");
    let rtdev = dir.path().join("run.rtdev");
    template.copy_to(&image, &rtdev)?;
    let spec = ChildSpec {
        image,
        rtdev,
        rt_alloc: rt_alloc.name().to_string(),
        params: Params {
            callgrind_exe: None,
            allocs: (p.allocs / p.callgrind_divisor).max(1),
            hint_allocs: (p.hint_allocs / p.callgrind_divisor).max(1),
            frees: (p.frees / p.callgrind_divisor).max(1),
            ..p.clone()
        },
        counts: dir.path().join("counts.json"),
    };
    let spec_path = dir.path().join("spec.json");
    let text = serde_json::to_string(&spec).map_err(|e| e.to_string())?;
    std::fs::write(&spec_path, text).map_err(|e| format!("{}: {e}", spec_path.display()))?;
    let out_file = dir.path().join("cg.out");
    let run = Command::new("valgrind")
        .arg("--tool=callgrind")
        .arg(format!("--callgrind-out-file={}", out_file.display()))
        .arg("--collect-atstart=no")
        .arg(format!("--toggle-collect={COUNTED_FN}"))
        .arg(format!("--dump-after={COUNTED_FN}"))
        .arg(exe)
        .arg("bench")
        .arg(NAME)
        .env(CHILD_ENV, &spec_path)
        .output()
        .map_err(|e| format!("running valgrind: {e}"))?;
    if !run.status.success() {
        let err = String::from_utf8_lossy(&run.stderr);
        let last: Vec<&str> = err.lines().rev().take(3).collect();
        return Err(format!(
            "valgrind {} exited with {}: {}",
            exe.display(),
            run.status,
            last.into_iter().rev().collect::<Vec<_>>().join(" / ")
        ));
    }
    let counts: Vec<ChildPhase> = std::fs::read_to_string(&spec.counts)
        .map_err(|e| format!("{}: {e}", spec.counts.display()))
        .and_then(|t| serde_json::from_str(&t).map_err(|e| e.to_string()))?;
    let mut out = Vec::new();
    for (k, (c, &phase)) in counts.iter().zip(&PHASES).enumerate() {
        if c.phase != phase {
            return Err(format!(
                "callgrind child ran {} where {phase} was due",
                c.phase
            ));
        }
        let dump = dir.path().join(format!("cg.out.{}", k + 1));
        let text = std::fs::read_to_string(&dump).map_err(|e| {
            let files: Vec<String> = std::fs::read_dir(dir.path())
                .map(|d| {
                    d.filter_map(|e| e.ok())
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .collect()
                })
                .unwrap_or_default();
            format!(
                "{}: {e} (the child left {})",
                dump.display(),
                files.join(", ")
            )
        })?;
        let ir = instructions_in(&text)
            .ok_or_else(|| format!("{}: no instruction total", dump.display()))?;
        if c.ops > 0 {
            out.push((phase, ir as f64 / c.ops as f64));
        }
    }
    Ok((out, t0.elapsed().as_secs_f64()))
}

/// The instruction total of a callgrind dump (its `summary:` or `totals:` line; `Ir` is
/// the only event callgrind counts by default).
pub(super) fn instructions_in(dump: &str) -> Option<u64> {
    dump.lines()
        .find_map(|l| {
            l.strip_prefix("summary:")
                .or_else(|| l.strip_prefix("totals:"))
        })
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}
