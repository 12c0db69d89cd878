//! report.html in a real browser: headless Chromium (Debian's `chromium`, which `.ci/run`
//! installs) on a page from disk, what its DOM holds once its scripts ran, what a screenshot
//! shows, and a probe script a test adds to a copy of the page to read the layout (bounding
//! boxes) that the DOM alone does not say.

use super::run_with_timeout;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const RUN_TIMEOUT: Duration = Duration::from_secs(90);
/// The window the browser checks use unless a test names one.
pub const DEFAULT_WINDOW: (u32, u32) = (1300, 1100);

/// Headless Chromium with a fresh profile, network features off.
pub struct Browser {
    exe: PathBuf,
}

impl Browser {
    /// Chromium on PATH; `None` (and the test prints one line and skips) without it.
    pub fn find() -> Option<Browser> {
        let names = ["chromium", "chromium-browser", "google-chrome"];
        let path = std::env::var_os("PATH")?;
        for dir in std::env::split_paths(&path) {
            for name in names {
                let exe = dir.join(name);
                if exe.is_file() {
                    return Some(Browser { exe });
                }
            }
        }
        None
    }

    /// Runs Chromium on `url` with `extra` arguments in the default window; returns (stdout,
    /// stderr).
    pub fn run(&self, url: &str, extra: &[&str]) -> (String, String) {
        self.run_at(url, DEFAULT_WINDOW, extra)
    }

    /// Runs Chromium on `url` in a window of `size` (CSS pixels) with `extra` arguments.
    pub fn run_at(&self, url: &str, size: (u32, u32), extra: &[&str]) -> (String, String) {
        let profile = tempfile::tempdir().expect("profile dir");
        let mut cmd = Command::new(&self.exe);
        cmd.args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--force-device-scale-factor=1",
            "--enable-logging=stderr",
            "--v=0",
            "--virtual-time-budget=10000",
        ])
        .arg(format!("--window-size={},{}", size.0, size.1))
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(extra)
        .arg(url);
        let run = run_with_timeout(cmd, RUN_TIMEOUT);
        assert_eq!(run.code(), Some(0), "chromium failed\n{}", run.describe());
        (run.stdout, run.stderr)
    }

    /// The page's DOM after its scripts ran.
    pub fn dom(&self, url: &str) -> String {
        self.dom_at(url, DEFAULT_WINDOW)
    }

    /// The page's DOM after its scripts ran, in a window of `size`.
    pub fn dom_at(&self, url: &str, size: (u32, u32)) -> String {
        let (dom, stderr) = self.run_at(url, size, &["--dump-dom"]);
        // The page's Content-Security-Policy blocks anything from outside the file; Chromium
        // logs each blocked load to the console.
        assert!(
            !stderr.contains("Content Security Policy"),
            "the page tried to load something from outside itself:\n{stderr}"
        );
        assert!(
            !stderr.contains("Uncaught"),
            "the page's script failed:\n{stderr}"
        );
        assert!(
            dom.contains("data-ready=\"1\""),
            "the page's script did not finish:\n{stderr}"
        );
        dom
    }

    /// A screenshot of the first screen of `url` in a window of `size`.
    pub fn screenshot(&self, url: &str, size: (u32, u32), dir: &Path) -> Image {
        let shot = dir.join("screenshot.png");
        let arg = format!("--screenshot={}", shot.display());
        self.run_at(url, size, &[&arg]);
        Image::read(&shot)
    }
}

pub fn file_url(path: &Path, fragment: &str) -> String {
    let path = fs::canonicalize(path).expect("canonical path");
    format!("file://{}{fragment}", path.display())
}

/// The text of the element with `id`, up to its next tag.
pub fn element_text<'a>(dom: &'a str, id: &str) -> &'a str {
    let open = format!("id=\"{id}\"");
    let at = dom
        .find(&open)
        .unwrap_or_else(|| panic!("no #{id} in the page"));
    let rest = &dom[at..];
    let start = rest.find('>').map_or(0, |i| i + 1);
    let end = rest[start..].find('<').map_or(rest.len(), |i| start + i);
    &rest[start..end]
}

/// The texts of the elements with `class`, in the order of the DOM.
pub fn texts_of_class<'a>(dom: &'a str, class: &str) -> Vec<&'a str> {
    let open = format!("class=\"{class}\"");
    dom.match_indices(&open)
        .map(|(at, _)| {
            let rest = &dom[at..];
            let start = rest.find('>').map_or(0, |i| i + 1);
            let end = rest[start..].find('<').map_or(rest.len(), |i| start + i);
            &rest[start..end]
        })
        .collect()
}

/// The page's embedded data (`<script id="stackscope-data">`), as JSON.
pub fn page_data(html: &str) -> serde_json::Value {
    let open = "id=\"stackscope-data\">";
    let at = html.find(open).expect("the page's data") + open.len();
    let end = at
        + html[at..]
            .find("</script>")
            .expect("end of the page's data");
    serde_json::from_str(&html[at..end]).expect("the page's data is JSON")
}

/// The file names nothing outside itself: no external scripts, styles, images, frames or
/// imports, and it carries the policy that makes the browser refuse any.
pub fn assert_self_contained(html: &str) {
    for needle in [
        "<script src",
        "<link",
        "<img",
        "<iframe",
        "@import",
        "url(http",
        "src=\"http",
        "href=\"http",
        "src=\"//",
    ] {
        assert!(!html.contains(needle), "report.html holds {needle:?}");
    }
    assert!(
        html.contains("http-equiv=\"Content-Security-Policy\" content=\"default-src 'none';"),
        "no content security policy"
    );
}

