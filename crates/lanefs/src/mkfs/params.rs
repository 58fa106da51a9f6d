//! What to make, resolved as mke2fs resolves it: the file system type (`-t`) and usage
//! types (`-T`, or the size class of the device) pick block size, inode size, inode ratio
//! and features from Debian 12's `/etc/mke2fs.conf` (copied below, so the result does not
//! depend on the host), then `-O` edits the features and the explicit options override
//! the rest. Combinations mke2fs refuses are refused here, by name, in one line.

use super::MkfsOptions;
use crate::disk::superblock::{compat, incompat, ro_compat};
use crate::error::{Error, Result};

/// Smallest block size.
const MIN_BLOCK: u32 = 1024;
/// Largest block size (EXT2_MAX_BLOCK_SIZE).
const MAX_BLOCK: u32 = 65536;
/// Smallest inode ratio (`-i`).
const MIN_RATIO: u64 = 1024;
/// Largest inode ratio (`-i`): EXT2_MAX_BLOCK_SIZE * 1024.
const MAX_RATIO: u64 = 64 << 20;
/// The page size, which `blocksize = -1` stands for.
const PAGE_SIZE: u32 = 4096;

/// The three feature words.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Features {
    pub compat: u32,
    pub incompat: u32,
    pub ro: u32,
}

/// Which word a feature lives in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Word {
    Compat,
    Incompat,
    Ro,
}

/// Features `-O` can turn on or off, by their e2fsprogs names (and aliases).
const KNOWN: &[(&str, Word, u32)] = &[
    ("has_journal", Word::Compat, compat::HAS_JOURNAL),
    ("ext_attr", Word::Compat, compat::EXT_ATTR),
    ("resize_inode", Word::Compat, compat::RESIZE_INODE),
    ("dir_index", Word::Compat, compat::DIR_INDEX),
    ("sparse_super2", Word::Compat, compat::SPARSE_SUPER2),
    ("filetype", Word::Incompat, incompat::FILETYPE),
    ("meta_bg", Word::Incompat, incompat::META_BG),
    ("extent", Word::Incompat, incompat::EXTENTS),
    ("extents", Word::Incompat, incompat::EXTENTS),
    ("64bit", Word::Incompat, incompat::BIT64),
    ("mmp", Word::Incompat, incompat::MMP),
    ("flex_bg", Word::Incompat, incompat::FLEX_BG),
    ("metadata_csum_seed", Word::Incompat, incompat::CSUM_SEED),
    ("inline_data", Word::Incompat, incompat::INLINE_DATA),
    ("sparse_super", Word::Ro, ro_compat::SPARSE_SUPER),
    ("large_file", Word::Ro, ro_compat::LARGE_FILE),
    ("huge_file", Word::Ro, ro_compat::HUGE_FILE),
    ("uninit_bg", Word::Ro, ro_compat::GDT_CSUM),
    ("uninit_groups", Word::Ro, ro_compat::GDT_CSUM),
    ("gdt_csum", Word::Ro, ro_compat::GDT_CSUM),
    ("dir_nlink", Word::Ro, ro_compat::DIR_NLINK),
    ("extra_isize", Word::Ro, ro_compat::EXTRA_ISIZE),
    ("metadata_csum", Word::Ro, ro_compat::METADATA_CSUM),
];

/// Features e2fsprogs knows that lanefs mkfs does not make.
const NOT_MADE: &[&str] = &[
    "bigalloc",
    "casefold",
    "compression",
    "dir_prealloc",
    "dirdata",
    "ea_inode",
    "encrypt",
    "exclude_bitmap",
    "exclude_inode",
    "fast_commit",
    "imagic_inodes",
    "journal_dev",
    "large_dir",
    "lazy_bg",
    "needs_recovery",
    "orphan_file",
    "orphan_present",
    "project",
    "quota",
    "read-only",
    "replica",
    "shared_blocks",
    "snapshot_bitmap",
    "stable_inodes",
    "verity",
];

impl Features {
    /// Whether `name`'s bit is set (`name` must be in KNOWN).
    pub fn has(&self, name: &str) -> bool {
        // A misspelt name would read as "off" for ever.
        debug_assert!(KNOWN.iter().any(|k| k.0 == name), "feature {name}");
        KNOWN
            .iter()
            .find(|k| k.0 == name)
            .is_some_and(|&(_, w, bit)| *self.word(w) & bit != 0)
    }

    fn word(&self, w: Word) -> &u32 {
        match w {
            Word::Compat => &self.compat,
            Word::Incompat => &self.incompat,
            Word::Ro => &self.ro,
        }
    }

