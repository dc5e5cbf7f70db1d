//! End-to-end test helpers: see `e2e/`.
