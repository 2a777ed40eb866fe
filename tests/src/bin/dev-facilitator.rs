//! The development x402 facilitator as a server, for `make dev` (see `e2e::facilitator`).

use clap::Parser;

#[derive(Parser)]
#[command(
    name = "dev-facilitator",
    about = "Development x402 facilitator (checks for real, settles into memory)"
)]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:4020")]
    listen: String,
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let args = Args::parse();
    let url = e2e::facilitator::DevFacilitator::new()
        .start(&args.listen)
        .await?;
    println!("development facilitator on {url}");
    tokio::signal::ctrl_c().await?;
    Ok(())
}
