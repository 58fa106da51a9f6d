//! An xattr block of any bytes (1 to 64 KiB), with and without its checksum, and the
//! values it names decoded as POSIX ACLs.
#![no_main]

use lanefs::internals::disk::xattr;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let bs = 1024usize << (sel & 3).min(2);
    let mut b = rest.to_vec();
    b.resize(bs, 0);
    let seed = (sel & 4 != 0).then_some(0xDEAD_BEEF);
    if let Ok((_, entries)) = xattr::decode_block(&b, 77, seed) {
        for e in &entries {
            let _ = e.full_name();
        }
    }
    let _ = xattr::refcount(&b);
    // A value as an ACL, in ext4's form and the VFS's: decoded, checked, folded into a
    // mode, and re-encoded.
    for acl in [xattr::acl_from_disk(rest, 77), xattr::acl_from_vfs(rest)]
        .into_iter()
        .flatten()
    {
        if xattr::acl_valid(&acl).is_ok() {
            let _ = xattr::acl_mode(&acl);
            let _ = xattr::acl_create_masq(&acl, u16::from(sel) << 1);
            let _ = xattr::acl_chmod_masq(&acl, 0o754);
            let _ = (xattr::acl_to_disk(&acl), xattr::acl_to_vfs(&acl));
        }
    }
});
