//! `rtfrag` (seed 003: XFS's realtime allocator made CPU-lean without changing a
//! decision; issue 14). The engine only: its image has a realtime data device.
//!
//! Setup, once per bench run and untimed ([`build_template`]): a sparse data device of
//! [`Params::rt_bytes`] (1 TiB by default: 2^28 rt extents of 4 KiB) is given to a fresh
//! image, filled to the last extent by [`Params::fill_files`] files (each fallocated over
//! an equal share, a few extents of up to 32767 blocks), then [`Params::holes_per_file`]
//! seeded random holes of 1 to [`Params::max_hole`] blocks are punched in each file (all
//! files are filled before the first punch, or a later file's fill would take earlier
//! holes back): free space is some 200,000 small holes spread over the whole device. After
//! a sync (nothing busy) the image is unmounted and becomes the template every run copies
//! (see [`crate::target::Template`]), so every variant starts from the same state. The
//! image's journal is a quarter of it (see [`Params::journal_blocks`]).
//!
//! The counters' and the instructions' side: after the timed runs, each variant runs the
//! phases once more at one thread under `valgrind --tool=callgrind`, where valgrind is
//! installed and the bench runs from the `lanefs` binary ([`count_instructions`]).
//!
//! Each run mounts its copy with the variant's `rt_alloc` and, per thread (untimed), makes
//! two realtime directories of its own, one with an extent size hint of [`Params::hint`]
//! blocks, and its share of [`Params::files`] files in each. Then the timed phases, every
//! thread in its own files, all threads starting each phase together; the files and each
//! phase's calls are split evenly between the threads, so every thread count does the same
//! work on the same device:
//!
//! - `alloc`: [`Params::allocs`] fallocates of 1 to [`Params::max_alloc`] blocks (seeded),
//!   each at the end of the next of the thread's files, so each asks the allocator for an
//!   extent near the goal the file's last extent gives (the first of a file, for one
//!   anywhere);
//! - `alloc-hint`: [`Params::hint_allocs`] in the hinted directory's files, each at the
//!   file's next hint-aligned offset: one allocation of a whole hint (`minlen = maxlen =
//!   prod = hint`) near the goal, the case that made the series' fragmented systems
//!   unresponsive;
//! - `free`: [`Params::frees`] punches of 1 to `max_alloc` blocks at random places of the
//!   files of both phases; then (not reported) one thread syncs, so every freed extent
//!   is committed and free for the next phase on every policy alike;
//! - `realloc`: the `alloc` phase again on the same files, among the freed holes.
//!
//! One operation is one allocation (or, in `free`, one freed run) as the allocator counts
//! them (`Diagnostics::rt_stats` at the phase's edges), so ops/s are allocations/s; each thread's
//! rate is its share of the calls, scaled to the allocator's count. The records also carry
//! the bitmap and summary blocks the allocations fetched (deterministic) and the hash of
//! every decision since mount: at one thread the same for every policy, run after run
//! (two threads interleave differently from run to run, and so may decide differently).

mod callgrind;

pub use callgrind::{
    callgrind_child, count_instructions, valgrind_available, ChildSpec, CHILD_ENV,
};

use super::{RunCtx, Workload};
use crate::target::{Dir, Handle, Instance, Name, Template};
use crate::timing::{phased, PhaseResult, RtWork};
use crate::variant::Family;
use lanefs::RtAllocPolicy;
use lanefs::{FallocMode, FileDevice, Fs, MountOptions, Owner, ROOT_INO};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// Name on the command line and in records.
pub const NAME: &str = "rtfrag";

/// The reported phases, in the order they run.
pub const PHASES: [&str; 4] = ["alloc", "alloc-hint", "free", "realloc"];

/// The phases as the timer runs them: the reported ones and the sync between `free` and
/// `realloc`, whose result is dropped.
const RUN_PHASES: [&str; 5] = ["alloc", "alloc-hint", "free", "sync", "realloc"];

