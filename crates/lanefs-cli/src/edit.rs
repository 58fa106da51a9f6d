//! The offline edits users reach for, e2tools-style on `IMAGE:/PATH`: `mv`, `ln [-s]`,
//! `chmod`, `chown` and `touch`, each as its coreutils namesake behaves on the paths it
//! is given, inside one read-write mount of the image.

use crate::cli::{ChmodArgs, ChownArgs, LnArgs, MvArgs, TouchArgs};
use crate::error::{CmdResult, Context, Error, Failure};
use crate::imgpath::{parse_image_arg, resolve, resolve_dest, split_last, Dest, ImageArg};
use crate::modify::{for_each_in_image, own_owner, parse_all};
use crate::session::{read_dir_all, with_fs};
use lanefs::{FileType, Fs, Ino, SetAttr, Timespec};
use std::collections::HashSet;
use std::path::Path;

/// Where `src`'s entry goes for a destination `dst`: into it (under the source's last
/// name) when it is an existing directory, else as `dst` itself.
fn place(
    fs: &Fs,
    src_name: &[u8],
    dst: &ImageArg,
) -> CmdResult<(Ino, Vec<u8>, Option<lanefs::Attr>)> {
    let what = dst.display();
    match resolve_dest(fs, &dst.path).ctx(&what)? {
        Dest::Exists(found) if found.attr.kind == FileType::Directory => {
            let existing = fs.lookup(found.attr.ino, src_name).ok();
            Ok((found.attr.ino, src_name.to_vec(), existing))
        }
        Dest::Exists(found) => match found.entry {
            Some((dir, name)) => Ok((dir, name, Some(found.attr))),
            None => Err(Failure::new(what, lanefs::Error::IsDir)),
        },
        Dest::New { dir, name } => Ok((dir, name, None)),
    }
}

/// `lanefs mv SRC... DST`: rename each source to DST, or move it into DST when that is
/// a directory (several sources need one); an existing non-directory is replaced (not
/// with `-n`), an empty directory by a directory, as rename(2) does.
pub fn mv(args: &MvArgs) -> CmdResult<i32> {
    let (image, all) = parse_all(&args.paths)?;
    let (dst, srcs) = all.split_last().expect("clap requires two paths");
    with_fs(Path::new(&image), false, |fs| {
        if srcs.len() > 1 {
            let is_dir =
                resolve(fs, &dst.path, true).is_ok_and(|f| f.attr.kind == FileType::Directory);
            if !is_dir {
                return Err(Failure::new(dst.display(), lanefs::Error::NotDir));
            }
        }
        for src in srcs {
            let what = src.display();
            let found = resolve(fs, &src.path, false).ctx(&what)?;
            let Some((from_dir, from_name)) = found.entry else {
                let msg = "cannot move '/', '.' or '..'";
                return Err(Failure::new(what, Error::msg(msg)));
            };
            let (to_dir, to_name, existing) = place(fs, &from_name, dst)?;
            if existing.as_ref().is_some_and(|e| e.ino == found.attr.ino) {
                // The same file: nothing to do, as mv says (and does).
                continue;
            }
            if args.no_clobber && existing.is_some() {
                continue;
            }
            fs.rename(from_dir, &from_name, to_dir, &to_name)
                .ctx(format!("{what} -> {}", dst.display()))?;
        }
        Ok(())
    })?;
    Ok(0)
}

