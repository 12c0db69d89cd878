//! Tests of the GIL on report.html (the lanes' counts, the legend, the table) and of the
//! verdict read without GPU data.

use stackscope_aggregate::{
    AggregateConfig, Aggregator, GilSummary, GilThread, LoopFoundBy, RecordingMeta, Role,
    StepBreakdown, Summary, ThreadRole, Verdict, VerdictClass,
};
use stackscope_event::{Event, Frame, ThreadInfo, Timestamp};
use stackscope_testkit::events;

use super::data::LANE_CELL;
use super::*;

const PID: u32 = 42;
const MAIN: u64 = 1;
const METRICS: u64 = 2;

fn meta() -> RecordingMeta {
    RecordingMeta {
        gpu_unavailable: Some("--gpu off".to_owned()),
        ..crate::memory::tests::meta()
    }
}

fn sample(ms: u64, tid: u64, name: &str, running: bool, owns_gil: bool, f: &str) -> Event {
    let thread = ThreadInfo {
        os_thread_id: Some(1000 + tid),
        python_thread_id: tid,
        name: Some(name.into()),
        active: running,
        owns_gil,
    };
    let frames = vec![
        Frame::python(f, "job.py", 1),
        Frame::python("main", "job.py", 1),
    ];
    events::stack_of(events::ms(ms), PID, thread, frames)
}

/// 4 s at 100 Hz: the main thread waits for the GIL (asleep) while a metrics thread holds it,
/// except every fourth read, where the main thread holds it and the metrics thread, in native
/// code, runs without it.
fn contended() -> Aggregator {
    let mut agg = Aggregator::new(AggregateConfig::default(), Timestamp(0));
    for ms in (0..4000u64).step_by(10) {
        let main_turn = ms % 40 == 0;
        agg.handle(sample(ms, MAIN, "MainThread", main_turn, main_turn, "step"));
        agg.handle(sample(ms, METRICS, "metrics", true, !main_turn, "spin"));
    }
    agg.finish();
    agg
}

/// The summary's loop fields and GIL as the aggregate fills them without GPU data.
fn without_gpu(mut summary: Summary) -> Summary {
    summary.loop_found_by = Some(LoopFoundBy::HandOffs);
    summary.roles = vec![ThreadRole {
        pid: PID,
        python_thread_id: MAIN,
        os_thread_id: None,
        thread: "MainThread".to_owned(),
        role: Role::Trainer,
        label: "loop (MainThread)".to_owned(),
    }];
    summary.step = Some(StepBreakdown {
        python: 0.25,
        gil_wait: 0.75,
        ..StepBreakdown::default()
    });
    summary.verdict = Some(Verdict {
        class: VerdictClass::GilContention,
        text: "The loop waits for the GIL 75% of its time; metrics holds it.".to_owned(),
    });
    summary.gil = Some(GilSummary {
        threads: vec![
            gil_thread(METRICS, "metrics", [0.75, 0.0, 0.25]),
            gil_thread(MAIN, "MainThread", [0.25, 0.75, 0.0]),
        ],
        by_process: Vec::new(),
    });
    summary
}

fn gil_thread(tid: u64, thread: &str, [holds, waits, runs_without]: [f64; 3]) -> GilThread {
    GilThread {
        pid: PID,
        thread: thread.to_owned(),
        python_thread_id: tid,
        holds,
        waits,
        runs_without,
    }
}

fn page_of(agg: &Aggregator, summary: &Summary) -> String {
    let mut page = Vec::new();
    write_report_html(agg, summary, &meta(), &mut page).expect("written");
    String::from_utf8(page).expect("utf-8")
}

/// A lane's `[active, idle, gil_held, gil_waited]` summed over the buckets.
fn lane_counts(data: &PageData, tid: u64) -> [u64; 4] {
    let lane = data
        .lanes
        .iter()
        .position(|l| l.thread_id == tid)
        .expect("the thread's lane") as u64;
    let mut sums = [0; 4];
    for b in &data.buckets {
        for cell in b.l.chunks_exact(LANE_CELL).filter(|c| c[0] == lane) {
            for (sum, n) in sums.iter_mut().zip(&cell[1..]) {
                *sum += n;
            }
        }
    }
    sums
}

