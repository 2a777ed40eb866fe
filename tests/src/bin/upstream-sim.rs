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
    /// Each server answers SSH on this port of a loopback address of its own (its IPv4), and
    /// lets in the keys it was created or rebuilt with (Linux: every 127.0.0.0/8 address is
    /// local).
    #[arg(long, default_value_t = 4022)]
    ssh_port: u16,
    /// Instead, one SSH listener at this address stands in for every server's port 22 and
    /// refuses every login (where only 127.0.0.1 is local, e.g. macOS).
    #[arg(long)]
    ssh_listen: Option<String>,
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
    println!("upstream simulator on {}", running.base_url);
    let _shared = match &args.ssh_listen {
        Some(address) => {
            let ssh = e2e::sim::SshListener::start(address).await?;
            println!(
                "port 22 of every server: {} (host key {}; no login)",
                ssh.address, ssh.fingerprints[0]
            );
            Some(ssh)
        }
        None => {
            sim.serve_ssh(args.ssh_port);
            println!(
                "each server's SSH: port {} of its own 127.x.y.z address",
                args.ssh_port
            );
            None
        }
    };
    tokio::signal::ctrl_c().await?;
    Ok(())
}
