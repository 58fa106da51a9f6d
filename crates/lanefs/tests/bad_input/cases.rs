//! The case builders: `Case` (a named corruption and the words its mount error may use),
//! the field setters and checksum fix-ups, and every kind of corruption: truncation,
//! superblock, group descriptors, bitmaps, inodes, extent blocks, directory and htree
//! blocks (each with and without a recomputed checksum), and the indirect blocks of ext3.

use super::*;

// ---------------------------------------------------------------------------------------
// Corruptions.

type Mutate = Box<dyn Fn(&Base, &mut Vec<u8>) + Send + Sync>;

pub(super) struct Case {
    pub(super) name: String,
    pub(super) mutate: Mutate,
    pub(super) words: &'static [&'static str],
}

fn case(
    name: impl Into<String>,
    words: &'static [&'static str],
    f: impl Fn(&Base, &mut Vec<u8>) + Send + Sync + 'static,
) -> Case {
    Case {
        name: name.into(),
        mutate: Box::new(f),
        words,
    }
}

pub(super) fn set(img: &mut [u8], off: usize, width: usize, v: u64) {
    match width {
        1 => img[off] = v as u8,
        2 => put16(img, off, v as u16),
        _ => put32(img, off, v as u32),
    }
}

pub(super) fn fix_sb(img: &mut [u8]) {
    let mut sb = Superblock::zeroed();
    sb.raw.copy_from_slice(&img[1024..2048]);
    sb.update_checksum();
    img[1024..2048].copy_from_slice(&sb.raw[..]);
}

pub(super) fn fix_gd(b: &Base, img: &mut [u8], g: usize) {
    let o = b.gd_off(g);
    let mut d = GroupDesc {
        raw: img[o..o + b.desc_size].to_vec(),
    };
    d.update_checksum(b.seed, g as u32);
    img[o..o + b.desc_size].copy_from_slice(&d.raw);
}

fn fix_inode(b: &Base, img: &mut [u8], ino: u64) {
    let o = b.inode_off(ino);
    let mut d = DiskInode::from_bytes(&img[o..o + b.isz]);
    d.update_checksum(b.seed, ino as u32);
    img[o..o + b.isz].copy_from_slice(&d.raw);
}

fn block_mut(img: &mut [u8], blk: u64) -> &mut [u8] {
    &mut img[blk as usize * bs()..(blk as usize + 1) * bs()]
}

/// Recompute the bitmap checksums of group `g` in its descriptor, then the descriptor's.
fn fix_bitmaps(b: &Base, img: &mut [u8], g: usize) {
    let o = b.gd_off(g);
    let mut d = GroupDesc {
        raw: img[o..o + b.desc_size].to_vec(),
    };
    let bb = b.block_bitmaps[g] as usize * bs();
    let ib = b.inode_bitmaps[g] as usize * bs();
    d.set_block_bitmap_csum(bitmap_csum(b.seed, &img[bb..bb + bs()], b.bpg / 8, true));
    d.set_inode_bitmap_csum(bitmap_csum(
        b.seed,
        &img[ib..ib + bs()],
        b.ipg as usize / 8,
        true,
    ));
    img[o..o + b.desc_size].copy_from_slice(&d.raw);
    fix_gd(b, img, g);
}

