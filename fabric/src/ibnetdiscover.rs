//! Reading `ibnetdiscover` output: the standard topology file and the `-p` ports report.
//!
//! The result is the raw graph (nodes by GUID, port-to-port links), with no judgement about
//! which CAs are hosts or which switches are leaves; that is [`crate::tiers`]'s job.
//!
//! Line policy (standard format): blank lines and `#` comments are skipped, and so are the
//! `-g` grouping markers (`Chassis N (guid …)`, `Non-Chassis Nodes`, `Hostname: …`).
//! Diagnostics that ibnetdiscover prints on stderr and that end up in a dump captured with
//! `2>&1` (`src/query_smp.c:195; umad … bad status 110`, `ibwarn: …`) become warnings.
//! Any other line is an error naming the file and line, as are truncated dumps (a block
//! without its `Switch`/`Ca` line, a cut-off port line, a link to a node that has no block)
//! and a GUID declared twice. Nothing here panics on input.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::path::{Path, PathBuf};

use crate::error::FabricError;

/// Which text format a dump was in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DumpFormat {
    /// `vendid=`/`switchguid=` blocks with `Switch`/`Ca` headers and port lines.
    Topology,
    /// `ibnetdiscover -p`: one line per port.
    Ports,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum NodeKind {
    Switch,
    Ca,
    Router,
}

impl NodeKind {
    fn from_prefix(c: char) -> Option<NodeKind> {
        match c {
            'S' => Some(NodeKind::Switch),
            'H' => Some(NodeKind::Ca),
            'R' => Some(NodeKind::Router),
            _ => None,
        }
    }

    pub fn prefix(self) -> char {
        match self {
            NodeKind::Switch => 'S',
            NodeKind::Ca => 'H',
            NodeKind::Router => 'R',
        }
    }
}

/// One switch, CA or router of the dump.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IbNode {
    pub kind: NodeKind,
    /// Node GUID (in the `-p` format a CA is known only by its port GUID, which is used here).
    pub guid: u64,
    /// System image GUID: shared by the ASICs of one chassis and by a switch's SHARP CA.
    pub sysimgguid: Option<u64>,
    /// The NodeDescription, trimmed.
    pub description: String,
    /// Chassis number from `ibnetdiscover -g` (`# Chassis N`).
    pub chassis: Option<u32>,
    /// Switch LID (port 0), when the dump says.
    pub lid: Option<u32>,
    /// Port GUIDs seen for this node (CAs' ports have their own GUIDs; agents may report them).
    pub port_guids: Vec<u64>,
    /// Line of the node's own block (`Switch`/`Ca` header, or first port line in `-p` format).
    pub line: u64,
}

impl IbNode {
    /// `S-0002c903007b78b0`, `H-…`: the name ibnetdiscover gives the node.
    pub fn id(&self) -> String {
        format!("{}-{:016x}", self.kind.prefix(), self.guid)
    }
}

/// One cable: port `a_port` of node `a` to port `b_port` of node `b` (indices into `nodes`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IbLink {
    pub a: usize,
    pub a_port: u32,
    pub b: usize,
    pub b_port: u32,
    /// Width and speed as printed, e.g. `4xHDR` (empty when the line does not say).
    pub rate: String,
    pub line: u64,
}

/// A parsed dump: nodes in file order, each link once.
#[derive(Clone, Debug)]
pub struct IbFabric {
    pub path: PathBuf,
    pub format: DumpFormat,
    pub nodes: Vec<IbNode>,
    pub links: Vec<IbLink>,
    /// Skipped diagnostic lines and inconsistencies that did not stop the parse.
    pub warnings: Vec<String>,
}

impl IbFabric {
    pub fn switch_count(&self) -> usize {
        self.nodes.iter().filter(|n| n.kind == NodeKind::Switch).count()
    }

    pub fn ca_count(&self) -> usize {
        self.nodes.iter().filter(|n| n.kind == NodeKind::Ca).count()
    }
}

