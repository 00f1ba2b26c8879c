"""Model names from the Hugging Face Hub (`bert-base-chinese`, `google-bert/bert-base-uncased`) wherever a
model folder is taken, resolved through huggingface_hub and its cache.

A name that is not a local folder is looked up the way transformers does: in the cache (`HF_HOME`,
`HF_HUB_CACHE`), downloading what is missing unless `HF_HUB_OFFLINE=1`. A revision (branch, tag or
commit) pins what is used. Only the files a BERT folder needs are fetched: the config, the weights
(safetensors, else PyTorch's), the tokenizer files, and bertkit's task file and ONNX graph when the
model was made by bertkit.
"""

from __future__ import annotations

import re
from pathlib import Path

from .errors import BertkitError

# `name` or `org/name`, as the Hub spells them; a relative path with more parts is never a Hub name
_HUB_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")
_WANTED = ["config.json", "*.safetensors", "*.safetensors.index.json", "vocab.txt", "tokenizer.json",
           "tokenizer_config.json", "special_tokens_map.json", "bertkit_task.json", "model.onnx", "export.json"]


def is_hub_name(name: str | Path) -> bool:
    return bool(_HUB_NAME.match(str(name))) and not str(name).endswith((".json", ".txt", ".tsv", ".csv", ".jsonl"))


def resolve_model(name: str | Path, revision: str | None = None) -> Path:
    """Gives the local folder of `name`: the folder itself when there is one, else the Hub model of that name
    from the cache (downloaded when missing and allowed). Anything else is a one-line BertkitError."""
    path = Path(name)
    if path.exists() or not is_hub_name(name):
        if revision is not None:
            raise BertkitError(f"{name}: --revision is for Hugging Face model names, not local folders")
        return path
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError, RepositoryNotFoundError, RevisionNotFoundError

    where = f"{name}{'@' + revision if revision else ''}"
    try:
        folder = Path(snapshot_download(str(name), revision=revision, allow_patterns=_WANTED))
    except LocalEntryNotFoundError:
        offline = "HF_HUB_OFFLINE is set, so nothing is downloaded" if constants.HF_HUB_OFFLINE else "and the Hub cannot be reached"
        raise BertkitError(f"{where}: no such model folder, and no Hugging Face model of that name in the cache "
                           f"({constants.HF_HUB_CACHE}); {offline}") from None
    except RevisionNotFoundError:
        raise BertkitError(f"{where}: the Hugging Face model has no revision {revision!r}") from None
    except RepositoryNotFoundError:
        raise BertkitError(f"{name}: no such model folder, and no Hugging Face model of that name") from None
    except OSError as e:  # the network, or the cache folder
        raise BertkitError(f"{where}: no such model folder, and the Hugging Face model could not be fetched ({e})") from None
    if not (folder / "config.json").is_file():
        raise BertkitError(f"{where}: the Hugging Face model has no config.json (is it a BERT model?)")
    return folder

