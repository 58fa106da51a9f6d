//! Mount-option variants: the named baselines and mechanisms of each seed, grouped by the
//! family of workloads they apply to, and raw specs (`NAME:OPTIONS`) for any other mix.
//!
//! A variant list (`--variants`) applies per workload: each workload runs the variants of
//! its [`Family`], plus `default` and every raw spec, which apply to all. So `base` means
//! the baseline of the workload it runs with: seed 000's for fallocate2, fsync and
//! bufio64k, seed 001's for mdtest, mdtest-shared, fsmark and stat, seed 002's for bufio.
//! Seed 003's realtime allocator (rtfrag) has `plain` as its baseline.

use lanefs::RtAllocPolicy;
use lanefs::{IallocPolicy, IcachePolicy, MountOptions, StreamGoal};

/// Which seeds' variants a workload takes (each workload names its own: `Workload::family`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// Workloads that allocate blocks (fallocate2, fsync, bufio64k): seed 000's block
    /// allocator variants.
    Blocks,
    /// Workloads that create, remove and look up inodes (mdtest, mdtest-shared, fsmark,
    /// stat): seed 001's inode allocator and seed 004's inode cache variants.
    Inodes,
    /// Workloads that move cached file data (bufio): seed 002's folio sizes.
    Pages,
    /// Workloads that allocate on a realtime device (rtfrag): seed 003's realtime
    /// allocator.
    Realtime,
}

/// Name of the variant that mounts with `MountOptions::default()`, in every family.
pub const DEFAULT_VARIANT: &str = "default";

impl Family {
    /// Every family, in the order messages list them.
    pub const ALL: [Family; 4] = [
        Family::Blocks,
        Family::Inodes,
        Family::Pages,
        Family::Realtime,
    ];

    /// The names of this family's variants (besides `default`), in the order of its
    /// seeds' tables, baseline first.
    pub fn variant_names(self) -> &'static [&'static str] {
        match self {
            Family::Blocks => &["base", "trylock", "linear", "optimize_scan", "slots"],
            Family::Inodes => &[
                "base", "ialloc", "icache", "lanefs", "global", "bucket", "papaya",
            ],
            Family::Pages => &["base", "order2", "order6"],
            Family::Realtime => &["plain", "lean"],
        }
    }

    /// What the family's variants vary, for messages.
    pub fn about(self) -> &'static str {
        match self {
            Family::Blocks => "seed 000's block allocator",
            Family::Inodes => "seed 001's inode allocator and seed 004's inode cache",
            Family::Pages => "seed 002's page cache folios",
            Family::Realtime => "seed 003's realtime allocator",
        }
    }

    /// The workloads of this family, in registry order (each workload names its family,
    /// `Workload::family`; a test in `workloads` keeps the two in step).
    pub fn workloads(self) -> &'static [&'static str] {
        match self {
            Family::Blocks => &["fallocate2", "fsync", "bufio64k"],
            Family::Inodes => &["mdtest", "mdtest-shared", "fsmark", "stat"],
            Family::Pages => &["bufio"],
            Family::Realtime => &["rtfrag"],
        }
    }

    /// The variants a seed table compares the others with, in order of preference:
    /// `base`, for the inode family `global` (seed 004's table without seed 001's), and
    /// for the realtime family `plain` (Linux 6.4's allocator).
    pub fn baselines(self) -> &'static [&'static str] {
        match self {
            Family::Blocks => &["base"],
            Family::Inodes => &["base", "global"],
            Family::Pages => &["base"],
            Family::Realtime => &["plain"],
        }
    }

    /// The mount options of this family's variant `name`, or `None` when it has none.
    fn options(self, name: &str) -> Option<MountOptions> {
        match self {
            Family::Blocks => blocks_options(name),
            Family::Inodes => inodes_options(name),
            Family::Pages => pages_options(name),
            Family::Realtime => realtime_options(name),
        }
    }
}

