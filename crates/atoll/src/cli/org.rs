//! `atoll org list | switch | create | destroy`, `atoll org members …`, `atoll org invites …`,
//! `atoll org jwks …`.

use super::client::{CliError, Client};
use super::config::Settings;
use super::output;
use atoll_types::jwks::{JwksList, JwksSaved, JwksTemplate, SaveJwksRequest};
use atoll_types::members::{
    AddMemberRequest, CreateInviteRequest, InviteAccepted, InviteCreatedResponse, InviteList,
    MemberAdded, MemberList, MemberResponse, UpdateMemberRequest,
};
use atoll_types::organizations::{
    CreateOrganizationRequest, CreateOrganizationResponse, OrganizationList,
};
use atoll_types::tokens::{ApiTokenList, ApiTokenRevoked};
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
    /// Create a team organization (you become its owner) and switch to it.
    #[command(after_help = "Example:\n  atoll org create \"Acme Inc\"")]
    Create {
        /// Display name; the slug is derived from it.
        name: String,
    },
    /// Destroy a team organization with everything in it (owners only).
    #[command(after_help = "Example:\n  atoll org destroy acme --yes")]
    Destroy {
        slug: String,
        /// Do not ask for confirmation (required when stdin is not a terminal).
        #[arg(long, short = 'y')]
        yes: bool,
    },
    /// The members of the current organization.
    #[command(
        subcommand,
        after_help = "Example:\n  atoll org members add bob --role admin"
    )]
    Members(MembersCommand),
    /// Invites to the current organization, and accepting yours.
    #[command(
        subcommand,
        after_help = "Example:\n  atoll org invites create carol@example.com --role viewer"
    )]
    Invites(InvitesCommand),
    /// The platform API tokens restricted to the current organization (admins see all of
    /// them, other members their own).
    #[command(subcommand, after_help = "Example:\n  atoll org tokens list")]
    Tokens(OrgTokensCommand),
    /// Key sets (JWKS) of your own auth provider: its end users' JWTs then query the
    /// organization's databases as the claims template allows.
    #[command(
        subcommand,
        after_help = "Examples:\n  atoll org jwks template --database app --scope read-only\n  atoll org jwks save clerk https://your-app.clerk.accounts.dev/.well-known/jwks.json\n  atoll org jwks save local --file jwks.json"
    )]
    Jwks(JwksCommand),
}

#[derive(Subcommand)]
pub enum JwksCommand {
    /// List the organization's key sets.
    #[command(after_help = "Example:\n  atoll org jwks list")]
    List {
        #[arg(long)]
        json: bool,
    },
    /// Register (or replace) a key set, from its URL (one the server's operator allows) or
    /// from a JWKS file (admins).
    #[command(
        after_help = "Examples:\n  atoll org jwks save clerk https://your-app.clerk.accounts.dev/.well-known/jwks.json\n  atoll org jwks save local --file jwks.json"
    )]
    Save {
        name: String,
        /// The auth provider's JWKS address.
        url: Option<String>,
        /// A JWKS file (`{"keys": [...]}`, public keys only) instead of a URL.
        #[arg(long, conflicts_with = "url")]
        file: Option<std::path::PathBuf>,
    },
    /// Remove a key set: tokens its keys signed stop working (admins).
    #[command(alias = "remove", after_help = "Example:\n  atoll org jwks rm clerk")]
    Rm { name: String },
    /// Print the claims your auth provider must put in end users' JWTs.
    #[command(
        after_help = "Examples:\n  atoll org jwks template --database app\n  atoll org jwks template --group default --scope read-only"
    )]
    Template {
        #[arg(long, short = 'd', conflicts_with = "group")]
        database: Option<String>,
        #[arg(long, short = 'g')]
        group: Option<String>,
        /// full-access (default) or read-only.
        #[arg(long, short = 's', default_value = "full-access")]
        scope: String,
    },
}

