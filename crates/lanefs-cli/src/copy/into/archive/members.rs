//! A tar archive read as a stream of members: ustar, GNU (long names, old sparse
//! members) and pax (local and global extended headers, GNU sparse 0.0, 0.1 and 1.0,
//! `SCHILY.xattr.*`, `LIBARCHIVE.xattr.*`, `SCHILY.acl.*`). Each member comes with its
//! path from the root (checked not to leave it), type, owner, mode, times, xattrs and, for
//! a regular file, the map of its data segments; its data is then read with
//! [`Members::read`]. Nothing here writes: a pre-pass can walk an archive with it alone.

use super::pax::{self, Record};
use super::sparse;
use lanefs::Timespec;
use std::io::Read;
use tar::Header;

/// The size of a tar block.
pub const BLOCK: usize = 512;

/// Largest extended header (pax records, a GNU long name) read.
const MAX_META: u64 = 16 << 20;

/// What a member makes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    Regular,
    Directory,
    /// A symlink to these bytes.
    Symlink(Vec<u8>),
    /// Another name of an earlier member, at this path from the root.
    HardLink(Vec<u8>),
    CharDevice(u32, u32),
    BlockDevice(u32, u32),
    Fifo,
}

/// One member of the archive, as the archive says it (nothing of the host's).
#[derive(Clone, Debug)]
pub struct Member {
    /// Its name as archived, for messages.
    pub name: Vec<u8>,
    /// Its path from the root: names joined by `/`, none of them `.` or `..`; empty for
    /// the root itself (`.`, `./`).
    pub path: Vec<u8>,
    pub kind: Kind,
    /// Permission bits, set-user-ID, set-group-ID and sticky included (07777).
    pub perm: u16,
    pub uid: u32,
    pub gid: u32,
    pub mtime: Timespec,
    /// The archive's access time, if it has one.
    pub atime: Option<Timespec>,
    /// A regular file's size (the whole file's, holes included, for a sparse member).
    pub size: u64,
    /// A regular file's data segments in the archive, in order: offset in the file and
    /// length. The rest of the file is holes.
    pub segments: Vec<(u64, u64)>,
    /// Its extended attributes (ACLs in the VFS binary form), in archive order.
    pub xattrs: Vec<Record>,
}

/// What is wrong with an archive: the member it is about, if any, and why.
#[derive(Debug, PartialEq, Eq)]
pub struct Problem {
    pub member: Option<Vec<u8>>,
    pub why: String,
}

impl Problem {
    fn at(member: &[u8], why: impl Into<String>) -> Problem {
        Problem {
            member: Some(member.to_vec()),
            why: why.into(),
        }
    }

    fn plain(why: impl Into<String>) -> Problem {
        Problem {
            member: None,
            why: why.into(),
        }
    }
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.member {
            Some(m) => write!(f, "member {:?}: {}", String::from_utf8_lossy(m), self.why),
            None => write!(f, "{}", self.why),
        }
    }
}

/// The path from the root that member name `name` gives: an error when it would leave
/// the root (an absolute name, a `..`) or holds a name no directory can.
pub fn from_root(name: &[u8]) -> Result<Vec<u8>, &'static str> {
    if name.starts_with(b"/") {
        return Err("escapes the root (an absolute name)");
    }
    let mut out = Vec::with_capacity(name.len());
    for part in name.split(|&b| b == b'/') {
        match part {
            b"" | b"." => {}
            b".." => return Err("escapes the root"),
            p if p.len() > 255 => return Err("a name longer than 255 bytes"),
            p if p.contains(&0) => return Err("a name holding a NUL byte"),
            p => {
                if !out.is_empty() {
                    out.push(b'/');
                }
                out.extend_from_slice(p);
            }
        }
    }
    Ok(out)
}

/// The members of a tar archive read from `R`, one at a time.
pub struct Members<R> {
    r: R,
    /// Records of global pax headers, in force for every later member.
    global: Vec<Record>,
    /// Data bytes of the current member not read yet, then its padding to a block.
    left: u64,
    pad: u64,
    /// The current member's name, for messages.
    current: Vec<u8>,
    /// Bytes read so far (where a header starts, for messages).
    offset: u64,
    ended: bool,
}

