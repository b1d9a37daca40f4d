//! The conformance suite: the behaviour every backend must show. Each check gets a fresh,
//! empty, migrated store; `tests/conformance.rs` runs them all on SQLite and PostgreSQL.

use crate::secrets::{SecretsError, SecretsKey, SecretsKeyring};
use crate::{
    AuditEntry, AuditFilter, Database, DatabaseChanges, DatabaseFilter, DatabaseInsert,
    DatabaseState, Entity, Invitee, KeySetPut, NewAuditEntry, NewGroup, NewToken, NewUser, OrgKind,
    Store, StoreError, TokenKind, TokenRestriction,
};
use atoll_types::{Role, Scope};
use std::future::Future;
use std::pin::Pin;

pub type Check = fn(Store) -> Pin<Box<dyn Future<Output = ()> + Send>>;

/// Every check, by name.
pub fn checks() -> Vec<(&'static str, Check)> {
    vec![
        ("migrations_are_idempotent", |s| {
            Box::pin(migrations_are_idempotent(s))
        }),
        ("users_get_a_personal_organization", |s| {
            Box::pin(users_get_a_personal_organization(s))
        }),
        ("team_organizations_and_members", |s| {
            Box::pin(team_organizations_and_members(s))
        }),
        ("the_last_owner_stays", |s| {
            Box::pin(the_last_owner_stays(s))
        }),
        ("invites", |s| Box::pin(invites(s))),
        ("groups", |s| Box::pin(groups(s))),
        ("group_tokens_die_with_their_group", |s| {
            Box::pin(group_tokens_die_with_their_group(s))
        }),
        ("tokens", |s| Box::pin(tokens(s))),
        ("deleting_an_organization", |s| {
            Box::pin(deleting_an_organization(s))
        }),
        ("concurrent_writes", |s| Box::pin(concurrent_writes(s))),
        ("databases", |s| Box::pin(databases(s))),
        ("the_database_limit_holds_under_concurrent_inserts", |s| {
            Box::pin(the_database_limit_holds_under_concurrent_inserts(s))
        }),
        ("databases_follow_their_group", |s| {
            Box::pin(databases_follow_their_group(s))
        }),
        ("idempotency_and_dumps", |s| {
            Box::pin(idempotency_and_dumps(s))
        }),
        ("deleted_databases_can_come_back", |s| {
            Box::pin(deleted_databases_can_come_back(s))
        }),
        ("usage_is_kept_per_instance", |s| {
            Box::pin(usage_is_kept_per_instance(s))
        }),
        ("usage_counts_each_batch_once", |s| {
            Box::pin(usage_counts_each_batch_once(s))
        }),
        ("leases_and_idle_groups", |s| {
            Box::pin(leases_and_idle_groups(s))
        }),
        ("audit_log", |s| Box::pin(audit_log(s))),
        ("audit_log_filters", |s| Box::pin(audit_log_filters(s))),
        ("storage_history", |s| Box::pin(storage_history(s))),
        ("login_tokens_can_all_be_revoked", |s| {
            Box::pin(login_tokens_can_all_be_revoked(s))
        }),
        ("one_login_token_can_be_revoked", |s| {
            Box::pin(one_login_token_can_be_revoked(s))
        }),
        ("dumps_are_counted_and_expire", |s| {
            Box::pin(dumps_are_counted_and_expire(s))
        }),
        ("signing_keys_are_sealed_at_rest", |s| {
            Box::pin(signing_keys_are_sealed_at_rest(s))
        }),
        ("the_store_has_one_id", |s| {
            Box::pin(the_store_has_one_id(s))
        }),
        ("intent_versions_and_tombstones", |s| {
            Box::pin(intent_versions_and_tombstones(s))
        }),
        ("nodes_are_recorded", |s| Box::pin(nodes_are_recorded(s))),
        ("nodes_register_with_heartbeats", |s| {
            Box::pin(nodes_register_with_heartbeats(s))
        }),
        ("organization_key_sets", |s| {
            Box::pin(organization_key_sets(s))
        }),
        ("client_certificate_authorities", |s| {
            Box::pin(client_certificate_authorities(s))
        }),
        ("encrypted_databases_keep_a_verifier_not_a_key", |s| {
            Box::pin(encrypted_databases_keep_a_verifier_not_a_key(s))
        }),
    ]
}

fn new_user(username: &str) -> NewUser {
    NewUser {
        username: username.to_string(),
        email: format!("{username}@example.com"),
        name: username.to_uppercase(),
        password_hash: "not-a-real-hash".to_string(),
        is_admin: false,
        plan: None,
    }
}

fn new_group(name: &str) -> NewGroup {
    NewGroup {
        name: name.to_string(),
        location: "local".to_string(),
        version: "v1".to_string(),
    }
}

fn new_token(user_id: &str, name: &str, restriction: TokenRestriction) -> NewToken {
    NewToken {
        id: uuid::Uuid::new_v4().simple().to_string(),
        user_id: user_id.to_string(),
        name: name.to_string(),
        kind: TokenKind::Api,
        secret_hash: format!("hash-of-{}", uuid::Uuid::new_v4()),
        restriction,
        expires_at: None,
    }
}

async fn migrations_are_idempotent(store: Store) {
    store.migrate().await.unwrap();
    store.migrate().await.unwrap();
    assert!(store.user_by_username("nobody").await.unwrap().is_none());
}

async fn users_get_a_personal_organization(store: Store) {
    let (user, org, group) = store
        .create_user(new_user("alice"), Some(new_group("default")))
        .await
        .unwrap();
    assert_eq!(org.slug, "alice");
    assert_eq!(org.kind, OrgKind::Personal);
    assert_eq!(org.plan_id, "starter");
    let group = group.unwrap();
    assert_eq!(
        (group.name.as_str(), group.locations.clone()),
        ("default", vec!["local".to_string()])
    );

    let found = store.user_by_username("alice").await.unwrap().unwrap();
    assert_eq!(found, user);
    assert_eq!(store.user_by_id(&user.id).await.unwrap().unwrap(), user);

    let err = store
        .create_user(new_user("alice"), None)
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::AlreadyExists(Entity::User)),
        "{err:?}"
    );

    let orgs = store.orgs_of_user(&user.id).await.unwrap();
    assert_eq!(orgs.len(), 1);
    assert_eq!(orgs[0].role, Role::Owner);
    let (found_org, role) = store
        .org_with_role("alice", &user.id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((found_org, role), (org, Some(Role::Owner)));
    assert!(store
        .org_with_role("nope", &user.id)
        .await
        .unwrap()
        .is_none());
}

async fn team_organizations_and_members(store: Store) {
    let (alice, ..) = store.create_user(new_user("alice"), None).await.unwrap();
    let (bob, ..) = store.create_user(new_user("bob"), None).await.unwrap();
    let team = store
        .create_team_org(&alice.id, "acme", "Acme", None, None)
        .await
        .unwrap();
    assert_eq!((team.kind, team.name.as_str()), (OrgKind::Team, "Acme"));
    assert_eq!(team.plan_id, "starter");
    assert!(store.list_groups(&team.id).await.unwrap().is_empty());

    // A team organization can start on a plan with a first group, as personal ones do.
    let (carol, ..) = store
        .create_user(
            NewUser {
                plan: Some("enterprise".into()),
                ..new_user("carol")
            },
            None,
        )
        .await
        .unwrap();
    assert_eq!(
        store.org_by_slug("carol").await.unwrap().unwrap().plan_id,
        "enterprise"
    );
    let started = store
        .create_team_org(
            &carol.id,
            "carols-team",
            "Carol's team",
            Some("enterprise"),
            Some(new_group("default")),
        )
        .await
        .unwrap();
    assert_eq!(started.plan_id, "enterprise");
    let groups = store.list_groups(&started.id).await.unwrap();
    assert_eq!(
        groups.iter().map(|g| g.name.as_str()).collect::<Vec<_>>(),
        ["default"]
    );

    // Slugs and usernames share one namespace.
    let err = store
        .create_team_org(&alice.id, "bob", "Bob's", None, None)
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::AlreadyExists(Entity::Organization)),
        "{err:?}"
    );
    let err = store
        .create_team_org(&bob.id, "acme", "Acme 2", None, None)
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::AlreadyExists(Entity::Organization)),
        "{err:?}"
    );
    let err = store.create_user(new_user("acme"), None).await.unwrap_err();
    assert!(
        matches!(err, StoreError::AlreadyExists(Entity::User)),
        "{err:?}"
    );

    let (_, role) = store.org_with_role("acme", &bob.id).await.unwrap().unwrap();
    assert_eq!(role, None);
    let member = store
        .add_member(&team.id, &bob.id, Role::Viewer)
        .await
        .unwrap();
    assert_eq!(
        (member.username.as_str(), member.role),
        ("bob", Role::Viewer)
    );
    let err = store
        .add_member(&team.id, &bob.id, Role::Admin)
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::AlreadyExists(Entity::Member)),
        "{err:?}"
    );

    let members = store.list_members(&team.id).await.unwrap();
    let names: Vec<_> = members
        .iter()
        .map(|m| (m.username.as_str(), m.role))
        .collect();
    assert_eq!(names, vec![("alice", Role::Owner), ("bob", Role::Viewer)]);

    let promoted = store
        .set_member_role(&team.id, &bob.id, Role::Admin)
        .await
        .unwrap();
    assert_eq!(promoted.role, Role::Admin);
    assert_eq!(store.orgs_of_user(&bob.id).await.unwrap().len(), 2);

    let updated = store.update_org(&team.id, Some(true), None).await.unwrap();
    assert!(updated.overages && !updated.require_mfa);
    let updated = store.update_org(&team.id, None, None).await.unwrap();
    assert!(updated.overages);

    // Removing a member revokes the tokens they minted for the organization.
    let token = store
        .insert_token(new_token(
            &bob.id,
            "ci",
            TokenRestriction::Organization {
                org_id: team.id.clone(),
            },
        ))
        .await
        .unwrap();
    store.remove_member(&team.id, &bob.id).await.unwrap();
    assert!(store
        .list_user_tokens(&bob.id)
        .await
        .unwrap()
        .iter()
        .all(|t| t.token.id != token.token.id));
    let err = store.member(&team.id, &bob.id).await.unwrap_err();
    assert!(
        matches!(err, StoreError::NotFound(Entity::Member)),
        "{err:?}"
    );
    let err = store.remove_member(&team.id, &bob.id).await.unwrap_err();
    assert!(
        matches!(err, StoreError::NotFound(Entity::Member)),
        "{err:?}"
    );
}