/// The shape of the fragmented device and of the requests (see the module's text).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Params {
    /// Bytes of the realtime data device (a sparse file).
    pub rt_bytes: u64,
    /// The rt extent, in blocks.
    pub rextsize: u32,
    /// Bitmap blocks per rt group, each allocated under its own lock (0: one group).
    pub group_bmblocks: u32,
    /// Files that fill the device in setup.
    pub fill_files: usize,
    /// Holes punched in each of them.
    pub holes_per_file: usize,
    /// Longest hole, in blocks (each is 1 to this, seeded).
    pub max_hole: u64,
    /// Fallocates of the `alloc` and `realloc` phases, each, split between the threads.
    pub allocs: usize,
    /// Fallocates of the `alloc-hint` phase, split between the threads.
    pub hint_allocs: usize,
    /// Punches of the `free` phase, split between the threads.
    pub frees: usize,
    /// Longest allocation asked without a hint, in blocks (each is 1 to this, seeded).
    pub max_alloc: u64,
    /// The extent size hint of the `alloc-hint` phase, in blocks.
    pub hint: u32,
    /// Files the allocations are spread over, of each kind (without and with the hint),
    /// split between the threads (so at most this many threads).
    pub files: usize,
    /// Seed of every random choice (setup and runs).
    pub seed: u64,
    /// Check the allocator (bitmap against summary and free counts) after the setup and
    /// after every run: reads the whole bitmap bit by bit, a second or more at 1 TiB.
    pub check: bool,
    /// The `lanefs` executable, when the bench may count instructions per allocation by
    /// running it under `valgrind --tool=callgrind` ([`count_instructions`]); `None`: not
    /// counted.
    pub callgrind_exe: Option<PathBuf>,
    /// The callgrind run makes this many times fewer calls in each phase than a timed run
    /// (the first of them: under callgrind a timed run's calls take minutes).
    pub callgrind_divisor: usize,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            rt_bytes: 1 << 40,
            rextsize: 1,
            group_bmblocks: 64,
            fill_files: 2000,
            holes_per_file: 100,
            max_hole: 16,
            allocs: 50_000,
            hint_allocs: 8000,
            frees: 20_000,
            max_alloc: 16,
            hint: 16,
            files: 256,
            seed: 3,
            check: false,
            callgrind_exe: None,
            callgrind_divisor: 20,
        }
    }
}

/// Largest realtime device a run may ask for (the engine's rt geometry keeps 2^32 bitmap
/// blocks at most; this keeps a typo from asking for more than a test machine holds).
const MAX_RT_BYTES: u64 = 1 << 50;

impl Params {
    /// Check every field; the error names the field and what is wrong with it.
    pub fn validate(&self) -> Result<(), String> {
        if !(16 << 20..=MAX_RT_BYTES).contains(&self.rt_bytes) {
            return Err(format!(
                "rtfrag device size {} is outside 16 MiB..={MAX_RT_BYTES} bytes",
                self.rt_bytes
            ));
        }
        let counts = [
            ("rextsize", self.rextsize as usize),
            ("fill files", self.fill_files),
            ("allocations", self.allocs),
            ("hinted allocations", self.hint_allocs),
            ("files", self.files),
            ("hint", self.hint as usize),
            ("callgrind divisor", self.callgrind_divisor),
        ];
        if let Some((what, _)) = counts.iter().find(|(_, n)| *n == 0) {
            return Err(format!("rtfrag {what} must be at least 1"));
        }
        if self.max_hole == 0 || self.max_alloc == 0 {
            return Err("rtfrag hole and allocation lengths must be at least 1 block".into());
        }
        if !self.hint.is_multiple_of(self.rextsize) {
            return Err(format!(
                "rtfrag hint {} blocks is not a multiple of the rt extent ({} blocks)",
                self.hint, self.rextsize
            ));
        }
        Ok(())
    }

    /// Bytes of the image a template is built on: room for the bitmap and summary (one
    /// bit per rt extent, and less) eight times over, in whole MiB, at least 64 MiB.
    pub fn image_bytes(&self, block_size: u32) -> u64 {
        let extents = self.rt_bytes / u64::from(block_size) / u64::from(self.rextsize);
        let bitmap = extents.div_ceil(8);
        (bitmap * 8).div_ceil(1 << 20).max(64) << 20
    }

