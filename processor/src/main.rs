use std::process::ExitCode;

/// mimalloc, not glibc's malloc: under steady load the processor's heap churns (decoded
/// states, records, JSON), and glibc's allocator spent a growing share of the loop
/// consolidating and unlinking free chunks (27% of its samples after a minute of the latency
/// benchmark, 8% in its first half minute).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    sluice::cli::main()
}