/// Parses an ibnetdiscover dump of either format (detected from the first meaningful line).
/// `path` is only used in messages.
pub fn parse_ibnetdiscover(text: &str, path: &Path) -> Result<IbFabric, FabricError> {
    let format = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#') && !is_diagnostic(l))
        .map_or(DumpFormat::Topology, |l| {
            if looks_like_ports_line(l) {
                DumpFormat::Ports
            } else {
                DumpFormat::Topology
            }
        });
    let mut builder = Builder::new(path, format);
    match format {
        DumpFormat::Topology => builder.topology(text)?,
        DumpFormat::Ports => builder.ports(text)?,
    }
    builder.finish()
}

/// Lines ibnetdiscover and libibmad print on stderr (kept as warnings, not errors).
fn is_diagnostic(line: &str) -> bool {
    let lower = line.to_ascii_lowercase();
    let source_location = line
        .split_once(':')
        .is_some_and(|(file, rest)| file.ends_with(".c") && rest.starts_with(|c: char| c.is_ascii_digit()));
    source_location
        || lower.starts_with("ibwarn")
        || lower.starts_with("ibpanic")
        || lower.starts_with("ibnetdiscover:")
        || lower.starts_with("ibnd_")
        || lower.starts_with("ibdebug")
        || lower.contains("bad status")
        || lower.contains("umad")
}

fn looks_like_ports_line(line: &str) -> bool {
    let mut t = line.split_whitespace();
    matches!(t.next(), Some("SW" | "CA" | "RT" | "??"))
        && t.next().is_some_and(|s| s.parse::<u32>().is_ok())
        && t.next().is_some_and(|s| s.parse::<u32>().is_ok())
        && t.next().is_some_and(|s| s.starts_with("0x"))
}

/// Parses `0x…` or bare hex (at most 16 digits) as a GUID.
pub(crate) fn parse_guid(s: &str) -> Option<u64> {
    let hex = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")).unwrap_or(s);
    if hex.is_empty() || hex.len() > 16 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(hex, 16).ok()
}

/// `vendid=`…`switchguid=` lines waiting for their `Switch`/`Ca` header.
#[derive(Default)]
struct PendingIds {
    line: u64,
    sysimgguid: Option<u64>,
    chassis: Option<u32>,
    /// GUID from `switchguid=`/`caguid=`/`rtguid=` and the line it was on.
    guid: Option<(u64, u64)>,
}

/// A node known from a link before (or without) its own block.
struct Reference {
    line: u64,
}

struct Builder<'a> {
    path: &'a Path,
    format: DumpFormat,
    nodes: Vec<IbNode>,
    by_guid: HashMap<u64, usize>,
    /// Nodes only referenced so far (no block yet), with the first line that named them.
    referenced: HashMap<usize, Reference>,
    links: Vec<IbLink>,
    /// (node, port) → (peer node, peer port, line): each port has one cable.
    peers: HashMap<(usize, u32), (usize, u32, u64)>,
    /// (node, port) → line, for ports listed in the node's own block (duplicate check).
    block_ports: HashMap<(usize, u32), u64>,
    warnings: Vec<String>,
}

impl<'a> Builder<'a> {
    fn new(path: &'a Path, format: DumpFormat) -> Self {
        Builder {
            path,
            format,
            nodes: Vec::new(),
            by_guid: HashMap::new(),
            referenced: HashMap::new(),
            links: Vec::new(),
            peers: HashMap::new(),
            block_ports: HashMap::new(),
            warnings: Vec::new(),
        }
    }

    fn err(&self, line: u64, message: impl Into<String>) -> FabricError {
        FabricError::parse(self.path, line, message)
    }

    fn warn(&mut self, line: u64, message: impl AsRef<str>) {
        self.warnings
            .push(format!("{}:{line}: {}", self.path.display(), message.as_ref()));
    }