    /// Blocks of the image's journal: a quarter of the image. A file system of this size
    /// (the data device's) would get mke2fs's largest, 1 GiB; the image holds a quarter of
    /// itself, so that commits of the bitmap blocks the allocations dirty stay rare.
    pub fn journal_blocks(&self, block_size: u32) -> u32 {
        let blocks = self.image_bytes(block_size) / 4 / u64::from(block_size);
        blocks.clamp(1024, 262_144) as u32
    }

    /// The setup and requests in a few words, for the run's header line.
    pub fn text(&self) -> String {
        format!(
            "rtfrag {} device, {} fill files x {} holes of 1-{} blocks, rt groups of {} bitmap \
             blocks, {} allocations of 1-{} blocks per phase, {} with a {}-block hint, {} \
             punches, over {} + {} files (all split between the threads), seed {}",
            fmt_bytes(self.rt_bytes),
            self.fill_files,
            self.holes_per_file,
            self.max_hole,
            self.group_bmblocks,
            self.allocs,
            self.max_alloc,
            self.hint_allocs,
            self.hint,
            self.frees,
            self.files,
            self.files,
            self.seed
        )
    }
}

/// `b` bytes as the largest binary unit that divides it.
fn fmt_bytes(b: u64) -> String {
    for (shift, unit) in [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if b >= 1 << shift && b.is_multiple_of(1 << shift) {
            return format!("{} {unit}", b >> shift);
        }
    }
    format!("{b} B")
}

/// SplitMix64: small, seeded, the same on every machine.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator for stream `stream` of seed `seed`.
    pub fn new(seed: u64, stream: u64) -> Rng {
        Rng(seed ^ stream.wrapping_add(1).wrapping_mul(0xD6E8_FEB8_6659_FD93))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// A number in `1..=n` (`n` > 0).
    pub fn one_to(&mut self, n: u64) -> u64 {
        1 + self.below(n)
    }
}

/// The `rtfrag` workload.
pub struct Rtfrag;

/// Permission bits of the files and directories rtfrag makes.
const PERM: u16 = 0o755;

/// Build the template every run of rtfrag copies: a fresh image of `block_size`-byte
/// blocks with a realtime device, filled and punched as `p` says, synced and unmounted.
pub fn build_template(p: &Params, block_size: u32) -> Result<Template, String> {
    p.validate()?;
    let dir = tempfile::Builder::new()
        .prefix("lanefs-rtfrag.")
        .tempdir()
        .map_err(|e| format!("creating a temporary directory: {e}"))?;
    let image = dir.path().join("template.img");
    let rtdev = dir.path().join("template.rtdev");
    let dev = FileDevice::create(&image, p.image_bytes(block_size))
        .map_err(|e| format!("creating image {}: {e}", image.display()))?;
    crate::engine::format_image_with_journal(&dev, block_size, p.journal_blocks(block_size))
        .map_err(|e| format!("mkfs on {}: {e}", image.display()))?;
    drop(dev);
    drop(
        FileDevice::create(&rtdev, p.rt_bytes)
            .map_err(|e| format!("creating realtime device {}: {e}", rtdev.display()))?,
    );
    crate::engine::format_rt(&image, &rtdev, p.rextsize, p.group_bmblocks)?;
    let opts = MountOptions {
        rtdev: Some(rtdev.clone()),
        ..MountOptions::default()
    };
    let fs =
        Fs::mount_path(&image, opts).map_err(|e| format!("mounting {}: {e}", image.display()))?;
    let made = fragment(&fs, p);
    let unmounted = fs
        .unmount()
        .map_err(|e| format!("unmounting {}: {e}", image.display()));
    let about = made?;
    unmounted?;
    Template::new(dir, image, &rtdev, about)
}