impl<R: Read> Members<R> {
    pub fn new(r: R) -> Members<R> {
        Members {
            r,
            global: Vec::new(),
            left: 0,
            pad: 0,
            current: Vec::new(),
            offset: 0,
            ended: false,
        }
    }

    /// Bytes of the archive read so far.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Read exactly `buf.len()` bytes: the archive ending first is an error.
    fn exact(&mut self, buf: &mut [u8]) -> Result<(), Problem> {
        let mut filled = 0;
        while filled < buf.len() {
            match self.r.read(&mut buf[filled..]) {
                Ok(0) => {
                    let why = "truncated archive (it ends inside this member)";
                    return Err(match self.current.is_empty() {
                        true => Problem::plain("truncated archive (it ends inside a header)"),
                        false => Problem::at(&self.current, why),
                    });
                }
                Ok(n) => filled += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Problem::plain(crate::error::io_text(&e))),
            }
        }
        self.offset += buf.len() as u64;
        Ok(())
    }

    /// Skip `n` bytes.
    fn skip(&mut self, mut n: u64) -> Result<(), Problem> {
        let mut scratch = [0u8; 8192];
        while n > 0 {
            let k = n.min(scratch.len() as u64) as usize;
            self.exact(&mut scratch[..k])?;
            n -= k as u64;
        }
        Ok(())
    }

    /// The whole data of a metadata member (pax header, long name) of `size` bytes.
    fn meta_data(&mut self, size: u64, what: &str) -> Result<Vec<u8>, Problem> {
        if size > MAX_META {
            let why = format!("a {what} of {size} bytes (at most {MAX_META} are read)");
            return Err(Problem::plain(why));
        }
        let mut data = vec![0u8; size as usize];
        self.exact(&mut data)?;
        self.skip(padding(size))?;
        Ok(data)
    }

    /// Read the current member's data (segment after segment, as [`Member::segments`]
    /// lists them) into `buf`; 0 at its end.
    pub fn read(&mut self, buf: &mut [u8]) -> Result<usize, Problem> {
        let n = (buf.len() as u64).min(self.left) as usize;
        if n == 0 {
            return Ok(0);
        }
        let got = loop {
            match self.r.read(&mut buf[..n]) {
                Ok(0) => {
                    let why = "truncated archive (it ends inside this member)";
                    return Err(Problem::at(&self.current, why));
                }
                Ok(got) => break got,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Problem::plain(crate::error::io_text(&e))),
            }
        };
        self.left -= got as u64;
        self.offset += got as u64;
        Ok(got)
    }

    /// The next member, or `None` at the end of the archive (the rest of the current
    /// member's data is skipped first).
    pub fn next(&mut self) -> Result<Option<Member>, Problem> {
        if self.ended {
            return Ok(None);
        }
        let rest = self.left + self.pad;
        self.left = 0;
        self.pad = 0;
        self.skip(rest)?;
        self.current.clear();
        let mut local: Vec<Record> = Vec::new();
        let mut long_name: Option<Vec<u8>> = None;
        let mut long_link: Option<Vec<u8>> = None;
        let mut block = [0u8; BLOCK];
        loop {
            let at = self.offset;
            match self.r.read(&mut block[..1]) {
                Ok(0) => {
                    let why = "truncated archive (no end-of-archive blocks)";
                    return Err(Problem::plain(why));
                }
                Ok(_) => {}
                Err(e) => return Err(Problem::plain(crate::error::io_text(&e))),
            }
            self.offset += 1;
            self.exact(&mut block[1..])?;
            if block.iter().all(|&b| b == 0) {
                self.ended = true;
                return Ok(None);
            }
            let header = Header::from_byte_slice(&block);
            if !checksum_ok(&block) {
                let why = format!("malformed header at byte {at} (bad checksum)");
                return Err(Problem::plain(why));
            }
            self.current = long_name
                .clone()
                .unwrap_or_else(|| header.path_bytes().into_owned());
            if let Some(p) = find(&local, b"path") {
                self.current = p.to_vec();
            }
            let size = header
                .entry_size()
                .map_err(|_| Problem::at(&self.current, "malformed header (size)"))?;
            match header.as_old().linkflag[0] {
                b'x' => {
                    let data = self.meta_data(size, "pax header")?;
                    let recs = pax::records(&data).map_err(|e| Problem::at(&self.current, e))?;
                    local.extend(recs);
                }
                b'g' => {
                    let data = self.meta_data(size, "pax global header")?;
                    let recs = pax::records(&data).map_err(|e| Problem::at(&self.current, e))?;
                    for (k, v) in recs {
                        self.global.retain(|(gk, _)| *gk != k);
                        self.global.push((k, v));
                    }
                }
                b'L' => {
                    long_name = Some(trim_nul(self.meta_data(size, "GNU long name")?));
                }
                b'K' => {
                    long_link = Some(trim_nul(self.meta_data(size, "GNU long link name")?));
                }
                // A volume label names no file.
                b'V' => self.skip(size + padding(size))?,
                _ => {
                    let recs: Vec<Record> = self.global.iter().cloned().chain(local).collect();
                    let recs: Vec<&Record> = recs.iter().collect();
                    let m = self.member(header, size, &recs, long_link.take())?;
                    return Ok(Some(m));
                }
            }
        }
    }

    /// The member `header` (with `size` bytes of data) starts, with the pax records in
    /// force (`recs`, global first) and a GNU long link name.
    fn member(
        &mut self,
        header: &Header,
        size: u64,
        recs: &[&Record],
        long_link: Option<Vec<u8>>,
    ) -> Result<Member, Problem> {
        let name = self.current.clone();
        let f = header_fields(header, size, recs, &name)?;
        let size = f.size;
        let (kind, file) = self.member_kind(header, size, recs, &name, long_link)?;
        let path_name = file.real_name.unwrap_or(name);
        if kind == Kind::Regular {
            self.left = file.data;
        } else {
            // A directory's GNU dump or a link's data (none is written): skipped.
            self.left = 0;
            self.pad = 0;
            self.skip(size)?;
        }
        self.pad = padding(size);
        let path = from_root(&path_name).map_err(|why| Problem::at(&path_name, why))?;
        if path.is_empty() && kind != Kind::Directory {
            return Err(Problem::at(
                &path_name,
                "names the root, which is a directory",
            ));
        }
        let xattrs = xattrs(recs).map_err(|e| Problem::at(&path_name, e))?;
        self.current = path_name.clone();
        Ok(Member {
            name: path_name,
            path,
            kind,
            perm: f.perm,
            uid: f.uid,
            gid: f.gid,
            mtime: f.mtime,
            atime: f.atime,
            size: file.size,
            segments: file.segments,
            xattrs,
        })
    }

    /// What member `name` makes, by its type flag: a regular file's data (its bytes in
    /// the archive, size, segments and a pax sparse member's real name; for any other
    /// kind no data, size 0), a link's target, a device's numbers. A v7 archive's
    /// directory is a file whose name ends in `/`.
    fn member_kind(
        &mut self,
        header: &Header,
        size: u64,
        recs: &[&Record],
        name: &[u8],
        long_link: Option<Vec<u8>>,
    ) -> Result<(Kind, RegularData), Problem> {
        let link = || -> Vec<u8> {
            rec(recs, b"linkpath")
                .map(<[u8]>::to_vec)
                .or(long_link.clone())
                .or_else(|| header.link_name_bytes().map(|l| l.into_owned()))
                .unwrap_or_default()
        };
        let device = || device_numbers(header, recs, name);
        let typeflag = header.as_old().linkflag[0];
        let v7_dir = matches!(typeflag, 0 | b'0') && name.ends_with(b"/");
        let kind = match typeflag {
            _ if v7_dir => Kind::Directory,
            0 | b'0' | b'7' | b'S' => {
                let file = self.regular(header, typeflag, size, recs, name)?;
                return Ok((Kind::Regular, file));
            }
            b'5' | b'D' => Kind::Directory,
            b'2' => Kind::Symlink(link()),
            b'1' => {
                let target = link();
                let to = from_root(&target).map_err(|why| {
                    Problem::at(
                        name,
                        format!(
                            "hard link target {:?} {why}",
                            String::from_utf8_lossy(&target)
                        ),
                    )
                })?;
                Kind::HardLink(to)
            }
            b'3' => {
                let (ma, mi) = device()?;
                Kind::CharDevice(ma, mi)
            }
            b'4' => {
                let (ma, mi) = device()?;
                Kind::BlockDevice(ma, mi)
            }
            b'6' => Kind::Fifo,
            other => {
                let why = format!(
                    "unsupported member type '{}'",
                    char::from(other).escape_default()
                );
                return Err(Problem::at(name, why));
            }
        };
        let none = RegularData {
            data: size,
            size: 0,
            segments: Vec::new(),
            real_name: None,
        };
        Ok((kind, none))
    }

    /// A regular member's data (type `0`, `7` or GNU sparse `S`, or pax GNU sparse): its
    /// bytes in the archive, its size, its data segments and (pax sparse) its real name.
    fn regular(
        &mut self,
        header: &Header,
        typeflag: u8,
        size: u64,
        recs: &[&Record],
        name: &[u8],
    ) -> Result<RegularData, Problem> {
        let map = if typeflag == b'S' {
            let gnu = header
                .as_gnu()
                .ok_or_else(|| Problem::at(name, "a sparse member without a GNU header"))?;
            Some(self.old_sparse(gnu, name)?)
        } else {
            sparse::from_pax(recs).map_err(|e| Problem::at(name, e))?
        };
        let Some(mut map) = map else {
            return Ok(RegularData {
                data: size,
                size,
                segments: vec![(0, size)],
                real_name: None,
            });
        };
        let real_name = map.name.clone();
        let shown = real_name.clone().unwrap_or_else(|| name.to_vec());
        let mut data = size;
        if map.in_data {
            self.current = shown.clone();
            let (segs, used) = self.map_in_data(size)?;
            map.segments = segs;
            data = size - used;
        }
        sparse::check(&map.segments, map.size, data).map_err(|e| Problem::at(&shown, e))?;
        Ok(RegularData {
            data,
            size: map.size,
            segments: map.segments,
            real_name,
        })
    }

    /// The map of an old GNU sparse member (type `S`): the header's entries and those of
    /// the extension blocks after it.
    fn old_sparse(&mut self, gnu: &tar::GnuHeader, name: &[u8]) -> Result<sparse::Map, Problem> {
        let bad = || Problem::at(name, "malformed sparse header");
        let mut segments = Vec::new();
        let mut add = |s: &tar::GnuSparseHeader| -> Result<(), Problem> {
            if !s.is_empty() {
                segments.push((
                    s.offset().map_err(|_| bad())?,
                    s.length().map_err(|_| bad())?,
                ));
            }
            Ok(())
        };
        for s in &gnu.sparse {
            add(s)?;
        }
        let mut more = gnu.is_extended();
        let mut blocks = 0u32;
        while more {
            blocks += 1;
            if blocks > 1 << 16 {
                return Err(Problem::at(name, "a sparse map of too many blocks"));
            }
            let mut ext = tar::GnuExtSparseHeader::new();
            self.exact(ext.as_mut_bytes())?;
            for s in ext.sparse() {
                add(s)?;
            }
            more = ext.is_extended();
        }
        let size = gnu.real_size().map_err(|_| bad())?;
        Ok(sparse::Map {
            size,
            segments,
            name: None,
            in_data: false,
        })
    }

    /// Read the map GNU sparse 1.0 keeps at the start of the data (`size` bytes in all):
    /// the segments and the bytes the map takes (whole blocks).
    fn map_in_data(&mut self, size: u64) -> Result<(Vec<(u64, u64)>, u64), Problem> {
        let name = self.current.clone();
        let mut text = Vec::new();
        let mut used = 0u64;
        let mut numbers = Vec::new();
        let mut want: Option<u64> = None;
        loop {
            if want.is_some_and(|w| numbers.len() as u64 == 2 * w) {
                break;
            }
            match text.iter().position(|&b| b == b'\n') {
                Some(nl) => {
                    let line: Vec<u8> = text.drain(..=nl).collect();
                    let n = pax::number(b"GNU.sparse map", &line[..nl])
                        .map_err(|e| Problem::at(&name, e))?;
                    match want {
                        None if n > sparse::MAX_SEGMENTS => {
                            return Err(Problem::at(&name, "a sparse map of too many segments"));
                        }
                        None => want = Some(n),
                        Some(_) => numbers.push(n),
                    }
                }
                None => {
                    if used + BLOCK as u64 > size || text.len() > 64 {
                        return Err(Problem::at(&name, "malformed sparse map"));
                    }
                    let mut block = [0u8; BLOCK];
                    self.exact(&mut block)?;
                    used += BLOCK as u64;
                    text.extend_from_slice(&block);
                }
            }
        }
        let segments = numbers.chunks(2).map(|p| (p[0], p[1])).collect();
        Ok((segments, used))
    }
}

