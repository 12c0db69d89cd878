//! The records' codings on their own: a frame's kind byte, the GPU sample's tags, the memory
//! records, each written and read back.

use super::*;
use crate::memory_record::{put_cgroup, put_memory};
use crate::replay::Replay;
use stackscope_event::{Event, ProcessGpuMemory};

/// The frame `kind` says, with strings 0 and 1 for its function and file.
fn frame_of_kind(file: &str, kind: u8) -> Result<Frame, DecodeError> {
    let mut replay = Replay::default();
    let mut bytes = Vec::new();
    put_string(&mut bytes, "step");
    put_string(&mut bytes, file);
    bytes.extend([TAG_FRAME, 0, 1, 7, kind]);
    put_stack(&mut bytes, &[0]);
    put_thread(
        &mut bytes,
        &ThreadRecord {
            id: 0,
            pid: 1,
            python_thread_id: 1,
            os_thread_id: None,
            name: None,
        },
    );
    put_sample(&mut bytes, 5, 0, 0, true, false);
    let mut input = Bytes::new(&bytes);
    let mut last = None;
    while input.remaining() > 0 {
        last = replay.apply(decode(&mut input)?)?;
    }
    match last {
        Some(Event::Stack(sample)) => Ok(sample.frames[0].clone()),
        other => panic!("not a stack sample: {other:?}"),
    }
}

#[test]
fn a_frames_kind_byte_carries_its_origin_and_an_old_logs_is_inferred() {
    let origin = |file, kind| frame_of_kind(file, kind).map(|f| (f.native, f.origin));
    // Format 3: the byte says, whatever the name.
    assert_eq!(origin("pkg/loop.py", 2), Ok((false, FileOrigin::Job)));
    assert_eq!(origin("train.py", 3), Ok((false, FileOrigin::Stdlib)));
    assert_eq!(origin("train.py", 4), Ok((false, FileOrigin::Package)));
    assert_eq!(origin("libc.so.6", 1), Ok((true, FileOrigin::Native)));
    // Formats 1 and 2 wrote 0 for every Python frame: inferred from the shortened name.
    assert_eq!(origin("pkg/loop.py", 0), Ok((false, FileOrigin::Package)));
    assert_eq!(origin("threading.py", 0), Ok((false, FileOrigin::Stdlib)));
    assert_eq!(origin("train.py", 0), Ok((false, FileOrigin::Job)));
    assert!(matches!(
        origin("train.py", 9),
        Err(DecodeError::UnknownValue { value: 9, .. })
    ));
    for (native, origin) in [
        (false, FileOrigin::Job),
        (false, FileOrigin::Stdlib),
        (false, FileOrigin::Package),
        (true, FileOrigin::Native),
    ] {
        let kind = frame_kind(native, origin);
        assert_eq!(frame_origin(kind), Ok((native, Some(origin))));
    }
}

fn gpu_roundtrip(sample: &GpuSample) -> (u8, GpuSample) {
    let mut bytes = Vec::new();
    put_gpu(&mut bytes, 0, sample);
    let tag = bytes[0];
    match decode(&mut Bytes::new(&bytes)) {
        Ok(Record::Gpu { sample, .. }) => (tag, sample),
        other => panic!("not a GPU sample: {other:?}"),
    }
}

#[test]
fn a_gpu_samples_compute_pids_round_trip_and_none_keeps_the_old_coding() {
    let listed = GpuSample {
        utilization: Some(97.0),
        compute_pids: Some(vec![12, 70_000]),
        ..GpuSample::default()
    };
    assert_eq!(gpu_roundtrip(&listed), (TAG_GPU_PIDS, listed.clone()));
    let empty = GpuSample {
        compute_pids: Some(Vec::new()),
        ..listed.clone()
    };
    assert_eq!(gpu_roundtrip(&empty), (TAG_GPU_PIDS, empty.clone()));
    let unlisted = GpuSample {
        compute_pids: None,
        ..listed
    };
    assert_eq!(gpu_roundtrip(&unlisted), (TAG_GPU, unlisted.clone()));
}

fn gpu_with_memory() -> GpuSample {
    GpuSample {
        utilization: Some(55.0),
        compute_pids: Some(vec![12, 70_000]),
        process_memory: vec![
            ProcessGpuMemory {
                pid: 12,
                bytes: 3 << 30,
            },
            ProcessGpuMemory {
                pid: 70_000,
                bytes: u64::MAX,
            },
        ],
        ..GpuSample::default()
    }
}

#[test]
fn a_gpu_samples_process_memory_round_trips_under_a_tag_of_its_own() {
    let with = gpu_with_memory();
    assert_eq!(gpu_roundtrip(&with), (TAG_GPU_MEMORY, with.clone()));
    // Memory without a list of pids, and with GPM readings.
    let unlisted = GpuSample {
        compute_pids: None,
        sm_active: Some(12.5),
        ..with.clone()
    };
    assert_eq!(gpu_roundtrip(&unlisted), (TAG_GPU_MEMORY, unlisted.clone()));
    let listed_empty = GpuSample {
        compute_pids: Some(Vec::new()),
        ..with.clone()
    };
    assert_eq!(
        gpu_roundtrip(&listed_empty),
        (TAG_GPU_MEMORY, listed_empty.clone())
    );
    // Without process memory, each older coding as it was.
    let pids = GpuSample {
        process_memory: Vec::new(),
        ..with
    };
    assert_eq!(gpu_roundtrip(&pids), (TAG_GPU_PIDS, pids.clone()));
}

