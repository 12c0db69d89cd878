//! Secrets kept out of what stackscope prints and saves: a local variable whose name looks like
//! a secret (a password, a token, a key) has its value replaced by [`REDACTED`] in `dump
//! --locals` and in `watch`'s hang reports, which are kept on disk, unless `--show-secrets`.
//!
//! The rule is by name only, and errs on the side of hiding: `author` is hidden with `auth`.
//! Names inside a value count too: a secret held in a dict under an innocent name
//! (`config = {'password': ...}`) has the item's value hidden ([`items`]).

mod items;

use stackscope_event::ProcessDump;

/// What a secret-looking local's value becomes.
pub const REDACTED: &str = "<redacted>";

/// Parts of a name (lower case) that make a local look like a secret.
pub const SECRET_NAME_PARTS: [&str; 11] = [
    "password",
    "passwd",
    "secret",
    "token",
    "api_key",
    "apikey",
    "auth",
    "credential",
    "private_key",
    "cookie",
    "session",
];

/// Whether a local variable named `name` looks like it holds a secret: its name contains,
/// whatever the case, one of [`SECRET_NAME_PARTS`].
pub fn looks_secret(name: &str) -> bool {
    let name = name.to_lowercase();
    SECRET_NAME_PARTS.iter().any(|part| name.contains(part))
}

/// Replaces the value of every secret-looking local of every frame by [`REDACTED`], and in
/// the others the value of every dict item under a secret-looking key; returns how many values
/// it hid. A value that could not be read (`None`) stays unread.
pub fn redact_secrets(processes: &mut [ProcessDump]) -> usize {
    let mut hidden = 0;
    let locals = processes
        .iter_mut()
        .flat_map(|p| p.threads.iter_mut())
        .flat_map(|t| t.frames.iter_mut())
        .filter_map(|f| f.locals.as_mut())
        .flatten();
    for local in locals {
        let Some(repr) = &local.repr else { continue };
        if looks_secret(&local.name) {
            local.repr = Some(REDACTED.to_owned());
            hidden += 1;
        } else if let Some((shown, n)) = items::redact_items(repr) {
            local.repr = Some(shown);
            hidden += n;
        }
    }
    hidden
}

#[cfg(test)]
mod tests {
    use super::*;
    use stackscope_event::{LocalVariable, ThreadState};
    use stackscope_testkit::dumps;

    fn local(name: &str, repr: Option<&str>) -> LocalVariable {
        LocalVariable {
            name: name.to_owned(),
            repr: repr.map(str::to_owned),
            arg: false,
        }
    }

    fn dump(locals: Vec<LocalVariable>) -> Vec<ProcessDump> {
        let mut frame = dumps::frame("login", "job.py", 3);
        frame.locals = Some(locals);
        vec![dumps::process(
            1,
            "python3 job.py",
            vec![dumps::thread(
                "MainThread",
                1,
                ThreadState::WaitingOnLock,
                vec![frame],
            )],
        )]
    }

    #[test]
    fn secret_looking_names_whatever_their_case() {
        for name in [
            "password",
            "DB_PASSWORD",
            "passwd",
            "client_secret",
            "api_token",
            "AccessToken",
            "api_key",
            "OPENAI_APIKEY",
            "auth",
            "authorization",
            "credentials",
            "ssh_private_key",
            "cookie_jar",
            "Session",
        ] {
            assert!(looks_secret(name), "{name}");
        }
        for name in [
            "batch",
            "key",
            "keys",
            "private",
            "pass_count",
            "tok",
            "step",
        ] {
            assert!(!looks_secret(name), "{name}");
        }
    }

    #[test]
    fn only_secret_values_are_hidden() {
        let mut processes = dump(vec![
            local("api_token", Some("'tok-123'")),
            local("password", Some("'hunter2'")),
            local("batch_size", Some("32")),
            local("session", None),
            local("config", Some(r#"{"api_key": "sk-1", "lr": 0.1}"#)),
        ]);
        assert_eq!(redact_secrets(&mut processes), 3);
        let locals = processes[0].threads[0].frames[0]
            .locals
            .as_ref()
            .expect("locals");
        let reprs: Vec<Option<&str>> = locals.iter().map(|l| l.repr.as_deref()).collect();
        assert_eq!(
            reprs,
            vec![
                Some(REDACTED),
                Some(REDACTED),
                Some("32"),
                None,
                Some(r#"{"api_key": <redacted>, "lr": 0.1}"#)
            ],
            "names stay, values go"
        );
        assert_eq!(locals[0].name, "api_token");
    }
}
