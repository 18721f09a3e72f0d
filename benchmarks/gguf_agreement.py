"""How often a GGUF file's greedy tokens in llama.cpp are ours, for each of its types.

What: a trained language-model run (``RUN``) is exported with ``export-gguf`` in f32, f16
and q8_0 and read by llama.cpp (``llama-cpp-python``, an f32 key/value cache, two
threads). Prompts are ``--prompts`` windows of 16 tokens taken at even steps through the
validation text of the run's dataset; after each, our model decodes 40 greedy tokens
(``scratchformer.inference.generate``). llama.cpp then reads each prompt with our tokens
after it in one pass, and its argmax at each of those positions is compared with our
token there (teacher-forced, so that one disagreement does not change the text after it).
Printed: the share of agreeing tokens per type, and the largest logit difference in f32.

Why: f32 must agree everywhere (the tests hold it on tiny runs); q8_0 rounds every weight
matrix to 8 bits in blocks of 32, and the figure says how much of greedy decoding that
changes on a real run (docs/export.md quotes it).

    .venv/bin/python benchmarks/gguf_agreement.py RUN [--prompts 50]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
import torch
from llama_cpp import GGML_TYPE_F32, Llama

from scratchformer.inference import generate
from scratchformer.run import export_gguf, load_run

PROMPT_TOKENS = 16
NEW_TOKENS = 40


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--prompts", type=int, default=50)
    args = parser.parse_args()
    torch.set_num_threads(2)
    task, model = load_run(args.run)
    tokenizer = task.tokenizer()
    text = "".join(task.lines("val"))
    ids = tokenizer.encode(text)
    step = (len(ids) - PROMPT_TOKENS) // args.prompts
    prompts = [ids[i * step : i * step + PROMPT_TOKENS] for i in range(args.prompts)]
    ours = [generate(model, [p], max_new_tokens=NEW_TOKENS, greedy=True)[0] for p in prompts]
    with tempfile.TemporaryDirectory() as directory:
        for kind in ("f32", "f16", "q8_0"):
            path = Path(directory) / f"{kind}.gguf"
            export_gguf(args.run, path, kind)
            llama = Llama(
                model_path=str(path),
                n_ctx=PROMPT_TOKENS + NEW_TOKENS,
                n_threads=2,
                logits_all=True,
                type_k=GGML_TYPE_F32,
                type_v=GGML_TYPE_F32,
                verbose=False,
            )
            agree, largest = 0, 0.0
            for prompt, mine in zip(prompts, ours, strict=True):
                llama.reset()
                llama.eval(prompt + mine)
                theirs = np.array(llama.scores[: len(prompt) + len(mine)])
                agree += int((theirs[len(prompt) - 1 : -1].argmax(-1) == np.array(mine)).sum())
                with torch.no_grad():
                    logits = model(torch.tensor([prompt + mine])).logits[0].numpy()
                largest = max(largest, float(np.abs(theirs - logits).max()))
            llama.close()
            total = sum(len(mine) for mine in ours)
            size = path.stat().st_size / 2**20
            print(
                f"{kind:>5}: {agree}/{total} = {agree / total:.1%} of our greedy tokens, "
                f"largest logit difference {largest:.2g}, {size:.2f} MiB"
            )


if __name__ == "__main__":
    main()
