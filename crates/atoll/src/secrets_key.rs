//! The secrets key of the server commands: the operator's key that seals the signing keys
//! in the metadata store (see `atoll_meta::secrets`, docs/SECURITY.md "Secrets at rest").
//!
//! - `atoll dev` uses `--secrets-key`/`--secrets-key-file` when given, and otherwise
//!   `<data-dir>/secrets.key`, generated (mode 0600) on first start.
//! - `atoll serve` needs one of them, or `--insecure-plaintext-secrets` to keep signing
//!   keys in the clear: a production control plane is secure by default.
//!
//! At every start, whatever is not sealed under the current key (plaintext from older
//! versions, values sealed under a previous key) is sealed under it; a key that cannot
//! open what the store holds stops the start with a message naming the key id needed.
//! Keys are never logged: only their ids (a hash prefix).

use anyhow::{bail, Context};
use atoll_meta::{SecretsKey, SecretsKeyring, Store};
use clap::Args;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The secrets key flags of `atoll dev` and `atoll serve`.
#[derive(Args, Clone, Default)]
pub struct SecretsArgs {
    /// Key sealing the signing keys in the metadata store: base64 of 32 random bytes
    /// (`head -c 32 /dev/urandom | base64`). `dev` default: `<data-dir>/secrets.key`,
    /// generated on first start.
    #[arg(
        long,
        env = "ATOLL_SECRETS_KEY",
        hide_env_values = true,
        conflicts_with = "secrets_key_file"
    )]
    secrets_key: Option<String>,
    /// File holding the secrets key on its first line; further lines hold previous keys
    /// (rotation). Blank lines and `#` comments are skipped.
    #[arg(long, env = "ATOLL_SECRETS_KEY_FILE")]
    secrets_key_file: Option<PathBuf>,
    /// Previous secrets keys (comma-separated): they still open what they sealed, and at
    /// start everything is sealed again under the current key.
    #[arg(
        long,
        env = "ATOLL_PREVIOUS_SECRETS_KEYS",
        hide_env_values = true,
        value_delimiter = ','
    )]
    previous_secrets_keys: Vec<String>,
}

/// `atoll serve`'s secrets flags: the key, or the explicit choice to go without.
#[derive(Args, Clone)]
pub struct ServeSecretsArgs {
    #[command(flatten)]
    keys: SecretsArgs,
    /// Keep the signing keys in the metadata store in the clear (anyone who reads the
    /// store or a backup of it can mint database tokens). Not for production.
    #[arg(
        long,
        env = "ATOLL_INSECURE_PLAINTEXT_SECRETS",
        conflicts_with_all = ["secrets_key", "secrets_key_file"]
    )]
    insecure_plaintext_secrets: bool,
}

impl SecretsArgs {
    /// The keyring the flags name, or `None` when they name no current key.
    fn keyring(&self) -> anyhow::Result<Option<SecretsKeyring>> {
        let mut keys = match (&self.secrets_key, &self.secrets_key_file) {
            (Some(key), _) => vec![parse_key(key, "--secrets-key")?],
            (None, Some(path)) => read_key_file(path)?,
            (None, None) => Vec::new(),
        };
        if keys.is_empty() {
            if !self.previous_secrets_keys.is_empty() {
                bail!("--previous-secrets-keys needs a current key: --secrets-key or --secrets-key-file");
            }
            return Ok(None);
        }
        for key in self
            .previous_secrets_keys
            .iter()
            .filter(|k| !k.trim().is_empty())
        {
            keys.push(parse_key(key, "--previous-secrets-keys")?);
        }
        let current = keys.remove(0);
        Ok(Some(SecretsKeyring::new(current, keys)))
    }
}

fn parse_key(text: &str, source: &str) -> anyhow::Result<SecretsKey> {
    SecretsKey::from_base64(text).with_context(|| format!("{source}: not a usable secrets key"))
}

/// The keys of a key file: the current one first.
fn read_key_file(path: &Path) -> anyhow::Result<Vec<SecretsKey>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the secrets key file {}", path.display()))?;
    warn_if_readable_by_others(path);
    let keys = text
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .enumerate()
        .map(|(i, line)| parse_key(line, &format!("{} (key {})", path.display(), i + 1)))
        .collect::<anyhow::Result<Vec<_>>>()?;
    if keys.is_empty() {
        bail!("the secrets key file {} holds no key", path.display());
    }
    Ok(keys)
}

#[cfg(unix)]
fn warn_if_readable_by_others(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(metadata) = std::fs::metadata(path) {
        if metadata.permissions().mode() & 0o077 != 0 {
            tracing::warn!(
                path = %path.display(),
                "the secrets key file is readable by other users: chmod 600 it"
            );
        }
    }
}

#[cfg(not(unix))]
fn warn_if_readable_by_others(_: &Path) {}

/// Where `atoll dev` keeps its secrets key when none is given.
pub fn dev_key_path(data_dir: &Path) -> PathBuf {
    data_dir.join("secrets.key")
}

