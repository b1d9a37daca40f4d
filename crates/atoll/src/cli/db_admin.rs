//! `atoll db config | usage | inspect | restore | list-deleted | rotate-encryption-key`,
//! `atoll db tokens invalidate`
//! and `atoll db show --instance-urls`: managing a database once it exists. `db.rs` holds
//! the enum variants that lead here.

use super::client::{CliError, Client};
use super::output;
use atoll_types::databases::{
    DatabaseConfiguration, DatabaseResponse, DeletedDatabaseList, EncryptionKeyRotated,
    InstanceList, RestorableDatabase, RotateEncryptionKeyRequest, UpdateDatabaseConfiguration,
};
use atoll_types::organizations::OrganizationList;
use atoll_types::usage::{DatabaseStats, DatabaseUsageObject, DatabaseUsageResponse, TopQuery};
use atoll_types::Empty;
use clap::Subcommand;
use reqwest::Url;
use serde::Serialize;

#[derive(Subcommand)]
pub enum DbAdminCommand {
    /// Show a database's configuration, or change it with flags.
    #[command(after_help = "Examples:
  atoll db config shop
  atoll db config shop --block-writes on
  atoll db config shop --delete-protection on --size-limit 1gb
  atoll db config shop --size-limit none      # no size limit
  atoll db config shop --durability sync      # acknowledge commits once in object storage")]
    Config {
        /// Name of the database.
        name: String,
        /// Refuse every query while on.
        #[arg(long, value_name = "on|off", value_parser = super::parse_on_off)]
        block_reads: Option<bool>,
        /// Refuse writes while on (reads still work).
        #[arg(long, value_name = "on|off", value_parser = super::parse_on_off)]
        block_writes: Option<bool>,
        /// Refuse `atoll db destroy` while on.
        #[arg(long, value_name = "on|off", value_parser = super::parse_on_off)]
        delete_protection: Option<bool>,
        /// Maximum size (`256mb`, `1gb`, `512mib`, bytes), or `none` for no limit.
        #[arg(long, value_name = "SIZE")]
        size_limit: Option<String>,
        /// Allow `ATTACH` of other databases with tokens that permit it.
        #[arg(long, value_name = "on|off", value_parser = super::parse_on_off)]
        allow_attach: Option<bool>,
        /// When a commit is acknowledged: `lag` (once in the node's WAL), `sync` (once in
        /// object storage: no acknowledged write is ever lost), `default` (the server's).
        #[arg(long, value_parser = ["lag", "sync", "default"])]
        durability: Option<String>,
        /// Print the configuration as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Rows read and written, storage and bytes synced in a period (default: this month).
    ///
    /// Rows are counted as Turso bills them: each statement costs the rows the engine read
    /// and wrote, and a statement that touches no row (`SELECT 1`, `BEGIN`) still counts
    /// one row read.
    #[command(
        after_help = "Every statement counts at least one row read, as on Turso: \
`SELECT 1` is 1 row read.

Examples:
  atoll db usage shop
  atoll db usage shop --from 2026-11-01 --to 2026-11-08 --json"
    )]
    Usage {
        /// Name of the database.
        name: String,
        /// Start of the period: a date (`2026-11-01`, midnight UTC) or an RFC 3339 time.
        #[arg(long)]
        from: Option<String>,
        /// End of the period (exclusive), same forms as `--from`.
        #[arg(long)]
        to: Option<String>,
        /// Print the usage as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Size and activity of a database this month, and with `--queries` its heaviest statements.
    #[command(after_help = "Examples:
  atoll db inspect shop
  atoll db inspect shop --queries --json")]
    Inspect {
        /// Name of the database.
        name: String,
        /// Also list the statements that read or wrote the most rows.
        #[arg(long)]
        queries: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Bring back a destroyed database (paid plans keep them for 5 days).
    #[command(after_help = "Examples:
  atoll db restore shop --yes
  atoll db list-deleted            # what can be restored, and until when")]
    Restore {
        /// Name the database had.
        name: String,
        /// Id of the deleted database, when several deleted ones had that name
        /// (see `atoll db list-deleted`); default: the most recently deleted.
        #[arg(long)]
        id: Option<String>,
        /// Do not ask for confirmation (required when stdin is not a terminal).
        #[arg(long, short = 'y')]
        yes: bool,
    },
    /// List destroyed databases that can still be restored (paid plans).
    #[command(after_help = "Examples:\n  atoll db list-deleted\n  atoll db list-deleted --json")]
    ListDeleted {
        /// Print the JSON array.
        #[arg(long)]
        json: bool,
    },
    /// Re-encrypt a database encrypted with its customer's key under a new key: every page
    /// at once; from then on clients must send the new key. If it fails, run it again with
    /// the same keys.
    #[command(after_help = "Example:
  atoll db rotate-encryption-key vault --current-key \"$OLD\" --new-key \"$(openssl rand -base64 32)\"")]
    RotateEncryptionKey {
        /// Name of the database.
        name: String,
        /// The key the database is encrypted with now (base64).
        #[arg(long, value_name = "BASE64")]
        current_key: String,
        /// The new key (base64).
        #[arg(long, value_name = "BASE64")]
        new_key: String,
        /// The new key's cipher (one reserving the same bytes per page: aes256gcm,
        /// aes128gcm and chacha20poly1305 among themselves, aegis128* or aegis256*); the current one
        /// when absent.
        #[arg(long, value_name = "CIPHER")]
        new_cipher: Option<String>,
        /// The current key's cipher, when repeating a rotation that changed the cipher.
        #[arg(long, value_name = "CIPHER")]
        current_cipher: Option<String>,
    },
}

