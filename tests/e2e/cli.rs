//! Bad flags and bad config files fail at start with exit code 2 and a message naming the option.

use support::run_binary;

fn assert_exit2(args: &[&str], env: &[(&str, &str)], needles: &[&str]) {
    let (code, err) = run_binary(args, env);
    assert_eq!(code, 2, "{args:?}: exit {code}, stderr:\n{err}");
    for n in needles {
        assert!(err.contains(n), "{args:?}: stderr lacks {n:?}:\n{err}");
    }
}

#[test]
fn bad_flags_exit_2_naming_the_option() {
    assert_exit2(&["--listen", "nope"], &[], &["--listen", "'nope'"]);
    assert_exit2(&["--role", "admiral"], &[], &["--role", "admiral"]);
    assert_exit2(&["--interval", "soon"], &[], &["--interval", "'soon'"]);
    assert_exit2(
        &["--interval", "10s", "--timeout", "1m"],
        &[],
        &["--timeout", "must not exceed"],
    );
    assert_exit2(&["--log-format", "xml"], &[], &["--log-format", "xml"]);
    assert_exit2(&["--no-such-flag"], &[], &["--no-such-flag"]);
    assert_exit2(
        &[
            "--role",
            "host",
            "--procfs",
            "/no/such/dir",
            "--listen",
            "127.0.0.1:0",
        ],
        &[],
        &["--procfs", "/no/such/dir", "not a directory"],
    );
    assert_exit2(
        &["--kubeconfig", "/no/such/kubeconfig"],
        &[],
        &["--kubeconfig", "/no/such/kubeconfig"],
    );
}

#[test]
fn environment_fallbacks_are_validated_too() {
    assert_exit2(
        &[],
        &[("KUBE_PROBER_LISTEN", "1.2.3.4")],
        &["--listen", "'1.2.3.4'"],
    );
    assert_exit2(&[], &[("LOG_LEVEL", "=?=")], &["--log-level"]);
}

#[test]
fn bad_config_files_exit_2_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.to_string_lossy().into_owned()
    };
    let typo = write("typo.yaml", "lisen: 127.0.0.1:1\n");
    assert_exit2(
        &["--config", &typo],
        &[],
        &["unknown field `lisen`", "typo.yaml"],
    );
    let bad = write("bad.yaml", "tick_interval: forever\n");
    assert_exit2(&["--config", &bad], &[], &["--tick-interval", "'forever'"]);
    let broken = write("broken.yaml", "listen: [\n");
    assert_exit2(&["--config", &broken], &[], &["broken.yaml"]);
    assert_exit2(
        &["--config", "/no/such/file.yaml"],
        &[],
        &["/no/such/file.yaml"],
    );
}

const CONFIGURATION_DOC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/configuration.md");
const CLI_DOC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/cli.md");

