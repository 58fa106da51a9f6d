//! Each classic corruption, made by hand, found with the right code; clean images stay
//! clean; the info report.

use super::*;

#[test]
fn clean_images_have_no_problems() {
    require_tools!("clean_images_have_no_problems");
    for (extra, populate) in [
        (&[][..], false),
        (&[][..], true),
        (&["-g", "8192", "-N", "8192"][..], true),
        (&["-O", "^metadata_csum"][..], true),
        (&["-O", "^metadata_csum,uninit_bg", "-g", "8192"][..], true),
    ] {
        let img = make_image(extra, populate);
        assert_clean(&img.path);
        let r = check(&img.path);
        if populate {
            assert!(
                r.dirs >= 5 && r.files >= 3005 && r.symlinks == 2,
                "{}",
                r.summary()
            );
            assert_eq!(r.special_files, 3, "{}", r.summary());
        }
        println!("{extra:?}: {}", r.summary());
    }
}

#[test]
fn htree_directory_is_checked() {
    require_tools!("htree_directory_is_checked");
    let img = make_image(&[], true);
    let mut raw = Raw::load(&img.path);
    let big = raw.lookup_root("big");
    assert_ne!(
        raw.inode(big).flags() & disk::inode::FL_INDEX,
        0,
        "big is not indexed"
    );
    // Swap two leaf blocks' contents: every entry stays valid but lands outside the hash
    // range its new position is indexed for.
    let ext = raw.extents(big);
    let (a, b) = (
        (ext[0].pblk + 1) as usize * BS,
        (ext[0].pblk + 2) as usize * BS,
    );
    let (x, y) = (raw.bytes[a..a + BS].to_vec(), raw.bytes[b..b + BS].to_vec());
    raw.bytes[a..a + BS].copy_from_slice(&y);
    raw.bytes[b..b + BS].copy_from_slice(&x);
    // Leaf checksums do not depend on the block number, so they stay valid.
    raw.save(&img.path);
    assert_detects(&img.path, "HTREE_HASH_RANGE");
}

#[test]
fn flipped_block_bitmap_byte_fails_checksum() {
    require_tools!("flipped_block_bitmap_byte_fails_checksum");
    let img = make_image(&[], true);
    let mut raw = Raw::load(&img.path);
    let o = raw.gd(0).block_bitmap() as usize * BS + 100;
    raw.bytes[o] ^= 0x5A;
    raw.save(&img.path);
    assert_detects(&img.path, "BLOCK_BITMAP_CSUM");
}

#[test]
fn cleared_bitmap_bit_is_a_mismatch() {
    require_tools!("cleared_bitmap_bit_is_a_mismatch");
    let img = make_image(&[], true);
    let mut raw = Raw::load(&img.path);
    let ino = raw.lookup_root("large");
    let pblk = raw.extents(ino)[0].pblk as usize;
    let o = raw.gd(0).block_bitmap() as usize * BS;
    disk::clear_bit(&mut raw.bytes[o..o + BS], pblk);
    raw.fix_block_bitmap_csum(0);
    raw.save(&img.path);
    let r = assert_detects(&img.path, "BLOCK_BITMAP_MISMATCH");
    assert!(!r.has("BLOCK_BITMAP_CSUM"), "{:#?}", r.problems);
    assert!(
        r.problems
            .iter()
            .any(|p| p.message.contains(&format!("+{pblk}"))),
        "{:#?}",
        r.problems
    );
}

#[test]
fn wrong_link_count_is_found() {
    require_tools!("wrong_link_count_is_found");
    let img = make_image(&[], true);
    let mut raw = Raw::load(&img.path);
    let ino = raw.lookup_root("medium");
    let mut i = raw.inode(ino);
    i.set_links(5);
    raw.put_inode(ino, i);
    raw.save(&img.path);
    let r = assert_detects(&img.path, "LINK_COUNT");
    assert!(!r.has("INODE_CHECKSUM"));
}

#[test]
fn bad_rec_len_is_found() {
    require_tools!("bad_rec_len_is_found");
    let img = make_image(&[], true);
    let mut raw = Raw::load(&img.path);
    let sub = raw.lookup_root("sub");
    let pblk = raw.extents(sub)[0].pblk as usize;
    let blk = &mut raw.bytes[pblk * BS..(pblk + 1) * BS];
    // Second entry (".."): an odd record length.
    disk::put16(blk, 12 + 4, 13);
    let seed = raw.inode(sub).csum_seed(raw.sb.csum_seed(), sub);
    dir::set_leaf_csum(seed, &mut raw.bytes[pblk * BS..(pblk + 1) * BS]);
    raw.save(&img.path);
    let r = assert_detects(&img.path, "DIR_BAD_ENTRY");
    assert!(!r.has("DIR_CHECKSUM"));
}

