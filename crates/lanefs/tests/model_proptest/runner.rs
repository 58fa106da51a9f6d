//! The runner: one image, the engine mounted on it, the model beside it; how results
//! and errors are compared, and the namespace operations (create, mkdir, mknod, symlink,
//! link, remove, rename).

use super::*;

thread_local! {
    /// Compared results per operation in this test's thread: [succeeded, failed alike].
    pub(super) static STATS: std::cell::RefCell<BTreeMap<String, [u64; 2]>> =
        const { std::cell::RefCell::new(BTreeMap::new()) };
}

pub(super) fn print_stats(test: &str) {
    let stats = STATS.with_borrow(|s| s.clone());
    let line: Vec<String> = stats
        .iter()
        .map(|(k, [ok, err])| format!("{k} {ok}/{err}"))
        .collect();
    println!("{test}: compared results (ok/error): {}", line.join(", "));
}

pub(super) struct Runner {
    pub(super) dir: tempfile::TempDir,
    pub(super) img: PathBuf,
    pub(super) fs: Option<Arc<Fs>>,
    pub(super) m: Model,
    /// Free inodes plus live model inodes: constant.
    pub(super) inodes_k: u64,
    /// Free blocks plus the blocks every model inode reports: constant.
    pub(super) blocks_k: u64,
    pub(super) step: usize,
    pub(super) what: String,
}

impl Runner {
    pub(super) fn new() -> Runner {
        let dir = tempfile::tempdir().expect("tempdir");
        let img = if bs() == 4096 {
            common::mkfs_image(dir.path(), "model.img", img_size())
        } else {
            let b = bs().to_string();
            common::mke2fs_image(
                dir.path(),
                "model.img",
                img_size(),
                &["-t", "ext4", "-b", &b],
            )
            .expect("mke2fs")
        };
        let fs = Fs::mount_path(&img, MountOptions::default()).expect("mount a fresh image");
        let root = fs.getattr(ROOT_INO).expect("getattr /");
        let lf = fs
            .lookup(ROOT_INO, b"lost+found")
            .expect("lookup /lost+found");
        let mut m = Model::default();
        let body = Body::Dir {
            entries: BTreeMap::new(),
            parent: ROOT,
        };
        let root_id = m.add(root.ino, root.perm, root.nlink, body.clone());
        assert_eq!(root_id, ROOT);
        m.node_mut(ROOT).gid = root.gid;
        m.lost_found = m.add(lf.ino, lf.perm, lf.nlink, body);
        let lf_id = m.lost_found;
        m.node_mut(lf_id).gid = lf.gid;
        m.entries_mut(ROOT).insert(b"lost+found".to_vec(), lf_id);
        let st = fs.statfs().expect("statfs");
        let mut r = Runner {
            dir,
            img,
            fs: Some(fs),
            m,
            inodes_k: 0,
            blocks_k: 0,
            step: 0,
            what: "mount".into(),
        };
        r.inodes_k = st.free_inodes + 2;
        r.blocks_k = st.free_blocks + (root.blocks + lf.blocks) / sectors();
        r.verify_all();
        r
    }

    pub(super) fn fs(&self) -> Arc<Fs> {
        self.fs.clone().expect("mounted")
    }

    pub(super) fn ctx(&self) -> String {
        format!("step {}: {}", self.step, self.what)
    }

    /// Compare an engine result with the model's: both Ok, or errors of one variant.
    pub(super) fn agree<T: std::fmt::Debug, U: std::fmt::Debug>(
        &self,
        got: &Result<T, Error>,
        want: &Result<U, Error>,
    ) -> bool {
        let op = self.what.split([' ', ':']).next().unwrap_or("").to_string();
        STATS.with_borrow_mut(|s| s.entry(op).or_default()[usize::from(got.is_err())] += 1);
        match (got, want) {
            (Ok(_), Ok(_)) => true,
            (Err(g), Err(w)) if discriminant(g) == discriminant(w) => false,
            (Ok(_), Err(w)) => panic!("{}: engine succeeded, model expects {w:?}", self.ctx()),
            (Err(g), Ok(w)) => panic!(
                "{}: engine failed with {g:?}, model expects Ok({w:?})",
                self.ctx()
            ),
            (Err(g), Err(w)) => panic!(
                "{}: engine failed with {g:?}, model expects {w:?}",
                self.ctx()
            ),
        }
    }