/// What `Members::regular` found of a regular member.
struct RegularData {
    /// Bytes of file data in the archive (after a sparse map kept in the data).
    data: u64,
    /// The file's size, holes included.
    size: u64,
    segments: Vec<(u64, u64)>,
    /// A pax sparse member's real name (`GNU.sparse.name`).
    real_name: Option<Vec<u8>>,
}

/// A member's header fields, pax records overriding the header's: its size in the
/// archive, permission bits, owner and times.
struct Fields {
    size: u64,
    perm: u16,
    uid: u32,
    gid: u32,
    mtime: Timespec,
    atime: Option<Timespec>,
}

/// The fields of member `name`'s `header` (with `size` bytes of data), the pax records in
/// force (`recs`) overriding them: a malformed header field, or an owner id past 32 bits,
/// is an error.
fn header_fields(
    header: &Header,
    size: u64,
    recs: &[&Record],
    name: &[u8],
) -> Result<Fields, Problem> {
    let fail = |why: &str| Problem::at(name, why);
    let num = |key: &[u8], from_header: std::io::Result<u64>| -> Result<u64, Problem> {
        match rec(recs, key) {
            Some(v) => pax::number(key, v).map_err(|e| Problem::at(name, e)),
            None => from_header.map_err(|_| fail(&format!("malformed header ({})", show(key)))),
        }
    };
    let id = |key: &[u8], h: std::io::Result<u64>| -> Result<u32, Problem> {
        let n = num(key, h)?;
        u32::try_from(n).map_err(|_| fail(&format!("{} {n} does not fit 32 bits", show(key))))
    };
    let size = num(b"size", Ok(size))?;
    let perm = (header.mode().map_err(|_| fail("malformed header (mode)"))? & 0o7777) as u16;
    let uid = id(b"uid", header.uid())?;
    let gid = id(b"gid", header.gid())?;
    let (mtime, atime) = member_times(header, recs, name)?;
    Ok(Fields {
        size,
        perm,
        uid,
        gid,
        mtime,
        atime,
    })
}

