//! The cost of encryption with the customer's key (docs/ENCRYPTION.md): point selects and
//! autocommit inserts on an encrypted database beside the same on a plain one, in the same
//! run, on the same node, in turn (plain, encrypted, plain, encrypted: [`ROUNDS`] rounds of
//! half the duration each, summed) so both see the same machine and neither always goes
//! first. The encrypted requests carry the key (`x-turso-encryption-key`) as libSQL
//! clients do; the goal is at most 15 % slower.

use super::{pipeline_ok, throughput, Bench, BenchArgs, Org, Throughput, KV_ROWS};
use anyhow::{bail, Context};
use base64::Engine;
use serde_json::{json, Value};
use std::time::Duration;

/// The goal: an encrypted database at least this fraction of a plain one's throughput.
const GOAL: f64 = 0.85;
/// Rounds of (plain, encrypted) per figure.
const ROUNDS: u32 = 2;

/// The ciphers measured: the default AES-256-GCM (`ring`) and Turso's recommended
/// AEGIS-256 (the `aegis` crate).
const CIPHERS: [&str; 2] = ["aes256gcm", "aegis256"];

pub(crate) async fn run(bench: &Bench, org: &Org, args: &BenchArgs) -> anyhow::Result<()> {
    let key = base64::engine::general_purpose::STANDARD.encode(rand_key());
    let plain = Target::new(bench, org, "plainkv", None).await?;
    let mut encrypted = Vec::new();
    for cipher in CIPHERS {
        let name = format!("enckv-{cipher}");
        encrypted.push((
            cipher,
            Target::new(bench, org, &name, Some((&key, cipher))).await?,
        ));
    }
    let duration = Duration::from_secs(args.duration_secs) / ROUNDS;
    for (name, connections, insert) in [
        ("encryption_select_1", 1, false),
        ("encryption_select_n", args.connections, false),
        ("encryption_insert_n", args.connections, true),
    ] {
        eprintln!(
            "{name}: plain and each cipher in turn, {connections} connections, {} s each…",
            args.duration_secs
        );
        let mut plain_figure = Throughput::default();
        let mut figures: Vec<Throughput> =
            encrypted.iter().map(|_| Throughput::default()).collect();
        for _ in 0..ROUNDS {
            plain_figure.add(&plain.measure(connections, duration, insert).await);
            for ((_, target), figure) in encrypted.iter().zip(figures.iter_mut()) {
                figure.add(&target.measure(connections, duration, insert).await);
            }
        }
        for ((cipher, _), figure) in encrypted.iter().zip(&figures) {
            let ratio = figure.rate() / plain_figure.rate().max(1.0);
            println!(
                "{name} {cipher}: plain {:.0} req/s, encrypted {:.0} req/s ({connections} connections, {} + {} errors): encrypted/plain {:.2}; goal >= {GOAL:.2}: {}",
                plain_figure.rate(),
                figure.rate(),
                plain_figure.errors,
                figure.errors,
                ratio,
                super::verdict(ratio >= GOAL && plain_figure.errors + figure.errors == 0),
            );
        }
    }
    Ok(())
}

fn rand_key() -> [u8; 32] {
    rand::random()
}

/// A database of [`KV_ROWS`] rows and a client that sends its key (if any) with every
/// request.
struct Target {
    client: reqwest::Client,
    pipeline: String,
    token: String,
}

impl Target {
    async fn new(
        bench: &Bench,
        org: &Org,
        name: &str,
        key: Option<(&str, &str)>,
    ) -> anyhow::Result<Target> {
        let extra = match key {
            Some((key, cipher)) => {
                json!({"remote_encryption": {"encryption_key": key, "encryption_cipher": cipher}})
            }
            None => json!({}),
        };
        bench.create_database(org, name, extra).await?;
        let token = bench.database_token(org, name).await?;
        let mut headers = reqwest::header::HeaderMap::new();
        if let Some((key, _)) = key {
            headers.insert(
                "x-turso-encryption-key",
                key.parse().context("the key as a header")?,
            );
        }
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(1024)
            .tcp_nodelay(true)
            .default_headers(headers)
            .build()?;
        let target = Target {
            client,
            pipeline: format!("{}v2/pipeline", bench.database_url(org, name)),
            token,
        };
        target
            .run("CREATE TABLE kv (id INTEGER PRIMARY KEY, v TEXT NOT NULL)")
            .await?;
        target
            .run(&format!("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < {KV_ROWS}) INSERT INTO kv (id, v) SELECT x, 'value ' || x FROM c"))
            .await?;
        Ok(target)
    }

    async fn run(&self, sql: &str) -> anyhow::Result<()> {
        let body =
            json!({"requests": [{"type": "execute", "stmt": {"sql": sql}}, {"type": "close"}]});
        let response = self
            .client
            .post(&self.pipeline)
            .bearer_auth(&self.token)
            .json(&body)
            .send()
            .await?;
        let status = response.status();
        let answer: Value = response.json().await.unwrap_or(Value::Null);
        if status != reqwest::StatusCode::OK || answer["results"][0]["type"] != "ok" {
            bail!("{sql}: {status} {answer}");
        }
        Ok(())
    }

    async fn measure(&self, connections: usize, duration: Duration, insert: bool) -> Throughput {
        let (client, pipeline, token) = (
            self.client.clone(),
            self.pipeline.clone(),
            self.token.clone(),
        );
        throughput(connections, duration, move |n| {
            let body = if insert {
                format!(
                    r#"{{"requests":[{{"type":"execute","stmt":{{"sql":"INSERT INTO kv (v) VALUES (?)","args":[{{"type":"text","value":"row {n}"}}]}}}},{{"type":"close"}}]}}"#
                )
            } else {
                let id = n % KV_ROWS + 1;
                format!(
                    r#"{{"requests":[{{"type":"execute","stmt":{{"sql":"SELECT v FROM kv WHERE id = ?","args":[{{"type":"integer","value":"{id}"}}]}}}},{{"type":"close"}}]}}"#
                )
            };
            let (client, pipeline, token) = (client.clone(), pipeline.clone(), token.clone());
            async move { pipeline_ok(&client, &pipeline, &token, body).await }
        })
        .await
    }
}
