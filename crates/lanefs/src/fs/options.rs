//! `MountOptions`: what a mount runs (each mechanism or its baseline), the caches'
//! limits and ext4's own options, and their parsing from `mount -o` names.

use super::*;
use crate::error::{OptionError, OptionProblem};
use std::result::Result;

/// Mount options: which mechanism or baseline each part runs, the caches' limits, and
/// ext4's `ro`, `commit=` and atime options.
///
/// `MountOptions::default()` runs every mechanism (see the crate docs for what each one
/// is); set fields directly, or by the names `mount -o` uses with [`MountOptions::apply`]:
///
/// ```
/// use lanefs::{IcachePolicy, MountOptions, StreamGoal};
/// use std::time::Duration;
///
/// // A read-mostly mount with a bigger inode cache and commits every second.
/// let opts = MountOptions {
///     commit_interval: Duration::from_secs(1),
///     icache: IcachePolicy::Bucket,
///     icache_limit: 256 << 20,
///     ..MountOptions::default()
/// };
///
/// // The same from option strings, as `lanefs mount -o` passes them.
/// let mut parsed = MountOptions::default();
/// for opt in "commit=1,icache=bucket,icache_limit=256M".split(',') {
///     let (key, value) = match opt.split_once('=') {
///         Some((k, v)) => (k, Some(v)),
///         None => (opt, None),
///     };
///     assert_eq!(parsed.apply(key, value), Ok(true));
/// }
/// assert_eq!(parsed, opts);
///
/// // A baseline, to measure seed 000's stream goal against.
/// let mut base = MountOptions::default();
/// base.apply("mb_stream_goal", Some("global")).unwrap();
/// assert_eq!(base.mb_stream_goal, StreamGoal::Global);
/// let e = base.apply("mb_stream_goal", Some("fastest")).unwrap_err();
/// assert_eq!(e.to_string(), "option mb_stream_goal=fastest: expected global, inode or slots");
/// assert_eq!(base.apply("allow_other", None), Ok(false)); // not the engine's
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountOptions {
    /// Mount read-only.
    pub read_only: bool,
    /// Commit the running transaction at least this often (ext4's `commit=5`);
    /// `Duration::ZERO` commits only on fsync, sync, unmount and a full journal.
    pub commit_interval: std::time::Duration,
    /// Block allocation: skip a group whose lock another thread holds, in every pass but
    /// the last (`mb_trylock=1`, default); false waits for it (ext4 before seed 000).
    pub mb_trylock: bool,
    /// Block allocation: the stream goal's form (`mb_stream_goal`; default per inode).
    pub mb_stream_goal: StreamGoal,
    /// Block allocation: pick groups from the lists keyed by largest free order and
    /// average fragment size (`mb_optimize_scan=1`, default, on for any size), or walk
    /// groups linearly from the goal (`0`).
    pub mb_optimize_scan: bool,
    /// When reads update access times (`relatime`, default; `strictatime`; `noatime`).
    pub atime: AtimePolicy,
    /// Directories' access times are never updated (`nodiratime`).
    pub nodiratime: bool,
    /// Inode allocation: how a free bit is claimed (`ialloc=optimistic|locked`).
    pub ialloc: IallocPolicy,
    /// The inode cache's table (`icache=bucket|global|papaya`).
    pub icache: IcachePolicy,
    /// Bytes of clean, unused cached inodes kept before eviction (`icache_limit=BYTES`,
    /// with an optional K, M or G suffix).
    pub icache_limit: u64,
    /// Directory leaf digests (`dir_digest=1`, default): a create or unlink in a large
    /// directory compares 16-bit name tags instead of walking the leaf's entries; each
    /// directory keeps at most a quarter of `icache_limit` of them. `0` walks every leaf,
    /// as ext4 does (the baseline).
    pub dir_digest: bool,
    /// Bytes of metadata blocks cached (`bufcache_limit=BYTES`; default a sixteenth of
    /// the machine's memory within 64 MiB..1 GiB): clean blocks are evicted past it, and
    /// the journal checkpoints when dirty ones pass half of it.
    pub bufcache_limit: u64,
    /// Bytes of file data cached (`pagecache_limit=BYTES`; default an eighth of the
    /// machine's memory within 64 MiB..2 GiB): clean folios are evicted past it, and
    /// writers write back once dirty data passes a quarter of it.
    pub pagecache_limit: u64,
    /// Largest folio of the page cache, as log2 of its blocks (`folio_max_order=0..6`;
    /// default 4, 64 KiB with 4 KiB blocks); 0 is the baseline of single-block pages.
    pub folio_max_order: u8,
    /// The realtime data device of an image made with `lanefs mkfs --rtdev`
    /// (`rtdev=PATH`): required by such an image, refused by any other.
    pub rtdev: Option<std::path::PathBuf>,
    /// The realtime allocator (`rt_alloc=lean|plain`; seed 003): `lean` (default) has the
    /// 2023 series' changes, `plain` is Linux 6.4's algorithm; both decide alike.
    pub rt_alloc: RtAllocPolicy,
    /// Every time the engine stamps (inode times, the superblock's mount and write
    /// times) is at most this many seconds since the epoch (`clamp_time=SECS`), and new
    /// inodes' generation numbers depend on their number alone: what a reproducible build
    /// sets from `SOURCE_DATE_EPOCH` (`lanefs mkfs -d`). Times given explicitly
    /// (`setattr`) are kept as given.
    pub clamp_time: Option<i64>,
    /// Count this mount in the superblock (mount count, last mount time), as a kernel
    /// mount does; false for filling a just-made image (`mkfs -d`), which is no mount
    /// to the user, as `mke2fs -d`'s is not.
    pub count_mount: bool,
    /// A one-shot read-only mount that reads also while another lanefs writes the image
    /// (what it has made durable so far): `lanefs ls`, `cat`, `fsck -n`. Implies
    /// `read_only`. Not for a long-lived mount, which a writer could change under.
    pub snapshot: bool,
    /// Blocks file data may not take, kept for the metadata a full file system still
    /// needs (ext4's reserved clusters, its sysfs `reserved_clusters`): `None` is ext4's
    /// default, 2% of the blocks or 4096, whichever is fewer. Filling a just-made image
    /// (`mkfs -d`) keeps none, as `mke2fs -d` does not.
    pub reserved_blocks: Option<u64>,
}