#[derive(Subcommand)]
pub enum OrgTokensCommand {
    /// List the organization's tokens with who minted them (never their secrets).
    #[command(after_help = "Examples:\n  atoll org tokens list\n  atoll org tokens list --json")]
    List {
        /// Print the JSON array of tokens.
        #[arg(long)]
        json: bool,
    },
    /// Revoke an organization token by its id (the ID column of `atoll org tokens list`).
    #[command(after_help = "Example:\n  atoll org tokens revoke tok_3f9a1c")]
    Revoke {
        /// Id of the token. Ids are base64url and may start with `-`, so a leading hyphen
        /// is part of the value, not a flag.
        #[arg(allow_hyphen_values = true)]
        id: String,
    },
}

#[derive(Subcommand)]
pub enum MembersCommand {
    /// List the members and their roles.
    #[command(after_help = "Example:\n  atoll org members list --json")]
    List {
        #[arg(long)]
        json: bool,
    },
    /// Add an existing user.
    #[command(after_help = "Example:\n  atoll org members add bob --role member")]
    Add {
        username: String,
        /// owner, admin, member (default) or viewer.
        #[arg(long)]
        role: Option<String>,
    },
    /// Remove a member (or yourself, to leave).
    #[command(after_help = "Example:\n  atoll org members rm bob")]
    Rm { username: String },
    /// Change a member's role.
    #[command(after_help = "Example:\n  atoll org members role bob admin")]
    Role { username: String, role: String },
}

#[derive(Subcommand)]
pub enum InvitesCommand {
    /// List pending invites.
    #[command(after_help = "Example:\n  atoll org invites list")]
    List {
        #[arg(long)]
        json: bool,
    },
    /// Invite someone by email (or by username with `--username`).
    #[command(
        after_help = "Examples:\n  atoll org invites create carol@example.com --role viewer\n  atoll org invites create dave --username"
    )]
    Create {
        /// Email address, or a username with `--username`.
        address: String,
        #[arg(long)]
        username: bool,
        /// admin, member (default) or viewer.
        #[arg(long)]
        role: Option<String>,
    },
    /// Delete a pending invite.
    #[command(after_help = "Example:\n  atoll org invites rm carol@example.com")]
    Rm { address: String },
    /// Accept an invite addressed to you, joining that organization.
    #[command(after_help = "Example:\n  atoll org invites accept acme")]
    Accept { org: String },
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
        OrgCommand::Create { name } => {
            let created: CreateOrganizationResponse = client
                .post(
                    client.url(&["v1", "organizations"]),
                    &CreateOrganizationRequest {
                        name,
                        slug: None,
                        stripe_id: None,
                    },
                )
                .await?;
            settings.organization = created.org.slug.clone();
            settings.save()?;
            println!(
                "Created organization {} and switched to it.",
                created.org.slug
            );
            Ok(())
        }
        OrgCommand::Destroy { slug, yes } => {
            super::confirm(
                &format!("destroy organization {slug} and everything in it"),
                yes,
            )?;
            let _: serde_json::Value = client
                .delete(client.url(&["v1", "organizations", &slug]))
                .await?;
            if settings.organization == slug {
                settings.organization.clear();
                settings.save()?;
            }
            println!("Destroyed organization {slug}.");
            Ok(())
        }
        OrgCommand::Members(command) => {
            members(&client, &current_slug(&settings, &list), command).await
        }
        OrgCommand::Invites(command) => {
            invites(&client, &current_slug(&settings, &list), command).await
        }
        OrgCommand::Tokens(command) => {
            tokens(&client, &current_slug(&settings, &list), command).await
        }
        OrgCommand::Jwks(command) => jwks(&client, &current_slug(&settings, &list), command).await,
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

/// The slug of the current organization (the personal one when none is chosen).
fn current_slug(settings: &Settings, list: &OrganizationList) -> String {
    if !settings.organization.is_empty() {
        return settings.organization.clone();
    }
    list.organizations
        .iter()
        .find(|o| o.kind == "personal")
        .map(|o| o.slug.clone())
        .unwrap_or_default()
}

