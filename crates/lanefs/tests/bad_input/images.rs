//! The populated base images and where their structures live: the image shapes (ext4 with
//! 4 KiB and 1 KiB blocks, ext3), each base built once per test binary (mkfs, lanefs
//! populates it, e2fsck checks it), `Base`, which locates every structure the cases damage,
//! and the readers of extent trees and block maps from raw bytes.

use super::*;

// ---------------------------------------------------------------------------------------
// The populated base image and where its structures live.

/// The clean image and the location of everything the cases damage.
pub(super) struct Base {
    pub(super) img: Vec<u8>,
    /// Block size.
    pub(super) bs: usize,
    /// The first block of the group descriptor table.
    pub(super) gdt_block: usize,
    /// Files are extent-mapped (else block maps: frag_index and frag_leaf are the
    /// indirect and double-indirect blocks of frag).
    pub(super) extents: bool,
    pub(super) seed: u32,
    pub(super) desc_size: usize,
    pub(super) ipg: u64,
    pub(super) isz: usize,
    pub(super) tables: Vec<u64>,
    pub(super) block_bitmaps: Vec<u64>,
    pub(super) inode_bitmaps: Vec<u64>,
    pub(super) bpg: usize,
    /// Inode numbers by name.
    pub(super) dir1: u64,
    pub(super) dir2: u64,
    pub(super) medium: u64,
    big: u64,
    pub(super) frag: u64,
    pub(super) htree: u64,
    pub(super) ln_long: u64,
    /// Physical blocks.
    pub(super) dir1_block: u64,
    pub(super) htree_root: u64,
    pub(super) htree_leaf: u64,
    pub(super) frag_index: u64,
    pub(super) frag_leaf: u64,
    pub(super) big_data: u64,
}

impl Base {
    pub(super) fn inode_off(&self, ino: u64) -> usize {
        let g = ((ino - 1) / self.ipg) as usize;
        self.tables[g] as usize * self.bs + ((ino - 1) % self.ipg) as usize * self.isz
    }
    fn inode(&self, img: &[u8], ino: u64) -> DiskInode {
        let o = self.inode_off(ino);
        DiskInode::from_bytes(&img[o..o + self.isz])
    }
    pub(super) fn inode_seed(&self, img: &[u8], ino: u64) -> u32 {
        self.inode(img, ino).csum_seed(self.seed, ino as u32)
    }
    pub(super) fn gd_off(&self, g: usize) -> usize {
        self.gdt_block * self.bs + g * self.desc_size
    }
}

/// An image shape a base is built on.
pub(super) struct Shape {
    idx: usize,
    bs: usize,
    /// `mke2fs` arguments; empty: `mkfs.ext4 -b 4096 -g 8192` as always.
    mkfs: &'static [&'static str],
}

const EXT4_4K: Shape = Shape {
    idx: 0,
    bs: 4096,
    mkfs: &[],
};

/// ext4 with 1 KiB blocks (8 groups of 8 MiB).
pub(super) const EXT4_1K: Shape = Shape {
    idx: 1,
    bs: 1024,
    mkfs: &["-t", "ext4", "-b", "1024"],
};

/// ext3: block maps, no checksums, a journal with 32-bit tags (two groups).
pub(super) const EXT3: Shape = Shape {
    idx: 2,
    bs: 4096,
    mkfs: &["-t", "ext3", "-b", "4096", "-g", "8192"],
};

pub(super) fn base(test: &str) -> Option<&'static Base> {
    base_of(test, &EXT4_4K)
}

pub(super) fn base_of(test: &str, shape: &Shape) -> Option<&'static Base> {
    static BASE: [OnceLock<Option<Base>>; 3] = [OnceLock::new(), OnceLock::new(), OnceLock::new()];
    set_bs(shape.bs);
    let b = BASE[shape.idx].get_or_init(|| {
        if !common::have_tool("mkfs.ext4") || !common::have_tool("e2fsck") {
            return None;
        }
        Some(build_base(shape))
    });
    if b.is_none() {
        common::skip(test, "mkfs.ext4 or e2fsck not found");
    }
    b.as_ref()
}

pub(super) fn block_pattern(k: u64) -> Vec<u8> {
    let mut rng = StdRng::seed_from_u64(k);
    let mut b = vec![0u8; bs()];
    rng.fill_bytes(&mut b);
    b
}

