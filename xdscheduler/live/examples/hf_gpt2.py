"""A Hugging Face `transformers` GPT-2 as a live job (`scenarios/jobs/hf-gpt2.yaml`): built from
a config of the job's `model:` shape (no weights downloaded), trained on generated tokens (the
built-in Markov corpus), with nothing of the live plane but the plan's calls. Needs the `hf`
extra (`pip install -e '.[hf]'`) on the cluster's nodes."""

from __future__ import annotations

import time


def train(plan) -> None:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from xdscheduler.live.gpt import MarkovCorpus

    shape, dropout = plan.model, float(plan.config.get("dropout", 0.0))
    config = GPT2Config(
        vocab_size=shape.vocab,
        n_positions=shape.seq,
        n_embd=shape.hidden,
        n_layer=shape.layers,
        n_head=shape.heads,
        resid_pdrop=dropout,
        embd_pdrop=dropout,
        attn_pdrop=dropout,
        bos_token_id=shape.vocab - 1,
        eos_token_id=shape.vocab - 1,
    )
    torch.manual_seed(plan.seed)  # every rank builds the same weights; resume broadcasts them
    model = GPT2LMHeadModel(config).to(plan.device)
    opt = torch.optim.AdamW(model.parameters(), lr=plan.lr)
    start = plan.resume(model, opt)
    corpus = MarkovCorpus(shape.vocab, plan.seed)
    for step in range(start, plan.steps):
        # seq tokens a sample (GPT-2 shifts the labels itself)
        tokens = corpus.batch(plan.batch, shape.seq - 1, step, plan.rank).to(plan.device)
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = 0.0
        for part in tokens.split(plan.micro_batch or len(tokens)):
            part_loss = model(input_ids=part, labels=part).loss * (len(part) / len(tokens))
            part_loss.backward()
            loss = loss + part_loss.detach()
        plan.sync_gradients(model)
        opt.step()
        plan.outer_sync(model, step + 1)
        if not plan.step(step + 1, loss, time.perf_counter() - t0, model, opt):
            break
