//! `atoll org list | switch`.

use super::client::{CliError, Client};
use super::config::Settings;
use super::output;
use atoll_types::organizations::OrganizationList;
use clap::Subcommand;

#[derive(Subcommand)]
pub enum OrgCommand {
    /// List your organizations; `*` marks the current one.
    #[command(
        after_help = "Examples:\n  atoll org list\n  atoll org list --json | jq -r '.[].slug'"
    )]
    List {
        /// Print the JSON array of organizations.
        #[arg(long)]
        json: bool,
    },
    /// Make an organization the current one for `atoll group` and `atoll db`.
    #[command(
        after_help = "Example:\n  atoll org switch acme\n\nSwitching to your personal organization stores no slug: routes drop the\n`/organizations/{org}` segment, as the turso CLI does."
    )]
    Switch {
        /// Slug of the organization (see `atoll org list`).
        slug: String,
    },
}

pub async fn run(command: OrgCommand) -> Result<(), CliError> {
    let mut settings = Settings::load()?;
    let client = Client::new(&settings)?;
    client.require_token()?;
    let list: OrganizationList = client.get(client.url(&["v2", "organizations"])).await?;
    match command {
        OrgCommand::List { json } => {
            if json {
                output::json(&list.organizations);
                return Ok(());
            }
            let rows: Vec<Vec<String>> = list
                .organizations
                .iter()
                .map(|org| {
                    let current = if settings.organization.is_empty() {
                        org.kind == "personal"
                    } else {
                        org.slug == settings.organization
                    };
                    vec![
                        org.name.clone(),
                        org.slug.clone(),
                        org.kind.clone(),
                        org.plan_id.clone(),
                        if current { "*".into() } else { String::new() },
                    ]
                })
                .collect();
            output::table(&["NAME", "SLUG", "TYPE", "PLAN", "CURRENT"], &rows);
            Ok(())
        }
        OrgCommand::Switch { slug } => {
            let org = list
                .organizations
                .iter()
                .find(|org| org.slug == slug)
                .ok_or_else(|| CliError {
                    message: format!("organization {slug} not found"),
                    code: "organization_not_found".into(),
                    hint: "run `atoll org list` to see your organizations".into(),
                })?;
            settings.organization = if org.kind == "personal" {
                String::new()
            } else {
                org.slug.clone()
            };
            settings.save()?;
            println!("Current organization: {} ({}).", org.slug, org.kind);
            Ok(())
        }
    }
}
