//! End-to-end: MPI jobs with the real daemons on 127.0.0.1 and Debian's MPICH. A job with
//! `mpi: pmi` has its ranks started by hyperplan on two agents; they wire up through each
//! agent's PMI server (`PMI_FD`), the fences crossing the planner, and exchange data
//! (an `MPI_Allreduce` of the ranks, a program compiled with `mpicc.mpich` here).
//!
//! A rank's PMI puts are bounded per user and per node, and an ended job's key space
//! gives its memory back (issue 38): seen at the agent's `/metrics` and in its resident
//! memory.
//!
//! Skips, saying why, where MPICH's compiler is not installed (`make test` installs it).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::live::Live;
use common::path_str;

/// The MPI program of these tests: every rank's sum of all ranks, and a ring exchange.
const ALLREDUCE_C: &str = r#"
#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size, sum = 0, left = -1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Sendrecv(&rank, 1, MPI_INT, (rank + 1) % size, 0, &left, 1, MPI_INT,
                 (rank + size - 1) % size, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    printf("rank %d of %d sum %d left %d\n", rank, size, sum, left);
    MPI_Finalize();
    return 0;
}
"#;

/// `out` holds the lines of the 4 ranks of [`ALLREDUCE_C`], each with the sum of all
/// ranks and its left neighbour's rank.
fn assert_world_of_4(out: &str) {
    let mut lines: Vec<&str> = out.lines().filter(|l| l.starts_with("rank ")).collect();
    lines.sort_unstable();
    assert_eq!(
        lines,
        [
            "rank 0 of 4 sum 6 left 3",
            "rank 1 of 4 sum 6 left 0",
            "rank 2 of 4 sum 6 left 1",
            "rank 3 of 4 sum 6 left 2"
        ],
        "{out}"
    );
}

/// Open MPI's transports: shared memory and TCP; TCP only where the agents share this
/// machine's host name, which names Open MPI's shared-memory segments (ranks of n1 and n2
/// would use the same ones).
fn btl(live: &Live) -> &'static str {
    if live.own_hostnames {
        "self,vader,tcp"
    } else {
        "self,tcp"
    }
}

/// The nodes of a batch job `j` that its `mpirun` reaches through its remote shell: those
/// other than rank 0's, and rank 0's too when the agents share this machine's host name.
fn remote_nodes(live: &Live, j: &serde_json::Value) -> Vec<String> {
    let rank0 = j["tasks"].as_array().unwrap().iter().find(|t| t["rank"] == 0).unwrap()["node"]
        .as_str()
        .unwrap()
        .to_string();
    ["n1", "n2"]
        .into_iter()
        .map(str::to_string)
        .filter(|n| !live.own_hostnames || *n != rank0)
        .collect()
}

