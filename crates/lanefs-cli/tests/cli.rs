//! End-to-end tests of the `lanefs` binary: argument handling, and every command against
//! real images (checked again by e2fsck where it is installed).

use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Seconds of the fixed past time given to every test file.
const PAST_SEC: i64 = 1_500_000_000;
/// Nanoseconds of that time.
const PAST_NSEC: i64 = 123_456_789;

/// Run `lanefs` with `args`.
fn lanefs<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Output {
    match Command::new(env!("CARGO_BIN_EXE_lanefs"))
        .args(args)
        .output()
    {
        Ok(out) => out,
        Err(e) => panic!("cannot run lanefs: {e}"),
    }
}

/// Standard output as text.
fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Standard error as text.
fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Assert the command succeeded, showing its stderr if not.
fn ok(out: Output) -> Output {
    assert!(
        out.status.success(),
        "failed ({:?}): {}",
        out.status.code(),
        stderr(&out)
    );
    out
}

/// Assert a failure reported as exactly one `lanefs: ...` line, and return that line.
fn one_line_failure(out: &Output) -> String {
    let err = stderr(out);
    assert!(
        !out.status.success(),
        "unexpected success; stdout: {}",
        stdout(out)
    );
    assert!(!err.contains("panicked"), "panic: {err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "expected one line on stderr, got: {err:?}");
    assert!(lines[0].starts_with("lanefs: "), "bad error line: {err:?}");
    lines[0].to_string()
}

/// `path` as a string argument.
fn s(path: &Path) -> String {
    path.display().to_string()
}

/// `IMAGE:PATH`.
fn at(image: &Path, path: &str) -> String {
    format!("{}:{path}", image.display())
}

/// A fresh temporary directory.
fn tempdir() -> tempfile::TempDir {
    match tempfile::tempdir() {
        Ok(d) => d,
        Err(e) => panic!("tempdir: {e}"),
    }
}

/// Format a new 64 MiB image in `dir`.
fn new_image(dir: &Path) -> PathBuf {
    let image = dir.join("disk.img");
    ok(lanefs(&["mkfs", &s(&image), "--size", "64M"]));
    image
}

/// The e2fsck binary, if installed.
fn e2fsck() -> Option<PathBuf> {
    let found = ["e2fsck", "/sbin/e2fsck", "/usr/sbin/e2fsck"]
        .iter()
        .map(PathBuf::from)
        .find(|p| Command::new(p).arg("-V").output().is_ok());
    if found.is_none() {
        if std::env::var("LANEFS_REQUIRE_PRIVILEGED").as_deref() == Ok("1") {
            panic!("e2fsck is required (LANEFS_REQUIRE_PRIVILEGED=1) but not installed");
        }
        eprintln!("skipping e2fsck check: e2fsck not installed");
    }
    found
}

/// Assert that both `lanefs fsck` and (when installed) `e2fsck -fn` find `image` clean.
fn assert_clean(image: &Path) {
    let out = lanefs(&["fsck", &s(image)]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "lanefs fsck: {}{}",
        stdout(&out),
        stderr(&out)
    );
    if let Some(e2) = e2fsck() {
        let out = Command::new(e2).arg("-fn").arg(image).output();
        let out = match out {
            Ok(out) => out,
            Err(e) => panic!("e2fsck: {e}"),
        };
        assert_eq!(
            out.status.code(),
            Some(0),
            "e2fsck -fn: {}{}",
            stdout(&out),
            stderr(&out)
        );
    }
}

/// Set atime and mtime of `path` (not following symlinks) to the fixed past time.
fn set_past_time(path: &Path) {
    let c = match std::ffi::CString::new(path.as_os_str().as_bytes()) {
        Ok(c) => c,
        Err(e) => panic!("{e}"),
    };
    let t = libc::timespec {
        tv_sec: PAST_SEC as libc::time_t,
        tv_nsec: PAST_NSEC as libc::c_long,
    };
    let times = [t, t];
    // SAFETY: `c` is NUL-terminated and `times` holds two timespecs.
    let rc = unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            c.as_ptr(),
            times.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    assert_eq!(
        rc,
        0,
        "utimensat {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
}

/// Deterministic pseudo-random bytes (xorshift).
fn random_bytes(len: usize, mut seed: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        out.extend_from_slice(&seed.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// Write `data` to `path` with permission bits `mode`.
fn write_file(path: &Path, data: &[u8], mode: u32) {
    if let Err(e) = fs::write(path, data) {
        panic!("write {}: {e}", path.display());
    }
    if let Err(e) = fs::set_permissions(path, fs::Permissions::from_mode(mode)) {
        panic!("chmod {}: {e}", path.display());
    }
}

/// Create a directory with permission bits `mode`.
fn make_dir(path: &Path, mode: u32) {
    if let Err(e) = fs::create_dir(path) {
        panic!("mkdir {}: {e}", path.display());
    }
    if let Err(e) = fs::set_permissions(path, fs::Permissions::from_mode(mode)) {
        panic!("chmod {}: {e}", path.display());
    }
}

/// Create a symlink.
fn make_symlink(target: &str, path: &Path) {
    if let Err(e) = std::os::unix::fs::symlink(target, path) {
        panic!("symlink {}: {e}", path.display());
    }
}

/// A host tree: nested directories, a 3 MiB random file, a file with holes, an empty file,
/// symlinks, a FIFO; modes 0640/0755/0700; every time set to the fixed past time.
fn build_tree(root: &Path) {
    make_dir(root, 0o755);
    make_dir(&root.join("a"), 0o755);
    make_dir(&root.join("a/b"), 0o700);
    write_file(
        &root.join("a/b/big.bin"),
        &random_bytes(3 << 20, 0x9e37_79b9_7f4a_7c15),
        0o640,
    );
    let mut sparse = vec![b'x'; 100];
    sparse.resize(100 + (256 << 10), 0);
    sparse.extend_from_slice(b"end");
    sparse.resize(sparse.len() + (128 << 10), 0);
    write_file(&root.join("a/sparse.bin"), &sparse, 0o644);
    write_file(&root.join("a/empty.txt"), b"", 0o640);
    write_file(&root.join("run.sh"), b"#!/bin/sh\necho hi\n", 0o755);
    make_symlink("a/b/big.bin", &root.join("link"));
    make_symlink("/nonexistent/target", &root.join("dangling"));
    let fifo = root.join("a/fifo");
    let c = std::ffi::CString::new(fifo.as_os_str().as_bytes()).unwrap_or_default();
    // SAFETY: `c` is a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
    for p in [
        "a/b/big.bin",
        "a/sparse.bin",
        "a/empty.txt",
        "run.sh",
        "link",
        "dangling",
        "a/fifo",
    ] {
        set_past_time(&root.join(p));
    }
    for p in ["a/b", "a", ""] {
        set_past_time(&root.join(p));
    }
}

/// Metadata without following symlinks.
fn lmeta(path: &Path) -> fs::Metadata {
    match fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) => panic!("{}: {e}", path.display()),
    }
}

/// Sorted names in a host directory.
fn names(dir: &Path) -> Vec<std::ffi::OsString> {
    let mut v: Vec<_> = match fs::read_dir(dir) {
        Ok(it) => it
            .map(|e| e.map(|e| e.file_name()))
            .collect::<Result<_, _>>()
            .unwrap_or_default(),
        Err(e) => panic!("{}: {e}", dir.display()),
    };
    v.sort();
    v
}

/// Assert two host trees are equal: names, types, modes, owners, mtimes with nanoseconds,
/// file contents and symlink targets.
fn assert_same_tree(a: &Path, b: &Path) {
    let (ma, mb) = (lmeta(a), lmeta(b));
    let what = b.display();
    assert_eq!(ma.file_type(), mb.file_type(), "type of {what}");
    assert_eq!(
        (ma.uid(), ma.gid()),
        (mb.uid(), mb.gid()),
        "owner of {what}"
    );
    assert_eq!(
        (ma.mtime(), ma.mtime_nsec()),
        (mb.mtime(), mb.mtime_nsec()),
        "mtime of {what}"
    );
    if ma.file_type().is_symlink() {
        assert_eq!(
            fs::read_link(a).ok(),
            fs::read_link(b).ok(),
            "target of {what}"
        );
        return;
    }
    assert_eq!(ma.mode() & 0o7777, mb.mode() & 0o7777, "mode of {what}");
    if ma.is_file() {
        assert_eq!(ma.len(), mb.len(), "size of {what}");
        assert!(
            fs::read(a).ok() == fs::read(b).ok(),
            "contents of {what} differ"
        );
    } else if ma.is_dir() {
        assert_eq!(names(a), names(b), "entries of {what}");
        for name in names(a) {
            assert_same_tree(&a.join(&name), &b.join(&name));
        }
    }
}

#[test]
fn help_lists_every_command() {
    let out = ok(lanefs(&["--help"]));
    let text = stdout(&out);
    for cmd in [
        "mkfs", "fsck", "info", "ls", "stat", "cat", "mkdir", "rm", "cp", "bench",
    ] {
        assert!(
            text.lines().any(|l| l.trim_start().starts_with(cmd)),
            "{cmd} missing:\n{text}"
        );
    }
}

#[test]
fn bad_arguments_exit_2() {
    for args in [
        &["frobnicate"][..],
        &["mkfs"],
        &["ls", "-z", "x.img:/"],
        &["cp", "only-one"],
        &["bench", "--threads", "one"],
        &[],
    ] {
        let out = lanefs(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(!stderr(&out).contains("panicked"));
    }
}

#[test]
fn cat_of_missing_image_fails_in_one_line() {
    let dir = tempdir();
    let missing = dir.path().join("nonexistent.img");
    let line = one_line_failure(&lanefs(&["cat", &at(&missing, "/x")]));
    assert!(line.starts_with("lanefs: cat: "), "{line}");
    assert!(line.contains("no such file or directory"), "{line}");
    one_line_failure(&lanefs(&["ls", &at(&missing, "/")]));
    let out = lanefs(&["fsck", &s(&missing)]);
    one_line_failure(&out);
    assert_eq!(out.status.code(), Some(8));
}

#[test]
fn argument_errors_before_the_engine_are_one_line() {
    let dir = tempdir();
    let image = dir.path().join("x.img");
    let line = one_line_failure(&lanefs(&["mkfs", &s(&image), "--size", "4X"]));
    assert!(line.contains("invalid size"), "{line}");
    assert!(!image.exists(), "mkfs with a bad size created the image");
    one_line_failure(&lanefs(&["mkfs", &s(&image)]));

    let host = dir.path().join("host.txt");
    write_file(&host, b"hi", 0o644);
    let line = one_line_failure(&lanefs(&["cp", &s(&host), &s(&dir.path().join("other"))]));
    assert!(line.starts_with("lanefs: cp: "), "{line}");

    let line = one_line_failure(&lanefs(&["cat", &at(&host, "relative/path")]));
    assert!(line.contains("absolute"), "{line}");
    one_line_failure(&lanefs(&["stat", "no-colon-and-no-file"]));
    one_line_failure(&lanefs(&["bench", "--size", "12Q"]));
}

/// `bench --help` states each workload's default thread counts and the known variants of
/// each family; an unknown variant is a one-line error that lists them, and a variant of
/// another family than the chosen workloads' one that names the workloads it applies to.
#[test]
fn bench_help_and_unknown_variant() {
    let out = ok(lanefs(&["bench", "--help"]));
    let text = stdout(&out);
    for word in [
        "powers of two up to the CPUs, at most 8: 1,2 on a 2-CPU machine",
        "fsmark, stat global,bucket,papaya",
        "--quick",
        "--svg",
        "--report",
        "bufio (seed 002): base (folio_max_order=0), order2, order6",
        "--bufio-size",
        "fallocate2, fsync, bufio64k (seed 000): base, trylock, linear, optimize_scan, slots",
        "ialloc (optimistic + global), icache (locked + bucket), lanefs (optimistic + bucket), \
         global, bucket, papaya",
        "'x:ialloc=locked,icache=global'",
        "--fsmark-files",
    ] {
        assert!(text.contains(word), "{word} missing in\n{text}");
    }
    let line = one_line_failure(&lanefs(&["bench", "--variants", "base,fast"]));
    assert!(line.contains("unknown variant \"fast\""), "{line}");
    assert!(line.contains("optimize_scan, slots"), "{line}");
    assert!(line.contains("lanefs, global, bucket, papaya"), "{line}");
    let line = one_line_failure(&lanefs(&["bench", "mdtest", "--variants", "trylock"]));
    assert!(
        line.contains("variant \"trylock\" (seed 000's block allocator) applies to fallocate2"),
        "{line}"
    );
    let line = one_line_failure(&lanefs(&["bench", "--variants", "x:ialloc=maybe"]));
    assert!(line.contains("variant x: option ialloc=maybe"), "{line}");
}

/// The issue 12 workloads from the command line: mdtest-shared, fsmark and stat under the
/// seeds' variants and a raw spec, one thread, on a small image; the JSON carries the new
/// fields and the summary compares with base.
#[test]
fn bench_inode_workloads_with_variants() {
    let dir = tempdir();
    let json = dir.path().join("bench.json");
    let args = [
        "bench",
        "mdtest-shared",
        "fsmark",
        "stat",
        "--threads",
        "1",
        "--reps",
        "1",
        "--seconds",
        "0.1",
        "--warmup",
        "0",
        "--files",
        "20",
        "--fsmark-files",
        "200",
        "--size",
        "64M",
        "--variants",
        "base,lanefs,x:ialloc=locked,icache=papaya",
        "--verbose",
        "--json",
    ];
    let mut args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    args.push(s(&json));
    let out = ok(lanefs(&args));
    let text = stdout(&out);
    for word in [
        "x [mdtest-shared fsmark stat: ialloc=locked,icache=papaya]",
        "mdtest-shared create on lanefs: creates/s in total against base",
        "fsmark create on lanefs: files/s in total against base",
        "stat lookup on lanefs: CPU per lookup in us against base",
        "inode cache after the run",
    ] {
        assert!(text.contains(word), "{word} missing in\n{text}");
    }
    let records = lanefs_bench::read_json(&json).expect("records");
    // control + (2 mdtest-shared phases + fsmark + stat) x 3 variants.
    assert_eq!(records.len(), 1 + 4 * 3, "{records:?}");
    for r in records.iter().filter(|r| r.workload == "fsmark") {
        assert_eq!(r.ops, 200, "{r:?}");
        assert!(r.icache_inodes.is_some_and(|n| n >= 200), "{r:?}");
        assert!(
            r.icache_limit.is_some() && r.icache_evictions.is_some(),
            "{r:?}"
        );
        assert!(r.peak_rss_bytes.is_some_and(|b| b > 0), "{r:?}");
        assert!(r.cpu_per_op_us.is_some_and(|v| v > 0.0), "{r:?}");
        assert!(r.icache_bytes_per_inode.is_some_and(|v| v > 0.0), "{r:?}");
    }
    let text = std::fs::read_to_string(&json).expect("json text");
    for field in [
        "\"cpu_per_op_us\"",
        "\"icache_bytes_per_inode\"",
        "\"peak_rss_bytes\"",
    ] {
        assert!(text.contains(field), "{field} missing in {text}");
    }
}

#[test]
fn mkfs_refuses_to_overwrite_ext4_without_force() {
    let dir = tempdir();
    let image = dir.path().join("old.img");
    let mut bytes = vec![0u8; 4096];
    bytes[1080..1082].copy_from_slice(&0xEF53u16.to_le_bytes());
    write_file(&image, &bytes, 0o644);
    let line = one_line_failure(&lanefs(&["mkfs", &s(&image), "--size", "64M"]));
    assert!(line.contains("--force"), "{line}");
    assert_eq!(lmeta(&image).len(), 4096, "the refused image was changed");
}

#[test]
fn mkfs_then_fsck_and_e2fsck_are_clean() {
    let dir = tempdir();
    let image = dir.path().join("disk.img");
    let out = ok(lanefs(&[
        "mkfs",
        &s(&image),
        "--size",
        "64M",
        "--label",
        "test",
    ]));
    assert!(stdout(&out).contains("64.0 MiB"), "{}", stdout(&out));
    assert_eq!(lmeta(&image).len(), 64 << 20);
    assert!(
        lmeta(&image).blocks() * 512 < 64 << 20,
        "image is not sparse"
    );
    assert_clean(&image);
    let info = stdout(&ok(lanefs(&["info", &s(&image)])));
    assert!(!info.trim().is_empty());
    one_line_failure(&lanefs(&["mkfs", &s(&image)]));
    ok(lanefs(&[
        "mkfs",
        &s(&image),
        "--force",
        "--inode-ratio",
        "8K",
    ]));
    assert_clean(&image);
}

#[test]
fn cp_tree_in_and_out_round_trips() {
    let dir = tempdir();
    let image = new_image(dir.path());
    let tree = dir.path().join("tree");
    build_tree(&tree);
    ok(lanefs(&["cp", "-r", &s(&tree), &at(&image, "/dst")]));
    assert_clean(&image);
    let listing = stdout(&ok(lanefs(&["ls", &at(&image, "/dst")])));
    assert_eq!(listing, "a\ndangling\nlink\nrun.sh\n");
    let out = dir.path().join("out");
    ok(lanefs(&["cp", "-r", &at(&image, "/dst"), &s(&out)]));
    assert_same_tree(&tree, &out);

    // Into an existing directory: under the source's name.
    ok(lanefs(&["mkdir", &at(&image, "/into")]));
    ok(lanefs(&["cp", "-r", &s(&tree), &at(&image, "/into")]));
    let again = dir.path().join("again");
    make_dir(&again, 0o755);
    ok(lanefs(&["cp", "-r", &at(&image, "/into/tree"), &s(&again)]));
    assert_same_tree(&tree, &again.join("tree"));
    assert_clean(&image);
}

#[test]
fn cp_single_files_and_symlinks() {
    let dir = tempdir();
    let image = new_image(dir.path());
    let file = dir.path().join("hello.txt");
    write_file(&file, b"hello world\n", 0o640);
    set_past_time(&file);
    ok(lanefs(&["mkdir", &at(&image, "/d")]));
    ok(lanefs(&["cp", &s(&file), &at(&image, "/d/")]));
    ok(lanefs(&["cp", &s(&file), &at(&image, "/d/renamed")]));
    // Overwriting an existing file replaces its contents.
    let shorter = dir.path().join("short");
    write_file(&shorter, b"bye\n", 0o600);
    ok(lanefs(&["cp", &s(&shorter), &at(&image, "/d/renamed")]));
    assert_eq!(
        stdout(&ok(lanefs(&["cat", &at(&image, "/d/renamed")]))),
        "bye\n"
    );
    assert_eq!(
        stdout(&ok(lanefs(&["cat", &at(&image, "/d/hello.txt")]))),
        "hello world\n"
    );
    // Several sources into a directory; a symlink is copied as a symlink.
    let link = dir.path().join("ln");
    make_symlink("hello.txt", &link);
    ok(lanefs(&["cp", &s(&link), &s(&shorter), &at(&image, "/d")]));
    let long = stdout(&ok(lanefs(&["ls", "-l", &at(&image, "/d")])));
    assert!(
        long.lines().any(|l| l.ends_with(" ln -> hello.txt")),
        "{long}"
    );
    let back = dir.path().join("back");
    ok(lanefs(&["cp", &at(&image, "/d/hello.txt"), &s(&back)]));
    let copied = fs::read(&back).unwrap_or_default();
    assert!(
        copied == b"hello world\n",
        "copied back {} bytes",
        copied.len()
    );
    assert_eq!(lmeta(&back).mtime_nsec(), PAST_NSEC);
    assert_eq!(lmeta(&back).mode() & 0o7777, 0o640);
    assert_clean(&image);
}

#[test]
fn ls_stat_cat_mkdir_rm_outputs() {
    let dir = tempdir();
    let image = new_image(dir.path());
    ok(lanefs(&["mkdir", "-p", &at(&image, "/x/y/z")]));
    ok(lanefs(&["mkdir", "-p", &at(&image, "/x/y/z")]));
    one_line_failure(&lanefs(&["mkdir", &at(&image, "/x")]));
    ok(lanefs(&["mkdir", &at(&image, "/x/w")]));
    assert_eq!(stdout(&ok(lanefs(&["ls", &at(&image, "/x")]))), "w\ny\n");
    let root = stdout(&ok(lanefs(&["ls", &s(&image)])));
    assert!(
        root.lines().any(|l| l == "lost+found") && root.lines().any(|l| l == "x"),
        "{root}"
    );
    let all = stdout(&ok(lanefs(&["ls", "-a", &at(&image, "/x/y")])));
    assert_eq!(all, ".\n..\nz\n");

    let file = dir.path().join("f.txt");
    write_file(&file, b"0123456789\n", 0o640);
    set_past_time(&file);
    ok(lanefs(&["cp", &s(&file), &at(&image, "/x/y/f.txt")]));
    let link = dir.path().join("abs");
    make_symlink("/x/y", &link);
    ok(lanefs(&["cp", &s(&link), &at(&image, "/x/abs")]));

    // Paths with ".", ".." and symlinks in the middle.
    let cat = stdout(&ok(lanefs(&["cat", &at(&image, "/x/./w/../abs/f.txt")])));
    assert_eq!(cat, "0123456789\n");
    assert_eq!(
        stdout(&ok(lanefs(&["ls", &at(&image, "/x/y/f.txt")]))),
        "/x/y/f.txt\n"
    );
    let long = stdout(&ok(lanefs(&["ls", "-l", &at(&image, "/x/y")])));
    let line = long
        .lines()
        .find(|l| l.ends_with(" f.txt"))
        .unwrap_or_default();
    assert!(line.starts_with("-rw-r----- 1 "), "{long}");
    assert!(line.contains(" 11 2017-07-14 02:40 f.txt"), "{long}");
    let long = stdout(&ok(lanefs(&["ls", "-l", &at(&image, "/x")])));
    assert!(
        long.lines()
            .any(|l| l.starts_with('l') && l.ends_with(" abs -> /x/y")),
        "{long}"
    );
    assert!(
        long.lines()
            .any(|l| l.starts_with("drwxr-xr-x") && l.ends_with(" w")),
        "{long}"
    );

    let st = stdout(&ok(lanefs(&["stat", &at(&image, "/x/y/f.txt")])));
    for want in [
        "File: /x/y/f.txt",
        "Size: 11",
        "(0640/-rw-r-----)",
        "Type: regular file",
    ] {
        assert!(st.contains(want), "{want} missing:\n{st}");
    }
    assert!(
        st.contains("Modify: 2017-07-14 02:40:00.123456789 +0000"),
        "{st}"
    );
    let st = stdout(&ok(lanefs(&["stat", &at(&image, "/x/abs")])));
    assert!(
        st.contains("File: /x/abs -> /x/y") && st.contains("symbolic link"),
        "{st}"
    );

    one_line_failure(&lanefs(&["rm", &at(&image, "/x/y")]));
    ok(lanefs(&["rm", &at(&image, "/x/abs")]));
    one_line_failure(&lanefs(&["rm", &at(&image, "/nope")]));
    ok(lanefs(&["rm", "-f", &at(&image, "/nope")]));
    one_line_failure(&lanefs(&["rm", "-r", &at(&image, "/")]));
    ok(lanefs(&["rm", "-r", &at(&image, "/x")]));
    let root = stdout(&ok(lanefs(&["ls", &at(&image, "/")])));
    assert!(!root.lines().any(|l| l == "x"), "{root}");
    assert_clean(&image);
}

#[test]
fn engine_errors_are_one_line() {
    let dir = tempdir();
    let image = new_image(dir.path());
    let line = one_line_failure(&lanefs(&["cat", &at(&image, "/a/b")]));
    assert_eq!(
        line,
        format!(
            "lanefs: cat: {}: no such file or directory",
            at(&image, "/a/b")
        )
    );
    let line = one_line_failure(&lanefs(&["cat", &at(&image, "/")]));
    assert!(line.ends_with("is a directory"), "{line}");
    one_line_failure(&lanefs(&["ls", &at(&image, "/lost+found/nothing")]));
    one_line_failure(&lanefs(&["stat", &at(&image, "relative")]));

    // A symlink loop gives up instead of hanging.
    let l1 = dir.path().join("l1");
    make_symlink("/l2", &l1);
    let l2 = dir.path().join("l2");
    make_symlink("/l1", &l2);
    ok(lanefs(&["cp", &s(&l1), &s(&l2), &at(&image, "/")]));
    let line = one_line_failure(&lanefs(&["cat", &at(&image, "/l1")]));
    assert!(line.contains("symbolic links"), "{line}");

    // A directory without -r.
    let sub = dir.path().join("sub");
    make_dir(&sub, 0o755);
    let line = one_line_failure(&lanefs(&["cp", &s(&sub), &at(&image, "/")]));
    assert!(line.contains("-r"), "{line}");

    // Too small for any ext4 (too few inodes, as mke2fs says): refused, and the half-made
    // image is removed.
    let small = dir.path().join("small.img");
    one_line_failure(&lanefs(&["mkfs", &s(&small), "--size", "60K"]));
    assert!(!small.exists());

    // fsck of something that is not ext4 is an operational error.
    let junk = dir.path().join("junk.img");
    write_file(&junk, &vec![0u8; 1 << 20], 0o644);
    let out = lanefs(&["fsck", &s(&junk)]);
    one_line_failure(&out);
    assert_eq!(out.status.code(), Some(8));
}

#[test]
fn bench_runs_a_small_sweep() {
    let dir = tempdir();
    let json = dir.path().join("bench.json");
    let image = dir.path().join("bench.img");
    let args = [
        "bench",
        "mdtest",
        "--threads",
        "1,2",
        "--reps",
        "1",
        "--files",
        "20",
        "--size",
        "64M",
        "--image",
    ];
    let mut args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    args.extend([s(&image), "--json".to_string(), s(&json)]);
    let out = ok(lanefs(&args));
    assert!(stdout(&out).contains("mdtest"), "{}", stdout(&out));
    assert!(json.exists());
}

#[test]
fn bench_fsync_shows_journal_columns() {
    let dir = tempdir();
    let image = dir.path().join("bench.img");
    let args = [
        "bench",
        "fsync",
        "--threads",
        "1",
        "--reps",
        "1",
        "--seconds",
        "0.1",
        "--warmup",
        "0",
        "--size",
        "64M",
        "--lockstat",
        "--verbose",
        "--image",
    ];
    let mut args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    args.push(s(&image));
    let out = ok(lanefs(&args));
    let text = stdout(&out);
    for word in ["fsync", "commits/s", "journal B/op", "journal locks: fsync"] {
        assert!(text.contains(word), "{word} missing in\n{text}");
    }
}

/// A loop mount of an image, unmounted on drop (also when a test panics).
struct LoopMount(PathBuf);

impl Drop for LoopMount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// Loop-mount `image` at `dir` with `opts`, or explain why not (skip unless required).
fn loop_mount(image: &Path, dir: &Path, opts: &str) -> Option<LoopMount> {
    let _ = fs::create_dir_all(dir);
    let st = Command::new("mount")
        .args(["-o", opts])
        .arg(image)
        .arg(dir)
        .status();
    if st.is_ok_and(|s| s.success()) {
        return Some(LoopMount(dir.to_path_buf()));
    }
    if std::env::var("LANEFS_REQUIRE_PRIVILEGED").as_deref() == Ok("1") {
        panic!("loop mount of {} is required but failed", image.display());
    }
    println!("SKIP cp_interop_with_the_kernel: cannot loop-mount (needs root and loop devices)");
    None
}

/// A `mkfs.ext4` image (Debian defaults, 4 KiB blocks), or None to skip.
fn kernel_image(dir: &Path, name: &str) -> Option<PathBuf> {
    let image = dir.join(name);
    fs::File::create(&image).ok()?.set_len(256 << 20).ok()?;
    let made = Command::new("mkfs.ext4")
        .args(["-q", "-F", "-b", "4096"])
        .arg(&image)
        .status();
    if made.is_ok_and(|s| s.success()) {
        return Some(image);
    }
    if std::env::var("LANEFS_REQUIRE_PRIVILEGED").as_deref() == Ok("1") {
        panic!("mkfs.ext4 is required but failed");
    }
    println!("SKIP cp_interop_with_the_kernel: mkfs.ext4 not available");
    None
}

#[test]
fn cp_interop_with_the_kernel() {
    // Goal: `lanefs cp` and the kernel agree byte for byte, both ways.
    // Method: lanefs copies a host tree (plus a 3000-entry directory) into a mkfs.ext4
    // image that the kernel then mounts; the kernel writes the same tree into another
    // image that `lanefs cp` copies out. Both are compared with the source.
    let dir = tempdir();
    let tree = dir.path().join("tree");
    build_tree(&tree);
    let many = tree.join("many");
    make_dir(&many, 0o755);
    for i in 0..3000 {
        write_file(
            &many.join(format!("entry-{i:05}")),
            format!("{i}\n").as_bytes(),
            0o644,
        );
    }
    set_past_time(&many);
    set_past_time(&tree);
    let Some(image) = kernel_image(dir.path(), "in.img") else {
        return;
    };
    ok(lanefs(&["cp", "-r", &s(&tree), &at(&image, "/dst")]));
    assert_clean(&image);
    {
        let mnt = dir.path().join("mnt-in");
        let Some(_m) = loop_mount(&image, &mnt, "loop,ro") else {
            return;
        };
        assert_same_tree(&tree, &mnt.join("dst"));
    }

    let Some(image2) = kernel_image(dir.path(), "out.img") else {
        return;
    };
    {
        let mnt = dir.path().join("mnt-out");
        let Some(_m) = loop_mount(&image2, &mnt, "loop") else {
            return;
        };
        let st = Command::new("cp")
            .arg("-a")
            .arg(&tree)
            .arg(mnt.join("src"))
            .status();
        assert!(st.is_ok_and(|s| s.success()), "cp -a into the kernel mount");
    }
    let out = dir.path().join("out");
    ok(lanefs(&["cp", "-r", &at(&image2, "/src"), &s(&out)]));
    assert_same_tree(&tree, &out);
    assert_clean(&image2);
}

/// `mkfs --rtdev`, `--rtdev` on the other commands, `realtime`, and `info`/`fsck` of an
/// image with a realtime device; a missing device or a bad hint is one clear line.
#[test]
fn realtime_device_through_the_commands() {
    let td = tempdir();
    let img = td.path().join("rt.img");
    let data = td.path().join("rt.data");
    let out = ok(lanefs(&[
        "mkfs",
        &s(&img),
        "--size",
        "64M",
        "--rtdev",
        &s(&data),
        "--rtsize",
        "256M",
        "--rtextsize",
        "2",
    ]));
    assert!(stdout(&out).contains("realtime device"), "{}", stdout(&out));
    assert_eq!(fs::metadata(&data).unwrap().len(), 256 << 20);
    let rt = ["--rtdev", &s(&data)];
    // Without the data device: refused in one line that says how.
    let line = one_line_failure(&lanefs(&["ls", &s(&img)]));
    assert!(line.contains("--rtdev"), "{line}");
    ok(lanefs(&[&rt[..], &["mkdir", &at(&img, "/v")]].concat()));
    let out = ok(lanefs(
        &[&rt[..], &["realtime", "--extsize", "8", &at(&img, "/v")]].concat(),
    ));
    assert!(
        stdout(&out).contains("realtime on, extent size hint 8 blocks"),
        "{}",
        stdout(&out)
    );
    // A hint that is not whole rt extents.
    let line = one_line_failure(&lanefs(
        &[&rt[..], &["realtime", "--extsize", "3", &at(&img, "/v")]].concat(),
    ));
    assert!(line.contains("extent size hint 3"), "{line}");
    let src = td.path().join("src");
    let bytes = random_bytes(300_000, 7);
    write_file(&src, &bytes, 0o644);
    ok(lanefs(
        &[&rt[..], &["cp", &s(&src), &at(&img, "/v/f")]].concat(),
    ));
    let out = ok(lanefs(&[&rt[..], &["cat", &at(&img, "/v/f")]].concat()));
    assert!(out.stdout == bytes, "cat differs");
    let out = ok(lanefs(
        &[&rt[..], &["realtime", "--keep", &at(&img, "/v/f")]].concat(),
    ));
    assert!(
        stdout(&out).contains("realtime on, extent size hint 8 blocks"),
        "the file inherits: {}",
        stdout(&out)
    );
    // The data is on the data device, not in the image.
    let on_device = fs::read(&data).unwrap();
    assert!(on_device.windows(4096).any(|w| w == &bytes[..4096]));
    let info = stdout(&ok(lanefs(&["info", &s(&img)])));
    assert!(info.contains("Realtime device"), "{info}");
    assert!(info.contains("HISTOGRAM OF FREE REALTIME RUNS"), "{info}");
    let out = lanefs(&["fsck", &s(&img)]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    // --rtextsize needs --rtdev.
    assert!(!lanefs(&["mkfs", &s(&img), "-F", "--rtextsize", "2"])
        .status
        .success());
}
