"""Pipeline stages as data: the layers of each stage and model chunk, and the micro-batches in flight on each
rank under Megatron-Core's 1F1B and interleaved 1F1B orders (what a rank holds, not what it costs; the
schedule's time is :mod:`costmodel.compose.schedule`)."""

from __future__ import annotations

from functools import lru_cache


from costmodel.spec.errors import SpecError


def in_flight_chunks(p: int, m: int, v: int, stage: int, extra: int = 0) -> int:
    """Model chunks whose activations a stage holds at its peak (each chunk is ``L/(p*v)`` layers).

    1F1B: stage ``i`` holds ``p - i`` micro-batches (Narayanan et al. 2021, section 2.2.1).
    Interleaved: Megatron-LM's warm-up count ``2 (p - i - 1) + (v - 1) p`` plus the one in
    flight (``megatron/core/pipeline_parallel/schedules.py``), which for stage 0 gives
    Korthikanti et al. 2023's ``p (1 + (p-1)/(p v))`` micro-batches of a full stage.

    ``extra`` warm-up forwards more: Megatron-Core's combined 1F1B schedule (``ParallelConfig.ep_overlap``)
    runs one under a pipeline (``schedules.py@d98e8a6``: "we schedule one extra micro-batch forward step
    before the 1f1b stages"). Without a pipeline it adds none: the next micro-batch's forward builds its
    layers as this one's backward frees them (``combined_1f1b_schedule_for_no_pipelining``, layer by layer),
    one micro-batch and one layer at the peak, the layer not counted.

    >>> in_flight_chunks(8, 64, 1, 0), in_flight_chunks(8, 64, 1, 7), in_flight_chunks(4, 16, 2, 0)
    (8, 1, 11)
    >>> in_flight_chunks(1, 64, 1, 0, extra=1), in_flight_chunks(4, 16, 2, 0, extra=1)
    (1, 12)
    """
    if p == 1:
        return 1 * v if v > 1 else 1
    if v == 1:
        return min(p - stage + extra, m)
    return min(2 * (p - stage - 1) + (v - 1) * p + 1 + extra, m * v)


def warmup_forwards(p: int, m: int, v: int, stage: int, extra: int = 0) -> int:
    """Forwards ``stage`` runs before its first backward (Megatron-LM ``get_num_warmup_microbatches``
    in ``megatron/core/pipeline_parallel/schedules.py``): ``p - s - 1`` for 1F1B,
    ``2 (p - s - 1) + (v - 1) p`` interleaved, at most all ``m v`` of them.

    >>> [warmup_forwards(4, 8, 1, s) for s in range(4)], [warmup_forwards(4, 8, 2, s) for s in range(4)]
    ([3, 2, 1, 0], [10, 8, 6, 4])
    """
    w = p - stage - 1 if v == 1 else 2 * (p - stage - 1) + (v - 1) * p
    return min(w + extra, m * v)


