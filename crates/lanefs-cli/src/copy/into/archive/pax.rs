//! The text of pax extended headers (POSIX.1-2001 `x` and `g` members): records, times
//! with fractions, and libarchive's encoded xattr names and values.

/// One `LEN KEY=VALUE\n` record: its key and value, as bytes (a value may hold any byte).
pub type Record = (Vec<u8>, Vec<u8>);

/// The records of a pax header's data, in order. Trailing NUL padding is ignored (some
/// writers leave it); anything else that is not a whole record is an error.
pub fn records(data: &[u8]) -> Result<Vec<Record>, String> {
    let mut out = Vec::new();
    let mut rest = data;
    while !rest.is_empty() {
        if rest.iter().all(|&b| b == 0) {
            break;
        }
        let bad = |why: &str| Err(format!("malformed pax record ({why})"));
        let Some(sp) = rest.iter().take(20).position(|&b| b == b' ') else {
            return bad("no length");
        };
        let digits = &rest[..sp];
        if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
            return bad("no length");
        }
        let len: usize = match std::str::from_utf8(digits)
            .ok()
            .and_then(|d| d.parse().ok())
        {
            Some(n) => n,
            None => return bad("length out of range"),
        };
        if len <= sp + 1 || len > rest.len() {
            return bad("length out of range");
        }
        let rec = &rest[sp + 1..len];
        let Some(kv) = rec.strip_suffix(b"\n") else {
            return bad("no newline at its end");
        };
        let Some(eq) = kv.iter().position(|&b| b == b'=') else {
            return bad("no '='");
        };
        if eq == 0 {
            return bad("an empty keyword");
        }
        out.push((kv[..eq].to_vec(), kv[eq + 1..].to_vec()));
        rest = &rest[len..];
    }
    Ok(out)
}

/// A decimal number of a record (`uid`, `size`, `GNU.sparse.offset`, ...).
pub fn number(key: &[u8], value: &[u8]) -> Result<u64, String> {
    std::str::from_utf8(value)
        .ok()
        .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| {
            format!(
                "malformed pax record {}={} (not a decimal number)",
                String::from_utf8_lossy(key),
                String::from_utf8_lossy(value)
            )
        })
}

/// A pax time (`mtime`, `atime`): seconds since 1970, maybe negative, with an optional
/// fraction (digits past nanoseconds are dropped), as seconds and nanoseconds.
pub fn time(key: &[u8], value: &[u8]) -> Result<(i64, u32), String> {
    let bad = || {
        format!(
            "malformed pax record {}={} (not a time)",
            String::from_utf8_lossy(key),
            String::from_utf8_lossy(value)
        )
    };
    let text = std::str::from_utf8(value).map_err(|_| bad())?;
    let (neg, text) = match text.strip_prefix('-') {
        Some(t) => (true, t),
        None => (false, text),
    };
    let (whole, frac) = text.split_once('.').unwrap_or((text, ""));
    let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() || !all_digits(whole) || !all_digits(frac) {
        return Err(bad());
    }
    let sec: i64 = whole.parse().map_err(|_| bad())?;
    let mut nsec: u32 = 0;
    for (i, d) in frac.bytes().take(9).enumerate() {
        nsec += u32::from(d - b'0') * 10u32.pow(8 - i as u32);
    }
    Ok(match (neg, nsec) {
        (false, _) => (sec, nsec),
        (true, 0) => (-sec, 0),
        (true, n) => (-sec - 1, 1_000_000_000 - n),
    })
}

/// A name libarchive wrote URL-encoded (`LIBARCHIVE.xattr.NAME`: `%XX` for a byte below
/// 33 or above 126, `%` and `=`).
pub fn url_decode(name: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(name.len());
    let mut i = 0;
    while i < name.len() {
        if name[i] == b'%' {
            let hex = name.get(i + 1..i + 3)?;
            let hex = std::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(name[i]);
            i += 1;
        }
    }
    Some(out)
}

/// Standard base64 (RFC 4648), with or without `=` padding (libarchive writes none).
pub fn base64_decode(text: &[u8]) -> Option<Vec<u8>> {
    let text = match text.iter().position(|&b| b == b'=') {
        Some(pad) if text[pad..].iter().all(|&b| b == b'=') && text.len() - pad <= 2 => {
            &text[..pad]
        }
        Some(_) => return None,
        None => text,
    };
    crate::xattr::base64_unpadded(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_parse_and_refuse() {
        let data = b"30 mtime=1700000000.123456789\n12 path=a/b\n20 SCHILY.xattr.x=\n\n\0\0";
        let r = records(data).expect("records");
        assert_eq!(r.len(), 3);
        assert_eq!(r[0], (b"mtime".to_vec(), b"1700000000.123456789".to_vec()));
        assert_eq!(r[1], (b"path".to_vec(), b"a/b".to_vec()));
        // A value may hold a newline: the length says where the record ends.
        assert_eq!(r[2], (b"SCHILY.xattr.x".to_vec(), b"\n".to_vec()));
        for bad in [
            &b"12 path=a/b"[..],
            b"x path=a\n",
            b"99 path=a\n",
            b"9 path=a \n",
            b"8 patha\n",
            b"5 =a\n\n",
        ] {
            assert!(records(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn times_keep_nanoseconds_and_sign() {
        assert_eq!(
            time(b"mtime", b"1700000000.5"),
            Ok((1700000000, 500_000_000))
        );
        assert_eq!(time(b"mtime", b"12.1234567891"), Ok((12, 123_456_789)));
        assert_eq!(time(b"mtime", b"7"), Ok((7, 0)));
        assert_eq!(time(b"mtime", b"-1.25"), Ok((-2, 750_000_000)));
        assert_eq!(time(b"mtime", b"-3"), Ok((-3, 0)));
        for bad in [&b""[..], b".5", b"1.x", b"1e9", b"--1"] {
            assert!(time(b"mtime", bad).is_err());
        }
        assert_eq!(number(b"uid", b"4294967296"), Ok(1 << 32));
        assert!(number(b"uid", b"-1").is_err());
    }

    #[test]
    fn libarchive_encodings() {
        assert_eq!(
            url_decode(b"user.a%20b%3D%25"),
            Some(b"user.a b=%".to_vec())
        );
        assert_eq!(url_decode(b"bad%4"), None);
        assert_eq!(base64_decode(b"aGVsbG8"), Some(b"hello".to_vec()));
        assert_eq!(base64_decode(b"aGVsbG8="), Some(b"hello".to_vec()));
        assert_eq!(base64_decode(b"aGVsbG8h"), Some(b"hello!".to_vec()));
        assert_eq!(base64_decode(b"AAEC/w"), Some(vec![0, 1, 2, 0xff]));
        assert_eq!(base64_decode(b""), Some(vec![]));
        assert_eq!(base64_decode(b"a"), None);
        assert_eq!(base64_decode(b"a=b"), None);
        assert_eq!(base64_decode(b"a*bc"), None);
    }
}
