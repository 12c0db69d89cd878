//! The GPU timeline as an SVG chart: utilization (solid), GPM SM activity where the GPU has it
//! (thin, short dashes) and memory used (dashed) over time, one colour per device, drawn with
//! plotters' SVG backend. SM activity beside utilization shows a GPU "busy" with kernels that
//! run on a small part of it.
//!
//! plotters is built without its font features, so no system font library is needed: the SVG
//! backend writes labels as `<text>` elements and the viewer's fonts render them.

use std::io::Write;

use plotters::prelude::*;
use stackscope_event::{GpuSample, Timestamp};

use crate::ReportError;

const WIDTH: u32 = 1200;
const HEIGHT: u32 = 500;
/// Points per line at most: about two per pixel column keeps an SVG of a week-long recording
/// small while the min/max of each column keeps every spike visible.
const MAX_BUCKETS: usize = 1000;

type Points = Vec<(f64, f64)>;

/// Writes the chart of `samples`, times in seconds since `start`.
pub fn write_gpu_timeline_svg<W: Write>(
    samples: &[GpuSample],
    start: Timestamp,
    mut w: W,
) -> Result<(), ReportError> {
    let mut svg = String::new();
    draw(samples, start, &mut svg).map_err(|e| ReportError::Chart(e.to_string()))?;
    w.write_all(svg.as_bytes())?;
    w.flush()?;
    Ok(())
}

fn draw(
    samples: &[GpuSample],
    start: Timestamp,
    svg: &mut String,
) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::with_string(svg, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE)?;
    let times = samples.iter().map(|s| s.time.seconds_since(start));
    let x_min = times.clone().fold(0.0f64, f64::min);
    let x_max = times.fold(x_min + 1.0, f64::max);
    let mut chart = ChartBuilder::on(&root)
        .caption("GPU utilization and memory used", ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(x_min..x_max, 0.0f64..100.0f64)?;
    chart
        .configure_mesh()
        .x_desc("seconds since start")
        .y_desc("percent")
        .draw()?;

    let mut devices: Vec<u32> = samples.iter().map(|s| s.device).collect();
    devices.sort_unstable();
    devices.dedup();
    let span = (x_min, x_max);
    for (i, &device) in devices.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let utilization = device_series(samples, device, start, span, |s| {
            s.utilization.map(f64::from)
        });
        if !utilization.is_empty() {
            chart
                .draw_series(LineSeries::new(utilization, color.stroke_width(2)))?
                .label(format!("GPU {device} utilization %"))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        }
        let sm_active = device_series(samples, device, start, span, |s| s.sm_active.map(f64::from));
        if !sm_active.is_empty() {
            chart
                .draw_series(DashedLineSeries::new(
                    sm_active,
                    2,
                    2,
                    color.stroke_width(2),
                ))?
                .label(format!("GPU {device} SM activity %"))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        }
        let memory = device_series(samples, device, start, span, memory_used_pct);
        if !memory.is_empty() {
            chart
                .draw_series(DashedLineSeries::new(memory, 6, 4, color.stroke_width(1)))?
                .label(format!("GPU {device} memory used %"))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.mix(0.5)));
        }
    }
    if !devices.is_empty() {
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()?;
    }
    root.present()?;
    Ok(())
}

/// One device's values of one series, in seconds since `start`, decimated to the chart's width.
fn device_series(
    samples: &[GpuSample],
    device: u32,
    start: Timestamp,
    span: (f64, f64),
    value: impl Fn(&GpuSample) -> Option<f64>,
) -> Vec<(f64, f64)> {
    decimate(
        samples
            .iter()
            .filter(|s| s.device == device)
            .filter_map(|s| Some((s.time.seconds_since(start), value(s)?))),
        span,
    )
}

fn memory_used_pct(s: &GpuSample) -> Option<f64> {
    let used = s.memory_used_bytes? as f64;
    let total = s.memory_total_bytes? as f64;
    (total > 0.0).then(|| used / total * 100.0)
}

