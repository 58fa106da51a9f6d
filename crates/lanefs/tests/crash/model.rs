//! The model: every state a directory entry or a file went through since it was last
//! acknowledged (by fsync or sync), and the per-byte rule a file's contents after a crash
//! must follow.

use super::*;

// ---------------------------------------------------------------------------------------
// The model: every state an entry or a file went through since it was last acknowledged.

pub(super) type NodeId = usize;
pub(super) const ROOT: NodeId = 0;

pub(super) struct Node {
    /// None for a file whose create failed at the power cut (number unknown).
    pub(super) ino: Option<Ino>,
    pub(super) kind: FileType,
    /// Contents after each change (directories: one empty version).
    pub(super) versions: Vec<Vec<u8>>,
    /// `versions[floor..]` are the states a crash may show.
    pub(super) floor: usize,
    pub(super) label: String,
}

/// One name in one directory: what it pointed to after each change (None: absent).
pub(super) struct Slot {
    versions: Vec<Option<NodeId>>,
    floor: usize,
}

impl Slot {
    pub(super) fn allowed(&self) -> &[Option<NodeId>] {
        &self.versions[self.floor..]
    }
    fn current(&self) -> Option<NodeId> {
        *self.versions.last().expect("slot without versions")
    }
}

pub(super) struct Model {
    pub(super) nodes: Vec<Node>,
    pub(super) slots: BTreeMap<(NodeId, Vec<u8>), Slot>,
}

impl Model {
    /// The image as mkfs.ext4 made it: the root and an empty lost+found.
    pub(super) fn new(lost_found: Ino) -> Model {
        let mut m = Model {
            nodes: Vec::new(),
            slots: BTreeMap::new(),
        };
        m.add_node(Some(ROOT_INO), FileType::Directory, "/".into());
        let lf = m.add_node(Some(lost_found), FileType::Directory, "/lost+found".into());
        m.set_name(ROOT, b"lost+found", Some(lf));
        m.ack_all();
        m
    }

    pub(super) fn add_node(&mut self, ino: Option<Ino>, kind: FileType, label: String) -> NodeId {
        self.nodes.push(Node {
            ino,
            kind,
            versions: vec![Vec::new()],
            floor: 0,
            label,
        });
        self.nodes.len() - 1
    }

    pub(super) fn set_name(&mut self, dir: NodeId, name: &[u8], to: Option<NodeId>) {
        let slot = self
            .slots
            .entry((dir, name.to_vec()))
            .or_insert_with(|| Slot {
                versions: vec![None],
                floor: 0,
            });
        slot.versions.push(to);
    }

    pub(super) fn lookup(&self, dir: NodeId, name: &[u8]) -> Option<NodeId> {
        self.slots
            .get(&(dir, name.to_vec()))
            .and_then(Slot::current)
    }

    /// Live names in `dir` now.
    pub(super) fn children(&self, dir: NodeId) -> Vec<(Vec<u8>, NodeId)> {
        self.slots
            .range((dir, Vec::new())..(dir + 1, Vec::new()))
            .filter_map(|((_, n), s)| s.current().map(|id| (n.clone(), id)))
            .collect()
    }

    pub(super) fn content(&self, n: NodeId) -> &Vec<u8> {
        self.nodes[n]
            .versions
            .last()
            .expect("node without versions")
    }

    pub(super) fn push_content(&mut self, n: NodeId, c: Vec<u8>) {
        self.nodes[n].versions.push(c);
    }

    pub(super) fn ack_node(&mut self, n: NodeId) {
        let node = &mut self.nodes[n];
        node.floor = node.versions.len() - 1;
    }

    pub(super) fn ack_dir(&mut self, dir: NodeId) {
        for (_, s) in self
            .slots
            .range_mut((dir, Vec::new())..(dir + 1, Vec::new()))
        {
            s.floor = s.versions.len() - 1;
        }
    }

    pub(super) fn ack_all(&mut self) {
        for n in 0..self.nodes.len() {
            self.ack_node(n);
        }
        for s in self.slots.values_mut() {
            s.floor = s.versions.len() - 1;
        }
    }

    pub(super) fn describe(&self, to: Option<NodeId>) -> String {
        match to {
            None => "absent".into(),
            Some(n) => {
                let node = &self.nodes[n];
                let ino = node.ino.map_or("?".into(), |i| i.to_string());
                format!("{} (ino {ino}, {:?})", node.label, node.kind)
            }
        }
    }
}

/// Whether `got` could be the file after a crash, given the versions since its last
/// acknowledgement: each byte must be what one of them had at that offset.
pub(super) fn content_allowed(versions: &[Vec<u8>], got: &[u8]) -> Result<(), String> {
    if versions.iter().any(|v| v.as_slice() == got) {
        return Ok(());
    }
    let sizes: BTreeSet<usize> = versions.iter().map(Vec::len).collect();
    if !sizes.contains(&got.len()) {
        return Err(format!(
            "size {} is not one of the sizes since the last fsync/sync: {sizes:?}",
            got.len()
        ));
    }
    for (i, &b) in got.iter().enumerate() {
        if !versions.iter().any(|v| v.get(i) == Some(&b)) {
            let had: BTreeSet<u8> = versions.iter().filter_map(|v| v.get(i).copied()).collect();
            let acked =
                versions[0].len() > i && versions.iter().all(|v| v.get(i) == versions[0].get(i));
            let why = if acked {
                "an fsync-acknowledged byte was lost"
            } else if b == 0 {
                "the size covers data that never reached the device (data=ordered: data \
                 must be written before the metadata that exposes it)"
            } else {
                "stale or foreign data"
            };
            return Err(format!(
                "byte {i} (block {}) is {b:#04x}, which no version since the last fsync/sync \
                 had there ({had:02x?}; size {}, sizes since then {sizes:?}): {why}",
                i as u64 / bs(),
                got.len()
            ));
        }
    }
    Ok(())
}
