use super::*;

const LIBPYTHON: &str = "/usr/lib/libpython3.11.so.1.0";
const LIBC: &str = "/lib/x86_64-linux-gnu/libc.so.6";
const EXT: &str = "/site-packages/torch/lib/libtorch_cuda.so";

fn native(function: &str, module: &str) -> NativeFrame {
    NativeFrame {
        address: 0x1000,
        function: (!function.is_empty()).then(|| Arc::from(function)),
        file: None,
        line: None,
        module: Arc::from(module),
        module_offset: Some(0x1000),
        inlined: false,
    }
}

fn py(function: &str, entry: bool) -> EntryFrame {
    EntryFrame {
        frame: Frame::python(function, "app.py", 1),
        entry,
    }
}

fn names(merged: &Merged) -> Vec<String> {
    merged
        .frames
        .iter()
        .map(|f| {
            if f.native {
                format!("[{}]", f.function)
            } else {
                f.function.to_string()
            }
        })
        .collect()
}

/// A thread of Python 3.11 blocked in `lock.acquire()`: `worker` called `wait_for`, which
/// called acquire; `run` was entered from C by the thread bootstrap.
fn lock_wait_native() -> Vec<NativeFrame> {
    vec![
        native("__futex_abstimed_wait_common", LIBC),
        native("__new_sem_wait_slow64", LIBC),
        native("sem_clockwait", LIBC),
        native("PyThread_acquire_lock_timed", LIBPYTHON),
        native("acquire_timed", LIBPYTHON),
        native("lock_PyThread_acquire_lock", LIBPYTHON),
        native("method_vectorcall_VARARGS_KEYWORDS", LIBPYTHON),
        native("_PyEval_EvalFrameDefault", LIBPYTHON),
        native("_PyFunction_Vectorcall", LIBPYTHON),
        native("thread_run", LIBPYTHON),
        native("pythread_wrapper", LIBPYTHON),
        native("start_thread", LIBC),
        native("clone3", LIBC),
    ]
}

#[test]
fn the_lock_wait_comes_innermost_under_the_python_frames() {
    let python = [py("wait_for", false), py("worker", false), py("run", true)];
    let merged = merge(&python, &lock_wait_native());
    assert_eq!(
        names(&merged),
        [
            "[__futex_abstimed_wait_common]",
            "[__new_sem_wait_slow64]",
            "[sem_clockwait]",
            "[PyThread_acquire_lock_timed]",
            "[acquire_timed]",
            "[lock_PyThread_acquire_lock]",
            "wait_for",
            "worker",
            "run",
        ]
    );
    assert!(merged.aligned);
}

#[test]
fn each_evaluation_loop_takes_the_python_frames_up_to_its_entry_frame() {
    // main() -> sorted(key=keyfn) -> keyfn() -> a C extension call.
    let native = vec![
        native("cuLaunchKernel", EXT),
        native("_PyEval_EvalFrameDefault", LIBPYTHON),
        native("_PyObject_VectorcallTstate", LIBPYTHON),
        native("list_sort_impl", LIBPYTHON),
        native("_PyEval_EvalFrameDefault", LIBPYTHON),
        native("PyEval_EvalCode", LIBPYTHON),
        native("Py_BytesMain", "/usr/bin/python3.11"),
        native("__libc_start_call_main", LIBC),
        native("", LIBC),
        native("_start", "/usr/bin/python3.11"),
    ];
    let python = [
        py("launch", false),
        py("keyfn", true),
        py("main", false),
        py("<module>", true),
    ];
    let merged = merge(&python, &native);
    assert_eq!(
        names(&merged),
        ["[cuLaunchKernel]", "launch", "keyfn", "main", "<module>"]
    );
    assert!(merged.aligned);
}

#[test]
fn before_3_11_every_frame_is_an_entry_and_gets_its_own_loop() {
    let native = vec![
        native("_PyEval_EvalFrameDefault", LIBPYTHON),
        native("_PyFunction_FastCallDict", LIBPYTHON),
        native("_PyEval_EvalFrameDefault", LIBPYTHON),
    ];
    let python = [py("inner", true), py("outer", true)];
    let merged = merge(&python, &native);
    assert_eq!(names(&merged), ["inner", "outer"]);
    assert!(merged.aligned);
}