@lru_cache(maxsize=4096)
def in_flight_profile(p: int, m: int, v: int, stage: int, extra: int = 0) -> tuple[tuple[int, ...], ...]:
    """Micro-batches whose activations each of ``stage``'s ``v`` model chunks holds, at every peak
    of its schedule (right after a forward), the dominated ones dropped.

    Megatron-LM's (interleaved) 1F1B order (``schedules.py``): :func:`warmup_forwards` forwards,
    then one forward and one backward alternately, then the remaining backwards; forward ``k`` runs
    chunk ``(k // p) % v`` and backward ``k`` chunk ``v - 1 - (k // p) % v``. A stage's activation
    peak is the largest ``sum_c profile[c] * bytes_c`` over the returned vectors; with equal chunks
    it is :func:`in_flight_chunks` chunks (stage 0's first chunk holds up to ``2p`` micro-batches, its
    others ``p``).

    >>> in_flight_profile(4, 16, 2, 0), in_flight_profile(4, 16, 2, 3), in_flight_profile(8, 64, 1, 0)
    (((8, 3), (7, 4)), ((5, 0), (4, 1)), ((8,),))
    >>> in_flight_profile(4, 16, 2, 0, extra=1), in_flight_profile(1, 8, 1, 0, extra=1)  # (in_flight_chunks)
    (((8, 4),), ((1,),))
    """
    T = m * v
    W = warmup_forwards(p, m, v, stage, extra if p > 1 else 0)
    held = [0] * v
    for k in range(W):  # the warm-up only adds: its last vector dominates every earlier one
        held[(k // p) % v] += 1
    seen = {tuple(held)} if W else set()
    # the steady state repeats every p v forwards; two periods see every vector it reaches
    for k in range(min(T - W, 2 * p * v + 1)):
        held[((W + k) // p) % v] += 1
        seen.add(tuple(held))
        held[v - 1 - (k // p) % v] -= 1
    if W == T:
        seen.add(tuple(held))
    # a vector that dominates another has the larger sum, so it comes first: only kept ones can dominate
    # (O(n k v) for n vectors seen and k kept; the all-pairs filter cost GPT-1T's search 0.5 s, issue 37)
    kept = []
    for a in sorted(seen, key=sum, reverse=True):
        if not any(all(x >= y for x, y in zip(b, a)) for b in kept):
            kept.append(a)
    return tuple(sorted(kept, reverse=True))


def stage_layers(layers: int, p: int, stage: int, split: tuple[int, ...] | None = None) -> range:
    """Layer indices held by ``stage``: a uniform split, or ``split[i]`` layers on stage ``i``
    (interleaving changes the order in which they run, not how many there are).

    >>> stage_layers(8, 2, 1), stage_layers(8, 2, 1, (5, 3))
    (range(4, 8), range(5, 8))
    """
    if split is None:
        per = layers // p
        return range(stage * per, (stage + 1) * per)
    start = sum(split[:stage])
    return range(start, start + split[stage])


def chunk_layers(n: int, vp: int, stage: int, pp: int) -> tuple[int, ...]:
    """Layers in each of the ``vp`` model chunks of a stage that holds ``n`` layers, in chunk order.

    As even as possible; where ``vp`` does not divide ``n`` the shorter chunks sit where
    Megatron-Core puts the embedding and the loss: first on stage 0 (its first virtual stage
    holds the embedding), last on every other stage (the last virtual stage of the last stage
    holds the loss). This is what ``--account-for-embedding-in-pipeline-split`` /
    ``--account-for-loss-in-pipeline-split`` build (``transformer_block.get_num_layers_to_build``:
    one layer fewer in the first / last virtual stage); with ``vp`` dividing ``n`` it is
    Megatron's even split. A chunk may hold no layer (Megatron's layout allows empty virtual
    stages) when ``n < vp``.

    >>> chunk_layers(8, 4, 3, 8), chunk_layers(15, 8, 0, 8), chunk_layers(15, 8, 7, 8)
    ((2, 2, 2, 2), (1, 2, 2, 2, 2, 2, 2, 2), (2, 2, 2, 2, 2, 2, 2, 1))
    >>> chunk_layers(6, 4, 7, 8), chunk_layers(3, 4, 0, 2)
    ((2, 2, 1, 1), (0, 1, 1, 1))
    """
    base, extra = divmod(n, vp)
    if stage == 0:
        return (base,) * (vp - extra) + (base + 1,) * extra
    return (base + 1,) * extra + (base,) * (vp - extra)


def megatron_split(
    layers: int,
    pp: int,
    vp: int = 1,
    *,
    first: int | None = None,
    last: int | None = None,
    embedding: bool = False,
    loss: bool = False,
) -> tuple[int, ...] | None:
    """Transformer layers per pipeline stage as Megatron-Core places them (``None``: even, no flag).

    ``first`` / ``last``: ``--decoder-first-pipeline-num-layers`` / ``--decoder-last-pipeline-num-layers``
    (each > 0 and a multiple of ``vp``; the remaining layers divide evenly over the middle stages,
    each a multiple of ``vp``). ``embedding`` / ``loss``: ``--account-for-embedding-in-pipeline-split``
    / ``--account-for-loss-in-pipeline-split`` (each counts as one layer: ``layers + e + l`` divisible
    by ``pp``, per-rank count by ``vp``; the first (last) stage holds one transformer layer fewer).
    The rules are Megatron-Core's ``TransformerConfig.__post_init__`` and
    ``megatron/training/arguments.py``; a broken rule raises :class:`SpecError` naming it.

    >>> megatron_split(126, 16, embedding=True, loss=True)[:2], megatron_split(126, 8, 8, embedding=True, loss=True)
    ((7, 8), (15, 16, 16, 16, 16, 16, 16, 15))
    >>> megatron_split(61, 8, 1, first=6, last=7)
    (6, 8, 8, 8, 8, 8, 8, 7)
    >>> megatron_split(61, 8, 4, first=5)
    Traceback (most recent call last):
    ...
    costmodel.spec.errors.SpecError: first_stage_layers=5: must be a positive multiple of vp=4 (Megatron-Core: first-stage layers divisible by the virtual pipeline size)
    """
    given_fl = first is not None or last is not None
    if given_fl and (embedding or loss):
        raise SpecError(
            "first_stage_layers" if first is not None else "last_stage_layers",
            first if first is not None else last,
            "unset with --account-for-embedding/--account-for-loss (Megatron-Core refuses both)",
        )
    if not given_fl and not (embedding or loss):
        return None
    if pp == 1:
        raise SpecError("pp", pp, "greater than 1 with an uneven pipeline split")
    if given_fl:
        rest, middle, out = layers, pp, {}
        for name, v, idx in (("first_stage_layers", first, 0), ("last_stage_layers", last, pp - 1)):
            if v is None:
                continue
            if v < 1 or v % vp:
                raise SpecError(
                    name,
                    v,
                    f"a positive multiple of vp={vp} (Megatron-Core: {name.split('_')[0]}-stage "
                    "layers divisible by the virtual pipeline size)",
                )
            out[idx] = v
            rest -= v
            middle -= 1
        if middle == 0 and rest != 0 or middle > 0 and (rest <= 0 or rest % middle or (rest // middle) % vp):
            raise SpecError(
                "first_stage_layers" if first is not None else "last_stage_layers",
                first if first is not None else last,
                f"such that the remaining {rest} of layers={layers} divide evenly over the {middle} middle "
                f"stages, each a positive multiple of vp={vp} (Megatron-Core's uneven pipeline rule)",
            )
        per = rest // middle if middle else 0
        return tuple(out.get(i, per) for i in range(pp))
    total = layers + int(embedding) + int(loss)
    what = "+".join(["layers"] + ["embedding"] * embedding + ["loss"] * loss)
    if total % pp or (total // pp) % vp:
        raise SpecError(
            "layers",
            layers,
            f"such that {what} = {total} divides by pp={pp} into a multiple of vp={vp} "
            "per stage (Megatron-Core --account-for-*-in-pipeline-split)",
        )
    per = total // pp
    out = [per] * pp
    out[0] -= int(embedding)
    out[-1] -= int(loss)
    if min(out) < 1:
        raise SpecError("layers", layers, f"at least one transformer layer per stage (pp={pp} leaves a stage empty)")
    return tuple(out)