pub async fn run(client: &Client, command: DbAdminCommand) -> Result<(), CliError> {
    match command {
        DbAdminCommand::Config {
            name,
            block_reads,
            block_writes,
            delete_protection,
            size_limit,
            allow_attach,
            durability,
            json,
        } => {
            let url = client.org_url(&["databases", &name, "configuration"]);
            let changes = UpdateDatabaseConfiguration {
                // The API clears the limit on an empty string.
                size_limit: size_limit.map(|s| {
                    if matches!(s.to_ascii_lowercase().as_str(), "none" | "unlimited") {
                        String::new()
                    } else {
                        s
                    }
                }),
                allow_attach,
                block_reads,
                block_writes,
                delete_protection,
                allowed_ips: None,
                allowed_aws_vpc_ids: None,
                durability,
            };
            let changing = changes.size_limit.is_some()
                || changes.durability.is_some()
                || [allow_attach, block_reads, block_writes, delete_protection]
                    .iter()
                    .any(Option::is_some);
            let config: DatabaseConfiguration = if changing {
                client.patch(url, &changes).await?
            } else {
                client.get(url).await?
            };
            if json {
                output::json(&config);
                return Ok(());
            }
            if changing {
                println!("Updated the configuration of database {name}:");
            }
            print_configuration(&config);
            Ok(())
        }
        DbAdminCommand::Usage {
            name,
            from,
            to,
            json,
        } => {
            let mut url = client.org_url(&["databases", &name, "usage"]);
            {
                let mut query = url.query_pairs_mut();
                if let Some(from) = &from {
                    query.append_pair("from", &instant(from));
                }
                if let Some(to) = &to {
                    query.append_pair("to", &instant(to));
                }
            }
            let usage: DatabaseUsageResponse = client.get(url).await?;
            if json {
                output::json(&usage.database);
                return Ok(());
            }
            let period = match (&from, &to) {
                (None, None) => "this month".to_string(),
                (from, to) => format!(
                    "{} to {}",
                    from.as_deref().unwrap_or("start of this month"),
                    to.as_deref().unwrap_or("end of this month")
                ),
            };
            let total = usage.database.total;
            super::print_fields(&[
                ("Database", name),
                ("Period", period),
                ("Rows read", total.rows_read.to_string()),
                ("Rows written", total.rows_written.to_string()),
                ("Storage", human_bytes(total.storage_bytes)),
                ("Bytes synced", human_bytes(total.bytes_synced)),
            ]);
            Ok(())
        }
        DbAdminCommand::Inspect {
            name,
            queries,
            json,
        } => inspect(client, &name, queries, json).await,
        DbAdminCommand::Restore { name, id, yes } => restore(client, &name, id, yes).await,
        DbAdminCommand::RotateEncryptionKey {
            name,
            current_key,
            new_key,
            new_cipher,
            current_cipher,
        } => {
            let request = RotateEncryptionKeyRequest {
                current_encryption_key: current_key,
                encryption_key: new_key,
                encryption_cipher: new_cipher,
                current_encryption_cipher: current_cipher,
            };
            let rotated: EncryptionKeyRotated = client
                .post(
                    client.org_url(&["databases", &name, "encryption", "rotate"]),
                    &request,
                )
                .await?;
            println!(
                "Re-encrypted database {name} under its new key ({}, {} pages); clients must send the new key from now on.",
                rotated.encryption_cipher, rotated.pages_rewritten
            );
            Ok(())
        }
        DbAdminCommand::ListDeleted { json } => {
            let list: DeletedDatabaseList =
                client.get(client.org_url(&["deleted-databases"])).await?;
            if json {
                output::json(&list.databases);
                return Ok(());
            }
            if list.databases.is_empty() && !paid_plan(client).await? {
                eprintln!("{FREE_PLAN_DELETES}");
            }
            let rows: Vec<Vec<String>> = list
                .databases
                .iter()
                .map(|db| {
                    vec![
                        db.name.clone(),
                        db.db_id.clone(),
                        db.group.clone(),
                        db.deleted_at.clone(),
                        db.restorable_until.clone(),
                    ]
                })
                .collect();
            output::table(
                &["NAME", "ID", "GROUP", "DELETED", "RESTORABLE UNTIL"],
                &rows,
            );
            Ok(())
        }
    }
}

