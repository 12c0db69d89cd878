//! report.html of merged recordings (`stackscope merge DIR...`): the pages of the recordings,
//! each built as for one recording, joined into one page with one root per rank.
//!
//! Every stack is re-rooted at its process, named by rank and host exactly as the merged
//! `stacks.folded` names it (`rank 6 on node-b (pid 5124)`); thread lanes and GPU devices carry
//! their rank or host; the recordings are placed on one time axis by their wall-clock start, and
//! their buckets re-bucketed to the widest width among them (a power of two of an eighth of a
//! second, so each merged bucket is a whole union of a recording's buckets, and windows stay
//! exact within a rank). The headline adds the rank table (samples, GPU-idle share, top
//! function, the rank that differs most marked) and each recording's own verdict.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Write;
use std::path::PathBuf;

use stackscope_aggregate::{
    headline_verdict, rank_on, rerooted, MergedRecordings, ProcessPlace, RecordingInput,
    RecordingVerdict, Verdict, VerdictClass, DEFAULT_IDLE_BELOW, MAX_BUCKETS, MAX_ENTRIES,
    VERDICTS_IN_HEADLINE,
};

use super::data::{MergedPage, PageBucket, PageData, PageGpu, PageLane, LANE_CELL, MAX_GPU_POINTS};
use crate::markup::escape;
use crate::one_host::{runs_of_one_host, runs_of_one_host_line, RecordingSpan};
use crate::rank_cells::RankCells;
use crate::ReportError;

/// GPU points of all devices together: a merged page of many nodes' devices stays bounded.
const MAX_MERGED_GPU_POINTS: usize = 8 * MAX_GPU_POINTS;
/// Points per device however many devices: enough to see the dips.
const MIN_GPU_POINTS: usize = 200;
/// The recordings' notices shown before the rest are counted.
const NOTICES_SHOWN: usize = 20;

/// One recording's page, with what `merge` read of it (host, pids, ranks).
#[derive(Debug)]
pub struct RankPage<'a> {
    pub input: &'a RecordingInput,
    pub page: PageData,
}

/// Whose recording, for its devices and its verdict: its rank on its host, else its host.
fn owner(input: &RecordingInput) -> String {
    match input.rank {
        Some(rank) => rank_on(rank, &input.host),
        None => input.host.clone(),
    }
}

