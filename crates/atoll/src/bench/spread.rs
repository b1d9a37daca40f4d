//! `atoll bench --only spread`: the workload Atoll exists for — one database per tenant,
//! requests spread over thousands of them — beside the one-database figure, in one run.
//!
//! Every database is a copy of one template (a `kv` table of [`ROWS`] rows), seeded
//! through the store and the node directly like `rss_peak`'s. For each scale of
//! `--spread-databases` (ascending; each adds databases to the previous):
//! - every new database is queried once (a tenant's database has been used before: its
//!   WAL exists), then the node's idle connections are closed;
//! - `spread_first_query`: the first query to databases with no open connection (as after
//!   an hour without a request), one connection, one after another, against a warm
//!   database's latency;
//! - point selects over `/v2/pipeline` on 1 and `--connections` connections: on one of the
//!   databases, then each request on a random database (uniform, then Zipf with s = 1.1),
//!   with the ratio to the one-database figure; Zipf twice, the first time right after the
//!   uniform phase (printed, `…_after_uniform`), the second in the steady state a skewed
//!   workload lives in, its popular databases warm (the figure the goal is about);
//! - `spread_idle_cpu`: the CPU the process spends at rest with that many databases;
//! - the process's RSS and open files after.
//!
//! Goals (issue 31): spread over 2,000 at `--connections` ≥ 70 % of one database, at one
//! connection ≥ 50 % (mean latency ≤ 2×), over 100,000 (Zipf) ≥ 50 %; a first query ≤ 2× a
//! warm one (p50) and ≤ 1 ms (p99).

use super::{
    mib, percentiles, pipeline_ok, print_throughput_untargeted, seed_databases, status_kib,
    throughput, verdict, Bench, BenchArgs, Org, Throughput, SETUP_CONCURRENCY,
};
use anyhow::Context;
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Rows of every database's `kv` table.
const ROWS: u64 = 10;
/// The exponent of the Zipf distribution of the skewed figures.
const ZIPF_EXPONENT: f64 = 1.1;
/// First queries timed per scale (each to a database not queried before).
const FIRST_QUERIES: usize = 200;
/// A phase's seed is its number shifted past every request number `throughput` gives
/// (a connection's count starts at its index × 1,000,003).
const PHASE_SEED_SHIFT: u32 = 40;