async fn members(client: &Client, slug: &str, command: MembersCommand) -> Result<(), CliError> {
    let base = ["v1", "organizations", slug, "members"];
    match command {
        MembersCommand::List { json } => {
            let list: MemberList = client.get(client.url(&base)).await?;
            if json {
                output::json(&list.members);
                return Ok(());
            }
            let rows: Vec<Vec<String>> = list
                .members
                .iter()
                .map(|m| vec![m.username.clone(), m.role.to_string(), m.email.clone()])
                .collect();
            output::table(&["USERNAME", "ROLE", "EMAIL"], &rows);
        }
        MembersCommand::Add { username, role } => {
            let added: MemberAdded = client
                .post(
                    client.url(&base),
                    &AddMemberRequest {
                        username: Some(username),
                        member: None,
                        role,
                    },
                )
                .await?;
            println!("Added {} to {slug} as {}.", added.member, added.role);
        }
        MembersCommand::Rm { username } => {
            let _: serde_json::Value = client
                .delete(client.url(&["v1", "organizations", slug, "members", &username]))
                .await?;
            println!("Removed {username} from {slug}.");
        }
        MembersCommand::Role { username, role } => {
            let changed: MemberResponse = client
                .patch(
                    client.url(&["v1", "organizations", slug, "members", &username]),
                    &UpdateMemberRequest { role },
                )
                .await?;
            println!(
                "{} is now {} of {slug}.",
                changed.member.username, changed.member.role
            );
        }
    }
    Ok(())
}

async fn invites(client: &Client, slug: &str, command: InvitesCommand) -> Result<(), CliError> {
    match command {
        InvitesCommand::List { json } => {
            let list: InviteList = client
                .get(client.url(&["v2", "organizations", slug, "invites"]))
                .await?;
            if json {
                output::json(&list.invites);
                return Ok(());
            }
            let rows: Vec<Vec<String>> = list
                .invites
                .iter()
                .map(|i| {
                    let to = if i.email.is_empty() {
                        i.username.clone()
                    } else {
                        i.email.clone()
                    };
                    vec![to, i.role.to_string(), i.created_at.clone()]
                })
                .collect();
            output::table(&["INVITED", "ROLE", "SINCE"], &rows);
        }
        InvitesCommand::Create {
            address,
            username,
            role,
        } => {
            let body = if username {
                CreateInviteRequest {
                    email: None,
                    username: Some(address.clone()),
                    role,
                }
            } else {
                CreateInviteRequest {
                    email: Some(address.clone()),
                    username: None,
                    role,
                }
            };
            let created: InviteCreatedResponse = client
                .post(client.url(&["v2", "organizations", slug, "invites"]), &body)
                .await?;
            println!(
                "Invited {address} to {} as {}.",
                created.invited.organization, created.invited.role
            );
        }
        InvitesCommand::Rm { address } => {
            let _: serde_json::Value = client
                .delete(client.url(&["v2", "organizations", slug, "invites", &address]))
                .await?;
            println!("Deleted the invite for {address}.");
        }
        InvitesCommand::Accept { org } => {
            let accepted: InviteAccepted = client
                .post(
                    client.url(&["v1", "user", "invites", &org, "accept"]),
                    &serde_json::json!({}),
                )
                .await?;
            println!("Joined {} as {}.", accepted.organization, accepted.role);
        }
    }
    Ok(())
}

