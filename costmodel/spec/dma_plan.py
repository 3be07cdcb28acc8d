"""A DMA assignment as data: which engines carry each communication stream of a plan, and its text form
(``--dma``). The rules an assignment must keep and what each choice costs: :mod:`costmodel.physics.comm.dma`.

>>> str(parse("tp+dp:cdma*1, pp:cdma*2"))
'tp+dp:cdma*1,pp:cdma*2'
"""

from __future__ import annotations

from dataclasses import dataclass
from costmodel.spec.errors import SpecError


STREAMS = ("tp", "cp", "ep", "pp", "dp", "zero")


#: the stream that carries each strategy's collectives (SP's AllGather/ReduceScatter are TP's)
STREAM_OF = {"tp": "tp", "sp": "tp", "cp": "cp", "ep": "ep", "pp": "pp", "dp": "dp", "zero": "zero"}


FORMAT = "'<streams>:<class>*<engines>,...', e.g. 'tp:cdma*2,dp:cdma*1,pp:cdma*1' ('tp+dp:cdma*1' shares)"


@dataclass(frozen=True)
class Group:
    """Streams that run on ``engines`` engines of class ``engine`` (alone, or time-sharing them)."""

    streams: tuple[str, ...]
    engine: str
    engines: int

    @property
    def pool(self) -> str:
        """Resource name of the group's engines in the op graph, e.g. ``cdma/tp`` or ``cdma/tp+dp``."""
        return f"{self.engine}/{'+'.join(self.streams)}"

    def __str__(self) -> str:
        return f"{'+'.join(self.streams)}:{self.engine}*{self.engines}"


@dataclass(frozen=True)
class Assignment:
    """The engines of every stream of a plan: disjoint :class:`Group` s in stream order."""

    groups: tuple[Group, ...]

    def __post_init__(self):
        object.__setattr__(self, "groups", _canonical(self.groups))

    @property
    def streams(self) -> tuple[str, ...]:
        return tuple(s for s in STREAMS if self.group_of(s) is not None)

    def group_of(self, stream: str) -> Group | None:
        by_stream = self.__dict__.get("_by_stream")
        if by_stream is None:  # each stream's (first) group, built on first use; not a field (no part of eq/hash)
            by_stream = {}
            for g in self.groups:
                for s in g.streams:
                    by_stream.setdefault(s, g)
            object.__setattr__(self, "_by_stream", by_stream)
        return by_stream.get(stream)

    def __str__(self) -> str:
        return ",".join(str(g) for g in self.groups)

    def to_dict(self) -> dict:
        """``{stream: {"engine", "engines", "pool"}}`` (streams with the same pool share its engines).

        >>> parse("tp:cdma*3,dp:cdma*1").to_dict()["tp"]
        {'engine': 'cdma', 'engines': 3, 'pool': 'cdma/tp'}
        """
        return {
            s: {"engine": g.engine, "engines": g.engines, "pool": g.pool}
            for s in self.streams
            for g in (self.group_of(s),)
        }


def _canonical(groups) -> tuple[Group, ...]:
    gs = [Group(tuple(sorted(g.streams, key=STREAMS.index)), g.engine, g.engines) for g in groups]
    return tuple(sorted(gs, key=lambda g: STREAMS.index(g.streams[0])))


# --------------------------------------------------------------------------- parse / format
def parse(value) -> Assignment:
    """An :class:`Assignment` from its compact text (``str(a)``), from :meth:`Assignment.to_dict`,
    or from ``{stream: "class*engines"}``; raises :class:`SpecError` (field ``dma``) on bad syntax.
    Whether it suits a plan is :func:`check`'s job."""
    if isinstance(value, Assignment):
        return value
    if isinstance(value, str):
        return Assignment(
            tuple(_parse_group(part.strip(), value) for part in value.split(",") if part.strip())
            or _fail(value, "at least one stream")
        )
    if isinstance(value, dict):
        pools: dict = {}
        for stream, v in value.items():
            if isinstance(v, str):
                engine, engines = _parse_engines(v, value)
                pool = f"{engine}/{stream}"
            elif isinstance(v, dict) and set(v) <= {"engine", "engines", "pool"} and {"engine", "engines"} <= set(v):
                engine, engines = v["engine"], v["engines"]
                pool = v.get("pool") or f"{engine}/{stream}"
            else:
                _fail(value, "{stream: 'class*engines'} or {stream: {'engine', 'engines', 'pool'}}")
            prev = pools.setdefault(pool, (engine, engines, []))
            if prev[:2] != (engine, engines):
                _fail(value, f"the same engine class and count for every stream of pool {pool!r}")
            prev[2].append(_stream(stream, value))
        return Assignment(tuple(Group(tuple(ss), e, _count(n, value)) for e, n, ss in pools.values()))
    return _fail(value, FORMAT)


def _fail(value, allowed: str):
    raise SpecError("dma", value, allowed)


def _stream(name, value) -> str:
    if name not in STREAMS:
        _fail(value, f"streams among {', '.join(STREAMS)} (got {name!r})")
    return name


def _count(n, value) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        _fail(value, f"an engine count >= 1 per group (got {n!r})")
    return n


def _parse_engines(text: str, value) -> tuple[str, int]:
    engine, star, n = text.strip().partition("*")
    if not engine or not star or not n.strip().isdigit():
        _fail(value, FORMAT)
    if len(n.strip()) > 18:  # int() refused 4,300 digits and more as a ValueError
        _fail(value, "an engine count >= 1 per group (no device has 10**18 engines)")
    return engine.strip(), _count(int(n), value)


def _parse_group(part: str, value) -> Group:
    streams, colon, rest = part.partition(":")
    if not colon:
        _fail(value, FORMAT)
    names = tuple(_stream(s.strip(), value) for s in streams.split("+"))
    return Group(names, *_parse_engines(rest, value))