async fn the_last_owner_stays(store: Store) {
    let (alice, ..) = store.create_user(new_user("alice"), None).await.unwrap();
    let (bob, ..) = store.create_user(new_user("bob"), None).await.unwrap();
    let team = store
        .create_team_org(&alice.id, "acme", "Acme", None, None)
        .await
        .unwrap();

    let err = store
        .set_member_role(&team.id, &alice.id, Role::Admin)
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::LastOwner), "{err:?}");
    let err = store.remove_member(&team.id, &alice.id).await.unwrap_err();
    assert!(matches!(err, StoreError::LastOwner), "{err:?}");

    store
        .add_member(&team.id, &bob.id, Role::Owner)
        .await
        .unwrap();
    store
        .set_member_role(&team.id, &alice.id, Role::Member)
        .await
        .unwrap();
    let err = store.remove_member(&team.id, &bob.id).await.unwrap_err();
    assert!(matches!(err, StoreError::LastOwner), "{err:?}");
}

async fn invites(store: Store) {
    let (alice, ..) = store.create_user(new_user("alice"), None).await.unwrap();
    let (bob, ..) = store.create_user(new_user("bob"), None).await.unwrap();
    let (carol, ..) = store.create_user(new_user("carol"), None).await.unwrap();
    let team = store
        .create_team_org(&alice.id, "acme", "Acme", None, None)
        .await
        .unwrap();

    let first = store
        .create_invite(
            &team.id,
            Invitee::Email("BOB@example.com".into()),
            Role::Viewer,
            &alice.id,
        )
        .await
        .unwrap();
    // Inviting the same address again replaces the pending invite.
    let second = store
        .create_invite(
            &team.id,
            Invitee::Email("bob@example.com".into()),
            Role::Admin,
            &alice.id,
        )
        .await
        .unwrap();
    assert_ne!(first.id, second.id);
    store
        .create_invite(
            &team.id,
            Invitee::Username("carol".into()),
            Role::Member,
            &alice.id,
        )
        .await
        .unwrap();
    let pending = store.list_invites(&team.id).await.unwrap();
    assert_eq!(pending.len(), 2);
    assert_eq!(
        (
            pending[0].email.as_str(),
            pending[0].role,
            pending[0].org_slug.as_str()
        ),
        ("bob@example.com", Role::Admin, "acme")
    );
    assert_eq!(pending[1].username, "carol");

    let for_bob = store.invites_for_user(&bob.id).await.unwrap();
    assert_eq!(for_bob.len(), 1);
    assert!(store.invites_for_user(&alice.id).await.unwrap().is_empty());

    assert_eq!(
        store.accept_invite(&team.id, &bob.id).await.unwrap(),
        Role::Admin
    );
    assert_eq!(
        store.member(&team.id, &bob.id).await.unwrap().role,
        Role::Admin
    );
    let err = store.accept_invite(&team.id, &bob.id).await.unwrap_err();
    assert!(
        matches!(err, StoreError::NotFound(Entity::Invite)),
        "{err:?}"
    );

    store.delete_invite(&team.id, "carol").await.unwrap();
    let err = store.delete_invite(&team.id, "carol").await.unwrap_err();
    assert!(
        matches!(err, StoreError::NotFound(Entity::Invite)),
        "{err:?}"
    );
    assert!(store.invites_for_user(&carol.id).await.unwrap().is_empty());

    // Adding a member directly consumes their pending invite.
    store
        .create_invite(
            &team.id,
            Invitee::Username("carol".into()),
            Role::Member,
            &alice.id,
        )
        .await
        .unwrap();
    store
        .add_member(&team.id, &carol.id, Role::Viewer)
        .await
        .unwrap();
    assert!(store.list_invites(&team.id).await.unwrap().is_empty());
}

async fn groups(store: Store) {
    let (alice, org, _) = store.create_user(new_user("alice"), None).await.unwrap();
    let team = store
        .create_team_org(&alice.id, "acme", "Acme", None, None)
        .await
        .unwrap();
    let zeta = store
        .create_group(&org.id, new_group("zeta"))
        .await
        .unwrap();
    let alpha = store
        .create_group(&org.id, new_group("alpha"))
        .await
        .unwrap();
    let err = store
        .create_group(&org.id, new_group("alpha"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::AlreadyExists(Entity::Group)),
        "{err:?}"
    );
    // The same name in another organization is fine.
    store
        .create_group(&team.id, new_group("alpha"))
        .await
        .unwrap();

    let names: Vec<_> = store
        .list_groups(&org.id)
        .await
        .unwrap()
        .into_iter()
        .map(|g| g.name)
        .collect();
    assert_eq!(names, vec!["alpha", "zeta"]);
    assert_eq!(
        store.group_by_name(&org.id, "zeta").await.unwrap().unwrap(),
        zeta
    );
    assert_eq!(store.group_by_id(&zeta.id).await.unwrap().unwrap(), zeta);
    assert!(store
        .group_by_name(&org.id, "nope")
        .await
        .unwrap()
        .is_none());

    let changed = store
        .update_group(
            &alpha.id,
            crate::GroupChanges {
                name: Some("beta".into()),
                delete_protection: Some(true),
                locations: Some(vec!["local".into(), "edge".into()]),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(changed.name, "beta");
    assert!(changed.delete_protection && !changed.archived);
    assert_eq!(changed.locations, vec!["local", "edge"]);
    assert_eq!(changed.primary_location, "local");
    // Only the group in two locations has replicas to place.
    let several = store.groups_in_several_locations().await.unwrap();
    assert_eq!(
        several.iter().map(|g| g.id.as_str()).collect::<Vec<_>>(),
        vec![changed.id.as_str()]
    );
    let err = store
        .update_group(
            &changed.id,
            crate::GroupChanges {
                name: Some("zeta".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::AlreadyExists(Entity::Group)),
        "{err:?}"
    );

    let archived = store
        .update_group(
            &zeta.id,
            crate::GroupChanges {
                archived: Some(true),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert!(archived.archived && archived.name == "zeta");

    // A group cannot land where its name is taken.
    let err = store.transfer_group(&changed.id, &team.id).await;
    assert!(err.is_ok(), "beta is free in acme: {err:?}");
    let err = store.transfer_group(&zeta.id, &team.id).await;
    assert!(err.is_ok());
    let dup = store
        .create_group(&org.id, new_group("zeta"))
        .await
        .unwrap();
    let err = store.transfer_group(&dup.id, &team.id).await.unwrap_err();
    assert!(
        matches!(err, StoreError::AlreadyExists(Entity::Group)),
        "{err:?}"
    );

    let deleted = store.delete_group(&dup.id).await.unwrap();
    assert_eq!(deleted.name, "zeta");
    assert!(store.group_by_id(&dup.id).await.unwrap().is_none());
    let err = store.delete_group(&dup.id).await.unwrap_err();
    assert!(
        matches!(err, StoreError::NotFound(Entity::Group)),
        "{err:?}"
    );
}

async fn group_tokens_die_with_their_group(store: Store) {
    let (alice, org, _) = store.create_user(new_user("alice"), None).await.unwrap();
    let team = store
        .create_team_org(&alice.id, "acme", "Acme", None, None)
        .await
        .unwrap();
    let doomed = store
        .create_group(&org.id, new_group("doomed"))
        .await
        .unwrap();
    let moving = store
        .create_group(&org.id, new_group("moving"))
        .await
        .unwrap();
    let pinned = |group: &crate::Group| TokenRestriction::Group {
        org_id: group.org_id.clone(),
        group_id: group.id.clone(),
        scopes: vec![Scope::Read, Scope::DbCreate],
    };
    let on_doomed = store
        .insert_token(new_token(&alice.id, "a", pinned(&doomed)))
        .await
        .unwrap();
    let on_moving = store
        .insert_token(new_token(&alice.id, "b", pinned(&moving)))
        .await
        .unwrap();
    assert_eq!(on_doomed.group_name.as_deref(), Some("doomed"));
    assert!(
        matches!(&on_doomed.token.restriction, TokenRestriction::Group { scopes, .. } if scopes == &vec![Scope::Read, Scope::DbCreate])
    );

    store.delete_group(&doomed.id).await.unwrap();
    store.transfer_group(&moving.id, &team.id).await.unwrap();
    let active: Vec<_> = store
        .list_user_tokens(&alice.id)
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.token.id)
        .collect();
    assert!(!active.contains(&on_doomed.token.id));
    assert!(!active.contains(&on_moving.token.id));

    // A new group with the old name does not bring the tokens back.
    store
        .create_group(&org.id, new_group("doomed"))
        .await
        .unwrap();
    assert!(store.list_user_tokens(&alice.id).await.unwrap().is_empty());
}

async fn tokens(store: Store) {
    let (alice, org, _) = store.create_user(new_user("alice"), None).await.unwrap();
    let (bob, ..) = store.create_user(new_user("bob"), None).await.unwrap();
    let team = store
        .create_team_org(&alice.id, "acme", "Acme", None, None)
        .await
        .unwrap();
    store
        .add_member(&team.id, &bob.id, Role::Member)
        .await
        .unwrap();

    let mut login = new_token(&alice.id, "login", TokenRestriction::Unrestricted);
    login.kind = TokenKind::Login;
    login.expires_at = Some(crate::now_millis() + 1000);
    let login = store.insert_token(login).await.unwrap();
    let unrestricted = new_token(&alice.id, "everything", TokenRestriction::Unrestricted);
    let secret_hash = unrestricted.secret_hash.clone();
    let unrestricted = store.insert_token(unrestricted).await.unwrap();
    store
        .insert_token(new_token(
            &alice.id,
            "acme",
            TokenRestriction::Organization {
                org_id: team.id.clone(),
            },
        ))
        .await
        .unwrap();
    store
        .insert_token(new_token(
            &alice.id,
            "personal",
            TokenRestriction::Organization {
                org_id: org.id.clone(),
            },
        ))
        .await
        .unwrap();
    let bobs = store
        .insert_token(new_token(
            &bob.id,
            "bobs",
            TokenRestriction::Organization {
                org_id: team.id.clone(),
            },
        ))
        .await
        .unwrap();

    let err = store
        .insert_token(new_token(&alice.id, "acme", TokenRestriction::Unrestricted))
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::AlreadyExists(Entity::Token)),
        "{err:?}"
    );

    let credential = store
        .credential_by_secret_hash(&secret_hash)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(credential.user.username, "alice");
    assert_eq!(credential.token.id, unrestricted.token.id);
    assert!(credential.token.last_used_at.is_none());
    store
        .touch_token(&secret_hash, &credential.token)
        .await
        .unwrap();
    let used = store
        .credential_by_secret_hash(&secret_hash)
        .await
        .unwrap()
        .unwrap();
    assert!(used.token.last_used_at.is_some());
    assert!(store
        .credential_by_secret_hash("unknown")
        .await
        .unwrap()
        .is_none());

    // Login tokens are not API tokens: they are never listed.
    let names: Vec<_> = store
        .list_user_tokens(&alice.id)
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.token.name)
        .collect();
    assert_eq!(names.len(), 3);
    assert!(!names.contains(&login.token.name));

    let all = store.list_org_tokens(&team.id, None).await.unwrap();
    let mut owners: Vec<_> = all
        .iter()
        .map(|t| (t.token.name.as_str(), t.owner_username.as_str()))
        .collect();
    owners.sort();
    assert_eq!(owners, vec![("acme", "alice"), ("bobs", "bob")]);
    assert_eq!(all[0].org_slug.as_deref(), Some("acme"));
    let own = store
        .list_org_tokens(&team.id, Some(&bob.id))
        .await
        .unwrap();
    assert_eq!(own.len(), 1);
    assert_eq!(own[0].owner_email, "bob@example.com");

    // Bob cannot revoke Alice's token when restricted to his own; another org's id is
    // not found.
    let alices = all
        .iter()
        .find(|t| t.token.name == "acme")
        .unwrap()
        .token
        .id
        .clone();
    let err = store
        .revoke_org_token(&team.id, &alices, Some(&bob.id))
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::NotFound(Entity::Token)),
        "{err:?}"
    );
    let err = store
        .revoke_org_token(&org.id, &bobs.token.id, None)
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::NotFound(Entity::Token)),
        "{err:?}"
    );
    store
        .revoke_org_token(&team.id, &bobs.token.id, Some(&bob.id))
        .await
        .unwrap();
    assert!(store
        .list_org_tokens(&team.id, Some(&bob.id))
        .await
        .unwrap()
        .is_empty());

    // Revoking by name frees the name; the revoked secret still resolves, marked revoked.
    store
        .revoke_user_token(&alice.id, "everything")
        .await
        .unwrap();
    let err = store
        .revoke_user_token(&alice.id, "everything")
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::NotFound(Entity::Token)),
        "{err:?}"
    );
    let revoked = store
        .credential_by_secret_hash(&secret_hash)
        .await
        .unwrap()
        .unwrap();
    assert!(revoked.token.revoked_at.is_some());
    store
        .insert_token(new_token(
            &alice.id,
            "everything",
            TokenRestriction::Unrestricted,
        ))
        .await
        .unwrap();
}

