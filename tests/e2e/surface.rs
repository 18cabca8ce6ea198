//! The user-facing surface, pinned: the binary's `--help` (and every subcommand's), and every
//! config-file key with the flag, environment variable, values and default it mirrors. Users and
//! manifests depend on these names; a change shows as a diff of `tests/golden/cli-help.txt` or
//! `tests/golden/config-keys.txt` (`UPDATE_GOLDEN=1` rewrites them).

use std::process::{Command, Stdio};

use clap::CommandFactory;
use kube_prober::config::FileConfig;
use kube_prober::config::cli::Cli;
use kube_prober::sources::probe::options::PROBE_NAMES;

/// The subcommand paths whose `--help` is pinned, the binary itself first.
const SUBCOMMANDS: &[&[&str]] = &[
    &[],
    &["gcm"],
    &["gcm", "descriptors"],
    &["gcm", "descriptors", "list"],
    &["gcm", "descriptors", "delete"],
];

/// Config-file keys whose flag is not the key with dashes: (key, flag without `--`).
const KEY_FLAGS: &[(&str, &str)] = &[("sinks", "sink")];

/// `kube-prober ARGS --help` with an empty environment (clap prints a set variable's value)
/// and a fixed width.
fn help(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_kube-prober"))
        .args(args)
        .arg("--help")
        .env_clear()
        .env("COLUMNS", "100")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{args:?} --help: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn help_is_unchanged() {
    let mut text = String::new();
    for args in SUBCOMMANDS {
        let title = std::iter::once("kube-prober")
            .chain(args.iter().copied())
            .collect::<Vec<_>>()
            .join(" ");
        text.push_str(&format!("==== {title} --help\n{}\n", help(args)));
    }
    support::assert_golden("cli-help.txt", &text);
}

/// The names serde lists in its "unknown field" message for `yaml` (which holds one unknown key).
fn known_keys(yaml: &str) -> Vec<String> {
    let err = FileConfig::parse(yaml)
        .expect_err("an unknown key is an error")
        .to_string();
    let (_, expected) = err
        .split_once("expected one of ")
        .unwrap_or_else(|| panic!("no key list in {err:?}"));
    let expected = expected.split(" (did you mean").next().unwrap_or_default();
    expected
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// `[default: ...]` from a help text, if it names one.
fn default_in(help: &str) -> Option<String> {
    let (_, rest) = help.split_once("[default: ")?;
    let mut depth = 1;
    let end = rest.char_indices().find_map(|(i, c)| {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            _ => {}
        }
        (depth == 0).then_some(i)
    })?;
    Some(rest[..end].split_whitespace().collect::<Vec<_>>().join(" "))
}

/// One flag as a block: its flag, environment variable, value name, values, default and help.
fn describe(arg: &clap::Arg) -> String {
    let mut s = String::new();
    let long = arg.get_long().unwrap_or_default();
    let value = arg
        .get_value_names()
        .map(|v| v.iter().map(|n| format!(" <{n}>")).collect::<String>())
        .unwrap_or_default();
    s.push_str(&format!("  flag: --{long}{value}\n"));
    if let Some(env) = arg.get_env() {
        s.push_str(&format!("  env: {}\n", env.to_string_lossy()));
    }
    let values: Vec<String> = arg
        .get_possible_values()
        .iter()
        .filter(|v| !v.is_hide_set())
        .map(|v| v.get_name().to_string())
        .collect();
    if !values.is_empty() {
        s.push_str(&format!("  values: {}\n", values.join(", ")));
    }
    let help = arg
        .get_long_help()
        .or_else(|| arg.get_help())
        .map(|h| h.to_string())
        .unwrap_or_default();
    let defaults: Vec<String> = arg
        .get_default_values()
        .iter()
        .map(|v| v.to_string_lossy().into_owned())
        .collect();
    if !defaults.is_empty() {
        s.push_str(&format!("  default: {}\n", defaults.join(",")));
    } else if let Some(d) = default_in(&help) {
        s.push_str(&format!("  default: {d}\n"));
    }
    if arg.is_hide_set() {
        s.push_str("  hidden: true\n");
    }
    let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
    if !help.is_empty() {
        s.push_str(&format!("  help: {help}\n"));
    }
    s
}

#[test]
fn config_keys_are_unchanged() {
    let cmd = Cli::command();
    let args: Vec<&clap::Arg> = cmd
        .get_arguments()
        .filter(|a| a.get_long().is_some_and(|l| l != "help" && l != "version"))
        .collect();
    let flag_name = |key: &str| {
        KEY_FLAGS
            .iter()
            .find(|(k, _)| *k == key)
            .map_or_else(|| key.replace('_', "-"), |(_, f)| f.to_string())
    };
    let flag_of = |key: &str| {
        let name = flag_name(key);
        args.iter()
            .find(|a| a.get_long() == Some(name.as_str()))
            .copied()
    };
    let mut text = String::from(
        "# Every key the config file accepts (YAML, `--config`), in the order the file's parser\n\
         # lists them, with the flag and environment variable it mirrors (flag over environment\n\
         # over file over default). Generated by tests/e2e/surface.rs; UPDATE_GOLDEN=1 rewrites it.\n\n",
    );
    let keys = known_keys("__no_such_key__: 1\n");
    for key in &keys {
        text.push_str(&format!("{key}\n"));
        match flag_of(key) {
            Some(arg) => text.push_str(&describe(arg)),
            None => text.push_str("  flag: none (config file only)\n"),
        }
    }
    text.push_str("\n# Keys of each entry of `probes` (a map by probe name)\n");
    text.push_str(&format!("probe names: {}\n", PROBE_NAMES.join(", ")));
    for key in known_keys("probes:\n  metrics_server:\n    __no_such_key__: 1\n") {
        text.push_str(&format!("probes.<name>.{key}\n"));
    }
    text.push_str("\n# Keys of each entry of `prometheus_metrics` (a list)\n");
    for key in known_keys("prometheus_metrics:\n- {name: a, type: CPU, __no_such_key__: 1}\n") {
        text.push_str(&format!("prometheus_metrics[].{key}\n"));
    }
    text.push_str("\n# Flags without a config-file key\n");
    for arg in &args {
        let long = arg.get_long().unwrap_or_default();
        if !keys.iter().any(|k| flag_name(k) == long) {
            text.push_str(&format!("--{long}\n{}", describe(arg)));
        }
    }
    support::assert_golden("config-keys.txt", &text);
}