/// `lanefs ln TARGET LINK` (a hard link to TARGET, both in one image) or `ln -s TARGET
/// LINK` (a symbolic link holding TARGET's text). LINK may be an existing directory: the
/// link is made in it under TARGET's last name. `-f` replaces a non-directory there.
pub fn ln(args: &LnArgs) -> CmdResult<i32> {
    let link = parse_image_arg(&args.link)?;
    let target_arg = (!args.symbolic)
        .then(|| parse_image_arg(&args.target))
        .transpose()?;
    if let Some(t) = &target_arg {
        if t.image != link.image {
            let msg = "a hard link and its target must be in one image";
            return Err(Failure::new(t.display(), Error::msg(msg)));
        }
    }
    let text = args.target.as_encoded_bytes().to_vec();
    with_fs(&link.image, false, |fs| {
        let (ino, name_for_dir) = match &target_arg {
            Some(t) => {
                let found = resolve(fs, &t.path, false).ctx(t.display())?;
                if found.attr.kind == FileType::Directory {
                    let msg = "hard link not allowed for a directory";
                    return Err(Failure::new(t.display(), Error::msg(msg)));
                }
                let name = split_last(&t.path).map(|(_, n)| n).unwrap_or_default();
                (Some(found.attr.ino), name)
            }
            None => {
                let name = text
                    .rsplit(|&b| b == b'/')
                    .next()
                    .unwrap_or_default()
                    .to_vec();
                (None, name)
            }
        };
        let (dir, name, existing) = place(fs, &name_for_dir, &link)?;
        if let Some(old) = existing {
            if ino == Some(old.ino) {
                let msg = "is the same file as the target";
                return Err(Failure::new(link.display(), Error::msg(msg)));
            }
            if !args.force {
                return Err(Failure::new(link.display(), lanefs::Error::Exists));
            }
            if old.kind == FileType::Directory {
                return Err(Failure::new(link.display(), lanefs::Error::IsDir));
            }
            fs.unlink(dir, &name).ctx(link.display())?;
        }
        match ino {
            Some(ino) => fs.link(ino, dir, &name).map(|_| ()),
            None => fs.symlink(dir, &name, &text, own_owner()).map(|_| ()),
        }
        .ctx(link.display())
    })?;
    Ok(0)
}

/// Every inode under `top` (itself first), each once, by the names that reach them: for
/// `-R`. A directory met twice (a corrupt image) is walked once.
fn tree(fs: &Fs, top: Ino, shown: &str) -> CmdResult<Vec<(Ino, String)>> {
    let mut out = vec![(top, shown.to_string())];
    let mut seen = HashSet::from([top]);
    let mut i = 0;
    while i < out.len() {
        let (ino, here) = out[i].clone();
        i += 1;
        if fs.getattr(ino).ctx(&here)?.kind != FileType::Directory {
            continue;
        }
        for e in read_dir_all(fs, ino).ctx(&here)? {
            if seen.insert(e.ino) {
                out.push((e.ino, crate::session::join_display(&here, &e.name)));
            }
        }
    }
    Ok(out)
}

/// The inodes a command changes: each argument (symlinks followed unless `!follow`),
/// and with `recursive` everything under it.
fn targets(
    fs: &Fs,
    arg: &ImageArg,
    follow: bool,
    recursive: bool,
) -> CmdResult<Vec<(Ino, String)>> {
    let what = arg.display();
    let ino = resolve(fs, &arg.path, follow).ctx(&what)?.attr.ino;
    if recursive {
        tree(fs, ino, &what)
    } else {
        Ok(vec![(ino, what)])
    }
}

/// `lanefs chmod MODE IMAGE:/PATH...`.
pub fn chmod(args: &ChmodArgs) -> CmdResult<i32> {
    let umask = process_umask();
    // Checked before the image is opened: a bad mode changes nothing.
    parse_mode(&args.mode, 0, false, umask).map_err(|e| Failure::new(&args.mode, Error::msg(e)))?;
    for_each_in_image(&args.targets, |fs, arg| {
        for (ino, what) in targets(fs, arg, true, args.recursive)? {
            let a = fs.getattr(ino).ctx(&what)?;
            if a.kind == FileType::Symlink {
                continue;
            }
            let is_dir = a.kind == FileType::Directory;
            let perm = parse_mode(&args.mode, a.perm, is_dir, umask)
                .map_err(|e| Failure::new(&args.mode, Error::msg(e)))?;
            let set = SetAttr {
                perm: Some(perm),
                ..SetAttr::default()
            };
            fs.setattr(ino, &set).ctx(&what)?;
        }
        Ok(())
    })
}

