//! The `atoll` client's management commands (organization tokens, group and database
//! administration, the interactive login prompt) driven as a user would: the built binary
//! against a running `atoll dev`, each change checked in the server's behaviour.

use serde_json::{json, Value};
use std::io::{Read, Write};
mod support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;
use support::{atoll_env, ok, start_dev, temp_dir, Server, BIN};

/// Runs a command that must succeed and print JSON; answers it parsed.
fn ok_json(config: &Path, args: &[&str]) -> Value {
    let out = ok(config, args);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("atoll {args:?}: {e}: {out}"))
}

/// Runs a command that must fail with exit code 1 and one `Error:` line; answers that line.
fn fails(config: &Path, args: &[&str]) -> String {
    let output = atoll_env(config, args, &[]);
    assert_eq!(
        output.status.code(),
        Some(1),
        "atoll {args:?} should fail: {}",
        String::from_utf8_lossy(&output.stdout)
    );
    let stderr = String::from_utf8(output.stderr).unwrap();
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one error line expected, got {stderr:?}");
    assert!(lines[0].starts_with("Error: "), "{stderr}");
    lines[0].to_string()
}

fn login(server: &Server, config: &Path) {
    let output = atoll_env(
        config,
        &[
            "auth",
            "login",
            "--api-url",
            &server.url,
            "--username",
            "admin",
        ],
        &[("ATOLL_PASSWORD", &server.password())],
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Runs `sql` over the data plane's HTTP API; answers the status and the body.
async fn pipeline(http_url: &str, token: &str, sql: &str) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(format!("{http_url}v2/pipeline"))
        .bearer_auth(token)
        .json(&json!({"requests": [
            {"type": "execute", "stmt": {"sql": sql}},
            {"type": "close"}
        ]}))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let body = response.json().await.unwrap_or(Value::Null);
    (status, body)
}

/// Whether `sql` ran: HTTP 200 and an `ok` result.
async fn runs(http_url: &str, token: &str, sql: &str) -> bool {
    let (status, body) = pipeline(http_url, token, sql).await;
    status == 200 && body["results"][0]["type"] == "ok"
}

/// Puts the admin's personal organization on `plan`, as an instance administrator can.
async fn set_plan(server: &Server, plan: &str) {
    let response = reqwest::Client::new()
        .post(format!("{}/v1/admin/organizations/admin/plan", server.url))
        .bearer_auth(server.admin_token())
        .json(&json!({ "plan": plan }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
}

fn token_for(config: &Path, db: &str) -> String {
    ok(config, &["db", "tokens", "create", db])
        .trim()
        .to_string()
}

fn http_url(config: &Path, db: &str) -> String {
    ok(config, &["db", "show", db, "--http-url"])
        .trim()
        .to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn organization_tokens_are_listed_and_revoked() {
    let server = start_dev("cli-manage-data").await;
    let config = temp_dir("cli-manage-org-tokens");
    login(&server, &config);

    let secret = ok(
        &config,
        &["auth", "api-tokens", "mint", "deploy", "--org", "admin"],
    );
    let secret = secret.trim();
    let listed = ok_json(&config, &["org", "tokens", "list", "--json"]);
    let deploy = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "deploy")
        .unwrap_or_else(|| panic!("deploy listed: {listed}"))
        .clone();
    assert_eq!(deploy["owner"]["username"], "admin", "{deploy}");
    let id = deploy["id"].as_str().unwrap();
    let table = ok(&config, &["org", "tokens", "list"]);
    assert!(table.starts_with("ID "), "{table}");
    assert!(
        table.contains(id) && table.contains("deploy") && !table.contains(secret),
        "secrets are never listed: {table}"
    );

    let who = atoll_env(&config, &["auth", "whoami"], &[("ATOLL_API_TOKEN", secret)]);
    assert!(who.status.success());
    let out = ok(&config, &["org", "tokens", "revoke", id]);
    assert!(out.contains(id), "{out}");
    let who = atoll_env(&config, &["auth", "whoami"], &[("ATOLL_API_TOKEN", secret)]);
    assert_eq!(who.status.code(), Some(1), "a revoked token is refused");
    let listed = ok_json(&config, &["org", "tokens", "list", "--json"]);
    assert!(!listed.as_array().unwrap().iter().any(|t| t["id"] == id));

    let line = fails(&config, &["org", "tokens", "revoke", id]);
    assert!(
        line.contains("(token_not_found)") && line.contains("atoll org tokens list"),
        "{line}"
    );

    // Minted with the `read-only` preset, stored expanded as `read`: the tables say both.
    ok(
        &config,
        &[
            "auth",
            "api-tokens",
            "mint",
            "reader",
            "--org",
            "admin",
            "--group",
            "default",
            "--read-only",
        ],
    );
    for list in [
        &["org", "tokens", "list"][..],
        &["auth", "api-tokens", "list"][..],
    ] {
        let table = ok(&config, list);
        let row = table
            .lines()
            .find(|l| l.contains("reader"))
            .unwrap_or_else(|| panic!("{list:?}: {table}"));
        assert!(row.contains("read (read-only)"), "{list:?}: {table}");
    }
    let _ = std::fs::remove_dir_all(&config);
}

#[tokio::test(flavor = "multi_thread")]
async fn groups_are_managed_from_the_cli() {
    let server = start_dev("cli-manage-data").await;
    let config = temp_dir("cli-manage-groups");
    login(&server, &config);
    ok(&config, &["group", "create", "eu"]);
    ok(&config, &["db", "create", "orders", "--group", "eu"]);

    // Show: fields for people, JSON for scripts.
    let shown = ok(&config, &["group", "show", "eu"]);
    assert!(
        shown.contains("Name:") && shown.contains("orders") && shown.contains("active"),
        "{shown}"
    );
    let group = ok_json(&config, &["group", "show", "eu", "--json"]);
    assert_eq!(group["name"], "eu");
    assert_eq!(group["locations"], json!(["local"]));

    // Configuration: delete protection stops `group destroy`.
    let config_text = ok(&config, &["group", "config", "eu"]);
    assert!(
        config_text.contains("Delete protection:  off"),
        "{config_text}"
    );
    let changed = ok_json(
        &config,
        &[
            "group",
            "config",
            "eu",
            "--delete-protection",
            "on",
            "--json",
        ],
    );
    assert_eq!(changed["delete_protection"], true);
    let line = fails(&config, &["group", "destroy", "eu", "--yes"]);
    assert!(line.contains("(delete_protected)"), "{line}");
    ok(
        &config,
        &["group", "config", "eu", "--delete-protection", "off"],
    );
    assert_eq!(
        ok_json(&config, &["group", "config", "eu", "--json"])["delete_protection"],
        false
    );
    // A bad flag value is a usage error: clap's exit code 2 and its message.
    let output = atoll_env(
        &config,
        &["group", "config", "eu", "--delete-protection", "maybe"],
        &[],
    );
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("`on` or `off`"));

    // Locations: added, removed; the primary stays.
    let out = ok(
        &config,
        &[
            "group",
            "locations",
            "add",
            "eu",
            "aws-us-east-1",
            "aws-eu-west-1",
        ],
    );
    assert!(out.contains("aws-eu-west-1"), "{out}");
    let group = ok_json(&config, &["group", "show", "eu", "--json"]);
    assert_eq!(
        group["locations"],
        json!(["local", "aws-us-east-1", "aws-eu-west-1"])
    );
    ok(
        &config,
        &["group", "locations", "rm", "eu", "aws-us-east-1"],
    );
    let group = ok_json(&config, &["group", "show", "eu", "--json"]);
    assert_eq!(group["locations"], json!(["local", "aws-eu-west-1"]));
    let line = fails(&config, &["group", "locations", "rm", "eu", "local"]);
    assert!(line.contains("(primary_location)"), "{line}");
    let line = fails(&config, &["group", "locations", "add", "eu", "mars-1"]);
    assert!(line.contains("(invalid_location)"), "{line}");

    // Rename: the old name is gone, the databases stay in the group.
    let out = ok(&config, &["group", "rename", "eu", "europe"]);
    assert!(out.contains("europe"), "{out}");
    let line = fails(&config, &["group", "show", "eu"]);
    assert!(
        line.contains("(group_not_found)") && line.contains("atoll group list"),
        "{line}"
    );
    let dbs = ok_json(&config, &["db", "list", "--json", "--group", "europe"]);
    assert_eq!(dbs[0]["Name"], "orders", "{dbs}");

    // Group tokens: one works on every database of the group until invalidated.
    ok(&config, &["db", "create", "audit", "--group", "europe"]);
    let group_token = ok(
        &config,
        &["group", "tokens", "create", "europe", "--expiration", "1h"],
    );
    let group_token = group_token.trim();
    let orders_url = http_url(&config, "orders");
    let audit_url = http_url(&config, "audit");
    assert!(runs(&orders_url, group_token, "CREATE TABLE o (x)").await);
    assert!(runs(&audit_url, group_token, "CREATE TABLE a (x)").await);
    let reader = ok(
        &config,
        &["group", "tokens", "create", "europe", "--read-only"],
    );
    assert!(runs(&orders_url, reader.trim(), "SELECT * FROM o").await);
    assert!(!runs(&orders_url, reader.trim(), "INSERT INTO o VALUES (1)").await);
    let db_token = token_for(&config, "orders");
    let line = fails(&config, &["group", "tokens", "invalidate", "europe"]);
    assert!(line.contains("--yes"), "{line}");
    ok(
        &config,
        &["group", "tokens", "invalidate", "europe", "--yes"],
    );
    let (status, body) = pipeline(&orders_url, group_token, "SELECT 1").await;
    assert_eq!(status, 401, "an invalidated group token is refused: {body}");
    assert!(!runs(&audit_url, group_token, "SELECT 1").await);
    assert!(
        runs(&orders_url, &db_token, "SELECT 1").await,
        "database tokens outlive a group rotation"
    );
    let fresh = ok(&config, &["group", "tokens", "create", "europe"]);
    assert!(runs(&orders_url, fresh.trim(), "SELECT 1").await);

    // Unarchive: the lifecycle job archives idle free-plan groups after days; the test
    // archives one directly in the store the way that job does.
    {
        let conn = rusqlite::Connection::open(server.data_dir.join("meta.db")).unwrap();
        conn.busy_timeout(Duration::from_secs(10)).unwrap();
        let changed = conn
            .execute(
                "UPDATE org_groups SET archived = 1 WHERE name = 'europe'",
                [],
            )
            .unwrap();
        assert_eq!(changed, 1);
    }
    assert_eq!(
        ok_json(&config, &["group", "show", "europe", "--json"])["archived"],
        true
    );
    assert!(ok(&config, &["group", "list"])
        .lines()
        .any(|l| l.starts_with("europe") && l.contains("archived")));
    let out = ok(&config, &["group", "unarchive", "europe"]);
    assert!(out.contains("active"), "{out}");
    assert_eq!(
        ok_json(&config, &["group", "show", "europe", "--json"])["archived"],
        false
    );

    // Transfer to a team organization: gone here, there with its databases.
    ok(&config, &["org", "create", "Team"]);
    ok(&config, &["org", "switch", "admin"]);
    let line = fails(&config, &["group", "transfer", "europe", "team"]);
    assert!(line.contains("--yes"), "{line}");
    let line = fails(
        &config,
        &["group", "transfer", "europe", "nowhere", "--yes"],
    );
    assert!(line.contains("(organization_not_found)"), "{line}");
    let out = ok(&config, &["group", "transfer", "europe", "team", "--yes"]);
    assert!(out.contains("atoll org switch team"), "{out}");
    let groups = ok_json(&config, &["group", "list", "--json"]);
    assert!(!groups
        .as_array()
        .unwrap()
        .iter()
        .any(|g| g["name"] == "europe"));
    ok(&config, &["org", "switch", "team"]);
    // A new team organization has the `default` group `db create` picks without --group.
    ok(&config, &["db", "create", "fresh"]);
    let dbs = ok_json(&config, &["db", "list", "--json", "--group", "default"]);
    assert_eq!(dbs[0]["Name"], "fresh", "{dbs}");
    let dbs = ok_json(&config, &["db", "list", "--json", "--group", "europe"]);
    let mut names: Vec<&str> = dbs
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["Name"].as_str().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["audit", "orders"]);

    let _ = std::fs::remove_dir_all(&config);
}

#[tokio::test(flavor = "multi_thread")]
async fn databases_are_configured_inspected_and_restored() {
    let server = start_dev("cli-manage-data").await;
    let config = temp_dir("cli-manage-dbs");
    login(&server, &config);
    ok(&config, &["db", "create", "shop"]);
    let url = http_url(&config, "shop");
    let token = token_for(&config, "shop");
    assert!(runs(&url, &token, "CREATE TABLE items (name TEXT)").await);
    assert!(runs(&url, &token, "INSERT INTO items VALUES ('pen'), ('ink')").await);

    // Instance URLs.
    let instances = ok(&config, &["db", "show", "shop", "--instance-urls"]);
    let libsql = ok(&config, &["db", "show", "shop", "--url"]);
    assert!(instances.starts_with("INSTANCE"), "{instances}");
    assert!(instances.contains(libsql.trim()), "{instances}");
    let instances = ok_json(
        &config,
        &["db", "show", "shop", "--instance-urls", "--json"],
    );
    assert_eq!(instances[0]["http_url"].as_str().unwrap(), libsql.trim());

    // Configuration: printed without flags; each flag changes what the data plane does.
    let shown = ok(&config, &["db", "config", "shop"]);
    assert!(
        shown.contains("Block writes:") && shown.contains("Size limit:"),
        "{shown}"
    );
    let before = ok_json(&config, &["db", "config", "shop", "--json"]);
    assert_eq!(before["block_writes"], false);
    let out = ok(&config, &["db", "config", "shop", "--block-writes", "on"]);
    assert!(out.contains("Block writes:       on"), "{out}");
    assert!(!runs(&url, &token, "INSERT INTO items VALUES ('cap')").await);
    assert!(runs(&url, &token, "SELECT * FROM items").await);
    ok(&config, &["db", "config", "shop", "--block-writes", "off"]);
    assert!(runs(&url, &token, "INSERT INTO items VALUES ('cap')").await);
    ok(&config, &["db", "config", "shop", "--block-reads", "on"]);
    assert!(!runs(&url, &token, "SELECT * FROM items").await);
    ok(&config, &["db", "config", "shop", "--block-reads", "off"]);
    assert!(runs(&url, &token, "SELECT * FROM items").await);

    ok(
        &config,
        &["db", "config", "shop", "--delete-protection", "on"],
    );
    let line = fails(&config, &["db", "destroy", "shop", "--yes"]);
    assert!(
        line.contains("(delete_protected)") && line.contains("--delete-protection off"),
        "{line}"
    );
    ok(
        &config,
        &["db", "config", "shop", "--delete-protection", "off"],
    );

    let limited = ok_json(
        &config,
        &[
            "db",
            "config",
            "shop",
            "--size-limit",
            "1mb",
            "--allow-attach",
            "on",
            "--json",
        ],
    );
    assert_eq!(limited["size_limit"], "1000000");
    assert_eq!(limited["allow_attach"], true);
    let shown = ok(&config, &["db", "config", "shop"]);
    assert!(shown.contains("1.00 MB (1000000 bytes)"), "{shown}");
    let cleared = ok_json(
        &config,
        &["db", "config", "shop", "--size-limit", "none", "--json"],
    );
    assert_eq!(cleared["size_limit"], "");
    assert_eq!(cleared["allow_attach"], true, "other settings unchanged");
    let line = fails(
        &config,
        &["db", "config", "shop", "--size-limit", "12parsecs"],
    );
    assert!(line.contains("(invalid_size)"), "{line}");

    // Usage and inspect see the writes above.
    let usage = ok_json(&config, &["db", "usage", "shop", "--json"]);
    assert!(
        usage["total"]["rows_written"].as_u64().unwrap() >= 3,
        "{usage}"
    );
    assert!(
        usage["total"]["storage_bytes"].as_u64().unwrap() > 0,
        "{usage}"
    );
    let table = ok(&config, &["db", "usage", "shop"]);
    assert!(
        table.contains("Rows written:") && table.contains("this month"),
        "{table}"
    );
    let long_ago = ok_json(
        &config,
        &[
            "db",
            "usage",
            "shop",
            "--from",
            "2020-01-01",
            "--to",
            "2020-02-01",
            "--json",
        ],
    );
    assert_eq!(long_ago["total"]["rows_written"], 0, "{long_ago}");
    let line = fails(&config, &["db", "usage", "shop", "--from", "yesterday"]);
    assert!(line.contains("RFC 3339"), "{line}");

    let inspected = ok(&config, &["db", "inspect", "shop"]);
    assert!(inspected.contains("Total space used:"), "{inspected}");
    let inspected = ok_json(&config, &["db", "inspect", "shop", "--queries", "--json"]);
    assert_eq!(inspected["name"], "shop");
    assert!(
        inspected["rows_written"].as_u64().unwrap() >= 3,
        "{inspected}"
    );
    let top = inspected["top_queries"].as_array().expect("top queries");
    assert!(
        top.iter()
            .any(|q| q["query"].as_str().unwrap().contains("items")),
        "{inspected}"
    );
    let with_queries = ok(&config, &["db", "inspect", "shop", "--queries"]);
    assert!(with_queries.contains("ROWS READ"), "{with_queries}");

    // Tokens: invalidated at once, new ones work.
    let line = fails(&config, &["db", "tokens", "invalidate", "shop"]);
    assert!(line.contains("--yes"), "{line}");
    ok(&config, &["db", "tokens", "invalidate", "shop", "--yes"]);
    let (status, body) = pipeline(&url, &token, "SELECT 1").await;
    assert_eq!(status, 401, "an invalidated token is refused: {body}");
    let token = token_for(&config, "shop");
    assert!(runs(&url, &token, "SELECT 1").await);

    // Unknown databases: one line, exit code 1, a hint.
    for args in [
        &["db", "config", "nope"][..],
        &["db", "usage", "nope"],
        &["db", "inspect", "nope"],
        &["db", "show", "nope", "--instance-urls"],
        &["db", "tokens", "invalidate", "nope", "--yes"],
    ] {
        let line = fails(&config, args);
        assert!(
            line.contains("(database_not_found)") && line.contains("atoll db list"),
            "{args:?}: {line}"
        );
    }

    // Restore: the free plan deletes at once, and says so. (`atoll dev`'s admin starts on
    // the enterprise plan.)
    set_plan(&server, "starter").await;
    ok(&config, &["db", "create", "scratch"]);
    ok(&config, &["db", "destroy", "scratch", "--yes"]);
    let line = fails(&config, &["db", "restore", "scratch", "--yes"]);
    assert!(line.contains("paid plans"), "{line}");
    let listed = atoll_env(&config, &["db", "list-deleted"], &[]);
    assert!(listed.status.success());
    assert!(String::from_utf8_lossy(&listed.stderr).contains("free (starter) plan"));

    // On a paid plan a destroyed database comes back with its data.
    set_plan(&server, "developer").await;
    let original = ok_json(&config, &["db", "show", "shop", "--json"])["DbId"]
        .as_str()
        .unwrap()
        .to_string();
    ok(&config, &["db", "destroy", "shop", "--yes"]);
    let deleted = ok_json(&config, &["db", "list-deleted", "--json"]);
    assert!(
        deleted
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["Name"] == "shop"),
        "{deleted}"
    );
    assert!(ok(&config, &["db", "list-deleted"]).contains("shop"));
    let line = fails(&config, &["db", "restore", "shop"]);
    assert!(line.contains("--yes"), "{line}");
    let line = fails(&config, &["db", "restore", "never-existed", "--yes"]);
    assert!(line.contains("atoll db list-deleted"), "{line}");
    // The name was taken again meanwhile: refused, with what to do.
    ok(&config, &["db", "create", "shop"]);
    let line = fails(&config, &["db", "restore", "shop", "--yes"]);
    assert!(
        line.contains("(database_already_exists)") && line.contains("name is taken"),
        "{line}"
    );
    ok(&config, &["db", "destroy", "shop", "--yes"]);
    let out = ok(
        &config,
        &["db", "restore", "shop", "--id", &original, "--yes"],
    );
    assert!(out.contains("Restored database shop"), "{out}");
    let token = token_for(&config, "shop");
    let (status, body) = pipeline(&url, &token, "SELECT count(*) FROM items").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["results"][0]["response"]["result"]["rows"][0][0]["value"], "3",
        "{body}"
    );

    let _ = std::fs::remove_dir_all(&config);
}

