//! The `colloc` command (see the library, [`colloc::app`]).

fn main() -> std::process::ExitCode {
    colloc::app::main()
}
