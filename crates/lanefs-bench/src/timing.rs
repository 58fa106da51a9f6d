//! Running N threads together: duration-timed loops (will-it-scale style) and phase-timed
//! runs (mdtest style). The caller's thread is the timer and never does work; it also reads
//! the target's journal counters and its daemon's CPU time (the probe) where each measured
//! phase starts and ends.

use crate::target::{own_cpu, Backend, DeviceReads, FreeSpace, JournalCounters};
use lanefs::RtStats;
use lanefs::{BufCacheStats, IcacheStats};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::thread::{Scope, ScopedJoinHandle};
use std::time::{Duration, Instant};

/// Result of one timed phase of one run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PhaseResult {
    /// Phase name, e.g. "fallocate", "create", "remove".
    pub phase: &'static str,
    /// Operations done in the measured time, all threads together.
    pub ops: u64,
    /// Measured seconds.
    pub seconds: f64,
    /// Each thread's operations per second.
    pub per_thread_ops_per_sec: Vec<f64>,
    /// The target's journal activity during the measured time (engine targets only).
    pub journal: Option<JournalCounters>,
    /// Average extents per file the workload built, where it and the target report it
    /// (fallocate2 on the engine: each thread's file completed to 1 MiB after the run).
    pub extents_per_file: Option<f64>,
    /// The target's free space after the run, where the workload and the target report it
    /// (fallocate2 on the engine: with each thread's completed file still open).
    pub free_space: Option<FreeSpace>,
    /// CPU seconds (user + system) the target's daemon used during the measured time,
    /// where the target has one (a FUSE mount of `--compare`).
    pub daemon_cpu: Option<f64>,
    /// CPU seconds (user + system, all threads) this process used during the measured
    /// time (every workload run; not the control loop). For the engine that is all the
    /// file system's work; for a path target only the bench's side of the syscalls.
    pub cpu: Option<f64>,
    /// The inode cache's figures after the run, where the workload and the target report
    /// them (mdtest, fsmark and stat on the engine).
    pub icache: Option<IcacheStats>,
    /// The metadata buffer cache's figures after the run, where the inode cache's are.
    pub bufcache: Option<BufCacheStats>,
    /// The process's peak resident set size during the run, setup included, in bytes
    /// (engine targets).
    pub peak_rss: Option<u64>,
    /// File bytes one operation reads and writes on average, where the workload moves file
    /// data at a fixed size per call (bufio), so bandwidth is ops/s times these.
    pub io: Option<IoPerOp>,
    /// The target's device reads for file data in the measured time (the engine's page
    /// cache filling misses), so their average size shows the read-ahead's IO size.
    pub device_reads: Option<DeviceReads>,
    /// The realtime allocator's work in the measured time, where the target has one (the
    /// engine on an image with a realtime device).
    pub rt: Option<RtWork>,
    /// Instructions per operation, where a workload counted them (rtfrag under callgrind).
    pub instructions_per_op: Option<f64>,
}

/// What the realtime allocator did in a measured phase (from `Diagnostics::rt_stats` at its
/// edges): the counts are differences, the hash and free extents the values at its end.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RtWork {
    /// Allocations made.
    pub allocations: u64,
    /// Frees made (calls of the allocator's free, one per freed run).
    pub frees: u64,
    /// Bitmap blocks the allocations fetched.
    pub bitmap_reads: u64,
    /// Summary blocks the allocations fetched.
    pub summary_reads: u64,
    /// The hash of every allocation decision since mount, at the phase's end.
    pub decisions: u64,
    /// Free rt extents at the phase's end.
    pub free_extents: u64,
}

impl RtWork {
    /// The work between counters `before` and `after`.
    pub fn between(before: RtStats, after: RtStats) -> RtWork {
        RtWork {
            allocations: after.allocations.saturating_sub(before.allocations),
            frees: after.frees.saturating_sub(before.frees),
            bitmap_reads: after.bitmap_reads.saturating_sub(before.bitmap_reads),
            summary_reads: after.summary_reads.saturating_sub(before.summary_reads),
            decisions: after.decisions,
            free_extents: after.free_extents,
        }
    }
}

/// File bytes per operation (see [`PhaseResult::io`]).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct IoPerOp {
    /// Bytes read (or, for a memory-copy control, copied) per operation.
    pub read: f64,
    /// Bytes written per operation.
    pub written: f64,
}

