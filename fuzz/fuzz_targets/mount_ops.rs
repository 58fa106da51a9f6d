//! An image (a base shape with metadata edited, as `open_fsck` makes it) mounted
//! read-write, then a sequence of operations decoded from the rest of the input: lookups,
//! readdir, reads, writes, creates, unlinks, renames, xattrs, truncates, fallocates,
//! fsyncs, and a remount. Errors are fine; a panic, a hang or unbounded memory is not.
#![no_main]

use lanefs::{FallocMode, Fs, Ino, MemDevice, Owner, RenameMode, SetAttr, ROOT_INO};
use lanefs_fuzz::{image, opts, walk};
use libfuzzer_sys::fuzz_target;
use std::sync::Arc;

const NAMES: [&[u8]; 6] = [b"dir", b"small", b"a", b"b", b"sub", b"frag"];

fuzz_target!(|data: &[u8]| {
    // The image's script and the operations, split at a length given by the first byte.
    let Some((&cut, rest)) = data.split_first() else {
        return;
    };
    let cut = (usize::from(cut) * 4).min(rest.len());
    let (script, ops) = rest.split_at(cut);
    let Some(img) = image(script) else {
        return;
    };
    let dev = Arc::new(MemDevice::from_vec(img));
    let Ok(mut fs) = Fs::mount(dev.clone(), opts(false)) else {
        return;
    };
    let o = Owner::default();
    let mut known: Vec<Ino> = vec![ROOT_INO];
    let mut open: Vec<Ino> = Vec::new();
    for op in ops.chunks(4).take(200) {
        let [k, x, y, z] = [
            op[0],
            *op.get(1).unwrap_or(&0),
            *op.get(2).unwrap_or(&0),
            *op.get(3).unwrap_or(&0),
        ];
        let ino = known[usize::from(x) % known.len()];
        let name = NAMES[usize::from(y) % NAMES.len()];
        let off = u64::from(z) * 4093;
        match k % 16 {
            0 => {
                if let Ok(a) = fs.lookup(ino, name) {
                    known.push(a.ino);
                }
            }
            1 => {
                if let Ok(v) = fs.readdir(ino, 0, 64) {
                    known.extend(v.iter().map(|e| e.ino).take(8));
                }
            }
            2 => {
                let mut buf = vec![0u8; 8192];
                let _ = fs.read(ino, off, &mut buf);
            }
            3 => {
                if fs.open(ino).is_ok() {
                    let _ = fs.write(ino, off, &[z; 3000]);
                    let _ = fs.release(ino);
                }
            }
            4 => {
                if let Ok(a) = fs.create(ino, name, 0o644, o) {
                    known.push(a.ino);
                    open.push(a.ino);
                }
            }
            5 => {
                if let Ok(a) = fs.mkdir(ino, name, 0o755, o) {
                    known.push(a.ino);
                }
            }
            6 => {
                let _ = fs.unlink(ino, name);
            }
            7 => {
                let _ = fs.rmdir(ino, name);
            }
            8 => {
                let to = known[usize::from(z) % known.len()];
                let mode = [
                    RenameMode::Replace,
                    RenameMode::NoReplace,
                    RenameMode::Exchange,
                ][usize::from(z % 3)];
                let _ = fs.rename_with(ino, name, to, NAMES[usize::from(x) % NAMES.len()], mode);
            }
            9 => {
                let _ = fs.setxattr(
                    ino,
                    b"user.f",
                    &vec![z; usize::from(y) * 9],
                    Default::default(),
                );
            }
            10 => {
                let _ = fs.removexattr(ino, b"user.f");
                let _ = fs.listxattr(ino);
            }
            11 => {
                let set = SetAttr {
                    size: Some(off * u64::from(y % 7)),
                    ..SetAttr::default()
                };
                let _ = fs.setattr(ino, &set);
            }
            12 => {
                let mode = FallocMode {
                    keep_size: y & 1 != 0,
                    punch_hole: y & 2 != 0,
                    zero_range: y & 4 != 0,
                };
                let _ = fs.fallocate(ino, mode, off, u64::from(y) * 1024 + 1);
            }
            13 => {
                let _ = fs.fsync(ino, y & 1 != 0);
            }
            14 => {
                let _ = fs.link(ino, known[usize::from(z) % known.len()], name);
                let _ = fs.symlink(ino, name, &vec![b'l'; usize::from(z) + 1], o);
            }
            _ => {
                // Remount: unmount (whatever it reports), then mount what it left.
                for i in open.drain(..) {
                    let _ = fs.release(i);
                }
                let _ = fs.unmount();
                match Fs::mount(dev.clone(), opts(false)) {
                    Ok(f) => fs = f,
                    Err(_) => return,
                }
                known.truncate(1);
            }
        }
    }
    walk(&fs);
    for i in open {
        let _ = fs.release(i);
    }
    let _ = fs.unmount();
});
