//! The model: what the tree must hold (contents as seeded patterns, kinds, modes, owners,
//! link targets, link groups, xattrs).

use super::*;

// ---------------------------------------------------------------------------------------
// The model: what the tree must hold.

pub(super) fn pattern(seed: u64, off: u64, len: usize) -> Vec<u8> {
    (0..len as u64)
        .map(|i| {
            let x = (off + i)
                .wrapping_add(seed.wrapping_mul(0x9E37_79B9))
                .wrapping_mul(0x9E37_79B9_7F4A_7C15);
            ((x >> 56) as u8) | 1
        })
        .collect()
}

/// A file's bytes: its size and its data by 4 KiB page (absent pages read as zeros).
#[derive(Debug, Clone, Default)]
pub(super) struct Content {
    pub(super) size: u64,
    pub(super) pages: BTreeMap<u64, Vec<u8>>,
}

impl Content {
    pub(super) fn write(&mut self, off: u64, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        let end = off + data.len() as u64;
        for p in off / PAGE..=(end - 1) / PAGE {
            let page = self
                .pages
                .entry(p)
                .or_insert_with(|| vec![0; PAGE as usize]);
            let s = (p * PAGE).max(off);
            let e = (p * PAGE + PAGE).min(end);
            page[(s - p * PAGE) as usize..(e - p * PAGE) as usize]
                .copy_from_slice(&data[(s - off) as usize..(e - off) as usize]);
        }
        self.size = self.size.max(end);
    }

    pub(super) fn truncate(&mut self, size: u64) {
        if size < self.size {
            let keep = size.div_ceil(PAGE);
            self.pages.split_off(&keep);
            if let Some(p) = self.pages.get_mut(&(size / PAGE)) {
                p[(size % PAGE) as usize..].fill(0);
            }
        }
        self.size = size;
    }

    pub(super) fn read(&self, off: u64, len: usize) -> Vec<u8> {
        let end = (off + len as u64).min(self.size);
        if off >= end {
            return Vec::new();
        }
        let mut out = vec![0u8; (end - off) as usize];
        for (&p, page) in self.pages.range(off / PAGE..=(end - 1) / PAGE) {
            let s = (p * PAGE).max(off);
            let e = (p * PAGE + PAGE).min(end);
            out[(s - off) as usize..(e - off) as usize]
                .copy_from_slice(&page[(s - p * PAGE) as usize..(e - p * PAGE) as usize]);
        }
        out
    }

    /// Ranges to compare: everything for small files; otherwise every data page, and the
    /// first and last page of every hole.
    pub(super) fn ranges(&self) -> Vec<(u64, usize)> {
        if self.size <= WHOLE {
            let mut v = Vec::new();
            let mut off = 0;
            while off < self.size {
                let n = (self.size - off).min(1 << 20);
                v.push((off, n as usize));
                off += n;
            }
            return v;
        }
        let mut v = Vec::new();
        let mut next = 0u64; // first byte after the last data page seen
        let clip = |o: u64, size: u64| (o, (size - o).min(PAGE) as usize);
        for &p in self.pages.keys().filter(|&&p| p * PAGE < self.size) {
            let o = p * PAGE;
            if o > next {
                v.push(clip(next, self.size));
                v.push(clip(o - PAGE, self.size));
            }
            v.push(clip(o, self.size));
            next = o + PAGE;
        }
        if next < self.size {
            v.push(clip(next, self.size));
            let last = (self.size - 1) / PAGE * PAGE;
            v.push(clip(last.max(next), self.size));
        }
        v.sort_unstable();
        v.dedup();
        v
    }
}

#[derive(Debug, Clone)]
pub(super) enum Body {
    Dir,
    File(Content),
    Link(Vec<u8>),
}

#[derive(Debug, Clone)]
pub(super) struct Obj {
    pub(super) perm: u32,
    pub(super) uid: u32,
    pub(super) gid: u32,
    pub(super) body: Body,
    pub(super) xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
}

#[derive(Debug, Clone, Default)]
pub(super) struct Model {
    pub(super) objs: Vec<Obj>,
    /// Path (relative, '/'-separated) -> object.
    pub(super) paths: BTreeMap<String, usize>,
}

pub(super) fn parent(p: &str) -> &str {
    p.rfind('/').map_or("", |i| &p[..i])
}

pub(super) fn base(p: &str) -> &str {
    p.rfind('/').map_or(p, |i| &p[i + 1..])
}

impl Model {
    pub(super) fn new() -> Model {
        let mut m = Model::default();
        m.add("lost+found", 0o700, Body::Dir);
        m
    }
    pub(super) fn add(&mut self, p: &str, perm: u32, body: Body) {
        self.objs.push(Obj {
            perm,
            uid: 0,
            gid: 0,
            body,
            xattrs: BTreeMap::new(),
        });
        self.paths.insert(p.to_string(), self.objs.len() - 1);
    }
    pub(super) fn obj(&mut self, p: &str) -> &mut Obj {
        let i = self.paths[p];
        &mut self.objs[i]
    }
    pub(super) fn content(&mut self, p: &str) -> &mut Content {
        match &mut self.obj(p).body {
            Body::File(c) => c,
            _ => panic!("{p} is not a file in the model"),
        }
    }
    pub(super) fn rename(&mut self, from: &str, to: &str) {
        self.paths.remove(to);
        let moved: Vec<String> = self
            .paths
            .keys()
            .filter(|k| *k == from || k.starts_with(&format!("{from}/")))
            .cloned()
            .collect();
        for k in moved {
            let id = self.paths.remove(&k).expect("moved path");
            self.paths.insert(format!("{to}{}", &k[from.len()..]), id);
        }
    }
    pub(super) fn links(&self, id: usize) -> u64 {
        self.paths.values().filter(|&&i| i == id).count() as u64
    }
    pub(super) fn subdirs(&self, dir: &str) -> u64 {
        self.paths
            .iter()
            .filter(|(p, &i)| parent(p) == dir && matches!(self.objs[i].body, Body::Dir))
            .count() as u64
    }
}
