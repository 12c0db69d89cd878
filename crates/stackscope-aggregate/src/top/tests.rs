//! Unit tests of the table model: windows, reset, sort orders, idle threads, per-thread rows,
//! GPU-idle shares, GPU lines and the bound on entries.

use super::*;
use crate::gpu::HOLD_LIMIT_NANOS;
use stackscope_event::{Frame, ThreadInfo, Timestamp};

const SEC: u64 = 1_000_000_000;

fn stack_at(time: u64, thread: u64, active: bool, frames: &[(&str, u32)]) -> StackSample {
    StackSample {
        time: Timestamp(time),
        pid: 100,
        thread: ThreadInfo {
            os_thread_id: Some(thread),
            python_thread_id: thread,
            name: Some(format!("worker-{thread}").into()),
            active,
            owns_gil: active,
        },
        frames: frames
            .iter()
            .map(|(f, line)| Frame::python(f, "app.py", *line))
            .collect(),
    }
}

/// An active sample of thread 1; frames innermost first.
fn stack(frames: &[&str]) -> StackSample {
    let frames: Vec<(&str, u32)> = frames.iter().map(|f| (*f, 1)).collect();
    stack_at(0, 1, true, &frames)
}

fn add(model: &mut TopModel, n: usize, frames: &[&str]) {
    for _ in 0..n {
        model.handle(Event::Stack(stack(frames)));
    }
}

/// `n` active samples of thread 1 at `time`.
fn add_at(model: &mut TopModel, n: usize, time: u64, frames: &[&str]) {
    let frames: Vec<(&str, u32)> = frames.iter().map(|f| (*f, 1)).collect();
    for _ in 0..n {
        model.handle(Event::Stack(stack_at(time, 1, true, &frames)));
    }
}

fn gpu(device: u32, time: u64, utilization: f32) -> GpuSample {
    GpuSample {
        time: Timestamp(time),
        device,
        utilization: Some(utilization),
        ..GpuSample::default()
    }
}

fn row<'a>(rows: &'a [Row], function: &str) -> &'a Row {
    rows.iter()
        .find(|r| &*r.function == function)
        .unwrap_or_else(|| panic!("no row {function} in {rows:#?}"))
}

fn first(model: &TopModel, sort: SortKey) -> String {
    let options = ViewOptions {
        sort,
        ..ViewOptions::default()
    };
    model.rows(&options)[0].function.to_string()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 0.01
}

#[test]
fn the_interval_columns_show_the_last_complete_interval_and_all_keeps_everything() {
    let mut model = TopModel::new(30.0, false);
    add(&mut model, 3, &["a", "main"]);
    // Nothing has ended yet: the interval columns are empty, the since-start ones are not.
    let rows = model.rows(&ViewOptions::default());
    assert!(close(row(&rows, "a").own_interval, 0.0));
    assert!(close(row(&rows, "a").own_all, 100.0));

    model.end_interval();
    add(&mut model, 1, &["b", "main"]);
    model.end_interval();
    let rows = model.rows(&ViewOptions::default());
    let (a, b, main) = (row(&rows, "a"), row(&rows, "b"), row(&rows, "main"));
    assert!(close(a.own_interval, 0.0) && close(b.own_interval, 100.0));
    assert!(close(a.own_all, 75.0) && close(b.own_all, 25.0));
    assert!(close(main.own_all, 0.0) && close(main.total_all, 100.0));
    assert!(close(main.total_interval, 100.0));
    let totals = model.totals(&ViewOptions::default());
    assert_eq!((totals.interval_samples, totals.all_samples), (1, 4));
}

#[test]
fn reset_clears_the_since_start_counts_and_keeps_the_last_interval() {
    let mut model = TopModel::new(30.0, false);
    add(&mut model, 4, &["a"]);
    model.end_interval();
    model.reset();
    let rows = model.rows(&ViewOptions::default());
    assert!(close(row(&rows, "a").own_interval, 100.0));
    assert!(close(row(&rows, "a").own_all, 0.0));
    assert_eq!(model.totals(&ViewOptions::default()).all_samples, 0);

    add(&mut model, 1, &["b"]);
    let rows = model.rows(&ViewOptions::default());
    assert!(close(row(&rows, "b").own_all, 100.0));
}

