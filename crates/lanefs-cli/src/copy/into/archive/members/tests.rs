//! The member stream against archives built here, good and bad.

use super::*;

/// A header of `kind` for raw name `name` (no checks), `size` bytes of data.
fn header(name: &[u8], kind: u8, size: u64) -> Header {
    let mut h = Header::new_ustar();
    h.as_old_mut().name[..name.len()].copy_from_slice(name);
    h.as_old_mut().linkflag = [kind];
    h.set_mode(0o4755);
    h.set_uid(1234);
    h.set_gid(5678);
    h.set_mtime(1_600_000_000);
    h.set_size(size);
    h.set_cksum();
    h
}

/// An archive of `(header, data)` members, ended as tar ends one.
fn archive(members: &[(Header, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (h, data) in members {
        out.extend_from_slice(h.as_bytes());
        out.extend_from_slice(data);
        out.resize(out.len() + padding(data.len() as u64) as usize, 0);
    }
    out.resize(out.len() + 2 * BLOCK, 0);
    out
}

fn pax(records: &[(&str, &[u8])]) -> (Header, Vec<u8>) {
    let mut data = Vec::new();
    for (k, v) in records {
        let body = 1 + k.len() + 1 + v.len() + 1;
        let mut len = body + 1;
        while format!("{len}").len() + body != len {
            len = format!("{len}").len() + body;
        }
        data.extend_from_slice(format!("{len} {k}=").as_bytes());
        data.extend_from_slice(v);
        data.push(b'\n');
    }
    (header(b"PaxHeaders/x", b'x', data.len() as u64), data)
}

fn all(bytes: &[u8]) -> Result<Vec<(Member, Vec<u8>)>, Problem> {
    let mut m = Members::new(bytes);
    let mut out = Vec::new();
    while let Some(member) = m.next()? {
        let mut data = Vec::new();
        let mut buf = [0u8; 100];
        loop {
            let n = m.read(&mut buf)?;
            if n == 0 {
                break;
            }
            data.extend_from_slice(&buf[..n]);
        }
        out.push((member, data));
    }
    Ok(out)
}

#[test]
fn plain_members() {
    let mut link = header(b"./a/hl", b'1', 0);
    link.set_link_name("a/f").expect("link");
    link.set_cksum();
    let mut sym = header(b"a/s", b'2', 0);
    sym.set_link_name("/etc/passwd").expect("target");
    sym.set_cksum();
    let mut dev = header(b"dev", b'3', 0);
    dev.set_device_major(4).expect("major");
    dev.set_device_minor(7).expect("minor");
    dev.set_cksum();
    let bytes = archive(&[
        (header(b"./", b'5', 0), vec![]),
        (header(b"./a/f", b'0', 5), b"hello".to_vec()),
        (link, vec![]),
        (sym, vec![]),
        (dev, vec![]),
        (header(b"p", b'6', 0), vec![]),
    ]);
    let got = all(&bytes).expect("parsed");
    let paths: Vec<&[u8]> = got.iter().map(|(m, _)| m.path.as_slice()).collect();
    assert_eq!(paths, [&b""[..], b"a/f", b"a/hl", b"a/s", b"dev", b"p"]);
    assert_eq!(got[0].0.kind, Kind::Directory);
    let (f, data) = &got[1];
    assert_eq!((f.perm, f.uid, f.gid, f.size), (0o4755, 1234, 5678, 5));
    assert_eq!(
        f.mtime,
        Timespec {
            sec: 1_600_000_000,
            nsec: 0
        }
    );
    assert_eq!(data, b"hello");
    assert_eq!(got[2].0.kind, Kind::HardLink(b"a/f".to_vec()));
    assert_eq!(got[3].0.kind, Kind::Symlink(b"/etc/passwd".to_vec()));
    assert_eq!(got[4].0.kind, Kind::CharDevice(4, 7));
    assert_eq!(got[5].0.kind, Kind::Fifo);
}

#[test]
fn pax_records_override_the_header() {
    let bytes = archive(&[
        pax(&[
            ("path", b"long/name"),
            ("uid", b"4000000000"),
            ("gid", b"7"),
            ("mtime", b"1700000000.123456789"),
            ("atime", b"1700000001.5"),
            ("SCHILY.xattr.user.k", b"v\n\0x"),
            ("LIBARCHIVE.xattr.user.a%3Db", b"AAEC"),
            ("SCHILY.acl.access", b"user::rw-,group::r--,other::r--"),
            ("uname", b"ignored"),
        ]),
        (header(b"short", b'0', 0), vec![]),
    ]);
    let got = all(&bytes).expect("parsed");
    let m = &got[0].0;
    assert_eq!(
        (m.path.as_slice(), m.uid, m.gid),
        (&b"long/name"[..], 4_000_000_000, 7)
    );
    assert_eq!(
        m.mtime,
        Timespec {
            sec: 1_700_000_000,
            nsec: 123_456_789
        }
    );
    assert_eq!(
        m.atime,
        Some(Timespec {
            sec: 1_700_000_001,
            nsec: 500_000_000
        })
    );
    let names: Vec<&[u8]> = m.xattrs.iter().map(|(n, _)| n.as_slice()).collect();
    assert_eq!(
        names,
        [&b"user.k"[..], b"user.a=b", b"system.posix_acl_access"]
    );
    assert_eq!(m.xattrs[0].1, b"v\n\0x");
    assert_eq!(m.xattrs[1].1, [0, 1, 2]);
}

#[test]
fn sparse_members() {
    // pax 1.0: the map at the start of the data, the real name apart.
    let mut data = b"2\n0\n3\n8192\n2\n".to_vec();
    data.resize(BLOCK, 0);
    data.extend_from_slice(b"abcxy");
    let bytes = archive(&[
        pax(&[
            ("GNU.sparse.major", b"1"),
            ("GNU.sparse.minor", b"0"),
            ("GNU.sparse.name", b"dir/sparse"),
            ("GNU.sparse.realsize", b"10000"),
        ]),
        (
            header(b"dir/GNUSparseFile.1/sparse", b'0', data.len() as u64),
            data,
        ),
    ]);
    let got = all(&bytes).expect("parsed");
    let (m, data) = &got[0];
    assert_eq!(m.path, b"dir/sparse");
    assert_eq!(
        (m.size, m.segments.clone()),
        (10000, vec![(0, 3), (8192, 2)])
    );
    assert_eq!(data, b"abcxy");

    // Old GNU: the map in the header.
    let mut h = Header::new_gnu();
    h.set_path("old").expect("path");
    h.set_entry_type(tar::EntryType::GNUSparse);
    h.set_size(4);
    h.set_mode(0o644);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(0);
    let gnu = h.as_gnu_mut().expect("gnu");
    gnu.sparse[0].set_offset(4096);
    gnu.sparse[0].set_length(4);
    gnu.set_real_size(1 << 20);
    h.set_cksum();
    let got = all(&archive(&[(h, b"data".to_vec())])).expect("parsed");
    let (m, data) = &got[0];
    assert_eq!((m.size, m.segments.clone()), (1 << 20, vec![(4096, 4)]));
    assert_eq!(data, b"data");
}

#[test]
fn hostile_and_broken_archives_fail_naming_the_member() {
    let why = |bytes: &[u8]| all(bytes).err().map(|p| p.to_string()).unwrap_or_default();
    for (name, want) in [
        (&b"../x"[..], "member \"../x\": escapes the root"),
        (
            b"/abs",
            "member \"/abs\": escapes the root (an absolute name)",
        ),
        (b"a/../../x", "member \"a/../../x\": escapes the root"),
    ] {
        let bytes = archive(&[(header(name, b'0', 0), vec![])]);
        assert_eq!(why(&bytes), want);
    }
    let mut link = header(b"l", b'1', 0);
    link.set_link_name_literal("../../etc/shadow")
        .expect("link");
    link.set_cksum();
    assert!(why(&archive(&[(link, vec![])])).contains("escapes the root"));
    let bytes = archive(&[(header(b"f", b'0', 1000), vec![7; 1000])]);
    assert_eq!(
        why(&bytes[..BLOCK + 100]),
        "member \"f\": truncated archive (it ends inside this member)"
    );
    assert_eq!(
        why(&bytes[..BLOCK * 3]),
        "truncated archive (no end-of-archive blocks)"
    );
    let mut garbage = bytes.clone();
    garbage[1] ^= 0x55;
    assert!(why(&garbage).contains("bad checksum"));
    let bytes = archive(&[(header(b"weird", b'M', 0), vec![])]);
    assert_eq!(why(&bytes), "member \"weird\": unsupported member type 'M'");
    let (h, mut data) = pax(&[("path", b"x")]);
    data[0] = b'7';
    let bytes = archive(&[(h, data), (header(b"f", b'0', 0), vec![])]);
    assert!(
        why(&bytes).contains("malformed pax record"),
        "{}",
        why(&bytes)
    );
    let bytes = archive(&[(header(b".", b'0', 0), vec![])]);
    assert!(why(&bytes).contains("names the root"));
}

#[test]
fn names_from_the_root() {
    assert_eq!(from_root(b"./a//b/./c/"), Ok(b"a/b/c".to_vec()));
    assert_eq!(from_root(b"./"), Ok(Vec::new()));
    assert_eq!(from_root(b"."), Ok(Vec::new()));
    assert!(from_root(b"a/..").is_err());
    assert!(from_root(b"/").is_err());
    assert!(from_root(&[b'a'; 256]).is_err());
}
