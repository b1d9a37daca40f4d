//! The `atoll` command-line client driven as a user would: the built binary against a
//! running `atoll dev`, with its settings in a temporary directory.

use serde_json::Value;
mod support;

use std::path::Path;
use support::{atoll_env, ok, start_dev, temp_dir};

/// Runs a command that must fail with exit code 1 and one `Error:` line; answers that line.
fn fails(config: &Path, args: &[&str], envs: &[(&str, &str)]) -> String {
    let output = atoll_env(config, args, envs);
    assert_eq!(output.status.code(), Some(1), "atoll {args:?} should fail");
    let stderr = String::from_utf8(output.stderr).unwrap();
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one error line expected, got {stderr:?}");
    assert!(lines[0].starts_with("Error: "), "{stderr}");
    lines[0].to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_new_user_tours_the_cli() {
    let server = start_dev("cli-data").await;
    let config = temp_dir("cli-config");

    // Not logged in yet.
    let line = fails(&config, &["auth", "whoami"], &[]);
    assert!(line.contains("atoll auth login"), "{line}");

    // Log in with the generated password (from the environment, as scripts should).
    let password = std::fs::read_to_string(server.data_dir.join("admin.password")).unwrap();
    let password = password.trim();
    let line = fails(
        &config,
        &[
            "auth",
            "login",
            "--api-url",
            &server.url,
            "--username",
            "admin",
        ],
        &[("ATOLL_PASSWORD", "wrong-password")],
    );
    assert!(line.contains('('), "{line}");
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
        &[("ATOLL_PASSWORD", password)],
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(ok(&config, &["auth", "whoami"]).trim(), "admin");
    let token = ok(&config, &["auth", "token"]);
    assert!(!token.trim().is_empty());

    // The settings file holds the token, privately.
    let settings_path = config.join("settings.json");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&settings_path)
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let settings: Value =
        serde_json::from_str(&std::fs::read_to_string(&settings_path).unwrap()).unwrap();
    assert_eq!(settings["token"].as_str().unwrap(), token.trim());
    assert_eq!(settings["api_url"], server.url.as_str());

    // A bad token from the environment overrides the stored one: 401 with a login hint.
    let line = fails(&config, &["auth", "whoami"], &[("ATOLL_API_TOKEN", "nope")]);
    assert!(
        line.contains("(unauthorized)") && line.contains("atoll auth login"),
        "{line}"
    );

    // Organizations: the personal one, switched to, stores no slug.
    let orgs: Value = serde_json::from_str(&ok(&config, &["org", "list", "--json"])).unwrap();
    let orgs = orgs.as_array().unwrap();
    assert!(orgs
        .iter()
        .any(|org| org["slug"] == "admin" && org["type"] == "personal"));
    let table = ok(&config, &["org", "list"]);
    assert!(table.starts_with("NAME"), "{table}");
    ok(&config, &["org", "switch", "admin"]);
    let settings: Value =
        serde_json::from_str(&std::fs::read_to_string(&settings_path).unwrap()).unwrap();
    assert_eq!(settings["organization"], "");
    let line = fails(&config, &["org", "switch", "nobody"], &[]);
    assert!(line.contains("(organization_not_found)"), "{line}");

    // Groups: create one in the server's location, list it.
    let out = ok(&config, &["group", "create", "eu"]);
    assert!(out.contains("eu"), "{out}");
    let groups = ok(&config, &["group", "list"]);
    assert!(groups.lines().any(|l| l.starts_with("eu ")), "{groups}");
    assert!(
        groups.lines().any(|l| l.starts_with("default ")),
        "{groups}"
    );
    let groups: Value = serde_json::from_str(&ok(&config, &["group", "list", "--json"])).unwrap();
    assert_eq!(groups.as_array().unwrap().len(), 2);

    // Databases: create, list, show.
    ok(
        &config,
        &[
            "db",
            "create",
            "shop",
            "--group",
            "eu",
            "--size-limit",
            "64mb",
        ],
    );
    let line = fails(&config, &["db", "create", "shop", "--group", "eu"], &[]);
    assert!(line.contains("(database_already_exists)"), "{line}");
    let dbs: Value = serde_json::from_str(&ok(&config, &["db", "list", "--json"])).unwrap();
    let shop = dbs
        .as_array()
        .unwrap()
        .iter()
        .find(|db| db["Name"] == "shop")
        .expect("shop listed");
    assert_eq!(shop["group"], "eu");
    let in_default: Value = serde_json::from_str(&ok(
        &config,
        &["db", "list", "--json", "--group", "default"],
    ))
    .unwrap();
    assert!(in_default.as_array().unwrap().is_empty());
    let table = ok(&config, &["db", "list"]);
    assert!(table.lines().any(|l| l.starts_with("shop ")), "{table}");
    // Without TLS the URL for clients is the plain HTTP one: a `libsql://` URL makes every
    // client use TLS, which a plain server cannot speak (tests/tls.rs: with TLS).
    let url = ok(&config, &["db", "show", "shop", "--url"]);
    let http_url = ok(&config, &["db", "show", "shop", "--http-url"]);
    let http_url = http_url.trim();
    assert_eq!(http_url, shop["http_url"].as_str().unwrap());
    assert_eq!(url.trim(), http_url);
    assert!(http_url.starts_with("http://127.0.0.1:"), "{http_url}");
    let details = ok(&config, &["db", "show", "shop"]);
    assert!(
        details.contains("eu")
            && details.contains(http_url)
            && details.contains(shop["Hostname"].as_str().unwrap()),
        "{details}"
    );

    // A token from the CLI runs a query over HTTP.
    let jwt = ok(
        &config,
        &["db", "tokens", "create", "shop", "--expiration", "1h"],
    );
    let response = reqwest::Client::new()
        .post(format!("{http_url}v2/pipeline"))
        .bearer_auth(jwt.trim())
        .json(&serde_json::json!({"requests": [
            {"type": "execute", "stmt": {"sql": "CREATE TABLE t (x)"}},
            {"type": "execute", "stmt": {"sql": "SELECT 41 + 1"}},
            {"type": "close"}
        ]}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["results"][0]["type"], "ok", "{body}");
    assert_eq!(
        body["results"][1]["response"]["result"]["rows"][0][0]["value"], "42",
        "{body}"
    );
    // A read-only token cannot write.
    let ro = ok(&config, &["db", "tokens", "create", "shop", "--read-only"]);
    let body: Value = reqwest::Client::new()
        .post(format!("{http_url}v2/pipeline"))
        .bearer_auth(ro.trim())
        .json(&serde_json::json!({"requests": [
            {"type": "execute", "stmt": {"sql": "INSERT INTO t VALUES (1)"}},
            {"type": "close"}
        ]}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let refused = body["results"][0]["type"] == "error"
        || body["error"]
            .as_str()
            .is_some_and(|e| e.contains("Write permission"));
    assert!(refused, "{body}");

    // Errors: one line with the server's message and code, exit code 1.
    let line = fails(&config, &["db", "show", "nope"], &[]);
    assert!(line.contains("(database_not_found)"), "{line}");
    assert!(line.contains("nope"), "{line}");
    assert!(line.contains("atoll db list"), "{line}");

    // Destroy: refused without --yes when not interactive, done with it.
    let line = fails(&config, &["db", "destroy", "shop"], &[]);
    assert!(line.contains("--yes"), "{line}");
    ok(&config, &["db", "destroy", "shop", "--yes"]);
    let dbs: Value = serde_json::from_str(&ok(&config, &["db", "list", "--json"])).unwrap();
    assert!(!dbs
        .as_array()
        .unwrap()
        .iter()
        .any(|db| db["Name"] == "shop"));
    ok(&config, &["group", "destroy", "eu", "--yes"]);
    let line = fails(&config, &["group", "destroy", "eu", "--yes"], &[]);
    assert!(line.contains("(group_not_found)"), "{line}");

    // Locations, with the closest marked.
    let locations = ok(&config, &["locations"]);
    assert!(
        locations.contains("local") && locations.contains("[closest]"),
        "{locations}"
    );
    let parsed: serde_json::Value =
        serde_json::from_str(&ok(&config, &["locations", "--json"])).unwrap();
    assert_eq!(parsed["closest"], "local");

    // API tokens: mint (the secret printed once), list, use, revoke.
    let secret = ok(
        &config,
        &["auth", "api-tokens", "mint", "ci", "--org", "admin"],
    );
    let secret = secret.trim().to_string();
    assert!(secret.starts_with("atoll_"), "{secret}");
    let listed: serde_json::Value =
        serde_json::from_str(&ok(&config, &["auth", "api-tokens", "list", "--json"])).unwrap();
    assert!(listed
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["name"] == "ci" && t["organization"] == "admin"));
    let table = ok(&config, &["auth", "api-tokens", "list"]);
    assert!(
        table.contains("ci") && !table.contains(&secret),
        "secrets are never listed: {table}"
    );
    let who = atoll_env(
        &config,
        &["auth", "whoami"],
        &[("ATOLL_API_TOKEN", &secret)],
    );
    assert!(who.status.success());
    let line = fails(
        &config,
        &[
            "auth",
            "api-tokens",
            "mint",
            "g",
            "--org",
            "admin",
            "--group",
            "default",
        ],
        &[],
    );
    assert!(line.contains("needs scopes"), "{line}");
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
    ok(&config, &["auth", "api-tokens", "revoke", "ci"]);
    let line = fails(
        &config,
        &["auth", "whoami"],
        &[("ATOLL_API_TOKEN", &secret)],
    );
    assert!(line.contains("unauthorized"), "{line}");

    // A team organization: members, roles, invites, accepting one, destroying it.
    let admin_token = std::fs::read_to_string(server.data_dir.join("admin.token"))
        .unwrap()
        .trim()
        .to_string();
    let http = reqwest::Client::new();
    for name in ["bob", "dave"] {
        let created = http
            .post(format!("{}/v1/admin/users", server.url))
            .bearer_auth(&admin_token)
            .json(&serde_json::json!({"username": name, "password": "a-long-password", "email": format!("{name}@example.com")}))
            .send()
            .await
            .unwrap();
        assert_eq!(created.status(), 200);
    }
    let created = ok(&config, &["org", "create", "Tour Team"]);
    assert!(created.contains("tour-team"), "{created}");
    ok(
        &config,
        &["org", "members", "add", "bob", "--role", "member"],
    );
    ok(&config, &["org", "members", "role", "bob", "admin"]);
    let members: serde_json::Value =
        serde_json::from_str(&ok(&config, &["org", "members", "list", "--json"])).unwrap();
    assert!(
        members
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["username"] == "bob" && m["role"] == "admin"),
        "{members}"
    );
    ok(
        &config,
        &[
            "org",
            "invites",
            "create",
            "carol@example.com",
            "--role",
            "viewer",
        ],
    );
    assert!(ok(&config, &["org", "invites", "list"]).contains("carol@example.com"));
    ok(&config, &["org", "invites", "rm", "carol@example.com"]);
    ok(&config, &["org", "invites", "create", "dave", "--username"]);
    let dave_config = temp_dir("cli-dave");
    ok(
        &dave_config,
        &[
            "auth",
            "login",
            "--api-url",
            &server.url,
            "--username",
            "dave",
            "--password",
            "a-long-password",
        ],
    );
    let joined = ok(&dave_config, &["org", "invites", "accept", "tour-team"]);
    assert!(joined.contains("tour-team"), "{joined}");
    ok(&config, &["org", "members", "rm", "dave"]);
    let line = fails(&config, &["org", "members", "role", "bob", "emperor"], &[]);
    assert!(line.contains("invalid_role"), "{line}");
    ok(&config, &["org", "destroy", "tour-team", "--yes"]);
    ok(&config, &["org", "switch", "admin"]);

    // Log out: the next command asks to log in again.
    ok(&config, &["auth", "logout"]);
    let line = fails(&config, &["auth", "whoami"], &[]);
    assert!(line.contains("atoll auth login"), "{line}");

    // Logging in with an existing token works too.
    let admin_token = std::fs::read_to_string(server.data_dir.join("admin.token")).unwrap();
    ok(
        &config,
        &[
            "auth",
            "login",
            "--api-url",
            &server.url,
            "--token",
            admin_token.trim(),
        ],
    );
    assert_eq!(ok(&config, &["auth", "whoami"]).trim(), "admin");

    let _ = std::fs::remove_dir_all(&config);
}

#[test]
fn every_client_command_has_help_with_an_example() {
    let config = temp_dir("cli-help");
    for args in [
        vec!["auth", "login"],
        vec!["auth", "whoami"],
        vec!["org", "list"],
        vec!["org", "switch"],
        vec!["group", "create"],
        vec!["group", "destroy"],
        vec!["db", "list"],
        vec!["db", "create"],
        vec!["db", "show"],
        vec!["db", "destroy"],
        vec!["db", "tokens", "create"],
        vec!["auth", "api-tokens", "mint"],
        vec!["org", "create"],
        vec!["org", "destroy"],
        vec!["org", "members", "add"],
        vec!["org", "invites", "create"],
        vec!["auth", "api-tokens", "list"],
        vec!["auth", "api-tokens", "revoke"],
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
}
