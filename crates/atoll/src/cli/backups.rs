//! `atoll db backups NAME` and `atoll db restore-to NAME --timestamp T`: what object storage
//! holds of a database, and restoring it in place to an instant of its history
//! (`…/databases/{db}/backups`, `…/databases/{db}/restore`). A point-in-time copy into a new
//! database is `atoll db create NEW --from-db SRC --timestamp T` (`import.rs`).

use super::client::{CliError, Client};
use super::output;
use atoll_types::backups::{DatabaseBackups, RestoreRequest, RestoreResponse};
use clap::Subcommand;

#[derive(Subcommand)]
pub enum BackupsCommand {
    /// Show a database's backups: its restorable window, generations and replication lag.
    #[command(
        after_help = "Examples:\n  atoll db backups shop\n  atoll db backups shop --json\n\nEvery database is continuously backed up to object storage (--storage-url of the\nserver): restore a copy with `atoll db create NEW --from-db shop --timestamp T`, or\nthe database itself with `atoll db restore-to shop --timestamp T`."
    )]
    Backups {
        /// Name of the database.
        name: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Restore a database in place to its state at an instant (undo: restore again to an
    /// instant before the restore).
    #[command(
        after_help = "Examples:\n  atoll db restore-to shop --timestamp 2026-11-24T09:30:00Z --yes\n\nThe restore is itself a write: the state before it stays restorable, so restoring to\nan instant before the restore undoes it. `atoll db backups shop` shows the window."
    )]
    RestoreTo {
        /// Name of the database.
        name: String,
        /// The instant to go back to (RFC 3339, inside the restorable window).
        #[arg(long, value_name = "TIME")]
        timestamp: String,
        /// Do not ask for confirmation (required when stdin is not a terminal).
        #[arg(long, short = 'y')]
        yes: bool,
        /// The key of a database encrypted with its customer's key (base64).
        #[arg(long, value_name = "BASE64")]
        remote_encryption_key: Option<String>,
    },
}

pub async fn run(client: &Client, command: BackupsCommand) -> Result<(), CliError> {
    match command {
        BackupsCommand::Backups { name, json } => {
            let backups: DatabaseBackups = client
                .get(client.org_url(&["databases", &name, "backups"]))
                .await?;
            if json {
                output::json(&backups);
                return Ok(());
            }
            let window = match (&backups.restorable_from, &backups.restorable_until) {
                (Some(from), Some(until)) => format!("{from} to {until}"),
                _ => "none yet (the first snapshot is on its way)".to_string(),
            };
            super::print_fields(&[
                ("Restorable", window),
                ("Retention", format!("{} days", backups.retention_days)),
                ("Durability", backups.durability.clone()),
                ("Storage", backups.storage.clone()),
                ("Stored", format!("{} bytes", backups.stored_bytes)),
                (
                    "Lag",
                    format!(
                        "{} commits, {:.1} s",
                        backups.lag.commits, backups.lag.seconds
                    ),
                ),
            ]);
            if let Some(error) = &backups.last_error {
                eprintln!("warning: shipping to object storage fails: {error}");
            }
            println!();
            let rows: Vec<Vec<String>> = backups
                .generations
                .iter()
                .map(|g| {
                    vec![
                        g.created_at.clone(),
                        g.start_frame_no.to_string(),
                        g.snapshot_bytes.to_string(),
                    ]
                })
                .collect();
            output::table(&["GENERATION", "FROM FRAME", "SNAPSHOT BYTES"], &rows);
            Ok(())
        }
        BackupsCommand::RestoreTo {
            name,
            timestamp,
            yes,
            remote_encryption_key,
        } => {
            super::confirm(
                &format!("restore database {name} to its state at {timestamp} (its current state stays restorable)"),
                yes,
            )?;
            let restored: RestoreResponse = client
                .post(
                    client.org_url(&["databases", &name, "restore"]),
                    &RestoreRequest {
                        timestamp: timestamp.clone(),
                        encryption_key: remote_encryption_key,
                    },
                )
                .await?;
            println!(
                "Restored database {name} to its state at {} (the last commit at or before {timestamp}).",
                restored.restored_to
            );
            println!(
                "Undo with: atoll db restore-to {name} --timestamp <an instant before now> --yes"
            );
            Ok(())
        }
    }
}