/// Seed 000's variants, each one step further than the one before.
fn blocks_options(name: &str) -> Option<MountOptions> {
    let o = |trylock: bool, stream: StreamGoal, optimize_scan: bool| MountOptions {
        mb_trylock: trylock,
        mb_stream_goal: stream,
        mb_optimize_scan: optimize_scan,
        ..MountOptions::default()
    };
    Some(match name {
        "base" => o(false, StreamGoal::Global, false),
        "trylock" => o(true, StreamGoal::Global, false),
        "linear" => o(true, StreamGoal::Inode, false),
        "optimize_scan" => o(true, StreamGoal::Inode, true),
        "slots" => o(true, StreamGoal::Slots, true),
        _ => return None,
    })
}

/// Seed 001's inode allocator crossed with seed 004's inode cache, then seed 004's three
/// caches alone.
fn inodes_options(name: &str) -> Option<MountOptions> {
    let o = |ialloc: IallocPolicy, icache: IcachePolicy| MountOptions {
        ialloc,
        icache,
        ..MountOptions::default()
    };
    let ialloc = MountOptions::default().ialloc;
    Some(match name {
        "base" => o(IallocPolicy::Locked, IcachePolicy::Global),
        "ialloc" => o(IallocPolicy::Optimistic, IcachePolicy::Global),
        "icache" => o(IallocPolicy::Locked, IcachePolicy::Bucket),
        "lanefs" => o(IallocPolicy::Optimistic, IcachePolicy::Bucket),
        "global" => o(ialloc, IcachePolicy::Global),
        "bucket" => o(ialloc, IcachePolicy::Bucket),
        "papaya" => o(ialloc, IcachePolicy::Papaya),
        _ => return None,
    })
}

/// Seed 002's variants: single-block pages (the baseline, `folio_max_order=0`), then
/// larger folios than the default's (order 4, 64 KiB with 4 KiB blocks) on either side.
fn pages_options(name: &str) -> Option<MountOptions> {
    let o = |order: u8| MountOptions {
        folio_max_order: order,
        ..MountOptions::default()
    };
    Some(match name {
        "base" => o(0),
        "order2" => o(2),
        "order6" => o(6),
        _ => return None,
    })
}

/// Seed 003's variants: Linux 6.4's realtime allocator (the baseline) and the 2023
/// series' (the default, named too so that a list can say it).
fn realtime_options(name: &str) -> Option<MountOptions> {
    let o = |rt_alloc: RtAllocPolicy| MountOptions {
        rt_alloc,
        ..MountOptions::default()
    };
    Some(match name {
        "plain" => o(RtAllocPolicy::Plain),
        "lean" => o(RtAllocPolicy::Lean),
        _ => return None,
    })
}

/// One set of mount options to measure, under a name shown in reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Variant {
    /// Name in tables and records, e.g. "default" or "base".
    pub name: String,
    /// Mount options the engine runs with for this variant.
    pub opts: MountOptions,
    /// The family of workloads it applies to; `None` for every workload (`default`, raw
    /// specs, and variants made with [`Variant::new`]).
    pub family: Option<Family>,
}

impl Default for Variant {
    fn default() -> Self {
        Variant::new(DEFAULT_VARIANT, MountOptions::default())
    }
}

impl Variant {
    /// A variant named `name` with mount options `opts`, for every workload.
    pub fn new(name: impl Into<String>, opts: MountOptions) -> Variant {
        Variant {
            name: name.into(),
            opts,
            family: None,
        }
    }

    /// Whether the variant applies to workloads of `family`.
    pub fn applies_to(&self, family: Family) -> bool {
        self.family.is_none_or(|f| f == family)
    }

