//! Test 1: private and shared directories. After the workers join, the contended outcomes
//! are reconciled with the shared directory and the moving tree is checked for shape.

use super::*;

/// The moving directories still form a tree: each found once, ".." and link counts right.
pub(super) fn verify_shape(fs: &Fs, tree: Ino, nodes: &[Ino]) {
    let mut seen = HashSet::new();
    let mut todo = vec![(tree, ROOT_INO)];
    while let Some((d, parent)) = todo.pop() {
        let entries = list(fs, d);
        assert_eq!(
            fs.lookup(d, b"..").expect("lookup ..").ino,
            parent,
            "'..' of {d}"
        );
        assert_eq!(
            fs.getattr(d).expect("getattr").nlink as usize,
            2 + entries.len(),
            "links of {d}"
        );
        for (name, (ino, kind)) in entries {
            assert_eq!(kind, FileType::Directory, "{name}");
            assert!(seen.insert(ino), "directory {name} reached twice");
            todo.push((ino, d));
        }
    }
    assert_eq!(
        seen,
        nodes.iter().copied().collect::<HashSet<_>>(),
        "directories of the tree"
    );
}

/// Check the whole tree against what the workers report.
pub(super) fn verify_arena(fs: &Fs, shared: Ino, outs: &[Outcome], made: &[(usize, usize)]) {
    let root = list(fs, ROOT_INO);
    for o in outs {
        let t = o.t;
        let p = root[&format!("p{t}")].0;
        let x = lookup(fs, p, "x");
        let y = lookup(fs, p, "y");
        for (s, dir) in [p, x, y].into_iter().enumerate() {
            let got = list(fs, dir);
            let mut want: BTreeSet<String> = o
                .private
                .keys()
                .filter(|k| k.0 == s)
                .map(|k| k.1.clone())
                .collect();
            if s == 0 {
                want.extend(["x".to_string(), "y".to_string()]);
                want.extend(o.subdirs.iter().cloned());
            }
            assert_eq!(
                got.keys().cloned().collect::<BTreeSet<_>>(),
                want,
                "thread {t}: private directory {s}"
            );
            for ((_, name), data) in o.private.iter().filter(|k| k.0 .0 == s) {
                let ino = got[name].0;
                assert!(
                    read_all(fs, ino) == *data,
                    "thread {t}: contents of private {s}/{name}"
                );
            }
        }
    }
    let entries = list(fs, shared);
    let mut want_targets: HashMap<usize, HashSet<u64>> = HashMap::new();
    for o in outs {
        for &(j, tag) in &o.targets {
            want_targets.entry(j).or_default().insert(tag);
        }
    }
    let victim_wins: Vec<&String> = outs.iter().flat_map(|o| &o.victim_wins).collect();
    let race_wins: HashSet<&String> = outs.iter().flat_map(|o| &o.race_wins).collect();
    for (t, &(victims, racers)) in made.iter().enumerate() {
        for k in 0..victims {
            let name = format!("v{t}-{k}");
            let wins = victim_wins.iter().filter(|&&n| *n == name).count();
            assert_eq!(wins, 1, "victim {name} was unlinked {wins} times");
        }
        for k in 0..racers {
            let (a, b) = (format!("w{t}-{k}.a"), format!("w{t}-{k}.b"));
            let (ra, rb) = (race_wins.contains(&a), race_wins.contains(&b));
            assert!(ra != rb, "racer w{t}-{k}: renames won: .a {ra}, .b {rb}");
            let won = if ra { &a } else { &b };
            let ino = entries
                .get(won)
                .unwrap_or_else(|| panic!("{won} missing"))
                .0;
            assert_eq!(
                tag_of(&read_all(fs, ino)),
                Some(((t as u64) << 32) | k as u64),
                "{won}"
            );
        }
    }
    let mut checked = 0;
    for (name, &(ino, kind)) in &entries {
        // Every entry: the listing agrees with lookup and getattr.
        let a = fs
            .lookup(shared, name.as_bytes())
            .unwrap_or_else(|e| panic!("lookup {name}: {e:?}"));
        assert_eq!(
            (a.ino, a.kind),
            (ino, kind),
            "{name}: readdir and lookup disagree"
        );
        assert_eq!(fs.getattr(ino).expect("getattr").kind, kind);
        if let Some(j) = name.strip_prefix("target") {
            let tag = tag_of(&read_all(fs, ino)).unwrap_or_else(|| panic!("{name}: torn contents"));
            let j: usize = j.parse().expect("target number");
            assert!(
                want_targets.get(&j).is_some_and(|s| s.contains(&tag)),
                "{name}: tag {tag:x} never renamed there"
            );
            checked += 1;
        } else if name.starts_with('w') {
            assert!(
                race_wins.contains(name),
                "{name}: left behind by the rename race"
            );
        } else if let Some(rest) = name.strip_prefix('s').or_else(|| name.strip_prefix('d')) {
            let t: usize = rest
                .split('-')
                .next()
                .and_then(|x| x.parse().ok())
                .expect("owner");
            let o = &outs[t];
            if name.starts_with('s') {
                assert!(read_all(fs, ino) == o.own[name], "{name}: contents");
            } else {
                assert!(o.own_dirs.contains(name), "{name}: unexpected directory");
            }
            checked += 1;
        } else {
            panic!("unexpected entry {name} in the shared directory");
        }
    }
    for o in outs {
        for n in o.own.keys().chain(o.own_dirs.iter()) {
            assert!(
                entries.contains_key(n),
                "{n} missing from the shared directory"
            );
        }
    }
    for j in want_targets.keys() {
        assert!(
            entries.contains_key(&format!("target{j}")),
            "target{j} missing"
        );
    }
    assert!(checked > 0);
}

