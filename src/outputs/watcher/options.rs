//! The `/watcher` output's options, resolved into the [`WatcherOptions`] it renders with.

use super::WatcherOptions;

/// The `/watcher` encoding.
#[derive(Debug, Clone, Default, PartialEq, clap::Args, serde::Deserialize)]
#[serde(default)]
pub struct EncodingOptions {
    /// /watcher: multiply every value by 100 as load-watcher does (bandwidth as bytes/s x 100);
    /// off: CPU and Memory in percent, other types in their own units. [default: false]
    #[arg(long, env = "KUBE_PROBER_WATCHER_LEGACY_SCALING", value_name = "BOOL", num_args = 0..=1, default_missing_value = "true", value_parser = crate::shared::options::parse_bool)]
    pub watcher_legacy_scaling: Option<bool>,
}

crate::merge_options!(EncodingOptions {
    watcher_legacy_scaling
});

impl EncodingOptions {
    pub fn resolve(self) -> WatcherOptions {
        WatcherOptions {
            legacy_scaling: self.watcher_legacy_scaling.unwrap_or(false),
        }
    }
}