impl PhaseResult {
    /// Total operations per second.
    pub fn ops_per_sec(&self) -> f64 {
        if self.seconds > 0.0 {
            self.ops as f64 / self.seconds
        } else {
            0.0
        }
    }
}

/// The target whose journal counters and daemon CPU time the timer reads, or `None`
/// (control).
pub type Probe<'a> = Option<&'a dyn Backend>;

/// What the timer reads at the edges of a measured phase: from the probe, and (when there
/// is a probe, so not for the control loop) this process's CPU time.
#[derive(Clone, Copy)]
struct Sample {
    journal: Option<JournalCounters>,
    device_reads: Option<DeviceReads>,
    daemon_cpu: Option<Duration>,
    cpu: Option<Duration>,
    rt: Option<RtStats>,
}

fn sample(probe: Probe<'_>) -> Sample {
    Sample {
        rt: probe.and_then(|b| b.rt_stats()),
        journal: probe.and_then(|b| b.journal()),
        device_reads: probe.and_then(|b| b.device_reads()),
        daemon_cpu: probe.and_then(|b| b.daemon_cpu()),
        cpu: probe.and_then(|_| own_cpu()),
    }
}

/// What happened between two samples.
#[derive(Clone, Copy, Default)]
struct Delta {
    journal: Option<JournalCounters>,
    device_reads: Option<DeviceReads>,
    daemon_cpu: Option<f64>,
    cpu: Option<f64>,
    rt: Option<RtWork>,
}

/// The journal activity, the daemon's and this process's CPU seconds between two samples.
fn delta(before: Sample, after: Sample) -> Delta {
    let seconds = |a: Option<Duration>, b: Option<Duration>| {
        a.zip(b).map(|(a, b)| a.saturating_sub(b).as_secs_f64())
    };
    Delta {
        journal: after.journal.zip(before.journal).map(|(a, b)| a.since(b)),
        device_reads: after
            .device_reads
            .zip(before.device_reads)
            .map(|(a, b)| a.since(b)),
        daemon_cpu: seconds(after.daemon_cpu, before.daemon_cpu),
        cpu: seconds(after.cpu, before.cpu),
        rt: after.rt.zip(before.rt).map(|(a, b)| RtWork::between(b, a)),
    }
}

/// The shape of a duration-timed run (see [`timed_loop`]).
#[derive(Clone, Copy)]
pub struct Timed<'a> {
    /// Worker threads.
    pub threads: usize,
    /// Time the loop runs before measuring starts.
    pub warmup: Duration,
    /// Measured time.
    pub duration: Duration,
    /// Read at the start and the end of the measured time.
    pub probe: Probe<'a>,
}

/// Why a worker thread stopped early.
enum Stop {
    /// Another thread failed, or the timer gave up; this one has nothing to report.
    Aborted,
    /// This thread's own failure.
    Failed(String),
}

/// A barrier that can be aborted, so one failing thread never leaves the others waiting.
struct Gate {
    n: usize,
    state: Mutex<GateState>,
    cv: Condvar,
}

struct GateState {
    arrived: usize,
    generation: u64,
    aborted: bool,
}

impl Gate {
    fn new(n: usize) -> Gate {
        Gate {
            n,
            state: Mutex::new(GateState {
                arrived: 0,
                generation: 0,
                aborted: false,
            }),
            cv: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, GateState> {
        // A poisoned gate only means a thread panicked; the counters are still consistent.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Wait until all `n` parties arrive. False if the gate was aborted first.
    fn wait(&self) -> bool {
        let mut s = self.lock();
        if s.aborted {
            return false;
        }
        let generation = s.generation;
        s.arrived += 1;
        if s.arrived == self.n {
            s.arrived = 0;
            s.generation += 1;
            self.cv.notify_all();
            return true;
        }
        while s.generation == generation && !s.aborted {
            s = self.cv.wait(s).unwrap_or_else(|e| e.into_inner());
        }
        s.generation != generation
    }

    /// Release every waiter now and make every later `wait` fail.
    fn abort(&self) {
        self.lock().aborted = true;
        self.cv.notify_all();
    }
}

/// A per-thread counter on its own cache lines, so counting never bounces a shared line.
#[repr(align(128))]
#[derive(Default)]
struct Counter(AtomicU64);

/// Shared state of one run's threads.
struct Crew {
    gate: Gate,
    stop: AtomicBool,
}

impl Crew {
    fn new(threads: usize) -> Crew {
        Crew {
            gate: Gate::new(threads + 1),
            stop: AtomicBool::new(false),
        }
    }
    fn fail(&self, e: String) -> Stop {
        self.stop.store(true, Relaxed);
        self.gate.abort();
        Stop::Failed(e)
    }
    /// Sleep `d`, waking early (false) when a thread has failed.
    fn sleep(&self, d: Duration) -> bool {
        let end = Instant::now() + d;
        loop {
            if self.stop.load(Relaxed) {
                return false;
            }
            let now = Instant::now();
            if now >= end {
                return true;
            }
            std::thread::sleep((end - now).min(Duration::from_millis(10)));
        }
    }
}

/// Releases every other thread when a worker panics, so the panic becomes an error.
struct AbortOnPanic<'a>(&'a Crew);

impl Drop for AbortOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.stop.store(true, Relaxed);
            self.0.gate.abort();
        }
    }
}