/// `atoll db show NAME --instance-urls`: one line per instance with its libSQL URL.
pub async fn print_instance_urls(client: &Client, name: &str, json: bool) -> Result<(), CliError> {
    let list: InstanceList = client
        .get(client.org_url(&["databases", name, "instances"]))
        .await?;
    if json {
        output::json(&list.instances);
        return Ok(());
    }
    let rows: Vec<Vec<String>> = list
        .instances
        .iter()
        .map(|i| {
            vec![
                i.name.clone(),
                i.kind.clone(),
                super::db::client_url(&i.http_url),
            ]
        })
        .collect();
    output::table(&["INSTANCE", "TYPE", "URL"], &rows);
    Ok(())
}

/// `atoll db tokens invalidate NAME`: rotates the database's signing key, so every token
/// minted for it stops working at once.
pub async fn invalidate_tokens(client: &Client, name: &str, yes: bool) -> Result<(), CliError> {
    super::confirm(&format!("invalidate every token of database {name}"), yes)?;
    let _: Empty = client
        .post(
            client.org_url(&["databases", name, "auth", "rotate"]),
            &serde_json::json!({}),
        )
        .await?;
    println!(
        "Invalidated the tokens of database {name}; mint new ones with `atoll db tokens create {name}`."
    );
    Ok(())
}

/// The `expiration` and `authorization` query of the token routes of databases and groups.
pub fn token_query(url: &mut Url, expiration: Option<&str>, read_only: bool) {
    let mut query = url.query_pairs_mut();
    if let Some(expiration) = expiration {
        query.append_pair("expiration", expiration);
    }
    if read_only {
        query.append_pair("authorization", "read-only");
    }
}