async fn deleting_an_organization(store: Store) {
    let (alice, ..) = store.create_user(new_user("alice"), None).await.unwrap();
    let team = store
        .create_team_org(&alice.id, "acme", "Acme", None, None)
        .await
        .unwrap();
    store.create_group(&team.id, new_group("g")).await.unwrap();
    store
        .create_invite(
            &team.id,
            Invitee::Username("x".into()),
            Role::Member,
            &alice.id,
        )
        .await
        .unwrap();
    store
        .insert_token(new_token(
            &alice.id,
            "t",
            TokenRestriction::Organization {
                org_id: team.id.clone(),
            },
        ))
        .await
        .unwrap();

    store.delete_org(&team.id).await.unwrap();
    assert!(store.org_by_slug("acme").await.unwrap().is_none());
    assert!(store.list_groups(&team.id).await.unwrap().is_empty());
    assert!(store.list_invites(&team.id).await.unwrap().is_empty());
    assert!(store.list_user_tokens(&alice.id).await.unwrap().is_empty());
    assert_eq!(store.orgs_of_user(&alice.id).await.unwrap().len(), 1);
    let err = store.delete_org(&team.id).await.unwrap_err();
    assert!(
        matches!(err, StoreError::NotFound(Entity::Organization)),
        "{err:?}"
    );
    // The slug can be taken again.
    store
        .create_team_org(&alice.id, "acme", "Acme again", None, None)
        .await
        .unwrap();
}

async fn concurrent_writes(store: Store) {
    let (_, org, _) = store.create_user(new_user("alice"), None).await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..24 {
        let store = store.clone();
        let org_id = org.id.clone();
        tasks.push(tokio::spawn(async move {
            // Half the writers race for the same name: exactly one of them wins.
            let name = if i % 2 == 0 {
                format!("g{i}")
            } else {
                "contested".to_string()
            };
            store.create_group(&org_id, new_group(&name)).await
        }));
    }
    let mut created = 0;
    let mut conflicts = 0;
    for task in tasks {
        match task.await.unwrap() {
            Ok(_) => created += 1,
            Err(StoreError::AlreadyExists(Entity::Group)) => conflicts += 1,
            Err(other) => panic!("unexpected error: {other:?}"),
        }
    }
    assert_eq!((created, conflicts), (13, 11));
    assert_eq!(store.list_groups(&org.id).await.unwrap().len(), 13);
}

/// A plan's database limit is checked in the insert's transaction: creates racing at the
/// limit cannot all pass the count before any of them is stored.
async fn the_database_limit_holds_under_concurrent_inserts(store: Store) {
    let (_, org, group) = store
        .create_user(new_user("alice"), Some(new_group("default")))
        .await
        .unwrap();
    let group = group.unwrap();
    for name in ["a", "b"] {
        store
            .insert_database(new_database(
                &org.id,
                &group.id,
                name,
                &format!("{name}-alice"),
            ))
            .await
            .unwrap();
    }
    assert_eq!(store.live_database_count(&org.id).await.unwrap(), 2);
    let mut tasks = Vec::new();
    for i in 0..12 {
        let store = store.clone();
        let db = new_database(&org.id, &group.id, &format!("c{i}"), &format!("c{i}-alice"));
        tasks.push(tokio::spawn(async move {
            store.insert_database_within(db, Some(5)).await
        }));
    }
    let (mut inserted, mut refused) = (0, 0);
    for task in tasks {
        match task.await.unwrap().unwrap() {
            DatabaseInsert::Inserted(_) => inserted += 1,
            DatabaseInsert::LimitReached => refused += 1,
        }
    }
    assert_eq!((inserted, refused), (3, 9));
    assert_eq!(store.live_database_count(&org.id).await.unwrap(), 5);
    // A taken name is still a conflict under a limit, and no limit means none.
    let err = store
        .insert_database_within(new_database(&org.id, &group.id, "a", "a3-alice"), Some(100))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::AlreadyExists(Entity::Database)));
    assert!(matches!(
        store
            .insert_database_within(new_database(&org.id, &group.id, "z", "z-alice"), None)
            .await
            .unwrap(),
        DatabaseInsert::Inserted(_)
    ));
}

fn new_database(org_id: &str, group_id: &str, name: &str, label: &str) -> Database {
    Database {
        id: uuid::Uuid::new_v4().to_string(),
        org_id: org_id.to_string(),
        group_id: group_id.to_string(),
        name: name.to_string(),
        label: label.to_string(),
        state: DatabaseState::Active,
        location: "local".to_string(),
        node: "local".to_string(),
        size_limit: None,
        block_reads: false,
        block_writes: false,
        delete_protection: false,
        allow_attach: false,
        allowed_ips: vec![],
        parent: None,
        signing_key: "key".to_string(),
        key_id: "kid".to_string(),
        created_at: 0,
        deleted_at: None,
        config_version: 1,
        durability: None,
        history_starts_at: None,
        encryption: None,
    }
}