/// `auth login` asks for the password on a terminal, without echoing it. The terminal is
/// util-linux `script`'s pseudo-terminal; without `script` the test says so and passes.
#[tokio::test(flavor = "multi_thread")]
async fn login_prompts_for_the_password_on_a_terminal() {
    let server = start_dev("cli-manage-data").await;
    let config = temp_dir("cli-manage-prompt");

    // Not a terminal: the clear error of old.
    let output = atoll_env(
        &config,
        &[
            "auth",
            "login",
            "--api-url",
            &server.url,
            "--username",
            "admin",
        ],
        &[],
    );
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("no password given") && stderr.contains("ATOLL_PASSWORD"),
        "{stderr}"
    );

    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("skipped: util-linux `script` is not installed, so there is no terminal to test the prompt on");
        return;
    }
    let command_line = format!("{BIN} auth login --api-url {} --username admin", server.url);
    let mut child = Command::new("script")
        .args(["-qec", &command_line, "/dev/null"])
        .env("ATOLL_CONFIG_DIR", &config)
        .env_remove("ATOLL_API_URL")
        .env_remove("ATOLL_API_TOKEN")
        .env_remove("ATOLL_PASSWORD")
        .env_remove("ATOLL_USERNAME")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("run script");
    let mut stdout = child.stdout.take().unwrap();
    // Type only once the prompt is shown: echo is off by then, so the password must not
    // come back.
    let mut seen = Vec::new();
    let mut buffer = [0u8; 256];
    while !String::from_utf8_lossy(&seen).contains("Password for admin:") {
        let n = stdout.read(&mut buffer).unwrap();
        assert!(n > 0, "no prompt: {:?}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&buffer[..n]);
    }
    // rpassword prints the prompt, then turns echo off: a line typed within that instant
    // would be echoed, as in any terminal program. Pause like a person would before typing,
    // so what is checked is the echo while reading, not that race.
    std::thread::sleep(Duration::from_secs(1));
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(format!("{}\n", server.password()).as_bytes())
        .unwrap();
    stdin.flush().unwrap();
    stdout.read_to_end(&mut seen).unwrap();
    drop(stdin);
    assert!(child.wait().unwrap().success());
    let transcript = String::from_utf8_lossy(&seen);
    assert!(transcript.contains("Logged in as admin"), "{transcript}");
    assert!(
        !transcript.contains(&server.password()),
        "the password was echoed: {transcript}"
    );
    assert_eq!(ok(&config, &["auth", "whoami"]).trim(), "admin");
    let _ = std::fs::remove_dir_all(&config);
}

