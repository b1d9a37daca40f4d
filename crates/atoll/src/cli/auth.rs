//! `atoll auth login | logout | whoami | token`.

use super::client::{CliError, Client};
use super::config::Settings;
use atoll_types::tokens::LoginTokensInvalidated;
use atoll_types::users::{LoginRequest, LoginResponse, UserResponse};
use clap::{Args, Subcommand};
use std::io::IsTerminal;

#[derive(Subcommand)]
pub enum AuthCommand {
    /// Log in with a username and password (or store an existing API token).
    ///
    /// In a terminal, a missing username or password is asked for (the password without echo).
    #[command(after_help = "Examples:
  atoll auth login --api-url http://127.0.0.1:8080 --username admin   # asks for the password
  atoll auth login --username admin --password \"$(cat atoll-data/admin.password)\"
  ATOLL_PASSWORD=secret atoll auth login --api-url http://atoll.internal:8080 --username alice
  atoll auth login --token \"$(cat atoll-data/admin.token)\"")]
    Login(LoginArgs),
    /// Forget the stored token; with `--all`, first end every session of the user.
    ///
    /// Without `--all` logging out is local, as with the turso CLI: the token is forgotten
    /// here and expires on its own. `--all` revokes every login token of the user, on every
    /// machine, before forgetting this one (API tokens are revoked with
    /// `atoll auth api-tokens revoke`).
    #[command(
        after_help = "Examples:\n  atoll auth logout\n  atoll auth logout --all   # ends every session of the user, everywhere"
    )]
    Logout(LogoutArgs),
    /// Show the user the token belongs to.
    #[command(after_help = "Example:\n  atoll auth whoami")]
    Whoami,
    /// Print the platform API token (for scripts: `curl -H \"Authorization: Bearer $(atoll auth token)\"`).
    #[command(
        after_help = "Example:\n  curl -H \"Authorization: Bearer $(atoll auth token)\" http://127.0.0.1:8080/v1/user"
    )]
    Token,
    /// Mint, list and revoke platform API tokens.
    #[command(
        subcommand,
        after_help = "Example:\n  atoll auth api-tokens mint ci --org acme"
    )]
    ApiTokens(super::api_tokens::ApiTokensCommand),
}

#[derive(Args)]
pub struct LogoutArgs {
    /// Revoke every login token of the user (all sessions, on every machine), not only
    /// forget this one. Needs a login token: API tokens cannot end sessions.
    #[arg(long)]
    all: bool,
}

#[derive(Args)]
pub struct LoginArgs {
    /// Platform API URL; stored for the next commands.
    #[arg(long)]
    api_url: Option<String>,
    /// Username to log in as.
    #[arg(long, env = "ATOLL_USERNAME", conflicts_with = "token")]
    username: Option<String>,
    /// Password of `--username` (prefer the environment variable: flags show in `ps`).
    /// (A password may start with `-`: it is taken as the value, not as a flag.)
    #[arg(
        long,
        env = "ATOLL_PASSWORD",
        hide_env_values = true,
        allow_hyphen_values = true,
        conflicts_with = "token"
    )]
    password: Option<String>,
    /// An existing platform API token to store instead of logging in.
    #[arg(long)]
    token: Option<String>,
}

pub async fn run(command: AuthCommand) -> Result<(), CliError> {
    let mut settings = Settings::load()?;
    match command {
        AuthCommand::Login(args) => login(&mut settings, args).await,
        AuthCommand::ApiTokens(command) => super::api_tokens::run(command).await,
        AuthCommand::Logout(args) => {
            if args.all {
                return logout_everywhere(&mut settings).await;
            }
            let had = settings.token.take().is_some();
            settings.username = None;
            settings.organization.clear();
            settings.save()?;
            if had {
                println!("Logged out.");
            } else {
                println!("Not logged in.");
            }
            Ok(())
        }
        AuthCommand::Whoami => {
            let client = Client::new(&settings)?;
            client.require_token()?;
            let user: UserResponse = client.get(client.url(&["v1", "user"])).await?;
            println!("{}", user.user.username);
            Ok(())
        }
        AuthCommand::Token => {
            let token = settings.token().ok_or_else(|| {
                CliError::local(
                    "not logged in",
                    "run `atoll auth login` (or set ATOLL_API_TOKEN)",
                )
            })?;
            println!("{token}");
            Ok(())
        }
    }
}