    /// The node with this GUID, created as a reference when unseen; its kind must agree.
    fn reference(&mut self, kind: NodeKind, guid: u64, description: &str, line: u64) -> Result<usize, FabricError> {
        match self.by_guid.entry(guid) {
            Entry::Occupied(e) => {
                let i = *e.get();
                let node = &self.nodes[i];
                if node.kind != kind {
                    let (id, first) = (node.id(), self.first_line(i));
                    return Err(self.err(
                        line,
                        format!(
                            "GUID {guid:#018x} is used by two nodes: {} here and {id} at line {first}",
                            kind_word(kind)
                        ),
                    ));
                }
                Ok(i)
            }
            Entry::Vacant(e) => {
                let i = self.nodes.len();
                e.insert(i);
                self.nodes.push(IbNode {
                    kind,
                    guid,
                    sysimgguid: None,
                    description: description.trim().to_string(),
                    chassis: None,
                    lid: None,
                    port_guids: Vec::new(),
                    line: 0,
                });
                self.referenced.insert(i, Reference { line });
                Ok(i)
            }
        }
    }

    fn first_line(&self, i: usize) -> u64 {
        match self.referenced.get(&i) {
            Some(r) => r.line,
            None => self.nodes[i].line,
        }
    }

    /// Declares a node's own block; a second block for the same GUID is an error.
    fn declare(&mut self, kind: NodeKind, guid: u64, description: &str, line: u64) -> Result<usize, FabricError> {
        let i = self.reference(kind, guid, description, line)?;
        if self.referenced.remove(&i).is_none() {
            let first = self.nodes[i].line;
            let id = self.nodes[i].id();
            return Err(self.err(
                line,
                format!("duplicate GUID: {id} already has a block at line {first}; each node is listed once"),
            ));
        }
        let node = &mut self.nodes[i];
        node.line = line;
        node.description = description.trim().to_string();
        Ok(i)
    }

    fn add_port_guid(&mut self, i: usize, guid: u64) {
        let guids = &mut self.nodes[i].port_guids;
        if !guids.contains(&guid) {
            guids.push(guid);
        }
    }

    /// Records a cable once, warning when a port is said to lead to two different places.
    fn link(&mut self, a: (usize, u32), b: (usize, u32), rate: &str, line: u64) {
        for (from, to) in [(a, b), (b, a)] {
            if let Some(&(pn, pp, pline)) = self.peers.get(&from)
                && (pn, pp) != to
            {
                let msg = format!(
                    "port {}[{}] links to {}[{}] here, but line {pline} linked it to {}[{}]; keeping line {pline}",
                    self.nodes[from.0].id(),
                    from.1,
                    self.nodes[to.0].id(),
                    to.1,
                    self.nodes[pn].id(),
                    pp
                );
                self.warn(line, msg);
                return;
            }
        }
        if self.peers.contains_key(&a) {
            return; // the same cable seen from its other end
        }
        self.peers.insert(a, (b.0, b.1, line));
        self.peers.insert(b, (a.0, a.1, line));
        self.links.push(IbLink {
            a: a.0,
            a_port: a.1,
            b: b.0,
            b_port: b.1,
            rate: rate.to_string(),
            line,
        });
    }

