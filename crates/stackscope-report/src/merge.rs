//! The merged views of many nodes: dumps (`merge FILE...`) as text or JSON, and the rank table
//! of merged recordings (`merge DIR...`).
//!
//! Every line is bounded, whatever the job's size: rank lists print as ranges and are cut, name
//! lists keep a few and count the rest, so a thousand ranks stay on one screen.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;
use stackscope_aggregate::{
    shorten, MergedDump, MergedGroup, MergedRecordings, OddRank, RankRow, RecordingInput,
};
use stackscope_event::ThreadState;
use stackscope_samplelog::LOG_FILE_NAME;

use crate::one_host::runs_of_one_host_line;
use crate::outputs::{
    write_atomic, FLAMEGRAPH, FLAMEGRAPH_BUSY, FLAMEGRAPH_IDLE, FOLDED, FOLDED_BUSY, FOLDED_IDLE,
    SUMMARY,
};
use crate::rank_cells::RankCells;
use crate::{write_flamegraph, write_folded, ReportError};

/// The rank table as text, beside the merged profiles.
pub const RANKS_TXT: &str = "ranks.txt";

/// `summary.json` of a merged report.
#[derive(Debug, Clone, Serialize)]
pub struct MergedSummary {
    /// The recording directories merged, as given.
    pub merged_from: Vec<PathBuf>,
    pub samples: u64,
    pub ranks: Vec<RankRow>,
    pub most_different: Option<OddRank>,
    /// The host, when the recordings are runs of that one host one after another
    /// ([`crate::one_host::runs_of_one_host`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runs_of_one_host: Option<String>,
}

/// What [`write_merged_recordings`] wrote.
#[derive(Debug, Clone)]
pub struct MergedFiles {
    pub paths: Vec<PathBuf>,
    pub summary: MergedSummary,
}

/// Writes the merged profile of many recordings into `dir` (which must exist): folded stacks
/// and flamegraphs with a root per rank (and their GPU-idle and GPU-busy views where the
/// recordings had GPU data), the rank table, and `summary.json` last.
pub fn write_merged_recordings(
    dir: &Path,
    merged: &MergedRecordings,
    sources: &[PathBuf],
    runs_of: Option<&str>,
) -> Result<MergedFiles, ReportError> {
    let mut paths = Vec::new();
    let ranks = merged
        .ranks
        .iter()
        .filter(|r| r.place.rank.is_some())
        .count();
    let title = format!(
        "stackscope: {} recordings merged, {} ranks",
        sources.len(),
        ranks
    );
    let mut views = vec![(&merged.all, FOLDED, FLAMEGRAPH, title.clone())];
    if merged.gpu {
        views.push((
            &merged.gpu_idle,
            FOLDED_IDLE,
            FLAMEGRAPH_IDLE,
            format!("{title}, while the GPU was idle"),
        ));
        views.push((
            &merged.gpu_busy,
            FOLDED_BUSY,
            FLAMEGRAPH_BUSY,
            format!("{title}, while the GPU was busy"),
        ));
    }
    for (lines, folded, svg, title) in views {
        paths.push(write_atomic(dir, folded, |w| write_folded(lines, w))?);
        paths.push(write_atomic(dir, svg, |w| {
            write_flamegraph(lines, &title, w)
        })?);
    }
    paths.push(write_atomic(dir, RANKS_TXT, |w| {
        write_rank_table(merged, runs_of, w)
    })?);
    let summary = MergedSummary {
        merged_from: sources.to_vec(),
        samples: merged.all.iter().map(|(_, n)| n).sum(),
        ranks: merged.ranks.clone(),
        most_different: merged.most_different.clone(),
        runs_of_one_host: runs_of.map(str::to_owned),
    };
    paths.push(write_atomic(dir, SUMMARY, |w| {
        serde_json::to_writer_pretty(&mut *w, &summary)?;
        writeln!(w)?;
        Ok(())
    })?);
    Ok(MergedFiles { paths, summary })
}