#[test]
fn lanes_carry_each_threads_gil_held_and_waited() {
    let agg = contended();
    let summary = agg.summary(&meta());
    let data = page_data(&agg, &summary, &meta());
    // 400 reads: the main thread holds at 100 of them and waits at 300.
    assert_eq!(lane_counts(&data, MAIN), [100, 300, 100, 300]);
    // The metrics thread runs at every read, holding the GIL at the other 300.
    assert_eq!(lane_counts(&data, METRICS), [400, 0, 300, 0]);
}

#[test]
fn the_gil_legend_and_table_name_each_thread_as_its_lane_does() {
    let agg = contended();
    let summary = without_gpu(agg.summary(&meta()));
    let page = page_of(&agg, &summary);
    assert!(page.contains("id=\"gil-legend\""), "no GIL legend");
    let table = &page[page.find("id=\"gil-table\"").expect("the GIL table")..];
    let table = &table[..table.find("</table>").expect("its end")];
    let rows: Vec<&str> = table.split("<tr data-pid=").skip(1).collect();
    assert_eq!(rows.len(), 2, "{table}");
    // Most held first, each named as its lane is, with its shares.
    assert!(rows[0].contains("pid 42 · metrics"), "{}", rows[0]);
    assert!(
        rows[0].contains("<td class=\"num\">75%</td><td class=\"num\">0%</td>"),
        "{}",
        rows[0]
    );
    assert!(
        rows[1].contains("pid 42 · loop (MainThread)"),
        "{}",
        rows[1]
    );
    assert!(
        rows[1].contains("<td class=\"num\">25%</td><td class=\"num\">75%</td>"),
        "{}",
        rows[1]
    );
}

#[test]
fn without_a_gil_summary_or_gil_counts_the_page_draws_neither() {
    let mut agg = Aggregator::new(AggregateConfig::default(), Timestamp(0));
    for ms in (0..1000u64).step_by(10) {
        // A reader that never says who held the GIL.
        agg.handle(sample(ms, MAIN, "MainThread", true, false, "step"));
    }
    agg.finish();
    let summary = agg.summary(&meta());
    assert!(summary.gil.is_none());
    let page = page_of(&agg, &summary);
    assert!(!page.contains("id=\"gil-legend\""));
    assert!(!page.contains("id=\"gil-table\""));
}

#[test]
fn without_gpu_data_the_page_shows_the_loops_verdict_and_step() {
    let agg = contended();
    let summary = without_gpu(agg.summary(&meta()));
    assert!(summary.gpu.is_none());
    let page = page_of(&agg, &summary);
    let verdict = &page[page.find("id=\"verdict\">").expect("the verdict")..];
    assert!(
        verdict.starts_with(
            "id=\"verdict\">The loop waits for the GIL 75% of its time; metrics holds it.<"
        ),
        "{}",
        &verdict[..200.min(verdict.len())]
    );
    assert!(page.contains("<b>Verdict (without GPU data):</b>"));
    assert!(page.contains(
        "id=\"no-gpu-verdict\">Read without GPU data (--gpu off): the loop was found by its \
         hand-offs"
    ));
    let bar = &page[page.find("id=\"step-bar\"").expect("the step bar")..];
    let bar = &bar[..bar.find("</div>").expect("its end")];
    assert!(
        bar.contains("step-gil_wait\" style=\"width:75.0%\""),
        "{bar}"
    );
    assert!(bar.contains("step-python\" style=\"width:25.0%\""), "{bar}");
    assert!(page.contains("<b>The loop's time:</b>"));
    // The flamegraph still says it has no GPU views.
    assert!(page.contains("id=\"no-gpu-views\""));
    let data = page_data(&agg, &summary, &meta());
    assert_eq!(
        data.verdict_class,
        Some(VerdictClass::GilContention),
        "the page's data carries the loop's class"
    );
}

#[test]
fn without_gpu_data_or_a_loop_there_is_still_no_verdict() {
    let agg = contended();
    let summary = agg.summary(&meta());
    let page = page_of(&agg, &summary);
    assert!(page.contains(
        "<b>Verdict:</b> <span id=\"verdict\">No GPU utilization was recorded, so there is \
         no verdict.</span>"
    ));
    assert!(!page.contains("id=\"no-gpu-verdict\""));
    assert!(!page.contains("id=\"step-bar\""));
}