    fn word_mut(&mut self, w: Word) -> &mut u32 {
        match w {
            Word::Compat => &mut self.compat,
            Word::Incompat => &mut self.incompat,
            Word::Ro => &mut self.ro,
        }
    }

    /// Set or clear `name`'s bit (`name` must be in KNOWN).
    pub fn set(&mut self, name: &str, on: bool) {
        debug_assert!(KNOWN.iter().any(|k| k.0 == name), "feature {name}");
        if let Some(&(_, w, bit)) = KNOWN.iter().find(|k| k.0 == name) {
            let word = self.word_mut(w);
            if on {
                *word |= bit;
            } else {
                *word &= !bit;
            }
        }
    }

    /// Apply an e2fsprogs feature edit list: names separated by commas or blanks, each
    /// optionally prefixed by `^` or `-` (clear) or `+` (set); `none` or `clear` clears all.
    pub fn edit(&mut self, list: &str) -> Result<()> {
        for word in list
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|w| !w.is_empty())
        {
            if word.eq_ignore_ascii_case("none") || word.eq_ignore_ascii_case("clear") {
                *self = Features::default();
                continue;
            }
            let (on, name) = match word.as_bytes()[0] {
                b'^' | b'-' => (false, &word[1..]),
                b'+' => (true, &word[1..]),
                _ => (true, word),
            };
            let lower = name.to_ascii_lowercase();
            match KNOWN.iter().find(|k| k.0 == lower) {
                Some(&(_, w, bit)) => {
                    let word = self.word_mut(w);
                    if on {
                        *word |= bit;
                    } else {
                        *word &= !bit;
                    }
                }
                None if NOT_MADE.contains(&lower.as_str()) => {
                    if on {
                        return Err(invalid(format!(
                            "feature '{name}' is not supported by lanefs mkfs"
                        )));
                    }
                }
                None => return Err(invalid(format!("unknown feature '{name}'"))),
            }
        }
        Ok(())
    }
}

/// One `[fs_types]` stanza of mke2fs.conf.
struct FsType {
    name: &'static str,
    /// `features`: an edit list applied in order.
    features: &'static str,
    /// `blocksize` (-1: the page size).
    blocksize: Option<i32>,
    inode_ratio: Option<u64>,
    inode_size: Option<u32>,
}

/// `[defaults]` of Debian 12's mke2fs.conf.
const BASE_FEATURES: &str = "sparse_super,large_file,filetype,resize_inode,dir_index,ext_attr";
const DEFAULT_BLOCKSIZE: i32 = 4096;
const DEFAULT_INODE_SIZE: u32 = 256;
const DEFAULT_INODE_RATIO: u64 = 16384;

/// `[fs_types]` of Debian 12's mke2fs.conf.
const FS_TYPES: &[FsType] = &[
    FsType {
        name: "ext3",
        features: "has_journal",
        blocksize: None,
        inode_ratio: None,
        inode_size: None,
    },
    FsType {
        name: "ext4",
        features: "has_journal,extent,huge_file,flex_bg,metadata_csum,64bit,dir_nlink,extra_isize",
        blocksize: None,
        inode_ratio: None,
        inode_size: None,
    },
    FsType {
        name: "small",
        features: "",
        blocksize: Some(1024),
        inode_ratio: Some(4096),
        inode_size: None,
    },
    FsType {
        name: "floppy",
        features: "",
        blocksize: Some(1024),
        inode_ratio: Some(8192),
        inode_size: None,
    },
    FsType {
        name: "big",
        features: "",
        blocksize: None,
        inode_ratio: Some(32768),
        inode_size: None,
    },
    FsType {
        name: "huge",
        features: "",
        blocksize: None,
        inode_ratio: Some(65536),
        inode_size: None,
    },
    FsType {
        name: "news",
        features: "",
        blocksize: None,
        inode_ratio: Some(4096),
        inode_size: None,
    },
    FsType {
        name: "largefile",
        features: "",
        blocksize: Some(-1),
        inode_ratio: Some(1 << 20),
        inode_size: None,
    },
    FsType {
        name: "largefile4",
        features: "",
        blocksize: Some(-1),
        inode_ratio: Some(4 << 20),
        inode_size: None,
    },
    FsType {
        name: "hurd",
        features: "",
        blocksize: Some(4096),
        inode_ratio: None,
        inode_size: Some(128),
    },
];

/// Usage types `-T` accepts: every stanza but the ext types, and `default`.
const USAGE_NAMES: &str = "small, floppy, default, big, huge, news, largefile, largefile4, hurd";