#[test]
fn recursion_counts_once_in_total_and_own_is_the_innermost_frame() {
    let mut model = TopModel::new(30.0, false);
    add(&mut model, 2, &["leaf", "walk", "walk", "walk", "main"]);
    add(&mut model, 2, &["walk", "main"]);
    let rows = model.rows(&ViewOptions::default());
    let walk = row(&rows, "walk");
    assert!(close(walk.total_all, 100.0), "{walk:?}");
    assert!(close(walk.own_all, 50.0), "{walk:?}");
    assert!(close(row(&rows, "leaf").own_all, 50.0));
}

/// Each sort key puts a different function first.
fn sort_fixture() -> TopModel {
    let mut model = TopModel::new(30.0, true);
    model.handle(Event::Gpu(gpu(0, SEC, 90.0)));
    add_at(&mut model, 10, SEC / 2, &["b", "main"]);
    add_at(&mut model, 2, SEC / 2, &["d", "main"]);
    model.end_interval();
    add_at(&mut model, 2, SEC / 2, &["a", "x"]);
    model.handle(Event::Gpu(gpu(0, 2 * SEC, 5.0)));
    add_at(&mut model, 1, 3 * SEC / 2, &["c", "x"]);
    model.end_interval();
    model
}

#[test]
fn every_sort_key_orders_by_its_column() {
    let model = sort_fixture();
    assert_eq!(first(&model, SortKey::OwnInterval), "a");
    assert_eq!(first(&model, SortKey::TotalInterval), "x");
    assert_eq!(first(&model, SortKey::OwnAll), "b");
    assert_eq!(first(&model, SortKey::TotalAll), "main");
    assert_eq!(first(&model, SortKey::GpuIdle), "c");
    for sort in [SortKey::OwnAll, SortKey::TotalInterval] {
        let rows = model.rows(&ViewOptions {
            sort,
            ..ViewOptions::default()
        });
        let value = |r: &Row| r.value(sort);
        assert!(rows.windows(2).all(|w| value(&w[0]) >= value(&w[1])));
    }
}

#[test]
fn the_sort_cycle_visits_the_gpu_column_only_with_gpu_data() {
    let mut sort = SortKey::OwnInterval;
    let mut seen = Vec::new();
    for _ in 0..5 {
        seen.push(sort);
        sort = sort.next(true);
    }
    assert_eq!(sort, SortKey::OwnInterval);
    assert!(seen.contains(&SortKey::GpuIdle));
    let mut sort = SortKey::OwnInterval;
    for _ in 0..4 {
        sort = sort.next(false);
        assert_ne!(sort, SortKey::GpuIdle);
    }
    assert_eq!(sort, SortKey::OwnInterval);
}

#[test]
fn idle_threads_are_kept_apart_so_the_toggle_needs_no_refold() {
    let mut model = TopModel::new(30.0, false);
    model.handle(Event::Stack(stack_at(0, 1, true, &[("compute", 5)])));
    for _ in 0..3 {
        model.handle(Event::Stack(stack_at(0, 2, false, &[("wait", 9)])));
    }
    model.end_interval();
    let hidden = ViewOptions::default();
    let shown = ViewOptions {
        include_idle: true,
        ..hidden
    };
    let rows = model.rows(&hidden);
    assert_eq!(rows.len(), 1, "{rows:#?}");
    assert!(close(rows[0].own_interval, 100.0));
    let totals = model.totals(&hidden);
    assert_eq!((totals.all_samples, totals.hidden_idle_samples), (1, 3));
    assert_eq!((totals.threads, totals.active_threads), (2, 1));

    let rows = model.rows(&shown);
    assert!(close(row(&rows, "wait").own_interval, 75.0));
    assert!(close(row(&rows, "compute").own_all, 25.0));
    assert_eq!(model.totals(&shown).hidden_idle_samples, 0);
    // And back: the same rows as before.
    assert_eq!(model.rows(&hidden).len(), 1);
}

