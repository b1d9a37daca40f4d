//! `atoll group list | create | show | destroy | rename | transfer | unarchive | config |
//! failover`,
//! `atoll group locations add | rm`, `atoll group tokens create | invalidate`.

use super::client::{CliError, Client};
use super::config::Settings;
use super::output;
use atoll_types::databases::{DatabaseList, DatabaseToken};
use atoll_types::groups::{
    CreateGroupRequest, FailoverReport, FailoverRequest, Group, GroupConfiguration, GroupList,
    GroupResponse, RenameGroupRequest, TransferGroupRequest, UpdateGroupConfiguration,
};
use atoll_types::locations::ClosestRegion;
use atoll_types::Empty;
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
    /// Show a group: its locations, settings and databases.
    #[command(after_help = "Examples:\n  atoll group show eu\n  atoll group show eu --json")]
    Show {
        /// Name of the group.
        name: String,
        /// Print the group as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Rename a group; its databases keep their names and URLs.
    #[command(after_help = "Example:\n  atoll group rename eu europe")]
    Rename {
        /// Current name of the group.
        name: String,
        /// New name.
        new_name: String,
    },
    /// Move a group with all its databases to another organization you belong to.
    ///
    /// The databases' hostnames change with their organization, so clients must use the
    /// new URLs (`atoll db show NAME --url` in the receiving organization).
    #[command(after_help = "Example:\n  atoll group transfer eu acme --yes")]
    Transfer {
        /// Name of the group.
        name: String,
        /// Slug of the receiving organization.
        organization: String,
        /// Do not ask for confirmation (required when stdin is not a terminal).
        #[arg(long, short = 'y')]
        yes: bool,
    },
    /// Bring back a group archived for inactivity (free plan), so its databases serve again.
    #[command(after_help = "Example:\n  atoll group unarchive eu")]
    Unarchive {
        /// Name of the group.
        name: String,
    },
    /// Show the group's configuration, or change it with flags.
    #[command(
        after_help = "Examples:\n  atoll group config eu\n  atoll group config eu --delete-protection on"
    )]
    Config {
        /// Name of the group.
        name: String,
        /// Refuse to destroy the group while on.
        #[arg(long, value_name = "on|off", value_parser = super::parse_on_off)]
        delete_protection: Option<bool>,
        /// Print the configuration as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Make a location the group's primary: every database's primary goes there.
    ///
    /// A database whose node is up moves without losing a write; one whose node was lost
    /// is rebuilt there from object storage once that node's write lease ran out (in
    /// `sync` durability nothing acknowledged is lost). Run it again to retry what failed.
    #[command(
        after_help = "Examples:\n  atoll group failover eu --to aws-eu-west-1\n  atoll group failover eu --to aws-eu-west-1 --force --yes   # the old node writes without a lease and is stopped"
    )]
    Failover {
        /// Name of the group.
        name: String,
        /// The location to make primary (one of the group's).
        #[arg(long)]
        to: String,
        /// Take databases over from a lost node that writes without a lease (the control
        /// plane runs without --failover-after-secs): you make sure it is stopped. Its
        /// unstored writes are lost (none in sync durability).
        #[arg(long)]
        force: bool,
        /// Do not ask for confirmation (required with --force when stdin is not a terminal).
        #[arg(long, short = 'y')]
        yes: bool,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Add or remove the group's locations.
    #[command(
        subcommand,
        after_help = "Example:\n  atoll group locations add eu aws-us-east-1"
    )]
    Locations(LocationsCommand),
    /// Group tokens: database tokens valid for every database of the group.
    #[command(
        subcommand,
        after_help = "Example:\n  atoll group tokens create eu --expiration 7d"
    )]
    Tokens(TokensCommand),
}

#[derive(Subcommand)]
pub enum LocationsCommand {
    /// Add locations to a group (codes from `atoll locations`).
    #[command(
        after_help = "Example:\n  atoll group locations add eu aws-us-east-1 aws-ap-south-1"
    )]
    Add {
        /// Name of the group.
        group: String,
        /// Location codes to add.
        #[arg(required = true)]
        locations: Vec<String>,
    },
    /// Remove locations from a group (never its primary).
    #[command(after_help = "Example:\n  atoll group locations rm eu aws-us-east-1")]
    Rm {
        /// Name of the group.
        group: String,
        /// Location codes to remove.
        #[arg(required = true)]
        locations: Vec<String>,
    },
}

