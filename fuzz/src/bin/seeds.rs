//! Make the seed corpus: `cargo run --bin seeds -- OUTDIR [IMAGE...]`.
//!
//! For the image targets (`open_fsck`, `mount_ops`, `replay`), one input per base shape.
//! For each decoder target, the structures of that kind found in the base shapes, in
//! their crash images, and in any IMAGE given (for example one the kernel wrote:
//! `mkfs.ext4 -O inline_data`, a tree copied in through a loop mount), each in the
//! target's input layout. A few of each kind, so the corpus kept in the tree stays small.

use lanefs::internals::disk::{
    dir, extent, geometry::Geometry, group::GroupDesc, inode::DiskInode, le16, le32,
    superblock::Superblock, xattr,
};
use lanefs_fuzz::{base, crash_image, shapes};
use std::collections::BTreeMap;
use std::path::Path;

/// Up to this many seeds of one kind from one image.
const PER_IMAGE: usize = 4;

struct Out {
    seeds: BTreeMap<&'static str, Vec<Vec<u8>>>,
}

impl Out {
    fn add(&mut self, target: &'static str, data: Vec<u8>) {
        let v = self.seeds.entry(target).or_default();
        if !v.contains(&data) {
            v.push(data);
        }
    }
}

/// Every structure of `img` the decoder targets take.
fn extract(img: &[u8], out: &mut Out) {
    let Ok(sb) = Superblock::decode(&img[1024..2048], img.len() as u64) else {
        return;
    };
    let geo = Geometry::from_superblock(&sb);
    let bs = geo.bs as usize;
    let bsel = match bs {
        1024 => 0u8,
        2048 => 1,
        _ => 2,
    };
    let mut sbseed = (img.len() as u64).to_le_bytes().to_vec();
    sbseed.push(0x80);
    sbseed.extend_from_slice(&img[1024..2048]);
    out.add("decode_superblock", sbseed);
    let gdt = geo.gdt_block(0) as usize * bs;
    let mut d = vec![u8::from(geo.desc_size >= 64) | 4];
    d.extend_from_slice(&img[gdt..gdt + bs.min(1024)]);
    out.add("decode_descriptors", d);
    let isz = geo.inode_size as usize;
    let ipg = geo.ipg as usize;
    let mut counts = BTreeMap::new();
    let mut take = |k: &'static str| {
        let n = counts.entry(k).or_insert(0usize);
        *n += 1;
        *n <= PER_IMAGE
    };
    for g in 0..geo.groups.min(4) {
        let at = geo.gdt_block(g / geo.descs_per_block()) as usize * bs
            + (g % geo.descs_per_block()) as usize * geo.desc_size as usize;
        let desc = GroupDesc {
            raw: img[at..at + geo.desc_size as usize].to_vec(),
        };
        let it = desc.inode_table() as usize * bs;
        for i in 0..ipg {
            let Some(raw) = img.get(it + i * isz..it + (i + 1) * isz) else {
                break;
            };
            let inode = DiskInode::from_bytes(raw);
            if inode.mode() == 0 || inode.links() == 0 {
                continue;
            }
            let sel = (isz / 128).trailing_zeros() as u8;
            if take("decode_inode") {
                let mut v = vec![sel];
                v.extend_from_slice(raw);
                out.add("decode_inode", v);
            }
            if inode.flags() & lanefs::internals::disk::inode::FL_INLINE_DATA != 0
                && take("decode_inline")
            {
                out.add("decode_inline", raw.to_vec());
            }
            let is_dir = inode.mode() & 0xF000 == 0x4000;
            let acl = inode.file_acl() as usize;
            if acl != 0 && take("decode_xattr") {
                if let Some(b) = img.get(acl * bs..(acl + 1) * bs) {
                    let mut v = vec![bsel | 4];
                    v.extend_from_slice(b);
                    out.add("decode_xattr", v);
                }
            }
            if inode.flags() & lanefs::internals::disk::inode::FL_EXTENTS != 0 {
                let mut v = vec![0u8];
                v.extend_from_slice(inode.iblock());
                if take("decode_extent") {
                    out.add("decode_extent", v);
                }
                let Ok(node) = extent::decode_node(inode.iblock(), 0) else {
                    continue;
                };
                if let extent::Node::Index(_, idx) = &node {
                    for ix in idx.iter().take(2) {
                        if let Some(b) =
                            img.get(ix.child as usize * bs..(ix.child as usize + 1) * bs)
                        {
                            let mut v = vec![1 | (bsel << 1)];
                            v.extend_from_slice(b);
                            out.add("decode_extent", v);
                        }
                    }
                }
                if let (true, extent::Node::Leaf(exts)) = (is_dir, &node) {
                    for e in exts.iter().take(2) {
                        for k in 0..u64::from(e.len).min(2) {
                            let p = (e.pblk + k) as usize;
                            if let Some(b) = img.get(p * bs..(p + 1) * bs) {
                                if take("decode_dir") {
                                    let mut v = vec![bsel | 4];
                                    v.extend_from_slice(b);
                                    out.add("decode_dir", v);
                                }
                            }
                        }
                    }
                }
            } else if inode.mode() & 0xF000 == 0x8000 && le32(inode.iblock(), 48) != 0 {
                // A block-mapped file with an indirect block: i_block, then the blocks
                // from its first indirect block on (decode_blockmap reads block N at N*bs
                // of what follows, wrapping).
                if take("decode_blockmap") {
                    let mut v = vec![bsel];
                    v.extend_from_slice(inode.iblock());
                    v.extend_from_slice(&img[..img.len().min(16 * bs)]);
                    out.add("decode_blockmap", v);
                }
            }
        }
    }
    // Directory blocks by their look, for block-mapped directories too.
    for b in img.chunks(bs).take(4096) {
        if (dir::has_tail(b) || (le32(b, 0) == 0 && usize::from(le16(b, 4)) == bs))
            && take("decode_dir")
        {
            let mut v = vec![bsel | 4];
            v.extend_from_slice(b);
            out.add("decode_dir", v);
        }
        if le32(b, 0) == xattr::MAGIC && take("decode_xattr") {
            let mut v = vec![bsel | 4];
            v.extend_from_slice(b);
            out.add("decode_xattr", v);
        }
    }
}

