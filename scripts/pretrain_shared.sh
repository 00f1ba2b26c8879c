#!/usr/bin/env bash
# The CPU pre-training runs behind docs/pretraining.md: a vocabulary trained by bertkit, Google-style
# instances, then about 17 minutes of tiny-BERT pre-training, for English and for Chinese.
#   scripts/pretrain_shared.sh en|zh [RUNS_DIR]
set -euo pipefail
lang=$1
runs=${2:-runs}/pretrain-$lang
data=$(dirname "$0")/../../shared/data/pretrain/$lang
vocab_size=$([ "$lang" = en ] && echo 16000 || echo 12000)
bertkit vocab --input "$data" --vocab-size "$vocab_size" --out "$runs/vocab" --on-error skip
bertkit prepare --input "$data" --vocab "$runs/vocab" --out "$runs/data" --max-seq-length 128 --eval-fraction 0.02 --seed 12345
bertkit pretrain --data "$runs/data" --out "$runs/run" --preset tiny --steps 7000 --batch-size 32 --lr 1e-3 \
  --precision bf16 --seed 0 model.init=local optim.warmup=0.05 model.hidden_dropout_prob=0 model.attention_probs_dropout_prob=0 \
  log.eval_every=500 data.eval_batches=16 log.progress=false
bertkit plot "$runs/run" --out "$runs/pretrain-$lang.png"