/// The process's umask (read by setting it and putting it back).
pub fn process_umask() -> u16 {
    // SAFETY: umask only swaps the process's mask; it is restored at once, and no
    // thread creates files meanwhile (the command is single-threaded here).
    let old = unsafe { libc::umask(0o022) };
    // SAFETY: as above.
    unsafe { libc::umask(old) };
    (old & 0o777) as u16
}

/// The permission bits `spec` makes of `old`: octal (`0644`, `2755`), or chmod's
/// symbolic clauses `[ugoa]*([-+=]([rwxXst]*|[ugo]))+`, comma separated (no `ugoa`:
/// all, less what `umask` masks).
pub fn parse_mode(spec: &str, old: u16, is_dir: bool, umask: u16) -> Result<u16, String> {
    let bad = || format!("invalid mode '{spec}' (octal such as 0644, or such as u+x,go-w)");
    if !spec.is_empty() && spec.bytes().all(|b| (b'0'..=b'7').contains(&b)) {
        let v = u16::from_str_radix(spec, 8).map_err(|_| bad())?;
        if v > 0o7777 {
            return Err(bad());
        }
        // A directory keeps its set-user-ID and set-group-ID bits under a mode of up
        // to four digits (GNU chmod; five digits, 00755, clear them).
        let keep = if is_dir && spec.len() <= 4 {
            old & 0o6000
        } else {
            0
        };
        return Ok(v | keep);
    }
    let mut perm = old & 0o7777;
    for clause in spec.split(',') {
        let who_end = clause.find(['+', '-', '=']).ok_or_else(bad)?;
        let (who, mut rest) = clause.split_at(who_end);
        let mut mask = 0u16;
        for c in who.chars() {
            mask |= match c {
                'u' => 0o4700,
                'g' => 0o2070,
                'o' => 0o1007,
                'a' => 0o7777,
                _ => return Err(bad()),
            };
        }
        let masked = who.is_empty();
        if masked {
            mask = 0o7777 & !umask;
        }
        while let Some(op) = rest.chars().next() {
            let end = rest[1..]
                .find(['+', '-', '='])
                .map_or(rest.len(), |i| i + 1);
            let perms = &rest[1..end];
            rest = &rest[end..];
            let mut bits = 0u16;
            for c in perms.chars() {
                bits |= match c {
                    'r' => 0o444,
                    'w' => 0o222,
                    'x' => 0o111,
                    'X' if is_dir || perm & 0o111 != 0 => 0o111,
                    'X' => 0,
                    's' => 0o6000,
                    't' => 0o1000,
                    // Copy another class's bits to every class named.
                    'u' => ((perm >> 6) & 7) * 0o111,
                    'g' => ((perm >> 3) & 7) * 0o111,
                    'o' => (perm & 7) * 0o111,
                    _ => return Err(bad()),
                };
            }
            let bits = bits & mask;
            perm = match op {
                '+' => perm | bits,
                '-' => perm & !bits,
                _ => {
                    // `=` clears the named classes (setuid and setgid of a directory stay
                    // unless named, as GNU chmod keeps them) then sets.
                    let keep = if is_dir && !perms.contains('s') {
                        0o6000
                    } else {
                        0
                    };
                    let clear = if masked { 0o7777 } else { mask } & !keep;
                    (perm & !clear) | bits
                }
            };
        }
    }
    Ok(perm)
}

/// `lanefs chown OWNER[:GROUP] IMAGE:/PATH...`.
pub fn chown(args: &ChownArgs) -> CmdResult<i32> {
    for_each_in_image(&args.targets, |fs, arg| {
        let (uid, gid) = parse_owner(fs, &args.owner, &arg.image)?;
        // A symlink given is followed unless -h, or -R (whose default, as GNU chown's
        // -P, changes the link itself and does not walk through it).
        let follow = !args.no_dereference && !args.recursive;
        for (ino, what) in targets(fs, arg, follow, args.recursive)? {
            let a = fs.getattr(ino).ctx(&what)?;
            // A changed owner clears set-user-ID, and set-group-ID where group execute
            // is set, on a non-directory, as chown(2) does for an unprivileged file.
            let mut perm = a.perm;
            if a.kind != FileType::Directory && a.kind != FileType::Symlink {
                perm &= !0o4000;
                if perm & 0o010 != 0 {
                    perm &= !0o2000;
                }
            }
            let set = SetAttr {
                uid,
                gid,
                perm: (perm != a.perm).then_some(perm),
                ..SetAttr::default()
            };
            fs.setattr(ino, &set).ctx(&what)?;
        }
        Ok(())
    })
}

