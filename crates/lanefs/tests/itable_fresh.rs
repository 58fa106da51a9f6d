//! Goal: a create whose inode lands in an inode table block with no other inode in use
//! takes that block zeroed and never reads it from the device (as ext4's
//! `__ext4_get_inode_loc` does), while blocks with live inodes are read and kept.
//! Method: format an image, note which table blocks hold an inode in use, mount it on a
//! device that records every read, create files and directories, and check that no read
//! touched any other table block; then remount and find every file.

use lanefs::internals::disk::group::GroupDesc;
use lanefs::internals::disk::superblock::Superblock;
use lanefs::mkfs::{format, MkfsOptions};
use lanefs::{BlockDevice, Fs, MemDevice, MountOptions, Owner, Result, ROOT_INO};
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

/// A memory device that records the offset and length of every read.
struct Reads {
    inner: MemDevice,
    log: Mutex<Vec<(u64, usize)>>,
}

impl BlockDevice for Reads {
    fn read_at(&self, off: u64, buf: &mut [u8]) -> Result<()> {
        self.log.lock().unwrap().push((off, buf.len()));
        self.inner.read_at(off, buf)
    }
    fn write_at(&self, off: u64, buf: &[u8]) -> Result<()> {
        self.inner.write_at(off, buf)
    }
    fn flush(&self) -> Result<()> {
        self.inner.flush()
    }
    fn size(&self) -> u64 {
        self.inner.size()
    }
}

#[test]
fn creates_never_read_table_blocks_without_live_inodes() {
    let mem = MemDevice::new(64 << 20);
    format(&mem, &MkfsOptions::default()).unwrap();
    let img = mem.snapshot();
    let sb = Superblock::decode(&img[1024..2048], img.len() as u64).unwrap();
    let bs = sb.block_size() as usize;
    let (ipg, isz) = (sb.inodes_per_group() as usize, usize::from(sb.inode_size()));
    let ipb = bs / isz;
    let gdt = (sb.first_data_block() as usize + 1) * bs;
    let ds = sb.desc_size() as usize;
    // Every table block, and those holding an inode the bitmap says is in use.
    let (mut table, mut live) = (BTreeSet::new(), BTreeSet::new());
    for g in 0..sb.group_count() as usize {
        let d = GroupDesc {
            raw: img[gdt + g * ds..gdt + (g + 1) * ds].to_vec(),
        };
        let t = d.inode_table();
        let bitmap = &img[d.inode_bitmap() as usize * bs..][..ipg / 8];
        let uninit = d.flags() & lanefs::internals::disk::group::BG_INODE_UNINIT != 0;
        for k in 0..ipg.div_ceil(ipb) as u64 {
            table.insert(t + k);
        }
        for i in (0..ipg).filter(|&i| !uninit && bitmap[i / 8] & (1 << (i % 8)) != 0) {
            live.insert(t + (i / ipb) as u64);
        }
    }
    let dev = Arc::new(Reads {
        inner: MemDevice::from_vec(img),
        log: Mutex::new(Vec::new()),
    });
    let fs = Fs::mount(dev.clone(), MountOptions::default()).unwrap();
    let o = Owner::default();
    let mut made = Vec::new();
    for d in 0..4 {
        let dir = fs
            .mkdir(ROOT_INO, format!("d{d}").as_bytes(), 0o755, o)
            .unwrap();
        for f in 0..40 {
            let name = format!("f{f}");
            let a = fs.create(dir.ino, name.as_bytes(), 0o644, o).unwrap();
            fs.release(a.ino).unwrap();
            made.push((dir.ino, name, a.ino));
        }
    }
    let fresh_reads: Vec<u64> = dev
        .log
        .lock()
        .unwrap()
        .iter()
        .flat_map(|&(off, len)| off / bs as u64..(off + len as u64).div_ceil(bs as u64))
        .filter(|b| table.contains(b) && !live.contains(b))
        .collect();
    assert!(
        fresh_reads.is_empty(),
        "table blocks without a live inode were read: {fresh_reads:?}"
    );
    assert!(
        made.len() > ipb,
        "the creates filled more than one table block"
    );
    fs.unmount().unwrap();
    let bytes = dev.inner.snapshot();
    let fs = Fs::mount(
        Arc::new(MemDevice::from_vec(bytes)),
        MountOptions::default(),
    )
    .unwrap();
    for (dir, name, ino) in made {
        assert_eq!(fs.lookup(dir, name.as_bytes()).unwrap().ino, ino, "{name}");
        assert_eq!(fs.getattr(ino).unwrap().nlink, 1);
    }
}
