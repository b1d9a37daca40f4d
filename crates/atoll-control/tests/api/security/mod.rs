//! The adversarial suite of the control plane: one file per topic, each attack a test
//! that fails on a server without the defence (docs/SECURITY.md).

mod tls;
