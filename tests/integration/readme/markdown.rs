//! Just enough Markdown for checking the docs: where a document links to, which headings it has
//! (as the anchors GitHub gives them), and what it shows as code. Not a renderer: it reads the
//! CommonMark constructs the docs use and errs towards finding a link where a renderer might
//! not, since a false alarm costs a look and a missed external link defeats the check.
//!
//! - Code: fenced blocks (``` or ~~~), indented blocks (four spaces after a blank line or
//!   after another code line, outside a list item's text), and inline code spans, which may
//!   run over lines within a paragraph. Nothing inside code is a link.
//! - Links: inline links and images (`[text](target)`, `![alt](target)`), reference
//!   definitions (`[label]: target`), autolinks (`<https://...>`), bare URLs (`https://...`,
//!   `www.`, which GitHub turns into links) and HTML `href=`/`src=` attributes.
//! - Headings: ATX headings (`#` to `######`); GitHub's anchor for each, with `-1`, `-2` for
//!   repeats.

/// A link found in a document: its target as written, and the line it is on (1-based).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    pub line: usize,
    pub target: String,
}

/// A document split into what the checks need.
#[derive(Debug, Default)]
pub struct Document {
    pub links: Vec<Link>,
    /// GitHub's anchors of the document's headings, in order.
    pub anchors: Vec<String>,
    /// The text of every code block and code span, with the line it starts on.
    pub code: Vec<(usize, String)>,
}

/// Reads a Markdown document.
pub fn parse(text: &str) -> Document {
    let mut doc = Document::default();
    let mut paragraph: Vec<(usize, &str)> = Vec::new();
    let mut fence: Option<(char, usize, usize, String)> = None; // char, length, line, text
    let mut indented: Option<(usize, String)> = None;
    let mut previous_blank = true;
    let mut in_list = false;
    for (index, line) in text.lines().enumerate() {
        let number = index + 1;
        if let Some((ch, len, start, mut body)) = fence.take() {
            if fence_marker(line).is_some_and(|(c, l, info)| c == ch && l >= len && info.is_empty())
            {
                doc.code.push((start, body));
            } else {
                body.push_str(line);
                body.push('\n');
                fence = Some((ch, len, start, body));
            }
            continue;
        }
        let code_line = line.starts_with("    ") || line.starts_with('\t');
        if code_line && (indented.is_some() || (previous_blank && !in_list)) {
            let (_, body) = indented.get_or_insert((number, String::new()));
            body.push_str(line.trim_start());
            body.push('\n');
            continue;
        }
        if let Some(block) = indented.take() {
            doc.code.push(block);
        }
        if let Some((ch, len, _)) = fence_marker(line) {
            flush_paragraph(&mut doc, &mut paragraph);
            fence = Some((ch, len, number + 1, String::new()));
            previous_blank = false;
            continue;
        }
        if line.trim().is_empty() {
            flush_paragraph(&mut doc, &mut paragraph);
            previous_blank = true;
            continue;
        }
        let item = line.trim_start();
        if item.starts_with("- ") || item.starts_with("* ") || starts_numbered(item) {
            in_list = true;
        } else if previous_blank && !line.starts_with(' ') {
            in_list = false;
        }
        previous_blank = false;
        if let Some(title) = heading(line) {
            flush_paragraph(&mut doc, &mut paragraph);
            let anchor = unique_anchor(&doc.anchors, &slug(title));
            doc.anchors.push(anchor);
            paragraph.push((number, title));
            flush_paragraph(&mut doc, &mut paragraph);
            continue;
        }
        paragraph.push((number, line));
    }
    flush_paragraph(&mut doc, &mut paragraph);
    if let Some((_, _, start, body)) = fence {
        doc.code.push((start, body)); // an unclosed fence runs to the end
    }
    if let Some(block) = indented {
        doc.code.push(block);
    }
    doc
}

/// A fence's character, length and info string, if `line` opens or closes one.
fn fence_marker(line: &str) -> Option<(char, usize, &str)> {
    let indent = line.len() - line.trim_start_matches(' ').len();
    let rest = &line[indent..];
    let ch = rest.chars().next().filter(|c| *c == '`' || *c == '~')?;
    let len = rest.chars().take_while(|c| *c == ch).count();
    (indent <= 3 && len >= 3).then(|| (ch, len, rest[len..].trim()))
}

fn starts_numbered(item: &str) -> bool {
    let digits = item.chars().take_while(char::is_ascii_digit).count();
    digits > 0 && item[digits..].starts_with(". ")
}

/// The text of an ATX heading.
fn heading(line: &str) -> Option<&str> {
    let hashes = line.chars().take_while(|c| *c == '#').count();
    if !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
        return None;
    }
    Some(line[hashes..].trim().trim_end_matches('#').trim_end())
}

