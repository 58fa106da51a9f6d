//! The maps of GNU tar's sparse members: which parts of a file the archive stores (the
//! rest are holes). The old GNU format keeps the map in the header (`members.rs` reads
//! it); pax 0.0 in repeated `GNU.sparse.offset`/`GNU.sparse.numbytes` records, pax 0.1 in
//! one `GNU.sparse.map` record, and pax 1.0 (GNU tar's `--sparse --format=pax`) at the
//! start of the member's data, with the real name in `GNU.sparse.name`.

use super::pax::{self, Record};

/// Most segments a map may have.
pub const MAX_SEGMENTS: u64 = 1 << 22;

/// A sparse member's map.
pub struct Map {
    /// The file's size, holes included.
    pub size: u64,
    /// The stored segments: offset in the file and length.
    pub segments: Vec<(u64, u64)>,
    /// The file's real name (`GNU.sparse.name`), when the header's is a stand-in.
    pub name: Option<Vec<u8>>,
    /// The segments are at the start of the data (pax 1.0), still to be read.
    pub in_data: bool,
}

/// The sparse map the pax records `recs` (global ones first) describe, if any.
pub fn from_pax(recs: &[&Record]) -> Result<Option<Map>, String> {
    let rec = |key: &[u8]| {
        recs.iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_slice())
    };
    let num = |key: &[u8]| rec(key).map(|v| pax::number(key, v)).transpose();
    let name = rec(b"GNU.sparse.name").map(<[u8]>::to_vec);
    let size = match num(b"GNU.sparse.realsize")? {
        Some(s) => Some(s),
        None => num(b"GNU.sparse.size")?,
    };
    let major = num(b"GNU.sparse.major")?;
    if let Some(major) = major {
        let minor = num(b"GNU.sparse.minor")?.unwrap_or(0);
        if (major, minor) != (1, 0) {
            return Err(format!("unsupported GNU sparse format {major}.{minor}"));
        }
        let size = size.ok_or("a GNU sparse 1.0 member without GNU.sparse.realsize")?;
        return Ok(Some(Map {
            size,
            segments: Vec::new(),
            name,
            in_data: true,
        }));
    }
    let mut segments = Vec::new();
    if let Some(map) = rec(b"GNU.sparse.map") {
        // 0.1: "offset,length,offset,length,..."
        let numbers: Vec<u64> = match map.is_empty() {
            true => Vec::new(),
            false => map
                .split(|&b| b == b',')
                .map(|n| pax::number(b"GNU.sparse.map", n))
                .collect::<Result<_, _>>()?,
        };
        if !numbers.len().is_multiple_of(2) {
            return Err("malformed pax record GNU.sparse.map (an odd count)".into());
        }
        segments = numbers.chunks(2).map(|p| (p[0], p[1])).collect();
    } else {
        // 0.0: the offset and numbytes records, in their order.
        let mut offset = None;
        for (k, v) in recs {
            match k.as_slice() {
                b"GNU.sparse.offset" => offset = Some(pax::number(k, v)?),
                b"GNU.sparse.numbytes" => {
                    let off = offset
                        .take()
                        .ok_or("GNU.sparse.numbytes without an offset")?;
                    segments.push((off, pax::number(k, v)?));
                }
                _ => {}
            }
        }
        if segments.is_empty() && rec(b"GNU.sparse.numblocks").is_none() {
            return Ok(None);
        }
    }
    if let Some(n) = num(b"GNU.sparse.numblocks")? {
        if n != segments.len() as u64 {
            return Err(format!(
                "GNU.sparse.numblocks says {n} segments, the map has {}",
                segments.len()
            ));
        }
    }
    let size = size.ok_or("a GNU sparse member without GNU.sparse.size")?;
    Ok(Some(Map {
        size,
        segments,
        name,
        in_data: false,
    }))
}

/// Check a map: segments in order, not overlapping, inside the file's `size`, their
/// lengths adding up to the `stored` bytes the member has.
pub fn check(segments: &[(u64, u64)], size: u64, stored: u64) -> Result<(), String> {
    if segments.len() as u64 > MAX_SEGMENTS {
        return Err("a sparse map of too many segments".into());
    }
    let (mut end, mut total) = (0u64, 0u64);
    for &(off, len) in segments {
        let stop = off.checked_add(len).filter(|&s| s <= size);
        match stop {
            Some(stop) if off >= end => {
                end = stop;
                total += len;
            }
            _ => return Err("a sparse map out of order or past the file's end".into()),
        }
    }
    if total != stored {
        return Err(format!(
            "a sparse map of {total} bytes for {stored} bytes of data"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recs(list: &[(&str, &str)]) -> Vec<Record> {
        list.iter()
            .map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec()))
            .collect()
    }

    #[test]
    fn pax_maps() {
        let r = recs(&[
            ("GNU.sparse.size", "10000"),
            ("GNU.sparse.numblocks", "2"),
            ("GNU.sparse.offset", "0"),
            ("GNU.sparse.numbytes", "10"),
            ("GNU.sparse.offset", "9000"),
            ("GNU.sparse.numbytes", "1000"),
        ]);
        let refs: Vec<&Record> = r.iter().collect();
        let m = from_pax(&refs).expect("0.0").expect("a map");
        assert_eq!(
            (m.size, m.segments.clone()),
            (10000, vec![(0, 10), (9000, 1000)])
        );
        assert!(check(&m.segments, m.size, 1010).is_ok());
        assert!(check(&m.segments, m.size, 1011).is_err());

        let r = recs(&[
            ("GNU.sparse.size", "10000"),
            ("GNU.sparse.numblocks", "2"),
            ("GNU.sparse.name", "real"),
            ("GNU.sparse.map", "0,10,9000,1000"),
        ]);
        let refs: Vec<&Record> = r.iter().collect();
        let m = from_pax(&refs).expect("0.1").expect("a map");
        assert_eq!(m.segments, vec![(0, 10), (9000, 1000)]);
        assert_eq!(m.name.as_deref(), Some(&b"real"[..]));

        let r = recs(&[
            ("GNU.sparse.major", "1"),
            ("GNU.sparse.minor", "0"),
            ("GNU.sparse.name", "a/b"),
            ("GNU.sparse.realsize", "4096"),
        ]);
        let refs: Vec<&Record> = r.iter().collect();
        let m = from_pax(&refs).expect("1.0").expect("a map");
        assert!(m.in_data && m.size == 4096);

        let r = recs(&[("path", "x")]);
        let refs: Vec<&Record> = r.iter().collect();
        assert!(from_pax(&refs).expect("none").is_none());
        for bad in [
            &[("GNU.sparse.major", "2"), ("GNU.sparse.realsize", "1")][..],
            &[("GNU.sparse.size", "9"), ("GNU.sparse.map", "0,1,2")],
            &[
                ("GNU.sparse.size", "9"),
                ("GNU.sparse.numblocks", "2"),
                ("GNU.sparse.map", "0,1"),
            ],
            &[("GNU.sparse.numbytes", "1")],
        ] {
            let r = recs(bad);
            let refs: Vec<&Record> = r.iter().collect();
            assert!(from_pax(&refs).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn maps_are_checked() {
        assert!(check(&[(0, 5), (5, 5), (20, 0)], 20, 10).is_ok());
        assert!(check(&[(5, 5), (0, 5)], 20, 10).is_err());
        assert!(check(&[(0, 10), (5, 5)], 20, 15).is_err());
        assert!(check(&[(15, 10)], 20, 10).is_err());
        assert!(check(&[(u64::MAX, 2)], u64::MAX, 2).is_err());
    }
}
