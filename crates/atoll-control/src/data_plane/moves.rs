//! Moving databases between nodes, and draining a node (docs/STORAGE.md, "Moves and
//! drains"): the control plane's half of `atoll_data::moves`.
//!
//! A move is hand-over (old holder: writes stop, everything committed is stored), adopt
//! (new holder: rebuilt from object storage up to that frame, not serving), the store's
//! placement flipped in one conditional update, resume (new holder serves), release (old
//! copy removed, its history kept). Until the flip, any failure resumes the old holder;
//! after it, the move is done and the reconciler finishes a resume or release that failed
//! (a handed-over copy the store places elsewhere is released, one it places here is
//! resumed, once older than `atoll_data::moves::MOVE_TIMEOUT`). A flip the store failed to
//! answer (a connection ended around its commit) is settled at once by asking the store
//! again where the database is (`settle_move`), not left to that timeout.

use crate::data_plane::{database_config, DataPlane};
use crate::error::ApiError;
use atoll_meta::{Database, DatabaseState, Store};
use atoll_types::node as wire;
use atoll_types::nodes::{DrainReport, FailedMove, MovedDatabase};
use atoll_types::ErrorCode;
use std::sync::Arc;

/// How long a move whose flip failed in the store waits for the store to say where the
/// database is before the reconciler is left to finish it.
const MOVE_SETTLE_PATIENCE: std::time::Duration = std::time::Duration::from_secs(120);

/// How long a request waits for a move whose flip failed to be settled before answering.
const MOVE_SETTLE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// A database on its way from one node to another.
pub(crate) struct Move {
    pub id: String,
    pub from: String,
    pub to: String,
    /// Whether `from` handed it over (a move); else `from` is a lost node whose copy is
    /// left alone (a takeover, a rebuild away from it).
    pub handed_over: bool,
}

impl DataPlane {
    /// Moves database `db` from the node that holds it to node `to`, losing no
    /// acknowledged write: nothing commits on the old holder after its hand-over.
    pub async fn move_database(
        self: &Arc<Self>,
        store: &Store,
        db: &Database,
        to: &str,
    ) -> Result<(), ApiError> {
        let DataPlane::Remote { .. } = self.as_ref() else {
            return Err(ApiError::Invalid(
                ErrorCode::InvalidRequest,
                "this server runs one data node in process (atoll dev): there is nowhere to move a database".into(),
            ));
        };
        let from = db.node.clone();
        if from == to {
            return Ok(());
        }
        let id = db.id.as_str();
        // Everything the move reads from the store is read before the old holder stops
        // writes: a store that fails here changes nothing.
        let (group, org) = group_and_org(store, db).await?;
        let config = database_config(store, db, &group, &org).await?;

        let handed = self.admin(&from)?.hand_over(id).await?;
        let adopt = wire::AdoptDatabase {
            config,
            frame_no: handed.frame_no,
            // A copy an earlier, failed attempt of this move left on `to` (the store
            // places the database on `from`, so nothing else put it there).
            replace: true,
        };
        let adopted = async { self.admin(to)?.adopt(id, &adopt).await }.await;
        if let Err(e) = adopted {
            self.resume_or_leave(&from, id).await;
            return Err(e);
        }
        let placed = match store.place_database(id, &from, to).await {
            Ok(placed) => placed,
            // The store failed around the flip (PostgreSQL restarting, a connection ended):
            // the flip may have committed all the same. Whoever the store names once it
            // answers serves, the other copy goes; the request waits a little for that.
            Err(e) => {
                let move_ = Move {
                    id: id.to_string(),
                    from: from.clone(),
                    to: to.to_string(),
                    handed_over: true,
                };
                return match self.settle_move(store, move_, group, org).await {
                    Some(true) => {
                        tracing::info!(database = %id, from = %from, to = %to, "database moved (its flip's answer was lost)");
                        Ok(())
                    }
                    Some(false) | None => Err(e.into()),
                };
            }
        };
        if !placed {
            // Someone else moved or deleted it meanwhile: this move is void.
            self.release_or_leave(to, id).await;
            self.resume_or_leave(&from, id).await;
            return Err(ApiError::Conflict(
                ErrorCode::DatabaseAlreadyExists,
                format!("database {id} changed place during the move; nothing was moved"),
            ));
        }
        // The move is done in the store. The new holder serves; the old copy goes.
        self.serve_where_placed(store, id, to, &group, &org).await;
        self.release_or_leave(&from, id).await;
        tracing::info!(database = %id, from = %from, to = %to, frame_no = handed.frame_no, "database moved");
        Ok(())
    }

