//! The two sides: `kernel_apply` does an operation through syscalls on the kernel's
//! read-write loop mount (fallocate through `xfs_io`, device nodes through mknod(1), so no
//! `unsafe`), `lanefs_apply` through lanefs's library calls, its data calls with the file
//! open (as a FUSE client does) or not.

use super::*;

// ---------------------------------------------------------------------------------------
// The two sides.

/// The kernel, through syscalls on a read-write loop mount.
pub(super) fn kernel_apply(root: &Path, op: &Op) -> Result<(), String> {
    use std::os::unix::fs::{FileExt, PermissionsExt};
    let p = |s: &str| root.join(s.trim_start_matches('/'));
    let perm = |path: &Path, perm: u16| {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(u32::from(perm)))
    };
    let e = |what: &str, err: std::io::Error| format!("kernel {what}: {err}");
    match op {
        Op::Create {
            path,
            perm: m,
            data,
        } => {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(p(path))
                .map_err(|x| e("create", x))?;
            f.write_all_at(data, 0).map_err(|x| e("write", x))?;
            drop(f);
            perm(&p(path), *m).map_err(|x| e("chmod", x))
        }
        Op::Mkdir { path, perm: m } => {
            std::fs::create_dir(p(path)).map_err(|x| e("mkdir", x))?;
            perm(&p(path), *m).map_err(|x| e("chmod", x))
        }
        Op::Symlink { path, target } => {
            use std::os::unix::ffi::OsStrExt;
            std::os::unix::fs::symlink(std::ffi::OsStr::from_bytes(target), p(path))
                .map_err(|x| e("symlink", x))
        }
        Op::Mknod {
            path,
            kind,
            rdev,
            perm: m,
        } => {
            // mknod(1): no `unsafe` here.
            let mut c = Command::new("mknod");
            c.arg(p(path));
            match kind {
                FileType::Fifo => c.arg("p"),
                FileType::CharDevice => c.arg("c"),
                _ => c.arg("b"),
            };
            if *kind != FileType::Fifo {
                c.arg((rdev >> 8).to_string())
                    .arg((rdev & 0xff).to_string());
            }
            run(&mut c)?;
            perm(&p(path), *m).map_err(|x| e("chmod", x))
        }
        Op::Link { from, to } => std::fs::hard_link(p(from), p(to)).map_err(|x| e("link", x)),
        Op::Unlink { path } => std::fs::remove_file(p(path)).map_err(|x| e("unlink", x)),
        Op::Rmdir { path } => std::fs::remove_dir(p(path)).map_err(|x| e("rmdir", x)),
        Op::Rename { from, to } => std::fs::rename(p(from), p(to)).map_err(|x| e("rename", x)),
        Op::Write { path, off, data } => {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(p(path))
                .map_err(|x| e("open", x))?;
            f.write_all_at(data, *off).map_err(|x| e("write", x))
        }
        Op::Truncate { path, size } => std::fs::OpenOptions::new()
            .write(true)
            .open(p(path))
            .and_then(|f| f.set_len(*size))
            .map_err(|x| e("truncate", x)),
        Op::Falloc {
            path,
            off,
            len,
            keep_size,
            punch,
        } => {
            let cmd = if *punch {
                format!("fpunch {off} {len}")
            } else if *keep_size {
                format!("falloc -k {off} {len}")
            } else {
                format!("falloc {off} {len}")
            };
            xfs_io(&p(path), &[cmd])
        }
        Op::Chmod { path, perm: m } => perm(&p(path), *m).map_err(|x| e("chmod", x)),
        Op::Sync { path: Some(path) } => std::fs::File::open(p(path))
            .and_then(|f| f.sync_all())
            .map_err(|x| e("fsync", x)),
        Op::Sync { path: None } => run(Command::new("sync").arg("-f").arg(root)).map(|_| ()),
    }
}

/// Run `xfs_io` commands on a file of the kernel mount (fallocate without `unsafe`).
pub(super) fn xfs_io(path: &Path, cmds: &[String]) -> Result<(), String> {
    let mut c = Command::new("xfs_io");
    for cmd in cmds {
        c.arg("-c").arg(cmd);
    }
    let out = run(c.arg(path))?;
    // xfs_io reports a failed command on stdout and still exits 0.
    if out.trim().is_empty() {
        Ok(())
    } else {
        Err(format!("xfs_io {}: {out}", path.display()))
    }
}