    fn topology(&mut self, text: &str) -> Result<(), FabricError> {
        let mut pending: Option<PendingIds> = None;
        let mut current: Option<usize> = None;
        let mut last_line = 0;
        for (n, raw) in text.lines().enumerate() {
            let line_no = n as u64 + 1;
            last_line = line_no;
            let line = raw.trim();
            if line.is_empty() {
                current = None;
                continue;
            }
            if line.starts_with('#')
                || line.starts_with("Chassis ")
                || line == "Non-Chassis Nodes"
                || line.starts_with("Hostname:")
            {
                continue;
            }
            if line.starts_with('[') {
                let Some(node) = current else {
                    return Err(self.err(
                        line_no,
                        "port line outside a node block: expected it right after a `Switch`, `Ca` or `Rt` line",
                    ));
                };
                self.port_line(node, line, line_no)?;
                continue;
            }
            if let Some((key, value)) = line.split_once('=')
                && matches!(
                    key,
                    "vendid" | "devid" | "sysimgguid" | "switchguid" | "caguid" | "rtguid"
                )
            {
                current = None;
                if key == "vendid" {
                    if let Some(p) = &pending {
                        return Err(self.err(
                            p.line,
                            format!(
                                "truncated block: the ids starting here have no `Switch`/`Ca` line before the next \
                                 `vendid=` at line {line_no}"
                            ),
                        ));
                    }
                    pending = Some(PendingIds {
                        line: line_no,
                        ..PendingIds::default()
                    });
                    continue;
                }
                let p = pending.get_or_insert_with(|| PendingIds {
                    line: line_no,
                    ..PendingIds::default()
                });
                // `sysimgguid=0x… # Chassis 3 (name)`, `switchguid=0x…(…) # slot`: value, then a comment.
                let (value, comment) = match value.split_once('#') {
                    Some((v, c)) => (v.trim(), Some(c.trim())),
                    None => (value.trim(), None),
                };
                match key {
                    "devid" => {}
                    "sysimgguid" => {
                        p.sysimgguid = Some(parse_guid(value).ok_or_else(|| {
                            self.err(
                                line_no,
                                format!("expected a hex GUID after `sysimgguid=`, got {value:?}"),
                            )
                        })?);
                        p.chassis = comment
                            .and_then(|c| c.strip_prefix("Chassis "))
                            .and_then(|c| c.split_whitespace().next())
                            .and_then(|c| c.parse().ok());
                    }
                    _ => {
                        let guid_text = value.split('(').next().unwrap_or(value).trim();
                        let guid = parse_guid(guid_text).ok_or_else(|| {
                            self.err(line_no, format!("expected a hex GUID after `{key}=`, got {value:?}"))
                        })?;
                        p.guid = Some((guid, line_no));
                    }
                }
                continue;
            }
            if let Some(kind) = header_kind(line) {
                let ids = pending.take().unwrap_or_default();
                let i = self.header(kind, line, line_no, &ids)?;
                current = Some(i);
                continue;
            }
            if is_diagnostic(line) {
                self.warn(line_no, format!("skipped a diagnostic line: {line}"));
                continue;
            }
            return Err(self.err(
                line_no,
                format!(
                    "unknown line {:?}: expected `vendid=`/`devid=`/`sysimgguid=`/`switchguid=`/`caguid=`, a \
                     `Switch`/`Ca` line, a port line `[p] \"S-…\"[q] # \"desc\" lid N 4xHDR`, a `#` comment or a \
                     blank line",
                    shorten(line)
                ),
            ));
        }
        if let Some(p) = pending {
            return Err(self.err(
                p.line,
                format!(
                    "truncated dump: the block starting here has no `Switch`/`Ca` line (the file ends at line \
                     {last_line})"
                ),
            ));
        }
        Ok(())
    }

    /// `Switch\t65 "S-2c5e…"\t\t# "MF0;leaf-1:MQM9701/U1" enhanced port 0 lid 73 lmc 0`,
    /// `Ca\t1 "H-…"\t\t# "gpu017 mlx5_0"`.
    fn header(&mut self, kind: NodeKind, line: &str, line_no: u64, ids: &PendingIds) -> Result<usize, FabricError> {
        let expected = match kind {
            NodeKind::Switch => "`Switch N \"S-<guid>\" # \"description\" enhanced port 0 lid N lmc N`",
            NodeKind::Ca => "`Ca N \"H-<guid>\" # \"description\"`",
            NodeKind::Router => "`Rt N \"R-<guid>\" # \"description\"`",
        };
        let bad = |what: &str| self.err(line_no, format!("{what}: expected {expected}"));
        let mut rest = line.split_once(char::is_whitespace).map_or("", |(_, r)| r).trim_start();
        let (_ports, after) = rest
            .split_once(char::is_whitespace)
            .ok_or_else(|| bad("truncated line"))?;
        rest = after.trim_start();
        let (name_kind, guid, after) = quoted_node_name(rest).ok_or_else(|| bad("bad or missing node name"))?;
        if name_kind != kind {
            return Err(bad("the node name's prefix does not match the line type"));
        }
        if let Some((id_guid, id_line)) = ids.guid
            && id_guid != guid
        {
            return Err(self.err(
                line_no,
                format!("this line names {guid:#x} but the GUID line at line {id_line} says {id_guid:#x}"),
            ));
        }
        let comment = after.trim_start();
        let comment = comment
            .strip_prefix('#')
            .ok_or_else(|| bad("missing `# \"description\"`"))?;
        let (description, tail) = quoted_description(comment).ok_or_else(|| bad("missing quoted description"))?;
        let i = self.declare(kind, guid, description, line_no)?;
        let node = &mut self.nodes[i];
        node.sysimgguid = ids.sysimgguid;
        node.chassis = ids.chassis;
        if kind == NodeKind::Switch {
            node.lid = value_after(tail, "lid");
        }
        Ok(i)
    }

