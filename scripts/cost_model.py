"""The allreduce cost model of docs/scale.md: the time of one gradient allreduce at 8 to 1,024 ranks
over 25, 100 and 400 Gb/s links, flat ring vs hierarchical vs a tree across hosts, plus the
coordinator's steady cycle from `make bench-scale`; checked against the measured two-rank TCP
figures of docs/bench/collectives.md.

    python scripts/cost_model.py [--bytes 100e6] [--per-host 8] [--plot docs/bench/cost_model.png]

Prints CSV rows `model,<algorithm>,<link_gbps>,<ranks>,<milliseconds>`, then the check, then the
comparison with Horovod's published run (128 servers x 4 GPUs, 25 Gb/s).

The model is the usual alpha-beta one: a step of an algorithm costs a latency (alpha) plus its
bytes over the bandwidth it gets. A host's g ranks share one network link of B bytes/s:
- flat ring over all p ranks: 2(p-1) steps, each waiting for a host-crossing edge,
  T = 2(p-1) (alpha_net + n / (p B));
- hierarchical (Horovod's HOROVOD_HIERARCHICAL_ALLREDUCE, ours): a reduce-scatter within each host,
  g rings of h = p/g hosts each reducing 1/g of the buffer across hosts at the same time (sharing
  the link), an allgather within the host:
  T = 2(g-1) (alpha_local + n / (g B_local)) + 2(h-1) (alpha_net + n / (h B));
- tree: the same local steps, a pipelined double binary tree across hosts (NCCL's): its depth in
  latency and about 2n / B in bandwidth, T = local + 2 ceil(log2 h) alpha_net + 2 n / B.
The coordinator's steady cycle (one per step, fused tensors) is added to each: the figures
measured by `make bench-scale` (docs/scale.md), interpolated in log2(ranks).
"""

import argparse
import itertools
import math
import os
import re

DOCS = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "docs")
RANKS = [8, 16, 32, 64, 128, 256, 512, 1024]
LINKS_GBPS = [25, 100, 400]
ALGORITHMS = ("ring", "hierarchical", "tree")


def markdown_table(text):
    """The first Markdown table in ``text``: its header cells and its rows' cells."""
    lines = itertools.dropwhile(lambda line: not line.startswith("|"), text.splitlines())
    rows = [[cell.strip() for cell in line.split("|")[1:-1]]
            for line in itertools.takewhile(lambda line: line.startswith("|"), lines) if "---" not in line]
    return rows[0], rows[1:]


def coordinator_points(path):
    """[(ranks, seconds)] of the coordinator's steady cycle, from docs/scale.md's table of
    make bench-scale's run."""
    text = open(path).read()
    header, rows = markdown_table(text[text.index("| ranks | cold: coordinator"):])
    column = header.index("steady: coordinator")
    points = []
    for row in rows:
        number, unit = row[column].replace(",", "").split()
        points.append((int(row[0].replace(",", "")), float(number) * {"us": 1e-6, "ms": 1e-3, "s": 1.0}[unit]))
    return sorted(points)


def coordinator_s(points, ranks):
    """The coordinator's steady cycle at ``ranks``, interpolated in log2(ranks) between ``points``."""
    if ranks <= points[0][0]:
        return points[0][1]
    for (r0, t0), (r1, t1) in zip(points, points[1:]):
        if ranks <= r1:
            f = (math.log2(ranks) - math.log2(r0)) / (math.log2(r1) - math.log2(r0))
            return t0 + f * (t1 - t0)
    return points[-1][1]


def allreduce_s(algorithm, n, ranks, per_host, link_bytes_s, alpha_net, local_bytes_s, alpha_local):
    """Seconds for one allreduce of ``n`` bytes (without the coordinator)."""
    g = min(per_host, ranks)
    hosts = ranks // g
    if algorithm == "ring":
        if hosts == 1:  # no edge leaves the host
            alpha_net, link_bytes_s = alpha_local, local_bytes_s
        return 2 * (ranks - 1) * (alpha_net + n / (ranks * link_bytes_s))
    local = 2 * (g - 1) * (alpha_local + n / (g * local_bytes_s))
    if algorithm == "hierarchical":
        return local + 2 * (hosts - 1) * (alpha_net + n / (hosts * link_bytes_s))
    return local + 2 * math.ceil(math.log2(hosts)) * alpha_net + (2 * n / link_bytes_s if hosts > 1 else 0)


