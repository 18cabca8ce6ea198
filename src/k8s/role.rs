//! Which role to run when `--role` is not given, and why.

use std::path::{Path, PathBuf};

use clap::ValueEnum;
use serde::Deserialize;

use crate::shared::error::{Error, Result};

/// Which sources run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// One Deployment per cluster: nodes, workloads, usage backends, cluster probes.
    Cluster,
    /// A DaemonSet pod: its own node, the pods on it, node probes.
    Node,
    /// No cluster: this machine is the only node, read from procfs.
    Host,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Cluster => "cluster",
            Role::Node => "node",
            Role::Host => "host",
        }
    }
}

/// The chosen role and the reason, for the start-up log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoleChoice {
    pub role: Role,
    pub reason: String,
    /// The kubeconfig that decided it, if one did.
    pub kubeconfig: Option<PathBuf>,
}

/// Where detection looks; injectable so tests need no real environment.
pub struct Probe<'a> {
    pub env: &'a dyn Fn(&str) -> Option<String>,
    pub exists: &'a dyn Fn(&Path) -> bool,
    pub home: Option<PathBuf>,
}

/// Where pods find their service account (token, ca.crt, namespace).
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// The service-account token mounted into pods.
pub const SERVICE_ACCOUNT_TOKEN: &str = "/var/run/secrets/kubernetes.io/serviceaccount/token";

impl Probe<'_> {
    /// Looks at the real process environment and file system.
    pub fn system() -> Probe<'static> {
        Probe {
            env: &|k| std::env::var(k).ok().filter(|v| !v.is_empty()),
            exists: &|p| p.is_file(),
            home: std::env::var_os("HOME").map(PathBuf::from),
        }
    }
}

/// `--role` if given; else `cluster` when in-cluster config (service env and token) or a
/// kubeconfig (`--kubeconfig`, which also carries `$KUBECONFIG`, then `~/.kube/config`) is found;
/// else `host`. A kubeconfig that was named but does not exist is an error, not a silent `host`.
pub fn detect(
    explicit: Option<Role>,
    kubeconfig: Option<&Path>,
    probe: &Probe,
) -> Result<RoleChoice> {
    if let Some(role) = explicit {
        return Ok(RoleChoice {
            role,
            reason: "set by --role".into(),
            kubeconfig: kubeconfig.map(Path::to_path_buf),
        });
    }
    if let Some(named) = kubeconfig {
        // $KUBECONFIG may be a list: the first file that exists counts.
        let list = named.to_string_lossy().into_owned();
        let found = std::env::split_paths(&list).find(|p| (probe.exists)(p));
        return match found {
            Some(path) => Ok(RoleChoice {
                role: Role::Cluster,
                reason: format!("kubeconfig {} found", path.display()),
                kubeconfig: Some(path),
            }),
            None => Err(Error::Config {
                option: "--kubeconfig",
                value: list,
                reason: "no such file (unset it, or pass --role host)".into(),
            }),
        };
    }
    let in_cluster = (probe.env)("KUBERNETES_SERVICE_HOST").is_some()
        && (probe.env)("KUBERNETES_SERVICE_PORT").is_some()
        && (probe.exists)(Path::new(SERVICE_ACCOUNT_TOKEN));
    if in_cluster {
        return Ok(RoleChoice {
            role: Role::Cluster,
            reason: "in-cluster service account found".into(),
            kubeconfig: None,
        });
    }
    if let Some(home) = &probe.home {
        let path = home.join(".kube/config");
        if (probe.exists)(&path) {
            return Ok(RoleChoice {
                role: Role::Cluster,
                reason: format!("kubeconfig {} found", path.display()),
                kubeconfig: Some(path),
            });
        }
    }
    Ok(RoleChoice {
        role: Role::Host,
        reason: "no in-cluster config and no kubeconfig found".into(),
        kubeconfig: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(
        explicit: Option<Role>,
        kubeconfig: Option<&str>,
        env: &[(&str, &str)],
        files: &[&str],
    ) -> Result<RoleChoice> {
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let files: Vec<PathBuf> = files.iter().map(PathBuf::from).collect();
        let getenv = move |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        let exists = move |p: &Path| files.iter().any(|f| f == p);
        let probe = Probe {
            env: &getenv,
            exists: &exists,
            home: Some(PathBuf::from("/home/u")),
        };
        detect(explicit, kubeconfig.map(Path::new), &probe)
    }

    #[test]
    fn explicit_role_wins() {
        let c = run(Some(Role::Node), None, &[], &["/home/u/.kube/config"]).unwrap();
        assert_eq!(c.role, Role::Node);
        assert_eq!(c.reason, "set by --role");
    }

    #[test]
    fn nothing_found_means_host() {
        let c = run(None, None, &[("KUBERNETES_SERVICE_HOST", "10.0.0.1")], &[]).unwrap();
        assert_eq!(c.role, Role::Host);
    }

    #[test]
    fn in_cluster_needs_env_and_token() {
        let env = [
            ("KUBERNETES_SERVICE_HOST", "10.0.0.1"),
            ("KUBERNETES_SERVICE_PORT", "443"),
        ];
        let c = run(None, None, &env, &[SERVICE_ACCOUNT_TOKEN]).unwrap();
        assert_eq!(c.role, Role::Cluster);
        assert!(c.reason.contains("in-cluster"));
        assert_eq!(run(None, None, &env, &[]).unwrap().role, Role::Host);
    }

    #[test]
    fn kubeconfig_list_and_home_default() {
        let c = run(None, Some("/a:/b"), &[], &["/b"]).unwrap();
        assert_eq!(
            (c.role, c.kubeconfig),
            (Role::Cluster, Some(PathBuf::from("/b")))
        );
        let c = run(None, None, &[], &["/home/u/.kube/config"]).unwrap();
        assert_eq!(c.role, Role::Cluster);
        assert!(c.reason.contains("/home/u/.kube/config"));
    }

    #[test]
    fn a_named_kubeconfig_that_is_missing_is_an_error() {
        let e = run(None, Some("/nope"), &[], &[]).unwrap_err().to_string();
        assert!(e.contains("--kubeconfig") && e.contains("/nope"), "{e}");
    }
}