    pub(super) fn check_attr(&self, id: Id, a: &Attr) {
        let n = self.m.node(id);
        let c = || {
            format!(
                "{}: attributes of model node {id} (inode {})",
                self.ctx(),
                n.ino
            )
        };
        assert_eq!(a.ino, n.ino, "{}", c());
        assert_eq!(a.kind, n.kind(), "{}", c());
        assert_eq!(a.perm, n.perm, "{}", c());
        assert_eq!(a.nlink, n.nlink, "{}", c());
        match &n.body {
            Body::File(f) => {
                assert_eq!(a.size, f.size, "{}: size", c());
                let data = f.alloc.len() as u64;
                let tree = a.blocks / sectors() - data.min(a.blocks / sectors());
                assert!(
                    a.blocks.is_multiple_of(sectors())
                        && a.blocks / sectors() >= data
                        && tree <= data / per_tree_block() + 2,
                    "{}: {} sectors for {data} data blocks",
                    c(),
                    a.blocks
                );
            }
            Body::Dir { .. } => {
                assert!(
                    a.size >= bs() && a.size.is_multiple_of(bs()),
                    "{}: directory size {}",
                    c(),
                    a.size
                );
                // Every block of a directory is allocated, plus extent tree blocks.
                let (blocks, data) = (a.blocks / sectors(), a.size / bs());
                assert!(
                    blocks >= data && blocks - data <= data / per_tree_block() + 2,
                    "{}: {blocks} blocks for a directory of {data}",
                    c()
                );
            }
            Body::Symlink(t) => {
                assert_eq!(a.size, t.len() as u64, "{}", c());
                assert_eq!(
                    a.blocks,
                    if t.len() < 60 { 0 } else { sectors() },
                    "{}",
                    c()
                );
            }
            Body::Special { kind, rdev } => {
                assert_eq!(a.size, 0, "{}", c());
                if matches!(kind, FileType::CharDevice | FileType::BlockDevice) {
                    assert_eq!(a.rdev, *rdev, "{}: rdev", c());
                }
            }
        }
        if let Some((at, mt)) = n.times {
            assert_eq!((a.atime, a.mtime), (at, mt), "{}: times", c());
        }
        if id != ROOT && id != self.m.lost_found {
            assert_eq!((a.uid, a.gid), (OWNER.uid, n.gid), "{}: owner", c());
        }
    }

    // --- namespace ---

    pub(super) fn add_entry(&mut self, dir: Id, name: &[u8], a: &Attr, body: Body) -> Id {
        let is_dir = matches!(body, Body::Dir { .. });
        // A set-group-ID directory gives new inodes its group, and new directories the bit.
        let parent = self.m.node(dir);
        let sgid = parent.perm & 0o2000 != 0;
        let gid = if sgid { parent.gid } else { OWNER.gid };
        if is_dir && sgid {
            assert!(
                a.perm & 0o2000 != 0,
                "a new directory in a set-group-ID one keeps the bit"
            );
        }
        let id = self.m.add(a.ino, a.perm, if is_dir { 2 } else { 1 }, body);
        self.m.node_mut(id).gid = gid;
        self.m.entries_mut(dir).insert(name.to_vec(), id);
        self.m.touch(dir);
        if is_dir {
            self.m.node_mut(dir).nlink += 1;
        }
        id
    }