#[test]
fn per_thread_rows_split_a_function_by_thread() {
    let mut model = TopModel::new(30.0, false);
    model.handle(Event::Stack(stack_at(0, 1, true, &[("step", 3)])));
    model.handle(Event::Stack(stack_at(0, 1, true, &[("step", 3)])));
    model.handle(Event::Stack(stack_at(0, 2, true, &[("step", 3)])));
    model.end_interval();
    let merged = model.rows(&ViewOptions::default());
    assert_eq!(merged.len(), 1);
    assert!(merged[0].thread.is_none());
    assert!(close(merged[0].own_interval, 100.0));

    let split = model.rows(&ViewOptions {
        per_thread: true,
        ..ViewOptions::default()
    });
    assert_eq!(split.len(), 2, "{split:#?}");
    assert_eq!(split[0].thread.as_deref(), Some("worker-1"));
    assert!(close(split[0].own_interval, 200.0 / 3.0));
    assert_eq!(split[1].thread.as_deref(), Some("worker-2"));
}

#[test]
fn gpu_idle_share_counts_the_samples_taken_below_the_threshold() {
    let mut model = TopModel::new(30.0, true);
    // No reading yet: held, as in a recording, until the first reading (1 s later, within
    // its reach back) covers it: GPU idle.
    add_at(&mut model, 1, 0, &["startup"]);
    assert_eq!(model.totals(&ViewOptions::default()).all_samples, 0);
    model.handle(Event::Gpu(gpu(0, SEC, 10.0)));
    add_at(&mut model, 3, SEC / 2, &["load_batch", "loop"]);
    // Taken after the newest reading: held until the reading that covers it comes.
    add_at(&mut model, 2, 3 * SEC / 2, &["train_step", "loop"]);
    assert_eq!(model.totals(&ViewOptions::default()).all_samples, 4);
    model.handle(Event::Gpu(gpu(0, 2 * SEC, 95.0)));
    assert_eq!(model.totals(&ViewOptions::default()).all_samples, 6);
    model.end_interval();
    let rows = model.rows(&ViewOptions::default());
    assert_eq!(row(&rows, "load_batch").gpu_idle, Some(75.0));
    assert_eq!(row(&rows, "loop").gpu_idle, Some(75.0));
    assert_eq!(row(&rows, "train_step").gpu_idle, Some(0.0));
    assert_eq!(row(&rows, "startup").gpu_idle, Some(25.0));
    assert_eq!(row(&rows, "loop").counts.gpu_idle, 3);
    assert_eq!(model.totals(&ViewOptions::default()).gpu_idle_samples, 4);
}

#[test]
fn held_samples_go_after_the_hold_limit_or_at_the_end() {
    let mut model = TopModel::new(30.0, true);
    model.handle(Event::Gpu(gpu(0, SEC, 10.0)));
    add_at(&mut model, 1, 2 * SEC, &["late"]);
    assert_eq!(model.totals(&ViewOptions::default()).all_samples, 0);
    // A sample well after it ages the first past the hold limit: folded with the last reading,
    // 1 s before it and so still reaching it (GPU idle).
    add_at(&mut model, 1, 2 * SEC + HOLD_LIMIT_NANOS + 1, &["later"]);
    assert_eq!(model.totals(&ViewOptions::default()).all_samples, 1);
    // The end of the target folds the rest with what is known: no reading reaches 2.5 s
    // forward, so the second is not counted as GPU idle.
    model.flush();
    let totals = model.totals(&ViewOptions::default());
    assert_eq!((totals.all_samples, totals.gpu_idle_samples), (2, 1));
}

#[test]
fn several_gpus_idle_by_their_mean_and_a_sample_waits_for_each() {
    let mut model = TopModel::new(30.0, true);
    model.handle(Event::Gpu(gpu(0, SEC, 0.0)));
    model.handle(Event::Gpu(gpu(1, SEC, 50.0)));
    assert_eq!(model.gpu_idle_at(SEC / 2), Some(true));
    model.handle(Event::Gpu(gpu(0, 2 * SEC, 0.0)));
    model.handle(Event::Gpu(gpu(1, 2 * SEC, 80.0)));
    assert_eq!(model.gpu_idle_at(3 * SEC / 2), Some(false));

    add_at(&mut model, 1, 5 * SEC / 2, &["step"]);
    model.handle(Event::Gpu(gpu(0, 3 * SEC, 0.0)));
    assert_eq!(model.totals(&ViewOptions::default()).all_samples, 0);
    model.handle(Event::Gpu(gpu(1, 3 * SEC, 10.0)));
    let totals = model.totals(&ViewOptions::default());
    assert_eq!((totals.all_samples, totals.gpu_idle_samples), (1, 1));

    let mut off = TopModel::new(30.0, false);
    off.handle(Event::Gpu(gpu(0, SEC, 0.0)));
    add_at(&mut off, 1, SEC / 2, &["f"]);
    assert_eq!(off.gpu_idle_at(SEC / 2), None);
    assert_eq!(off.rows(&ViewOptions::default())[0].gpu_idle, None);
}