    /// `[p](portguid)? "X-guid"[q](guid)? # …"desc"… lid N 4xHDR` (with `[ext N]` after ports under `-g`).
    fn port_line(&mut self, node: usize, line: &str, line_no: u64) -> Result<(), FabricError> {
        let bad = |what: &str| {
            self.err(
                line_no,
                format!(
                    "{what} in port line {:?}: expected `[p] \"S-<guid>\"[q] # \"description\" lid N 4xHDR` \
                     (truncated dump?)",
                    shorten(line)
                ),
            )
        };
        let (port, rest) = bracket_number(line).ok_or_else(|| bad("bad port number"))?;
        let rest = skip_ext(rest);
        let (local_guid, rest) = paren_guid(rest);
        let (remote_kind, remote_guid, rest) =
            quoted_node_name(rest.trim_start()).ok_or_else(|| bad("bad or missing remote node name"))?;
        let (remote_port, rest) = bracket_number(rest).ok_or_else(|| bad("bad or missing remote port number"))?;
        let rest = skip_ext(rest);
        let (remote_port_guid, rest) = paren_guid(rest.trim_start());
        let rest = rest.trim_start();
        let comment = rest
            .strip_prefix('#')
            .ok_or_else(|| bad("missing `#` and description"))?;
        let (description, tail) = quoted_description(comment).ok_or_else(|| bad("missing quoted description"))?;
        let rate = rate_after_lid(tail);
        if let Some(&first) = self.block_ports.get(&(node, port)) {
            return Err(self.err(
                line_no,
                format!(
                    "port [{port}] of {} is listed twice (also at line {first})",
                    self.nodes[node].id()
                ),
            ));
        }
        self.block_ports.insert((node, port), line_no);
        if let Some(g) = local_guid {
            self.add_port_guid(node, g);
        }
        let remote = self.reference(remote_kind, remote_guid, description, line_no)?;
        if let Some(g) = remote_port_guid {
            self.add_port_guid(remote, g);
        }
        self.link((node, port), (remote, remote_port), rate, line_no);
        Ok(())
    }

    /// `SW  1719 10 0x7cfe… 4x EDR - CA   134  1 0x7cfe… ( 'o0001 HCA-1' - 'ib-i1l1s01' )`
    /// or, for a port with nothing on it, `SW  2052 37 0x506b… 4x ???   'ib-i4l1s01'`.
    fn ports(&mut self, text: &str) -> Result<(), FabricError> {
        for (n, raw) in text.lines().enumerate() {
            let line_no = n as u64 + 1;
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if is_diagnostic(line) && !looks_like_ports_line(line) {
                self.warn(line_no, format!("skipped a diagnostic line: {line}"));
                continue;
            }
            self.ports_line(line, line_no)?;
        }
        Ok(())
    }

    fn ports_line(&mut self, line: &str, line_no: u64) -> Result<(), FabricError> {
        let bad = |what: &str| {
            self.err(
                line_no,
                format!(
                    "{what} in {:?}: expected `SW|CA lid port 0x<guid> 4x HDR - SW|CA lid port 0x<guid> ( 'desc' - \
                     'desc' )` or `SW|CA lid port 0x<guid> 4x HDR 'desc'` (ibnetdiscover -p)",
                    shorten(line)
                ),
            )
        };
        let mut rest = line;
        let (kind, _lid, port, guid) = ports_endpoint(&mut rest).ok_or_else(|| bad("bad port fields"))?;
        let width = next_token(&mut rest).ok_or_else(|| bad("missing link width"))?;
        let speed = next_token(&mut rest).ok_or_else(|| bad("missing link speed"))?;
        let rate = format!("{width}{speed}");
        let rest = rest.trim();
        if let Some(after_dash) = rest.strip_prefix('-')
            && !after_dash.starts_with('\'')
        {
            let mut r = after_dash;
            let (peer_kind, _peer_lid, peer_port, peer_guid) =
                ports_endpoint(&mut r).ok_or_else(|| bad("bad peer port fields"))?;
            let inner = r.trim();
            let inner = inner
                .strip_prefix('(')
                .and_then(|s| s.strip_suffix(')'))
                .ok_or_else(|| bad("missing `( 'desc' - 'desc' )`"))?
                .trim();
            let (d1, d2) = inner
                .strip_prefix('\'')
                .and_then(|s| s.strip_suffix('\''))
                .and_then(|s| s.split_once("' - '"))
                .ok_or_else(|| bad("bad `( 'desc' - 'desc' )`"))?;
            let a = self.ports_node(kind, guid, d1, line_no)?;
            let b = self.ports_node(peer_kind, peer_guid, d2, line_no)?;
            self.link((a, port), (b, peer_port), &rate, line_no);
        } else {
            let desc = rest.trim_matches('\'');
            self.ports_node(kind, guid, desc, line_no)?;
        }
        Ok(())
    }

