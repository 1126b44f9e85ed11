//! What requests name by index rather than by reference count: the source
//! regions registered on this engine and the destination descriptors it
//! writes to. The worker owns both tables and counts the requests that use
//! each entry, so submitting a request writes no reference count that the
//! worker writes too: a cache line fewer between the two threads per region
//! and per destination.
//!
//! - A region is deregistered once its handle is gone (`Ctrl::Deregister`,
//!   handled after every request submitted before it has been accepted) and
//!   no request uses it.
//! - A descriptor enters the table the first time a request of this engine
//!   names it: that request carries a clone of its `Arc` (`Dst::Owned`); the
//!   worker keeps the clone, marks the descriptor with its tag and table
//!   index (`MrDesc::held`), and later submits read the mark and send only
//!   the index (`Dst::Held`). An entry leaves once the table's clone is the
//!   last one and no request uses it (`Worker::sweep_dsts`). One engine can
//!   mark a descriptor; any other engine's requests keep carrying clones.
use crate::domain::LocalMr;
use crate::error::{Error, Result, Status};
use crate::wire::MrDesc;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

/// A new engine tag for `MrDesc::held` marks; 0 (never marks) once 2^32-1
/// engines have been made in this process.
pub fn new_tag() -> u32 {
    static NEXT: AtomicU32 = AtomicU32::new(1);
    NEXT.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| t.checked_add(1)).unwrap_or(0)
}

/// A request's destination descriptor.
pub enum Dst {
    /// A clone of the caller's descriptor (the first request of this engine
    /// to name it, or one marked by another engine).
    Owned(Arc<MrDesc>),
    /// Entry `i` of the worker's descriptor table.
    Held(u32),
}

impl Dst {
    /// `desc` as a request of the engine tagged `tag` carries it.
    pub fn of(tag: u32, desc: &Arc<MrDesc>) -> Dst {
        match desc.held.get(tag) {
            Some(i) => Dst::Held(i),
            None => Dst::Owned(desc.clone()),
        }
    }
}

/// Slots reused through a free list.
struct Slab<T> {
    list: Vec<Option<T>>,
    free: Vec<u32>,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Slab { list: Vec::new(), free: Vec::new() }
    }
}

impl<T> Slab<T> {
    fn insert(&mut self, v: T) -> u32 {
        match self.free.pop() {
            Some(i) => {
                self.list[i as usize] = Some(v);
                i
            }
            None => {
                self.list.push(Some(v));
                (self.list.len() - 1) as u32
            }
        }
    }

    fn remove(&mut self, i: u32) -> Option<T> {
        let v = self.list.get_mut(i as usize)?.take()?;
        self.free.push(i);
        Some(v)
    }

    fn get(&self, i: u32) -> Option<&T> {
        self.list.get(i as usize)?.as_ref()
    }

    fn get_mut(&mut self, i: u32) -> Option<&mut T> {
        self.list.get_mut(i as usize)?.as_mut()
    }

    fn live(&self) -> usize {
        self.list.len() - self.free.len()
    }
}

fn lost(what: &str, i: u32) -> Error {
    Error::new(Status::Panic, format!("internal: {what} {i} is not in the worker's table"))
}

struct Region {
    /// One registration per domain, in domain order.
    locals: Vec<LocalMr>,
    /// Requests in the worker that read from it.
    uses: u32,
    /// Its handle is gone: released when `uses` reaches 0.
    dropped: bool,
}

/// The registered regions, by the index their handles carry.
#[derive(Default)]
pub(in crate::worker) struct Regions(Slab<Region>);

impl Regions {
    pub(in crate::worker) fn add(&mut self, locals: Vec<LocalMr>) -> u32 {
        self.0.insert(Region { locals, uses: 0, dropped: false })
    }

    /// One more request reads region `i`.
    pub(in crate::worker) fn take(&mut self, i: u32) -> Result<()> {
        self.0.get_mut(i).ok_or_else(|| lost("region", i))?.uses += 1;
        Ok(())
    }

    /// One request fewer reads region `i`; its registrations if they are to be released now.
    #[inline]
    pub(in crate::worker) fn put(&mut self, i: u32) -> Option<Vec<LocalMr>> {
        let r = self.0.get_mut(i)?;
        r.uses -= 1;
        if r.uses > 0 || !r.dropped {
            return None;
        }
        self.release_if_done(i)
    }

    /// Region `i`'s handle is gone; its registrations if they are to be released now.
    pub(in crate::worker) fn dropped(&mut self, i: u32) -> Option<Vec<LocalMr>> {
        self.0.get_mut(i)?.dropped = true;
        self.release_if_done(i)
    }

    fn release_if_done(&mut self, i: u32) -> Option<Vec<LocalMr>> {
        let r = self.0.get(i)?;
        (r.dropped && r.uses == 0).then(|| self.0.remove(i).unwrap().locals)
    }

