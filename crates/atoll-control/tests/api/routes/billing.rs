//! The payment provider's routes the turso CLI calls: `POST /v1/organizations/stripe-customer`,
//! `…/subscription` (POST), `…/billing/portal`, `…/billing/payment-methods`,
//! `…/billing/customer`, team and personal.

use crate::harness::unique;
use reqwest::Method;
use serde_json::json;

#[tokio::test]
async fn turso_org_create_gets_past_the_stripe_customer_step() {
    let app = app!();
    // The CLI's body is PascalCase; the id it gets is empty, which it omits afterwards.
    let name = unique("Team");
    let customer = app
        .post(
            "/v1/organizations/stripe-customer",
            &app.admin_token,
            json!({"Name": name}),
        )
        .await
        .expect(200);
    assert_eq!(customer, json!({"StripeCustomerId": ""}));
    let org = app
        .post(
            "/v1/organizations?dry_run=false",
            &app.admin_token,
            json!({"name": name}),
        )
        .await
        .expect(200);
    assert!(org["org"]["slug"].is_string(), "{org}");
    // The route's name cannot be an organization's (it would hide it).
    let reply = app
        .post(
            "/v1/organizations",
            &app.admin_token,
            json!({"name": "stripe-customer"}),
        )
        .await;
    assert_eq!(reply.status, 400, "{:?}", reply.body);
    let reply = app
        .call(
            Method::POST,
            "/v1/organizations/stripe-customer",
            None,
            Some(json!({})),
        )
        .await;
    assert_eq!(reply.status, 401);
}

#[tokio::test]
async fn billing_answers_what_a_self_hosted_server_can() {
    let app = app!();
    let team = app.team(&app.admin_token, &unique("billing")).await;
    for prefix in [format!("/v1/organizations/{team}"), "/v1".to_string()] {
        let methods = app
            .get(
                &format!("{prefix}/billing/payment-methods"),
                &app.admin_token,
            )
            .await
            .expect(200);
        assert_eq!(methods, json!({"exists": true}));
        let customer = app
            .get(&format!("{prefix}/billing/customer"), &app.admin_token)
            .await
            .expect(200);
        assert_eq!(customer["name"], "");
        assert_eq!(customer["billing_address"]["country"], "");

        let reply = app
            .post(
                &format!("{prefix}/billing/portal"),
                &app.admin_token,
                json!({}),
            )
            .await;
        assert_eq!(
            (reply.status, reply.code()),
            (400, "not_available_on_self_hosted")
        );
        assert!(
            reply.body["error"]
                .as_str()
                .unwrap()
                .starts_with("the billing portal is not available on a self-hosted server"),
            "{:?}",
            reply.body
        );
        let reply = app
            .call(
                Method::PUT,
                &format!("{prefix}/billing/customer"),
                Some(&app.admin_token),
                Some(json!({"name": "Acme", "email": "billing@example.com"})),
            )
            .await;
        assert_eq!(
            (reply.status, reply.code()),
            (400, "not_available_on_self_hosted")
        );

        // Asking for the plan the organization is on succeeds; another one says who can.
        let current = app
            .get(&format!("{prefix}/subscription"), &app.admin_token)
            .await
            .expect(200)["subscription"]["plan"]
            .as_str()
            .unwrap()
            .to_string();
        let kept = app
            .post(
                &format!("{prefix}/subscription"),
                &app.admin_token,
                json!({"plan": current, "timeline": "monthly"}),
            )
            .await
            .expect(200);
        assert_eq!(kept["subscription"]["plan"], current.as_str());
        let other = if current == "enterprise" {
            "pro"
        } else {
            "enterprise"
        };
        let reply = app
            .post(
                &format!("{prefix}/subscription"),
                &app.admin_token,
                json!({"plan": other}),
            )
            .await;
        assert_eq!(
            (reply.status, reply.code()),
            (400, "not_available_on_self_hosted")
        );
        assert!(
            reply.body["error"]
                .as_str()
                .unwrap()
                .contains("/v1/admin/organizations/"),
            "{:?}",
            reply.body
        );
    }
}