/// Fill the mounted device with `p.fill_files` files and punch their holes; returns what
/// the device holds afterwards, in words.
fn fragment(fs: &Fs, p: &Params) -> Result<String, String> {
    let e = |what: &str| {
        let what = what.to_string();
        move |err: lanefs::Error| format!("rtfrag setup: {what}: {err}")
    };
    let geo = fs
        .rt_geometry()
        .ok_or("rtfrag setup: the image has no realtime device")?;
    let bs = u64::from(geo.block_size);
    let rext = u64::from(geo.rextsize);
    let owner = Owner::default();
    let dir = fs
        .mkdir(ROOT_INO, b"fill", PERM, owner)
        .map_err(e("mkdir fill"))?;
    fs.set_realtime(dir.ino, true)
        .map_err(e("make fill realtime"))?;
    // Extent 0 holds the device's header.
    let share = (geo.rextents - 1) / p.fill_files as u64 * rext;
    if share < 2 * p.max_hole.max(rext) {
        return Err(format!(
            "rtfrag setup: {} rt extents cannot be shared by {} files with holes of up to {} \
             blocks",
            geo.rextents, p.fill_files, p.max_hole
        ));
    }
    let punch = FallocMode {
        punch_hole: true,
        keep_size: true,
        ..FallocMode::default()
    };
    // Fill every file first, then punch: a file filled after another's holes were
    // committed would take them back.
    let mut files = Vec::with_capacity(p.fill_files);
    let filled = (|| {
        for i in 0..p.fill_files {
            let name = format!("f{i}");
            let f = fs
                .create(dir.ino, name.as_bytes(), PERM, owner)
                .map_err(e(&format!("create {name}")))?
                .ino;
            files.push(f);
            fs.fallocate(f, FallocMode::default(), 0, share * bs)
                .map_err(e(&format!("fill {name}")))?;
        }
        let mut rng = Rng::new(p.seed, u64::MAX);
        for (i, &f) in files.iter().enumerate() {
            for _ in 0..p.holes_per_file {
                let len = rng.one_to(p.max_hole);
                let off = rng.below(share - len + 1);
                fs.fallocate(f, punch, off * bs, len * bs)
                    .map_err(e(&format!("punch f{i}")))?;
            }
        }
        Ok::<(), String>(())
    })();
    let mut released = Ok(());
    for f in files {
        released = released.and(fs.release(f).map_err(e("close a fill file")));
    }
    filled?;
    released?;
    fs.sync().map_err(e("sync"))?;
    if p.check {
        fs.diagnostics().rt_check().map_err(e("check"))?;
    }
    let s = fs
        .diagnostics()
        .rt_stats()
        .ok_or("rtfrag setup: no realtime allocator")?;
    let runs: u64 = fs
        .diagnostics()
        .rt_histogram()
        .map_err(e("histogram"))?
        .unwrap_or_default()
        .iter()
        .sum();
    Ok(format!(
        "{} realtime device of {} rt extents, {}; {} fill files with {} holes of 1-{} blocks \
         each: {} rt extents free in {} runs",
        fmt_bytes(p.rt_bytes),
        crate::timing::fmt_rate(geo.rextents as f64),
        match geo.groups() {
            1 => format!("one group of {} bitmap blocks", geo.bitmap_blocks()),
            n => format!("{n} groups of {} bitmap blocks", geo.group_bmblocks),
        },
        p.fill_files,
        p.holes_per_file,
        p.max_hole,
        crate::timing::fmt_rate(s.free_extents as f64),
        crate::timing::fmt_rate(runs as f64),
    ))
}

/// One of a thread's files and its size in bytes.
struct File {
    h: Handle,
    size: u64,
}

/// A thread's state: its directories, files and random stream.
struct State {
    thread: usize,
    dirs: [Dir; 2],
    plain: Vec<File>,
    hinted: Vec<File>,
    rng: Rng,
}

/// Thread `i`'s share of `total` calls among `threads`.
fn share(total: usize, threads: usize, i: usize) -> usize {
    total / threads + usize::from(i < total % threads)
}

/// What each phase asks, for the calls of one thread.
struct Shape<'a> {
    p: &'a Params,
    /// Block size in bytes.
    bs: u64,
    threads: usize,
}