/// Forgets the stored token and who it belongs to.
fn forget_token(settings: &mut Settings) -> Result<(), CliError> {
    settings.token = None;
    settings.username = None;
    settings.organization.clear();
    settings.save()
}

/// `auth logout --all`: `POST /v1/auth/invalidate` (what `turso auth logout --all` calls),
/// then forgets the local token, which the call revoked too.
async fn logout_everywhere(settings: &mut Settings) -> Result<(), CliError> {
    let client = Client::new(settings)?;
    client.require_token()?;
    let url = client.url(&["v1", "auth", "invalidate"]);
    match client
        .post::<LoginTokensInvalidated, _>(url, &serde_json::json!({}))
        .await
    {
        Ok(_) => {
            forget_token(settings)?;
            println!("Logged out everywhere: every login token of the user is revoked.");
            Ok(())
        }
        // A token that no longer works is of no use here either: forget it, but say
        // plainly that the other sessions were not ended.
        Err(e) if e.code == "unauthorized" => {
            forget_token(settings)?;
            Err(CliError::local(
                format!("the stored token no longer works ({}), so other sessions could not be ended; it is forgotten", e.message),
                "log in again with `atoll auth login`, then run `atoll auth logout --all`",
            ))
        }
        Err(e) => Err(e),
    }
}

async fn login(settings: &mut Settings, args: LoginArgs) -> Result<(), CliError> {
    let api_url = args.api_url.clone().unwrap_or_else(|| settings.api_url());
    let (token, username) = if let Some(token) = args.token {
        let client = Client::with(api_url.clone(), Some(token.clone()), String::new())?;
        let user: UserResponse = client
            .get(client.url(&["v1", "user"]))
            .await
            .map_err(|e| {
                refused_login(
                    e,
                    "the token is not valid (expired or revoked?): pass a valid one to `--token`, or log in with `--username`",
                )
            })?;
        (token, user.user.username)
    } else {
        let interactive = std::io::stdin().is_terminal();
        let username =
            match args.username {
                Some(username) => username,
                None if interactive => prompt_username()?,
                None => return Err(CliError::local(
                    "no username given",
                    "pass `--username U` with `--password P` (or ATOLL_PASSWORD), or `--token T`",
                )),
            };
        let password = match args.password {
            Some(password) => password,
            // Typed at the terminal without echo, so it shows neither on screen nor in `ps`.
            None if interactive => rpassword::prompt_password(format!("Password for {username}: "))
                .map_err(|e| CliError::local(format!("cannot read the password: {e}"), ""))?,
            None => return Err(CliError::local(
                "no password given",
                "pass `--password P` or set ATOLL_PASSWORD (or run it in a terminal to be asked)",
            )),
        };
        let client = Client::with(api_url.clone(), None, String::new())?;
        let answer: LoginResponse = client
            .post(
                client.url(&["v1", "auth", "login"]),
                &LoginRequest { username, password },
            )
            .await
            .map_err(|e| {
                refused_login(
                    e,
                    "check the username and the password (`atoll dev` writes its admin's to atoll-data/admin.password)",
                )
            })?;
        (answer.token, answer.username)
    };
    settings.api_url = Some(api_url.clone());
    settings.token = Some(token);
    settings.username = Some(username.clone());
    settings.organization.clear();
    settings.save()?;
    println!("Logged in as {username} at {api_url}.");
    Ok(())
}

/// A refused login is no reason to "run `atoll auth login`": that is what was run.
fn refused_login(error: CliError, hint: &str) -> CliError {
    if error.code == "unauthorized" {
        CliError {
            hint: hint.to_string(),
            ..error
        }
    } else {
        error
    }
}

fn prompt_username() -> Result<String, CliError> {
    use std::io::{BufRead, Write};
    eprint!("Username: ");
    let _ = std::io::stderr().flush();
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .map_err(|e| CliError::local(format!("cannot read the username: {e}"), ""))?;
    let username = line.trim().to_string();
    if username.is_empty() {
        return Err(CliError::local(
            "no username given",
            "type the username, or pass `--username U`",
        ));
    }
    Ok(username)
}
