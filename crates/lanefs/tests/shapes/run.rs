//! One shape end to end: the kernel (or mke2fs -d) writes, lanefs reads, lanefs writes,
//! e2fsck, lanefs fsck and the kernel judge.

use super::*;

// ---------------------------------------------------------------------------------------
// One shape end to end.

/// Whether root, loop mounts and e2fsprogs are here (probed once; SKIP printed per test).
pub(super) fn ready(test: &str) -> bool {
    pub(super) static READY: OnceLock<Result<(), String>> = OnceLock::new();
    let r = READY.get_or_init(|| {
        for t in ["mke2fs", "tune2fs", "e2fsck", "debugfs"] {
            if !common::have_tool(t) {
                return Err(format!("{t} not found"));
            }
        }
        if !common::is_root() {
            return Err("not root (loop mounts need privilege)".into());
        }
        let td = tempfile::tempdir().map_err(|e| e.to_string())?;
        let img = common::mkfs_image(td.path(), "probe.img", 16 << 20);
        let m = KernelMount::mount(&img, &td.path().join("probe"), "ro")
            .map_err(|e| format!("cannot loop-mount a fresh image: {e}"))?;
        m.unmount()
    });
    match r {
        Ok(()) => true,
        Err(e) => {
            common::skip(test, e);
            false
        }
    }
}

/// How the file system's blocks map a file, per debugfs: "extents", "blocks" or "inline".
pub(super) fn map_form(img: &Path, p: &str) -> Result<&'static str, String> {
    let st = debugfs(img, &format!("stat \"/{p}\""))?;
    if st.contains("Size of inline data") {
        Ok("inline")
    } else if st.contains("EXTENTS:") {
        Ok("extents")
    } else if st.contains("BLOCKS:") {
        Ok("blocks")
    } else {
        Err(format!("debugfs stat /{p}: no map shown:\n{st}"))
    }
}

