//! Secrets inside a shown value: `{"password": "hunter2", "lr": 0.1}` becomes
//! `{"password": <redacted>, "lr": 0.1}`. Both readers show a dict as `{key: value, ...}`, a
//! string in double quotes with inner quotes escaped (`"it\"s"`), lists as `[...]`, tuples as
//! `(...)`, other objects as `<TYPE at 0xADDR>`; the walk below reads that shape, at any depth.

use super::{looks_secret, REDACTED};

/// `repr` with the value of every item under a secret-looking key replaced by [`REDACTED`],
/// and how many it hid; `None` where nothing is hidden. A value whose shape cannot be read
/// (torn, cut short) is hidden whole when it names a secret-looking key, rather than shown.
pub(super) fn redact_items(repr: &str) -> Option<(String, usize)> {
    if !repr.contains('{') {
        return None;
    }
    let mut walk = Walk {
        text: repr.as_bytes(),
        hide: Vec::new(),
    };
    let whole = walk.value(0).is_some_and(|end| end == repr.len());
    if !whole {
        return looks_secret(repr).then(|| (REDACTED.to_owned(), 1));
    }
    if walk.hide.is_empty() {
        return None;
    }
    let mut out = String::with_capacity(repr.len());
    let mut at = 0;
    for &(start, end) in &walk.hide {
        out.push_str(&repr[at..start]);
        out.push_str(REDACTED);
        at = end;
    }
    out.push_str(&repr[at..]);
    Some((out, walk.hide.len()))
}

struct Walk<'a> {
    text: &'a [u8],
    /// Byte spans of values to hide, in order.
    hide: Vec<(usize, usize)>,
}

impl Walk<'_> {
    /// Reads one value from `at`; gives where it ends.
    fn value(&mut self, at: usize) -> Option<usize> {
        match self.text.get(at)? {
            b'"' | b'\'' => self.string(at),
            b'{' => self.dict(at),
            b'[' => self.sequence(at, b']'),
            b'(' => self.sequence(at, b')'),
            b'<' => self.text[at..]
                .iter()
                .position(|&c| c == b'>')
                .map(|n| at + n + 1),
            _ => Some(self.atom_end(at)),
        }
    }

    /// A quoted string, escapes included.
    fn string(&self, at: usize) -> Option<usize> {
        let quote = self.text[at];
        let mut i = at + 1;
        while i < self.text.len() {
            match self.text[i] {
                b'\\' => i += 2,
                c if c == quote => return Some(i + 1),
                _ => i += 1,
            }
        }
        None
    }

    /// A number, `True`, `None`, `...`: up to the next separator or closing bracket.
    fn atom_end(&self, at: usize) -> usize {
        self.text[at..]
            .iter()
            .position(|c| matches!(c, b',' | b':' | b'}' | b']' | b')'))
            .map_or(self.text.len(), |n| at + n)
    }

    fn dict(&mut self, at: usize) -> Option<usize> {
        let mut i = at + 1;
        if self.text.get(i) == Some(&b'}') {
            return Some(i + 1);
        }
        loop {
            let key_end = self.value(i)?;
            let key = std::str::from_utf8(&self.text[i..key_end]).ok()?;
            i = key_end;
            if self.text[i..].starts_with(b": ") {
                let start = i + 2;
                let end = self.value(start)?;
                if looks_secret(key.trim_matches(|c| c == '"' || c == '\'')) {
                    // Spans inside a hidden value are hidden with it.
                    self.hide.retain(|&(s, _)| s < start);
                    self.hide.push((start, end));
                }
                i = end;
            }
            match self.text.get(i)? {
                b'}' => return Some(i + 1),
                b',' if self.text.get(i + 1) == Some(&b' ') => i += 2,
                _ => return None,
            }
        }
    }

    fn sequence(&mut self, at: usize, close: u8) -> Option<usize> {
        let mut i = at + 1;
        if self.text.get(i) == Some(&close) {
            return Some(i + 1);
        }
        loop {
            i = self.value(i)?;
            match self.text.get(i)? {
                &c if c == close => return Some(i + 1),
                // `(7,)`: a tuple of one.
                b',' if self.text.get(i + 1) == Some(&close) => return Some(i + 2),
                b',' if self.text.get(i + 1) == Some(&b' ') => i += 2,
                _ => return None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redacted(repr: &str) -> String {
        redact_items(repr).map_or_else(|| repr.to_owned(), |(r, _)| r)
    }

    #[test]
    fn values_under_secret_keys_are_hidden_at_any_depth() {
        assert_eq!(
            redacted(r#"{"password": "hunter2", "lr": 0.1}"#),
            r#"{"password": <redacted>, "lr": 0.1}"#
        );
        assert_eq!(
            redacted(r#"{"db": {"user": "me", "API_KEY": "sk-1"}, "steps": [1, 2]}"#),
            r#"{"db": {"user": "me", "API_KEY": <redacted>}, "steps": [1, 2]}"#
        );
        assert_eq!(
            redacted(r#"[{"token": "t\"x, y: z"}, (7,)]"#),
            r#"[{"token": <redacted>}, (7,)]"#
        );
        // A whole secret dict is one hidden value.
        assert_eq!(
            redacted(r#"{"auth": {"user": "me", "password": "p"}}"#),
            r#"{"auth": <redacted>}"#
        );
        assert_eq!(
            redact_items(r#"{"secret": 1, "session": <Session at 0x7f00>, ...}"#),
            Some((
                r#"{"secret": <redacted>, "session": <redacted>, ...}"#.to_owned(),
                2
            ))
        );
    }

    #[test]
    fn innocent_values_are_left_alone() {
        for repr in [
            r#"{"lr": 0.1, "batch": 32}"#,
            "{}",
            r#""{password}""#,
            "[1, 2, 3]",
            r#"{1: "a", None: True}"#,
            "<dict at 0x7f00>",
        ] {
            assert_eq!(redact_items(repr), None, "{repr}");
        }
    }

    #[test]
    fn a_torn_value_naming_a_secret_is_hidden_whole() {
        assert_eq!(
            redacted(r#"{"password": "hun"#),
            REDACTED,
            "cut short: hidden whole"
        );
        assert_eq!(redacted(r#"{"lr": 0.1"#), r#"{"lr": 0.1"#);
    }
}