/// GitHub's anchor for a heading: its text as rendered (code and emphasis marks, link
/// targets dropped), lower-cased, with everything but letters, digits, spaces, `-` and `_`
/// removed and spaces turned into `-`.
pub fn slug(title: &str) -> String {
    let rendered = strip_link_targets(title);
    rendered
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .flat_map(char::to_lowercase)
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn unique_anchor(taken: &[String], anchor: &str) -> String {
    let mut candidate = anchor.to_owned();
    let mut n = 0;
    while taken.contains(&candidate) {
        n += 1;
        candidate = format!("{anchor}-{n}");
    }
    candidate
}

/// `[text](target)` -> `text`, for a heading's rendered text.
fn strip_link_targets(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("](") {
        out.push_str(&rest[..at]);
        let after = &rest[at + 2..];
        rest = after.find(')').map_or("", |end| &after[end + 1..]);
    }
    out.push_str(rest);
    out
}

/// Takes the code spans out of a paragraph (they may run over lines) and finds its links.
fn flush_paragraph(doc: &mut Document, paragraph: &mut Vec<(usize, &str)>) {
    let Some(&(first, _)) = paragraph.first() else {
        return;
    };
    let text = paragraph
        .iter()
        .map(|(_, l)| *l)
        .collect::<Vec<_>>()
        .join("\n");
    paragraph.clear();
    let (prose, spans) = split_code_spans(&text);
    for (offset, span) in spans {
        doc.code.push((first + line_of(&text, offset), span));
    }
    for (offset, target) in links_in(&prose) {
        doc.links.push(Link {
            line: first + line_of(&prose, offset),
            target,
        });
    }
}

/// Lines before `offset` in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    text[..offset].matches('\n').count()
}

/// The paragraph with each code span blanked out (same length, newlines kept), and the spans'
/// text with their offsets. An opening run of backticks closes at the next run of the same
/// length; one that never closes is literal text.
fn split_code_spans(text: &str) -> (String, Vec<(usize, String)>) {
    let bytes = text.as_bytes();
    let mut prose = String::with_capacity(text.len());
    let mut spans = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'`' {
            let next = text[i..].find('`').map_or(text.len(), |n| i + n);
            prose.push_str(&text[i..next]);
            i = next;
            continue;
        }
        let run = text[i..].bytes().take_while(|b| *b == b'`').count();
        let close = find_run(text, i + run, run);
        match close {
            Some(end) => {
                spans.push((i, text[i + run..end].replace('\n', " ")));
                let blank = text[i..end + run]
                    .chars()
                    .map(|c| if c == '\n' { '\n' } else { ' ' });
                prose.extend(blank);
                i = end + run;
            }
            None => {
                prose.push_str(&text[i..i + run]);
                i += run;
            }
        }
    }
    (prose, spans)
}

/// Where the next run of exactly `run` backticks starts, from `from`.
fn find_run(text: &str, from: usize, run: usize) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut i = from;
    while i < bytes.len() {
        if bytes[i] == b'`' {
            let len = text[i..].bytes().take_while(|b| *b == b'`').count();
            if len == run {
                return Some(i);
            }
            i += len;
        } else {
            i += 1;
        }
    }
    None
}

/// Every link target in prose (code already taken out), with its byte offset.
fn links_in(prose: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    let mut seen = String::from(prose); // inline targets blanked out before looking for bare URLs
    for (at, _) in prose.match_indices("](") {
        let start = at + 2;
        let target = destination(&prose[start..]);
        if !target.is_empty() {
            seen.replace_range(start..start + target.len(), &" ".repeat(target.len()));
        }
        found.push((
            start,
            target.trim_matches(|c| c == '<' || c == '>').to_owned(),
        ));
    }
    for (offset, line) in line_offsets(&seen) {
        let trimmed = line.trim_start();
        if let Some(rest) = trimmed.strip_prefix('[').and_then(|r| r.split_once("]:")) {
            let at = offset + (line.len() - trimmed.len());
            found.push((
                at,
                rest.1.split_whitespace().next().unwrap_or("").to_owned(),
            ));
        }
    }
    for (at, target) in autolinks(&seen) {
        seen.replace_range(at..at + target.len() + 2, &" ".repeat(target.len() + 2));
        found.push((at, target));
    }
    found.extend(bare_urls(&seen));
    for attribute in ["href=\"", "src=\""] {
        for (at, _) in seen.match_indices(attribute) {
            let value = &seen[at + attribute.len()..];
            let end = value.find('"').unwrap_or(value.len());
            found.push((at, value[..end].to_owned()));
        }
    }
    found.sort();
    found
}

