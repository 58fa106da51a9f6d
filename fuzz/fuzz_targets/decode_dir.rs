//! A directory block of any bytes (1 to 64 KiB): parsed as a leaf with and without a
//! checksum tail, searched, walked for room, and read as an htree root and node.
#![no_main]

use lanefs::internals::disk::dir;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let bs = 1024usize << (sel & 3).min(2);
    let mut b = rest.to_vec();
    b.resize(bs, 0);
    let csum = sel & 4 != 0;
    let name: &[u8] = rest.get(..usize::from(sel >> 3) % 12).unwrap_or(b"x");
    let _ = dir::parse_block(&b, csum, 1);
    let _ = dir::search_block(&b, csum, 1, name);
    let _ = dir::search_block_room(&b, csum, 1, name);
    let _ = dir::each_live(&b, csum, 1, |_, _| {});
    let _ = dir::dotdot(&b);
    let _ = dir::verify_leaf_csum(5, &b, 1);
    if let Ok(info) = dir::decode_root_info(&b, 1) {
        let _ = info;
        if let Ok(n) = dir::dx_count(&b, dir::DX_ROOT_COUNT_OFF, csum, 1) {
            let _ = dir::dx_search(&b, dir::DX_ROOT_COUNT_OFF, n, u32::from(sel) << 20);
        }
        let _ = dir::decode_dx(&b, dir::DX_ROOT_COUNT_OFF, csum, 1);
    }
    let _ = dir::decode_dx(&b, dir::DX_NODE_COUNT_OFF, csum, 1);
    let _ = dir::verify_dx_csum(5, &b, dir::DX_NODE_COUNT_OFF, 1);
});
