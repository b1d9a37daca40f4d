//! `turso_sync`: a Turso Sync client against the node (docs/DATA-PLANE.md, "Turso Sync"),
//! making the same requests as `@tursodatabase/sync`:
//!
//! - **bootstrap**: `--sync-mb` of one-page rows written and stored (the shipper's round
//!   over, its new snapshot included), then `POST
//!   /pull-updates` without a revision, every page written into a local file as it is
//!   decoded; MB/s of the database's size (target: at least 100 MB/s), and the same up
//!   to the last byte received (the server's part). The file is checked afterwards
//!   (`quick_check`, every row there).
//! - **pull**: 1,000 rows rewritten on the server (one page each), stored, then the pull
//!   from the bootstrap's revision, applied to the file and checked; seconds.
//! - **push**: 1,000 inserts sent as the client's push batch over `/v2/pipeline`
//!   (`BEGIN IMMEDIATE`, its bookkeeping table, the statements on `not is_autocommit`,
//!   the bookkeeping upsert, `COMMIT`); seconds.
//!
//! Client and server share the machine: the figures are a floor.

use super::{verdict, wait_durable, write_replica_rows, Bench, BenchArgs, StorageMode};
use anyhow::{bail, Context};
use atoll_data::sync::proto::{decode_answer, PullHeader, PullRequest};
use serde_json::{json, Value};
use std::io::{Seek, SeekFrom, Write};
use std::path::Path;
use std::time::Instant;

const PAGE: u64 = 4096;
const CHANGED_ROWS: u64 = 1000;
const PUSHED_STATEMENTS: usize = 1000;

pub(super) async fn run(args: &BenchArgs, dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    let bench = Bench::start(None, dir, StorageMode::Lag).await?;
    let org = bench.org("tursosync").await?;
    bench.create_database(&org, "synced", json!({})).await?;
    let token = bench.database_token(&org, "synced").await?;
    let url = bench.database_url(&org, "synced");
    bench
        .execute(
            &url,
            &token,
            "CREATE TABLE t (id INTEGER PRIMARY KEY, b BLOB NOT NULL)",
        )
        .await?;
    let id = bench
        .node
        .by_label(&format!("synced-{}", org.slug))
        .context("the database")?
        .id()
        .to_string();
    eprintln!("turso_sync: writing {} MiB…", args.sync_mb);
    write_replica_rows(&bench.node, &id, args.sync_mb).await?;
    settled(&bench, &id).await?;
    let rows = args.sync_mb * 256;

    let pull = |revision: &str| {
        let request = bench
            .client
            .post(format!("{url}pull-updates"))
            .bearer_auth(&token)
            .header("content-type", "application/protobuf")
            .body(
                PullRequest {
                    client_revision: revision.to_string(),
                    ..PullRequest::default()
                }
                .to_body(),
            );
        async move {
            let response = request.send().await?;
            if response.status() != reqwest::StatusCode::OK {
                bail!("pull: {}: {}", response.status(), response.text().await?);
            }
            anyhow::Ok(response.bytes().await?)
        }
    };

    let local = dir.join("local.db");
    let start = Instant::now();
    let body = pull("").await?;
    let received = start.elapsed().as_secs_f64();
    let header = apply(&local, &body)?;
    let bootstrap = start.elapsed().as_secs_f64();
    check(&local, rows)?;
    let mb = (header.db_size * PAGE) as f64 / 1_000_000.0;

    let changed = CHANGED_ROWS.min(rows);
    let step = rows / changed;
    bench
        .execute(
            &url,
            &token,
            &format!(
                "UPDATE t SET b = randomblob(3000) WHERE id % {step} = 0 AND id <= {}",
                changed * step
            ),
        )
        .await?;
    settled(&bench, &id).await?;
    let start = Instant::now();
    let body = pull(&header.server_revision).await?;
    let (_, pages) = decode_answer(&body)?;
    apply(&local, &body)?;
    let pulled = start.elapsed().as_secs_f64();
    check(&local, rows)?;
    if (pages.len() as u64) < changed {
        bail!(
            "the pull after {changed} changed rows brought {} pages",
            pages.len()
        );
    }

    let batch = push_batch(rows);
    let start = Instant::now();
    let response = bench
        .client
        .post(format!("{url}v2/pipeline"))
        .bearer_auth(&token)
        .json(&json!({"baton": null, "requests": [{"type": "batch", "batch": batch}]}))
        .send()
        .await?;
    let status = response.status();
    let answer: Value = response.json().await?;
    let pushed = start.elapsed().as_secs_f64();
    let errors = &answer["results"][0]["response"]["result"]["step_errors"];
    if status != reqwest::StatusCode::OK
        || !errors
            .as_array()
            .is_some_and(|e| e.len() == PUSHED_STATEMENTS + 4 && e.iter().all(Value::is_null))
    {
        bail!("push: {status}: {answer}");
    }

    println!(
        "turso_sync: bootstrap of {} MiB in {bootstrap:.2} s ({:.0} MB/s, applied and verified; received in {received:.2} s, {:.0} MB/s; target >= 100 MB/s: {}); pull of {changed} changed rows in {pulled:.3} s ({} pages); push of {PUSHED_STATEMENTS} statements in {pushed:.3} s",
        args.sync_mb,
        mb / bootstrap,
        mb / received,
        verdict(mb / bootstrap >= 100.0),
        pages.len(),
    );
    bench.node.begin_shutdown();
    Ok(())
}

