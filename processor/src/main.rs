use std::process::ExitCode;

/// mimalloc, not glibc's malloc: the processor's heap churns (decoded states, records, JSON),
/// and glibc's allocator spent a growing share of the loop consolidating and unlinking free
/// chunks (8% of its samples early in the latency benchmark, 27% a minute in). Two full
/// benchmark runs, same code otherwise: throughput 0.74 of the pass-through against 0.53,
/// triggers 0.17 of a plain client against 0.11, RSS alike.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    sluice::cli::main()
}
