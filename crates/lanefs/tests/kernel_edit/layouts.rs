//! Other mkfs layouts: a compact round trip of both sides (`World::compact_round_trip`, after
//! each side filled most of the disk with `World::fill`) on images made with other options
//! lanefs accepts, and the backup superblocks of a `sparse_super2` image.

use super::*;

impl World {
    /// A compact round trip: the kernel builds a 3,000-entry directory, a depth-1 extent
    /// tree and symlinks; lanefs inserts, deletes, renames, edits the tree and does random
    /// operations; the kernel does random operations; lanefs removes the directory.
    fn compact_round_trip(&mut self, label: &str) {
        // lanefs fills most of the disk (every group's bitmap gets initialized), then
        // the kernel, each checked and removed.
        self.mount_lanefs();
        self.fill(label, 150);
        self.mount_kernel();
        self.fill(label, 150);
        self.mkdir("/d");
        for _ in 0..3000 {
            let p = format!("/d/{}", self.rand_name("/d"));
            let len = self.rng.gen_range(0..=60);
            self.create(p, len);
        }
        self.create("/f".into(), 0);
        self.alternate_blocks("/f", 0, 400);
        for len in [10usize, 59, 60, 700] {
            let target = rand_chars(&mut self.rng, len).into_bytes();
            self.op(Op::Symlink {
                path: format!("/s{len}"),
                target,
            });
        }
        self.check(&format!("{label}: the kernel built"));
        self.mount_lanefs();
        for _ in 0..300 {
            let p = format!("/d/{}", self.rand_name("/d"));
            self.create(p, 5);
        }
        self.unlink_some("/d", 1000);
        for i in 0..20 {
            let from = self.names_in("/d")[i * 7].clone();
            let to = if i % 2 == 0 {
                format!("/d/{}", self.rand_name("/d"))
            } else {
                format!("/{}", self.rand_name(""))
            };
            self.op(Op::Rename { from, to });
        }
        self.edit_frag("/f", 40);
        self.op(Op::Unlink {
            path: "/s60".into(),
        });
        self.check(&format!("{label}: lanefs edited"));
        self.frozen.clear();
        self.pinned = ["/d".to_string()].into();
        self.hot = vec!["/d".into()];
        self.random_ops(250, &format!("{label}: lanefs"));
        self.mount_kernel();
        self.random_ops(120, &format!("{label}: kernel"));
        self.mount_lanefs();
        self.pinned.clear();
        self.remove_tree("/d");
        self.check(&format!("{label}: lanefs removed /d"));
        if let Err(e) = self.unmount() {
            self.fail(e);
        }
    }
}

impl World {
    /// Files of `mib` MiB in all, written in 1 MiB pieces, checked, then removed.
    fn fill(&mut self, label: &str, mib: usize) {
        for f in 0..mib / 30 {
            let path = format!("/fill{f}");
            self.create(path.clone(), 0);
            for k in 0..30u64 {
                let data = self.rand_data(1 << 20);
                self.op(Op::Write {
                    path: path.clone(),
                    off: k << 20,
                    data,
                });
            }
        }
        self.check(&format!("{label}: {} filled {mib} MiB", self.side_name()));
        for f in 0..mib / 30 {
            self.op(Op::Unlink {
                path: format!("/fill{f}"),
            });
        }
    }
}

/// The same structures on images `mkfs.ext4` makes with other options lanefs accepts: no
/// dir_index (the kernel's directories stay linear over many blocks), 32-byte group
/// descriptors (no 64bit), no flex_bg, a checksum seed kept across a UUID change
/// (metadata_csum_seed), 128-byte inodes, and no metadata_csum.
#[test]
fn kernel_edit_mkfs_variants() {
    let test = "kernel_edit_mkfs_variants";
    let _wd = watchdog(test, 900);
    let td = tempfile::tempdir().expect("tempdir");
    if !kernel_ready(test, td.path(), &["xfs_io", "tune2fs"]) {
        return;
    }
    let t0 = Instant::now();
    let variants: [(&str, &[&str]); 10] = [
        ("many_groups", &["-g", "4096"]),
        (
            "no_sparse_super",
            &["-O", "^sparse_super,^resize_inode", "-g", "4096"],
        ),
        ("no_resize_inode", &["-O", "^resize_inode", "-g", "4096"]),
        ("no_journal", &["-O", "^has_journal"]),
        ("no_dir_index", &["-O", "^dir_index"]),
        ("no_64bit", &["-O", "^64bit"]),
        ("no_flex_bg", &["-O", "^flex_bg"]),
        ("csum_seed", &["-O", "metadata_csum_seed"]),
        ("inode128", &["-I", "128"]),
        ("no_metadata_csum", &["-O", "^metadata_csum"]),
    ];
    for (k, (name, args)) in variants.iter().enumerate() {
        let img = common::mkfs_image_args(td.path(), &format!("{name}.img"), 256 << 20, args);
        if *name == "csum_seed" {
            run(Command::new("tune2fs").args(["-U", "random"]).arg(&img))
                .expect("tune2fs -U random");
        }
        let mut w = World::new(td.path(), img, 20 + k as u64, 1000);
        w.compact_round_trip(name);
        w.note(&format!("{test}: {name}: {} checks", w.checks));
    }
    println!("{test}: done ({:.1} s)", t0.elapsed().as_secs_f64());
}

/// On a `sparse_super2` image the backup superblocks live only in the two groups
/// `s_backup_bgs` names (Linux's ext4_bg_has_super). Placing them by the `sparse_super`
/// rule (groups 0, 1 and powers of 3, 5, 7), as lanefs once did, made an uninitialized
/// group's bitmap mark blocks used that nothing owns (e2fsck: "Block bitmap differences:
/// -(12288--12544) -(20480--20736) -(36864--37120)", groups 3, 5 and 9 of 16) and could
/// leave the last group's backup superblock free to allocate.
#[test]
fn kernel_sparse_super2_backups() {
    let test = "kernel_sparse_super2_backups";
    let _wd = watchdog(test, 300);
    let td = tempfile::tempdir().expect("tempdir");
    if !kernel_ready(test, td.path(), &["xfs_io"]) {
        return;
    }
    let img = common::mkfs_image_args(
        td.path(),
        "ss2.img",
        256 << 20,
        &["-O", "sparse_super2", "-g", "4096"],
    );
    let mut w = World::new(td.path(), img, 21, 1000);
    w.mount_lanefs();
    w.fill("sparse_super2", 150);
}
