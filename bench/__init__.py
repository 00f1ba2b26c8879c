"""Side-by-side benchmarks of bertkit against Hugging Face transformers: `python -m bench` (or `./dev bench`).

Each benchmark runs both frameworks in one process on the same config, weights, batches and precision,
alternating them step by step, and reports both throughputs, their ratio and MFU. Results go to
bench/RESULTS.md; bench/common.py documents the timing, FLOP and memory methods.
"""
