//! The shapes: each image `mke2fs` makes that the tests cover (name, block size, size,
//! mke2fs options, what mounting must give) and its geometry.

use super::*;

// ---------------------------------------------------------------------------------------
// The shapes.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Expect {
    /// Must mount read-write.
    Rw,
    /// May mount read-only, then naming this feature; or read-write.
    RoOrRw(&'static str),
}

pub(super) struct Shape {
    pub(super) name: &'static str,
    pub(super) bs: u64,
    pub(super) size: u64,
    pub(super) mkfs: &'static [&'static str],
    /// `tune2fs` arguments applied after the kernel's tree is written (empty: none).
    pub(super) tune: &'static [&'static str],
    pub(super) expect: Expect,
}

impl Shape {
    pub(super) fn kind(&self) -> &'static str {
        let i = self
            .mkfs
            .iter()
            .position(|a| *a == "-t")
            .expect("-t in mkfs");
        self.mkfs[i + 1]
    }
    /// Files the kernel makes on this image are block-mapped.
    pub(super) fn old_blockmap(&self) -> bool {
        self.kind() != "ext4"
    }
    /// New files must use extents.
    pub(super) fn new_extents(&self) -> bool {
        self.kind() == "ext4" || self.tune.contains(&"extent")
    }
    pub(super) fn has(&self, feature: &str) -> bool {
        self.mkfs.iter().any(|a| a.split(',').any(|f| f == feature))
    }
    pub(super) fn inline(&self) -> bool {
        self.has("inline_data")
    }
    pub(super) fn ea_inode(&self) -> bool {
        self.has("ea_inode")
    }
}

pub(super) const M: u64 = 1 << 20;

