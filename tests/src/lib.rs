//! The end-to-end suites are in `tests/` (see README.md); this library holds nothing.
