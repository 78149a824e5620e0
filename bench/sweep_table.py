"""Side-by-side tables of the C++ tuning sweeps' logs.

scripts/gpu_session.sh's `sweep` part runs a sweep binary once per QUACK_TUNE
variant and its `ab` part the new and old trees' binaries in rounds, every
run's table after a line "== <op> <dtype> <label>" (the label: "defaults", the
QUACK_TUNE string, or "new round 2" / "old round 1"). This reads such logs and
prints, per op and dtype, one Markdown table per timed column (softmax's
"fwd us" and "bwd us", rmsnorm's "us", ...): a row per N, a column per
variant with its time and % of copy, and each variant's time against the
first's (the defaults, or "new"). Rounds of one variant are folded into
their median. The kernels a variant's plan chose where they differ from the
first variant's follow each table, so that a variant that changed nothing
shows as such.

    python3 bench/sweep_table.py OUT/softmax_sweep.log [more logs...]
"""
import re
import statistics
import sys
from collections import OrderedDict

_HEADER = re.compile(r"^== (\S+)(?: (\S+))?(?: (.*))?$")
_ROUND = re.compile(r"^(.*?)\s*round \d+$")
_TIMED = re.compile(r"^\s*([0-9.]+)(?:\s+[0-9.]+)*\s+([0-9.]+)%\s*$")


def _label(raw):
    """A variant's name without its round."""
    raw = (raw or "").strip() or "defaults"
    m = _ROUND.match(raw)
    return (m.group(1) or "defaults") if m else raw


def parse(lines):
    """{(op, dtype): {"columns": [names], "variants": OrderedDict(label -> {n: {col: [(us, pct)], "plan": [str]}})}}"""
    out = OrderedDict()
    key = label = None
    columns = None
    for line in lines:
        line = line.rstrip("\n")
        h = _HEADER.match(line)
        if h:
            key = (h.group(1), h.group(2) or "")
            label = _label(h.group(3))
            columns = None
            entry = out.setdefault(key, {"columns": [], "variants": OrderedDict()})
            entry["variants"].setdefault(label, {})
            continue
        if key is None or "|" not in line:
            continue
        parts = [p.strip() for p in line.split("|")]
        first = parts[0].split()
        if not first:
            continue
        if not first[0].isdigit():
            # The table's header: "N M | plan | fwd us %copy | ...": a timed
            # column's name is its segment up to "us".
            columns = []
            for p in parts[1:]:
                words = p.split()
                columns.append(" ".join(words[:words.index("us") + 1]) if "us" in words else None)
            for c in columns:
                if c and c not in out[key]["columns"]:
                    out[key]["columns"].append(c)
            continue
        if columns is None:
            continue
        n = int(first[0])
        row = out[key]["variants"][label].setdefault(n, {})
        plans = []
        for name, seg in zip(columns, parts[1:]):
            m = _TIMED.match(seg)
            if name and m:
                row.setdefault(name, []).append((float(m.group(1)), float(m.group(2))))
            elif name is None and seg and not re.match(r"^[0-9.eE+\-/ ]+$", seg):
                plans.append(seg)
        if plans:
            row["plan"] = plans
    return out


def _median(samples):
    return statistics.median(s[0] for s in samples), statistics.median(s[1] for s in samples)


def render(parsed):
    """The Markdown tables (a str)."""
    lines = []
    for (op, dtype), entry in parsed.items():
        variants = list(entry["variants"].items())
        if not variants:
            continue
        base_label, base = variants[0]
        ns = sorted({n for _, rows in variants for n in rows})
        for col in entry["columns"]:
            lines.append(f"### {op} {dtype}: {col}".rstrip())
            lines.append("")
            head = ["N"] + [f"`{label}`" for label, _ in variants]
            lines.append("| " + " | ".join(head) + " |")
            lines.append("|" + "---:|" * len(head))
            for n in ns:
                cells = [str(n)]
                ref = base.get(n, {}).get(col)
                ref_us = _median(ref)[0] if ref else None
                for i, (_, rows) in enumerate(variants):
                    samples = rows.get(n, {}).get(col)
                    if not samples:
                        cells.append("")
                        continue
                    us, pct = _median(samples)
                    cell = f"{us:.1f} ({pct:.1f}%)"
                    if i > 0 and ref_us:
                        cell += f" {100.0 * (us / ref_us - 1.0):+.1f}%"
                    cells.append(cell)
                lines.append("| " + " | ".join(cells) + " |")
            lines.append("")
        changed = []
        for label, rows in variants[1:]:
            for n in ns:
                plan, ref = rows.get(n, {}).get("plan"), base.get(n, {}).get("plan") or []
                if plan and plan != ref:
                    diffs = [f"{a or '?'} -> {b}" for a, b in zip(ref + [None] * len(plan), plan) if a != b]
                    changed.append(f"- `{label}` N = {n}: " + "; ".join(diffs))
        if changed:
            lines.append(f"Plans that differ from `{base_label}`:")
            lines.append("")
            lines.extend(changed)
            lines.append("")
        elif len(variants) > 1:
            lines.append(f"Every variant's plans are `{base_label}`'s.")
            lines.append("")
    return "\n".join(lines)


def main(argv):
    if not argv:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    lines = []
    for path in argv:
        with open(path) as f:
            lines.extend(f.readlines())
    print(render(parse(lines)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
