//! Building the Kubernetes client: from a named kubeconfig, or from the pod's service account.

use std::path::Path;

use crate::shared::error::{BoxError, Cause, Error, Result};

fn kube_err(what: &str, e: impl Into<BoxError>) -> Error {
    Error::kube(what, Cause::other(e))
}

/// A client for `kubeconfig` (its current context), or in-cluster config when `None`; no
/// response body it reads may exceed `max_response_bytes` (see [`crate::shared::limit`]).
///
/// kube's default retry (429/503/504, up to 15 tries) is turned off: every source has its own
/// deadline and keeps its last good data, and a failure must show as what it is, not as a
/// timeout after minutes of silent retries.
pub async fn client(kubeconfig: Option<&Path>, max_response_bytes: usize) -> Result<kube::Client> {
    let mut config = match kubeconfig {
        Some(path) => {
            // A kubeconfig we cannot use is the user's to fix: a config error (exit 2).
            let bad = |e: &dyn std::fmt::Display| Error::Config {
                option: "--kubeconfig",
                value: path.display().to_string(),
                reason: format!("{e} (fix it, or run with --role host)"),
            };
            let kc = kube::config::Kubeconfig::read_from(path).map_err(|e| bad(&e))?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|e| bad(&e))?
        }
        None => kube::Config::incluster().map_err(|e| kube_err("in-cluster config", e))?,
    };
    config.default_retry = false;
    client_from_config(config, max_response_bytes)
}

/// A client for `config` whose response bodies are capped at `max_response_bytes` (whole
/// bodies; one event per line for watches).
pub fn client_from_config(config: kube::Config, max_response_bytes: usize) -> Result<kube::Client> {
    let builder = kube::client::ClientBuilder::try_from(config)
        .map_err(|e| kube_err("building the Kubernetes client", e))?;
    Ok(builder
        .with_layer(&crate::shared::limit::BodyCapLayer {
            limit: max_response_bytes,
        })
        .build())
}

/// `client` with a `Retry-After` gate: after a 429 or 503 naming a time, no request to the same
/// API group leaves before it (see [`crate::k8s::backoff::paced`]).
pub fn honour_retry_after(client: kube::Client) -> kube::Client {
    crate::k8s::backoff::paced(client, None).0
}

/// The [`Error::metric_label`] [`kube_error`] would give `e`, read from its type: `too_large`
/// when the byte cap is in its chain, `parse` for an answer that did not decode, else `http`.
pub fn kube_error_label(e: &kube::Error) -> &'static str {
    if crate::shared::limit::find_too_large(e).is_some() {
        "too_large"
    } else if matches!(e, kube::Error::SerdeError(_)) {
        "parse"
    } else {
        "http"
    }
}

/// A kube error as [`Error::Http`] ([`Error::TooLarge`] past the cap, [`Error::Parse`] for an
/// answer that did not decode), keeping kube's error as the typed source; its text is the API
/// server's `Status` or the error chain.
pub fn kube_error(what: &str, e: kube::Error) -> Error {
    if let Some(t) = crate::shared::limit::find_too_large(&e) {
        return Error::too_large(what, t.clone());
    }
    match e {
        kube::Error::SerdeError(err) => {
            Error::parse(what, Cause::context("invalid JSON in the answer", err))
        }
        other => Error::http(what, Cause::KubeClient(other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The label is read from kube's error type, and is the one `kube_error` gives; the cause
    /// under the error is kube's own (or serde's), found by type.
    #[test]
    fn kube_errors_are_labelled_by_type() {
        let serde =
            || kube::Error::SerdeError(serde_json::from_str::<serde_json::Value>("{").unwrap_err());
        let api = || {
            let s = kube::core::Status::failure("gone", "Gone").with_code(410);
            kube::Error::Api(s.boxed())
        };
        let capped = || {
            let cap = crate::shared::limit::TooLarge {
                limit: 5,
                what: "response body",
            };
            kube::Error::Service(Box::new(cap))
        };
        for (e, label) in [(serde(), "parse"), (api(), "http"), (capped(), "too_large")] {
            assert_eq!(kube_error_label(&e), label, "{e:?}");
            assert_eq!(kube_error("LIST x", e).metric_label(), label);
        }
        let e = kube_error("LIST x", api());
        assert_eq!(e.to_string(), "LIST x: status 410 Gone: gone");
        let under = std::error::Error::source(&e).and_then(std::error::Error::source);
        let code = under
            .and_then(|k| k.downcast_ref::<kube::Error>())
            .and_then(|k| match k {
                kube::Error::Api(s) => Some(s.code),
                _ => None,
            });
        assert_eq!(code, Some(410));
        let e = kube_error("LIST x", serde());
        let under = std::error::Error::source(&e).and_then(std::error::Error::source);
        assert!(under.is_some_and(|s| s.is::<serde_json::Error>()), "{e:?}");
    }
}
