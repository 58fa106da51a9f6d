//! `lanefs mkfs --sparse-output` writes Android's sparse image format (what fastboot
//! flashes): `simg2img` expands it to the very bytes of the plain build of the same tree
//! with the same SOURCE_DATE_EPOCH, `-U` and `-E hash_seed`; two such builds give the same
//! sparse file; a mostly empty image is small; a failure leaves nothing behind. Where
//! `simg2img` (Debian's android-sdk-libsparse-utils) is missing, its part prints SKIP (a
//! failure under `LANEFS_REQUIRE_PRIVILEGED=1`); the rest reads the format itself.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod cli_common;
use cli_common::*;

const UUID: &str = "0f8e1c2a-3b4d-4e5f-8a9b-0c1d2e3f4a5b";
const SEED: &str = "11111111-2222-3333-4444-555555555555";
const EPOCH: &str = "1700000000";

const RAW: u16 = 0xcac1;
const FILL: u16 = 0xcac2;
const DONT_CARE: u16 = 0xcac3;
const CRC32: u16 = 0xcac4;

/// `lanefs mkfs ARGS... IMAGE` with SOURCE_DATE_EPOCH, -U and -E hash_seed (a
/// reproducible build).
fn mkfs(image: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lanefs"))
        .arg("mkfs")
        .args(["-U", UUID, "-E", &format!("hash_seed={SEED}")])
        .args(args)
        .arg(image)
        .env("SOURCE_DATE_EPOCH", EPOCH)
        .output()
        .expect("run lanefs")
}

/// A tree whose image has every kind of chunk: noise (RAW), zeros, a file repeating
/// one 4-byte pattern (FILL of that pattern), a sparse file, small files and links.
fn make_tree(root: &Path) {
    fs::create_dir_all(root.join("d/e")).unwrap();
    fs::write(root.join("noise"), noise(7, 3 << 20)).unwrap();
    fs::write(root.join("zeros"), vec![0u8; 200 << 10]).unwrap();
    let pattern: Vec<u8> = [1u8, 2, 3, 4].repeat(64 << 10);
    fs::write(root.join("pattern"), pattern).unwrap();
    let f = fs::File::create(root.join("sparse")).unwrap();
    f.set_len(8 << 20).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, &noise(8, 100_000), 5 << 20).unwrap();
    for i in 0..50 {
        fs::write(root.join(format!("d/e/f{i}")), format!("file {i}\n")).unwrap();
    }
    std::os::unix::fs::symlink("d/e/f1", root.join("link")).unwrap();
}

/// A sparse image read back: the 9 header fields, its chunks (type, blocks, bytes), the
/// CRC32 chunk's value, and the expanded image (DONT_CARE as zeros) when asked.
struct Sparse {
    header: [u32; 9],
    chunks: Vec<(u16, u32, u32)>,
    crc: Option<u32>,
    image: Vec<u8>,
}

fn read_sparse(path: &Path, expand: bool) -> Sparse {
    let s = fs::read(path).unwrap();
    let le16 = |at: usize| u16::from_le_bytes([s[at], s[at + 1]]);
    let le32 = |at: usize| u32::from_le_bytes(s[at..at + 4].try_into().unwrap());
    let header = [0, 4, 6, 8, 10, 12, 16, 20, 24].map(|at| match at {
        4..=10 => u32::from(le16(at)),
        _ => le32(at),
    });
    let blk = header[5] as usize;
    let (mut at, mut chunks, mut crc, mut image) = (28, Vec::new(), None, Vec::new());
    let mut blocks = 0u64;
    for _ in 0..header[7] {
        let (kind, n, bytes) = (le16(at), le32(at + 4), le32(at + 8));
        let body = &s[at + 12..at + bytes as usize];
        let size = n as usize * blk;
        match kind {
            RAW => assert_eq!(body.len(), size, "RAW chunk at {at}"),
            FILL | CRC32 => assert_eq!(body.len(), 4, "chunk at {at}"),
            DONT_CARE => assert!(body.is_empty(), "DONT_CARE chunk at {at}"),
            other => panic!("chunk type {other:#x} at {at}"),
        }
        if expand {
            match kind {
                RAW => image.extend_from_slice(body),
                FILL => image.extend(body.iter().cycle().take(size)),
                DONT_CARE => image.resize(image.len() + size, 0),
                _ => {}
            }
        }
        if kind == CRC32 {
            assert_eq!(n, 0);
            crc = Some(u32::from_le_bytes(body.try_into().unwrap()));
        }
        blocks += u64::from(n);
        chunks.push((kind, n, bytes));
        at += bytes as usize;
    }
    assert_eq!(
        at,
        s.len(),
        "{}: bytes after the last chunk",
        path.display()
    );
    assert_eq!(blocks, u64::from(header[6]), "total_blks");
    Sparse {
        header,
        chunks,
        crc,
        image,
    }
}