impl Shape<'_> {
    /// The thread's share of `allocs` fallocates of 1 to `max_alloc` blocks, each at the
    /// end of the next file.
    fn append(&self, b: &dyn crate::target::Backend, st: &mut State) -> Result<u64, String> {
        let n = st.plain.len();
        let calls = share(self.p.allocs, self.threads, st.thread);
        for k in 0..calls {
            let len = st.rng.one_to(self.p.max_alloc) * self.bs;
            let f = &mut st.plain[k % n];
            b.fallocate(&f.h, f.size, len)?;
            f.size += len;
        }
        Ok(calls as u64)
    }

    /// The thread's share of `hint_allocs` fallocates of 1 to `hint` blocks, each at the
    /// next file's next hint-aligned offset, so each allocates one whole hint.
    fn append_hinted(&self, b: &dyn crate::target::Backend, st: &mut State) -> Result<u64, String> {
        let n = st.hinted.len();
        let hint = u64::from(self.p.hint) * self.bs;
        let calls = share(self.p.hint_allocs, self.threads, st.thread);
        for k in 0..calls {
            let len = st.rng.one_to(u64::from(self.p.hint)) * self.bs;
            let f = &mut st.hinted[k % n];
            let off = f.size.div_ceil(hint) * hint;
            b.fallocate(&f.h, off, len).map_err(|e| {
                format!(
                    "{e} (with a hint of {} blocks: the fragmented device may have run out of \
                     free runs that long; ask fewer allocations or punch more holes)",
                    self.p.hint
                )
            })?;
            f.size = off + len;
        }
        Ok(calls as u64)
    }

    /// The thread's calls of `phase` (one of [`RUN_PHASES`]); returns how many it made.
    fn work(
        &self,
        b: &dyn crate::target::Backend,
        st: &mut State,
        phase: &str,
    ) -> Result<u64, String> {
        match phase {
            "alloc" | "realloc" => self.append(b, st),
            "alloc-hint" => self.append_hinted(b, st),
            "free" => self.punch(b, st),
            // One sync for all: the first thread's.
            _ => {
                if st.thread == 0 {
                    b.sync()?;
                }
                Ok(1)
            }
        }
    }

    /// The thread's share of `frees` punches of 1 to `max_alloc` blocks at random places
    /// of its files, taking turns between the two directories.
    fn punch(&self, b: &dyn crate::target::Backend, st: &mut State) -> Result<u64, String> {
        let calls = share(self.p.frees, self.threads, st.thread);
        for k in 0..calls {
            let files = if k % 2 == 0 { &st.plain } else { &st.hinted };
            let f = &files[st.rng.below(files.len() as u64) as usize];
            let blocks = f.size / self.bs;
            if blocks == 0 {
                continue;
            }
            let len = st.rng.one_to(self.p.max_alloc.min(blocks));
            let off = st.rng.below(blocks - len + 1);
            b.punch(&f.h, off * self.bs, len * self.bs)?;
        }
        Ok(calls as u64)
    }
}