#[test]
fn gpu_lines_keep_a_minute_of_per_second_means_and_follow_the_device_list() {
    let mut model = TopModel::new(30.0, true);
    for second in 0..100u64 {
        model.handle(Event::Gpu(gpu(0, second * SEC, 20.0)));
        model.handle(Event::Gpu(gpu(0, second * SEC + SEC / 2, 40.0)));
    }
    model.handle(Event::Gpu(GpuSample {
        time: Timestamp(100 * SEC),
        device: 0,
        memory_used_bytes: Some(1 << 30),
        memory_total_bytes: Some(8 << 30),
        power_watts: Some(70.0),
        sm_active: Some(12.0),
        ..GpuSample::default()
    }));
    model.handle(Event::Gpu(gpu(3, SEC, 1.0)));
    model.set_devices(&[(0, "Fake H100".into())]);
    let lines = model.gpu_lines();
    assert_eq!(lines.len(), 1, "device 3 is no longer polled: {lines:#?}");
    let line = &lines[0];
    assert_eq!(line.name.as_deref(), Some("Fake H100"));
    assert_eq!(line.history.len(), GPU_HISTORY_SECS);
    assert!(line.history.iter().all(|&u| (u - 30.0).abs() < 0.01));
    assert_eq!(line.utilization, Some(40.0));
    assert_eq!(line.memory_used, Some(1 << 30));
    assert_eq!(line.power_watts, Some(70.0));
    assert_eq!(
        line.sm_active,
        Some(12.0),
        "GPM SM activity beside utilization"
    );
    // An empty list (the poller has not said yet) forgets nothing.
    model.set_devices(&[]);
    assert_eq!(model.gpu_lines().len(), 1);
}

#[test]
fn a_row_names_the_busiest_line_of_its_function() {
    let mut model = TopModel::new(30.0, false);
    model.handle(Event::Stack(stack_at(
        0,
        1,
        true,
        &[("f", 12), ("main", 3)],
    )));
    model.handle(Event::Stack(stack_at(
        0,
        1,
        true,
        &[("f", 10), ("main", 3)],
    )));
    model.handle(Event::Stack(stack_at(
        0,
        1,
        true,
        &[("f", 10), ("main", 4)],
    )));
    let rows = model.rows(&ViewOptions::default());
    assert_eq!(row(&rows, "f").line, 10);
    assert_eq!(row(&rows, "main").line, 3);
    assert_eq!(&*row(&rows, "f").file, "app.py");
}

#[test]
fn entries_past_the_cap_are_counted_under_one_row() {
    let mut model = TopModel::new(30.0, false);
    let names: Vec<String> = (0..MAX_ENTRIES + 10).map(|i| format!("f{i}")).collect();
    for name in &names {
        add(&mut model, 1, &[name.as_str()]);
    }
    let rows = model.rows(&ViewOptions {
        sort: SortKey::OwnAll,
        ..ViewOptions::default()
    });
    assert_eq!(rows.len(), MAX_ENTRIES + 1);
    let other = row(&rows, OTHER_FUNCTIONS);
    let expected = 10.0 * 100.0 / names.len() as f64;
    assert!(close(other.own_all, expected), "{other:?}");
    assert_eq!(
        model.totals(&ViewOptions::default()).all_samples,
        names.len() as u64
    );
}

