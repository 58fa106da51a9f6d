//! How inodes look on screen: mode strings and times (UTC).

use lanefs::{FileType, Timespec};

/// The `ls -l` type letter of `kind`.
pub fn type_char(kind: FileType) -> char {
    match kind {
        FileType::Regular => '-',
        FileType::Directory => 'd',
        FileType::CharDevice => 'c',
        FileType::BlockDevice => 'b',
        FileType::Fifo => 'p',
        FileType::Socket => 's',
        FileType::Symlink => 'l',
    }
}

/// A word for `kind`, as `stat` prints it.
pub fn type_name(kind: FileType) -> &'static str {
    match kind {
        FileType::Regular => "regular file",
        FileType::Directory => "directory",
        FileType::CharDevice => "character special file",
        FileType::BlockDevice => "block special file",
        FileType::Fifo => "fifo",
        FileType::Socket => "socket",
        FileType::Symlink => "symbolic link",
    }
}

/// "drwxr-xr-x"-style mode string, with setuid, setgid and sticky bits.
pub fn mode_string(kind: FileType, perm: u16) -> String {
    let mut s = String::with_capacity(10);
    s.push(type_char(kind));
    let special = [(0o4000, 's'), (0o2000, 's'), (0o1000, 't')];
    for (i, (bit, letter)) in special.into_iter().enumerate() {
        let shift = 6 - 3 * i;
        let bits = (perm >> shift) & 7;
        s.push(if bits & 4 != 0 { 'r' } else { '-' });
        s.push(if bits & 2 != 0 { 'w' } else { '-' });
        s.push(match (bits & 1 != 0, perm & bit != 0) {
            (true, true) => letter,
            (false, true) => letter.to_ascii_uppercase(),
            (true, false) => 'x',
            (false, false) => '-',
        });
    }
    s
}

/// Civil date (year, month, day) of a day count since 1970-01-01.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// "YYYY-MM-DD HH:MM:SS" in UTC.
fn date_time(sec: i64) -> String {
    let (y, mo, d) = civil_from_days(sec.div_euclid(86_400));
    let s = sec.rem_euclid(86_400);
    format!(
        "{y:04}-{mo:02}-{d:02} {:02}:{:02}:{:02}",
        s / 3600,
        s % 3600 / 60,
        s % 60
    )
}

/// A time as `ls -l` shows it: "YYYY-MM-DD HH:MM" (UTC).
pub fn short_time(t: Timespec) -> String {
    let mut s = date_time(t.sec);
    s.truncate(s.len() - 3);
    s
}

/// A time with nanoseconds, as `stat` shows it: "YYYY-MM-DD HH:MM:SS.NNNNNNNNN +0000".
pub fn full_time(t: Timespec) -> String {
    format!("{}.{:09} +0000", date_time(t.sec), t.nsec)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mode_strings() {
        assert_eq!(mode_string(FileType::Directory, 0o755), "drwxr-xr-x");
        assert_eq!(mode_string(FileType::Regular, 0o640), "-rw-r-----");
        assert_eq!(mode_string(FileType::Regular, 0o4755), "-rwsr-xr-x");
        assert_eq!(mode_string(FileType::Directory, 0o1777), "drwxrwxrwt");
        assert_eq!(mode_string(FileType::Regular, 0o2644), "-rw-r-Sr--");
        assert_eq!(mode_string(FileType::Symlink, 0o777), "lrwxrwxrwx");
    }

    #[test]
    fn times_are_utc() {
        assert_eq!(
            full_time(Timespec { sec: 0, nsec: 5 }),
            "1970-01-01 00:00:00.000000005 +0000"
        );
        let t = Timespec {
            sec: 1_234_567_890,
            nsec: 123_456_789,
        };
        assert_eq!(full_time(t), "2009-02-13 23:31:30.123456789 +0000");
        assert_eq!(short_time(t), "2009-02-13 23:31");
        assert_eq!(
            short_time(Timespec { sec: -1, nsec: 0 }),
            "1969-12-31 23:59"
        );
        assert_eq!(
            short_time(Timespec {
                sec: 951_782_400,
                nsec: 0
            }),
            "2000-02-29 00:00"
        );
    }
}

/// A name as GNU `ls` shows it on a terminal (its `shell-escape` quoting), so that a
/// name holding a newline, a control character or bytes that are not UTF-8 cannot pass
/// for two names or move the cursor: `a b` as `'a b'`, `a<newline>b` as
/// `'a'$'\n''b'`, byte 0xff as `$'\377'`; a plain name as it is. (Piped, `ls` prints
/// names as they are, as GNU `ls` does.)
pub fn shell_quoted(name: &[u8]) -> Vec<u8> {
    let plain = |c: char| match c.is_ascii() {
        true => c.is_ascii_alphanumeric() || "-_./+,:@%^=".contains(c),
        false => !c.is_control(),
    };
    let text = std::str::from_utf8(name).ok();
    if !name.is_empty() && text.is_some_and(|t| t.chars().all(plain)) {
        return name.to_vec();
    }
    let printable = |c: char| !c.is_control();
    if let Some(t) = text.filter(|t| t.chars().all(printable)) {
        if !t.contains('\'') {
            return format!("'{t}'").into_bytes();
        }
        if !t.contains(['"', '$', '`', '\\', '!']) {
            return format!("\"{t}\"").into_bytes();
        }
    }
    // Quoted runs of printable characters, the rest as $'\NNN' escapes.
    let mut out = String::new();
    let mut run = String::new();
    let flush = |run: &mut String, out: &mut String| {
        if !run.is_empty() {
            out.push('\'');
            out.push_str(&run.replace('\'', "'\\''"));
            out.push('\'');
            run.clear();
        }
    };
    for chunk in name.utf8_chunks() {
        for c in chunk.valid().chars() {
            if printable(c) {
                run.push(c);
                continue;
            }
            flush(&mut run, &mut out);
            let esc = match c {
                '\n' => "\\n".to_string(),
                '\t' => "\\t".to_string(),
                '\r' => "\\r".to_string(),
                c if (c as u32) < 0x100 => format!("\\{:03o}", c as u32),
                c => c.escape_unicode().to_string(),
            };
            out.push_str(&format!("$'{esc}'"));
        }
        for b in chunk.invalid() {
            flush(&mut run, &mut out);
            out.push_str(&format!("$'\\{b:03o}'"));
        }
    }
    flush(&mut run, &mut out);
    out.into_bytes()
}

#[cfg(test)]
mod quoting_tests {
    use super::shell_quoted;

    #[test]
    fn names_quote_as_gnu_ls_shows_them() {
        let q = |n: &[u8]| String::from_utf8(shell_quoted(n)).unwrap();
        assert_eq!(q(b"plain-name.txt"), "plain-name.txt");
        assert_eq!(q("caf\u{e9}".as_bytes()), "caf\u{e9}");
        assert_eq!(q(b"a b"), "'a b'");
        assert_eq!(q(b"it's"), "\"it's\"");
        assert_eq!(q(b"a\nb"), "'a'$'\\n''b'");
        assert_eq!(q(b"\xffx"), "$'\\377''x'");
        assert_eq!(q(b"\x1b[31m"), "$'\\033''[31m'");
    }
}
