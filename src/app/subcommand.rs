//! Maintenance subcommands (`kube-prober gcm descriptors list|delete`), run instead of the
//! prober.

use crate::config::Config;
use crate::config::cli::{Command, DescriptorAction, GcmCommand};
use crate::k8s::identity::{self, IdentityConfig};
use crate::outputs::gcm;
use crate::shared::error::{Error, Result};

/// Runs `command` with the resolved flags (for `--gcm-*` defaults); prints to stdout.
pub async fn run(command: Command, cfg: &Config) -> Result<()> {
    let Command::Gcm {
        command:
            GcmCommand::Descriptors {
                action,
                project,
                prefix,
            },
    } = command;
    let project = match project.or_else(|| cfg.sinks.gcm.project.clone()) {
        Some(p) if !p.trim().is_empty() => p.trim().to_string(),
        Some(p) => {
            return Err(Error::Config {
                option: "--project",
                value: p,
                reason: "must not be empty".into(),
            });
        }
        None => identity::detect(&IdentityConfig::from_env())
            .await
            .project
            .ok_or_else(|| Error::Config {
                option: "--project",
                value: String::new(),
                reason: "give --project (not on GCE, or the metadata server did not answer)".into(),
            })?,
    };
    let prefix = prefix.unwrap_or_else(|| cfg.sinks.gcm.prefix.clone());
    let client = cfg.sinks.gcm.client.clone();
    match action {
        DescriptorAction::List => {
            let types = gcm::list_descriptors(&client, &project, &prefix).await?;
            for t in &types {
                println!("{t}");
            }
            eprintln!(
                "{} descriptor(s) under workload.googleapis.com/{prefix}/ in project {project}",
                types.len()
            );
        }
        DescriptorAction::Delete => {
            let types = gcm::delete_descriptors(&client, &project, &prefix).await?;
            for t in &types {
                println!("deleted {t}");
            }
            eprintln!(
                "deleted {} descriptor(s) under workload.googleapis.com/{prefix}/ in project {project}",
                types.len()
            );
        }
    }
    Ok(())
}