    /// Family `family`'s variant `name` (or `default`, for every workload):
    ///
    /// | family | name | options |
    /// |---|---|---|
    /// | Blocks | `base` | `mb_trylock=0`, `mb_stream_goal=global`, `mb_optimize_scan=0` |
    /// | Blocks | `trylock` | `mb_trylock=1`, `mb_stream_goal=global`, `mb_optimize_scan=0` |
    /// | Blocks | `linear` | `mb_trylock=1`, `mb_stream_goal=inode`, `mb_optimize_scan=0` |
    /// | Blocks | `optimize_scan` | `mb_trylock=1`, `mb_stream_goal=inode`, `mb_optimize_scan=1` |
    /// | Blocks | `slots` | `mb_trylock=1`, `mb_stream_goal=slots`, `mb_optimize_scan=1` |
    /// | Inodes | `base` | `ialloc=locked`, `icache=global` |
    /// | Inodes | `ialloc` | `ialloc=optimistic`, `icache=global` |
    /// | Inodes | `icache` | `ialloc=locked`, `icache=bucket` |
    /// | Inodes | `lanefs` | `ialloc=optimistic`, `icache=bucket` |
    /// | Inodes | `global`, `bucket`, `papaya` | `icache=` that, `ialloc` default |
    /// | Pages | `base`, `order2`, `order6` | `folio_max_order=0`, `2`, `6` |
    /// | Realtime | `plain`, `lean` | `rt_alloc=plain`, `rt_alloc=lean` (the default) |
    ///
    /// Every other mount option keeps its default. An unknown name is an error listing
    /// the family's names.
    pub fn named_in(family: Family, name: &str) -> Result<Variant, String> {
        if name == DEFAULT_VARIANT {
            return Ok(Variant::default());
        }
        let opts = family.options(name).ok_or_else(|| {
            format!(
                "unknown variant {name:?} for {} (known: {DEFAULT_VARIANT}, {})",
                family.about(),
                family.variant_names().join(", ")
            )
        })?;
        Ok(Variant {
            name: name.to_string(),
            opts,
            family: Some(family),
        })
    }

    /// Every variant called `name`: `default` once, or one per family that knows it
    /// (`base` is in both). An unknown name is an error listing every known one.
    pub fn named(name: &str) -> Result<Vec<Variant>, String> {
        if name == DEFAULT_VARIANT {
            return Ok(vec![Variant::default()]);
        }
        let found: Vec<Variant> = Family::ALL
            .iter()
            .filter_map(|&f| Variant::named_in(f, name).ok())
            .collect();
        if found.is_empty() {
            return Err(format!("unknown variant {name:?} ({})", known_text()));
        }
        Ok(found)
    }

    /// A raw spec's variant: `name` with `options` (`key` or `key=value`, as `mount -o`
    /// and [`MountOptions::apply`] spell them) applied to the defaults, for every workload.
    pub fn raw(name: &str, options: &[&str]) -> Result<Variant, String> {
        check_raw_name(name)?;
        let mut opts = MountOptions::default();
        for &opt in options {
            apply_option(name, &mut opts, opt)?;
        }
        Ok(Variant::new(name, opts))
    }

    /// The options that differ from `MountOptions::default()`, as `mount -o` spells them
    /// ("defaults" when none does), for headers.
    pub fn options_text(&self) -> String {
        options_text(&self.opts)
    }
}

/// Every known name by family, for errors and help.
pub fn known_text() -> String {
    let each: Vec<String> = Family::ALL
        .iter()
        .map(|f| {
            format!(
                "{} for {}",
                f.variant_names().join(", "),
                f.workloads().join(", ")
            )
        })
        .collect();
    format!(
        "known: {DEFAULT_VARIANT} for all; {}; or NAME:OPTIONS",
        each.join("; ")
    )
}

/// A raw spec's name must be a plain word: no spaces, commas, colons or '='.
fn check_raw_name(name: &str) -> Result<(), String> {
    let bad = |c: char| c.is_whitespace() || matches!(c, ',' | ':' | '=');
    if name.is_empty() || name.chars().any(bad) {
        return Err(format!(
            "variant name {name:?} must be a non-empty word without spaces, ',', ':' or '='"
        ));
    }
    Ok(())
}

/// Apply one `key` or `key=value` of variant `name` to `opts`.
fn apply_option(name: &str, opts: &mut MountOptions, opt: &str) -> Result<(), String> {
    let (key, value) = match opt.split_once('=') {
        Some((k, v)) => (k, Some(v)),
        None => (opt, None),
    };
    match opts.apply(key, value) {
        Ok(true) => Ok(()),
        Ok(false) => Err(format!(
            "variant {name}: {key:?} is not an engine mount option (known: {})",
            MountOptions::NAMES.join(", ")
        )),
        Err(e) => Err(format!("variant {name}: {e}")),
    }
}

