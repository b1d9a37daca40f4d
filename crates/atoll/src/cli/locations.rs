//! `atoll locations`: the locations of this server, the closest one marked.

use super::client::{CliError, Client};
use super::config::Settings;
use super::output;
use atoll_types::locations::{ClosestRegion, LocationMap};

pub async fn run(json: bool) -> Result<(), CliError> {
    let settings = Settings::load()?;
    let client = Client::new(&settings)?;
    client.require_token()?;
    let locations: LocationMap = client.get(client.url(&["v1", "locations"])).await?;
    let closest: ClosestRegion = client.get(client.url(&["v1", "closest-region"])).await?;
    if json {
        output::json(
            &serde_json::json!({"locations": locations.locations, "closest": closest.server}),
        );
        return Ok(());
    }
    let rows: Vec<Vec<String>> = locations
        .locations
        .iter()
        .map(|(code, description)| {
            let mark = if *code == closest.server {
                "  [closest]"
            } else {
                ""
            };
            vec![code.clone(), format!("{description}{mark}")]
        })
        .collect();
    output::table(&["CODE", "DESCRIPTION"], &rows);
    Ok(())
}