/// Joins the pages of the recordings `merged` was made from (in the same order) into one.
pub fn merged_page_data(
    parts: &[RankPage<'_>],
    merged: &MergedRecordings,
    sources: &[PathBuf],
) -> PageData {
    let title = merged_title(merged, sources);
    let offsets = start_offsets(parts);
    let (span, width) = first_width(parts, &offsets);

    let mut dense = Dense::default();
    let mut lanes: Vec<PageLane> = Vec::new();
    // Per recording: its page's stacks in the merged numbering, and where its lanes begin.
    let mut renumbered: Vec<(Vec<u32>, u64)> = Vec::with_capacity(parts.len());
    for part in parts {
        let stacks = renumbered_stacks(part, &mut dense);
        renumbered.push((stacks, lanes.len() as u64));
        push_lanes(part, &mut lanes);
    }
    let (buckets, width) = bounded_buckets(parts, &offsets, &renumbered, width, span);
    let gpus = merged_gpus(parts, &offsets, width);

    let verdicts = recording_verdicts(parts);
    let verdict = merged_verdict(parts, merged, &verdicts);
    let pages = parts.iter().map(|p| &p.page);
    let means: Vec<f64> = pages.clone().filter_map(|p| p.mean_utilization).collect();
    PageData {
        pid: 0,
        command_line: title.clone(),
        python_version: python_versions(parts),
        started_at: first_start(parts, &offsets),
        duration_secs: span,
        rate_hz: pages.clone().map(|p| p.rate_hz).fold(0.0, f64::max),
        samples: pages.clone().map(|p| p.samples).sum(),
        errors: pages.clone().map(|p| p.errors).sum(),
        dropped: pages.clone().map(|p| p.dropped).sum(),
        notices: merged_notices(parts),
        gpu_unavailable: if gpus.is_empty() {
            pages.clone().find_map(|p| p.gpu_unavailable.clone())
        } else {
            None
        },
        simulated: pages.clone().any(|p| p.simulated),
        idle_below: pages
            .clone()
            .map(|p| p.idle_below)
            .next()
            .unwrap_or(f64::from(DEFAULT_IDLE_BELOW)),
        mean_utilization: (!means.is_empty())
            .then(|| means.iter().sum::<f64>() / means.len() as f64),
        verdict_class: verdict.as_ref().map(|v| v.class),
        verdict,
        step: None,
        if_fixed: None,
        loop_found_by: None,
        idle_path: None,
        cycle: None,
        startup_secs: 0.0,
        roles: None,
        bucket_secs: width,
        frames: dense.frame_labels,
        frame_functions: dense.frame_functions,
        functions: dense.function_labels,
        stacks: dense.stacks,
        buckets: buckets
            .into_iter()
            .map(|(i, cells)| cells.into_bucket(i))
            .collect(),
        lanes,
        // The GIL's shares are each recording's own (its `summary.json`); the lanes carry it.
        gil: None,
        gpus,
        // Memory is each recording's own: a merged page draws none.
        memory: None,
        merged: Some(MergedPage {
            title,
            sources: sources.iter().map(|s| s.display().to_string()).collect(),
            ranks: merged.ranks.clone(),
            most_different: merged.most_different.clone(),
            verdicts,
        }),
    }
}

/// `2 recordings merged, 8 ranks`.
fn merged_title(merged: &MergedRecordings, sources: &[PathBuf]) -> String {
    let ranked = merged
        .ranks
        .iter()
        .filter(|r| r.place.rank.is_some())
        .count();
    format!("{} recordings merged, {ranked} ranks", sources.len())
}

/// The recordings' Python versions, each once: `3.11.9, 3.12.4`.
fn python_versions(parts: &[RankPage<'_>]) -> String {
    let python: BTreeSet<&str> = parts
        .iter()
        .map(|p| p.page.python_version.as_str())
        .filter(|v| !v.is_empty())
        .collect();
    python.into_iter().collect::<Vec<_>>().join(", ")
}

/// The wall-clock start of the earliest recording (the one at offset 0).
fn first_start(parts: &[RankPage<'_>], offsets: &[f64]) -> String {
    parts
        .iter()
        .zip(offsets)
        .find(|(_, &off)| off == 0.0)
        .map(|(p, _)| p.page.started_at.clone())
        .unwrap_or_default()
}

/// The merged span in seconds, and the first bucket width to try: the widest of the
/// recordings' (at least an eighth of a second), doubled until the span fits `MAX_BUCKETS`.
fn first_width(parts: &[RankPage<'_>], offsets: &[f64]) -> (f64, f64) {
    let span = parts
        .iter()
        .zip(offsets)
        .map(|(p, off)| off + p.page.duration_secs)
        .fold(0.0, f64::max);
    let mut width = parts
        .iter()
        .map(|p| p.page.bucket_secs)
        .fold(0.125, f64::max);
    while span / width > MAX_BUCKETS as f64 {
        width *= 2.0;
    }
    (span, width)
}

/// A recording's stacks in the merged numbering, each re-rooted at its process's place.
fn renumbered_stacks(part: &RankPage<'_>, dense: &mut Dense) -> Vec<u32> {
    let page = &part.page;
    let frames: Vec<u32> = (0..page.frames.len())
        .map(|f| dense.frame_of(page, f))
        .collect();
    page.stacks
        .iter()
        .map(|stack| {
            let mut out: Vec<u32> = Vec::with_capacity(stack.len() + 1);
            let first = stack
                .first()
                .and_then(|&f| page.frames.get(f as usize))
                .map_or("", String::as_str);
            let (place, rest) = rerooted(part.input, first);
            out.push(dense.root(&place));
            // An empty rest: the first frame was the process root, now replaced.
            let skip = usize::from(rest.is_empty() && !stack.is_empty());
            out.extend(stack[skip..].iter().map(|&f| frames[f as usize]));
            dense.stack(out)
        })
        .collect()
}

/// A recording's thread lanes appended to `lanes`, named by their rank or host.
fn push_lanes(part: &RankPage<'_>, lanes: &mut Vec<PageLane>) {
    let lane_base = lanes.len() as u32;
    for lane in &part.page.lanes {
        let place = place_of(part.input, lane.pid);
        // `process 5124 on node-b` names the pid already: the role follows it.
        let own = format!("pid {} · ", lane.pid);
        let label = match lane.label.strip_prefix(&own) {
            Some(rest) if place.rank.is_none() => rest,
            _ => lane.label.as_str(),
        };
        lanes.push(PageLane {
            name: format!("{}: {}", place.label(), lane.name),
            label: format!("{}: {label}", place.label()),
            role: lane.role,
            // Every rank's trainer first, then their feeders, then the helpers (the page
            // sorts by role, then by this).
            order: lane_base + lane.order,
            pid: lane.pid,
            thread_id: lane.thread_id,
            active: lane.active,
            idle: lane.idle,
            at_a_time: lane.at_a_time,
        });
    }
}

/// The merged buckets and their width. Many recordings hold more entries than one: wider
/// buckets keep the page bounded as the aggregate keeps one recording's.
fn bounded_buckets(
    parts: &[RankPage<'_>],
    offsets: &[f64],
    renumbered: &[(Vec<u32>, u64)],
    mut width: f64,
    span: f64,
) -> (BTreeMap<u64, Cells>, f64) {
    loop {
        let buckets = rebucket(parts, offsets, renumbered, width);
        let entries: usize = buckets
            .values()
            .map(|c| c.stacks.len() + c.lanes.len())
            .sum();
        if entries <= MAX_ENTRIES || width >= span {
            return (buckets, width);
        }
        width *= 2.0;
    }
}

/// Every recording's devices on the merged time axis, named by whose they are, with the
/// points shared out so the page stays bounded.
fn merged_gpus(parts: &[RankPage<'_>], offsets: &[f64], width: f64) -> Vec<PageGpu> {
    let points = (MAX_MERGED_GPU_POINTS
        / parts
            .iter()
            .map(|p| p.page.gpus.len())
            .sum::<usize>()
            .max(1))
    .max(MIN_GPU_POINTS);
    let mut gpus = Vec::new();
    for (part, &offset) in parts.iter().zip(offsets) {
        let offset = on_width(offset, width);
        for gpu in &part.page.gpus {
            gpus.push(shifted(gpu, offset, owner(part.input), points));
        }
    }
    gpus
}

/// The merged page's headline verdict, from the rank table and the recordings' verdicts.
fn merged_verdict(
    parts: &[RankPage<'_>],
    merged: &MergedRecordings,
    verdicts: &[RecordingVerdict],
) -> Option<Verdict> {
    let recordings: Vec<_> = parts
        .iter()
        .map(|p| (p.input, p.page.verdict.as_ref()))
        .collect();
    headline_verdict(merged, &recordings, verdicts)
}

/// Each recording's own verdict, where it has one, named by whose it is.
fn recording_verdicts(parts: &[RankPage<'_>]) -> Vec<RecordingVerdict> {
    parts
        .iter()
        .filter_map(|p| {
            let v = p.page.verdict.as_ref()?;
            (v.class != VerdictClass::Unknown).then(|| RecordingVerdict {
                who: owner(p.input),
                class: v.class,
                text: v.text.clone(),
            })
        })
        .collect()
}

/// The recordings' notices, each once and named by whose it is; past `NOTICES_SHOWN` only
/// counted. Runs of one host one after another are said first: `compare` is their tool.
fn merged_notices(parts: &[RankPage<'_>]) -> Vec<String> {
    let mut notices: Vec<String> = runs_of_one_host(&spans_of(parts))
        .map(|host| runs_of_one_host_line(&host))
        .into_iter()
        .collect();
    for part in parts {
        for n in &part.page.notices {
            let n = format!("{}: {n}", owner(part.input));
            if !notices.contains(&n) {
                notices.push(n);
            }
        }
    }
    if notices.len() > NOTICES_SHOWN {
        let more = notices.len() - NOTICES_SHOWN;
        notices.truncate(NOTICES_SHOWN);
        notices.push(format!(
            "{more} more notices: see each recording's summary.json"
        ));
    }
    notices
}

/// When and where each recording was made.
fn spans_of(parts: &[RankPage<'_>]) -> Vec<RecordingSpan> {
    parts
        .iter()
        .map(|p| RecordingSpan {
            host: p.input.host.clone(),
            started_at: p.page.started_at.clone(),
            duration_secs: p.page.duration_secs,
        })
        .collect()
}

/// A recording's offset on a multiple of the merged width, so each of its buckets falls in
/// one merged bucket whole.
fn on_width(offset: f64, width: f64) -> f64 {
    (offset / width).round() * width
}

/// The recordings' buckets summed into buckets of `width` seconds.
fn rebucket(
    parts: &[RankPage<'_>],
    offsets: &[f64],
    renumbered: &[(Vec<u32>, u64)],
    width: f64,
) -> BTreeMap<u64, Cells> {
    let mut buckets: BTreeMap<u64, Cells> = BTreeMap::new();
    for ((part, &offset), (stacks, lane_base)) in parts.iter().zip(offsets).zip(renumbered) {
        let offset = on_width(offset, width);
        let page = &part.page;
        for bucket in &page.buckets {
            let at = offset + bucket.i as f64 * page.bucket_secs;
            let cells = buckets.entry((at / width + 1e-9) as u64).or_default();
            for s in bucket.s.chunks_exact(4) {
                let Some(&stack) = stacks.get(s[0] as usize) else {
                    continue;
                };
                let c = cells.stacks.entry(stack).or_default();
                for k in 0..3 {
                    c[k] += s[k + 1];
                }
            }
            for l in bucket.l.chunks_exact(LANE_CELL) {
                let c = cells.lanes.entry(lane_base + l[0]).or_default();
                for (sum, n) in c.iter_mut().zip(&l[1..]) {
                    *sum += n;
                }
            }
        }
    }
    buckets
}

/// A device's series moved `offset` seconds later, named by whose it is, and averaged into at
/// most `points` points.
fn shifted(gpu: &PageGpu, offset: f64, owner: String, points: usize) -> PageGpu {
    let per = gpu.t.len().div_ceil(points).max(1);
    let mean = |values: &[Option<f32>]| -> Vec<Option<f32>> {
        values
            .chunks(per)
            .map(|c| {
                let some: Vec<f32> = c.iter().flatten().copied().collect();
                (!some.is_empty()).then(|| some.iter().sum::<f32>() / some.len() as f32)
            })
            .collect()
    };
    PageGpu {
        index: gpu.index,
        name: gpu.name.clone(),
        owner: Some(owner),
        // A point stands at its last reading, as on a single recording's page.
        t: gpu
            .t
            .chunks(per)
            .map(|c| round3(c.last().copied().unwrap_or(0.0) + offset))
            .collect(),
        utilization: mean(&gpu.utilization),
        memory: mean(&gpu.memory),
        power_watts: mean(&gpu.power_watts),
        sm_active: mean(&gpu.sm_active),
    }
}

/// The process `pid` of a recording, named as its stacks' roots are.
fn place_of(input: &RecordingInput, pid: u32) -> ProcessPlace {
    rerooted(input, &format!("process {pid}")).0
}

/// Seconds from the earliest recording's start to each one's, by their wall-clock starts
/// (RFC 3339); all at 0 when any start does not parse.
fn start_offsets(parts: &[RankPage<'_>]) -> Vec<f64> {
    let starts: Option<Vec<chrono::DateTime<chrono::FixedOffset>>> = parts
        .iter()
        .map(|p| chrono::DateTime::parse_from_rfc3339(&p.page.started_at).ok())
        .collect();
    let Some(starts) = starts else {
        return vec![0.0; parts.len()];
    };
    let Some(first) = starts.iter().min().copied() else {
        return Vec::new();
    };
    starts
        .iter()
        .map(|s| (*s - first).num_microseconds().unwrap_or(0) as f64 / 1e6)
        .collect()
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// A merged bucket being summed: stacks' `[idle, busy, unknown]`, lanes' `[active, idle,
/// gil_held, gil_waited]`.
#[derive(Default)]
struct Cells {
    stacks: HashMap<u32, [u64; 3]>,
    lanes: HashMap<u64, [u64; LANE_CELL - 1]>,
}

impl Cells {
    fn into_bucket(self, i: u64) -> PageBucket {
        let mut stacks: Vec<(u32, [u64; 3])> = self.stacks.into_iter().collect();
        stacks.sort_unstable();
        let mut lanes: Vec<(u64, [u64; LANE_CELL - 1])> = self.lanes.into_iter().collect();
        lanes.sort_unstable();
        PageBucket {
            i,
            s: stacks
                .into_iter()
                .flat_map(|(s, [a, b, c])| [u64::from(s), a, b, c])
                .collect(),
            l: lanes
                .into_iter()
                .flat_map(|(l, [a, i, h, w])| [l, a, i, h, w])
                .collect(),
            g: Vec::new(),
        }
    }
}

/// The merged page's numbering: frames and functions by label, stacks by their frames.
#[derive(Default)]
struct Dense {
    frame_ids: HashMap<(String, i64), u32>,
    frame_labels: Vec<String>,
    frame_functions: Vec<i64>,
    function_ids: HashMap<String, i64>,
    function_labels: Vec<String>,
    stack_ids: HashMap<Vec<u32>, u32>,
    stacks: Vec<Vec<u32>>,
}

impl Dense {
    fn frame_of(&mut self, page: &PageData, frame: usize) -> u32 {
        let label = page.frames.get(frame).cloned().unwrap_or_default();
        let function = match page.frame_functions.get(frame) {
            Some(&f) if f >= 0 => {
                let name = page.functions.get(f as usize).cloned().unwrap_or_default();
                let next = self.function_labels.len() as i64;
                let id = *self.function_ids.entry(name.clone()).or_insert(next);
                if id == next {
                    self.function_labels.push(name);
                }
                id
            }
            _ => -1,
        };
        self.frame(label, function)
    }

    fn root(&mut self, place: &ProcessPlace) -> u32 {
        self.frame(place.describe(), -1)
    }

    fn frame(&mut self, label: String, function: i64) -> u32 {
        let next = self.frame_labels.len() as u32;
        let id = *self
            .frame_ids
            .entry((label.clone(), function))
            .or_insert(next);
        if id == next {
            self.frame_labels.push(label);
            self.frame_functions.push(function);
        }
        id
    }

    fn stack(&mut self, frames: Vec<u32>) -> u32 {
        let next = self.stacks.len() as u32;
        let id = *self.stack_ids.entry(frames.clone()).or_insert(next);
        if id == next {
            self.stacks.push(frames);
        }
        id
    }
}

/// The rank table under the verdict (`<table id="ranks">`), the rank that differs most marked,
/// and each recording's verdict (`<ul id="rank-verdicts">`).
pub(super) fn write_rank_table<W: Write>(
    merged: &MergedPage,
    w: &mut W,
) -> Result<(), ReportError> {
    let trainers = merged.ranks.iter().any(|r| r.trainer.is_some());
    let bottlenecks = merged.ranks.iter().any(|r| r.bottleneck.is_some());
    writeln!(
        w,
        "<table class=\"ranks\" id=\"ranks\">\n<tr><th>process</th><th>samples</th>\
         <th>GPU idle</th><th>top function</th>{}{}</tr>",
        if trainers {
            "<th>trainer while the GPU idled</th>"
        } else {
            ""
        },
        if bottlenecks {
            "<th>bottleneck, if fixed</th>"
        } else {
            ""
        }
    )?;
    let odd = merged.most_different.as_ref().map(|o| &o.place);
    for row in &merged.ranks {
        let is_odd = odd == Some(&row.place);
        let RankCells {
            gpu_idle: idle,
            top,
        } = RankCells::of(row);
        let mark = if is_odd {
            " <b class=\"odd-mark\">most different from its peers</b>"
        } else {
            ""
        };
        let trainer = if trainers {
            format!(
                "<td class=\"trainer\">{}</td>",
                escape(row.trainer.as_deref().unwrap_or("-"))
            )
        } else {
            String::new()
        };
        let bottleneck = if bottlenecks {
            format!(
                "<td class=\"bottleneck\">{}</td>",
                escape(row.bottleneck.as_deref().unwrap_or("-"))
            )
        } else {
            String::new()
        };
        writeln!(
            w,
            "<tr{}><td>{}{mark}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
             <td>{}</td>{trainer}{bottleneck}</tr>",
            if is_odd { " class=\"odd\"" } else { "" },
            escape(&row.place.describe()),
            row.samples,
            idle,
            escape(&top)
        )?;
    }
    writeln!(w, "</table>")?;
    // A few recordings' verdicts are the headline itself when no rank stands out.
    let in_headline =
        merged.most_different.is_none() && merged.verdicts.len() <= VERDICTS_IN_HEADLINE;
    if !merged.verdicts.is_empty() && !in_headline {
        writeln!(w, "<ul class=\"rank-verdicts\" id=\"rank-verdicts\">")?;
        for v in &merged.verdicts {
            writeln!(w, "<li><b>{}:</b> {}</li>", escape(&v.who), escape(&v.text))?;
        }
        writeln!(w, "</ul>")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn many_devices_share_a_bounded_number_of_points() {
        let n = 1000;
        let gpu = PageGpu {
            index: 3,
            name: "H100".into(),
            owner: None,
            t: (1..=n).map(|i| f64::from(i) / 10.0).collect(),
            utilization: (0..n)
                .map(|i| Some(if i % 2 == 0 { 0.0 } else { 100.0 }))
                .collect(),
            memory: vec![None; n as usize],
            power_watts: vec![Some(300.0); n as usize],
            sm_active: vec![None; n as usize],
        };
        let out = shifted(&gpu, 2.0, "rank 5 on node-c".into(), 100);
        assert_eq!(out.t.len(), 100);
        assert_eq!(out.owner.as_deref(), Some("rank 5 on node-c"));
        // Each point at its last reading, moved 2 s; values averaged; gaps stay gaps.
        assert_eq!(out.t[0], 3.0);
        assert_eq!(out.t[99], 102.0);
        assert!(out.utilization.iter().all(|u| *u == Some(50.0)));
        assert!(out.memory.iter().all(Option::is_none));
        assert_eq!(out.power_watts[7], Some(300.0));
    }
}