/// `--help` of `path` (a subcommand path; empty for the top level).
fn help_of(path: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kube-prober"))
        .args(path)
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success(), "{path:?} --help: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// Whether `text` has `flag` as a whole word: `--shard` is not documented by
/// `--shard-from-statefulset`.
fn has_flag(text: &str, flag: &str) -> bool {
    text.match_indices(flag).any(|(i, _)| {
        let next = text[i + flag.len()..].chars().next();
        let prev = text[..i].chars().next_back();
        !next.is_some_and(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            && !prev.is_some_and(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    })
}

/// The visible long flags of `cmd` (clap's own definition, so a new flag is covered here at
/// once), each with its environment variable.
fn visible_flags(cmd: &clap::Command) -> Vec<(String, Option<String>)> {
    cmd.get_arguments()
        .filter(|a| !a.is_hide_set())
        .filter_map(|a| {
            let long = a.get_long()?;
            let env = a.get_env().map(|e| e.to_string_lossy().into_owned());
            Some((format!("--{long}"), env))
        })
        .collect()
}

/// Every visible flag of the CLI, taken from clap's command definition, is in `--help` (the
/// top level's and each subcommand's) and in docs/configuration.md's flag tables with its
/// environment variable.
#[test]
fn help_documents_every_option() {
    use clap::CommandFactory;
    let cli = kube_prober::config::cli::Cli::command();
    let top = visible_flags(&cli);
    assert!(top.len() > 70, "clap's definition lists the flags: {top:?}");
    let help = help_of(&[]);
    let readme = std::fs::read_to_string(CONFIGURATION_DOC).unwrap();
    // The rows of docs/configuration.md's flag tables (`| flag | env | file key | default | meaning |`),
    // by flag: `| `--flag` | `ENV` | ...`.
    let mut rows: std::collections::BTreeMap<&str, Vec<&str>> = Default::default();
    let mut in_table = false;
    for line in readme.lines() {
        if line == "| flag | env | file key | default | meaning |" {
            in_table = true;
        } else if !line.starts_with('|') {
            in_table = false;
        } else if in_table && line.starts_with("| `--") {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let flag = cells[1].trim_matches('`');
            assert!(
                rows.insert(flag, cells).is_none(),
                "docs/configuration.md documents {flag} twice"
            );
        }
    }
    let mut missing = Vec::new();
    for (flag, env) in &top {
        if !has_flag(&help, flag) {
            missing.push(format!("--help lacks {flag}"));
        }
        match rows.get(flag.as_str()) {
            None => missing.push(format!("docs/configuration.md's flag table lacks {flag}")),
            Some(cells) => {
                let want = env.as_ref().map(|e| format!("`{e}`")).unwrap_or_default();
                if cells[2] != want {
                    missing.push(format!(
                        "docs/configuration.md's row for {flag} names env {:?}, clap {want:?}",
                        cells[2]
                    ));
                }
            }
        }
    }
    // Subcommands' own flags in their own --help.
    fn walk(cmd: &clap::Command, path: &mut Vec<String>, missing: &mut Vec<String>) {
        for sub in cmd.get_subcommands() {
            path.push(sub.get_name().to_string());
            let args: Vec<&str> = path.iter().map(String::as_str).collect();
            let help = help_of(&args);
            for (flag, _) in visible_flags(sub) {
                if !has_flag(&help, &flag) {
                    missing.push(format!("{} --help lacks {flag}", args.join(" ")));
                }
            }
            walk(sub, path, missing);
            path.pop();
        }
    }
    walk(&cli, &mut Vec::new(), &mut missing);
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

/// docs/cli.md: every command's `--help`, the top level's first, under a heading each.
fn cli_doc() -> String {
    use clap::CommandFactory;
    fn walk(cmd: &clap::Command, path: &mut Vec<String>, out: &mut String) {
        let args: Vec<&str> = path.iter().map(String::as_str).collect();
        let title = ["kube-prober"].into_iter().chain(args.iter().copied());
        out.push_str(&format!(
            "\n## `{} --help`\n\n```text\n{}```\n",
            title.collect::<Vec<_>>().join(" "),
            help_of(&args)
        ));
        for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
            path.push(sub.get_name().to_string());
            walk(sub, path, out);
            path.pop();
        }
    }
    let mut out = String::from(
        "# Command line\n\n\
         <!-- Generated from the binary by tests/e2e/cli.rs; do not edit. \
         UPDATE_GOLDEN=1 cargo test --test e2e -- cli:: rewrites it. -->\n\n\
         Every command's `--help`, exactly as the binary prints it. What each option does in \
         detail, with its environment variable, config-file key and default, is in \
         [configuration.md](configuration.md).\n",
    );
    walk(
        &kube_prober::config::cli::Cli::command(),
        &mut Vec::new(),
        &mut out,
    );
    out
}

/// docs/cli.md is the exact `--help` of every command, so the reference a user reads is the
/// one the binary prints: it fails on any drift, and `UPDATE_GOLDEN=1` rewrites the page
/// (refused under `CI`).
#[test]
fn cli_doc_is_every_commands_help() {
    support::assert_generated(std::path::Path::new(CLI_DOC), &cli_doc());
}
