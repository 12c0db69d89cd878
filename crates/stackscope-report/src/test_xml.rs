//! Test helper: parses an SVG as XML, failing the test on anything malformed, and collects the
//! text a person would read in it.

use quick_xml::escape::resolve_predefined_entity;
use quick_xml::events::Event;
use quick_xml::Reader;

#[derive(Debug, Default)]
pub struct Svg {
    /// The root element's name.
    pub root: String,
    /// Contents of `<title>` elements (flamegraph tooltips).
    pub titles: Vec<String>,
    /// Contents of `<text>` elements.
    pub texts: Vec<String>,
    /// How many elements of each name, in document order of first appearance.
    pub elements: Vec<String>,
}

pub fn parse_svg(bytes: &[u8]) -> Svg {
    let mut reader = Reader::from_reader(bytes);
    let mut buf = Vec::new();
    let mut svg = Svg::default();
    let mut open: Vec<String> = Vec::new();
    let mut current = String::new();
    loop {
        let event = reader.read_event_into(&mut buf).expect("well-formed XML");
        match event {
            Event::Start(e) => {
                let name = String::from_utf8_lossy(e.name().as_ref()).into_owned();
                if svg.root.is_empty() {
                    svg.root.clone_from(&name);
                }
                svg.elements.push(name.clone());
                open.push(name);
                current.clear();
            }
            Event::Empty(e) => {
                let name = String::from_utf8_lossy(e.name().as_ref()).into_owned();
                svg.elements.push(name);
            }
            Event::Text(t) => current.push_str(&t.decode().expect("utf8")),
            Event::CData(t) => current.push_str(&t.decode().expect("utf8")),
            Event::GeneralRef(r) => {
                if let Some(c) = r.resolve_char_ref().expect("char ref") {
                    current.push(c);
                } else {
                    let name = r.decode().expect("utf8");
                    current.push_str(resolve_predefined_entity(&name).expect("known entity"));
                }
            }
            Event::End(_) => {
                let name = open.pop().expect("balanced tags");
                match name.as_str() {
                    "title" => svg.titles.push(current.trim().to_owned()),
                    "text" => svg.texts.push(current.trim().to_owned()),
                    _ => {}
                }
                current.clear();
            }
            Event::Eof => break,
            _ => {}
        }
        buf.clear();
    }
    assert!(open.is_empty(), "unclosed elements: {open:?}");
    assert!(!svg.root.is_empty(), "no root element");
    svg
}
