//! Unit tests of `Fs` on in-memory devices.

use super::*;

/// The inode allocation and cache options parse to their policies and sizes; a bad
/// value is one line naming the option.
#[test]
fn inode_options_parse_and_refuse_bad_values() {
    let mut o = MountOptions::default();
    assert_eq!(
        (o.ialloc, o.icache),
        (IallocPolicy::Optimistic, IcachePolicy::Bucket)
    );
    assert_eq!(o.apply("ialloc", Some("locked")), Ok(true));
    assert_eq!(o.apply("icache", Some("papaya")), Ok(true));
    assert_eq!(o.apply("icache_limit", Some("8M")), Ok(true));
    assert_eq!(o.apply("bufcache_limit", Some("1G")), Ok(true));
    assert_eq!(
        (o.ialloc, o.icache, o.icache_limit, o.bufcache_limit),
        (IallocPolicy::Locked, IcachePolicy::Papaya, 8 << 20, 1 << 30)
    );
    for (k, v) in [
        ("ialloc", "sometimes"),
        ("icache", "lru"),
        ("icache_limit", "big"),
        ("bufcache_limit", "-1"),
    ] {
        let e = o.apply(k, Some(v)).expect_err(v);
        assert_eq!((e.name.as_str(), e.value.as_deref()), (k, Some(v)));
        let text = e.to_string();
        assert!(
            text.starts_with(&format!("option {k}={v}")) && !text.contains('\n'),
            "{text}"
        );
    }
    assert!(o.apply("icache", None).is_err());
}

/// Sealed inode stores: stores in a transaction change only the inodes' stages; the
/// inode-table block gets their bytes and checksums when the transaction commits, and
/// a staged inode is not evicted meanwhile (a re-read would find the old bytes).
#[test]
fn inode_stores_reach_their_table_block_at_commit() {
    let dev = std::sync::Arc::new(crate::MemDevice::new(32 << 20));
    crate::mkfs::format(&*dev, &crate::mkfs::MkfsOptions::default()).unwrap();
    let opts = MountOptions {
        commit_interval: std::time::Duration::from_secs(3600),
        ..MountOptions::default()
    };
    let fs = Fs::mount(dev, opts).unwrap();
    let owner = crate::Owner::default();
    let a = fs.create(ROOT_INO, b"a", 0o644, owner).unwrap().ino;
    let b = fs.create(ROOT_INO, b"b", 0o644, owner).unwrap().ino;
    fs.release(a).unwrap();
    fs.release(b).unwrap();
    fs.journal.commit_running().unwrap();
    let (la, lb) = (fs.ial.inode_loc(a).unwrap(), fs.ial.inode_loc(b).unwrap());
    assert_eq!(la.blk, lb.blk, "two new files share a table block");
    let on_disk = |ino| inode::read_disk_inode(&fs.ial, &fs.bufs, ino).unwrap();
    for (ino, perm) in [(a, 0o600), (b, 0o640), (a, 0o604)] {
        let set = crate::SetAttr {
            perm: Some(perm),
            ..Default::default()
        };
        fs.setattr(ino, &set).unwrap();
    }
    // Not in the block yet (its bytes and checksum are the last commit's), and the
    // staged inodes stay cached.
    assert_eq!(on_disk(a).mode() & 0o7777, 0o644);
    assert_eq!(on_disk(b).mode() & 0o7777, 0o644);
    for ino in [a, b] {
        assert!(!fs.icache.peek(ino).unwrap().evictable());
    }
    fs.journal.commit_running().unwrap();
    // Both in, checksums verified by the read; the stages are idle again.
    assert_eq!(on_disk(a).mode() & 0o7777, 0o604);
    assert_eq!(on_disk(b).mode() & 0o7777, 0o640);
    for ino in [a, b] {
        assert!(fs.icache.peek(ino).unwrap().evictable());
    }
    fs.unmount().unwrap();
}

/// An extent leaf rewritten in place after the buffer cache dropped it (read back,
/// its seal gone) still gets its checksum at commit: the file reads back through a
/// fresh mount, which verifies every tree block.
#[test]
fn leaf_rewritten_after_a_reread_is_sealed() {
    let dev = std::sync::Arc::new(crate::MemDevice::new(16 << 20));
    let mk = crate::mkfs::MkfsOptions {
        block_size: Some(1024),
        ..crate::mkfs::MkfsOptions::default()
    };
    crate::mkfs::format(&*dev, &mk).unwrap();
    let fs = Fs::mount(dev.clone(), MountOptions::default()).unwrap();
    let ino = fs
        .create(ROOT_INO, b"f", 0o644, crate::Owner::default())
        .unwrap()
        .ino;
    // 200 one-block extents: three leaves of up to 84.
    for b in 0..200u64 {
        fs.write(ino, b * 2048, &[1u8; 1024]).unwrap();
    }
    fs.sync().unwrap();
    let tree = fs
        .icache
        .peek(ino)
        .unwrap()
        .state
        .read()
        .tree_blocks
        .clone();
    assert_eq!(tree.len(), 3, "{tree:?}");
    for &b in &tree {
        fs.bufs.forget(b);
    }
    fs.write(ino, 400 * 2048, &[2u8; 1024]).unwrap();
    fs.release(ino).unwrap();
    fs.unmount().unwrap();
    let fs = Fs::mount(dev, MountOptions::default()).unwrap();
    let mut buf = [0u8; 1024];
    fs.read(ino, 400 * 2048, &mut buf).unwrap();
    assert_eq!(buf, [2u8; 1024]);
    fs.read(ino, 0, &mut buf).unwrap();
    assert_eq!(buf, [1u8; 1024]);
    fs.unmount().unwrap();
}

#[test]
fn page_cache_options_parse_and_refuse_bad_values() {
    let mut o = MountOptions::default();
    assert_eq!(o.folio_max_order, crate::page::DEFAULT_MAX_ORDER);
    assert_eq!(o.apply("folio_max_order", Some("0")), Ok(true));
    assert_eq!(o.apply("pagecache_limit", Some("96M")), Ok(true));
    assert_eq!((o.folio_max_order, o.pagecache_limit), (0, 96 << 20));
    assert_eq!(o.apply("folio_max_order", Some("6")), Ok(true));
    for (k, v) in [
        ("folio_max_order", "7"),
        ("folio_max_order", "big"),
        ("pagecache_limit", "-1"),
    ] {
        let e = o.apply(k, Some(v)).expect_err(v);
        assert_eq!((e.name.as_str(), e.value.as_deref()), (k, Some(v)));
        let text = e.to_string();
        assert!(
            text.starts_with(&format!("option {k}={v}")) && !text.contains('\n'),
            "{text}"
        );
    }
    assert!(o.apply("folio_max_order", None).is_err());
}