/// The last pax record `key` of `recs` (later records override earlier ones).
fn rec<'r>(recs: &[&'r Record], key: &[u8]) -> Option<&'r [u8]> {
    recs.iter()
        .rev()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_slice())
}

/// A member's modification and access times: pax `mtime`/`atime` (with fractions),
/// else the header's (an access time only from a GNU header, when not 0).
fn member_times(
    header: &Header,
    recs: &[&Record],
    name: &[u8],
) -> Result<(Timespec, Option<Timespec>), Problem> {
    let time = |key: &[u8]| -> Result<Option<Timespec>, Problem> {
        rec(recs, key)
            .map(|v| pax::time(key, v).map(|(sec, nsec)| Timespec { sec, nsec }))
            .transpose()
            .map_err(|e| Problem::at(name, e))
    };
    let whole = |sec: u64| Timespec {
        sec: sec as i64,
        nsec: 0,
    };
    let mtime = match time(b"mtime")? {
        Some(t) => t,
        None => whole(
            header
                .mtime()
                .map_err(|_| Problem::at(name, "malformed header (mtime)"))?,
        ),
    };
    let atime = match time(b"atime")? {
        Some(t) => Some(t),
        None => header
            .as_gnu()
            .and_then(|g| g.atime().ok())
            .filter(|&t| t != 0)
            .map(whole),
    };
    Ok((mtime, atime))
}