/// Writes `report.html` of merged recordings into `dir`: each recording (`sources`, read by
/// `merge` into `inputs`, in the same order) rebuilt from its sample log into its own page, the
/// pages joined into one with a root per rank and the rank table (see
/// [`crate::html::merged_page_data`]). Writes nothing when a recording has no sample log (one
/// written before stackscope kept one).
pub fn write_merged_report_html(
    dir: &Path,
    merged: &MergedRecordings,
    sources: &[PathBuf],
    inputs: &[RecordingInput],
) -> Result<MergedHtml, ReportError> {
    if let Some(missing) = sources
        .iter()
        .find(|s| !stackscope_samplelog::log_exists(s))
    {
        return Ok(MergedHtml::NoSampleLog(missing.join(LOG_FILE_NAME)));
    }
    let mut parts = Vec::with_capacity(sources.len());
    for (source, input) in sources.iter().zip(inputs) {
        // One recording's aggregate at a time: only its page is kept.
        let rebuilt = crate::rebuild(source, &crate::RebuildOptions::default())?;
        let summary = rebuilt.sink.summary(&rebuilt.meta);
        let page = crate::html::page_data(&rebuilt.sink, &summary, &rebuilt.meta);
        parts.push(crate::html::RankPage { input, page });
    }
    let data = crate::html::merged_page_data(&parts, merged, sources);
    drop(parts);
    let path = write_atomic(dir, crate::html::REPORT_FILE, |w| {
        crate::html::write_page(&data, w)
    })?;
    Ok(MergedHtml::Written(path))
}

/// What [`write_merged_report_html`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MergedHtml {
    /// The page's path.
    Written(PathBuf),
    /// Not written: this sample log is missing.
    NoSampleLog(PathBuf),
}

/// Longest rank-range list printed on a group's line.
const RANGES_CHARS: usize = 100;
/// Names (threads, processes, hosts) listed before `+N more`.
const LISTED: usize = 3;
/// Frames printed per group; deeper stacks say how many were left out.
const FRAMES: usize = 40;

pub fn write_merged_dump_text<W: Write>(merged: &MergedDump, mut w: W) -> Result<(), ReportError> {
    writeln!(
        w,
        "{} processes, {} ranks, on {} host{}: {}",
        merged.processes,
        merged.ranks,
        merged.hosts.len(),
        if merged.hosts.len() == 1 { "" } else { "s" },
        listed(&merged.hosts)
    )?;
    if let Some(missing) = &merged.missing_ranks {
        writeln!(w, "Missing: {}: no node's dump has it", missing.sentence())?;
    }
    if !merged.stragglers.is_empty() {
        writeln!(w)?;
    }
    for s in &merged.stragglers {
        writeln!(
            w,
            "Straggler: {} is at {}, while {} of {} ranks are at {}",
            s.place.describe(),
            s.location,
            s.together,
            s.peers,
            s.peers_location
        )?;
    }
    for group in &merged.groups {
        writeln!(w)?;
        write_group(group, &mut w)?;
    }
    Ok(())
}

fn write_group<W: Write>(group: &MergedGroup, w: &mut W) -> Result<(), ReportError> {
    let members = group.ranks.len() + group.unranked.len();
    if let Some(process) = &group.process {
        // One process: named in full, `rank 6 on node-b (pid 5124)`.
        let threads = if group.threads > 1 {
            format!("{} threads of ", group.threads)
        } else {
            String::new()
        };
        writeln!(
            w,
            "{threads}{}: {} ({})",
            process.describe(),
            listed(&group.thread_names),
            status(group)
        )?;
        return write_frames(group, w);
    }
    let mut who: Vec<String> = Vec::new();
    if !group.ranks.is_empty() {
        who.push(format!(
            "{} rank{}: {}",
            group.ranks.len(),
            if group.ranks.len() == 1 { "" } else { "s" },
            cut(&group.rank_ranges, RANGES_CHARS)
        ));
    }
    if !group.unranked.is_empty() {
        match group.unranked.as_slice() {
            [one] => who.push(format!("process {}", one.pid)),
            many => {
                let names: Vec<String> = many
                    .iter()
                    .map(|p| format!("{} ({})", p.pid, p.host))
                    .collect();
                who.push(format!("{} processes: {}", many.len(), listed(&names)));
            }
        }
    }
    let threads = if group.threads > members {
        format!("{} threads of ", group.threads)
    } else {
        String::new()
    };
    let hosts = match group.hosts.as_slice() {
        [one] => format!(" on {one}"),
        many => format!(" on {} hosts", many.len()),
    };
    writeln!(
        w,
        "{threads}{}{hosts}: {} ({})",
        who.join("; "),
        listed(&group.thread_names),
        status(group)
    )?;
    write_frames(group, w)
}

fn write_frames<W: Write>(group: &MergedGroup, w: &mut W) -> Result<(), ReportError> {
    for frame in group.frames.iter().take(FRAMES) {
        writeln!(w, "    {}", frame.label())?;
    }
    if group.frames.len() > FRAMES {
        writeln!(w, "    ... {} more frames", group.frames.len() - FRAMES)?;
    }
    Ok(())
}

fn status(group: &MergedGroup) -> String {
    let mut status = String::from(if group.active { "active" } else { "idle" });
    if group.state != ThreadState::Unknown {
        status.push_str(", ");
        status.push_str(group.state.describe());
    }
    status
}