/// An inline link's destination: `<...>`, or up to whitespace or the `)` that closes it.
fn destination(rest: &str) -> &str {
    if rest.starts_with('<') {
        return rest.find('>').map_or(rest, |end| &rest[..=end]);
    }
    let mut depth = 0usize;
    for (i, c) in rest.char_indices() {
        match c {
            '(' => depth += 1,
            ')' if depth == 0 => return &rest[..i],
            ')' => depth -= 1,
            c if c.is_whitespace() => return &rest[..i],
            _ => {}
        }
    }
    rest
}

fn line_offsets(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.split('\n').scan(0, |offset, line| {
        let at = *offset;
        *offset += line.len() + 1;
        Some((at, line))
    })
}

/// `<scheme:...>` and `<name@host>`.
fn autolinks(prose: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (at, _) in prose.match_indices('<') {
        let rest = &prose[at + 1..];
        let Some(end) = rest.find('>') else { continue };
        let inner = &rest[..end];
        if inner.contains(char::is_whitespace) || inner.is_empty() {
            continue;
        }
        if has_scheme(inner) || (inner.contains('@') && inner.contains('.')) {
            found.push((at, inner.to_owned()));
        }
    }
    found
}

/// URLs GitHub links by themselves: `http://`, `https://` and `www.` in running text.
fn bare_urls(prose: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for pattern in ["http://", "https://", "www."] {
        for (at, _) in prose.match_indices(pattern) {
            let boundary = prose[..at]
                .chars()
                .next_back()
                .is_none_or(|c| !c.is_alphanumeric() && c != '/' && c != '.');
            if boundary {
                let url = prose[at..].split(char::is_whitespace).next().unwrap_or("");
                // As GitHub does: trailing punctuation ends the sentence, not the URL.
                let url = url.trim_end_matches(['.', ',', ':', ';', '!', '?', ')', '"', '\'']);
                found.push((at, url.to_owned()));
            }
        }
    }
    found
}

/// Whether a link target starts with a URL scheme (`https:`, `mailto:`, `file:`).
pub fn has_scheme(target: &str) -> bool {
    let Some((scheme, _)) = target.split_once(':') else {
        return false;
    };
    let mut chars = scheme.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '.' | '-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn targets(text: &str) -> Vec<String> {
        parse(text).links.into_iter().map(|l| l.target).collect()
    }

    #[test]
    fn links_of_every_kind_are_found_and_code_holds_none() {
        let text = "# Title\n\nSee [a](docs/a.md#x), ![b](img.png \"t\") and\n[c](<d e.md>).\n\n\
                    [ref]: ../up.md\n\nAt <https://example.org> or https://example.com/x, \
                    www.example.net, <a href=\"h.html\">.\n\n```sh\n[no](code.md) https://in.code\n\
                    ```\n\nNot `[span](s.md)` nor ``x ` [y](z.md)``.\n\n    [indented](i.md)\n";
        assert_eq!(
            targets(text),
            [
                "docs/a.md#x",
                "img.png",
                "d e.md",
                "../up.md",
                "https://example.org",
                "https://example.com/x",
                "www.example.net",
                "h.html",
            ]
        );
    }

    #[test]
    fn code_spans_may_run_over_lines_and_keep_line_numbers() {
        let doc = parse("intro\n\nwords `stackscope\nattach --pid 1` then [x](y.md)\n");
        assert_eq!(doc.code, [(3, "stackscope attach --pid 1".to_owned())]);
        assert_eq!(
            doc.links,
            [Link {
                line: 4,
                target: "y.md".to_owned()
            }]
        );
    }

    #[test]
    fn a_list_items_indented_text_is_not_code() {
        let doc = parse("- item\n\n    more of the item, [l](l.md)\n");
        assert!(doc.code.is_empty(), "{:?}", doc.code);
        assert_eq!(
            targets("- item\n\n    more of the item, [l](l.md)\n"),
            ["l.md"]
        );
    }

    #[test]
    fn anchors_are_githubs() {
        let doc = parse(
            "# What a sleeping thread's OS state costs\n## `summary.json`\n\
             ## Today's figures\n## Today's figures\n## A [link](x.md) and `code_x`\n",
        );
        assert_eq!(
            doc.anchors,
            [
                "what-a-sleeping-threads-os-state-costs",
                "summaryjson",
                "todays-figures",
                "todays-figures-1",
                "a-link-and-code_x",
            ]
        );
    }

    #[test]
    fn schemes_are_told_from_paths() {
        assert!(has_scheme("https://example.org"));
        assert!(has_scheme("mailto:someone@example.org"));
        assert!(!has_scheme("docs/a.md"));
        assert!(!has_scheme("#a:b"));
    }
}
