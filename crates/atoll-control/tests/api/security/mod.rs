//! The adversarial suite of the control plane: every hole found by trying Atoll as an
//! attacker would is a test here (through the HTTP API, as the attacker used it). The data
//! plane's own suite is `crates/atoll-data/tests/sandbox.rs`.

mod tenant_sql;