    /// A node of the `-p` format: declared by the first line that names it.
    fn ports_node(&mut self, kind: NodeKind, guid: u64, desc: &str, line_no: u64) -> Result<usize, FabricError> {
        let i = self.reference(kind, guid, desc, line_no)?;
        if self.referenced.remove(&i).is_some() {
            self.nodes[i].line = line_no;
            if kind != NodeKind::Switch {
                self.nodes[i].port_guids.push(guid);
            }
        }
        Ok(i)
    }

    fn finish(self) -> Result<IbFabric, FabricError> {
        if self.format == DumpFormat::Topology {
            let mut missing: Vec<(u64, usize)> = self.referenced.iter().map(|(&i, r)| (r.line, i)).collect();
            missing.sort_unstable();
            if let Some(&(line, i)) = missing.first() {
                return Err(self.err(
                    line,
                    format!(
                        "this port links to {} ({:?}), which has no block of its own in the file ({} such node(s)): \
                         is the dump truncated?",
                        self.nodes[i].id(),
                        self.nodes[i].description,
                        missing.len()
                    ),
                ));
            }
        }
        Ok(IbFabric {
            path: self.path.to_path_buf(),
            format: self.format,
            nodes: self.nodes,
            links: self.links,
            warnings: self.warnings,
        })
    }
}

fn kind_word(kind: NodeKind) -> &'static str {
    match kind {
        NodeKind::Switch => "a switch",
        NodeKind::Ca => "a CA",
        NodeKind::Router => "a router",
    }
}

fn shorten(line: &str) -> String {
    if line.chars().count() <= 100 {
        line.to_string()
    } else {
        let cut: String = line.chars().take(100).collect();
        format!("{cut}…")
    }
}

fn header_kind(line: &str) -> Option<NodeKind> {
    let word = line.split(char::is_whitespace).next()?;
    match word {
        "Switch" => Some(NodeKind::Switch),
        "Ca" => Some(NodeKind::Ca),
        "Rt" => Some(NodeKind::Router),
        _ => None,
    }
}

/// `"S-0002c903007b78b0"…` → (kind, guid, rest after the closing quote).
fn quoted_node_name(s: &str) -> Option<(NodeKind, u64, &str)> {
    let s = s.strip_prefix('"')?;
    let (name, rest) = s.split_once('"')?;
    let (prefix, hex) = name.split_once('-')?;
    let mut chars = prefix.chars();
    let kind = NodeKind::from_prefix(chars.next()?)?;
    if chars.next().is_some() {
        return None;
    }
    Some((kind, parse_guid(hex)?, rest))
}

/// The first `"…"` of a comment, up to the last quote on the line (descriptions may hold `#`).
fn quoted_description(comment: &str) -> Option<(&str, &str)> {
    let start = comment.find('"')?;
    let end = comment.rfind('"')?;
    if end <= start {
        return None;
    }
    Some((&comment[start + 1..end], &comment[end + 1..]))
}

/// `[12]rest` → (12, rest).
fn bracket_number(s: &str) -> Option<(u32, &str)> {
    let s = s.strip_prefix('[')?;
    let (num, rest) = s.split_once(']')?;
    Some((num.trim().parse().ok()?, rest))
}

