//! The `wakterm` program, built inside this package for the end-to-end suites (see Cargo.toml).
fn main() {
    wakterm_runtime::cli::main_entry()
}