pub(super) async fn run(bench: &Arc<Bench>, main: &Org, args: &BenchArgs) -> anyhow::Result<()> {
    let mut scales = args.spread_databases.clone();
    scales.sort_unstable();
    scales.dedup();
    let Some(&largest) = scales.last() else {
        return Ok(());
    };
    let template = template_database(bench, main).await?;
    let org = Arc::new(bench.org("spread").await?);
    let names: Arc<Vec<String>> =
        Arc::new((0..largest).map(|i| format!("spread-{i:06}")).collect());
    let urls: Arc<Vec<String>> = Arc::new(
        names
            .iter()
            .map(|name| format!("{}v2/pipeline", bench.database_url(&org, name)))
            .collect(),
    );
    let mut seeded = 0;
    for scale in scales {
        let start = Instant::now();
        let batch = Arc::new(names[seeded..scale].to_vec());
        seed_databases(
            bench,
            &org.slug,
            &batch,
            atoll_types::node::Seed::Copy {
                source_id: template.clone(),
            },
        )
        .await?;
        println!(
            "# spread: {} databases of {ROWS} rows seeded in {:.0} s (copies of one template, through the store and the node directly)",
            scale - seeded,
            start.elapsed().as_secs_f64()
        );
        let fresh = seeded..scale;
        seeded = scale;
        prime(bench, &org, &urls, fresh.clone()).await?;
        idle_cpu(scale, Duration::from_secs(args.duration_secs.max(1))).await;
        first_queries(bench, &org, &urls, fresh).await?;
        let urls = Arc::new(urls[..scale].to_vec());
        // Each phase draws its own sequence: one replaying an earlier phase's draws would
        // find the databases that phase left warm.
        let mut phase = 0u64;
        let mut next_seed = || {
            phase += 1;
            phase << PHASE_SEED_SHIFT
        };
        for connections in [1, args.connections] {
            let duration = Duration::from_secs(args.duration_secs);
            let one = select_throughput(
                bench,
                &org,
                &urls,
                connections,
                duration,
                Pick::One,
                next_seed(),
            )
            .await;
            print_throughput_untargeted(
                &format!("spread_one_database_{connections}"),
                &one,
                connections,
            );
            for pick in [Pick::Uniform, Pick::Zipf(Arc::new(zipf_cdf(scale)))] {
                let name = format!("spread_{}_{scale}_{connections}", pick.name());
                let measure = |seed| {
                    select_throughput(
                        bench,
                        &org,
                        &urls,
                        connections,
                        duration,
                        pick.clone(),
                        seed,
                    )
                };
                if let Pick::Zipf(_) = pick {
                    // The phase before left the warm set holding databases drawn uniformly;
                    // a tenant workload's popular databases are warm in its steady state.
                    // The transition is printed apart, then the steady state is measured.
                    let transition = measure(next_seed()).await;
                    println!(
                        "{name}_after_uniform: {:.0} req/s ({connections} connections, {:.1} s, {} errors), {:.0} % of one database (right after the uniform phase: the warm set not yet the popular databases; not a goal)",
                        transition.rate(),
                        transition.seconds,
                        transition.errors,
                        transition.rate() / one.rate().max(1.0) * 100.0,
                    );
                }
                let spread = measure(next_seed()).await;
                let ratio = spread.rate() / one.rate().max(1.0);
                let goal = match (&pick, connections) {
                    (Pick::Zipf(_), _) if scale >= 100_000 => Some(0.5),
                    (Pick::Uniform, 1) if scale <= 2_000 => Some(0.5),
                    (Pick::Uniform, _) if scale <= 2_000 => Some(0.7),
                    _ => None,
                };
                println!(
                    "{name}: {:.0} req/s ({connections} connections, {:.1} s, {} errors), {:.0} % of one database{}",
                    spread.rate(),
                    spread.seconds,
                    spread.errors,
                    ratio * 100.0,
                    goal.map_or(String::new(), |goal| format!(
                        "; target >= {:.0} %: {}",
                        goal * 100.0,
                        verdict(ratio >= goal && spread.errors == 0)
                    )),
                );
            }
        }
        println!(
            "spread_resources_{scale}: RSS {:.1} MiB, {} open files (whole process: client, control plane, store and node)",
            mib(status_kib("self", "VmRSS").unwrap_or(0)),
            open_files()
        );
        // At rest: what the node's idle sweeper does once connections have gone unused
        // (`UNUSED_CONNECTION_LIFETIME`) and tokens are no longer trusted
        // (`VERIFIED_TOKEN_TTL`), done at once.
        let node = Arc::clone(&bench.node);
        tokio::task::spawn_blocking(move || {
            node.pool.close_unused(Duration::ZERO);
            node.forget_verified_tokens(Duration::ZERO);
            atoll_data::memory::release_free_memory();
        })
        .await?;
        let rest_goal = (scale >= 100_000).then_some(800.0);
        let rss = mib(status_kib("self", "VmRSS").unwrap_or(0));
        println!(
            "spread_resources_at_rest_{scale}: RSS {rss:.1} MiB, {} open files (idle connections closed){}",
            open_files(),
            rest_goal.map_or(String::new(), |goal| format!(
                "; target <= {goal:.0} MiB: {}",
                verdict(rss <= goal)
            )),
        );
        // `ATOLL_EXIT_AT_REST=1` under heaptrack: the process ends at the first scale's
        // at-rest figure without freeing anything, so what heaptrack reports as leaked is
        // what the node holds at rest (PERFORMANCE.md, "A database's own state at rest, a
        // third smaller").
        if std::env::var_os("ATOLL_EXIT_AT_REST").is_some() {
            std::process::exit(0);
        }
    }
    Ok(())
}

/// Creates the template every spread database is a copy of; returns its id.
async fn template_database(bench: &Bench, main: &Org) -> anyhow::Result<String> {
    let created = bench
        .post(
            &format!("/v1/organizations/{}/databases", main.slug),
            json!({"name": "spread-template", "group": "default"}),
        )
        .await?;
    let id = created["database"]["DbId"]
        .as_str()
        .context("create: no DbId")?
        .to_string();
    let token = bench.database_token(main, "spread-template").await?;
    let url = bench.database_url(main, "spread-template");
    bench
        .execute(
            &url,
            &token,
            "CREATE TABLE kv (id INTEGER PRIMARY KEY, v TEXT NOT NULL)",
        )
        .await?;
    bench
        .execute(
            &url,
            &token,
            &format!("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < {ROWS}) INSERT INTO kv (id, v) SELECT x, 'value ' || x FROM c"),
        )
        .await?;
    Ok(id)
}

