//! Printing that outlives its reader. The standard `println!` and `eprintln!` panic when the
//! stream is a pipe whose reader has gone (`stackscope attach ... 2>&1 | head -1`), which would
//! end a recording before it is written. These two, declared before every other module of the
//! binary, take their place everywhere in it: a line nobody reads any more is dropped, and the
//! command goes on. What a command writes as its output (a dump, a summary, a table) goes
//! through writers whose errors it sees; a closed pipe there ends it quietly
//! ([`crate::exit::is_closed_pipe`]).

/// `eprintln!`, dropping the line when standard error is closed.
macro_rules! eprintln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

/// `println!`, dropping the line when standard output is closed.
macro_rules! println {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}
