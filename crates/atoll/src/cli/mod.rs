//! The command-line client: `atoll auth`, `atoll org`, `atoll group`, `atoll db`,
//! `atoll admin`, modelled
//! on the `turso` CLI's command tree. Every command talks to the platform API over HTTP with
//! the wire types of `atoll-types`; settings live in `config.rs`.

mod admin;
mod api_tokens;
mod auth;
mod backups;
mod client;
mod config;
mod data_plane;
mod db;
mod db_admin;
mod export;
mod group;
mod import;
mod locations;
mod org;
mod output;
mod progress;
mod shell;
mod sql_session;
mod statements;

use clap::Subcommand;
pub use client::CliError;

/// The client commands, flattened into `atoll`'s command list.
#[derive(Subcommand)]
pub enum ClientCommand {
    /// Log in to an Atoll server, log out, show who you are.
    ///
    /// Example: `atoll auth login --username admin --password "$(cat atoll-data/admin.password)"`
    #[command(subcommand)]
    Auth(auth::AuthCommand),
    /// List your organizations and choose the one other commands act on.
    ///
    /// Example: `atoll org switch acme`
    #[command(subcommand)]
    Org(org::OrgCommand),
    /// Manage the groups (locations and shared settings) of databases.
    ///
    /// Example: `atoll group create eu --location aws-eu-west-1`
    #[command(subcommand)]
    Group(group::GroupCommand),
    /// Create, list, inspect and destroy databases, and mint their tokens.
    ///
    /// Example: `atoll db create shop && atoll db tokens create shop`
    #[command(subcommand)]
    Db(db::DbCommand),
    /// List the locations groups can be created in, the closest one marked.
    ///
    /// Example: `atoll locations`
    Locations {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Instance administration of the data nodes (instance administrators).
    ///
    /// Example: `atoll admin quarantine list`
    #[command(subcommand)]
    Admin(admin::AdminCommand),
}

/// Runs one client command; on failure prints `Error: …` as one line on stderr and exits 1.
pub async fn run(command: ClientCommand) -> anyhow::Result<()> {
    let result = match command {
        ClientCommand::Auth(command) => auth::run(command).await,
        ClientCommand::Org(command) => org::run(command).await,
        ClientCommand::Group(command) => group::run(command).await,
        ClientCommand::Db(command) => db::run(command).await,
        ClientCommand::Locations { json } => locations::run(json).await,
        ClientCommand::Admin(command) => admin::run(command).await,
    };
    if let Err(error) = result {
        eprintln!("{error}");
        std::process::exit(1);
    }
    Ok(())
}

/// Asks before a destructive action: `--yes` skips the question; without it a
/// non-interactive caller is refused rather than left hanging.
fn confirm(what: &str, yes: bool) -> Result<(), CliError> {
    use std::io::{BufRead, IsTerminal, Write};
    if yes {
        return Ok(());
    }
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        return Err(CliError::local(
            format!("refusing to {what} without confirmation"),
            "pass `--yes` to confirm in scripts",
        ));
    }
    eprint!("Are you sure you want to {what}? [y/N] ");
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    stdin
        .lock()
        .read_line(&mut answer)
        .map_err(|e| CliError::local(format!("cannot read the answer: {e}"), ""))?;
    if matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes") {
        Ok(())
    } else {
        Err(CliError::local("aborted", ""))
    }
}

/// Parses the `on|off` value of a setting flag (`--block-writes on`); the spellings
/// people reach for (`true`, `yes`, `enable`) are accepted too.
fn parse_on_off(value: &str) -> Result<bool, String> {
    match value.to_ascii_lowercase().as_str() {
        "on" | "true" | "yes" | "enable" | "enabled" => Ok(true),
        "off" | "false" | "no" | "disable" | "disabled" => Ok(false),
        _ => Err(format!("expected `on` or `off`, got `{value}`")),
    }
}

fn on_off(value: bool) -> &'static str {
    if value {
        "on"
    } else {
        "off"
    }
}

/// Prints `key: value` lines with the values aligned, as `db show` and `group show` do.
fn print_fields(rows: &[(&str, String)]) {
    let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0) + 1;
    for (key, value) in rows {
        println!("{:<width$}  {value}", format!("{key}:"));
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn on_off_flags_parse() {
        assert_eq!(super::parse_on_off("on"), Ok(true));
        assert_eq!(super::parse_on_off("OFF"), Ok(false));
        assert_eq!(super::parse_on_off("enable"), Ok(true));
        assert!(super::parse_on_off("maybe")
            .unwrap_err()
            .contains("`on` or `off`"));
    }
}
