//! The encoder without simg2img: chunk boundaries, the 64 MiB split, the CRC32 chunk
//! against a plain CRC-32 of the expanded image, and the walk over a real image.

use super::*;

/// A chunk as read back: type, blocks, bytes, body.
type Chunk = (u16, u32, u32, Vec<u8>);

fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

/// Read a sparse image back: its header fields, its chunks, and the expanded image
/// (DONT_CARE as zeros), checking what libsparse's reader checks.
fn decode(s: &[u8]) -> ([u32; 9], Vec<Chunk>, Vec<u8>) {
    let h = [
        le32(s, 0),
        u32::from(le16(s, 4)),
        u32::from(le16(s, 6)),
        u32::from(le16(s, 8)),
        u32::from(le16(s, 10)),
        le32(s, 12),
        le32(s, 16),
        le32(s, 20),
        le32(s, 24),
    ];
    let blk = h[5] as usize;
    let (mut at, mut chunks, mut image) = (FILE_HEADER, Vec::new(), Vec::new());
    for _ in 0..h[7] {
        let (kind, blocks, bytes) = (le16(s, at), le32(s, at + 4), le32(s, at + 8));
        let body = s[at + CHUNK_HEADER..at + bytes as usize].to_vec();
        match kind {
            CHUNK_RAW => {
                assert_eq!(body.len(), blocks as usize * blk);
                image.extend_from_slice(&body);
            }
            CHUNK_FILL => {
                assert_eq!(body.len(), 4);
                for _ in 0..blocks as usize * blk / 4 {
                    image.extend_from_slice(&body);
                }
            }
            CHUNK_DONT_CARE => {
                assert!(body.is_empty());
                image.resize(image.len() + blocks as usize * blk, 0);
            }
            CHUNK_CRC32 => {
                assert_eq!((blocks, body.len()), (0, 4));
                assert_eq!(le32(&body, 0), crc32fast::hash(&image), "CRC32 chunk");
            }
            other => panic!("chunk type {other:x}"),
        }
        chunks.push((kind, blocks, bytes, body));
        at += bytes as usize;
    }
    assert_eq!(at, s.len(), "bytes after the last chunk");
    assert_eq!(image.len(), h[6] as usize * blk, "total_blks");
    (h, chunks, image)
}

fn kinds(chunks: &[Chunk]) -> Vec<(u16, u32)> {
    chunks.iter().map(|c| (c.0, c.1)).collect()
}

/// Blocks of `blk` bytes: `R` raw (distinct noise), `0` zero, `P` a 4-byte pattern.
fn blocks(spec: &str, blk: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, c) in spec.chars().enumerate() {
        match c {
            'R' => out.extend((0..blk).map(|j| (i * 131 + j * 7 + j / 251) as u8 | 1)),
            '0' => out.resize(out.len() + blk, 0),
            'P' => (0..blk / 4).for_each(|_| out.extend_from_slice(&[0xde, 0xad, 0xbe, 0xef])),
            _ => unreachable!(),
        }
    }
    out
}

#[test]
fn zero_runs_are_summed_as_zeros() {
    for start in [&b""[..], b"x", b"lanefs sparse"] {
        for n in [0u64, 1, 3, 4095, 4096, 65_537, 1 << 20] {
            let mut zeros = start.to_vec();
            zeros.resize(start.len() + n as usize, 0);
            let crc = crc32_zeros(crc32fast::hash(start), n);
            assert_eq!(crc, crc32fast::hash(&zeros), "{start:?} + {n} zeros");
        }
    }
}

#[test]
fn fill_patterns_are_whole_blocks_of_one_word() {
    assert_eq!(fill_pattern(&[0u8; 4096]), Some(0));
    assert_eq!(fill_pattern(&blocks("P", 4096)), Some(0xefbe_adde));
    assert_eq!(fill_pattern(&blocks("P", 1028)), Some(0xefbe_adde));
    let mut almost = vec![0u8; 4096];
    almost[4095] = 1;
    assert_eq!(fill_pattern(&almost), None);
    almost[4095] = 0;
    almost[2] = 1; // the word repeats elsewhere only at byte 2
    assert_eq!(fill_pattern(&almost), None);
}

