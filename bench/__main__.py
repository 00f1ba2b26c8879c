"""`python -m bench [--quick] [--only NAME ...]`: runs the benchmarks and writes bench/RESULTS.md.

A full run (no options that narrow or shorten it) writes bench/RESULTS.md and its figures to
bench/RESULTS.json; a partial one prints its Markdown unless --out is given, so that a smoke run never
overwrites the committed results. `--only NAME --update` re-measures sections of the committed
results (a full run takes about an hour on a shared 2-core machine) and says so in them.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import shlex
import sys
from pathlib import Path

import torch

from . import compiled, finetune_step, inference, prepare, pretrain_step, profiling, tokenization
from .common import (
    GEMM_SHAPES,
    ROOT,
    CpuMonitor,
    gemm_peak,
    machine,
    onednn_fp32_peak,
    set_threads,
    wait_for_quiet,
)
from .deploy_report import deploy_markdown
from .report import Options, Section, table, targets

BENCHMARKS = {
    "pretrain": pretrain_step.run,
    "compile": compiled.run,
    "inference": inference.run,
    "finetune": finetune_step.run,
    "tokenizer": tokenization.run,
    "prepare": prepare.run,
    "profile": profiling.run,
}
RESULTS = ROOT / "bench" / "RESULTS.md"
RESULTS_JSON = RESULTS.with_suffix(".json")

METHOD = """\
- **Alternation.** Both frameworks run in one process with the same config, weights (bertkit's
  `save_pretrained`, then transformers' `from_pretrained` with `attn_implementation="sdpa"`; outputs
  checked equal before timing), batches and precision (fp32, or `torch.autocast("cpu", bfloat16)`).
  They take turns call by call, the order flipped every round, on the same batch each round.
- **Figures.** tok/s counts real (non-[PAD]) tokens: the median over rounds, ± half the inter-quartile
  range. The ratio is the median over rounds of t_transformers / t_bertkit (> 1: bertkit is faster);
  the best-of ratio, min(t_transformers) / min(t_bertkit), compares the least disturbed calls.
- **MFU** = useful FLOPs per second / the measured GEMM peak at that precision. Useful FLOPs, the
  same count for both frameworks (so the ratio of MFUs is the ratio of speeds):
  training = 6 x P_layer x L x N + 12 x L x H x sum(s^2) + 6 x B x (H^2 + 3H + 2) [pooler + NSP]
  + 6 x M x (H^2 + 3H + H V + V) [MLM transform + decoder, masked tokens only];
  inference = 2 x P_layer x L x N + 4 x L x H x sum(s^2) + 2 x B x (H^2 + H) [pooler];
  fine-tuning = the training encoder terms + 6 x B x (H^2 + H + H C + C) [pooler + classifier].
  P_layer = parameters of one encoder layer (4H^2 + 2HI + 9H + I), L layers, N real tokens, s each
  sequence's real length, B sequences, M masked tokens, V vocabulary, C classes. A matmul is 2 FLOPs
  per multiply-add forward and twice that backward (input and weight gradients); attention's QK^T and
  PV are 2 s^2 H each per layer forward, twice that backward. Padding, and MLM logits at unmasked
  positions, are not useful work. Embedding lookups, LayerNorm, softmax etc. count nothing.
- **Peak memory** of a training step: a child process per framework builds the model, optimizer and
  batches, then runs 2 steps; the figure is the peak resident set during those steps (VmHWM, reset
  through /proc/self/clear_refs just before) minus the resident set just before the first step:
  gradients, AdamW's moments, activations saved for backward, logits. (torch keeps no allocator
  statistics on the CPU.)