/// Everything mkfs needs to lay the file system out.
#[derive(Clone, Debug)]
pub(super) struct Params {
    /// Block size in bytes.
    pub bs: u32,
    /// Blocks the device holds at that size (before mke2fs's last-group trimming).
    pub blocks: u64,
    /// Inode size in bytes.
    pub inode_size: u32,
    /// Inodes asked for (before rounding to whole inode-table blocks).
    pub inodes: u64,
    /// Features (has_journal may still be dropped for a tiny file system).
    pub features: Features,
}

/// An `Error::Invalid` with `msg`.
fn invalid(msg: impl Into<String>) -> Error {
    Error::Invalid(msg.into())
}

/// The size class mke2fs gives a device of `bytes` bytes.
fn size_type(bytes: u64) -> &'static str {
    const MIB: u64 = 1 << 20;
    if bytes < 3 * MIB {
        "floppy"
    } else if bytes < 512 * MIB {
        "small"
    } else if bytes < 4 << 40 {
        "default"
    } else if bytes < 16 << 40 {
        "big"
    } else {
        "huge"
    }
}

fn stanza(name: &str) -> Option<&'static FsType> {
    FS_TYPES.iter().find(|t| t.name == name)
}

/// The type list: the ext type, then the usage types (`-T`, else the size class).
fn type_list(opts: &MkfsOptions, dev_bytes: u64) -> Result<Vec<&'static str>> {
    let ext = opts.fs_type.as_deref().unwrap_or("ext4");
    let ext: &'static str = match ext {
        "ext2" => "ext2",
        "ext3" => "ext3",
        "ext4" => "ext4",
        other => {
            return Err(invalid(format!(
                "unknown file system type '{other}' (ext2, ext3 or ext4)"
            )))
        }
    };
    let mut types = vec![ext];
    match opts.usage_types.as_deref() {
        None => types.push(size_type(dev_bytes)),
        Some(list) => {
            for u in list.split(',').filter(|u| !u.is_empty()) {
                if u == "default" {
                    types.push("default");
                    continue;
                }
                match stanza(u) {
                    Some(t) if !t.name.starts_with("ext") => types.push(t.name),
                    _ => return Err(invalid(format!("unknown usage type '{u}' ({USAGE_NAMES})"))),
                }
            }
        }
    }
    Ok(types)
}

/// The last value the type list gives for a key (later types override earlier ones).
fn lookup<T: Copy>(types: &[&str], key: impl Fn(&FsType) -> Option<T>) -> Option<T> {
    types
        .iter()
        .filter_map(|t| stanza(t))
        .filter_map(key)
        .next_back()
}

/// Resolve the options for a device of `dev_bytes` bytes.
pub(super) fn resolve(opts: &MkfsOptions, dev_bytes: u64) -> Result<Params> {
    let types = type_list(opts, dev_bytes)?;
    let bs = block_size(opts, &types)?;
    let inode_size = inode_size(opts, &types, bs)?;
    let mut features = Features::default();
    features.edit(BASE_FEATURES)?;
    for t in &types {
        if let Some(s) = stanza(t) {
            features.edit(s.features)?;
        }
    }
    features.edit(&opts.features)?;
    match opts.journal_blocks {
        Some(0) => features.set("has_journal", false),
        Some(_) => features.set("has_journal", true),
        None => {}
    }
    check_features(&mut features, inode_size)?;
    // mke2fs takes the device's size in whole pages.
    let blocks = (dev_bytes / u64::from(bs)) & !(u64::from(PAGE_SIZE / bs).max(1) - 1);
    let inodes = inode_count(opts, &types, bs, blocks, &features)?;
    debug_assert!(inodes <= u64::from(u32::MAX), "{inodes} inodes");
    Ok(Params {
        bs,
        blocks,
        inode_size,
        inodes,
        features,
    })
}

/// `-b`, else the profile's block size.
fn block_size(opts: &MkfsOptions, types: &[&str]) -> Result<u32> {
    if let Some(b) = opts.block_size {
        if !b.is_power_of_two() || !(MIN_BLOCK..=MAX_BLOCK).contains(&b) {
            return Err(invalid(format!(
                "invalid block size {b} (a power of two from {MIN_BLOCK} to {MAX_BLOCK})"
            )));
        }
        return Ok(b);
    }
    let b = lookup(types, |t| t.blocksize).unwrap_or(DEFAULT_BLOCKSIZE);
    let b = if b <= 0 { PAGE_SIZE } else { b as u32 };
    debug_assert!(
        b.is_power_of_two() && (MIN_BLOCK..=MAX_BLOCK).contains(&b),
        "block size {b} from the type table"
    );
    Ok(b)
}