/// Whether `item` is a variant name of some family, or `default`.
fn is_name(item: &str) -> bool {
    item == DEFAULT_VARIANT
        || Family::ALL
            .iter()
            .any(|f| f.variant_names().contains(&item))
}

/// Parse a variant list, as `--variants` takes it: comma-separated items, each a variant
/// name (resolved per family, see [`Variant::named`]) or a raw spec `NAME:OPTIONS`. A raw
/// spec's options are comma-separated too: every item after `NAME:` that is neither a
/// variant name nor another `NAME:` is one of its options, so
/// `base,x:ialloc=locked,icache=global,lanefs` is three entries, `x` with two options.
pub fn parse_variants(list: &str) -> Result<Vec<Variant>, String> {
    let mut out = Vec::new();
    // The raw spec being read: its name and options so far.
    let mut raw: Option<(&str, Vec<&str>)> = None;
    for item in list.split(',').map(str::trim) {
        if item.is_empty() {
            return Err(format!("empty item in variant list {list:?}"));
        }
        if let Some((name, first)) = item.split_once(':') {
            flush(&mut raw, &mut out)?;
            let opts = if first.is_empty() {
                vec![]
            } else {
                vec![first]
            };
            raw = Some((name, opts));
        } else if is_name(item) {
            flush(&mut raw, &mut out)?;
            out.extend(Variant::named(item)?);
        } else if let Some((_, opts)) = &mut raw {
            opts.push(item);
        } else {
            return Err(format!("unknown variant {item:?} ({})", known_text()));
        }
    }
    flush(&mut raw, &mut out)?;
    Ok(out)
}

/// Finish the raw spec being read, if any, into `out`.
fn flush(raw: &mut Option<(&str, Vec<&str>)>, out: &mut Vec<Variant>) -> Result<(), String> {
    if let Some((name, opts)) = raw.take() {
        out.push(Variant::raw(name, &opts)?);
    }
    Ok(())
}

