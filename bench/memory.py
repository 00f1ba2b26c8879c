"""Peak memory of training steps, one framework per process: `python -m bench.memory pretrain --side bertkit ...`
prints one JSON line {"step_mib", "peak_mib", "before_mib", "method"}.

The child builds the model, its optimizer and the batches, drops the other framework's twin, then
measures the peak resident memory of a few steps above the resident memory just before the first
(common.peak_rss). That is what a training step costs on top of the weights: gradients, AdamW's two
moments (allocated by the first step), activations kept for backward and the logits. torch has no
allocator statistics for the CPU, hence the process-level measure, in a fresh process per side.
"""

from __future__ import annotations

import argparse
import gc
import json

from .common import BK, HF, peak_rss, set_threads


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.memory")
    parser.add_argument("task", choices=("pretrain", "finetune"))
    parser.add_argument("--side", choices=(BK, HF), required=True)
    parser.add_argument("--preset", required=True, help="a bertkit preset, or MiniLM-L6 (finetune)")
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    set_threads(args.threads)

    if args.task == "pretrain":
        from bertkit import BertConfig

        from .data import pretraining_batches
        from .models import twins
        from .pretrain_step import loss_of, training_step

        cfg = BertConfig.preset(args.preset)
        batches = pretraining_batches(args.steps, args.batch_size, args.seq_len, cfg.vocab_size)
        bk, hf = twins("pretraining", cfg)
        loss = loss_of
    else:
        from .finetune_step import batches as finetune_batches
        from .finetune_step import build, classification_loss
        from .pretrain_step import training_step

        batches = finetune_batches(args.batch_size, args.steps)
        bk, hf, _ = build(args.preset)
        loss = classification_loss
    model = bk if args.side == BK else hf
    del bk, hf
    step = training_step(args.side, model, batches, args.precision, loss)
    gc.collect()
    with peak_rss() as memory:
        for i in range(args.steps):
            step(i)
    print(json.dumps(memory))


if __name__ == "__main__":
    main()
