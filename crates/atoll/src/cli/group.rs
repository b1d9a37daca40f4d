//! `atoll group list | create | destroy`.

use super::client::{CliError, Client};
use super::config::Settings;
use super::output;
use atoll_types::groups::{CreateGroupRequest, GroupList, GroupResponse};
use atoll_types::locations::ClosestRegion;
use clap::Subcommand;

#[derive(Subcommand)]
pub enum GroupCommand {
    /// List the groups of the current organization.
    #[command(after_help = "Examples:\n  atoll group list\n  atoll group list --json")]
    List {
        /// Print the JSON array of groups.
        #[arg(long)]
        json: bool,
    },
    /// Create a group in a location.
    #[command(after_help = "Example:\n  atoll group create eu --location aws-eu-west-1")]
    Create {
        /// Name of the new group.
        name: String,
        /// Location code (default: the server's own location).
        #[arg(long)]
        location: Option<String>,
    },
    /// Destroy a group and every database in it.
    #[command(after_help = "Example:\n  atoll group destroy eu --yes")]
    Destroy {
        /// Name of the group.
        name: String,
        /// Do not ask for confirmation (required when stdin is not a terminal).
        #[arg(long, short = 'y')]
        yes: bool,
    },
}

pub async fn run(command: GroupCommand) -> Result<(), CliError> {
    let settings = Settings::load()?;
    let client = Client::new(&settings)?;
    client.require_token()?;
    match command {
        GroupCommand::List { json } => {
            let list: GroupList = client.get(client.org_url(&["groups"])).await?;
            if json {
                output::json(&list.groups);
                return Ok(());
            }
            let rows: Vec<Vec<String>> = list
                .groups
                .iter()
                .map(|g| {
                    vec![
                        g.name.clone(),
                        g.primary.clone(),
                        g.locations.join(","),
                        if g.archived { "archived" } else { "active" }.into(),
                    ]
                })
                .collect();
            output::table(&["NAME", "PRIMARY", "LOCATIONS", "STATE"], &rows);
            Ok(())
        }
        GroupCommand::Create { name, location } => {
            let location = match location {
                Some(location) => location,
                None => {
                    let closest: ClosestRegion =
                        client.get(client.url(&["v1", "closest-region"])).await?;
                    closest.server
                }
            };
            let created: GroupResponse = client
                .post(
                    client.org_url(&["groups"]),
                    &CreateGroupRequest {
                        name,
                        location,
                        version: None,
                        extensions: None,
                    },
                )
                .await?;
            println!(
                "Created group {} in {}.",
                created.group.name, created.group.primary
            );
            Ok(())
        }
        GroupCommand::Destroy { name, yes } => {
            super::confirm(&format!("destroy group {name} and all its databases"), yes)?;
            let _: serde_json::Value = client.delete(client.org_url(&["groups", &name])).await?;
            println!("Destroyed group {name}.");
            Ok(())
        }
    }
}