/// `simg2img SPARSE RAW`; false (after a SKIP line, or a panic when required) where it
/// is not installed.
fn simg2img(test: &str, sparse: &Path, raw: &Path) -> bool {
    match Command::new("simg2img").arg(sparse).arg(raw).output() {
        Ok(out) => {
            assert!(out.status.success(), "simg2img: {out:?}");
            true
        }
        Err(_) => {
            skip(test, "simg2img not installed (android-sdk-libsparse-utils)");
            false
        }
    }
}

/// What is in `dir` but `keep`.
fn left_in(dir: &Path, keep: &[&str]) -> Vec<PathBuf> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| !keep.iter().any(|k| p.file_name().unwrap() == *k))
        .collect()
}

/// Goal: at 1 KiB and 4 KiB file-system blocks, the sparse image of a tree expands
/// (simg2img, and this test's own reader) to the plain build's bytes; its header is
/// version 1.0 with 28/12-byte headers, 4096-byte blocks, the block count and chunk count,
/// and libsparse's 0 image checksum; it ends in a CRC32 chunk holding the CRC-32 of the
/// expanded image; it has RAW, FILL (zero and the tree's pattern) and DONT_CARE chunks;
/// and a second build gives the same sparse bytes.
#[test]
fn sparse_image_expands_to_the_plain_build() {
    let test = "sparse_image_expands_to_the_plain_build";
    let td = tempfile::tempdir().unwrap();
    let tree = td.path().join("tree");
    make_tree(&tree);
    let t = s(&tree);
    for shape in [&[][..], &["-b", "4096"][..]] {
        let (plain, sparse, again) = (
            td.path().join("plain.img"),
            td.path().join("s.simg"),
            td.path().join("again.simg"),
        );
        let mut args = vec!["-s", "64M", "-d", &t];
        args.extend_from_slice(shape);
        ok(mkfs(&plain, &args));
        args.push("--sparse-output");
        let out = ok(mkfs(&sparse, &args));
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("Android sparse image"), "{text}");
        ok(mkfs(&again, &args));
        let bytes = fs::read(&sparse).unwrap();
        assert!(
            bytes == fs::read(&again).unwrap(),
            "{shape:?}: two builds differ"
        );
        let want = fs::read(&plain).unwrap();
        let got = read_sparse(&sparse, true);
        let chunks = got.chunks.len() as u32;
        let header = [0xed26ff3a, 1, 0, 28, 12, 4096, (64 << 20) / 4096, chunks, 0];
        assert_eq!(got.header, header, "{shape:?}");
        assert_eq!(got.chunks.last().map(|c| c.0), Some(CRC32), "{shape:?}");
        assert_eq!(
            got.crc,
            Some(crc32fast::hash(&want)),
            "{shape:?}: CRC32 chunk"
        );
        assert!(got.image == want, "{shape:?}: expands to other bytes");
        let kinds: Vec<u16> = got.chunks.iter().map(|c| c.0).collect();
        let fills: Vec<u32> = got
            .chunks
            .iter()
            .filter(|c| c.0 == FILL)
            .map(|c| c.2)
            .collect();
        assert!(
            kinds.contains(&RAW) && kinds.contains(&DONT_CARE),
            "{kinds:x?}"
        );
        assert!(!fills.is_empty(), "{shape:?}: no FILL chunk");
        let patterns: Vec<[u8; 4]> = fill_patterns(&bytes);
        assert!(patterns.contains(&[1, 2, 3, 4]), "{shape:?}: {patterns:?}");
        assert!(patterns.contains(&[0, 0, 0, 0]), "{shape:?}: {patterns:?}");
        assert!(
            bytes.len() < want.len() / 4,
            "{shape:?}: {} bytes",
            bytes.len()
        );
        let expanded = td.path().join("x.img");
        if simg2img(test, &sparse, &expanded) {
            assert!(
                fs::read(&expanded).unwrap() == want,
                "{shape:?}: simg2img differs"
            );
            e2fsck_clean(&expanded);
            fs::remove_file(expanded).unwrap();
        }
        for p in [plain, sparse, again] {
            fs::remove_file(p).unwrap();
        }
    }
}

/// The 4-byte patterns of a sparse image's FILL chunks.
fn fill_patterns(s: &[u8]) -> Vec<[u8; 4]> {
    let mut at = 28;
    let mut out = Vec::new();
    while at < s.len() {
        let kind = u16::from_le_bytes([s[at], s[at + 1]]);
        let bytes = u32::from_le_bytes(s[at + 8..at + 12].try_into().unwrap()) as usize;
        if kind == FILL {
            out.push(s[at + 12..at + 16].try_into().unwrap());
        }
        at += bytes;
    }
    out
}