/// Queries each of the databases `fresh` once, then closes every idle connection of the
/// node.
async fn prime(
    bench: &Arc<Bench>,
    org: &Arc<Org>,
    urls: &Arc<Vec<String>>,
    fresh: std::ops::Range<usize>,
) -> anyhow::Result<()> {
    let (client, org, urls) = (bench.client.clone(), Arc::clone(org), Arc::clone(urls));
    let start = fresh.start;
    Bench::for_each_index("primed", fresh.len(), SETUP_CONCURRENCY, move |i| {
        let (client, org, urls) = (client.clone(), Arc::clone(&org), Arc::clone(&urls));
        async move {
            let url = &urls[start + i];
            if !pipeline_ok(&client, url, &org.group_token, select_body(i as u64)).await {
                anyhow::bail!("priming query to {url} failed");
            }
            Ok(())
        }
    })
    .await?;
    // What the warm set costs: the resident memory its idle connections give back when
    // closed (after the allocator returned the freed pages), beside what the pool counts.
    // Free pages the seeding left behind are given back first, so that only what the
    // connections held is counted (at 100,000 databases the seeding's garbage was counted
    // as theirs: 188-268 KiB per connection instead of 65).
    tokio::task::spawn_blocking(atoll_data::memory::release_free_memory).await?;
    let node = Arc::clone(&bench.node);
    let (idle, counted) = (node.pool.idle_count(), node.pool.idle_bytes());
    let before = status_kib("self", "VmRSS").unwrap_or(0);
    let files_before = open_files();
    tokio::task::spawn_blocking(move || {
        node.pool.close_unused(Duration::ZERO);
        atoll_data::memory::release_free_memory();
    })
    .await?;
    let freed = before.saturating_sub(status_kib("self", "VmRSS").unwrap_or(0));
    let files = files_before.saturating_sub(open_files());
    if idle > 0 {
        println!(
            "spread_warm_cost: {idle} idle connections held {:.1} MiB of resident memory ({:.0} KiB each) and {files} open files ({:.1} each); the pool counted {:.0} KiB each against --warm-memory",
            mib(freed),
            freed as f64 / idle as f64,
            files as f64 / idle as f64,
            counted as f64 / 1024.0 / idle as f64,
        );
    }
    Ok(())
}

/// Times the first query to up to [`FIRST_QUERIES`] of the databases `fresh` (never queried
/// since they were seeded), one after another, against the same query repeated on a warm
/// database.
async fn first_queries(
    bench: &Bench,
    org: &Org,
    urls: &[String],
    fresh: std::ops::Range<usize>,
) -> anyhow::Result<()> {
    let step = (fresh.len() / FIRST_QUERIES).max(1);
    let picked: Vec<usize> = fresh.clone().step_by(step).take(FIRST_QUERIES).collect();
    let warm_url = &urls[fresh.start];
    // As after an hour without a request, no database has seen the token within the
    // minute it remembers a verified one for: a group token minted now (an expiry makes it
    // differ from the one the databases were primed with).
    let token = bench.group_token(&org.slug, "?expiration=1d").await?;
    let mut first = Vec::with_capacity(picked.len());
    for &i in &picked {
        let start = Instant::now();
        if !pipeline_ok(&bench.client, &urls[i], &token, select_body(i as u64)).await {
            anyhow::bail!("first query to {} failed", urls[i]);
        }
        first.push(start.elapsed());
    }
    let mut warm = Vec::with_capacity(picked.len());
    for n in 0..picked.len() as u64 {
        let start = Instant::now();
        if !pipeline_ok(&bench.client, warm_url, &token, select_body(n)).await {
            anyhow::bail!("warm query to {warm_url} failed");
        }
        warm.push(start.elapsed());
    }
    let (first_p50, first_p99) = percentiles(first);
    let (warm_p50, warm_p99) = percentiles(warm);
    println!(
        "spread_first_query: p50 {first_p50:.3} ms, p99 {first_p99:.3} ms over {} databases never queried before; a warm database p50 {warm_p50:.3} ms, p99 {warm_p99:.3} ms; p50 {:.1}x warm; target p50 <= 2x warm and p99 <= 1 ms: {}",
        picked.len(),
        first_p50 / warm_p50.max(f64::EPSILON),
        verdict(first_p50 <= 2.0 * warm_p50 && first_p99 <= 1.0),
    );
    Ok(())
}

