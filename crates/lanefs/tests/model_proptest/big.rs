//! Big directories and many extents: thousands of long names (htree leaf and index
//! splits, a two-level index) and files of thousands of extents, compared with the model
//! and with `debugfs`.

use super::*;

/// Run `debugfs -R cmd` on an image and return its output.
pub(super) fn debugfs(img: &Path, cmd: &str) -> String {
    let out = Command::new("debugfs")
        .arg("-R")
        .arg(cmd)
        .arg(img)
        .output()
        .expect("run debugfs");
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Parameters of one big case.
#[derive(Debug, Clone)]
pub(super) struct Big {
    pub(super) seed: u64,
    pub(super) entries: usize,
    pub(super) name_len: usize,
    pub(super) frags: u64,
}

pub(super) fn big_name(rng: &mut impl Rng, i: usize, len: usize) -> Vec<u8> {
    let mut n = format!("{i:06}-").into_bytes();
    while n.len() < len {
        n.push(b'a' + rng.gen_range(0..26u8));
    }
    n
}

pub(super) fn run_big(p: &Big) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(p.seed);
    let mut r = Runner::new();
    r.what = "big: mkdir".into();
    let big = r.mkdir(ROOT, b"big", 0o755).expect("mkdir big");
    // Fill the directory: mostly files, some subdirectories, symlinks and hard links.
    let mut names: Vec<Vec<u8>> = Vec::new();
    for i in 0..p.entries {
        r.step += 1;
        let name = big_name(&mut rng, i, p.name_len);
        r.what = format!("big: create entry {i}");
        let ok = match i % 50 {
            7 => r.mkdir(big, &name, 0o700).is_some(),
            13 => r.symlink(big, &name, &name[..100]).is_some(),
            21 if !names.is_empty() => {
                let src =
                    r.m.lookup(big, &names[rng.gen_range(0..names.len())])
                        .expect("entry");
                if r.m.is_dir(src) {
                    false
                } else {
                    r.link(src, big, &name);
                    true
                }
            }
            _ => r.create(big, &name, 0o644, false).is_some(),
        };
        if ok {
            names.push(name);
        }
        if i % 500 == 0 {
            r.what = format!("big: lookups after {i} entries");
            for _ in 0..20 {
                let n = names[rng.gen_range(0..names.len())].clone();
                r.lookup(big, &n);
                r.lookup(big, &big_name(&mut rng, i + 1_000_000, p.name_len));
            }
        }
    }
    r.what = "big: listing after creates".into();
    for chunk in [1usize, 7, 64] {
        r.readdir(big, chunk);
    }
    // Remove a third, rename some (within, over existing names, out and back), re-create.
    for k in 0..names.len() / 3 {
        r.step += 1;
        let i = rng.gen_range(0..names.len());
        let name = names.swap_remove(i);
        r.what = format!("big: remove {k}");
        let as_dir = r.m.lookup(big, &name).is_some_and(|c| r.m.is_dir(c));
        r.remove(big, &name, as_dir);
    }
    for k in 0..names.len() / 10 {
        r.step += 1;
        r.what = format!("big: rename {k}");
        let i = rng.gen_range(0..names.len());
        let j = rng.gen_range(0..names.len());
        let (a, b) = (names[i].clone(), names[j].clone());
        match k % 3 {
            0 => {
                r.rename(big, &a, big, &b);
                if r.m.lookup(big, &a).is_none() {
                    names.swap_remove(i);
                }
            }
            1 => {
                let fresh = big_name(&mut rng, 2_000_000 + k, p.name_len);
                r.rename(big, &a, big, &fresh);
                names[i] = fresh;
            }
            _ => {
                r.rename(big, &a, ROOT, b"visitor");
                r.rename(ROOT, b"visitor", big, &a);
            }
        }
    }
    for i in 0..p.entries / 4 {
        r.step += 1;
        r.what = format!("big: re-create {i}");
        let name = big_name(&mut rng, 3_000_000 + i, p.name_len);
        if r.create(big, &name, 0o600, false).is_some() {
            names.push(name);
        }
    }
    r.what = "big: listing after churn".into();
    for chunk in [2usize, 5, 100] {
        r.readdir(big, chunk);
    }
    r.remount();
    r.what = "big: listing after remount".into();
    r.readdir(big, 4);

    // Fragmented files: fragA written every other block (preallocation keeps files
    // written in turn contiguous, so holes are what splits it into >= 1000 extents),
    // fragB block by block in turn with it, fragC with holes inside blocks.
    r.what = "frag: create".into();
    let fa = r.create(ROOT, b"fragA", 0o644, false).expect("fragA");
    let fb = r.create(ROOT, b"fragB", 0o644, false).expect("fragB");
    let fc = r.create(ROOT, b"fragC", 0o644, false).expect("fragC");
    for k in 0..p.frags {
        r.step += 1;
        r.what = format!("frag: interleaved block {k}");
        r.write(
            fa,
            2 * k * bs(),
            &pattern(1, 2 * k * bs(), bs() as usize),
            false,
        );
        // Every other block of fragB straight to the device.
        r.write(
            fb,
            k * bs(),
            &pattern(2, k * bs(), bs() as usize),
            k % 2 == 1,
        );
        if k % 4 == 0 {
            r.write(
                fc,
                2 * k * bs() + 100,
                &pattern(3, 2 * k * bs() + 100, 300),
                false,
            );
        }
    }
    for k in 0..40u64 {
        r.step += 1;
        r.what = format!("frag: churn {k}");
        let off = rng.gen_range(0..p.frags * bs());
        let len = rng.gen_range(1..10 * bs());
        match k % 5 {
            0 => r.fallocate(fa, off, len, 2),
            1 => r.fallocate(fc, off, len, 2),
            2 => r.fallocate(fa, off, len, 1),
            3 => r.write(fa, off, &pattern(k as u8, off, len as usize), k % 10 == 3),
            _ => r.read(fa, off, len as usize),
        }
    }
    r.what = "frag: truncate".into();
    r.truncate(fb, p.frags * bs() / 2 + 1234);
    r.read(fb, 0, (p.frags * bs()) as usize);
    r.remount();
    let (img, _dir) = r.finish();
    // The case must have forced what it is for: a two-level index and a deep extent tree.
    let htree = debugfs(&img, "htree_dump /big");
    let levels = htree
        .lines()
        .find_map(|l| l.trim().strip_prefix("Indirect levels: "));
    let extents = debugfs(&img, "ex /fragA");
    // Lines look like " 1/ 2   3/  7 ..." (level/depth); leaves are at level == depth.
    let rows: Vec<(u32, u32)> = extents
        .lines()
        .filter_map(|l| {
            let (a, b) = l.split_once('/')?;
            Some((
                a.trim().parse().ok()?,
                b.split_whitespace().next()?.parse().ok()?,
            ))
        })
        .collect();
    let depth = rows.iter().map(|r| r.1).max().unwrap_or(0);
    let leaves = rows.iter().filter(|r| r.0 == r.1).count();
    println!(
        "big case {p:?}: htree indirect levels {levels:?}, fragA: {leaves} extents, depth {depth}"
    );
    assert_eq!(
        levels,
        Some("1"),
        "/big should have a two-level index:\n{htree}"
    );
    assert!(
        depth >= 2 && leaves >= 1000,
        "fragA should have a deep extent tree:\n{extents}"
    );
}
