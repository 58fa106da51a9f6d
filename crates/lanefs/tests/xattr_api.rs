//! Goal: extended attributes and POSIX ACLs set through `Fs` are what ext4 stores: the
//! kernel and e2fsck read them, lanefs reads what the kernel wrote, and blocks the kernel
//! shares between inodes are copied before they are changed.
//! Method: random set/remove sequences against a model with remounts, then e2fsck; both
//! directions through a kernel loop mount, compared with the syscalls' view
//! (l{list,get,set}xattr); the error cases of setxattr(2).

mod common;

use common::{assert_fsck_clean, kernel_ready, mkfs_image, run, KernelMount};
use lanefs::mkfs::{format, MkfsOptions};
use lanefs::{Error, FileDevice, Fs, MountOptions, Owner, XattrFlags, ROOT_INO};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::Command;

type Attrs = BTreeMap<Vec<u8>, Vec<u8>>;

fn cpath(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

/// Every xattr of host path `p` (not following symlinks), as the syscalls give them.
fn host_xattrs(p: &Path) -> Attrs {
    let c = cpath(p);
    let mut names = vec![0u8; 65536];
    // SAFETY: `c` is a NUL-terminated path and `names` a writable buffer of the length
    // passed; the kernel writes at most that many bytes.
    let n = unsafe { libc::llistxattr(c.as_ptr(), names.as_mut_ptr().cast(), names.len()) };
    assert!(n >= 0, "llistxattr {}", p.display());
    let mut out = Attrs::new();
    for name in names[..n as usize]
        .split(|&b| b == 0)
        .filter(|n| !n.is_empty())
    {
        let cn = CString::new(name).unwrap();
        let mut v = vec![0u8; 65536];
        // SAFETY: as above; `cn` is a NUL-terminated name and `v` a buffer of its length.
        let k = unsafe { libc::lgetxattr(c.as_ptr(), cn.as_ptr(), v.as_mut_ptr().cast(), v.len()) };
        assert!(k >= 0, "lgetxattr {}", String::from_utf8_lossy(name));
        v.truncate(k as usize);
        out.insert(name.to_vec(), v);
    }
    out
}

/// Set xattr `name` on host path `p`.
fn host_set(p: &Path, name: &str, value: &[u8]) {
    let (c, cn) = (cpath(p), CString::new(name).unwrap());
    // SAFETY: NUL-terminated path and name; `value` is readable for its length.
    let r = unsafe {
        libc::lsetxattr(
            c.as_ptr(),
            cn.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    assert_eq!(
        r,
        0,
        "lsetxattr {name}: {}",
        std::io::Error::last_os_error()
    );
}

/// Every xattr of `ino` through lanefs.
fn lanefs_xattrs(fs: &Fs, ino: u64) -> Attrs {
    fs.listxattr(ino)
        .unwrap()
        .into_iter()
        .map(|n| {
            let v = fs.getxattr(ino, &n).unwrap();
            (n, v)
        })
        .collect()
}

/// An ACL in the VFS form: version 2, then (tag, perm, id) triples.
fn acl(entries: &[(u16, u16, u32)]) -> Vec<u8> {
    let mut v = 2u32.to_le_bytes().to_vec();
    for &(tag, perm, id) in entries {
        v.extend_from_slice(&tag.to_le_bytes());
        v.extend_from_slice(&perm.to_le_bytes());
        v.extend_from_slice(&id.to_le_bytes());
    }
    v
}

const NONE: u32 = u32::MAX;

fn value(seed: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 + seed * 7) as u8).collect()
}

#[derive(Debug, Clone)]
enum Op {
    Set(usize, usize, usize, u8),
    Remove(usize, usize),
    Remount,
}

const NAMES: &[&str] = &[
    "user.a",
    "user.bb",
    "user.a-much-longer-name-for-the-entry-table",
    "trusted.t",
    "trusted.second",
    "user.c",
    "security.s",
    "user.x1",
];
const SIZES: &[usize] = &[0, 1, 7, 60, 200, 900, 1800, 3000];

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..3usize, 0..NAMES.len(), 0..SIZES.len(), 0..3u8).prop_map(|(f, n, s, fl)| Op::Set(f, n, s, fl)),
        3 => (0..3usize, 0..NAMES.len()).prop_map(|(f, n)| Op::Remove(f, n)),
        1 => Just(Op::Remount),
    ]
}