async fn tokens(client: &Client, slug: &str, command: OrgTokensCommand) -> Result<(), CliError> {
    match command {
        OrgTokensCommand::List { json } => {
            let list: ApiTokenList = client
                .get(client.url(&["v1", "organizations", slug, "api-tokens"]))
                .await?;
            if json {
                output::json(&list.tokens);
                return Ok(());
            }
            let rows: Vec<Vec<String>> = list
                .tokens
                .iter()
                .map(|t| {
                    let scopes = t
                        .scopes
                        .as_deref()
                        .map(super::api_tokens::scopes_column)
                        .unwrap_or_default();
                    vec![
                        t.id.clone(),
                        t.name.clone(),
                        t.owner
                            .as_ref()
                            .map(|o| o.username.clone())
                            .unwrap_or_default(),
                        t.group.clone().unwrap_or_else(|| "(all)".into()),
                        scopes,
                        t.expires_at.clone().unwrap_or_else(|| "never".into()),
                        t.last_used_at.clone().unwrap_or_else(|| "never".into()),
                    ]
                })
                .collect();
            output::table(
                &[
                    "ID",
                    "NAME",
                    "OWNER",
                    "GROUP",
                    "SCOPES",
                    "EXPIRES",
                    "LAST USED",
                ],
                &rows,
            );
        }
        OrgTokensCommand::Revoke { id } => {
            let revoked: ApiTokenRevoked = client
                .delete(client.url(&["v1", "organizations", slug, "api-tokens", &id]))
                .await?;
            println!("Revoked token {} of {slug}.", revoked.token);
        }
    }
    Ok(())
}

async fn jwks(client: &Client, slug: &str, command: JwksCommand) -> Result<(), CliError> {
    match command {
        JwksCommand::List { json } => {
            let list: JwksList = client
                .get(client.url(&["v2", "organizations", slug, "jwks"]))
                .await?;
            if json {
                output::json(&list.jwks);
                return Ok(());
            }
            let rows: Vec<Vec<String>> = list
                .jwks
                .iter()
                .map(|j| {
                    vec![
                        j.jwks_name.clone(),
                        if j.jwks_url.is_empty() {
                            "(inline)".into()
                        } else {
                            j.jwks_url.clone()
                        },
                        j.key_ids
                            .iter()
                            .map(|k| k.clone().unwrap_or_else(|| "-".into()))
                            .collect::<Vec<_>>()
                            .join(","),
                        j.refreshed_at.clone(),
                        j.last_error.clone().unwrap_or_default(),
                    ]
                })
                .collect();
            output::table(&["NAME", "URL", "KEYS", "REFRESHED", "LAST ERROR"], &rows);
        }
        JwksCommand::Save { name, url, file } => {
            let body = match (url, file) {
                (Some(url), None) => SaveJwksRequest {
                    jwks_url: Some(url),
                    ..Default::default()
                },
                (None, Some(path)) => {
                    let text = std::fs::read_to_string(&path).map_err(|e| {
                        CliError::local(format!("cannot read {}: {e}", path.display()), "")
                    })?;
                    let document = serde_json::from_str(&text).map_err(|e| {
                        CliError::local(
                            format!("{} is not JSON: {e}", path.display()),
                            "a JWKS file is {\"keys\": [...]}",
                        )
                    })?;
                    SaveJwksRequest {
                        jwks: Some(document),
                        ..Default::default()
                    }
                }
                _ => {
                    return Err(CliError::local(
                        "give the key set's URL or --file",
                        "atoll org jwks save <name> <url>, or atoll org jwks save <name> --file jwks.json",
                    ))
                }
            };
            let url = client.url(&["v2", "organizations", slug, "jwks", &name]);
            let saved: JwksSaved = client
                .send_prepared(
                    url.clone(),
                    client.request(reqwest::Method::PUT, url).json(&body),
                )
                .await?;
            println!(
                "Saved key set {} for {slug} ({} keys).",
                saved.jwks.jwks_name,
                saved.jwks.key_ids.len()
            );
        }
        JwksCommand::Rm { name } => {
            let _: serde_json::Value = client
                .delete(client.url(&["v2", "organizations", slug, "jwks", &name]))
                .await?;
            println!("Removed key set {name} from {slug}.");
        }
        JwksCommand::Template {
            database,
            group,
            scope,
        } => {
            let mut url = client.url(&["v2", "organizations", slug, "jwks-template"]);
            {
                let mut query = url.query_pairs_mut();
                if let Some(database) = &database {
                    query.append_pair("database", database);
                }
                if let Some(group) = &group {
                    query.append_pair("group", group);
                }
                query.append_pair("scope", &scope);
            }
            let template: JwksTemplate = client.get(url).await?;
            output::json(&template.template);
        }
    }
    Ok(())
}
