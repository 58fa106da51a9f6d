//! Operations: `Op`, whose operands are indexes into the model's current state (so
//! shrinking keeps them meaningful), and the proptest strategies that make them.

use super::*;

#[derive(Debug, Clone)]
pub(super) enum Op {
    Create {
        dir: u16,
        name: u8,
        perm: u16,
        keep_open: bool,
    },
    Mkdir {
        dir: u16,
        name: u8,
        perm: u16,
    },
    Mknod {
        dir: u16,
        name: u8,
        which: u8,
        perm: u16,
    },
    Symlink {
        dir: u16,
        name: u8,
        len: u16,
        seed: u8,
    },
    Link {
        src: u16,
        dir: u16,
        name: u8,
    },
    Unlink {
        dir: u16,
        name: u8,
    },
    Rmdir {
        dir: u16,
        name: u8,
    },
    RmdirEmpty {
        dir: u16,
    },
    RemoveEntry {
        entry: u16,
        as_dir: bool,
    },
    Rename {
        dir: u16,
        name: u8,
        newdir: u16,
        newname: u8,
    },
    RenameEntry {
        entry: u16,
        newdir: u16,
        newname: u8,
    },
    /// `direct`: `Fs::write_direct` at the offset rounded down to a block.
    Write {
        file: u16,
        any: bool,
        off: u64,
        len: u32,
        seed: u8,
        direct: bool,
    },
    Read {
        file: u16,
        any: bool,
        off: u64,
        len: u32,
    },
    Truncate {
        file: u16,
        any: bool,
        size: u64,
    },
    Fallocate {
        file: u16,
        any: bool,
        off: u64,
        len: u64,
        mode: u8,
    },
    SetPerm {
        node: u16,
        perm: u16,
    },
    SetTimes {
        node: u16,
        atime: Timespec,
        mtime: Timespec,
    },
    Readdir {
        dir: u16,
        chunk: u8,
    },
    /// Read a first chunk, change the directory (adds and one removal), read on.
    ReaddirChanging {
        dir: u16,
        chunk: u8,
        adds: u8,
        victim: u16,
    },
    /// Many creates in one directory (long names optional): htree conversion and splits.
    Bulk {
        dir: u16,
        count: u16,
        long: bool,
    },
    Lookup {
        dir: u16,
        name: u8,
    },
    Getattr {
        node: u16,
    },
    Readlink {
        node: u16,
    },
    Open {
        file: u16,
    },
    Release {
        handle: u16,
    },
    Fsync {
        file: u16,
    },
    Remount,
}

pub(super) fn name_s() -> impl Strategy<Value = u8> {
    prop_oneof![12 => 0u8..6, 1 => Just(6u8), 1 => Just(7u8)]
}

/// Offsets and sizes: small, medium, far and sparse, just below and at/past the limit.
pub(super) fn off_s() -> impl Strategy<Value = u64> {
    prop_oneof![
        8 => 0u64..65536,
        4 => 0u64..(4 << 20),
        1 => (0u64..(1 << 32) - 1, 0u64..bs()).prop_map(|(b, o)| b * bs() + o),
        1 => (0u64..3 * bs()).prop_map(|d| max_size() - d - 1),
        1 => (0u64..3 * bs()).prop_map(|d| max_size() + d),
    ]
}

pub(super) fn len_s() -> impl Strategy<Value = u32> {
    prop_oneof![6 => 1u32..5000, 3 => 1u32..40_000, 1 => 1u32..300_000]
}

/// Symlink targets: fast (in the inode), slow (a block), and one byte too long.
pub(super) fn target_len_s() -> impl Strategy<Value = u16> {
    prop_oneof![4 => 1u16..60, 3 => 60u16..300, 2 => 300u16..4096, 1 => Just(4096u16)]
}

/// fallocate lengths: rarely 0 (Invalid), small, up to about 150 blocks.
pub(super) fn falloc_len_s() -> impl Strategy<Value = u64> {
    prop_oneof![1 => Just(0u64), 10 => 1u64..20_000, 10 => 1u64..600_000]
}

