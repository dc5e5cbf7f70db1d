fn main() {
    wakterm_runtime::cli::main_entry()
}
