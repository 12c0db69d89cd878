//! README's install lines against pyproject.toml: `pip install NAME`, `pipx run --spec NAME
//! stackscope` and `uvx --from NAME stackscope` install the distribution pyproject.toml
//! builds, and that distribution is not `stackscope` (an unrelated project on PyPI).

use std::path::Path;

use super::markdown::parse;
use super::read;

/// The ways README installs or runs the wheel: the words before the distribution's name, and
/// the word that must follow it (the command, for the runners that take a package and a
/// command apart).
const INSTALLERS: [(&str, Option<&str>); 3] = [
    ("pip install", None),
    ("pipx run --spec", Some("stackscope")),
    ("uvx --from", Some("stackscope")),
];

/// `[project] name = "..."` of pyproject.toml.
fn pyproject_name(pyproject: &str) -> Option<String> {
    let project = pyproject.split("[project]").nth(1)?;
    let section = project.split("\n[").next()?;
    section.lines().find_map(|line| {
        let value = line.strip_prefix("name")?.trim_start().strip_prefix('=')?;
        Some(value.trim().trim_matches('"').to_owned())
    })
}

/// Every (installer, distribution name) README's code shows for stackscope, with what follows
/// the name: a runner's every line, and each `pip install` of a name that starts with
/// `stackscope` (not `pip install py-spy`). Quoted arguments (`pip install
/// "$(scripts/build-wheel ...)"`) install a file, not a name.
fn install_lines(code: &str) -> Vec<(&'static str, String, Option<String>)> {
    let mut found = Vec::new();
    for line in code.lines() {
        for (installer, _) in INSTALLERS {
            let Some((_, rest)) = line.split_once(installer) else {
                continue;
            };
            let mut words = rest.split_whitespace();
            let Some(name) = words.next() else { continue };
            if name.starts_with(['"', '\'', '-', '.', '/', '$'])
                || (installer == "pip install" && !name.starts_with("stackscope"))
            {
                continue;
            }
            found.push((installer, name.to_owned(), words.next().map(str::to_owned)));
        }
    }
    found
}

#[test]
fn install_lines_use_pyprojects_distribution_name() {
    let name = pyproject_name(&read(Path::new("pyproject.toml")))
        .expect("pyproject.toml has a [project] name");
    assert_ne!(
        name, "stackscope",
        "`stackscope` on PyPI is an unrelated project: the distribution needs a name of its own"
    );
    let readme = parse(&read(Path::new("README.md")));
    let lines: Vec<_> = readme
        .code
        .iter()
        .flat_map(|(_, code)| install_lines(code))
        .collect();
    for (installer, command) in INSTALLERS {
        let shown: Vec<_> = lines.iter().filter(|(i, ..)| *i == installer).collect();
        assert!(
            !shown.is_empty(),
            "README.md shows no `{installer} {name}` line"
        );
        for (_, installed, after) in shown {
            assert_eq!(
                installed, &name,
                "README.md's `{installer} {installed}` is not pyproject.toml's name"
            );
            if let Some(command) = command {
                assert_eq!(
                    after.as_deref(),
                    Some(command),
                    "README.md's `{installer} {installed}` runs no `{command}` command"
                );
            }
        }
    }
}

#[test]
fn install_lines_are_read_as_a_reader_would_run_them() {
    assert_eq!(
        pyproject_name("[build-system]\nname = \"x\"\n[project]\nname = \"abc-def\"\n[tool]\n"),
        Some("abc-def".to_owned())
    );
    let code = "pip install stackscope\npip install py-spy\npipx run --spec a-b stackscope ...\n\
                uvx --from a-b stackscope dump\npip install \"$(scripts/build-wheel x)\"\n\
                uvx --from c";
    let found = install_lines(code);
    let names: Vec<_> = found
        .iter()
        .map(|(i, n, a)| (*i, n.as_str(), a.as_deref()))
        .collect();
    assert_eq!(
        names,
        [
            ("pip install", "stackscope", None),
            ("pipx run --spec", "a-b", Some("stackscope")),
            ("uvx --from", "a-b", Some("stackscope")),
            ("uvx --from", "c", None),
        ]
    );
}