/// The inode cache's default memory limit.
pub const DEFAULT_ICACHE_LIMIT: u64 = 64 << 20;

impl Default for MountOptions {
    fn default() -> MountOptions {
        MountOptions {
            read_only: false,
            commit_interval: std::time::Duration::from_secs(5),
            mb_trylock: true,
            mb_stream_goal: StreamGoal::Inode,
            mb_optimize_scan: true,
            atime: AtimePolicy::Relative,
            nodiratime: false,
            ialloc: IallocPolicy::Optimistic,
            icache: IcachePolicy::Bucket,
            icache_limit: DEFAULT_ICACHE_LIMIT,
            dir_digest: true,
            bufcache_limit: crate::buf::default_bufcache_limit(),
            pagecache_limit: crate::page::default_pagecache_limit(),
            folio_max_order: crate::page::DEFAULT_MAX_ORDER,
            rtdev: None,
            rt_alloc: RtAllocPolicy::Lean,
            clamp_time: None,
            count_mount: true,
            snapshot: false,
            reserved_blocks: None,
        }
    }
}

impl MountOptions {
    /// The engine's mount options by name, as `mount -o` spells them (ext4's own names
    /// where ext4 has them): `ro`, `rw`, `commit=SECS`, `mb_trylock=0|1`,
    /// `mb_stream_goal=global|inode|slots`, `mb_optimize_scan=0|1`, `relatime`,
    /// `strictatime`, `noatime`, `atime` (= relatime), `nodiratime`, `diratime`,
    /// `ialloc=optimistic|locked`, `icache=bucket|global|papaya`, `icache_limit=BYTES`,
    /// `dir_digest=0|1`, `bufcache_limit=BYTES`, `pagecache_limit=BYTES`, `folio_max_order=0..6`,
    /// `rtdev=PATH`, `rt_alloc=lean|plain`, `clamp_time=SECS`.
    pub const NAMES: &'static [&'static str] = &[
        "ro",
        "rw",
        "commit",
        "mb_trylock",
        "mb_stream_goal",
        "mb_optimize_scan",
        "relatime",
        "strictatime",
        "noatime",
        "atime",
        "nodiratime",
        "diratime",
        "ialloc",
        "icache",
        "icache_limit",
        "dir_digest",
        "bufcache_limit",
        "pagecache_limit",
        "folio_max_order",
        "rtdev",
        "rt_alloc",
        "clamp_time",
    ];

    /// The options that take no value (`ro`, the atime options): set by
    /// [`MountOptions::switch`].
    const SWITCHES: &'static [&'static str] = &[
        "ro",
        "rw",
        "relatime",
        "strictatime",
        "noatime",
        "atime",
        "nodiratime",
        "diratime",
    ];

    /// Apply one option `key` or `key=value`. `Ok(false)` when `key` is not an engine
    /// option (a frontend may know it); an error naming the option when its value is
    /// missing or malformed, or given to an option that takes none.
    pub fn apply(&mut self, key: &str, value: Option<&str>) -> Result<bool, OptionError> {
        let refuse = |problem| OptionError::new(key, value, problem);
        if MountOptions::SWITCHES.contains(&key) {
            if value.is_some() {
                return Err(refuse(OptionProblem::TakesNoValue));
            }
            self.switch(key);
            return Ok(true);
        }
        self.set(key, value).map_err(refuse)
    }

    /// Apply the option `key`, one of [`MountOptions::SWITCHES`].
    fn switch(&mut self, key: &str) {
        match key {
            "ro" => self.read_only = true,
            "rw" => self.read_only = false,
            "strictatime" => self.atime = AtimePolicy::Strict,
            "noatime" => self.atime = AtimePolicy::Never,
            "relatime" | "atime" => self.atime = AtimePolicy::Relative,
            "nodiratime" => self.nodiratime = true,
            "diratime" => self.nodiratime = false,
            other => debug_assert!(false, "{other} is not in SWITCHES"),
        }
    }

    /// Apply the option `key` that takes a value, `value`: `Ok(false)` when `key` is no
    /// such option of the engine's.
    fn set(&mut self, key: &str, value: Option<&str>) -> Result<bool, OptionProblem> {
        let need = || value.ok_or(OptionProblem::NeedsValue);
        let expected = |what: &'static str| OptionProblem::Expected(what.into());
        let size = || parse_size(need()?).map_err(OptionProblem::Malformed);
        match key {
            "commit" => {
                let secs: u64 = need()?.parse().map_err(|_| expected("whole seconds"))?;
                // As ext4: commit=0 means the default interval.
                self.commit_interval = if secs == 0 {
                    MountOptions::default().commit_interval
                } else {
                    std::time::Duration::from_secs(secs)
                };
            }
            "mb_trylock" => self.mb_trylock = flag(need()?)?,
            "mb_optimize_scan" => self.mb_optimize_scan = flag(need()?)?,
            "dir_digest" => self.dir_digest = flag(need()?)?,
            "mb_stream_goal" => {
                let goals = [
                    ("global", StreamGoal::Global),
                    ("inode", StreamGoal::Inode),
                    ("slots", StreamGoal::Slots),
                ];
                self.mb_stream_goal = choose(need()?, &goals, "global, inode or slots")?;
            }
            "ialloc" => {
                let policies = [
                    ("optimistic", IallocPolicy::Optimistic),
                    ("locked", IallocPolicy::Locked),
                ];
                self.ialloc = choose(need()?, &policies, "optimistic or locked")?;
            }
            "icache" => {
                let tables = [
                    ("bucket", IcachePolicy::Bucket),
                    ("global", IcachePolicy::Global),
                    ("papaya", IcachePolicy::Papaya),
                ];
                self.icache = choose(need()?, &tables, "bucket, global or papaya")?;
            }
            "icache_limit" => self.icache_limit = size()?,
            "bufcache_limit" => self.bufcache_limit = size()?,
            "pagecache_limit" => self.pagecache_limit = size()?,
            "folio_max_order" => {
                self.folio_max_order = need()?
                    .parse()
                    .ok()
                    .filter(|&o| o <= crate::page::MAX_ORDER)
                    .ok_or_else(|| {
                        let most = crate::page::MAX_ORDER;
                        OptionProblem::Expected(format!("0 to {most}").into())
                    })?;
            }
            "rtdev" => {
                let v = need()?;
                if v.is_empty() {
                    return Err(expected("a path"));
                }
                self.rtdev = Some(v.into());
            }
            "rt_alloc" => {
                self.rt_alloc =
                    RtAllocPolicy::parse(need()?).ok_or_else(|| expected("lean or plain"))?;
            }
            "clamp_time" => {
                let secs = need()?.parse::<i64>().ok().filter(|&s| s >= 0);
                self.clamp_time = Some(secs.ok_or_else(|| expected("seconds since 1970"))?);
            }
            _ => return Ok(false),
        }
        Ok(true)
    }
}

/// A `0|1` option's value.
fn flag(v: &str) -> Result<bool, OptionProblem> {
    match v {
        "0" => Ok(false),
        "1" => Ok(true),
        _ => Err(OptionProblem::Expected("0 or 1".into())),
    }
}

/// The value named `v` among `choices`; else the option expected one of them (`names`).
fn choose<T: Copy>(
    v: &str,
    choices: &[(&str, T)],
    names: &'static str,
) -> Result<T, OptionProblem> {
    choices
        .iter()
        .find(|(name, _)| *name == v)
        .map(|&(_, value)| value)
        .ok_or(OptionProblem::Expected(names.into()))
}