/// OWNER, OWNER:GROUP, OWNER: (the owner's login group) or :GROUP (also with `.`), as
/// numbers or as names from the image's /etc/passwd and /etc/group.
fn parse_owner(fs: &Fs, spec: &str, image: &Path) -> CmdResult<(Option<u32>, Option<u32>)> {
    let (user, group) = match spec.split_once([':', '.']) {
        Some((u, g)) => (u, Some(g)),
        None => (spec, None),
    };
    let accounts = crate::accounts::Accounts::of(fs);
    let fail = |what: &str, name: &str, file: &str| {
        let msg = format!(
            "no {what} '{name}' in {}:{file} (give a number)",
            image.display()
        );
        Failure::new(spec, Error::msg(msg))
    };
    let uid = match user {
        "" => None,
        u => Some(match u.parse::<u32>() {
            Ok(n) => n,
            Err(_) => accounts
                .uid(u)
                .ok_or_else(|| fail("user", u, "/etc/passwd"))?,
        }),
    };
    let gid = match group {
        None => None,
        Some("") => match (user, uid) {
            ("", _) => None,
            (u, Some(n)) => Some(
                accounts
                    .login_gid(u, n)
                    .ok_or_else(|| fail("login group for", u, "/etc/passwd"))?,
            ),
            _ => None,
        },
        Some(g) => Some(match g.parse::<u32>() {
            Ok(n) => n,
            Err(_) => accounts
                .gid(g)
                .ok_or_else(|| fail("group", g, "/etc/group"))?,
        }),
    };
    if uid.is_none() && gid.is_none() {
        return Err(Failure::new(spec, Error::msg("no owner or group given")));
    }
    Ok((uid, gid))
}

/// `lanefs touch [-c] [-a|-m] [-d TIME] IMAGE:/PATH...`.
pub fn touch(args: &TouchArgs) -> CmdResult<i32> {
    let when = match &args.date {
        Some(d) => parse_time(d).map_err(|e| Failure::new("-d", Error::msg(e)))?,
        None => Timespec::now(),
    };
    for_each_in_image(&args.targets, |fs, arg| {
        let what = arg.display();
        let ino = match resolve_dest(fs, &arg.path).ctx(&what)? {
            Dest::Exists(found) => found.attr.ino,
            Dest::New { .. } if args.no_create => return Ok(()),
            Dest::New { dir, name } => {
                let a = fs
                    .create(dir, &name, 0o666 & !process_umask(), own_owner())
                    .ctx(&what)?;
                fs.release(a.ino).ctx(&what)?;
                a.ino
            }
        };
        let set = SetAttr {
            atime: (!args.modify_only).then_some(when),
            mtime: (!args.access_only).then_some(when),
            ..SetAttr::default()
        };
        fs.setattr(ino, &set).ctx(&what)?;
        Ok(())
    })
}