#[tokio::test(flavor = "multi_thread")]
async fn logging_out_everywhere_ends_every_session() {
    let server = start_dev("cli-logout-all-data").await;
    let (laptop, phone) = (temp_dir("cli-logout-laptop"), temp_dir("cli-logout-phone"));
    login(&server, &laptop);
    login(&server, &phone);
    let ci = ok(&laptop, &["auth", "api-tokens", "mint", "ci"]);
    let ci = ci.trim();

    // An API token cannot end sessions; nothing is forgotten.
    let output = atoll_env(
        &laptop,
        &["auth", "logout", "--all"],
        &[("ATOLL_API_TOKEN", ci)],
    );
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("only a login token"), "{stderr}");
    assert_eq!(ok(&phone, &["auth", "whoami"]).trim(), "admin");

    let out = ok(&laptop, &["auth", "logout", "--all"]);
    assert!(out.contains("Logged out everywhere"), "{out}");
    // This machine forgot its token; the other one's was revoked on the server.
    let line = fails(&laptop, &["auth", "whoami"]);
    assert!(line.contains("not logged in"), "{line}");
    let line = fails(&phone, &["auth", "whoami"]);
    assert!(line.contains("token has been revoked"), "{line}");
    // The API token stays.
    let who = atoll_env(&laptop, &["auth", "whoami"], &[("ATOLL_API_TOKEN", ci)]);
    assert!(who.status.success());

    // `--all` with a token that no longer works forgets it and says sessions were not
    // ended.
    let line = fails(&phone, &["auth", "logout", "--all"]);
    assert!(line.contains("could not be ended"), "{line}");
    let line = fails(&phone, &["auth", "whoami"]);
    assert!(line.contains("not logged in"), "{line}");

    // Logging in again works.
    login(&server, &laptop);
    assert_eq!(ok(&laptop, &["auth", "whoami"]).trim(), "admin");
    let _ = std::fs::remove_dir_all(&laptop);
    let _ = std::fs::remove_dir_all(&phone);
}