#[test]
fn threads_in_private_and_shared_directories() {
    let test = "threads_in_private_and_shared_directories";
    if !common::require_tools(test, &["mkfs.ext4", "e2fsck"]) {
        return;
    }
    let _w = common::watchdog(test, 120);
    let seed = seed();
    println!("{test}: LANEFS_SEED={seed}");
    let td = tempfile::tempdir().expect("tempdir");
    let img = common::mkfs_image(td.path(), "conc.img", IMG_SIZE);
    let fs = mount(&img);
    let st0 = fs.statfs().expect("statfs");
    let (inodes0, blocks0) = usage(&fs);
    let shared = fs
        .mkdir(ROOT_INO, b"shared", 0o777, OWNER)
        .expect("mkdir shared")
        .ino;
    let mut dirs = Vec::new();
    for t in 0..THREADS {
        let p = fs
            .mkdir(ROOT_INO, format!("p{t}").as_bytes(), 0o755, OWNER)
            .expect("mkdir p")
            .ino;
        let x = fs.mkdir(p, b"x", 0o755, OWNER).expect("mkdir x").ino;
        let y = fs.mkdir(p, b"y", 0o755, OWNER).expect("mkdir y").ino;
        dirs.push([p, x, y]);
    }
    let tree = fs
        .mkdir(ROOT_INO, b"tree", 0o755, OWNER)
        .expect("mkdir tree")
        .ino;
    let nodes: Vec<Ino> = (0..6)
        .map(|k| {
            fs.mkdir(tree, format!("n{k}").as_bytes(), 0o755, OWNER)
                .expect("mkdir n")
                .ino
        })
        .collect();
    let arena = Arc::new(Arena {
        fs: fs.clone(),
        shared,
        victims: (0..THREADS).map(|_| AtomicUsize::new(0)).collect(),
        racers: (0..THREADS).map(|_| AtomicUsize::new(0)).collect(),
        barrier: Barrier::new(THREADS),
        deadline: Instant::now() + Duration::from_secs(8),
        tree,
        nodes: nodes.clone(),
    });
    let start = Instant::now();
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let w = Worker {
                a: arena.clone(),
                rng: StdRng::seed_from_u64(seed ^ (t as u64).wrapping_mul(0x9E37_79B9)),
                dirs: dirs[t],
                out: Outcome {
                    t,
                    ..Outcome::default()
                },
                next_victim: 0,
                next_racer: 0,
                made_victims: 0,
                made_racers: 0,
                made_targets: 0,
            };
            std::thread::spawn(move || w.run(8000))
        })
        .collect();
    let mut outs = Vec::new();
    for h in handles {
        outs.push(h.join().expect("worker panicked"));
    }
    let js = arena.fs.diagnostics().journal_stats();
    println!("{test}: {js:?}");
    assert!(
        js.commits > 10,
        "the 2 ms commit timer must have committed while the workers ran: {js:?}"
    );
    let made: Vec<(usize, usize)> = (0..THREADS)
        .map(|t| {
            (
                arena.victims[t].load(Ordering::Acquire),
                arena.racers[t].load(Ordering::Acquire),
            )
        })
        .collect();
    let ops: usize = outs.iter().map(|o| o.ops).sum();
    println!(
        "{test}: {ops} operations by {THREADS} threads in {:.1} s",
        start.elapsed().as_secs_f64()
    );
    drop(arena);
    verify_arena(&fs, shared, &outs, &made);
    verify_shape(&fs, tree, &nodes);
    // No inode or block is lost: what statfs counts as used is what the tree holds.
    let check_counts = |fs: &Fs| {
        let st = fs.statfs().expect("statfs");
        let (inodes, blocks) = usage(fs);
        assert_eq!(
            st0.free_inodes - st.free_inodes,
            inodes - inodes0,
            "inodes in use vs reachable"
        );
        assert_eq!(
            st0.free_blocks - st.free_blocks,
            blocks - blocks0,
            "blocks in use vs reachable"
        );
    };
    check_counts(&fs);
    let fs = cycle(fs, &img);
    verify_arena(&fs, shared, &outs, &made);
    verify_shape(&fs, tree, &nodes);
    check_counts(&fs);
    fs.unmount().expect("unmount");
}