fn print_configuration(config: &DatabaseConfiguration) {
    let size_limit = match config.size_limit.parse::<u64>() {
        Ok(bytes) => format!("{} ({bytes} bytes)", human_bytes(bytes)),
        Err(_) => "none".to_string(),
    };
    super::print_fields(&[
        ("Block reads", super::on_off(config.block_reads).into()),
        ("Block writes", super::on_off(config.block_writes).into()),
        (
            "Delete protection",
            super::on_off(config.delete_protection).into(),
        ),
        ("Size limit", size_limit),
        ("Allow attach", super::on_off(config.allow_attach).into()),
        ("Durability", config.durability.clone()),
    ]);
}

/// What `inspect --json` prints: this month's totals, and the top statements when asked.
#[derive(Serialize)]
struct Inspection {
    name: String,
    #[serde(flatten)]
    usage: DatabaseUsageObject,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_queries: Option<Vec<TopQuery>>,
}

async fn inspect(client: &Client, name: &str, queries: bool, json: bool) -> Result<(), CliError> {
    let usage: DatabaseUsageResponse = client
        .get(client.org_url(&["databases", name, "usage"]))
        .await?;
    let top_queries = if queries {
        let stats: DatabaseStats = client
            .get(client.org_url(&["databases", name, "stats"]))
            .await?;
        Some(stats.top_queries)
    } else {
        None
    };
    let inspection = Inspection {
        name: name.to_string(),
        usage: usage.database.total,
        top_queries,
    };
    if json {
        output::json(&inspection);
        return Ok(());
    }
    super::print_fields(&[
        ("Database", inspection.name.clone()),
        (
            "Total space used",
            human_bytes(inspection.usage.storage_bytes),
        ),
        (
            "Rows read this month",
            inspection.usage.rows_read.to_string(),
        ),
        (
            "Rows written this month",
            inspection.usage.rows_written.to_string(),
        ),
    ]);
    if let Some(top) = &inspection.top_queries {
        println!();
        if top.is_empty() {
            println!("No statements recorded yet.");
        } else {
            let rows: Vec<Vec<String>> = top
                .iter()
                .map(|q| {
                    vec![
                        q.rows_read.to_string(),
                        q.rows_written.to_string(),
                        one_line(&q.query),
                    ]
                })
                .collect();
            output::table(&["ROWS READ", "ROWS WRITTEN", "QUERY"], &rows);
        }
    }
    Ok(())
}

const FREE_PLAN_DELETES: &str = "The free (starter) plan deletes databases at once; \
     paid plans keep them restorable for 5 days.";

async fn restore(
    client: &Client,
    name: &str,
    id: Option<String>,
    yes: bool,
) -> Result<(), CliError> {
    let list: DeletedDatabaseList = client.get(client.org_url(&["deleted-databases"])).await?;
    let chosen = match &id {
        Some(id) => list
            .databases
            .iter()
            .find(|db| db.db_id == *id && db.name == name),
        None => most_recently_deleted(&list.databases, name)?,
    };
    let Some(deleted) = chosen else {
        let (message, hint) = if paid_plan(client).await? {
            (
                format!("no deleted database named {name} can be restored"),
                "run `atoll db list-deleted` to see what can be restored".to_string(),
            )
        } else {
            (
                format!("database {name} cannot be restored: restore is a feature of paid plans"),
                format!("{FREE_PLAN_DELETES} Ask the instance administrator to change the organization's plan."),
            )
        };
        return Err(CliError {
            message,
            code: "database_not_found".into(),
            hint,
        });
    };
    super::confirm(
        &format!(
            "restore database {name} (deleted {}) into group {}",
            deleted.deleted_at, deleted.group
        ),
        yes,
    )?;
    let restored: DatabaseResponse = client
        .post(
            client.org_url(&["deleted-databases", &deleted.db_id, "restore"]),
            &serde_json::json!({}),
        )
        .await?;
    println!(
        "Restored database {} at {}.",
        restored.database.name,
        super::db::client_url(&restored.database.http_url)
    );
    Ok(())
}