/// Reads, once the page has drawn, the layout of its flamegraph and timeline legend into
/// `<pre id="probe">` as JSON: the viewport, the flamegraph's box, each drawn frame's box with
/// its depth, its parent's index (-1 for the root), its fill, its width attribute, its name and
/// its samples (`value`), and each
/// legend entry's colour, width, dash, label, the stroke of its drawn sample and its value once
/// the cursor is moved over the middle of the timeline (`cursor`: the time there).
const PROBE: &str = r##"<script>
window.addEventListener("load", function () { setTimeout(function () {
  var box = function (el) { var r = el.getBoundingClientRect();
    return { top: r.top, bottom: r.bottom, left: r.left, right: r.right }; };
  var out = { width: innerWidth, height: innerHeight, hash: location.hash, frames: [], legend: [] };
  var svg = document.querySelector("#flamegraph svg");
  out.svg = box(svg);
  out.svg_height = +svg.getAttribute("height");
  out.timeline = box(document.querySelector("#timeline .uplot canvas"));
  var nodes = [];
  svg.querySelectorAll("g").forEach(function (g) { nodes.push(g.__data__); });
  svg.querySelectorAll("g").forEach(function (g) {
    var d = g.__data__, r = g.querySelector("rect"), f = box(r);
    f.depth = d.depth; f.parent = nodes.indexOf(d.parent); f.fill = r.getAttribute("fill");
    f.width_attr = +r.getAttribute("width");
    f.name = d.data && d.data.name; f.value = d.value;
    out.frames.push(f);
  });
  document.querySelectorAll("#timeline-legend .legend-series").forEach(function (e) {
    out.legend.push({ colour: e.getAttribute("data-colour"), width: +e.getAttribute("data-width"),
      dash: e.getAttribute("data-dash"), label: e.querySelector(".legend-label").textContent,
      stroke: e.querySelector("line").getAttribute("stroke") });
  });
  // The cursor over the middle of the plot: the legend shows the values there.
  var over = document.querySelector("#timeline .u-over"), o = over.getBoundingClientRect();
  over.dispatchEvent(new MouseEvent("mousemove", { clientX: o.left + o.width / 2,
    clientY: o.top + o.height / 2, bubbles: true }));
  out.cursor = document.querySelector("#timeline-legend .legend-time").textContent;
  document.querySelectorAll("#timeline-legend .legend-value").forEach(function (v, i) {
    out.legend[i].value = v.textContent;
  });
  var pre = document.createElement("pre");
  pre.id = "probe";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
}, 100); });
</script>"##;

/// A copy of the page at `page` with the probe added, beside it; open it with
/// [`Browser::dom_at`] and read the result with [`probe_of`].
pub fn with_probe(page: &Path) -> PathBuf {
    let html = fs::read_to_string(page).expect("report.html");
    let at = html.rfind("</body>").expect("</body>");
    let probed = page.with_file_name("probed.html");
    fs::write(&probed, format!("{}{PROBE}{}", &html[..at], &html[at..])).expect("probed page");
    probed
}

/// What the probe wrote into the DOM.
pub fn probe_of(dom: &str) -> serde_json::Value {
    let text = element_text(dom, "probe")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("the probe's JSON: {e}\n{text}"))
}

/// A decoded screenshot: RGB pixels, row by row.
pub struct Image {
    pub width: usize,
    pub height: usize,
    pub pixels: Vec<[u8; 3]>,
}

impl Image {
    pub fn read(path: &Path) -> Image {
        let file = fs::File::open(path).expect("screenshot");
        let decoder = png::Decoder::new(std::io::BufReader::new(file));
        let mut reader = decoder.read_info().expect("a PNG");
        let mut buf = vec![0; reader.output_buffer_size()];
        let info = reader.next_frame(&mut buf).expect("a frame");
        let channels = info.color_type.samples();
        let pixels = buf[..info.buffer_size()]
            .chunks(channels)
            .map(|px| [px[0], px[1 % channels], px[2 % channels]])
            .collect();
        Image {
            width: info.width as usize,
            height: info.height as usize,
            pixels,
        }
    }

    /// The pixels of rows `rows` and columns `cols`.
    pub fn region(
        &self,
        rows: std::ops::Range<usize>,
        cols: std::ops::Range<usize>,
    ) -> impl Iterator<Item = [u8; 3]> + '_ {
        rows.flat_map(move |y| {
            let cols = cols.clone();
            cols.map(move |x| self.pixels[y * self.width + x])
        })
    }

    /// Distinct colours and the share of pixels that are not white.
    pub fn stats(&self) -> (usize, f64) {
        let colours: std::collections::HashSet<_> = self.pixels.iter().collect();
        let non_white = self.pixels.iter().filter(|&&p| p != [255; 3]).count();
        (
            colours.len(),
            non_white as f64 / self.pixels.len().max(1) as f64,
        )
    }
}

/// `#rrggbb` or `rgb(r,g,b)` as RGB.
pub fn parse_colour(text: &str) -> [u8; 3] {
    if let Some(hex) = text.strip_prefix('#') {
        let byte = |i: usize| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex colour");
        return [byte(0), byte(2), byte(4)];
    }
    let inner = text
        .trim_start_matches("rgb(")
        .trim_end_matches(')')
        .split(',')
        .map(|c| c.trim().parse::<u8>().expect("rgb colour"))
        .collect::<Vec<_>>();
    [inner[0], inner[1], inner[2]]
}

/// Whether two colours differ by at most `tolerance` in every channel.
pub fn near(a: [u8; 3], b: [u8; 3], tolerance: u8) -> bool {
    a.iter().zip(b).all(|(x, y)| x.abs_diff(y) <= tolerance)
}
