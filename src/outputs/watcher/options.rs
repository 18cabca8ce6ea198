//! The `/watcher` output's options, resolved into the [`WatcherConfig`] it renders with.

use std::time::Duration;

use super::{DEFAULT_MAX_AGE, Fold, WatcherConfig};
use crate::shared::error::Error;
use crate::shared::options::{duration, invalid};

/// The `/watcher` output's options as given (flags, environment, file keys).
#[derive(Debug, Clone, Default, PartialEq, clap::Args, serde::Deserialize)]
#[serde(default)]
pub struct WatcherOptions {
    /// /watcher: multiply every value by 100 as load-watcher does (bandwidth as bytes/s x 100);
    /// off: CPU and Memory in percent, other types in their own units. [default: false]
    #[arg(long, env = "KUBE_PROBER_WATCHER_LEGACY_SCALING", value_name = "BOOL", num_args = 0..=1, default_missing_value = "true", value_parser = crate::shared::options::parse_bool)]
    pub watcher_legacy_scaling: Option<bool>,

    /// /watcher: leave out a host whose newest usage sample is older than this (0: never); at
    /// least twice --interval. [default: 3m, or 3 x --interval when that is longer]
    #[arg(long, env = "KUBE_PROBER_WATCHER_MAX_AGE", value_name = "DURATION")]
    pub watcher_max_age: Option<String>,

    /// /watcher: add the estimated load of pods bound since a host's newest sample to its CPU
    /// and Memory values: off, all (LoadVariationRiskBalancing, LowRiskOverCommitment, Peaks),
    /// before-window-end (TargetLoadPacking). [default: off; the bare flag: all]
    #[arg(long, env = "KUBE_PROBER_WATCHER_ESTIMATE_BOUND_PODS", value_name = "MODE", num_args = 0..=1, default_missing_value = "all")]
    pub watcher_estimate_bound_pods: Option<String>,
}

crate::merge_options!(WatcherOptions {
    watcher_legacy_scaling,
    watcher_max_age,
    watcher_estimate_bound_pods
});

impl WatcherOptions {
    /// `interval`: the usage fetch interval when given (`None`: the backend's default, at most
    /// a minute).
    pub fn resolve(self, interval: Option<Duration>) -> Result<WatcherConfig, Error> {
        let fold = match self.watcher_estimate_bound_pods.as_deref() {
            None => Fold::Off,
            Some(v) => Fold::parse(v.trim()).ok_or_else(|| {
                invalid(
                    "--watcher-estimate-bound-pods",
                    v,
                    "expected off, all or before-window-end",
                )
            })?,
        };
        let floor = interval.map(|i| i * 2).unwrap_or_default();
        let max_age = match self.watcher_max_age.as_deref() {
            None => Some(DEFAULT_MAX_AGE.max(interval.map(|i| i * 3).unwrap_or_default())),
            Some(v) if v.trim() == "0" => None,
            Some(v) => {
                let d = duration(
                    "--watcher-max-age",
                    v,
                    Duration::from_secs(1),
                    Duration::from_secs(24 * 3600),
                )?;
                if d < floor {
                    return Err(invalid(
                        "--watcher-max-age",
                        v,
                        "must be at least twice --interval: every host would leave between two fetches",
                    ));
                }
                Some(d)
            }
        };
        Ok(WatcherConfig {
            legacy_scaling: self.watcher_legacy_scaling.unwrap_or(false),
            max_age,
            fold,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(
        max_age: Option<&str>,
        fold: Option<&str>,
        interval: Option<u64>,
    ) -> Result<WatcherConfig, Error> {
        WatcherOptions {
            watcher_legacy_scaling: None,
            watcher_max_age: max_age.map(str::to_string),
            watcher_estimate_bound_pods: fold.map(str::to_string),
        }
        .resolve(interval.map(Duration::from_secs))
    }

    #[test]
    fn max_age_defaults_from_the_fetch_interval_and_refuses_less_than_two() {
        let secs = |o: WatcherConfig| o.max_age.map(|d| d.as_secs());
        assert_eq!(secs(resolve(None, None, None).unwrap()), Some(180));
        assert_eq!(secs(resolve(None, None, Some(15)).unwrap()), Some(180));
        assert_eq!(secs(resolve(None, None, Some(120)).unwrap()), Some(360));
        assert_eq!(
            secs(resolve(Some("45s"), None, Some(15)).unwrap()),
            Some(45)
        );
        assert_eq!(secs(resolve(Some("0"), None, None).unwrap()), None);
        let e = resolve(Some("20s"), None, Some(15))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--watcher-max-age") && e.contains("twice --interval"),
            "{e}"
        );
        let e = resolve(Some("soon"), None, None).unwrap_err().to_string();
        assert!(e.contains("--watcher-max-age"), "{e}");
    }

    #[test]
    fn fold_modes_parse_and_a_wrong_one_names_the_choices() {
        let fold = |f| resolve(None, f, None).map(|o| o.fold);
        assert_eq!(fold(None).unwrap(), Fold::Off);
        assert_eq!(fold(Some("all")).unwrap(), Fold::All);
        assert_eq!(
            fold(Some("before-window-end")).unwrap(),
            Fold::BeforeWindowEnd
        );
        let e = fold(Some("tlp")).unwrap_err().to_string();
        assert!(e.contains("off, all or before-window-end"), "{e}");
    }
}