#[test]
fn an_old_gpu_record_reads_as_no_process_memory() {
    // 0x0c as format 3 wrote it before process memory: one pid, no GPM.
    let bytes = [TAG_GPU_PIDS, 0, 0, 0, 0, 1, 7];
    match decode(&mut Bytes::new(&bytes)) {
        Ok(Record::Gpu { sample, .. }) => {
            assert_eq!(sample.compute_pids, Some(vec![7]));
            assert!(sample.process_memory.is_empty());
        }
        other => panic!("not a GPU sample: {other:?}"),
    }
}

fn memory_samples() -> Vec<MemorySample> {
    let mut out = Vec::new();
    for mask in 0u8..8 {
        let field = |bit: u8, v: u64| (mask & (1 << bit) != 0).then_some(v);
        out.push(MemorySample {
            time: Timestamp(0),
            pid: 4242 + u32::from(mask),
            rss_bytes: 1_234_567_890 * u64::from(mask),
            private_bytes: field(0, 900 << 20),
            shared_bytes: field(1, 0),
            swap_bytes: field(2, u64::MAX),
        });
    }
    out
}

fn cgroup_samples() -> Vec<CgroupSample> {
    let mut out = Vec::new();
    for mask in 0u8..4 {
        out.push(CgroupSample {
            time: Timestamp(0),
            usage_bytes: 3 << 30,
            limit_bytes: (mask & 1 != 0).then_some(4 << 30),
            oom_kills: (mask & 2 != 0).then_some(u64::from(mask)),
        });
    }
    out
}

#[test]
fn memory_and_cgroup_records_round_trip_with_every_optional_field_present_or_not() {
    for (i, sample) in memory_samples().into_iter().enumerate() {
        let delta = i as i64 * 100_000_000 - 300_000_000;
        let mut bytes = Vec::new();
        put_memory(&mut bytes, delta, &sample);
        let mut input = Bytes::new(&bytes);
        assert_eq!(
            decode(&mut input),
            Ok(Record::Memory { delta, sample }),
            "mask {i}"
        );
        assert_eq!(input.remaining(), 0, "reads its own bytes only");
    }
    for (i, sample) in cgroup_samples().into_iter().enumerate() {
        let delta = i64::MIN + i as i64;
        let mut bytes = Vec::new();
        put_cgroup(&mut bytes, delta, &sample);
        let mut input = Bytes::new(&bytes);
        assert_eq!(
            decode(&mut input),
            Ok(Record::Cgroup { delta, sample }),
            "mask {i}"
        );
        assert_eq!(input.remaining(), 0);
    }
}

#[test]
fn damaged_memory_records_are_errors_not_panics() {
    let mut records = Vec::new();
    for sample in memory_samples() {
        let mut bytes = Vec::new();
        put_memory(&mut bytes, 5, &sample);
        records.push(bytes);
    }
    for sample in cgroup_samples() {
        let mut bytes = Vec::new();
        put_cgroup(&mut bytes, 5, &sample);
        records.push(bytes);
    }
    let mut gpu = Vec::new();
    put_gpu(&mut gpu, 5, &gpu_with_memory());
    records.push(gpu);
    for bytes in &records {
        for cut in 1..bytes.len() {
            assert_eq!(
                decode(&mut Bytes::new(&bytes[..cut])),
                Err(DecodeError::Truncated),
                "{bytes:?} cut at {cut}"
            );
        }
    }
    // A presence bit this format does not define.
    let unknown = [TAG_MEMORY, 0, 1, 0b1000, 0];
    assert!(matches!(
        decode(&mut Bytes::new(&unknown)),
        Err(DecodeError::UnknownValue { value: 0b1000, .. })
    ));
    let unknown = [TAG_CGROUP, 0, 0b100, 0];
    assert!(matches!(
        decode(&mut Bytes::new(&unknown)),
        Err(DecodeError::UnknownValue { value: 0b100, .. })
    ));
    // A count of GPU processes far beyond the record: an error, not an allocation.
    let huge = [
        TAG_GPU_MEMORY,
        0,
        0,
        0,
        0,
        0,
        0xff,
        0xff,
        0xff,
        0xff,
        0x0f,
        1,
    ];
    assert_eq!(decode(&mut Bytes::new(&huge)), Err(DecodeError::Truncated));
}

#[test]
fn a_segment_record_round_trips_and_a_cut_one_is_an_error() {
    let segment = SegmentRecord {
        index: 1_000_001,
        start: Timestamp(u64::MAX - 1),
        carried: 3,
    };
    let mut bytes = Vec::new();
    put_segment(&mut bytes, &segment);
    assert_eq!(bytes[0], TAG_SEGMENT);
    let mut input = Bytes::new(&bytes);
    assert_eq!(decode(&mut input), Ok(Record::Segment(segment)));
    assert_eq!(input.remaining(), 0, "reads its own bytes only");
    for cut in 1..bytes.len() {
        assert_eq!(
            decode(&mut Bytes::new(&bytes[..cut])),
            Err(DecodeError::Truncated)
        );
    }
}
