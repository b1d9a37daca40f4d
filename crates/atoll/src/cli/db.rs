//! `atoll db list | create | show | destroy | tokens create`; `import`, `export` and `shell`
//! live in their own modules.

use super::client::{CliError, Client};
use super::config::Settings;
use super::output;
use super::{export, import, shell};
use atoll_types::databases::{DatabaseList, DatabaseResponse, DatabaseToken};
use clap::{ArgGroup, Subcommand};

#[derive(Subcommand)]
pub enum DbCommand {
    /// List the databases of the current organization.
    #[command(after_help = "Examples:\n  atoll db list\n  atoll db list --group eu --json")]
    List {
        /// Only the databases of this group.
        #[arg(long)]
        group: Option<String>,
        /// Print the JSON array of databases.
        #[arg(long)]
        json: bool,
    },
    /// Create a database: empty, or from a file, a dump or another database.
    #[command(
        group(ArgGroup::new("source").args(["from_file", "from_dump", "from_db"])),
        after_help = "Examples:\n  atoll db create shop\n  atoll db create shop-eu --group eu --size-limit 256mb\n  atoll db create shop --from-file shop.db\n  atoll db create shop --from-dump dump.sql --wait\n  atoll db create shop-copy --from-db shop\n  atoll db create shop-before --from-db shop --timestamp 2026-11-24T09:30:00Z\n  atoll db create vault --remote-encryption-key \"$(openssl rand -base64 32)\""
    )]
    Create {
        /// Name of the new database.
        name: String,
        /// Group to create it in (default: the group named `default`).
        #[arg(long)]
        group: Option<String>,
        /// Maximum size: bytes, or with a unit (`256mb`, `1gb`, `512mib`).
        #[arg(long)]
        size_limit: Option<String>,
        /// Upload this SQLite database file into it (as `atoll db import` does).
        #[arg(long, value_name = "FILE")]
        from_file: Option<std::path::PathBuf>,
        /// Load this SQL dump (`sqlite3 db .dump > dump.sql`) into it.
        #[arg(long, value_name = "FILE")]
        from_dump: Option<std::path::PathBuf>,
        /// Make it a copy of this database of the organization.
        #[arg(long, value_name = "DATABASE")]
        from_db: Option<String>,
        /// With `--from-db`: the source as it was at this instant (RFC 3339, inside its
        /// restorable window; see `atoll db backups`).
        #[arg(long, requires = "from_db", value_name = "TIME")]
        timestamp: Option<String>,
        /// Return only once the database answers queries (at most 60 s).
        #[arg(long)]
        wait: bool,
        /// Encrypt it with this key (base64 of 32 random bytes; 16 for the 128-bit ciphers). The
        /// server stores only a verifier of it: every client must send it
        /// (`remoteEncryptionKey`), and a lost key means lost data.
        #[arg(long, value_name = "BASE64")]
        remote_encryption_key: Option<String>,
        /// The cipher of `--remote-encryption-key`: aes256gcm (default), aes128gcm,
        /// chacha20poly1305, aegis128l, aegis128x2, aegis128x4, aegis256, aegis256x2 or
        /// aegis256x4.
        #[arg(long, requires = "remote_encryption_key", value_name = "CIPHER")]
        remote_encryption_cipher: Option<String>,
    },
    /// Create a database from an SQLite file, named after the file (or `--name`).
    #[command(
        after_help = "Examples:\n  atoll db import shop.db                # creates database `shop`\n  atoll db import ./data/orders.sqlite --group eu\n  atoll db import Orders.db --name orders\n\nA file in rollback-journal mode, not checkpointed, or with another page size is\nuploaded as a prepared WAL copy; the file itself is not changed. If the upload fails,\nthe new database is deleted again."
    )]
    Import {
        /// The SQLite database file.
        file: std::path::PathBuf,
        /// Name of the new database (default: the file's name without its extension).
        #[arg(long)]
        name: Option<String>,
        /// Group to create it in (default: the group named `default`).
        #[arg(long)]
        group: Option<String>,
    },
    /// Download a database as an SQLite file.
    #[command(
        after_help = "Examples:\n  atoll db export shop                   # writes shop.db\n  atoll db export shop --output backup/shop-2026-01-01.db"
    )]
    Export {
        /// Name of the database.
        name: String,
        /// File to write (default: `NAME.db` in the current directory).
        #[arg(long, short = 'o', value_name = "FILE")]
        output: Option<std::path::PathBuf>,
        /// Replace the file when it exists.
        #[arg(long)]
        overwrite: bool,
        /// The key of a database encrypted with its customer's key (base64): the server
        /// decrypts the file with it on the way out.
        #[arg(long, value_name = "BASE64")]
        remote_encryption_key: Option<String>,
    },
    /// Run SQL: an interactive shell, one statement, or a script piped in.
    #[command(
        after_help = "Examples:\n  atoll db shell shop\n  atoll db shell shop \"select count(*) from orders\"\n  atoll db shell shop --mode json \"select * from orders limit 5\"\n  atoll db shell shop .dump > dump.sql\n  atoll db shell shop < dump.sql\n\nDot-commands: .tables, .schema [TABLE], .dump, .mode table|csv|json|line|list, .help, .quit"
    )]
    Shell {
        /// Name of the database.
        name: String,
        /// SQL (or one dot-command) to run instead of reading stdin.
        sql: Option<String>,
        /// How to print results.
        #[arg(long, value_enum, default_value = "table")]
        mode: shell::Mode,
        /// Report each request sent (statements and bytes) on stderr.
        #[arg(long, short = 'v')]
        verbose: bool,
        /// The key of a database encrypted with its customer's key (base64).
        #[arg(long, value_name = "BASE64")]
        remote_encryption_key: Option<String>,
    },
    /// Show a database, or just its URL.
    #[command(
        group(ArgGroup::new("only").args(["url", "http_url", "instance_urls"])),
        after_help = "Examples:\n  atoll db show shop\n  atoll db show shop --url        # http://127.0.0.1:8081/db/shop-admin/ (libsql://… with TLS)\n  atoll db show shop --http-url   # http://127.0.0.1:8081/db/shop-admin/\n  atoll db show shop --instance-urls --json"
    )]
    Show {
        /// Name of the database.
        name: String,
        /// Print only the URL to give a libSQL client: `libsql://…` when the database
        /// hosts have TLS, else `http://…`.
        #[arg(long)]
        url: bool,
        /// Print only the HTTP URL (works without wildcard DNS).
        #[arg(long)]
        http_url: bool,
        /// Print only the URL of each instance of the database (with `--json`: the instances).
        #[arg(long)]
        instance_urls: bool,
        /// Print the database as JSON.
        #[arg(long, conflicts_with_all = ["url", "http_url"])]
        json: bool,
    },
    /// Destroy a database.
    #[command(after_help = "Example:\n  atoll db destroy shop --yes")]
    Destroy {
        /// Name of the database.
        name: String,
        /// Do not ask for confirmation (required when stdin is not a terminal).
        #[arg(long, short = 'y')]
        yes: bool,
    },
    /// Database tokens (for libSQL clients).
    #[command(
        subcommand,
        after_help = "Examples:\n  atoll db tokens create shop --expiration 7d   # a token for libSQL clients\n  atoll db tokens create shop --read-only\n  atoll db tokens invalidate shop --yes          # every token of shop stops working"
    )]
    Tokens(TokensCommand),
    /// `config`, `usage`, `inspect`, `restore`, `list-deleted` (in `db_admin.rs`).
    #[command(flatten)]
    Admin(super::db_admin::DbAdminCommand),
    /// `backups`, `restore-to` (in `backups.rs`).
    #[command(flatten)]
    Backups(super::backups::BackupsCommand),
}