pub(super) fn superblock_cases(out: &mut Vec<Case>) {
    let fields: &[(&str, usize, usize, &[u64])] = &[
        ("magic", 0x38, 2, &[0, 0xEF54]),
        ("inodes_count", 0x0, 4, &[0, 1, 0xFFFF_FFFF]),
        ("blocks_count", 0x4, 4, &[0, 1, 100, 0xFFFF_FFFF]),
        ("blocks_count_hi", 0x150, 4, &[1]),
        ("r_blocks_count", 0x8, 4, &[0xFFFF_FFFF]),
        ("first_data_block", 0x14, 4, &[1, 5000]),
        ("log_block_size", 0x18, 4, &[0, 1, 2, 6, 7, 31, 0xFFFF_FFFF]),
        (
            "blocks_per_group",
            0x20,
            4,
            &[0, 1, 8, 4096, 16384, 32768, 0xFFFF_FFFF],
        ),
        ("inodes_per_group", 0x28, 4, &[0, 1, 7, 16, 0xFFFF_FFFF]),
        ("inode_size", 0x58, 2, &[0, 127, 129, 512, 4096, 8192]),
        ("desc_size", 0xFE, 2, &[0, 16, 33, 128, 2048]),
        ("first_ino", 0x54, 4, &[0, 1, 0xFFFF_FFFF]),
        ("feature_compat", 0x5C, 4, &[0, 0xFFFF_FFFF]),
        ("feature_incompat", 0x60, 4, &[0, 0xFFFF_FFFF, 0x2C2, 0x242]),
        ("feature_ro_compat", 0x64, 4, &[0, 0xFFFF_FFFF, 0x07B]),
        ("rev_level", 0x4C, 4, &[0, 7]),
        ("journal_inum", 0xE0, 4, &[0, 2, 0xFFFF_FFFF]),
        ("reserved_gdt_blocks", 0xCE, 2, &[0xFFFF]),
        ("log_groups_per_flex", 0x174, 1, &[0, 31, 255]),
        ("def_hash_version", 0xFC, 1, &[7, 255]),
        ("hash_seed", 0xEC, 4, &[0xDEAD_BEEF]),
        ("state", 0x3A, 2, &[0xFFFF]),
        ("flags", 0x160, 4, &[0xFFFF_FFFF]),
        ("last_orphan", 0xE8, 4, &[12, 0xFFFF_FFFF]),
        ("min_extra_isize", 0x15C, 2, &[0xFFFF]),
        ("checksum", 0x3FC, 4, &[0]),
    ];
    for &(name, off, width, values) in fields {
        for &v in values {
            // Changed features change which checksums are checked (0x7b drops
            // metadata_csum and sets gdt_csum): the first mismatch may be elsewhere.
            let raw_words = if name.starts_with("feature") { ANY } else { SB };
            out.push(case(
                format!("sb {name}={v:#x}"),
                raw_words,
                move |_, img| set(img, 1024 + off, width, v),
            ));
            if name != "checksum" {
                let words = if name == "magic" { SB } else { ANY };
                out.push(case(
                    format!("sb {name}={v:#x} csum fixed"),
                    words,
                    move |_, img| {
                        set(img, 1024 + off, width, v);
                        fix_sb(img);
                    },
                ));
            }
        }
    }
    // Consistent but wrong: fewer inodes per group with a matching inode count.
    out.push(case("sb ipg=16 count=32 csum fixed", ANY, |_, img| {
        set(img, 1024 + 0x28, 4, 16);
        set(img, 1024, 4, 32);
        fix_sb(img);
    }));
    for off in (0..0x200).step_by(8) {
        out.push(case(
            format!("sb xor byte {off:#x} csum fixed"),
            ANY,
            move |_, img| {
                img[1024 + off] ^= 0xFF;
                fix_sb(img);
            },
        ));
    }
}