/// Goal: RAW, FILL and DONT_CARE chunks begin and end where the block kinds change, zero
/// blocks the file system uses are FILL and free ones DONT_CARE, holes merge with the
/// zeros around them, and the image expands to the bytes given with a CRC32 chunk that
/// checks; the header says version 1.0, 28/12-byte headers, the block size and counts,
/// and a 0 image checksum as libsparse writes it.
#[test]
fn chunks_follow_the_blocks() {
    let blk = 1024;
    let spec = "RR000PP0R00R";
    let data = blocks(spec, blk);
    // Blocks 2 and 7 are used by the file system; 10 and 11 are given as a hole.
    let care = |k: u64| Ok(k == 2 || k == 7);
    let mut enc = Encoder::new(Vec::new(), blk as u32, 14).unwrap();
    enc.data(0, &data[..4 * blk], &mut { care }).unwrap();
    enc.data(4, &data[4 * blk..10 * blk], &mut { care })
        .unwrap();
    enc.zeros(2, false).unwrap();
    enc.data(12, &data[11 * blk..12 * blk], &mut { care })
        .unwrap();
    enc.zeros(1, true).unwrap();
    let (out, sum) = enc.finish().unwrap();
    let (h, chunks, image) = decode(&out);
    assert_eq!(h, [MAGIC, 1, 0, 28, 12, 1024, 14, 10, 0]);
    let want = [
        (CHUNK_RAW, 2),
        (CHUNK_FILL, 1),
        (CHUNK_DONT_CARE, 2),
        (CHUNK_FILL, 2),
        (CHUNK_FILL, 1),
        (CHUNK_RAW, 1),
        (CHUNK_DONT_CARE, 3),
        (CHUNK_RAW, 1),
        (CHUNK_FILL, 1),
        (CHUNK_CRC32, 0),
    ];
    assert_eq!(kinds(&chunks), want);
    assert_eq!(le32(&chunks[3].3, 0), 0xefbe_adde);
    assert_eq!(le32(&chunks[4].3, 0), 0);
    let mut expanded = data[..10 * blk].to_vec();
    expanded.resize(12 * blk, 0);
    expanded.extend_from_slice(&data[11 * blk..]);
    expanded.resize(14 * blk, 0);
    assert_eq!(image, expanded);
    let s = sum;
    assert_eq!((s.raw_blocks, s.fill_blocks, s.skip_blocks), (4, 5, 5));
    assert_eq!((s.chunks, s.bytes), (10, out.len() as u64));
    assert_eq!(s.crc, crc32fast::hash(&expanded));
}

/// Goal: a RAW or FILL run longer than the chunk limit (64 MiB, here made 4 blocks) is
/// split there, DONT_CARE is not, and the image still expands whole.
#[test]
fn long_runs_split_at_the_chunk_limit() {
    let blk = 4096;
    let enc = Encoder::new(Vec::new(), blk as u32, 30).unwrap();
    assert_eq!(enc.cap * blk as u64, 64 << 20);
    let mut enc = Encoder { cap: 4, ..enc };
    let raw = blocks(&"R".repeat(10), blk);
    enc.data(0, &raw, &mut |_| Ok(true)).unwrap();
    enc.zeros(10, true).unwrap();
    enc.zeros(10, false).unwrap();
    let (out, _) = enc.finish().unwrap();
    let (_, chunks, image) = decode(&out);
    let want = [
        (CHUNK_RAW, 4),
        (CHUNK_RAW, 4),
        (CHUNK_RAW, 2),
        (CHUNK_FILL, 4),
        (CHUNK_FILL, 4),
        (CHUNK_FILL, 2),
        (CHUNK_DONT_CARE, 10),
        (CHUNK_CRC32, 0),
    ];
    assert_eq!(kinds(&chunks), want);
    assert_eq!(&image[..raw.len()], &raw[..]);
    assert!(image[raw.len()..].iter().all(|&b| b == 0));
}

#[test]
fn a_short_or_long_image_is_refused() {
    let mut enc = Encoder::new(Vec::new(), 4096, 2).unwrap();
    enc.zeros(1, false).unwrap();
    assert!(enc.finish().is_err());
    assert!(Encoder::new(Vec::new(), 4096, 1 << 32).is_err());
    assert!(Encoder::new(Vec::new(), 1022, 1).is_err());
    assert_eq!(block_size_for(4 << 30), Some(4096));
    assert_eq!(block_size_for(3 << 10), Some(1024));
    assert_eq!(block_size_for(6 << 10), Some(2048));
    assert_eq!(block_size_for(1000), None);
    assert_eq!(block_size_for(1 << 46), None);
}

