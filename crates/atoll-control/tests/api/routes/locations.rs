//! `/v1/locations…`, `/v2/organizations/{org}/locations`, `/v2/locations`, `/v1/closest-region`.

use reqwest::Method;

#[tokio::test]
async fn the_catalog_in_every_shape() {
    let app = app!();
    let flat = app.get("/v1/locations", &app.admin_token).await.expect(200);
    assert_eq!(flat["locations"]["local"], "Local (this server)");
    assert_eq!(flat["locations"]["aws-us-east-1"], "AWS US East (Virginia)");

    for path in ["/v2/organizations/admin/locations", "/v2/locations"] {
        let nested = app.get(path, &app.admin_token).await.expect(200);
        assert_eq!(nested["locations"]["local"]["local"], "Local (this server)");
        assert_eq!(
            nested["locations"]["aws"]["aws-eu-west-1"],
            "AWS EU West (Ireland)"
        );
    }

    let one = app
        .get("/v1/locations/aws-eu-west-1", &app.admin_token)
        .await
        .expect(200);
    assert_eq!(one["location"]["code"], "aws-eu-west-1");
    let closest: Vec<_> = one["location"]["closest"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["code"].as_str().unwrap())
        .collect();
    assert_eq!(closest[0], "local");
    assert!(!closest.contains(&"aws-eu-west-1"));

    let reply = app.get("/v1/locations/mars", &app.admin_token).await;
    assert_eq!((reply.status, reply.code()), (404, "location_not_found"));
}

#[tokio::test]
async fn closest_region_needs_no_credentials() {
    let app = app!();
    let body = app
        .call(Method::GET, "/v1/closest-region", None, None)
        .await
        .expect(200);
    assert_eq!(
        body,
        serde_json::json!({"server": "local", "client": "local"})
    );
}
