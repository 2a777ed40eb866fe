//! The benchmarks and load runs of `make bench` and `make hostile`, one binary:
//! `benchmarks <name>` runs one (`docs/benchmarks.md`). One binary, not seven: each of the seven
//! compiled the end-to-end harness again (about 60 s of a cold `make test`'s build).

// The harness serves every end-to-end test; the benchmarks use part of it.
#[allow(dead_code)]
#[path = "../../tests/e2e/dynamo_faults.rs"]
mod dynamo_faults;
#[allow(dead_code)]
#[path = "../../tests/e2e/harness.rs"]
mod harness;
#[allow(dead_code)]
#[path = "../../tests/e2e/iam.rs"]
mod iam;
#[allow(dead_code)]
#[path = "../../tests/e2e/rails.rs"]
mod rails;

mod bench;
mod coldstart;
mod figures;
mod hostile;
mod paid;
mod shell;
mod webhook_fleet;
mod webhooks;

/// Each benchmark by the name `benchmarks` takes, with its entry point.
const BENCHMARKS: [(&str, fn()); 7] = [
    ("coldstart", coldstart::main),
    ("bench", bench::main),
    ("webhooks", webhooks::main),
    ("webhook_fleet", webhook_fleet::main),
    ("paid", paid::main),
    ("shell", shell::main),
    ("hostile", hostile::main),
];

fn main() {
    let name = std::env::args().nth(1).unwrap_or_default();
    match BENCHMARKS.iter().find(|(n, _)| *n == name) {
        Some((_, run)) => run(),
        None => {
            let names: Vec<&str> = BENCHMARKS.iter().map(|(n, _)| *n).collect();
            eprintln!("usage: benchmarks <{}>", names.join("|"));
            std::process::exit(2);
        }
    }
}