/// The latest deletion of `name`; an error when two share that (second-precision) time,
/// since guessing which one the user means could bring back the wrong data.
fn most_recently_deleted<'a>(
    deleted: &'a [RestorableDatabase],
    name: &str,
) -> Result<Option<&'a RestorableDatabase>, CliError> {
    // RFC 3339 times of one server share a format, so they order as strings.
    let mut named: Vec<&RestorableDatabase> = deleted.iter().filter(|db| db.name == name).collect();
    named.sort_by(|a, b| b.deleted_at.cmp(&a.deleted_at));
    match named.as_slice() {
        [latest, next, ..] if latest.deleted_at == next.deleted_at => Err(CliError::local(
            format!(
                "several deleted databases named {name} were deleted at {}",
                latest.deleted_at
            ),
            "pick one with `--id` (see `atoll db list-deleted`)",
        )),
        [latest, ..] => Ok(Some(latest)),
        [] => Ok(None),
    }
}

/// Whether the current organization is on a paid plan: only then are deleted databases
/// kept, so an empty restore list means something else on the free plan.
async fn paid_plan(client: &Client) -> Result<bool, CliError> {
    let list: OrganizationList = client.get(client.url(&["v2", "organizations"])).await?;
    let current = list.organizations.iter().find(|org| {
        if client.organization.is_empty() {
            org.kind == "personal"
        } else {
            org.slug == client.organization
        }
    });
    Ok(current.is_some_and(|org| org.plan_id != "starter"))
}

/// A date alone (`2026-11-01`) means midnight UTC; anything else goes to the server as is.
fn instant(text: &str) -> String {
    let is_date = text.len() == 10
        && text.chars().enumerate().all(|(i, c)| {
            if i == 4 || i == 7 {
                c == '-'
            } else {
                c.is_ascii_digit()
            }
        });
    if is_date {
        format!("{text}T00:00:00Z")
    } else {
        text.to_string()
    }
}

/// Bytes in powers of 1000, the units `--size-limit` takes.
fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["kB", "MB", "GB", "TB"];
    if bytes < 1000 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64;
    let mut unit = "B";
    for next in UNITS {
        if value < 1000.0 {
            break;
        }
        value /= 1000.0;
        unit = next;
    }
    format!("{value:.2} {unit}")
}

/// A statement on one line for a table cell.
fn one_line(sql: &str) -> String {
    sql.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_become_midnight_utc() {
        assert_eq!(instant("2026-11-01"), "2026-11-01T00:00:00Z");
        assert_eq!(instant("2026-11-01T10:00:00Z"), "2026-11-01T10:00:00Z");
        assert_eq!(instant("yesterday"), "yesterday");
    }

    #[test]
    fn sizes_read_like_size_limits() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(999), "999 B");
        assert_eq!(human_bytes(4096), "4.10 kB");
        assert_eq!(human_bytes(64_000_000), "64.00 MB");
        assert_eq!(human_bytes(1_500_000_000), "1.50 GB");
    }

    #[test]
    fn restore_picks_the_latest_deletion_of_a_name() {
        let deleted = |id: &str, name: &str, at: &str| RestorableDatabase {
            name: name.into(),
            db_id: id.into(),
            group: "default".into(),
            deleted_at: at.into(),
            restorable_until: String::new(),
        };
        let list = [
            deleted("a", "shop", "2026-11-01T10:00:00Z"),
            deleted("b", "shop", "2026-11-02T10:00:00Z"),
            deleted("c", "blog", "2026-11-03T10:00:00Z"),
        ];
        assert_eq!(
            most_recently_deleted(&list, "shop").unwrap().unwrap().db_id,
            "b"
        );
        assert!(most_recently_deleted(&list, "nope").unwrap().is_none());
        let tied = [
            deleted("a", "shop", "2026-11-01T10:00:00Z"),
            deleted("b", "shop", "2026-11-01T10:00:00Z"),
        ];
        let error = most_recently_deleted(&tied, "shop").unwrap_err();
        assert!(error.to_string().contains("--id"), "{error}");
    }
}