    /// Finishes a move whose flip failed in the store, one way or the other once the store
    /// answers which node it places the database on: `to` (the flip committed and only its
    /// answer was lost: `to` serves, `from`'s handed-over copy is released) or any other
    /// (nothing moved: `to`'s copy is released, a handed-over `from` serves again). The store may be failing right
    /// now, so this retries in a task of its own, for up to [`MOVE_SETTLE_PATIENCE`] (after
    /// which the reconciler finishes the handed-over copies, past
    /// `atoll_data::moves::MOVE_TIMEOUT`); the caller waits [`MOVE_SETTLE_WAIT`] at most.
    /// Answers whether the database moved, `None` when the store has not said yet.
    pub(crate) async fn settle_move(
        self: &Arc<Self>,
        store: &Store,
        move_: Move,
        group: atoll_meta::Group,
        org: atoll_meta::Organization,
    ) -> Option<bool> {
        let (decided, decision) = tokio::sync::oneshot::channel();
        let (data_plane, store) = (Arc::clone(self), store.clone());
        tokio::spawn(async move {
            let Move {
                id,
                from,
                to,
                handed_over,
            } = move_;
            let started = std::time::Instant::now();
            let mut delay = std::time::Duration::from_millis(100);
            let placed = loop {
                match store.database_by_id(&id).await {
                    Ok(placed) => break placed.map(|db| db.node),
                    Err(e) if started.elapsed() < MOVE_SETTLE_PATIENCE => {
                        tracing::warn!(database = %id, error = %e, "cannot learn where a move left its database yet: retrying");
                    }
                    Err(e) => {
                        tracing::error!(database = %id, error = %e, "could not learn where a move left its database: the reconciler finishes it");
                        crate::reconciler::request_pass();
                        return;
                    }
                }
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(std::time::Duration::from_secs(2));
            };
            let moved = placed.as_deref() == Some(to.as_str());
            if moved {
                data_plane
                    .serve_where_placed(&store, &id, &to, &group, &org)
                    .await;
                if handed_over {
                    data_plane.release_or_leave(&from, &id).await;
                }
            } else {
                data_plane.release_or_leave(&to, &id).await;
                if handed_over {
                    data_plane.resume_or_leave(&from, &id).await;
                }
            }
            tracing::warn!(database = %id, from = %from, to = %to, moved, "finished a move whose flip failed in the store");
            // Answered once the nodes have their orders: a caller that goes on (a
            // restore on `to`) finds the database served where it is placed.
            let _ = decided.send(moved);
        });
        tokio::time::timeout(MOVE_SETTLE_WAIT, decision)
            .await
            .ok()
            .and_then(Result::ok)
    }

    /// After the store placed database `id` on `to` (a move's or a takeover's flip): `to`
    /// gets the configuration of the version the flip made, then serves.
    pub(crate) async fn serve_where_placed(
        &self,
        store: &Store,
        id: &str,
        to: &str,
        group: &atoll_meta::Group,
        org: &atoll_meta::Organization,
    ) {
        // The flip is done: a store that fails now delays the new version's configuration
        // (the reconciler pushes it), never the serving.
        let configured = async {
            if let Some(placed) = store.database_by_id(id).await? {
                let config = database_config(store, &placed, group, org).await?;
                self.configure(to, config).await?;
            }
            Ok::<(), ApiError>(())
        }
        .await;
        if let Err(e) = configured {
            tracing::warn!(database = %id, node = %to, error = %e, "newly placed database not configured yet: the reconciler will");
            crate::reconciler::request_pass();
        }
        self.resume_or_leave(to, id).await;
    }

    pub(crate) async fn resume_or_leave(&self, node: &str, id: &str) {
        let result = async { self.admin(node)?.resume(id).await }.await;
        if let Err(e) = result {
            tracing::warn!(database = %id, node = %node, error = %e, "cannot resume a handed-over database yet: the reconciler will");
            crate::reconciler::request_pass();
        }
    }

    pub(crate) async fn release_or_leave(&self, node: &str, id: &str) {
        let result = async { self.admin(node)?.release(id).await }.await;
        if let Err(e) = result {
            tracing::warn!(database = %id, node = %node, error = %e, "cannot release a handed-over copy yet: the reconciler will");
            crate::reconciler::request_pass();
        }
    }

