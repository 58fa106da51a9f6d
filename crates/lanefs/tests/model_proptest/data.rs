//! The runner's data, attribute and listing operations: write (buffered and direct), read,
//! truncate, fallocate, setattr, readdir (whole, chunked, changing under the reader),
//! lookup, getattr, readlink, open, release and remount.

use super::*;

impl Runner {
    // --- data ---

    /// The error a data operation on a non-file gets.
    pub(super) fn not_file(&self, id: Id) -> Option<Error> {
        match self.m.node(id).body {
            Body::File(_) => None,
            Body::Dir { .. } => Some(Error::IsDir),
            _ => Some(Error::Invalid("not a regular file".into())),
        }
    }

    pub(super) fn write(&mut self, id: Id, off: u64, data: &[u8], direct: bool) {
        let end = off + data.len() as u64;
        let want = match self.not_file(id) {
            Some(e) => Err(e),
            None if end > max_size() => Err(Error::FileTooBig),
            None => {
                let new = self.m.file(id).new_blocks(off / bs(), end.div_ceil(bs()));
                if self.m.data_blocks() + new > budget_blocks() {
                    return;
                }
                Ok(data.len())
            }
        };
        let got = if direct {
            self.fs().write_direct(self.m.ino(id), off, data)
        } else {
            self.fs().write(self.m.ino(id), off, data)
        };
        if !self.agree(&got, &want) {
            return;
        }
        assert_eq!(got.ok(), want.ok(), "{}: bytes written", self.ctx());
        self.m.file_mut(id).write(off, data);
        self.m.touch(id);
    }

    pub(super) fn read(&mut self, id: Id, off: u64, len: usize) {
        let want = match self.not_file(id) {
            Some(e) => Err(e),
            None => Ok(self.m.file(id).read(off, len)),
        };
        let mut buf = vec![0xEEu8; len];
        let got = self.fs().read(self.m.ino(id), off, &mut buf);
        if !self.agree(&got, &want) {
            return;
        }
        let want = want.expect("agreed");
        let n = got.expect("agreed");
        self.same_bytes(&buf[..n], &want, off);
        self.m.touch(id);
    }

    pub(super) fn same_bytes(&self, got: &[u8], want: &[u8], off: u64) {
        assert_eq!(got.len(), want.len(), "{}: bytes read at {off}", self.ctx());
        if let Some(i) = (0..got.len()).find(|&i| got[i] != want[i]) {
            let e = (i + 16).min(got.len());
            panic!(
                "{}: data differs at offset {} (block {}): engine {:?}, model {:?}",
                self.ctx(),
                off + i as u64,
                (off + i as u64) / bs(),
                &got[i..e],
                &want[i..e]
            );
        }
    }

    pub(super) fn truncate(&mut self, id: Id, size: u64) {
        let want = match self.not_file(id) {
            Some(e) => Err(e),
            None if size > max_size() => Err(Error::FileTooBig),
            None => Ok(()),
        };
        let set = SetAttr {
            size: Some(size),
            ..SetAttr::default()
        };
        let got = self.fs().setattr(self.m.ino(id), &set);
        if !self.agree(&got, &want) {
            return;
        }
        self.m.file_mut(id).truncate(size);
        self.m.touch(id);
        self.check_attr(id, &got.expect("agreed"));
    }

    pub(super) fn fallocate(&mut self, id: Id, off: u64, len: u64, mode: u8) {
        let end = off + len;
        let mode = FallocMode {
            keep_size: mode > 0,
            punch_hole: mode == 2,
            zero_range: false,
        };
        let want = match self.not_file(id) {
            _ if len == 0 => Err(Error::Invalid("length 0".into())),
            Some(e) => Err(e),
            None if end > max_size() => Err(Error::FileTooBig),
            None if mode.punch_hole => Ok(()),
            None => {
                let new = self.m.file(id).new_blocks(off / bs(), end.div_ceil(bs()));
                if self.m.data_blocks() + new > budget_blocks() {
                    return;
                }
                Ok(())
            }
        };
        let got = self.fs().fallocate(self.m.ino(id), mode, off, len);
        if !self.agree(&got, &want) {
            return;
        }
        let f = self.m.file_mut(id);
        if mode.punch_hole {
            f.punch(off, end);
        } else {
            f.alloc.extend(off / bs()..end.div_ceil(bs()));
            if !mode.keep_size && end > f.size {
                f.size = end;
            }
        }
        self.m.touch(id);
    }

