//! Records the commit the bench was built from (`LANEFS_COMMIT`), for its reports: the
//! short hash, with "+dirty" when tracked files differ from it, or "unknown" outside a git
//! checkout.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    let commit = match git(&["rev-parse", "--short=12", "HEAD"]) {
        Some(hash) => {
            let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
                .is_some_and(|s| !s.is_empty());
            if dirty {
                format!("{hash}+dirty")
            } else {
                hash
            }
        }
        None => "unknown".to_string(),
    };
    println!("cargo:rustc-env=LANEFS_COMMIT={commit}");
    // Run again when the answer may change: another branch (HEAD), a new commit on it (its
    // ref, or packed-refs), a change staged (the index), or a source file edited anywhere
    // in the workspace's crates (the "+dirty").
    if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        println!("cargo:rerun-if-changed={dir}/HEAD");
        println!("cargo:rerun-if-changed={dir}/index");
        println!("cargo:rerun-if-changed={dir}/packed-refs");
        if let Some(head) = git(&["symbolic-ref", "-q", "HEAD"]) {
            println!("cargo:rerun-if-changed={dir}/{head}");
        }
    }
    println!("cargo:rerun-if-changed=..");
}