/// Waits until the log has stored everything and the shipper's round is over (after a
/// large write the round also stores a new snapshot, which a pull meanwhile waits for, at
/// most 5 s: the figures measure the pull, not that round).
async fn settled(bench: &Bench, id: &str) -> anyhow::Result<()> {
    wait_durable(&bench.node, id).await?;
    let log = bench
        .node
        .by_id(id)
        .context("database")?
        .log()
        .cloned()
        .context("log")?;
    let deadline = Instant::now() + std::time::Duration::from_secs(600);
    while log.status().lag_ms > 0 || log.generation_pending() {
        if Instant::now() > deadline {
            bail!("the log did not settle in 10 minutes: {:?}", log.status());
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    Ok(())
}

/// Writes an answer's pages into the file and cuts it at the database's size, as the
/// client's commit of the pulled pages does; answers the header.
fn apply(file: &Path, body: &[u8]) -> anyhow::Result<PullHeader> {
    let (header, pages) = decode_answer(body)?;
    let mut out = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(file)?;
    for page in &pages {
        out.seek(SeekFrom::Start(page.page_id * PAGE))?;
        out.write_all(&page.encoded_page)?;
    }
    out.set_len(header.db_size * PAGE)?;
    out.sync_all()?;
    Ok(header)
}

fn check(file: &Path, rows: u64) -> anyhow::Result<()> {
    let conn = rusqlite::Connection::open(file)?;
    let check: String = conn.query_row("PRAGMA quick_check", [], |r| r.get(0))?;
    let count: u64 = conn.query_row("SELECT count(*) FROM t", [], |r| r.get(0))?;
    if check != "ok" || count != rows {
        bail!("the local file is not the database: quick_check {check}, {count} rows of {rows}");
    }
    Ok(())
}

/// The batch `@tursodatabase/sync` pushes: `PUSHED_STATEMENTS` inserts after row `after`.
fn push_batch(after: u64) -> Value {
    let in_transaction = json!({"type": "not", "cond": {"type": "is_autocommit"}});
    let step = |sql: &str, args: Value| json!({"stmt": {"sql": sql, "args": args, "want_rows": false}, "condition": in_transaction});
    let mut steps = vec![
        json!({"stmt": {"sql": "BEGIN IMMEDIATE", "want_rows": false}}),
        step(
            "CREATE TABLE IF NOT EXISTS turso_sync_last_change_id (client_id TEXT PRIMARY KEY, pull_gen INTEGER, change_id INTEGER)",
            json!([]),
        ),
    ];
    for i in 0..PUSHED_STATEMENTS as u64 {
        steps.push(step(
            "INSERT INTO t (id, b) VALUES (?, ?) ON CONFLICT (id) DO UPDATE SET b = excluded.b",
            json!([
                {"type": "integer", "value": (after + 1 + i).to_string()},
                {"type": "blob", "base64": "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8"}
            ]),
        ));
    }
    steps.push(step(
        "INSERT INTO turso_sync_last_change_id (client_id, pull_gen, change_id) VALUES (?, ?, ?) ON CONFLICT (client_id) DO UPDATE SET pull_gen = excluded.pull_gen, change_id = excluded.change_id",
        json!([
            {"type": "text", "value": "bench-client"},
            {"type": "integer", "value": "1"},
            {"type": "integer", "value": PUSHED_STATEMENTS.to_string()}
        ]),
    ));
    steps.push(step("COMMIT", json!([])));
    json!({"steps": steps})
}
