//! `wakterm-holder`: the per-agent PTY holder process. See `wakterm_runtime::holder`.

use clap::Parser;

#[derive(Parser)]
#[command(
    name = "wakterm-holder",
    about = "Holds one agent's PTY so the agent outlives the daemon"
)]
struct Cli {
    #[command(flatten)]
    args: wakterm_runtime::holder::HolderArgs,
}

fn main() {
    let cli = Cli::parse();
    std::process::exit(wakterm_runtime::holder::run_holder(cli.args.into_config()));
}
