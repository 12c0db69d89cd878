use super::*;

const GLOBALS: Globals = Globals {
    head_ptr: 0x1000,
    gil: 0x2000,
    tstate_current: 0x3000,
};

fn layout(minor: u64) -> &'static Layout {
    Layout::for_version(3, minor).expect("layout")
}

/// 3.12+ name the GIL's holder in the GIL's own words: a bracketed read takes them from the
/// bracket's first range, so the GIL is read twice (before and after), not three times.
#[test]
fn the_gil_s_words_name_its_holder_without_a_range_of_their_own() {
    let mut batch = Batch::default();
    let (before, list) = plan_globals(&mut batch, layout(12), &GLOBALS, true, true);
    let (head, holder) = list.expect("list");
    assert_eq!(batch.len(), 2, "the GIL and the list head");
    assert_eq!(holder, before);
    assert_ne!(Some(head), before);

    // Unbracketed (the process is stopped): the holder still needs the GIL's words.
    let mut batch = Batch::default();
    let (before, list) = plan_globals(&mut batch, layout(12), &GLOBALS, false, true);
    assert_eq!((before, batch.len()), (None, 2));
    assert!(list.and_then(|(_, holder)| holder).is_some());
}

/// 3.10 and 3.11 name the holder in a word of its own (`tstate_current`).
#[test]
fn an_older_interpreter_s_holder_is_its_own_word() {
    for minor in [10, 11] {
        let mut batch = Batch::default();
        let (before, list) = plan_globals(&mut batch, layout(minor), &GLOBALS, true, true);
        let (_, holder) = list.expect("list");
        assert_eq!(
            batch.len(),
            3,
            "3.{minor}: the GIL, the head and the holder's word"
        );
        assert!(holder.is_some() && holder != before);
    }
    // Without the list, the bracket alone.
    let mut batch = Batch::default();
    let (before, list) = plan_globals(&mut batch, layout(11), &GLOBALS, true, false);
    assert!(before.is_some() && list.is_none());
    assert_eq!(batch.len(), 1);
}
