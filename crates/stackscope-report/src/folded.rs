//! Folded stacks, the text format flamegraph tools read: `frame;frame;frame COUNT` per line.

use std::io::Write;

use crate::ReportError;

/// Writes `lines` (stack, count) one per line, in the order given.
pub fn write_folded<W: Write>(lines: &[(String, u64)], mut w: W) -> Result<(), ReportError> {
    for (stack, count) in lines {
        writeln!(w, "{stack} {count}")?;
    }
    w.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_stack() {
        let mut out = Vec::new();
        let lines = vec![
            ("MainThread;main (a.py:1)".to_owned(), 3),
            ("worker;run (b.py:2)".to_owned(), 1),
        ];
        write_folded(&lines, &mut out).expect("write");
        assert_eq!(
            String::from_utf8(out).expect("utf8"),
            "MainThread;main (a.py:1) 3\nworker;run (b.py:2) 1\n"
        );
    }
}
