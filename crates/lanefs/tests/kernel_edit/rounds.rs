//! The scripted steps of the differential run, by round: the kernel builds every structure,
//! then lanefs and kernel rounds alternate, each growing, shrinking, emptying, renaming over
//! and removing what the other side built.

use super::*;

impl World {
    // -----------------------------------------------------------------------------------
    // Scripted steps, by round.

    /// The kernel builds every structure.
    pub(super) fn kernel_builds(&mut self) {
        self.mount_kernel();
        // A 2,000-entry htree of files of a few bytes.
        self.mkdir("/h");
        for i in 0..2000 {
            let extra = self.rng.gen_range(0..30);
            let p = format!("/h/k{i:05}{}", rand_chars(&mut self.rng, extra));
            let len = self.rng.gen_range(0..=60);
            self.create(p, len);
        }
        // Linear directories.
        for d in ["/lin1", "/lin2", "/lin3"] {
            self.mkdir(d);
            for _ in 0..self.rng.gen_range(3..10) {
                let p = format!("{d}/{}", self.rand_name(d));
                let len = self.rng.gen_range(0..3000);
                self.create(p, len);
            }
        }
        self.mkdir("/lin2/sub");
        self.create("/lin2/sub/inner".into(), 10);
        self.mkdir("/lin3/empty");
        // Files of 0 to 60 bytes.
        self.mkdir("/tiny");
        for i in 0..=60 {
            self.create(format!("/tiny/t{i:02}"), i);
        }
        // Fast (in the inode) and slow (a block) symlinks.
        self.mkdir("/sym");
        for len in [1usize, 2, 30, 58, 59, 60, 61, 100, 1000, 4000, 4095] {
            let target = rand_chars(&mut self.rng, len).into_bytes();
            self.op(Op::Symlink {
                path: format!("/sym/s{len}"),
                target,
            });
        }
        // An htree emptied again (lanefs renames a directory over it).
        self.mkdir("/hx");
        for _ in 0..800 {
            let p = format!("/hx/{}", self.rand_name("/hx"));
            self.create(p, 0);
        }
        self.unlink_some("/hx", 800);
        // Hard links across directories.
        for d in ["/links", "/links/a", "/links/b"] {
            self.mkdir(d);
        }
        for i in 0..10 {
            let from = format!("/links/a/l{i}");
            let len = self.rng.gen_range(0..5000);
            self.create(from.clone(), len);
            for _ in 0..self.rng.gen_range(1..=4) {
                let dir = ["/links/a", "/links/b", "/h", "/lin1"][self.rng.gen_range(0..4)];
                let to = format!("{dir}/{}", self.rand_name(dir));
                self.op(Op::Link {
                    from: from.clone(),
                    to,
                });
            }
        }
        // Extent trees.
        self.mkdir("/ext");
        self.create("/ext/kfrag".into(), 0);
        self.alternate_blocks("/ext/kfrag", 0, 1500);
        // 1,500 unwritten extents of 3 blocks (fallocate, then punch every 4th block).
        self.create("/ext/unw".into(), 0);
        let mut ops = vec![Op::Falloc {
            path: "/ext/unw".into(),
            off: 0,
            len: 6000 * BS,
            keep_size: false,
            punch: false,
        }];
        for g in 0..1500 {
            ops.push(Op::Falloc {
                path: "/ext/unw".into(),
                off: (4 * g + 3) * BS,
                len: BS,
                keep_size: true,
                punch: true,
            });
        }
        self.kernel_xfs_io("/ext/unw", ops);
        // Holes: a sparse file.
        self.create("/ext/sparse".into(), 10);
        self.op(Op::Truncate {
            path: "/ext/sparse".into(),
            size: 20 << 20,
        });
        for _ in 0..3 {
            let off = self.rng.gen_range(0..20 << 20);
            let len = self.rng.gen_range(1..100_000);
            let data = self.rand_data(len);
            self.op(Op::Write {
                path: "/ext/sparse".into(),
                off,
                data,
            });
        }
        // Unwritten blocks past the end of the file, and one long unwritten extent.
        self.create("/ext/keep".into(), 10_000);
        self.create("/ext/unw1".into(), 0);
        let ops = vec![Op::Falloc {
            path: "/ext/keep".into(),
            off: 8192,
            len: 2 << 20,
            keep_size: true,
            punch: false,
        }];
        self.kernel_xfs_io("/ext/keep", ops);
        let ops = vec![Op::Falloc {
            path: "/ext/unw1".into(),
            off: 0,
            len: 64 * BS,
            keep_size: false,
            punch: false,
        }];
        self.kernel_xfs_io("/ext/unw1", ops);
        self.check("the kernel built the tree");
        let (levels, count) = self.htree("kernel /h", "/h");
        assert!(count > 1, "the kernel did not index /h");
        self.note(&format!("kernel /h: {count} leaves, {levels} levels"));
        for f in ["/ext/kfrag", "/ext/unw"] {
            let (_, depth) = self.shape("kernel built", f);
            assert_eq!(depth, 2, "the kernel's {f} is not a depth-2 tree");
        }

        // Long names: /big's root index filled nearly full (lanefs adds the level), /big3
        // grown by the kernel to two levels (lanefs splits the kernel's index node).
        for d in ["/big", "/big3"] {
            self.mkdir(d);
            self.fill_root(d, 24);
        }
        self.add_level("/big3");
        self.check("the kernel filled /big's root index and grew /big3");
        let (_, count) = self.htree("kernel /big3", "/big3");
        if count > 1 {
            self.note("NOTE: the kernel split /big3's index node itself");
        }
    }