    /// Region `i`'s registrations (`i` is used by a request in the worker).
    pub(in crate::worker) fn locals(&self, i: u32) -> &[LocalMr] {
        &self.0.get(i).expect("a region in use stays in the table").locals
    }

    /// Every registration still held (shutdown).
    pub(in crate::worker) fn drain(&mut self) -> Vec<Vec<LocalMr>> {
        let all = std::mem::take(&mut self.0);
        all.list.into_iter().flatten().map(|r| r.locals).collect()
    }
}

struct Entry {
    desc: Arc<MrDesc>,
    /// Its owner's entry in the peer table (slots are never reused, so it
    /// stays right), or `UNLINKED` once that peer was removed.
    peer: u32,
    /// Requests in the worker that write to it.
    uses: u32,
}

/// The owner of a held descriptor whose peer was removed: looked up afresh.
pub(in crate::worker) const UNLINKED: u32 = u32::MAX;

/// Entries below which `Worker::sweep_dsts` does not look.
const SWEEP_MIN: usize = 64;

/// The destination descriptors this engine has marked.
pub(in crate::worker) struct Dsts {
    tag: u32,
    table: Slab<Entry>,
    /// Sweep once this many entries are live.
    sweep_at: usize,
}

impl Dsts {
    pub(in crate::worker) fn new(tag: u32) -> Dsts {
        Dsts { tag, table: Slab::default(), sweep_at: SWEEP_MIN }
    }

    /// Takes `dst` for a request if the table has it: one more use, and its
    /// owner's peer entry. `None` for a descriptor new to the table (`add` it).
    pub(in crate::worker) fn take(&mut self, dst: &mut Dst) -> Option<Result<u32>> {
        let i = match dst {
            Dst::Held(i) => *i,
            // Marked after this request was submitted (by an earlier one).
            Dst::Owned(d) => d.held.get(self.tag)?,
        };
        *dst = Dst::Held(i);
        Some(self.use_entry(i))
    }

    /// Adds a descriptor new to the table (`take` said `None`), whose owner
    /// is peer entry `peer`, with one use. It becomes `Held` unless another
    /// engine has marked it: then this engine's requests keep carrying clones.
    pub(in crate::worker) fn add(&mut self, dst: &mut Dst, peer: u32) {
        let Dst::Owned(d) = dst else {
            return;
        };
        // Marked by another engine (or this one has no tag): it stays a clone.
        if self.tag == 0 || d.held.is_claimed() {
            return;
        }
        let i = self.table.insert(Entry { desc: d.clone(), peer, uses: 1 });
        if d.held.claim(self.tag, i) {
            *dst = Dst::Held(i);
        } else {
            self.table.remove(i);
        }
    }

    /// Entries whose owner was peer entry `p`, removed (`remove_peer`),
    /// forget it: `take` says `UNLINKED` for them until `relink`.
    pub(in crate::worker) fn unlink(&mut self, p: u32) {
        for e in self.table.list.iter_mut().flatten().filter(|e| e.peer == p) {
            e.peer = UNLINKED;
        }
    }

    /// `dst` (taken, `UNLINKED`) belongs to peer entry `p` now.
    pub(in crate::worker) fn relink(&mut self, dst: &Dst, p: u32) {
        if let Some(e) = self.get_entry(dst) {
            e.peer = p;
        }
    }

    fn get_entry(&mut self, dst: &Dst) -> Option<&mut Entry> {
        match dst {
            Dst::Held(i) => self.table.get_mut(*i),
            Dst::Owned(_) => None,
        }
    }

    fn use_entry(&mut self, i: u32) -> Result<u32> {
        let e = self.table.get_mut(i).ok_or_else(|| lost("descriptor", i))?;
        e.uses += 1;
        Ok(e.peer)
    }

    /// One request fewer writes to `dst`.
    pub(in crate::worker) fn put(&mut self, dst: &Dst) {
        if let Dst::Held(i) = dst {
            if let Some(e) = self.table.get_mut(*i) {
                e.uses -= 1;
            }
        }
    }

    /// The descriptor `dst` names (taken by a request in the worker).
    pub(in crate::worker) fn get<'a>(&'a self, dst: &'a Dst) -> &'a MrDesc {
        match dst {
            Dst::Owned(d) => d,
            Dst::Held(i) => &self.table.get(*i).expect("a descriptor in use stays in the table").desc,
        }
    }