#[test]
fn every_management_command_has_help_with_an_example() {
    let config = temp_dir("cli-manage-help");
    for args in [
        vec!["org", "tokens", "list"],
        vec!["org", "tokens", "revoke"],
        vec!["group", "show"],
        vec!["group", "rename"],
        vec!["group", "transfer"],
        vec!["group", "unarchive"],
        vec!["group", "config"],
        vec!["group", "locations", "add"],
        vec!["group", "locations", "rm"],
        vec!["group", "tokens", "create"],
        vec!["group", "tokens", "invalidate"],
        vec!["db", "config"],
        vec!["db", "usage"],
        vec!["db", "inspect"],
        vec!["db", "restore"],
        vec!["db", "list-deleted"],
        vec!["db", "tokens", "invalidate"],
        vec!["auth", "logout"],
        vec!["org", "jwks", "list"],
        vec!["org", "jwks", "save"],
        vec!["org", "jwks", "rm"],
        vec!["org", "jwks", "template"],
        vec!["db", "tokens", "cert"],
    ] {
        let mut with_help = args.clone();
        with_help.push("--help");
        let help = ok(&config, &with_help);
        assert!(help.contains("Example"), "{args:?}: {help}");
        assert!(
            help.contains(&format!("atoll {}", args.join(" "))),
            "{args:?}: {help}"
        );
    }
    let help = ok(&config, &["db", "show", "--help"]);
    assert!(help.contains("--instance-urls"), "{help}");
}

