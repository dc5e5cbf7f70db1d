fn main() {
    eprintln!("wakterm: not yet implemented");
    std::process::exit(2);
}