/// Reduces a time-ordered series to the first, minimum, maximum and last point of each of
/// [`MAX_BUCKETS`] equal spans of time; short series pass through unchanged.
fn decimate(points: impl Iterator<Item = (f64, f64)>, (x_min, x_max): (f64, f64)) -> Points {
    let points: Points = points.collect();
    if points.len() <= 4 * MAX_BUCKETS {
        return points;
    }
    let width = (x_max - x_min) / MAX_BUCKETS as f64;
    let mut out = Points::new();
    let mut bucket: Points = Vec::new();
    let mut bucket_index = None;
    for p in points {
        let index = ((p.0 - x_min) / width).floor() as i64;
        if bucket_index != Some(index) {
            flush_bucket(&mut bucket, &mut out);
            bucket_index = Some(index);
        }
        bucket.push(p);
    }
    flush_bucket(&mut bucket, &mut out);
    out
}

fn flush_bucket(bucket: &mut Points, out: &mut Points) {
    let (Some(&first), Some(&last)) = (bucket.first(), bucket.last()) else {
        return;
    };
    let by_value = |a: &&(f64, f64), b: &&(f64, f64)| a.1.total_cmp(&b.1);
    let min = bucket.iter().min_by(by_value).copied().unwrap_or(first);
    let max = bucket.iter().max_by(by_value).copied().unwrap_or(first);
    let mut kept = vec![first, min, max, last];
    kept.sort_by(|a, b| a.0.total_cmp(&b.0));
    kept.dedup();
    out.extend(kept);
    bucket.clear();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_xml::parse_svg;

    fn sample(t_ms: u64, device: u32, utilization: f32) -> GpuSample {
        GpuSample {
            time: Timestamp(t_ms * 1_000_000),
            device,
            utilization: Some(utilization),
            memory_used_bytes: Some(1 << 30),
            memory_total_bytes: Some(4 << 30),
            ..GpuSample::default()
        }
    }

    #[test]
    fn chart_has_a_line_per_device_and_metric_and_readable_labels() {
        let samples: Vec<GpuSample> = (0..200)
            .flat_map(|i| {
                let u = if (i / 20) % 2 == 0 { 3.0 } else { 97.0 };
                [sample(i * 100, 0, u), sample(i * 100 + 50, 1, 50.0)]
            })
            .collect();
        let mut out = Vec::new();
        write_gpu_timeline_svg(&samples, Timestamp(0), &mut out).expect("chart");
        let svg = parse_svg(&out);
        assert_eq!(svg.root, "svg");
        let texts = svg.texts.join("|");
        for label in [
            "GPU utilization and memory used",
            "seconds since start",
            "GPU 0 utilization %",
            "GPU 1 memory used %",
        ] {
            assert!(texts.contains(label), "missing {label:?} in {texts}");
        }
        let lines = svg.elements.iter().filter(|e| *e == "polyline").count();
        // Two devices with two solid lines; the dashed memory lines are many short segments.
        assert!(lines >= 2, "{lines} polylines");
    }

    #[test]
    fn sm_activity_is_drawn_beside_utilization_where_known() {
        let samples: Vec<GpuSample> = (0..100)
            .map(|i| GpuSample {
                sm_active: (i % 5 == 0).then_some(20.0),
                ..sample(i * 100, 0, 97.0)
            })
            .collect();
        let mut out = Vec::new();
        write_gpu_timeline_svg(&samples, Timestamp(0), &mut out).expect("chart");
        let texts = parse_svg(&out).texts.join("|");
        assert!(texts.contains("GPU 0 SM activity %"), "{texts}");
        let mut without = Vec::new();
        let plain: Vec<GpuSample> = samples
            .iter()
            .map(|s| GpuSample {
                sm_active: None,
                ..s.clone()
            })
            .collect();
        write_gpu_timeline_svg(&plain, Timestamp(0), &mut without).expect("chart");
        assert!(!parse_svg(&without).texts.join("|").contains("SM activity"));
    }

    #[test]
    fn empty_timeline_still_draws_axes() {
        let mut out = Vec::new();
        write_gpu_timeline_svg(&[], Timestamp(0), &mut out).expect("chart");
        let svg = parse_svg(&out);
        assert!(svg.texts.iter().any(|t| t == "seconds since start"));
    }

    #[test]
    fn long_series_are_decimated_keeping_extremes() {
        let points = (0..100_000).map(|i| {
            let v = if i == 54_321 { 100.0 } else { 50.0 };
            (i as f64 / 10.0, v)
        });
        let out = decimate(points, (0.0, 10_000.0));
        assert!(out.len() <= 4 * MAX_BUCKETS, "{} points", out.len());
        assert!(out.iter().any(|p| p.1 == 100.0), "spike kept");
        assert!(out.windows(2).all(|w| w[0].0 <= w[1].0), "time order");
    }
}