impl Workload for Rtfrag {
    fn name(&self) -> &'static str {
        NAME
    }

    fn family(&self) -> Family {
        Family::Realtime
    }

    fn seed_variants(&self) -> &'static [&'static str] {
        &["plain", "default"]
    }
    fn about(&self) -> &'static str {
        "seed 003: realtime extent allocations on a fragmented device"
    }

    fn engine_only(&self) -> bool {
        true
    }

    fn template(
        &self,
        cfg: &crate::BenchConfig,
        block_size: u32,
    ) -> Option<Result<Template, String>> {
        Some(build_template(&cfg.rtfrag, block_size))
    }

    fn run(&self, ctx: &RunCtx<'_>) -> Result<Vec<PhaseResult>, String> {
        let b = ctx.backend;
        let p = ctx.rtfrag;
        let (Some(start), Some(bs)) = (b.rt_stats(), b.block_size()) else {
            return Err(format!(
                "{NAME} needs a realtime device: the engine target with {NAME}'s template \
                 image, not {}",
                b.location()
            ));
        };
        let rext = u64::from(p.rextsize);
        // Asked on average by the two appending phases (lengths 1 to max_alloc) and the
        // hinted one.
        let need = (p.allocs as u64 * (p.max_alloc + 1)).div_ceil(rext)
            + p.hint_allocs as u64 * (u64::from(p.hint) / rext);
        if start.free_extents < need {
            return Err(format!(
                "the fragmented device has {} free rt extents; {NAME}'s phases ask for about \
                 {need}: ask fewer allocations or punch more holes",
                start.free_extents
            ));
        }
        if ctx.threads > p.files {
            return Err(format!(
                "{NAME} splits {} files of each kind between the threads: at most {} threads",
                p.files, p.files
            ));
        }
        let shape = Shape {
            p,
            bs,
            threads: ctx.threads,
        };
        let setup = |i: usize| thread_state(b, p, i, ctx.threads);
        let work = |st: &mut State, phase: usize| shape.work(b, st, RUN_PHASES[phase]);
        let results = phased(NAME, &RUN_PHASES, ctx.threads, Some(b), setup, work, |st| {
            close_all(b, st)
        })?;
        if p.check {
            b.rt_check()?;
        }
        Ok(results
            .into_iter()
            .filter(|r| r.phase != "sync")
            .map(counted)
            .collect())
    }
}

/// Thread `i`'s (of `threads`) directories, files and random stream: two realtime
/// directories of its own, the second with the hint, and its share of the files in each.
fn thread_state(
    b: &dyn crate::target::Backend,
    p: &Params,
    i: usize,
    threads: usize,
) -> Result<State, String> {
    let mk = |name: String, hint: u32| -> Result<Dir, String> {
        let d = b.mkdir(b.base(), &Name::new(&name)?)?;
        b.set_realtime(&d, hint)?;
        Ok(d)
    };
    let plain_dir = mk(format!("{NAME}.{i}"), 0)?;
    let hinted_dir = mk(format!("{NAME}.{i}.hint"), p.hint)?;
    let n = share(p.files, threads, i);
    let mut st = State {
        plain: Vec::with_capacity(n),
        hinted: Vec::with_capacity(n),
        thread: i,
        dirs: [plain_dir, hinted_dir],
        rng: Rng::new(p.seed, i as u64),
    };
    let made = (|| {
        for k in 0..n {
            let name = Name::new(&format!("f{k}"))?;
            let h = b.create(&st.dirs[0], &name)?;
            st.plain.push(File { h, size: 0 });
            let h = b.create(&st.dirs[1], &name)?;
            st.hinted.push(File { h, size: 0 });
        }
        Ok::<(), String>(())
    })();
    match made {
        Ok(()) => Ok(st),
        Err(e) => {
            let _ = close_all(b, st);
            Err(e)
        }
    }
}

/// Close every file of a thread.
fn close_all(b: &dyn crate::target::Backend, st: State) -> Result<(), String> {
    let mut closed = Ok(());
    for f in st.plain.into_iter().chain(st.hinted) {
        closed = closed.and(b.close(f.h));
    }
    closed
}

/// A phase as the allocator counted it: ops are its allocations (frees in `free`), each
/// thread's rate its calls' rate scaled by the allocator's count over the calls.
fn counted(r: PhaseResult) -> PhaseResult {
    let Some(rt) = r.rt else {
        return r;
    };
    let ops = if r.phase == "free" {
        rt.frees
    } else {
        rt.allocations
    };
    let calls = r.ops;
    let scale = if calls > 0 {
        ops as f64 / calls as f64
    } else {
        0.0
    };
    PhaseResult {
        ops,
        per_thread_ops_per_sec: r.per_thread_ops_per_sec.iter().map(|v| v * scale).collect(),
        ..r
    }
}

/// Run one phase's calls: the function callgrind collects in (never inlined, so its
/// symbol exists to toggle on; and `f` is not its tail call, which callgrind would take
/// for leaving it).
#[inline(never)]
pub fn counted_phase(f: &mut dyn FnMut() -> Result<u64, String>) -> Result<u64, String> {
    let r = f();
    std::hint::black_box(&r);
    r
}

#[cfg(test)]
mod tests;
