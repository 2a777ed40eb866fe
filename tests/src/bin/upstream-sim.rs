//! The upstream provider simulator as a server, for `make dev` (see `e2e::sim`).

use std::time::Duration;

use clap::Parser;

#[derive(Parser)]
#[command(
    name = "upstream-sim",
    about = "Simulator of the provider's REST API v1"
)]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:4010")]
    listen: String,
    /// The bearer token it accepts.
    #[arg(long, env = "UPSTREAM_TOKEN", default_value = "dev-upstream-token")]
    token: String,
    /// Seconds a new or rebuilt server stays `deploying`.
    #[arg(long, default_value_t = 20.0)]
    deploy_seconds: f64,
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let args = Args::parse();
    let sim = e2e::sim::Simulator::new(&args.token, Duration::from_secs_f64(args.deploy_seconds));
    let running = sim.start(&args.listen).await?;
    println!("upstream simulator on {}", running.base_url);
    tokio::signal::ctrl_c().await?;
    Ok(())
}
