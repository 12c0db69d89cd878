//! One test for each rule of [`super`]: what the first copy, the later copies and the
//! merging of near ranges read.

use super::*;
use crate::fast::layout::{PY310, PY311};

fn words(chunk: usize, top: usize, limit: usize) -> TsWords {
    TsWords {
        cframe: 0x7000,
        chunk,
        top,
        limit,
        ..TsWords::default()
    }
}

#[test]
fn the_copy_never_runs_past_the_chunk() {
    let words = words(0x1000, 0x1000 + 16000, 0x1000 + 16384);
    assert_eq!(copy_len(&words, SLACK), 16384);
    assert_eq!(copy_len(&words, 0), 16000);
    let torn = TsWords {
        chunk: 0x1000,
        top: 0x10,
        limit: 0x2000,
        ..TsWords::default()
    };
    assert_eq!(copy_len(&torn, SLACK), 0);
}

#[test]
fn the_first_copy_has_slack_but_for_a_still_thread_not_checked() {
    let ts = words(0x1000, 0x1000 + 200, 0x1000 + 16384);
    assert_eq!(first_copy_len(&ts, false, false), 200 + SLACK);
    assert_eq!(first_copy_len(&ts, true, false), 200);
    assert_eq!(first_copy_len(&ts, true, true), 200 + SLACK);
    assert_eq!(first_copy_len(&ts, false, true), 200 + SLACK);
    // A top above the limit, or no chunk: nothing to copy.
    assert_eq!(
        first_copy_len(&words(0x1000, 0x9000, 0x2000), false, false),
        0
    );
    assert_eq!(first_copy_len(&words(0, 0, 0), false, false), 0);
}

#[test]
fn the_room_is_the_chunk_up_to_its_limit_and_at_most_max_copy() {
    assert_eq!(room(&words(0x1000, 0x1100, 0x1000 + 16384)), 16384);
    assert_eq!(room(&words(0x1000, 0x1100, 0x1000 + (4 << 20))), MAX_COPY);
    assert_eq!(room(&words(0x1000, 0x1100, 0x800)), 0);
    assert_eq!(room(&words(0, 0, 0x800)), 0);
}

#[test]
fn reads_follow_the_thread_state_and_keep_extra_ranges_only_with_frames() {
    let extra: Vec<Extra> = (0..100)
        .map(|i| Extra {
            addr: 0x50_0000 + i * 0x100,
            len: 64,
            chunk: false,
        })
        .collect();
    let ts = words(0x1000, 0x1000 + 200, 0x1000 + 16384);
    let reads = Reads::of(&PY311, &ts, &extra, false, false);
    assert_eq!(reads.pointer, 0x7000 + PY311.cframe_current_frame);
    assert_eq!((reads.chunk, reads.chunk_len), (0x1000, 200 + SLACK));
    assert_eq!((reads.chunk_room, reads.top), (16384, 0x1000 + 200));
    assert_eq!(reads.first_extra().len(), MAX_EXTRA);
    assert_eq!(
        Reads::of(&PY310, &ts, &extra, false, false)
            .first_extra()
            .len(),
        100
    );
    let no_frames = TsWords { cframe: 0, ..ts };
    assert!(Reads::of(&PY311, &no_frames, &extra, false, false)
        .first_extra()
        .is_empty());
}

fn frames_at(addrs: &[usize]) -> Vec<RawFrame> {
    addrs
        .iter()
        .map(|&addr| RawFrame {
            addr,
            code: 0xc000,
            prev_instr: 0,
            entry: false,
        })
        .collect()
}

fn reads_of(chunk: usize, top: usize, extra: &[Extra]) -> Reads<'_> {
    Reads {
        pointer: 0,
        chunk,
        chunk_len: top - chunk + SLACK,
        chunk_room: 16384,
        top,
        extra,
        max_extra: MAX_EXTRA,
    }
}

#[test]
fn the_window_starts_a_few_frames_below_the_top_inside_the_chunk() {
    let base = 0x10_0000;
    // Innermost first.
    let frames = frames_at(&[base + 544, base + 416, base + 288, base + 160, base + 32]);
    let top = base + 700;
    // The frame WINDOW_FRAMES below the innermost.
    let floor = window_floor(&frames, base, top);
    assert_eq!(floor, base + 160);
    // A stack too shallow, or a floor outside the chunk's used part: no window.
    assert_eq!(window_floor(&frames[..WINDOW_FRAMES], base, top), 0);
    assert_eq!(window_floor(&frames, base, floor), 0);
    assert_eq!(window_floor(&frames, base + 160, top), 0);
    assert_eq!(
        window_of(&reads_of(base, top, &[]), floor).map(|w| w.floor),
        Some(floor)
    );
    assert_eq!(window_of(&reads_of(base, top, &[]), base), None);
    assert_eq!(window_of(&reads_of(base, base + 100, &[]), floor), None);
}

#[test]
fn later_copies_run_from_the_floor_to_a_little_past_the_top() {
    let base = 0x10_0000;
    let top = base + 700;
    let reads = reads_of(base, top, &[]);
    let later = later_copy(&reads, base + 160);
    assert_eq!(
        later,
        LaterCopy {
            window: Some(Window {
                chunk: base,
                floor: base + 160
            }),
            from: 160,
            len: 700 + LATER_SLACK - 160,
        }
    );
    // The first copy ends before the top's slack: so does the window.
    let short = Reads {
        chunk_len: 800,
        ..reads_of(base, top, &[])
    };
    assert_eq!(later_copy(&short, base + 160).len, 800 - 160);
    // No window: all of the first copy.
    let whole = later_copy(&reads, 0);
    assert_eq!(
        (whole.window, whole.from, whole.len),
        (None, 0, 700 + SLACK)
    );
}