/// Every error a user can cause names the next step in CLI terms: no "run `atoll auth
/// login`" after a refused login, no HTTP routes, no store jargon, and a clear word when
/// the CLI talks to the database port instead of the API.
#[tokio::test(flavor = "multi_thread")]
async fn errors_name_the_next_step_in_cli_terms() {
    let server = start_dev("cli-hints").await;
    let config = temp_dir("cli-hints");

    // A wrong password: the hint is to check it, not to run the command just run.
    let output = atoll_env(
        &config,
        &[
            "auth",
            "login",
            "--api-url",
            &server.url,
            "--username",
            "admin",
        ],
        &[("ATOLL_PASSWORD", "not-the-password")],
    );
    let line = String::from_utf8(output.stderr).unwrap();
    assert!(
        line.contains("check the username and the password")
            && !line.contains("run `atoll auth login`"),
        "{line}"
    );
    let line = fails(
        &config,
        &[
            "auth",
            "login",
            "--api-url",
            &server.url,
            "--token",
            "atoll_nope",
        ],
    );
    assert!(line.contains("pass a valid one to `--token`"), "{line}");

    login(&server, &config);
    ok(&config, &["db", "create", "shop"]);

    // A database that does not exist: where it was looked for, and what to run.
    let line = fails(&config, &["db", "show", "nope"]);
    assert!(
        line.contains("database nope not found in your personal organization")
            && line.contains("`atoll db list`")
            && !line.contains("record not found"),
        "{line}"
    );

    // Taken names: what the CLI can do about it (it has no `db rename`).
    let line = fails(&config, &["db", "create", "shop"]);
    assert!(
        line.contains("`atoll db destroy NAME`") && !line.contains("rename"),
        "{line}"
    );
    ok(&config, &["group", "create", "eu"]);
    let line = fails(&config, &["group", "create", "eu"]);
    assert!(line.contains("`atoll group list`"), "{line}");

    // Commands, not routes.
    let line = fails(
        &config,
        &["group", "create", "mars", "--location", "mars-1"],
    );
    assert!(
        line.contains("`atoll locations`") && !line.contains("/v1/"),
        "{line}"
    );
    let line = fails(&config, &["org", "invites", "create", "x@example.com"]);
    assert!(
        line.contains("`atoll org create NAME`") && !line.contains("/v1/"),
        "{line}"
    );

    // `--api-url` pointed at the database port.
    let data_url = http_url(&config, "shop");
    let data_base = data_url.split("/db/").next().unwrap();
    let wrong = temp_dir("cli-hints-wrong-port");
    let output = atoll_env(
        &wrong,
        &[
            "auth",
            "login",
            "--api-url",
            data_base,
            "--username",
            "admin",
        ],
        &[("ATOLL_PASSWORD", &server.password())],
    );
    let line = String::from_utf8(output.stderr).unwrap();
    assert!(
        line.contains("this looks like the database port") && line.contains("API URL"),
        "{line}"
    );
    let _ = std::fs::remove_dir_all(&wrong);
    let _ = std::fs::remove_dir_all(&config);
}

