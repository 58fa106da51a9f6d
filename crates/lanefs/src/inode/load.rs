//! Loading an inode's block map into its extent map: the extent tree walked and checked
//! (blocks in the file system, extents in logical order, no node visited twice), or the
//! direct and indirect blocks of an inode without extents.

use super::InodeState;
use crate::alloc::Allocator;
use crate::buf::BufCache;
use crate::disk::blockmap;
use crate::disk::extent::{self, Extent, Node};
use crate::disk::inode::FL_EXTENTS;
use crate::error::{Error, Result};
use crate::extmap::ExtentMap;

/// Load the block map of an inode: its extent tree, or its direct and indirect blocks
/// (an inode without the extents flag), into an extent map.
pub fn load_extents(
    al: &Allocator,
    rt: Option<&crate::rtalloc::RtAlloc>,
    bufs: &BufCache,
    ino: u64,
    st: &mut InodeState,
) -> Result<()> {
    if st.ext.is_some() {
        return Ok(());
    }
    let mut out = Vec::new();
    let mut tree = Vec::new();
    if st.d.flags() & FL_EXTENTS == 0 {
        let mut read = |b: u64| -> Result<Vec<u8>> { Ok(bufs.get(b)?.read().to_vec()) };
        let geo = &al.geo;
        let (runs, nodes) = blockmap::decode(
            st.d.iblock(),
            geo.bs as usize,
            u64::from(geo.first_data_block),
            geo.blocks,
            ino,
            &mut read,
        )?;
        out = split_long_runs(runs);
        st.ind = nodes;
    } else {
        let seed = st.d.csum_seed(al.geo.seed, ino as u32);
        let root = extent::decode_node(st.d.iblock(), ino)?;
        // A realtime file's data extents are data-device blocks; its tree is in the image.
        let data_end = match rt {
            Some(rt) if crate::disk::rtdev::is_rt_file(st.d.mode(), st.d.flags()) => {
                rt.geometry().rextents * u64::from(rt.geometry().rextsize)
            }
            _ => al.geo.blocks,
        };
        walk(al, bufs, seed, root, ino, data_end, &mut out, &mut tree, 0)?;
        for w in out.windows(2) {
            if w[0].lend() > u64::from(w[1].lblk) {
                return Err(Error::corrupt("extent tree", ino, "overlapping extents"));
            }
        }
    }
    // Directory code walks blocks 0..size/bs and appends at size/bs: both must match the
    // map, or a corrupt size makes it allocate huge block lists or map a block twice.
    if crate::types::FileType::from_mode(st.d.mode()) == Some(crate::types::FileType::Directory) {
        let (end, bs) = (out.last().map_or(0, |e| e.lend()), u64::from(al.geo.bs));
        if !st.d.size().is_multiple_of(bs) || st.d.size() / bs != end {
            let msg = format!(
                "directory size {} does not match its {end} mapped blocks",
                st.d.size()
            );
            return Err(Error::corrupt("inode", ino, msg));
        }
        // A directory is at most 2 GiB without large_dir (e2fsck's limit, which lanefs
        // does not support), and no two of its blocks are one device block: a map naming
        // a few blocks many times would make readdir list gigabytes of entries.
        if st.d.size() > 1 << 31 {
            return Err(Error::corrupt("inode", ino, "directory larger than 2 GiB"));
        }
        let mut phys: Vec<(u64, u32)> = out.iter().map(|e| (e.pblk, e.len)).collect();
        phys.sort_unstable();
        if phys.windows(2).any(|w| w[0].0 + u64::from(w[0].1) > w[1].0) {
            return Err(Error::corrupt(
                "inode",
                ino,
                "directory blocks mapped twice",
            ));
        }
    }
    st.ext = Some(ExtentMap::from_extents(out));
    st.tree_blocks = tree;
    st.leaf_keys.clear();
    Ok(())
}

/// Runs of a block map cut to the longest extent the map in memory holds.
fn split_long_runs(runs: Vec<Extent>) -> Vec<Extent> {
    let mut out = Vec::with_capacity(runs.len());
    for mut e in runs {
        while e.len > extent::MAX_INIT_LEN {
            out.push(Extent {
                len: extent::MAX_INIT_LEN,
                ..e
            });
            e.lblk += extent::MAX_INIT_LEN;
            e.pblk += u64::from(extent::MAX_INIT_LEN);
            e.len -= extent::MAX_INIT_LEN;
        }
        out.push(e);
    }
    out
}

#[allow(clippy::too_many_arguments)]
fn walk(
    al: &Allocator,
    bufs: &BufCache,
    seed: u32,
    node: Node,
    ino: u64,
    data_end: u64,
    out: &mut Vec<Extent>,
    tree: &mut Vec<u64>,
    level: u16,
) -> Result<()> {
    if level > extent::MAX_DEPTH || tree.len() > 1 << 24 {
        return Err(Error::corrupt("extent tree", ino, "too deep"));
    }
    match node {
        Node::Leaf(v) => {
            // Extents come in logical order across the whole walk (ext4_valid_extent_entries
            // and the index keys say so): checked here, before they are kept, an index
            // naming one leaf many times (a fan-out that would list billions of extents
            // from a few blocks) fails at its second visit.
            let mut prev = out.last().map_or(0, Extent::lend);
            for e in &v {
                if e.pblk + u64::from(e.len) > data_end || e.pblk == 0 {
                    return Err(Error::corrupt(
                        "extent",
                        ino,
                        format!("{e:?} outside the file system"),
                    ));
                }
                if u64::from(e.lblk) < prev || e.lend() > 1 << 32 {
                    return Err(Error::corrupt("extent tree", ino, "overlapping extents"));
                }
                prev = e.lend();
            }
            out.extend(v);
        }
        Node::Index(depth, v) => {
            for ix in v {
                if ix.child >= al.geo.blocks || ix.child == 0 {
                    return Err(Error::corrupt(
                        "extent index",
                        ino,
                        format!("child {} out of range", ix.child),
                    ));
                }
                let b = bufs.get(ix.child)?;
                let data = b.read();
                // Verified once after a read: a block changed since carries its seal,
                // and its checksum is stamped when a commit logs it.
                if al.geo.csum && !b.is_verified() {
                    extent::verify_block_csum(seed, &data, ix.child)?;
                    b.set_verified();
                }
                let child = extent::decode_node(&data[..data.len() - 4], ix.child)?;
                let child_depth = match &child {
                    Node::Leaf(_) => 0,
                    Node::Index(d, _) => *d,
                };
                if child_depth + 1 != depth {
                    return Err(Error::corrupt("extent block", ix.child, "depth mismatch"));
                }
                drop(data);
                tree.push(ix.child);
                walk(al, bufs, seed, child, ino, data_end, out, tree, level + 1)?;
            }
        }
    }
    Ok(())
}