/// Every shape of the matrix: each block size x ext2/ext3/ext4, then ext4 variants.
pub(super) const SHAPES: &[Shape] = &[
    sh("ext2_1k", 1024, 64 * M, &["-t", "ext2", "-b", "1024"]),
    sh("ext2_2k", 2048, 64 * M, &["-t", "ext2", "-b", "2048"]),
    sh("ext2_4k", 4096, 128 * M, &["-t", "ext2", "-b", "4096"]),
    sh("ext2_64k", 65536, 256 * M, &["-t", "ext2", "-b", "65536"]),
    sh("ext3_1k", 1024, 64 * M, &["-t", "ext3", "-b", "1024"]),
    sh("ext3_2k", 2048, 64 * M, &["-t", "ext3", "-b", "2048"]),
    sh("ext3_4k", 4096, 128 * M, &["-t", "ext3", "-b", "4096"]),
    sh("ext3_64k", 65536, 256 * M, &["-t", "ext3", "-b", "65536"]),
    sh("ext4_1k", 1024, 64 * M, &["-t", "ext4", "-b", "1024"]),
    sh("ext4_2k", 2048, 64 * M, &["-t", "ext4", "-b", "2048"]),
    sh("ext4_4k", 4096, 128 * M, &["-t", "ext4", "-b", "4096"]),
    sh("ext4_64k", 65536, 256 * M, &["-t", "ext4", "-b", "65536"]),
    sh(
        "ext4_inline_data",
        4096,
        128 * M,
        &["-t", "ext4", "-b", "4096", "-O", "inline_data"],
    ),
    sh(
        "ext4_1k_inline_data",
        1024,
        64 * M,
        &["-t", "ext4", "-b", "1024", "-O", "inline_data"],
    ),
    sh(
        "ext4_uninit_bg",
        4096,
        128 * M,
        &["-t", "ext4", "-b", "4096", "-O", "^metadata_csum,uninit_bg"],
    ),
    sh(
        "ext4_1k_meta_bg",
        1024,
        256 * M,
        &["-t", "ext4", "-b", "1024", "-O", "meta_bg,^resize_inode"],
    ),
    sh(
        "ext4_no_filetype",
        4096,
        128 * M,
        &["-t", "ext4", "-b", "4096", "-O", "^filetype"],
    ),
    sh(
        "ext4_no_dir_index",
        4096,
        128 * M,
        &["-t", "ext4", "-b", "4096", "-O", "^dir_index"],
    ),
    sh(
        "ext4_no_flex_bg",
        1024,
        64 * M,
        &["-t", "ext4", "-b", "1024", "-O", "^flex_bg"],
    ),
    sh(
        "ext4_no_sparse_super",
        4096,
        256 * M,
        &[
            "-t",
            "ext4",
            "-b",
            "4096",
            "-O",
            "^sparse_super,^resize_inode",
        ],
    ),
    sh(
        "ext2_1k_no_large_file",
        1024,
        64 * M,
        &["-t", "ext2", "-b", "1024", "-O", "^large_file"],
    ),
    sh(
        "ext4_128_inodes",
        4096,
        128 * M,
        &["-t", "ext4", "-b", "4096", "-I", "128"],
    ),
    sh(
        "ext3_1k_128_inodes",
        1024,
        64 * M,
        &["-t", "ext3", "-b", "1024", "-I", "128"],
    ),
    sh(
        "ext4_mmp",
        4096,
        128 * M,
        &["-t", "ext4", "-b", "4096", "-O", "mmp"],
    ),
    sh(
        "ext4_ea_inode",
        4096,
        128 * M,
        &["-t", "ext4", "-b", "4096", "-O", "ea_inode"],
    ),
    Shape {
        expect: Expect::RoOrRw("quota"),
        ..sh(
            "ext4_quota",
            4096,
            128 * M,
            &["-t", "ext4", "-b", "4096", "-O", "quota"],
        )
    },
    Shape {
        expect: Expect::RoOrRw("project"),
        ..sh(
            "ext4_project",
            4096,
            128 * M,
            &["-t", "ext4", "-b", "4096", "-O", "project"],
        )
    },
    Shape {
        expect: Expect::RoOrRw("bigalloc"),
        ..sh(
            "ext4_bigalloc",
            4096,
            128 * M,
            &["-t", "ext4", "-b", "4096", "-O", "bigalloc", "-C", "16384"],
        )
    },
    sh(
        "ext2_4k_oldest",
        4096,
        128 * M,
        &[
            "-t",
            "ext2",
            "-b",
            "4096",
            "-I",
            "128",
            "-O",
            "^filetype,^dir_index,^sparse_super,^resize_inode,^large_file,^ext_attr",
        ],
    ),
    Shape {
        tune: &["-O", "extent"],
        ..sh(
            "ext3_4k_then_extent",
            4096,
            128 * M,
            &["-t", "ext3", "-b", "4096"],
        )
    },
];

pub(super) const fn sh(
    name: &'static str,
    bs: u64,
    size: u64,
    mkfs: &'static [&'static str],
) -> Shape {
    Shape {
        name,
        bs,
        size,
        mkfs,
        tune: &[],
        expect: Expect::Rw,
    }
}

pub(super) fn shape(name: &str) -> &'static Shape {
    SHAPES
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no shape {name}"))
}

/// Block-map geometry: where the direct, indirect, double- and triple-indirect reach ends.
#[derive(Debug, Clone, Copy)]
pub(super) struct Geo {
    pub(super) bs: u64,
    /// Pointers per indirect block.
    pub(super) ind: u64,
}

impl Geo {
    pub(super) fn new(bs: u64) -> Geo {
        Geo { bs, ind: bs / 4 }
    }
    /// First logical block mapped through the double-indirect block.
    pub(super) fn dind_start(&self) -> u64 {
        NDIR + self.ind
    }
    /// First logical block mapped through the triple-indirect block, if a block-mapped file
    /// can reach it (i_blocks counts 512-byte sectors in 32 bits: 2 TiB).
    pub(super) fn tind_start(&self) -> Option<u64> {
        let b = NDIR + self.ind + self.ind * self.ind;
        ((b + 8) * self.bs < (1u64 << 41)).then_some(b)
    }
    /// Dense files are written whole up to this many blocks (64 KiB blocks: sparse).
    pub(super) fn dense(&self) -> bool {
        self.bs <= 4096
    }
}
