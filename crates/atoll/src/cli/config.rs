//! The client's settings file: `$ATOLL_CONFIG_DIR/settings.json`, else
//! `$XDG_CONFIG_HOME/atoll/settings.json`, else `$HOME/.config/atoll/settings.json`.
//! `ATOLL_API_URL` and `ATOLL_API_TOKEN` override what it holds.

use super::client::CliError;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Where `atoll dev` listens by default.
pub const DEFAULT_API_URL: &str = "http://127.0.0.1:8080";

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct Settings {
    /// Platform API base URL (`http://127.0.0.1:8080`).
    #[serde(default)]
    pub api_url: Option<String>,
    /// Platform API token (a login token or an API token).
    #[serde(default)]
    pub token: Option<String>,
    /// Username the token belongs to, as of the last login.
    #[serde(default)]
    pub username: Option<String>,
    /// Current organization slug; empty means the personal organization.
    #[serde(default)]
    pub organization: String,
}

pub fn config_dir() -> Result<PathBuf, CliError> {
    let non_empty = |key: &str| std::env::var_os(key).filter(|v| !v.is_empty());
    if let Some(dir) = non_empty("ATOLL_CONFIG_DIR") {
        return Ok(PathBuf::from(dir));
    }
    if let Some(dir) = non_empty("XDG_CONFIG_HOME") {
        return Ok(PathBuf::from(dir).join("atoll"));
    }
    if let Some(home) = non_empty("HOME") {
        return Ok(PathBuf::from(home).join(".config").join("atoll"));
    }
    Err(CliError::local(
        "cannot find a configuration directory",
        "set ATOLL_CONFIG_DIR or HOME",
    ))
}

impl Settings {
    pub fn path() -> Result<PathBuf, CliError> {
        Ok(config_dir()?.join("settings.json"))
    }

    /// The stored settings; defaults when there is no file yet.
    pub fn load() -> Result<Settings, CliError> {
        let path = Self::path()?;
        match std::fs::read_to_string(&path) {
            Ok(text) => serde_json::from_str(&text).map_err(|e| {
                CliError::local(
                    format!("{} is not valid: {e}", path.display()),
                    "fix or delete the file, then run `atoll auth login`",
                )
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Settings::default()),
            Err(e) => Err(CliError::local(
                format!("cannot read {}: {e}", path.display()),
                "",
            )),
        }
    }

    /// Writes the file (mode 0600: it holds a token).
    pub fn save(&self) -> Result<(), CliError> {
        let path = Self::path()?;
        let io = |e: std::io::Error| {
            CliError::local(format!("cannot write {}: {e}", path.display()), "")
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let text = serde_json::to_string_pretty(self).expect("settings serialize");
        let tmp = path.with_extension("json.tmp");
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(0o600);
        }
        {
            use std::io::Write;
            let mut file = options.open(&tmp).map_err(io)?;
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                file.set_permissions(std::fs::Permissions::from_mode(0o600))
                    .map_err(io)?;
            }
            file.write_all(text.as_bytes()).map_err(io)?;
            file.write_all(b"\n").map_err(io)?;
        }
        std::fs::rename(&tmp, &path).map_err(io)
    }

    /// The API URL: `ATOLL_API_URL`, else the stored one, else `atoll dev`'s default.
    pub fn api_url(&self) -> String {
        std::env::var("ATOLL_API_URL")
            .ok()
            .filter(|v| !v.is_empty())
            .or_else(|| self.api_url.clone())
            .unwrap_or_else(|| DEFAULT_API_URL.to_string())
    }

    /// The token: `ATOLL_API_TOKEN`, else the stored one.
    pub fn token(&self) -> Option<String> {
        std::env::var("ATOLL_API_TOKEN")
            .ok()
            .filter(|v| !v.is_empty())
            .or_else(|| self.token.clone().filter(|t| !t.is_empty()))
    }
}