- **Load.** The machine is shared: before a full run the bench waits (up to 20 min) until other
  processes keep < 0.5 core busy; each section gives how many cores other processes kept busy while
  it ran (from /proc/stat less this process's own CPU time). A round during which other processes kept
  more than 0.4 core busy is discarded and rerun after 10 s (up to 20 times; "rounds" counts them)."""


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="few rounds: a smoke run, not a measurement")
    parser.add_argument("--only", action="append", choices=list(BENCHMARKS), help="run only this benchmark (repeatable)")
    parser.add_argument("--preset", action="append", help="model size(s) for every model benchmark (e.g. tiny)")
    parser.add_argument("--precision", action="append", choices=("fp32", "bf16"), help="default: both")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory child processes")
    parser.add_argument("--no-wait", action="store_true", help="measure at once, even on a busy machine")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, help="Markdown file to write (default: bench/RESULTS.md for a full run)")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON here")
    parser.add_argument("--update", action="store_true",
                        help="re-measure the --only sections of bench/RESULTS.md (and .json), keeping the others")
    parser.add_argument("--render", action="store_true", help="only rewrite bench/RESULTS.md from bench/RESULTS.json")
    return parser.parse_args(argv)


def render(header: dict, sections: dict[str, Section]) -> str:
    lines = [
        "# bertkit vs transformers: benchmarks", "",
        f"Generated by `{header['command']}` on {header['date']}{'' if header['full'] else ' (a partial run)'}.", "",
        "## Machine", "",
        table(["", ""], [[k, v] for k, v in header["machine"].items()]), "",
        f"Load before measuring: 1-minute load average {header['load']['loadavg_1m']:.2f}, other processes busy on "
        f"{header['load']['others_cores']:.2f} cores (after waiting {header['load']['waited_s']:.0f} s); "
        f"at the end: load average {header.get('load_end', float('nan')):.2f}.", "",
        f"GEMM peak, the best of {header['gemm']['repeats']} torch.matmul runs"
        + (" (in bf16 also of the linear layer under autocast)" if header["gemm"].get("bf16_linear") else "") + " of each of "
        + ", ".join(f"({m} x {k}) @ ({k} x {n})" for m, k, n in header["gemm"]["shapes"]) + ": "
        + ", ".join(f"**{p} {v / 1e9:,.0f} GFLOP/s**" for p, v in header["peaks"].items())
        + ". MFU is relative to these. torch runs fp32 matmuls (nn.Linear, torch.matmul) through MKL's sgemm; "
        "oneDNN's fp32 linear (`torch._C._nn.mkldnn_linear`, which nn.Linear does not use) reaches "
        f"**{header['onednn_fp32'] / 1e9:,.0f} GFLOP/s** on the same cores (MKL is known to dispatch AMD CPUs to "
        "narrower kernels than AVX-512), so fp32 MFU against that rate would be "
        f"{header['peaks']['fp32'] / header['onednn_fp32']:.2f} x the figures below.", "",
    ]
    if header["full"] or "pretrain" in sections:
        lines += ["## Targets", "", targets(sections), ""]
    for s in sections.values():
        lines += [f"## {s.title}", "", s.body, ""]
        if s.note:
            lines += [f"_{s.note}_", ""]
        if s.load:
            lines += [f"_Other processes kept {s.load['others_cores']:.2f} cores busy on average during this section "
                      f"(load average {s.load['loadavg_start']:.2f} at its start, {s.load['seconds']:.0f} s)._", ""]
    deploy = deploy_markdown()  # bench/quantize.py's and bench/serve.py's latest results, each with its own machine
    if deploy:
        lines += [deploy]
    lines += ["## Method", "", METHOD, ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = parse(argv)
    if args.render:
        saved = json.loads(RESULTS_JSON.read_text())
        RESULTS.write_text(render(saved["header"], {k: Section(**v) for k, v in saved["sections"].items()}))
        return
    set_threads(args.threads)
    opts = Options(quick=args.quick, presets=tuple(args.preset) if args.preset else None,
                   precisions=tuple(args.precision or ("fp32", "bf16")), batch_size=args.batch_size,
                   seq_len=args.seq_len, memory=not args.no_memory)
    full = (not (args.quick or args.only or args.preset or args.precision or args.no_memory)
            and (args.batch_size, args.seq_len, args.threads) == (32, 128, 2))
    if args.update and not (args.only and RESULTS_JSON.exists()):
        sys.exit("--update needs --only NAME and the results of a full run in bench/RESULTS.json")
    out = args.out or (RESULTS if full or args.update else None)

    def log(message: str) -> None:
        print(f"[bench {datetime.datetime.now():%H:%M:%S}] {message}", file=sys.stderr, flush=True)

    quiet = wait_for_quiet(max_wait_s=0 if args.quick or args.no_wait else 1200, sample_s=1 if args.quick else 10, log=log)
    # a smoke run measures a smaller matmul, twice: its MFUs are rough
    gemm = {"repeats": 2, "shapes": ((2048, 1024, 2048),)} if args.quick else {"repeats": 8, "shapes": GEMM_SHAPES}
    gemm["bf16_linear"] = True  # gemm_peak in bf16 takes the better of torch.matmul and autocast's linear
    peaks = {p: gemm_peak(dtype, gemm["repeats"], gemm["shapes"]) for p, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16))}
    onednn = onednn_fp32_peak(gemm["repeats"])
    log("GEMM peak: " + ", ".join(f"{p} {v / 1e9:,.0f} GFLOP/s" for p, v in peaks.items())
        + f"; oneDNN fp32 linear {onednn / 1e9:,.0f} GFLOP/s")
    command = ("python -m bench " + shlex.join(argv)).strip()
    date = f"{datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}"
    header = {"command": command, "full": full, "machine": machine(), "load": quiet, "date": date,
              "peaks": peaks, "gemm": gemm, "onednn_fp32": onednn}
    sections: dict[str, Section] = {}
    if args.update:
        saved = json.loads(RESULTS_JSON.read_text())
        header, sections = saved["header"], {k: Section(**v) for k, v in saved["sections"].items()}
    for i, name in enumerate(args.only or BENCHMARKS):
        if i and not (args.quick or args.no_wait):
            wait_for_quiet(max_wait_s=300, poll_s=60, log=log)
        monitor, load = CpuMonitor(), os.getloadavg()[0]
        section = BENCHMARKS[name](opts, peaks, log)
        section.load = {"others_cores": monitor.others(), "loadavg_start": load, "seconds": monitor.elapsed()}
        if args.update:
            section.note = (f"Re-measured by `{command}` on {date} (GEMM peak then: "
                            + ", ".join(f"{p} {v / 1e9:,.0f} GFLOP/s" for p, v in peaks.items()) + ").")
        sections[name] = section
        header["load_end"] = os.getloadavg()[0]
        if out:  # after every section, so that a long run's results survive an interruption
            out.write_text(render(header, sections))
            if out == RESULTS:
                write_json(RESULTS_JSON, header, sections)
    if out:
        log(f"wrote {out}")
    else:
        print(render(header, sections))
    if args.json:
        write_json(args.json, header, sections)


def write_json(path: Path, header: dict, sections: dict[str, Section]) -> None:
    data = {"header": header, "sections": {k: dataclasses.asdict(s) for k, s in sections.items()}}
    path.write_text(json.dumps(data, indent=1, default=str) + "\n")


if __name__ == "__main__":
    main()