#[derive(Subcommand)]
pub enum TokensCommand {
    /// Mint a token valid for every database of the group and print it.
    #[command(
        after_help = "Examples:\n  atoll group tokens create eu\n  atoll group tokens create eu --expiration 7d --read-only"
    )]
    Create {
        /// Name of the group.
        group: String,
        /// Lifetime: `never` (default), or `<n><unit>…` with units w d h m s (`7d`, `2w1d`).
        #[arg(long, short = 'e')]
        expiration: Option<String>,
        /// A token that can only read.
        #[arg(long, short = 'r')]
        read_only: bool,
    },
    /// Invalidate every group token by rotating the group's signing key.
    ///
    /// Tokens minted for one database (`atoll db tokens create`) keep working; invalidate
    /// those with `atoll db tokens invalidate`.
    #[command(after_help = "Example:\n  atoll group tokens invalidate eu --yes")]
    Invalidate {
        /// Name of the group.
        group: String,
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
                        state(g).into(),
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
        GroupCommand::Show { name, json } => {
            let answer: GroupResponse = client.get(client.org_url(&["groups", &name])).await?;
            let group = answer.group;
            if json {
                output::json(&group);
                return Ok(());
            }
            let mut url = client.org_url(&["databases"]);
            url.query_pairs_mut().append_pair("group", &group.name);
            let databases: DatabaseList = client.get(url).await?;
            let names: Vec<&str> = databases
                .databases
                .iter()
                .map(|db| db.name.as_str())
                .collect();
            super::print_fields(&[
                ("Name", group.name.clone()),
                ("ID", group.uuid.clone()),
                ("Version", group.version.clone()),
                ("Primary", group.primary.clone()),
                ("Locations", group.locations.join(",")),
                ("State", state(&group).into()),
                (
                    "Delete protection",
                    super::on_off(group.delete_protection).into(),
                ),
                (
                    "Databases",
                    if names.is_empty() {
                        "(none)".into()
                    } else {
                        names.join(",")
                    },
                ),
            ]);
            Ok(())
        }
        GroupCommand::Rename { name, new_name } => {
            let renamed: GroupResponse = client
                .post(
                    client.org_url(&["groups", &name, "rename"]),
                    &RenameGroupRequest { name: new_name },
                )
                .await?;
            println!("Renamed group {name} to {}.", renamed.group.name);
            Ok(())
        }
        GroupCommand::Transfer {
            name,
            organization,
            yes,
        } => {
            super::confirm(
                &format!("move group {name} and all its databases to organization {organization}"),
                yes,
            )?;
            let moved: Group = client
                .post(
                    client.org_url(&["groups", &name, "transfer"]),
                    &TransferGroupRequest {
                        organization: organization.clone(),
                    },
                )
                .await?;
            println!(
                "Transferred group {} to {organization}; run `atoll org switch {organization}` to manage it.",
                moved.name
            );
            Ok(())
        }
        GroupCommand::Unarchive { name } => {
            let answer: GroupResponse = client
                .post(
                    client.org_url(&["groups", &name, "unarchive"]),
                    &serde_json::json!({}),
                )
                .await?;
            println!(
                "Group {} is {}; its databases serve again.",
                answer.group.name,
                state(&answer.group)
            );
            Ok(())
        }
        GroupCommand::Failover {
            name,
            to,
            force,
            yes,
            json,
        } => {
            if force {
                super::confirm(
                    &format!("take group {name}'s databases over from a node you say is stopped (writes it did not store are lost)"),
                    yes,
                )?;
            }
            let report: FailoverReport = client
                .post(
                    client.org_url(&["groups", &name, "failover"]),
                    &FailoverRequest {
                        location: to.clone(),
                        force,
                    },
                )
                .await?;
            if json {
                output::json(&report);
            } else {
                for moved in &report.moved {
                    println!(
                        "{} {} to node {}.",
                        if moved.how == "moved" {
                            "Moved"
                        } else {
                            "Took over"
                        },
                        moved.name,
                        moved.node
                    );
                }
                for failed in &report.failed {
                    eprintln!("Could not fail over {}: {}", failed.name, failed.error);
                }
                println!(
                    "Group {} has its primary in {}: {} databases failed over, {} left.",
                    report.group.name,
                    report.group.primary,
                    report.moved.len(),
                    report.failed.len()
                );
            }
            if report.failed.is_empty() {
                Ok(())
            } else {
                Err(CliError::local(
                    format!(
                        "{} database(s) are still primary elsewhere",
                        report.failed.len()
                    ),
                    format!("run `atoll group failover {name} --to {to}` again to retry them"),
                ))
            }
        }
        GroupCommand::Config {
            name,
            delete_protection,
            json,
        } => {
            let url = client.org_url(&["groups", &name, "configuration"]);
            let config: GroupConfiguration = if delete_protection.is_some() {
                client
                    .patch(url, &UpdateGroupConfiguration { delete_protection })
                    .await?
            } else {
                client.get(url).await?
            };
            if json {
                output::json(&config);
            } else {
                super::print_fields(&[(
                    "Delete protection",
                    super::on_off(config.delete_protection).into(),
                )]);
            }
            Ok(())
        }
        GroupCommand::Locations(LocationsCommand::Add { group, locations }) => {
            for location in &locations {
                let _: GroupResponse = client
                    .post(
                        client.org_url(&["groups", &group, "locations", location]),
                        &serde_json::json!({}),
                    )
                    .await?;
                println!("Added location {location} to group {group}.");
            }
            Ok(())
        }
        GroupCommand::Locations(LocationsCommand::Rm { group, locations }) => {
            for location in &locations {
                let _: GroupResponse = client
                    .delete(client.org_url(&["groups", &group, "locations", location]))
                    .await?;
                println!("Removed location {location} from group {group}.");
            }
            Ok(())
        }
        GroupCommand::Tokens(TokensCommand::Create {
            group,
            expiration,
            read_only,
        }) => {
            let mut url = client.org_url(&["groups", &group, "auth", "tokens"]);
            super::db_admin::token_query(&mut url, expiration.as_deref(), read_only);
            let token: DatabaseToken = client.post(url, &serde_json::json!({})).await?;
            println!("{}", token.jwt);
            Ok(())
        }
        GroupCommand::Tokens(TokensCommand::Invalidate { group, yes }) => {
            super::confirm(&format!("invalidate every token of group {group}"), yes)?;
            let _: Empty = client
                .post(
                    client.org_url(&["groups", &group, "auth", "rotate"]),
                    &serde_json::json!({}),
                )
                .await?;
            println!("Invalidated the tokens of group {group}; mint new ones with `atoll group tokens create {group}`.");
            Ok(())
        }
    }
}

fn state(group: &Group) -> &'static str {
    if group.archived {
        "archived"
    } else {
        "active"
    }
}