    // --- attributes and listing ---

    pub(super) fn set(&mut self, id: Id, set: &SetAttr) {
        let got = self.fs().setattr(self.m.ino(id), set);
        let a = got.unwrap_or_else(|e| panic!("{}: setattr failed: {e:?}", self.ctx()));
        let n = self.m.node_mut(id);
        if let Some(p) = set.perm {
            n.perm = p & 0o7777;
        }
        if let (Some(at), Some(mt)) = (set.atime, set.mtime) {
            n.times = Some((at, mt));
        }
        self.check_attr(id, &a);
    }

    /// The entries `readdir` must return, with "." and "..".
    pub(super) fn want_entries(&self, d: Id) -> BTreeMap<Vec<u8>, (Ino, FileType)> {
        let mut want: BTreeMap<Vec<u8>, (Ino, FileType)> = self
            .m
            .entries(d)
            .iter()
            .map(|(name, &c)| (name.clone(), (self.m.ino(c), self.m.node(c).kind())))
            .collect();
        want.insert(b".".to_vec(), (self.m.ino(d), FileType::Directory));
        want.insert(
            b"..".to_vec(),
            (self.m.ino(self.m.parent(d)), FileType::Directory),
        );
        want
    }

    /// Read a directory through the cursor, `chunk` entries per call for the first 64
    /// calls and at least 256 after that (each call costs a pass over the directory).
    pub(super) fn readdir_chunked(&self, ino: Ino, chunk: usize) -> Result<Vec<DirEntry>, Error> {
        let fs = self.fs();
        let mut out = Vec::new();
        let mut pos = 0;
        for call in 0..1_000_000 {
            let max = if call < 64 { chunk } else { chunk.max(256) };
            let got = fs.readdir(ino, pos, max)?;
            let Some(last) = got.last() else {
                return Ok(out);
            };
            assert!(
                last.next > pos,
                "{}: readdir cursor did not advance",
                self.ctx()
            );
            pos = last.next;
            out.extend(got);
        }
        panic!("{}: readdir never ended", self.ctx());
    }

    pub(super) fn readdir(&mut self, d: Id, chunk: usize) {
        let want = if self.m.is_dir(d) {
            Ok(self.want_entries(d))
        } else {
            Err(Error::NotDir)
        };
        let got = self.readdir_chunked(self.m.ino(d), chunk);
        if !self.agree(&got, &want) {
            return;
        }
        self.same_listing(&got.expect("agreed"), &want.expect("agreed"), chunk);
    }

    pub(super) fn same_listing(
        &self,
        got: &[DirEntry],
        want: &BTreeMap<Vec<u8>, (Ino, FileType)>,
        chunk: usize,
    ) {
        let mut seen = BTreeMap::new();
        for e in got {
            let prev = seen.insert(e.name.clone(), (e.ino, e.kind));
            assert!(
                prev.is_none(),
                "{}: readdir (chunks of {chunk}) returned {:?} twice",
                self.ctx(),
                String::from_utf8_lossy(&e.name)
            );
        }
        if &seen != want {
            let extra: Vec<_> = seen.keys().filter(|k| !want.contains_key(*k)).collect();
            let missing: Vec<_> = want.keys().filter(|k| !seen.contains_key(*k)).collect();
            let wrong: Vec<_> = want
                .iter()
                .filter(|(k, v)| seen.get(*k).is_some_and(|s| s != *v))
                .collect();
            panic!(
                "{}: readdir (chunks of {chunk}) differs: extra {extra:?}, missing {missing:?}, \
                 wrong {wrong:?}",
                self.ctx()
            );
        }
    }

