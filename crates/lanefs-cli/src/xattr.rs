//! `getfattr` and `setfattr` on `IMAGE:/PATH`, and how values are shown (also by
//! `stat`).

use crate::cli::{GetfattrArgs, SetfattrArgs};
use crate::error::{CmdResult, Context, Error, Failure};
use crate::imgpath::resolve;
use crate::modify::{for_each_in_image, parse_all};
use crate::session::with_fs;
use lanefs::XattrFlags;
use std::io::Write;
use std::path::Path;

/// `lanefs getfattr [-n NAME] [-e text|hex] IMAGE:/PATH...`: for each file a `# file:`
/// line, then `name=value` per attribute (every namespace, ACLs included), as
/// `getfattr -d -m -` prints them.
pub fn getfattr(args: &GetfattrArgs) -> CmdResult<i32> {
    let hex_only = match args.encoding.as_str() {
        "text" => false,
        "hex" => true,
        other => {
            let msg = format!("unknown encoding '{other}' (text or hex)");
            return Err(Failure::new("-e", Error::msg(msg)));
        }
    };
    let (image, all) = parse_all(&args.targets)?;
    let text = with_fs(Path::new(&image), true, |fs| {
        let mut out = Vec::new();
        for arg in &all {
            let what = arg.display();
            let ino = resolve(fs, &arg.path, true).ctx(&what)?.attr.ino;
            let names = match &args.name {
                Some(n) => vec![n.as_bytes().to_vec()],
                None => fs.listxattr(ino).ctx(&what)?,
            };
            out.extend_from_slice(b"# file: ");
            out.extend_from_slice(&arg.path);
            out.push(b'\n');
            for name in names {
                let value = fs
                    .getxattr(ino, &name)
                    .ctx(format!("{what}: {}", String::from_utf8_lossy(&name)))?;
                let shown = if hex_only {
                    hex(&value)
                } else {
                    xattr_value(&value)
                };
                out.extend_from_slice(&name);
                out.extend_from_slice(format!("={shown}\n").as_bytes());
            }
            out.push(b'\n');
        }
        Ok(out)
    })?;
    std::io::stdout().write_all(&text).ctx("standard output")?;
    Ok(0)
}

/// `lanefs setfattr -n NAME [-v VALUE] IMAGE:/PATH...` or `-x NAME`.
pub fn setfattr(args: &SetfattrArgs) -> CmdResult<i32> {
    let value = match &args.value {
        Some(v) => parse_value(v).map_err(|e| Failure::new("-v", Error::msg(e)))?,
        None => Vec::new(),
    };
    for_each_in_image(&args.targets, |fs, arg| {
        let what = arg.display();
        let ino = resolve(fs, &arg.path, true).ctx(&what)?.attr.ino;
        match (&args.name, &args.remove) {
            (_, Some(name)) => fs
                .removexattr(ino, name.as_bytes())
                .ctx(format!("{what}: {name}")),
            (Some(name), None) => fs
                .setxattr(ino, name.as_bytes(), &value, XattrFlags::Any)
                .ctx(format!("{what}: {name}")),
            (None, None) => Err(Failure::new(what, Error::msg("give -n NAME or -x NAME"))),
        }
    })
}

/// A value as setfattr reads it: `0x` hex digits, `0s` base64, `"quoted text"`, or
/// text as it is.
pub fn parse_value(v: &str) -> Result<Vec<u8>, String> {
    if let Some(h) = v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        if h.len() % 2 != 0 || !h.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(format!("'{v}': an odd number of hex digits, or not hex"));
        }
        return Ok((0..h.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&h[i..i + 2], 16).expect("hex digits"))
            .collect());
    }
    if let Some(b) = v.strip_prefix("0s").or_else(|| v.strip_prefix("0S")) {
        return base64(b).ok_or_else(|| format!("'{v}': not base64"));
    }
    if let Some(q) = v.strip_prefix('"').and_then(|q| q.strip_suffix('"')) {
        return Ok(q.as_bytes().to_vec());
    }
    Ok(v.as_bytes().to_vec())
}

/// Standard base64 (padding optional).
fn base64(text: &str) -> Option<Vec<u8>> {
    base64_unpadded(text.trim_end_matches('=').as_bytes())
}

/// Standard base64 (RFC 4648) without its `=` padding: groups of four characters, the
/// last of two or three; `None` for any other character or a lone last one.
pub fn base64_unpadded(bytes: &[u8]) -> Option<Vec<u8>> {
    let val = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    if bytes.len() % 4 == 1 {
        return None;
    }
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for chunk in bytes.chunks(4) {
        let mut n = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            n |= val(c)? << (18 - 6 * i);
        }
        let take = chunk.len() - 1;
        out.extend_from_slice(&n.to_be_bytes()[1..1 + take]);
    }
    Some(out)
}

/// A value as `getfattr` shows it: quoted text when every byte is printable (a final
/// NUL allowed), else hex.
pub fn xattr_value(v: &[u8]) -> String {
    let body = v.strip_suffix(&[0]).unwrap_or(v);
    if body
        .iter()
        .all(|&b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\')
    {
        format!("\"{}\"", String::from_utf8_lossy(body))
    } else {
        hex(v)
    }
}

pub fn hex(v: &[u8]) -> String {
    let digits: String = v.iter().map(|b| format!("{b:02x}")).collect();
    format!("0x{digits}")
}

/// A POSIX ACL xattr (version 2: tag, permissions and id per entry) in `getfacl`'s
/// short form: `user::rw-,user:1000:r--,group::r--,mask::r--,other::r--`.
pub fn acl_text(v: &[u8]) -> Option<String> {
    let (head, body) = v.split_first_chunk::<4>()?;
    if u32::from_le_bytes(*head) != 2 || body.len() % 8 != 0 {
        return None;
    }
    let entries = body.chunks_exact(8).map(|e| {
        let tag = u16::from_le_bytes([e[0], e[1]]);
        let perm = u16::from_le_bytes([e[2], e[3]]);
        let id = u32::from_le_bytes([e[4], e[5], e[6], e[7]]);
        let rwx: String = [(4, 'r'), (2, 'w'), (1, 'x')]
            .iter()
            .map(|&(bit, c)| if perm & bit != 0 { c } else { '-' })
            .collect();
        let who = match tag {
            0x01 => "user::".to_string(),
            0x02 => format!("user:{id}:"),
            0x04 => "group::".to_string(),
            0x08 => format!("group:{id}:"),
            0x10 => "mask::".to_string(),
            0x20 => "other::".to_string(),
            _ => return None,
        };
        Some(format!("{who}{rwx}"))
    });
    Some(entries.collect::<Option<Vec<_>>>()?.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_parse_as_setfattr_reads_them() {
        assert_eq!(parse_value("hello").unwrap(), b"hello");
        assert_eq!(parse_value("\"a b\"").unwrap(), b"a b");
        assert_eq!(parse_value("0x00ff10").unwrap(), vec![0, 0xff, 0x10]);
        assert_eq!(parse_value("0saGVsbG8=").unwrap(), b"hello");
        assert_eq!(parse_value("0saGk").unwrap(), b"hi");
        assert!(parse_value("0x123").is_err());
        assert!(parse_value("0s!!").is_err());
        assert_eq!(xattr_value(b"text"), "\"text\"");
        assert_eq!(xattr_value(&[1, 2]), "0x0102");
    }
}