/// A device member's major and minor numbers: pax `SCHILY.devmajor`/`devminor`, else
/// the header's.
fn device_numbers(header: &Header, recs: &[&Record], name: &[u8]) -> Result<(u32, u32), Problem> {
    let one = |key: &[u8], from_header: Option<u32>, what: &str| -> Result<u32, Problem> {
        match rec(recs, key) {
            Some(v) => {
                let n = pax::number(key, v).map_err(|e| Problem::at(name, e))?;
                u32::try_from(n).map_err(|_| {
                    Problem::at(name, format!("{} {n} does not fit 32 bits", show(key)))
                })
            }
            None => {
                from_header.ok_or_else(|| Problem::at(name, format!("malformed header ({what})")))
            }
        }
    };
    let major = one(
        b"SCHILY.devmajor",
        header.device_major().ok().flatten(),
        "device major",
    )?;
    let minor = one(
        b"SCHILY.devminor",
        header.device_minor().ok().flatten(),
        "device minor",
    )?;
    Ok((major, minor))
}

/// Bytes of padding after `size` bytes of data.
fn padding(size: u64) -> u64 {
    (BLOCK as u64 - size % BLOCK as u64) % BLOCK as u64
}

/// Whether a header block's checksum holds (the unsigned sum, or the signed one some old
/// tars wrote).
pub fn checksum_ok(block: &[u8]) -> bool {
    if block.len() != BLOCK {
        return false;
    }
    let field = &block[148..156];
    let text: Vec<u8> = field
        .iter()
        .copied()
        .filter(|&b| b != 0 && b != b' ')
        .collect();
    let Some(want) = std::str::from_utf8(&text)
        .ok()
        .and_then(|t| u32::from_str_radix(t, 8).ok())
    else {
        return false;
    };
    let (mut unsigned, mut signed) = (0u32, 0i32);
    for (i, &b) in block.iter().enumerate() {
        let b = if (148..156).contains(&i) { b' ' } else { b };
        unsigned += u32::from(b);
        signed += i32::from(b as i8);
    }
    want == unsigned || want as i32 == signed
}