    /// lanefs grows the kernel's /big to two index levels and splits an index node; builds
    /// its own two-level /big2 and depth-2 /ext/lfrag; edits the kernel's extent trees.
    pub(super) fn lanefs_round0(&mut self) {
        self.mount_lanefs();
        self.add_level("/big");
        self.split_node("/big");
        self.split_node("/big3");
        // lanefs's own two-level index, left just after the level is added: the kernel
        // splits its index node next.
        self.mkdir("/big2");
        self.fill_root("/big2", 24);
        self.add_level("/big2");
        self.mkdir("/lin4");
        for _ in 0..5 {
            let p = format!("/lin4/{}", self.rand_name("/lin4"));
            self.create(p, 20);
        }
        self.make_indexed("/lin1");

        self.create("/ext/lfrag".into(), 0);
        self.alternate_blocks("/ext/lfrag", 0, 1500);
        let (_, depth) = self.shape("lanefs built", "/ext/lfrag");
        assert_eq!(depth, 2, "lanefs's /ext/lfrag is not a depth-2 tree");

        for k in 0..4 {
            self.edit_frag("/ext/kfrag", 25);
            self.shape(
                &format!("lanefs edits the kernel's tree ({k})"),
                "/ext/kfrag",
            );
        }
        for k in 0..4 {
            self.write_unwritten("/ext/unw", 1500, 20);
            self.shape(
                &format!("lanefs writes into unwritten extents ({k})"),
                "/ext/unw",
            );
        }
        for (off, len) in [(10 * BS + 1000, 100), (0, 10), (63 * BS + 4000, 96)] {
            let data = self.rand_data(len);
            self.op(Op::Write {
                path: "/ext/unw1".into(),
                off,
                data,
            });
            self.shape("lanefs splits an unwritten extent", "/ext/unw1");
        }
        // Into the unwritten blocks past the end of /ext/keep, and into /ext/sparse's holes.
        for off in [20_000u64, 12_288, 1 << 20] {
            let data = self.rand_data(5000);
            self.op(Op::Write {
                path: "/ext/keep".into(),
                off,
                data,
            });
        }
        for _ in 0..10 {
            let op = {
                let path = "/ext/sparse".to_string();
                if self.rng.gen_bool(0.7) {
                    self.rand_write(path)
                } else {
                    self.rand_falloc(path)
                }
            };
            self.op(op);
        }
        self.check("lanefs wrote into holes and unwritten blocks");
    }