/// Goal: a file sink patches headers whether they are still buffered, already written,
/// or cut by a write.
#[test]
fn file_sink_patches_written_and_buffered_bytes() {
    use std::io::Read;
    let mut f = tempfile::tempfile().unwrap();
    let mut want = Vec::new();
    {
        let mut out = FileOut::new(&f);
        for i in 0..5u8 {
            let piece = vec![i; OUT_BUFFER / 2 + 3];
            out.append(&piece).unwrap();
            want.extend_from_slice(&piece);
        }
        let big = vec![9u8; OUT_BUFFER + 5];
        out.append(&big).unwrap();
        want.extend_from_slice(&big);
        out.append(b"tail").unwrap();
        want.extend_from_slice(b"tail");
        // In the file, across the file and the buffer, in the buffer.
        let end = want.len() as u64;
        for (off, b) in [(0u64, &b"PATCH"[..]), (end - 6, b"PATCH"), (end - 3, b"AB")] {
            out.patch(off, b).unwrap();
            want[off as usize..off as usize + b.len()].copy_from_slice(b);
        }
        out.flush().unwrap();
    }
    let mut got = Vec::new();
    f.read_to_end(&mut got).unwrap();
    assert!(
        got == want,
        "file differs from what was appended and patched"
    );
}

/// A new image file of `len` bytes at `path`, formatted as mke2fs would (with blocks of
/// `bs` bytes when given).
fn formatted(path: &std::path::Path, len: u64, bs: Option<u32>) -> lanefs::FileDevice {
    let dev = lanefs::FileDevice::create(path, len).unwrap();
    let opts = lanefs::mkfs::MkfsOptions {
        block_size: bs,
        prezeroed: true,
        ..lanefs::mkfs::MkfsOptions::mke2fs()
    };
    lanefs::mkfs::format(&dev, &opts).unwrap();
    dev
}

/// Goal: the walk over a real image (1 KiB blocks under 4 KiB sparse blocks, and 4 KiB
/// blocks) expands to its bytes, leaves out (DONT_CARE) only blocks its bitmaps call
/// free, keeps the journal and inode tables as FILL, and gives the same sparse bytes
/// whether a zero block is a hole or was written.
#[test]
fn walk_encodes_a_real_image_from_its_bytes_alone() {
    use lanefs::BlockDevice;
    use std::os::unix::fs::FileExt;
    for bs in [1024u32, 4096] {
        let td = tempfile::tempdir().unwrap();
        let path = td.path().join("raw.img");
        let len = 48u64 << 20;
        {
            let dev = formatted(&path, len, Some(bs));
            // A data block of pattern and one of noise past the metadata.
            dev.write_at(40 << 20, &blocks("PR", 4096)).unwrap();
            dev.flush().unwrap();
        }
        let raw = std::fs::File::open(&path).unwrap();
        let (out, sum) = walk(&Image::plain(&raw, len), 4096, Vec::new()).unwrap();
        let (_, chunks, image) = decode(&out);
        assert_eq!(
            image,
            std::fs::read(&path).unwrap(),
            "bs {bs}: expanded image"
        );
        assert!(sum.skip_blocks > (30 << 20) / 4096, "bs {bs}: {sum:?}");
        assert!(out.len() < 2 << 20, "bs {bs}: {} bytes", out.len());
        // Read from a mapping of the image: the same bytes.
        // SAFETY: the test's own temporary file, which nothing writes while it is mapped.
        let map = unsafe { Mapping::new(&raw, len) }.unwrap();
        let image = Image {
            map: Some(map.bytes()),
            ..Image::plain(&raw, len)
        };
        let (mapped, _) = walk(&image, 4096, Vec::new()).unwrap();
        assert!(mapped == out, "bs {bs}: the mapping changed the encoding");
        // And with the output written by a second thread, into a file.
        let piped = td.path().join("piped.simg");
        let file = std::fs::File::create(&piped).unwrap();
        let (mut sink, psum) = walk_mapped(&image, 4096, FileOut::new(&file)).unwrap();
        sink.flush().unwrap();
        assert_eq!(psum, sum, "bs {bs}");
        assert!(
            std::fs::read(&piped).unwrap() == out,
            "bs {bs}: the writer thread changed it"
        );
        // The journal (mkfs leaves it a hole) is stored, as zeros.
        let fill_zeros: u64 = chunks
            .iter()
            .filter(|c| c.0 == CHUNK_FILL && c.3 == [0; 4])
            .map(|c| u64::from(c.1))
            .sum();
        assert!(
            fill_zeros * 4096 >= 3 << 20,
            "bs {bs}: {fill_zeros} zero blocks kept"
        );
        // The same bytes with no hole at all.
        let full = td.path().join("full.img");
        std::fs::write(&full, std::fs::read(&path).unwrap()).unwrap();
        let written = std::fs::File::open(&full).unwrap();
        let (again, _) = walk(&Image::plain(&written, len), 4096, Vec::new()).unwrap();
        assert!(again == out, "bs {bs}: holes changed the encoding");
        // A free block that is not zero is stored.
        let free = 44u64 << 20;
        std::fs::OpenOptions::new()
            .write(true)
            .open(&full)
            .unwrap()
            .write_all_at(b"stray", free)
            .unwrap();
        let (stray, _) = walk(&Image::plain(&written, len), 4096, Vec::new()).unwrap();
        let (_, _, image) = decode(&stray);
        assert_eq!(&image[free as usize..free as usize + 5], b"stray");
    }
}

