//! The kernel's immutable and append-only flags (`chattr +i`, `chattr +a`) bind lanefs: what
//! Linux refuses with EPERM on names, attributes and data, lanefs refuses too, and what stays
//! allowed works. `World::kernel_cmd` runs a command on a path of the kernel's mount,
//! `World::refused` does an operation lanefs must refuse.

use super::*;

impl World {
    /// A command on a path of the kernel mount (`chattr`).
    pub(super) fn kernel_cmd(&mut self, prog: &str, args: &[&str], path: &str) {
        let Side::Kernel(km) = &self.side else {
            panic!("kernel_cmd without the kernel")
        };
        let file = km.dir.join(path.trim_start_matches('/'));
        if let Err(e) = run(Command::new(prog).args(args).arg(file)) {
            self.fail(e);
        }
    }

    /// `op` on lanefs must fail with `errno` and change nothing.
    fn refused(&mut self, op: Op, errno: i32) {
        let Side::Lanefs(fs) = &self.side else {
            panic!("refused without lanefs")
        };
        let line = format!("lanefs {op:?} (must fail with errno {errno})");
        self.log.push(line.clone());
        match lanefs_apply(fs, &op, false) {
            Err(e) if e.errno() == errno => {}
            Err(e) => self.fail(format!("{line}: {e} (errno {})", e.errno())),
            Ok(()) => self.fail(format!("{line}: succeeded")),
        }
    }
}

/// Files and directories the kernel marked immutable (`chattr +i`) or append-only
/// (`chattr +a`): lanefs refuses, as the kernel does (EPERM), to unlink, rename, link or
/// change them, to add or remove names in an immutable directory, and to remove names
/// from an append-only one; what stays allowed works.
#[test]
fn kernel_inode_flags_bind_lanefs() {
    let test = "kernel_inode_flags_bind_lanefs";
    let _wd = watchdog(test, 300);
    let td = tempfile::tempdir().expect("tempdir");
    if !kernel_ready(test, td.path(), &["chattr"]) {
        return;
    }
    let img = mkfs_image(td.path(), "flags.img", 256 << 20);
    let mut w = World::new(td.path(), img, 15, 100);
    w.mount_kernel();
    for d in ["/d", "/idir", "/adir"] {
        w.mkdir(d);
    }
    for f in [
        "/d/imm",
        "/d/app",
        "/d/plain",
        "/d/plain2",
        "/idir/f",
        "/adir/f",
    ] {
        w.create(f.into(), 100);
    }
    w.mkdir("/d/imm_dir");
    for (flag, path) in [
        ("+i", "/d/imm"),
        ("+a", "/d/app"),
        ("+i", "/d/imm_dir"),
        ("+i", "/idir"),
        ("+a", "/adir"),
    ] {
        w.kernel_cmd("chattr", &[flag], path);
    }
    w.check("the kernel set the flags");
    w.mount_lanefs();
    let eperm = libc::EPERM;
    let set = |path: &str| Op::Chmod {
        path: path.into(),
        perm: 0o600,
    };
    for path in ["/d/imm", "/d/app"] {
        w.refused(Op::Unlink { path: path.into() }, eperm);
        w.refused(
            Op::Rename {
                from: path.into(),
                to: "/d/moved".into(),
            },
            eperm,
        );
        w.refused(
            Op::Rename {
                from: "/d/plain".into(),
                to: path.into(),
            },
            eperm,
        );
        w.refused(
            Op::Link {
                from: path.into(),
                to: "/d/link".into(),
            },
            eperm,
        );
        w.refused(set(path), eperm);
        w.refused(
            Op::Truncate {
                path: path.into(),
                size: 3,
            },
            eperm,
        );
    }
    w.refused(
        Op::Rmdir {
            path: "/d/imm_dir".into(),
        },
        eperm,
    );
    w.refused(
        Op::Rename {
            from: "/d/imm_dir".into(),
            to: "/adir/moved".into(),
        },
        eperm,
    );
    // The immutable directory: no name added or removed, nothing moved in or out.
    w.refused(
        Op::Create {
            path: "/idir/new".into(),
            perm: 0o644,
            data: Vec::new(),
        },
        eperm,
    );
    w.refused(
        Op::Mkdir {
            path: "/idir/sub".into(),
            perm: 0o755,
        },
        eperm,
    );
    w.refused(
        Op::Symlink {
            path: "/idir/ln".into(),
            target: b"x".to_vec(),
        },
        eperm,
    );
    w.refused(
        Op::Link {
            from: "/d/plain".into(),
            to: "/idir/link".into(),
        },
        eperm,
    );
    w.refused(
        Op::Unlink {
            path: "/idir/f".into(),
        },
        eperm,
    );
    w.refused(
        Op::Rename {
            from: "/idir/f".into(),
            to: "/d/f".into(),
        },
        eperm,
    );
    w.refused(
        Op::Rename {
            from: "/d/plain".into(),
            to: "/idir/p".into(),
        },
        eperm,
    );
    w.refused(set("/idir"), eperm);
    // The append-only directory: names come in, none go.
    w.refused(
        Op::Unlink {
            path: "/adir/f".into(),
        },
        eperm,
    );
    w.refused(
        Op::Rename {
            from: "/adir/f".into(),
            to: "/d/f".into(),
        },
        eperm,
    );
    w.refused(
        Op::Rename {
            from: "/d/plain".into(),
            to: "/adir/f".into(),
        },
        eperm,
    );
    w.op(Op::Create {
        path: "/adir/new".into(),
        perm: 0o644,
        data: b"new".to_vec(),
    });
    w.op(Op::Rename {
        from: "/d/plain2".into(),
        to: "/adir/moved_in".into(),
    });
    w.op(Op::Link {
        from: "/d/plain".into(),
        to: "/adir/link".into(),
    });
    // Reading stays allowed; a plain file beside them is unaffected.
    w.op(Op::Rename {
        from: "/d/plain".into(),
        to: "/d/plain_renamed".into(),
    });
    w.check("lanefs kept to the kernel's inode flags");
    w.mount_kernel();
    for (flag, path) in [("-i", "/d/imm"), ("-a", "/d/app"), ("-i", "/idir")] {
        w.kernel_cmd("chattr", &[flag], path);
    }
    w.mount_lanefs();
    w.op(Op::Unlink {
        path: "/d/imm".into(),
    });
    w.op(Op::Truncate {
        path: "/d/app".into(),
        size: 3,
    });
    w.op(Op::Unlink {
        path: "/idir/f".into(),
    });
    w.check("lanefs edits once the kernel cleared the flags");
}