/// Compiles `source` with `compiler` into `dir` (readable by the task user); `None`, said,
/// where the compiler is missing.
fn compile(compiler: &str, source: &str, dir: &Path, name: &str) -> Option<PathBuf> {
    if Command::new(compiler).arg("-show").output().is_err() {
        eprintln!("skipped: {compiler} is not installed (apt-get install mpich libmpich-dev; `make test` does)");
        return None;
    }
    let c = dir.join(format!("{name}.c"));
    std::fs::write(&c, source).unwrap();
    let exe = dir.join(name);
    let out = Command::new(compiler).arg("-o").arg(&exe).arg(&c).output().unwrap();
    assert!(
        out.status.success(),
        "{compiler}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(exe)
}

#[test]
fn mpich_ranks_started_by_hyperplan_on_two_agents_wire_up_through_pmi() {
    let live = Live::start_with_hostnames(&["n1", "n2"]);
    let Some(exe) = compile("mpicc.mpich", ALLREDUCE_C, live.work.path(), "allreduce") else {
        return;
    };
    // Two 1-CPU ranks per 2-PU node: ranks meet on a node and across nodes.
    let job = live.job(
        "mpich",
        &format!(
            "mpi: pmi\ntimeLimit: 120\ntasks:\n  - name: r\n    replicas: 4\n    resources: {{cpu: 1}}\n    \
             workingDir: WORKDIR\n    command: [{}]\n",
            path_str(&exe)
        ),
    );
    let (code, err) = live.submit_wait(&job);
    let outputs: Vec<String> = (0..4).map(|i| live.output("mpich", &format!("r-{i}"))).collect();
    assert_eq!(code, 0, "{err}\n{outputs:#?}\n{}", live.c.planner_log());
    let j = live.status("mpich");
    let nodes: std::collections::BTreeSet<&str> = j["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["node"].as_str().unwrap())
        .collect();
    assert_eq!(nodes.len(), 2, "the ranks ran on both nodes: {j}");
    for t in j["tasks"].as_array().unwrap() {
        let rank = t["rank"].as_u64().unwrap();
        let out = live.output("mpich", t["name"].as_str().unwrap());
        let left = (rank + 3) % 4;
        assert_eq!(out.trim(), format!("rank {rank} of 4 sum 6 left {left}"), "{t}");
    }
    // Without `mpi: pmi` (and no defaultMpi) a task gets no PMI socket: MPICH runs it as a
    // world of one, as it would any program started alone.
    let job = live.job(
        "alone",
        &format!(
            "tasks:\n  - name: r\n    replicas: 2\n    resources: {{cpu: 1}}\n    workingDir: WORKDIR\n    \
             command: [{}]\n",
            path_str(&exe)
        ),
    );
    let (code, err) = live.submit_wait(&job);
    assert_eq!(code, 0, "{err}");
    assert_eq!(live.output("alone", "r-1").trim(), "rank 0 of 1 sum 0 left 0");
}

#[test]
fn a_pmi_client_that_sends_garbage_gets_a_closed_socket_and_the_agent_goes_on() {
    let live = Live::start(&["n1"]);
    // A real request is answered; garbage closes the socket (the read sees end of file).
    let script = "import os, socket\n\
                  s = socket.socket(fileno=int(os.environ['PMI_FD']))\n\
                  s.sendall(b'cmd=init pmi_version=1 pmi_subversion=1\\n')\n\
                  print(s.recv(200).decode().strip())\n\
                  s.sendall(b'\\x00garbage with no command\\n')\n\
                  print(repr(s.recv(200)))\n\
                  print(os.environ['PMI_RANK'], os.environ['PMI_SIZE'])\n";
    std::fs::write(live.work.path().join("garbage.py"), script).unwrap();
    let job = live.job(
        "garbage",
        "mpi: pmi\ntasks:\n  - name: r\n    replicas: 1\n    resources: {cpu: 1}\n    workingDir: WORKDIR\n    \
         command: [python3, garbage.py]\n",
    );
    let (code, err) = live.submit_wait(&job);
    let out = live.output("garbage", "r-0");
    assert_eq!(code, 0, "{err}\n{out}");
    assert_eq!(
        out,
        "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\nb''\n0 1\n"
    );
    assert!(
        live.agent_log("n1").contains("closed the rank's PMI socket"),
        "{}",
        live.agent_log("n1")
    );
    // The agent is still there and serves the next job.
    let (code, err) = live.submit_wait(&job);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn a_batch_job_runs_its_command_once_with_the_allocation_and_ends_with_it() {
    let live = Live::start_with_hostnames(&["n1", "n2"]);
    let job = live.job(
        "batch",
        "launch: batch\ntasks:\n  - name: s\n    replicas: 4\n    topologyPolicy: single-numa-node\n    resources: {cpu: 1}\n    \
         workingDir: WORKDIR\n    \
         command: [sh, -c, 'echo \"$HYPERPLAN_RANK $HYPERPLAN_NODELIST $HYPERPLAN_CPUS\"; cat \"$OMPI_MCA_orte_default_hostfile\" \"$HYDRA_HOST_FILE\"; exit 3']\n",
    );
    let (code, err) = live.submit_wait(&job);
    assert_eq!(code, 3, "the batch command's exit code is the job's: {err}");
    let j = live.status("batch");
    assert_eq!(j["status"], "failed", "{j}");
    let tasks = j["tasks"].as_array().unwrap();
    let rank0 = tasks.iter().find(|t| t["rank"] == 0).unwrap();
    assert_eq!(rank0["exitCode"], 3, "{j}");
    // The others held their nodes and were killed when it ended.
    for t in tasks.iter().filter(|t| t["rank"] != 0) {
        assert_eq!(t["state"], "killed", "{t}");
    }
    let out = live.output("batch", rank0["name"].as_str().unwrap());
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 5, "{out}");
    let first: Vec<&str> = lines[0].split(' ').collect();
    assert_eq!(first[..2], ["0", "n[1-2]"], "{out}");
    // Rank 0's node leader has the job's two CPUs there.
    assert_eq!(first[2].split([',', '-']).count(), 2, "{out}");
    let node0 = rank0["node"].as_str().unwrap();
    let other = if node0 == "n1" { "n2" } else { "n1" };
    assert_eq!(
        lines[1..3],
        [format!("{node0} slots=2"), format!("{other} slots=2")],
        "{out}"
    );
    assert_eq!(lines[3..5], [format!("{node0}:2"), format!("{other}:2")], "{out}");
    // Only rank 0 ran the command: nobody else wrote output.
    for t in tasks.iter().filter(|t| t["rank"] != 0) {
        assert_eq!(live.output("batch", t["name"].as_str().unwrap()), "", "{t}");
    }
    // Its hostfiles and remote shell go with it, on every node.
    let id = j["id"].as_u64().unwrap();
    for state in live.states.values() {
        let dir = state.join("tasks").join(format!("batch.{id}"));
        common::wait_for(common::live::LONG, "the job's directory removed", || {
            (!dir.exists()).then_some(())
        });
    }

    // Ending well: completed, exit code 0, holders killed all the same.
    let ok = live.job(
        "batchok",
        "launch: batch\ntasks:\n  - name: s\n    replicas: 2\n    resources: {cpu: 1}\n    workingDir: WORKDIR\n    \
         command: [sh, -c, 'exit 0']\n",
    );
    let (code, err) = live.submit_wait(&ok);
    assert_eq!(code, 0, "{err}");
    let j = live.status("batchok");
    assert_eq!(
        (j["status"].as_str(), j["exitCode"].as_i64()),
        (Some("completed"), Some(0)),
        "{j}"
    );
}

#[test]
fn open_mpi_mpirun_in_a_batch_job_starts_its_ranks_on_the_job_s_nodes_through_hyperplan_exec() {
    let live = Live::start_with_hostnames(&["n1", "n2"]);
    let Some(exe) = compile("mpicc.openmpi", ALLREDUCE_C, live.work.path(), "allreduce_ompi") else {
        return;
    };
    // `mpirun` unchanged: its hostfile and remote shell come from the job's environment.
    let job = live.job(
        "ompi",
        &format!(
            "launch: batch\ntimeLimit: 120\ntasks:\n  - name: s\n    replicas: 4\n    resources: {{cpu: 1}}\n    \
             env: {{OMPI_MCA_btl: '{}'}}\n    workingDir: WORKDIR\n    command: [mpirun.openmpi, -np, '4', {}]\n",
            btl(&live),
            path_str(&exe)
        ),
    );
    let (code, err) = live.submit_wait(&job);
    let j = live.status("ompi");
    let rank0 = j["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["rank"] == 0)
        .unwrap()
        .clone();
    let out = live.output("ompi", rank0["name"].as_str().unwrap());
    assert_eq!(code, 0, "{err}\n{out}\n{}", live.c.planner_log());
    assert_world_of_4(&out);
    // Its daemons ran through `hyperplan exec` on the other node (and on its own too where
    // the nodes share this machine's host name: mpirun does not know it is there).
    let log = live.c.planner_log();
    for node in remote_nodes(&live, &j) {
        assert!(
            log.contains(&format!("nodes=[\"{node}\"]")),
            "no exec on {node}:\n{log}"
        );
    }

    // mpi4py too (Debian's is built on Open MPI).
    let py = "from mpi4py import MPI; c = MPI.COMM_WORLD; print('py', c.rank, c.size, c.allreduce(c.rank))";
    let job = live.job(
        "mpi4py",
        &format!(
            "launch: batch\ntimeLimit: 120\ntasks:\n  - name: s\n    replicas: 4\n    resources: {{cpu: 1}}\n    \
             env: {{OMPI_MCA_btl: '{}'}}\n    workingDir: WORKDIR\n    command: [mpirun.openmpi, -np, '4', python3, -c, \"{py}\"]\n",
            btl(&live)
        ),
    );
    let (code, err) = live.submit_wait(&job);
    let out = live.output("mpi4py", "s-0");
    assert_eq!(code, 0, "{err}\n{out}");
    let mut lines: Vec<&str> = out.lines().filter(|l| l.starts_with("py ")).collect();
    lines.sort_unstable();
    assert_eq!(lines, ["py 0 4 6", "py 1 4 6", "py 2 4 6", "py 3 4 6"], "{out}");
}

#[test]
fn mpich_mpiexec_in_a_batch_job_launches_through_hyperplan_exec() {
    // The agents share this machine's host name, which resolves: hydra's proxies call
    // mpiexec back by host name (on a cluster each node's name resolves).
    let live = Live::start(&["n1", "n2"]);
    let Some(exe) = compile("mpicc.mpich", ALLREDUCE_C, live.work.path(), "allreduce") else {
        return;
    };
    // hydra unchanged: HYDRA_HOST_FILE, HYDRA_LAUNCHER=rsh, HYDRA_LAUNCHER_EXEC from the job.
    let job = live.job(
        "hydra",
        &format!(
            "launch: batch\ntimeLimit: 120\ntasks:\n  - name: s\n    replicas: 4\n    resources: {{cpu: 1}}\n    \
             workingDir: WORKDIR\n    command: [mpiexec.hydra, -n, '4', {}]\n",
            path_str(&exe)
        ),
    );
    let (code, err) = live.submit_wait(&job);
    let out = live.output("hydra", "s-0");
    assert_eq!(code, 0, "{err}\n{out}\n{}", live.c.planner_log());
    assert_world_of_4(&out);
    // Its proxies ran through `hyperplan exec` on the other node.
    let j = live.status("hydra");
    let log = live.c.planner_log();
    for node in remote_nodes(&live, &j) {
        assert!(
            log.contains(&format!("nodes=[\"{node}\"]")),
            "no exec on {node}:\n{log}"
        );
    }
}

/// A PMI rank that puts 900-byte values under distinct keys until one is refused, says how
/// many went in and the refusal, writes `NAME.full` and waits for `NAME.go` (two minutes at
/// most), then fences and puts once more.
const PMI_HOG_PY: &str = r#"
import os, socket, sys, time
name = sys.argv[1]
s = socket.socket(fileno=int(os.environ['PMI_FD']))
lines = s.makefile('rb')
def ask(line):
    s.sendall(line.encode() + b'\n')
    return lines.readline().decode().strip()
assert ask('cmd=init pmi_version=1 pmi_subversion=1').endswith('rc=0')
kvs = ask('cmd=get_my_kvsname').split('kvsname=')[1]
value = 'v' * 900
put = 0
while put < 100000:
    answer = ask(f'cmd=put kvsname={kvs} key=k{put} value={value}')
    if answer != 'cmd=put_result rc=0':
        break
    put += 1
print(put, answer, flush=True)
open(f'{name}.full', 'w').close()
for _ in range(1200):
    if os.path.exists(f'{name}.go'):
        break
    time.sleep(0.1)
print(ask('cmd=barrier_in'), ask(f'cmd=put kvsname={kvs} key=after value=1'), flush=True)
"#;

/// `hyperplan_agent_pmi_bytes` at the metrics endpoint `addr`.
fn pmi_bytes(addr: &str) -> u64 {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(s, "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    raw.lines()
        .find_map(|l| l.strip_prefix("hyperplan_agent_pmi_bytes "))
        .unwrap_or_else(|| panic!("no hyperplan_agent_pmi_bytes in {raw}"))
        .parse()
        .unwrap()
}

/// Resident memory of process `pid`, in bytes.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .unwrap()
        .trim()
        .trim_end_matches(" kB");
    kb.parse::<u64>().unwrap() * 1024
}

#[test]
fn a_user_s_pmi_key_spaces_are_bounded_on_the_node_and_given_back_when_the_jobs_end() {
    let live = Live::start_with(&["n1"], &["--metrics-listen", "127.0.0.1:0"]);
    let addr = common::wait_for(common::live::LONG, "the agent's metrics address", || {
        let log = live.agent_log("n1");
        let at = log.find("serving metrics on http://")? + "serving metrics on http://".len();
        Some(log[at..].split("/metrics").next()?.to_string())
    });
    let agent = live.c.agents[0].1.id();
    std::fs::write(live.work.path().join("hog.py"), PMI_HOG_PY).unwrap();
    assert_eq!(pmi_bytes(&addr), 0);
    let before = rss(agent);
    let hog = |name: &str| {
        live.job(
            name,
            &format!(
                "mpi: pmi\ntimeLimit: 180\ntasks:\n  - name: r\n    replicas: 1\n    resources: {{cpu: 1}}\n    \
                 workingDir: WORKDIR\n    command: [python3, hog.py, {name}]\n"
            ),
        )
    };
    // One job fills the user's 16 MiB (each pair counted with what keeping it costs, twice
    // until a fence), far below its own bound of 64 MiB; nothing past it is kept.
    let out = live.cli(&["submit", path_str(&hog("first"))]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let full = live.work.path().join("first.full");
    common::wait_for(common::live::LONG, "the first job's puts refused", || {
        full.exists().then_some(())
    });
    let said = live.output("first", "r-0");
    let (puts, answer) = said.trim().split_once(' ').unwrap();
    let puts: u64 = puts.parse().unwrap();
    assert_eq!(
        answer,
        "cmd=put_result rc=-1 msg=the_PMI_key-value_spaces_of_the_job's_user_on_this_node_are_full_(16777216_bytes)",
        "{said}"
    );
    assert!((7_000..9_000).contains(&puts), "{said}");
    let held = common::wait_for(common::live::LONG, "the PMI bytes shown", || {
        Some(pmi_bytes(&addr)).filter(|&b| b > 15 << 20)
    });
    assert!(held <= 16 << 20, "{held}");
    let during = rss(agent);
    // The same user's second job gets no more room (it goes on at once).
    std::fs::write(live.work.path().join("second.go"), "").unwrap();
    let (code, err) = live.submit_wait(&hog("second"));
    let second = live.output("second", "r-0");
    assert_eq!(code, 0, "{err}\n{second}");
    assert!(
        second.starts_with("0 cmd=put_result rc=-1 msg=the_PMI_key-value_spaces_of_the_job's_user"),
        "{second}"
    );
    assert!(
        live.agent_log("n1").contains("PMI put refused"),
        "{}",
        live.agent_log("n1")
    );
    // Another user (as root: a second ordinary user) has its own 16 MiB meanwhile.
    if common::euid_is_root() {
        let other = "hyperplan-e2e2";
        common::ensure_user(other);
        live.c.issue_user(other);
        std::fs::write(live.work.path().join("third.go"), "").unwrap();
        let out = live.c.cli(other, &["submit", "--wait", path_str(&hog("third"))]);
        let third = live.output("third", "r-0");
        assert!(
            out.status.success(),
            "{}\n{third}",
            String::from_utf8_lossy(&out.stderr)
        );
        let (puts, answer) = third.lines().next().unwrap().split_once(' ').unwrap();
        assert!((7_000..9_000).contains(&puts.parse::<u64>().unwrap()), "{third}");
        assert!(answer.contains("job's_user_on_this_node_are_full"), "{third}");
    }
    // A fence lets this node's part go: room again. Then the job ends, and its space and
    // the memory it took go with it.
    std::fs::write(live.work.path().join("first.go"), "").unwrap();
    live.wait_status("first", "completed");
    let said = live.output("first", "r-0");
    assert!(said.ends_with("cmd=barrier_out cmd=put_result rc=0\n"), "{said}");
    common::wait_for(common::live::LONG, "no PMI bytes held", || {
        (pmi_bytes(&addr) == 0).then_some(())
    });
    let after = common::wait_for(common::live::LONG, "the agent's memory given back", || {
        let now = rss(agent);
        (now < during - (8 << 20)).then_some(now)
    });
    eprintln!("agent RSS: {before} before, {during} with 16 MiB of PMI, {after} after");
}