    /// The kernel edits lanefs's two-level /big2 and depth-2 /ext/lfrag.
    pub(super) fn kernel_round1(&mut self) {
        self.mount_kernel();
        self.split_node("/big2");
        self.long_creates("/big2", 300);
        self.unlink_some("/big2", 300);
        self.make_indexed("/lin4");
        // The kernel moves lanefs's htree across directories (its ".." in the dx root).
        self.op(Op::Rename {
            from: "/big2".into(),
            to: "/lin3/big2_moved".into(),
        });
        self.check("the kernel edited and moved /big2");
        self.op(Op::Rename {
            from: "/lin3/big2_moved".into(),
            to: "/big2".into(),
        });

        let size = self.model.size("/ext/lfrag");
        self.op(Op::Truncate {
            path: "/ext/lfrag".into(),
            size: size * 2 / 3 + 1234,
        });
        self.shape("the kernel truncates lanefs's tree", "/ext/lfrag");
        let blocks = self.blocks("/ext/lfrag");
        let mut ops = Vec::new();
        for _ in 0..40 {
            ops.push(Op::Falloc {
                path: "/ext/lfrag".into(),
                off: self.rng.gen_range(0..blocks) * BS,
                len: self.rng.gen_range(1..=20) * BS,
                keep_size: true,
                punch: true,
            });
        }
        self.kernel_xfs_io("/ext/lfrag", ops);
        self.shape("the kernel punches lanefs's tree", "/ext/lfrag");
        let blocks = self.blocks("/ext/lfrag");
        self.alternate_blocks("/ext/lfrag", blocks + 1, 100);
        self.edit_frag("/ext/lfrag", 30);
        self.shape("the kernel appends to lanefs's tree", "/ext/lfrag");

        self.unlink_some("/big", 200);
        self.long_creates("/big", 200);
        self.check("the kernel edited lanefs's /big");
    }

