//! `mkfs -d`: filling the image mkfs just made from a host directory, as `mke2fs -d`
//! does, reproducibly when asked, with the owners and modes `--all-root`, `-E
//! root_owner` and a device table give.

use super::*;
use crate::sparse::lend::Lending;

/// Fill the root of the just-formatted image `image` from host directory `src`, as
/// `mke2fs -d`: the root takes the directory's xattrs and attributes after its last
/// name. With `clamp` (SOURCE_DATE_EPOCH), the build is reproducible: every time the
/// engine stamps and every host time copied is at most `clamp`, and every block and
/// inode is allocated by the walk, in its (sorted) order, never by a worker. `over`
/// changes owners and modes as each name is made, and adds what its table lists; with no
/// `src` only those are applied to the empty image.
///
/// With `budget` (the image was sized for the tree), a tree that grew since it was
/// counted fails the copy. With `lend` (a sparse build), file data is lent to the
/// image's device, not copied into it (`crate::sparse::lend`).
pub fn populate(
    image: &Path,
    src: Option<&Path>,
    clamp: Option<i64>,
    over: &Overrides,
    budget: Option<&Budget>,
    lend: Option<&Lending>,
) -> CmdResult<()> {
    crate::hostsys::raise_fd_limit();
    let tree = match src {
        Some(src) => {
            let shown_src = src.display();
            let host = HostDir::open_path_readable(src).ctx(&shown_src)?;
            let meta = Meta::from(host.stat().ctx(&shown_src)?);
            if meta.kind != HostType::Directory {
                return Err(Failure::new(shown_src, Error::msg("is not a directory")));
            }
            Some((src, host, meta))
        }
        None => None,
    };
    let progress = match &tree {
        Some((src, _, meta)) if Progress::wanted() => Progress::new(host_total(&Source {
            path: src.to_path_buf(),
            meta: *meta,
            at: None,
        })),
        _ => Progress::hidden(),
    };
    let shown = format!("{}:/", image.display());
    let fill = Fill {
        clamp,
        over,
        budget,
        lend,
    };
    fill_image(image, fill, progress, |copier| match tree {
        Some((src, host, meta)) => {
            let meta = copier.ctx.shaped_root(meta);
            let (path, top) = (src.to_path_buf(), over.root_node());
            copier.tree_into(host, path, meta, lanefs::ROOT_INO, &shown, top)
        }
        None => copier.no_tree(&shown),
    })
}

/// How a just-formatted image is filled: the time clamp (SOURCE_DATE_EPOCH), the
/// owners and modes to impose, the size budget of a tree sized beforehand, and whether
/// file data is lent to the device.
pub(super) struct Fill<'a> {
    pub clamp: Option<i64>,
    pub over: &'a Overrides,
    pub budget: Option<&'a Budget>,
    pub lend: Option<&'a Lending>,
}

/// Mount the just-formatted `image` for filling and run `walker` on the copier (file data
/// written by workers beside it), with `progress` shown until it ends.
pub(super) fn fill_image(
    image: &Path,
    fill: Fill<'_>,
    progress: Progress,
    walker: impl FnOnce(&Copier<'_>) -> CmdResult<()>,
) -> CmdResult<()> {
    let opts = fill_options(fill.clamp);
    let work = |fs: &Fs| {
        let ctx = Ctx {
            fs,
            progress: &progress,
            clamp: fill.clamp,
            flags: crate::copy::Flags::default(),
            over: fill.over,
            budget: fill.budget,
            lend: fill.lend.is_some(),
        };
        walk(ctx, walker)
    };
    let result = match fill.lend {
        Some(lending) => lending.build(image, opts, work),
        None => crate::session::with_fs_opts(image, opts, work),
    };
    progress.finish();
    result.map(|_| ())
}

/// The engine's options for filling a just-formatted image (`clamp`: SOURCE_DATE_EPOCH).
pub(super) fn fill_options(clamp: Option<i64>) -> lanefs::MountOptions {
    lanefs::MountOptions {
        clamp_time: clamp,
        // A group another thread holds is waited for, not skipped: the walk's allocations
        // then decide alike however the workers run.
        mb_trylock: clamp.is_none(),
        pagecache_limit: COPY_PAGECACHE,
        // Filling the image mkfs just made is no mount (mount count 0, never mounted).
        count_mount: false,
        // Nor does it keep blocks back for later metadata: the image is filled whole, as
        // `mke2fs -d` fills it.
        reserved_blocks: Some(0),
        ..crate::session::mount_options(false)
    }
}