    /// POSIX readdir across changes: no name twice, every name returned existed before or
    /// after, and every entry present throughout is returned.
    pub(super) fn readdir_changing(&mut self, d: Id, chunk: usize, adds: usize, victim: u16) {
        let ino = self.m.ino(d);
        let before = self.want_entries(d);
        let mut got = self
            .fs()
            .readdir(ino, 0, chunk)
            .unwrap_or_else(|e| panic!("{}: readdir: {e:?}", self.ctx()));
        let Some(mut pos) = got.last().map(|e| e.next) else {
            return;
        };
        for k in 0..adds {
            self.create(d, format!("c{}-{k}", self.step).as_bytes(), 0o644, false);
        }
        let files: Vec<Vec<u8>> = self
            .m
            .entries(d)
            .iter()
            .filter(|(_, &c)| !self.m.is_dir(c))
            .map(|(n, _)| n.clone())
            .collect();
        if let Some(name) = files.get(victim as usize % files.len().max(1)) {
            self.remove(d, &name.clone(), false);
        }
        let after = self.want_entries(d);
        for _ in 0..100_000 {
            let more = self
                .fs()
                .readdir(ino, pos, chunk)
                .unwrap_or_else(|e| panic!("{}: readdir: {e:?}", self.ctx()));
            let Some(last) = more.last() else { break };
            assert!(
                last.next > pos,
                "{}: readdir cursor did not advance",
                self.ctx()
            );
            pos = last.next;
            got.extend(more);
        }
        let mut seen = BTreeSet::new();
        for e in &got {
            let name = String::from_utf8_lossy(&e.name);
            assert!(
                seen.insert(e.name.clone()),
                "{}: {name:?} returned twice",
                self.ctx()
            );
            let v = Some(&(e.ino, e.kind));
            assert!(
                before.get(&e.name) == v || after.get(&e.name) == v,
                "{}: {name:?} never existed so",
                self.ctx()
            );
        }
        for (name, v) in &before {
            if after.get(name) == Some(v) {
                assert!(
                    seen.contains(name),
                    "{}: {:?} skipped",
                    self.ctx(),
                    String::from_utf8_lossy(name)
                );
            }
        }
    }

    pub(super) fn lookup(&mut self, d: Id, name: &[u8]) {
        let want = if !self.m.is_dir(d) {
            Err(Error::NotDir)
        } else if name.len() > 255 {
            Err(Error::NameTooLong)
        } else if name == b"." {
            Ok(d)
        } else if name == b".." {
            Ok(self.m.parent(d))
        } else {
            self.m.lookup(d, name).ok_or(Error::NotFound)
        };
        let got = self.fs().lookup(self.m.ino(d), name);
        if self.agree(&got, &want) {
            self.check_attr(want.expect("agreed"), &got.expect("agreed"));
        }
    }

    pub(super) fn getattr(&self, id: Id) {
        let a = self.fs().getattr(self.m.ino(id));
        let a = a.unwrap_or_else(|e| panic!("{}: getattr of node {id} failed: {e:?}", self.ctx()));
        self.check_attr(id, &a);
    }

    pub(super) fn readlink(&self, id: Id) {
        let want = match &self.m.node(id).body {
            Body::Symlink(t) => Ok(t.clone()),
            _ => Err(Error::Invalid("not a symlink".into())),
        };
        let got = self.fs().readlink(self.m.ino(id));
        if self.agree(&got, &want) {
            assert_eq!(got.ok(), want.ok(), "{}: symlink target", self.ctx());
        }
    }

    pub(super) fn open(&mut self, id: Id) {
        let got = self.fs().open(self.m.ino(id));
        got.unwrap_or_else(|e| panic!("{}: open failed: {e:?}", self.ctx()));
        self.m.node_mut(id).open += 1;
        self.m.handles.push(id);
    }

    pub(super) fn release(&mut self, h: usize) {
        let id = self.m.handles.swap_remove(h);
        let got = self.fs().release(self.m.ino(id));
        got.unwrap_or_else(|e| panic!("{}: release failed: {e:?}", self.ctx()));
        self.m.node_mut(id).open -= 1;
        self.m.maybe_free(id);
    }

    /// Unmount (which releases every open file: orphans go), mount again, compare all.
    pub(super) fn remount(&mut self) {
        let fs = self.fs.take().expect("mounted");
        fs.unmount()
            .unwrap_or_else(|e| panic!("{}: unmount failed: {e:?}", self.ctx()));
        for id in std::mem::take(&mut self.m.handles) {
            if let Some(n) = self.m.nodes.get_mut(&id) {
                n.open = 0;
                self.m.maybe_free(id);
            }
        }
        let fs = Fs::mount_path(&self.img, MountOptions::default());
        self.fs = Some(fs.unwrap_or_else(|e| panic!("{}: remount failed: {e:?}", self.ctx())));
        self.verify_all();
    }
}