/// `@SECONDS[.FRACTION]`, or `YYYY-MM-DD[( |T)HH:MM[:SS[.FRACTION]]]` in UTC.
pub fn parse_time(text: &str) -> Result<Timespec, String> {
    let bad = || format!("invalid time '{text}' (@SECONDS, or YYYY-MM-DD [HH:MM[:SS]] in UTC)");
    let seconds = |s: &str| -> Result<(i64, u32), String> {
        let (whole, frac) = s.split_once('.').unwrap_or((s, ""));
        let sec = whole.parse::<i64>().map_err(|_| bad())?;
        if frac.len() > 9 || !frac.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        let nsec = format!("{frac:0<9}").parse::<u32>().map_err(|_| bad())?;
        Ok((sec, nsec))
    };
    if let Some(s) = text.strip_prefix('@') {
        let (sec, nsec) = seconds(s)?;
        return Ok(Timespec { sec, nsec });
    }
    let (date, time) = match text.split_once([' ', 'T']) {
        Some((d, t)) => (d, t),
        None => (text, "00:00"),
    };
    let num = |s: &str| s.parse::<i64>().map_err(|_| bad());
    let d: Vec<&str> = date.split('-').collect();
    let t: Vec<&str> = time.split(':').collect();
    if d.len() != 3 || !(2..=3).contains(&t.len()) {
        return Err(bad());
    }
    let (y, mo, day) = (num(d[0])?, num(d[1])?, num(d[2])?);
    let (h, mi) = (num(t[0])?, num(t[1])?);
    let (s, nsec) = match t.get(2) {
        Some(s) => seconds(s)?,
        None => (0, 0),
    };
    if !(1..=12).contains(&mo) || !(1..=31).contains(&day) || h > 23 || mi > 59 || s > 60 {
        return Err(bad());
    }
    let sec = days_from_civil(y, mo as u32, day as u32) * 86_400 + h * 3600 + mi * 60 + s;
    Ok(Timespec { sec, nsec })
}

/// Days since 1970-01-01 of a civil date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = (i64::from(m) + 9) % 12;
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_as_chmod_reads_them() {
        let m = |spec: &str, old: u16, dir: bool| parse_mode(spec, old, dir, 0o022).unwrap();
        assert_eq!(m("644", 0o777, false), 0o644);
        assert_eq!(m("2755", 0, true), 0o2755);
        assert_eq!(m("755", 0o2700, true), 0o2755, "a directory keeps setgid");
        assert_eq!(m("00755", 0o2700, true), 0o755);
        assert_eq!(m("755", 0o2700, false), 0o755);
        assert_eq!(m("u+x", 0o644, false), 0o744);
        assert_eq!(m("go-w", 0o666, false), 0o644);
        assert_eq!(m("a=r", 0o755, false), 0o444);
        assert_eq!(m("+x", 0o644, false), 0o755);
        assert_eq!(
            m("+w", 0o444, false),
            0o644,
            "the umask keeps group and other out"
        );
        assert_eq!(m("u=rw,g=r,o=", 0o777, false), 0o640);
        assert_eq!(m("a+X", 0o644, true), 0o755);
        assert_eq!(m("a+X", 0o644, false), 0o644);
        assert_eq!(m("u+s,g+s", 0o755, false), 0o6755);
        assert_eq!(m("+t", 0o777, true), 0o1777);
        assert_eq!(m("g=u", 0o740, false), 0o770);
        assert_eq!(m("u-x+w", 0o544, false), 0o644);
        for bad in ["", "8", "77777", "u", "z+x", "u+q", "u+x,"] {
            assert!(parse_mode(bad, 0, false, 0).is_err(), "{bad}");
        }
    }

    #[test]
    fn times_parse_in_utc() {
        let t = |s: &str| parse_time(s).unwrap();
        assert_eq!(t("@0"), Timespec { sec: 0, nsec: 0 });
        assert_eq!(
            t("@1700000000.5"),
            Timespec {
                sec: 1_700_000_000,
                nsec: 500_000_000
            }
        );
        assert_eq!(t("2009-02-13 23:31:30").sec, 1_234_567_890);
        assert_eq!(t("2009-02-13T23:31:30.25").nsec, 250_000_000);
        assert_eq!(t("1970-01-02").sec, 86_400);
        assert_eq!(t("1969-12-31 23:59").sec, -60);
        for bad in ["", "yesterday", "2009-13-01", "2009-02-13 25:00", "@x"] {
            assert!(parse_time(bad).is_err(), "{bad}");
        }
    }
}
