use super::*;

#[test]
fn the_unwinder_can_move_to_the_sampler_thread() {
    fn assert_send<T: Send>() {}
    assert_send::<NativeUnwinder>();
}

#[test]
fn frames_without_symbols_are_named_by_module_offset() {
    let frame = NativeFrame {
        address: 0x7f00_0000_1234,
        function: None,
        file: None,
        line: None,
        module: Arc::from("/lib/x86_64-linux-gnu/libc.so.6"),
        module_offset: Some(0x1234),
        inlined: false,
    };
    assert_eq!(frame.label(), "libc.so.6+0x1234 (libc.so.6)");
}

#[test]
fn our_own_process_maps_load_with_unwind_info() {
    let unwinder = NativeUnwinder::new(std::process::id()).unwrap();
    assert!(!unwinder.modules.is_empty());
    let here = our_own_process_maps_load_with_unwind_info as *const () as u64;
    let index = unwinder
        .module_index(here)
        .expect("our code is in a module");
    assert!(unwinder.modules[index].image.has_unwind_info());
}

/// Registers of the calling function, as if it had been stopped right here.
#[inline(always)]
fn here() -> Registers {
    let (ip, sp, bp): (u64, u64, u64);
    // SAFETY: reads three registers, touches no memory.
    unsafe {
        std::arch::asm!(
            "lea {ip}, [rip]",
            "mov {sp}, rsp",
            "mov {bp}, rbp",
            ip = out(reg) ip,
            sp = out(reg) sp,
            bp = out(reg) bp,
            options(nomem, nostack, preserves_flags),
        );
    }
    Registers {
        ip,
        sp,
        bp,
        fs_base: 0,
    }
}

#[inline(never)]
fn unwind_our_own_stack_from_a_named_function(unwinder: &mut NativeUnwinder) -> NativeStack {
    let registers = here();
    let stack = unwinder.unwind_from(registers).unwrap();
    std::hint::black_box(&registers);
    stack
}

#[test]
fn unwinds_and_symbolizes_our_own_stack() {
    let mut unwinder = NativeUnwinder::new(std::process::id()).unwrap();
    let stack = unwind_our_own_stack_from_a_named_function(&mut unwinder);
    let names: Vec<String> = stack.frames.iter().map(NativeFrame::label).collect();
    let position = |needle: &str| {
        names
            .iter()
            .position(|n| n.contains(needle))
            .unwrap_or_else(|| panic!("{needle} in\n  {}", names.join("\n  ")))
    };
    let inner = position("unwind_our_own_stack_from_a_named_function");
    let outer = position("unwinds_and_symbolizes_our_own_stack");
    assert!(inner < outer, "{}", names.join("\n  "));
    assert!(
        names[inner].contains("unwinder/tests.rs:"),
        "file:line from DWARF: {}",
        names[inner]
    );
    assert!(
        stack.frames[inner].module.contains("stackscope_native"),
        "{:?}",
        stack.frames[inner].module
    );
}

#[test]
fn an_address_outside_every_module_is_reported_not_a_panic() {
    let mut unwinder = NativeUnwinder::new(std::process::id()).unwrap();
    let mut registers = here();
    registers.ip = 0x10;
    registers.bp = 8;
    let stack = unwinder.unwind_from(registers).unwrap();
    assert_eq!(stack.frames[0].module.as_ref(), "?");
    assert_eq!(stack.frames[0].label(), "0x10 (?)");
    assert!(
        matches!(stack.truncated, Some(NativeError::NoUnwindInfo { .. })),
        "{:?}",
        stack.truncated
    );
    let maps_before = unwinder.stats().map_reads;
    unwinder.unwind_from(registers).unwrap();
    assert_eq!(
        unwinder.stats().map_reads,
        maps_before,
        "an address the map did not explain is not looked up again"
    );
}

#[test]
fn the_vdso_is_read_from_memory_and_symbolized() {
    let mut unwinder = NativeUnwinder::new(std::process::id()).unwrap();
    let Some(index) = unwinder
        .modules
        .iter()
        .position(|m| m.mapping.source == MappingSource::Vdso)
    else {
        return; // no vDSO on this kernel
    };
    let module = &unwinder.modules[index];
    assert!(module.image.has_unwind_info());
    let symbolizer = Symbolizer::for_image(&module.image);
    let Symbolizer::Table(symbols) = &symbolizer else {
        panic!("the vDSO has a symbol table");
    };
    let symbol = symbols
        .iter()
        .find(|s| s.name.contains("clock_gettime"))
        .expect("clock_gettime in the vDSO");
    let address = symbol.address + module.bias + 1;
    let mut frames = Vec::new();
    unwinder.symbolize_into(FrameAddress::from_instruction_pointer(address), &mut frames);
    assert_eq!(frames[0].function.as_deref(), Some(&*symbol.name));
    assert_eq!(frames[0].module_name(), "[vdso]");
}
