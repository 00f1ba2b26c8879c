"""The `bertkit` command line: argument parsing only; the work happens in the library.

Every command answers bad input with one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from .errors import BertkitError

Command = Callable[[argparse.Namespace], int | None]


def cmd_tokenize(args: argparse.Namespace) -> None:
    from .tokenizer import Tokenizer

    tok = Tokenizer.from_pretrained(args.vocab)
    texts = args.text or [line.rstrip("\n") for line in sys.stdin]
    for text in texts:
        enc = tok.encode(text, args.pair, max_length=args.max_length, truncation=args.max_length is not None)
        row = {"tokens": enc.tokens, "ids": enc.ids, "token_type_ids": enc.token_type_ids}
        if args.offsets:
            row["offsets"] = [list(o) for o in enc.offsets]
        print(json.dumps(row, ensure_ascii=False))


def cmd_vocab(args: argparse.Namespace) -> None:
    from .tokenizer import Tokenizer

    tok = Tokenizer.train_from_files(
        args.input, args.vocab_size, min_frequency=args.min_frequency, lowercase=not args.cased, show_progress=True
    )
    tok.save_pretrained(args.out)
    print(f"wrote {args.out}/vocab.txt ({tok.vocab_size} tokens, {'cased' if args.cased else 'uncased'})")


def cmd_info(args: argparse.Namespace) -> None:
    from .heads import load_model, parameter_counts

    model = load_model(args.model)
    cfg = model.config
    print(f"{args.model}: {type(model).__name__}")
    for key, value in cfg.to_dict().items():
        if key not in ("model_type", "architectures", "label2id", "tie_word_embeddings", "position_embedding_type"):
            print(f"  {key:30} {value}")
    print("parameters:")
    counts = parameter_counts(model)
    for part, n in counts.items():
        print(f"  {part:30} {n:>14,}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="bertkit", description="BERT pre-training, fine-tuning and checkpoints.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log more detail")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("tokenize", help="text -> WordPiece tokens and ids (JSON lines)",
                       description="Tokenize texts given as arguments, or one per line from stdin.")
    p.add_argument("text", nargs="*", help="texts to tokenize (default: lines of stdin)")
    p.add_argument("--vocab", required=True, type=Path, help="folder with vocab.txt (a model or vocabulary folder)")
    p.add_argument("--pair", help="a second text, encoded as segment B")
    p.add_argument("--max-length", type=int, help="truncate to this many tokens, specials included")
    p.add_argument("--offsets", action="store_true", help="also print character offsets into the text")
    p.set_defaults(func=cmd_tokenize)

    p = sub.add_parser("vocab", help="train a WordPiece vocabulary from text files",
                       description="Train a WordPiece vocabulary; writes OUT/vocab.txt and OUT/tokenizer_config.json.")
    p.add_argument("--input", required=True, nargs="+", type=Path, help="text files or folders (.txt, .gz)")
    p.add_argument("--vocab-size", required=True, type=int, help="number of tokens, specials included")
    p.add_argument("--out", required=True, type=Path, help="output folder")
    p.add_argument("--cased", action="store_true", help="keep case and accents (default: lower-case, strip accents)")
    p.add_argument("--min-frequency", type=int, default=2, help="minimum count of a merged piece (default 2)")
    p.set_defaults(func=cmd_vocab)

    p = sub.add_parser("info", help="a model folder's config and parameter counts by part",
                       description="Print a model folder's config and its parameter counts by part.")
    p.add_argument("model", type=Path, help="model folder (config.json + model.safetensors)")
    p.set_defaults(func=cmd_info)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="bertkit: %(message)s")
    try:
        return args.func(args) or 0
    except BertkitError as e:
        print(f"bertkit: error: {e}", file=sys.stderr)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError) as e:
        print(f"bertkit: error: {e.filename}: {e.strerror}", file=sys.stderr)
    except KeyboardInterrupt:
        print("bertkit: interrupted", file=sys.stderr)
        return 130
    return 2


if __name__ == "__main__":
    sys.exit(main())
