//! The driver: operations applied to a target and the model at once; the initial tree
//! and lanefs's changes to it.

use super::*;

/// Applies each operation to the target and, if it succeeds, to the model.
pub(super) struct Driver<'a> {
    pub(super) m: &'a mut Model,
    pub(super) t: &'a mut dyn Target,
}

impl Driver<'_> {
    pub(super) fn mkdir(&mut self, p: &str, perm: u32) -> Result<(), String> {
        self.t.mkdir(p)?;
        self.m.add(p, 0o755, Body::Dir);
        self.attrs(p, perm, 0, 0)
    }
    pub(super) fn file(&mut self, p: &str, perm: u32, data: &[u8]) -> Result<(), String> {
        self.t.create(p)?;
        self.m.add(p, 0o644, Body::File(Content::default()));
        self.write(p, 0, data)?;
        self.attrs(p, perm, 0, 0)
    }
    pub(super) fn write(&mut self, p: &str, off: u64, data: &[u8]) -> Result<(), String> {
        if data.is_empty() {
            return Ok(());
        }
        self.t.write(p, off, data)?;
        self.m.content(p).write(off, data);
        Ok(())
    }
    /// Append `blocks` file-system blocks of pattern data in chunks of at most 256 KiB.
    pub(super) fn append(&mut self, p: &str, seed: u64, bytes: u64) -> Result<(), String> {
        let mut off = self.m.content(p).size;
        let end = off + bytes;
        while off < end {
            let n = (end - off).min(256 << 10);
            self.write(p, off, &pattern(seed, off, n as usize))?;
            off += n;
        }
        Ok(())
    }
    pub(super) fn truncate(&mut self, p: &str, size: u64) -> Result<(), String> {
        self.t.truncate(p, size)?;
        self.m.content(p).truncate(size);
        Ok(())
    }
    pub(super) fn symlink(&mut self, p: &str, target: &[u8]) -> Result<(), String> {
        self.t.symlink(p, target)?;
        self.m.add(p, 0o777, Body::Link(target.to_vec()));
        Ok(())
    }
    pub(super) fn link(&mut self, from: &str, to: &str) -> Result<(), String> {
        self.t.link(from, to)?;
        let id = self.m.paths[from];
        self.m.paths.insert(to.to_string(), id);
        Ok(())
    }
    pub(super) fn unlink(&mut self, p: &str) -> Result<(), String> {
        self.t.unlink(p)?;
        self.m.paths.remove(p);
        Ok(())
    }
    pub(super) fn rmdir(&mut self, p: &str) -> Result<(), String> {
        self.t.rmdir(p)?;
        self.m.paths.remove(p);
        Ok(())
    }
    pub(super) fn rename(&mut self, from: &str, to: &str) -> Result<(), String> {
        self.t.rename(from, to)?;
        self.m.rename(from, to);
        Ok(())
    }
    pub(super) fn attrs(&mut self, p: &str, perm: u32, uid: u32, gid: u32) -> Result<(), String> {
        self.t.attrs(p, perm, uid, gid)?;
        let o = self.m.obj(p);
        (o.perm, o.uid, o.gid) = (perm, uid, gid);
        Ok(())
    }
    pub(super) fn setxattr(&mut self, p: &str, name: &str, value: &[u8]) -> Result<(), String> {
        self.t.setxattr(p, name.as_bytes(), value)?;
        self.m
            .obj(p)
            .xattrs
            .insert(name.as_bytes().to_vec(), value.to_vec());
        Ok(())
    }
}

pub(super) fn many_name(i: usize) -> String {
    format!("entry_with_a_longer_name_{i:04}")
}

/// Small-file sizes: around the 60 bytes of i_block (inline data) and beyond.
pub(super) const SMALL: [u64; 10] = [0, 1, 40, 59, 60, 61, 100, 200, 1000, 3000];