#[test]
fn process_lines_hold_each_processs_latest_memory_and_leave_the_table_alone() {
    let mut model = TopModel::new(30.0, false);
    add(&mut model, 3, &["work", "main"]);
    model.handle(Event::Memory(stackscope_event::MemorySample {
        time: Timestamp(SEC),
        pid: 100,
        rss_bytes: 1 << 30,
        private_bytes: Some(900 << 20),
        ..Default::default()
    }));
    model.handle(Event::Gpu(GpuSample {
        compute_pids: Some(vec![100]),
        process_memory: vec![stackscope_event::ProcessGpuMemory {
            pid: 100,
            bytes: 340 << 20,
        }],
        ..gpu(0, SEC, 90.0)
    }));
    model.handle(Event::Cgroup(stackscope_event::CgroupSample {
        time: Timestamp(SEC),
        usage_bytes: 2 << 30,
        ..Default::default()
    }));
    model.end_interval();
    assert_eq!(
        model.memory_lines(),
        [ProcessMemoryLine {
            pid: 100,
            rss: Some(1 << 30),
            gpu_memory: Some(340 << 20),
        }]
    );
    let totals = model.totals(&ViewOptions::default());
    assert_eq!((totals.interval_samples, totals.all_samples), (3, 3));
}

/// A sample of thread `thread` at `time` that ran or not and held the GIL or not.
fn gil_at(time: u64, thread: u64, active: bool, owns_gil: bool) -> Event {
    let mut sample = stack_at(time, thread, active, &[("work", 1)]);
    sample.thread.owns_gil = owns_gil;
    Event::Stack(sample)
}

fn gil_of(model: &TopModel, thread: u64) -> ThreadGil {
    model
        .thread_gil()
        .into_iter()
        .find(|t| t.thread.id == thread)
        .unwrap_or_else(|| panic!("no GIL line for thread {thread}"))
}

#[test]
fn each_threads_gil_share_is_read_from_its_whole_read() {
    let mut model = TopModel::new(30.0, false);
    // Both run at their stack without the GIL (a wait there is then one for the GIL); then
    // thread 1 (read first) waits while thread 2 holds in three reads, and holds in the last
    // while thread 2 runs without it.
    model.handle(gil_at(0, 1, true, false));
    model.handle(gil_at(0, 2, true, false));
    for i in 1..4 {
        model.handle(gil_at(i * SEC / 100, 1, false, false));
        model.handle(gil_at(i * SEC / 100, 2, true, true));
    }
    model.handle(gil_at(4 * SEC / 100, 1, true, true));
    model.handle(gil_at(4 * SEC / 100, 2, true, false));
    // The last read is still open until the input ends.
    model.flush();
    model.end_interval();
    let waiter = gil_of(&model, 1);
    assert_eq!(&*waiter.label, "worker-1");
    assert_eq!(
        (
            waiter.interval.samples,
            waiter.interval.held,
            waiter.interval.waited
        ),
        (5, 1, 3)
    );
    assert_eq!(waiter.interval.waits(), 0.6);
    let holder = gil_of(&model, 2);
    assert_eq!(
        (
            holder.interval.held,
            holder.interval.waited,
            holder.interval.ran_without
        ),
        (3, 0, 2)
    );
    // The most held and waited first.
    assert_eq!(model.thread_gil()[0].thread.id, 1);
    assert_eq!(waiter.all, waiter.interval);
}

#[test]
fn the_gil_windows_roll_over_and_reset_as_the_others_do() {
    let mut model = TopModel::new(30.0, false);
    model.handle(gil_at(0, 1, true, false));
    model.handle(gil_at(0, 2, true, false));
    model.handle(gil_at(SEC / 100, 1, false, false));
    model.handle(gil_at(SEC / 100, 2, true, true));
    // The interval ends in the middle of nothing: the read at 10 ms is still held (a batch may
    // end inside a read), and counts in the next interval once the read at 1 s completes it.
    model.end_interval();
    assert!(model.thread_gil().is_empty(), "{:?}", model.thread_gil());
    model.handle(gil_at(SEC, 1, true, true));
    model.handle(gil_at(SEC, 2, false, false));
    model.flush();
    model.end_interval();
    let first = gil_of(&model, 1);
    assert_eq!((first.interval.held, first.interval.waited), (1, 1));
    assert_eq!((first.all.held, first.all.waited), (1, 1));
    assert_eq!(
        first.counts(SortKey::OwnAll).samples,
        3,
        "since start for the since-start sorts"
    );
    assert_eq!(first.counts(SortKey::OwnInterval).samples, 2);
    model.reset();
    model.end_interval();
    // Nothing held or waited since the reset and in the last interval: no line.
    assert!(model.thread_gil().is_empty(), "{:?}", model.thread_gil());
}