    /// lanefs shrinks the kernel's tree, edits its own tree the kernel edited, empties
    /// htree leaves, replaces symlinks, drops hard links, edits tiny files, renames.
    pub(super) fn lanefs_round1(&mut self) {
        self.mount_lanefs();
        for blocks in [2100u64, 1200, 700, 300, 7, 0] {
            let size = (blocks * BS).min(self.model.size("/ext/kfrag"));
            self.op(Op::Truncate {
                path: "/ext/kfrag".into(),
                size,
            });
            self.shape(
                &format!("lanefs truncates the kernel's tree to {blocks} blocks"),
                "/ext/kfrag",
            );
        }
        self.alternate_blocks("/ext/kfrag", 0, 10);
        for k in 0..3 {
            self.edit_frag("/ext/lfrag", 25);
            self.shape(&format!("lanefs edits its tree again ({k})"), "/ext/lfrag");
        }

        // Empty most leaves of the kernel's /h, then fill them again.
        let mut names: Vec<String> = self
            .model
            .children("/h")
            .filter(|(_, n)| !matches!(n, Node::Dir { .. }))
            .map(|(k, _)| k.clone())
            .collect();
        names.shuffle(&mut self.rng);
        let n = names.len() * 19 / 20;
        for (i, path) in names.into_iter().take(n).enumerate() {
            self.op(Op::Unlink { path });
            if i % 400 == 399 {
                self.check("lanefs empties /h's leaves");
            }
        }
        self.check("lanefs emptied most of /h");
        for _ in 0..300 {
            let p = format!("/h/{}", self.rand_name("/h"));
            let len = self.rng.gen_range(0..100);
            self.create(p, len);
        }
        self.check("lanefs refills /h");

        // Symlinks: replaced in place or by a rename over them, fast <-> slow.
        let links: Vec<(String, usize)> = self
            .model
            .children("/sym")
            .filter_map(|(k, n)| match n {
                Node::Symlink { target } => Some((k.clone(), target.len())),
                _ => None,
            })
            .collect();
        for (i, (path, len)) in links.into_iter().enumerate() {
            let new_len = if len < 60 {
                self.rng.gen_range(60..4096)
            } else {
                self.rng.gen_range(1..60)
            };
            let target = rand_chars(&mut self.rng, new_len).into_bytes();
            if i % 2 == 0 {
                self.op(Op::Unlink { path: path.clone() });
                self.op(Op::Symlink { path, target });
            } else {
                let tmp = format!("/sym/{}", self.rand_name("/sym"));
                self.op(Op::Symlink {
                    path: tmp.clone(),
                    target,
                });
                self.op(Op::Rename {
                    from: tmp,
                    to: path,
                });
            }
        }
        self.check("lanefs replaced the kernel's symlinks");

        // Hard links: one at a time until each file is gone.
        let mut linked: Vec<String> = self
            .model
            .tree
            .iter()
            .filter(|(_, n)| match n {
                Node::File { fid } => self.model.files[fid].links > 1,
                _ => false,
            })
            .map(|(k, _)| k.clone())
            .collect();
        linked.shuffle(&mut self.rng);
        for (i, path) in linked.into_iter().enumerate() {
            if !self.is_frozen(&path) && self.model.get(&path).is_some() {
                self.op(Op::Unlink { path });
            }
            if i % 6 == 5 {
                self.check("lanefs drops hard links");
            }
        }
        self.check("lanefs dropped every hard link");

        // Tiny files: appended, overwritten, cut, grown.
        for i in 0..=60 {
            let path = format!("/tiny/t{i:02}");
            if self.model.get(&path).is_none() {
                continue;
            }
            let size = self.model.size(&path);
            let op = match i % 4 {
                0 => Op::Write {
                    path,
                    off: size,
                    data: self.rand_data(7),
                },
                1 => Op::Truncate { path, size: 0 },
                2 => Op::Write {
                    path,
                    off: 0,
                    data: self.rand_data(3),
                },
                _ => Op::Truncate {
                    path,
                    size: size + 100,
                },
            };
            self.op(op);
        }
        self.check("lanefs edited tiny files");

        // Renames: within the htree over existing names, across htree and linear
        // directories (over existing targets too), directories into an htree, a directory
        // over an empty one.
        for i in 0..40 {
            let (a, b) = [
                ("/h", "/h"),
                ("/h", "/lin1"),
                ("/lin1", "/h"),
                ("/lin2", "/big"),
                ("/big", "/lin3"),
                ("/big2", "/h"),
                ("/lin3", "/lin3"),
                ("/h", "/big2"),
            ][i % 8];
            let Some(from) = self
                .model
                .children(a)
                .filter(|(_, n)| !matches!(n, Node::Dir { .. }))
                .map(|(k, _)| k.clone())
                .collect::<Vec<_>>()
                .choose(&mut self.rng)
                .cloned()
            else {
                continue;
            };
            let over: Vec<String> = self
                .model
                .children(b)
                .filter(|(k, n)| !matches!(n, Node::Dir { .. }) && **k != from)
                .map(|(k, _)| k.clone())
                .collect();
            let to = match over.choose(&mut self.rng) {
                Some(t) if i % 3 != 0 => t.clone(),
                _ => format!("{b}/{}", self.rand_name(b)),
            };
            self.op(Op::Rename { from, to });
        }
        // A linear directory into the htree and on over an empty directory; a directory
        // out of the two-level htree into a linear one.
        let into_h = format!("/h/{}", self.rand_name("/h"));
        self.op(Op::Rename {
            from: "/lin2/sub".into(),
            to: into_h.clone(),
        });
        let to = if self.model.is_empty_dir("/lin3/empty") {
            "/lin3/empty".to_string()
        } else {
            format!("/lin3/{}", self.rand_name("/lin3"))
        };
        self.op(Op::Rename { from: into_h, to });
        // A directory over the kernel's emptied htree; lanefs's own emptied htree for the
        // kernel to rename over.
        self.mkdir("/lin1/over_hx");
        self.create("/lin1/over_hx/f".into(), 9);
        self.op(Op::Rename {
            from: "/lin1/over_hx".into(),
            to: "/hx".into(),
        });
        self.mkdir("/hy");
        for _ in 0..800 {
            let p = format!("/hy/{}", self.rand_name("/hy"));
            self.create(p, 0);
        }
        self.unlink_some("/hy", 800);
        let in_big = format!("/big/{}", self.rand_name("/big"));
        self.mkdir(&in_big);
        let to = format!("/lin1/{}", self.rand_name("/lin1"));
        self.op(Op::Rename { from: in_big, to });
        self.check("lanefs renamed within and across directories");
        // lanefs moves the kernel's htree across directories and back (".." in its root).
        self.op(Op::Rename {
            from: "/h".into(),
            to: "/lin2/h_moved".into(),
        });
        self.check("lanefs moved the kernel's /h");
        self.op(Op::Rename {
            from: "/lin2/h_moved".into(),
            to: "/h".into(),
        });
    }