#[derive(Subcommand)]
pub enum TokensCommand {
    /// Mint a token for a database and print it.
    #[command(
        after_help = "Examples:\n  atoll db tokens create shop\n  atoll db tokens create shop --expiration 7d --read-only"
    )]
    Create {
        /// Name of the database.
        name: String,
        /// Lifetime: `never` (default), or `<n><unit>…` with units w d h m s (`7d`, `2w1d`).
        #[arg(long, short = 'e')]
        expiration: Option<String>,
        /// A token that can only read.
        #[arg(long, short = 'r')]
        read_only: bool,
    },
    /// Issue a TLS client certificate for a database (an alternative to a token when the
    /// database hosts have TLS): writes `<name>.crt`, `<name>.key` (readable by you only)
    /// and `<name>-ca.crt` into a directory.
    #[command(
        after_help = "Examples:\n  atoll db tokens cert shop --dir ./certs\n  atoll db tokens cert shop --expiration 12h --read-only"
    )]
    Cert {
        /// Name of the database.
        name: String,
        /// Lifetime: `1d` by default, at most `30d` (`<n><unit>…` with units w d h m s).
        #[arg(long, short = 'e')]
        expiration: Option<String>,
        /// A certificate that can only read.
        #[arg(long, short = 'r')]
        read_only: bool,
        /// Where to write the files.
        #[arg(long, default_value = ".")]
        dir: std::path::PathBuf,
    },
    /// Invalidate every token of a database by rotating its signing key.
    #[command(after_help = "Example:\n  atoll db tokens invalidate shop --yes")]
    Invalidate {
        /// Name of the database.
        name: String,
        /// Do not ask for confirmation (required when stdin is not a terminal).
        #[arg(long, short = 'y')]
        yes: bool,
    },
}

