//! Simulation harness (filled by the simulation issue).
