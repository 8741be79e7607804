"""Writes token shards as nanoGPT and llm.c write them, and the windows numpy cuts from them.

usage: token_shards.py DIR BLOCK

DIR/nanogpt/train.bin   raw uint16 (nanoGPT's prepare.py: np.array(ids, np.uint16).tofile)
DIR/llmc/shard_00000{0,1}.bin   llm.c's uint16 files (magic 20240520, version 1)
DIR/llmc32/shard_000000.bin     llm.c's uint32 file (magic 20240801, version 7), tokens >= 65536
DIR/<case>.windows      every window of BLOCK + 1 tokens at stride BLOCK, file by file in name
                        order, as int64 (numpy's slices of np.memmap)
DIR/<case>.vocab        the vocabulary the case's tokens are below
"""
import glob
import os
import sys

import numpy as np


def llmc(path, tokens, magic, version, dtype):
    header = np.zeros(256, dtype=np.int32)
    header[0], header[1], header[2] = magic, version, len(tokens)
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(np.asarray(tokens, dtype=dtype).tobytes())


def windows(files, block, header_bytes, dtype):
    out = []
    for path in sorted(files):
        toks = np.memmap(path, dtype=dtype, mode="r", offset=header_bytes)
        for i in range((len(toks) - 1) // block):
            out.append(np.asarray(toks[i * block : i * block + block + 1], dtype=np.int64))
    return np.stack(out)


def main():
    root, block = sys.argv[1], int(sys.argv[2])
    rng = np.random.default_rng(7)
    cases = {
        "nanogpt": (50257, 0, np.uint16, [3001]),
        "llmc": (50257, 1024, np.uint16, [2050, 1777]),
        "llmc32": (128256, 1024, np.uint32, [2500]),
    }
    for name, (vocab, header, dtype, counts) in cases.items():
        os.makedirs(os.path.join(root, name), exist_ok=True)
        for i, n in enumerate(counts):
            tokens = rng.integers(0, vocab, size=n).astype(dtype)
            if name == "nanogpt":
                tokens.tofile(os.path.join(root, name, "train.bin"))
            elif dtype == np.uint16:
                llmc(os.path.join(root, name, f"shard_{i:06d}.bin"), tokens, 20240520, 1, dtype)
            else:
                tokens[0] = vocab - 1  # surely above uint16's range
                llmc(os.path.join(root, name, f"shard_{i:06d}.bin"), tokens, 20240801, 7, dtype)
        files = glob.glob(os.path.join(root, name, "*.bin"))
        windows(files, block, header, dtype).tofile(os.path.join(root, name + ".windows"))
        with open(os.path.join(root, name + ".vocab"), "w") as f:
            f.write(str(vocab))
    print("OK")


if __name__ == "__main__":
    main()