/// Skips `[ext 7]` (external port numbers under `ibnetdiscover -g`).
fn skip_ext(s: &str) -> &str {
    if let Some(r) = s.strip_prefix("[ext")
        && let Some((_, rest)) = r.split_once(']')
    {
        return rest;
    }
    s
}

/// `(2c9030004e939) rest` → (guid, rest); no parenthesis → (None, s).
fn paren_guid(s: &str) -> (Option<u64>, &str) {
    if let Some(r) = s.strip_prefix('(')
        && let Some((hex, rest)) = r.split_once(')')
        && let Some(g) = parse_guid(hex.trim())
    {
        return (Some(g), rest);
    }
    (None, s)
}

/// The number after the word `key` (e.g. `lid 73` → 73).
fn value_after(s: &str, key: &str) -> Option<u32> {
    let mut words = s.split_whitespace();
    while let Some(w) = words.next() {
        if w == key {
            return words.next()?.parse().ok();
        }
    }
    None
}

/// The rate after `lid N` at the end of a port line (`lid 647 4xNDR` → `4xNDR`).
fn rate_after_lid(s: &str) -> &str {
    let mut words = s.split_whitespace();
    while let Some(w) = words.next() {
        if w == "lid" {
            words.next();
            return words.next().unwrap_or("");
        }
    }
    ""
}

fn next_token<'s>(s: &mut &'s str) -> Option<&'s str> {
    let t = s.trim_start();
    if t.is_empty() {
        return None;
    }
    let end = t.find(char::is_whitespace).unwrap_or(t.len());
    let (token, rest) = t.split_at(end);
    *s = rest;
    Some(token)
}

