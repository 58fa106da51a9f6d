//! Goal: a realtime image's flags through the FUSE mount, as XFS's tools and ioctls set
//! them (issue 14): `xfs_io -c 'chattr +t'` marks a directory `rtinherit`, files made in it
//! are realtime (`r`) and their data lands on the data device; `FS_IOC_FSSETXATTR` sets an
//! extent size hint (`EXTSZINHERIT` on a directory, inherited as `EXTSIZE`) that
//! `FS_IOC_FSGETXATTR` and `lanefs realtime` read back; a file with data cannot leave the
//! realtime device (EINVAL, as XFS); after unmount lanefs fsck is clean.

mod fuse_common;

use fuse_common::*;
use std::fs;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::Command;

/// `struct fsxattr` of <linux/fs.h>.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct FsXattr {
    xflags: u32,
    extsize: u32,
    nextents: u32,
    projid: u32,
    cowextsize: u32,
    pad: [u8; 8],
}

/// `_IOR('X', 31, struct fsxattr)` and `_IOW('X', 32, struct fsxattr)`.
const FS_IOC_FSGETXATTR: libc::c_ulong = 0x801c_581f;
const FS_IOC_FSSETXATTR: libc::c_ulong = 0x401c_5820;
const XFLAG_REALTIME: u32 = 0x1;
const XFLAG_RTINHERIT: u32 = 0x100;
const XFLAG_EXTSIZE: u32 = 0x800;
const XFLAG_EXTSZINHERIT: u32 = 0x1000;

fn get_xattr(path: &Path) -> FsXattr {
    let f = fs::File::open(path).expect("open");
    let mut x = FsXattr::default();
    // SAFETY: the fd is open for the call, and `x` is a writable `struct fsxattr` of the
    // size the request number encodes.
    let rc = unsafe { libc::ioctl(f.as_raw_fd(), FS_IOC_FSGETXATTR, &mut x) };
    assert_eq!(
        rc,
        0,
        "FSGETXATTR {path:?}: {}",
        std::io::Error::last_os_error()
    );
    x
}

fn set_xattr(path: &Path, x: &FsXattr) -> std::io::Result<()> {
    let f = fs::File::open(path)?;
    // SAFETY: the fd is open for the call, and `x` is a readable `struct fsxattr` of the
    // size the request number encodes.
    let rc = unsafe { libc::ioctl(f.as_raw_fd(), FS_IOC_FSSETXATTR, x) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// `xfs_io -c lsattr PATH`'s flag letters.
fn lsattr(path: &Path) -> String {
    let out = run(Command::new("xfs_io").args(["-c", "lsattr"]).arg(path));
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn realtime_flags_through_the_mount() {
    let test = "realtime_flags_through_the_mount";
    if !fuse_ready(test) {
        return;
    }
    if Command::new("xfs_io").arg("-V").output().is_err() {
        skip(test, "xfs_io (xfsprogs) not installed");
        return;
    }
    let td = tempfile::tempdir().expect("tempdir");
    let img = td.path().join("rt.img");
    let data = td.path().join("rt.data");
    let out = run(Command::new(LANEFS)
        .arg("mkfs")
        .arg(&img)
        .args([
            "--size",
            "64M",
            "-b",
            "4096",
            "--rtsize",
            "256M",
            "--rtextsize",
            "2",
            "--rtdev",
        ])
        .arg(&data));
    assert!(out.status.success(), "{out:?}");
    let m = Mount::new(
        &img,
        &td.path().join("mnt"),
        &format!("rtdev={}", data.display()),
    );

    // chattr +t on a directory: files made in it are realtime.
    let d = m.path("d");
    fs::create_dir(&d).expect("mkdir");
    let out = run(Command::new("xfs_io").args(["-c", "chattr +t"]).arg(&d));
    assert!(out.status.success(), "{out:?}");
    assert!(lsattr(&d).contains('t'), "{}", lsattr(&d));
    let f = d.join("f");
    let bytes: Vec<u8> = (0..300_000u32).map(|i| (i * 7 + i / 4096) as u8).collect();
    fs::write(&f, &bytes).expect("write");
    assert!(lsattr(&f).starts_with('r'), "{}", lsattr(&f));
    assert_eq!(fs::read(&f).expect("read"), bytes);
    // statfs in the realtime directory and on its file reports the data device (as XFS
    // does for rtinherit and realtime inodes); the mount's root reports the image.
    let size = |p: &Path| -> u64 {
        let out = run(Command::new("stat").args(["-f", "-c", "%b %S"]).arg(p));
        let t = String::from_utf8_lossy(&out.stdout).to_string();
        let v: Vec<u64> = t.split_whitespace().map(|x| x.parse().expect(&t)).collect();
        v[0] * v[1]
    };
    assert_eq!(size(&d), 256 << 20);
    assert_eq!(size(&f), 256 << 20);
    assert_eq!(size(&m.path("")), 64 << 20);
    // A file with data stays where its data is.
    let x = get_xattr(&f);
    assert_eq!(x.xflags & XFLAG_REALTIME, XFLAG_REALTIME, "{x:?}");
    let err = set_xattr(
        &f,
        &FsXattr {
            xflags: x.xflags & !XFLAG_REALTIME,
            ..x
        },
    )
    .expect_err("clearing realtime on a file with data");
    assert_eq!(err.raw_os_error(), Some(libc::EINVAL), "{err}");

    // An extent size hint on a directory is inherited by its files (8 blocks of 4 KiB).
    let e = m.path("e");
    fs::create_dir(&e).expect("mkdir");
    let want = FsXattr {
        xflags: XFLAG_RTINHERIT | XFLAG_EXTSZINHERIT,
        extsize: 32 << 10,
        ..FsXattr::default()
    };
    set_xattr(&e, &want).expect("FSSETXATTR on a directory");
    let got = get_xattr(&e);
    assert_eq!(got.xflags & want.xflags, want.xflags, "{got:?}");
    assert_eq!(got.extsize, 32 << 10, "{got:?}");
    let g = e.join("g");
    fs::write(&g, b"hinted").expect("write");
    let got = get_xattr(&g);
    assert_eq!(
        got.xflags & (XFLAG_REALTIME | XFLAG_EXTSIZE),
        XFLAG_REALTIME | XFLAG_EXTSIZE,
        "{got:?}"
    );
    assert_eq!(got.extsize, 32 << 10, "{got:?}");
    m.umount();

    // What the mount set is on disk: lanefs reads it back, the data is on the data device,
    // and fsck (the realtime pass included) is clean.
    let out = run(Command::new(LANEFS)
        .arg("--rtdev")
        .arg(&data)
        .args(["realtime", "--keep"])
        .arg(format!("{}:/e/g", img.display())));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("realtime on, extent size hint 8 blocks"),
        "{out:?}"
    );
    let on_device = fs::read(&data).expect("data device");
    assert!(on_device.windows(4096).any(|w| w == &bytes[..4096]));
    let out = run(Command::new(LANEFS).arg("fsck").arg(&img));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}
