use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{FirstPoll, Flow, Producer, Schedule};
use crate::{Event, SampleError, SampleErrorKind, Timestamp};

fn event() -> Event {
    Event::SampleError(SampleError {
        time: Timestamp::now(),
        pid: 1,
        kind: SampleErrorKind::Other,
        message: String::new(),
    })
}

fn stop_flag() -> Arc<AtomicBool> {
    Arc::new(AtomicBool::new(false))
}

#[test]
fn drops_count_every_event_of_a_refused_batch() {
    // Room for one batch, and nobody reads: every batch after the first is refused.
    let (sender, receiver) = crossbeam_channel::bounded(1);
    let stop = stop_flag();
    let schedule = Schedule::every(Duration::from_millis(1), FirstPoll::Now);
    let producer = Producer::spawn("test-drops", schedule, sender, stop.clone(), |ticker| {
        ticker.run(|tick| {
            tick.batch.extend([event(), event(), event()]);
            Flow::Continue
        })
    })
    .expect("spawn");
    while producer.polls() < 5 {
        std::thread::sleep(Duration::from_millis(1));
    }
    stop.store(true, Ordering::SeqCst);
    let report = producer.join();
    assert_eq!(report.dropped, 3 * (report.polls - 1));
    assert_eq!(receiver.len(), 1);
    assert!(!report.panicked);
}

#[test]
fn makes_one_last_poll_after_the_stop() {
    let (sender, receiver) = crossbeam_channel::bounded(64);
    let stop = stop_flag();
    let schedule = Schedule::every(Duration::from_millis(5), FirstPoll::Now);
    let producer = Producer::spawn("test-last", schedule, sender, stop.clone(), |ticker| {
        ticker.run(|tick| {
            if tick.last {
                tick.notices.push("last".into());
            }
            tick.batch.push(event());
            Flow::Continue
        })
    })
    .expect("spawn");
    while producer.polls() < 2 {
        std::thread::sleep(Duration::from_millis(1));
    }
    stop.store(true, Ordering::SeqCst);
    let report = producer.join();
    assert_eq!(report.notices, vec!["last".to_owned()]);
    assert_eq!(receiver.len() as u64, report.polls);
    assert_eq!(report.dropped, 0);
}

#[test]
fn join_wakes_the_wait_at_once() {
    let (sender, _receiver) = crossbeam_channel::bounded(4);
    let stop = stop_flag();
    let schedule = Schedule::every(Duration::from_secs(3600), FirstPoll::AfterInterval);
    let producer = Producer::spawn("test-wake", schedule, sender, stop.clone(), |ticker| {
        ticker.run(|_| Flow::Continue)
    })
    .expect("spawn");
    // The thread is in its first hour-long wait.
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(producer.polls(), 0);
    let started = Instant::now();
    stop.store(true, Ordering::SeqCst);
    let report = producer.join();
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    // The final poll, and no other.
    assert_eq!(report.polls, 1);
}

#[test]
fn the_first_poll_waits_one_interval_only_when_asked() {
    let (sender, _receiver) = crossbeam_channel::bounded(4);
    let stop = stop_flag();
    let schedule = Schedule::every(Duration::from_secs(3600), FirstPoll::Now);
    let producer = Producer::spawn("test-now", schedule, sender, stop.clone(), |ticker| {
        ticker.run(|_| Flow::Continue)
    })
    .expect("spawn");
    let started = Instant::now();
    while producer.polls() < 1 && started.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(producer.polls(), 1);
    stop.store(true, Ordering::SeqCst);
    assert_eq!(producer.join().polls, 2);
}

#[test]
fn the_body_ends_the_loop_and_a_gone_consumer_too() {
    let (sender, _receiver) = crossbeam_channel::bounded(4);
    let schedule = Schedule::every(Duration::from_millis(1), FirstPoll::Now);
    let mut left = 3;
    let producer = Producer::spawn("test-flow", schedule, sender, stop_flag(), move |ticker| {
        ticker.run(|_| {
            left -= 1;
            if left == 0 {
                Flow::Stop
            } else {
                Flow::Continue
            }
        });
        ticker.notice("torn down");
    })
    .expect("spawn");
    let report = producer.join();
    assert_eq!(report.polls, 3);
    assert_eq!(report.notices, vec!["torn down".to_owned()]);

    let (sender, receiver) = crossbeam_channel::bounded(4);
    drop(receiver);
    let producer = Producer::spawn("test-gone", schedule, sender, stop_flag(), |ticker| {
        ticker.run(|tick| {
            tick.batch.push(event());
            Flow::Continue
        })
    })
    .expect("spawn");
    let report = producer.join();
    assert_eq!((report.polls, report.dropped), (1, 0));
}

#[test]
fn a_panic_is_reported() {
    let (sender, _receiver) = crossbeam_channel::bounded(4);
    let schedule = Schedule::every(Duration::from_millis(1), FirstPoll::Now);
    let producer = Producer::spawn("test-panic", schedule, sender, stop_flag(), |ticker| {
        ticker.run(|_| panic!("on purpose"))
    })
    .expect("spawn");
    assert!(producer.join().panicked);
}

#[test]
fn batched_polls_go_out_together_and_the_last_at_once() {
    let (sender, receiver) = crossbeam_channel::bounded(64);
    let stop = stop_flag();
    let schedule =
        Schedule::every(Duration::from_millis(2), FirstPoll::Now).batched(Duration::from_millis(6));
    assert_eq!(schedule.polls_per_batch, 3);
    let producer = Producer::spawn("test-batched", schedule, sender, stop.clone(), |ticker| {
        ticker.run(|tick| {
            tick.batch.push(event());
            Flow::Continue
        })
    })
    .expect("spawn");
    while producer.polls() < 7 {
        std::thread::sleep(Duration::from_millis(1));
    }
    stop.store(true, Ordering::SeqCst);
    let report = producer.join();
    let sizes: Vec<usize> = receiver.try_iter().map(|batch| batch.len()).collect();
    assert_eq!(sizes.iter().sum::<usize>() as u64, report.polls);
    // Every batch but the last holds three polls; the last, what was left.
    let (last, full) = sizes.split_last().expect("batches");
    assert!(full.iter().all(|&n| n == 3), "{sizes:?}");
    assert!((1..=3).contains(last), "{sizes:?}");
    assert_eq!(
        Schedule::every(Duration::from_secs(1), FirstPoll::Now)
            .batched(Duration::from_millis(1))
            .polls_per_batch,
        1
    );
}

/// A producer's waits may end a tenth of its interval late, so the kernel can fold its
/// wake-ups into another timer's: the thread's slack says so while it polls.
#[test]
fn polls_may_come_a_tenth_of_the_interval_late() {
    let (sender, _receiver) = crossbeam_channel::bounded(64);
    let stop = stop_flag();
    let schedule = Schedule::every(Duration::from_millis(40), FirstPoll::Now);
    assert_eq!(schedule.slack(), Duration::from_millis(4));
    let seen = Arc::new(std::sync::Mutex::new(None));
    let seen_inside = Arc::clone(&seen);
    let producer = Producer::spawn(
        "test-slack",
        schedule,
        sender,
        stop.clone(),
        move |ticker| {
            ticker.run(|_tick| {
                *seen_inside.lock().expect("lock") = crate::wakeups::current_slack();
                Flow::Stop
            })
        },
    )
    .expect("spawn");
    stop.store(true, Ordering::SeqCst);
    producer.join();
    assert_eq!(*seen.lock().expect("lock"), Some(Duration::from_millis(4)));
}
