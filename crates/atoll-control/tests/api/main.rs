//! HTTP tests of the control plane, laid out like the URL tree (`routes/…`), plus the
//! authorization matrix. Each test starts its own server on a loopback port.
//! `ATOLL_TEST_BACKEND=postgres` runs them all on PostgreSQL.

#[macro_use]
mod harness;
mod authorization_matrix;
mod credential_cache;
mod database_hosts;
mod lifecycle;
mod limits;
mod reconciler;
mod routes;
mod security;
