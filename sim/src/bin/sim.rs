//! `sim`: the seed runner (see `sim/run.sh`). Only meaningful under `--cfg madsim`.

#[cfg(madsim)]
fn main() {
    wakterm_sim::runner::main();
}

#[cfg(not(madsim))]
fn main() {
    eprintln!("wakterm-sim must be built with RUSTFLAGS=\"--cfg madsim\"; use sim/run.sh");
    std::process::exit(2);
}