/// `-I`, else the profile's inode size.
fn inode_size(opts: &MkfsOptions, types: &[&str], bs: u32) -> Result<u32> {
    let Some(i) = opts.inode_size else {
        let i = lookup(types, |t| t.inode_size)
            .unwrap_or(DEFAULT_INODE_SIZE)
            .min(bs);
        debug_assert!(
            i.is_power_of_two() && i >= 128,
            "inode size {i} from the type table"
        );
        return Ok(i);
    };
    if !i.is_power_of_two() || i < 128 || i > bs {
        return Err(invalid(format!(
            "invalid inode size {i} (a power of two from 128 to the block size {bs})"
        )));
    }
    Ok(i)
}

/// `-N`, else the device's bytes over `-i` or the profile's inode ratio.
fn inode_count(
    opts: &MkfsOptions,
    types: &[&str],
    bs: u32,
    blocks: u64,
    features: &Features,
) -> Result<u64> {
    if let Some(n) = opts.inodes {
        if n > u64::from(u32::MAX) {
            return Err(invalid(format!(
                "too many inodes ({n}): at most {} (2^32 - 1)",
                u32::MAX
            )));
        }
        return Ok(n);
    }
    let ratio = ratio(opts, types, bs)?;
    let n = blocks * u64::from(bs) / ratio;
    if n > u64::from(u32::MAX) {
        if features.has("64bit") {
            return Ok(u64::from(u32::MAX));
        }
        return Err(invalid(format!(
            "too many inodes ({n}) for one inode per {ratio} bytes: raise the inode ratio"
        )));
    }
    Ok(n)
}

/// `-i`, else the profile's inode ratio (at least a block).
fn ratio(opts: &MkfsOptions, types: &[&str], bs: u32) -> Result<u64> {
    match opts.inode_ratio {
        Some(r) if !(MIN_RATIO..=MAX_RATIO).contains(&r) => Err(invalid(format!(
            "invalid inode ratio {r} (from {MIN_RATIO} to {MAX_RATIO})"
        ))),
        Some(r) => Ok(r),
        None => {
            let r = lookup(types, |t| t.inode_ratio)
                .unwrap_or(DEFAULT_INODE_RATIO)
                .max(u64::from(bs));
            debug_assert!((MIN_RATIO..=MAX_RATIO).contains(&r), "inode ratio {r}");
            Ok(r)
        }
    }
}

/// The bytes per inode a device of `dev_bytes` bytes gets: `-i`, else its size class's.
pub(super) fn inode_ratio(opts: &MkfsOptions, dev_bytes: u64) -> Result<u64> {
    let types = type_list(opts, dev_bytes)?;
    ratio(opts, &types, block_size(opts, &types)?)
}