/// `a, b, c +4 more`.
fn listed(names: &[String]) -> String {
    let mut out = names
        .iter()
        .take(LISTED)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > LISTED {
        out.push_str(&format!(" +{} more", names.len() - LISTED));
    }
    out
}

/// At most about `chars` characters, cut at a comma, with `...` when cut.
fn cut(text: &str, chars: usize) -> String {
    if text.len() <= chars {
        return text.to_owned();
    }
    let head = &text[..text[..chars].rfind(", ").unwrap_or(chars)];
    format!("{head}, ...")
}

pub fn write_merged_dump_json<W: Write>(merged: &MergedDump, mut w: W) -> Result<(), ReportError> {
    serde_json::to_writer_pretty(&mut w, merged)?;
    writeln!(w)?;
    Ok(())
}

/// The table of ranks of merged recordings, and the rank that differs most; for runs of one
/// host (`runs_of`, [`crate::one_host::runs_of_one_host`]), that `compare` is the tool for them instead.
pub fn write_rank_table<W: Write>(
    merged: &MergedRecordings,
    runs_of: Option<&str>,
    mut w: W,
) -> Result<(), ReportError> {
    // The trainer's column, when a recording names its trainer: after the top function, which
    // is padded to line it up.
    let trainers = merged.ranks.iter().any(|r| r.trainer.is_some());
    let header = format!(
        "{:<28} {:>9} {:>9}  top function",
        "process", "samples", "GPU idle"
    );
    if trainers {
        writeln!(
            w,
            "{header:<TOP_CHARS_WITH_TRAINER$}  trainer while the GPU idled"
        )?;
    } else {
        writeln!(w, "{header}")?;
    }
    for row in &merged.ranks {
        // Without the ` (pid N)` that `ProcessPlace::describe` adds: the column is 28 wide, and
        // scripts read the table split on spaces.
        let who = row.place.label();
        let RankCells {
            gpu_idle: idle,
            top,
        } = RankCells::of(row);
        let line = if trainers {
            let top = shorten(&top, TOP_WIDTH_WITH_TRAINER);
            // Its recording's bottleneck and what fixing it buys, after the trainer's line.
            let trainer = match (&row.trainer, &row.bottleneck) {
                (Some(t), Some(b)) => format!("{t} · {b}"),
                (Some(t), None) => t.clone(),
                _ => "-".to_owned(),
            };
            format!(
                "{:<28} {:>9} {:>9}  {top:<TOP_WIDTH_WITH_TRAINER$}  {}",
                shorten(&who, 28),
                row.samples,
                idle,
                shorten(&trainer, 120)
            )
        } else {
            format!(
                "{:<28} {:>9} {:>9}  {}",
                shorten(&who, 28),
                row.samples,
                idle,
                shorten(&top, 90)
            )
        };
        writeln!(w, "{}", line.trim_end())?;
    }
    if let Some(host) = runs_of {
        writeln!(w, "\n{}", runs_of_one_host_line(host))?;
        return Ok(());
    }
    match &merged.most_different {
        Some(odd) => writeln!(
            w,
            "\nMost different from its peers: {} ({:.0}% of its profile differs from theirs, the next \
             {:.0}%){}",
            odd.place.describe(),
            odd.distance * 100.0,
            odd.next_distance * 100.0,
            odd.top_function
                .as_ref()
                .map(|f| format!("; top function {f}"))
                .unwrap_or_default()
        )?,
        None => writeln!(w, "\nFewer than three ranks: none compared with its peers.")?,
    }
    Ok(())
}

/// The top function's width when the trainer's column follows it.
const TOP_WIDTH_WITH_TRAINER: usize = 44;
/// Where the trainer's column starts: process, samples, GPU idle, then the top function.
const TOP_CHARS_WITH_TRAINER: usize = 28 + 1 + 9 + 1 + 9 + 2 + TOP_WIDTH_WITH_TRAINER;

#[cfg(test)]
mod tests {
    use super::*;
    use stackscope_aggregate::{merge_dumps, HostedProcess};
    use stackscope_event::{ProcessDump, RankInfo, ThreadDump};
    use stackscope_testkit::dumps;

    fn process(pid: u32, rank: u32, function: &str) -> ProcessDump {
        let computing = function == "compute";
        let state = if computing {
            ThreadState::Running
        } else {
            ThreadState::WaitingOnLock
        };
        let frames = vec![dumps::frame(function, "train.py", 5)];
        let main = ThreadDump {
            python_thread_id: 1,
            active: computing,
            ..dumps::thread("MainThread", u64::from(pid), state, frames)
        };
        ProcessDump {
            parent_pid: Some(1),
            rank: RankInfo {
                rank: Some(rank),
                ..RankInfo::default()
            },
            ..dumps::process(pid, "python train.py", vec![main])
        }
    }