#[test]
fn a_window_leaves_older_chunks_out_of_the_later_copies() {
    let base = 0x10_0000;
    let extra = [
        Extra {
            addr: 0x8_0000,
            len: 16384,
            chunk: true,
        },
        Extra {
            addr: 0x50_0000,
            len: 72,
            chunk: false,
        },
    ];
    let reads = reads_of(base, base + 700, &extra);
    let windowed = later_copy(&reads, base + 160);
    assert_eq!(later_extra(&reads, &windowed), [extra[1]]);
    let whole = later_copy(&reads, 0);
    assert_eq!(later_extra(&reads, &whole), extra);
}

#[test]
fn the_gap_runs_on_in_the_chunk_where_it_has_room_or_is_read_apart() {
    let base = 0x10_0000;
    let reads = reads_of(base, base + 700, &[]);
    let later = later_copy(&reads, base + 160);
    let ranges = later_ranges(&reads, &later, 512);
    assert_eq!(
        ranges.chunk,
        Some(Span {
            addr: base + 160,
            len: later.len + 512
        })
    );
    assert_eq!(ranges.gap, None);
    // The chunk has no room for the gap: harmless bytes at its start.
    let full = Reads {
        chunk_room: 160 + later.len + 100,
        ..reads_of(base, base + 700, &[])
    };
    let ranges = later_ranges(&full, &later, 512);
    assert_eq!(
        ranges.chunk,
        Some(Span {
            addr: base + 160,
            len: later.len
        })
    );
    assert_eq!(
        ranges.gap,
        Some(Span {
            addr: base,
            len: 512
        })
    );
    // No gap, or nothing of the chunk to copy: no gap read.
    assert_eq!(later_ranges(&full, &later, 0).gap, None);
    let none = LaterCopy {
        window: None,
        from: 0,
        len: 0,
    };
    assert_eq!(later_ranges(&full, &none, 512).chunk, None);
    assert_eq!(later_ranges(&full, &none, 512).gap, None);
}

#[test]
fn gaps_vary() {
    let mut seed = 42;
    let gaps: std::collections::HashSet<usize> = (0..100).map(|_| gap(&mut seed)).collect();
    assert!(gaps.len() > 50);
    assert!(gaps
        .iter()
        .all(|&g| g % 8 == 0 && g < MAX_COPY_GAP as usize));
}

#[test]
fn ranges_within_the_gap_merge_and_ranges_beyond_it_do_not() {
    let span = |addr: usize, len: usize| Span { addr, len };
    let rule = Merge {
        gap: 512,
        max_len: 4096,
    };
    // 100 bytes apart, then exactly the gap, then overlapping: one range.
    let near = [
        span(0x1000, 100),
        span(0x1100, 100),
        span(0x1364, 64),
        span(0x1380, 8),
    ];
    assert_eq!(
        merge_near(near, rule).collect::<Vec<_>>(),
        [Merged {
            span: span(0x1000, 0x3a4),
            parts: 4
        }]
    );
    // One byte beyond the gap: apart.
    let far = [span(0x1000, 100), span(0x1000 + 100 + 513, 8)];
    assert_eq!(merge_near(far, rule).count(), 2);
    // Within the gap but past the longest range: apart.
    let long = [span(0x1000, 4000), span(0x1000 + 4000, 200)];
    assert_eq!(merge_near(long, rule).count(), 2);
    // The thread states' rule is tighter than the frames'.
    let apart_700 = [span(0x1000, 100), span(0x1000 + 100 + 700, 100)];
    assert_eq!(merge_near(apart_700, FRAMES).count(), 1);
    assert_eq!(merge_near(apart_700, TSTATES).count(), 2);
}

#[test]
fn near_frames_are_read_as_one_range_and_far_ones_apart() {
    let frame = |addr: usize| Extra {
        addr,
        len: 112,
        chunk: false,
    };
    let merged = coalesce(vec![
        frame(0x10_0400),
        frame(0x10_0000),
        frame(0x10_0800),
        frame(0x10_0420),
        frame(0x50_0000),
    ]);
    assert_eq!(
        merged,
        [
            Extra {
                addr: 0x10_0000,
                len: 0x800 + 112,
                chunk: false
            },
            frame(0x50_0000)
        ]
    );
    // Frames further apart are read apart.
    assert_eq!(coalesce(vec![frame(0x10_0000), frame(0x10_2000)]).len(), 2);
}

#[test]
fn chunks_are_never_merged_nor_merged_across() {
    let frame = |addr: usize| Extra {
        addr,
        len: 112,
        chunk: false,
    };
    let chunk = Extra {
        addr: 0x10_0100,
        len: 16384,
        chunk: true,
    };
    // The chunk lies between two frames 0x200 apart: three ranges, in address order.
    let merged = coalesce(vec![frame(0x10_0000), chunk, frame(0x10_0200)]);
    assert_eq!(merged, [frame(0x10_0000), chunk, frame(0x10_0200)]);
}
