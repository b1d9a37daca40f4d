//! `atoll auth api-tokens mint | list | revoke`: platform API tokens for automation.

use super::client::{CliError, Client};
use super::config::Settings;
use super::output;
use atoll_types::scopes::Scope;
use atoll_types::tokens::{
    ApiTokenList, ApiTokenRevoked, CreateApiTokenRequest, CreatedApiTokenV2,
};
use clap::Subcommand;

#[derive(Subcommand)]
pub enum ApiTokensCommand {
    /// Mint a token; its secret is printed once. Scope it to an organization (`--org`) or a
    /// group (`--org --group` with `--read-only`, `--full-access` or `--scope`).
    #[command(after_help = "Examples:
  atoll auth api-tokens mint ci --org acme
  atoll auth api-tokens mint reader --org acme --group eu --read-only
  atoll auth api-tokens mint deployer --org acme --group eu --scope db:create --scope db:mint-token --expiration 30d")]
    Mint {
        /// Name of the token (unique among yours).
        name: String,
        /// Organization the token is restricted to.
        #[arg(long)]
        org: Option<String>,
        /// Group the token is pinned to (needs `--org` and scopes).
        #[arg(long, requires = "org")]
        group: Option<String>,
        /// Only the `read` scope.
        #[arg(long, conflicts_with_all = ["full_access", "scope"])]
        read_only: bool,
        /// Every scope of the group.
        #[arg(long, conflicts_with = "scope")]
        full_access: bool,
        /// One scope (repeat): read, db:create, db:delete, db:configure, db:mint-token,
        /// db:rotate-creds, group:configure, group:mint-token, group:rotate-creds.
        #[arg(long)]
        scope: Vec<String>,
        /// Lifetime (`30d`, `2w1d`, `never`); default never.
        #[arg(long)]
        expiration: Option<String>,
    },
    /// List your tokens (never their secrets).
    #[command(
        after_help = "Examples:\n  atoll auth api-tokens list\n  atoll auth api-tokens list --json"
    )]
    List {
        /// Print the JSON array.
        #[arg(long)]
        json: bool,
    },
    /// Revoke one of your tokens by name.
    #[command(after_help = "Example:\n  atoll auth api-tokens revoke ci")]
    Revoke {
        /// Name of the token.
        name: String,
    },
}

pub async fn run(command: ApiTokensCommand) -> Result<(), CliError> {
    let settings = Settings::load()?;
    let client = Client::new(&settings)?;
    client.require_token()?;
    match command {
        ApiTokensCommand::Mint {
            name,
            org,
            group,
            read_only,
            full_access,
            scope,
            expiration,
        } => {
            let scopes = if read_only {
                vec!["read-only".to_string()]
            } else if full_access {
                vec!["full-access".to_string()]
            } else {
                scope
            };
            if group.is_some() && scopes.is_empty() {
                return Err(CliError::local(
                    "a group-scoped token needs scopes",
                    "add --read-only, --full-access or --scope",
                ));
            }
            let body = CreateApiTokenRequest {
                organization: org,
                group,
                scopes: (!scopes.is_empty()).then_some(scopes),
                expiration,
            };
            let created: CreatedApiTokenV2 = client
                .post(client.url(&["v2", "auth", "api-tokens", &name]), &body)
                .await?;
            if let Some(notice) = &created.deprecation {
                eprintln!("Warning: {notice}");
            }
            println!("{}", created.token.value);
            Ok(())
        }
        ApiTokensCommand::List { json } => {
            let list: ApiTokenList = client
                .get(client.url(&["v1", "auth", "api-tokens"]))
                .await?;
            if json {
                output::json(&list.tokens);
                return Ok(());
            }
            let rows: Vec<Vec<String>> = list
                .tokens
                .iter()
                .map(|t| {
                    let scope = match (&t.organization, &t.group) {
                        (Some(org), Some(group)) => format!("{org}/{group}"),
                        (Some(org), None) => org.clone(),
                        _ => "(unrestricted)".to_string(),
                    };
                    let scopes = t.scopes.as_deref().map(scopes_column).unwrap_or_default();
                    vec![
                        t.name.clone(),
                        t.id.clone(),
                        scope,
                        scopes,
                        t.created_at.clone(),
                    ]
                })
                .collect();
            output::table(&["NAME", "ID", "RESTRICTED TO", "SCOPES", "CREATED"], &rows);
            Ok(())
        }
        ApiTokensCommand::Revoke { name } => {
            let revoked: ApiTokenRevoked = client
                .delete(client.url(&["v1", "auth", "api-tokens", &name]))
                .await?;
            println!("Revoked token {}.", revoked.token);
            Ok(())
        }
    }
}

/// The SCOPES column: the server stores the presets expanded (`read-only` becomes `read`,
/// `full-access` every scope), so the preset a token was minted with is named beside them.
pub(super) fn scopes_column(scopes: &[Scope]) -> String {
    if scopes == [Scope::Read] {
        "read (read-only)".to_string()
    } else if scopes.len() == Scope::ALL.len() && Scope::ALL.iter().all(|s| scopes.contains(s)) {
        "all (full-access)".to_string()
    } else {
        scopes
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expanded_presets_are_named() {
        assert_eq!(scopes_column(&[Scope::Read]), "read (read-only)");
        assert_eq!(scopes_column(&Scope::ALL), "all (full-access)");
        assert_eq!(
            scopes_column(&[Scope::Read, Scope::DbCreate]),
            "read,db:create"
        );
    }
}