    /// The kernel fills /h's emptied leaves and appends to the tree lanefs shrank.
    pub(super) fn kernel_round2(&mut self) {
        self.mount_kernel();
        for _ in 0..500 {
            let p = format!("/h/{}", self.rand_name("/h"));
            let len = self.rng.gen_range(0..100);
            self.create(p, len);
        }
        self.unlink_some("/h", 100);
        self.mkdir("/lin3/over_hy");
        self.op(Op::Rename {
            from: "/lin3/over_hy".into(),
            to: "/hy".into(),
        });
        let blocks = self.blocks("/ext/kfrag");
        self.alternate_blocks("/ext/kfrag", blocks + 3, 400);
        self.check("the kernel refilled /h and appended to /ext/kfrag");
        // The kernel shrinks lanefs's tree back to the inode, lanefs grows it again later.
        for blocks in [600u64, 5] {
            let size = (blocks * BS).min(self.model.size("/ext/lfrag"));
            self.op(Op::Truncate {
                path: "/ext/lfrag".into(),
                size,
            });
            self.shape(
                &format!("the kernel truncates lanefs's tree to {blocks} blocks"),
                "/ext/lfrag",
            );
        }
    }

    /// Remove everything below `dir` and `dir` itself, deepest first.
    pub(super) fn remove_tree(&mut self, dir: &str) {
        let mut paths: Vec<(String, bool)> = self
            .model
            .below(dir)
            .map(|(k, n)| (k.clone(), matches!(n, Node::Dir { .. })))
            .collect();
        paths.sort_by_key(|(k, _)| std::cmp::Reverse(k.matches('/').count()));
        for (path, is_dir) in paths {
            self.op(if is_dir {
                Op::Rmdir { path }
            } else {
                Op::Unlink { path }
            });
        }
        self.op(Op::Rmdir { path: dir.into() });
    }

    /// lanefs removes the kernel's htree /h entirely, and half of /big2.
    pub(super) fn lanefs_round2(&mut self) {
        self.mount_lanefs();
        self.pinned.remove("/h");
        self.remove_tree("/h");
        self.check("lanefs removed the kernel's htree /h");
        self.pinned.remove("/big3");
        self.remove_tree("/big3");
        self.check("lanefs removed the kernel's two-level htree /big3");
        self.unlink_some("/big2", self.names_in("/big2").len() / 2);
        self.check("lanefs emptied half of /big2");
        let blocks = self.blocks("/ext/lfrag");
        self.alternate_blocks("/ext/lfrag", blocks + 1, 1400);
        self.shape("lanefs grows the tree the kernel shrank", "/ext/lfrag");
    }

    /// The kernel removes /big, which lanefs grew to two levels.
    pub(super) fn kernel_round3(&mut self) {
        self.mount_kernel();
        self.pinned.remove("/big");
        self.remove_tree("/big");
        self.check("the kernel removed /big");
    }
}