pub(super) fn run_shape(name: &str) {
    let test = format!("shapes::{name}");
    if !ready(&test) {
        return;
    }
    let s = shape(name);
    let _dog = common::watchdog(&test, 600);
    let start = Instant::now();
    let td = tempfile::tempdir().expect("tempdir");
    let mut fails: Vec<String> = Vec::new();
    let img = mke2fs_image(td.path(), "shape.img", s.size, s.mkfs)
        .unwrap_or_else(|e| panic!("{test}: {e}"));
    // (c) lanefs fsck on the untouched image.
    if let Err(e) = pristine_fsck(name, &img) {
        fails.push(format!("(c) pristine image: {e}"));
    }
    // (a) the kernel writes the tree (or mke2fs -d where it cannot mount the image).
    let mnt = td.path().join("mnt");
    let mut model = Model::new();
    let kernel = match KernelMount::mount(&img, &mnt, "") {
        Ok(km) => {
            let mut host = HostTarget { root: mnt.clone() };
            let r = initial_tree(
                &mut Driver {
                    m: &mut model,
                    t: &mut host,
                },
                s,
            );
            km.unmount().expect("unmount after the kernel's tree");
            r.unwrap_or_else(|e| panic!("{test}: the kernel's tree: {e}"));
            true
        }
        Err(e) => {
            println!(
                "{test}: the kernel does not mount it ({}); mke2fs -d",
                first_line(&e)
            );
            let src = td.path().join("src");
            std::fs::create_dir(&src).expect("mkdir src");
            let mut host = HostTarget { root: src.clone() };
            initial_tree(
                &mut Driver {
                    m: &mut model,
                    t: &mut host,
                },
                s,
            )
            .unwrap_or_else(|e| panic!("{test}: the source tree: {e}"));
            let mut args: Vec<&str> = s.mkfs.to_vec();
            let src_s = src.to_str().expect("utf-8 temp path").to_string();
            args.extend(["-d", &src_s]);
            mke2fs_image(td.path(), "shape.img", s.size, &args)
                .unwrap_or_else(|e| panic!("{test}: {e}"));
            // mke2fs -d leaves the quota files' usage at zero: e2fsck -fy updates them.
            let _ = Command::new("e2fsck").arg("-fy").arg(&img).output();
            false
        }
    };
    if !s.tune.is_empty() {
        run(Command::new("tune2fs").args(s.tune).arg(&img))
            .unwrap_or_else(|e| panic!("{test}: tune2fs: {e}"));
    }
    let (code, text) = common::e2fsck(&img);
    assert_eq!(code, 0, "{test}: the tree as written is not clean:\n{text}");
    if s.inline() && map_form(&img, "small/s2").ok() != Some("inline") {
        fails.push("setup: small/s2 (40 bytes) is not inline on an inline_data image".into());
    }
    if s.old_blockmap() && map_form(&img, "big").ok() != Some("blocks") {
        fails.push("setup: /big is not block-mapped".into());
    }
    let fs = match Fs::mount_path(&img, MountOptions::default()) {
        Ok(fs) => fs,
        Err(e) => {
            fails.push(format!("(a) lanefs mount: {e}"));
            return finish(&test, s, start, model.paths.len(), fails);
        }
    };
    for e in compare(&model, &mut LanefsView { fs: &fs }) {
        fails.push(format!("(a) {e}"));
    }
    // (b) lanefs writes, or refuses by name.
    let writable = match (fs.read_only_reason(), s.expect) {
        (None, _) => true,
        (Some(r), Expect::RoOrRw(feature)) => {
            if !r.contains(feature) {
                fails.push(format!(
                    "(b) read-only, but the reason does not name {feature}: {r}"
                ));
            }
            match fs.mkdir(ROOT_INO, b"refused", 0o755, ROOT_OWNER) {
                Err(Error::ReadOnly) => {}
                other => fails.push(format!(
                    "(b) read-only mount ({r}): mkdir gave {other:?}, want ReadOnly"
                )),
            }
            false
        }
        (Some(r), Expect::Rw) => {
            fails.push(format!("(b) lanefs mounts it read-only: {r}"));
            false
        }
    };
    let mut wrote = Ok(());
    if writable {
        let mut t = LanefsTarget { fs: fs.clone() };
        wrote = lanefs_changes(
            &mut Driver {
                m: &mut model,
                t: &mut t,
            },
            s,
        );
        if let Err(e) = &wrote {
            fails.push(format!("(b) {e}"));
        }
    }
    if let Err(e) = fs.unmount() {
        fails.push(format!("(b) lanefs unmount: {e}"));
    }
    let (code, text) = common::e2fsck(&img);
    if code != 0 {
        let text: Vec<&str> = text.lines().take(30).collect();
        fails.push(format!("(b) e2fsck -fn exit {code}:\n{}", text.join("\n")));
    }
    if !writable || wrote.is_err() {
        return finish(&test, s, start, model.paths.len(), fails);
    }
    if let Err(e) = lanefs_fsck(&img) {
        fails.push(format!("(b) after lanefs's changes: {e}"));
    }
    // Map forms: grown block-mapped files stay so; new files use extents where they can.
    if s.old_blockmap() {
        match map_form(&img, "grow") {
            Ok("blocks") => {}
            other => fails.push(format!(
                "(b) /grow grown by lanefs: map {other:?}, want blocks"
            )),
        }
    }
    let want_new = if s.new_extents() { "extents" } else { "blocks" };
    for p in ["new/dense", "new/sparse"] {
        match map_form(&img, p) {
            Ok(f) if f == want_new => {}
            other => fails.push(format!(
                "(b) /{p} made by lanefs: map {other:?}, want {want_new}"
            )),
        }
    }
    // The expected tree, read by the kernel (or debugfs), then by lanefs again.
    if kernel {
        match KernelMount::mount(&img, &mnt, "ro") {
            Ok(km) => {
                for e in compare(&model, &mut HostView { root: mnt.clone() }) {
                    fails.push(format!("(b) {e}"));
                }
                km.unmount().expect("unmount");
            }
            Err(e) => fails.push(format!("(b) the kernel does not mount lanefs's image: {e}")),
        }
    } else {
        let mut v = DebugfsView {
            img: img.clone(),
            bs: s.bs,
            cats: BTreeMap::new(),
        };
        for e in compare(&model, &mut v) {
            fails.push(format!("(b) {e}"));
        }
    }
    let ro = MountOptions {
        read_only: true,
        ..MountOptions::default()
    };
    match Fs::mount_path(&img, ro) {
        Ok(fs) => {
            for e in compare(&model, &mut LanefsView { fs: &fs }) {
                fails.push(format!("(b) remounted: {e}"));
            }
        }
        Err(e) => fails.push(format!("(b) lanefs remount: {e}")),
    }
    finish(&test, s, start, model.paths.len(), fails)
}

pub(super) fn finish(test: &str, s: &Shape, start: Instant, paths: usize, fails: Vec<String>) {
    println!(
        "{test}: {:.1} s, {paths} paths, {} problem(s)",
        start.elapsed().as_secs_f64(),
        fails.len()
    );
    if !fails.is_empty() {
        panic!("{test} ({:?}):\n{}", s.mkfs, fails.join("\n"));
    }
}

pub(super) fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}