    /// Drains node `name`: it takes no new databases, and every database it holds moves to
    /// the least-loaded other node of its location, one at a time. A database that cannot
    /// move now is reported and stays; draining again retries it.
    pub async fn drain(
        self: &Arc<Self>,
        store: &Store,
        name: &str,
    ) -> Result<DrainReport, ApiError> {
        if self.is_in_process() {
            return Err(ApiError::Invalid(
                ErrorCode::InvalidRequest,
                "this server runs one data node in process (atoll dev): it is never drained".into(),
            ));
        }
        let record = store
            .nodes()
            .await?
            .into_iter()
            .find(|n| n.name == name)
            .ok_or_else(|| {
                ApiError::NotFound(
                    ErrorCode::RouteNotFound,
                    format!("no data node is named {name}"),
                )
            })?;
        store.set_node_draining(name, true).await?;
        let mut report = DrainReport {
            node: name.to_string(),
            moved: Vec::new(),
            failed: Vec::new(),
        };
        for db in store.databases_on_node(name).await? {
            if db.state == DatabaseState::Creating {
                report.failed.push(FailedMove {
                    id: db.id.clone(),
                    name: db.name.clone(),
                    error: "being created; drain again once it is".into(),
                });
                continue;
            }
            let to = match self.place_except(store, &record.location, Some(name)).await {
                Ok(to) => to,
                Err(e) => {
                    report.failed.push(FailedMove {
                        id: db.id.clone(),
                        name: db.name.clone(),
                        error: e.to_string(),
                    });
                    continue;
                }
            };
            match self.move_database(store, &db, &to).await {
                Ok(()) => report.moved.push(MovedDatabase {
                    id: db.id.clone(),
                    name: db.name.clone(),
                    to,
                }),
                Err(e) => report.failed.push(FailedMove {
                    id: db.id.clone(),
                    name: db.name.clone(),
                    error: e.to_string(),
                }),
            }
        }
        Ok(report)
    }
}

impl DataPlane {
    /// A deleted database whose node is down (no heartbeat, no contact) is rebuilt from
    /// object storage on another node of its location before it is restored, so a
    /// restore does not depend on a node that may never come back. Safe without a
    /// hand-over: a deleted database takes no writes on its old node, and if that node
    /// returns, the reconciler quarantines its copy (the store places it elsewhere).
    /// Answers the database as the store now places it.
    pub async fn relocate_from_lost_node(
        self: &Arc<Self>,
        store: &Store,
        db: Database,
    ) -> Result<Database, ApiError> {
        if self.is_in_process() || db.deleted_at.is_none() {
            return Ok(db);
        }
        let now = atoll_meta::now_millis();
        let alive = store
            .nodes()
            .await?
            .iter()
            .any(|n| n.name == db.node && n.is_healthy(now));
        if alive {
            return Ok(db);
        }
        let to = self
            .place_except(store, &db.location, Some(&db.node))
            .await?;
        let id = db.id.as_str();
        let (group, org) = group_and_org(store, &db).await?;
        let adopt = wire::AdoptDatabase {
            config: database_config(store, &db, &group, &org).await?,
            frame_no: 0,
            replace: false,
        };
        let adopted = async { self.admin(&to)?.adopt(id, &adopt).await }.await;
        if let Err(e) = adopted {
            return Err(ApiError::NodeUnavailable(format!(
                "the node that held database {} ({}) is down, and rebuilding it from object storage on node {to} failed: {e}",
                db.name, db.node
            )));
        }
        let placed = match store.place_database(id, &db.node, &to).await {
            Ok(placed) => placed,
            // The flip's answer was lost: settled as a move's is (the lost node untouched).
            Err(e) => {
                let move_ = Move {
                    id: id.to_string(),
                    from: db.node.clone(),
                    to: to.clone(),
                    handed_over: false,
                };
                if self.settle_move(store, move_, group, org).await != Some(true) {
                    return Err(e.into());
                }
                // Placed on `to`, which the settling serves.
                return store
                    .database_by_id(id)
                    .await?
                    .ok_or_else(|| ApiError::Internal(format!("database {id} vanished")));
            }
        };
        if !placed {
            self.release_or_leave(&to, id).await;
            return Err(ApiError::Conflict(
                ErrorCode::DatabaseAlreadyExists,
                format!("database {id} changed place meanwhile; try again"),
            ));
        }
        self.resume_or_leave(&to, id).await;
        tracing::warn!(database = %id, from = %db.node, to = %to, "deleted database rebuilt from object storage away from its lost node");
        store
            .database_by_id(id)
            .await?
            .ok_or_else(|| ApiError::Internal(format!("database {id} vanished")))
    }
}

/// The group and organization of `db`, which its configuration on a node needs.
pub(crate) async fn group_and_org(
    store: &Store,
    db: &Database,
) -> Result<(atoll_meta::Group, atoll_meta::Organization), ApiError> {
    let id = db.id.as_str();
    let group = store
        .group_by_id(&db.group_id)
        .await?
        .ok_or_else(|| ApiError::Internal(format!("database {id} has no group")))?;
    let org = store
        .org_by_id(&db.org_id)
        .await?
        .ok_or_else(|| ApiError::Internal(format!("database {id} has no organization")))?;
    Ok((group, org))
}