/// Goal: a scratch file leaves nothing when dropped, and once published has the output's
/// name (replacing a file there) and nothing else is left.
#[test]
fn scratch_files_leave_nothing_but_the_output() {
    use std::io::Write;
    let td = tempfile::tempdir().unwrap();
    let out = td.path().join("out.simg");
    let listing = || {
        let mut v: Vec<String> = std::fs::read_dir(td.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    std::fs::write(&out, b"old").unwrap();
    let dropped = Scratch::new(&out, "raw").unwrap();
    let name = dropped.path().file_name().unwrap().to_string_lossy();
    assert!(name.starts_with(".out.simg.lanefs-raw-"), "{name}");
    std::fs::write(dropped.path(), b"raw").unwrap();
    let kept = Scratch::new(&out, "sparse").unwrap();
    kept.file().write_all(b"image").unwrap();
    assert_eq!(listing().len(), 3);
    drop(dropped);
    kept.publish(&out).unwrap();
    assert_eq!(listing(), ["out.simg"]);
    assert_eq!(std::fs::read(&out).unwrap(), b"image");
}

/// Goal: the direct writer gives the file an in-memory output would hold, whatever the
/// sizes of the pieces (across its buffer's end) and wherever a patch lands (in the
/// buffer, or in blocks already written, also the first).
#[test]
fn direct_out_writes_what_a_vec_holds() {
    let td = tempfile::tempdir().unwrap();
    // xorshift64: numbers enough for sizes and bytes.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut below = |n: u64| next() % n;
    for round in 0..3 {
        let path = td.path().join(format!("out{round}"));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .unwrap();
        let Some(mut d) = DirectOut::new(&file, &path) else {
            panic!(
                "{}: no O_DIRECT on the test's own file system",
                path.display()
            );
        };
        let mut want: Vec<u8> = Vec::new();
        for _ in 0..200 {
            let n = 1 + match below(10) {
                0 => below(20 << 20),
                1..=3 => below(100_000),
                _ => below(64),
            } as usize;
            let piece: Vec<u8> = (0..n).map(|_| below(256) as u8).collect();
            d.append(&piece).unwrap();
            want.extend_from_slice(&piece);
            if below(10) < 3 {
                let len = (1 + below(40) as usize).min(want.len());
                let off = below((want.len() - len + 1) as u64) as usize;
                let patch: Vec<u8> = (0..len).map(|_| below(256) as u8).collect();
                d.patch(off as u64, &patch).unwrap();
                want[off..off + len].copy_from_slice(&patch);
            }
        }
        d.patch(0, b"head").unwrap();
        want[..4].copy_from_slice(b"head");
        d.finish().unwrap();
        assert!(std::fs::read(&path).unwrap() == want, "round {round}");
    }
}

/// Goal: a device that lends records a lent write as where the source's bytes go (reads
/// give them back; a later write over part of them splits the record; a write not on
/// sparse blocks is made), and the walk over the records encodes the image the real
/// writes make, read through a window or mapped with a writer thread. A source that
/// changed since it was lent fails the encoding, naming it.
#[test]
fn lent_writes_encode_as_the_written_image() {
    use lanefs::BlockDevice;
    use lend::{LendingDevice, LentFile};
    let td = tempfile::tempdir().unwrap();
    let len = 48u64 << 20;
    let at = 40u64 << 20;
    let src_path = td.path().join("source");
    let data = blocks("RRRPR0RR", 4096);
    std::fs::write(&src_path, &data).unwrap();
    let src = std::fs::File::open(&src_path).unwrap();
    let lent = LentFile::map(&src, &src_path, data.len() as u64).unwrap();
    let over = vec![b'X'; 4096];
    let real_path = td.path().join("real.img");
    let real = formatted(&real_path, len, None);
    real.flush().unwrap();
    let lent_path = td.path().join("lent.img");
    std::fs::copy(&real_path, &lent_path).unwrap();
    real.write_at(at, &data).unwrap();
    real.write_at(at + 8192, &over).unwrap();
    real.write_at(at + 12800, &data[12800..12803]).unwrap();
    real.flush().unwrap();
    drop(real);
    let dev = LendingDevice::new(lanefs::FileDevice::open(&lent_path, false).unwrap(), 4096);
    lent.lend(|| dev.write_at(at, lent.bytes())).unwrap();
    assert_eq!(dev.placed().len(), 1);
    let mut back = vec![0u8; data.len()];
    dev.read_at(at, &mut back).unwrap();
    assert!(back == data, "a placed range reads as its source");
    dev.write_at(at + 8192, &over).unwrap();
    assert_eq!(dev.placed().len(), 2, "a write splits what it covers");
    // Lent bytes not on sparse blocks are written, and the rest of their block with them.
    lent.lend(|| dev.write_at(at + 12800, &lent.bytes()[12800..12803]))
        .unwrap();
    let placed = dev.placed();
    assert_eq!(placed.len(), 2);
    assert_eq!((placed[1].0, placed[1].1.len), (at + 16384, 16384));
    // Lent bytes past the device's end are refused, not recorded.
    assert!(lent
        .lend(|| dev.write_at(len - 4096, &lent.bytes()[..8192]))
        .is_err());
    assert_eq!(dev.placed().len(), 2);
    dev.flush().unwrap();
    let placed = dev.placed();
    drop(dev);
    let want = std::fs::read(&real_path).unwrap();
    let raw = std::fs::File::open(&lent_path).unwrap();
    let real_raw = std::fs::File::open(&real_path).unwrap();
    let (expect, _) = walk(&Image::plain(&real_raw, len), 4096, Vec::new()).unwrap();
    let image = Image {
        placed: &placed,
        ..Image::plain(&raw, len)
    };
    let (got, _) = walk(&image, 4096, Vec::new()).unwrap();
    let expanded = decode(&got).2;
    let first = (0..want.len()).find(|&i| expanded[i] != want[i]);
    assert!(
        first.is_none(),
        "the placed bytes expand in place: first differs at {first:?}"
    );
    assert!(got == expect, "placed or written, the same encoding");
    // SAFETY: the test's own temporary file, which nothing writes while it is mapped.
    let map = unsafe { Mapping::new(&raw, len) }.unwrap();
    let mapped = Image {
        map: Some(map.bytes()),
        placed: &placed,
        ..Image::plain(&raw, len)
    };
    let piped = td.path().join("piped.simg");
    let file = std::fs::File::create(&piped).unwrap();
    let (mut sink, _) = walk_mapped(&mapped, 4096, FileOut::new(&file)).unwrap();
    sink.flush().unwrap();
    assert!(
        std::fs::read(&piped).unwrap() == expect,
        "through the writer thread"
    );
    // The source changes: the encoding fails, naming it.
    use std::io::Write;
    std::fs::OpenOptions::new()
        .append(true)
        .open(&src_path)
        .unwrap()
        .write_all(b"more")
        .unwrap();
    let err = walk(&image, 4096, Vec::new()).unwrap_err().to_string();
    assert!(err.contains("source") && err.contains("changed"), "{err}");
}