/// The htree root's ".." spans the rest of the block; a shorter length (checksum fixed
/// up, so only the length is wrong) is "directory corrupted" to e2fsck and to us.
#[test]
fn htree_root_dotdot_length_is_checked() {
    require_tools!("htree_root_dotdot_length_is_checked");
    let img = make_image(&[], true);
    let mut raw = Raw::load(&img.path);
    let big = raw.lookup_root("big");
    let pblk = raw.extents(big)[0].pblk as usize;
    let blk = &mut raw.bytes[pblk * BS..(pblk + 1) * BS];
    disk::put16(blk, 12 + 4, (BS - 12 - 16) as u16);
    let seed = raw.inode(big).csum_seed(raw.sb.csum_seed(), big);
    dir::set_dx_csum(
        seed,
        &mut raw.bytes[pblk * BS..(pblk + 1) * BS],
        dir::DX_ROOT_COUNT_OFF,
    );
    raw.save(&img.path);
    let r = assert_detects(&img.path, "HTREE_BAD_ROOT");
    assert!(!r.has("DIR_CHECKSUM"), "{:#?}", r.problems);
}

#[test]
fn bad_extent_magic_is_found() {
    require_tools!("bad_extent_magic_is_found");
    let img = make_image(&[], true);
    let mut raw = Raw::load(&img.path);
    let ino = raw.lookup_root("large");
    let mut i = raw.inode(ino);
    disk::put16(i.iblock_mut(), 0, 0xBEEF);
    raw.put_inode(ino, i);
    raw.save(&img.path);
    assert_detects(&img.path, "EXTENT_BAD_HEADER");
}

#[test]
fn shared_block_names_both_owners() {
    require_tools!("shared_block_names_both_owners");
    let img = make_image(&[], true);
    let mut raw = Raw::load(&img.path);
    let (a, b) = (raw.lookup_root("large"), raw.lookup_root("medium"));
    let target = raw.extents(a)[0].pblk;
    let mut i = raw.inode(b);
    // First extent's physical start: ee_start_hi at 12+6, ee_start_lo at 12+8.
    disk::put16(i.iblock_mut(), 18, (target >> 32) as u16);
    disk::put32(i.iblock_mut(), 20, target as u32);
    raw.put_inode(b, i);
    raw.save(&img.path);
    let r = assert_detects(&img.path, "DUP_BLOCK");
    let p = r.problems.iter().find(|p| p.code == "DUP_BLOCK").unwrap();
    assert!(
        p.message.contains(&format!("inode {a}")) && p.message.contains(&format!("inode {b}")),
        "{p}"
    );
}

#[test]
fn wrong_group_free_count_is_found() {
    require_tools!("wrong_group_free_count_is_found");
    let img = make_image(&[], true);
    let mut raw = Raw::load(&img.path);
    let mut d = raw.gd(0);
    d.set_free_blocks(d.free_blocks() - 7);
    raw.put_gd(0, d);
    raw.save(&img.path);
    assert_detects(&img.path, "GROUP_FREE_BLOCKS");
}

#[test]
fn unlinked_file_is_unattached() {
    require_tools!("unlinked_file_is_unattached");
    let img = make_image(&[], true);
    debugfs(&img.path, &["unlink /medium"]);
    assert_detects(&img.path, "UNATTACHED_INODE");
}

#[test]
fn shared_xattr_block_refcount_is_checked() {
    require_tools!("shared_xattr_block_refcount_is_checked");
    let img = make_image(&[], true);
    let mut raw = Raw::load(&img.path);
    let (a, b) = (raw.lookup_root("large"), raw.lookup_root("empty"));
    let xb = raw.inode(a).file_acl();
    assert_ne!(xb, 0, "large has no xattr block");
    // Point a second inode at the same block: legal only once the refcount says 2.
    let mut i = raw.inode(b);
    i.set_file_acl(xb);
    let bs = raw.sb.block_size();
    i.set_blocks_512(i.blocks_512(bs) + 8, bs);
    raw.put_inode(b, i);
    raw.save(&img.path);
    assert_detects(&img.path, "XATTR_REFCOUNT");
    let o = xb as usize * BS;
    disk::put32(&mut raw.bytes[o..o + BS], 4, 2);
    let mut c = disk::crc32c_raw(raw.sb.csum_seed(), &xb.to_le_bytes());
    c = disk::crc32c_raw(c, &raw.bytes[o..o + 0x10]);
    c = disk::crc32c_raw(c, &[0; 4]);
    c = disk::crc32c_raw(c, &raw.bytes[o + 0x14..o + BS]);
    disk::put32(&mut raw.bytes[o..o + BS], 0x10, c);
    raw.save(&img.path);
    assert_clean(&img.path);
}

#[test]
fn info_report_lists_features_and_histogram() {
    require_tools!("info_report_lists_features_and_histogram");
    let img = make_image(&["-g", "8192"], true);
    let dev = FileDevice::open(&img.path, true).unwrap();
    let text = lanefs::info::report(&dev).unwrap();
    for want in [
        "has_journal",
        "metadata_csum",
        "extent",
        "64bit",
        "flex_bg",
        "dir_index",
    ] {
        assert!(text.contains(want), "missing {want}:\n{text}");
    }
    assert!(text.contains("HISTOGRAM OF FREE EXTENT SIZES"), "{text}");
    assert!(text.contains("Extent Size Range"), "{text}");
    assert_eq!(
        text.lines()
            .filter(|l| l.trim_start().starts_with("1 "))
            .count(),
        1,
        "{text}"
    );
    println!("{text}");
}