pub(super) fn group_cases(out: &mut Vec<Case>) {
    let fields: &[(&str, usize, usize, &[u64])] = &[
        ("block_bitmap", 0x0, 4, &[0, 1, 0xFFFF_FFFF]),
        ("inode_bitmap", 0x4, 4, &[0, 0xFFFF_FFFF]),
        ("inode_table", 0x8, 4, &[0, 1, 16000, 0xFFFF_FFF0]),
        ("free_blocks", 0xC, 2, &[0, 0xFFFF]),
        ("free_inodes", 0xE, 2, &[0, 0xFFFF]),
        ("used_dirs", 0x10, 2, &[0xFFFF]),
        ("flags", 0x12, 2, &[1, 2, 3, 0xFFFF]),
        ("itable_unused", 0x1C, 2, &[0xFFFF]),
        ("block_bitmap_hi", 0x20, 4, &[1]),
        ("inode_table_hi", 0x28, 4, &[1]),
        ("free_blocks_hi", 0x2C, 2, &[0xFFFF]),
    ];
    for g in 0..2usize {
        for &(name, off, width, values) in fields {
            for &v in values {
                out.push(case(format!("gd{g} {name}={v:#x}"), GD, move |b, img| {
                    set(img, b.gd_off(g) + off, width, v)
                }));
                out.push(case(
                    format!("gd{g} {name}={v:#x} csum fixed"),
                    ANY,
                    move |b, img| {
                        set(img, b.gd_off(g) + off, width, v);
                        fix_gd(b, img, g);
                    },
                ));
            }
        }
        // The inode table moved onto the big file's data or onto the block bitmap.
        out.push(case(
            format!("gd{g} inode_table=big data csum fixed"),
            ANY,
            move |b, img| {
                set(img, b.gd_off(g) + 8, 4, b.big_data);
                fix_gd(b, img, g);
            },
        ));
        out.push(case(
            format!("gd{g} inode_table=block bitmap csum fixed"),
            ANY,
            move |b, img| {
                set(img, b.gd_off(g) + 8, 4, b.block_bitmaps[g]);
                fix_gd(b, img, g);
            },
        ));
    }
    out.push(case("gdt block zeroed", GD, |b, img| {
        block_mut(img, b.gdt_block as u64).fill(0)
    }));
}

pub(super) fn bitmap_cases(out: &mut Vec<Case>) {
    for g in 0..2usize {
        for (kind, which) in [("block", 0), ("inode", 1)] {
            for (fill, pat) in [("zeroed", 0u8), ("all ones", 0xFF), ("garbage", 0x5A)] {
                for fixed in [false, true] {
                    out.push(case(
                        format!(
                            "{kind} bitmap {g} {fill}{}",
                            if fixed { " csum fixed" } else { "" }
                        ),
                        ANY,
                        move |b, img| {
                            let blk = if which == 0 {
                                b.block_bitmaps[g]
                            } else {
                                b.inode_bitmaps[g]
                            };
                            let m = block_mut(img, blk);
                            if pat == 0x5A {
                                let mut rng = StdRng::seed_from_u64(blk);
                                rng.fill_bytes(m);
                            } else {
                                m.fill(pat);
                            }
                            if fixed {
                                fix_bitmaps(b, img, g);
                            }
                        },
                    ));
                }
            }
        }
    }
}

