use clap::Parser;

fn main() {
    let args = wakterm_runtime::cli::normalise_args(std::env::args_os().collect());
    let cli = match wakterm_runtime::cli::Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(error) => {
            if !error.use_stderr() {
                let _ = error.print(); // --help, --version
                std::process::exit(0);
            }
            // Usage errors are structured like every other answer (stdout), and readable (stderr).
            let body = serde_json::json!({"schema": "wakterm.error.v1", "error": "usage", "message": error.to_string().trim()});
            println!("{body}");
            let _ = error.print();
            std::process::exit(wakterm_runtime::protocol::exit::USAGE);
        }
    };
    std::process::exit(wakterm_runtime::cli::run(cli));
}
