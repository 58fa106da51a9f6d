//! Goal: `mkfs::min_size` gives a file system that holds the tree it was counted for,
//! with little to spare.
//! Method: random trees (small and large files, sparse files, a large directory, long
//! symlinks, xattrs that need their own block, hard links) are counted into
//! `TreeNeeds`, formatted at the size `min_size` gives with its options, and built
//! through the engine in walk order with no reserve, as `mkfs -d` builds them; every
//! write must succeed, fsck must find the image clean, and what is left free must be a
//! small part of the image. Shapes: the size classes' own choices (1 KiB blocks below
//! 512 MiB), 4 KiB blocks, ext3's block maps, and a slack.

use lanefs::mkfs::{self, min_size, MkfsOptions, Slack, TreeNeeds};
use lanefs::{fsck, Fs, Ino, MemDevice, MountOptions, Owner, XattrFlags, ROOT_INO};
use rand::{rngs::StdRng, Rng, SeedableRng};
use std::sync::Arc;

/// One entry of a generated tree.
enum Node {
    File { name: String, runs: Vec<(u64, u64)> },
    Dir { name: String, children: Vec<Node> },
    Symlink { name: String, target: String },
    Link { name: String, to: usize },
}

/// A random tree of about `n` entries; every file is numbered (for hard links) in
/// walk order.
fn tree(rng: &mut StdRng, n: usize, depth: u32) -> Vec<Node> {
    let mut out = Vec::new();
    let mut files = 0usize;
    for i in 0..n {
        let pick = rng.gen_range(0..100);
        let name = format!("e{i:05}{}", "x".repeat(rng.gen_range(0..40)));
        out.push(match pick {
            0..=59 => {
                files += 1;
                let size = match rng.gen_range(0..10) {
                    0 => 0,
                    1..=6 => rng.gen_range(1..20_000),
                    7 | 8 => rng.gen_range(20_000..300_000),
                    _ => rng.gen_range(300_000..3_000_000),
                };
                let runs = if size > 100_000 && rng.gen_bool(0.3) {
                    // Sparse: data at the start and the end only.
                    vec![(0, 5000), (size - 7000, 7000)]
                } else {
                    vec![(0, size)]
                };
                Node::File { name, runs }
            }
            60..=69 if depth < 3 => {
                let size = rng.gen_range(0..n / 2 + 1);
                Node::Dir {
                    name,
                    children: tree(rng, size, depth + 1),
                }
            }
            70..=84 => Node::Symlink {
                name,
                target: "t".repeat(rng.gen_range(1..200)),
            },
            85..=89 if files > 0 => Node::Link {
                name,
                to: rng.gen_range(0..files),
            },
            _ => {
                files += 1;
                Node::File {
                    name,
                    runs: vec![(0, rng.gen_range(0..5000))],
                }
            }
        });
    }
    out
}

/// The xattr every third file gets: large enough to need its own block.
const BIG_XATTR: usize = 700;

/// Count `nodes` (in directory `dir`) into `needs`.
fn count(nodes: &[Node], dir: usize, needs: &mut TreeNeeds, nth: &mut usize) {
    for node in nodes {
        match node {
            Node::File { name, runs } => {
                needs.entry(dir, name.len());
                needs.inode();
                needs.file(runs.clone());
                if (*nth).is_multiple_of(3) {
                    needs.xattrs([("user.big".len(), BIG_XATTR)]);
                }
                *nth += 1;
            }
            Node::Dir { name, children } => {
                needs.entry(dir, name.len());
                needs.inode();
                let d = needs.dir();
                count(children, d, needs, nth);
            }
            Node::Symlink { name, target } => {
                needs.entry(dir, name.len());
                needs.inode();
                needs.symlink(target.len());
            }
            Node::Link { name, .. } => needs.entry(dir, name.len()),
        }
    }
}

/// Build `nodes` in `dir`; `made` collects the files' inodes in walk order.
fn build(fs: &Fs, nodes: &[Node], dir: Ino, made: &mut Vec<Ino>) {
    let own = Owner::default();
    for node in nodes {
        match node {
            Node::File { name, runs } => {
                let ino = fs.create(dir, name.as_bytes(), 0o644, own).unwrap().ino;
                for &(off, len) in runs {
                    let data = vec![0xA5u8; len as usize];
                    let n = fs.write(ino, off, &data).unwrap_or_else(|e| {
                        panic!("writing {name} at {off}: {e}");
                    });
                    assert_eq!(n, len as usize);
                }
                if made.len().is_multiple_of(3) {
                    let value = vec![7u8; BIG_XATTR];
                    fs.setxattr(ino, b"user.big", &value, XattrFlags::default())
                        .unwrap_or_else(|e| panic!("xattr of {name}: {e}"));
                }
                fs.release(ino).unwrap();
                made.push(ino);
            }
            Node::Dir { name, children } => {
                let ino = fs.mkdir(dir, name.as_bytes(), 0o755, own).unwrap().ino;
                build(fs, children, ino, made);
            }
            Node::Symlink { name, target } => {
                fs.symlink(dir, name.as_bytes(), target.as_bytes(), own)
                    .unwrap_or_else(|e| panic!("symlink {name}: {e}"));
            }
            Node::Link { name, to } => {
                fs.link(made[*to], dir, name.as_bytes()).unwrap();
            }
        }
    }
}