/// A token of another group (or another database of the same group) is not called
/// "invalid" by the data plane: the answer says the token is not for this database. It
/// is told from the token's own claims, so it says nothing more about the database than
/// the plain refusal did.
#[tokio::test(flavor = "multi_thread")]
async fn a_token_for_another_database_is_named_so() {
    let server = start_dev("cli-other-token").await;
    let config = temp_dir("cli-other-token");
    login(&server, &config);
    ok(&config, &["group", "create", "one"]);
    ok(&config, &["group", "create", "two"]);
    ok(&config, &["db", "create", "in-one", "--group", "one"]);
    ok(&config, &["db", "create", "also-in-one", "--group", "one"]);
    ok(&config, &["db", "create", "in-two", "--group", "two"]);

    // A group token of group one, on a database of group two: not signed by its keys.
    let group_one = ok(&config, &["group", "tokens", "create", "one"]);
    let (status, body) = pipeline(&http_url(&config, "in-two"), group_one.trim(), "SELECT 1").await;
    let message = body["error"].as_str().unwrap_or_default();
    assert_eq!(status, 401, "{body}");
    assert!(
        message.contains("not signed by this database's keys")
            && message.contains("another database or group"),
        "{body}"
    );
    assert!(runs(&http_url(&config, "in-one"), group_one.trim(), "SELECT 1").await);

    // A database token of in-one, on another database of the same group: the same.
    let in_one = token_for(&config, "in-one");
    let (status, body) = pipeline(&http_url(&config, "also-in-one"), &in_one, "SELECT 1").await;
    let message = body["error"].as_str().unwrap_or_default();
    assert_eq!(status, 401, "{body}");
    assert!(
        message.contains("a token of another database or group"),
        "{body}"
    );
    // A token that is no database token at all is still just invalid.
    let (status, body) = pipeline(&http_url(&config, "in-one"), "not-a-jwt", "SELECT 1").await;
    assert_eq!(status, 401, "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap_or_default()
            .contains("The JWT is invalid"),
        "{body}"
    );
    let _ = std::fs::remove_dir_all(&config);
}

