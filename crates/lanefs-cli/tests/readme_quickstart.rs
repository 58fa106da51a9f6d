//! The README's quick start, run verbatim: the one `sh` block under "## Quick start" runs
//! with `bash -euo pipefail` in an empty directory with this build's `lanefs` first on
//! PATH, and must succeed and leave nothing mounted; what it wrote through the mount is
//! then in the copy it made out of the image.

mod fuse_common;

use fuse_common::*;
use std::path::Path;
use std::process::Command;

/// The body of the first fenced `sh` block after the heading `## Quick start`.
fn quick_start(readme: &str) -> String {
    let section = readme
        .split("\n## Quick start\n")
        .nth(1)
        .expect("README has a \"## Quick start\" section");
    let section = section.split("\n## ").next().unwrap_or(section);
    let body = section
        .split("```sh\n")
        .nth(1)
        .expect("the quick start has a ```sh block");
    body.split("\n```").next().unwrap_or(body).to_string()
}

#[test]
fn readme_quick_start_runs_verbatim() {
    if !fuse_ready("readme_quick_start_runs_verbatim") {
        return;
    }
    let readme_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md");
    let readme = std::fs::read_to_string(&readme_path).expect("README.md");
    let script = quick_start(&readme);
    assert!(script.contains("lanefs mount"), "{script}");
    let bin = Path::new(env!("CARGO_BIN_EXE_lanefs"))
        .parent()
        .expect("the binary's directory")
        .to_path_buf();
    let path = std::env::join_paths(
        std::iter::once(bin).chain(std::env::split_paths(&std::env::var_os("PATH").unwrap())),
    )
    .unwrap();
    let t = tempfile::tempdir().unwrap();
    let out = Command::new("bash")
        .args(["-euo", "pipefail", "-c", &script])
        .current_dir(t.path())
        .env("PATH", path)
        .output()
        .expect("bash runs");
    let mnt = t.path().join("mnt");
    let mounted = is_mounted(&mnt);
    if mounted {
        let _ = Command::new("umount").arg("-l").arg(&mnt).status();
    }
    assert!(
        out.status.success(),
        "the quick start failed:\n{script}\nstdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!mounted, "the quick start left {} mounted", mnt.display());
    // `cp -r IMG:/tree out` with no `out` yet makes `out` the copy of `tree`, as cp does.
    let copied = std::fs::read_to_string(t.path().join("out/docs/new.txt"))
        .expect("the copy out of the image holds what was written through the mount");
    assert_eq!(copied, "written through the mount\n");
}