/// lanefs must not write, fallocate or punch a file the kernel marked immutable, nor
/// write an append-only file anywhere but at its end: the kernel refuses both with EPERM
/// (an immutable file cannot be opened for writing; an append-only one only with
/// O_APPEND; `vfs_fallocate` refuses an immutable file, and a punch of an append-only one).
#[test]
fn kernel_inode_flags_bind_lanefs_data() {
    let test = "kernel_inode_flags_bind_lanefs_data";
    let td = tempfile::tempdir().expect("tempdir");
    if !kernel_ready(test, td.path(), &["chattr"]) {
        return;
    }
    let img = mkfs_image(td.path(), "flags.img", 256 << 20);
    let mut w = World::new(td.path(), img, 16, 100);
    w.mount_kernel();
    w.create("/imm".into(), 100);
    w.create("/app".into(), 100);
    w.kernel_cmd("chattr", &["+i"], "/imm");
    w.kernel_cmd("chattr", &["+a"], "/app");
    w.mount_lanefs();
    let eperm = libc::EPERM;
    for path in ["/imm", "/app"] {
        w.refused(
            Op::Write {
                path: path.into(),
                off: 0,
                data: b"zz".to_vec(),
            },
            eperm,
        );
        w.refused(
            Op::Falloc {
                path: path.into(),
                off: 0,
                len: 10,
                keep_size: true,
                punch: true,
            },
            eperm,
        );
    }
    w.refused(
        Op::Falloc {
            path: "/imm".into(),
            off: 0,
            len: 1 << 20,
            keep_size: false,
            punch: false,
        },
        eperm,
    );
    // Appending to the append-only file stays allowed.
    w.op(Op::Write {
        path: "/app".into(),
        off: 100,
        data: b"tail".to_vec(),
    });
    w.check("lanefs kept to the flags on the data path");
}