#[test]
fn a_native_stack_cut_short_keeps_natives_innermost_and_the_rest_of_python_outermost() {
    let native = vec![
        native("__futex_abstimed_wait_common", LIBC),
        native("PyThread_acquire_lock_timed", LIBPYTHON),
        native("_PyEval_EvalFrameDefault", LIBPYTHON),
    ];
    let python = [py("a", true), py("b", true), py("c", true)];
    let merged = merge(&python, &native);
    assert_eq!(
        names(&merged),
        [
            "[__futex_abstimed_wait_common]",
            "[PyThread_acquire_lock_timed]",
            "a",
            "b",
            "c"
        ]
    );
    assert!(!merged.aligned);

    // No evaluation loop reached at all: every Python frame outer of the natives.
    let merged = merge(&python, &native[..1]);
    assert_eq!(
        names(&merged),
        ["[__futex_abstimed_wait_common]", "a", "b", "c"]
    );
    assert!(!merged.aligned);
}

#[test]
fn more_loops_than_python_frames_is_not_aligned_but_loses_nothing() {
    let native = vec![
        native("_PyEval_EvalFrameDefault", LIBPYTHON),
        native("_PyEval_EvalFrameDefault", LIBPYTHON),
    ];
    let merged = merge(&[py("only", true)], &native);
    assert_eq!(names(&merged), ["only"]);
    assert!(!merged.aligned);
}

#[test]
fn a_thread_without_python_frames_keeps_its_native_stack() {
    let native = vec![
        native("epoll_wait", LIBC),
        native("", EXT),
        native("start_thread", LIBC),
    ];
    let merged = merge::<EntryFrame>(&[], &native);
    assert_eq!(
        names(&merged),
        [
            "[epoll_wait]",
            "[libtorch_cuda.so+0x1000]",
            "[start_thread]"
        ]
    );
    assert!(merged.aligned);
}

#[test]
fn native_frames_are_labelled_with_line_or_module() {
    let mut frame = native("take_gil", LIBPYTHON);
    assert_eq!(
        native_frame(&frame).label(),
        "take_gil (libpython3.11.so.1.0)"
    );
    frame.file = Some(Arc::from("Python/ceval_gil.c"));
    frame.line = Some(287);
    let event = native_frame(&frame);
    assert!(event.native);
    assert_eq!(event.label(), "take_gil (Python/ceval_gil.c:287)");
    let unknown = native("", LIBC);
    assert_eq!(
        native_frame(&unknown).label(),
        "libc.so.6+0x1000 (libc.so.6)"
    );
}

#[test]
fn py_spy_frames_merge_with_their_entry_flags() {
    let frame = |name: &str, is_entry: bool, is_shim_entry: bool| py_spy::Frame {
        name: name.to_owned(),
        filename: format!("/srv/app/{name}.py"),
        module: None,
        short_filename: Some(format!("{name}.py")),
        line: 7,
        locals: None,
        is_entry,
        is_shim_entry,
    };
    // 3.12+: entries are marked by the shim flag.
    let python = [frame("inner", false, false), frame("outer", false, true)];
    let native = vec![
        native("_PyEval_EvalFrameDefault", LIBPYTHON),
        native("PyEval_EvalCode", LIBPYTHON),
    ];
    let merged = merge(&python, &native);
    assert_eq!(names(&merged), ["inner", "outer"]);
    assert_eq!(merged.frames[0].label(), "inner (inner.py:7)");
    assert!(merged.aligned);
}

#[test]
fn interpreter_functions_that_tell_a_wait_are_kept() {
    for name in [
        "take_gil",
        "PyThread_acquire_lock_timed",
        "lock_PyThread_acquire_lock",
        "time_sleep",
        "_PyMutex_LockTimed",
        "PyGILState_Ensure",
    ] {
        assert!(tells_a_wait(name), "{name}");
    }
    for name in [
        "_PyObject_Call",
        "thread_run",
        "method_vectorcall_NOARGS",
        "main",
    ] {
        assert!(!tells_a_wait(name), "{name}");
    }
}
