use lanefs::*;
fn main() -> Result<()> {
    let p = std::env::args().nth(1).unwrap();
    let fs = Fs::mount_path(std::path::Path::new(&p), MountOptions::default())?;
    let o = Owner::default();
    let d = fs.mkdir(ROOT_INO, b"dir", 0o755, o)?;
    for i in 0..3000 {
        let f = fs.create(d.ino, format!("file{i:05}").as_bytes(), 0o644, o)?;
        fs.write(f.ino, 0, format!("hello {i}\n").as_bytes())?;
        fs.release(f.ino)?;
    }
    let big = fs.create(ROOT_INO, b"big", 0o644, o)?;
    let data: Vec<u8> = (0..5_000_000u32).map(|x| (x * 7) as u8).collect();
    fs.write(big.ino, 0, &data)?;
    let mut back = vec![0u8; data.len()];
    fs.read(big.ino, 0, &mut back)?;
    assert_eq!(back, data);
    fs.release(big.ino)?;
    fs.symlink(ROOT_INO, b"short", b"dir/file00001", o)?;
    fs.symlink(ROOT_INO, b"long", &[b'x'; 100], o)?;
    let ents = fs.readdir(d.ino, 0, usize::MAX)?;
    println!("readdir {}", ents.len());
    let mut pos = 0;
    let mut got = std::collections::BTreeSet::new();
    let mut n = 0;
    loop {
        let v = fs.readdir(d.ino, pos, 7)?;
        if v.is_empty() {
            break;
        }
        for e in &v {
            assert!(got.insert(e.name.clone()), "dup");
            n += 1;
            pos = e.next;
        }
    }
    assert_eq!(n, ents.len());
    println!("chunked ok {n}");
    for i in 0..3000 {
        if i % 3 == 0 {
            fs.unlink(d.ino, format!("file{i:05}").as_bytes())?;
        }
    }
    fs.rename(d.ino, b"file00001", ROOT_INO, b"moved")?;
    let f = fs.create(ROOT_INO, b"falloc", 0o644, o)?;
    for k in 0..200u64 {
        fs.fallocate(f.ino, FallocMode::default(), k * 8192, 8192)?;
    }
    fs.setattr(
        f.ino,
        &SetAttr {
            size: Some(0),
            ..Default::default()
        },
    )?;
    fs.release(f.ino)?;
    println!("{:?}", fs.statfs()?);
    fs.unmount()
}
