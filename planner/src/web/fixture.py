#!/usr/bin/env python3
"""Generate a fixture /api/state snapshot for testing the web view (index.html).

Usage: fixture.py NODES [--cpu-only] [--flat] [--tier3] [--seed N] [-o FILE]

The fixture always contains (for NODES >= 16):
  * n005 drained ("fw update", by alice), n006 draining (no reason, by bob),
    n007 NotReady;
  * job "train" (id 12) Running on n000..n003, ranks 0-7, hyperNode leaf-0;
  * job "eval" (id 13) Pending, reserved leaf-1, with a reason;
  * the last two nodes in no HyperNode (unless --flat, where there are no
    HyperNodes at all).
Everything else is pseudo-random but deterministic for a given --seed.
"""
import argparse
import json
import random
import sys

STATUSES_ENDED = ["Completed", "Failed", "Cancelled", "Timeout", "Rejected", "Preempted"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("nodes", type=int)
    ap.add_argument("--cpu-only", action="store_true", help="no GPUs; colourBy=cpu")
    ap.add_argument("--flat", action="store_true", help="no HyperNodes at all")
    ap.add_argument("--tier3", action="store_true", help="add a tier-3 level above the spines")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("-o", "--output", default="-")
    a = ap.parse_args()
    rnd = random.Random(a.seed)
    n = a.nodes
    at = 1764250000
    width = max(3, len(str(n - 1)))
    names = [f"n{i:0{width}d}" for i in range(n)]
    gpn = 0 if a.cpu_only else 8
    cpn = 64

    # Topology: leaves of L nodes, spines of S leaves.
    per_leaf, per_spine = (8, 4) if n <= 256 else (25, 10)
    hyper = []
    leaf_of = {}
    if not a.flat:
        placed = names[:-2] if n >= 16 else names
        leaves = [placed[i:i + per_leaf] for i in range(0, len(placed), per_leaf)]
        leaf_names = [f"leaf-{i}" for i in range(len(leaves))]
        spines = [leaf_names[i:i + per_spine] for i in range(0, len(leaf_names), per_spine)]
        spine_names = [f"spine-{i}" for i in range(len(spines))]
        if a.tier3:
            groups = [spine_names[i:i + 8] for i in range(0, len(spine_names), 8)]
            for i, g in enumerate(groups):
                hyper.append({"name": f"core-{i}", "tier": 3, "children": g, "nodes": []})
        for sn, ch in zip(spine_names, spines):
            hyper.append({"name": sn, "tier": 2, "children": ch, "nodes": []})
        for ln, members in zip(leaf_names, leaves):
            hyper.append({"name": ln, "tier": 1, "children": [], "nodes": members})
            for m in members:
                leaf_of[m] = ln

    nodes = {}
    for nm in names:
        nodes[nm] = {"name": nm, "state": "Ready", "drain": None,
                     "cpus": {"free": cpn, "total": cpn},
                     "gpus": {"free": gpn, "total": gpn},
                     "memory": {"free": 2 * 1024 ** 4, "total": 2 * 1024 ** 4},
                     "tasks": 0}

    jobs = []

    def occupy(job_nodes, ranks_per_node):
        out = []
        r = 0
        for nm in job_nodes:
            nd = nodes[nm]
            k = ranks_per_node
            nd["tasks"] += k
            nd["cpus"]["free"] = max(0, nd["cpus"]["free"] - 8 * k)
            if gpn:
                nd["gpus"]["free"] = max(0, nd["gpus"]["free"] - k)
            nd["memory"]["free"] = max(0, nd["memory"]["free"] - k * 200 * 1024 ** 3)
            out.append({"node": nm, "ranks": list(range(r, r + k))})
            r += k
        return out, r

    if n >= 16:
        nodes[names[5]]["drain"] = {"state": "drained", "reason": "fw update", "by": "alice", "since": at - 7200}
        nodes[names[6]]["drain"] = {"state": "draining", "reason": None, "by": "bob", "since": at - 300}
        nodes[names[7]]["state"] = "NotReady"
        pl, t = occupy(names[0:4], 2)
        jobs.append({"name": "train", "id": 12, "owner": "alice", "queue": "default",
                     "status": "Running", "tasks": t, "nodes": pl,
                     "hyperNode": leaf_of.get(names[0]), "reserved": None, "reason": None,
                     "submitTime": at - 100})
        jobs.append({"name": "eval", "id": 13, "owner": "bob", "queue": "research",
                     "status": "Pending", "tasks": 16, "nodes": [], "hyperNode": None,
                     "reserved": None if a.flat else "leaf-1",
                     "reason": "waiting for 16 free GPUs under one leaf switch",
                     "submitTime": at - 60})

    # Random extra state: a few more drained/NotReady nodes on big clusters.
    for nm in names[16:]:
        x = rnd.random()
        if x < 0.004:
            nodes[nm]["drain"] = {"state": "drained", "reason": rnd.choice(["disk", "ib link flaps", None]),
                                  "by": "ops", "since": at - rnd.randint(60, 86400)}
        elif x < 0.006:
            nodes[nm]["drain"] = {"state": "draining", "reason": "reboot", "by": "ops", "since": at - 30}
        elif x < 0.009:
            nodes[nm]["state"] = "NotReady"

    # Random running jobs over contiguous node ranges.
    free_pool = [nm for nm in names[8:] if nodes[nm]["state"] == "Ready" and not nodes[nm]["drain"]]
    jid = 100
    i = 0
    owners = ["alice", "bob", "carol", "dave", "<script>eve</script>"]
    queues = ["default", "research", "prod"]
    while i < len(free_pool):
        if rnd.random() < 0.3:
            i += rnd.randint(1, 6)
            continue
        k = rnd.randint(1, 6)
        members = free_pool[i:i + k]
        i += k
        rpn = rnd.choice([1, 2, 4, 8]) if gpn else rnd.choice([1, 2, 4])
        pl, t = occupy(members, rpn)
        leaves = {leaf_of.get(m) for m in members}
        jobs.append({"name": f"job-{jid}", "id": jid, "owner": rnd.choice(owners),
                     "queue": rnd.choice(queues), "status": rnd.choice(["Running"] * 6 + ["Placed"]),
                     "tasks": t, "nodes": pl,
                     "hyperNode": leaves.pop() if len(leaves) == 1 else None,
                     "reserved": None, "reason": None, "submitTime": at - rnd.randint(10, 90000)})
        jid += 1
    for _ in range(max(3, n // 200)):
        jobs.append({"name": f"job-{jid}", "id": jid, "owner": rnd.choice(owners), "queue": rnd.choice(queues),
                     "status": rnd.choice(STATUSES_ENDED), "tasks": rnd.randint(1, 64), "nodes": [],
                     "hyperNode": None, "reserved": None, "reason": None,
                     "submitTime": at - rnd.randint(1000, 900000)})
        jid += 1
    jobs.append({"name": "big-sweep", "id": jid, "owner": "carol", "queue": "prod", "status": "Pending",
                 "tasks": 512, "nodes": [], "hyperNode": None, "reserved": None,
                 "reason": "queue prod is over its CPU quota", "submitTime": at - 5})

    qs = []
    for q in ["default", "research", "prod"]:
        qj = [j for j in jobs if j["queue"] == q]
        qs.append({"name": q, "running": sum(j["status"] in ("Running", "Placed") for j in qj),
                   "pending": sum(j["status"] == "Pending" for j in qj),
                   "cpusUsed": sum(8 * j["tasks"] for j in qj if j["status"] in ("Running", "Placed")),
                   "cpusQuota": None if q != "prod" else 4096, "weight": {"default": 1, "research": 2, "prod": 4}[q]})

    state = {"at": at, "planner": "head01:7400", "colourBy": "cpu" if a.cpu_only else "gpu",
             "hyperNodes": hyper, "nodes": [nodes[nm] for nm in names], "jobs": jobs, "queues": qs}
    text = json.dumps(state, separators=(",", ":"))
    if a.output == "-":
        sys.stdout.write(text + "\n")
    else:
        with open(a.output, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