/// `SW  1719 10 0x7cfe9003009ce5b0` → (kind, lid, port, guid).
fn ports_endpoint(s: &mut &str) -> Option<(NodeKind, u32, u32, u64)> {
    let kind = match next_token(s)? {
        "SW" => NodeKind::Switch,
        "CA" => NodeKind::Ca,
        "RT" => NodeKind::Router,
        _ => return None,
    };
    let lid = next_token(s)?.parse().ok()?;
    let port = next_token(s)?.parse().ok()?;
    let guid = parse_guid(next_token(s)?)?;
    Some((kind, lid, port, guid))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn parse(text: &str) -> Result<IbFabric, FabricError> {
        parse_ibnetdiscover(text, Path::new("t.out"))
    }

    const SMALL: &str = "\
vendid=0x2c9
devid=0xd2f0
sysimgguid=0xb8599f0300fc6de4
switchguid=0xb8599f0300fc6de4(b8599f0300fc6de4)
Switch\t41 \"S-b8599f0300fc6de4\"\t\t# \"MF0;sw95:MQM8700/U1\" enhanced port 0 lid 13 lmc 0
[23]\t\"H-ec0d9a03007d7d0a\"[1](ec0d9a03007d7d0a) \t\t# \"gpu017 mlx5_0\" lid 9 4xEDR

vendid=0x2c9
devid=0x1017
caguid=0xec0d9a03007d7d0a
Ca\t1 \"H-ec0d9a03007d7d0a\"\t\t# \"gpu017 mlx5_0\"
[1](ec0d9a03007d7d0a) \t\"S-b8599f0300fc6de4\"[23]\t\t# lid 9 lmc 0 \"MF0;sw95:MQM8700/U1\" lid 13 4xEDR
";

    #[test]
    fn small_dump_parses_with_one_link() {
        let f = parse(SMALL).unwrap();
        assert_eq!(f.format, DumpFormat::Topology);
        assert_eq!((f.switch_count(), f.ca_count()), (1, 1));
        assert_eq!(f.links.len(), 1);
        assert_eq!(f.links[0].rate, "4xEDR");
        assert_eq!(f.nodes[0].lid, Some(13));
        assert_eq!(f.nodes[0].sysimgguid, Some(0xb8599f0300fc6de4));
        assert_eq!(f.nodes[1].description, "gpu017 mlx5_0");
        assert_eq!(f.nodes[1].port_guids, vec![0xec0d9a03007d7d0a]);
    }

    #[test]
    fn truncated_port_line_is_an_error_with_the_line() {
        let cut = SMALL.replace(
            "[23]\t\"H-ec0d9a03007d7d0a\"[1](ec0d9a03007d7d0a) \t\t# \"gpu017 mlx5_0\" lid 9 4xEDR",
            "[23]\t\"H-ec0d9a03",
        );
        let e = parse(&cut).unwrap_err().to_string();
        assert!(e.starts_with("t.out:6: bad or missing remote node name"), "{e}");
    }

    #[test]
    fn dump_cut_after_the_switches_names_the_missing_node() {
        let cut: String = SMALL.lines().take(7).map(|l| format!("{l}\n")).collect();
        let e = parse(&cut).unwrap_err().to_string();
        assert!(e.contains("t.out:6:") && e.contains("is the dump truncated?"), "{e}");
    }

    #[test]
    fn ids_without_header_are_truncated() {
        let e = parse("vendid=0x2c9\ndevid=0x1\n").unwrap_err().to_string();
        assert!(e.starts_with("t.out:1: truncated dump"), "{e}");
    }

    #[test]
    fn unknown_line_is_an_error() {
        let text = SMALL.replace("devid=0x1017", "frobnicate 7");
        let e = parse(&text).unwrap_err().to_string();
        assert!(e.starts_with("t.out:9: unknown line \"frobnicate 7\""), "{e}");
    }

    #[test]
    fn diagnostic_lines_are_warnings() {
        let text = format!("ibwarn: [123] something odd\n{SMALL}");
        let f = parse(&text).unwrap();
        assert_eq!(f.warnings.len(), 1);
        assert!(f.warnings[0].starts_with("t.out:1: skipped a diagnostic line"));
    }

    #[test]
    fn duplicate_guid_names_both_lines() {
        let text = format!("{SMALL}\nvendid=0x2c9\ncaguid=0xec0d9a03007d7d0a\nCa\t1 \"H-ec0d9a03007d7d0a\" # \"x\"\n");
        let e = parse(&text).unwrap_err().to_string();
        assert!(e.contains("t.out:16: duplicate GUID") && e.contains("line 11"), "{e}");
    }

    #[test]
    fn guid_used_by_a_switch_and_a_ca_is_an_error() {
        let text = "Switch 2 \"S-0000000000000001\" # \"a\" base port 0 lid 1 lmc 0\n[1] \"H-0000000000000001\"[1](1) # \"b\" lid 2 4xSDR\n";
        let e = parse(text).unwrap_err().to_string();
        assert!(
            e.contains("t.out:2: GUID 0x0000000000000001 is used by two nodes"),
            "{e}"
        );
    }

    #[test]
    fn ports_format_detected_and_linked_once() {
        let text = "\
CA   134  1 0x7cfe9003003b4bde 4x EDR - SW  1719 10 0x7cfe9003009ce5b0 ( 'o0001 HCA-1' - 'ib-i1l1s01' )
SW  1719 10 0x7cfe9003009ce5b0 4x EDR - CA   134  1 0x7cfe9003003b4bde ( 'ib-i1l1s01' - 'o0001 HCA-1' )
SW  2052 37 0x506b4b03005c2740 4x ???                                    'ib-i4l1s01'
SW   479 22 0x0002c9020040f161 4x QDR                                   Infiniscale-IV Mellanox Technologies
";
        let f = parse(text).unwrap();
        assert_eq!(f.format, DumpFormat::Ports);
        assert_eq!((f.switch_count(), f.ca_count(), f.links.len()), (3, 1, 1));
        assert_eq!(f.nodes[2].description, "ib-i4l1s01");
        assert_eq!(f.nodes[3].description, "Infiniscale-IV Mellanox Technologies");
    }

    #[test]
    fn garbage_never_panics() {
        for text in [
            "[",
            "Switch",
            "Switch 1 \"S-",
            "Ca 1 \"H-zz\"",
            "SW 1 2 0x",
            "[1] \"S-1\"[",
            "vendid=",
            "\u{0}\u{1}",
        ] {
            let _ = parse(text);
        }
    }
}