/// The CPUs this process may run on, in order.
pub(crate) fn allowed_cpus() -> Vec<usize> {
    // SAFETY: a zeroed cpu_set_t is a valid (empty) set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid cpu_set_t of the size passed; pid 0 is this thread.
    if unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) } != 0
    {
        return Vec::new();
    }
    (0..libc::CPU_SETSIZE as usize)
        // SAFETY: `c` is below CPU_SETSIZE, the set's capacity.
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect()
}

/// Whether workers are pinned, a CPU each (the default; a compare run turns it off unless
/// `--pin`, since the programs that use a mount are not pinned).
static PIN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// Pin each worker thread to a CPU of its own (`true`, when there are enough) or not.
pub fn set_pinning(pin: bool) {
    PIN.store(pin, Relaxed);
}

/// Keep the calling thread on `cpu` (best effort: an unpinned thread still runs right).
pub(crate) fn pin_to(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is a valid (empty) set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` came from `allowed_cpus`, so it is below CPU_SETSIZE.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: `set` is a valid cpu_set_t of the size passed; pid 0 is this thread.
    unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
}

/// Spawn `threads` workers running `body(i)`; on a spawn failure abort the ones started.
fn spawn_all<'scope, 'env, T, F>(
    scope: &'scope Scope<'scope, 'env>,
    crew: &'scope Crew,
    threads: usize,
    name: &str,
    body: &'scope F,
) -> Result<Vec<ScopedJoinHandle<'scope, Result<T, Stop>>>, String>
where
    T: Send + 'scope,
    F: Fn(usize) -> Result<T, Stop> + Sync,
{
    let cpus = allowed_cpus();
    let pin = threads <= cpus.len() && PIN.load(Relaxed);
    let mut handles = Vec::with_capacity(threads);
    for i in 0..threads {
        let cpu = cpus.get(i).copied().filter(|_| pin);
        let spawned = std::thread::Builder::new()
            .name(format!("{name}-{i}"))
            .spawn_scoped(scope, move || {
                let _guard = AbortOnPanic(crew);
                if let Some(c) = cpu {
                    pin_to(c);
                }
                body(i)
            });
        match spawned {
            Ok(h) => handles.push(h),
            Err(e) => {
                crew.stop.store(true, Relaxed);
                crew.gate.abort();
                let _ = join_all(handles);
                return Err(format!("spawning thread {i}: {e}"));
            }
        }
    }
    Ok(handles)
}

/// The message of a panic payload, when it is a string.
fn panic_text(payload: &(dyn std::any::Any + Send)) -> &str {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s
    } else {
        "(no message)"
    }
}

/// Join every thread; the first real failure wins over "aborted".
fn join_all<T>(handles: Vec<ScopedJoinHandle<'_, Result<T, Stop>>>) -> Result<Vec<T>, String> {
    let mut out = Vec::with_capacity(handles.len());
    let mut first_err: Option<String> = None;
    let mut aborted = false;
    for (i, h) in handles.into_iter().enumerate() {
        match h.join() {
            Ok(Ok(v)) => out.push(v),
            Ok(Err(Stop::Failed(e))) => {
                first_err.get_or_insert(e);
            }
            Ok(Err(Stop::Aborted)) => aborted = true,
            Err(payload) => {
                first_err.get_or_insert(format!("thread {i} panicked: {}", panic_text(&*payload)));
            }
        }
    }
    match (first_err, aborted) {
        (Some(e), _) => Err(e),
        (None, true) => Err("run aborted".to_string()),
        (None, false) => Ok(out),
    }
}

/// Run `op` in a loop on `t.threads` threads for `t.warmup + t.duration` and count calls
/// made in the measured `t.duration`. `setup(i)` makes thread i's state before the start
/// line and `teardown` disposes of it after the loop.
pub fn timed_loop<S, Setup, Op, Teardown>(
    phase: &'static str,
    t: Timed<'_>,
    setup: Setup,
    op: Op,
    teardown: Teardown,
) -> Result<PhaseResult, String>
where
    Setup: Fn(usize) -> Result<S, String> + Sync,
    Op: Fn(&mut S) -> Result<(), String> + Sync,
    Teardown: Fn(S) -> Result<(), String> + Sync,
{
    let Timed {
        threads,
        warmup,
        duration,
        probe,
    } = t;
    let crew = Crew::new(threads);
    let counters: Vec<Counter> = (0..threads).map(|_| Counter::default()).collect();
    let body = |i: usize| -> Result<(), Stop> {
        let mut st = setup(i).map_err(|e| crew.fail(e))?;
        if !crew.gate.wait() {
            let _ = teardown(st);
            return Err(Stop::Aborted);
        }
        let counter = &counters[i].0;
        let mut n = 0u64;
        while !crew.stop.load(Relaxed) {
            if let Err(e) = op(&mut st) {
                let _ = teardown(st);
                return Err(crew.fail(e));
            }
            n += 1;
            counter.store(n, Relaxed);
        }
        teardown(st).map_err(|e| crew.fail(e))
    };
    std::thread::scope(|scope| {
        let handles = spawn_all(scope, &crew, threads, phase, &body)?;
        let snapshot = || {
            counters
                .iter()
                .map(|c| c.0.load(Relaxed))
                .collect::<Vec<u64>>()
        };
        let mut measured = None;
        if crew.gate.wait() && crew.sleep(warmup) {
            let (c0, s0, t0) = (snapshot(), sample(probe), Instant::now());
            if crew.sleep(duration) {
                let (t1, c1, s1) = (Instant::now(), snapshot(), sample(probe));
                measured = Some((c0, c1, (t1 - t0).as_secs_f64(), delta(s0, s1)));
            }
        }
        crew.stop.store(true, Relaxed);
        join_all(handles)?;
        let Some((c0, c1, secs, d)) = measured else {
            return Err("run aborted".to_string());
        };
        let per: Vec<u64> = c1
            .iter()
            .zip(&c0)
            .map(|(b, a)| b.saturating_sub(*a))
            .collect();
        Ok(PhaseResult {
            phase,
            ops: per.iter().sum(),
            seconds: secs,
            per_thread_ops_per_sec: per.iter().map(|&n| n as f64 / secs).collect(),
            journal: d.journal,
            daemon_cpu: d.daemon_cpu,
            cpu: d.cpu,
            device_reads: d.device_reads,
            rt: d.rt,
            ..PhaseResult::default()
        })
    })
}

/// Run `phases` one after the other on `threads` threads; all threads start each phase
/// together and the phase lasts until the last one finishes. `work(state, p)` does thread
/// i's share of phase `p` and returns how many operations it did. `probe` is read just
/// before each phase starts and just after it ends.
pub fn phased<S, Setup, Work, Teardown>(
    name: &'static str,
    phases: &[&'static str],
    threads: usize,
    probe: Probe<'_>,
    setup: Setup,
    work: Work,
    teardown: Teardown,
) -> Result<Vec<PhaseResult>, String>
where
    Setup: Fn(usize) -> Result<S, String> + Sync,
    Work: Fn(&mut S, usize) -> Result<u64, String> + Sync,
    Teardown: Fn(S) -> Result<(), String> + Sync,
{
    let crew = Crew::new(threads);
    // Each thread returns (ops, start, end) for every phase. A phase lasts from the first
    // thread's start to the last thread's end, all on the threads' own clocks, so a late
    // wake-up of the timer thread never shortens it.
    let body = |i: usize| -> Result<Vec<(u64, Instant, Instant)>, Stop> {
        let mut st = setup(i).map_err(|e| crew.fail(e))?;
        // Everyone is set up: the probe before the first phase sees no setup in flight.
        if !crew.gate.wait() {
            let _ = teardown(st);
            return Err(Stop::Aborted);
        }
        let mut done = Vec::with_capacity(phases.len());
        for p in 0..phases.len() {
            if !crew.gate.wait() {
                let _ = teardown(st);
                return Err(Stop::Aborted);
            }
            let t0 = Instant::now();
            match work(&mut st, p) {
                Ok(n) => done.push((n, t0, Instant::now())),
                Err(e) => {
                    let _ = teardown(st);
                    return Err(crew.fail(e));
                }
            }
            if !crew.gate.wait() {
                let _ = teardown(st);
                return Err(Stop::Aborted);
            }
        }
        // The timer reads the probe after the last phase before letting teardown start.
        if !crew.gate.wait() {
            let _ = teardown(st);
            return Err(Stop::Aborted);
        }
        teardown(st).map_err(|e| crew.fail(e))?;
        Ok(done)
    };
    std::thread::scope(|scope| {
        let handles = spawn_all(scope, &crew, threads, name, &body)?;
        // The timer only keeps step with the workers: once after setup, twice per phase,
        // once before teardown. Between the gate before a phase and the gate after the next
        // step the workers do nothing but that phase, so the probe read just before a
        // phase's first gate and just after its second sees that phase alone.
        let mut probed = Vec::with_capacity(phases.len());
        let mut ok = crew.gate.wait();
        for _ in phases {
            if !ok {
                break;
            }
            let before = sample(probe);
            ok = crew.gate.wait() && crew.gate.wait();
            probed.push(delta(before, sample(probe)));
        }
        if ok {
            crew.gate.wait();
        }
        let per_thread = join_all(handles)?;
        let mut results = Vec::with_capacity(phases.len());
        for (p, &phase) in phases.iter().enumerate() {
            let rows: Vec<(u64, Instant, Instant)> = per_thread
                .iter()
                .filter_map(|d| d.get(p).copied())
                .collect();
            let (Some(start), Some(end)) = (
                rows.iter().map(|r| r.1).min(),
                rows.iter().map(|r| r.2).max(),
            ) else {
                return Err("run aborted".to_string());
            };
            let d = probed.get(p).copied().unwrap_or_default();
            results.push(PhaseResult {
                phase,
                ops: rows.iter().map(|r| r.0).sum(),
                seconds: (end - start).as_secs_f64(),
                per_thread_ops_per_sec: rows
                    .iter()
                    .map(|r| rate(r.0, (r.2 - r.1).as_secs_f64()))
                    .collect(),
                journal: d.journal,
                daemon_cpu: d.daemon_cpu,
                cpu: d.cpu,
                device_reads: d.device_reads,
                rt: d.rt,
                ..PhaseResult::default()
            });
        }
        Ok(results)
    })
}

fn rate(ops: u64, secs: f64) -> f64 {
    if secs > 0.0 {
        ops as f64 / secs
    } else {
        0.0
    }
}

/// A count with thousands separators, rounded to an integer.
pub fn fmt_rate(v: f64) -> String {
    if !v.is_finite() {
        return v.to_string();
    }
    let digits = format!("{:.0}", v.abs());
    let mut out = String::with_capacity(digits.len() + digits.len() / 3 + 1);
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    if v < 0.0 && digits != "0" {
        out.insert(0, '-');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::{Dir, Handle, Name};

    /// A backend with nothing but journal counters, which the test's threads bump.
    struct Counting {
        base: Dir,
        commits: AtomicU64,
    }

    impl Backend for Counting {
        fn label(&self) -> String {
            "counting".to_string()
        }
        fn location(&self) -> String {
            self.label()
        }
        fn base(&self) -> &Dir {
            &self.base
        }
        fn mkdir(&self, _: &Dir, _: &Name) -> Result<Dir, String> {
            Err("unsupported".to_string())
        }
        fn create(&self, _: &Dir, _: &Name) -> Result<Handle, String> {
            Err("unsupported".to_string())
        }
        fn close(&self, _: Handle) -> Result<(), String> {
            Err("unsupported".to_string())
        }
        fn unlink(&self, _: &Dir, _: &Name) -> Result<(), String> {
            Err("unsupported".to_string())
        }
        fn stat(&self, _: &Dir, _: &Name) -> Result<(), String> {
            Err("unsupported".to_string())
        }
        fn fallocate(&self, _: &Handle, _: u64, _: u64) -> Result<(), String> {
            Err("unsupported".to_string())
        }
        fn truncate(&self, _: &Handle, _: u64) -> Result<(), String> {
            Err("unsupported".to_string())
        }
        fn write(&self, _: &Handle, _: u64, _: &[u8]) -> Result<(), String> {
            Err("unsupported".to_string())
        }
        fn fsync(&self, _: &Handle, _: bool) -> Result<(), String> {
            Err("unsupported".to_string())
        }
        fn read(&self, _: &Handle, _: u64, _: &mut [u8]) -> Result<usize, String> {
            Err("unsupported".to_string())
        }
        fn drop_cache(&self, _: &Handle) -> Result<(), String> {
            Err("unsupported".to_string())
        }
        fn journal(&self) -> Option<JournalCounters> {
            Some(JournalCounters {
                commits: self.commits.load(Relaxed),
                log_bytes: 0,
            })
        }
    }

    /// The probe of a phased run sees each phase's own work: not setup, not teardown, not
    /// the other phase.
    #[test]
    fn phased_probe_sees_each_phase_alone() {
        let b = Counting {
            base: Dir::Ino(2),
            commits: AtomicU64::new(0),
        };
        let bump = |n: u64| b.commits.fetch_add(n, Relaxed);
        let r = phased(
            "x",
            &["a", "b"],
            3,
            Some(&b),
            |_| {
                bump(1000);
                Ok(())
            },
            |_, p| {
                bump(if p == 0 { 1 } else { 10 });
                Ok(1)
            },
            |_| {
                bump(100_000);
                Ok(())
            },
        )
        .expect("phased run");
        let commits: Vec<Option<u64>> = r.iter().map(|p| p.journal.map(|j| j.commits)).collect();
        assert_eq!(commits, [Some(3), Some(30)]);
        // With a probe the process's CPU time is read too; without one (control) it is not.
        assert!(r.iter().all(|p| p.cpu.is_some_and(|s| s >= 0.0)), "{r:?}");
        let bare = phased("x", &["a"], 1, None, Ok, |_, _| Ok(1), |_| Ok(()));
        assert_eq!(bare.expect("phased run")[0].cpu, None);
    }

    /// A failing setup must not leave the other threads or the timer waiting.
    #[test]
    fn failing_setup_aborts_cleanly() {
        let t = Timed {
            threads: 3,
            warmup: Duration::ZERO,
            duration: Duration::from_millis(50),
            probe: None,
        };
        let r = timed_loop(
            "x",
            t,
            |i| {
                if i == 1 {
                    Err("boom".to_string())
                } else {
                    Ok(())
                }
            },
            |_| Ok(()),
            |_| Ok(()),
        );
        assert_eq!(r, Err("boom".to_string()));
    }

    /// A failing phase reports its error and the run ends.
    #[test]
    fn failing_phase_aborts_cleanly() {
        let r = phased(
            "x",
            &["a", "b"],
            2,
            None,
            Ok,
            |i, p| {
                if *i == 0 && p == 1 {
                    Err("bad".to_string())
                } else {
                    Ok(1)
                }
            },
            |_| Ok(()),
        );
        assert_eq!(r, Err("bad".to_string()));
    }

    /// A panicking worker is reported as an error with its message, not re-raised.
    #[test]
    fn panicking_worker_is_an_error() {
        let r = phased(
            "x",
            &["a"],
            2,
            None,
            Ok,
            |_: &mut usize, _| -> Result<u64, String> { panic!("kaboom") },
            |_| Ok(()),
        );
        let e = r.expect_err("panic must be an error");
        assert!(e.contains("panicked: kaboom"), "{e}");
    }

    /// Phases report every thread's operations.
    #[test]
    fn phases_count_ops() {
        let r = phased(
            "x",
            &["a", "b"],
            3,
            None,
            Ok,
            |_, p| Ok(10 + p as u64),
            |_| Ok(()),
        );
        let r = r.expect("phased run");
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].ops, 30);
        assert_eq!(r[1].ops, 33);
        assert_eq!(r[1].per_thread_ops_per_sec.len(), 3);
    }
}