    #[test]
    fn seven_ranks_and_a_straggler() {
        let dumps: Vec<(String, ProcessDump)> = (0..8u32)
            .map(|r| {
                let host = if r < 4 { "node-a" } else { "node-b" };
                let f = if r == 6 { "compute" } else { "wait" };
                (host.to_owned(), process(5118 + r, r, f))
            })
            .collect();
        let hosted: Vec<HostedProcess<'_>> = dumps
            .iter()
            .map(|(h, p)| HostedProcess {
                host: h,
                process: p,
            })
            .collect();
        let mut out = Vec::new();
        write_merged_dump_text(&merge_dumps(&hosted), &mut out).expect("text");
        let text = String::from_utf8(out).expect("utf8");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "8 processes, 8 ranks, on 2 hosts: node-a, node-b");
        assert_eq!(
            lines[2],
            "Straggler: rank 6 on node-b (pid 5124) is at compute (train.py:5), while 7 of 8 ranks are at wait (train.py:5)"
        );
        assert!(
            text.contains("\n7 ranks: 0-5, 7 on 2 hosts: MainThread (idle, waiting on a lock)\n    wait (train.py:5)\n"),
            "{text}"
        );
        assert!(
            text.contains("\nrank 6 on node-b (pid 5124): MainThread (active, running)\n"),
            "{text}"
        );
    }

    #[test]
    fn long_range_lists_are_cut() {
        let ranges: Vec<String> = (0..500).map(|i| (i * 2).to_string()).collect();
        let c = cut(&ranges.join(", "), RANGES_CHARS);
        assert!(c.len() <= RANGES_CHARS + 5 && c.ends_with(", ..."), "{c}");
    }

    #[test]
    fn the_rank_table_has_a_trainer_column_when_a_recording_names_its_trainer() {
        use stackscope_aggregate::merge_recordings;
        let input = |host: &str, rank: u32, trainer: Option<&str>| RecordingInput {
            host: host.into(),
            pid: 10,
            rank: Some(rank),
            all: vec![("MainThread;poll (connection.py:3)".to_owned(), 9)],
            trainer: trainer.map(|t| (10, t.to_owned())),
            bottleneck: None,
            ..RecordingInput::default()
        };
        let merged = merge_recordings(&[
            input(
                "node-a",
                0,
                Some("main (train.py:136) waiting in Queue.get"),
            ),
            input("node-b", 1, None),
        ]);
        let mut out = Vec::new();
        write_rank_table(&merged, None, &mut out).expect("table");
        let text = String::from_utf8(out).expect("utf-8");
        let lines: Vec<&str> = text.lines().collect();
        let column = lines[0]
            .find("trainer while the GPU idled")
            .unwrap_or_else(|| panic!("{text}"));
        assert_eq!(
            lines[1].find("main (train.py:136) waiting in Queue.get"),
            Some(column),
            "{text}"
        );
        assert!(lines[1].contains("poll (connection.py) 100%"), "{text}");
        assert!(lines[2].ends_with("  -"), "{text}");

        // Each recording's bottleneck and what fixing it buys, after its trainer's line.
        let fixed = RecordingInput {
            bottleneck: Some("input_pipeline: steps up to 3.3x faster".to_owned()),
            ..input(
                "node-a",
                0,
                Some("main (train.py:136) waiting in Queue.get"),
            )
        };
        let merged = merge_recordings(&[fixed, input("node-b", 1, None)]);
        let mut out = Vec::new();
        write_rank_table(&merged, None, &mut out).expect("table");
        let text = String::from_utf8(out).expect("utf-8");
        assert!(
            text.lines().nth(1).is_some_and(|l| l.ends_with(
                "main (train.py:136) waiting in Queue.get · input_pipeline: steps up to 3.3x \
                 faster"
            )),
            "{text}"
        );

        // Without a trainer anywhere, the table is as it was.
        let merged = merge_recordings(&[input("node-a", 0, None)]);
        let mut out = Vec::new();
        write_rank_table(&merged, None, &mut out).expect("table");
        let text = String::from_utf8(out).expect("utf-8");
        assert!(!text.contains("trainer"), "{text}");
    }

    #[test]
    fn the_table_of_runs_of_one_host_points_at_compare() {
        let merged = stackscope_aggregate::merge_recordings(&[]);
        let mut out = Vec::new();
        write_rank_table(&merged, Some("box"), &mut out).expect("table");
        let text = String::from_utf8(out).expect("utf-8");
        assert!(text.contains("runs of one host (box)"), "{text}");
        assert!(text.contains("`stackscope compare BEFORE AFTER`"), "{text}");
        assert!(
            !text.contains("peers:") && !text.contains("Fewer than"),
            "{text}"
        );
    }
}