    pub(super) fn create(
        &mut self,
        dir: Id,
        name: &[u8],
        perm: u16,
        keep_open: bool,
    ) -> Option<Id> {
        let want = self.m.can_add(dir, name);
        let got = self.fs().create(self.m.ino(dir), name, perm, OWNER);
        if !self.agree(&got, &want) {
            return None;
        }
        let a = got.expect("agreed");
        assert_eq!(a.perm, perm & 0o7777, "{}", self.ctx());
        let id = self.add_entry(dir, name, &a, Body::File(FileData::default()));
        self.check_attr(id, &a);
        if keep_open {
            self.m.node_mut(id).open += 1;
            self.m.handles.push(id);
        } else {
            self.fs().release(a.ino).expect("release after create");
        }
        Some(id)
    }

    pub(super) fn mkdir(&mut self, dir: Id, name: &[u8], perm: u16) -> Option<Id> {
        let want = self.m.can_add(dir, name);
        let got = self.fs().mkdir(self.m.ino(dir), name, perm, OWNER);
        if !self.agree(&got, &want) {
            return None;
        }
        let a = got.expect("agreed");
        // A set-group-ID parent passes the bit on (inode_init_owner).
        let inherited = self.m.node(dir).perm & 0o2000;
        assert_eq!(a.perm, (perm & 0o7777) | inherited, "{}", self.ctx());
        let id = self.add_entry(
            dir,
            name,
            &a,
            Body::Dir {
                entries: BTreeMap::new(),
                parent: dir,
            },
        );
        self.check_attr(id, &a);
        Some(id)
    }

    pub(super) fn mknod(&mut self, dir: Id, name: &[u8], which: u8, perm: u16) {
        let (kind, rdev) = match which {
            0 => (FileType::Fifo, 0),
            1 => (FileType::CharDevice, 0x0103),
            2 => (FileType::BlockDevice, 0x0010_082C),
            _ => (FileType::Socket, 0),
        };
        let mode = u32::from(kind.mode_bits() | (perm & 0o7777));
        let want = self.m.can_add(dir, name);
        let got = self.fs().mknod(self.m.ino(dir), name, mode, rdev, OWNER);
        if !self.agree(&got, &want) {
            return;
        }
        let a = got.expect("agreed");
        let id = self.add_entry(dir, name, &a, Body::Special { kind, rdev });
        self.check_attr(id, &a);
    }

    pub(super) fn symlink(&mut self, dir: Id, name: &[u8], target: &[u8]) -> Option<Id> {
        // Linux: a target of PATH_MAX (4096) bytes or more fails in getname, before the
        // name is looked at; one that does not fit a block fails in ext4_symlink, after.
        let want = if target.len() >= 4096 {
            Err(Error::NameTooLong)
        } else if target.len() > symlink_max() {
            self.m.can_add(dir, name).and(Err(Error::NameTooLong))
        } else {
            self.m.can_add(dir, name)
        };
        let got = self.fs().symlink(self.m.ino(dir), name, target, OWNER);
        if !self.agree(&got, &want) {
            return None;
        }
        let a = got.expect("agreed");
        let id = self.add_entry(dir, name, &a, Body::Symlink(target.to_vec()));
        self.check_attr(id, &a);
        Some(id)
    }

    pub(super) fn link(&mut self, src: Id, dir: Id, name: &[u8]) {
        let want = self.m.can_add(dir, name).and_then(|_| {
            if self.m.is_dir(src) {
                Err(Error::NotPermitted)
            } else if self.m.node(src).nlink == 0 {
                Err(Error::NotFound)
            } else {
                Ok(())
            }
        });
        let got = self.fs().link(self.m.ino(src), self.m.ino(dir), name);
        if !self.agree(&got, &want) {
            return;
        }
        self.m.entries_mut(dir).insert(name.to_vec(), src);
        self.m.node_mut(src).nlink += 1;
        self.m.touch(dir);
        self.check_attr(src, &got.expect("agreed"));
    }

