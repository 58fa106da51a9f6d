//! With the kernel: cp between lanefs and loop-mounted ext4 both ways, and a realtime
//! device through the commands.

use super::*;

/// A loop mount of an image, unmounted on drop (also when a test panics).
pub(super) struct LoopMount(PathBuf);

impl Drop for LoopMount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// Loop-mount `image` at `dir` with `opts`, or explain why not (skip unless required).
pub(super) fn loop_mount(image: &Path, dir: &Path, opts: &str) -> Option<LoopMount> {
    let _ = fs::create_dir_all(dir);
    let st = Command::new("mount")
        .args(["-o", opts])
        .arg(image)
        .arg(dir)
        .status();
    if st.is_ok_and(|s| s.success()) {
        return Some(LoopMount(dir.to_path_buf()));
    }
    let why = format!(
        "cannot loop-mount {} (needs root and loop devices)",
        image.display()
    );
    crate::skips::report("cp_interop_with_the_kernel", &why);
    None
}

/// A `mkfs.ext4` image (Debian defaults, 4 KiB blocks), or None to skip.
pub(super) fn kernel_image(dir: &Path, name: &str) -> Option<PathBuf> {
    let image = dir.join(name);
    fs::File::create(&image).ok()?.set_len(256 << 20).ok()?;
    let made = Command::new("mkfs.ext4")
        .args(["-q", "-F", "-b", "4096"])
        .arg(&image)
        .status();
    if made.is_ok_and(|s| s.success()) {
        return Some(image);
    }
    crate::skips::report("cp_interop_with_the_kernel", "mkfs.ext4 not available");
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
