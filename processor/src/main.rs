use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    sluice::cli::main().await
}
