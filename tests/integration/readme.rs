//! README.md and docs/ as a newcomer meets them: every link leads to a file (and a heading)
//! inside the repository and none leaves it, so the docs read the same from a clone, a
//! tarball or the wheel's metadata; and every `stackscope COMMAND` the README shows in code is
//! a command the binary has, while every command the binary has is shown there.

mod install_name;
mod markdown;

use std::collections::BTreeSet;
use std::fs;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use crate::common::*;
use markdown::{has_scheme, parse};

const RUN_TIMEOUT: Duration = Duration::from_secs(30);

/// README.md and every Markdown file in docs/, relative to the repository's root.
fn documents() -> Vec<PathBuf> {
    let docs = repo_root().join("docs");
    let mut found: Vec<PathBuf> = fs::read_dir(&docs)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", docs.display()))
        .map(|entry| entry.expect("a docs/ entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .map(|path| Path::new("docs").join(path.file_name().expect("a file name")))
        .collect();
    found.sort();
    assert!(!found.is_empty(), "no Markdown files in {}", docs.display());
    found.insert(0, PathBuf::from("README.md"));
    found
}

fn read(relative: &Path) -> String {
    let path = repo_root().join(relative);
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// `%20` and the like, as a browser reads a link's path.
fn percent_decoded(path: &str) -> String {
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `path`, relative to the directory of the document `from`, as a path relative to the
/// repository's root; `None` when it climbs out of the repository.
fn resolve(from: &Path, path: &str) -> Option<PathBuf> {
    let mut parts: Vec<String> = from
        .parent()
        .into_iter()
        .flat_map(Path::components)
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    for component in Path::new(path).components() {
        match component {
            Component::ParentDir => {
                parts.pop()?;
            }
            Component::Normal(name) => parts.push(name.to_string_lossy().into_owned()),
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(parts.iter().collect())
}

/// Why a link of the document `from` is wrong, if it is.
fn link_problem(from: &Path, own_anchors: &[String], target: &str) -> Option<String> {
    if target.is_empty() {
        return Some("an empty link".into());
    }
    if let Some(anchor) = target.strip_prefix('#') {
        return (!own_anchors.iter().any(|a| a == anchor))
            .then(|| format!("no heading with the anchor #{anchor} in this file"));
    }
    if has_scheme(target) || target.starts_with('/') || target.starts_with("www.") {
        return Some("outside the repository: link to a file in it instead".into());
    }
    let (path, anchor) = target.split_once('#').unwrap_or((target, ""));
    let path = path.split_once('?').map_or(path, |(p, _)| p);
    let Some(relative) = resolve(from, &percent_decoded(path)) else {
        return Some("climbs out of the repository".into());
    };
    if !repo_root().join(&relative).exists() {
        return Some(format!("no such file: {}", relative.display()));
    }
    let is_markdown = relative.extension().is_some_and(|e| e == "md");
    if anchor.is_empty() || !is_markdown {
        return None;
    }
    let anchors = parse(&read(&relative)).anchors;
    (!anchors.iter().any(|a| a == anchor)).then(|| {
        format!(
            "no heading with the anchor #{anchor} in {}",
            relative.display()
        )
    })
}

#[test]
fn docs_link_only_to_files_and_headings_inside_the_repository() {
    let mut problems = Vec::new();
    let mut links = 0;
    for document in documents() {
        let doc = parse(&read(&document));
        for link in &doc.links {
            links += 1;
            if let Some(why) = link_problem(&document, &doc.anchors, &link.target) {
                problems.push(format!(
                    "{}:{}: ({}) {why}",
                    document.display(),
                    link.line,
                    link.target
                ));
            }
        }
    }
    assert!(links > 0, "no links found at all: the parser is broken");
    println!("{links} links checked");
    assert!(
        problems.is_empty(),
        "{} bad link(s) in README.md and docs/:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

/// The subcommands `code` runs: each `stackscope WORD` where `stackscope` stands as a word of
/// its own (a path ending in it counts: `target/release/stackscope attach`) and WORD is a
/// lower-case word on the same line (not a flag, not a placeholder like `COMMAND`).
fn subcommands_in(code: &str) -> Vec<String> {
    const NAME: &str = "stackscope";
    let mut found = Vec::new();
    for (at, _) in code.match_indices(NAME) {
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '.')) {
            continue;
        }
        let rest = &code[at + NAME.len()..];
        if !rest.starts_with([' ', '\t']) {
            continue;
        }
        let rest = rest.trim_start_matches([' ', '\t']);
        let word: String = rest
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-')
            .collect();
        let after = rest[word.len()..].chars().next();
        let ends = after.is_none_or(|c| c.is_whitespace() || matches!(c, '\'' | '"' | ')' | ';'));
        if word.starts_with(|c: char| c.is_ascii_lowercase()) && ends {
            found.push(word);
        }
    }
    found
}

/// The commands `stackscope --help` lists, but `help`.
fn binary_commands() -> BTreeSet<String> {
    let run = run_stackscope(&["--help"], RUN_TIMEOUT);
    run.assert_success();
    let listed = run
        .stdout
        .split_once("Commands:\n")
        .map(|(_, rest)| rest.split("\n\n").next().unwrap_or(""))
        .unwrap_or_else(|| panic!("no command list in --help\n{}", run.describe()));
    listed
        .lines()
        .filter(|line| line.starts_with("  ") && !line.starts_with("   "))
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_command_the_readme_shows_exists_and_every_command_is_shown() {
    let readme = parse(&read(Path::new("README.md")));
    let shown: BTreeSet<String> = readme
        .code
        .iter()
        .flat_map(|(_, code)| subcommands_in(code))
        .collect();
    for command in &shown {
        let run = run_stackscope(&["help", command], RUN_TIMEOUT);
        assert_eq!(
            run.code(),
            Some(0),
            "README.md shows `stackscope {command}`, which is no command\n{}",
            run.describe()
        );
    }
    println!("README.md shows {shown:?}");
    let commands = binary_commands();
    assert!(
        commands.len() >= 9,
        "too few commands in --help: {commands:?}"
    );
    let unshown: Vec<&String> = commands.difference(&shown).collect();
    assert!(
        unshown.is_empty(),
        "README.md shows no example of {unshown:?} (it shows {shown:?})"
    );
}

#[test]
fn commands_are_read_from_code_as_a_reader_would_run_it() {
    let code = "pip install stackscope\nsudo stackscope attach --pid 1\n\
                target/release/stackscope dump --pid 1; stackscope --version\n\
                uvx stackscope ...\nkubectl exec POD -c stackscope -- sh\nls /var/log/stackscope\n\
                stackscope: process 5 looks hung\nstackscope COMMAND\nstackscope-demo/report.html\n\
                sh -c 'stackscope merge dumps/*.json'";
    assert_eq!(subcommands_in(code), ["attach", "dump", "merge"]);
}

#[test]
fn links_out_of_the_repository_or_to_nothing_are_problems() {
    let from = Path::new("docs/a.md");
    let anchors = ["here".to_owned()];
    for (target, problem) in [
        ("https://example.org", true),
        ("www.example.org", true),
        ("/etc/passwd", true),
        ("../../outside.md", true),
        ("../../shared/DESIGN.md", true),
        ("no-such-file.md", true),
        ("#nowhere", true),
        ("#here", false),
        ("../README.md", false),
        ("architecture.md#the-outputs", false),
        ("architecture.md#no-such-heading", true),
        ("../fixtures/train_sim.py", false),
    ] {
        assert_eq!(
            link_problem(from, &anchors, target).is_some(),
            problem,
            "{target}: {:?}",
            link_problem(from, &anchors, target)
        );
    }
}