/// Which database each request goes to.
#[derive(Clone)]
enum Pick {
    /// Always the first.
    One,
    /// Any, each as likely.
    Uniform,
    /// By rank, Zipf-distributed: the cumulative probabilities of the ranks.
    Zipf(Arc<Vec<f64>>),
}

impl Pick {
    fn name(&self) -> &'static str {
        match self {
            Pick::One => "one",
            Pick::Uniform => "uniform",
            Pick::Zipf(_) => "zipf",
        }
    }

    fn index(&self, random: u64, count: usize) -> usize {
        match self {
            Pick::One => 0,
            Pick::Uniform => (random % count as u64) as usize,
            Pick::Zipf(cdf) => {
                let u = (random >> 11) as f64 / (1u64 << 53) as f64;
                cdf.partition_point(|&p| p < u).min(count - 1)
            }
        }
    }
}

/// The cumulative probabilities of ranks `1..=count` under Zipf's law with
/// [`ZIPF_EXPONENT`].
fn zipf_cdf(count: usize) -> Vec<f64> {
    let weights: Vec<f64> = (1..=count)
        .map(|rank| 1.0 / (rank as f64).powf(ZIPF_EXPONENT))
        .collect();
    let total: f64 = weights.iter().sum();
    let mut sum = 0.0;
    weights
        .into_iter()
        .map(|w| {
            sum += w;
            sum / total
        })
        .collect()
}

/// SplitMix64: spreads consecutive request numbers over the whole `u64` range.
fn mix(n: u64) -> u64 {
    let mut z = n.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn select_body(n: u64) -> String {
    let id = n % ROWS + 1;
    format!(
        r#"{{"requests":[{{"type":"execute","stmt":{{"sql":"SELECT v FROM kv WHERE id = ?","args":[{{"type":"integer","value":"{id}"}}]}}}},{{"type":"close"}}]}}"#
    )
}

async fn select_throughput(
    bench: &Bench,
    org: &Org,
    urls: &Arc<Vec<String>>,
    connections: usize,
    duration: Duration,
    pick: Pick,
    seed: u64,
) -> Throughput {
    eprintln!(
        "spread: {} over {} databases, {connections} connections for {} s…",
        pick.name(),
        urls.len(),
        duration.as_secs()
    );
    let (client, token, urls) = (
        bench.client.clone(),
        org.group_token.clone(),
        Arc::clone(urls),
    );
    throughput(connections, duration, move |n| {
        let random = mix(n ^ seed);
        let url = urls[pick.index(random, urls.len())].clone();
        let (client, token) = (client.clone(), token.clone());
        async move { pipeline_ok(&client, &url, &token, select_body(random)).await }
    })
    .await
}

/// The CPU the process spends while nothing is asked of it for `window`, with `scale`
/// databases on the node (its background loops: shipping, sweeps, heartbeats). What a node costs at rest
/// should follow what is written, not how many databases it holds.
async fn idle_cpu(scale: usize, window: Duration) {
    let before = cpu_ticks();
    tokio::time::sleep(window).await;
    if let (Some(before), Some(after)) = (before, cpu_ticks()) {
        // Clock ticks of 10 ms (USER_HZ is 100 on Linux).
        let ms = (after - before) as f64 * 10.0;
        println!(
            "spread_idle_cpu_{scale}: {:.0} ms of CPU per second at rest ({scale} databases, {:.0} s measured)",
            ms / window.as_secs_f64(),
            window.as_secs_f64()
        );
    }
}

/// User and system CPU of the whole process so far, in clock ticks (`/proc/self/stat`).
fn cpu_ticks() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The fields after the command name (which may hold spaces, inside parentheses):
    // utime and stime are the 14th and 15th of the whole line.
    let after_name = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

fn open_files() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, Iterator::count)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zipf_favours_the_first_ranks_and_reaches_every_one() {
        let cdf = zipf_cdf(1000);
        assert!((cdf[999] - 1.0).abs() < 1e-9);
        let pick = Pick::Zipf(Arc::new(cdf));
        let mut hits = vec![0u32; 1000];
        for n in 0..100_000 {
            hits[pick.index(mix(n), 1000)] += 1;
        }
        assert!(hits[0] > hits[1] && hits[1] > hits[10] && hits[10] > hits[500]);
        assert!(hits[0] > 10_000, "rank 1 got {}", hits[0]);
        assert_eq!(Pick::Uniform.index(u64::MAX, 7), (u64::MAX % 7) as usize);
    }
}
