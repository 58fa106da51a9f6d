//! The whole-tree comparison (every file's bytes, every directory's entries, the two
//! exact counters) and operand resolution (an `Op`'s indexes to model nodes).

use super::*;

impl Runner {
    // --- whole-tree comparison ---

    pub(super) fn verify_file(&self, id: Id) {
        let f = self.m.file(id);
        let ino = self.m.ino(id);
        let fs = self.fs();
        let mut ranges: Vec<(u64, u64)> = Vec::new();
        if f.size <= WHOLE_COMPARE {
            ranges.push((0, f.size));
        } else {
            // Sparse and huge: each data block with its neighbours, and the tail.
            for &b in f.pages.keys() {
                ranges.push((b.saturating_sub(1) * bs(), (b + 2) * bs()));
            }
            ranges.push((f.size.saturating_sub(3 * bs() + 17), f.size + 100));
        }
        for (a, b) in ranges {
            let mut buf = vec![0xEEu8; (b - a) as usize];
            let n = fs.read(ino, a, &mut buf);
            let n = n.unwrap_or_else(|e| panic!("{}: read of node {id} failed: {e:?}", self.ctx()));
            self.same_bytes(&buf[..n], &f.read(a, (b - a) as usize), a);
        }
    }

    pub(super) fn verify_all(&self) {
        let fs = self.fs();
        let mut blocks = 0;
        for (&id, n) in &self.m.nodes {
            let a = fs.getattr(n.ino);
            let a =
                a.unwrap_or_else(|e| panic!("{}: getattr of node {id} failed: {e:?}", self.ctx()));
            self.check_attr(id, &a);
            blocks += a.blocks / sectors();
            match &n.body {
                Body::File(_) => self.verify_file(id),
                Body::Dir { entries, .. } => {
                    let subdirs = entries.values().filter(|&&c| self.m.is_dir(c)).count();
                    assert_eq!(n.nlink as usize, 2 + subdirs, "model nlink of node {id}");
                    let got = fs.readdir(n.ino, 0, usize::MAX);
                    let got = got.unwrap_or_else(|e| {
                        panic!("{}: readdir of {id} failed: {e:?}", self.ctx())
                    });
                    self.same_listing(&got, &self.want_entries(id), usize::MAX);
                }
                Body::Symlink(_) => self.readlink(id),
                Body::Special { .. } => {}
            }
        }
        let st = fs.statfs().expect("statfs");
        assert_eq!(
            st.free_inodes + self.m.nodes.len() as u64,
            self.inodes_k,
            "{}: free inodes {} with {} live inodes",
            self.ctx(),
            st.free_inodes,
            self.m.nodes.len()
        );
        assert_eq!(
            st.free_blocks + blocks,
            self.blocks_k,
            "{}: free blocks {} with {blocks} blocks in inodes (leak or double count)",
            self.ctx(),
            st.free_blocks
        );
    }

    /// Compare everything, unmount, and require a clean `e2fsck -fn`. Returns the image
    /// and the directory that holds it (the image goes when that is dropped).
    pub(super) fn finish(mut self) -> (PathBuf, tempfile::TempDir) {
        self.what = "finish".into();
        self.verify_all();
        let fs = self.fs.take().expect("mounted");
        fs.unmount()
            .unwrap_or_else(|e| panic!("final unmount failed: {e:?}"));
        common::assert_fsck_clean(&self.img);
        (self.img, self.dir)
    }

    // --- operand resolution ---

    /// A directory, or (1 time in 16) a linked non-directory to provoke NotDir.
    pub(super) fn pick_dir(&self, s: u16) -> Id {
        let other = self.m.ids(|n| !n.is_dir() && n.nlink > 0);
        if s % 16 == 15 && !other.is_empty() {
            return other[(s / 16) as usize % other.len()];
        }
        pick(&self.m.ids(Node::is_dir), s).expect("root is a directory")
    }

    /// A name for `dir`; never one too long where the directory is not one (the order of
    /// those two errors differs between Linux and lanefs and is not a property).
    pub(super) fn pick_name(&self, dir: Id, n: u8) -> Vec<u8> {
        if n == 7 && !self.m.is_dir(dir) {
            name_of(0)
        } else {
            name_of(n)
        }
    }

    /// A file, or (if `any`) any node; for non-files the offset stays small so that
    /// FileTooBig and IsDir never compete.
    pub(super) fn pick_data(&self, s: u16, any: bool, off: u64) -> Option<(Id, u64)> {
        let id = if any {
            pick(&self.m.ids(|_| true), s)?
        } else {
            pick(&self.m.ids(|n| matches!(n.body, Body::File(_))), s)?
        };
        let off = if self.not_file(id).is_some() {
            off % 65536
        } else {
            off
        };
        Some((id, off))
    }
}
