"""Training throughput of the VQC (samples per second): one broadcast simulation per mini-batch
vs a loop over samples vs lightning.qubit with the adjoint method.

    python benchmarks/vqc_speed.py                  # 6 and 10 qubits, 4 layers, batch 32
    python benchmarks/vqc_speed.py --qubits 6 --layers 2 --min-seconds 2

Each measurement is full training steps (forward, cross-entropy, backward, Adam step) on random
inputs of 2^n features, after one warm-up step; it repeats steps until ``--min-seconds``.

* ``batched``: ``default.qubit`` + backprop, the whole (B, 2^n) batch in one call (PennyLane
  parameter broadcasting) - what flowerbed trains with;
* ``per-sample``: the same device and method, one circuit call per sample, outputs stacked,
  one backward;
* ``lightning``: ``lightning.qubit`` + adjoint, the whole batch in one call (PennyLane expands
  it into one tape per sample).
"""

from __future__ import annotations

import argparse
import time

import torch

from flowerbed.models.vqc import build_vqc


def per_sample(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    return torch.cat([model(x[i : i + 1]) for i in range(len(x))])


def samples_per_second(
    model, forward, batch: int, dim: int, classes: int, min_seconds: float
) -> float:
    x, y = torch.randn(batch, dim), torch.randint(0, classes, (batch,))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)

    def step():
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(forward(model, x), y).backward()
        optimizer.step()

    step()  # warm-up
    steps, start = 0, time.perf_counter()
    while True:
        step()
        steps += 1
        elapsed = time.perf_counter() - start
        if elapsed >= min_seconds:
            return steps * batch / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--qubits", type=int, nargs="+", default=[6, 10])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--min-seconds", type=float, default=5.0)
    args = parser.parse_args()
    torch.manual_seed(0)
    print(
        f"VQC training throughput, {args.layers} layers, batch {args.batch}, "
        f"{torch.get_num_threads()} torch threads (samples/s; higher is better)\n"
    )
    print(
        "| qubits | batched (default.qubit, backprop) | per-sample loop | lightning.qubit adjoint"
        " | batched / per-sample | batched / lightning |"
    )
    print("|---|---|---|---|---|---|")
    for n in args.qubits:
        dim = 2**n

        def model(device="default.qubit", dim=dim, n=n):
            torch.manual_seed(0)
            return build_vqc((dim,), args.classes, qubits=n, layers=args.layers, device=device)

        batched = samples_per_second(
            model(), lambda m, x: m(x), args.batch, dim, args.classes, args.min_seconds
        )
        looped = samples_per_second(
            model(), per_sample, args.batch, dim, args.classes, args.min_seconds
        )
        lightning = samples_per_second(
            model("lightning.qubit"),
            lambda m, x: m(x),
            args.batch,
            dim,
            args.classes,
            args.min_seconds,
        )
        print(
            f"| {n} | {batched:.1f} | {looped:.1f} | {lightning:.1f} | {batched / looped:.1f}x"
            f" | {batched / lightning:.1f}x |",
            flush=True,
        )


if __name__ == "__main__":
    main()
