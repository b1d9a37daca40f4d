//! `atoll admin nodes`, `atoll admin drain | undrain NODE`, `atoll admin quarantine list |
//! purge`: instance administration of the data nodes.

use super::client::{CliError, Client};
use super::config::Settings;
use super::output;
use atoll_types::nodes::{
    DrainReport, NodeUndrained, NodesResponse, PurgeQuarantineRequest, PurgeQuarantineResponse,
    QuarantineResponse,
};
use clap::Subcommand;

#[derive(Subcommand)]
pub enum AdminCommand {
    /// The data nodes: location, URL, databases, health.
    #[command(after_help = "Example:\n  atoll admin nodes")]
    Nodes {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Drain a node: it takes no new databases, and each of its databases moves to the
    /// least-loaded other node of its location through object storage, with no
    /// acknowledged write lost (each is unavailable for the moment of its move).
    #[command(after_help = "Example:\n  atoll admin drain node-2 --yes")]
    Drain {
        /// The node's name (`atoll admin nodes`).
        node: String,
        /// Do not ask for confirmation (required when stdin is not a terminal).
        #[arg(long, short = 'y')]
        yes: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Let a drained node take new databases again (nothing moves back by itself).
    #[command(after_help = "Example:\n  atoll admin undrain node-2")]
    Undrain {
        /// The node's name.
        node: String,
    },
    /// Databases the nodes hold that the metadata store does not know: moved aside on
    /// their node instead of deleted, removed only by `purge` after the node's retention.
    #[command(subcommand, after_help = "Example:\n  atoll admin quarantine list")]
    Quarantine(QuarantineCommand),
}

#[derive(Subcommand)]
pub enum QuarantineCommand {
    /// List the quarantined databases of every node.
    #[command(after_help = "Example:\n  atoll admin quarantine list")]
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Remove quarantined databases whose retention is over (or only ID) for good.
    #[command(
        after_help = "Examples:\n  atoll admin quarantine purge --yes\n  atoll admin quarantine purge 0f3c…-uuid --yes"
    )]
    Purge {
        /// Only this database (refused while its retention runs).
        id: Option<String>,
        /// Do not ask for confirmation (required when stdin is not a terminal).
        #[arg(long, short = 'y')]
        yes: bool,
    },
}

pub async fn run(command: AdminCommand) -> Result<(), CliError> {
    let settings = Settings::load()?;
    let client = Client::new(&settings)?;
    client.require_token()?;
    match command {
        AdminCommand::Nodes { json } => {
            let listed: NodesResponse = client.get(client.url(&["v1", "admin", "nodes"])).await?;
            if json {
                output::json(&listed);
                return Ok(());
            }
            let rows: Vec<Vec<String>> = listed
                .nodes
                .iter()
                .map(|n| {
                    vec![
                        n.name.clone(),
                        n.location.clone(),
                        n.http_url.clone(),
                        n.databases.to_string(),
                        match (n.healthy, n.draining) {
                            (true, false) => "healthy",
                            (true, true) => "draining",
                            (false, _) => "unreachable",
                        }
                        .to_string(),
                        n.last_seen_at.clone().unwrap_or_else(|| "-".into()),
                    ]
                })
                .collect();
            output::table(
                &[
                    "NAME",
                    "LOCATION",
                    "URL",
                    "DATABASES",
                    "HEALTH",
                    "LAST SEEN",
                ],
                &rows,
            );
            Ok(())
        }
        AdminCommand::Drain { node, yes, json } => {
            super::confirm(
                &format!("move every database off node {node} (each pauses while it moves)"),
                yes,
            )?;
            let report: DrainReport = client
                .post(
                    client.url(&["v1", "admin", "nodes", &node, "drain"]),
                    &serde_json::json!({}),
                )
                .await?;
            if json {
                output::json(&report);
                return Ok(());
            }
            for moved in &report.moved {
                println!("Moved {} to node {}.", moved.name, moved.to);
            }
            for failed in &report.failed {
                eprintln!("Could not move {}: {}", failed.name, failed.error);
            }
            println!(
                "Node {node} is draining: {} moved, {} left.",
                report.moved.len(),
                report.failed.len()
            );
            if report.failed.is_empty() {
                Ok(())
            } else {
                Err(CliError::local(
                    format!("{} database(s) could not move yet", report.failed.len()),
                    format!("run `atoll admin drain {node}` again to retry them"),
                ))
            }
        }
        AdminCommand::Undrain { node } => {
            let undrained: NodeUndrained = client
                .delete(client.url(&["v1", "admin", "nodes", &node, "drain"]))
                .await?;
            println!("Node {} takes new databases again.", undrained.node);
            Ok(())
        }
        AdminCommand::Quarantine(QuarantineCommand::List { json }) => {
            let listed: QuarantineResponse = client
                .get(client.url(&["v1", "admin", "quarantine"]))
                .await?;
            if json {
                output::json(&listed);
                return Ok(());
            }
            let rows: Vec<Vec<String>> = listed
                .databases
                .iter()
                .map(|d| {
                    vec![
                        d.node.clone(),
                        d.id.clone(),
                        d.label.clone().unwrap_or_default(),
                        d.quarantined_at.clone(),
                        d.bytes.to_string(),
                        if d.purgeable { "yes" } else { "no" }.to_string(),
                    ]
                })
                .collect();
            output::table(
                &[
                    "NODE",
                    "ID",
                    "LABEL",
                    "QUARANTINED AT",
                    "BYTES",
                    "PURGEABLE",
                ],
                &rows,
            );
            warn_unreachable(&listed.unreachable_nodes);
            Ok(())
        }
        AdminCommand::Quarantine(QuarantineCommand::Purge { id, yes }) => {
            let what = match &id {
                Some(id) => format!("remove the quarantined database {id} for good"),
                None => "remove every quarantined database past its retention for good".into(),
            };
            super::confirm(&what, yes)?;
            let purged: PurgeQuarantineResponse = client
                .post(
                    client.url(&["v1", "admin", "quarantine", "purge"]),
                    &PurgeQuarantineRequest { id },
                )
                .await?;
            for database in &purged.purged {
                println!("Purged {} from node {}.", database.id, database.node);
            }
            if purged.purged.is_empty() {
                println!("Nothing to purge.");
            }
            warn_unreachable(&purged.unreachable_nodes);
            Ok(())
        }
    }
}

fn warn_unreachable(nodes: &[String]) {
    if !nodes.is_empty() {
        eprintln!(
            "Warning: could not reach node(s) {}: their quarantine is not included.",
            nodes.join(", ")
        );
    }
}
