//! What a device held before `mkfs`: the signatures of the file systems, partition
//! tables and volume formats that mke2fs (through libblkid) asks about before it
//! overwrites them. Only the magic numbers at their fixed places are compared, as
//! libblkid's superblock probes do first; a signature found is a reason to ask, never
//! proof that the data behind it is whole.

/// How much of the start of a device [`identify`] looks at (the btrfs superblock is the
/// farthest, at 64 KiB).
pub const HEAD: usize = 68 << 10;

/// Whether `head` holds `magic` at `off`.
fn at(head: &[u8], off: usize, magic: &[u8]) -> bool {
    head.get(off..off + magic.len()) == Some(magic)
}

/// The kind of ext file system an ext superblock at 1024 describes, by its features
/// (as blkid names them): ext4 with any ext4-only feature, ext3 with a journal, else
/// ext2.
fn ext_kind(head: &[u8]) -> &'static str {
    let word = |off: usize| {
        head.get(1024 + off..1024 + off + 4)
            .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let (compat, incompat, ro_compat) = (word(0x5C), word(0x60), word(0x64));
    // extents, 64bit, flex_bg, mmp, inline_data...; huge_file, gdt_csum, dir_nlink,
    // extra_isize, metadata_csum...
    let ext4_incompat = 0x0040 | 0x0080 | 0x0100 | 0x0200 | 0x8000 | 0x10000;
    let ext4_ro = 0x0008 | 0x0010 | 0x0020 | 0x0040 | 0x0400;
    if incompat & ext4_incompat != 0 || ro_compat & ext4_ro != 0 {
        "ext4"
    } else if compat & 0x0004 != 0 {
        "ext3"
    } else {
        "ext2"
    }
}

/// What `head` (the first bytes of a device, up to [`HEAD`]) holds: "an ext4 file
/// system", "a DOS partition table", ... or `None` when no signature is found.
pub fn identify(head: &[u8]) -> Option<String> {
    let fs = |name: &str| Some(format!("{name} file system"));
    if at(head, 1080, &0xEF53u16.to_le_bytes()) {
        return fs(&format!("an {}", ext_kind(head)));
    }
    let probes: [(usize, &[u8], &str); 14] = [
        (0, b"XFSB", "an xfs file system"),
        (65536 + 64, b"_BHRfS_M", "a btrfs file system"),
        (1024, &0xF2F5_2010u32.to_le_bytes(), "an f2fs file system"),
        (0, b"hsqs", "a squashfs file system"),
        (32769, b"CD001", "an iso9660 file system"),
        (3, b"NTFS    ", "an ntfs file system"),
        (54, b"FAT12   ", "a vfat file system"),
        (54, b"FAT16   ", "a vfat file system"),
        (82, b"FAT32   ", "a vfat file system"),
        (0, b"LUKS\xba\xbe", "a LUKS encrypted volume"),
        (536, b"LVM2 001", "an LVM2 physical volume"),
        (4086, b"SWAPSPACE2", "a swap area"),
        (4086, b"SWAP-SPACE", "a swap area"),
        (512, b"EFI PART", "a GPT partition table"),
    ];
    for (off, magic, what) in probes {
        if at(head, off, magic) {
            return Some(what.to_string());
        }
    }
    // MD RAID 1.1 (at the start) and 1.2 (at 4 KiB) superblocks.
    let md = 0xA92B_4EFCu32.to_le_bytes();
    if at(head, 0, &md) || at(head, 4096, &md) {
        return Some("a Linux RAID member".to_string());
    }
    // A DOS (MBR) partition table: the boot signature and a partition entry that is used
    // (a FAT or NTFS boot sector, found above, has the signature too).
    if at(head, 510, &[0x55, 0xAA]) {
        let used = (0..4).any(|i| head.get(446 + 16 * i + 4).is_some_and(|&t| t != 0));
        if used {
            return Some("a DOS partition table".to_string());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(off: usize, bytes: &[u8]) -> Vec<u8> {
        let mut head = vec![0u8; HEAD];
        head[off..off + bytes.len()].copy_from_slice(bytes);
        head
    }

    #[test]
    fn each_signature_is_named() {
        assert_eq!(identify(&vec![0u8; HEAD]), None);
        assert_eq!(
            identify(&[0x1f, 0x8b, 8, 0]),
            None,
            "gzip is data, not a file system"
        );
        let mut ext = with(1080, &[0x53, 0xEF]);
        assert_eq!(identify(&ext).as_deref(), Some("an ext2 file system"));
        ext[1024 + 0x5C] = 4;
        assert_eq!(identify(&ext).as_deref(), Some("an ext3 file system"));
        ext[1024 + 0x60] = 0x40;
        assert_eq!(identify(&ext).as_deref(), Some("an ext4 file system"));
        assert_eq!(
            identify(&with(0, b"XFSB")).as_deref(),
            Some("an xfs file system")
        );
        assert_eq!(
            identify(&with(65600, b"_BHRfS_M")).as_deref(),
            Some("a btrfs file system")
        );
        assert_eq!(
            identify(&with(4086, b"SWAPSPACE2")).as_deref(),
            Some("a swap area")
        );
        let mut mbr = with(510, &[0x55, 0xAA]);
        assert_eq!(identify(&mbr), None, "a boot signature without partitions");
        mbr[446 + 4] = 0x83;
        assert_eq!(identify(&mbr).as_deref(), Some("a DOS partition table"));
        // A short head (a tiny file) is looked at as far as it goes.
        assert_eq!(identify(&[0u8; 100]), None);
    }
}