pub(super) fn inode_cases(out: &mut Vec<Case>) {
    type Pick = fn(&Base) -> u64;
    let targets: &[(&str, Pick)] = &[
        ("root", |_| 2),
        ("dir1", |b| b.dir1),
        ("dir2", |b| b.dir2),
        ("medium", |b| b.medium),
        ("frag", |b| b.frag),
        ("htree", |b| b.htree),
        ("ln_long", |b| b.ln_long),
        ("journal", |_| 8),
    ];
    let fields: &[(&str, usize, usize, &[u64])] = &[
        ("mode", 0x0, 2, &[0, 0o100644, 0o040755, 0o120777]),
        ("size", 0x4, 4, &[0, 4095, 0xFFFF_FFFF]),
        ("size_hi", 0x6C, 4, &[0xFFFF_FFFF]),
        ("links", 0x1A, 2, &[0, 0xFFFF]),
        ("blocks", 0x1C, 4, &[0xFFFF_FFFF]),
        (
            "flags",
            0x20,
            4,
            &[0, 0xFFFF_FFFF, 0x1008_0000, 0x0008_1000],
        ),
        ("extent magic", 0x28, 2, &[0]),
        ("extent entries", 0x2A, 2, &[5, 0xFFFF]),
        ("extent max", 0x2C, 2, &[0, 5]),
        ("extent depth", 0x2E, 2, &[1, 3, 6]),
        ("first extent lblk", 0x34, 4, &[0xFFFF_FFFF]),
        ("first extent len/child", 0x38, 4, &[0, 0x8000, 0xFFFF_FFFF]),
        ("first extent start", 0x3C, 4, &[0, 0xFFFF_FFFF]),
        ("file_acl", 0x68, 4, &[1, 0xFFFF_FFFF]),
        ("generation", 0x64, 4, &[0x1234_5678]),
        ("extra_isize", 0x80, 2, &[3, 0xFFFF]),
    ];
    for &(tname, pick) in targets {
        for &(fname, off, width, values) in fields {
            for (k, &v) in values.iter().enumerate() {
                // Without the checksum fixed every value fails the same check: try one.
                if k == 0 || tname == "root" {
                    let raw_words = if tname == "root" { INODE } else { ANY };
                    out.push(case(
                        format!("inode {tname} {fname}={v:#x}"),
                        raw_words,
                        move |b, img| {
                            let ino = pick(b);
                            set(img, b.inode_off(ino) + off, width, v);
                        },
                    ));
                }
                out.push(case(
                    format!("inode {tname} {fname}={v:#x} csum fixed"),
                    ANY,
                    move |b, img| {
                        let ino = pick(b);
                        set(img, b.inode_off(ino) + off, width, v);
                        fix_inode(b, img, ino);
                    },
                ));
            }
        }
        out.push(case(
            format!("inode {tname} zeroed csum fixed"),
            ANY,
            move |b, img| {
                let ino = pick(b);
                let o = b.inode_off(ino);
                img[o..o + b.isz].fill(0);
                fix_inode(b, img, ino);
            },
        ));
    }
    // Index child pointing at an inode table block or at the superblock.
    for (what, target) in [("inode table", 0usize), ("block 0", 1)] {
        out.push(case(
            format!("inode frag index child={what} csum fixed"),
            ANY,
            move |b, img| {
                let v = if target == 0 { b.tables[0] } else { 0 };
                set(img, b.inode_off(b.frag) + 0x38, 4, v);
                fix_inode(b, img, b.frag);
            },
        ));
    }
}

pub(super) fn extent_block_cases(out: &mut Vec<Case>) {
    type Pick = fn(&Base) -> u64;
    let blocks: &[(&str, Pick)] = &[("index", |b| b.frag_index), ("leaf", |b| b.frag_leaf)];
    let fields: &[(&str, usize, usize, &[u64])] = &[
        ("magic", 0, 2, &[0, 0x1234]),
        ("entries", 2, 2, &[0, 341, 0xFFFF]),
        ("max", 4, 2, &[0, 1, 341, 0xFFFF]),
        ("depth", 6, 2, &[0, 1, 2, 5, 0xFFFF]),
        ("first lblk", 12, 4, &[0xFFFF_FFFF, 7]),
        ("first len/child", 16, 4, &[0, 1, 0x8000, 0xFFFF_FFFF]),
        ("first start", 20, 4, &[0, 1, 0xFFFF_FFFF]),
        ("second lblk", 24, 4, &[0]),
    ];
    for &(bname, pick) in blocks {
        for &(fname, off, width, values) in fields {
            for &v in values {
                for fixed in [false, true] {
                    let name = format!(
                        "extent {bname} block {fname}={v:#x}{}",
                        if fixed { " csum fixed" } else { "" }
                    );
                    out.push(case(name, ANY, move |b, img| {
                        let blk = pick(b);
                        set(block_mut(img, blk), off, width, v);
                        // The tail sits after `max` entries: only a max that leaves room
                        // for it can carry a checksum at all.
                        if fixed && 12 + 12 * usize::from(le16(block_mut(img, blk), 4)) + 4 <= bs()
                        {
                            let seed = b.inode_seed(img, b.frag);
                            extent::set_block_csum(seed, block_mut(img, blk));
                        }
                    }));
                }
            }
        }
        // A child pointing at its own block, an inode table block, the other tree block.
        for (what, t) in [
            ("itself", 0usize),
            ("inode table", 1),
            ("sibling tree block", 2),
        ] {
            out.push(case(
                format!("extent {bname} block child={what} csum fixed"),
                ANY,
                move |b, img| {
                    let blk = pick(b);
                    let v = match t {
                        0 => blk,
                        1 => b.tables[0],
                        _ => {
                            if blk == b.frag_index {
                                b.frag_leaf
                            } else {
                                b.frag_index
                            }
                        }
                    };
                    set(block_mut(img, blk), 16, 4, v);
                    let seed = b.inode_seed(img, b.frag);
                    extent::set_block_csum(seed, block_mut(img, blk));
                },
            ));
        }
        out.push(case(
            format!("extent {bname} block garbage csum fixed"),
            ANY,
            move |b, img| {
                let blk = pick(b);
                let mut rng = StdRng::seed_from_u64(blk);
                rng.fill_bytes(block_mut(img, blk));
                set(block_mut(img, blk), 0, 2, u64::from(extent::EXT_MAGIC));
                set(block_mut(img, blk), 4, 2, 340);
                let seed = b.inode_seed(img, b.frag);
                extent::set_block_csum(seed, block_mut(img, blk));
            },
        ));
    }
}