fn trim_nul(mut v: Vec<u8>) -> Vec<u8> {
    while v.last() == Some(&0) {
        v.pop();
    }
    v
}

fn find<'r>(recs: &'r [Record], key: &[u8]) -> Option<&'r [u8]> {
    recs.iter()
        .rev()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_slice())
}

fn show(key: &[u8]) -> String {
    String::from_utf8_lossy(key).into_owned()
}

/// The xattrs pax records `recs` give: `SCHILY.xattr.NAME` (raw value),
/// `LIBARCHIVE.xattr.NAME` (URL-encoded name, base64 value; libarchive writes both, and
/// its own wins), and the ACLs of `SCHILY.acl.access` and `SCHILY.acl.default` where no
/// xattr gives them. A later record of the same name replaces an earlier one.
fn xattrs(recs: &[&Record]) -> Result<Vec<Record>, String> {
    let mut out: Vec<Record> = Vec::new();
    let put = |name: Vec<u8>, value: Vec<u8>, out: &mut Vec<Record>| {
        out.retain(|(n, _)| *n != name);
        out.push((name, value));
    };
    for (k, v) in recs {
        if let Some(name) = k.strip_prefix(b"SCHILY.xattr.") {
            put(name.to_vec(), v.clone(), &mut out);
        }
    }
    for (k, v) in recs {
        if let Some(name) = k.strip_prefix(b"LIBARCHIVE.xattr.") {
            let bad = || format!("malformed pax record {}", show(k));
            let name = pax::url_decode(name).ok_or_else(bad)?;
            let value = pax::base64_decode(v).ok_or_else(bad)?;
            put(name, value, &mut out);
        }
    }
    for (key, xattr) in [
        (&b"SCHILY.acl.access"[..], &b"system.posix_acl_access"[..]),
        (b"SCHILY.acl.default", b"system.posix_acl_default"),
    ] {
        let Some(text) = find_ref(recs, key) else {
            continue;
        };
        if text.is_empty() || out.iter().any(|(n, _)| n == xattr) {
            continue;
        }
        put(xattr.to_vec(), super::acl::from_text(text)?, &mut out);
    }
    if out.iter().any(|(n, _)| n.is_empty() || n.contains(&0)) {
        return Err("an xattr with an empty name or a NUL byte in it".into());
    }
    Ok(out)
}

fn find_ref<'r>(recs: &[&'r Record], key: &[u8]) -> Option<&'r [u8]> {
    recs.iter()
        .rev()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_slice())
}

#[cfg(test)]
mod tests;