/// A crash image's log, from its first block, as `decode_jbd2` reads it.
fn journal_seed(img: &[u8], bs: usize, first: u64) -> Vec<u8> {
    let bsel = match bs {
        1024 => 0u8,
        2048 => 1,
        _ => 2,
    };
    let start = first as usize * bs;
    let mut v = vec![bsel | 4];
    v.extend_from_slice(&img[start..(start + 16 * bs).min(img.len())]);
    v
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(outdir) = args.first() else {
        eprintln!("usage: seeds OUTDIR [IMAGE...]");
        std::process::exit(2);
    };
    let mut out = Out {
        seeds: BTreeMap::new(),
    };
    for s in 0..shapes() {
        for t in ["open_fsck", "mount_ops", "replay"] {
            out.add(t, vec![s as u8]);
        }
        let b = base(s);
        extract(&b.bytes, &mut out);
        if let Some(c) = crash_image(s) {
            if let Some((first, _)) = c.journal {
                out.add("decode_jbd2", journal_seed(&c.bytes, c.bs, first));
            }
        }
    }
    // Quota files: no base shape has one (lanefs mkfs makes no quota image), so a few
    // trees as the kernel writes them, one per type.
    for (t, ids) in [
        (0u8, &[(0u32, 8192u64, 3u64)][..]),
        (1, &[(0, 4096, 2), (100, 1024, 1), (70_000, 0, 1)]),
        (2, &[(0, 0, 0), (0x0102_0304, 65536, 9)]),
    ] {
        let mut v = vec![t];
        v.extend(lanefs::internals::disk::quota::encode(usize::from(t), ids));
        out.add("decode_quota", v);
    }
    for path in &args[1..] {
        match std::fs::read(path) {
            Ok(img) => extract(&img, &mut out),
            Err(e) => {
                eprintln!("seeds: {path}: {e}");
                std::process::exit(1);
            }
        }
    }
    for (target, seeds) in &out.seeds {
        let dir = Path::new(outdir).join(target);
        std::fs::create_dir_all(&dir).expect("corpus directory");
        for s in seeds {
            // Named by content, as libFuzzer names what it keeps.
            let name = format!("seed-{:016x}", fnv(s));
            std::fs::write(dir.join(name), s).expect("write a seed");
        }
        println!("{target}: {} seeds", seeds.len());
    }
}

fn fnv(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325, |h, &x| {
        (h ^ u64::from(x)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}