/// Extents (lblk, pblk) and tree blocks of an extent inode, read from raw bytes.
fn tree_of(img: &[u8], iblock: &[u8]) -> (Vec<(u32, u64)>, Vec<u64>) {
    let mut ext = Vec::new();
    let mut tree = Vec::new();
    let mut stack = vec![extent::decode_node(iblock, 0).expect("clean extent root")];
    while let Some(n) = stack.pop() {
        match n {
            Node::Leaf(v) => ext.extend(v.iter().map(|e| (e.lblk, e.pblk))),
            Node::Index(_, v) => {
                for ix in v.iter().rev() {
                    tree.push(ix.child);
                    let b = &img[ix.child as usize * bs()..(ix.child as usize + 1) * bs()];
                    stack.push(
                        extent::decode_node(&b[..bs() - 4], ix.child).expect("clean extent block"),
                    );
                }
            }
        }
    }
    ext.sort();
    (ext, tree)
}

/// Data blocks (lblk, pblk) and indirect blocks of a block-mapped inode, from raw bytes.
fn blockmap_of(img: &[u8], iblock: &[u8]) -> (Vec<(u32, u64)>, Vec<u64>) {
    let bs = bs();
    let per = (bs / 4) as u64;
    let mut data = Vec::new();
    let mut meta = Vec::new();
    fn walk(
        img: &[u8],
        bs: usize,
        blk: u64,
        level: u32,
        first: u64,
        data: &mut Vec<(u32, u64)>,
        meta: &mut Vec<u64>,
    ) {
        if blk == 0 {
            return;
        }
        if level == 0 {
            data.push((first as u32, blk));
            return;
        }
        meta.push(blk);
        let per = (bs / 4) as u64;
        let span = per.pow(level - 1);
        let b = &img[blk as usize * bs..(blk as usize + 1) * bs];
        for i in 0..per as usize {
            let p = u64::from(le32(b, 4 * i));
            walk(img, bs, p, level - 1, first + i as u64 * span, data, meta);
        }
    }
    for i in 0..12 {
        walk(
            img,
            bs,
            u64::from(le32(iblock, 4 * i)),
            0,
            i as u64,
            &mut data,
            &mut meta,
        );
    }
    let mut first = 12;
    for (k, level) in [(12usize, 1u32), (13, 2), (14, 3)] {
        walk(
            img,
            bs,
            u64::from(le32(iblock, 4 * k)),
            level,
            first,
            &mut data,
            &mut meta,
        );
        first += per.pow(level);
    }
    data.sort();
    (data, meta)
}

/// The inode's data blocks and mapping blocks, extents or block map.
fn map_of(img: &[u8], iblock: &[u8], extents: bool) -> (Vec<(u32, u64)>, Vec<u64>) {
    if extents {
        tree_of(img, iblock)
    } else {
        blockmap_of(img, iblock)
    }
}

