//! `hyperplan certs`: make the cluster CA and issue the certificates the planner, the
//! agents and people present to each other (mutual TLS). The work is in
//! `hyperplan_net::certs`; this is the command line and its advice.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{ArgGroup, Args, Subcommand, ValueEnum};
use hyperplan_net::certs::{self as netcerts, CertPaths, PLANNER_SERVER_NAME, UserRole};
use hyperplan_net::revocation::{self, Holder, RevocationList, Scope};

const FILES_HELP: &str = "\
Files in the certificate directory (--dir, else $HYPERPLAN_CERT_DIR, else /etc/hyperplan/certs):
  ca.pem                      the cluster CA certificate: copy to every machine
  ca.key                      the CA's private key (0600): keep it here, copy it nowhere
  planner.pem, planner.key    the planner's certificate: copy to the head node
  nodes/NAME.pem, NAME.key    node NAME's agent certificate: copy to node NAME
  users/NAME.pem, NAME.key    person NAME's client certificate: copy to their machine
  revoked.txt                 revoked certificates (`certs revoke`): copy to the head node

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
    /// Issuing again for the same name replaces that certificate and key; the old one
    /// stays valid until it expires unless revoked. To replace a lost or leaked
    /// certificate, revoke first (`certs revoke`), then issue: the revocation covers every
    /// certificate of that name issued up to it, and the new one works.
    #[command(after_long_help = FILES_HELP)]
    Issue(IssueArgs),
    /// Revoke every certificate issued so far to a person or a node (a lost laptop, a
    /// retired node).
    ///
    /// Writes revoked.txt beside ca.pem. Copy it to the head node's certificate
    /// directory and reload the planner (`systemctl reload hyperplan-planner`, SIGHUP):
    /// it then refuses those certificates, and closes connections that use them.
    /// Certificates issued for the name afterwards work.
    #[command(after_long_help = FILES_HELP)]
    Revoke(RevokeArgs),
    /// Take a person or a node off the revocation list (a revocation made by mistake):
    /// their old certificates work again once the planner reloads.
    #[command(after_long_help = FILES_HELP)]
    Unrevoke(RevokeArgs),
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

#[derive(Args, Debug)]
#[command(group(ArgGroup::new("holder").required(true).multiple(true).args(["node", "user"])))]
pub struct RevokeArgs {
    #[command(flatten)]
    dir: DirArg,
    /// A node whose agent certificates to revoke (repeat for more).
    #[arg(long, value_name = "NAME")]
    node: Vec<String>,
    /// A person whose certificates to revoke, of role admin or user (repeat for more).
    #[arg(long, value_name = "NAME")]
    user: Vec<String>,
}

impl RevokeArgs {
    /// The holders named, their names checked.
    fn holders(&self) -> anyhow::Result<Vec<Holder>> {
        let mut holders = Vec::new();
        for user in &self.user {
            netcerts::validate_name("user", user)?;
            holders.push(Holder::user(user));
        }
        for node in &self.node {
            netcerts::validate_name("node", node)?;
            holders.push(Holder::node(node));
        }
        Ok(holders)
    }

    /// The revocation list of a directory that holds a CA, and its path.
    fn list(&self) -> anyhow::Result<(PathBuf, RevocationList)> {
        let dir = &self.dir.dir;
        let ca = CertPaths::ca(dir).cert;
        anyhow::ensure!(
            ca.is_file(),
            "{} has no cluster CA ({} is missing): the revocation list lives beside the CA",
            dir.display(),
            ca.display()
        );
        let path = RevocationList::path(dir);
        let list = RevocationList::load(&path)?;
        Ok((path, list))
    }
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
        Command::Revoke(args) => revoke(&args),
        Command::Unrevoke(args) => unrevoke(&args),
    }
}

fn revoke(args: &RevokeArgs) -> anyhow::Result<()> {
    let holders = args.holders()?;
    let (path, mut list) = args.list()?;
    let now = revocation::now();
    for holder in holders {
        list.revoke(holder.clone(), now);
        let scope = list.get(&holder).unwrap_or(Scope::All);
        println!("revoked {holder}: {scope} are refused");
    }
    list.save(&path)?;
    println!(
        "wrote {}; copy it beside ca.pem on the head node and reload the planner \
         (`systemctl reload hyperplan-planner`, or SIGHUP): it then refuses these certificates, \
         connected ones included",
        path.display()
    );
    println!("a certificate issued from now on (`hyperplan certs issue`) for the same name works");
    Ok(())
}

fn unrevoke(args: &RevokeArgs) -> anyhow::Result<()> {
    let holders = args.holders()?;
    let (path, mut list) = args.list()?;
    for holder in &holders {
        anyhow::ensure!(
            list.unrevoke(holder),
            "{holder} is not on the revocation list {}",
            path.display()
        );
    }
    list.save(&path)?;
    for holder in &holders {
        println!("took {holder} off the revocation list");
    }
    println!(
        "wrote {}; copy it beside ca.pem on the head node and reload the planner \
         (`systemctl reload hyperplan-planner`, or SIGHUP)",
        path.display()
    );
    Ok(())
}

/// Before issuing for a revoked name: refuses when every certificate of the name is
/// revoked, else waits until the new certificate is issued after the revocation (at most
/// a second) and says that the old ones stay revoked.
fn after_revocation(dir: &Path, holder: &Holder) -> anyhow::Result<()> {
    let path = RevocationList::path(dir);
    let list = RevocationList::load(&path)?;
    match list.get(holder) {
        None => Ok(()),
        Some(Scope::All) => {
            let flag = match holder.kind {
                revocation::HolderKind::User => "--user",
                revocation::HolderKind::Node => "--node",
            };
            anyhow::bail!(
                "{} revokes every certificate of {holder}, a new one too; \
                 `hyperplan certs unrevoke --dir {} {flag} {}` first if it should work again",
                path.display(),
                dir.display(),
                holder.name
            )
        }
        Some(Scope::IssuedUpTo(upto)) => {
            anyhow::ensure!(
                upto - revocation::now() < 2,
                "{} revokes {holder} up to {}, later than this machine's clock ({}); check the clock",
                path.display(),
                revocation::format_time(upto),
                revocation::format_time(revocation::now())
            );
            // The same second as the revocation would count as revoked.
            while revocation::now() <= upto {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            println!(
                "note: {holder} was revoked at {}; the certificates issued before stay revoked, this new one is not",
                revocation::format_time(upto)
            );
            Ok(())
        }
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
        netcerts::validate_name("node", node)?;
        after_revocation(dir, &Holder::node(node))?;
        let paths =
            netcerts::issue_node(dir, node).with_context(|| format!("issuing a certificate for node {node}"))?;
        report(dir, &paths, &format!("node {node}"));
    }
    if let (Some(user), Some(role)) = (&args.user, args.role) {
        let role = match role {
            RoleArg::Admin => UserRole::Admin,
            RoleArg::User => UserRole::User,
        };
        netcerts::validate_name("user", user)?;
        after_revocation(dir, &Holder::user(user))?;
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
