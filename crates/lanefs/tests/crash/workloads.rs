//! The workloads, each driven by a seed: fallocate2-like, create/remove, rename-over,
//! append+fsync, truncate, an htree directory, a random mix, and the large-folio workload.

use super::*;

// ---------------------------------------------------------------------------------------
// Workloads.

#[derive(Clone, Copy)]
pub(super) struct Workload {
    pub(super) name: &'static str,
    pub(super) run: fn(&mut Driver, &mut StdRng) -> R<()>,
}

pub(super) const ALL: [Workload; WORKLOADS as usize] = [
    Workload {
        name: "fallocate2",
        run: wl_fallocate2,
    },
    Workload {
        name: "create_remove",
        run: wl_create_remove,
    },
    Workload {
        name: "rename_over",
        run: wl_rename_over,
    },
    Workload {
        name: "append_fsync",
        run: wl_append_fsync,
    },
    Workload {
        name: "truncate",
        run: wl_truncate,
    },
    Workload {
        name: "htree",
        run: wl_htree,
    },
    Workload {
        name: "mix",
        run: wl_mix,
    },
];

/// Large folios with dirty blocks of every order (run on [`FOLIOS`]): two files get writes
/// of 1 to 64 blocks, most at offsets aligned to their size (whole large folios), some
/// anywhere (partial edge blocks), overwrites inside cached folios, holes punched and
/// truncations that end inside large folios (splitting dirty ones), fsyncs and two syncs.
fn wl_folios(d: &mut Driver, rng: &mut StdRng) -> R<()> {
    let files = [d.create(ROOT, b"fa")?, d.create(ROOT, b"fb")?];
    d.fsync(ROOT, false)?;
    let bs = bs();
    for i in 0..48u64 {
        let f = files[rng.gen_range(0..2)];
        let size = d.m.content(f).len() as u64;
        match rng.gen_range(0..20) {
            0..=10 => {
                let blocks = 1u64 << rng.gen_range(0..=6);
                let (off, n) = if rng.gen_bool(0.7) {
                    (rng.gen_range(0..6) * blocks * bs, (blocks * bs) as usize)
                } else {
                    let off = rng.gen_range(0..=size + bs);
                    (off, (blocks * bs - rng.gen_range(1..bs)) as usize)
                };
                d.write(f, off, &pattern(mix(i, 11), off, n))?;
            }
            11..=12 if size > 0 => {
                let mode = FallocMode {
                    keep_size: true,
                    punch_hole: true,
                    zero_range: false,
                };
                let off = rng.gen_range(0..size);
                d.fallocate(f, mode, off, rng.gen_range(1..20 * bs))?;
            }
            13 => d.truncate(f, rng.gen_range(0..=size))?,
            14..=17 => d.fsync(f, rng.gen_bool(0.5))?,
            18 if i % 3 == 0 => d.sync()?,
            _ => {}
        }
        if i == 24 {
            d.sync()?;
        }
    }
    Ok(())
}

/// The workload of [`FOLIOS`]'s own tests.
pub(super) const FOLIOS_WL: Workload = Workload {
    name: "folios",
    run: wl_folios,
};

/// As the fallocate2 benchmark: create a file, fallocate a few blocks, unlink older files;
/// some data, many fsyncs of files and of the directory, one early sync. The fsyncs log
/// more than the 4 MiB journal holds before the final unmount, so the log wraps.
fn wl_fallocate2(d: &mut Driver, rng: &mut StdRng) -> R<()> {
    let dir = d.mkdir(ROOT, b"fa")?;
    d.fsync(ROOT, false)?;
    let mut live: Vec<(Vec<u8>, NodeId)> = Vec::new();
    for i in 0..240u64 {
        let name = format!("f{i}").into_bytes();
        let f = d.create(dir, &name)?;
        let len = bs() * rng.gen_range(1..=4);
        d.fallocate(f, FallocMode::default(), 0, len)?;
        if rng.gen_bool(0.5) {
            let off = rng.gen_range(0..len);
            let n = rng.gen_range(1..=2 * bs() as usize);
            d.write(f, off, &pattern(mix(i, 1), off, n))?;
        }
        if rng.gen_bool(0.2) {
            let mode = FallocMode {
                keep_size: true,
                punch_hole: false,
                zero_range: false,
            };
            d.fallocate(f, mode, len, bs() * rng.gen_range(1..=3))?;
        }
        if rng.gen_bool(0.6) {
            d.fsync(f, rng.gen_bool(0.3))?;
        }
        live.push((name, f));
        while live.len() > 8 || (live.len() > 1 && rng.gen_bool(0.3)) {
            let k = rng.gen_range(0..live.len() - 1);
            let (name, _) = live.remove(k);
            d.unlink(dir, &name)?;
        }
        if rng.gen_bool(0.2) {
            d.fsync(dir, false)?;
        }
        if i == 20 {
            d.sync()?;
        }
    }
    Ok(())
}