/// Offset of entry `name` in a linear directory block.
fn entry_off(block: &[u8], name: &[u8]) -> usize {
    dd::parse_block(block, true, 0)
        .or_else(|_| dd::parse_block(block, false, 0))
        .expect("clean dir block")
        .iter()
        .find(|e| e.name == name)
        .expect("entry")
        .off
}

pub(super) fn dir_cases(out: &mut Vec<Case>) {
    type Edit = fn(&Base, &mut [u8]);
    // Linear directory dir1: offsets relative to the block.
    let linear: &[(&str, Edit)] = &[
        ("dot rec_len=0", |_, d| put16(d, 4, 0)),
        ("dot rec_len past end", |_, d| put16(d, 4, 0xFFFC)),
        ("dot rec_len unaligned", |_, d| put16(d, 4, 13)),
        ("dot rec_len=8", |_, d| put16(d, 4, 8)),
        ("dot name_len=255", |_, d| d[6] = 255),
        ("dotdot ino huge", |_, d| put32(d, 12, 0xFFFF_FFFF)),
        ("dotdot rec_len=0", |_, d| put16(d, 16, 0)),
        ("entry a1 ino huge", |_, d| {
            let o = entry_off(d, b"a1");
            put32(d, o, 0xFFFF_FFF0)
        }),
        ("entry a1 ino=1", |_, d| {
            let o = entry_off(d, b"a1");
            put32(d, o, 1)
        }),
        ("entry a1 free inode", |_, d| {
            let o = entry_off(d, b"a1");
            put32(d, o, 5000)
        }),
        ("entry a1 ft=9", |_, d| {
            let o = entry_off(d, b"a1");
            d[o + 7] = 9
        }),
        ("entry a1 ft=dir", |_, d| {
            let o = entry_off(d, b"a1");
            d[o + 7] = 2
        }),
        ("entry a1 rec_len=0", |_, d| {
            let o = entry_off(d, b"a1");
            put16(d, o + 4, 0)
        }),
        ("entry a1 rec_len=4096", |_, d| {
            let o = entry_off(d, b"a1");
            put16(d, o + 4, 4096)
        }),
        ("entry a1 name_len=255", |_, d| {
            let o = entry_off(d, b"a1");
            d[o + 6] = 255
        }),
        ("entry a1 name_len=0", |_, d| {
            let o = entry_off(d, b"a1");
            d[o + 6] = 0
        }),
        ("dir2 entry -> root (cycle)", |_, d| {
            let o = entry_off(d, b"dir2");
            put32(d, o, 2)
        }),
        ("a1 entry -> dir1 itself", |b, d| {
            let o = entry_off(d, b"a1");
            put32(d, o, b.dir1 as u32);
            d[o + 7] = 2
        }),
        ("tail garbage", |_, d| d[bs() - 12..].fill(0xAB)),
        ("whole block garbage", |b, d| {
            StdRng::seed_from_u64(b.dir1_block).fill_bytes(d)
        }),
    ];
    for &(name, edit) in linear {
        for fixed in [false, true] {
            out.push(case(
                format!(
                    "dir1 block {name}{}",
                    if fixed { " csum fixed" } else { "" }
                ),
                ANY,
                move |b, img| {
                    edit(b, block_mut(img, b.dir1_block));
                    if fixed {
                        let seed = b.inode_seed(img, b.dir1);
                        dd::set_leaf_csum(seed, block_mut(img, b.dir1_block));
                    }
                },
            ));
        }
    }
    let root_edits: &[(&str, Edit)] = &[
        ("hash_version=9", |_, d| d[0x1C] = 9),
        ("hash_version=255", |_, d| d[0x1C] = 255),
        ("info_length=0", |_, d| d[0x1D] = 0),
        ("info_length=255", |_, d| d[0x1D] = 255),
        ("indirect_levels=1", |_, d| d[0x1E] = 1),
        ("indirect_levels=3", |_, d| d[0x1E] = 3),
        ("indirect_levels=255", |_, d| d[0x1E] = 255),
        ("unused_flags=255", |_, d| d[0x1F] = 255),
        ("limit=0", |_, d| put16(d, 0x20, 0)),
        ("limit=1", |_, d| put16(d, 0x20, 1)),
        ("limit=0xffff", |_, d| put16(d, 0x20, 0xFFFF)),
        ("count=0", |_, d| put16(d, 0x22, 0)),
        ("count=0xffff", |_, d| put16(d, 0x22, 0xFFFF)),
        ("count=limit+1", |_, d| {
            let l = le16(d, 0x20);
            put16(d, 0x22, l + 1)
        }),
        ("first block=0 (itself)", |_, d| put32(d, 0x24, 0)),
        ("first block=5000", |_, d| put32(d, 0x24, 5000)),
        ("first block=0xffffffff", |_, d| put32(d, 0x24, 0xFFFF_FFFF)),
        ("second hash=0", |_, d| put32(d, 0x28, 0)),
        ("second hash=max", |_, d| put32(d, 0x28, 0xFFFF_FFFF)),
        ("second block=0", |_, d| put32(d, 0x2C, 0)),
        ("second block=first", |_, d| {
            let f = le32(d, 0x24);
            put32(d, 0x2C, f)
        }),
        ("entries reversed", |_, d| {
            let n = usize::from(le16(d, 0x22));
            let mut v: Vec<(u32, u32)> = (1..n)
                .map(|i| (le32(d, 0x20 + 8 * i), le32(d, 0x24 + 8 * i)))
                .collect();
            v.reverse();
            for (i, (h, blk)) in v.into_iter().enumerate() {
                put32(d, 0x28 + 8 * i, h);
                put32(d, 0x2C + 8 * i, blk);
            }
        }),
        ("dot rec_len=0", |_, d| put16(d, 4, 0)),
        ("dotdot name_len=0", |_, d| d[12 + 6] = 0),
    ];
    for &(name, edit) in root_edits {
        for fixed in [false, true] {
            out.push(case(
                format!(
                    "htree root {name}{}",
                    if fixed { " csum fixed" } else { "" }
                ),
                ANY,
                move |b, img| {
                    edit(b, block_mut(img, b.htree_root));
                    // The dx tail sits after `limit` entries: only a sane count/limit has one.
                    let d = block_mut(img, b.htree_root);
                    let (limit, count) = (usize::from(le16(d, 0x20)), usize::from(le16(d, 0x22)));
                    if fixed && count <= limit && DX_ROOT_COUNT_OFF + 8 * limit + 8 <= bs() {
                        let seed = b.inode_seed(img, b.htree);
                        dd::set_dx_csum(seed, block_mut(img, b.htree_root), DX_ROOT_COUNT_OFF);
                    }
                },
            ));
        }
    }
    let leaf_edits: &[(&str, Edit)] = &[
        ("first rec_len=0", |_, d| put16(d, 4, 0)),
        ("first rec_len past end", |_, d| put16(d, 4, 0xFFFC)),
        ("first name_len=255", |_, d| d[6] = 255),
        ("first ino huge", |_, d| put32(d, 0, 0xFFFF_FFFF)),
        ("first ino -> htree dir", |b, d| {
            put32(d, 0, b.htree as u32);
            d[7] = 2
        }),
        ("tail missing", |_, d| d[bs() - 12..].fill(0)),
        ("garbage", |b, d| {
            StdRng::seed_from_u64(b.htree_leaf).fill_bytes(d)
        }),
    ];
    for &(name, edit) in leaf_edits {
        for fixed in [false, true] {
            out.push(case(
                format!(
                    "htree leaf {name}{}",
                    if fixed { " csum fixed" } else { "" }
                ),
                ANY,
                move |b, img| {
                    edit(b, block_mut(img, b.htree_leaf));
                    if fixed {
                        let seed = b.inode_seed(img, b.htree);
                        dd::set_leaf_csum(seed, block_mut(img, b.htree_leaf));
                    }
                },
            ));
        }
    }
}