fn lanefs_path(fs: &Fs, path: &str) -> lanefs::Result<Ino> {
    let mut ino = ROOT_INO;
    for c in path.split('/').filter(|c| !c.is_empty()) {
        ino = fs.lookup(ino, c.as_bytes())?.ino;
    }
    Ok(ino)
}

/// lanefs, through its library calls.
pub(super) fn lanefs_apply(fs: &Fs, op: &Op, open_first: bool) -> lanefs::Result<()> {
    let o = Owner::default();
    let at = |p: &str| -> lanefs::Result<(Ino, Vec<u8>)> {
        Ok((
            lanefs_path(fs, parent_of(p))?,
            name_of(p).as_bytes().to_vec(),
        ))
    };
    // Data calls with the file open (as a FUSE client does) or not.
    let with_open = |ino: Ino, f: &dyn Fn() -> lanefs::Result<()>| -> lanefs::Result<()> {
        if open_first {
            fs.open(ino)?;
            let r = f();
            fs.release(ino)?;
            r
        } else {
            f()
        }
    };
    match op {
        Op::Create { path, perm, data } => {
            let (d, n) = at(path)?;
            let a = fs.create(d, &n, *perm, o)?;
            let r = if data.is_empty() {
                Ok(())
            } else {
                fs.write(a.ino, 0, data).map(|_| ())
            };
            fs.release(a.ino)?;
            r
        }
        Op::Mkdir { path, perm } => {
            // As the kernel side: mkdir, then chmod to exactly `perm` (a set-group-ID
            // parent would otherwise pass its bit on).
            let (d, n) = at(path)?;
            let a = fs.mkdir(d, &n, *perm, o)?;
            let set = SetAttr {
                perm: Some(*perm),
                ..SetAttr::default()
            };
            fs.setattr(a.ino, &set).map(|_| ())
        }
        Op::Symlink { path, target } => {
            let (d, n) = at(path)?;
            fs.symlink(d, &n, target, o).map(|_| ())
        }
        Op::Mknod {
            path,
            kind,
            rdev,
            perm,
        } => {
            let (d, n) = at(path)?;
            let mode = u32::from(kind.mode_bits() | perm);
            fs.mknod(d, &n, mode, *rdev as u32, o).map(|_| ())
        }
        Op::Link { from, to } => {
            let ino = lanefs_path(fs, from)?;
            let (d, n) = at(to)?;
            fs.link(ino, d, &n).map(|_| ())
        }
        Op::Unlink { path } => {
            let (d, n) = at(path)?;
            fs.unlink(d, &n)
        }
        Op::Rmdir { path } => {
            let (d, n) = at(path)?;
            fs.rmdir(d, &n)
        }
        Op::Rename { from, to } => {
            let (d, n) = at(from)?;
            let (nd, nn) = at(to)?;
            fs.rename(d, &n, nd, &nn)
        }
        Op::Write { path, off, data } => {
            let ino = lanefs_path(fs, path)?;
            with_open(ino, &|| {
                let n = fs.write(ino, *off, data)?;
                assert_eq!(n, data.len(), "short lanefs write");
                Ok(())
            })
        }
        Op::Truncate { path, size } => {
            let ino = lanefs_path(fs, path)?;
            let set = SetAttr {
                size: Some(*size),
                ..Default::default()
            };
            with_open(ino, &|| fs.setattr(ino, &set).map(|_| ()))
        }
        Op::Falloc {
            path,
            off,
            len,
            keep_size,
            punch,
        } => {
            let ino = lanefs_path(fs, path)?;
            let mode = FallocMode {
                keep_size: *keep_size || *punch,
                punch_hole: *punch,
                zero_range: false,
            };
            with_open(ino, &|| fs.fallocate(ino, mode, *off, *len))
        }
        Op::Chmod { path, perm } => {
            let ino = lanefs_path(fs, path)?;
            let set = SetAttr {
                perm: Some(*perm),
                ..Default::default()
            };
            fs.setattr(ino, &set).map(|_| ())
        }
        Op::Sync { path: Some(path) } => fs.fsync(lanefs_path(fs, path)?, false),
        Op::Sync { path: None } => fs.sync(),
    }
}
