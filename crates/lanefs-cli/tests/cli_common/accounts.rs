//! The test accounts: users `lanefs-a` and `lanefs-b` and group `lanefs-g`, which the
//! tests that switch users need (`.ci/run` makes them). Run as root without them, a test
//! binary makes the missing ones itself (no home, no login shell) and removes them again
//! when it exits; as another user it cannot, and the test skips.

#![allow(dead_code)]

use std::process::Command;
use std::sync::{Mutex, OnceLock};

/// The accounts this binary made, to remove when it exits.
static MADE: Mutex<Vec<(&'static str, &'static str)>> = Mutex::new(Vec::new());

/// Make sure the test accounts exist: `Ok` when they do (made now if this process is root
/// and they were missing), else why not.
pub fn ensure() -> Result<(), String> {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    DONE.get_or_init(make_missing).clone()
}

fn exists(db: &str, name: &str) -> bool {
    Command::new("getent")
        .args([db, name])
        .output()
        .is_ok_and(|o| o.status.success())
}

fn make_missing() -> Result<(), String> {
    let wanted = [
        ("group", "lanefs-g"),
        ("passwd", "lanefs-a"),
        ("passwd", "lanefs-b"),
    ];
    let missing: Vec<_> = wanted.iter().filter(|(db, n)| !exists(db, n)).collect();
    if missing.is_empty() {
        return Ok(());
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(
            "needs users lanefs-a, lanefs-b and group lanefs-g (made by root: \
                    useradd -M -s /usr/sbin/nologin lanefs-a; ...; groupadd lanefs-g)"
                .into(),
        );
    }
    for &&(db, name) in &missing {
        let (tool, args): (&str, Vec<&str>) = if db == "group" {
            ("groupadd", vec![name])
        } else {
            ("useradd", vec!["-M", "-s", "/usr/sbin/nologin", name])
        };
        let out = Command::new(tool).args(&args).output();
        let made = out.as_ref().is_ok_and(|o| o.status.success());
        // Another test binary may have made it meanwhile: that is as good.
        if !made && !exists(db, name) {
            let why = out.map_or_else(
                |e| e.to_string(),
                |o| String::from_utf8_lossy(&o.stderr).trim().to_string(),
            );
            return Err(format!("{tool} {name} failed: {why}"));
        }
        if made {
            let mut list = MADE.lock().unwrap_or_else(|e| e.into_inner());
            if list.is_empty() {
                super::skips::at_exit(remove_made);
            }
            list.push((db, name));
        }
    }
    Ok(())
}

/// Remove what `ensure` made, users before their group.
fn remove_made() {
    let made = std::mem::take(&mut *MADE.lock().unwrap_or_else(|e| e.into_inner()));
    for (db, name) in made.iter().rev() {
        let tool = if *db == "group" {
            "groupdel"
        } else {
            "userdel"
        };
        let _ = Command::new(tool).arg(name).output();
    }
}