pub(super) fn truncation_cases(out: &mut Vec<Case>, len: usize) {
    for cut in [0, 1000, 2048, 4096, 3 * bs(), len / 2, len - 4096] {
        out.push(case(format!("truncated to {cut}"), SB, move |_, img| {
            img.truncate(cut)
        }));
    }
}

/// Damage to the indirect and double-indirect blocks of a block-mapped file (ext3).
pub(super) fn indirect_block_cases(out: &mut Vec<Case>) {
    type Pick = fn(&Base) -> u64;
    let blocks: &[(&str, Pick)] = &[("ind", |b| b.frag_index), ("dind", |b| b.frag_leaf)];
    type Val = fn(&Base, u64) -> u64;
    let values: &[(&str, Val)] = &[
        ("0xffffffff", |_, _| 0xFFFF_FFFF),
        ("past the end", |b, _| (b.img.len() / b.bs) as u64 + 10),
        ("block 0 (superblock)", |_, _| 0),
        ("block 1", |_, _| 1),
        ("itself", |_, blk| blk),
        ("inode table", |b, _| b.tables[0]),
        ("block bitmap", |b, _| b.block_bitmaps[0]),
        ("big's data (shared)", |b, _| b.big_data),
        ("the other map block", |b, blk| {
            if blk == b.frag_index {
                b.frag_leaf
            } else {
                b.frag_index
            }
        }),
    ];
    for &(bname, pick) in blocks {
        for &(vname, val) in values {
            for slot in [0usize, 1, 200] {
                out.push(case(
                    format!("{bname} block pointer {slot} = {vname}"),
                    ANY,
                    move |b, img| {
                        let blk = pick(b);
                        let v = val(b, blk);
                        set(block_mut(img, blk), 4 * slot, 4, v);
                    },
                ));
            }
        }
        out.push(case(
            format!("{bname} block garbage"),
            ANY,
            move |b, img| {
                let blk = pick(b);
                StdRng::seed_from_u64(blk).fill_bytes(block_mut(img, blk));
            },
        ));
        out.push(case(
            format!("{bname} block all ones"),
            ANY,
            move |b, img| {
                block_mut(img, pick(b)).fill(0xFF);
            },
        ));
        out.push(case(format!("{bname} block zeroed"), ANY, move |b, img| {
            block_mut(img, pick(b)).fill(0);
        }));
    }
    // The inode's own pointers: IND, DIND and TIND slots.
    for (slot, what) in [(12usize, "ind"), (13, "dind"), (14, "tind")] {
        for (vname, v) in [("0xffffffff", 0xFFFF_FFFFu64), ("superblock", 0), ("1", 1)] {
            out.push(case(
                format!("inode frag i_block[{slot}] ({what}) = {vname}"),
                ANY,
                move |b, img| {
                    set(img, b.inode_off(b.frag) + 0x28 + 4 * slot, 4, v);
                },
            ));
        }
        out.push(case(
            format!("inode frag i_block[{slot}] ({what}) = inode table"),
            ANY,
            move |b, img| {
                set(img, b.inode_off(b.frag) + 0x28 + 4 * slot, 4, b.tables[0]);
            },
        ));
    }
}