async fn encrypted_databases_keep_a_verifier_not_a_key(store: Store) {
    let (_, org, group) = store
        .create_user(new_user("erin"), Some(new_group("default")))
        .await
        .unwrap();
    let group = group.unwrap();
    let encryption = crate::DatabaseEncryption {
        cipher: "aes256gcm".into(),
        verifier: "ab".repeat(32),
    };
    let encrypted = store
        .insert_database(Database {
            encryption: Some(encryption.clone()),
            ..new_database(&org.id, &group.id, "secret", "secret-erin")
        })
        .await
        .unwrap();
    assert_eq!(encrypted.encryption.as_ref(), Some(&encryption));
    let read = store.database_by_id(&encrypted.id).await.unwrap().unwrap();
    assert_eq!(read.encryption, Some(encryption));
    let plain = store
        .insert_database(new_database(&org.id, &group.id, "plain", "plain-erin"))
        .await
        .unwrap();
    assert_eq!(plain.encryption, None);

    // A rotation replaces the cipher and the verifier, and bumps the configuration.
    let rotated = crate::DatabaseEncryption {
        cipher: "chacha20poly1305".into(),
        verifier: "cd".repeat(32),
    };
    let changes = || crate::DatabaseChanges {
        encryption: Some(rotated.clone()),
        ..Default::default()
    };
    let updated = store
        .update_database(&encrypted.id, changes())
        .await
        .unwrap();
    assert_eq!(updated.encryption.as_ref(), Some(&rotated));
    assert!(updated.config_version > encrypted.config_version);
    // Other changes keep it.
    let kept = store
        .update_database(
            &encrypted.id,
            crate::DatabaseChanges {
                block_reads: Some(true),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(kept.encryption.as_ref(), Some(&rotated));
    // A database created plain never becomes encrypted by an update.
    let still_plain = store.update_database(&plain.id, changes()).await.unwrap();
    assert_eq!(still_plain.encryption, None);
}

async fn databases(store: Store) {
    let (_, org, group) = store
        .create_user(new_user("alice"), Some(new_group("default")))
        .await
        .unwrap();
    let group = group.unwrap();
    let other = store
        .create_group(&org.id, new_group("other"))
        .await
        .unwrap();
    let mut names = Vec::new();
    for name in ["b", "a", "d", "c"] {
        let g = if name == "d" { &other.id } else { &group.id };
        let db = store
            .insert_database(new_database(&org.id, g, name, &format!("{name}-alice")))
            .await
            .unwrap();
        assert_eq!((db.name.as_str(), db.state), (name, DatabaseState::Active));
        assert_eq!(db.encryption, None);
        names.push(db);
    }
    let err = store
        .insert_database(new_database(&org.id, &group.id, "a", "a2-alice"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::AlreadyExists(Entity::Database)),
        "{err:?}"
    );
    let err = store
        .insert_database(new_database(&org.id, &group.id, "zz", "a-alice"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::AlreadyExists(Entity::Database)),
        "{err:?}"
    );

    let all: Vec<_> = store
        .databases_in_org(&org.id)
        .await
        .unwrap()
        .into_iter()
        .map(|d| d.name)
        .collect();
    assert_eq!(all, vec!["a", "b", "c", "d"]);
    let page = store
        .list_databases(
            &org.id,
            DatabaseFilter {
                after_name: Some("a".into()),
                limit: Some(2),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        page.iter().map(|d| d.name.as_str()).collect::<Vec<_>>(),
        vec!["b", "c"]
    );
    let in_other = store
        .list_databases(
            &org.id,
            DatabaseFilter {
                group_id: Some(other.id.clone()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(in_other.len(), 1);
    assert_eq!(store.databases_in_group(&group.id).await.unwrap().len(), 3);

    let mut child = new_database(&org.id, &group.id, "child", "child-alice");
    child.parent = Some((names[0].id.clone(), "b".into(), 42));
    child.state = DatabaseState::Creating;
    let child = store.insert_database(child).await.unwrap();
    assert_eq!(child.parent, Some((names[0].id.clone(), "b".into(), 42)));
    let children = store
        .list_databases(
            &org.id,
            DatabaseFilter {
                parent_id: Some(names[0].id.clone()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(children, vec![child.clone()]);
    assert_eq!(
        store
            .databases_in_state(DatabaseState::Creating)
            .await
            .unwrap(),
        vec![child.clone()]
    );

    let changed = store
        .update_database(
            &child.id,
            DatabaseChanges {
                state: Some(DatabaseState::AwaitingUpload),
                size_limit: Some(Some(1_000_000)),
                block_writes: Some(true),
                allowed_ips: Some(vec!["10.0.0.0/8".into(), "1.2.3.4".into()]),
                signing_key: Some(("new".into(), "kid2".into())),
                durability: Some(Some("sync".into())),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(changed.state, DatabaseState::AwaitingUpload);
    assert_eq!(changed.durability.as_deref(), Some("sync"));
    assert_eq!(changed.size_limit, Some(1_000_000));
    assert!(changed.block_writes && !changed.block_reads);
    assert_eq!(changed.allowed_ips, vec!["10.0.0.0/8", "1.2.3.4"]);
    assert_eq!(
        (changed.signing_key.as_str(), changed.key_id.as_str()),
        ("new", "kid2")
    );
    let cleared = store
        .update_database(
            &child.id,
            DatabaseChanges {
                size_limit: Some(None),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(cleared.size_limit, None);
    assert!(cleared.block_writes);
    assert_eq!(
        cleared.durability.as_deref(),
        Some("sync"),
        "left as it was"
    );
    let back = store
        .update_database(
            &child.id,
            DatabaseChanges {
                durability: Some(None),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(back.durability, None);

    assert_eq!(
        store
            .database_by_name(&org.id, "child")
            .await
            .unwrap()
            .unwrap()
            .id,
        child.id
    );
    // Many at once, as one at a time finds each; an unknown id is left out.
    let found = store
        .databases_by_ids(vec![child.id.clone(), "no-such-database".into()])
        .await
        .unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(
        found.get(&child.id),
        store.database_by_id(&child.id).await.unwrap().as_ref()
    );
    let deleted = store.delete_database(&child.id).await.unwrap();
    assert_eq!(deleted.name, "child");
    assert!(store.database_by_id(&child.id).await.unwrap().is_none());
    let err = store.delete_database(&child.id).await.unwrap_err();
    assert!(
        matches!(err, StoreError::NotFound(Entity::Database)),
        "{err:?}"
    );
}

async fn databases_follow_their_group(store: Store) {
    let (alice, org, group) = store
        .create_user(new_user("alice"), Some(new_group("default")))
        .await
        .unwrap();
    let group = group.unwrap();
    let team = store
        .create_team_org(&alice.id, "acme", "Acme", None, None)
        .await
        .unwrap();
    let keyed = store
        .set_group_key(&group.id, "secret", "k1")
        .await
        .unwrap();
    assert_eq!(
        (keyed.signing_key.as_str(), keyed.key_id.as_str()),
        ("secret", "k1")
    );
    let db = store
        .insert_database(new_database(&org.id, &group.id, "app", "app-alice"))
        .await
        .unwrap();
    assert_eq!(
        db.history_starts_at, None,
        "a history starts at the creation"
    );

    // A transfer starts the history of each database anew.
    let before = crate::now_millis();
    store.transfer_group(&group.id, &team.id).await.unwrap();
    let moved = store.database_by_id(&db.id).await.unwrap().unwrap();
    assert_eq!(
        (moved.org_id.as_str(), moved.label.as_str()),
        (team.id.as_str(), "app-acme")
    );
    assert!(moved.history_starts_at.is_some_and(|at| at >= before));
    assert!(store
        .database_by_name(&team.id, "app")
        .await
        .unwrap()
        .is_some());

    let target = store
        .create_group(&org.id, new_group("target"))
        .await
        .unwrap();
    let back = store
        .move_database(&db.id, &org.id, &target.id, "app-alice")
        .await
        .unwrap();
    assert_eq!(
        (back.group_id.as_str(), back.label.as_str()),
        (target.id.as_str(), "app-alice")
    );
    assert!(back.history_starts_at >= moved.history_starts_at);

    // Deleting a group deletes its databases.
    store.delete_group(&target.id).await.unwrap();
    assert!(store.database_by_id(&db.id).await.unwrap().is_none());
}

async fn idempotency_and_dumps(store: Store) {
    let (_, org, _) = store.create_user(new_user("alice"), None).await.unwrap();
    assert!(store
        .idempotent_response(&org.id, "k")
        .await
        .unwrap()
        .is_none());
    store
        .remember_response(&org.id, "k", "f1", "{\"a\":1}")
        .await
        .unwrap();
    store
        .remember_response(&org.id, "k", "f2", "{\"a\":2}")
        .await
        .unwrap();
    assert_eq!(
        store.idempotent_response(&org.id, "k").await.unwrap(),
        Some(("f1".into(), "{\"a\":1}".into()))
    );

    store
        .insert_dump("d1", &org.id, "CREATE TABLE t(x);".into())
        .await
        .unwrap();
    assert_eq!(
        store
            .dump(&org.id, "d1")
            .await
            .unwrap()
            .map(|d| d.sql)
            .as_deref(),
        Some("CREATE TABLE t(x);")
    );
    assert!(store.dump("other-org", "d1").await.unwrap().is_none());
}

async fn deleted_databases_can_come_back(store: Store) {
    let (_, org, group) = store
        .create_user(new_user("alice"), Some(new_group("default")))
        .await
        .unwrap();
    let group = group.unwrap();
    let plan = store.set_org_plan(&org.id, "scaler").await.unwrap();
    assert_eq!(plan.plan_id, "scaler");
    let db = store
        .insert_database(new_database(&org.id, &group.id, "app", "app-alice"))
        .await
        .unwrap();
    let deleted = store.soft_delete_database(&db.id).await.unwrap();
    assert!(deleted.deleted_at.is_some());
    assert!(store
        .database_by_name(&org.id, "app")
        .await
        .unwrap()
        .is_none());
    assert!(store
        .databases_in_org(&org.id)
        .await
        .unwrap()
        .iter()
        .any(|d| d.id == db.id));
    assert!(store
        .list_databases(&org.id, DatabaseFilter::default())
        .await
        .unwrap()
        .is_empty());
    assert_eq!(store.deleted_databases(&org.id).await.unwrap().len(), 1);
    let err = store.soft_delete_database(&db.id).await.unwrap_err();
    assert!(
        matches!(err, StoreError::NotFound(Entity::Database)),
        "{err:?}"
    );

    // While it is deleted, its name can be taken; then it cannot come back.
    let twin = store
        .insert_database(new_database(&org.id, &group.id, "app", "app-alice"))
        .await
        .unwrap();
    let err = store.restore_database(&db.id).await.unwrap_err();
    assert!(
        matches!(err, StoreError::AlreadyExists(Entity::Database)),
        "{err:?}"
    );
    store.delete_database(&twin.id).await.unwrap();
    let restored = store.restore_database(&db.id).await.unwrap();
    assert_eq!(restored.deleted_at, None);
    assert_eq!(
        store
            .database_by_name(&org.id, "app")
            .await
            .unwrap()
            .unwrap()
            .id,
        db.id
    );
    assert!(store.deleted_databases(&org.id).await.unwrap().is_empty());
    let err = store.restore_database(&db.id).await.unwrap_err();
    assert!(
        matches!(err, StoreError::NotFound(Entity::Database)),
        "{err:?}"
    );
}

/// Usage by instance (location), beside the database's totals; once per batch too.
async fn usage_is_kept_per_instance(store: Store) {
    use crate::{InstanceUsageOf, Usage, UsageEntry};
    let hour = 3_600_000;
    let t0 = 1_700_000_000_000 - 1_700_000_000_000 % hour;
    let entry = |db: &str, instance: &str, r: i64| UsageEntry {
        database_id: db.to_string(),
        org_id: "o".to_string(),
        instance: instance.to_string(),
        usage: Usage {
            rows_read: r,
            rows_written: 1,
            bytes_synced: 0,
        },
    };
    let batch = vec![
        entry("a", "east", 5),
        entry("a", "west", 3),
        entry("b", "east", 2),
        entry("a", "", 100),
    ];
    assert!(store
        .store_usage_batch("i1", t0 + 1, batch.clone())
        .await
        .unwrap());
    assert!(!store.store_usage_batch("i1", t0 + 2, batch).await.unwrap());
    assert!(store
        .store_usage_batch("i2", t0 + hour, vec![entry("a", "west", 4)])
        .await
        .unwrap());
    let used = |r: i64, w: i64| Usage {
        rows_read: r,
        rows_written: w,
        bytes_synced: 0,
    };
    assert_eq!(
        store
            .instance_usage(InstanceUsageOf::Database("a".into()), t0, t0 + 2 * hour)
            .await
            .unwrap(),
        vec![
            ("a".to_string(), "east".to_string(), used(5, 1)),
            ("a".to_string(), "west".to_string(), used(7, 2)),
        ],
        "an entry without an instance counts in the totals only"
    );
    assert_eq!(
        store.database_usage("a", t0, t0 + 2 * hour).await.unwrap(),
        used(112, 4)
    );
    let by_org = store
        .instance_usage(InstanceUsageOf::Organization("o".into()), t0, t0 + hour)
        .await
        .unwrap();
    assert_eq!(by_org.len(), 3, "{by_org:?}");
    assert_eq!(by_org[2], ("b".to_string(), "east".to_string(), used(2, 1)));
}

async fn usage_counts_each_batch_once(store: Store) {
    use crate::{hour_bucket, Usage, UsageEntry};
    let hour = 3_600_000;
    let t0 = 1_700_000_000_000 - 1_700_000_000_000 % hour;
    let entry = |db: &str, org: &str, r: i64, w: i64, s: i64| UsageEntry {
        database_id: db.to_string(),
        org_id: org.to_string(),
        instance: String::new(),
        usage: Usage {
            rows_read: r,
            rows_written: w,
            bytes_synced: s,
        },
    };
    assert!(store
        .store_usage_batch(
            "b1",
            t0 + 10,
            vec![entry("a", "o", 5, 1, 0), entry("b", "o", 1, 0, 100)]
        )
        .await
        .unwrap());
    // The same batch again (a crash before the node heard back) counts nothing.
    assert!(!store
        .store_usage_batch("b1", t0 + 20, vec![entry("a", "o", 5, 1, 0)])
        .await
        .unwrap());
    assert!(store
        .store_usage_batch("b2", t0 + 30, vec![entry("a", "o", 2, 2, 0)])
        .await
        .unwrap());
    assert!(store
        .store_usage_batch(
            "b3",
            t0 + hour + 1,
            vec![entry("a", "o", 1, 0, 0), entry("a", "other", 7, 0, 0)]
        )
        .await
        .unwrap());

    assert_eq!(hour_bucket(t0 + 59), t0);
    assert_eq!(
        store.database_usage("a", t0, t0 + hour).await.unwrap(),
        Usage {
            rows_read: 7,
            rows_written: 3,
            bytes_synced: 0
        }
    );
    assert_eq!(
        store.database_usage("a", t0, t0 + 2 * hour).await.unwrap(),
        Usage {
            rows_read: 15,
            rows_written: 3,
            bytes_synced: 0
        }
    );
    assert_eq!(
        store.database_usage("nobody", t0, t0 + hour).await.unwrap(),
        Usage::default()
    );
    let by_db = store.org_usage("o", t0, t0 + 2 * hour).await.unwrap();
    assert_eq!(
        by_db,
        vec![
            (
                "a".to_string(),
                Usage {
                    rows_read: 8,
                    rows_written: 3,
                    bytes_synced: 0
                }
            ),
            (
                "b".to_string(),
                Usage {
                    rows_read: 1,
                    rows_written: 0,
                    bytes_synced: 100
                }
            ),
        ]
    );
}

/// Nodes are stamped with the store's id: it must be the same from every caller, made once
/// even when replicas ask at the same moment.
async fn the_store_has_one_id(store: Store) {
    let asked_together = futures_join_all(
        (0..8)
            .map(|_| {
                let store = store.clone();
                tokio::spawn(async move { store.store_id().await.unwrap() })
            })
            .collect(),
    )
    .await;
    let first = &asked_together[0];
    assert_eq!(uuid::Uuid::parse_str(first).unwrap().to_string(), *first);
    assert!(
        asked_together.iter().all(|id| id == first),
        "{asked_together:?}"
    );
    assert_eq!(store.store_id().await.unwrap(), *first);
}

/// Every change a node must see bumps the database's `config_version`; every way of
/// forgetting a database leaves a tombstone naming its node.
async fn intent_versions_and_tombstones(store: Store) {
    let (_, org, group) = store
        .create_user(new_user("vera"), Some(new_group("default")))
        .await
        .unwrap();
    let group = group.unwrap();
    let version = |store: Store, id: String| async move {
        store
            .database_by_id(&id)
            .await
            .unwrap()
            .unwrap()
            .config_version
    };
    let mut on_b = new_database(&org.id, &group.id, "one", "one-vera");
    on_b.node = "node-b".into();
    let one = store.insert_database(on_b).await.unwrap();
    assert_eq!(one.config_version, 1);
    let two = store
        .insert_database(new_database(&org.id, &group.id, "two", "two-vera"))
        .await
        .unwrap();

    let changes = DatabaseChanges {
        block_writes: Some(true),
        ..Default::default()
    };
    assert_eq!(
        store
            .update_database(&one.id, changes)
            .await
            .unwrap()
            .config_version,
        2
    );
    assert_eq!(
        store
            .soft_delete_database(&one.id)
            .await
            .unwrap()
            .config_version,
        3
    );
    assert_eq!(
        store
            .restore_database(&one.id)
            .await
            .unwrap()
            .config_version,
        4
    );
    // The group's archive state and keys, and the organization's blocks, are part of it.
    let archive = crate::GroupChanges {
        archived: Some(true),
        ..Default::default()
    };
    store.update_group(&group.id, archive).await.unwrap();
    assert_eq!(version(store.clone(), one.id.clone()).await, 5);
    assert_eq!(version(store.clone(), two.id.clone()).await, 2);
    store.set_org_blocks(&org.id, true, true).await.unwrap();
    assert_eq!(version(store.clone(), one.id.clone()).await, 6);
    assert_eq!(
        store.databases_on_node("node-b").await.unwrap().len(),
        1,
        "one database on node-b"
    );

    // Forgetting a database leaves a tombstone for its node.
    assert!(store.tombstones("node-b").await.unwrap().is_empty());
    store.delete_database(&one.id).await.unwrap();
    let tombstones = store.tombstones("node-b").await.unwrap();
    assert_eq!(tombstones.len(), 1);
    assert_eq!(
        (tombstones[0].id.as_str(), tombstones[0].node.as_str()),
        (one.id.as_str(), "node-b")
    );
    assert!(store.is_tombstoned(&one.id).await.unwrap());
    store.remove_tombstone(&one.id).await.unwrap();
    assert!(!store.is_tombstoned(&one.id).await.unwrap());
    // So does deleting its group.
    store.delete_group(&group.id).await.unwrap();
    assert!(store.is_tombstoned(&two.id).await.unwrap());
    assert_eq!(store.tombstones("local").await.unwrap().len(), 1);
}

/// Nodes are recorded at each contact; placement reads their databases from the store.
async fn nodes_are_recorded(store: Store) {
    let record = |name: &str, at: i64| crate::NodeRecord {
        name: name.to_string(),
        location: "aws-us-east-1".into(),
        admin_url: format!("http://{name}:8082"),
        http_url: format!("http://{name}:8081"),
        hostname_suffix: format!("{name}.example"),
        registered_at: at,
        last_seen_at: at,
        heartbeat_at: 0,
        draining: false,
        capacity: 0,
        direct_url: String::new(),
        leased_until: 0,
    };
    store.record_node(record("b", 100)).await.unwrap();
    store.record_node(record("a", 100)).await.unwrap();
    let mut moved = record("a", 200);
    moved.admin_url = "http://a-new:8082".into();
    store.record_node(moved).await.unwrap();
    let nodes = store.nodes().await.unwrap();
    assert_eq!(nodes.len(), 2);
    assert_eq!(nodes[0].name, "a");
    assert_eq!(nodes[0].admin_url, "http://a-new:8082");
    assert_eq!((nodes[0].registered_at, nodes[0].last_seen_at), (100, 200));
    store.node_seen("b", 300).await.unwrap();
    store.node_seen("b", 250).await.unwrap();
    assert_eq!(
        store.nodes().await.unwrap()[1].last_seen_at,
        300,
        "never goes back"
    );

    let (_, org, group) = store
        .create_user(new_user("nora"), Some(new_group("default")))
        .await
        .unwrap();
    let group = group.unwrap();
    for (name, node) in [("x", "a"), ("y", "a"), ("z", "b")] {
        let mut db = new_database(&org.id, &group.id, name, &format!("{name}-nora"));
        db.node = node.into();
        store.insert_database(db).await.unwrap();
    }
    let counts = store.database_counts_by_node().await.unwrap();
    assert_eq!((counts["a"], counts["b"]), (2, 1));

    // A move places a database elsewhere only from where it is, with a new version.
    let x = store.database_by_name(&org.id, "x").await.unwrap().unwrap();
    assert!(!store.place_database(&x.id, "b", "c").await.unwrap());
    assert!(store.place_database(&x.id, "a", "b").await.unwrap());
    let moved = store.database_by_id(&x.id).await.unwrap().unwrap();
    assert_eq!(moved.node, "b");
    assert_eq!(moved.config_version, x.config_version + 1);
    assert_eq!(moved.location, "aws-us-east-1", "node b's location");
    // A node the store does not know keeps the database's location.
    assert!(store
        .place_database(&x.id, "b", "unrecorded")
        .await
        .unwrap());
    let unknown = store.database_by_id(&x.id).await.unwrap().unwrap();
    assert_eq!(unknown.location, "aws-us-east-1");
    assert!(store
        .place_database(&x.id, "unrecorded", "b")
        .await
        .unwrap());
    assert_eq!(
        store.node_of_label("x-nora").await.unwrap().as_deref(),
        Some("b")
    );
    assert_eq!(store.node_of_label("nobody-nora").await.unwrap(), None);
}

/// Nodes register themselves with heartbeats; draining is the operator's flag.
async fn nodes_register_with_heartbeats(store: Store) {
    let beat = |capacity: i64| crate::NodeHeartbeat {
        name: "n1".into(),
        location: "aws-us-east-1".into(),
        admin_url: "http://n1:8082".into(),
        http_url: "http://db.example:8081".into(),
        direct_url: "http://n1:8081".into(),
        hostname_suffix: "db.example".into(),
        capacity,
        lease_ms: 0,
    };
    let first = store
        .node_heartbeat(beat(10), 1_000)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((first.registered_at, first.heartbeat_at), (1_000, 1_000));
    assert_eq!(first.forward_url(), "http://n1:8081");
    assert!(first.is_healthy(1_000 + crate::HEARTBEAT_TIMEOUT_MS));
    assert!(!first.is_healthy(1_001 + crate::HEARTBEAT_TIMEOUT_MS));
    assert!(store.set_node_draining("n1", true).await.unwrap());
    assert!(!store.set_node_draining("nobody", true).await.unwrap());
    let again = store
        .node_heartbeat(beat(20), 5_000)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((again.registered_at, again.heartbeat_at), (1_000, 5_000));
    assert_eq!(again.capacity, 20);
    assert!(
        again.draining,
        "a heartbeat keeps the operator's draining flag"
    );
    store.set_node_draining("n1", false).await.unwrap();
    assert!(!store.nodes().await.unwrap()[0].draining);
    assert_eq!(again.leased_until, 0, "no lease asked, none recorded");

    // A lease runs from the heartbeat's record; an answer without one ends it.
    let mut leased = beat(20);
    leased.lease_ms = 15_000;
    let record = store.node_heartbeat(leased, 9_000).await.unwrap().unwrap();
    assert_eq!(record.leased_until, 24_000);
    let record = store
        .node_heartbeat(beat(20), 10_000)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.leased_until, 0);
}

async fn futures_join_all(tasks: Vec<tokio::task::JoinHandle<String>>) -> Vec<String> {
    let mut ids = Vec::new();
    for task in tasks {
        ids.push(task.await.unwrap());
    }
    ids
}

async fn leases_and_idle_groups(store: Store) {
    assert!(store.acquire_lease("purge", "a", 100, 200).await.unwrap());
    assert!(
        !store.acquire_lease("purge", "b", 150, 250).await.unwrap(),
        "held by a until 200"
    );
    assert!(
        store.acquire_lease("purge", "a", 150, 300).await.unwrap(),
        "a renews"
    );
    assert!(
        store.acquire_lease("purge", "b", 300, 400).await.unwrap(),
        "expired: b takes it"
    );
    assert!(
        store.acquire_lease("archive", "a", 300, 400).await.unwrap(),
        "another job"
    );

    let (alice, org, group) = store
        .create_user(new_user("alice"), Some(new_group("default")))
        .await
        .unwrap();
    let group = group.unwrap();
    let team = store
        .create_team_org(&alice.id, "acme", "Acme", None, None)
        .await
        .unwrap();
    store.set_org_plan(&team.id, "scaler").await.unwrap();
    let paid = store
        .create_group(&team.id, new_group("paid"))
        .await
        .unwrap();
    let later = crate::now_millis() + 1000;
    let idle = store.idle_groups("starter", later).await.unwrap();
    assert_eq!(
        idle.iter().map(|g| g.id.clone()).collect::<Vec<_>>(),
        vec![group.id.clone()]
    );
    assert!(!idle.iter().any(|g| g.id == paid.id));
    store.touch_group(&group.id, later + 5).await.unwrap();
    assert!(store
        .idle_groups("starter", later)
        .await
        .unwrap()
        .is_empty());
    let _ = org;
}

fn audit_entry(org_id: &str, code: &str, n: usize) -> NewAuditEntry {
    NewAuditEntry {
        org_id: org_id.to_string(),
        code: code.to_string(),
        message: format!("entry {n}"),
        origin: "cli".to_string(),
        author: "alice".to_string(),
        data: format!("{{\"n\":{n}}}"),
    }
}

async fn audit_log(store: Store) {
    let (alice, personal, _) = store.create_user(new_user("alice"), None).await.unwrap();
    let team = store
        .create_team_org(&alice.id, "acme", "Acme", None, None)
        .await
        .unwrap();
    let (entries, total) = store.list_audit(&team.id, 1, 10).await.unwrap();
    assert!(entries.is_empty());
    assert_eq!(total, 0);

    for n in 0..7 {
        let recorded = store
            .record_audit(audit_entry(&team.id, "db-create", n))
            .await
            .unwrap();
        assert_eq!(
            (recorded.org_id.as_str(), recorded.message.clone()),
            (team.id.as_str(), format!("entry {n}"))
        );
        assert!(recorded.created_at > 0);
    }
    store
        .record_audit(audit_entry(&personal.id, "org-create", 99))
        .await
        .unwrap();

    // Newest first, even within one millisecond; pages of 3: 3 + 3 + 1.
    let (first, total) = store.list_audit(&team.id, 1, 3).await.unwrap();
    assert_eq!(total, 7);
    let messages = |entries: &[AuditEntry]| {
        entries
            .iter()
            .map(|e| e.message.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(messages(&first), ["entry 6", "entry 5", "entry 4"]);
    let entry = &first[0];
    assert_eq!(
        (
            entry.code.as_str(),
            entry.origin.as_str(),
            entry.author.as_str(),
            entry.data.as_str()
        ),
        ("db-create", "cli", "alice", "{\"n\":6}")
    );
    let (third, _) = store.list_audit(&team.id, 3, 3).await.unwrap();
    assert_eq!(messages(&third), ["entry 0"]);
    let (past_the_end, total) = store.list_audit(&team.id, 4, 3).await.unwrap();
    assert!(past_the_end.is_empty());
    assert_eq!(total, 7);
    let (all, _) = store.list_audit(&team.id, 1, 100).await.unwrap();
    assert_eq!(all.len(), 7);
    assert!(all.windows(2).all(|w| w[0].created_at >= w[1].created_at));

    // Another organization's log is its own.
    let (theirs, total) = store.list_audit(&personal.id, 1, 100).await.unwrap();
    assert_eq!(total, 1);
    assert_eq!(theirs[0].code, "org-create");

    // Entries go with their organization; a new one with the same slug starts empty.
    store.delete_org(&team.id).await.unwrap();
    assert_eq!(store.list_audit(&team.id, 1, 100).await.unwrap().1, 0);
    let again = store
        .create_team_org(&alice.id, "acme", "Acme again", None, None)
        .await
        .unwrap();
    assert_eq!(store.list_audit(&again.id, 1, 100).await.unwrap().1, 0);
    assert_eq!(store.list_audit(&personal.id, 1, 100).await.unwrap().1, 1);
}

async fn login_tokens_can_all_be_revoked(store: Store) {
    let (alice, ..) = store.create_user(new_user("alice"), None).await.unwrap();
    let (bob, ..) = store.create_user(new_user("bob"), None).await.unwrap();
    let login = |user_id: &str| {
        let mut token = new_token(user_id, "login", TokenRestriction::Unrestricted);
        token.kind = TokenKind::Login;
        token
    };
    let (first, second, bobs) = (login(&alice.id), login(&alice.id), login(&bob.id));
    let hashes = [
        first.secret_hash.clone(),
        second.secret_hash.clone(),
        bobs.secret_hash.clone(),
    ];
    for token in [first, second, bobs] {
        store.insert_token(token).await.unwrap();
    }
    let api = new_token(&alice.id, "ci", TokenRestriction::Unrestricted);
    let api_hash = api.secret_hash.clone();
    store.insert_token(api).await.unwrap();
    // Read once so the credential cache holds them: revoking must not leave them there.
    for hash in hashes.iter().chain([&api_hash]) {
        assert!(store
            .credential_by_secret_hash(hash)
            .await
            .unwrap()
            .is_some());
    }

    let before = crate::now_millis();
    let (valid_from, revoked) = store.revoke_login_tokens(&alice.id).await.unwrap();
    assert!(valid_from >= before);
    assert_eq!(revoked, 2);
    let revoked_at = |hash: String| {
        let store = store.clone();
        async move {
            store
                .credential_by_secret_hash(&hash)
                .await
                .unwrap()
                .unwrap()
                .token
                .revoked_at
        }
    };
    assert!(revoked_at(hashes[0].clone()).await.is_some());
    assert!(revoked_at(hashes[1].clone()).await.is_some());
    // Another user's sessions and the user's API tokens stay.
    assert!(revoked_at(hashes[2].clone()).await.is_none());
    assert!(revoked_at(api_hash).await.is_none());
    // Nothing left to revoke.
    assert_eq!(store.revoke_login_tokens(&alice.id).await.unwrap().1, 0);
}

async fn one_login_token_can_be_revoked(store: Store) {
    let (alice, ..) = store.create_user(new_user("alice"), None).await.unwrap();
    let login = || {
        let mut token = new_token(&alice.id, "login", TokenRestriction::Unrestricted);
        token.kind = TokenKind::Login;
        token
    };
    let (ending, staying) = (login(), login());
    let (ending_hash, staying_hash) = (ending.secret_hash.clone(), staying.secret_hash.clone());
    store.insert_token(ending).await.unwrap();
    store.insert_token(staying).await.unwrap();
    let api = new_token(&alice.id, "ci", TokenRestriction::Unrestricted);
    let api_hash = api.secret_hash.clone();
    store.insert_token(api).await.unwrap();
    // Cached first: the revocation must reach the credential cache too.
    for hash in [&ending_hash, &staying_hash, &api_hash] {
        store.credential_by_secret_hash(hash).await.unwrap();
    }

    assert!(store.revoke_login_token(&ending_hash).await.unwrap());
    let revoked_at = |hash: &str| {
        let (store, hash) = (store.clone(), hash.to_string());
        async move {
            store
                .credential_by_secret_hash(&hash)
                .await
                .unwrap()
                .unwrap()
                .token
                .revoked_at
        }
    };
    assert!(revoked_at(&ending_hash).await.is_some());
    // The user's other session and API tokens stay; an API token is never a session.
    assert!(revoked_at(&staying_hash).await.is_none());
    assert!(!store.revoke_login_token(&api_hash).await.unwrap());
    assert!(revoked_at(&api_hash).await.is_none());
    // Already revoked, or unknown: nothing to do.
    assert!(!store.revoke_login_token(&ending_hash).await.unwrap());
    assert!(!store.revoke_login_token("no-such-hash").await.unwrap());
}

async fn dumps_are_counted_and_expire(store: Store) {
    let (_, org, _) = store.create_user(new_user("alice"), None).await.unwrap();
    let (_, other, _) = store.create_user(new_user("bob"), None).await.unwrap();
    assert_eq!(
        store.pending_dumps(&org.id, 0).await.unwrap(),
        crate::PendingDumps::default()
    );
    let start = crate::now_millis();
    store
        .insert_dump("a", &org.id, "CREATE TABLE t(x);".into())
        .await
        .unwrap();
    // Sizes are bytes, not characters.
    store
        .insert_dump("b", &org.id, "SELECT 'é';".into())
        .await
        .unwrap();
    store
        .insert_dump("c", &other.id, "SELECT 1;".into())
        .await
        .unwrap();
    let pending = store.pending_dumps(&org.id, 0).await.unwrap();
    assert_eq!((pending.count, pending.bytes), (2, 18 + 12));
    let oldest = pending.oldest_created_at.unwrap();
    assert!(oldest >= start);
    assert_eq!(
        store.dump(&org.id, "a").await.unwrap().unwrap().created_at,
        oldest
    );
    // Dumps uploaded at or before the cutoff are no longer pending.
    let later = crate::now_millis() + 1;
    assert_eq!(store.pending_dumps(&org.id, later).await.unwrap().count, 0);

    assert!(store.delete_dump(&org.id, "b").await.unwrap());
    assert!(!store.delete_dump(&org.id, "b").await.unwrap());
    // Another organization's dump is not this one's to delete.
    assert!(!store.delete_dump(&org.id, "c").await.unwrap());
    assert_eq!(store.pending_dumps(&org.id, 0).await.unwrap().bytes, 18);

    assert_eq!(
        store.delete_dumps_created_before(start - 1).await.unwrap(),
        0
    );
    assert_eq!(store.delete_dumps_created_before(later).await.unwrap(), 2);
    assert!(store.dump(&org.id, "a").await.unwrap().is_none());
    assert!(store.dump(&other.id, "c").await.unwrap().is_none());
}

/// A private key as the control plane makes them (URL-safe base64 of 32 bytes).
const PRIVATE_KEY: &str = "nWGxne_9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A";

fn secrets_key() -> SecretsKey {
    SecretsKey::from_base64(&SecretsKey::generate_base64()).unwrap()
}

fn secrets_error(error: StoreError) -> SecretsError {
    match error {
        StoreError::Secrets(error) => error,
        other => panic!("expected a secrets error, got {other:?}"),
    }
}

async fn signing_keys_are_sealed_at_rest(store: Store) {
    let first = secrets_key();
    let store = store.with_secrets(SecretsKeyring::new(first.clone(), Vec::new()));
    let (_, org, group) = store
        .create_user(new_user("alice"), Some(new_group("default")))
        .await
        .unwrap();
    let group = group.unwrap();
    let mut db = new_database(&org.id, &group.id, "app", "app-alice");
    db.signing_key = PRIVATE_KEY.to_string();
    let db = store.insert_database(db).await.unwrap();
    let other = store
        .insert_database(new_database(&org.id, &group.id, "other", "other-alice"))
        .await
        .unwrap();
    store
        .set_group_key(&group.id, PRIVATE_KEY, "gk")
        .await
        .unwrap();

    // At rest: sealed under the current key, the private key nowhere in it.
    let sealed_db = store.stored_signing_key("databases", &db.id).await.unwrap();
    let sealed_group = store
        .stored_signing_key("org_groups", &group.id)
        .await
        .unwrap();
    for sealed in [&sealed_db, &sealed_group] {
        assert!(
            sealed.starts_with(&format!("v1:{}:", first.id())),
            "{sealed}"
        );
        assert!(!sealed.contains(PRIVATE_KEY));
    }
    // In use: the private key.
    let read = store.database_by_id(&db.id).await.unwrap().unwrap();
    assert_eq!(read.signing_key, PRIVATE_KEY);
    assert!(
        !format!("{read:?}").contains(PRIVATE_KEY),
        "Debug hides the key"
    );
    let read = store.group_by_id(&group.id).await.unwrap().unwrap();
    assert_eq!(read.signing_key, PRIVATE_KEY);
    assert!(
        !format!("{read:?}").contains(PRIVATE_KEY),
        "Debug hides the key"
    );
    // A change that does not touch the key leaves its sealed value as it was.
    store
        .update_database(
            &db.id,
            DatabaseChanges {
                block_reads: Some(true),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        store.stored_signing_key("databases", &db.id).await.unwrap(),
        sealed_db
    );

    // A sealed value copied onto another database's row does not open there.
    store
        .overwrite_stored_signing_key("databases", &other.id, &sealed_db)
        .await
        .unwrap();
    let error = secrets_error(store.database_by_id(&other.id).await.unwrap_err());
    assert!(matches!(error, SecretsError::Tampered { .. }), "{error}");
    let error = secrets_error(store.seal_signing_keys().await.unwrap_err());
    assert!(matches!(error, SecretsError::Tampered { .. }), "{error}");
    store
        .overwrite_stored_signing_key("databases", &other.id, "key")
        .await
        .unwrap();

    // The wrong key, or none, fails loudly and names the key the value needs.
    let wrong = store
        .clone()
        .with_secrets(SecretsKeyring::new(secrets_key(), Vec::new()));
    let error = secrets_error(wrong.database_by_id(&db.id).await.unwrap_err());
    assert!(matches!(error, SecretsError::UnknownKey { .. }), "{error}");
    assert!(error.to_string().contains(first.id()), "{error}");
    let error = secrets_error(wrong.seal_signing_keys().await.unwrap_err());
    assert!(matches!(error, SecretsError::UnknownKey { .. }), "{error}");
    let keyless = store.clone().with_secrets(SecretsKeyring::plaintext());
    let error = secrets_error(keyless.group_by_id(&group.id).await.unwrap_err());
    assert!(
        matches!(error, SecretsError::NoKeyConfigured { .. }),
        "{error}"
    );
    assert_eq!(
        store.stored_signing_key("databases", &db.id).await.unwrap(),
        sealed_db,
        "a failed pass changes nothing"
    );

    // Plaintext from an older version is read, then sealed by the pass; a second pass
    // has nothing to do.
    store
        .overwrite_stored_signing_key("databases", &db.id, PRIVATE_KEY)
        .await
        .unwrap();
    assert_eq!(
        store
            .database_by_id(&db.id)
            .await
            .unwrap()
            .unwrap()
            .signing_key,
        PRIVATE_KEY
    );
    let report = store.seal_signing_keys().await.unwrap();
    // `db` was plaintext; `other` holds "key" in the clear too.
    assert_eq!(
        (report.sealed_plaintext, report.resealed),
        (2, 0),
        "{report:?}"
    );
    let resealed = store.stored_signing_key("databases", &db.id).await.unwrap();
    assert!(resealed.starts_with(&format!("v1:{}:", first.id())));
    let again = store.seal_signing_keys().await.unwrap();
    assert_eq!(
        (again.sealed_plaintext, again.resealed, again.unchanged),
        (0, 0, 3)
    );

    // Rotation: the new key seals, the old one still opens until the pass re-seals
    // everything under the new key; then the old key alone no longer opens anything.
    let second = secrets_key();
    let rotated = store
        .clone()
        .with_secrets(SecretsKeyring::new(second.clone(), vec![first.clone()]));
    assert_eq!(
        rotated
            .database_by_id(&db.id)
            .await
            .unwrap()
            .unwrap()
            .signing_key,
        PRIVATE_KEY
    );
    let report = rotated.seal_signing_keys().await.unwrap();
    assert_eq!(
        (report.sealed_plaintext, report.resealed),
        (0, 3),
        "{report:?}"
    );
    for (table, id) in [("databases", &db.id), ("org_groups", &group.id)] {
        let sealed = rotated.stored_signing_key(table, id).await.unwrap();
        assert!(
            sealed.starts_with(&format!("v1:{}:", second.id())),
            "{sealed}"
        );
    }
    assert_eq!(
        rotated
            .group_by_id(&group.id)
            .await
            .unwrap()
            .unwrap()
            .signing_key,
        PRIVATE_KEY
    );
    let error = secrets_error(store.database_by_id(&db.id).await.unwrap_err());
    assert!(matches!(error, SecretsError::UnknownKey { .. }), "{error}");
    let only_new = store
        .clone()
        .with_secrets(SecretsKeyring::new(second, Vec::new()));
    assert_eq!(
        only_new.list_groups(&org.id).await.unwrap()[0].signing_key,
        PRIVATE_KEY
    );
}

async fn audit_log_filters(store: Store) {
    let (alice, personal, _) = store.create_user(new_user("alice"), None).await.unwrap();
    let mut recorded = Vec::new();
    for (n, (code, origin, author)) in [
        ("db-create", "cli", "alice"),
        ("db-delete", "web", "alice"),
        ("db-create", "web", "bob"),
        ("group-create", "api", "bob"),
        ("db-create", "web", "alice"),
    ]
    .into_iter()
    .enumerate()
    {
        let mut entry = audit_entry(&personal.id, code, n);
        entry.origin = origin.to_string();
        entry.author = author.to_string();
        recorded.push(store.record_audit(entry).await.unwrap());
    }
    // Another organization's entries never match.
    let team = store
        .create_team_org(&alice.id, "acme", "Acme", None, None)
        .await
        .unwrap();
    store
        .record_audit(audit_entry(&team.id, "db-create", 9))
        .await
        .unwrap();

    let list = |filter: AuditFilter, page: i64, size: i64| {
        let store = store.clone();
        let org = personal.id.clone();
        async move {
            let (entries, total) = store
                .list_audit_matching(&org, filter, page, size)
                .await
                .unwrap();
            let messages: Vec<String> = entries.into_iter().map(|e| e.message).collect();
            (messages, total)
        }
    };
    let code = |c: &str| AuditFilter {
        code: Some(c.to_string()),
        ..AuditFilter::default()
    };
    assert_eq!(
        list(code("db-create"), 1, 10).await,
        (
            vec!["entry 4".into(), "entry 2".into(), "entry 0".into()],
            3
        )
    );
    // Pages count the matching entries only.
    assert_eq!(
        list(code("db-create"), 2, 2).await,
        (vec!["entry 0".to_string()], 3)
    );
    let web_by_alice = AuditFilter {
        origin: Some("web".into()),
        author: Some("alice".into()),
        ..AuditFilter::default()
    };
    assert_eq!(
        list(web_by_alice, 1, 10).await,
        (vec!["entry 4".into(), "entry 1".into()], 2)
    );
    // Exact matches: a prefix or another case is another value.
    assert_eq!(list(code("db-"), 1, 10).await.1, 0);
    assert_eq!(list(code("DB-CREATE"), 1, 10).await.1, 0);
    // A value that looks like SQL is a value.
    assert_eq!(list(code("x' OR '1'='1"), 1, 10).await.1, 0);
    // Time: `from` included, `to` excluded.
    let at = recorded[2].created_at;
    let since = list(
        AuditFilter {
            from: Some(at),
            ..AuditFilter::default()
        },
        1,
        10,
    )
    .await;
    assert!(since.0.contains(&"entry 2".to_string()), "{since:?}");
    let before = list(
        AuditFilter {
            to: Some(at),
            ..AuditFilter::default()
        },
        1,
        10,
    )
    .await;
    assert!(!before.0.contains(&"entry 2".to_string()), "{before:?}");
    assert_eq!(since.1 + before.1, 5);
    // No filter is the whole log.
    assert_eq!(list(AuditFilter::default(), 1, 10).await.1, 5);
    assert_eq!(store.list_audit(&personal.id, 1, 10).await.unwrap().1, 5);
}

async fn storage_history(store: Store) {
    use crate::{hour_bucket, StorageSample, Usage, UsageEntry};
    let (_, org, group) = store
        .create_user(new_user("alice"), Some(new_group("default")))
        .await
        .unwrap();
    let group = group.unwrap();
    let a = store
        .insert_database(new_database(&org.id, &group.id, "a", "a-alice"))
        .await
        .unwrap();
    let b = store
        .insert_database(new_database(&org.id, &group.id, "b", "b-alice"))
        .await
        .unwrap();
    let hour = 3_600_000;
    let t0 = hour_bucket(1_700_000_000_000);
    let sample = |db: &str, bytes: i64| StorageSample {
        database_id: db.to_string(),
        org_id: org.id.clone(),
        storage_bytes: bytes,
    };

    // Nothing sampled yet: both are due, in any hour.
    let due = store.databases_unsampled_in_hour(t0).await.unwrap();
    let mut ids: Vec<&str> = due.iter().map(|(id, _, _)| id.as_str()).collect();
    ids.sort_unstable();
    let mut expected = [a.id.as_str(), b.id.as_str()];
    expected.sort_unstable();
    assert_eq!(ids, expected);
    assert!(due
        .iter()
        .all(|(_, o, node)| o == &org.id && node == "local"));

    // The last size measured in an hour is the hour's.
    store
        .record_storage_samples(t0 + 10, vec![sample(&a.id, 4096), sample(&b.id, 100)])
        .await
        .unwrap();
    store
        .record_storage_samples(t0 + 20, vec![sample(&a.id, 8192)])
        .await
        .unwrap();
    store
        .record_storage_samples(t0 + 2 * hour + 5, vec![sample(&a.id, 12288)])
        .await
        .unwrap();
    assert!(store
        .databases_unsampled_in_hour(t0 + 59)
        .await
        .unwrap()
        .is_empty());
    let due = store
        .databases_unsampled_in_hour(t0 + 2 * hour)
        .await
        .unwrap();
    assert_eq!(due.len(), 1);
    assert_eq!(due[0].0, b.id);
    // Deleted databases are not measured.
    store.soft_delete_database(&b.id).await.unwrap();
    assert!(store
        .databases_unsampled_in_hour(t0 + 2 * hour)
        .await
        .unwrap()
        .is_empty());

    // Usage and size, hour by hour; an hour with only usage has no size.
    store
        .store_usage_batch(
            "u1",
            t0 + hour + 1,
            vec![UsageEntry {
                database_id: a.id.clone(),
                org_id: org.id.clone(),
                instance: String::new(),
                usage: Usage {
                    rows_read: 3,
                    rows_written: 2,
                    bytes_synced: 0,
                },
            }],
        )
        .await
        .unwrap();
    let hours = store
        .database_usage_hours(&a.id, t0, t0 + 3 * hour)
        .await
        .unwrap();
    let shape: Vec<(i64, i64, Option<i64>)> = hours
        .iter()
        .map(|h| (h.bucket - t0, h.usage.rows_read, h.storage_bytes))
        .collect();
    assert_eq!(
        shape,
        vec![
            (0, 0, Some(8192)),
            (hour, 3, None),
            (2 * hour, 0, Some(12288))
        ]
    );
    // `to` is excluded; `from` is rounded down to its hour.
    let hours = store
        .database_usage_hours(&a.id, t0 + 30, t0 + 2 * hour)
        .await
        .unwrap();
    assert_eq!(hours.len(), 2);

    // The organization's history, summed into two-hour intervals by the store; the
    // deleted database counts while its samples last.
    let intervals = store
        .org_usage_intervals(&org.id, t0, t0 + 4 * hour, 2 * hour, 2)
        .await
        .unwrap();
    assert_eq!(intervals.len(), 2);
    // Hours 0 and 1: a's largest (8192) plus b's (100); a's 3 rows read in hour 1.
    assert_eq!(intervals[0].0.rows_read, 3);
    assert_eq!(intervals[0].1, Some(8192 + 100));
    // Hours 2 and 3: a only.
    assert_eq!(intervals[1], (Usage::default(), Some(12288)));
    assert_eq!(
        store
            .org_usage_intervals("nobody", t0, t0 + 3 * hour, hour, 3)
            .await
            .unwrap(),
        vec![(Usage::default(), None); 3]
    );

    // Hours from `to` on count in no interval.
    let cut = store
        .org_usage_intervals(&org.id, t0, t0 + 2 * hour, 2 * hour, 2)
        .await
        .unwrap();
    assert_eq!(cut[1], (Usage::default(), None));

    // Retention: hours that started before the bound go.
    assert_eq!(store.prune_storage_samples(t0 + hour).await.unwrap(), 2);
    let hours = store
        .database_usage_hours(&a.id, t0, t0 + 3 * hour)
        .await
        .unwrap();
    assert_eq!(
        hours.iter().map(|h| h.storage_bytes).collect::<Vec<_>>(),
        vec![None, Some(12288)]
    );
}

/// Key sets (JWKS) of an organization: registered, replaced, listed, refreshed, removed;
/// every change to the keys reaches its databases' configuration versions, a refresh that
/// lost a race to a replacement changes nothing, and the per-organization limit holds.
async fn organization_key_sets(store: Store) {
    let (_, org, group) = store
        .create_user(new_user("kim"), Some(new_group("default")))
        .await
        .unwrap();
    let (_, other_org, _) = store.create_user(new_user("lou"), None).await.unwrap();
    let group = group.unwrap();
    let db = store
        .insert_database(new_database(&org.id, &group.id, "one", "one-kim"))
        .await
        .unwrap();
    let version = |store: Store, id: String| async move {
        store
            .database_by_id(&id)
            .await
            .unwrap()
            .unwrap()
            .config_version
    };
    let start = version(store.clone(), db.id.clone()).await;

    let put = store
        .put_org_key_set(&org.id, "clerk", None, r#"[{"kty":"OKP"}]"#, 2)
        .await
        .unwrap();
    assert_eq!(put, KeySetPut::Created);
    assert_eq!(version(store.clone(), db.id.clone()).await, start + 1);
    let url = "https://auth.example.com/.well-known/jwks.json";
    let put = store
        .put_org_key_set(&org.id, "clerk", Some(url), "[]", 2)
        .await
        .unwrap();
    assert_eq!(put, KeySetPut::Replaced);
    assert_eq!(
        store
            .put_org_key_set(&org.id, "auth0", None, "[]", 2)
            .await
            .unwrap(),
        KeySetPut::Created
    );
    assert_eq!(
        store
            .put_org_key_set(&org.id, "third", None, "[]", 2)
            .await
            .unwrap(),
        KeySetPut::LimitReached
    );
    // Another organization's names and limit are its own.
    assert_eq!(
        store
            .put_org_key_set(&other_org.id, "clerk", None, "[]", 2)
            .await
            .unwrap(),
        KeySetPut::Created
    );
    let sets = store.org_key_sets(&org.id).await.unwrap();
    let names: Vec<_> = sets.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["auth0", "clerk"]);
    assert_eq!(sets[1].url.as_deref(), Some(url));
    assert_eq!(store.url_key_sets().await.unwrap().len(), 1);

    // A refresh with new keys changes them and the databases' versions; the same keys
    // again change nothing; a failure keeps the keys and says why.
    let before = version(store.clone(), db.id.clone()).await;
    assert!(store
        .record_key_set_refresh(&org.id, "clerk", url, Ok(r#"[{"kid":"a"}]"#.into()))
        .await
        .unwrap());
    assert_eq!(version(store.clone(), db.id.clone()).await, before + 1);
    assert!(!store
        .record_key_set_refresh(&org.id, "clerk", url, Ok(r#"[{"kid":"a"}]"#.into()))
        .await
        .unwrap());
    assert!(!store
        .record_key_set_refresh(&org.id, "clerk", url, Err("timed out".into()))
        .await
        .unwrap());
    let clerk = store.org_key_sets(&org.id).await.unwrap().remove(1);
    assert_eq!(clerk.keys, r#"[{"kid":"a"}]"#);
    assert_eq!(clerk.last_error.as_deref(), Some("timed out"));
    assert_eq!(version(store.clone(), db.id.clone()).await, before + 1);
    // A fetch of a URL the key set no longer has is dropped.
    assert!(!store
        .record_key_set_refresh(
            &org.id,
            "clerk",
            "https://old.example.com/",
            Ok("[]".into())
        )
        .await
        .unwrap());
    assert_eq!(
        store.org_key_sets(&org.id).await.unwrap()[1].keys,
        r#"[{"kid":"a"}]"#
    );

    assert!(store.delete_org_key_set(&org.id, "clerk").await.unwrap());
    assert!(!store.delete_org_key_set(&org.id, "clerk").await.unwrap());
    assert_eq!(version(store.clone(), db.id.clone()).await, before + 2);
    assert_eq!(store.org_key_sets(&org.id).await.unwrap().len(), 1);
    assert_eq!(store.org_key_sets(&other_org.id).await.unwrap().len(), 1);
    // They go with their organization.
    store.delete_org(&other_org.id).await.unwrap();
    assert!(store.org_key_sets(&other_org.id).await.unwrap().is_empty());
}

/// An organization gets one client-certificate authority: the first one written wins, its
/// private key is sealed at rest under the store's secrets key, and it goes with the
/// organization.
async fn client_certificate_authorities(store: Store) {
    let store = store.with_secrets(SecretsKeyring::new(
        SecretsKey::from_bytes(&[7; 32]),
        Vec::new(),
    ));
    let (_, org, group) = store
        .create_user(new_user("cara"), Some(new_group("default")))
        .await
        .unwrap();
    let db = store
        .insert_database(new_database(&org.id, &group.unwrap().id, "one", "one-cara"))
        .await
        .unwrap();
    assert!(store.org_client_ca(&org.id).await.unwrap().is_none());
    let first = crate::ClientCa {
        certificate: "CERT ONE".into(),
        private_key: "KEY ONE".into(),
    };
    let second = crate::ClientCa {
        certificate: "CERT TWO".into(),
        private_key: "KEY TWO".into(),
    };
    assert_eq!(
        store
            .ensure_org_client_ca(&org.id, first.clone())
            .await
            .unwrap(),
        first
    );
    let version = store
        .database_by_id(&db.id)
        .await
        .unwrap()
        .unwrap()
        .config_version;
    assert_eq!(
        store.ensure_org_client_ca(&org.id, second).await.unwrap(),
        first
    );
    assert_eq!(store.org_client_ca(&org.id).await.unwrap(), Some(first));
    assert_eq!(
        store
            .database_by_id(&db.id)
            .await
            .unwrap()
            .unwrap()
            .config_version,
        version,
        "an existing CA changes nothing"
    );
    let stored = store
        .stored_signing_key("org_client_cas", &org.id)
        .await
        .unwrap();
    assert!(
        stored.starts_with("v1:") && !stored.contains("KEY ONE"),
        "{stored}"
    );
    store.delete_org(&org.id).await.unwrap();
    assert!(store.org_client_ca(&org.id).await.unwrap().is_none());
}