/// The tree the kernel (or `mke2fs -d`) writes.
pub(super) fn initial_tree(d: &mut Driver, s: &Shape) -> Result<(), String> {
    let g = Geo::new(s.bs);
    let bs = g.bs;
    d.mkdir("small", 0o755)?;
    for (i, &n) in SMALL.iter().enumerate() {
        d.file(
            &format!("small/s{i}"),
            0o644,
            &pattern(i as u64, 0, n as usize),
        )?;
    }
    d.setxattr("small/s8", "user.small", b"a small value")?;
    if s.ea_inode() {
        d.setxattr("small/s9", "user.big", &pattern(77, 0, 6000))?;
    }
    d.mkdir("tiny_dir", 0o755)?;
    d.file("tiny_dir/a", 0o644, b"tiny a\n")?;
    d.file("tiny_dir/b", 0o600, b"")?;
    d.mkdir("empty_dir", 0o700)?;
    d.mkdir("sticky", 0o1777)?;
    d.mkdir("many", 0o755)?;
    for i in 0..MANY {
        let data = if i % 50 == 0 {
            format!("entry {i}\n").into_bytes()
        } else {
            Vec::new()
        };
        d.file(&format!("many/{}", many_name(i)), 0o644, &data)?;
    }
    d.mkdir("dir1", 0o755)?;
    d.mkdir("dir1/dir2", 0o700)?;
    d.file("dir1/dir2/deep", 0o640, &pattern(5, 0, 5000))?;
    d.file("dir1/owned", 0o640, &pattern(6, 0, 100))?;
    d.attrs("dir1/owned", 0o640, 1000, 1000)?;
    d.attrs("dir1", 0o750, 1000, 100)?;
    d.file("suid", 0o644, &pattern(7, 0, 50))?;
    d.attrs("suid", 0o4755, 0, 0)?;
    d.file("odd_mode", 0o644, &pattern(8, 0, 10))?;
    d.attrs("odd_mode", 0o7000, 65534, 65534)?;
    // Hard links: three names of one inode.
    d.file("hl_a", 0o644, &pattern(9, 0, 3000))?;
    d.link("hl_a", "dir1/hl_b")?;
    d.link("hl_a", "dir1/dir2/hl_c")?;
    // Symlinks: fast (in the inode), slow (a block), to a directory, dangling.
    d.symlink("sym_fast", b"small/s1")?;
    d.symlink("sym_slow", format!("dir1/{}", "x".repeat(200)).as_bytes())?;
    d.symlink("sym_dir", b"dir1")?;
    d.symlink("sym_59", "y".repeat(59).as_bytes())?;
    d.symlink("sym_60", "z".repeat(60).as_bytes())?;
    // A file mapped through the double-indirect block: dense where it is cheap, else data
    // on both sides of every boundary.
    d.file("big", 0o644, b"")?;
    if g.dense() {
        d.append("big", 10, (g.dind_start() + 8) * bs)?;
    } else {
        d.write("big", 0, &pattern(10, 0, ((NDIR + 2) * bs) as usize))?;
        let o = (g.dind_start() - 2) * bs;
        d.write("big", o, &pattern(10, o, (4 * bs) as usize))?;
    }
    d.file("grow", 0o644, &pattern(11, 0, (2 * bs + 100) as usize))?;
    // A sparse file reaching the triple-indirect block where a block map can.
    d.file("sparse_high", 0o644, &pattern(12, 0, 777))?;
    let high = g.tind_start().unwrap_or(g.dind_start() + 5);
    let o = (high + 3) * bs + 100;
    d.write("sparse_high", o, &pattern(12, o, (3 * bs) as usize))?;
    Ok(())
}

/// What lanefs does to the tree.
pub(super) fn lanefs_changes(d: &mut Driver, s: &Shape) -> Result<(), String> {
    let g = Geo::new(s.bs);
    let bs = g.bs;
    d.mkdir("new", 0o755)?;
    d.file("new/empty", 0o644, b"")?;
    d.file("new/tiny", 0o644, b"thirty bytes of tiny content!\n")?;
    d.attrs("new/tiny", 0o644, 1000, 1000)?;
    d.file("new/mid", 0o644, &pattern(20, 0, 5000))?;
    d.attrs("new/mid", 0o4755, 0, 0)?;
    d.setxattr("new/mid", "user.lanefs", &pattern(21, 0, 100))?;
    if s.ea_inode() {
        d.setxattr("new/mid", "user.big2", &pattern(22, 0, 7000))?;
    }
    d.file("new/dense", 0o644, b"")?;
    d.append("new/dense", 23, (NDIR + 3) * bs + 17)?;
    d.file("new/sparse", 0o644, b"")?;
    let o = (g.dind_start() + 1) * bs + 5;
    d.write("new/sparse", o, &pattern(24, o, 3000))?;
    // Grow a block-mapped file across direct -> indirect -> double indirect.
    let grow = |d: &mut Driver, to: u64| {
        let size = d.m.content("grow").size;
        d.append("grow", 11, to - size)
    };
    grow(d, 11 * bs + 500)?;
    grow(d, (NDIR + 5) * bs)?;
    if g.dense() {
        grow(d, (g.dind_start() + 3) * bs + 99)?;
    } else {
        let o = (g.dind_start() + 2) * bs;
        d.write("grow", o, &pattern(11, o, 5000))?;
    }
    // Shrink back across the boundaries, then map through the indirect block again.
    d.truncate("big", (g.dind_start() - 1) * bs + 100)?;
    d.truncate("big", 5 * bs + 7)?;
    let o = (NDIR + 2) * bs + 10;
    d.write("big", o, &pattern(25, o, 3000))?;
    let high = d.m.content("sparse_high").size;
    d.truncate("sparse_high", ((g.dind_start() + 4) * bs).min(high - 1))?;
    // Small files outgrowing inline storage, and shrinking.
    d.write("small/s2", 40, &pattern(26, 40, 5000))?;
    d.truncate("small/s6", 10)?;
    d.write("small/s4", 59, b"x")?;
    d.unlink("small/s3")?;
    d.unlink("hl_a")?;
    d.rename("dir1/dir2/deep", "moved_deep")?;
    d.rename("small/s4", "small/s5")?;
    d.rename("dir1/dir2", "dir2_moved")?;
    d.rename(&format!("many/{}", many_name(7)), "new/from_many")?;
    d.mkdir("made", 0o755)?;
    d.mkdir("made/sub", 0o750)?;
    d.mkdir("made/sub/subsub", 0o755)?;
    d.rmdir("made/sub/subsub")?;
    d.rmdir("empty_dir")?;
    for i in 0..60 {
        d.file(
            &format!("tiny_dir/grown_{i:02}"),
            0o644,
            format!("{i}").as_bytes(),
        )?;
    }
    for i in (0..60).step_by(2) {
        d.unlink(&format!("tiny_dir/grown_{i:02}"))?;
    }
    for i in 0..150 {
        d.file(&format!("many/added_{i:03}"), 0o644, b"")?;
    }
    for i in (0..MANY).step_by(3) {
        d.unlink(&format!("many/{}", many_name(i)))?;
    }
    d.symlink("new/lnk_fast", b"../small/s0")?;
    d.symlink("new/lnk_slow", "w".repeat(300).as_bytes())?;
    d.link("small/s0", "new/hl_new")?;
    d.attrs("sticky", 0o755, 1000, 1000)?;
    Ok(())
}