#[test]
fn flushing_counts_the_last_read_and_other_events_end_a_read() {
    let mut model = TopModel::new(30.0, true);
    model.handle(gil_at(0, 1, true, false));
    model.handle(gil_at(0, 2, true, false));
    model.handle(gil_at(SEC / 200, 1, false, false));
    model.handle(gil_at(SEC / 200, 2, true, true));
    // A GPU reading ends the read: both samples are counted, though still waiting for their
    // GPU tag.
    model.handle(Event::Gpu(gpu(0, 0, 5.0)));
    model.handle(gil_at(SEC / 100, 1, false, false));
    model.handle(gil_at(SEC / 100, 2, true, true));
    model.flush();
    model.end_interval();
    assert_eq!(gil_of(&model, 1).all.waited, 2);
    assert_eq!(gil_of(&model, 2).all.held, 2);
}

/// A thread a second, each living a second, beside one that lives throughout, for five
/// minutes, then the process exits: a thread that ended keeps its rows for
/// [`ENDED_SHOWN_NANOS`], then they are its kind's, and what was kept of it goes. The rows by
/// function keep every sample.
#[test]
fn threads_that_ended_are_folded_into_their_kind_and_let_go() {
    let mut model = TopModel::new(30.0, false);
    let shown = (ENDED_SHOWN_NANOS / SEC) as usize;
    for tick in 0..3_000u64 {
        let time = tick * SEC / 10;
        model.handle(Event::Stack(stack_at(time, 1, true, &[("main_loop", 1)])));
        let worker = 1_000 + tick / 10;
        model.handle(Event::Stack(stack_at(time, worker, true, &[("work", 2)])));
        if tick % 10 == 9 {
            model.end_interval();
            // The thread that lives, the one of this second, those ended in the last 30 s.
            assert!(
                model.threads_kept() <= 2 + shown + 1,
                "{} threads kept at {tick}",
                model.threads_kept()
            );
        }
    }
    let options = ViewOptions::default();
    let rows = model.rows(&options);
    assert_eq!(row(&rows, "work").counts.total, 3_000);
    assert_eq!(row(&rows, "main_loop").counts.total, 3_000);
    let per_thread = model.rows(&ViewOptions {
        per_thread: true,
        ..options
    });
    let folded: Vec<&Row> = per_thread
        .iter()
        .filter(|r| r.thread.as_deref() == Some("worker-N (ended)"))
        .collect();
    assert_eq!(folded.len(), 1, "{per_thread:#?}");
    let kept_apart: u64 = per_thread
        .iter()
        .filter(|r| &*r.function == "work")
        .map(|r| r.counts.total)
        .sum();
    assert_eq!(kept_apart, 3_000);
    let samples: u64 = model.thread_samples(&options).iter().map(|t| t.1).sum();
    assert_eq!(samples, 6_000);
    // The process exits; another one's reads go on past the time ended threads are shown.
    model.handle(Event::Process(stackscope_event::ProcessEvent {
        time: Timestamp(300 * SEC),
        pid: 100,
        command_line: String::new(),
        kind: stackscope_event::ProcessEventKind::Exited,
        rank: Default::default(),
        how: None,
    }));
    for tick in 3_000..3_400u64 {
        let mut sample = stack_at(tick * SEC / 10, 5, true, &[("other", 3)]);
        sample.pid = 200;
        model.handle(Event::Stack(sample));
    }
    model.end_interval();
    assert_eq!(model.threads_kept(), 1, "the other process's thread alone");
    // Its last read was in the interval just shown; the next one is the other's alone.
    model.end_interval();
    let gil = model.thread_gil();
    assert!(gil.iter().all(|g| g.thread.pid != 100), "{gil:#?}");
}
