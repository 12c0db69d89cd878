//! Text escaped for the markup the reports write: the flamegraph's SVG and report.html. One
//! rule for both: `&#39;` for the apostrophe, which XML and every HTML read alike.

/// `text` with `&`, `<`, `>`, `"` and `'` escaped.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_characters_are_escaped_and_the_rest_kept() {
        assert_eq!(
            escape("a<b> & \"c\" 'd' é"),
            "a&lt;b&gt; &amp; &quot;c&quot; &#39;d&#39; é"
        );
    }
}
