//! wakterm engine.