/// Goal: an empty 4 GiB image's sparse file is small (its free blocks DONT_CARE, the
/// journal and inode tables FILL), and expands to a clean file system.
#[test]
fn mostly_empty_image_is_small() {
    let test = "mostly_empty_image_is_small";
    let td = tempfile::tempdir().unwrap();
    let sparse = td.path().join("empty.simg");
    ok(mkfs(&sparse, &["-s", "4G", "--sparse-output"]));
    // Most of it is the superblock, descriptors and reserved descriptor blocks (2 MiB).
    let len = fs::metadata(&sparse).unwrap().len();
    assert!(len < 4 << 20, "{len} bytes");
    let got = read_sparse(&sparse, false);
    assert_eq!(got.header[6], 1 << 20);
    let skipped: u64 = got
        .chunks
        .iter()
        .filter(|c| c.0 == DONT_CARE)
        .map(|c| u64::from(c.1))
        .sum();
    assert!(skipped > (1 << 20) * 9 / 10, "{skipped} blocks left out");
    let expanded = td.path().join("empty.img");
    if simg2img(test, &sparse, &expanded) {
        assert_eq!(fs::metadata(&expanded).unwrap().len(), 4 << 30);
        e2fsck_clean(&expanded);
    }
}

/// Goal: what `--sparse-output` cannot do fails in one line before anything is made, a
/// build that fails (the tree does not fit) leaves no output and no scratch file and
/// names the output, an existing file system is not replaced without -F, and `-E
/// android_sparse` (mke2fs's name) does the same as `--sparse-output`.
#[test]
fn failures_leave_nothing_behind() {
    let td = tempfile::tempdir().unwrap();
    let dir = td.path();
    let tree = dir.join("tree");
    fs::create_dir(&tree).unwrap();
    fs::write(tree.join("big"), noise(9, 12 << 20)).unwrap();
    let out = dir.join("out.simg");
    let t = s(&tree);
    let cases: [(&[&str], &str); 4] = [
        (&["--sparse-output"], "needs --size"),
        (&["-s", "1000000", "--sparse-output"], "multiple of 1024"),
        (
            &["-s", "64M", "--rtdev", "rt.img", "--sparse-output"],
            "realtime",
        ),
        // The copy names each file it fails on (in the scratch image), then mkfs stops.
        (
            &["-s", "8M", "-d", &t, "--sparse-output"],
            "stopped after 1 error",
        ),
    ];
    for (args, needle) in cases {
        let run = mkfs(&out, args);
        assert!(!run.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&run.stderr);
        let line = err.lines().last().unwrap_or_default();
        assert!(line.contains(needle), "{args:?}: {err}");
        assert_eq!(left_in(dir, &["tree"]), Vec::<PathBuf>::new(), "{args:?}");
    }
    // An existing file system: refused without -F (no terminal to ask on), unchanged.
    ok(mkfs(&out, &["-s", "8M"]));
    let before = fs::read(&out).unwrap();
    let line = one_line_failure(&mkfs(&out, &["-s", "8M", "--sparse-output"]));
    assert!(line.contains("--force"), "{line}");
    assert!(fs::read(&out).unwrap() == before);
    ok(mkfs(&out, &["-s", "8M", "-F", "-E", "android_sparse"]));
    assert_eq!(read_sparse(&out, false).header[0], 0xed26ff3a);
    assert_eq!(left_in(dir, &["tree", "out.simg"]), Vec::<PathBuf>::new());
}

/// Goal: a reproducible sparse build keeps a descriptor per lent file, yet builds under a
/// descriptor limit below its file count (300 files, a limit of 270, enough for the plain
/// build): files it may not hold a descriptor for are copied (the share it keeps, or a
/// dup that fails), and the sparse image expands to the plain build's bytes.
#[test]
fn lent_files_stay_within_the_descriptor_limit() {
    use std::os::unix::process::CommandExt;
    let td = tempfile::tempdir().unwrap();
    let tree = td.path().join("tree");
    fs::create_dir(&tree).unwrap();
    for i in 0..300u32 {
        let bytes: Vec<u8> = (0..12288u32)
            .map(|j| (j.wrapping_mul(2654435761) ^ i.wrapping_mul(40503)) as u8)
            .collect();
        fs::write(tree.join(format!("f{i}")), bytes).unwrap();
    }
    let (plain, sparse) = (td.path().join("plain.img"), td.path().join("s.simg"));
    let t = s(&tree);
    ok(mkfs(&plain, &["-s", "64M", "-d", &t]));
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lanefs"));
    cmd.arg("mkfs")
        .args(["-U", UUID, "-E", &format!("hash_seed={SEED}")])
        .args(["-s", "64M", "-d", &t, "--sparse-output"])
        .arg(&sparse)
        .env("SOURCE_DATE_EPOCH", EPOCH);
    // SAFETY: setrlimit only, between fork and exec, touching no memory of the parent's.
    unsafe {
        cmd.pre_exec(|| {
            let r = libc::rlimit {
                rlim_cur: 270,
                rlim_max: 270,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &r) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    ok(cmd.output().expect("run lanefs"));
    let got = read_sparse(&sparse, true);
    assert!(
        got.image == fs::read(&plain).unwrap(),
        "expands to other bytes"
    );
}