/// `atoll dev`'s keyring: the flags', else `<data-dir>/secrets.key`, generated if missing.
/// Answers whether the key was generated now.
pub fn dev_keyring(args: &SecretsArgs, data_dir: &Path) -> anyhow::Result<(SecretsKeyring, bool)> {
    if args.secrets_key.is_some() || args.secrets_key_file.is_some() {
        let keyring = args.keyring()?.context("no secrets key given")?;
        return Ok((keyring, false));
    }
    let path = dev_key_path(data_dir);
    let generated = !path.exists();
    if generated {
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut file = options
            .open(&path)
            .with_context(|| format!("cannot create the secrets key file {}", path.display()))?;
        writeln!(
            file,
            "{}\n# The key sealing the signing keys in meta.db: back it up with meta.db (docs/OPERATIONS.md).",
            SecretsKey::generate_base64()
        )?;
        file.sync_all()?;
        tracing::info!(
            path = %path.display(),
            "generated the secrets key that seals the signing keys in meta.db: back it up, apart from meta.db's backups"
        );
    }
    let with_file = SecretsArgs {
        secrets_key: None,
        secrets_key_file: Some(path),
        previous_secrets_keys: args.previous_secrets_keys.clone(),
    };
    let keyring = with_file
        .keyring()?
        .context("the secrets key file holds no key")?;
    Ok((keyring, generated))
}

/// `atoll serve`'s keyring: the flags', or plaintext when the operator asked for it.
pub fn serve_keyring(args: &ServeSecretsArgs) -> anyhow::Result<SecretsKeyring> {
    match args.keys.keyring()? {
        Some(keyring) => Ok(keyring),
        None if args.insecure_plaintext_secrets => {
            tracing::warn!(
                "--insecure-plaintext-secrets: signing keys are kept in the clear in the \
                 metadata store; anyone who reads it or a backup of it can mint database tokens"
            );
            Ok(SecretsKeyring::plaintext())
        }
        None => bail!(
            "atoll serve needs a secrets key to seal the signing keys in the metadata store: \
             give --secrets-key or --secrets-key-file (ATOLL_SECRETS_KEY, ATOLL_SECRETS_KEY_FILE), \
             for instance a file made with `head -c 32 /dev/urandom | base64 > secrets.key`, \
             and keep it apart from the store's backups. To run without one (signing keys in \
             the clear), pass --insecure-plaintext-secrets."
        ),
    }
}

/// Gives the store its keyring and seals what is not sealed under the current key yet.
/// `hint` is added to the error when the keyring cannot open what the store holds.
pub async fn seal_store(
    store: Store,
    keyring: SecretsKeyring,
    hint: Option<String>,
) -> anyhow::Result<Store> {
    let current = keyring.current_key_id().map(str::to_string);
    let previous = keyring.previous_key_ids().join(",");
    let store = store.with_secrets(keyring);
    let report = match store.seal_signing_keys().await {
        Ok(report) => report,
        Err(e) => match hint {
            Some(hint) => bail!("cannot open the signing keys of the metadata store: {e}. {hint}"),
            None => bail!("cannot open the signing keys of the metadata store: {e}"),
        },
    };
    tracing::info!(
        secrets_key = current.as_deref().unwrap_or("none (plaintext)"),
        previous_keys = %previous,
        sealed_plaintext = report.sealed_plaintext,
        resealed = report.resealed,
        unchanged = report.unchanged,
        "signing keys sealed at rest"
    );
    Ok(store)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(key: Option<String>, file: Option<PathBuf>, previous: Vec<String>) -> SecretsArgs {
        SecretsArgs {
            secrets_key: key,
            secrets_key_file: file,
            previous_secrets_keys: previous,
        }
    }

    #[test]
    fn a_key_file_holds_the_current_key_then_previous_ones() {
        let dir = std::env::temp_dir().join(format!("atoll-keys-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let (new, old) = (SecretsKey::generate_base64(), SecretsKey::generate_base64());
        let path = dir.join("keys");
        std::fs::write(&path, format!("# rotated today\n{new}\n\n{old}\n")).unwrap();
        let keyring = args(None, Some(path.clone()), vec![])
            .keyring()
            .unwrap()
            .unwrap();
        let id = |k: &str| SecretsKey::from_base64(k).unwrap().id().to_string();
        assert_eq!(keyring.current_key_id(), Some(id(&new).as_str()));
        assert_eq!(keyring.previous_key_ids(), vec![id(&old).as_str()]);

        std::fs::write(&path, "# nothing\n").unwrap();
        let error = args(None, Some(path), vec![]).keyring().unwrap_err();
        assert!(error.to_string().contains("holds no key"), "{error}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bad_keys_are_refused_without_being_echoed() {
        let error = args(Some("c2hvcnQ=".into()), None, vec![])
            .keyring()
            .unwrap_err();
        let text = format!("{error:#}");
        assert!(
            text.contains("--secrets-key") && text.contains("5 bytes"),
            "{text}"
        );
        assert!(!text.contains("c2hvcnQ"), "{text}");
        let error = args(None, None, vec![SecretsKey::generate_base64()])
            .keyring()
            .unwrap_err();
        assert!(error.to_string().contains("needs a current key"), "{error}");
        assert!(args(None, None, vec![]).keyring().unwrap().is_none());
    }
}
