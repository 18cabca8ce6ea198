//! DNS probes: the name must resolve to at least one address (cluster DNS:
//! `kubernetes.default.svc.cluster.local`).

use super::{Failure, Probe};
use crate::shared::dns::lookup;

#[derive(Debug, Clone)]
pub struct DnsProbe {
    name: String,
    host: String,
}

impl DnsProbe {
    pub fn new(name: &str, host: &str) -> Self {
        DnsProbe {
            name: name.into(),
            host: host.into(),
        }
    }
}

impl Probe for DnsProbe {
    fn name(&self) -> &str {
        &self.name
    }

    fn target(&self) -> &str {
        &self.host
    }

    async fn check(&self) -> Result<(), Failure> {
        // A failed lookup is a `DnsError` by construction: `dns`, with its text for the log.
        let addrs = lookup(&self.host, 0)
            .await
            .map_err(|e| Failure::new("dns", e.to_string()))?;
        if addrs.is_empty() {
            return Err(Failure::new(
                "no_items",
                format!("{} resolved to no address", self.host),
            ));
        }
        Ok(())
    }
}
