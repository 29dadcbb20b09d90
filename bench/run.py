"""tidal benchmark suite: eager PyTorch, torch.compile(backend="inductor") and
torch.compile(backend="tidal") side by side, in one run per case.

    python bench/run.py [--quick] [--device cpu|cuda] [--out bench/results] [--cases a,b,...]
                        [--threads N] [--backends eager,inductor,tidal]

Every (case, configuration) runs in its own fresh Python process with fresh Inductor and tidal
caches (cold compiles) and the same thread count; times are medians of repeats after warm-up.
Prints a table per case, writes results.json and one PNG per case into --out. See bench/README.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import cases as cases_mod  # noqa: E402
import harness  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="tiny sizes, few repeats (smoke test)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--out", default=os.path.join(HERE, "results"), help="output directory")
    p.add_argument("--cases", default=",".join(cases_mod.CASES), help="comma-separated subset of: " + ", ".join(cases_mod.CASES))
    p.add_argument("--threads", type=int, default=1, help="torch/OpenMP/MKL threads in every configuration (default 1)")
    p.add_argument("--backends", default=",".join(cases_mod.BACKENDS),
                   help="backends to run; the others are recorded as 'skipped' (default: all)")
    p.add_argument("--unit-timeout", type=float, default=None,
                   help="seconds per configuration process (default 1800, --quick 300)")
    p.add_argument("--processes", type=int, default=1, metavar="N",
                   help="run every configuration in N fresh processes, the backends taking turns; a cell's time is the "
                        "median of the N per-process medians, shown with their spread (default 1)")
    p.add_argument("--verbose", action="store_true", help="echo each configuration's stderr")
    p.add_argument("--matmul-precision", choices=["highest", "high", "medium"], default="highest",
                   help="torch.set_float32_matmul_precision in every configuration (default highest: fp32 "
                        "matmuls; high lets cuBLAS and tidal's row kernels use TF32, as cuDNN's RNNs do by default)")
    p.add_argument("--from-json", default=None, metavar="RESULTS_JSON",
                   help="measure nothing: print the tables of an earlier results.json and redraw its plots in --out")
    p.add_argument("--_single", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.unit_timeout is None:
        args.unit_timeout = 300.0 if args.quick else 1800.0
    return args


# ----------------------------------------------------------------------------------------------
# table


def _fmt_cell(rec, key, scale, fmt, notes):
    st = rec.get("status", "n/a")
    if st == "ok":
        v = rec.get(key)
        if v is None:
            return "-"
        s = fmt.format(v * scale)
        spread = rec.get("process_times_s") if key == "time_s" else None
        if spread and len(spread) > 1:  # half the range of the per-process medians, in % of their median
            s += f" ±{50 * (spread[-1] - spread[0]) / v:.0f}%"
        return s + ("!" if rec.get("mismatch") else "")
    if st in ("failed", "fallback"):
        text = (f"{rec.get('error_type')}: {rec.get('error')}" + (f" [cause: {rec['cause']}]" if rec.get("cause") else "")
                if st == "failed" else rec.get("reason", ""))
        if text not in notes:
            notes.append(text)
        k = notes.index(text) + 1
        return f"FAILED {rec.get('error_type')} [{k}]" if st == "failed" else f"fallback [{k}]"
    if st == "unsupported":
        return "unsupported"
    return st


def _ratio(x):
    return "-" if x is None else f"{x:.2f}x"


def format_case(name, case) -> str:
    c = cases_mod.CASES[name]
    cols = case["columns"]
    # a metric no cell has (back-to-back times on the CPU) gets no columns
    metrics = [m for m in c.metrics if m is c.metrics[0] or any(m[0] in rec for row in case["rows"] for rec in row["cells"].values())]
    headers = ["row"]
    for key, title, _, _ in metrics:
        headers += [f"{col['title']} {title}" for col in cols]
    if c.ratios:
        headers += ["tidal vs eager", "tidal vs inductor"]
    compiled_cols = [col for col in cols if col["backend"] != "eager"]
    if c.show_compile:
        headers += [f"{col['title']} compile s" for col in compiled_cols]
    notes: list[str] = []
    body = []
    for row in case["rows"]:
        line = [row["label"]]
        for key, _, scale, fmt in metrics:
            line += [_fmt_cell(row["cells"].get(col["key"], {"status": "n/a"}), key, scale, fmt, notes) for col in cols]
        if c.ratios:
            line += [_ratio(row["ratios"].get("tidal_vs_eager")), _ratio(row["ratios"].get("tidal_vs_inductor"))]
        if c.show_compile:
            for col in compiled_cols:
                rec = row["cells"].get(col["key"], {})
                line.append(f"{rec['compile_s']:.2f}" if rec.get("status") == "ok" and rec.get("compile_s") is not None else "-")
        body.append(line)
    widths = [max(len(str(r[i])) for r in [headers] + body) for i in range(len(headers))]
    out = [f"== {name}: {case['title']}", f"   {case['description']}"]
    out.append("  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(headers, widths))))
    for r in body:
        out.append("  ".join(str(v).ljust(w) if i == 0 else str(v).rjust(w) for i, (v, w) in enumerate(zip(r, widths))))
    for k, text in enumerate(notes, 1):
        out.append(f"   [{k}] {text}")
    if any(rec.get("mismatch") for row in case["rows"] for rec in row["cells"].values()):
        out.append("   ! result differs from eager beyond rtol=atol=1e-3 (see max_abs_err in results.json)")
    for k, v in case.get("summary", {}).items():
        out.append(f"   {k}: {_ratio(v) if isinstance(v, float) or v is None else v}")
    return "\n".join(out)


# ----------------------------------------------------------------------------------------------
# orchestration


def assemble(name, quick, device, cells) -> dict:
    c = cases_mod.CASES[name]
    params = c.rows_for(quick, device)
    rows = []
    for label, p in params.items():
        row = {"label": label, "params": p, "cells": {col["key"]: {"status": "n/a"} for col in c.columns()}, "ratios": {}}
        row["cells"].update(cells.get(label, {}))
        rows.append(row)
    if c.ratios:
        for row in rows:
            t = {k: (v.get("time_s") if v.get("status") == "ok" else None) for k, v in row["cells"].items()}
            if t.get("tidal"):
                for other in ("eager", "inductor"):
                    if t.get(other):
                        row["ratios"][f"tidal_vs_{other}"] = t[other] / t["tidal"]
    case = {"title": c.title, "description": c.description, "columns": c.columns(), "rows": rows}
    case["summary"] = c.summarize(rows)
    return case


def collect_problems(results) -> list[str]:
    problems = []
    for n, case in results["cases"].items():
        for row in case["rows"]:
            for col, rec in row["cells"].items():
                if rec.get("status") in ("failed", "fallback") or rec.get("mismatch"):
                    what = rec.get("reason") or f"{rec.get('error_type')}: {rec.get('error')}" + (
                        f" [cause: {rec['cause']}]" if rec.get("cause") else "")
                    if rec.get("mismatch"):
                        what = f"result differs from eager, max_abs_err={rec.get('max_abs_err')}"
                    problems.append(f"{n} / {row['label']} / {col}: {rec['status']}: {what}")
    return problems


def print_report(results) -> None:
    meta = results["meta"]
    print()
    print(f"device={meta['device']} ({meta['device_name']}), threads={meta['threads']}, torch {meta['torch']}, "
          f"tidal {meta.get('tidal', '?')}{', --quick' if meta['quick'] else ''}, float32 matmul precision "
          f"{meta.get('float32_matmul_precision', 'highest')} (cuDNN TF32: {meta.get('cudnn_allow_tf32', '?')})")
    print("times: median ms; 'tidal vs X' = time(X) / time(tidal) (>1: tidal faster); compile s = first call - steady call"
          + (f"; each cell the median of {meta['processes']} fresh processes, ±: half their spread"
             if meta.get("processes", 1) > 1 else ""))
    for n, case in results["cases"].items():
        print()
        print(format_case(n, case))
    if results["problems"]:
        print("\nfailures / fallbacks / mismatches:")
        for p in results["problems"]:
            print("  " + p)


def _merged(earlier: dict | None, rec: dict) -> dict:
    """A cell measured by two processes (time, then memory): one record; a failure of either stands."""
    if earlier is None:
        return rec
    if earlier.get("status") != "ok":
        return earlier
    if rec.get("status") != "ok":
        return rec
    return {**earlier, **{k: v for k, v in rec.items() if k.startswith("peak_mem")}}


def _across_processes(recs: list[dict]) -> dict:
    """One cell measured in several fresh processes (--processes): the record whose time is the
    median of theirs (the lower middle one for an even count), with every process's time in
    `process_times_s`; a failure of any stands. Two processes running the same library kernel
    (an encoder layer is one oneDNN/MKL call in every backend) differ by a few percent, more than
    what separates the backends."""
    bad = [r for r in recs if r.get("status") != "ok" or r.get("time_s") is None]
    if bad or len(recs) == 1:
        return bad[0] if bad else recs[0]
    ordered = sorted(recs, key=lambda r: r["time_s"])
    return {**ordered[(len(ordered) - 1) // 2], "process_times_s": [r["time_s"] for r in ordered]}


def main(argv=None) -> int:
    args = parse_args(argv)
    if args._single is not None:
        return harness.child_main(json.loads(args._single), args.device, args.threads, args.quick)
    if args.from_json:
        with open(args.from_json) as f:
            results = json.load(f)
        results["problems"] = collect_problems(results)
        print_report(results)
        import plots

        os.makedirs(args.out, exist_ok=True)
        pngs = plots.plot_all(results, args.out)
        print(f"\nredrew {len(pngs)} plots in {args.out}")
        return 0

    os.environ[harness.MATMUL_PRECISION_ENV] = args.matmul_precision  # the configurations' processes inherit it
    names = [n.strip() for n in args.cases.split(",") if n.strip()]
    unknown = [n for n in names if n not in cases_mod.CASES]
    if unknown:
        sys.exit(f"unknown case(s) {unknown}; known: {', '.join(cases_mod.CASES)}")
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("--device cuda: no CUDA device visible to torch")
    os.makedirs(args.out, exist_ok=True)

    meta = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "command": " ".join([os.path.relpath(sys.argv[0])] + sys.argv[1:]),
        "device": args.device,
        "device_name": torch.cuda.get_device_name() if args.device == "cuda" else platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "threads": args.threads,
        "quick": args.quick,
        "float32_matmul_precision": args.matmul_precision,
        "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
        "backends": backends,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "timing": "median of timed repeats after warm-up calls; compile_s = first call - median steady call"
                  + (f"; each cell measured in {args.processes} fresh processes, the backends taking turns: the median "
                     "process's record, every process's time in process_times_s" if args.processes > 1 else ""),
        "processes": args.processes,
        "isolation": "one fresh process per configuration; fresh TORCHINDUCTOR_CACHE_DIR, TIDAL_CACHE_DIR, TRITON_CACHE_DIR; "
                     "torch.compile(fullgraph=True, dynamic=False) after torch._dynamo.reset()"
                     + ("" if args.quick else "; an unrelated tiny graph is compiled first in each process so one-time "
                        "initialisation is not counted as compile time"),
        "capture_scalar_outputs": "torch._dynamo.config.capture_scalar_outputs = True in every configuration "
                                  "(rnn_scan has one Inductor row with it False)",
        "peak_memory": "chunked_ce only: " + ("torch.cuda.max_memory_allocated" if args.device == "cuda" else
                                              "VmHWM after resetting through /proc/self/clear_refs minus VmRSS before one call"),
    }
    try:
        from importlib.metadata import version

        meta["tidal"] = version("tidal")
        meta["torch_mlir"] = version("torch-mlir")
    except Exception:  # noqa: BLE001
        pass

    units = [u for n in names for u in cases_mod.CASES[n].units(args.quick, args.device)]
    print(f"tidal bench: {len(units)} configurations, device={args.device}, threads={args.threads} "
          f"(torch.set_num_threads and OMP/MKL_NUM_THREADS in every configuration), backends={','.join(backends)}"
          + (", --quick" if args.quick else ""), flush=True)
    rounds = max(1, args.processes)
    per_round: list[dict[str, dict[str, dict[str, dict]]]] = [{n: {} for n in names} for _ in range(rounds)]
    start = time.perf_counter()
    partial_path = os.path.join(args.out, "partial.jsonl")
    open(partial_path, "w").close()
    for r in range(rounds):
        for k, unit in enumerate(units, 1):
            what = f"[{k}/{len(units)}] {unit['case']} {unit['column']}" + (f" ({unit['variant']})" if unit["variant"] else "") \
                + (f" {unit['params']}" if unit["params"] else "") + (f" [{unit['part']}]" if unit.get("part") else "") \
                + (f" (process {r + 1}/{rounds})" if rounds > 1 else "")
            if unit["backend"] not in backends:
                got = [(row, c, harness.status_record("skipped", "not in --backends")) for row, c in unit["cells"]]
                wall = 0.0
            else:
                got, wall = harness.run_unit(os.path.abspath(__file__), unit, args)
            for row, col, rec in got:
                row_cells = per_round[r][unit["case"]].setdefault(row, {})
                row_cells[col] = _merged(row_cells.get(col), rec)
            states = ", ".join(sorted({rec["status"] for _, _, rec in got}))
            print(f"  {what}: {states} ({wall:.1f} s)", file=sys.stderr, flush=True)
            for row, col, rec in got:
                if rec.get("time_s") is not None:
                    print(f"      {row} | {col}: {rec['time_s'] * 1e3:.3f} ms", file=sys.stderr, flush=True)
            # a run cut short (a device lease, a timeout) keeps what it measured
            with open(partial_path, "a") as f:
                f.write(json.dumps({"case": unit["case"], "process": r, "cells": [[row, col, rec] for row, col, rec in got]}) + "\n")
    cells: dict[str, dict[str, dict[str, dict]]] = {n: {} for n in names}
    for n in names:
        for row in per_round[0][n]:
            cells[n][row] = {col: _across_processes([pr[n].get(row, {}).get(col, {"status": "failed", "error_type": "Missing", "error": "not measured in this process"})
                                                      for pr in per_round]) for col in per_round[0][n][row]}

    results = {"meta": meta, "cases": {n: assemble(n, args.quick, args.device, cells[n]) for n in names}}
    results["meta"]["wall_s"] = time.perf_counter() - start
    results["summary"] = {n: results["cases"][n]["summary"] for n in names}
    results["problems"] = collect_problems(results)
    print_report(results)
    json_path = os.path.join(args.out, "results.json")
    with open(json_path, "w") as f:
        json.dump(results, f, indent=1)
    try:
        import plots

        pngs = plots.plot_all(results, args.out)
    except Exception as exc:  # noqa: BLE001 - the numbers are written already
        print(f"\nplots failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(f"\nwrote {json_path} and {len(pngs)} plots ({', '.join(os.path.basename(p) for p in pngs)}) "
          f"in {results['meta']['wall_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