/// mdtest-like: rounds of creating small files in one directory, then removing half.
fn wl_create_remove(d: &mut Driver, rng: &mut StdRng) -> R<()> {
    let dir = d.mkdir(ROOT, b"md")?;
    d.sync()?;
    let mut live: Vec<Vec<u8>> = Vec::new();
    for round in 0..3u64 {
        for i in 0..70u64 {
            let name = format!("r{round}-file-{i:03}").into_bytes();
            let f = d.create(dir, &name)?;
            if rng.gen_bool(0.4) {
                let n = rng.gen_range(1..3000);
                d.write(f, 0, &pattern(mix(round * 1000 + i, 2), 0, n))?;
            }
            if rng.gen_bool(0.05) {
                d.fsync(f, false)?;
            }
            live.push(name);
            if i % 20 == 19 {
                d.fsync(dir, false)?;
            }
        }
        live.shuffle(rng);
        for _ in 0..live.len() / 2 {
            let name = live.pop().expect("live");
            d.unlink(dir, &name)?;
            if rng.gen_bool(0.05) {
                d.fsync(dir, false)?;
            }
        }
        if round == 1 {
            d.sync()?;
        } else {
            d.fsync(dir, false)?;
        }
    }
    Ok(())
}

/// Atomic replace: write a temporary file, fsync it, rename it over the target. The target
/// must always hold one whole version.
fn wl_rename_over(d: &mut Driver, rng: &mut StdRng) -> R<()> {
    let target = d.create(ROOT, b"config")?;
    let n = rng.gen_range(1..20_000);
    d.write(target, 0, &pattern(mix(0, 3), 0, n))?;
    d.fsync(target, false)?;
    d.fsync(ROOT, false)?;
    let other = d.create(ROOT, b"other")?;
    for i in 1..=25u64 {
        let tmp = d.create(ROOT, b"config.tmp")?;
        let n = rng.gen_range(1..20_000);
        d.write(tmp, 0, &pattern(mix(i, 3), 0, n))?;
        d.fsync(tmp, rng.gen_bool(0.3))?;
        d.rename(ROOT, b"config.tmp", ROOT, b"config")?;
        if rng.gen_bool(0.5) {
            d.fsync(ROOT, false)?;
        }
        if rng.gen_bool(0.3) {
            // Unrelated changes in the same transactions.
            let len = d.m.content(other).len() as u64;
            d.write(other, len, &pattern(mix(i, 4), len, 700))?;
        }
        if i % 10 == 9 {
            d.sync()?;
        }
    }
    Ok(())
}

/// Two logs appended to in turn; every fsync-acknowledged prefix must survive.
fn wl_append_fsync(d: &mut Driver, rng: &mut StdRng) -> R<()> {
    let logs = [d.create(ROOT, b"log")?, d.create(ROOT, b"log2")?];
    d.fsync(ROOT, false)?;
    for i in 0..160u64 {
        let f = logs[rng.gen_range(0..2)];
        let off = d.m.content(f).len() as u64;
        let n = rng.gen_range(1..3000);
        d.write(f, off, &pattern(mix(f as u64, 5), off, n))?;
        if rng.gen_bool(0.5) {
            d.fsync(f, rng.gen_bool(0.5))?;
        }
        if i == 30 {
            d.sync()?;
        }
    }
    Ok(())
}

/// Truncating down and up, writes and holes punched in three files.
fn wl_truncate(d: &mut Driver, rng: &mut StdRng) -> R<()> {
    let mut files = Vec::new();
    for (k, name) in [b"ta", b"tb", b"tc"].iter().enumerate() {
        let f = d.create(ROOT, *name)?;
        let n = rng.gen_range(1..40_000);
        d.write(f, 0, &pattern(mix(k as u64, 6), 0, n))?;
        files.push(f);
    }
    d.sync()?;
    for i in 0..45u64 {
        let f = files[rng.gen_range(0..files.len())];
        let size = d.m.content(f).len() as u64;
        match rng.gen_range(0..4) {
            0 => d.truncate(f, rng.gen_range(0..=size))?,
            1 => d.truncate(f, size + rng.gen_range(1..20_000))?,
            2 => {
                let off = rng.gen_range(0..=size + 4096);
                let n = rng.gen_range(1..10_000);
                d.write(f, off, &pattern(mix(i, 7), off, n))?;
            }
            _ => {
                let mode = FallocMode {
                    keep_size: true,
                    punch_hole: true,
                    zero_range: false,
                };
                let off = rng.gen_range(0..=size);
                d.fallocate(f, mode, off, rng.gen_range(1..20_000))?;
            }
        }
        if rng.gen_bool(0.4) {
            d.fsync(f, rng.gen_bool(0.3))?;
        }
        if i % 15 == 14 {
            d.sync()?;
        }
    }
    Ok(())
}