/// `atoll org jwks`: a key set of the user's own auth provider saved from a file, the
/// template the provider's tokens follow, a query with such a token, and removal.
#[tokio::test(flavor = "multi_thread")]
async fn an_auth_providers_key_set_is_managed_from_the_cli() {
    use base64::Engine;
    use ring::signature::{Ed25519KeyPair, KeyPair};
    let b64 = |bytes: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
    let server = start_dev("cli-manage-jwks").await;
    let config = temp_dir("cli-manage-jwks-config");
    login(&server, &config);
    ok(&config, &["db", "create", "byoa"]);
    let url = http_url(&config, "byoa");

    let pkcs8 = Ed25519KeyPair::generate_pkcs8(&ring::rand::SystemRandom::new()).unwrap();
    let key = Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).unwrap();
    let file = config.join("jwks.json");
    let set = json!({"keys": [{"kty": "OKP", "crv": "Ed25519", "kid": "cli-1", "x": b64(key.public_key().as_ref())}]});
    std::fs::write(&file, set.to_string()).unwrap();
    let out = ok(
        &config,
        &[
            "org",
            "jwks",
            "save",
            "provider",
            "--file",
            file.to_str().unwrap(),
        ],
    );
    assert!(out.contains("Saved key set provider"), "{out}");
    let table = ok(&config, &["org", "jwks", "list"]);
    assert!(
        table.contains("provider") && table.contains("(inline)") && table.contains("cli-1"),
        "{table}"
    );

    let template = ok_json(
        &config,
        &[
            "org",
            "jwks",
            "template",
            "--database",
            "byoa",
            "--scope",
            "read-only",
        ],
    );
    assert_eq!(template["a"], "ro", "{template}");
    let mut claims = template.clone();
    claims["exp"] = json!(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
            + 600
    );
    let input = format!(
        "{}.{}",
        b64(br#"{"alg":"EdDSA","typ":"JWT","kid":"cli-1"}"#),
        b64(claims.to_string().as_bytes())
    );
    let token = format!("{input}.{}", b64(key.sign(input.as_bytes()).as_ref()));
    assert!(runs(&url, &token, "SELECT 1").await);
    let (status, _) = pipeline(&url, &token, "CREATE TABLE t (x)").await;
    assert_eq!(status, 403, "the template said read-only");

    let line = fails(
        &config,
        &[
            "org",
            "jwks",
            "save",
            "other",
            "https://example.com/jwks.json",
        ],
    );
    assert!(line.contains("jwks_url_not_allowed"), "{line}");
    ok(&config, &["org", "jwks", "rm", "provider"]);
    let (status, _) = pipeline(&url, &token, "SELECT 1").await;
    assert_eq!(status, 401);
    let line = fails(&config, &["org", "jwks", "rm", "provider"]);
    assert!(line.contains("jwks_not_found"), "{line}");

    // `atoll db tokens cert` writes a certificate, its key (owner-only) and the CA.
    let out = ok(
        &config,
        &[
            "db",
            "tokens",
            "cert",
            "byoa",
            "--read-only",
            "--dir",
            config.to_str().unwrap(),
        ],
    );
    assert!(out.contains("read-only client certificate"), "{out}");
    let key = config.join("byoa.key");
    assert!(std::fs::read_to_string(&key)
        .unwrap()
        .contains("PRIVATE KEY"));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&key).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }
    assert!(std::fs::read_to_string(config.join("byoa-ca.crt"))
        .unwrap()
        .contains("CERTIFICATE"));
    let line = fails(
        &config,
        &["db", "tokens", "cert", "byoa", "--expiration", "never"],
    );
    assert!(line.contains("30 days"), "{line}");
    let _ = std::fs::remove_dir_all(&config);
}