/// `opts`' differences from the defaults, as `mount -o` spells them.
fn options_text(opts: &MountOptions) -> String {
    let d = MountOptions::default();
    let mut on: Vec<String> = Vec::new();
    if opts.read_only != d.read_only {
        on.push(if opts.read_only { "ro" } else { "rw" }.to_string());
    }
    if opts.commit_interval != d.commit_interval {
        on.push(format!("commit={:?}", opts.commit_interval));
    }
    if opts.mb_trylock != d.mb_trylock {
        on.push(format!("mb_trylock={}", u8::from(opts.mb_trylock)));
    }
    if opts.mb_stream_goal != d.mb_stream_goal {
        on.push(format!("mb_stream_goal={:?}", opts.mb_stream_goal).to_lowercase());
    }
    if opts.mb_optimize_scan != d.mb_optimize_scan {
        on.push(format!(
            "mb_optimize_scan={}",
            u8::from(opts.mb_optimize_scan)
        ));
    }
    if opts.atime != d.atime || opts.nodiratime != d.nodiratime {
        on.push(format!("atime={:?}/nodiratime={}", opts.atime, opts.nodiratime).to_lowercase());
    }
    if opts.ialloc != d.ialloc {
        on.push(format!("ialloc={:?}", opts.ialloc).to_lowercase());
    }
    if opts.icache != d.icache {
        on.push(format!("icache={:?}", opts.icache).to_lowercase());
    }
    if opts.icache_limit != d.icache_limit {
        on.push(format!("icache_limit={}", opts.icache_limit));
    }
    if opts.dir_digest != d.dir_digest {
        on.push(format!("dir_digest={}", u8::from(opts.dir_digest)));
    }
    if opts.folio_max_order != d.folio_max_order {
        on.push(format!("folio_max_order={}", opts.folio_max_order));
    }
    if opts.pagecache_limit != d.pagecache_limit {
        on.push(format!("pagecache_limit={}", opts.pagecache_limit));
    }
    if opts.rt_alloc != d.rt_alloc {
        on.push(format!("rt_alloc={}", opts.rt_alloc.name()));
    }
    if on.is_empty() {
        "defaults".to_string()
    } else {
        on.join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each of seed 000's names sets the three allocator options of its table and leaves
    /// every other mount option at its default.
    #[test]
    fn blocks_variants_set_the_allocator_options() {
        let want = [
            ("base", false, StreamGoal::Global, false),
            ("trylock", true, StreamGoal::Global, false),
            ("linear", true, StreamGoal::Inode, false),
            ("optimize_scan", true, StreamGoal::Inode, true),
            ("slots", true, StreamGoal::Slots, true),
        ];
        for (name, trylock, stream, optimize_scan) in want {
            let v = Variant::named_in(Family::Blocks, name).expect(name);
            assert_eq!((v.name.as_str(), v.family), (name, Some(Family::Blocks)));
            let expected = MountOptions {
                mb_trylock: trylock,
                mb_stream_goal: stream,
                mb_optimize_scan: optimize_scan,
                ..MountOptions::default()
            };
            assert_eq!(v.opts, expected, "{name}");
        }
        for &name in Family::Blocks.variant_names() {
            assert!(Variant::named_in(Family::Blocks, name).is_ok(), "{name}");
        }
    }

    /// Each of seeds 001 and 004's names sets the inode allocator and cache of the issue's
    /// table and leaves every other mount option at its default.
    #[test]
    fn inodes_variants_set_ialloc_and_icache() {
        use IallocPolicy::{Locked, Optimistic};
        use IcachePolicy::{Bucket, Global, Papaya};
        let want = [
            ("base", Locked, Global),
            ("ialloc", Optimistic, Global),
            ("icache", Locked, Bucket),
            ("lanefs", Optimistic, Bucket),
            ("global", Optimistic, Global),
            ("bucket", Optimistic, Bucket),
            ("papaya", Optimistic, Papaya),
        ];
        for (name, ialloc, icache) in want {
            let v = Variant::named_in(Family::Inodes, name).expect(name);
            assert_eq!((v.name.as_str(), v.family), (name, Some(Family::Inodes)));
            let expected = MountOptions {
                ialloc,
                icache,
                ..MountOptions::default()
            };
            assert_eq!(v.opts, expected, "{name}");
        }
        assert_eq!(Family::Inodes.variant_names().len(), want.len());
    }

    /// Seed 003's names set the realtime allocator: `plain` is Linux 6.4's, `lean` the
    /// default's; both apply to the realtime family only.
    #[test]
    fn realtime_variants_set_rt_alloc() {
        let plain = Variant::named("plain").expect("plain");
        assert_eq!(plain.len(), 1);
        let plain = &plain[0];
        assert_eq!(plain.family, Some(Family::Realtime));
        assert_eq!(plain.opts.rt_alloc, RtAllocPolicy::Plain);
        assert_eq!(plain.options_text(), "rt_alloc=plain");
        assert!(plain.applies_to(Family::Realtime) && !plain.applies_to(Family::Blocks));
        let lean = Variant::named_in(Family::Realtime, "lean").expect("lean");
        assert_eq!(lean.opts, MountOptions::default());
        assert_eq!(lean.options_text(), "defaults");
        assert_eq!(Family::Realtime.baselines(), ["plain"]);
        let err = Variant::named_in(Family::Realtime, "base").expect_err("no base");
        assert!(err.contains("realtime allocator"), "{err}");
    }

    /// `base` is one variant per family; `default` one for all; a family's own name one.
    #[test]
    fn names_resolve_per_family() {
        let base = Variant::named("base").expect("base");
        let families: Vec<Option<Family>> = base.iter().map(|v| v.family).collect();
        assert_eq!(
            families,
            [
                Some(Family::Blocks),
                Some(Family::Inodes),
                Some(Family::Pages)
            ]
        );
        assert_ne!(base[0].opts, base[1].opts);
        assert_eq!(base[2].opts.folio_max_order, 0);
        assert_eq!(base[2].options_text(), "folio_max_order=0");
        assert_eq!(
            Variant::named("default").expect("default"),
            [Variant::default()]
        );
        let d = &Variant::default();
        assert!(d.applies_to(Family::Blocks) && d.applies_to(Family::Inodes));
        let trylock = Variant::named("trylock").expect("trylock");
        assert_eq!(trylock.len(), 1);
        assert!(!trylock[0].applies_to(Family::Inodes));
        let papaya = Variant::named("papaya").expect("papaya");
        assert!(papaya[0].applies_to(Family::Inodes) && !papaya[0].applies_to(Family::Blocks));
        let err = Variant::named_in(Family::Inodes, "slots").expect_err("slots is seed 000's");
        assert!(
            err.contains("\"slots\"") && err.contains("inode cache"),
            "{err}"
        );
    }

    /// An unknown name is an error that names it and lists the known ones by family.
    #[test]
    fn unknown_variant_lists_the_known_ones() {
        for list in ["fast", "base,fast"] {
            let err = parse_variants(list).expect_err("unknown variant");
            assert!(err.starts_with("unknown variant \"fast\""), "{err}");
            assert!(
                err.contains("base, trylock, linear, optimize_scan, slots for fallocate2"),
                "{err}"
            );
            assert!(
                err.contains("base, ialloc, icache, lanefs, global, bucket, papaya for mdtest"),
                "{err}"
            );
            assert!(err.contains("base, order2, order6 for bufio"), "{err}");
            assert!(err.contains("plain, lean for rtfrag"), "{err}");
            assert!(err.contains("NAME:OPTIONS"), "{err}");
        }
        assert!(parse_variants("").is_err());
        assert!(parse_variants("base,,lanefs").is_err());
    }

    /// Raw specs take the items after them as options, up to the next name or spec.
    #[test]
    fn raw_specs_take_mount_options() {
        let v = parse_variants("base,x:ialloc=locked,icache=global,lanefs,y:icache=papaya")
            .expect("list");
        let names: Vec<(&str, Option<Family>)> =
            v.iter().map(|v| (v.name.as_str(), v.family)).collect();
        assert_eq!(
            names,
            [
                ("base", Some(Family::Blocks)),
                ("base", Some(Family::Inodes)),
                ("base", Some(Family::Pages)),
                ("x", None),
                ("lanefs", Some(Family::Inodes)),
                ("y", None),
            ]
        );
        let x = &v[3].opts;
        assert_eq!(
            (x.ialloc, x.icache),
            (IallocPolicy::Locked, IcachePolicy::Global)
        );
        assert_eq!(v[3].options_text(), "ialloc=locked,icache=global");
        assert_eq!(v[5].opts.icache, IcachePolicy::Papaya);
        assert_eq!(v[5].opts.ialloc, IallocPolicy::Optimistic);
        // Options without a value, sizes, and an empty spec (the defaults, renamed).
        let v = parse_variants("small:icache_limit=1M,noatime,plain:").expect("list");
        assert_eq!(v[0].opts.icache_limit, 1 << 20);
        assert_eq!(v[0].opts.atime, lanefs::AtimePolicy::Never);
        assert_eq!(
            (v[1].name.as_str(), &v[1].opts),
            ("plain", &MountOptions::default())
        );
        assert_eq!(v[1].options_text(), "defaults");
    }

    /// A raw spec with a bad option or name is an error naming the variant and the option.
    #[test]
    fn raw_spec_errors_name_the_problem() {
        let err = parse_variants("x:ialloc=sometimes").expect_err("bad value");
        assert!(
            err.starts_with("variant x: option ialloc=sometimes"),
            "{err}"
        );
        let err = parse_variants("x:icache=global,fast").expect_err("unknown option");
        assert!(
            err.contains("\"fast\" is not an engine mount option"),
            "{err}"
        );
        assert!(err.contains("icache_limit"), "{err}");
        let err = parse_variants(":icache=global").expect_err("empty name");
        assert!(err.contains("variant name \"\""), "{err}");
        let err = parse_variants("a b:icache=global").expect_err("space in name");
        assert!(err.contains("variant name \"a b\""), "{err}");
        assert!(parse_variants("x:ialloc").is_err(), "ialloc needs a value");
    }
}
