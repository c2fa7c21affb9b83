"""``OUTPUT/log.jsonl``: one JSON record a line (start, train, eval,
checkpoint, stopped, end), written by rank 0; the learning curve and the
model card are drawn from it."""
import json
import logging
import os
import time
from pathlib import Path
from typing import Any, Dict, List

from .errors import PretrainError

logger = logging.getLogger(__name__)


def read_log(path: Path) -> List[Dict[str, Any]]:
    """The records of a ``log.jsonl``; a file that is not one (binary, not
    UTF-8, a line that is not a JSON object) is a PretrainError naming the
    file and the line."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise PretrainError(f"{path} is damaged or not a run log: not UTF-8 text (byte {err.start})") from None
    records = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if not isinstance(record, dict):
            raise PretrainError(
                f"{path}, line {number}: not a JSON record: the log is damaged. Remove or repair that line "
                "(each line of log.jsonl is one JSON object)"
            )
        records.append(record)
    return records


class RunLog:
    """Appends records to ``log.jsonl`` (a no-op on ranks other than 0)."""

    def __init__(self, path: Path, enabled: bool) -> None:
        self.path = path
        self.enabled = enabled

    def write(self, **record: Any) -> None:
        if not self.enabled:
            return
        record = {"time": time.time(), **record}
        try:
            with open(self.path, "a", encoding="utf-8") as fout:
                fout.write(json.dumps(record) + "\n")
        except OSError as err:
            raise PretrainError(
                f"cannot write the log {self.path} ({err.strerror or err}); free disk space and continue "
                "with --resume (the last checkpoint is intact)"
            ) from err

    def rollback(self, step: int) -> int:
        """On resume from the checkpoint of ``step``: drop the records of
        later steps (written after that checkpoint, by the run that went on
        and was lost), so that the log and the learning curve show each
        step once. Lines that are not a JSON record (the last one, cut off
        by a kill in mid-write; or anything else damaged) are moved to
        ``log.jsonl.damaged`` beside it, kept for inspection but out of the
        way of :func:`read_log` and ``plot``. Returns how many records were
        dropped (both counts are logged)."""
        if not self.enabled or not self.path.exists():
            return 0
        lines = self.path.read_bytes().splitlines(keepends=True)
        kept, damaged, dropped = [], [], 0
        for line in lines:
            try:
                record = json.loads(line)
            except ValueError:  # not JSON, or not UTF-8
                record = None
            if not isinstance(record, dict):
                if line.strip():
                    damaged.append(line if line.endswith(b"\n") else line + b"\n")
                continue
            try:
                later = int(record.get("step", 0)) > step
            except (ValueError, TypeError):
                later = False  # a record without a step number is not ours to judge: keep it
            if later:
                dropped += 1
            else:
                kept.append(line if line.endswith(b"\n") else line + b"\n")
        if damaged:
            quarantine = self.path.with_name(self.path.name + ".damaged")
            with open(quarantine, "ab") as fout:
                fout.writelines(damaged)
            logger.warning("log.jsonl: moved %d damaged lines to %s", len(damaged), quarantine)
        if dropped or damaged or kept != lines:
            tmp = self.path.with_name(self.path.name + ".tmp")
            tmp.write_bytes(b"".join(kept))
            os.replace(tmp, self.path)
        if dropped:
            logger.warning("log.jsonl: dropped %d records after step %d (rolled back by the resume)", dropped, step)
        return dropped
