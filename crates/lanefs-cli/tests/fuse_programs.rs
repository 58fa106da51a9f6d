//! Real programs on a lanefs mount, unchanged: tar extracts thousands of files (the
//! system's C headers) and `diff -r` finds them identical; git clones a repository and
//! `git fsck --full` is clean; make and gcc build a small C project that then runs. Then
//! unmount, `e2fsck -fn` clean, and the kernel's ext4 sees the same tree.

mod fuse_common;

use fuse_common::*;
use std::fs;
use std::path::Path;
use std::process::Command;

fn ok(cmd: &mut Command) -> String {
    let out = run(cmd);
    assert!(
        out.status.success(),
        "{cmd:?}:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn sh(dir: &Path, script: &str) -> String {
    ok(Command::new("sh").arg("-ec").arg(script).current_dir(dir))
}

#[test]
fn tar_git_and_make_on_the_mount() {
    let test = "tar_git_and_make_on_the_mount";
    if !fuse_ready(test) {
        return;
    }
    for tool in ["tar", "git", "make", "cc", "diff"] {
        if run(Command::new("sh")
            .arg("-c")
            .arg(format!("command -v {tool}")))
        .status
        .code()
            != Some(0)
        {
            skip(test, &format!("{tool} not installed"));
            return;
        }
    }
    let t = tempfile::tempdir().unwrap();
    let img = t.path().join("a.img");
    mkfs(&img, "1G", &[]);
    let m = Mount::new(&img, &t.path().join("mnt"), "");

    // tar: the system's headers (thousands of files, symlinks, nested directories).
    let tarball = t.path().join("include.tar");
    ok(Command::new("tar")
        .arg("-C")
        .arg("/usr")
        .arg("-cf")
        .arg(&tarball)
        .arg("include"));
    fs::create_dir(m.path("tar")).unwrap();
    ok(Command::new("tar")
        .arg("-C")
        .arg(m.path("tar"))
        .arg("-xf")
        .arg(&tarball));
    ok(Command::new("diff")
        .arg("-r")
        .arg("--no-dereference")
        .arg("/usr/include")
        .arg(m.path("tar/include")));
    let files = sh(&m.path("tar"), "find . -type f | wc -l");
    assert!(
        files.trim().parse::<usize>().unwrap() > 1000,
        "only {files} files"
    );

    // git: a repository with history, cloned onto the mount.
    let src = t.path().join("repo");
    fs::create_dir(&src).unwrap();
    sh(
        &src,
        "git init -q . && git config user.email t@t && git config user.name t
         for i in $(seq 1 30); do
           mkdir -p dir$((i % 5)); seq 1 $((i * 200)) > dir$((i % 5))/file$i
           git add -A && git commit -q -m commit$i
         done
         git gc -q",
    );
    ok(Command::new("git")
        .arg("clone")
        .arg("-q")
        .arg("--no-local")
        .arg(&src)
        .arg(m.path("clone")));
    let fsck = ok(Command::new("git")
        .arg("-C")
        .arg(m.path("clone"))
        .args(["fsck", "--full", "--strict"]));
    assert!(!fsck.contains("error"), "{fsck}");
    sh(
        &m.path("clone"),
        "git log --oneline | wc -l | grep -qx 30 && git status --porcelain | wc -l | grep -qx 0",
    );
    // Work in the clone: edit, commit, repack.
    sh(&m.path("clone"), "git config user.email t@t && git config user.name t && seq 1 5000 > new && git add new && git commit -q -m more && git repack -adq && git fsck --full");

    // make + gcc: a small C project built and run on the mount.
    let proj = m.path("proj");
    fs::create_dir(&proj).unwrap();
    fs::write(proj.join("util.h"), "int twice(int x);\n").unwrap();
    fs::write(
        proj.join("util.c"),
        "#include \"util.h\"\nint twice(int x) { return 2 * x; }\n",
    )
    .unwrap();
    fs::write(
        proj.join("main.c"),
        "#include <stdio.h>\n#include \"util.h\"\nint main(void) { printf(\"%d\\n\", twice(21)); return 0; }\n",
    )
    .unwrap();
    fs::write(
        proj.join("Makefile"),
        "hello: main.o util.o\n\tcc -o $@ $^\n%.o: %.c util.h\n\tcc -O2 -c -o $@ $<\nclean:\n\trm -f hello *.o\n",
    )
    .unwrap();
    ok(Command::new("make").arg("-s").arg("-j2").current_dir(&proj));
    assert_eq!(ok(&mut Command::new(proj.join("hello"))).trim(), "42");
    ok(Command::new("make")
        .arg("-s")
        .arg("clean")
        .current_dir(&proj));
    ok(Command::new("make").arg("-s").current_dir(&proj));

    let before = listing(&m.dir);
    m.umount();
    e2fsck_clean(&img);
    let after = with_kernel_mount(&img, &t.path().join("k"), |d| {
        ok(Command::new("diff")
            .arg("-r")
            .arg("--no-dereference")
            .arg("/usr/include")
            .arg(d.join("tar/include")));
        ok(Command::new("git")
            .arg("-C")
            .arg(d.join("clone"))
            .args(["fsck", "--full"])
            .env("GIT_CEILING_DIRECTORIES", d)
            .env("GIT_CONFIG_PARAMETERS", "'safe.directory=*'"));
        listing(d)
    });
    assert_eq!(before, after);
}
