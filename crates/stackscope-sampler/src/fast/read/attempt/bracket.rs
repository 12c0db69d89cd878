//! What the first batch of a read says of the process as a whole: the GIL's words around the
//! copies (who can have run meanwhile), the thread list's head, the GIL's holder, and the
//! identity of the code objects read with it or trusted.

use std::time::Instant;

use crate::fast::layout::{usize_at, GilHolder, Layout};
use crate::fast::memory::addrmap::AddrMap;
use crate::fast::memory::remote::{Batch, Slot};
use crate::fast::objects::code::{CodeCache, CodeId};
use crate::fast::proof::gil::{GilWords, Ran};

use super::Ranges;

/// What the first batch says of the process as a whole.
pub(super) struct Bracket {
    /// The GIL's words before and after the copies (None: not bracketed, or not read).
    pub(super) before: Option<GilWords>,
    pub(super) after: Option<GilWords>,
    /// The threads that can have run during the copies.
    pub(super) ran: Ran,
    pub(super) head: Option<usize>,
    pub(super) gil_holder: Option<usize>,
    /// Code objects' identities, as read (None: unreadable).
    pub(super) ids: AddrMap<Option<CodeId>>,
}

impl Bracket {
    /// What `batch` read at `ranges`; the identities go into `ids` (emptied first).
    pub(super) fn read(
        batch: &Batch,
        layout: &Layout,
        ranges: &Ranges,
        mut ids: AddrMap<Option<CodeId>>,
    ) -> Bracket {
        let before = gil_words(batch, ranges.gil_before);
        let after = gil_words(batch, ranges.gil_after);
        let ran = if ranges.gil_before.is_some() {
            Ran::between(before, after)
        } else {
            Ran::NONE
        };
        let head = ranges.list.and_then(|(h, _)| usize_at(batch.get(h)?, 0));
        let gil_holder = ranges
            .list
            .and_then(|(_, g)| g)
            .and_then(|g| batch.get(g))
            .and_then(|b| match layout.gil_holder {
                GilHolder::TstateCurrent => usize_at(b, 0),
                GilHolder::LastHolderWhileLocked => {
                    GilWords::parse(b).map(|g| if g.locked == 1 { g.last_holder } else { 0 })
                }
            });
        let read = ranges
            .code_ids
            .iter()
            .map(|(&addr, &slot)| (addr, batch.get(slot).and_then(|b| CodeId::parse(layout, b))));
        let trusted = ranges.trusted.iter().map(|(&addr, &id)| (addr, Some(id)));
        ids.clear();
        ids.extend(read.chain(trusted));
        Bracket {
            before,
            after,
            ran,
            head,
            gil_holder,
            ids,
        }
    }

    /// Tells the cache what the identities read at `read` (not those it trusted) found.
    pub(super) fn note_ids(&self, codes: &mut CodeCache, read: &AddrMap<Slot>, now: Instant) {
        for addr in read.keys() {
            let id = self.ids.get(addr).and_then(Option::as_ref);
            codes.note_read(*addr, id, now);
        }
    }
}

pub(super) fn gil_words(batch: &Batch, slot: Option<Slot>) -> Option<GilWords> {
    slot.and_then(|s| batch.get(s)).and_then(GilWords::parse)
}