pub async fn run(command: DbCommand) -> Result<(), CliError> {
    let settings = Settings::load()?;
    let client = Client::new(&settings)?;
    client.require_token()?;
    match command {
        DbCommand::List { group, json } => {
            let mut url = client.org_url(&["databases"]);
            if let Some(group) = &group {
                url.query_pairs_mut().append_pair("group", group);
            }
            let list: DatabaseList = client.get(url).await?;
            if json {
                output::json(&list.databases);
                return Ok(());
            }
            let rows: Vec<Vec<String>> = list
                .databases
                .iter()
                .map(|db| {
                    vec![
                        db.name.clone(),
                        db.group.clone(),
                        db.regions.join(","),
                        client_url(&db.http_url),
                    ]
                })
                .collect();
            output::table(&["NAME", "GROUP", "LOCATIONS", "URL"], &rows);
            Ok(())
        }
        DbCommand::Create {
            name,
            group,
            size_limit,
            from_file,
            from_dump,
            from_db,
            timestamp,
            wait,
            remote_encryption_key,
            remote_encryption_cipher,
        } => {
            let source = match (from_file, from_dump, from_db) {
                (Some(file), _, _) => Some(import::Source::File(file)),
                (_, Some(dump), _) => Some(import::Source::Dump(dump)),
                (_, _, Some(db)) => Some(import::Source::Database(db, timestamp)),
                _ => None,
            };
            import::create(
                &client,
                import::CreateOptions {
                    name,
                    group,
                    size_limit,
                    source,
                    wait,
                    encryption: remote_encryption_key.map(|key| (key, remote_encryption_cipher)),
                },
            )
            .await
        }
        DbCommand::Import { file, name, group } => {
            let name = import::import_name(&file, name)?;
            import::create(
                &client,
                import::CreateOptions {
                    name,
                    group,
                    size_limit: None,
                    source: Some(import::Source::File(file)),
                    wait: false,
                    encryption: None,
                },
            )
            .await
        }
        DbCommand::Export {
            name,
            output,
            overwrite,
            remote_encryption_key,
        } => export::export(&client, &name, output, overwrite, remote_encryption_key).await,
        DbCommand::Shell {
            name,
            sql,
            mode,
            verbose,
            remote_encryption_key,
        } => {
            shell::run(
                &client,
                shell::ShellOptions {
                    name,
                    sql,
                    mode,
                    verbose,
                    encryption_key: remote_encryption_key,
                },
            )
            .await
        }
        DbCommand::Show {
            name,
            url,
            http_url,
            instance_urls,
            json,
        } => {
            if instance_urls {
                return super::db_admin::print_instance_urls(&client, &name, json).await;
            }
            let answer: DatabaseResponse =
                client.get(client.org_url(&["databases", &name])).await?;
            let db = answer.database;
            if url {
                println!("{}", client_url(&db.http_url));
            } else if http_url {
                println!("{}", db.http_url);
            } else if json {
                output::json(&db);
            } else {
                let rows = [
                    ("Name", db.name.clone()),
                    ("ID", db.db_id.clone()),
                    ("Group", db.group.clone()),
                    ("Locations", db.regions.join(",")),
                    ("State", db.state.clone()),
                    ("URL", client_url(&db.http_url)),
                    ("HTTP URL", db.http_url.clone()),
                    ("Hostname", db.hostname.clone()),
                    ("Delete protection", on_off(db.delete_protection)),
                    ("Block reads", on_off(db.block_reads)),
                    ("Block writes", on_off(db.block_writes)),
                ];
                let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
                for (key, value) in rows {
                    println!("{:<width$}  {value}", format!("{key}:"), width = width + 1);
                }
            }
            Ok(())
        }
        DbCommand::Destroy { name, yes } => {
            super::confirm(&format!("destroy database {name}"), yes)?;
            let _: serde_json::Value = client.delete(client.org_url(&["databases", &name])).await?;
            println!("Destroyed database {name}.");
            Ok(())
        }
        DbCommand::Tokens(TokensCommand::Create {
            name,
            expiration,
            read_only,
        }) => {
            let mut url = client.org_url(&["databases", &name, "auth", "tokens"]);
            {
                let mut query = url.query_pairs_mut();
                if let Some(expiration) = &expiration {
                    query.append_pair("expiration", expiration);
                }
                if read_only {
                    query.append_pair("authorization", "read-only");
                }
            }
            let token: DatabaseToken = client.post(url, &serde_json::json!({})).await?;
            println!("{}", token.jwt);
            Ok(())
        }
        DbCommand::Tokens(TokensCommand::Cert {
            name,
            expiration,
            read_only,
            dir,
        }) => {
            let mut url = client.org_url(&["databases", &name, "auth", "certificates"]);
            {
                let mut query = url.query_pairs_mut();
                if let Some(expiration) = &expiration {
                    query.append_pair("expiration", expiration);
                }
                if read_only {
                    query.append_pair("authorization", "read-only");
                }
            }
            let issued: atoll_types::client_certificates::DatabaseCertificate =
                client.post(url, &serde_json::json!({})).await?;
            let write = |file: String, contents: &str, private: bool| {
                let path = dir.join(file);
                let mut options = std::fs::OpenOptions::new();
                options.write(true).create(true).truncate(true);
                #[cfg(unix)]
                if private {
                    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
                }
                #[cfg(not(unix))]
                let _ = private;
                std::io::Write::write_all(&mut options.open(&path)?, contents.as_bytes())?;
                Ok::<_, std::io::Error>(path)
            };
            let written = (|| {
                Ok::<_, std::io::Error>((
                    write(format!("{name}.crt"), &issued.certificate, false)?,
                    write(format!("{name}.key"), &issued.private_key, true)?,
                    write(format!("{name}-ca.crt"), &issued.ca_certificate, false)?,
                ))
            })()
            .map_err(|e| CliError::local(format!("cannot write the certificate files: {e}"), ""))?;
            println!(
                "Issued a {} client certificate for {name}, valid until {}:\n  {}\n  {}\n  {} (the organization's CA)",
                issued.authorization,
                issued.expires_at,
                written.0.display(),
                written.1.display(),
                written.2.display()
            );
            Ok(())
        }
        DbCommand::Tokens(TokensCommand::Invalidate { name, yes }) => {
            super::db_admin::invalidate_tokens(&client, &name, yes).await
        }
        DbCommand::Admin(command) => super::db_admin::run(&client, command).await,
        DbCommand::Backups(command) => super::backups::run(&client, command).await,
    }
}

/// The URL to give a libSQL client, derived from the database's `http_url`: the path
/// form (`…/db/<db>-<org>/`), which works without wildcard DNS (`*.localhost` does not
/// resolve everywhere), as `libsql://` when the database hosts have TLS and as the plain
/// `http://` URL when they do not: every client takes `libsql://` to mean TLS, so it
/// would fail against a plain server. `Hostname` (the Turso form, `libsql://<Hostname>`)
/// is printed next to it for set-ups with wildcard DNS.
pub(super) fn client_url(http_url: &str) -> String {
    match http_url.strip_prefix("https://") {
        Some(rest) => format!("libsql://{rest}"),
        None => http_url.to_string(),
    }
}

fn on_off(value: bool) -> String {
    if value { "on" } else { "off" }.to_string()
}