pub(super) fn time_s() -> impl Strategy<Value = Timespec> {
    (-(1i64 << 31)..(3i64 << 32), 0u32..1_000_000_000)
        .prop_map(|(sec, nsec)| Timespec { sec, nsec })
}

pub(super) fn op_s() -> impl Strategy<Value = Op> {
    let s = any::<u16>;
    let rare = || prop::bool::weighted(0.1);
    prop_oneof![
        8 => (s(), name_s(), 0u16..0o10000, any::<bool>())
            .prop_map(|(dir, name, perm, keep_open)| Op::Create { dir, name, perm, keep_open }),
        4 => (s(), name_s(), 0u16..0o10000)
            .prop_map(|(dir, name, perm)| Op::Mkdir { dir, name, perm }),
        1 => (s(), name_s(), 0u8..4, 0u16..0o10000)
            .prop_map(|(dir, name, which, perm)| Op::Mknod { dir, name, which, perm }),
        2 => (s(), name_s(), target_len_s(), any::<u8>())
            .prop_map(|(dir, name, len, seed)| Op::Symlink { dir, name, len, seed }),
        2 => (s(), s(), name_s()).prop_map(|(src, dir, name)| Op::Link { src, dir, name }),
        2 => (s(), name_s()).prop_map(|(dir, name)| Op::Unlink { dir, name }),
        1 => (s(), name_s()).prop_map(|(dir, name)| Op::Rmdir { dir, name }),
        1 => s().prop_map(|dir| Op::RmdirEmpty { dir }),
        3 => (s(), any::<bool>()).prop_map(|(entry, as_dir)| Op::RemoveEntry { entry, as_dir }),
        2 => (s(), name_s(), s(), name_s())
            .prop_map(|(dir, name, newdir, newname)| Op::Rename { dir, name, newdir, newname }),
        5 => (s(), s(), name_s())
            .prop_map(|(entry, newdir, newname)| Op::RenameEntry { entry, newdir, newname }),
        10 => (s(), rare(), off_s(), len_s(), any::<u8>(), any::<bool>()).prop_map(
            |(file, any, off, len, seed, direct)| Op::Write { file, any, off, len, seed, direct }
        ),
        6 => (s(), rare(), off_s(), len_s())
            .prop_map(|(file, any, off, len)| Op::Read { file, any, off, len }),
        3 => (s(), rare(), off_s()).prop_map(|(file, any, size)| Op::Truncate { file, any, size }),
        4 => (s(), rare(), off_s(), falloc_len_s(), 0u8..3)
            .prop_map(|(file, any, off, len, mode)| Op::Fallocate { file, any, off, len, mode }),
        1 => (s(), 0u16..0o10000).prop_map(|(node, perm)| Op::SetPerm { node, perm }),
        1 => (s(), time_s(), time_s())
            .prop_map(|(node, atime, mtime)| Op::SetTimes { node, atime, mtime }),
        2 => (s(), 1u8..8).prop_map(|(dir, chunk)| Op::Readdir { dir, chunk }),
        1 => (s(), 1u8..8, 0u8..40, s())
            .prop_map(|(dir, chunk, adds, victim)| {
                Op::ReaddirChanging { dir, chunk, adds, victim }
            }),
        1 => (s(), 20u16..400, any::<bool>())
            .prop_map(|(dir, count, long)| Op::Bulk { dir, count, long }),
        3 => (s(), 0u8..10).prop_map(|(dir, name)| Op::Lookup { dir, name }),
        2 => s().prop_map(|node| Op::Getattr { node }),
        1 => s().prop_map(|node| Op::Readlink { node }),
        2 => s().prop_map(|file| Op::Open { file }),
        2 => s().prop_map(|handle| Op::Release { handle }),
        1 => s().prop_map(|file| Op::Fsync { file }),
        1 => Just(Op::Remount),
    ]
}
