"""Writing samples: JSONL (one `Sample.to_dict()` per line) or Parquet (pyarrow)."""

from __future__ import annotations

import importlib
import itertools
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import IO, Any, Literal

import orjson

from ._sample import Sample

__all__ = ["ExportCounts", "Format", "write_samples"]

Format = Literal["jsonl", "parquet"]
ROW_GROUP = 256  # samples per Parquet row group: held at once (~5 MB), flat however many
# Parquet keeps message lists as JSON text: their shapes differ by API and by message.
_JSON_COLUMNS = ("prompt", "completion", "tools")


@dataclass(slots=True)
class ExportCounts:
    """What `write_samples` wrote: samples, distinct rollouts, samples with token ids."""

    samples: int = 0
    rollouts: int = 0
    with_tokens: int = 0

    def add(self, sample: Sample, last_rollout: str | None) -> None:
        self.samples += 1
        self.rollouts += sample.rollout_id != last_rollout
        self.with_tokens += sample.completion_token_ids is not None


def write_samples(
    samples: Iterable[Sample], out: str | os.PathLike[str] | IO[bytes], format: Format = "jsonl"
) -> ExportCounts:
    """Write `samples` to `out` (a path, or a binary file) as JSONL or Parquet.

    Streams: at most one Parquet row group (`ROW_GROUP` samples) is held at a time.
    Parquet needs pyarrow (`pip install 'proctor[parquet]'`); its schema is in
    docs/samples.md.

    Raises:
        ImportError: Parquet without pyarrow (the message names the extra).
        ValueError: an unknown format.
    """
    counts = ExportCounts()
    counted = _counting(samples, counts)
    if format == "jsonl":
        _jsonl(counted, out)
    elif format == "parquet":
        _parquet(counted, out)
    else:
        raise ValueError(f"unknown format {format!r}: use jsonl or parquet")
    return counts


def _counting(samples: Iterable[Sample], counts: ExportCounts) -> Iterator[Sample]:
    last: str | None = None
    for sample in samples:
        counts.add(sample, last)
        last = sample.rollout_id
        yield sample


def _jsonl(samples: Iterator[Sample], out: str | os.PathLike[str] | IO[bytes]) -> None:
    if isinstance(out, str | os.PathLike):
        with open(out, "wb") as f:
            _jsonl(samples, f)
        return
    for sample in samples:
        out.write(orjson.dumps(sample.to_dict()) + b"\n")
    out.flush()


def parquet_schema() -> Any:
    """The Parquet export's columns, a `pyarrow.Schema` (docs/samples.md)."""
    pa = _pyarrow()
    ids = pa.list_(pa.int32())
    return pa.schema(
        [
            ("rollout_id", pa.string()),
            ("branch", pa.int32()),
            ("turns", ids),
            ("task", pa.string()),
            ("model", pa.string()),
            ("group_id", pa.string()),
            ("reward", pa.float64()),
            ("advantage", pa.float64()),
            ("prompt", pa.string()),
            ("completion", pa.string()),
            ("tools", pa.string()),
            ("prompt_token_ids", ids),
            ("completion_token_ids", ids),
            ("completion_logprobs", pa.list_(pa.float32())),
            ("completion_mask", pa.list_(pa.int8())),
        ]
    )


def _parquet(samples: Iterator[Sample], out: str | os.PathLike[str] | IO[bytes]) -> None:
    pa = _pyarrow()
    pq = importlib.import_module("pyarrow.parquet")
    schema = parquet_schema()
    where = os.fspath(out) if isinstance(out, str | os.PathLike) else out
    with pq.ParquetWriter(where, schema) as writer:
        while chunk := list(itertools.islice(samples, ROW_GROUP)):
            rows = [_row(s) for s in chunk]
            writer.write_table(pa.Table.from_pylist(rows, schema=schema))


def _row(sample: Sample) -> dict[str, Any]:
    row = sample.to_dict()
    for key in _JSON_COLUMNS:
        if row[key] is not None:
            row[key] = orjson.dumps(row[key]).decode()
    return row


def _pyarrow() -> Any:
    try:
        return importlib.import_module("pyarrow")
    except ImportError:
        raise ImportError("Parquet export needs pyarrow: pip install 'proctor[parquet]'") from None
