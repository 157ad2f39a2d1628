"""Run by tests/test_distributed.py: two CPU processes (gloo) train one step of a small attention block built on
aref.nn inside DistributedDataParallel (`ddp`) and FSDP2's fully_shard (`fsdp`); rank 0 writes each one's gradients
and updated weights to a file, which the test compares with a single-process torch reference.

    python tests/distributed_check.py OUT.pt [ddp] [fsdp]
"""
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

E, H, S, BATCH, WORLD = 128, 2, 64, 4, 2


class Block(torch.nn.Module):
    """x + out(attention(qkv(x))): causal self-attention, (batch, seq, E) in and out."""

    def __init__(self, use_aref: bool):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.qkv = torch.nn.Parameter((torch.randn(3 * E, E, generator=g) / E ** 0.5).half())
        self.qkv_bias = torch.nn.Parameter((torch.randn(3 * E, generator=g) * 0.1).half())
        self.out = torch.nn.Parameter((torch.randn(E, E, generator=g) / E ** 0.5).half())
        self.use_aref = use_aref

    def forward(self, x):
        import aref.nn
        lin = aref.nn.linear if self.use_aref else torch.nn.functional.linear
        b, s, _ = x.shape
        qkv = lin(x, self.qkv, self.qkv_bias).view(b, s, 3, H, E // H).permute(2, 0, 3, 1, 4)
        if self.use_aref:
            a = aref.nn.attention(qkv[0], qkv[1], qkv[2], causal=True)
        else:
            a = torch.nn.functional.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], is_causal=True)
        return x + lin(a.transpose(1, 2).reshape(b, s, E), self.out)


def batch():
    g = torch.Generator().manual_seed(1)
    return torch.randn(BATCH, S, E, generator=g).half(), torch.randn(BATCH, S, E, generator=g).half()


def loss_of(model, x, target):
    return ((model(x).float() - target.float()) ** 2).mean()


def train_step(rank: int, mode: str) -> dict:
    model = Block(use_aref=True)
    if mode == "fsdp":
        from torch.distributed.fsdp import fully_shard
        fully_shard(model)
    else:
        model = torch.nn.parallel.DistributedDataParallel(model)
    x, target = batch()
    shard = slice(rank * BATCH // WORLD, (rank + 1) * BATCH // WORLD)
    loss_of(model, x[shard], target[shard]).backward()
    grads = {n: p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad.clone()
             for n, p in model.named_parameters()}
    torch.optim.SGD(model.parameters(), lr=0.1).step()
    weights = {n: p.full_tensor() if hasattr(p, "full_tensor") else p.detach().clone()
               for n, p in model.named_parameters()}
    return {"grads": {n.removeprefix("module."): g for n, g in grads.items()},
            "weights": {n.removeprefix("module."): w.detach() for n, w in weights.items()}}


def worker(rank: int, init: str, out: str, modes: list) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=WORLD)
    results = {mode: train_step(rank, mode) for mode in modes}
    if rank == 0:
        torch.save(results, out)
    dist.destroy_process_group()


def main() -> None:
    out, modes = sys.argv[1], sys.argv[2:] or ["ddp"]
    init = "file://" + out + ".rendezvous"
    mp.spawn(worker, args=(init, out, modes), nprocs=WORLD, join=True)


if __name__ == "__main__":
    main()