/// One directory grown into an htree (thousands of entries), with removals and renames.
fn wl_htree(d: &mut Driver, rng: &mut StdRng) -> R<()> {
    let dir = d.mkdir(ROOT, b"big")?;
    d.fsync(ROOT, false)?;
    let mut live: Vec<Vec<u8>> = Vec::new();
    for i in 0..2400u64 {
        let name = format!("entry-{i:05}-{:08x}", rng.gen::<u32>()).into_bytes();
        let f = d.create(dir, &name)?;
        if i % 97 == 0 {
            d.write(f, 0, &pattern(mix(i, 8), 0, 100))?;
        }
        live.push(name);
        if i % 250 == 249 {
            d.fsync(dir, false)?;
        }
        if i % 400 == 399 {
            for _ in 0..20 {
                let k = rng.gen_range(0..live.len());
                let name = live.swap_remove(k);
                d.unlink(dir, &name)?;
            }
            for j in 0..5 {
                let k = rng.gen_range(0..live.len());
                let new = format!("renamed-{i}-{j}").into_bytes();
                d.rename(dir, &live[k], dir, &new)?;
                live[k] = new;
            }
        }
        if i % 1000 == 999 {
            d.sync()?;
        }
    }
    Ok(())
}

/// Random operations over a few directories and files, with one sync half-way.
fn wl_mix(d: &mut Driver, rng: &mut StdRng) -> R<()> {
    let mut dirs = vec![ROOT];
    for i in 0..160u64 {
        let dir = dirs[rng.gen_range(0..dirs.len())];
        let kids = d.m.children(dir);
        let files: Vec<&(Vec<u8>, NodeId)> = kids
            .iter()
            .filter(|(_, n)| d.m.nodes[*n].kind == FileType::Regular)
            .collect();
        let name = format!("n{}", rng.gen_range(0..6)).into_bytes();
        let free = d.m.lookup(dir, &name).is_none();
        match rng.gen_range(0..100) {
            0..=14 if free => {
                d.create(dir, &name)?;
            }
            15..=18 if free && dir == ROOT && dirs.len() < 4 => {
                let sub = d.mkdir(dir, &name)?;
                dirs.push(sub);
            }
            19..=40 if !files.is_empty() => {
                let f = files[rng.gen_range(0..files.len())].1;
                let size = d.m.content(f).len() as u64;
                let off = rng.gen_range(0..=size + 2 * bs());
                let n = rng.gen_range(1..12_000);
                d.write(f, off, &pattern(mix(i, 9), off, n))?;
            }
            41..=47 if !files.is_empty() => {
                let f = files[rng.gen_range(0..files.len())].1;
                let size = d.m.content(f).len() as u64;
                d.truncate(f, rng.gen_range(0..=size + bs()))?;
            }
            48..=52 if !files.is_empty() => {
                let f = files[rng.gen_range(0..files.len())].1;
                let size = d.m.content(f).len() as u64;
                let mode = FallocMode {
                    keep_size: rng.gen_bool(0.5),
                    punch_hole: rng.gen_bool(0.3),
                    zero_range: false,
                };
                let off = rng.gen_range(0..=size + bs());
                d.fallocate(f, mode, off, rng.gen_range(1..4 * bs()))?;
            }
            53..=60 if !files.is_empty() => {
                let (n, _) = files[rng.gen_range(0..files.len())];
                d.unlink(dir, n)?;
            }
            61..=63 if dir != ROOT && kids.is_empty() => {
                // rmdir this (empty) directory.
                let (pname, _) =
                    d.m.children(ROOT)
                        .into_iter()
                        .find(|(_, n)| *n == dir)
                        .expect("directory in the root");
                d.unlink(ROOT, &pname)?;
                dirs.retain(|&x| x != dir);
            }
            64..=71 if !kids.is_empty() => {
                // Rename within or across directories, over a file or to a free name.
                let (n, node) = &kids[rng.gen_range(0..kids.len())];
                let is_dir = d.m.nodes[*node].kind == FileType::Directory;
                let to = if is_dir {
                    ROOT
                } else {
                    dirs[rng.gen_range(0..dirs.len())]
                };
                let target = d.m.lookup(to, &name);
                let ok = match target {
                    None => true,
                    Some(t) => !is_dir && d.m.nodes[t].kind == FileType::Regular && t != *node,
                };
                if ok && !(to == dir && *n == name) {
                    d.rename(dir, n, to, &name)?;
                }
            }
            72..=83 if !kids.is_empty() => {
                let (_, node) = kids[rng.gen_range(0..kids.len())];
                d.fsync(node, rng.gen_bool(0.3))?;
            }
            84..=93 => d.fsync(dir, false)?,
            94..=96 => d.sync()?,
            _ => {}
        }
        // One sync at least, whatever the seed (about 1 seed in 130 drew none, and the
        // sync-point tests need one).
        if i == 80 {
            d.sync()?;
        }
    }
    Ok(())
}
