//! `atoll`: the server (`dev`, `serve`, `migrate`, `node`) and the command-line client
//! (`auth`, `org`, `group`, `db`).

mod bench;
mod cli;
mod file_modes;
mod fuzz_sql;
mod logging;
mod node;
mod secrets_key;
mod server;
mod supervisor;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "atoll",
    version,
    about = "Self-hostable libSQL database platform",
    propagate_version = true,
    after_help = "Examples:\n  atoll dev                                   # start everything locally (API on 127.0.0.1:8080)\n  atoll auth login --username admin --password \"$(cat atoll-data/admin.password)\"\n  atoll db create shop && atoll db show shop --url\n\nEvery command has --help with an example: atoll db create --help"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run everything locally on an embedded SQLite metadata store: zero set-up.
    ///
    /// Example: `atoll dev --data-dir ./atoll-data`
    Dev(server::DevArgs),
    /// Run the control plane on PostgreSQL (or SQLite) for production.
    ///
    /// Example: `atoll serve --database-url postgres://atoll@db/atoll`
    Serve(server::ServeArgs),
    /// Run one data node (database hosts and the node admin API) for `atoll serve`.
    ///
    /// Example: `atoll node --location aws-eu-west-1 --node-secret "$SECRET"`
    Node(node::NodeArgs),
    /// Apply the metadata store's migrations and exit.
    ///
    /// Example: `atoll migrate --database-url postgres://atoll@db/atoll`
    Migrate(server::MigrateArgs),
    /// The command-line client: `atoll auth`, `atoll org`, `atoll group`, `atoll db`.
    #[command(flatten)]
    Client(cli::ClientCommand),
    /// Start a server in this process on loopback and measure it: one line per figure.
    ///
    /// Example: `atoll bench --only create_database`
    Bench(bench::BenchArgs),
    /// Fuzz the SQL engine through the tenant sandbox (hidden: for Atoll's developers).
    /// `scripts/fuzz-sql.sh` runs it in a loop and keeps the cases that crash it.
    ///
    /// Example: `atoll fuzz-sql --seed 42 --duration 60`
    #[command(hide = true)]
    FuzzSql(fuzz_sql::FuzzSqlArgs),
}

fn main() -> anyhow::Result<()> {
    // Before any thread exists: glibc's thresholds are process-wide.
    atoll_data::memory::pin_allocator_thresholds();
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        match cli.command {
            Command::Dev(args) => server::dev(args).await,
            Command::Serve(args) => server::serve(args).await,
            Command::Migrate(args) => server::migrate(args).await,
            Command::Node(args) => node::node(args).await,
            Command::Client(command) => cli::run(command).await,
            Command::Bench(args) => bench::bench(args).await,
            Command::FuzzSql(args) => fuzz_sql::fuzz_sql(args).await,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_tree_is_consistent() {
        Cli::command().debug_assert();
    }

    /// The README promises `--help` with an example on every command: walk the whole tree
    /// (`atoll --help` and every group, like `atoll db tokens --help`, included).
    #[test]
    fn every_command_has_help_with_an_example() {
        fn walk(command: &mut clap::Command, path: &str, missing: &mut Vec<String>) {
            let help = command.render_long_help().to_string();
            if !help.contains("Example") {
                missing.push(path.to_string());
            }
            for sub in command.get_subcommands_mut() {
                if sub.get_name() == "help" {
                    continue;
                }
                let path = format!("{path} {}", sub.get_name());
                walk(sub, &path, missing);
            }
        }
        let mut command = Cli::command();
        command.build();
        let mut missing = Vec::new();
        walk(&mut command, "atoll", &mut missing);
        assert!(
            missing.is_empty(),
            "no example in the help of: {missing:#?}"
        );
    }

    #[test]
    fn token_ids_starting_with_a_hyphen_are_values_not_flags() {
        // Token ids are base64url, so one in 32 starts with `-`.
        let parsed = Cli::try_parse_from(["atoll", "org", "tokens", "revoke", "-bJFm0x"]);
        assert!(parsed.is_ok(), "{:?}", parsed.err().map(|e| e.to_string()));
    }

    #[test]
    fn passwords_starting_with_a_hyphen_are_values_not_flags() {
        // Generated passwords are base64url too: `--password "$(cat …)"` once failed on one
        // starting with `-` (the README's own login line, found by scripts/readme.sh).
        let parsed = Cli::try_parse_from([
            "atoll",
            "auth",
            "login",
            "--username",
            "admin",
            "--password",
            "-3xQ_a",
        ]);
        assert!(parsed.is_ok(), "{:?}", parsed.err().map(|e| e.to_string()));
    }
}