/// Size `nodes` with `opts` and `slack`, build them, check; the free blocks left and
/// the image's blocks.
fn fit_and_build(nodes: &[Node], opts: &MkfsOptions, slack: Slack) -> (u64, u64, u32) {
    let mut needs = TreeNeeds::new();
    count(nodes, 0, &mut needs, &mut 0);
    let fit = min_size(opts, &needs, slack).expect("min_size");
    let dev = Arc::new(MemDevice::new(fit.size));
    mkfs::format(&*dev, &fit.opts).expect("format");
    let mopts = MountOptions {
        reserved_blocks: Some(0),
        ..MountOptions::default()
    };
    let fs = Fs::mount(dev.clone(), mopts).expect("mount");
    build(&fs, nodes, ROOT_INO, &mut Vec::new());
    fs.sync().unwrap();
    let st = fs.statfs().unwrap();
    let left = st.free_blocks;
    fs.unmount().unwrap();
    let report = fsck::check(&*dev, &fsck::FsckOptions::default()).unwrap();
    assert!(report.is_clean(), "fsck: {report:?}");
    (left, st.blocks, st.block_size)
}

/// The blocks left free are at most the margin's share plus `extra`.
fn assert_tight(left: u64, blocks: u64, extra: u64) {
    assert!(
        left <= blocks / 20 + 200 + extra,
        "{left} of {blocks} blocks left free: the estimate is loose"
    );
}

#[test]
fn random_trees_fit_their_minimum() {
    for seed in 0..6u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let nodes = tree(&mut rng, 300, 0);
        let (left, blocks, bs) = fit_and_build(&nodes, &MkfsOptions::mke2fs(), Slack::Bytes(0));
        eprintln!("seed {seed}: {left} of {blocks} blocks of {bs} free");
        assert_tight(left, blocks, 0);
    }
}

#[test]
fn four_k_blocks_and_block_maps_fit_too() {
    let mut rng = StdRng::seed_from_u64(42);
    let nodes = tree(&mut rng, 400, 0);
    let four_k = MkfsOptions {
        block_size: Some(4096),
        ..MkfsOptions::mke2fs()
    };
    let (left, blocks, _) = fit_and_build(&nodes, &four_k, Slack::Bytes(0));
    assert_tight(left, blocks, 0);
    let ext3 = MkfsOptions {
        fs_type: Some("ext3".into()),
        ..MkfsOptions::mke2fs()
    };
    let (left, blocks, _) = fit_and_build(&nodes, &ext3, Slack::Bytes(0));
    assert_tight(left, blocks, 0);
}

#[test]
fn a_large_directory_fits() {
    let nodes = vec![Node::Dir {
        name: "big".into(),
        children: (0..6000)
            .map(|i| Node::File {
                name: format!("a-rather-long-file-name-{i:06}"),
                runs: vec![(0, 100)],
            })
            .collect(),
    }];
    let (left, blocks, _) = fit_and_build(&nodes, &MkfsOptions::mke2fs(), Slack::Bytes(0));
    assert_tight(left, blocks, 0);
}

#[test]
fn slack_is_left_free() {
    let mut rng = StdRng::seed_from_u64(7);
    let nodes = tree(&mut rng, 200, 0);
    let (left, blocks, bs) = fit_and_build(&nodes, &MkfsOptions::mke2fs(), Slack::Bytes(8 << 20));
    assert!(
        left * u64::from(bs) >= 8 << 20,
        "{left} blocks of {bs} left"
    );
    assert_tight(left, blocks, (8 << 20) / u64::from(bs));
    // Half the minimum's bytes more are left free (the block size may differ between
    // the two: the slack can move the size into the next class).
    let (_, min_blocks, min_bs) = fit_and_build(&nodes, &MkfsOptions::mke2fs(), Slack::Bytes(0));
    let (left, _, bs) = fit_and_build(&nodes, &MkfsOptions::mke2fs(), Slack::Percent(50));
    let min_bytes = min_blocks * u64::from(min_bs);
    assert!(
        left * u64::from(bs) >= min_bytes / 2,
        "{left} blocks of {bs} left, the minimum is {min_bytes} bytes"
    );
}

#[test]
fn the_minimum_is_tight_against_the_next_step_down() {
    // The size below the answer does not fit by the same count: the search found the
    // edge, not merely a size that fits.
    let mut rng = StdRng::seed_from_u64(3);
    let nodes = tree(&mut rng, 200, 0);
    let mut needs = TreeNeeds::new();
    count(&nodes, 0, &mut needs, &mut 0);
    let opts = MkfsOptions::mke2fs();
    let fit = min_size(&opts, &needs, Slack::Bytes(0)).unwrap();
    let below = mkfs::capacity(&fit.opts, fit.size - 4096);
    if let Ok(cap) = below {
        assert!(
            cap.free_blocks < needs.blocks(&cap) + needs.blocks(&cap) / 256 + 64
                || cap.inodes < needs.inodes() + 11,
            "{} bytes would fit too",
            fit.size - 4096
        );
    }
}