def measured_two_rank_tcp(path):
    """{bytes: busbw GB/s} and the 4-byte time (s) of the 2-rank horovod-rs-tcp column."""
    sizes = {"4 B": 4, "4 KiB": 4 << 10, "64 KiB": 64 << 10, "1 MiB": 1 << 20, "16 MiB": 16 << 20,
             "64 MiB": 64 << 20}
    header, rows = markdown_table(open(path).read().split("## 2 ranks", 1)[1].split("##", 1)[0])
    column = header.index("horovod-rs-tcp")
    busbw, small_s = {}, None
    for row in rows:
        size, value = sizes[row[0]], row[column]
        if size == 4:
            small_s = float(re.match(r"[\d.]+", value).group()) / 1e6
        else:
            busbw[size] = float(value)
    return busbw, small_s


def check(path):
    """The 2-rank ring's alpha from the 4 B time and B from 64 MiB, then the other sizes predicted."""
    busbw, small_s = measured_two_rank_tcp(path)
    alpha = small_s / 2  # a 2-rank ring: 2 steps
    bandwidth = busbw[64 << 20] * 1e9
    print("check,size_bytes,measured_busbw_gbs,model_busbw_gbs")
    for size in sorted(busbw):
        model_s = allreduce_s("ring", size, 2, 1, bandwidth, alpha, bandwidth, alpha)
        print("check,%d,%.2f,%.2f" % (size, busbw[size], size / model_s / 1e9))  # 2 ranks: busbw = algbw


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bytes", type=float, default=100e6, help="the gradients' size (100 MB)")
    parser.add_argument("--per-host", type=int, default=8, help="ranks per host sharing its link")
    parser.add_argument("--alpha-us", type=float, default=20.0, help="latency of a message between hosts")
    parser.add_argument("--local-gbs", type=float, default=100.0, help="bus bandwidth within a host, GB/s")
    parser.add_argument("--local-alpha-us", type=float, default=1.0, help="latency of a step within a host")
    parser.add_argument("--measured", default=os.path.join(DOCS, "bench", "collectives.md"))
    parser.add_argument("--scale", default=os.path.join(DOCS, "scale.md"),
                        help="make bench-scale's table of the coordinator's steady cycle")
    parser.add_argument("--plot", help="write the plot (PNG) here")
    args = parser.parse_args()
    common = dict(n=args.bytes, per_host=args.per_host, alpha_net=args.alpha_us / 1e6,
                  local_bytes_s=args.local_gbs * 1e9, alpha_local=args.local_alpha_us / 1e6)

    points = coordinator_points(args.scale)
    table = {}
    print("model,algorithm,link_gbps,ranks,milliseconds")
    for gbps in LINKS_GBPS:
        for algorithm in ALGORITHMS:
            for ranks in RANKS:
                seconds = allreduce_s(algorithm, ranks=ranks, link_bytes_s=gbps * 1e9 / 8, **common)
                seconds += coordinator_s(points, ranks)
                table[algorithm, gbps, ranks] = seconds
                print("model,%s,%d,%d,%.2f" % (algorithm, gbps, ranks, seconds * 1e3))
    check(args.measured)

    # Horovod's paper: ResNet-101 (44.5 M parameters, 178 MB of float32 gradients), 128 servers of
    # 4 GPUs on 25 Gb/s RoCE (a few microseconds per message), 88 % scaling efficiency.
    paper = dict(common, n=178e6, per_host=4, alpha_net=5e-6)
    for algorithm in ("ring", "hierarchical"):
        seconds = allreduce_s(algorithm, ranks=512, link_bytes_s=25e9 / 8, **paper) + coordinator_s(points, 512)
        print("paper,%s,25,512,%.1f" % (algorithm, seconds * 1e3))

    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, len(LINKS_GBPS), figsize=(13, 4), sharey=True)
        for axis, gbps in zip(axes, LINKS_GBPS):
            for algorithm, style in zip(ALGORITHMS, ("-o", "-s", "-^")):
                axis.plot(RANKS, [table[algorithm, gbps, r] * 1e3 for r in RANKS], style, label=algorithm)
            axis.set_xscale("log", base=2)
            axis.set_yscale("log")
            axis.set_title("%d Gb/s links, %d ranks per host" % (gbps, args.per_host))
            axis.set_xlabel("ranks")
            axis.grid(True, which="both", alpha=0.3)
        axes[0].set_ylabel("ms per %.0f MB allreduce" % (args.bytes / 1e6))
        axes[0].legend()
        fig.tight_layout()
        fig.savefig(args.plot, dpi=100)


if __name__ == "__main__":
    main()
