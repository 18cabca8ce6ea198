//! Leader election's options (`--leader-elect*`), resolved into [`LeaderConfig`]; the
//! Lease's namespace and this replica's identity, when not given, are found at start
//! (`crate::app` makes the [`super::leader::LeaseConfig`]).

use std::time::Duration;

use super::leader::LeaseConfig;
use crate::shared::error::Result;
use crate::shared::options::{duration, invalid, non_empty};

/// Lease-based leader election (cluster role, with a push output).
#[derive(Debug, Clone, Default, PartialEq, clap::Args, serde::Deserialize)]
#[serde(default)]
pub struct LeaderOptions {
    /// Cluster role: only the holder of a coordination.k8s.io/v1 Lease pushes cluster-level
    /// series. [default: true in the cluster role when a sink is configured]
    #[arg(long, env = "KUBE_PROBER_LEADER_ELECT", value_name = "BOOL", num_args = 0..=1, default_missing_value = "true", value_parser = crate::shared::options::parse_bool)]
    pub leader_elect: Option<bool>,

    /// Name of the leader Lease. [default: kube-prober]
    #[arg(long, env = "KUBE_PROBER_LEADER_ELECT_LEASE_NAME", value_name = "NAME")]
    pub leader_elect_lease_name: Option<String>,

    /// Namespace of the leader Lease. [default: $POD_NAMESPACE, else the client's namespace]
    #[arg(long, env = "POD_NAMESPACE", value_name = "NAMESPACE")]
    pub leader_elect_namespace: Option<String>,

    /// How long a Lease holds without renewal. [default: 15s]
    #[arg(
        long,
        env = "KUBE_PROBER_LEADER_ELECT_LEASE_DURATION",
        value_name = "DURATION"
    )]
    pub leader_elect_lease_duration: Option<String>,

    /// The leader stops pushing when it has not renewed for this long. [default: 10s]
    #[arg(
        long,
        env = "KUBE_PROBER_LEADER_ELECT_RENEW_DEADLINE",
        value_name = "DURATION"
    )]
    pub leader_elect_renew_deadline: Option<String>,

    /// How often to try to acquire or renew. [default: 2s]
    #[arg(
        long,
        env = "KUBE_PROBER_LEADER_ELECT_RETRY_PERIOD",
        value_name = "DURATION"
    )]
    pub leader_elect_retry_period: Option<String>,

    /// This replica's identity in the Lease. [default: $POD_NAME, else hostname_pid]
    #[arg(long, env = "POD_NAME", value_name = "ID")]
    pub leader_elect_identity: Option<String>,
}

crate::merge_options!(LeaderOptions {
    leader_elect,
    leader_elect_lease_name,
    leader_elect_namespace,
    leader_elect_lease_duration,
    leader_elect_renew_deadline,
    leader_elect_retry_period,
    leader_elect_identity
});

/// Lease-based leader election (cluster role), as given and checked.
#[derive(Debug, Clone, PartialEq)]
pub struct LeaderConfig {
    /// `None`: on in the cluster role when a sink runs.
    pub enabled: Option<bool>,
    pub lease_name: String,
    /// `None`: the Kubernetes client's namespace.
    pub namespace: Option<String>,
    pub identity: Option<String>,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

impl LeaderOptions {
    pub fn resolve(self) -> Result<LeaderConfig> {
        let dur = |option: &'static str, v: Option<String>, default: &str| {
            let v = v.unwrap_or_else(|| default.to_string());
            duration(
                option,
                &v,
                Duration::from_millis(100),
                Duration::from_secs(600),
            )
        };
        let leader = LeaderConfig {
            enabled: self.leader_elect,
            lease_name: self
                .leader_elect_lease_name
                .unwrap_or_else(|| "kube-prober".into()),
            namespace: non_empty("--leader-elect-namespace", self.leader_elect_namespace)?,
            identity: non_empty("--leader-elect-identity", self.leader_elect_identity)?,
            lease_duration: dur(
                "--leader-elect-lease-duration",
                self.leader_elect_lease_duration,
                "15s",
            )?,
            renew_deadline: dur(
                "--leader-elect-renew-deadline",
                self.leader_elect_renew_deadline,
                "10s",
            )?,
            retry_period: dur(
                "--leader-elect-retry-period",
                self.leader_elect_retry_period,
                "2s",
            )?,
        };
        leader.check()?;
        Ok(leader)
    }
}

impl LeaderConfig {
    /// The Lease this replica competes for as `identity`: one per shard when sharded
    /// (`<name>-shard-<index>`), so each shard has its own pusher and two replicas of one shard
    /// still push once; in `--leader-elect-namespace`, else `default_namespace` (the client's).
    pub fn lease(
        &self,
        shard: Option<u32>,
        default_namespace: &str,
        identity: String,
    ) -> Result<LeaseConfig> {
        let name = match shard {
            None => self.lease_name.clone(),
            Some(index) => format!("{}-shard-{index}", self.lease_name),
        };
        let namespace = self
            .namespace
            .clone()
            .unwrap_or_else(|| default_namespace.to_string());
        let lc = LeaseConfig {
            lease_duration: self.lease_duration,
            renew_deadline: self.renew_deadline,
            retry_period: self.retry_period,
            ..LeaseConfig::new(name, namespace, identity)
        };
        lc.validate()?;
        Ok(lc)
    }

    /// The Lease name is an object name; renew deadline < lease duration; retry < renew.
    fn check(&self) -> Result<()> {
        let name_ok = |n: &str| {
            !n.is_empty()
                && n.len() <= 253
                && n.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        };
        if !name_ok(&self.lease_name) {
            return Err(invalid(
                "--leader-elect-lease-name",
                &self.lease_name,
                "not a Kubernetes object name",
            ));
        }
        if self.renew_deadline >= self.lease_duration {
            return Err(invalid(
                "--leader-elect-renew-deadline",
                &humantime::format_duration(self.renew_deadline).to_string(),
                "must be shorter than --leader-elect-lease-duration (so a leader stops before another can take over)",
            ));
        }
        if self.retry_period >= self.renew_deadline {
            return Err(invalid(
                "--leader-elect-retry-period",
                &humantime::format_duration(self.retry_period).to_string(),
                "must be shorter than --leader-elect-renew-deadline",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lease_is_per_shard_in_the_given_or_the_clients_namespace() {
        let leader = LeaderOptions::default().resolve().expect("the defaults");
        let lc = leader.lease(None, "ns", "pod-a".into()).expect("a lease");
        assert_eq!(
            (lc.name.as_str(), lc.namespace.as_str()),
            ("kube-prober", "ns")
        );
        assert_eq!(lc.identity, "pod-a");
        assert_eq!(lc.lease_duration, Duration::from_secs(15));
        let sharded = LeaderConfig {
            namespace: Some("monitoring".into()),
            ..leader
        };
        let lc = sharded
            .lease(Some(2), "ns", "pod-a".into())
            .expect("a lease");
        assert_eq!(
            (lc.name.as_str(), lc.namespace.as_str()),
            ("kube-prober-shard-2", "monitoring")
        );
    }
}
