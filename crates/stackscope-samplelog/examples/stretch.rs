//! Stretches a recording into a longer one of the same job (`scripts/soak-stretch`).
//!
//! usage: stretch IN_DIR OUT_DIR COPIES
//!
//! Writes `OUT_DIR/samples.log`: the events of `IN_DIR/samples.log` COPIES times over, one copy
//! after the other, each thread and process that came and went coming and going again with new
//! ids (`stackscope_samplelog::stretch`).

use std::path::Path;
use std::process::ExitCode;

use stackscope_samplelog::stretch::{stretch, MAX_COPIES};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [input, output, copies] = args.as_slice() else {
        eprintln!("usage: stretch IN_DIR OUT_DIR COPIES");
        return ExitCode::from(2);
    };
    let copies = match copies.parse::<u32>() {
        Ok(n) if (1..=MAX_COPIES).contains(&n) => n,
        _ => {
            eprintln!("stretch: COPIES must be a number from 1 to {MAX_COPIES}, not {copies:?}");
            return ExitCode::from(2);
        }
    };
    match stretch(Path::new(input), Path::new(output), copies) {
        Ok(events) => {
            println!("stretch: {events} events in {copies} copies");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("stretch: {e}");
            ExitCode::FAILURE
        }
    }
}