/// Refuse what mke2fs refuses; drop what it drops silently (uninit_bg under
/// metadata_csum).
fn check_features(f: &mut Features, inode_size: u32) -> Result<()> {
    let refuse = |msg: &str| Err(invalid(msg.to_string()));
    if f.has("metadata_csum") {
        f.set("uninit_bg", false);
    }
    if f.has("64bit") && !f.has("extent") {
        return refuse("64bit requires the extent feature (add extent or ^64bit)");
    }
    if f.has("resize_inode") && f.has("meta_bg") {
        return refuse("resize_inode and meta_bg cannot both be on (add ^resize_inode)");
    }
    if f.has("resize_inode") && !f.has("sparse_super") {
        return refuse("resize_inode requires sparse_super (add ^resize_inode)");
    }
    if f.has("metadata_csum_seed") && !f.has("metadata_csum") {
        return refuse("metadata_csum_seed requires metadata_csum");
    }
    if f.has("inline_data") && !f.has("ext_attr") {
        return refuse("inline_data requires ext_attr");
    }
    if f.has("inline_data") && inode_size < 256 {
        return Err(invalid(format!(
            "inline_data requires inodes of at least 256 bytes (inode size {inode_size})"
        )));
    }
    debug_assert!(
        !(f.has("metadata_csum") && f.has("uninit_bg")),
        "two descriptor checksums"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(f: impl FnOnce(&mut MkfsOptions)) -> MkfsOptions {
        let mut o = MkfsOptions::mke2fs();
        f(&mut o);
        o
    }

    fn names(f: &Features) -> Vec<&'static str> {
        KNOWN
            .iter()
            .filter(|k| !["extents", "uninit_groups", "gdt_csum"].contains(&k.0))
            .filter(|k| f.has(k.0))
            .map(|k| k.0)
            .collect()
    }

    #[test]
    fn types_pick_block_size_and_ratio_like_mke2fs() {
        let p = resolve(&MkfsOptions::mke2fs(), 64 << 20).unwrap();
        assert_eq!((p.bs, p.inode_size, p.inodes), (1024, 256, 16384));
        assert_eq!(
            type_list(&MkfsOptions::mke2fs(), 64 << 20).unwrap(),
            ["ext4", "small"]
        );
        let p = resolve(&MkfsOptions::mke2fs(), 1440 << 10).unwrap();
        assert_eq!((p.bs, p.inodes), (1024, 180));
        let p = resolve(&MkfsOptions::mke2fs(), 4 << 30).unwrap();
        assert_eq!((p.bs, p.inodes), (4096, 262144));
        let p = resolve(&opts(|o| o.usage_types = Some("largefile".into())), 4 << 30).unwrap();
        assert_eq!((p.bs, p.inodes), (4096, 4096));
        let p = resolve(&opts(|o| o.usage_types = Some("hurd".into())), 4 << 30).unwrap();
        assert_eq!((p.bs, p.inode_size), (4096, 128));
    }

    #[test]
    fn ext_types_have_debian_features() {
        let p = resolve(&opts(|o| o.fs_type = Some("ext2".into())), 1 << 30).unwrap();
        assert_eq!(
            names(&p.features),
            [
                "ext_attr",
                "resize_inode",
                "dir_index",
                "filetype",
                "sparse_super",
                "large_file"
            ]
        );
        let p = resolve(&opts(|o| o.fs_type = Some("ext3".into())), 1 << 30).unwrap();
        assert!(p.features.has("has_journal") && !p.features.has("extent"));
        let p = resolve(&MkfsOptions::mke2fs(), 1 << 30).unwrap();
        for f in [
            "extent",
            "64bit",
            "flex_bg",
            "metadata_csum",
            "huge_file",
            "dir_nlink",
        ] {
            assert!(p.features.has(f), "{f}");
        }
    }

    #[test]
    fn edits_and_refusals() {
        let p = resolve(
            &opts(|o| o.features = "^metadata_csum,uninit_bg".into()),
            1 << 30,
        );
        let f = p.unwrap().features;
        assert!(f.has("uninit_bg") && !f.has("metadata_csum"));
        let f = resolve(&opts(|o| o.features = "uninit_bg".into()), 1 << 30)
            .unwrap()
            .features;
        assert!(!f.has("uninit_bg"), "dropped under metadata_csum");
        let bad = [
            ("foo", "unknown feature 'foo'"),
            ("quota", "not supported"),
            ("^extent", "64bit requires"),
            ("meta_bg", "resize_inode and meta_bg"),
            ("^sparse_super", "requires sparse_super"),
            (
                "^metadata_csum,metadata_csum_seed",
                "requires metadata_csum",
            ),
            ("^ext_attr,inline_data", "requires ext_attr"),
        ];
        for (edit, want) in bad {
            let e = resolve(&opts(|o| o.features = edit.into()), 1 << 30).unwrap_err();
            assert!(e.to_string().contains(want), "{edit}: {e}");
        }
        let e = resolve(
            &opts(|o| {
                o.features = "inline_data".into();
                o.inode_size = Some(128);
            }),
            1 << 30,
        )
        .unwrap_err();
        assert!(e.to_string().contains("at least 256"), "{e}");
        assert!(resolve(&opts(|o| o.features = "none".into()), 1 << 30).is_ok());
    }

    #[test]
    fn bad_numbers_are_refused() {
        for b in [512, 3000, 131072] {
            assert!(resolve(&opts(|o| o.block_size = Some(b)), 1 << 30).is_err());
        }
        for i in [64, 100, 8192] {
            assert!(resolve(&opts(|o| o.inode_size = Some(i)), 1 << 30).is_err());
        }
        assert!(resolve(&opts(|o| o.inode_ratio = Some(512)), 1 << 30).is_err());
        assert!(resolve(&opts(|o| o.inodes = Some(1 << 33)), 1 << 30).is_err());
        assert!(resolve(&opts(|o| o.fs_type = Some("ext5".into())), 1 << 30).is_err());
        assert!(resolve(&opts(|o| o.usage_types = Some("tiny".into())), 1 << 30).is_err());
    }
}
