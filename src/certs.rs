//! `hyperplan certs`: make the cluster CA and issue the certificates the planner, the
//! agents and people present to each other (mutual TLS). The work is in
//! `hyperplan_net::certs`; this is the command line and its advice.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{ArgGroup, Args, Subcommand, ValueEnum};
use hyperplan_net::certs::{self as netcerts, CertPaths, PLANNER_SERVER_NAME, UserRole};

const FILES_HELP: &str = "\
Files in the certificate directory (--dir, else $HYPERPLAN_CERT_DIR, else /etc/hyperplan/certs):
  ca.pem                      the cluster CA certificate: copy to every machine
  ca.key                      the CA's private key (0600): keep it here, copy it nowhere
  planner.pem, planner.key    the planner's certificate: copy to the head node
  nodes/NAME.pem, NAME.key    node NAME's agent certificate: copy to node NAME
  users/NAME.pem, NAME.key    person NAME's client certificate: copy to their machine

Keep the same layout under /etc/hyperplan/certs on every machine. Keys are written 0600,
directories 0700. A certificate names its holder (CN) and role (OU: agent, admin, user,
planner); the planner refuses an agent whose certificate names another node.

Setup, on the machine that keeps the CA:
  hyperplan certs init --dir ./certs --planner-host head01
  hyperplan certs issue --dir ./certs --node n001 --node n002
  hyperplan certs issue --dir ./certs --user alice --role admin
  ssh n001 install -d -m 700 /etc/hyperplan/certs/nodes
  scp -p certs/ca.pem n001:/etc/hyperplan/certs/
  scp -p certs/nodes/n001.pem certs/nodes/n001.key n001:/etc/hyperplan/certs/nodes/";

#[derive(Subcommand, Debug)]
#[command(after_long_help = FILES_HELP)]
pub enum Command {
    /// Make the cluster CA (ca.pem, ca.key) and the planner's certificate.
    ///
    /// Run once, on a machine you trust with the CA key. The planner's certificate is
    /// valid for the name clients use (hyperplan-planner), localhost, 127.0.0.1, ::1
    /// and every --planner-host.
    #[command(after_long_help = FILES_HELP)]
    Init(InitArgs),
    /// Issue a certificate from the cluster CA: for nodes' agents, a person, or the planner.
    ///
    /// Issuing again for the same name replaces that certificate and key (the old one
    /// stays valid until it expires: nothing revokes it).
    #[command(after_long_help = FILES_HELP)]
    Issue(IssueArgs),
}

#[derive(Args, Debug)]
pub struct DirArg {
    /// The certificate directory (created 0700 if missing).
    #[arg(
        long,
        env = "HYPERPLAN_CERT_DIR",
        default_value = "/etc/hyperplan/certs",
        value_name = "DIR"
    )]
    dir: PathBuf,
}

#[derive(Args, Debug)]
pub struct InitArgs {
    #[command(flatten)]
    dir: DirArg,
    /// Replace an existing CA. Every certificate the old CA issued stops working.
    #[arg(long)]
    force: bool,
    /// A DNS name or IP address agents and people reach the planner at (repeat for more).
    #[arg(long = "planner-host", value_name = "HOST")]
    planner_hosts: Vec<String>,
}

#[derive(Args, Debug)]
#[command(group(ArgGroup::new("subject").required(true).args(["node", "user", "planner"])))]
pub struct IssueArgs {
    #[command(flatten)]
    dir: DirArg,
    /// A node's agent certificate, nodes/NAME.pem (repeat for more nodes). NAME is the
    /// node name the agent registers with: letters, digits, '.', '_', '-'.
    #[arg(long, value_name = "NAME")]
    node: Vec<String>,
    /// A person's client certificate, users/NAME.pem; needs --role.
    #[arg(long, value_name = "NAME", requires = "role")]
    user: Option<String>,
    /// What the person may do: admin acts on every job, user on their own.
    #[arg(long, value_enum, requires = "user")]
    role: Option<RoleArg>,
    /// The planner's certificate again (planner.pem), e.g. for a new host name.
    #[arg(long)]
    planner: bool,
    /// With --planner: a DNS name or IP address of the planner (repeat for more).
    #[arg(long = "host", value_name = "HOST", requires = "planner")]
    hosts: Vec<String>,
}

#[derive(ValueEnum, Clone, Copy, Debug)]
enum RoleArg {
    Admin,
    User,
}

pub fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Init(args) => init(args),
        Command::Issue(args) => issue(args),
    }
}

fn init(args: InitArgs) -> anyhow::Result<()> {
    let dir = &args.dir.dir;
    // Before the CA exists: a bad host must not leave a CA without a planner certificate.
    for host in &args.planner_hosts {
        netcerts::validate_host(host)?;
    }
    let ca = netcerts::init_ca(dir, args.force).context("making the cluster CA")?;
    println!(
        "wrote the cluster CA: {} and {} (0600, keep it here)",
        ca.cert.display(),
        ca.key.display()
    );
    let planner = netcerts::issue_planner(dir, &args.planner_hosts).context("issuing the planner's certificate")?;
    report_planner(dir, &planner, &args.planner_hosts);
    println!(
        "next: `hyperplan certs issue --dir {} --node NAME` for each node, `--user NAME --role admin|user` for people",
        dir.display()
    );
    Ok(())
}

fn issue(args: IssueArgs) -> anyhow::Result<()> {
    let dir = &args.dir.dir;
    if args.planner {
        let planner = netcerts::issue_planner(dir, &args.hosts).context("issuing the planner's certificate")?;
        report_planner(dir, &planner, &args.hosts);
    }
    for node in &args.node {
        let paths =
            netcerts::issue_node(dir, node).with_context(|| format!("issuing a certificate for node {node}"))?;
        report(dir, &paths, &format!("node {node}"));
    }
    if let (Some(user), Some(role)) = (&args.user, args.role) {
        let role = match role {
            RoleArg::Admin => UserRole::Admin,
            RoleArg::User => UserRole::User,
        };
        let paths =
            netcerts::issue_user(dir, user, role).with_context(|| format!("issuing a certificate for {user}"))?;
        report(dir, &paths, &format!("{user}'s machine"));
    }
    Ok(())
}

fn report_planner(dir: &Path, paths: &CertPaths, hosts: &[String]) {
    let names = [PLANNER_SERVER_NAME, "localhost", "127.0.0.1", "::1"]
        .into_iter()
        .chain(hosts.iter().map(String::as_str))
        .collect::<Vec<_>>()
        .join(", ");
    report(dir, paths, "the head node (the planner)");
    println!("  the planner's certificate is valid for: {names}");
}

fn report(dir: &Path, paths: &CertPaths, machine: &str) {
    let show = |p: &Path| p.strip_prefix(dir).unwrap_or(p).display().to_string();
    println!("wrote {} and {} (key 0600)", paths.cert.display(), paths.key.display());
    println!(
        "  copy to {machine}: {}, {}, {}",
        show(&paths.ca),
        show(&paths.cert),
        show(&paths.key)
    );
}
