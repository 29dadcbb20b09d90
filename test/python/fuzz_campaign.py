"""Long fuzzing campaigns that keep going after a failure, and a shrinker for what they find.

`test_fuzz.py` stops at its first failure (hypothesis shrinks it and raises), which suits CI; a long
run wants every failure. Here program `i` of a campaign is drawn from the same strategies
(`fuzz_programs.programs()` / `grad_programs()`) with its own random source, `Random(f"{seed}:{i}")`,
so each program is reproducible from (mode, seed, i) alone, whatever ran before it, and a worker
process that dies (a segfault in compiled code, a hang) is restarted at the next index.

    # 2000 gradient-mode programs on seed 7, results in /tmp/grad7/results.jsonl (one line a program)
    nice -n 10 python test/python/fuzz_campaign.py run --mode grad --seed 7 --count 2000 --out /tmp/grad7
    # a summary, then each distinct failure shrunk (one representative a signature)
    python test/python/fuzz_campaign.py report /tmp/grad7
    python test/python/fuzz_campaign.py shrink /tmp/grad7
    # rerun one program
    python test/python/fuzz_campaign.py one --mode grad --seed 7 --index 123

Shrinking is greedy over the description tree (delete an op, inline a cond branch or loop body,
simplify an op's parameters, drop unused inputs), keeping a step only while the failure's
signature (its kind, and for a rejection or crash the error's first line) stays the same.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("TIDAL_CACHE_DIR", "off")
os.environ.setdefault("TIDAL_FALLBACK", "error")

import fuzz_programs as fp  # noqa: E402
from fuzz_programs import (  # noqa: E402,F401 - eval() of a description's repr needs these names
    AssocScan,
    Binary,
    Block,
    Cond,
    Map,
    MatMul,
    Operand,
    Program,
    Reduce,
    Scan,
    Spec,
    Unary,
    While,
)

PROGRAM_TIMEOUT_S = 1800  # a program still running after this is recorded as a hang


def _context(data):
    from hypothesis.control import BuildContext

    return BuildContext(data, is_final=False, wrapped_test=None)


def draw(mode: str, seed: int, index: int, integer_matmul: bool = True, redraw: int = 0) -> Program:
    """Program `index` of the campaign (mode, seed). `integer_matmul=False` draws forward
    programs without an integer matmul (for CUDA: eager has none there); `redraw` k > 0 is the
    k-th replacement for program `index` (test_gpu_suites.py draws one where eager rejects the
    program), from a random source of its own."""
    from hypothesis.errors import StopTest
    from hypothesis.internal.conjecture.data import ConjectureData

    strategy = fp.grad_programs() if mode == "grad" else fp.programs(integer_matmul=integer_matmul)
    name = f"{seed}:{index}" if not redraw else f"{seed}:{index}/{redraw}"
    for attempt in range(100):  # a draw that overruns hypothesis' buffer is drawn again
        data = ConjectureData(random=random.Random(f"{name}:{attempt}"))
        try:
            with _context(data):
                return data.draw(strategy)
        except StopTest:
            continue
    raise RuntimeError(f"no program drawn for {mode} {name}")


_PREFIXES = (
    "tidal rejected a valid program",
    "the compiled training step crashed",
    "compile_program crashed",
    "valid program fell back to eager",
    "tidal's forward differs",
    "tidal's gradient of",
    "gradcheck of the compiled program failed",
    "tidal differs from eager",
    "the Python-loop reference differs",
    "eager PyTorch rejected",
)


def signature(kind: str, message: str) -> str:
    """What two failures share when they are (most likely) the same bug."""
    first = message.strip().splitlines()[0] if message.strip() else ""
    prefix = next((p for p in _PREFIXES if first.startswith(p)), None)
    if prefix is None:
        return f"{kind}: {_normalize(first)[:160]}"
    if prefix in ("tidal rejected a valid program", "the compiled training step crashed", "compile_program crashed",
                  "valid program fell back to eager", "eager PyTorch rejected"):
        detail = first[len(prefix):]
        detail = detail.split(" here: ", 1)[-1] if " here: " in detail else detail
        return f"{kind}: {prefix}: {_normalize(detail)[:160]}"
    return f"{kind}: {prefix}"


def _normalize(text: str) -> str:
    text = re.sub(r"<tidal-fuzz-\d+>:\d+", "<src>", text)
    text = re.sub(r"\S+\.py:\d+", "<file>", text)
    text = re.sub(r"\bin\d+\b", "inK", text)
    text = re.sub(r"\[[\d, ]*\]", "[sizes]", text)
    return re.sub(r"\d+(\.\d+)?", "N", text)


def run_one(desc: Program) -> dict:
    """{"status": "ok" | "reject" | "fail", "kind", "message", "traceback"} for one program."""
    from hypothesis.errors import UnsatisfiedAssumption
    from hypothesis.internal.conjecture.data import ConjectureData

    check = fp.check_gradients if desc.grad else fp.check
    try:
        with _context(ConjectureData(random=random.Random(0))):
            check(desc)
        return {"status": "ok"}
    except UnsatisfiedAssumption:
        return {"status": "reject"}
    except Exception as exc:  # noqa: BLE001 - every failure is recorded
        root = exc
        while root.__cause__ is not None or root.__context__ is not None:
            root = root.__cause__ or root.__context__
        # tidal's messages keep the first line of the error they wrap: the root keeps the rest.
        return {
            "status": "fail",
            "kind": type(exc).__name__,
            "message": str(exc),
            "root": f"{type(root).__name__}: {str(root)[:3000]}",
            "traceback": "".join(traceback.format_exception(root)[-12:]),
        }


# ---------------------------------------------------------------------------------------------
# Running a campaign: a supervisor restarting a worker after a crash or a hang
# ---------------------------------------------------------------------------------------------


def worker(mode: str, seed: int, start: int, count: int, out: str) -> None:
    import warnings

    warnings.filterwarnings("ignore")
    for i in range(start, count):
        with open(os.path.join(out, "current"), "w") as f:
            f.write(f"{i} {time.time()}\n")
        desc = draw(mode, seed, i)
        t0 = time.time()
        result = run_one(desc)
        result.update(index=i, seconds=round(time.time() - t0, 2), depth=fp.depth_of(desc.body), desc=repr(desc))
        if result["status"] == "fail":
            result["signature"] = signature(result["kind"], result["message"])
        with open(os.path.join(out, "results.jsonl"), "a") as f:
            f.write(json.dumps(result) + "\n")


def _done(out: str) -> set[int]:
    path = os.path.join(out, "results.jsonl")
    if not os.path.exists(path):
        return set()
    with open(path) as f:
        return {json.loads(line)["index"] for line in f if line.strip()}


def supervise(mode: str, seed: int, count: int, out: str) -> None:
    os.makedirs(out, exist_ok=True)
    while True:
        done = _done(out)
        start = next((i for i in range(count) if i not in done), None)
        if start is None:
            return
        cmd = [sys.executable, os.path.abspath(__file__), "worker", "--mode", mode, "--seed", str(seed),
               "--start", str(start), "--count", str(count), "--out", out]
        proc = subprocess.Popen(cmd)
        while proc.poll() is None:
            time.sleep(5)
            try:
                with open(os.path.join(out, "current")) as f:
                    index, since = f.read().split()
            except (OSError, ValueError):
                continue
            if time.time() - float(since) > PROGRAM_TIMEOUT_S:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                _record_death(out, mode, seed, int(index), "hang", f"still running after {PROGRAM_TIMEOUT_S} s")
        if proc.returncode not in (0, -signal.SIGKILL):
            with open(os.path.join(out, "current")) as f:
                index = int(f.read().split()[0])
            if index not in _done(out):
                _record_death(out, mode, seed, index, "crash", f"the worker died: returncode {proc.returncode}")


def _record_death(out, mode, seed, index, kind, message):
    desc = draw(mode, seed, index)
    result = {"status": "fail", "kind": kind, "message": message, "signature": f"{kind}: {message.split(':')[0]}",
              "index": index, "depth": fp.depth_of(desc.body), "desc": repr(desc)}
    with open(os.path.join(out, "results.jsonl"), "a") as f:
        f.write(json.dumps(result) + "\n")


def load(out: str) -> list[dict]:
    with open(os.path.join(out, "results.jsonl")) as f:
        results = [json.loads(line) for line in f if line.strip()]
    for r in results:
        if r["status"] == "fail" and r["kind"] not in ("crash", "hang"):
            r["signature"] = signature(r["kind"], r["message"])
    return results


def report(out: str) -> None:
    results = load(out)
    by_status: dict[str, int] = {}
    for r in results:
        by_status[r["status"]] = by_status.get(r["status"], 0) + 1
    seconds = sum(r.get("seconds", 0) for r in results)
    print(f"{len(results)} programs: {by_status}, {seconds:.0f} s in checks")
    groups: dict[str, list[dict]] = {}
    for r in results:
        if r["status"] == "fail":
            groups.setdefault(r["signature"], []).append(r)
    for sig, rs in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        print(f"  {len(rs):4d}  {sig}   (indices {[r['index'] for r in rs[:8]]})")


# ---------------------------------------------------------------------------------------------
# Shrinking
# ---------------------------------------------------------------------------------------------


def _block_variants(block: Block):
    ops = block.ops
    for j in range(len(ops)):
        yield Block(ops[:j] + ops[j + 1:])
    for j, op in enumerate(ops):
        for inline in _inlines(op):
            yield Block(ops[:j] + inline + ops[j + 1:])
    for j, op in enumerate(ops):
        for new in _op_variants(op):
            yield Block(ops[:j] + (new,) + ops[j + 1:])


def _inlines(op):
    """The op replaced by the ops of a body of the same shape."""
    if isinstance(op, Cond):
        yield op.then.ops
        yield op.orelse.ops
    elif isinstance(op, While):
        yield op.body.ops


def _op_variants(op):
    r = dataclasses.replace
    if isinstance(op, Cond):
        for b in _block_variants(op.then):
            yield r(op, then=b)
        for b in _block_variants(op.orelse):
            yield r(op, orelse=b)
        if op.pred != "sum":
            yield r(op, pred="sum", threshold=0.5, pred_input=-1)
    elif isinstance(op, While):
        for b in _block_variants(op.body):
            yield r(op, body=b)
        if op.data_pred:
            yield r(op, data_pred=False)
        if op.n > 1:
            yield r(op, n=1)
    elif isinstance(op, Scan):
        for b in _block_variants(op.body):
            yield r(op, body=b)
        if op.counter:
            yield r(op, counter=False)
        if op.reverse:
            yield r(op, reverse=False)
        if op.init != "zeros":
            yield r(op, init="zeros", init_input=-1)
    elif isinstance(op, Map):
        for b in _block_variants(op.body):
            yield r(op, body=b)
        if op.extra_arg >= 0:
            yield r(op, extra_arg=-1)
    elif isinstance(op, AssocScan):
        if op.reverse:
            yield r(op, reverse=False)
        if op.combine != "add":
            yield r(op, combine="add")
    elif isinstance(op, Binary):
        if op.rhs.kind != "scalar":
            yield r(op, rhs=Operand("scalar", 0.5 if isinstance(op.rhs.value, float) or op.rhs.kind == "input" else 1))
        if op.op != "add":
            yield r(op, op="add")
    elif isinstance(op, Unary):
        if op.op != "neg":
            yield Unary("neg")
    elif isinstance(op, Reduce):
        if op.kind != "sum":
            yield r(op, kind="sum")
        if op.combine != "add":
            yield r(op, combine="add")


def _inputs_used(block: Block, used: list[int]) -> None:
    def use(k):
        if k >= 0 and k not in used:
            used.append(k)

    for op in block.ops:
        if isinstance(op, Binary) and op.rhs.kind == "input":
            use(op.rhs.value)
        elif isinstance(op, MatMul):
            use(op.weight)
        elif isinstance(op, Cond):
            if op.pred == "input":
                use(op.pred_input)
            _inputs_used(op.then, used)
            _inputs_used(op.orelse, used)
        elif isinstance(op, While):
            _inputs_used(op.body, used)
        elif isinstance(op, Scan):
            if op.init == "input":
                use(op.init_input)
            _inputs_used(op.body, used)
        elif isinstance(op, Map):
            use(op.extra_arg)
            _inputs_used(op.body, used)


def _renumber(block: Block, new: dict[int, int]) -> Block:
    r = dataclasses.replace
    ops = []
    for op in block.ops:
        if isinstance(op, Binary) and op.rhs.kind == "input":
            op = r(op, rhs=Operand("input", new[op.rhs.value]))
        elif isinstance(op, MatMul):
            op = MatMul(new[op.weight])
        elif isinstance(op, Cond):
            op = r(op, pred_input=new.get(op.pred_input, -1), then=_renumber(op.then, new),
                   orelse=_renumber(op.orelse, new))
        elif isinstance(op, While):
            op = r(op, body=_renumber(op.body, new))
        elif isinstance(op, Scan):
            op = r(op, init_input=new.get(op.init_input, -1), body=_renumber(op.body, new))
        elif isinstance(op, Map):
            op = r(op, extra_arg=new.get(op.extra_arg, -1), body=_renumber(op.body, new))
        ops.append(op)
    return Block(tuple(ops))


def prune_inputs(desc: Program) -> Program:
    used: list[int] = []
    _inputs_used(desc.body, used)
    new = {old: k for k, old in enumerate(used)}
    return dataclasses.replace(desc, inputs=tuple(desc.inputs[k] for k in used), body=_renumber(desc.body, new))


def _fails_alike(desc: Program, sig: str, isolate: bool) -> bool:
    if isolate:  # a crash or a hang: run it in a process of its own
        cmd = [sys.executable, os.path.abspath(__file__), "check-desc", repr(desc)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        except subprocess.TimeoutExpired:
            return sig.startswith("hang")
        return proc.returncode < 0 and sig.startswith("crash")
    result = run_one(desc)
    return result["status"] == "fail" and signature(result["kind"], result["message"]) == sig


def shrink(desc: Program, sig: str, log=print) -> Program:
    isolate = sig.startswith(("crash", "hang"))
    desc = prune_inputs(desc) if _fails_alike(prune_inputs(desc), sig, isolate) else desc
    progress = True
    while progress:
        progress = False
        for body in _block_variants(desc.body):
            candidate = prune_inputs(dataclasses.replace(desc, body=body))
            if _fails_alike(candidate, sig, isolate):
                desc, progress = candidate, True
                log(f"    shrunk to {len(fp.source_of(desc).splitlines())} lines")
                break
    return desc


def shrink_campaign(out: str, limit_per_signature: int = 1) -> None:
    import warnings

    warnings.filterwarnings("ignore")
    results = load(out)
    groups: dict[str, list[dict]] = {}
    for r in results:
        if r["status"] == "fail":
            groups.setdefault(r["signature"], []).append(r)
    shrunk_path = os.path.join(out, "shrunk.jsonl")
    already = set()
    if os.path.exists(shrunk_path):
        with open(shrunk_path) as f:
            already = {json.loads(line)["signature"] for line in f if line.strip()}
    for sig, rs in groups.items():
        if sig in already:
            continue
        # The smallest program of the group is the quickest to shrink.
        for r in sorted(rs, key=lambda r: len(r["desc"]))[:limit_per_signature]:
            print(f"shrinking #{r['index']}: {sig}", flush=True)
            desc = shrink(eval(r["desc"]), sig)  # noqa: S307 - our own descriptions
            final = run_one(desc) if not sig.startswith(("crash", "hang")) else {"message": r["message"]}
            with open(shrunk_path, "a") as f:
                f.write(json.dumps({"signature": sig, "index": r["index"], "count": len(rs), "desc": repr(desc),
                                    "message": final.get("message", ""), "traceback": final.get("traceback", ""),
                                    "source": fp.source_of(desc)}) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["run", "worker", "report", "shrink", "one", "check-desc"])
    parser.add_argument("out_or_desc", nargs="?")
    parser.add_argument("--mode", choices=["grad", "forward"], default="grad")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--index", type=int, default=0)
    parser.add_argument("--out")
    args = parser.parse_args()
    if args.command == "run":
        supervise(args.mode, args.seed, args.count, args.out)
    elif args.command == "worker":
        worker(args.mode, args.seed, args.start, args.count, args.out)
    elif args.command == "report":
        report(args.out_or_desc)
    elif args.command == "shrink":
        shrink_campaign(args.out_or_desc)
    elif args.command == "one":
        desc = draw(args.mode, args.seed, args.index)
        print(fp.reproduction(desc))
        result = run_one(desc)
        print(result["status"], result.get("message", "")[:2000], result.get("traceback", ""))
    elif args.command == "check-desc":
        result = run_one(eval(args.out_or_desc))  # noqa: S307 - our own descriptions
        print(result["status"])


if __name__ == "__main__":
    main()
