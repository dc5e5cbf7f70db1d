use clap::Parser;

fn main() {
    let args = wakterm_runtime::cli::normalise_args(std::env::args_os().collect());
    let cli = match wakterm_runtime::cli::Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(error) => {
            let code = if error.use_stderr() { wakterm_runtime::protocol::exit::USAGE } else { 0 };
            let _ = error.print();
            std::process::exit(code);
        }
    };
    std::process::exit(wakterm_runtime::cli::run(cli));
}