fn build_base(shape: &Shape) -> Base {
    let td = tempfile::tempdir().expect("tempdir");
    let path = if shape.mkfs.is_empty() {
        common::mkfs_image_args(td.path(), "base.img", 64 << 20, &["-g", "8192"])
    } else {
        common::mke2fs_image(td.path(), "base.img", 64 << 20, shape.mkfs).expect("mke2fs")
    };
    let fs = Fs::mount_path(&path, MountOptions::default()).expect("mount base");
    let o = Owner::default();
    let put = |dir: Ino, name: &str, data: &[u8]| {
        let a = fs.create(dir, name.as_bytes(), 0o644, o).expect("create");
        if !data.is_empty() {
            fs.write(a.ino, 0, data).expect("write");
        }
        fs.release(a.ino).expect("release");
        a.ino
    };
    let mut rng = StdRng::seed_from_u64(99);
    let mut big = vec![0u8; 1 << 20];
    rng.fill_bytes(&mut big);
    put(ROOT_INO, "small", b"hello, small file\n");
    put(ROOT_INO, "medium", &big[..50_000]);
    put(ROOT_INO, "big", &big);
    put(ROOT_INO, "empty", b"");
    let dir1 = fs.mkdir(ROOT_INO, b"dir1", 0o755, o).expect("mkdir");
    for i in 0..20 {
        put(
            dir1.ino,
            &format!("a{i}"),
            format!("file a{i}\n").as_bytes(),
        );
    }
    let dir2 = fs.mkdir(dir1.ino, b"dir2", 0o700, o).expect("mkdir");
    put(dir2.ino, "deep", b"deep file\n");
    let htree = fs.mkdir(ROOT_INO, b"htree", 0o755, o).expect("mkdir");
    for i in 0..HTREE_ENTRIES {
        let c = if i % 50 == 0 {
            format!("entry {i}\n")
        } else {
            String::new()
        };
        put(htree.ino, &format!("entry_{i:05}"), c.as_bytes());
    }
    let frag = fs.create(ROOT_INO, b"frag", 0o644, o).expect("create frag");
    for k in 0..FRAG_EXTENTS {
        fs.write(frag.ino, 2 * k * bs() as u64, &block_pattern(k))
            .expect("write frag");
    }
    fs.release(frag.ino).expect("release");
    fs.symlink(ROOT_INO, b"ln_short", b"dir1/a1", o)
        .expect("symlink");
    fs.symlink(
        ROOT_INO,
        b"ln_long",
        "dir1/../dir1/./a2".repeat(6).as_bytes(),
        o,
    )
    .expect("symlink");
    fs.mknod(ROOT_INO, b"fifo", 0o010644, 0, o).expect("mknod");
    fs.mknod(ROOT_INO, b"null", 0o020666, (1 << 8) | 3, o)
        .expect("mknod");
    fs.setattr(
        dir2.ino,
        &SetAttr {
            perm: Some(0o750),
            ..Default::default()
        },
    )
    .expect("setattr");
    let ino = |dir: Ino, name: &str| fs.lookup(dir, name.as_bytes()).expect("lookup").ino;
    let (medium, bigi, ln_long) = (
        ino(ROOT_INO, "medium"),
        ino(ROOT_INO, "big"),
        ino(ROOT_INO, "ln_long"),
    );
    fs.unmount().expect("unmount base");
    common::assert_fsck_clean(&path);
    let img = std::fs::read(&path).expect("read base image");

    let sb = Superblock::decode(&img[1024..2048], img.len() as u64).expect("base superblock");
    let desc_size = sb.desc_size() as usize;
    let groups = sb.group_count() as usize;
    let bs = bs();
    let gdt = (sb.first_data_block() as usize + 1) * bs;
    let gds: Vec<GroupDesc> = (0..groups)
        .map(|g| GroupDesc {
            raw: img[gdt + g * desc_size..gdt + (g + 1) * desc_size].to_vec(),
        })
        .collect();
    let extents = !shape.mkfs.contains(&"ext3");
    let mut b = Base {
        bs,
        gdt_block: gdt / bs,
        extents,
        seed: sb.csum_seed(),
        desc_size,
        ipg: u64::from(sb.inodes_per_group()),
        isz: usize::from(sb.inode_size()),
        tables: gds.iter().map(|d| d.inode_table()).collect(),
        block_bitmaps: gds.iter().map(|d| d.block_bitmap()).collect(),
        inode_bitmaps: gds.iter().map(|d| d.inode_bitmap()).collect(),
        bpg: sb.blocks_per_group() as usize,
        dir1: dir1.ino,
        dir2: dir2.ino,
        medium,
        big: bigi,
        frag: frag.ino,
        htree: htree.ino,
        ln_long,
        dir1_block: 0,
        htree_root: 0,
        htree_leaf: 0,
        frag_index: 0,
        frag_leaf: 0,
        big_data: 0,
        img,
    };
    assert!(groups >= 2, "base image should have two groups");
    let iblock = |b: &Base, ino: u64| b.inode(&b.img, ino).iblock().to_vec();
    b.dir1_block = map_of(&b.img, &iblock(&b, b.dir1), extents).0[0].1;
    let (hext, _) = map_of(&b.img, &iblock(&b, b.htree), extents);
    b.htree_root = hext[0].1;
    let root_blk = &b.img[b.htree_root as usize * bs..(b.htree_root as usize + 1) * bs];
    let first_leaf = le32(root_blk, DX_ROOT_COUNT_OFF + 4);
    // The extent (or mapped block) holding the first leaf.
    b.htree_leaf = hext
        .iter()
        .rev()
        .find(|e| e.0 <= first_leaf)
        .map(|e| e.1 + u64::from(first_leaf - e.0))
        .expect("htree leaf");
    let (fext, ftree) = map_of(&b.img, &iblock(&b, b.frag), extents);
    assert_eq!(fext.len() as u64, FRAG_EXTENTS);
    if extents {
        let depth = le16(&iblock(&b, b.frag), 6);
        assert!(depth >= 2, "frag tree depth {depth}, want 2");
    } else {
        // The indirect block, then the double-indirect one (blocks 12 .. 2 x 1500).
        assert!(
            ftree.len() >= 2,
            "frag maps through {ftree:?}, want IND and DIND"
        );
    }
    b.frag_index = ftree[0];
    b.frag_leaf = ftree[1];
    b.big_data = map_of(&b.img, &iblock(&b, b.big), extents).0[0].1;
    b
}
