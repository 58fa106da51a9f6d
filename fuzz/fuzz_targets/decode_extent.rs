//! An extent node of any bytes: in the inode (60 bytes) or a block (1 to 64 KiB), with
//! and without its tail checksum; re-encoded when it decodes.
#![no_main]

use lanefs::internals::disk::extent;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let len = if sel & 1 == 0 {
        60
    } else {
        1024 << (sel >> 1 & 3)
    };
    let mut b = rest.to_vec();
    b.resize(len, 0);
    if let Ok(node) = extent::decode_node(&b, 1) {
        let mut out = vec![0u8; len];
        if len > 60 {
            extent::encode_block(&mut out, &node);
            extent::set_block_csum(9, &mut out);
            let _ = extent::verify_block_csum(9, &out, 1);
        } else if extent::node_capacity(60) >= node_len(&node) {
            extent::encode_node(&mut out, &node);
        }
    }
    let _ = extent::verify_block_csum(9, &b, 1);
});

fn node_len(n: &extent::Node) -> usize {
    match n {
        extent::Node::Leaf(e) => e.len(),
        extent::Node::Index(_, i) => i.len(),
    }
}
