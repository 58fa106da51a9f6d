//! One `Op` applied to the engine and the model.

use super::*;

impl Runner {
    pub(super) fn apply(&mut self, op: &Op) {
        self.step += 1;
        self.what = format!("{op:?}");
        match *op {
            Op::Create {
                dir,
                name,
                perm,
                keep_open,
            } => {
                let d = self.pick_dir(dir);
                self.create(d, &self.pick_name(d, name), perm, keep_open);
            }
            Op::Mkdir { dir, name, perm } => {
                let d = self.pick_dir(dir);
                self.mkdir(d, &self.pick_name(d, name), perm);
            }
            Op::Mknod {
                dir,
                name,
                which,
                perm,
            } => {
                let d = self.pick_dir(dir);
                self.mknod(d, &self.pick_name(d, name), which, perm);
            }
            Op::Symlink {
                dir,
                name,
                len,
                seed,
            } => {
                let d = self.pick_dir(dir);
                let name = self.pick_name(d, name);
                let mut len = usize::from(len);
                // Which of two errors comes first is not a property (lanefs checks the
                // target before the name): a refused name gets a target that fits.
                if self.m.can_add(d, &name).is_err() {
                    len = len.min(symlink_max()).min(4095);
                }
                let target: Vec<u8> = (0..len)
                    .map(|i| b"abcdefghij/"[(i + usize::from(seed)) % 11])
                    .collect();
                self.symlink(d, &name, &target);
            }
            Op::Link { src, dir, name } => {
                let Some(s) = pick(&self.m.ids(|n| n.ino != ROOT_INO), src) else {
                    return;
                };
                let d = self.pick_dir(dir);
                self.link(s, d, &self.pick_name(d, name));
            }
            Op::Unlink { dir, name } => {
                let d = self.pick_dir(dir);
                self.remove(d, &self.pick_name(d, name), false);
            }
            Op::Rmdir { dir, name } => {
                let d = self.pick_dir(dir);
                self.remove(d, &self.pick_name(d, name), true);
            }
            Op::RmdirEmpty { dir } => {
                let empty = self.m.ids(|n| {
                    n.ino != ROOT_INO
                        && matches!(&n.body, Body::Dir { entries, .. } if entries.is_empty())
                });
                let Some(d) = pick(&empty, dir) else { return };
                let parent = self.m.parent(d);
                let entries = self.m.entries(parent);
                let name = entries.iter().find(|e| *e.1 == d).map(|e| e.0.clone());
                self.remove(parent, &name.expect("entry of a directory"), true);
            }
            Op::RemoveEntry { entry, as_dir } => {
                let all = self.m.all_entries();
                if all.is_empty() {
                    return;
                }
                let (d, name, _) = all[entry as usize % all.len()].clone();
                self.remove(d, &name, as_dir);
            }
            Op::Rename {
                dir,
                name,
                newdir,
                newname,
            } => {
                let (d, nd) = (self.pick_dir(dir), self.pick_dir(newdir));
                let (a, b) = (self.pick_name(d, name), self.pick_name(nd, newname));
                self.rename(d, &a, nd, &b);
            }
            Op::RenameEntry {
                entry,
                newdir,
                newname,
            } => {
                let all = self.m.all_entries();
                if all.is_empty() {
                    return;
                }
                let (d, name, _) = all[entry as usize % all.len()].clone();
                let nd = self.pick_dir(newdir);
                self.rename(d, &name, nd, &self.pick_name(nd, newname));
            }
            Op::Write {
                file,
                any,
                off,
                len,
                seed,
                direct,
            } => {
                let Some((id, off)) = self.pick_data(file, any, off) else {
                    return;
                };
                let off = if direct { off / bs() * bs() } else { off };
                // Never straddle the size limit: Linux writes short there.
                let len = if off < max_size() {
                    u64::from(len).min(max_size() - off)
                } else {
                    u64::from(len)
                };
                self.write(id, off, &pattern(seed, off, len as usize), direct);
            }
            Op::Read {
                file,
                any,
                off,
                len,
            } => {
                let Some((id, off)) = self.pick_data(file, any, off) else {
                    return;
                };
                self.read(id, off, len as usize);
            }
            Op::Truncate { file, any, size } => {
                let Some((id, size)) = self.pick_data(file, any, size) else {
                    return;
                };
                self.truncate(id, size);
            }
            Op::Fallocate {
                file,
                any,
                off,
                len,
                mode,
            } => {
                let Some((id, off)) = self.pick_data(file, any, off) else {
                    return;
                };
                self.fallocate(id, off, len, mode);
            }
            Op::SetPerm { node, perm } => {
                let Some(id) = pick(&self.m.ids(|_| true), node) else {
                    return;
                };
                self.set(
                    id,
                    &SetAttr {
                        perm: Some(perm),
                        ..SetAttr::default()
                    },
                );
            }
            Op::SetTimes { node, atime, mtime } => {
                let Some(id) = pick(&self.m.ids(|_| true), node) else {
                    return;
                };
                self.set(
                    id,
                    &SetAttr {
                        atime: Some(atime),
                        mtime: Some(mtime),
                        ..SetAttr::default()
                    },
                );
            }
            Op::Readdir { dir, chunk } => {
                let d = self.pick_dir(dir);
                self.readdir(d, usize::from(chunk));
            }
            Op::ReaddirChanging {
                dir,
                chunk,
                adds,
                victim,
            } => {
                let d = self.pick_dir(dir);
                if self.m.is_dir(d) {
                    self.readdir_changing(d, usize::from(chunk), usize::from(adds), victim);
                }
            }
            Op::Bulk { dir, count, long } => {
                let d = self.pick_dir(dir);
                // Stay far from the image's 16384 inodes.
                if !self.m.is_dir(d) || self.m.nodes.len() + usize::from(count) > 12_000 {
                    return;
                }
                let pad = if long { 150 + self.step % 100 } else { 0 };
                for i in 0..count {
                    let mut name = format!("b{}-{i}-", self.step).into_bytes();
                    name.resize(name.len() + pad, b'q');
                    let keep_open = i % 97 == 3;
                    self.create(d, &name, 0o640, keep_open);
                }
            }
            Op::Lookup { dir, name } => {
                let d = self.pick_dir(dir);
                self.lookup(d, &self.pick_name(d, name));
            }
            Op::Getattr { node } => {
                let Some(id) = pick(&self.m.ids(|_| true), node) else {
                    return;
                };
                self.getattr(id);
            }
            Op::Readlink { node } => {
                // Mostly symlinks; 1 time in 4 anything (Invalid for the rest).
                let links = self.m.ids(|n| matches!(n.body, Body::Symlink(_)));
                let from = if node % 4 == 0 || links.is_empty() {
                    self.m.ids(|_| true)
                } else {
                    links
                };
                let Some(id) = pick(&from, node / 4) else {
                    return;
                };
                self.readlink(id);
            }
            Op::Open { file } => {
                let Some(id) = pick(&self.m.ids(|n| matches!(n.body, Body::File(_))), file) else {
                    return;
                };
                self.open(id);
            }
            Op::Release { handle } => {
                if !self.m.handles.is_empty() {
                    self.release(handle as usize % self.m.handles.len());
                }
            }
            Op::Fsync { file } => {
                let Some(id) = pick(&self.m.ids(|n| matches!(n.body, Body::File(_))), file) else {
                    return;
                };
                let got = self.fs().fsync(self.m.ino(id), false);
                got.unwrap_or_else(|e| panic!("{}: fsync failed: {e:?}", self.ctx()));
            }
            Op::Remount => self.remount(),
        }
    }
}