/// Bytes a set of attributes needs at least (entry headers, names, padded values).
fn need(m: &Attrs) -> usize {
    m.iter()
        .map(|(n, v)| ((16 + n.len() + 3) & !3) + ((v.len() + 3) & !3))
        .sum()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
    #[test]
    fn random_sequences_match_a_model(ops in proptest::collection::vec(op(), 1..60)) {
        let td = tempfile::tempdir().unwrap();
        let img = td.path().join("x.img");
        let dev = FileDevice::create(&img, 32 << 20).unwrap();
        format(&dev, &MkfsOptions::default()).unwrap();
        drop(dev);
        let mut fs = Fs::mount_path(&img, MountOptions::default()).unwrap();
        let me = Owner::default();
        let files: Vec<u64> = (0..3)
            .map(|k| {
                let a = fs.create(ROOT_INO, format!("f{k}").as_bytes(), 0o644, me).unwrap();
                fs.release(a.ino).unwrap();
                a.ino
            })
            .collect();
        let mut model: Vec<Attrs> = vec![Attrs::new(); 3];
        for (step, op) in ops.iter().enumerate() {
            match *op {
                Op::Set(f, n, s, fl) => {
                    let name = NAMES[n].as_bytes();
                    let v = value(step, SIZES[s]);
                    let flags = [XattrFlags::Any, XattrFlags::Create, XattrFlags::Replace][fl as usize];
                    let r = fs.setxattr(files[f], name, &v, flags);
                    let exists = model[f].contains_key(name);
                    match (flags, exists, r) {
                        (XattrFlags::Create, true, r) => prop_assert_eq!(r, Err(Error::Exists)),
                        (XattrFlags::Replace, false, r) => prop_assert_eq!(r, Err(Error::NoData)),
                        (_, _, Ok(())) => { model[f].insert(name.to_vec(), v); }
                        (_, _, Err(Error::NoSpace)) => {
                            let mut after = model[f].clone();
                            after.insert(name.to_vec(), v);
                            prop_assert!(need(&after) > 4096 - 32 - 4 - 100, "ENOSPC with {} bytes", need(&after));
                        }
                        (_, _, r) => prop_assert!(false, "set {:?}: {:?}", op, r),
                    }
                }
                Op::Remove(f, n) => {
                    let name = NAMES[n].as_bytes();
                    let r = fs.removexattr(files[f], name);
                    if model[f].remove(name).is_some() {
                        prop_assert_eq!(r, Ok(()));
                    } else {
                        prop_assert_eq!(r, Err(Error::NoData));
                    }
                }
                Op::Remount => {
                    fs.unmount().unwrap();
                    fs = Fs::mount_path(&img, MountOptions::default()).unwrap();
                }
            }
            for (k, &ino) in files.iter().enumerate() {
                prop_assert_eq!(&lanefs_xattrs(&fs, ino), &model[k], "file {} after {:?}", k, op);
            }
        }
        fs.unmount().unwrap();
        if common::have_tool("e2fsck") {
            assert_fsck_clean(&img);
        }
    }
}

