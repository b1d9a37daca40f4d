//! `atoll db export NAME [--output FILE]`: the database file, as the data plane serves it
//! (`GET /info` for the current generation, then `GET /export/{generation}`), written to a
//! temporary file beside the destination and renamed into place only once complete, so an
//! interrupted export never leaves a truncated database under the final name.

use super::client::{CliError, Client};
use super::data_plane::{failure_of, DataPlane};
use super::progress::{megabytes, Progress};
use reqwest::Method;
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(serde::Deserialize)]
struct Info {
    current_generation: u64,
}

pub async fn export(
    client: &Client,
    name: &str,
    output: Option<PathBuf>,
    overwrite: bool,
    encryption_key: Option<String>,
) -> Result<(), CliError> {
    let output = output.unwrap_or_else(|| PathBuf::from(format!("{name}.db")));
    if output.exists() && !overwrite {
        return Err(CliError::local(
            format!("{} already exists", output.display()),
            "choose another file with --output, or pass --overwrite",
        ));
    }
    let encrypted = encryption_key.is_some();
    let plane = DataPlane::open(client, name)
        .await?
        .with_encryption_key(encryption_key);
    // An encrypted database exports its live file only (decrypted by the server with the
    // key); a plain one its current generation.
    let generation = if encrypted {
        1
    } else {
        let response = plane
            .send("export", plane.request(Method::GET, "info").await?)
            .await?;
        if !response.status().is_success() {
            return Err(failure_of("export", response).await);
        }
        let info: Info = response
            .json()
            .await
            .map_err(|e| CliError::local(format!("unexpected answer from GET /info: {e}"), ""))?;
        info.current_generation
    };
    let response = plane
        .send(
            "export",
            plane
                .request(Method::GET, &format!("export/{generation}"))
                .await?,
        )
        .await?;
    if !response.status().is_success() {
        return Err(failure_of("export", response).await);
    }

    let dir = match output.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let write_error =
        |e: std::io::Error| CliError::local(format!("cannot write {}: {e}", output.display()), "");
    let mut temp = tempfile::Builder::new()
        .prefix(".atoll-export-")
        .suffix(".partial")
        .tempfile_in(&dir)
        .map_err(write_error)?;
    let total = response.content_length();
    let progress = Progress::new(&format!("Exporting {name}"), total);
    let mut response = response;
    let mut written = 0u64;
    loop {
        let chunk = match response.chunk().await {
            Ok(Some(chunk)) => chunk,
            Ok(None) => break,
            Err(e) => {
                progress.abandon();
                return Err(plane.unreachable("finish the export", &e));
            }
        };
        if let Err(e) = temp.write_all(&chunk) {
            progress.abandon();
            return Err(write_error(e));
        }
        written += chunk.len() as u64;
        progress.set_position(written);
    }
    if total.is_some_and(|total| total != written) {
        progress.abandon();
        return Err(CliError::local(
            format!(
                "the export ended after {written} of {} bytes",
                total.unwrap_or_default()
            ),
            "try again",
        ));
    }
    temp.as_file().sync_all().map_err(write_error)?;
    persist(temp, &output, overwrite).map_err(write_error)?;
    progress.finish(written);
    println!(
        "Exported database {name} to {} ({}).",
        output.display(),
        megabytes(written)
    );
    Ok(())
}

fn persist(temp: tempfile::NamedTempFile, output: &Path, overwrite: bool) -> std::io::Result<()> {
    if overwrite {
        temp.persist(output).map(drop).map_err(|e| e.error)
    } else {
        // Refuses, rather than replaces, a file that appeared during the export.
        temp.persist_noclobber(output)
            .map(drop)
            .map_err(|e| e.error)
    }
}
