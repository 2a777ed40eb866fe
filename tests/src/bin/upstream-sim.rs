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
    /// Seconds a new or rebuilt server has no IPv4 address.
    #[arg(long, default_value_t = 8.0)]
    network_seconds: f64,
    /// Address of the SSH listener standing in for every server's port 22.
    #[arg(long, default_value = "127.0.0.1:4022")]
    ssh_listen: String,
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let args = Args::parse();
    let sim = e2e::sim::Simulator::new(&args.token, Duration::from_secs_f64(args.deploy_seconds));
    sim.set_stages(
        Duration::from_secs_f64(args.network_seconds),
        Duration::from_secs_f64(args.deploy_seconds),
    );
    let running = sim.start(&args.listen).await?;
    let ssh = e2e::sim::SshListener::start(&args.ssh_listen).await?;
    println!("upstream simulator on {}", running.base_url);
    println!(
        "port 22 of every server: {} (host key {})",
        ssh.address, ssh.fingerprints[0]
    );
    tokio::signal::ctrl_c().await?;
    Ok(())
}