#[test]
fn errors_are_the_syscalls() {
    let td = tempfile::tempdir().unwrap();
    let img = td.path().join("e.img");
    let dev = FileDevice::create(&img, 32 << 20).unwrap();
    format(&dev, &MkfsOptions::default()).unwrap();
    drop(dev);
    let fs = Fs::mount_path(&img, MountOptions::default()).unwrap();
    let me = Owner::default();
    let f = fs.create(ROOT_INO, b"f", 0o644, me).unwrap().ino;
    let any = XattrFlags::Any;
    fs.setxattr(f, b"user.k", b"v", any).unwrap();
    assert_eq!(
        fs.setxattr(f, b"user.k", b"w", XattrFlags::Create),
        Err(Error::Exists)
    );
    assert_eq!(
        fs.setxattr(f, b"user.n", b"w", XattrFlags::Replace),
        Err(Error::NoData)
    );
    assert_eq!(fs.getxattr(f, b"user.n"), Err(Error::NoData));
    assert_eq!(fs.removexattr(f, b"user.n"), Err(Error::NoData));
    assert!(matches!(
        fs.setxattr(f, b"os2.k", b"v", any),
        Err(Error::NotSupported(_))
    ));
    assert!(matches!(
        fs.setxattr(f, b"user.", b"v", any),
        Err(Error::Invalid(_))
    ));
    let long = format!("user.{}", "n".repeat(256));
    assert_eq!(
        fs.setxattr(f, long.as_bytes(), b"v", any),
        Err(Error::Range)
    );
    assert_eq!(
        fs.setxattr(f, b"user.big", &vec![1; 70000], any),
        Err(Error::TooBig)
    );
    assert_eq!(
        fs.setxattr(f, b"user.big", &vec![1; 5000], any),
        Err(Error::NoSpace)
    );
    let bad = acl(&[(1, 6, NONE), (2, 4, 1000), (4, 4, NONE), (0x20, 0, NONE)]);
    assert!(matches!(
        fs.setxattr(f, b"system.posix_acl_access", &bad, any),
        Err(Error::Invalid(_))
    ));
    let dflt = acl(&[(1, 6, NONE), (4, 4, NONE), (0x20, 0, NONE)]);
    assert_eq!(
        fs.setxattr(f, b"system.posix_acl_default", &dflt, any),
        Err(Error::AccessDenied)
    );
    // An access ACL the mode says whole only sets the mode.
    let plain = acl(&[(1, 7, NONE), (4, 5, NONE), (0x20, 1, NONE)]);
    fs.setxattr(f, b"system.posix_acl_access", &plain, any)
        .unwrap();
    assert_eq!(fs.getattr(f).unwrap().perm, 0o751);
    assert_eq!(
        fs.getxattr(f, b"system.posix_acl_access"),
        Err(Error::NoData)
    );
    assert_eq!(fs.listxattr(f).unwrap(), vec![b"user.k".to_vec()]);
    fs.release(f).unwrap();
    fs.unmount().unwrap();
    let ro = Fs::mount_path(
        &img,
        MountOptions {
            read_only: true,
            ..MountOptions::default()
        },
    )
    .unwrap();
    assert_eq!(ro.setxattr(f, b"user.k", b"x", any), Err(Error::ReadOnly));
    assert_eq!(ro.getxattr(f, b"user.k").unwrap(), b"v");
}

/// lanefs sets attributes (in the inode, in a block, ACLs) on a kernel-made image; the
/// kernel reads exactly them back and e2fsck is clean.
#[test]
fn kernel_reads_what_lanefs_sets() {
    let td = tempfile::tempdir().unwrap();
    if !kernel_ready("kernel_reads_what_lanefs_sets", td.path(), &["getfattr"]) {
        return;
    }
    let img = mkfs_image(td.path(), "k.img", 64 << 20);
    let fs = Fs::mount_path(&img, MountOptions::default()).unwrap();
    let me = Owner::default();
    let a = fs.create(ROOT_INO, b"a", 0o640, me).unwrap().ino;
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, me).unwrap().ino;
    let any = XattrFlags::Any;
    let access = acl(&[
        (1, 6, NONE),
        (2, 4, 1000),
        (2, 6, 1001),
        (4, 4, NONE),
        (8, 4, 50),
        (0x10, 6, NONE),
        (0x20, 0, NONE),
    ]);
    let dflt = acl(&[
        (1, 7, NONE),
        (4, 5, NONE),
        (8, 7, 60),
        (0x10, 7, NONE),
        (0x20, 5, NONE),
    ]);
    let mut want_a = Attrs::new();
    for (n, v) in [
        ("user.small", b"in the inode".to_vec()),
        ("user.large", value(1, 2000)),
        ("trusted.t", value(2, 300)),
        ("security.label", b"system_u:object_r:etc_t:s0\0".to_vec()),
        ("system.posix_acl_access", access.clone()),
    ] {
        fs.setxattr(a, n.as_bytes(), &v, any).unwrap();
        want_a.insert(n.as_bytes().to_vec(), v);
    }
    fs.setxattr(d, b"system.posix_acl_default", &dflt, any)
        .unwrap();
    fs.setxattr(d, b"user.d", b"dir", any).unwrap();
    assert_eq!(
        fs.getattr(a).unwrap().perm,
        0o660,
        "mode group bits from the mask"
    );
    fs.release(a).unwrap();
    fs.unmount().unwrap();
    assert_fsck_clean(&img);
    let m = KernelMount::mount(&img, &td.path().join("mnt"), "ro").unwrap();
    assert_eq!(host_xattrs(&m.dir.join("a")), want_a);
    let got_d = host_xattrs(&m.dir.join("d"));
    assert_eq!(
        got_d.get(b"system.posix_acl_default".as_slice()),
        Some(&dflt)
    );
    assert_eq!(
        got_d.get(b"user.d".as_slice()).map(Vec::as_slice),
        Some(b"dir".as_slice())
    );
    let meta = std::fs::metadata(m.dir.join("a")).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777,
        0o660
    );
    m.unmount().unwrap();
}

