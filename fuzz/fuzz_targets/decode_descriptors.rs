//! Group descriptors of any bytes (32- and 64-byte), under each checksum kind: every
//! accessor, the checksum, and the bitmap checksums over the rest of the input.
#![no_main]

use lanefs::internals::disk::group::{bitmap_csum, DescCsum, GroupDesc};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let size = if sel & 1 == 0 { 32 } else { 64 };
    for (g, raw) in rest.chunks_exact(size).take(64).enumerate() {
        let d = GroupDesc { raw: raw.to_vec() };
        let k = match sel >> 1 & 3 {
            0 => DescCsum::None,
            1 => DescCsum::Crc16([sel; 16]),
            _ => DescCsum::Crc32c(u32::from(sel).wrapping_mul(0x9E37_79B9)),
        };
        let _ = d.verify(k, g as u32);
        let _ = (
            d.block_bitmap(),
            d.inode_bitmap(),
            d.inode_table(),
            d.free_blocks(),
        );
        let _ = (d.free_inodes(), d.used_dirs(), d.itable_unused(), d.flags());
        let n = usize::from(raw[0]) * 8;
        let _ = bitmap_csum(7, rest, n.min(rest.len()), size == 64);
    }
});
