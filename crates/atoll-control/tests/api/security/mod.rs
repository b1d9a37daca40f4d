//! The adversarial suite of the control plane (docs/SECURITY.md): each file one attack
//! class, each test an attack that must fail.

mod secrets_at_rest;