/// The File ACL block number debugfs reports for `path`.
fn file_acl(img: &Path, path: &str) -> u64 {
    let out = run(Command::new("debugfs")
        .args(["-R", &format!("stat {path}")])
        .arg(img))
    .unwrap();
    let at = out.find("File ACL: ").expect("File ACL in debugfs stat");
    out[at + 10..]
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// The kernel writes attributes (two files sharing one block); lanefs reads them exactly,
/// changes one sharer (which gets its own block; the other keeps the shared one), empties
/// another; e2fsck and the kernel agree after each step.
#[test]
fn lanefs_edits_what_the_kernel_shares() {
    let td = tempfile::tempdir().unwrap();
    if !kernel_ready(
        "lanefs_edits_what_the_kernel_shares",
        td.path(),
        &["setfacl"],
    ) {
        return;
    }
    let img = mkfs_image(td.path(), "s.img", 64 << 20);
    let mnt = td.path().join("mnt");
    let big = value(3, 1500);
    let m = KernelMount::mount(&img, &mnt, "").unwrap();
    for f in ["one", "two", "three"] {
        let p = m.dir.join(f);
        std::fs::write(&p, f).unwrap();
        host_set(&p, "user.big", &big);
        host_set(&p, "user.k", b"shared");
    }
    host_set(&m.dir.join("three"), "user.own", b"three's own");
    run(Command::new("setfacl")
        .args(["-m", "u:1234:rw"])
        .arg(m.dir.join("three")))
    .unwrap();
    let kernel: BTreeMap<&str, Attrs> = ["one", "two", "three"]
        .iter()
        .map(|f| (*f, host_xattrs(&m.dir.join(f))))
        .collect();
    m.unmount().unwrap();
    let shared = file_acl(&img, "/one");
    assert_ne!(shared, 0);
    assert_eq!(
        file_acl(&img, "/two"),
        shared,
        "the kernel shares identical blocks"
    );

    let fs = Fs::mount_path(&img, MountOptions::default()).unwrap();
    for f in ["one", "two", "three"] {
        let ino = fs.lookup(ROOT_INO, f.as_bytes()).unwrap().ino;
        assert_eq!(lanefs_xattrs(&fs, ino), kernel[f], "{f}");
    }
    let one = fs.lookup(ROOT_INO, b"one").unwrap().ino;
    let two = fs.lookup(ROOT_INO, b"two").unwrap().ino;
    // user.k sits in the inode (the kernel tries there first); user.big in the block.
    let changed = value(4, 1500);
    fs.setxattr(one, b"user.big", &changed, XattrFlags::Replace)
        .unwrap();
    fs.unmount().unwrap();
    assert_fsck_clean(&img);
    assert_ne!(file_acl(&img, "/one"), shared, "one got a block of its own");
    assert_eq!(file_acl(&img, "/two"), shared, "two keeps the shared block");
    let fs = Fs::mount_path(&img, MountOptions::default()).unwrap();
    fs.removexattr(two, b"user.big").unwrap();
    fs.removexattr(two, b"user.k").unwrap();
    fs.removexattr(one, b"user.k").unwrap();
    fs.unmount().unwrap();
    assert_fsck_clean(&img);
    assert_eq!(file_acl(&img, "/two"), 0, "an emptied block is dropped");
    let m = KernelMount::mount(&img, &mnt, "ro").unwrap();
    let mut want_one = kernel["one"].clone();
    want_one.insert(b"user.big".to_vec(), changed);
    want_one.remove(b"user.k".as_slice());
    assert_eq!(host_xattrs(&m.dir.join("one")), want_one);
    assert!(host_xattrs(&m.dir.join("two")).is_empty());
    assert_eq!(host_xattrs(&m.dir.join("three")), kernel["three"]);
    m.unmount().unwrap();
}

/// ea_inode: values too large for a block go in their own inodes, both ways. The kernel
/// sets a large value; lanefs reads it, replaces it with a larger one, sets large and
/// small values on a second file, removes one and unlinks the other; after every step
/// `e2fsck -fn` (which checks each value inode's flag, hash, reference count and the
/// blocks charged to its owner) is clean, and the kernel reads exactly what lanefs holds.
#[test]
fn ea_inode_values_both_ways() {
    let test = "ea_inode_values_both_ways";
    let td = tempfile::tempdir().unwrap();
    if !kernel_ready(test, td.path(), &["getfattr"]) {
        return;
    }
    let img = common::mkfs_image_args(td.path(), "ea.img", 64 << 20, &["-O", "ea_inode"]);
    let mnt = td.path().join("mnt");
    let big = value(7, 6000);
    {
        let km = KernelMount::mount(&img, &mnt, "").unwrap();
        let f = mnt.join("f");
        std::fs::write(&f, b"data").unwrap();
        host_set(&f, "user.big", &big);
        // The same value on a second file: the kernel shares one EA inode (two references).
        let twin = mnt.join("twin");
        std::fs::write(&twin, b"twin").unwrap();
        host_set(&twin, "user.big", &big);
        drop(km);
    }
    assert_fsck_clean(&img);
    let bigger = value(8, 9000);
    let small = value(9, 40);
    {
        let fs = Fs::mount_path(&img, MountOptions::default()).unwrap();
        let f = fs.lookup(ROOT_INO, b"f").unwrap().ino;
        assert_eq!(fs.getxattr(f, b"user.big").unwrap(), big);
        fs.setxattr(f, b"user.big", &bigger, XattrFlags::Any)
            .unwrap();
        let me = Owner::default();
        let g = fs.create(ROOT_INO, b"g", 0o644, me).unwrap().ino;
        fs.release(g).unwrap();
        fs.setxattr(g, b"user.one", &big, XattrFlags::Any).unwrap();
        fs.setxattr(g, b"user.two", &bigger, XattrFlags::Any)
            .unwrap();
        fs.setxattr(g, b"user.small", &small, XattrFlags::Any)
            .unwrap();
        let h = fs.create(ROOT_INO, b"h", 0o644, me).unwrap().ino;
        fs.release(h).unwrap();
        fs.setxattr(h, b"user.gone", &bigger, XattrFlags::Any)
            .unwrap();
        fs.removexattr(g, b"user.one").unwrap();
        // f let go of the value inode it shared with twin (replaced above): twin's
        // reference keeps it, and twin's other attributes change around it.
        let twin = fs.lookup(ROOT_INO, b"twin").unwrap().ino;
        assert_eq!(fs.getxattr(twin, b"user.big").unwrap(), big);
        fs.setxattr(twin, b"user.other", &small, XattrFlags::Any)
            .unwrap();
        fs.unmount().unwrap();
    }
    assert_fsck_clean(&img);
    {
        let fs = Fs::mount_path(&img, MountOptions::default()).unwrap();
        fs.unlink(ROOT_INO, b"h").unwrap();
        fs.unmount().unwrap();
    }
    assert_fsck_clean(&img);
    let km = KernelMount::mount(&img, &mnt, "ro").unwrap();
    let fa = host_xattrs(&mnt.join("f"));
    assert_eq!(fa.get(&b"user.big"[..]), Some(&bigger));
    let ta = host_xattrs(&mnt.join("twin"));
    assert_eq!(ta.get(&b"user.big"[..]), Some(&big));
    assert_eq!(ta.get(&b"user.other"[..]), Some(&small));
    let ga = host_xattrs(&mnt.join("g"));
    assert_eq!(ga.get(&b"user.two"[..]), Some(&bigger));
    assert_eq!(ga.get(&b"user.small"[..]), Some(&small));
    assert!(!ga.contains_key(&b"user.one"[..]), "{:?}", ga.keys());
    assert!(!mnt.join("h").exists());
    drop(km);
}

/// As ext4 with the `acl` mount option: a directory's default ACL masks a new inode's
/// mode in place of the umask and becomes its access ACL (a directory's default ACL
/// too); without one, the caller's umask applies; chmod moves an access ACL's mask.
#[test]
fn new_inodes_inherit_default_acls() {
    let td = tempfile::tempdir().unwrap();
    let img = td.path().join("i.img");
    let dev = FileDevice::create(&img, 32 << 20).unwrap();
    format(&dev, &MkfsOptions::default()).unwrap();
    drop(dev);
    let fs = Fs::mount_path(&img, MountOptions::default()).unwrap();
    let me = Owner {
        umask: 0o077,
        ..Owner::default()
    };
    let (uo, u, go, m, o) = (0x01, 0x02, 0x04, 0x10, 0x20);
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, me).unwrap().ino;
    assert_eq!(
        fs.getattr(d).unwrap().perm & 0o777,
        0o700,
        "umask without an ACL"
    );
    let default = acl(&[
        (uo, 7, NONE),
        (u, 7, 65534),
        (go, 5, NONE),
        (m, 7, NONE),
        (o, 0, NONE),
    ]);
    fs.setxattr(d, b"system.posix_acl_default", &default, XattrFlags::Any)
        .unwrap();

    let f = fs.create(d, b"f", 0o666, me).unwrap();
    assert_eq!(
        f.perm & 0o777,
        0o660,
        "the ACL, not the umask, masks the mode"
    );
    fs.release(f.ino).unwrap();
    assert_eq!(
        fs.getxattr(f.ino, b"system.posix_acl_access").unwrap(),
        acl(&[
            (uo, 6, NONE),
            (u, 7, 65534),
            (go, 5, NONE),
            (m, 6, NONE),
            (o, 0, NONE)
        ])
    );
    assert_eq!(
        fs.getxattr(f.ino, b"system.posix_acl_default"),
        Err(Error::NoData)
    );
    let sub = fs.mkdir(d, b"sub", 0o777, me).unwrap().ino;
    assert_eq!(fs.getattr(sub).unwrap().perm & 0o777, 0o770);
    assert_eq!(
        fs.getxattr(sub, b"system.posix_acl_default").unwrap(),
        default
    );
    // A symlink takes no ACL and keeps 0777.
    let l = fs.symlink(d, b"l", b"f", me).unwrap().ino;
    assert_eq!(fs.getattr(l).unwrap().perm & 0o777, 0o777);

    // chmod: owner and other from the mode, the mask (not the owning group) from its
    // group bits.
    let set = lanefs::SetAttr {
        perm: Some(0o604),
        ..Default::default()
    };
    fs.setattr(f.ino, &set).unwrap();
    assert_eq!(
        fs.getxattr(f.ino, b"system.posix_acl_access").unwrap(),
        acl(&[
            (uo, 6, NONE),
            (u, 7, 65534),
            (go, 5, NONE),
            (m, 0, NONE),
            (o, 4, NONE)
        ])
    );
    fs.unmount().unwrap();
    assert_fsck_clean(&img);
}