    /// Entries that only the table still holds and no request uses, once
    /// there are enough entries to look; call `evict` with them after every
    /// queued request has been accepted.
    pub(in crate::worker) fn unheld(&mut self) -> Vec<u32> {
        if self.table.live() < self.sweep_at {
            return Vec::new();
        }
        let gone: Vec<u32> = (0..self.table.list.len() as u32)
            .filter(|&i| self.table.get(i).is_some_and(|e| e.uses == 0 && Arc::strong_count(&e.desc) == 1))
            .collect();
        // Pairs with the release decrement of the caller's last clone: the
        // pushes of requests submitted with it are visible to the queue pops
        // that follow.
        std::sync::atomic::fence(Ordering::Acquire);
        if gone.is_empty() {
            self.sweep_at = (self.table.live() * 2).max(SWEEP_MIN);
        }
        gone
    }

    /// Drops the entries of `gone` that still no request uses (nobody else
    /// holds them, so none can be named again).
    pub(in crate::worker) fn evict(&mut self, gone: &[u32]) {
        for &i in gone {
            if self.table.get(i).is_some_and(|e| e.uses == 0) {
                self.table.remove(i);
            }
        }
        self.sweep_at = (self.table.live() * 2).max(SWEEP_MIN);
    }

    #[cfg(test)]
    fn live(&self) -> usize {
        self.table.live()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{NetAddr, RemoteKey};

    fn desc(epoch: u64) -> Arc<MrDesc> {
        let owner = NetAddr { epoch, domains: vec![vec![1u8].into()].into() };
        Arc::new(MrDesc {
            base: 0,
            len: 64,
            memory: Default::default(),
            owner,
            keys: vec![RemoteKey { remote_base: 0, key: 1 }],
            held: Default::default(),
        })
    }

    #[test]
    fn a_descriptor_is_resolved_once_then_named_by_index() {
        let mut t = Dsts::new(new_tag());
        let d = desc(1);
        let mut resolved = 0;
        let mut a = Dst::of(t.tag, &d);
        assert!(matches!(a, Dst::Owned(_)));
        if t.take(&mut a).is_none() {
            resolved += 1;
            t.add(&mut a, 5);
        }
        let Dst::Held(i) = a else { panic!("taken into the table") };
        let mut b = Dst::of(t.tag, &d);
        assert!(matches!(b, Dst::Held(j) if j == i), "the next submit sends the index");
        assert_eq!(t.take(&mut b).unwrap().unwrap(), 5, "found without resolving");
        assert_eq!(resolved, 1);
        assert_eq!(t.get(&b).owner.epoch, 1);
        assert_eq!(Arc::strong_count(&d), 2, "no clone per request: the caller's and the table's");
        let copy = Arc::new((*d).clone());
        assert!(matches!(Dst::of(t.tag, &copy), Dst::Owned(_)), "a clone of the value starts unmarked");
        t.put(&a);
        t.put(&b);
    }

    #[test]
    fn another_engine_keeps_sending_clones() {
        let (mut one, mut two) = (Dsts::new(new_tag()), Dsts::new(new_tag()));
        let d = desc(1);
        let mut a = Dst::of(one.tag, &d);
        assert!(one.take(&mut a).is_none());
        one.add(&mut a, 0);
        let mut b = Dst::of(two.tag, &d);
        assert!(two.take(&mut b).is_none());
        two.add(&mut b, 3);
        assert!(matches!(b, Dst::Owned(_)));
        assert_eq!(two.live(), 0, "the second engine keeps no entry");
    }

    #[test]
    fn entries_leave_once_unused_and_dropped_by_the_caller() {
        let mut t = Dsts::new(new_tag());
        let mut descs: Vec<_> = (0..SWEEP_MIN as u64 + 2).map(desc).collect();
        let mut used = Vec::new();
        for d in &descs {
            let mut r = Dst::of(t.tag, d);
            assert!(t.take(&mut r).is_none());
            t.add(&mut r, 0);
            used.push(r);
        }
        let kept = descs.pop().unwrap(); // the caller still holds the last one
        drop(descs);
        let busy = used.remove(SWEEP_MIN); // a request still writes to this one
        for r in &used {
            t.put(r);
        }
        let gone = t.unheld();
        assert_eq!(gone.len(), SWEEP_MIN, "neither the one held nor the one in use");
        t.evict(&gone);
        assert_eq!(t.live(), 2);
        assert!(matches!(Dst::of(t.tag, &kept), Dst::Held(_)), "a kept one stays marked");
        t.put(&busy);
    }

    #[test]
    fn a_region_is_released_after_its_handle_and_its_last_request() {
        let mut r = Regions::default();
        let i = r.add(Vec::new());
        r.take(i).unwrap();
        assert!(r.dropped(i).is_none(), "a request still reads it");
        assert!(r.put(i).is_some(), "released with its last request");
        assert!(r.take(i).is_err());
        let j = r.add(Vec::new());
        assert_eq!(i, j, "the index is reused");
        assert!(r.dropped(j).is_some(), "unused: released at once");
    }
}