    /// unlink (`as_dir` false) or rmdir.
    pub(super) fn remove(&mut self, dir: Id, name: &[u8], as_dir: bool) {
        let want = if !self.m.is_dir(dir) {
            Err(Error::NotDir)
        } else if name.len() > 255 {
            Err(Error::NameTooLong)
        } else {
            match self.m.lookup(dir, name) {
                None => Err(Error::NotFound),
                Some(c) if as_dir && !self.m.is_dir(c) => Err(Error::NotDir),
                Some(c) if !as_dir && self.m.is_dir(c) => Err(Error::IsDir),
                Some(c) if as_dir && !self.m.entries(c).is_empty() => Err(Error::NotEmpty),
                Some(c) => Ok(c),
            }
        };
        let ino = self.m.ino(dir);
        let got = if as_dir {
            self.fs().rmdir(ino, name)
        } else {
            self.fs().unlink(ino, name)
        };
        // Linux refuses an over-long name before looking; lanefs finds nothing. Both fail.
        if name.len() > 255 && matches!(got, Err(Error::NotFound)) && self.m.is_dir(dir) {
            return;
        }
        if !self.agree(&got, &want) {
            return;
        }
        let c = want.expect("agreed");
        self.m.entries_mut(dir).remove(name);
        self.m.touch(dir);
        if as_dir {
            self.m.node_mut(dir).nlink -= 1;
            self.m.node_mut(c).nlink = 0;
        } else {
            self.m.node_mut(c).nlink -= 1;
        }
        self.m.maybe_free(c);
    }

    /// rename, with Linux's error precedence.
    pub(super) fn rename_want(
        &self,
        d: Id,
        name: &[u8],
        nd: Id,
        newname: &[u8],
    ) -> Result<(Id, Option<Id>), Error> {
        if name.len() > 255 || newname.len() > 255 {
            return Err(Error::NameTooLong);
        }
        if !self.m.is_dir(d) || !self.m.is_dir(nd) {
            return Err(Error::NotDir);
        }
        let src = self.m.lookup(d, name).ok_or(Error::NotFound)?;
        let tgt = self.m.lookup(nd, newname);
        if d != nd {
            // The source must not be an ancestor of the new parent ...
            if self.m.is_dir(src) && self.m.is_ancestor_or_self(src, nd) {
                return Err(Error::Invalid("into itself".into()));
            }
            // ... and the target must not be an ancestor of the old one.
            if tgt.is_some_and(|t| self.m.is_dir(t) && self.m.is_ancestor_or_self(t, d)) {
                return Err(Error::NotEmpty);
            }
        }
        if tgt == Some(src) {
            return Ok((src, tgt));
        }
        if let Some(t) = tgt {
            match (self.m.is_dir(src), self.m.is_dir(t)) {
                (true, false) => return Err(Error::NotDir),
                (false, true) => return Err(Error::IsDir),
                (true, true) if !self.m.entries(t).is_empty() => return Err(Error::NotEmpty),
                _ => {}
            }
        }
        Ok((src, tgt))
    }

    pub(super) fn rename(&mut self, d: Id, name: &[u8], nd: Id, newname: &[u8]) {
        let want = self.rename_want(d, name, nd, newname);
        let got = self
            .fs()
            .rename(self.m.ino(d), name, self.m.ino(nd), newname);
        if !self.agree(&got, &want) {
            return;
        }
        let (src, tgt) = want.expect("agreed");
        if tgt == Some(src) {
            return;
        }
        self.m.entries_mut(d).remove(name);
        if let Some(t) = tgt {
            if self.m.is_dir(t) {
                self.m.node_mut(nd).nlink -= 1;
                self.m.node_mut(t).nlink = 0;
            } else {
                self.m.node_mut(t).nlink -= 1;
            }
            self.m.maybe_free(t);
        }
        self.m.entries_mut(nd).insert(newname.to_vec(), src);
        if let Body::Dir { parent, .. } = &mut self.m.node_mut(src).body {
            *parent = nd;
            self.m.node_mut(d).nlink -= 1;
            self.m.node_mut(nd).nlink += 1;
        }
        self.m.touch(d);
        self.m.touch(nd);
    }
}
